// The message box: Enter sends (Shift+Enter is a new line), Esc or the Stop button stops the
// live run; input pauses while a run is live.

import { ApiFailure, api, enc } from '../api';
import { clearBanner, failure, showBanner } from '../banner';
import { $ } from '../dom';
import { followFromHere } from './follow';
import { addUserMessage, currentThread } from './session';

export function updateComposer(): void {
  const t = currentThread();
  const live = !!t?.live;
  $<HTMLTextAreaElement>('composer-input').disabled = !t || live;
  $<HTMLButtonElement>('send').disabled = !t || live;
  $<HTMLButtonElement>('stop').disabled = !t || !live;
  $('run-state').textContent = live ? 'The agent is working — input is paused until the run ends. Esc stops it.' : '';
}

async function send(): Promise<void> {
  const t = currentThread();
  const input = $<HTMLTextAreaElement>('composer-input');
  const text = input.value.trim();
  if (!t || !text || t.live) return;
  t.live = true; // no double send while the POST is in flight
  updateComposer();
  try {
    const res = await api('POST', `/instance-ai/chat/${enc(t.id)}`, { message: text });
    clearBanner();
    input.value = '';
    if (currentThread() === t) {
      addUserMessage(t, text, res.runId);
      // A fast run may have finished (over SSE) before the POST answered.
      const run = t.runs.get(res.runId);
      t.live = !run || run.state.status === 'active';
      t.liveRunId = t.live ? res.runId : undefined;
      followFromHere();
    }
  } catch (e) {
    t.live = false;
    if (e instanceof ApiFailure && e.status === 409) {
      showBanner('This thread already has a run in progress (started elsewhere?). Wait for it to finish, or press Stop — your message was not sent.');
      // The run we did not know about: take the thread's real state.
      try {
        const s = await api('GET', `/instance-ai/threads/${enc(t.id)}/status`);
        t.live = !!(s.hasActiveRun || s.isSuspended);
        t.liveRunId = s.runId;
      } catch {
        // keep the input enabled
      }
    } else {
      showBanner(`Could not send: ${failure(e)}`);
    }
  }
  updateComposer();
  if (!t.live) input.focus();
}

async function stop(): Promise<void> {
  const t = currentThread();
  if (!t || !t.live) return;
  $<HTMLButtonElement>('stop').disabled = true;
  $('run-state').textContent = 'Stopping…';
  try {
    await api('POST', `/instance-ai/chat/${enc(t.id)}/cancel`);
  } catch (e) {
    showBanner(`Could not stop the run: ${failure(e)}`);
    updateComposer();
  }
}

export function setUpComposer(): void {
  $('composer').addEventListener('submit', (ev) => {
    ev.preventDefault();
    void send();
  });
  $('composer-input').addEventListener('keydown', (ev) => {
    const k = ev as KeyboardEvent;
    if (k.key === 'Enter' && !k.shiftKey && !k.isComposing) {
      k.preventDefault();
      $<HTMLFormElement>('composer').requestSubmit();
    }
  });
  $('stop').addEventListener('click', () => void stop());
  // Esc stops the live run from anywhere in the chat, unless it is closing something else
  // (a dialog, an edit in progress: those handle Esc themselves and stop it here).
  document.addEventListener('keydown', (ev) => {
    if (ev.key !== 'Escape' || ev.defaultPrevented || $('chat-view').hidden) return;
    if ($<HTMLDialogElement>('login').open) return;
    if (currentThread()?.live) {
      ev.preventDefault();
      void stop();
    }
  });
  updateComposer();
}
