// The audit view's rows: one stored event a row, except that consecutive text or reasoning
// deltas of one agent and response (in one run) fold into a single row that carries their id
// range, their count and their joined text.

import { short } from '../dom';

/** One line of `GET …/export` (threadstream-audit's NDJSON format). */
export interface LogLine {
  id: number;
  seq: number;
  run: string;
  agent: string;
  type: string;
  payload: any;
  ts: number;
  responseId?: string;
}

export interface Row {
  firstId: number;
  lastId: number;
  count: number;
  ts: number;
  lastTs: number;
  run: string;
  agent: string;
  type: string;
  responseId?: string;
  /** What the row says: the joined text of deltas, else the payload in short. */
  text: string;
  /** The tool call it is about, if any (for the link into the chat). */
  toolCallId?: string;
  /** Lower-cased `type agent text`, what the search looks in. */
  haystack: string;
}

const DELTAS = new Set(['text-delta', 'reasoning-delta']);

function describe(l: LogLine): string {
  const p = l.payload ?? {};
  switch (l.type) {
    case 'text-delta':
    case 'reasoning-delta':
      return String(p.text ?? '');
    case 'tool-call':
      return `${p.toolName ?? ''} ${short(p.args ?? {}, 200)}`;
    case 'tool-result':
      return short(p.result, 200);
    case 'tool-error':
      return String(p.error ?? '');
    case 'error':
      return String(p.content ?? '');
    case 'status':
      return String(p.message ?? '');
    case 'confirmation-request':
      return String(p.message ?? '');
    case 'agent-spawned':
      return `${p.role ?? ''} (parent ${p.parentId ?? ''})`;
    case 'run-finish':
      return `${p.status ?? ''}${p.reason ? `: ${p.reason}` : ''}`;
    default:
      return short(p, 200);
  }
}

export function coalesce(lines: LogLine[]): Row[] {
  const rows: Row[] = [];
  let open: Row | null = null;
  for (const l of lines) {
    const joins = open !== null && DELTAS.has(l.type) && open.type === l.type && open.agent === l.agent && open.run === l.run && open.responseId === l.responseId;
    if (joins && open) {
      open.lastId = l.id;
      open.lastTs = l.ts;
      open.count++;
      open.text += String(l.payload?.text ?? '');
      continue;
    }
    if (open) finish(open);
    const row: Row = {
      firstId: l.id,
      lastId: l.id,
      count: 1,
      ts: l.ts,
      lastTs: l.ts,
      run: l.run,
      agent: l.agent,
      type: l.type,
      responseId: l.responseId,
      text: describe(l),
      toolCallId: typeof l.payload?.toolCallId === 'string' ? l.payload.toolCallId : undefined,
      haystack: '',
    };
    rows.push(row);
    open = DELTAS.has(l.type) ? row : null;
    if (!open) finish(row);
  }
  if (open) finish(open);
  return rows;
}

function finish(r: Row): void {
  r.haystack = `${r.type} ${r.agent} ${r.text}`.toLowerCase();
}
