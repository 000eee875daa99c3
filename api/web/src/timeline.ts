// The timeline of one run: every stored event, filterable by agent and type, with an NDJSON
// download.

import { ApiFailure, enc } from './api';
import { askForToken, clearBanner, failure, showBanner } from './banner';
import { $, h, short } from './dom';

interface LogLine {
  id: number;
  run: string;
  agent: string;
  type: string;
  payload: unknown;
  ts: number;
}

export async function openTimeline(threadId: string, runId: string, isCurrent: () => boolean): Promise<void> {
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
  if (!isCurrent()) return;
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
