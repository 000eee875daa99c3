// The threadstream page: the thread list, and one view at a time chosen by the URL hash —
//   #/                                   nothing open
//   #/t/:id                              the chat (agent activity, confirmations, composer)
//   #/t/:id/run/:run[/tool/:id|/agent/:id]  the chat, scrolled to that run, tool call or agent
//   #/t/:id/audit[?run=&agent=&type=&q=] the audit view of the thread's events
//   #/analytics[?from=&to=]              charts of the runs started in a date range
// Everything shown is read off the log through the public API.

import { $ } from './dom';
import { setUpLogin } from './banner';
import { openAnalytics, setUpAnalytics } from './analytics/view';
import { openAudit } from './audit/view';
import { setUpComposer, updateComposer } from './chat/composer';
import { closeThread, currentThread, Focus, openThread, setLiveChangeHandler, setTitle } from './chat/session';
import { refreshThreads, setUpThreadList, threadTitle } from './threads';

type View = 'empty' | 'chat' | 'audit' | 'analytics';

function show(view: View): void {
  $('empty-view').hidden = view !== 'empty';
  $('chat-view').hidden = view !== 'chat';
  $('audit-view').hidden = view !== 'audit';
  $('analytics-view').hidden = view !== 'analytics';
  document.body.classList.remove('menu-open');
  $('menu-toggle').setAttribute('aria-expanded', 'false');
}

/** Bumped on every navigation: answers of an older navigation are dropped. */
let generation = 0;
/** The thread the URL names, for the list's highlight. */
let routeThread: string | undefined;

const THREAD = /^#\/t\/([^/?]+)(\/[^?]*)?(?:\?(.*))?$/;

async function route(): Promise<void> {
  closeThread();
  const gen = ++generation;
  const isCurrent = () => gen === generation;
  const m = THREAD.exec(location.hash);
  routeThread = m ? decodeURIComponent(m[1]) : undefined;
  const rest = m?.[2] ?? '';
  const params = new URLSearchParams(m?.[3] ?? '');
  const legacy = /^\/timeline\/([^/]+)$/.exec(rest);
  const focus = /^\/run\/([^/]+)(?:\/(tool|agent)\/([^/]+))?$/.exec(rest);
  const analytics = /^#\/analytics(?:\?(.*))?$/.exec(location.hash);
  if (analytics) {
    show('analytics');
    document.title = 'Analytics · threadstream';
    await openAnalytics(new URLSearchParams(analytics[1] ?? ''), isCurrent);
  } else if (!m) {
    show('empty');
  } else if (legacy) {
    // The per-run timeline of earlier versions: the audit view filtered to that run.
    location.replace(`#/t/${m[1]}/audit?run=${legacy[1]}`);
    return;
  } else if (rest === '/audit') {
    show('audit');
    await openAudit(routeThread!, params, threadTitle(routeThread!) ?? routeThread!, isCurrent);
  } else {
    show('chat');
    let f: Focus | undefined;
    if (focus) {
      f = { runId: decodeURIComponent(focus[1]) };
      if (focus[2] === 'tool') f.toolCallId = decodeURIComponent(focus[3]);
      if (focus[2] === 'agent') f.agentId = decodeURIComponent(focus[3]);
    }
    await openThread(routeThread!, isCurrent, f);
  }
  void refreshThreads();
}

setUpLogin(async () => {
  await refreshThreads();
  await route();
});
setUpThreadList(
  () => routeThread,
  (id, title) => {
    if (currentThread()?.id === id) setTitle(title);
  },
);
setLiveChangeHandler(updateComposer);
setUpComposer();
setUpAnalytics();
window.addEventListener('hashchange', () => void route());
void refreshThreads().then(() => route());
