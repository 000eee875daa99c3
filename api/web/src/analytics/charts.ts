// The analytics charts: Chart.js (pinned in package.json, bundled — no CDN), registered with
// only the parts used. Colours come from the page's CSS variables, so both colour schemes
// read; animation is off, so a chart is drawn at once and the same every time.

import { ArcElement, BarController, BarElement, CategoryScale, Chart, ChartConfiguration, DoughnutController, Legend, LinearScale, Tooltip } from 'chart.js';

Chart.register(BarController, BarElement, CategoryScale, LinearScale, Legend, Tooltip, DoughnutController, ArcElement);

/** Series colours that hold on both the light and the dark background. */
const PALETTE = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac'];
const STATUS_COLOURS: Record<string, string> = { completed: '#59a14f', error: '#e15759', cancelled: '#f28e2b', live: '#4e79a7' };

export function seriesColour(name: string, i: number): string {
  return STATUS_COLOURS[name] ?? PALETTE[i % PALETTE.length];
}

function cssVar(name: string): string {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || '#888';
}

export interface Series {
  label: string;
  data: number[];
}

const charts = new Map<HTMLCanvasElement, Chart>();

/** Draws (or redraws) a bar chart on `canvas`. */
export function barChart(canvas: HTMLCanvasElement, labels: string[], series: Series[], opts: { stacked?: boolean; horizontal?: boolean; unit?: string } = {}): void {
  charts.get(canvas)?.destroy();
  const fg = cssVar('--fg');
  const grid = cssVar('--border');
  const config: ChartConfiguration<'bar'> = {
    type: 'bar',
    data: {
      labels,
      datasets: series.map((s, i) => ({ label: s.label, data: s.data, backgroundColor: seriesColour(s.label, i), borderWidth: 0 })),
    },
    options: {
      animation: false,
      responsive: true,
      maintainAspectRatio: false,
      indexAxis: opts.horizontal ? 'y' : 'x',
      plugins: { legend: { display: series.length > 1, labels: { color: fg } }, tooltip: { enabled: true } },
      scales: {
        x: { stacked: !!opts.stacked, ticks: { color: fg }, grid: { color: grid } },
        y: { stacked: !!opts.stacked, ticks: { color: fg }, grid: { color: grid }, beginAtZero: true },
      },
    },
  };
  charts.set(canvas, new Chart(canvas, config));
}

export function doughnutChart(canvas: HTMLCanvasElement, labels: string[], data: number[]): void {
  charts.get(canvas)?.destroy();
  const fg = cssVar('--fg');
  charts.set(
    canvas,
    new Chart(canvas, {
      type: 'doughnut',
      data: { labels, datasets: [{ data, backgroundColor: labels.map((l, i) => seriesColour(l, i + 4)), borderWidth: 0 }] },
      options: { animation: false, responsive: true, maintainAspectRatio: false, plugins: { legend: { position: 'right', labels: { color: fg } } } },
    }),
  );
}
