// The API reference page (/api-docs) in Debian's headless Chromium (run by
// tests/blackbox/api_docs.rs): usage: node api_docs.mjs <base-url> <screenshot-dir>.
// Checks that it renders every path of /openapi.json, that "Test Request" opens Scalar's client
// on an operation, and that the page loads nothing from any other origin. (Sending a request
// from that client is not automated yet.)
import { chromium } from 'playwright-core';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

const [base, shots] = process.argv.slice(2);
if (!base || !shots) throw new Error('usage: node api_docs.mjs <base-url> <screenshot-dir>');
mkdirSync(shots, { recursive: true });
const origin = new URL(base).origin;
const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox'] });
const problems = [];
const foreign = [];
const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
page.setDefaultTimeout(30_000);
page.on('pageerror', (e) => problems.push(`page error: ${e}`));
// Scalar's style sheet names its fonts on fonts.scalar.com; the page's CSP (`font-src 'self'
// data:`) blocks them and the page uses the system's fonts. Nothing else may be asked of another
// origin, and nothing at all may reach one: every such request is aborted here too.
const BLOCKED_FONTS = /^https:\/\/fonts\.scalar\.com\/[a-z-]+\.woff2$/;
await page.route('**/*', (route) => {
  const u = route.request().url();
  if (u.startsWith(origin) || u.startsWith('data:') || u.startsWith('blob:')) return route.continue();
  if (!BLOCKED_FONTS.test(u)) foreign.push(u);
  return route.abort();
});
page.on('console', (m) => {
  if (m.type() === 'error' && !/fonts\.scalar\.com|script-src' was not explicitly set|Failed to load resource/.test(m.text())) problems.push(`console: ${m.text()}`);
});
const step = (name) => console.log(`STEP ${name} ok`);

try {
  await page.goto(`${base}/api-docs#tag/service/GET/healthz`);
  const doc = await (await fetch(`${base}/openapi.json`)).json();
  const ops = [];
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) ops.push({ path, method, summary: op.summary, id: op.operationId });
  }
  // Every operation is on the page: Scalar lists each path once it has rendered.
  await page.waitForFunction(() => document.body.innerText.includes('/instance-ai/chat/{thread_id}'), null, { timeout: 60_000 });
  await page.getByRole('heading', { name: '/healthz' }).first().waitFor({ state: 'visible' });
  await page.waitForTimeout(1500);
  const text = await page.evaluate(() => document.body.innerText);
  const missing = [...new Set(ops.map((o) => o.path))].filter((p) => !text.includes(p));
  if (missing.length) throw new Error(`paths not shown on /api-docs: ${missing.join(', ')}`);
  step('every-route-shown');
  await page.screenshot({ path: join(shots, 'api-docs.png') });

  // Try a JSON route from the page: the "Test Request" client sends it to this server.
  // Scalar's "Test Request" opens its client on an operation.
  await page.getByRole('button', { name: /test request/i }).first().click();
  await page.getByText('Send Request').first().waitFor({ state: 'visible' });
  await page.waitForTimeout(500);
  await page.screenshot({ path: join(shots, 'api-docs-client.png') });
  step('client-opens');
} finally {
  await browser.close();
}
if (foreign.length) throw new Error(`/api-docs loaded from other origins: ${[...new Set(foreign)].join(', ')}`);
step('nothing-from-elsewhere');
if (problems.length) throw new Error(`page problems:\n${problems.join('\n')}`);
step('no-errors');
