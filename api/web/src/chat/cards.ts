// Confirmation cards: approve / deny, a text answer, a question wizard, a plan to review. The
// buttons are ordinary buttons (focusable, Enter and Space work); a settled card says how it
// ended, and a denial is marked as such.

import { api, enc } from '../api';
import { failure } from '../banner';
import { h } from '../dom';
import { icon } from '../icons';
import type { Confirmation, ToolCall } from '../reducer';
import type { Answer, OpenThread } from './state';
import { renderTasks } from './tasks';

export function confirmationCard(t: OpenThread, tc: ToolCall, c: Confirmation): HTMLElement {
  let card = t.cards.get(c.requestId);
  if (!card) {
    card = h('div', { class: `card ${c.severity}`, 'data-request-id': c.requestId, role: 'group', 'aria-label': 'Confirmation' });
    t.cards.set(c.requestId, card);
    fillInteractive(t, card, c);
  }
  const local = t.answers.get(c.requestId);
  if (local || !tc.isLoading) settleCard(card, tc, local);
  return card;
}

function settleCard(card: HTMLElement, tc: ToolCall, local: Answer | undefined): void {
  let outcome: string;
  let kind: 'approved' | 'denied' | 'expired';
  if (local) {
    outcome = local.label;
    kind = local.approved ? 'approved' : 'denied';
  } else if (tc.result !== undefined) {
    outcome = 'Approved';
    kind = 'approved';
  } else if (tc.error !== undefined) {
    const denied = /denied|declined|rejected/i.test(tc.error);
    outcome = denied ? 'Denied' : `Not done: ${tc.error}`;
    kind = 'denied';
  } else {
    outcome = 'Not answered: the run ended';
    kind = 'expired';
  }
  if (card.getAttribute('data-outcome') === kind) return;
  card.setAttribute('data-outcome', kind);
  card.classList.add(`settled-${kind}`);
  const message = card.querySelector('.card-message')?.cloneNode(true);
  const mark = icon(kind === 'approved' ? 'check' : kind === 'denied' ? 'denied' : 'warning');
  card.replaceChildren(...(message ? [message] : []), h('p', { class: `card-outcome ${kind}` }, mark, ' ', outcome));
}

async function answer(t: OpenThread, card: HTMLElement, c: Confirmation, body: Record<string, unknown>, label: string): Promise<void> {
  const buttons = card.querySelectorAll('button');
  buttons.forEach((b) => (b.disabled = true));
  try {
    await api('POST', `/instance-ai/confirm/${enc(c.requestId)}`, body);
    t.answers.set(c.requestId, { approved: body.approved !== false, label });
    t.rerender();
  } catch (e) {
    buttons.forEach((b) => (b.disabled = false));
    card.querySelector('.card-error')?.remove();
    card.append(h('p', { class: 'card-error', role: 'alert' }, `Could not answer: ${failure(e)}`));
  }
}

function fillInteractive(t: OpenThread, card: HTMLElement, c: Confirmation): void {
  const message = h('p', { class: 'card-message' }, icon(c.severity === 'destructive' ? 'warning' : 'plan'), ' ', h('strong', { class: 'severity' }, `${c.severity}: `), c.message);
  const kind = c.inputType ?? 'approval';
  if (kind === 'questions' && c.questions?.length) {
    card.append(message);
    questionWizard(t, card, c);
    return;
  }
  if (kind === 'text') {
    const id = `answer-${c.requestId}`;
    const input = h('textarea', { id, rows: '2' });
    card.append(
      message,
      h('label', { for: id }, 'Your answer'),
      input,
      h(
        'div',
        { class: 'card-buttons' },
        h('button', { type: 'button', class: 'primary', onclick: () => answer(t, card, c, { kind: 'text', approved: true, userInput: input.value }, `Answered: ${input.value}`) }, 'Send answer'),
        h('button', { type: 'button', onclick: () => answer(t, card, c, { kind: 'text', approved: false }, 'Declined') }, 'Decline'),
      ),
    );
    return;
  }
  card.append(message);
  if (kind === 'plan-review' && c.tasks?.tasks?.length) card.append(renderTasks(c.tasks.tasks));
  const k = kind === 'plan-review' ? 'plan-review' : 'approval';
  card.append(
    h(
      'div',
      { class: 'card-buttons' },
      h('button', { type: 'button', class: 'primary', onclick: () => answer(t, card, c, { kind: k, approved: true }, 'Approved') }, 'Approve'),
      h('button', { type: 'button', class: 'danger', onclick: () => answer(t, card, c, { kind: k, approved: false }, 'Denied') }, 'Deny'),
    ),
  );
}

/** One question per step (single: radios, multi: checkboxes, text: a text area), then submit. */
function questionWizard(t: OpenThread, card: HTMLElement, c: Confirmation): void {
  const qs = c.questions!;
  const chosen = new Map<string, string[]>();
  const texts = new Map<string, string>();
  let step = 0;
  const area = h('div', { class: 'wizard' });
  // The request's message is often the intro itself: show it once.
  if (c.introMessage && c.introMessage !== c.message) card.append(h('p', { class: 'intro' }, c.introMessage));
  card.append(area);
  const draw = () => {
    const q = qs[step];
    const fs = h('fieldset', {}, h('legend', {}, `Question ${step + 1} of ${qs.length}: ${q.question}`));
    const name = `q-${c.requestId}-${q.id}`;
    if (q.type === 'text') {
      const input = h('textarea', { id: name, rows: '2', 'aria-label': q.question });
      input.value = texts.get(q.id) ?? '';
      input.addEventListener('input', () => texts.set(q.id, input.value));
      fs.append(input);
    } else {
      for (const [i, opt] of (q.options ?? []).entries()) {
        const id = `${name}-${i}`;
        const box = h('input', { type: q.type === 'single' ? 'radio' : 'checkbox', name, id, value: opt });
        box.checked = (chosen.get(q.id) ?? []).includes(opt);
        box.addEventListener('change', () => {
          const prev = chosen.get(q.id) ?? [];
          if (q.type === 'single') chosen.set(q.id, [opt]);
          else chosen.set(q.id, box.checked ? [...prev, opt] : prev.filter((o) => o !== opt));
        });
        fs.append(h('div', { class: 'option' }, box, h('label', { for: id }, opt)));
      }
    }
    const last = step === qs.length - 1;
    const buttons = h('div', { class: 'card-buttons' });
    if (step > 0) buttons.append(h('button', { type: 'button', onclick: () => { step--; draw(); } }, 'Back'));
    if (!last) buttons.append(h('button', { type: 'button', class: 'primary', onclick: () => { step++; draw(); } }, 'Next'));
    else {
      buttons.append(
        h('button', {
          type: 'button',
          class: 'primary',
          onclick: () => {
            const answers = qs.map((x) => ({
              questionId: x.id,
              selectedOptions: chosen.get(x.id) ?? [],
              ...(texts.get(x.id) ? { customText: texts.get(x.id) } : {}),
            }));
            void answer(t, card, c, { kind: 'questions', approved: true, answers }, 'Answered');
          },
        }, 'Submit answers'),
      );
    }
    buttons.append(h('button', { type: 'button', onclick: () => answer(t, card, c, { kind: 'questions', approved: false }, 'Declined') }, 'Skip all'));
    area.replaceChildren(fs, buttons);
    (fs.querySelector('input, textarea') as HTMLElement | null)?.focus();
  };
  draw();
}
