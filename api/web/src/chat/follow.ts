// Follow the bottom only while the reader is at the bottom: a streaming answer never pulls the
// page away from what someone scrolled up to read, and catches up once they scroll back down.

// Our own jumps to the end also fire scroll events; they land at the end, so they keep
// `following` true without any bookkeeping.
let following = true;

function atEnd(): boolean {
  return window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 48;
}

window.addEventListener(
  'scroll',
  () => {
    following = atEnd();
  },
  { passive: true },
);

/** Whether the view sticks to the bottom as content grows. */
export function isFollowing(): boolean {
  return following;
}

/** After content grew: keep the bottom in view if the reader was there. */
export function keepBottom(): void {
  if (following) toEnd();
}

/** Jump to the end (opening a thread, sending a message) and follow from there. */
export function followFromHere(): void {
  following = true;
  toEnd();
}

function toEnd(): void {
  window.scrollTo(0, document.documentElement.scrollHeight);
}
