// The page's icons: inline SVG drawn with the text colour, so they never depend on a font (a
// server's browser usually has no emoji font, where emoji render as empty boxes).

const PATHS: Record<string, string> = {
  agent: '<rect x="4" y="7" width="16" height="12" rx="3"/><path d="M12 3v4M9 12h.01M15 12h.01M9 16h6"/>',
  tool: '<path d="M14.7 6.3a4 4 0 0 0-5.4 5.1L3 17.7V21h3.3l6.3-6.3a4 4 0 0 0 5.1-5.4l-2.6 2.6-2.4-.6-.6-2.4z"/>',
  reasoning: '<path d="M9 18h6M10 21h4M12 3a6 6 0 0 0-4 10.5c.7.7 1 1.5 1 2.5h6c0-1 .3-1.8 1-2.5A6 6 0 0 0 12 3z"/>',
  check: '<path d="M5 12.5l4.5 4.5L19 7.5"/>',
  cross: '<path d="M6 6l12 12M18 6L6 18"/>',
  edit: '<path d="M4 20h4L19 9l-4-4L4 16v4zM13.5 6.5l4 4"/>',
  trash: '<path d="M4 7h16M9 7V4h6v3M6 7l1 13h10l1-13"/>',
  error: '<circle cx="12" cy="12" r="9"/><path d="M12 7v6M12 16.5v.5"/>',
  warning: '<path d="M12 3l10 18H2L12 3z"/><path d="M12 10v5M12 18v.5"/>',
  denied: '<circle cx="12" cy="12" r="9"/><path d="M6 6l12 12"/>',
  todo: '<circle cx="12" cy="12" r="8"/>',
  in_progress: '<circle cx="12" cy="12" r="8"/><path d="M12 4a8 8 0 0 1 0 16z" fill="currentColor"/>',
  done: '<circle cx="12" cy="12" r="8"/><path d="M8 12.5l3 3 5-6"/>',
  failed: '<circle cx="12" cy="12" r="8"/><path d="M9 9l6 6M15 9l-6 6"/>',
  cancelled: '<circle cx="12" cy="12" r="8"/><path d="M8 12h8"/>',
  plan: '<path d="M9 6h11M9 12h11M9 18h11M4 6h.01M4 12h.01M4 18h.01"/>',
  chevron: '<path d="M9 6l6 6-6 6"/>',
  timeline: '<path d="M4 6h16M4 12h10M4 18h13"/>',
  chart: '<path d="M4 20V4M4 20h16M8 16v-4M12 16V8M16 16v-6"/>',
  download: '<path d="M12 4v11M7 10l5 5 5-5M5 20h14"/>',
  link: '<path d="M10 14a4 4 0 0 0 5.7 0l3-3a4 4 0 0 0-5.7-5.7l-1 1M14 10a4 4 0 0 0-5.7 0l-3 3a4 4 0 0 0 5.7 5.7l1-1"/>',
};

export type IconName = keyof typeof PATHS;

/** A decorative icon (hidden from assistive technology: the text next to it says the same). */
export function icon(name: IconName | string, cls = ''): HTMLElement {
  const span = document.createElement('span');
  span.className = `icon-svg ${cls}`.trim();
  span.setAttribute('aria-hidden', 'true');
  span.dataset.icon = name;
  // Static markup from the table above: no input reaches innerHTML here.
  span.innerHTML = `<svg viewBox="0 0 24 24" width="1em" height="1em" fill="none" stroke="currentColor" stroke-width="2" stroke-linecap="round" stroke-linejoin="round" focusable="false">${PATHS[name] ?? PATHS.todo}</svg>`;
  return span;
}
