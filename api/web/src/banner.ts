// The page-wide error banner, the sign-in dialog, and how a failure is said in words.

import { ApiFailure, logIn, setUnauthorizedHandler } from './api';
import { $ } from './dom';

export function showBanner(text: string): void {
  const b = $('banner');
  b.textContent = text;
  b.hidden = false;
}

export function clearBanner(): void {
  $('banner').hidden = true;
  $('banner').textContent = '';
}

export function failure(e: unknown): string {
  if (e instanceof ApiFailure) return `${e.message} (${e.code})`;
  return String(e);
}

export function askForToken(): void {
  const dialog = $<HTMLDialogElement>('login');
  if (!dialog.open) dialog.showModal();
}

/** Wires the sign-in form; `signedIn` reloads what the 401 interrupted. */
export function setUpLogin(signedIn: () => Promise<void>): void {
  setUnauthorizedHandler(askForToken);
  $('login-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const input = $<HTMLInputElement>('login-token');
    try {
      await logIn(input.value);
      input.value = '';
      $('login-error').textContent = '';
      $<HTMLDialogElement>('login').close();
      await signedIn();
    } catch (e) {
      $('login-error').textContent = `Sign-in failed: ${failure(e)}`;
    }
  });
}
