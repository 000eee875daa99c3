// The threadstream page: the thread list, and one view at a time chosen by the URL hash —
//   #/                      nothing open
//   #/t/:id                 the chat (agent activity, confirmations, composer)
//   #/t/:id/timeline/:run   the timeline of one run
// Everything shown is read off the log through the public API.

import { $ } from './dom';
import { setUpLogin } from './banner';
import { setUpComposer, updateComposer } from './chat/composer';
import { closeThread, currentThread, openThread, setLiveChangeHandler, setTitle } from './chat/session';
import { refreshThreads, setUpThreadList } from './threads';
import { openTimeline } from './timeline';

type View = 'empty' | 'chat' | 'timeline';

function show(view: View): void {
  $('empty-view').hidden = view !== 'empty';
  $('chat-view').hidden = view !== 'chat';
  $('timeline-view').hidden = view !== 'timeline';
  document.body.classList.remove('menu-open');
  $('menu-toggle').setAttribute('aria-expanded', 'false');
}

/** Bumped on every navigation: answers of an older navigation are dropped. */
let generation = 0;
/** The thread the URL names (chat or its timeline), for the list's highlight. */
let routeThread: string | undefined;

async function route(): Promise<void> {
  const m = /^#\/t\/([^/]+)(?:\/timeline\/([^/]+))?$/.exec(location.hash);
  closeThread();
  const gen = ++generation;
  const isCurrent = () => gen === generation;
  routeThread = m ? decodeURIComponent(m[1]) : undefined;
  if (!m) {
    show('empty');
  } else if (m[2]) {
    show('timeline');
    await openTimeline(routeThread!, decodeURIComponent(m[2]), isCurrent);
  } else {
    show('chat');
    await openThread(routeThread!, isCurrent);
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
window.addEventListener('hashchange', () => void route());
void refreshThreads().then(() => route());
