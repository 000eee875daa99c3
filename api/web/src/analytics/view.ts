// The analytics page: the figures of `GET /instance-ai/analytics/summary` for a date range (the
// same JSON as `threadstream analytics --format summary`), each drawn as a chart with its
// figures in a table beside it (what a screen reader reads, and what the test compares).

import { api, enc } from '../api';
import { clearBanner, failure, showBanner } from '../banner';
import { $, h, num } from '../dom';
import { barChart, doughnutChart, Series } from './charts';

/** The summary document (audit::report::Summary, camelCase). */
export interface Summary {
  runs: number;
  byStatus: Record<string, number>;
  runsPerDayByStatus: Record<string, Record<string, number>>;
  tokensPerDayByModel: Record<string, Record<string, { inputTokens: number; outputTokens: number }>>;
  p50Ms: number | null;
  p95Ms: number | null;
  ttftP50Ms: number | null;
  ttftP95Ms: number | null;
  tools: { tool: string; calls: number; errors: number }[];
  confirmations: { asked: number; approved: number; denied: number; timedOut: number };
  topThreads: { threadId: string; events: number; runs: number }[];
}

const DAY = 86_400_000;

function day(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

/** The range the URL names, else the last 30 days (UTC), `to` inclusive. */
function rangeOf(params: URLSearchParams): { from: string; to: string } {
  const today = Date.now();
  const from = params.get('from') ?? day(today - 29 * DAY);
  const to = params.get('to') ?? day(today);
  return { from, to };
}

function figureTable(caption: string, head: string[], rows: { key: string; cells: (string | number | null)[] }[]): HTMLElement {
  const table = h(
    'table',
    { class: 'figures', 'data-figures': caption },
    h('caption', {}, caption),
    h('thead', {}, h('tr', {}, ...head.map((c) => h('th', { scope: 'col' }, c)))),
    h(
      'tbody',
      {},
      ...rows.map((r) =>
        h(
          'tr',
          { 'data-key': r.key },
          ...r.cells.map((c, i) =>
            i === 0 ? h('th', { scope: 'row' }, String(c)) : h('td', { 'data-field': head[i] }, c === null ? '–' : typeof c === 'number' ? num(c) : c),
          ),
        ),
      ),
    ),
  );
  return h('details', { class: 'figures-wrap' }, h('summary', {}, 'Figures'), table);
}

function chartBlock(id: string, title: string, describe: string, table: HTMLElement, empty: boolean): { block: HTMLElement; canvas: HTMLCanvasElement } {
  const canvas = h('canvas', { role: 'img', 'aria-label': describe });
  const block = h(
    'figure',
    { class: 'chart', id: `chart-${id}` },
    h('figcaption', {}, h('h3', {}, title)),
    empty ? h('p', { class: 'no-data' }, 'No data in this range.') : h('div', { class: 'chart-canvas' }, canvas),
    table,
  );
  return { block, canvas };
}

function keysOf<T>(byDay: Record<string, Record<string, T>>): string[] {
  return [...new Set(Object.values(byDay).flatMap((m) => Object.keys(m)))].sort();
}

export async function openAnalytics(params: URLSearchParams, isCurrent: () => boolean): Promise<void> {
  const range = rangeOf(params);
  const fromInput = $<HTMLInputElement>('analytics-from');
  const toInput = $<HTMLInputElement>('analytics-to');
  fromInput.value = range.from;
  toInput.value = range.to;
  const toExclusive = day(Date.parse(`${range.to}T00:00:00Z`) + DAY);
  $('analytics-range-text').textContent = `Runs started from ${range.from} to ${range.to} (UTC, inclusive)`;
  let s: Summary;
  try {
    s = await api('GET', `/instance-ai/analytics/summary?from=${enc(range.from)}&to=${enc(toExclusive)}`);
  } catch (e) {
    showBanner(`Could not load analytics: ${failure(e)}`);
    return;
  }
  if (!isCurrent()) return;
  clearBanner();
  const out = $('analytics-charts');
  out.replaceChildren();
  $('analytics-total').textContent = `${num(s.runs)} run${s.runs === 1 ? '' : 's'}`;

  // Runs per day by status.
  const days = Object.keys(s.runsPerDayByStatus).sort();
  const statuses = keysOf(s.runsPerDayByStatus);
  const runs = chartBlock(
    'runs',
    'Runs per day by status',
    `Stacked bars: runs per day, by status, ${days.length} days`,
    figureTable('Runs per day by status', ['Day', ...statuses], days.map((d) => ({ key: d, cells: [d, ...statuses.map((st) => s.runsPerDayByStatus[d][st] ?? 0)] }))),
    days.length === 0,
  );
  // Tokens per day by model.
  const tDays = Object.keys(s.tokensPerDayByModel).sort();
  const models = keysOf(s.tokensPerDayByModel);
  const tokenRows = tDays.flatMap((d) =>
    Object.entries(s.tokensPerDayByModel[d])
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([m, t]) => ({ key: `${d}/${m}`, cells: [`${d} ${m}`, t.inputTokens, t.outputTokens] })),
  );
  const tokens = chartBlock('tokens', 'Tokens per day by model', `Stacked bars: input and output tokens per day, by model (${models.join(', ') || 'none'})`, figureTable('Tokens per day by model', ['Day and model', 'Input', 'Output'], tokenRows), tDays.length === 0);
  // Latency.
  const latencyRows = [
    { key: 'duration', cells: ['Run duration', s.p50Ms, s.p95Ms] },
    { key: 'ttft', cells: ['Time to first token', s.ttftP50Ms, s.ttftP95Ms] },
  ];
  const latency = chartBlock('latency', 'Run duration and time to first token (ms)', 'Bars: p50 and p95 of run duration and of time to first token, in milliseconds', figureTable('Latency (ms)', ['Measure', 'p50', 'p95'], latencyRows), s.p50Ms === null && s.ttftP50Ms === null);
  // Tools.
  const tools = chartBlock('tools', 'Tool calls and errors by tool', `Horizontal bars: calls and errors of ${s.tools.length} tools`, figureTable('Tool calls and errors', ['Tool', 'Calls', 'Errors'], s.tools.map((t) => ({ key: t.tool, cells: [t.tool, t.calls, t.errors] }))), s.tools.length === 0);
  // Confirmations.
  const c = s.confirmations;
  const confirmations = chartBlock(
    'confirmations',
    'Confirmations',
    `Doughnut: ${c.approved} approved, ${c.denied} denied, ${c.timedOut} timed out`,
    figureTable('Confirmations', ['Outcome', 'Count'], [
      { key: 'approved', cells: ['Approved', c.approved] },
      { key: 'denied', cells: ['Denied', c.denied] },
      { key: 'timedOut', cells: ['Timed out', c.timedOut] },
      { key: 'asked', cells: ['Asked', c.asked] },
    ]),
    c.approved + c.denied + c.timedOut === 0,
  );
  // Top threads.
  const threads = chartBlock(
    'threads',
    'Top threads by events',
    `Horizontal bars: the ${s.topThreads.length} threads with the most events in this range`,
    figureTable('Top threads by events', ['Thread', 'Events', 'Runs'], s.topThreads.map((t) => ({ key: t.threadId, cells: [t.threadId, t.events, t.runs] }))),
    s.topThreads.length === 0,
  );
  const links = h('ul', { class: 'thread-links' }, ...s.topThreads.map((t) => h('li', {}, h('a', { href: `#/t/${enc(t.threadId)}/audit` }, `Audit of ${t.threadId}`))));
  threads.block.append(links);
  out.append(runs.block, tokens.block, latency.block, tools.block, confirmations.block, threads.block);

  if (days.length) barChart(runs.canvas, days, statuses.map((st) => ({ label: st, data: days.map((d) => s.runsPerDayByStatus[d][st] ?? 0) })), { stacked: true });
  if (tDays.length) {
    const series: Series[] = models.flatMap((m) => [
      { label: `${m} input`, data: tDays.map((d) => s.tokensPerDayByModel[d][m]?.inputTokens ?? 0) },
      { label: `${m} output`, data: tDays.map((d) => s.tokensPerDayByModel[d][m]?.outputTokens ?? 0) },
    ]);
    barChart(tokens.canvas, tDays, series, { stacked: true });
  }
  if (s.p50Ms !== null || s.ttftP50Ms !== null) {
    barChart(latency.canvas, ['Run duration', 'Time to first token'], [
      { label: 'p50', data: [s.p50Ms ?? 0, s.ttftP50Ms ?? 0] },
      { label: 'p95', data: [s.p95Ms ?? 0, s.ttftP95Ms ?? 0] },
    ]);
  }
  if (s.tools.length) barChart(tools.canvas, s.tools.map((t) => t.tool), [{ label: 'calls', data: s.tools.map((t) => t.calls) }, { label: 'errors', data: s.tools.map((t) => t.errors) }], { horizontal: true });
  if (c.approved + c.denied + c.timedOut) doughnutChart(confirmations.canvas, ['approved', 'denied', 'timed out'], [c.approved, c.denied, c.timedOut]);
  if (s.topThreads.length) barChart(threads.canvas, s.topThreads.map((t) => t.threadId), [{ label: 'events', data: s.topThreads.map((t) => t.events) }], { horizontal: true });
}

/** The range form: submitting it changes the URL, which redraws. */
export function setUpAnalytics(): void {
  $('analytics-range').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const from = $<HTMLInputElement>('analytics-from').value;
    const to = $<HTMLInputElement>('analytics-to').value;
    if (!from || !to || from > to) {
      showBanner('Pick a start date on or before the end date.');
      return;
    }
    location.hash = `#/analytics?from=${enc(from)}&to=${enc(to)}`;
  });
}
