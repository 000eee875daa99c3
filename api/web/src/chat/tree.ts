// The agent tree of one run as a person reads it: text, one line per tool call (details folded
// away), plan calls as checklist changes, sub-agents folded to one line once done, errors and
// denials marked.

import { Child, h, markdown, pretty, short } from '../dom';
import { enc } from '../api';
import { icon } from '../icons';
import type { Agent, TaskItem, ToolCall } from '../reducer';
import { confirmationCard } from './cards';
import { renderPlanChange } from './plan-diff';
import type { OpenThread, RunMessage } from './state';
import { renderTasks } from './tasks';
import { toolSentence } from './tool-summary';

const STATUS_TEXT: Record<string, string> = { active: 'Running…', completed: 'Completed', cancelled: 'Cancelled', error: 'Failed' };

export function renderRun(t: OpenThread, m: RunMessage): void {
  const s = m.state;
  const footer = h('footer', { class: 'run-footer' });
  const status = h('span', { class: `run-status ${s.status}`, 'data-status': s.status });
  if (s.status === 'error') status.append(icon('error'), ' ');
  status.append(STATUS_TEXT[s.status] ?? s.status);
  footer.append(status);
  if (s.status === 'error' && s.finishReason) footer.append(h('span', { class: 'run-reason' }, `: ${s.finishReason}`));
  if (s.status !== 'active') {
    footer.append(' · ', h('a', { href: `#/t/${enc(t.id)}/audit?run=${enc(m.runId)}`, class: 'timeline-link' }, 'Timeline'));
  }
  m.el.setAttribute('data-status', s.status);
  m.el.replaceChildren(renderAgent(t, m, s.root(), true), footer);
}

/** A `<details>` whose open state, once the user toggles it, survives re-rendering. Only the
 * user's clicks are remembered: the default may change (a sub-agent folds when it is done). */
function collapsible(t: OpenThread, key: string, defaultOpen: boolean, cls: string, summary: Child[], body: Child[]): HTMLElement {
  const d = h('details', { class: cls, open: t.open.get(key) ?? defaultOpen });
  const sum = h('summary', {}, ...summary);
  sum.addEventListener('click', () => t.open.set(key, !d.open));
  d.append(sum, ...body.filter((c): c is Node | string => !!c));
  return d;
}

function renderAgent(t: OpenThread, m: RunMessage, a: Agent, isRoot: boolean): HTMLElement {
  const s = m.state;
  const node = h('div', { class: `agent ${a.status}`, 'data-agent-id': a.agentId, 'data-status': a.status });
  if (isRoot) node.append(h('div', { class: 'agent-head' }, icon('agent'), ' Orchestrator'));
  if (a.statusMessage && a.status === 'active') {
    node.append(h('div', { class: 'status-line', role: 'status' }, h('span', { class: 'spinner', 'aria-hidden': 'true' }), a.statusMessage));
  }
  if (a.tasks?.tasks?.length) node.append(renderTasks(a.tasks.tasks));
  if (a.reasoning) {
    node.append(collapsible(t, `r:${m.runId}:${a.agentId}`, false, 'reasoning', [icon('reasoning'), ' Reasoning'], [h('div', { class: 'reasoning-text' }, a.reasoning)]));
  }
  let plan: TaskItem[] | undefined;
  for (const entry of a.timeline) {
    if (entry.type === 'text') {
      node.append(markdown(entry.content, 'md text'));
    } else if (entry.type === 'tool-call') {
      const tc = s.toolCalls.get(entry.toolCallId);
      if (!tc) continue;
      node.append(renderToolCall(t, m, tc, plan));
      if (tc.toolName === 'plan' && tc.error === undefined && Array.isArray(tc.args.tasks)) plan = tc.args.tasks as TaskItem[];
    } else {
      const child = s.agents.get(entry.agentId);
      if (child) node.append(renderSubAgent(t, m, child));
    }
  }
  return node;
}

function renderSubAgent(t: OpenThread, m: RunMessage, a: Agent): HTMLElement {
  const active = a.status === 'active';
  const outcome = active ? 'working…' : a.status === 'completed' ? 'done' : a.status === 'error' ? `failed: ${a.error ?? ''}` : a.status;
  const calls = a.toolCallIds.length;
  const body: Child[] = [renderAgent(t, m, a, false)];
  if (!active && a.result) body.push(h('div', { class: 'agent-result' }, icon('check'), ' ', short(a.result, 300)));
  const d = collapsible(
    t,
    `a:${m.runId}:${a.agentId}`,
    active,
    `subagent ${a.status}`,
    [
      icon(a.status === 'error' ? 'error' : 'agent'),
      ' ',
      h('span', { class: 'role' }, a.role),
      ' — ',
      h('span', { class: 'outcome' }, outcome),
      calls ? h('span', { class: 'subagent-count' }, ` · ${calls} tool call${calls === 1 ? '' : 's'}`) : null,
      active ? h('span', { class: 'spinner', role: 'img', 'aria-label': 'working' }) : null,
    ],
    body,
  );
  d.setAttribute('data-agent-id', a.agentId);
  return d;
}

type CallState = 'loading' | 'done' | 'error' | 'stopped';

function callState(tc: ToolCall): CallState {
  return tc.isLoading ? 'loading' : tc.error !== undefined ? 'error' : tc.result !== undefined ? 'done' : 'stopped';
}

function renderToolCall(t: OpenThread, m: RunMessage, tc: ToolCall, planBefore: TaskItem[] | undefined): HTMLElement {
  const state = callState(tc);
  const isPlan = tc.toolName === 'plan' && Array.isArray(tc.args.tasks);
  const el = h('div', { class: `tool ${state}${isPlan ? ' plan' : ''}`, 'data-tool-call-id': tc.toolCallId, 'data-tool-name': tc.toolName, 'data-state': state });
  const mark = state === 'loading' ? h('span', { class: 'spinner', role: 'img', 'aria-label': 'running' }) : state === 'error' ? icon('error', 'mark') : state === 'stopped' ? icon('cancelled', 'mark') : null;
  if (isPlan) {
    el.append(h('div', { class: 'tool-line' }, icon('plan'), ' ', renderPlanChange(planBefore, tc.args.tasks as TaskItem[]), mark));
  } else {
    const details: Child[] = [h('div', { class: 'tool-detail-label' }, 'Arguments'), h('pre', { class: 'tool-args' }, pretty(tc.args))];
    if (state === 'done') details.push(h('div', { class: 'tool-detail-label' }, 'Result'), h('pre', { class: 'tool-result' }, pretty(tc.result)));
    el.append(
      collapsible(t, `tc:${m.runId}:${tc.toolCallId}`, false, 'tool-line', [icon('tool'), ' ', toolSentence(tc, state), mark, h('span', { class: 'tool-name' }, tc.toolName)], details),
    );
  }
  if (state === 'error') el.append(h('div', { class: 'tool-error', role: 'note' }, h('strong', {}, 'Error: '), tc.error ?? ''));
  if (tc.confirmation) el.append(confirmationCard(t, tc, tc.confirmation));
  return el;
}
