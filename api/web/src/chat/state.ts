// What the page holds about the open thread: its messages, each run's folded state, and the
// user's choices (open sections, typed answers) that survive re-rendering.

import type { RunState } from '../reducer';

export interface UserMessage {
  kind: 'user';
  text: string;
  runId?: string;
  /** The stored message's id (`user-message.messageId`): what "edit and resend" forks before. */
  messageId?: string;
  el: HTMLElement;
}

export interface RunMessage {
  kind: 'run';
  runId: string;
  state: RunState;
  el: HTMLElement;
}

/** The local outcome of a confirmation answered from this page. */
export interface Answer {
  approved: boolean;
  label: string;
}

export interface OpenThread {
  id: string;
  title: string;
  messages: (UserMessage | RunMessage)[];
  runs: Map<string, RunMessage>;
  /** Each run's user message id, from its `run-start` (a message just sent learns it there). */
  messageIds: Map<string, string>;
  /** Last SSE id seen: the per-thread cursor a manual reconnect resumes from. */
  cursor: number;
  live: boolean;
  liveRunId?: string;
  source?: EventSource;
  reconnectTimer?: number;
  /** Cards keep their DOM (typed text, wizard step) across re-renders of the tree. */
  cards: Map<string, HTMLElement>;
  answers: Map<string, Answer>;
  /** Open/closed state of collapsible parts, by key, so re-rendering keeps what the user chose. */
  open: Map<string, boolean>;
  dirty: Set<RunMessage>;
  frame?: number;
  /** Re-renders every run (after a local answer changes how a card reads). */
  rerender: () => void;
}
