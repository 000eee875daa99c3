//! The domain's errors: decoding an event, each rule of the log's aggregates ([`ThreadError`]),
//! and the refusals of Durable Streams and their subscriptions, which [`ThreadError`] wraps.
//!
//! The refusals are defined here, next to what wraps them, and not with their aggregates
//! (`crate::durable_stream`, `crate::subscription`, which re-export them): every aggregate
//! imports this module, so it imports none of them.

use crate::error_code::ErrorCode;
use thiserror::Error;

/// An event that could not be decoded from its type and payload.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    #[error("unknown event type '{0}'")]
    UnknownType(String),
    #[error("invalid payload for '{event_type}': {message}")]
    Payload { event_type: String, message: String },
}

/// How a broken rule should be reported: the HTTP layer maps these to 409, 422, 404.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleClass {
    /// The request is well-formed but conflicts with the thread's current state (409).
    Conflict,
    /// The request can never be valid against this thread (422).
    Unprocessable,
    /// The thing it refers to does not exist (404).
    NotFound,
}

/// A command the `Thread` aggregate refused. Nothing of a refused command is stored.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ThreadError {
    #[error("A run is already active for this thread")]
    RunAlreadyActive { run_id: String },
    #[error("run '{0}' was already used in this thread")]
    DuplicateRun(String),
    #[error("no live run '{0}' in this thread")]
    RunNotLive(String),
    #[error("run '{0}' has already finished")]
    RunFinished(String),
    #[error("'{event_type}' is internal and cannot be ingested")]
    InternalEvent { event_type: String },
    #[error("run-finish must come from the run's orchestrator '{expected}', not '{got}'")]
    FinishNotFromOrchestrator { expected: String, got: String },
    #[error("agent '{0}' is not part of this run")]
    UnknownAgent(String),
    #[error("agent '{0}' has already completed")]
    AgentCompleted(String),
    #[error("agent '{0}' already exists in this run")]
    DuplicateAgent(String),
    #[error("parent agent '{0}' is not part of this run")]
    UnknownParent(String),
    #[error("sub-agent '{0}' cannot spawn sub-agents")]
    SubAgentCannotSpawn(String),
    #[error("agent '{0}' is the orchestrator; only sub-agents complete")]
    OrchestratorCannotComplete(String),
    #[error("tool call '{0}' already exists in this run")]
    DuplicateToolCall(String),
    #[error("tool call '{tool_call_id}' is not open for agent '{agent_id}'")]
    ToolCallNotOpen {
        tool_call_id: String,
        agent_id: String,
    },
    #[error("confirmation request '{0}' already exists")]
    DuplicateConfirmation(String),
    #[error("confirmation request '{0}' is unknown or already answered")]
    ConfirmationNotFound(String),
    #[error("background task '{0}' is unknown or not running")]
    TaskNotFound(String),
    #[error("workflow '{0}' not found")]
    WorkflowNotFound(String),
    #[error("workflow '{0}' already exists")]
    WorkflowExists(String),
    #[error("node '{0}' not found")]
    NodeNotFound(String),
    #[error("a node named '{0}' already exists")]
    DuplicateNode(String),
    #[error("nodes '{from}' and '{to}' are already connected")]
    DuplicateEdge { from: String, to: String },
    #[error("thread has been deleted")]
    ThreadDeleted,
    #[error("thread does not exist")]
    ThreadNotFound,
    #[error("thread '{0}' already exists")]
    ThreadExists(String),
    #[error("event {through_event_id} is not an event of thread '{thread_id}'")]
    ForkPointNotFound {
        thread_id: String,
        through_event_id: i64,
    },
    #[error("event {through_event_id} is inside run '{run_id}' (or while its background tasks run): a fork starts between runs, e.g. just before a user message")]
    ForkInsideRun {
        run_id: String,
        through_event_id: i64,
    },
    #[error("{0}")]
    Invalid(String),
    /// A Durable Stream command stored nothing (see [`StreamRefusal`]: some are answers).
    #[error(transparent)]
    Stream(#[from] StreamRefusal),
    /// A subscription command stored nothing (see
    /// [`SubscriptionRefusal`]: some are answers).
    #[error(transparent)]
    Subscription(#[from] SubscriptionRefusal),
}

impl ThreadError {
    /// A stable machine-readable code for the rule that was broken.
    pub fn code(&self) -> ErrorCode {
        match self {
            ThreadError::RunAlreadyActive { .. } => ErrorCode::RunActive,
            ThreadError::DuplicateRun(_) => ErrorCode::DuplicateRun,
            ThreadError::RunNotLive(_) => ErrorCode::RunNotLive,
            ThreadError::RunFinished(_) => ErrorCode::RunFinished,
            ThreadError::InternalEvent { .. } => ErrorCode::InternalEvent,
            ThreadError::FinishNotFromOrchestrator { .. } => ErrorCode::FinishNotFromOrchestrator,
            ThreadError::UnknownAgent(_) => ErrorCode::UnknownAgent,
            ThreadError::AgentCompleted(_) => ErrorCode::AgentCompleted,
            ThreadError::DuplicateAgent(_) => ErrorCode::DuplicateAgent,
            ThreadError::UnknownParent(_) => ErrorCode::UnknownParent,
            ThreadError::SubAgentCannotSpawn(_) => ErrorCode::SubAgentCannotSpawn,
            ThreadError::OrchestratorCannotComplete(_) => ErrorCode::OrchestratorCannotComplete,
            ThreadError::DuplicateToolCall(_) => ErrorCode::DuplicateToolCall,
            ThreadError::ToolCallNotOpen { .. } => ErrorCode::ToolCallNotOpen,
            ThreadError::DuplicateConfirmation(_) => ErrorCode::DuplicateConfirmation,
            ThreadError::ConfirmationNotFound(_) => ErrorCode::ConfirmationNotFound,
            ThreadError::TaskNotFound(_) => ErrorCode::TaskNotFound,
            ThreadError::WorkflowNotFound(_) => ErrorCode::WorkflowNotFound,
            ThreadError::WorkflowExists(_) => ErrorCode::WorkflowExists,
            ThreadError::NodeNotFound(_) => ErrorCode::NodeNotFound,
            ThreadError::DuplicateNode(_) => ErrorCode::DuplicateNode,
            ThreadError::DuplicateEdge { .. } => ErrorCode::DuplicateEdge,
            ThreadError::ThreadDeleted => ErrorCode::ThreadDeleted,
            ThreadError::ThreadNotFound => ErrorCode::ThreadNotFound,
            ThreadError::ThreadExists(_) => ErrorCode::ThreadExists,
            ThreadError::ForkPointNotFound { .. } => ErrorCode::ForkPointNotFound,
            ThreadError::ForkInsideRun { .. } => ErrorCode::ForkPointInsideRun,
            ThreadError::Invalid(_) => ErrorCode::Invalid,
            ThreadError::Stream(r) => r.code(),
            ThreadError::Subscription(r) => r.code(),
        }
    }

    pub fn class(&self) -> RuleClass {
        match self {
            ThreadError::RunAlreadyActive { .. }
            | ThreadError::DuplicateRun(_)
            | ThreadError::RunFinished(_)
            | ThreadError::DuplicateAgent(_)
            | ThreadError::DuplicateToolCall(_)
            | ThreadError::DuplicateConfirmation(_)
            | ThreadError::AgentCompleted(_)
            | ThreadError::WorkflowExists(_)
            | ThreadError::DuplicateNode(_)
            | ThreadError::DuplicateEdge { .. }
            | ThreadError::ThreadExists(_)
            // A fork point the source cannot be forked at: inside a run, or not in it at all.
            // The source (the request's target) exists, so not a 404.
            | ThreadError::ForkInsideRun { .. }
            | ThreadError::ForkPointNotFound { .. } => RuleClass::Conflict,
            ThreadError::ConfirmationNotFound(_)
            | ThreadError::TaskNotFound(_)
            | ThreadError::WorkflowNotFound(_)
            | ThreadError::NodeNotFound(_)
            | ThreadError::ThreadDeleted
            | ThreadError::ThreadNotFound => RuleClass::NotFound,
            _ => RuleClass::Unprocessable,
        }
    }
}

/// Why a command stored nothing. Some are answers, not failures (`Exists`, `Duplicate`,
/// `AlreadyClosed`): the protocol answers a retry as it answered the first request.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StreamRefusal {
    #[error("stream not found")]
    NotFound,
    #[error("stream was deleted but forks still read through it")]
    Gone,
    #[error("stream already exists with this configuration")]
    Exists { offset: i64, closed: bool },
    #[error("stream already exists with a different configuration")]
    ConfigMismatch,
    #[error("content type '{got}' does not match the stream's '{expected}'")]
    ContentTypeMismatch { expected: String, got: String },
    #[error("stream is closed")]
    Closed { offset: i64 },
    #[error("stream was already closed")]
    AlreadyClosed { offset: i64 },
    #[error("Stream-Seq '{got}' is not after the last one, '{last}'")]
    SeqConflict { last: String, got: String },
    #[error("producer epoch is stale; current epoch is {current}")]
    StaleEpoch { current: u64 },
    #[error("a new producer epoch must start at sequence 0")]
    InvalidEpochSeq,
    #[error("producer sequence gap: expected {expected}, received {received}")]
    SequenceGap { expected: u64, received: u64 },
    #[error("duplicate write (already stored as sequence {last_seq})")]
    Duplicate {
        last_seq: u64,
        closed: bool,
        offset: i64,
    },
    #[error("fork offset is beyond the source stream")]
    ForkOffsetBeyond,
}

impl StreamRefusal {
    pub fn code(&self) -> ErrorCode {
        match self {
            StreamRefusal::NotFound => ErrorCode::NotFound,
            StreamRefusal::Gone => ErrorCode::StreamGone,
            StreamRefusal::Exists { .. } => ErrorCode::StreamExists,
            StreamRefusal::ConfigMismatch => ErrorCode::StreamConfigMismatch,
            StreamRefusal::ContentTypeMismatch { .. } => ErrorCode::ContentTypeMismatch,
            StreamRefusal::Closed { .. } => ErrorCode::StreamClosed,
            StreamRefusal::AlreadyClosed { .. } => ErrorCode::StreamAlreadyClosed,
            StreamRefusal::SeqConflict { .. } => ErrorCode::StreamSeqConflict,
            StreamRefusal::StaleEpoch { .. } => ErrorCode::StaleProducerEpoch,
            StreamRefusal::InvalidEpochSeq => ErrorCode::InvalidEpochSeq,
            StreamRefusal::SequenceGap { .. } => ErrorCode::ProducerSequenceGap,
            StreamRefusal::Duplicate { .. } => ErrorCode::DuplicateWrite,
            StreamRefusal::ForkOffsetBeyond => ErrorCode::ForkOffsetBeyondSource,
        }
    }
}

/// Why a subscription command stored nothing. `Exists` and `NothingToWake` are answers, not
/// failures.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SubscriptionRefusal {
    #[error("subscription not found")]
    NotFound,
    #[error("subscription already exists with this configuration")]
    Exists,
    #[error("subscription already exists with a different configuration")]
    ConfigMismatch,
    #[error("subscription is not {0}")]
    WrongType(&'static str),
    #[error("nothing to wake: a wake is live or no linked stream has pending messages")]
    NothingToWake,
    #[error("the wake is already claimed by '{holder}'")]
    AlreadyClaimed { holder: String, generation: u64 },
    #[error("subscription has no pending work")]
    NoPendingWork,
    #[error("wake generation is stale")]
    Fenced,
    #[error("{0}")]
    InvalidOffset(&'static str),
}

impl SubscriptionRefusal {
    /// The protocol's error code.
    pub fn code(&self) -> ErrorCode {
        match self {
            SubscriptionRefusal::NotFound => ErrorCode::NotFound,
            SubscriptionRefusal::Exists => ErrorCode::DsSubscriptionExists,
            SubscriptionRefusal::ConfigMismatch => ErrorCode::DsSubscriptionAlreadyExists,
            SubscriptionRefusal::WrongType(_) => ErrorCode::DsInvalidRequest,
            SubscriptionRefusal::NothingToWake => ErrorCode::DsNothingToWake,
            SubscriptionRefusal::AlreadyClaimed { .. } => ErrorCode::DsAlreadyClaimed,
            SubscriptionRefusal::NoPendingWork => ErrorCode::DsNoPendingWork,
            SubscriptionRefusal::Fenced => ErrorCode::DsFenced,
            SubscriptionRefusal::InvalidOffset(_) => ErrorCode::DsInvalidOffset,
        }
    }
}
