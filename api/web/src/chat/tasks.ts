// The task checklist (an agent's `tasks-update`, and a plan under review).

import { h } from '../dom';
import { icon } from '../icons';
import type { TaskItem } from '../reducer';

const LABEL: Record<string, string> = { todo: 'to do', in_progress: 'in progress', done: 'done', failed: 'failed', cancelled: 'cancelled' };

export function renderTasks(tasks: TaskItem[]): HTMLElement {
  return h(
    'ul',
    { class: 'tasks', 'aria-label': 'Tasks' },
    ...tasks.map((x) =>
      h(
        'li',
        { 'data-status': x.status, 'data-task-id': x.id },
        icon(x.status, 'task-icon'),
        ` ${x.description} `,
        h('span', { class: 'task-status' }, `(${LABEL[x.status] ?? x.status})`),
      ),
    ),
  );
}
