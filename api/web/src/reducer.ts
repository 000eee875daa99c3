// The agent tree of one run, folded from n8n events: the same rules as
// `projections/src/agent_tree.rs` (itself a port of n8n's `reduceEvent`), kept small. Maps
// instead of plain objects, so ids like `__proto__` are ordinary keys and need no guard.

export type Json = unknown;

export interface TaskItem {
  id: string;
  description: string;
  status: string;
}

export interface Question {
  id: string;
  question: string;
  type: 'single' | 'multi' | 'text';
  options?: string[];
}

export interface Confirmation {
  requestId: string;
  severity: string;
  message: string;
  inputType?: string;
  questions?: Question[];
  introMessage?: string;
  tasks?: { tasks: TaskItem[] };
}

export interface ToolCall {
  toolCallId: string;
  toolName: string;
  args: Record<string, Json>;
  result?: Json;
  error?: string;
  isLoading: boolean;
  confirmation?: Confirmation;
}

export type TimelineEntry =
  | { type: 'text'; content: string; responseId?: string }
  | { type: 'tool-call'; toolCallId: string; responseId?: string }
  | { type: 'child'; agentId: string; responseId?: string };

export type AgentStatus = 'active' | 'completed' | 'cancelled' | 'error';

export interface Agent {
  agentId: string;
  role: string;
  status: AgentStatus;
  textContent: string;
  reasoning: string;
  statusMessage?: string;
  tasks?: { tasks: TaskItem[] };
  result?: string;
  error?: string;
  children: string[];
  toolCallIds: string[];
  timeline: TimelineEntry[];
}

/** One event as the SSE stream sends it (`id` comes from the frame, not the JSON). */
export interface WireEvent {
  type: string;
  runId: string;
  agentId: string;
  responseId?: string;
  payload?: Record<string, any>;
  ts?: number;
}

export class RunState {
  rootAgentId: string;
  agents = new Map<string, Agent>();
  toolCalls = new Map<string, ToolCall>();
  status: AgentStatus = 'active';
  /** Why the run ended, from `run-finish.reason` (not part of n8n's tree). */
  finishReason?: string;

  constructor(rootAgentId: string) {
    this.rootAgentId = rootAgentId;
    this.agents.set(rootAgentId, newAgent(rootAgentId, 'orchestrator'));
  }

  root(): Agent {
    return this.agents.get(this.rootAgentId)!;
  }

  /** The state a snapshot's `agentTree` (GET …/messages) stands for, so later events fold on. */
  static fromTree(tree: any): RunState {
    const state = new RunState(String(tree.agentId));
    state.agents.clear();
    const walk = (node: any) => {
      const agent = newAgent(String(node.agentId), String(node.role ?? 'unknown'));
      agent.status = node.status ?? 'active';
      agent.textContent = node.textContent ?? '';
      agent.reasoning = node.reasoning ?? '';
      agent.statusMessage = node.statusMessage;
      agent.tasks = node.tasks;
      agent.result = node.result;
      agent.error = node.error;
      agent.timeline = Array.isArray(node.timeline) ? node.timeline.map((e: any) => ({ ...e })) : [];
      for (const tc of node.toolCalls ?? []) {
        state.toolCalls.set(tc.toolCallId, {
          toolCallId: tc.toolCallId,
          toolName: tc.toolName,
          args: tc.args ?? {},
          result: tc.result,
          error: tc.error,
          isLoading: !!tc.isLoading,
          confirmation: tc.confirmation,
        });
        agent.toolCallIds.push(tc.toolCallId);
      }
      state.agents.set(agent.agentId, agent);
      for (const child of node.children ?? []) {
        agent.children.push(String(child.agentId));
        walk(child);
      }
    };
    walk(tree);
    state.status = state.root().status;
    return state;
  }

  /** `reduceEvent`. */
  reduce(e: WireEvent): void {
    const p = e.payload ?? {};
    const agent = this.agents.get(e.agentId);
    switch (e.type) {
      case 'run-start': {
        const root = this.root();
        const hasContent =
          this.agents.size > 1 ||
          root.textContent !== '' ||
          root.children.length > 0 ||
          root.toolCallIds.length > 0;
        if (hasContent) {
          this.status = 'active';
          root.status = 'active';
        } else {
          this.rootAgentId = e.agentId;
          this.agents.clear();
          this.toolCalls.clear();
          this.agents.set(e.agentId, newAgent(e.agentId, 'orchestrator'));
          this.status = 'active';
        }
        break;
      }
      case 'text-delta':
        if (agent) appendText(agent, String(p.text ?? ''), e.responseId);
        break;
      case 'reasoning-delta':
        if (agent) agent.reasoning += String(p.text ?? '');
        break;
      case 'tool-call': {
        if (!agent) break;
        const id = String(p.toolCallId);
        this.toolCalls.set(id, {
          toolCallId: id,
          toolName: String(p.toolName),
          args: p.args ?? {},
          isLoading: true,
        });
        agent.toolCallIds.push(id);
        agent.timeline.push({ type: 'tool-call', toolCallId: id, ...rid(e.responseId) });
        break;
      }
      case 'tool-result':
      case 'tool-error': {
        const tc = this.toolCalls.get(String(p.toolCallId));
        if (!tc) break;
        if (e.type === 'tool-result') tc.result = p.result;
        else tc.error = String(p.error);
        tc.isLoading = false;
        break;
      }
      case 'agent-spawned': {
        const parent = this.agents.get(String(p.parentId));
        if (!parent) break;
        this.agents.set(e.agentId, newAgent(e.agentId, String(p.role ?? 'sub-agent')));
        parent.children.push(e.agentId);
        // Only an absent responseId inherits the previous entry's (`??` in the JS).
        const inherited = e.responseId ?? parent.timeline[parent.timeline.length - 1]?.responseId;
        parent.timeline.push({ type: 'child', agentId: e.agentId, ...rid(inherited) });
        break;
      }
      case 'agent-completed': {
        if (!agent) break;
        agent.status = p.error ? 'error' : 'completed';
        agent.result = p.result;
        agent.error = p.error;
        for (const id of agent.toolCallIds) {
          const tc = this.toolCalls.get(id);
          if (tc) tc.isLoading = false;
        }
        break;
      }
      case 'confirmation-request': {
        const tc = this.toolCalls.get(String(p.toolCallId));
        if (tc) tc.confirmation = p as Confirmation;
        break;
      }
      case 'tasks-update':
        if (agent) agent.tasks = p.tasks;
        break;
      case 'status':
        if (agent) agent.statusMessage = p.message ? String(p.message) : undefined;
        break;
      case 'error': {
        // Errors of unknown agents land on the root, as in n8n.
        const target = agent ?? this.root();
        appendText(target, `\n\n*Error: ${p.content}*`, e.responseId);
        break;
      }
      case 'run-finish': {
        this.status = p.status === 'completed' ? 'completed' : p.status === 'cancelled' ? 'cancelled' : 'error';
        this.finishReason = p.reason;
        this.root().status = this.status;
        if (this.status !== 'completed') {
          for (const tc of this.toolCalls.values()) tc.isLoading = false;
        }
        break;
      }
      default:
        break;
    }
  }
}

function newAgent(agentId: string, role: string): Agent {
  return {
    agentId,
    role,
    status: 'active',
    textContent: '',
    reasoning: '',
    children: [],
    toolCallIds: [],
    timeline: [],
  };
}

function rid(responseId: string | undefined): { responseId?: string } {
  return responseId ? { responseId } : {};
}

/** `appendTimelineText`: text of the same response merges into the last text entry. */
function appendText(agent: Agent, text: string, responseId: string | undefined): void {
  agent.textContent += text;
  const last = agent.timeline[agent.timeline.length - 1];
  if (last && last.type === 'text' && last.responseId === responseId) {
    last.content += text;
  } else {
    agent.timeline.push({ type: 'text', content: text, ...rid(responseId) });
  }
}
