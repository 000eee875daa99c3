// Each tool call as one line in words ("Listed 2 workflows", "Created workflow *Weather to
// Slack*"), read off its name, arguments and result. Unknown tools still get a plain line.

import { h } from '../dom';
import type { ToolCall } from '../reducer';

type Piece = string | { em: string };

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

function str(v: unknown): string | undefined {
  return typeof v === 'string' && v.trim() ? v : typeof v === 'number' ? String(v) : undefined;
}

/** The workflow a call is about: its name when the result names it, else the id it was given. */
function workflowOf(tc: ToolCall): string {
  const r = (tc.result ?? {}) as any;
  return str(r?.name) ?? str(r?.workflow?.name) ?? str(tc.args.workflowId) ?? 'a workflow';
}

/** [while running, when done] as pieces of a sentence. */
function phrases(tc: ToolCall): [Piece[], Piece[]] {
  const a = tc.args as Record<string, any>;
  const r = (tc.result ?? {}) as any;
  switch (tc.toolName) {
    case 'list-workflows': {
      const n = Array.isArray(r?.workflows) ? r.workflows.length : Number(r?.total ?? 0);
      return [['Listing workflows'], [`Listed ${plural(n, 'workflow')}`]];
    }
    case 'get-workflow':
      return [['Reading workflow ', { em: str(a.workflowId) ?? '' }], ['Read workflow ', { em: workflowOf(tc) }]];
    case 'create-workflow': {
      const nodes = Array.isArray(a.nodes) && a.nodes.length ? ` with ${plural(a.nodes.length, 'node')}` : '';
      const name = str(a.name) ?? str(r?.name) ?? '';
      return [['Creating workflow ', { em: name }], ['Created workflow ', { em: name }, nodes]];
    }
    case 'delete-workflow':
      return [['Deleting workflow ', { em: str(a.workflowId) ?? '' }], ['Deleted workflow ', { em: str(r?.name) ?? str(a.workflowId) ?? '' }]];
    case 'add-node':
      return [['Adding node ', { em: str(a.name) ?? '' }], ['Added node ', { em: str(a.name) ?? '' }, ' to ', { em: workflowOf(tc) }]];
    case 'update-node':
      return [['Updating node ', { em: str(a.node) ?? '' }], ['Updated node ', { em: str(a.node) ?? '' }, ' in ', { em: workflowOf(tc) }]];
    case 'remove-node':
      return [['Removing node ', { em: str(a.node) ?? '' }], ['Removed node ', { em: str(a.node) ?? '' }, ' from ', { em: workflowOf(tc) }]];
    case 'connect-nodes':
      return [
        ['Connecting ', { em: str(a.from) ?? '' }, ' to ', { em: str(a.to) ?? '' }],
        ['Connected ', { em: str(a.from) ?? '' }, ' to ', { em: str(a.to) ?? '' }, ' in ', { em: workflowOf(tc) }],
      ];
    case 'validate-workflow': {
      const issues = Array.isArray(r?.issues) ? r.issues.length : 0;
      return [
        ['Checking workflow ', { em: str(a.workflowId) ?? '' }],
        ['Checked workflow ', { em: str(a.workflowId) ?? '' }, r?.valid ? ': no issues' : `: ${plural(issues, 'issue')}`],
      ];
    }
    case 'fetch-url':
      return [['Fetching ', { em: str(a.url) ?? '' }], ['Fetched ', { em: str(r?.url) ?? str(a.url) ?? '' }, r?.status ? ` (HTTP ${r.status})` : '']];
    case 'delegate':
      return a.background
        ? [['Starting a background ', { em: str(a.role) ?? 'sub-agent' }], ['Started a background ', { em: str(a.role) ?? 'sub-agent' }]]
        : [['Delegating to a ', { em: str(a.role) ?? 'sub-agent' }], ['Delegated to a ', { em: str(a.role) ?? 'sub-agent' }]];
    case 'ask-user': {
      const qs = Array.isArray(a.questions) ? a.questions.length : 0;
      return qs
        ? [[`Asking you ${plural(qs, 'question')}`], [`Asked you ${plural(qs, 'question')}`]]
        : [['Asking you: ', { em: str(a.question) ?? '' }], ['Asked you: ', { em: str(a.question) ?? '' }]];
    }
    default:
      return [['Calling ', { em: tc.toolName }], ['Called ', { em: tc.toolName }]];
  }
}

/** The call's line: what it is doing, did, or failed to do. */
export function toolSentence(tc: ToolCall, state: 'loading' | 'done' | 'error' | 'stopped'): HTMLElement {
  const [doing, did] = phrases(tc);
  const denied = state === 'error' && /denied|declined|rejected/i.test(tc.error ?? '');
  const pieces: Piece[] =
    state === 'done'
      ? did
      : state === 'loading'
        ? [...doing, '…']
        : [denied ? 'Denied: ' : state === 'error' ? 'Failed: ' : 'Stopped: ', ...doing.map(lower)];
  return h('span', { class: 'tool-sentence' }, ...pieces.map((p) => (typeof p === 'string' ? p : h('em', {}, p.em))));
}

function lower(p: Piece, i: number): Piece {
  return i === 0 && typeof p === 'string' ? p.charAt(0).toLowerCase() + p.slice(1) : p;
}
