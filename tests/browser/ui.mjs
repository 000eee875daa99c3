// Drives the threadstream web page in Debian's headless Chromium (run by tests/blackbox/browser.rs):
// usage: node ui.mjs <base-url> <screenshot-dir>. Every step checks what the page shows; the
// first failed check throws, so the exit status is non-zero and the message says which step.
// Prints `STEP <name> ok` after each step so the Rust test can assert that all of them ran.
import { chromium } from 'playwright-core';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

// axe-core (pinned in package.json), evaluated in the page through the DevTools protocol (the
// page's CSP allows no inline script, and none is needed for this).
const AXE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

/** Serious and critical WCAG 2 A/AA violations axe finds in the page as it is now. */
async function axeViolations(page) {
  await page.evaluate(AXE);
  return page.evaluate(async () => {
    const r = await window.axe.run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa'] } });
    return r.violations
      .filter((v) => v.impact === 'serious' || v.impact === 'critical')
      .map((v) => `${v.id} (${v.impact}): ${v.help} — ${v.nodes.map((n) => n.target.join(' ')).slice(0, 5).join(', ')}`);
  });
}

const [base, shots] = process.argv.slice(2);
if (!base || !shots) throw new Error('usage: node ui.mjs <base-url> <screenshot-dir>');
const CHROMIUM = '/usr/bin/chromium';
if (!existsSync(CHROMIUM)) {
  console.error(`${CHROMIUM} is missing: install it with \`apt-get install -y chromium\``);
  process.exit(2);
}
mkdirSync(shots, { recursive: true });

const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
const pageErrors = [];
const step = (name) => console.log(`STEP ${name} ok`);
/** URLs whose error status a step provoked on purpose (not a page error). */
const expectedFailures = new Set();

async function newPage(viewport = { width: 1280, height: 900 }) {
  const page = await browser.newPage({ viewport });
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  // Failed loads are reported by the response handler with their URL (the console message has
  // none); the browser's own /favicon.ico probe is the one 404 that is expected.
  page.on('console', (m) => {
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) pageErrors.push(`console: ${m.text()}`);
  });
  page.on('response', (r) => {
    if (r.status() >= 400 && !r.url().endsWith('/favicon.ico') && !expectedFailures.has(r.url())) pageErrors.push(`HTTP ${r.status()} ${r.url()}`);
  });
  page.setDefaultTimeout(30_000);
  return page;
}

/** Creates a thread through the page and waits for its chat view. */
async function newThread(page) {
  // Wait for the hash to name a NEW thread (the previous one is also '#/t/…') and for its
  // empty chat to be shown, so the next message goes to it.
  const before = await page.evaluate(() => location.hash);
  await page.click('#new-thread');
  await page.waitForFunction((b) => location.hash.startsWith('#/t/') && location.hash !== b, before);
  await page.waitForSelector('#chat-view:not([hidden])');
  await page.waitForFunction(() => document.querySelectorAll('#messages > *').length === 0);
  await page.waitForSelector('#composer-input:enabled');
  return decodeURIComponent(await page.evaluate(() => location.hash.split('/')[2]));
}

async function send(page, text) {
  await page.fill('#composer-input', text);
  await page.press('#composer-input', 'Enter');
}

/** The run article that is the last one in the thread. */
const lastRun = (page) => page.locator('article.msg.run').last();

async function finalText(page, run) {
  return (await run.locator('.md.text').allInnerTexts()).join('\n');
}

try {
  const page = await newPage();
  await page.goto(base + '/');
  await page.waitForSelector('#empty-view');
  step('load');

  // 1. A normal message: the tree grows (plan, tool calls, a sub-agent), then a confirmation
  //    card on the delete-workflow call: deny it.
  await newThread(page);
  await send(page, 'Build me a "Daily digest" workflow');
  await page.waitForSelector('#send[disabled], #composer-input[disabled]');
  const run1 = lastRun(page);
  await run1.locator('.tool').first().waitFor();
  await run1.locator('details.subagent .role').first().waitFor(); // a sub-agent node with its role
  await run1.locator('.tasks').first().waitFor();
  const card1 = run1.locator('.card[data-request-id]').first();
  await card1.waitFor();
  await page.screenshot({ path: join(shots, 'confirmation.png'), fullPage: true });
  await card1.getByRole('button', { name: 'Deny' }).click();
  await run1.locator('[data-status="completed"]').first().waitFor();
  await card1.locator('.card-outcome.denied').waitFor();
  if ((await finalText(page, run1)).trim() === '') throw new Error('run 1 rendered no text');
  step('tree-and-deny');

  // 2. A second message: approve its confirmation; the card shows the outcome, the run completes.
  await send(page, 'Build me a "Weekly report" workflow');
  await page.waitForFunction(() => document.querySelectorAll('article.msg.run').length === 2);
  const run2 = lastRun(page);
  const card2 = run2.locator('.card[data-request-id]').first();
  await card2.waitFor();
  // Keyboard: the card's buttons take focus in order, and Enter presses the focused one.
  await card2.getByRole('button', { name: 'Deny' }).focus();
  await page.keyboard.press('Shift+Tab');
  const focused = await page.evaluate(() => document.activeElement?.textContent);
  if (focused !== 'Approve') throw new Error(`Shift+Tab from Deny focused ${JSON.stringify(focused)}, not Approve`);
  await page.keyboard.press('Enter');
  await card2.locator('.card-outcome.approved').waitFor();
  await run2.locator('.run-footer [data-status="completed"]').waitFor();
  if (!(await page.locator('#composer-input').isEnabled())) throw new Error('input still disabled after the run');
  await page.screenshot({ path: join(shots, 'tree.png'), fullPage: true });
  step('approve');

  // 2a. Agent activity a person reads: each tool call one line in words with its details
  //     folded away, plan calls as checklist changes (no JSON), the finished sub-agent folded
  //     to one line, the denied confirmation and its failed call marked, icons as SVG.
  await page.evaluate(() => window.scrollTo(0, 0));
  const activity = await page.evaluate(() => {
    const runs = [...document.querySelectorAll('article.msg.run')];
    const sentence = (run, name) => [...run.querySelectorAll(`.tool[data-tool-name="${name}"] .tool-sentence`)].map((e) => e.textContent);
    const [r1, r2] = runs;
    return {
      list: sentence(r2, 'list-workflows'),
      create: sentence(r2, 'create-workflow'),
      delegate: sentence(r2, 'delegate'),
      deleted: sentence(r2, 'delete-workflow'),
      deniedCall: sentence(r1, 'delete-workflow'),
      deniedCallState: r1.querySelector('.tool[data-tool-name="delete-workflow"]')?.dataset.state,
      plans: [...r2.querySelectorAll('.tool.plan')].map((e) => e.textContent.trim()),
      openDetails: r2.querySelectorAll('details.tool-line[open]').length,
      foldedDetails: r2.querySelectorAll('details.tool-line:not([open])').length,
      visiblePre: [...r2.querySelectorAll('.tool pre')].filter((p) => p.checkVisibility()).length,
      subagents: [...r2.querySelectorAll('details.subagent')].map((d) => ({ open: d.open, line: d.querySelector('summary').textContent })),
      deniedCard: r1.querySelector('.card')?.className,
      deniedBorder: getComputedStyle(r1.querySelector('.card')).borderTopColor,
      bad: getComputedStyle(r1.querySelector('.card-outcome.denied')).color,
      svgIcons: document.querySelectorAll('.icon-svg svg').length,
      emoji: (document.body.innerText.match(/\p{Extended_Pictographic}/gu) ?? []).join(''),
    };
  });
  const wantOne = (got, re, what) => {
    if (!got.length || !got.every((t) => re.test(t))) throw new Error(`${what}: ${JSON.stringify(got)}`);
  };
  wantOne(activity.list, /^Listed \d+ workflows?$/, 'list-workflows line');
  wantOne(activity.create, /^Created workflow .*Weekly report.* with 3 nodes$/, 'create-workflow line');
  wantOne(activity.delegate, /^Delegated to a /, 'delegate line');
  wantOne(activity.deleted, /^Deleted workflow /, 'approved delete-workflow line');
  wantOne(activity.deniedCall, /^Denied: deleting workflow /, 'denied delete-workflow line');
  if (activity.deniedCallState !== 'error') throw new Error(`the denied call is ${activity.deniedCallState}`);
  if (activity.plans.length < 3 || activity.plans.some((p) => /[{}]|"(id|status|tasks|description)"/.test(p))) throw new Error(`plan calls: ${JSON.stringify(activity.plans)}`);
  if (!/^Planned 3 tasks/.test(activity.plans[0]) || !activity.plans.some((p) => /Finished/.test(p) && /Started/.test(p))) {
    throw new Error(`plan calls do not read as checklist changes: ${JSON.stringify(activity.plans)}`);
  }
  if (activity.openDetails !== 0 || activity.foldedDetails < 3 || activity.visiblePre !== 0) {
    throw new Error(`tool details are not folded: ${JSON.stringify(activity)}`);
  }
  if (!activity.subagents.length || activity.subagents.some((a) => a.open || !/ — done/.test(a.line))) {
    throw new Error(`finished sub-agents are not folded to one line: ${JSON.stringify(activity.subagents)}`);
  }
  if (!/settled-denied/.test(activity.deniedCard) || activity.deniedBorder !== activity.bad) {
    throw new Error(`the denied card does not stand out: ${activity.deniedCard} ${activity.deniedBorder} vs ${activity.bad}`);
  }
  if (activity.svgIcons < 5 || activity.emoji) throw new Error(`icons: ${activity.svgIcons} SVG, emoji ${JSON.stringify(activity.emoji)}`);
  // Unfolding a call shows its arguments and result; the page remembers it across re-renders.
  const createLine = run2.locator('.tool[data-tool-name="create-workflow"] details.tool-line');
  await run2.locator('details.subagent > summary').first().click();
  await createLine.locator('summary').click();
  await createLine.locator('pre.tool-result').waitFor({ state: 'visible' });
  const createResult = JSON.parse(await createLine.locator('pre.tool-result').innerText());
  if (!String(createResult.name).includes('Weekly report')) throw new Error(`create-workflow result: ${JSON.stringify(createResult)}`);
  await page.screenshot({ path: join(shots, 'activity.png'), fullPage: true });
  // The header never lies over content: it is in the flow, above everything, in a scrolled
  // view and in the full-page capture above; nothing else on the chat is fixed or sticky.
  await page.evaluate(() => window.scrollTo(0, document.documentElement.scrollHeight));
  const header = await page.evaluate(() => {
    const top = document.querySelector('header.top');
    const hb = top.getBoundingClientRect().bottom + window.scrollY;
    const below = [...document.querySelectorAll('main *, #sidebar')].filter((e) => e.getClientRects().length).map((e) => e.getBoundingClientRect().top + window.scrollY);
    const stuck = [...document.querySelectorAll('body *')].filter((e) => ['fixed', 'sticky'].includes(getComputedStyle(e).position) && e.getClientRects().length).map((e) => e.id || e.className);
    return { position: getComputedStyle(top).position, bottom: hb, minContent: Math.min(...below), scrolled: window.scrollY, stuck };
  });
  if (header.position === 'fixed' || header.position === 'sticky' || header.stuck.length || header.minContent < header.bottom - 0.5 || header.scrolled <= 0) {
    throw new Error(`the header can cover content: ${JSON.stringify(header)}`);
  }
  step('readable-activity');

  const run2Url = page.url();
  // 2b. Edit and resend the second message: the page forks the thread just before it, sends
  //     the edited text there and shows the fork — the first exchange, then the edited message
  //     and its new run — while the original thread keeps both of its runs.
  const original = decodeURIComponent(page.url().split('/t/')[1]);
  await page.locator('article.msg.user').nth(1).getByRole('button', { name: 'Edit and resend' }).click();
  await page.getByLabel('Edited message').fill('Build me a "Monthly report" workflow');
  await page.getByRole('button', { name: 'Send as a new thread' }).click();
  await page.waitForFunction((o) => location.hash.startsWith('#/t/') && decodeURIComponent(location.hash.split('/')[2]) !== o, original);
  const forkId = decodeURIComponent(page.url().split('/t/')[1]);
  await page.waitForFunction(() => document.querySelectorAll('article.msg.run').length === 2);
  const forked = lastRun(page);
  const card2b = forked.locator('.card[data-request-id]').first();
  await card2b.waitFor();
  await card2b.getByRole('button', { name: 'Approve' }).click();
  await forked.locator('.run-footer [data-status="completed"]').waitFor();
  const forkUsers = await page.locator('article.msg.user .md').allInnerTexts();
  if (forkUsers.length !== 2 || !forkUsers[0].includes('Daily digest') || !forkUsers[1].includes('Monthly report')) {
    throw new Error(`the fork shows the user messages ${JSON.stringify(forkUsers)}`);
  }
  if ((await finalText(page, forked)).trim() === '') throw new Error('the fork\'s run rendered no text');
  await page.locator(`#thread-list li[data-thread-id="${forkId}"]`).waitFor();
  const originalMessages = await page.evaluate(async (id) => (await (await fetch(`/instance-ai/threads/${encodeURIComponent(id)}/messages`)).json()).messages, original);
  const originalUsers = originalMessages.filter((m) => m.role === 'user').map((m) => m.content);
  if (originalMessages.length !== 4 || !originalUsers[1].includes('Weekly report')) {
    throw new Error(`the original changed: ${JSON.stringify(originalUsers)}`);
  }
  await page.screenshot({ path: join(shots, 'edit-and-resend.png'), fullPage: true });
  step('edit-and-resend');

  // 3. Stop a long run: input disabled while live, Stop ends it as cancelled.
  await newThread(page);
  await send(page, 'tell me something long');
  const run3 = lastRun(page);
  await run3.locator('.md.text').first().waitFor();
  if (await page.locator('#stop').isDisabled()) throw new Error('Stop is disabled during a live run');
  // While the answer streams, the view follows the bottom only while the reader is there:
  // scrolled up, it stays put as the text grows; back at the bottom, it follows again.
  await page.waitForFunction(() => document.documentElement.scrollHeight > window.innerHeight + 600);
  await page.mouse.move(640, 400);
  await page.mouse.wheel(0, -400);
  await page.waitForTimeout(200);
  const held = await page.evaluate(() => ({ y: window.scrollY, h: document.documentElement.scrollHeight }));
  await page.waitForFunction((h0) => document.documentElement.scrollHeight > h0 + 300, held.h);
  const heldAfter = await page.evaluate(() => window.scrollY);
  if (Math.abs(heldAfter - held.y) > 1) throw new Error(`the view moved from ${held.y} to ${heldAfter} while the reader was scrolled up`);
  await page.keyboard.press('End');
  await page.waitForTimeout(200);
  const h1 = await page.evaluate(() => document.documentElement.scrollHeight);
  await page.waitForFunction((h) => document.documentElement.scrollHeight > h + 300, h1);
  await page.waitForTimeout(100);
  const gap = await page.evaluate(() => document.documentElement.scrollHeight - (window.scrollY + window.innerHeight));
  if (gap > 60) throw new Error(`back at the bottom, the view does not follow (${gap}px short)`);
  console.log(`follow: held at ${held.y}px while scrolled up; ${gap}px from the bottom while following`);
  // Esc stops the run.
  await page.keyboard.press('Escape');
  await run3.locator('.run-footer [data-status="cancelled"]').waitFor();
  if (!(await page.locator('#composer-input').isEnabled())) throw new Error('input still disabled after cancel');
  step('stop');

  // 3b. Hostile Markdown in a message is shown as text, never run; `crash` makes the demo
  //     provider fail, and the error is shown on the run where it happened.
  const hostile =
    'crash <script>window.__pwned = 1</script> [click](javascript:window.__pwned=2) ' +
    '<img src=x onerror="window.__pwned=3"> **bold** [safe](https://example.com/)';
  await send(page, hostile);
  const userMsg = page.locator('article.msg.user').last();
  await userMsg.locator('strong').waitFor();
  const crashed = lastRun(page);
  await crashed.locator('.run-footer [data-status="error"]').waitFor();
  await crashed.locator('.run-reason').waitFor();
  const probe = await userMsg.evaluate((el) => ({
    pwned: window.__pwned,
    scripts: el.querySelectorAll('script, img, [onerror]').length,
    jsLinks: el.querySelectorAll('a[href^="javascript" i]').length,
    safe: el.querySelector('a[href="https://example.com/"]')?.textContent,
    text: el.textContent,
  }));
  if (probe.pwned !== undefined || probe.scripts || probe.jsLinks) throw new Error(`hostile markup ran: ${JSON.stringify(probe)}`);
  if (probe.safe !== 'safe' || !probe.text.includes('<script>')) throw new Error(`markdown not rendered as expected: ${JSON.stringify(probe)}`);
  step('hostile-markdown-and-error');

  // 4. Reload mid-run: the text after the run ends equals the one an uninterrupted page shows.
  const reference = await newPage();
  await reference.goto(base + '/');
  const refThread = await newThread(reference);
  await send(reference, 'a long story please');
  const refRun = lastRun(reference);
  await refRun.locator('.run-footer [data-status="completed"]').waitFor({ timeout: 90_000 });
  const refText = await finalText(reference, refRun);
  if (refText.length < 1000) throw new Error(`reference text too short: ${refText.length}`);

  await newThread(page);
  await send(page, 'a long story please');
  await lastRun(page).locator('.md.text').first().waitFor();
  await page.waitForTimeout(300);
  // The point is a reload in the middle of the stream: make sure it still is.
  if ((await lastRun(page).getAttribute('data-status')) !== 'active') throw new Error('the long run ended before the reload');
  await page.reload();
  const reloaded = lastRun(page);
  await reloaded.waitFor();
  await reloaded.locator('.run-footer [data-status="completed"]').waitFor({ timeout: 90_000 });
  const reloadedText = await finalText(page, reloaded);
  if (reloadedText !== refText) {
    throw new Error(
      `reload mid-run: ${reloadedText.length} chars vs ${refText.length} uninterrupted\n` +
        `reloaded starts: ${reloadedText.slice(0, 200)}\nreference starts: ${refText.slice(0, 200)}`,
    );
  }
  if ((await page.locator('article.msg.run').count()) !== 1) throw new Error('run duplicated after reload');
  await reference.close();
  void refThread;
  step('reload');

  // 5. The audit view of the thread, from the finished run's Timeline link: that run's rows,
  //    its deltas coalesced (id range and count), every event counted once, filters by type,
  //    time and text, and the NDJSON download matching what is shown.
  const longRunId = await reloaded.getAttribute('data-run-id');
  await reloaded.locator('a.timeline-link').click();
  await page.waitForSelector('#audit-view:not([hidden])');
  await page.waitForSelector('#audit-rows .window-sizer .audit-row');
  if ((await page.inputValue('#audit-run')) !== longRunId) throw new Error(`the audit view is not filtered to run ${longRunId}`);
  const auditRows = () => page.evaluate(() => [...document.querySelectorAll('#audit-rows .window-sizer .audit-row')].map((r) => ({
    ids: r.children[0].textContent, type: r.dataset.type, run: r.children[2].textContent, text: r.children[5].textContent, href: r.querySelector('a.in-chat')?.getAttribute('href'),
  })));
  const countText = () => page.locator('#audit-count').innerText();
  let rowsNow = await auditRows();
  if (rowsNow.some((r) => r.run !== longRunId)) throw new Error('rows of other runs under a run filter');
  const coalesced = rowsNow.filter((r) => r.type === 'text-delta');
  if (!coalesced.length || !coalesced.every((r) => /^(\d+)–(\d+) ×[\d,]+$/.test(r.ids))) throw new Error(`text deltas not coalesced: ${JSON.stringify(coalesced.map((r) => r.ids))}`);
  const [, a, b] = /^(\d+)–(\d+)/.exec(coalesced[0].ids);
  if (!(Number(b) > Number(a))) throw new Error(`id range ${coalesced[0].ids}`);
  const counted = /\(([\d,]+) of ([\d,]+) events\)/.exec(await countText());
  const href = await page.getAttribute('#audit-download', 'href');
  if (!href || !href.includes('/export?runId=')) throw new Error(`download link: ${href}`);
  const ndjson = (await page.evaluate(async (u) => (await fetch(u)).text(), href)).trim().split('\n');
  if (Number(counted[1].replace(/,/g, '')) !== ndjson.length) throw new Error(`shown ${counted[1]} events, the NDJSON download has ${ndjson.length}`);
  if (rowsNow.length >= ndjson.length / 10) throw new Error(`${rowsNow.length} rows for ${ndjson.length} events: deltas not coalesced`);
  await page.screenshot({ path: join(shots, 'audit.png'), fullPage: true });
  await page.selectOption('#audit-type', 'run-finish');
  await page.waitForFunction(() => [...document.querySelectorAll('#audit-rows .window-sizer .audit-row')].every((r) => r.dataset.type === 'run-finish'));
  rowsNow = await auditRows();
  if (rowsNow.length !== 1) throw new Error(`type filter run-finish shows ${rowsNow.length} rows`);
  await page.selectOption('#audit-type', '');
  // Text search: a word of the story; then nothing for a word it never says.
  const word = coalesced[0].text.split(/\s+/).find((w) => /^[a-z]{5,}$/i.test(w));
  await page.fill('#audit-search', word);
  await page.waitForFunction((w) => { const r = [...document.querySelectorAll('#audit-rows .window-sizer .audit-row')]; return r.length > 0 && r.every((x) => x.textContent.toLowerCase().includes(w.toLowerCase())); }, word);
  await page.fill('#audit-search', 'zzzq-never-said');
  await page.waitForFunction(() => document.querySelectorAll('#audit-rows .window-sizer .audit-row').length === 0);
  await page.fill('#audit-search', '');
  // Time filter: from after the last event, nothing; from long before, everything again.
  const lastTs = JSON.parse(ndjson[ndjson.length - 1]).ts;
  const setFrom = (v) => page.evaluate((x) => { const i = document.getElementById('audit-from'); i.value = x; i.dispatchEvent(new Event('change')); }, v);
  await setFrom(new Date(lastTs + 1000).toISOString().slice(0, 19));
  await page.waitForFunction(() => document.querySelectorAll('#audit-rows .window-sizer .audit-row').length === 0);
  await setFrom('2020-01-01T00:00');
  await page.waitForSelector('#audit-rows .window-sizer .audit-row');
  // Agent filter and all runs: the thread has one agent and one run here.
  await page.selectOption('#audit-run', '');
  await page.waitForFunction(() => /of [\d,]+ events/.test(document.getElementById('audit-count').textContent));
  step('timeline');
  // 6. Phone-sized screen: the page renders a finished thread without horizontal scrolling.
  const phone = await newPage({ width: 390, height: 844 });
  await phone.goto(page.url().replace(/\/audit.*$/, ''));
  await phone.waitForSelector('article.msg.run');
  const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  await phone.screenshot({ path: join(shots, 'phone.png') });
  if (overflow > 2) throw new Error(`phone layout scrolls horizontally by ${overflow}px`);
  step('phone');

  // 7. Rename and delete a thread from the list (the delete asks window.confirm: accept it).
  const items = page.locator('#thread-list li');
  const countBefore = await items.count();
  const first = items.first();
  await first.getByRole('button', { name: /^Rename / }).click();
  await page.getByLabel('New title').fill('Renamed by the browser test');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.locator('#thread-list li a', { hasText: 'Renamed by the browser test' }).waitFor();
  page.once('dialog', (d) => d.accept());
  await page.locator('#thread-list li', { hasText: 'Renamed by the browser test' }).getByRole('button', { name: /^Delete / }).click();
  await page.waitForFunction((n) => document.querySelectorAll('#thread-list li').length === n - 1, countBefore);
  if (await page.locator('#thread-list li', { hasText: 'Renamed by the browser test' }).count()) throw new Error('deleted thread still listed');
  step('rename-delete');

  // 8. A question wizard (demo keyword `questions`): one question at a time — single choice,
  //    multiple choice, free text — with the intro shown once; the answers reach the agent,
  //    which repeats them, and the card shows it was answered.
  await newThread(page);
  await send(page, 'Ask me some questions first');
  const run8 = lastRun(page);
  const card8 = run8.locator('.card[data-request-id]').first();
  await card8.waitFor();
  await card8.locator('legend', { hasText: 'Question 1 of 3' }).waitFor();
  await card8.getByLabel('A webhook').check();
  await card8.getByRole('button', { name: 'Next' }).click();
  await card8.locator('legend', { hasText: 'Question 2 of 3' }).waitFor();
  await card8.getByLabel('Slack').check();
  await card8.getByLabel('A spreadsheet').check();
  await card8.getByRole('button', { name: 'Next' }).click();
  await card8.locator('legend', { hasText: 'Question 3 of 3' }).waitFor();
  await card8.getByLabel('What should it be called?').fill('Lead router');
  const intros = await card8.evaluate((el) => el.innerText.split('Three quick questions').length - 1);
  if (intros !== 1) throw new Error(`the intro is shown ${intros} times`);
  await page.screenshot({ path: join(shots, 'questions.png'), fullPage: true });
  await card8.getByRole('button', { name: 'Submit answers' }).click();
  await card8.locator('.card-outcome').waitFor();
  await run8.locator('.run-footer [data-status="completed"]').waitFor();
  const said = await finalText(page, run8);
  for (const want of ['trigger: A webhook', 'channels: Slack, A spreadsheet', 'name: Lead router']) {
    if (!said.includes(want)) throw new Error(`the agent did not get "${want}": ${JSON.stringify(said)}`);
  }
  step('question-wizard');

  // 8a. From the audit view of the "Weekly report" thread, a row links to where it happened
  //     in the chat: the sub-agent's create-workflow call, unfolded, in view and marked.
  const linkPage = await newPage();
  //     The filters come in the URL, so they are applied before the rows are drawn: typed into
  //     the search box, the filter applies after a debounce, and a click aimed at a row could
  //     land on another once it did (CI saw that under load).
  await linkPage.goto(`${run2Url}/audit?type=tool-call&q=create-workflow`);
  await linkPage.waitForSelector('#audit-rows .window-sizer .audit-row');
  if (await linkPage.inputValue('#audit-search') !== 'create-workflow') throw new Error('the audit URL\'s q= is not in the search box');
  await linkPage.waitForFunction(() => [...document.querySelectorAll('#audit-rows .window-sizer .audit-row')].every((r) => r.dataset.type === 'tool-call'));
  const toolRowLink = linkPage.locator('#audit-rows .window-sizer .audit-row').filter({ has: linkPage.locator('.text', { hasText: /^create-workflow / }) }).locator('a.in-chat').first();
  const toolHref = await toolRowLink.getAttribute('href');
  if (!/\/run\/[^/]+\/tool\/[^/]+$/.test(toolHref)) throw new Error(`a tool-call row links to ${toolHref}`);
  //     The link is activated as an element (its own click()), not by a click at coordinates:
  //     the windowed list redraws its rows on every scroll, and a pointer click aimed while it
  //     redraws can land beside the link (CI twice saw the chat never open after the click,
  //     under load; never reproduced alone). What is checked is where the link leads.
  await toolRowLink.waitFor({ state: 'visible' });
  await toolRowLink.evaluate((a) => a.click());
  try {
    await linkPage.waitForSelector('#chat-view:not([hidden])', { timeout: 15000 });
  } catch (e) {
    const why = await linkPage.evaluate(() => JSON.stringify({
      hash: location.hash,
      hidden: ['empty-view', 'chat-view', 'audit-view', 'analytics-view'].map((id) => [id, document.getElementById(id)?.hidden]),
    }));
    throw new Error(`the chat did not open from the audit link ${toolHref}: ${why}`);
  }
  const focusedCall = linkPage.locator('.tool.focused[data-tool-name="create-workflow"]');
  await focusedCall.waitFor();
  const inView = await focusedCall.evaluate((el) => { const r = el.getBoundingClientRect(); return r.top >= 0 && r.bottom <= window.innerHeight && el.offsetParent !== null; });
  if (!inView) throw new Error('the linked tool call is not in view');
  await linkPage.screenshot({ path: join(shots, 'audit-link.png') });
  await linkPage.close();
  step('audit-link-to-chat');

  // 8b. A 409 (the thread got a run from elsewhere between the page's last event and the send):
  //     the page says so in words, keeps the typed text, and the input works again.
  const chatUrl = `${base}/instance-ai/chat/${encodeURIComponent(decodeURIComponent(page.url().split('/t/')[1]))}`;
  expectedFailures.add(chatUrl);
  await page.route(chatUrl, (route) => route.fulfill({
    status: 409,
    contentType: 'application/json',
    body: JSON.stringify({ error: { code: 'run_in_progress', message: 'a run is already in progress' } }),
  }), { times: 1 });
  await send(page, 'Is this sent twice?');
  const banner = page.locator('#banner');
  await banner.waitFor();
  const said409 = await banner.innerText();
  if (!/already has a run in progress/.test(said409)) throw new Error(`409 message: ${said409}`);
  await page.waitForSelector('#composer-input:enabled');
  if ((await page.inputValue('#composer-input')) !== 'Is this sent twice?') throw new Error('the unsent message was lost');
  await page.screenshot({ path: join(shots, 'conflict-409.png'), fullPage: true });
  await page.fill('#composer-input', '');
  step('conflict-409');

  // 8d. A thread of 10,000 events (ingested: ten runs of tool calls, status lines and deltas
  //     of two responses), opened in the audit view: the first screen within 1 s, a windowed
  //     list (a few dozen rows in the DOM), and smooth scrolling — both measured here.
  const bigThread = await page.evaluate(async () => {
    const t = await (await fetch('/instance-ai/threads', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' })).json();
    let total = 0;
    for (let r = 0; r < 10; r++) {
      const run = `big-run-${r}`;
      const ev = (type, payload, responseId) => ({ type, runId: run, agentId: 'orch', payload, ...(responseId ? { responseId } : {}) });
      const events = [ev('run-start', { messageId: `big-msg-${r}` })];
      for (let i = 0; events.length < 999; i++) {
        const k = events.length % 7;
        if (k === 1) events.push(ev('tool-call', { toolCallId: `c${r}-${i}`, toolName: 'list-workflows', args: { limit: i } }));
        else if (k === 2) events.push(ev('tool-result', { toolCallId: `c${r}-${i - 1}`, result: { workflows: [], total: i } }));
        else if (k === 3) events.push(ev('status', { message: `step ${i} of run ${r}` }));
        else events.push(ev('text-delta', { text: `word${i} ` }, `resp-${r}-${i % 2}`));
      }
      events.push(ev('run-finish', { status: 'completed' }));
      const res = await fetch(`/instance-ai/threads/${encodeURIComponent(t.id)}/events`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ events }) });
      if (!res.ok) throw new Error(`ingest: ${res.status} ${await res.text()}`);
      total += events.length;
    }
    return { id: t.id, total };
  });
  if (bigThread.total !== 10_000) throw new Error(`ingested ${bigThread.total} events`);
  const big = await newPage();
  const t0 = Date.now();
  await big.goto(`${base}/#/t/${encodeURIComponent(bigThread.id)}/audit`);
  await big.waitForSelector('#audit-rows .window-sizer .audit-row');
  await big.waitForFunction(() => document.getElementById('audit-rows').dataset.firstScreenMs);
  const wallMs = Date.now() - t0;
  const bigStats = await big.evaluate(() => ({
    firstScreenMs: Number(document.getElementById('audit-rows').dataset.firstScreenMs),
    count: document.getElementById('audit-count').textContent,
    drawn: document.querySelectorAll('#audit-rows .window-sizer .audit-row').length,
  }));
  console.log(`audit 10k: first screen ${bigStats.firstScreenMs.toFixed(0)} ms in the page (fetch, parse, coalesce, draw), ${wallMs} ms from navigation; ${bigStats.count}; ${bigStats.drawn} rows in the DOM`);
  if (!/of 10,0\d\d events/.test(bigStats.count)) throw new Error(`the big thread shows ${bigStats.count}`);
  if (bigStats.firstScreenMs > 1000) throw new Error(`first screen took ${bigStats.firstScreenMs} ms (bound: 1000)`);
  if (bigStats.drawn > 80) throw new Error(`${bigStats.drawn} rows in the DOM: the list is not windowed`);
  const scroll = await big.evaluate(async () => {
    const sc = document.getElementById('audit-rows');
    const frames = [];
    let maxDrawn = 0;
    let last = performance.now();
    for (let i = 0; i < 150; i++) {
      sc.scrollTop += 500;
      await new Promise((r) => requestAnimationFrame(r));
      const now = performance.now();
      frames.push(now - last);
      last = now;
      maxDrawn = Math.max(maxDrawn, sc.querySelectorAll('.window-sizer .audit-row').length);
    }
    // After the last frame the rows at the scroll position are drawn.
    await new Promise((r) => requestAnimationFrame(r));
    const rowTop = sc.getBoundingClientRect().top + 40;
    const visible = [...sc.querySelectorAll('.window-sizer .audit-row')].some((r) => { const b = r.getBoundingClientRect(); return b.top <= rowTop && b.bottom >= rowTop; });
    frames.sort((a, b) => a - b);
    return { p50: frames[Math.floor(frames.length * 0.5)], p95: frames[Math.floor(frames.length * 0.95)], max: frames[frames.length - 1], maxDrawn, visible, scrolled: sc.scrollTop };
  });
  console.log(`audit 10k scrolling: frame p50 ${scroll.p50.toFixed(1)} ms, p95 ${scroll.p95.toFixed(1)} ms, max ${scroll.max.toFixed(1)} ms over 150 frames of 500 px; at most ${scroll.maxDrawn} rows in the DOM`);
  // The bound is of this machine kind's headless, software-rendered Chromium: p95 27–29 ms on
  // one 2-core machine (p50 16.7, vsync), 55 ms alone on a slower one (p50 38; 2026-11-27), so
  // 100 ms: 10 frames a second at worst. What windowing guarantees is checked below (rows in
  // the DOM); a list drawn whole would take far longer per step.
  if (scroll.p95 > 100) throw new Error(`scrolling is not smooth: frame p95 ${scroll.p95} ms (bound: 100)`);
  if (scroll.maxDrawn > 80 || !scroll.visible || scroll.scrolled < 50_000) throw new Error(`windowed scrolling: ${JSON.stringify(scroll)}`);
  await big.screenshot({ path: join(shots, 'audit-10k.png') });
  await big.close();
  step('audit-10k');

  // 8e. Analytics: pick today (UTC) in the date range picker; every chart is drawn (a canvas
  //     with pixels) and its figures are printed for tests/blackbox/browser.rs, which compares
  //     them with `threadstream analytics --format summary` for the same range.
  const an = await newPage();
  await an.goto(`${base}/#/analytics`);
  await an.waitForSelector('#analytics-view:not([hidden]) figure.chart');
  const today = new Date().toISOString().slice(0, 10);
  await an.fill('#analytics-from', today);
  await an.fill('#analytics-to', today);
  await an.click('#analytics-range button[type="submit"]');
  await an.waitForFunction((d) => location.hash === `#/analytics?from=${d}&to=${d}`, today);
  await an.waitForSelector('#chart-threads table.figures tr[data-key]', { state: 'attached' });
  const shown = await an.evaluate(() => {
    const figures = {};
    for (const table of document.querySelectorAll('#analytics-charts table.figures')) {
      const caption = table.dataset.figures;
      for (const tr of table.querySelectorAll('tr[data-key]')) {
        for (const td of tr.querySelectorAll('td[data-field]')) figures[`${caption}|${tr.dataset.key}|${td.dataset.field}`] = td.textContent.replace(/,/g, '');
      }
    }
    const drawn = [...document.querySelectorAll('#analytics-charts canvas')].map((c) => {
      const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      let ink = 0;
      for (let i = 3; i < d.length; i += 4) if (d[i]) ink++;
      return ink;
    });
    return { figures, drawn, total: document.getElementById('analytics-total').textContent };
  });
  if (shown.drawn.length !== 6 || shown.drawn.some((n) => n < 100)) throw new Error(`charts not drawn: ${JSON.stringify(shown.drawn)}`);
  await an.screenshot({ path: join(shots, 'analytics.png'), fullPage: true });
  const anFound = await axeViolations(an);
  if (anFound.length) throw new Error(`axe on the analytics view:\n${anFound.join('\n')}`);
  // A range with no runs says so.
  await an.fill('#analytics-from', '2001-01-01');
  await an.fill('#analytics-to', '2001-01-02');
  await an.click('#analytics-range button[type="submit"]');
  await an.waitForFunction(() => document.getElementById('analytics-total').textContent === '0 runs');
  await an.close();
  console.log(`ANALYTICS-FIGURES ${JSON.stringify({ from: today, toExclusive: new Date(Date.parse(today) + 86_400_000).toISOString().slice(0, 10), figures: shown.figures })}`);
  console.log(`analytics: ${shown.total}, ${Object.keys(shown.figures).length} figures shown`);
  step('analytics');

  // 8c. Dark mode follows the system setting, and the page reads without an emoji font (this
  //     machine has none: fc-list proves it) — icons are SVG, the text has no emoji.
  const fonts = execFileSync('fc-list', [':charset=1f916', 'family'], { encoding: 'utf8' }).trim();
  if (fonts) throw new Error(`an emoji font is installed (${fonts}); this step checks the page without one`);
  const dark = await browser.newPage({ viewport: { width: 1280, height: 900 }, colorScheme: 'dark' });
  dark.on('pageerror', (e) => pageErrors.push(String(e)));
  await dark.goto(run2Url);
  await dark.locator('article.msg.run .card-outcome').first().waitFor();
  const scheme = await dark.evaluate(() => ({
    bg: getComputedStyle(document.body).backgroundColor,
    fg: getComputedStyle(document.body).color,
    emoji: (document.body.innerText.match(/\p{Extended_Pictographic}/gu) ?? []).join(''),
    svg: document.querySelectorAll('.icon-svg svg').length,
  }));
  const lum = (c) => c.match(/\d+/g).slice(0, 3).map(Number).reduce((a, b) => a + b, 0) / 3;
  if (lum(scheme.bg) > 60 || lum(scheme.fg) < 180) throw new Error(`dark mode: background ${scheme.bg}, text ${scheme.fg}`);
  if (scheme.emoji || scheme.svg < 5) throw new Error(`dark mode icons: ${JSON.stringify(scheme)}`);
  await dark.screenshot({ path: join(shots, 'chat-dark.png'), fullPage: true });
  const darkFound = await axeViolations(dark);
  if (darkFound.length) throw new Error(`axe on the chat view in dark mode:\n${darkFound.join('\n')}`);
  await dark.close();
  console.log('no emoji font installed (fc-list :charset=1f916 is empty)');
  step('dark-mode-no-emoji-font');

  // 9. Accessibility: axe finds no serious or critical WCAG 2 A/AA problem in the chat view (a
  //    finished run with its tree and answered cards), the timeline, or the empty page; and it
  //    does report a planted unlabeled input, so this check can fail.
  const control = await newPage();
  await control.setContent('<!doctype html><html lang="en"><head><title>x</title></head><body><main><input type="text"></main></body></html>');
  const planted = await axeViolations(control);
  if (!planted.some((v) => v.startsWith('label'))) throw new Error(`axe missed the planted unlabeled input: ${planted}`);
  await control.close();
  const views = [['chat', page.url(), 'article.msg.run .card-outcome']];
  await run8.locator('a.timeline-link').click();
  await page.waitForSelector('#audit-rows .window-sizer .audit-row');
  views.push(['audit', page.url(), '#audit-rows .window-sizer .audit-row']);
  for (const [name, url, ready] of [...views, ['empty', base + '/', '#empty-view:not([hidden])']]) {
    const p = await newPage();
    await p.goto(url);
    await p.waitForSelector(ready);
    const found = await axeViolations(p);
    if (found.length) throw new Error(`axe on the ${name} view:\n${found.join('\n')}`);
    await p.close();
  }
  step('accessibility');

  if (pageErrors.length) throw new Error(`errors in the page: ${pageErrors.join('\n')}`);
  console.log('ALL OK');
} catch (e) {
  console.error(`FAILED: ${e?.stack ?? e}`);
  if (pageErrors.length) console.error(`page errors:\n${pageErrors.join('\n')}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}
