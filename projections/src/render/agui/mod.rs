//! AG-UI 1.0 rendering (`@ag-ui/core` `EventSchemas`, checked by `@ag-ui/client`
//! `verifyEvents` and `ag-ui-validate`): the thread's stored events → AG-UI events.
//!
//! The mapping (also the table in `docs/protocol.md`):
//! - `run-start` → `RUN_STARTED`; `run-finish` → `RUN_FINISHED` (outcome `cancelled` when
//!   cancelled) or `RUN_ERROR` (status `error`, with the run's last `error` content), after
//!   closing everything still open, as AG-UI requires.
//! - `user-message` → `TEXT_MESSAGE_START/CONTENT/END` with role `user` (optional, see
//!   [`AgUiRenderer::new`]).
//! - `text-delta` → `TEXT_MESSAGE_*`: one message per uninterrupted run of an agent's text;
//!   `TEXT_MESSAGE_END` carries the agent's `workerAgentOutput`.
//! - `reasoning-delta` → `REASONING_START`, `REASONING_MESSAGE_*`, `REASONING_END`.
//! - `tool-call` → `STEP_STARTED` + `TOOL_CALL_START/ARGS/END`; `tool-result` / `tool-error` →
//!   `TOOL_CALL_RESULT` (with `toolAgentOutput`) + `STEP_FINISHED`.
//! - `agent-spawned` → `SUBAGENT_STARTED`; `agent-completed` → `SUBAGENT_FINISHED` or
//!   `SUBAGENT_ERROR`; every event of a sub-agent carries `subagentRunId` (its agent id).
//! - `tasks-update`, `status`, `thread-title-updated` → `STATE_SNAPSHOT` of
//!   `{tasks?, status?, title?}` (`tasks-update` also as `CUSTOM`);
//!   `confirmation-request`, `filesystem-request`, `error` → `CUSTOM` named `threadstream.<type>`.
//! - internal events (`llm-usage` → the run's `usage`, the rest) → nothing.
//!
//! AG-UI allows one open run per stream and nothing after `RUN_FINISHED` but a new
//! `RUN_STARTED`. Background sub-agents may go on after their run finished: at `run-finish`
//! their open sub-agents end with outcome `suspended`; their later events open a continuation
//! run with the same `runId` (or land in the run open at the time) that re-starts the sub-agent,
//! and a continuation run finishes as soon as nothing is open in it.
//!
//! Resume: AG-UI has none, so [`AgUiRenderer::join_prelude`] gives what a client joining
//! mid-stream needs: `RUN_STARTED` with the open run's ids, `MESSAGES_SNAPSHOT` of the settled
//! messages, `STATE_SNAPSHOT`, and re-opened starts (sub-agents, steps, pending tool calls,
//! text and reasoning with their content so far).
//!
//! Frames carry an `id:` only on the last frame rendered from a stored event (the event's id),
//! so a client cut between two frames of one event resumes before it, never after.
//!
//! The renderer's state is in `state`, the event → frames mapping in `frames`, the join prelude
//! in `join`.

mod frames;
mod join;
mod state;
#[cfg(test)]
mod tests;

pub use state::AgUiRenderer;
