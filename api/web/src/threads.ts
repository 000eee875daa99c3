// The thread list in the sidebar: open, new, rename, delete.

import { api, enc } from './api';
import { clearBanner, failure, showBanner } from './banner';
import { $, h } from './dom';
import { icon } from './icons';

let titles = new Map<string, string>();
let currentId: () => string | undefined = () => undefined;
let renamed: (id: string, title: string) => void = () => {};

export function threadTitle(id: string): string | undefined {
  return titles.get(id);
}

export function setUpThreadList(current: () => string | undefined, onRename: (id: string, title: string) => void): void {
  currentId = current;
  renamed = onRename;
  $('new-thread').addEventListener('click', async () => {
    try {
      const t = await api('POST', '/instance-ai/threads', {});
      clearBanner();
      await refreshThreads();
      location.hash = `#/t/${enc(t.id)}`;
    } catch (e) {
      showBanner(`Could not create a thread: ${failure(e)}`);
    }
  });
  $('menu-toggle').addEventListener('click', () => {
    const open = document.body.classList.toggle('menu-open');
    $('menu-toggle').setAttribute('aria-expanded', String(open));
  });
}

export async function refreshThreads(): Promise<void> {
  let threads: any[];
  try {
    threads = (await api('GET', '/instance-ai/threads')).threads ?? [];
  } catch (e) {
    showBanner(`Could not load threads: ${failure(e)}`);
    return;
  }
  const list = $('thread-list');
  list.replaceChildren();
  titles = new Map();
  for (const t of threads) {
    if (t.deleted) continue;
    const title = t.title || t.id;
    titles.set(t.id, title);
    const isCurrent = currentId() === t.id;
    const li = h('li', { 'data-thread-id': t.id, class: isCurrent ? 'current' : undefined });
    const link = h('a', { href: `#/t/${enc(t.id)}`, 'aria-current': isCurrent ? 'page' : undefined }, title);
    const rename = h('button', { type: 'button', class: 'icon', 'aria-label': `Rename ${title}`, title: 'Rename' }, icon('edit'));
    const del = h('button', { type: 'button', class: 'icon', 'aria-label': `Delete ${title}`, title: 'Delete' }, icon('trash'));
    rename.addEventListener('click', () => startRename(li, t.id, title));
    del.addEventListener('click', () => deleteThread(t.id, title));
    li.append(link, rename, del);
    list.append(li);
  }
}

function startRename(li: HTMLElement, id: string, title: string): void {
  const input = h('input', { type: 'text', value: title, 'aria-label': 'New title', maxlength: '200' });
  const form = h('form', { class: 'rename' }, input, h('button', { type: 'submit' }, 'Save'));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try {
      await api('PATCH', `/instance-ai/threads/${enc(id)}`, { title: input.value });
      clearBanner();
      renamed(id, input.value);
    } catch (e) {
      showBanner(`Could not rename: ${failure(e)}`);
    }
    await refreshThreads();
  });
  input.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape') void refreshThreads();
  });
  li.replaceChildren(form);
  input.focus();
  input.select();
}

async function deleteThread(id: string, title: string): Promise<void> {
  if (!window.confirm(`Delete the thread "${title}"?`)) return;
  try {
    await api('DELETE', `/instance-ai/threads/${enc(id)}`);
    clearBanner();
    if (currentId() === id) location.hash = '#/';
  } catch (e) {
    showBanner(`Could not delete: ${failure(e)}`);
  }
  await refreshThreads();
}
