// A `plan` call shown as what it changed in the checklist (the checklist itself is drawn at the
// top of the agent): "Planned 3 tasks", "Started *Fetch the forecast*", "Finished …".

import { h } from '../dom';
import { icon } from '../icons';
import type { TaskItem } from '../reducer';

export interface TaskChange {
  kind: 'added' | 'removed' | 'status';
  task: TaskItem;
  from?: string;
}

export function planChanges(before: TaskItem[] | undefined, after: TaskItem[]): TaskChange[] {
  const old = new Map((before ?? []).map((t) => [t.id, t]));
  const changes: TaskChange[] = [];
  for (const t of after) {
    const prev = old.get(t.id);
    if (!prev) changes.push({ kind: 'added', task: t });
    else if (prev.status !== t.status) changes.push({ kind: 'status', task: t, from: prev.status });
    old.delete(t.id);
  }
  for (const t of old.values()) changes.push({ kind: 'removed', task: t });
  return changes;
}

const VERB: Record<string, string> = {
  in_progress: 'Started',
  done: 'Finished',
  failed: 'Failed',
  cancelled: 'Cancelled',
  todo: 'Reopened',
};

function describe(c: TaskChange): (string | Node)[] {
  const name = h('em', {}, c.task.description);
  if (c.kind === 'added') return ['Added ', name];
  if (c.kind === 'removed') return ['Removed ', name];
  return [`${VERB[c.task.status] ?? `Marked ${c.task.status}:`} `, name];
}

/** The line (and, for several changes, the list) a plan call stands for. */
export function renderPlanChange(before: TaskItem[] | undefined, after: TaskItem[]): HTMLElement {
  const changes = planChanges(before, after);
  const el = h('div', { class: 'plan-change' });
  const first = !before;
  const headline = first
    ? `Planned ${after.length} task${after.length === 1 ? '' : 's'}`
    : changes.length === 0
      ? 'Checklist unchanged'
      : changes.length === 1
        ? null
        : `Updated the checklist (${changes.length} changes)`;
  if (headline !== null) el.append(h('span', { class: 'tool-sentence' }, headline));
  else el.append(h('span', { class: 'tool-sentence' }, ...describe(changes[0])));
  if (!first && changes.length > 1) {
    el.append(
      h(
        'ul',
        { class: 'plan-changes' },
        ...changes.map((c) => h('li', { 'data-change': c.kind, 'data-status': c.task.status }, icon(c.kind === 'status' ? c.task.status : c.kind === 'added' ? 'todo' : 'cancelled'), ' ', ...describe(c))),
      ),
    );
  }
  return el;
}
