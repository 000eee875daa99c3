// Drives docs/integrations.md's useChat page, built and served by Next.js, in Debian's headless
// Chromium (run by tests/blackbox/nextjs_chat.rs):
//
//   node drive.mjs NEXT_BASE THREAD_ID
//
// Types a message and watches the assistant's answer stream in; reloads the page mid-run and
// watches useChat's `resume: true` reconnect (GET /api/chat/<id>/stream) and finish the same
// message; then sends a second message on the same chat. Prints one JSON line.
import { chromium } from 'playwright-core';

const [base, thread] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
    '--disable-dev-shm-usage', '--no-first-run', '--disable-extensions'],
});
const deadline = (ms) => ({ timeout: ms });
try {
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', e => errors.push(String(e)));
  const chatResponses = [];
  page.on('response', r => {
    const path = new URL(r.url()).pathname;
    if (path.startsWith('/api/chat')) chatResponses.push({ method: r.request().method(), path, status: r.status() });
  });
  const said = (role) => page.$$eval('p', (ps, role) =>
    ps.map(p => p.textContent).filter(t => t.startsWith(`${role}: `)).map(t => t.slice(role.length + 2)), role);
  const input = page.locator('input[name=q]');
  const send = async (text) => {
    await input.waitFor(deadline(30_000));
    await page.waitForFunction(() => !document.querySelector('input[name=q]').disabled, null, deadline(30_000));
    await input.fill(text);
    await input.press('Enter');
  };

  await page.goto(`${base}/?thread=${encodeURIComponent(thread)}`);
  await send('Give me a long answer');
  // The answer streams in: its text is seen growing, several lengths, before the reload.
  const lengths = [];
  const until = Date.now() + 30_000;
  while (Date.now() < until) {
    const text = (await said('assistant'))[0] ?? '';
    if (text.length > 0 && lengths[lengths.length - 1] !== text.length) lengths.push(text.length);
    if (lengths.length >= 3) break;
    await page.waitForTimeout(20);
  }
  const beforeReload = { user: await said('user'), assistant: await said('assistant'), lengths };

  // Reload mid-run: the page starts empty, and useChat's resume replays the live message.
  const resumed = page.waitForResponse(r => new URL(r.url()).pathname === `/api/chat/${thread}/stream`, deadline(30_000));
  await page.reload();
  const resume = await resumed;
  await page.waitForFunction(() => document.querySelector('input[name=q]') && !document.querySelector('input[name=q]').disabled
    && [...document.querySelectorAll('p')].some(p => p.textContent.startsWith('assistant: ')), null, deadline(120_000));
  const afterReload = { status: resume.status(), user: await said('user'), assistant: await said('assistant') };

  // The same chat goes on: a second message, answered in the page.
  await send('Build me a workflow');
  await page.waitForFunction(() => [...document.querySelectorAll('p')].filter(p => p.textContent.startsWith('assistant: ')).length === 2
    && !document.querySelector('input[name=q]').disabled, null, deadline(120_000));
  const second = { user: await said('user'), assistant: await said('assistant') };
  await page.screenshot({ path: process.env.SCREENSHOT ?? '/tmp/nextjs-chat.png', fullPage: true });
  console.log(JSON.stringify({ beforeReload, afterReload, second, chatResponses, errors }));
} finally {
  await browser.close();
}
