// The API reference page (/api-docs) in Debian's headless Chromium (run by
// tests/blackbox/api_docs.rs): usage: node api_docs.mjs <base-url> <screenshot-dir>.
// Checks that it renders every path of /openapi.json, that "Test Request" opens Scalar's client
// on GET /healthz, that its Send button sends the request to this server and the page shows the
// answer (200, `{"ok": true}`), and that the page loads nothing from any other origin.
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

  // Try a JSON route from the page: Scalar's client sends GET /healthz to this server and shows
  // the answer. Its "Test Request" button is per operation (named "Test Request (get /healthz)");
  // the send button is the one named "Send get request to <url>" — the "Send Request ⌃↵" text
  // nearby is only the keyboard hint, and clicking it sends nothing.
  await page.getByRole('button', { name: /test request\s*\(get \/healthz\)/i }).click();
  const send = page.getByRole('button', { name: /^send get request to /i });
  await send.waitFor({ state: 'visible' });
  step('client-opens');
  const sendName = (await send.getAttribute('aria-label')) ?? (await send.innerText());
  if (!sendName.includes(`${base}/healthz`)) throw new Error(`the client would send elsewhere: ${sendName}`);
  const answered = page.waitForResponse((r) => r.url() === `${base}/healthz` && r.request().method() === 'GET');
  await send.click();
  const resp = await answered;
  if (resp.status() !== 200) throw new Error(`GET /healthz from the page answered ${resp.status()}`);
  const body = await resp.json();
  if (body.ok !== true) throw new Error(`GET /healthz from the page answered ${JSON.stringify(body)}`);
  // The page shows the status and the body it got.
  await page.getByText('200 OK').first().waitFor({ state: 'visible' });
  await page.waitForFunction(() => /"ok":\s*true/.test(document.body.innerText));
  await page.waitForTimeout(300);
  await page.screenshot({ path: join(shots, 'api-docs-try.png') });
  step('request-sent-and-shown');
} finally {
  await browser.close();
}
if (foreign.length) throw new Error(`/api-docs loaded from other origins: ${[...new Set(foreign)].join(', ')}`);
step('nothing-from-elsewhere');
if (problems.length) throw new Error(`page problems:\n${problems.join('\n')}`);
step('no-errors');
