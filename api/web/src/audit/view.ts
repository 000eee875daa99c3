// The audit view of one thread: the timeline of every run, deltas coalesced (coalesce.ts),
// filtered by agent, type, run and time, searched by text, drawn as a windowed list, each row
// linked to where it happened in the chat, and the NDJSON behind it for download.

import { ApiFailure, enc } from '../api';
import { askForToken, clearBanner, failure, showBanner } from '../banner';
import { $, h, num } from '../dom';
import { icon } from '../icons';
import { coalesce, LogLine, Row } from './coalesce';
import { WindowedList } from './windowed-list';

const ROW_HEIGHT = 34;

let list: WindowedList<Row> | null = null;

function isoTime(ts: number): string {
  return new Date(ts).toISOString().replace('T', ' ').replace('Z', '');
}

/** `YYYY-MM-DDTHH:MM[:SS]` read as UTC (the times the view shows). */
function utcInput(v: string): number | undefined {
  if (!v) return undefined;
  const t = Date.parse(`${v}Z`);
  return Number.isFinite(t) ? t : undefined;
}

function chatLink(threadId: string, r: Row, rootAgents: Map<string, string>): string {
  const base = `#/t/${enc(threadId)}/run/${enc(r.run)}`;
  if (r.toolCallId) return `${base}/tool/${enc(r.toolCallId)}`;
  if (r.agent && rootAgents.get(r.run) !== r.agent) return `${base}/agent/${enc(r.agent)}`;
  return base;
}

async function load(url: string): Promise<LogLine[]> {
  const res = await fetch(url, { credentials: 'same-origin' });
  if (res.status === 401) askForToken();
  if (!res.ok) {
    const j = await res.json().catch(() => null);
    throw new ApiFailure(res.status, j?.error?.code ?? `http_${res.status}`, j?.error?.message ?? res.statusText);
  }
  const text = await res.text();
  const lines: LogLine[] = [];
  for (const l of text.split('\n')) if (l) lines.push(JSON.parse(l));
  return lines;
}

export async function openAudit(threadId: string, params: URLSearchParams, title: string, isCurrent: () => boolean): Promise<void> {
  const started = performance.now();
  const url = `/instance-ai/threads/${enc(threadId)}/export`;
  $('audit-title').textContent = `Audit of ${title}`;
  $<HTMLAnchorElement>('audit-back').href = `#/t/${enc(threadId)}`;
  const scroller = $('audit-rows');
  if (!list) list = new WindowedList<Row>(scroller, ROW_HEIGHT, 8, ROW_HEIGHT);
  const rowsView = list;
  rowsView.setItems([], () => h('div'));
  $('audit-count').textContent = 'Loading…';
  let lines: LogLine[];
  try {
    lines = await load(url);
  } catch (e) {
    showBanner(`Could not load the audit log: ${failure(e)}`);
    return;
  }
  if (!isCurrent()) return;
  clearBanner();
  const rows = coalesce(lines);
  const rootAgents = new Map<string, string>();
  for (const l of lines) if (l.type === 'run-start' && !rootAgents.has(l.run)) rootAgents.set(l.run, l.agent);
  const renderRow = (r: Row, i: number): HTMLElement => {
    const ids = r.count > 1 ? `${r.firstId}–${r.lastId}` : String(r.firstId);
    return h(
      'div',
      { class: `audit-row type-${r.type}`, role: 'row', 'aria-rowindex': String(i + 2), 'data-first-id': String(r.firstId), 'data-type': r.type },
      h('span', { role: 'cell', class: 'ids' }, ids, r.count > 1 ? h('span', { class: 'count' }, ` ×${num(r.count)}`) : null),
      h('span', { role: 'cell' }, h('time', { datetime: new Date(r.ts).toISOString() }, isoTime(r.ts))),
      h('span', { role: 'cell', class: 'run', title: r.run }, r.run),
      h('span', { role: 'cell', class: 'agent', title: r.agent }, r.agent),
      h('span', { role: 'cell' }, h('code', {}, r.type)),
      h('span', { role: 'cell', class: 'text', title: r.text.slice(0, 500) }, r.text),
      h('span', { role: 'cell' }, h('a', { href: chatLink(threadId, r, rootAgents), class: 'in-chat', 'aria-label': `Show event ${r.firstId} in the chat` }, icon('link'), ' chat')),
    );
  };

  const fill = (sel: HTMLSelectElement, values: string[], all: string) => {
    sel.replaceChildren(h('option', { value: '' }, all), ...values.map((v) => h('option', { value: v }, v)));
  };
  const agentSel = $<HTMLSelectElement>('audit-agent');
  const typeSel = $<HTMLSelectElement>('audit-type');
  const runSel = $<HTMLSelectElement>('audit-run');
  const from = $<HTMLInputElement>('audit-from');
  const to = $<HTMLInputElement>('audit-to');
  const search = $<HTMLInputElement>('audit-search');
  fill(agentSel, [...new Set(lines.map((l) => l.agent))], 'All agents');
  fill(typeSel, [...new Set(lines.map((l) => l.type))].sort(), 'All types');
  fill(runSel, [...rootAgents.keys()], 'All runs');
  runSel.value = params.get('run') ?? '';
  agentSel.value = params.get('agent') ?? '';
  typeSel.value = params.get('type') ?? '';
  search.value = params.get('q') ?? '';
  from.value = '';
  to.value = '';
  const dl = $<HTMLAnchorElement>('audit-download');
  const apply = () => {
    const q = search.value.trim().toLowerCase();
    const fromTs = utcInput(from.value);
    const toTs = utcInput(to.value);
    const shown = rows.filter(
      (r) =>
        (!agentSel.value || r.agent === agentSel.value) &&
        (!typeSel.value || r.type === typeSel.value) &&
        (!runSel.value || r.run === runSel.value) &&
        (fromTs === undefined || r.lastTs >= fromTs) &&
        (toTs === undefined || r.ts < toTs) &&
        (!q || r.haystack.includes(q)),
    );
    rowsView.setItems(shown, renderRow);
    scroller.setAttribute('aria-rowcount', String(shown.length + 1));
    const events = shown.reduce((n, r) => n + r.count, 0);
    $('audit-count').textContent = `${num(shown.length)} rows (${num(events)} of ${num(lines.length)} events)`;
    dl.href = runSel.value ? `${url}?runId=${enc(runSel.value)}` : url;
    dl.download = runSel.value ? `${threadId}-${runSel.value}.ndjson` : `${threadId}.ndjson`;
  };
  agentSel.onchange = typeSel.onchange = runSel.onchange = from.onchange = to.onchange = apply;
  let searchTimer = 0;
  search.oninput = () => {
    window.clearTimeout(searchTimer);
    searchTimer = window.setTimeout(apply, 120);
  };
  apply();
  requestAnimationFrame(() => {
    const ms = performance.now() - started;
    scroller.dataset.firstScreenMs = ms.toFixed(1);
    performance.measure?.('audit-first-screen', { start: started, duration: ms });
  });
}
