// DOM helpers shared by every view: element creation, lookup by id, safe Markdown, short text.

import { renderMarkdown } from './markdown';

export type Attrs = Record<string, string | boolean | undefined | ((e: any) => void)>;
export type Child = Node | string | null | undefined | false;

export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === false) continue;
    if (typeof v === 'function') el.addEventListener(k.replace(/^on/, ''), v);
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined && c !== false) el.append(c);
  return el;
}

export function $<T extends HTMLElement = HTMLElement>(id: string): T {
  return document.getElementById(id) as T;
}

export function markdown(src: string, cls = 'md'): HTMLElement {
  const div = h('div', { class: cls });
  // Safe: renderMarkdown escapes all input before adding its own tags.
  div.innerHTML = renderMarkdown(src);
  return div;
}

export function short(v: unknown, max = 90): string {
  const s = typeof v === 'string' ? v : JSON.stringify(v);
  if (s === undefined) return '';
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}

export function pretty(v: unknown): string {
  return typeof v === 'string' ? v : JSON.stringify(v, null, 2);
}

/** `1234567` → `1,234,567`, the same in every locale the test runs in. */
export function num(n: number): string {
  return n.toLocaleString('en-US');
}
