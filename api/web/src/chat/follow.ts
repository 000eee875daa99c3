// Follow the bottom only while the reader is at the bottom: a streaming answer never pulls the
// page away from what someone scrolled up to read, and catches up once they scroll back down.

// Our own jumps to the end also fire scroll events; they scroll down, so they keep `following`
// true without any bookkeeping.
let following = true;
let lastY = window.scrollY;
// The page's height when the reader's current downward scroll began. A scroll to the end (the
// End key, a smooth scroll, a drag) aims at the end as it was then, and lands short by what the
// answer grew meanwhile: landing within that growth of the end is reaching the end.
// A pause ends a scroll: what grew before it is not the reader's to make up.
let downFrom: number | null = null;
let lastScrollAt = 0;
const PAUSE_MS = 300;

function atEnd(allowance = 0): boolean {
  return (
    window.innerHeight + window.scrollY >=
    document.documentElement.scrollHeight - 48 - allowance
  );
}

// Scrolling up lets go of the end; scrolling down to it takes hold again.
window.addEventListener(
  'scroll',
  () => {
    const y = window.scrollY;
    const height = document.documentElement.scrollHeight;
    const now = performance.now();
    if (y < lastY) {
      downFrom = null;
      following = atEnd();
    } else if (y > lastY) {
      if (downFrom === null || now - lastScrollAt > PAUSE_MS) downFrom = height;
      following = following || atEnd(height - downFrom);
    }
    lastY = y;
    lastScrollAt = now;
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
