//! [`ThreadCommand`]: what a caller asks of a thread.

use super::*;

/// What a caller asks of a thread. Each command decides zero or more events.
#[derive(Debug, Clone, PartialEq)]
pub enum ThreadCommand {
    /// Create the thread if it does not exist yet; a no-op when it does and `owner` owns it,
    /// `ThreadNotFound` when another user does.
    Create {
        owner: String,
        title: Option<String>,
    },
    /// Create this thread as a fork of `fork_of`: decided on an aggregate already folded from
    /// the source's events through the fork point (the log's writer does that), it stores the
    /// fork's `thread-created` with `forkOf`. The title defaults to the source's at that point.
    Fork {
        owner: String,
        title: Option<String>,
        fork_of: ForkOf,
    },
    Rename {
        title: String,
        by: String,
    },
    Delete {
        by: String,
    },
    /// A user's chat message: stores `user-message` and opens the run with `run-start`.
    StartRun {
        run_id: String,
        agent_id: String,
        message_id: String,
        message_group_id: Option<String>,
        text: String,
        user: String,
    },
    /// Open a follow-up run that reports on background tasks: `run-start` with the
    /// `messageGroupId` of the runs it continues, and no user message.
    StartFollowUp {
        run_id: String,
        agent_id: String,
        message_id: String,
        message_group_id: String,
    },
    /// One agent event (n8n wire type) from the runtime or from ingest.
    Record(AgentEvent),
    AnswerConfirmation {
        request_id: String,
        approved: bool,
        user_input: Option<String>,
        answers: Option<Value>,
        by: String,
    },
    /// Ask the live run to stop, and every running background task of the thread (also those
    /// that outlive their finished run); a no-op when nothing is running or every stop is
    /// already asked for.
    Cancel {
        by: String,
        reason: String,
    },
    /// Ask a running background task to stop.
    CancelTask {
        task_id: String,
        by: String,
    },
    /// Inject a user's correction into a running background task.
    CorrectTask {
        task_id: String,
        message: String,
        by: String,
    },
    /// An idempotent producer's write to the thread (`Producer-Id`/`-Epoch`/`-Seq`), as the
    /// first command of the append it stamps: a duplicate or a fenced epoch refuses the whole
    /// append, so a producer's retry never stores an event twice.
    Produce(ProducerStamp),
    /// Record the tokens of one model call (the internal `llm-usage` event) for an active agent
    /// of the live run `run_id`.
    RecordUsage {
        run_id: String,
        agent_id: String,
        usage: LlmUsage,
    },
    /// Keep an upstream AG-UI agent's event that has no event of its own here (the internal
    /// `agui-event`), from an active agent of the live run `run_id`.
    RecordAgui {
        run_id: String,
        agent_id: String,
        event: AguiEvent,
    },
    /// Record that the AI SDK chat of this thread's id goes on in `thread_id`, a fork of it or
    /// of its current chat thread (`chat-forked`).
    MoveChat {
        thread_id: String,
        by: String,
    },
    /// Store an LLM-written summary of the thread's earlier runs (the internal
    /// `conversation-summary` event), from an active agent of the live run `run_id`.
    Summarize {
        run_id: String,
        agent_id: String,
        summary: String,
        covered_through_id: i64,
    },
}
