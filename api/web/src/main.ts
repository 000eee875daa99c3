// The threadstream page: thread list, chat with a live agent tree, confirmation cards, and a
// per-run timeline. Everything shown is read off the log through the public API:
//   open a thread = GET …/messages (snapshot + nextEventId) → GET …/status → SSE from
//   nextEventId - 1 (n8n's session restore); later events fold into the same reducer.

import { ApiFailure, api, enc, logIn, setUnauthorizedHandler } from './api';
import { renderMarkdown } from './markdown';
import { Agent, Confirmation, RunState, ToolCall, WireEvent } from './reducer';

// ---- DOM helpers -------------------------------------------------------------------------

type Attrs = Record<string, string | boolean | undefined | ((e: any) => void)>;

function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: (Node | string | null | undefined | false)[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === false) continue;
    if (typeof v === 'function') el.addEventListener(k.replace(/^on/, ''), v);
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined && c !== false) el.append(c);
  return el;
}

function $<T extends HTMLElement = HTMLElement>(id: string): T {
  return document.getElementById(id) as T;
}

function markdown(src: string, cls = 'md'): HTMLElement {
  const div = h('div', { class: cls });
  // Safe: renderMarkdown escapes all input before adding its own tags.
  div.innerHTML = renderMarkdown(src);
  return div;
}

function short(v: unknown, max = 90): string {
  const s = typeof v === 'string' ? v : JSON.stringify(v);
  if (s === undefined) return '';
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}

function pretty(v: unknown): string {
  return typeof v === 'string' ? v : JSON.stringify(v, null, 2);
}

// ---- page state --------------------------------------------------------------------------

interface UserMessage {
  kind: 'user';
  text: string;
  runId?: string;
  /** The stored message's id (`user-message.messageId`): what "edit and resend" forks before. */
  messageId?: string;
  el: HTMLElement;
}

interface RunMessage {
  kind: 'run';
  runId: string;
  state: RunState;
  el: HTMLElement;
}

/** The local outcome of a confirmation answered from this page. */
interface Answer {
  approved: boolean;
  label: string;
}

interface OpenThread {
  id: string;
  title: string;
  messages: (UserMessage | RunMessage)[];
  runs: Map<string, RunMessage>;
  /** Each run's user message id, from its `run-start` (a message just sent learns it there). */
  messageIds: Map<string, string>;
  /** Last SSE id seen: the per-thread cursor a manual reconnect resumes from. */
  cursor: number;
  live: boolean;
  liveRunId?: string;
  source?: EventSource;
  reconnectTimer?: number;
  /** Cards keep their DOM (typed text, wizard step) across re-renders of the tree. */
  cards: Map<string, HTMLElement>;
  answers: Map<string, Answer>;
  /** Open/closed state of collapsible parts, by key, so re-rendering keeps what the user chose. */
  open: Map<string, boolean>;
  dirty: Set<RunMessage>;
  frame?: number;
}

let current: OpenThread | null = null;
/** Bumped on every navigation: answers of an older navigation are dropped. */
let generation = 0;
let threadTitles = new Map<string, string>();

// ---- banner & auth -----------------------------------------------------------------------

function showBanner(text: string): void {
  const b = $('banner');
  b.textContent = text;
  b.hidden = false;
}

function clearBanner(): void {
  $('banner').hidden = true;
  $('banner').textContent = '';
}

function failure(e: unknown): string {
  if (e instanceof ApiFailure) return `${e.message} (${e.code})`;
  return String(e);
}

function askForToken(): void {
  const dialog = $<HTMLDialogElement>('login');
  if (!dialog.open) dialog.showModal();
}

setUnauthorizedHandler(askForToken);

$('login-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const input = $<HTMLInputElement>('login-token');
  try {
    await logIn(input.value);
    input.value = '';
    $('login-error').textContent = '';
    $<HTMLDialogElement>('login').close();
    await refreshThreads();
    await route();
  } catch (e) {
    $('login-error').textContent = `Sign-in failed: ${failure(e)}`;
  }
});

// ---- thread list -------------------------------------------------------------------------

async function refreshThreads(): Promise<void> {
  let threads: any[];
  try {
    threads = (await api('GET', '/instance-ai/threads')).threads ?? [];
  } catch (e) {
    showBanner(`Could not load threads: ${failure(e)}`);
    return;
  }
  const list = $('thread-list');
  list.replaceChildren();
  threadTitles = new Map();
  for (const t of threads) {
    if (t.deleted) continue;
    const title = t.title || t.id;
    threadTitles.set(t.id, title);
    const isCurrent = current?.id === t.id;
    const li = h('li', { 'data-thread-id': t.id, class: isCurrent ? 'current' : undefined });
    const link = h('a', { href: `#/t/${enc(t.id)}`, 'aria-current': isCurrent ? 'page' : undefined }, title);
    const rename = h('button', { type: 'button', class: 'icon', 'aria-label': `Rename ${title}`, title: 'Rename' }, '✎');
    const del = h('button', { type: 'button', class: 'icon', 'aria-label': `Delete ${title}`, title: 'Delete' }, '✕');
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
      if (current?.id === id) setTitle(input.value);
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
    if (current?.id === id) location.hash = '#/';
  } catch (e) {
    showBanner(`Could not delete: ${failure(e)}`);
  }
  await refreshThreads();
}

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

// ---- routing -----------------------------------------------------------------------------

function show(view: 'empty' | 'chat' | 'timeline'): void {
  $('empty-view').hidden = view !== 'empty';
  $('chat-view').hidden = view !== 'chat';
  $('timeline-view').hidden = view !== 'timeline';
  document.body.classList.remove('menu-open');
  $('menu-toggle').setAttribute('aria-expanded', 'false');
}

async function route(): Promise<void> {
  const m = /^#\/t\/([^/]+)(?:\/timeline\/([^/]+))?$/.exec(location.hash);
  closeThread();
  const gen = ++generation;
  if (!m) {
    show('empty');
    return;
  }
  const id = decodeURIComponent(m[1]);
  if (m[2]) await openTimeline(id, decodeURIComponent(m[2]), gen);
  else await openThread(id, gen);
  void refreshThreads();
}

window.addEventListener('hashchange', () => void route());

// ---- chat: session restore and SSE -------------------------------------------------------

function closeThread(): void {
  if (!current) return;
  current.source?.close();
  window.clearTimeout(current.reconnectTimer);
  if (current.frame) cancelAnimationFrame(current.frame);
  current = null;
}

function setTitle(title: string): void {
  $('thread-title').textContent = title;
  document.title = `${title} · threadstream`;
}

async function openThread(id: string, gen: number): Promise<void> {
  show('chat');
  $('messages').replaceChildren();
  setTitle(threadTitles.get(id) ?? id);
  // 1. Messages first: the snapshot and the cursor it covers.
  let snapshot: any;
  let status: any;
  try {
    snapshot = await api('GET', `/instance-ai/threads/${enc(id)}/messages`);
    if (gen !== generation) return;
    // 2. Then status: is a run live (or waiting on us)?
    status = await api('GET', `/instance-ai/threads/${enc(id)}/status`);
    if (gen !== generation) return;
  } catch (e) {
    showBanner(`Could not open the thread: ${failure(e)}`);
    return;
  }
  clearBanner();
  const t: OpenThread = {
    id,
    title: threadTitles.get(id) ?? id,
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
  };
  current = t;
  for (const m of snapshot.messages ?? []) {
    if (m.role === 'user') addUserMessage(t, m.content ?? '', undefined, m.id);
    else if (m.agentTree && m.runId) {
      const state = RunState.fromTree(m.agentTree);
      addRunMessage(t, m.runId, state);
    }
  }
  showBackgroundTasks(status.backgroundTasks ?? []);
  updateComposer();
  // 3. Then SSE, from exactly where the snapshot ends.
  connect(t);
  scrollToEnd(true);
}

function showBackgroundTasks(tasks: any[]): void {
  const running = tasks.filter((x) => x.status === 'running');
  $('bg-tasks').textContent = running.length
    ? `Background: ${running.map((x) => `${x.role} (running)`).join(', ')}`
    : '';
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
  if (!m) {
    m = addRunMessage(t, e.runId, new RunState(e.agentId));
  }
  m.state.reduce(e);
  if (e.type === 'run-start' && e.payload?.messageId) t.messageIds.set(e.runId, String(e.payload.messageId));
  if (e.type === 'run-start') {
    t.live = true;
    t.liveRunId = e.runId;
    updateComposer();
  } else if (e.type === 'run-finish' && (t.liveRunId === e.runId || !t.liveRunId)) {
    t.live = false;
    t.liveRunId = undefined;
    updateComposer();
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

function addUserMessage(t: OpenThread, text: string, runId?: string, messageId?: string): void {
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
  const edit = h('button', { type: 'button', class: 'icon edit', 'aria-label': 'Edit and resend', title: 'Edit and resend' }, '✎');
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
    if ((ev as KeyboardEvent).key === 'Escape') showUserMessage(t, m);
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
    const nearEnd = isNearEnd();
    for (const d of t.dirty) renderRun(t, d);
    t.dirty.clear();
    if (nearEnd) scrollToEnd(false);
  });
}

function isNearEnd(): boolean {
  return window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
}

function scrollToEnd(force: boolean): void {
  if (force || isNearEnd()) window.scrollTo(0, document.body.scrollHeight);
}

// ---- the agent tree ----------------------------------------------------------------------

function renderRun(t: OpenThread, m: RunMessage): void {
  const s = m.state;
  const footer = h('footer', { class: 'run-footer' });
  const statusText: Record<string, string> = {
    active: 'Running…',
    completed: 'Completed',
    cancelled: 'Cancelled',
    error: 'Failed',
  };
  footer.append(
    h('span', { class: `run-status ${s.status}`, 'data-status': s.status }, statusText[s.status] ?? s.status),
  );
  if (s.status === 'error' && s.finishReason) footer.append(h('span', { class: 'run-reason' }, `: ${s.finishReason}`));
  if (s.status !== 'active') {
    footer.append(
      ' · ',
      h('a', { href: `#/t/${enc(t.id)}/timeline/${enc(m.runId)}`, class: 'timeline-link' }, 'Timeline'),
    );
  }
  m.el.setAttribute('data-status', s.status);
  m.el.replaceChildren(renderAgent(t, m, s.root(), true), footer);
}

type Child = Node | string | null;

function collapsible(t: OpenThread, key: string, defaultOpen: boolean, cls: string, summary: Child[], body: Child[]): HTMLElement {
  const d = h('details', { class: cls, open: t.open.get(key) ?? defaultOpen });
  d.addEventListener('toggle', () => t.open.set(key, d.open));
  d.append(h("summary", {}, ...summary), ...body.filter((c): c is Node | string => c !== null));
  return d;
}

function renderAgent(t: OpenThread, m: RunMessage, a: Agent, isRoot: boolean): HTMLElement {
  const s = m.state;
  const node = h('div', { class: `agent ${a.status}`, 'data-agent-id': a.agentId, 'data-status': a.status });
  if (isRoot) node.append(h('div', { class: 'agent-head' }, h('span', { 'aria-hidden': 'true' }, '🤖 '), 'Orchestrator'));
  if (a.statusMessage && a.status === 'active') {
    node.append(h('div', { class: 'status-line', role: 'status' }, h('span', { class: 'spinner', 'aria-hidden': 'true' }), a.statusMessage));
  }
  if (a.tasks?.tasks?.length) node.append(renderTasks(a.tasks.tasks));
  if (a.reasoning) {
    node.append(
      collapsible(t, `r:${m.runId}:${a.agentId}`, false, 'reasoning', [h('span', { 'aria-hidden': 'true' }, '💭 '), 'Reasoning'], [
        h('div', { class: 'reasoning-text' }, a.reasoning),
      ]),
    );
  }
  for (const entry of a.timeline) {
    if (entry.type === 'text') {
      node.append(markdown(entry.content, 'md text'));
    } else if (entry.type === 'tool-call') {
      const tc = s.toolCalls.get(entry.toolCallId);
      if (tc) node.append(renderToolCall(t, m, tc));
    } else {
      const child = s.agents.get(entry.agentId);
      if (child) node.append(renderSubAgent(t, m, child));
    }
  }
  return node;
}

function renderTasks(tasks: { id: string; description: string; status: string }[]): HTMLElement {
  const icon: Record<string, string> = { todo: '○', in_progress: '◐', done: '✓', failed: '✗', cancelled: '–' };
  const label: Record<string, string> = { todo: 'to do', in_progress: 'in progress', done: 'done', failed: 'failed', cancelled: 'cancelled' };
  return h(
    'ul',
    { class: 'tasks', 'aria-label': 'Tasks' },
    ...tasks.map((x) =>
      h(
        'li',
        { 'data-status': x.status, 'data-task-id': x.id },
        h('span', { class: 'task-icon', 'aria-hidden': 'true' }, icon[x.status] ?? '·'),
        ` ${x.description} `,
        h('span', { class: 'task-status' }, `(${label[x.status] ?? x.status})`),
      ),
    ),
  );
}

function renderSubAgent(t: OpenThread, m: RunMessage, a: Agent): HTMLElement {
  const outcome =
    a.status === 'active' ? 'working…' : a.status === 'completed' ? 'done' : a.status === 'error' ? `failed: ${a.error ?? ''}` : a.status;
  const body: Child[] = [renderAgent(t, m, a, false)];
  if (a.status !== 'active' && a.result) body.push(h('div', { class: 'agent-result' }, h('span', { 'aria-hidden': 'true' }, '✅ '), short(a.result, 300)));
  const d = collapsible(
    t,
    `a:${m.runId}:${a.agentId}`,
    true,
    `subagent ${a.status}`,
    [
      h('span', { 'aria-hidden': 'true' }, '🤖 '),
      h('span', { class: 'role' }, a.role),
      ' — ',
      h('span', { class: 'outcome' }, outcome),
      a.status === 'active' ? h('span', { class: 'spinner', role: 'img', 'aria-label': 'working' }) : null,
    ],
    body,
  );
  d.setAttribute('data-agent-id', a.agentId);
  return d;
}

function renderToolCall(t: OpenThread, m: RunMessage, tc: ToolCall): HTMLElement {
  const state = tc.isLoading ? 'loading' : tc.error !== undefined ? 'error' : tc.result !== undefined ? 'done' : 'stopped';
  const el = h('div', { class: `tool ${state}`, 'data-tool-call-id': tc.toolCallId, 'data-tool-name': tc.toolName, 'data-state': state });
  const head = h('div', { class: 'tool-head' }, h('span', { 'aria-hidden': 'true' }, '🔧 '), h('span', { class: 'tool-name' }, tc.toolName));
  if (state === 'loading') head.append(h('span', { class: 'spinner', role: 'img', 'aria-label': 'running' }));
  if (state === 'done') head.append(h('span', { class: 'tool-summary' }, ` → ${short(tc.result, 70)}`));
  el.append(head);
  el.append(collapsible(t, `args:${m.runId}:${tc.toolCallId}`, false, 'tool-args', ['Arguments'], [h('pre', {}, pretty(tc.args))]));
  if (state === 'done') {
    el.append(collapsible(t, `res:${m.runId}:${tc.toolCallId}`, false, 'tool-result', ['Result'], [h('pre', {}, pretty(tc.result))]));
  }
  if (state === 'error') el.append(h('div', { class: 'tool-error' }, h('strong', {}, 'Error: '), tc.error ?? ''));
  if (tc.confirmation) el.append(confirmationCard(t, tc, tc.confirmation));
  return el;
}

// ---- human in the loop -------------------------------------------------------------------

function confirmationCard(t: OpenThread, tc: ToolCall, c: Confirmation): HTMLElement {
  let card = t.cards.get(c.requestId);
  if (!card) {
    card = h('div', { class: `card ${c.severity}`, 'data-request-id': c.requestId, role: 'group', 'aria-label': 'Confirmation' });
    t.cards.set(c.requestId, card);
    fillInteractive(t, card, c);
  }
  const local = t.answers.get(c.requestId);
  if (local || !tc.isLoading) settleCard(card, tc, local);
  return card;
}

function settleCard(card: HTMLElement, tc: ToolCall, local: Answer | undefined): void {
  let outcome: string;
  let kind: string;
  if (local) {
    outcome = local.label;
    kind = local.approved ? 'approved' : 'denied';
  } else if (tc.result !== undefined) {
    outcome = 'Approved';
    kind = 'approved';
  } else if (tc.error !== undefined) {
    const denied = /denied|declined/i.test(tc.error);
    outcome = denied ? 'Denied' : `Not done: ${tc.error}`;
    kind = 'denied';
  } else {
    outcome = 'Not answered: the run ended';
    kind = 'expired';
  }
  if (card.getAttribute('data-outcome') === kind) return;
  card.setAttribute('data-outcome', kind);
  const message = card.querySelector('.card-message')?.cloneNode(true);
  card.replaceChildren(...(message ? [message] : []), h('p', { class: `card-outcome ${kind}` }, outcome));
}

async function answer(t: OpenThread, card: HTMLElement, c: Confirmation, body: Record<string, unknown>, label: string): Promise<void> {
  const buttons = card.querySelectorAll('button');
  buttons.forEach((b) => (b.disabled = true));
  try {
    await api('POST', `/instance-ai/confirm/${enc(c.requestId)}`, body);
    t.answers.set(c.requestId, { approved: body.approved !== false, label });
    for (const m of t.runs.values()) schedule(t, m);
  } catch (e) {
    buttons.forEach((b) => (b.disabled = false));
    card.querySelector('.card-error')?.remove();
    card.append(h('p', { class: 'card-error', role: 'alert' }, `Could not answer: ${failure(e)}`));
  }
}

function fillInteractive(t: OpenThread, card: HTMLElement, c: Confirmation): void {
  const message = h('p', { class: 'card-message' }, h('strong', { class: 'severity' }, `${c.severity}: `), c.message);
  const kind = c.inputType ?? 'approval';
  if (kind === 'questions' && c.questions?.length) {
    card.append(message);
    questionWizard(t, card, c);
    return;
  }
  if (kind === 'text') {
    const id = `answer-${c.requestId}`;
    const input = h('textarea', { id, rows: '2' });
    card.append(
      message,
      h('label', { for: id }, 'Your answer'),
      input,
      h(
        'div',
        { class: 'card-buttons' },
        h('button', { type: 'button', class: 'primary', onclick: () => answer(t, card, c, { kind: 'text', approved: true, userInput: input.value }, `Answered: ${input.value}`) }, 'Send answer'),
        h('button', { type: 'button', onclick: () => answer(t, card, c, { kind: 'text', approved: false }, 'Declined') }, 'Decline'),
      ),
    );
    return;
  }
  card.append(message);
  if (kind === 'plan-review' && c.tasks?.tasks?.length) card.append(renderTasks(c.tasks.tasks));
  card.append(
    h(
      'div',
      { class: 'card-buttons' },
      h('button', { type: 'button', class: 'primary', onclick: () => answer(t, card, c, { kind: kind === 'plan-review' ? 'plan-review' : 'approval', approved: true }, 'Approved') }, 'Approve'),
      h('button', { type: 'button', class: 'danger', onclick: () => answer(t, card, c, { kind: kind === 'plan-review' ? 'plan-review' : 'approval', approved: false }, 'Denied') }, 'Deny'),
    ),
  );
}

/** One question per step (single: radios, multi: checkboxes, text: a text area), then submit. */
function questionWizard(t: OpenThread, card: HTMLElement, c: Confirmation): void {
  const qs = c.questions!;
  const chosen = new Map<string, string[]>();
  const texts = new Map<string, string>();
  let step = 0;
  const area = h('div', { class: 'wizard' });
  // The request's message is often the intro itself: show it once.
  if (c.introMessage && c.introMessage !== c.message) card.append(h('p', { class: 'intro' }, c.introMessage));
  card.append(area);
  const draw = () => {
    const q = qs[step];
    const fs = h('fieldset', {}, h('legend', {}, `Question ${step + 1} of ${qs.length}: ${q.question}`));
    const name = `q-${c.requestId}-${q.id}`;
    if (q.type === 'text') {
      const input = h('textarea', { id: name, rows: '2', 'aria-label': q.question });
      input.value = texts.get(q.id) ?? '';
      input.addEventListener('input', () => texts.set(q.id, input.value));
      fs.append(input);
    } else {
      for (const [i, opt] of (q.options ?? []).entries()) {
        const id = `${name}-${i}`;
        const box = h('input', { type: q.type === 'single' ? 'radio' : 'checkbox', name, id, value: opt });
        box.checked = (chosen.get(q.id) ?? []).includes(opt);
        box.addEventListener('change', () => {
          const prev = chosen.get(q.id) ?? [];
          if (q.type === 'single') chosen.set(q.id, [opt]);
          else chosen.set(q.id, box.checked ? [...prev, opt] : prev.filter((o) => o !== opt));
        });
        fs.append(h('div', { class: 'option' }, box, h('label', { for: id }, opt)));
      }
    }
    const last = step === qs.length - 1;
    const buttons = h('div', { class: 'card-buttons' });
    if (step > 0) buttons.append(h('button', { type: 'button', onclick: () => { step--; draw(); } }, 'Back'));
    if (!last) buttons.append(h('button', { type: 'button', class: 'primary', onclick: () => { step++; draw(); } }, 'Next'));
    else {
      buttons.append(
        h('button', {
          type: 'button',
          class: 'primary',
          onclick: () => {
            const answers = qs.map((x) => ({
              questionId: x.id,
              selectedOptions: chosen.get(x.id) ?? [],
              ...(texts.get(x.id) ? { customText: texts.get(x.id) } : {}),
            }));
            void answer(t, card, c, { kind: 'questions', approved: true, answers }, 'Answered');
          },
        }, 'Submit answers'),
      );
    }
    buttons.append(h('button', { type: 'button', onclick: () => answer(t, card, c, { kind: 'questions', approved: false }, 'Declined') }, 'Skip all'));
    area.replaceChildren(fs, buttons);
    (fs.querySelector('input, textarea') as HTMLElement | null)?.focus();
  };
  draw();
}

// ---- composer ----------------------------------------------------------------------------

function updateComposer(): void {
  const t = current;
  const live = !!t?.live;
  $<HTMLTextAreaElement>('composer-input').disabled = !t || live;
  $<HTMLButtonElement>('send').disabled = !t || live;
  $<HTMLButtonElement>('stop').disabled = !t || !live;
  $('run-state').textContent = live ? 'The agent is working — input is paused until the run ends.' : '';
}

$('composer').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const t = current;
  const input = $<HTMLTextAreaElement>('composer-input');
  const text = input.value.trim();
  if (!t || !text || t.live) return;
  t.live = true; // no double send while the POST is in flight
  updateComposer();
  try {
    const res = await api('POST', `/instance-ai/chat/${enc(t.id)}`, { message: text });
    clearBanner();
    input.value = '';
    if (current === t) {
      addUserMessage(t, text, res.runId);
      // A fast run may have finished (over SSE) before the POST answered.
      const run = t.runs.get(res.runId);
      t.live = !run || run.state.status === 'active';
      t.liveRunId = t.live ? res.runId : undefined;
      scrollToEnd(true);
    }
  } catch (e) {
    t.live = false;
    if (e instanceof ApiFailure && e.status === 409) {
      showBanner('This thread already has a run in progress (started elsewhere?). Wait for it to finish, or press Stop — your message was not sent.');
      // The run we did not know about: take the thread's real state.
      try {
        const s = await api('GET', `/instance-ai/threads/${enc(t.id)}/status`);
        t.live = !!(s.hasActiveRun || s.isSuspended);
        t.liveRunId = s.runId;
      } catch {
        // keep the input enabled
      }
    } else {
      showBanner(`Could not send: ${failure(e)}`);
    }
  }
  updateComposer();
  if (!t.live) input.focus();
});

$('composer-input').addEventListener('keydown', (ev) => {
  const k = ev as KeyboardEvent;
  if (k.key === 'Enter' && !k.shiftKey && !k.isComposing) {
    k.preventDefault();
    $<HTMLFormElement>('composer').requestSubmit();
  }
});

$('stop').addEventListener('click', async () => {
  const t = current;
  if (!t) return;
  $<HTMLButtonElement>('stop').disabled = true;
  $('run-state').textContent = 'Stopping…';
  try {
    await api('POST', `/instance-ai/chat/${enc(t.id)}/cancel`);
  } catch (e) {
    showBanner(`Could not stop the run: ${failure(e)}`);
    updateComposer();
  }
});

// ---- timeline of one run -----------------------------------------------------------------

interface LogLine {
  id: number;
  run: string;
  agent: string;
  type: string;
  payload: unknown;
  ts: number;
}

async function openTimeline(threadId: string, runId: string, gen: number): Promise<void> {
  show('timeline');
  const url = `/instance-ai/threads/${enc(threadId)}/export?runId=${enc(runId)}`;
  $('timeline-title').textContent = `Timeline of run ${runId}`;
  $<HTMLAnchorElement>('timeline-back').href = `#/t/${enc(threadId)}`;
  const dl = $<HTMLAnchorElement>('timeline-download');
  dl.href = url;
  dl.download = `${threadId}-${runId}.ndjson`;
  const body = $('timeline-table').querySelector('tbody')!;
  body.replaceChildren();
  let lines: LogLine[];
  try {
    const res = await fetch(url, { credentials: 'same-origin' });
    if (res.status === 401) askForToken();
    if (!res.ok) {
      const j = await res.json().catch(() => null);
      throw new ApiFailure(res.status, j?.error?.code ?? `http_${res.status}`, j?.error?.message ?? res.statusText);
    }
    const text = await res.text();
    lines = text
      .split('\n')
      .filter((l) => l.trim())
      .map((l) => JSON.parse(l));
  } catch (e) {
    showBanner(`Could not load the timeline: ${failure(e)}`);
    return;
  }
  if (gen !== generation) return;
  clearBanner();
  const agents = [...new Set(lines.map((l) => l.agent))];
  const types = [...new Set(lines.map((l) => l.type))].sort();
  const fill = (sel: HTMLSelectElement, values: string[], all: string) => {
    sel.replaceChildren(h('option', { value: '' }, all), ...values.map((v) => h('option', { value: v }, v)));
  };
  const agentSel = $<HTMLSelectElement>('filter-agent');
  const typeSel = $<HTMLSelectElement>('filter-type');
  fill(agentSel, agents, 'All agents');
  fill(typeSel, types, 'All types');
  for (const l of lines) {
    body.append(
      h(
        'tr',
        { 'data-agent': l.agent, 'data-type': l.type, 'data-id': String(l.id) },
        h('td', {}, String(l.id)),
        h('td', {}, h('time', { datetime: new Date(l.ts).toISOString() }, new Date(l.ts).toISOString().replace('T', ' ').replace('Z', ''))),
        h('td', {}, l.agent),
        h('td', {}, h('code', {}, l.type)),
        h('td', { class: 'payload' }, short(l.payload, 160)),
      ),
    );
  }
  const apply = () => {
    let shown = 0;
    for (const row of Array.from(body.rows)) {
      const ok = (!agentSel.value || row.dataset.agent === agentSel.value) && (!typeSel.value || row.dataset.type === typeSel.value);
      row.hidden = !ok;
      if (ok) shown++;
    }
    $('timeline-count').textContent = `${shown} of ${lines.length} events`;
  };
  agentSel.onchange = apply;
  typeSel.onchange = apply;
  apply();
}

// ---- start -------------------------------------------------------------------------------

updateComposer();
void refreshThreads().then(() => route());
