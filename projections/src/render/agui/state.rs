//! The AG-UI renderer's state: what is open on the stream (the run, its messages, steps, tool
//! calls and sub-agents) and what a joining client is given again (settled messages, state).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::render::schemas::agui::{AgUiEventBody, AgUiMessage, AgUiState};

/// The AG-UI renderer of one thread. Feed it the thread's events in log order.
#[derive(Debug, Clone)]
pub struct AgUiRenderer {
    pub(super) thread_id: String,
    pub(super) echo_user_messages: bool,
    /// The AG-UI run open on the stream.
    pub(super) run: Option<OpenRun>,
    /// Every sub-agent ever spawned: agent id → (name, description).
    pub(super) subagents: HashMap<String, (String, Option<String>)>,
    /// Every tool call seen: id → (name, args JSON text, owner sub-agent).
    pub(super) tool_calls: HashMap<String, ToolCallInfo>,
    /// Settled messages, for `MESSAGES_SNAPSHOT`.
    pub(super) messages: Vec<AgUiMessage>,
    /// Tool calls without a result yet (their messages stay out of a snapshot: a join prelude
    /// re-opens them instead).
    pub(super) pending_calls: BTreeSet<String>,
    /// `{tasks?, status?, title?}`.
    pub(super) state: AgUiState,
    /// The last `error` content per run, for `RUN_ERROR.message`.
    pub(super) last_error: HashMap<String, String>,
    /// The user's message (id, text), stored before its `run-start`, to stream after it.
    pub(super) pending_user: Option<(String, String)>,
}

#[derive(Debug, Clone)]
pub(super) struct ToolCallInfo {
    pub(super) name: String,
    pub(super) args: String,
    pub(super) owner: Option<String>,
}

#[derive(Debug, Clone)]
pub(super) struct OpenRun {
    pub(super) run_id: String,
    /// Opened by a late event of a finished run (not by `run-start`): it finishes as soon as
    /// nothing is open in it.
    pub(super) continuation: bool,
    /// Open text per agent.
    pub(super) text: BTreeMap<String, OpenMessage>,
    /// Open reasoning per agent.
    pub(super) reasoning: BTreeMap<String, OpenMessage>,
    /// Open steps: tool call id → (step name, owner).
    pub(super) steps: BTreeMap<String, (String, Option<String>)>,
    /// Tool calls started in this run.
    pub(super) calls: BTreeSet<String>,
    /// Active sub-agents.
    pub(super) subagents: BTreeSet<String>,
    /// Tokens by model.
    pub(super) usage: BTreeMap<String, (u64, u64)>,
}

#[derive(Debug, Clone)]
pub(super) struct OpenMessage {
    pub(super) id: String,
    pub(super) text: String,
}

impl OpenRun {
    pub(super) fn new(run_id: &str, continuation: bool) -> Self {
        OpenRun {
            run_id: run_id.to_string(),
            continuation,
            text: BTreeMap::new(),
            reasoning: BTreeMap::new(),
            steps: BTreeMap::new(),
            calls: BTreeSet::new(),
            subagents: BTreeSet::new(),
            usage: BTreeMap::new(),
        }
    }

    /// The open messages of a kind.
    pub(super) fn messages(&self, kind: Stream) -> &BTreeMap<String, OpenMessage> {
        match kind {
            Stream::Text => &self.text,
            Stream::Reasoning => &self.reasoning,
        }
    }

    pub(super) fn is_idle(&self) -> bool {
        self.text.is_empty()
            && self.reasoning.is_empty()
            && self.steps.is_empty()
            && self.subagents.is_empty()
    }
}

/// How a run's open messages are closed.
#[derive(Clone, Copy)]
pub(super) enum Close {
    Success,
    Partial,
    Failed,
}

impl Close {
    pub(super) fn status(self) -> &'static str {
        match self {
            Close::Success => "success",
            Close::Partial => "partial_success",
            Close::Failed => "failed",
        }
    }
}

/// The two streamed message kinds.
#[derive(Clone, Copy)]
pub(super) enum Stream {
    Text,
    Reasoning,
}

impl Stream {
    pub(super) fn id_prefix(self) -> &'static str {
        match self {
            Stream::Text => "msg",
            Stream::Reasoning => "rsn",
        }
    }

    /// The event that streams a piece of the message's content.
    pub(super) fn content<'a>(self, message_id: &'a str, delta: &'a str) -> AgUiEventBody<'a> {
        match self {
            Stream::Text => AgUiEventBody::TextMessageContent { message_id, delta },
            Stream::Reasoning => AgUiEventBody::ReasoningMessageContent { message_id, delta },
        }
    }
}

impl AgUiRenderer {
    /// A renderer for `thread_id`. `echo_user_messages`: render the user's messages as
    /// `TEXT_MESSAGE_*` with role `user` (a client that sent the message itself, like
    /// `HttpAgent`, does not want it echoed).
    pub fn new(thread_id: &str, echo_user_messages: bool) -> Self {
        AgUiRenderer {
            thread_id: thread_id.to_string(),
            echo_user_messages,
            run: None,
            subagents: HashMap::new(),
            tool_calls: HashMap::new(),
            messages: Vec::new(),
            pending_calls: BTreeSet::new(),
            state: AgUiState::default(),
            last_error: HashMap::new(),
            pending_user: None,
        }
    }

    /// The run open on the stream, if any.
    pub fn open_run(&self) -> Option<&str> {
        self.run.as_ref().map(|r| r.run_id.as_str())
    }
}
