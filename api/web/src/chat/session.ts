// The open thread: session restore and live events. Opening a thread =
// GET …/messages (snapshot + nextEventId) → GET …/status → SSE from nextEventId - 1 (n8n's
// session restore); later events fold into the same reducer and re-render at most once a frame.

import { api, enc } from '../api';
import { clearBanner, failure, showBanner } from '../banner';
import { $, h, markdown } from '../dom';
import { icon } from '../icons';
import { RunState, WireEvent } from '../reducer';
import { refreshThreads, threadTitle } from '../threads';
import { followFromHere, keepBottom } from './follow';
import type { OpenThread, RunMessage, UserMessage } from './state';
import { renderRun } from './tree';

let current: OpenThread | null = null;
let onLiveChange: () => void = () => {};

export function currentThread(): OpenThread | null {
  return current;
}

/** Called whenever the open thread's run starts or ends (the composer enables itself). */
export function setLiveChangeHandler(f: () => void): void {
  onLiveChange = f;
}

export function closeThread(): void {
  if (current) {
    current.source?.close();
    window.clearTimeout(current.reconnectTimer);
    if (current.frame) cancelAnimationFrame(current.frame);
    current = null;
  }
  // The composer sends to the current thread: while the next one loads there is none, and a
  // message typed then was dropped without a word (the browser test's sends right after a new
  // thread lost theirs under load). Disabled until `openThread` has the thread.
  onLiveChange();
}

export function setTitle(title: string): void {
  $('thread-title').textContent = title;
  document.title = `${title} · threadstream`;
}

/** Where a link from the audit view points: a run, and in it a tool call or an agent. */
export interface Focus {
  runId: string;
  toolCallId?: string;
  agentId?: string;
}

export async function openThread(id: string, isCurrent: () => boolean, focus?: Focus): Promise<void> {
  $('messages').replaceChildren();
  setTitle(threadTitle(id) ?? id);
  $<HTMLAnchorElement>('thread-audit').href = `#/t/${enc(id)}/audit`;
  let snapshot: any;
  let status: any;
  try {
    snapshot = await api('GET', `/instance-ai/threads/${enc(id)}/messages`);
    if (!isCurrent()) return;
    status = await api('GET', `/instance-ai/threads/${enc(id)}/status`);
    if (!isCurrent()) return;
  } catch (e) {
    showBanner(`Could not open the thread: ${failure(e)}`);
    return;
  }
  clearBanner();
  const t: OpenThread = {
    id,
    title: threadTitle(id) ?? id,
    messages: [],
    runs: new Map(),
    messageIds: new Map(),
    cursor: Number(snapshot.nextEventId) - 1,
    live: !!(status.hasActiveRun || status.isSuspended),
    liveRunId: status.runId,
    cards: new Map(),
    answers: new Map(),
    open: new Map(),
    dirty: new Set(),
    rerender: () => {
      for (const m of t.runs.values()) schedule(t, m);
    },
  };
  current = t;
  for (const m of snapshot.messages ?? []) {
    if (m.role === 'user') addUserMessage(t, m.content ?? '', m.runId, m.id);
    else if (m.agentTree && m.runId) addRunMessage(t, m.runId, RunState.fromTree(m.agentTree));
  }
  showBackgroundTasks(status.backgroundTasks ?? []);
  onLiveChange();
  connect(t);
  if (focus) showFocus(t, focus);
  else followFromHere();
}

/** Scrolls to what an audit row points at, unfolding it, and marks it for a moment. */
function showFocus(t: OpenThread, f: Focus): void {
  const run = t.runs.get(f.runId);
  if (!run) {
    showBanner(`Run ${f.runId} is not in this thread's conversation.`);
    return;
  }
  for (const key of t.open.keys()) t.open.delete(key);
  let target: HTMLElement = run.el;
  if (f.toolCallId || f.agentId) {
    // Unfold the sub-agents on the way, so the target is visible.
    for (const a of run.state.agents.values()) t.open.set(`a:${f.runId}:${a.agentId}`, true);
    renderRun(t, run);
    const sel = f.toolCallId ? `[data-tool-call-id="${CSS.escape(f.toolCallId)}"]` : `[data-agent-id="${CSS.escape(f.agentId!)}"]`;
    target = run.el.querySelector<HTMLElement>(sel) ?? run.el;
  }
  target.classList.add('focused');
  target.setAttribute('tabindex', '-1');
  target.scrollIntoView({ block: 'center' });
  target.focus({ preventScroll: true });
}

function showBackgroundTasks(tasks: any[]): void {
  const running = tasks.filter((x) => x.status === 'running');
  $('bg-tasks').textContent = running.length ? `Background: ${running.map((x) => `${x.role} (running)`).join(', ')}` : '';
}

function connect(t: OpenThread): void {
  // The query names the snapshot's cursor; when the browser reconnects on its own it adds
  // `Last-Event-ID` (the last id it received), which the server prefers over the query.
  const es = new EventSource(`/instance-ai/events/${enc(t.id)}?lastEventId=${t.cursor}`);
  t.source = es;
  es.onopen = () => {
    $('conn').textContent = 'Live';
    $('conn').className = 'ok';
  };
  es.onmessage = (msg) => {
    if (current !== t) return;
    const id = Number(msg.lastEventId);
    if (Number.isFinite(id) && id > 0) t.cursor = id;
    let e: WireEvent;
    try {
      e = JSON.parse(msg.data);
    } catch {
      return;
    }
    applyEvent(t, e);
  };
  es.onerror = () => {
    if (current !== t) return;
    $('conn').textContent = 'Reconnecting…';
    $('conn').className = 'warn';
    if (es.readyState !== EventSource.CLOSED) return; // the browser retries with Last-Event-ID
    // The server refused the stream (e.g. 401): ask status (which reports a 401 to the login
    // form) and reconnect ourselves from the per-thread cursor.
    t.reconnectTimer = window.setTimeout(async () => {
      if (current !== t) return;
      try {
        await api('GET', `/instance-ai/threads/${enc(t.id)}/status`);
      } catch {
        // shown by the banner or the login form; retry anyway
      }
      if (current === t) connect(t);
    }, 2000);
  };
}

function applyEvent(t: OpenThread, e: WireEvent): void {
  if (e.type === 'thread-title-updated') {
    const title = String(e.payload?.title ?? '');
    if (title) {
      t.title = title;
      setTitle(title);
      void refreshThreads();
    }
  }
  if (!e.runId) return;
  let m = t.runs.get(e.runId);
  if (!m) m = addRunMessage(t, e.runId, new RunState(e.agentId));
  m.state.reduce(e);
  if (e.type === 'run-start' && e.payload?.messageId) t.messageIds.set(e.runId, String(e.payload.messageId));
  if (e.type === 'run-start') {
    t.live = true;
    t.liveRunId = e.runId;
    onLiveChange();
  } else if (e.type === 'run-finish' && (t.liveRunId === e.runId || !t.liveRunId)) {
    t.live = false;
    t.liveRunId = undefined;
    onLiveChange();
    void refreshStatus(t);
  } else if (e.type === 'agent-spawned' || e.type === 'agent-completed') {
    void refreshStatus(t);
  }
  schedule(t, m);
}

async function refreshStatus(t: OpenThread): Promise<void> {
  try {
    const s = await api('GET', `/instance-ai/threads/${enc(t.id)}/status`);
    if (current === t) showBackgroundTasks(s.backgroundTasks ?? []);
  } catch {
    // Only the background-task line depends on it.
  }
}

export function addUserMessage(t: OpenThread, text: string, runId?: string, messageId?: string): void {
  const el = h('article', { class: 'msg user', 'aria-label': 'You' });
  const m: UserMessage = { kind: 'user', text, runId, messageId, el };
  showUserMessage(t, m);
  // The run's first events may arrive before the POST answers: the user's message goes
  // before its run.
  const run = runId ? t.runs.get(runId) : undefined;
  if (run) {
    $('messages').insertBefore(el, run.el);
    t.messages.splice(t.messages.indexOf(run), 0, m);
  } else {
    $('messages').append(el);
    t.messages.push(m);
  }
}

function showUserMessage(t: OpenThread, m: UserMessage): void {
  const edit = h('button', { type: 'button', class: 'icon edit', 'aria-label': 'Edit and resend', title: 'Edit and resend' }, icon('edit'));
  edit.addEventListener('click', () => editMessage(t, m));
  m.el.replaceChildren(markdown(m.text), h('div', { class: 'msg-actions' }, edit));
}

/** "Edit and resend": the edited text goes to a fork of the thread made just before this
 * message (the original thread stays as it is), and the page shows the fork. */
function editMessage(t: OpenThread, m: UserMessage): void {
  const input = h('textarea', { 'aria-label': 'Edited message', rows: '3' }) as HTMLTextAreaElement;
  input.value = m.text;
  const cancel = h('button', { type: 'button' }, 'Cancel');
  const form = h('form', { class: 'edit-message' }, input, h('div', { class: 'msg-actions' }, cancel, h('button', { type: 'submit', class: 'primary' }, 'Send as a new thread')));
  cancel.addEventListener('click', () => showUserMessage(t, m));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const text = input.value.trim();
    const messageId = m.messageId ?? (m.runId ? t.messageIds.get(m.runId) : undefined);
    if (!text) return;
    if (!messageId) {
      showBanner('This message is not stored yet; try again in a moment.');
      return;
    }
    try {
      const fork = await api('POST', `/instance-ai/threads/${enc(t.id)}/fork`, { beforeMessageId: messageId });
      await api('POST', `/instance-ai/chat/${enc(fork.id)}`, { message: text });
      clearBanner();
      await refreshThreads(); // the fork's title (the original's) for the header
      location.hash = `#/t/${enc(fork.id)}`;
    } catch (e) {
      showBanner(`Could not edit and resend: ${failure(e)}`);
    }
  });
  input.addEventListener('keydown', (ev) => {
    if ((ev as KeyboardEvent).key === 'Escape') {
      ev.stopPropagation();
      showUserMessage(t, m);
    }
  });
  m.el.replaceChildren(form);
  input.focus();
}

function addRunMessage(t: OpenThread, runId: string, state: RunState): RunMessage {
  const el = h('article', { class: 'msg run', 'data-run-id': runId, 'aria-label': 'Agent' });
  const m: RunMessage = { kind: 'run', runId, state, el };
  t.runs.set(runId, m);
  t.messages.push(m);
  $('messages').append(el);
  renderRun(t, m);
  return m;
}

/** Renders at most once per frame: deltas arrive far faster than anyone reads. */
function schedule(t: OpenThread, m: RunMessage): void {
  t.dirty.add(m);
  if (t.frame) return;
  t.frame = requestAnimationFrame(() => {
    t.frame = undefined;
    for (const d of t.dirty) renderRun(t, d);
    t.dirty.clear();
    keepBottom();
  });
}
