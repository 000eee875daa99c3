//! The `Thread` aggregate's command-side rules, one cqrs-es `TestFramework` test per rule:
//! each asserts the exact events a command decides or the exact error it is refused with.
//!
//! `TestFramework::when` runs its own current-thread runtime, so these are plain `#[test]`s.

use cqrs_es::test::{AggregateTestExecutor, TestFramework};
use serde_json::{json, Map, Value};
use threadstream_domain::event::*;
use threadstream_domain::{AgentEvent, Thread, ThreadCommand, ThreadError};

// ---------- fixtures ----------

const OWNER: &str = "u1";
const ORCH: &str = "orch";

fn given(events: Vec<AgentEvent>) -> AggregateTestExecutor<Thread> {
    TestFramework::<Thread>::with(()).given(events)
}

fn fold(events: &[AgentEvent]) -> Thread {
    let mut t = Thread::default();
    for e in events {
        t.apply(e);
    }
    t
}

fn created() -> AgentEvent {
    AgentEvent::new(
        "",
        "",
        EventBody::ThreadCreated(ThreadCreated {
            owner: OWNER.into(),
            title: Some("first".into()),
            fork_of: None,
        }),
    )
    .with_user(OWNER)
}

fn deleted() -> AgentEvent {
    AgentEvent::new("", "", EventBody::ThreadDeleted(Empty {})).with_user(OWNER)
}

fn user_message(run: &str, text: &str) -> AgentEvent {
    AgentEvent::new(
        run,
        ORCH,
        EventBody::UserMessage(UserMessage {
            message_id: format!("m-{run}"),
            text: text.into(),
        }),
    )
    .with_user(OWNER)
}

fn run_start(run: &str) -> AgentEvent {
    AgentEvent::new(
        run,
        ORCH,
        EventBody::RunStart(RunStart {
            message_id: format!("m-{run}"),
            message_group_id: None,
        }),
    )
    .with_user(OWNER)
}

fn run_finish(run: &str, agent: &str) -> AgentEvent {
    AgentEvent::new(
        run,
        agent,
        EventBody::RunFinish(RunFinish {
            status: RunStatus::Completed,
            reason: None,
            archived_workflow_ids: None,
        }),
    )
}

fn delta(run: &str, agent: &str, text: &str) -> AgentEvent {
    AgentEvent::new(
        run,
        agent,
        EventBody::TextDelta(TextDelta { text: text.into() }),
    )
}

fn spawned(run: &str, agent: &str, parent: &str) -> AgentEvent {
    AgentEvent::new(
        run,
        agent,
        EventBody::AgentSpawned(AgentSpawned {
            parent_id: parent.into(),
            role: "builder".into(),
            tools: vec!["build-workflow".into()],
            task_id: None,
            kind: Some(AgentKind::Builder),
            title: None,
            subtitle: None,
            goal: None,
            target_resource: None,
        }),
    )
}

fn completed(run: &str, agent: &str) -> AgentEvent {
    AgentEvent::new(
        run,
        agent,
        EventBody::AgentCompleted(AgentCompleted {
            role: "builder".into(),
            result: "done".into(),
            error: None,
        }),
    )
}

fn args() -> Map<String, Value> {
    json!({"id": "wf-1"}).as_object().unwrap().clone()
}

fn tool_call(run: &str, agent: &str, id: &str) -> AgentEvent {
    AgentEvent::new(
        run,
        agent,
        EventBody::ToolCall(ToolCall {
            tool_call_id: id.into(),
            tool_name: "delete-workflow".into(),
            args: args(),
        }),
    )
}

fn tool_result(run: &str, agent: &str, id: &str) -> AgentEvent {
    AgentEvent::new(
        run,
        agent,
        EventBody::ToolResult(ToolResult {
            tool_call_id: id.into(),
            result: json!({"ok": true}),
        }),
    )
}

fn tool_error(run: &str, agent: &str, id: &str) -> AgentEvent {
    AgentEvent::new(
        run,
        agent,
        EventBody::ToolError(ToolError {
            tool_call_id: id.into(),
            error: "boom".into(),
        }),
    )
}

fn confirmation_request(run: &str, agent: &str, req: &str, tc: &str) -> AgentEvent {
    AgentEvent::new(
        run,
        agent,
        EventBody::ConfirmationRequest(Box::new(ConfirmationRequest::approval(
            req,
            tc,
            "delete-workflow",
            args(),
            Severity::Destructive,
            "Delete the workflow?",
        ))),
    )
}

fn answered(run: &str, req: &str, approved: bool) -> AgentEvent {
    AgentEvent::new(
        run,
        ORCH,
        EventBody::ConfirmationAnswered(ConfirmationAnswered {
            request_id: req.into(),
            approved,
            user_input: None,
            answers: None,
        }),
    )
    .with_user(OWNER)
}

fn cancel_requested(run: &str) -> AgentEvent {
    AgentEvent::new(
        run,
        ORCH,
        EventBody::CancelRequested(CancelRequested {
            reason: "user".into(),
        }),
    )
    .with_user(OWNER)
}

/// A created thread.
fn thread() -> Vec<AgentEvent> {
    vec![created()]
}

/// A created thread with `run` live (as `StartRun` stores it).
fn live(run: &str) -> Vec<AgentEvent> {
    vec![created(), user_message(run, "hi"), run_start(run)]
}

/// `live(run)` plus an orchestrator tool call `tc-1` waiting on confirmation `cr-1`.
fn suspended(run: &str) -> Vec<AgentEvent> {
    let mut v = live(run);
    v.push(tool_call(run, ORCH, "tc-1"));
    v.push(confirmation_request(run, ORCH, "cr-1", "tc-1"));
    v
}

/// A created thread whose run `run` has finished.
fn finished(run: &str) -> Vec<AgentEvent> {
    let mut v = live(run);
    v.push(run_finish(run, ORCH));
    v
}

fn with(mut base: Vec<AgentEvent>, more: impl IntoIterator<Item = AgentEvent>) -> Vec<AgentEvent> {
    base.extend(more);
    base
}

fn create() -> ThreadCommand {
    ThreadCommand::Create {
        owner: OWNER.into(),
        title: Some("first".into()),
    }
}

fn start(run: &str) -> ThreadCommand {
    ThreadCommand::StartRun {
        run_id: run.into(),
        agent_id: ORCH.into(),
        message_id: format!("m-{run}"),
        message_group_id: None,
        text: "hi".into(),
        user: OWNER.into(),
    }
}

fn record(e: AgentEvent) -> ThreadCommand {
    ThreadCommand::Record(e)
}

fn answer(req: &str, approved: bool) -> ThreadCommand {
    ThreadCommand::AnswerConfirmation {
        request_id: req.into(),
        approved,
        user_input: None,
        answers: None,
        by: OWNER.into(),
    }
}

fn cancel() -> ThreadCommand {
    ThreadCommand::Cancel {
        by: OWNER.into(),
        reason: "user".into(),
    }
}

fn delete() -> ThreadCommand {
    ThreadCommand::Delete { by: OWNER.into() }
}

// ---------- thread lifecycle ----------

#[test]
fn create_new_thread_emits_thread_created() {
    given(vec![])
        .when(create())
        .then_expect_events(vec![created()]);
}

#[test]
fn create_is_idempotent_when_the_thread_exists() {
    given(thread()).when(create()).then_expect_events(vec![]);
    given(live("r1")).when(create()).then_expect_events(vec![]);
}

#[test]
fn create_by_another_user_is_thread_not_found() {
    let other = ThreadCommand::Create {
        owner: "u2".into(),
        title: None,
    };
    given(thread())
        .when(other)
        .then_expect_error(ThreadError::ThreadNotFound);
}

#[test]
fn commands_on_a_missing_thread_are_thread_not_found() {
    let rename = ThreadCommand::Rename {
        title: "x".into(),
        by: OWNER.into(),
    };
    for command in [
        rename,
        delete(),
        start("r1"),
        record(delta("r1", ORCH, "x")),
    ] {
        given(vec![])
            .when(command)
            .then_expect_error(ThreadError::ThreadNotFound);
    }
}

#[test]
fn answer_and_cancel_on_a_missing_thread() {
    // Not ThreadNotFound: these look only at the live run. Confirming an unknown request is a
    // 404 either way; cancel is idempotent and answers ok (as n8n's `POST /chat/:id/cancel` does).
    given(vec![])
        .when(answer("cr-1", true))
        .then_expect_error(ThreadError::ConfirmationNotFound("cr-1".into()));
    given(vec![]).when(cancel()).then_expect_events(vec![]);
}

#[test]
fn rename_emits_thread_renamed() {
    given(thread())
        .when(ThreadCommand::Rename {
            title: "second".into(),
            by: OWNER.into(),
        })
        .then_expect_events(vec![AgentEvent::new(
            "",
            "",
            EventBody::ThreadRenamed(ThreadTitle {
                title: "second".into(),
            }),
        )
        .with_user(OWNER)]);
}

#[test]
fn delete_emits_thread_deleted_when_no_run_is_live() {
    given(thread())
        .when(delete())
        .then_expect_events(vec![deleted()]);
    given(finished("r1"))
        .when(delete())
        .then_expect_events(vec![deleted()]);
}

#[test]
fn delete_is_refused_while_a_run_is_live() {
    given(live("r1"))
        .when(delete())
        .then_expect_error(ThreadError::RunAlreadyActive {
            run_id: "r1".into(),
        });
    given(suspended("r1"))
        .when(delete())
        .then_expect_error(ThreadError::RunAlreadyActive {
            run_id: "r1".into(),
        });
}

#[test]
fn everything_on_a_deleted_thread_is_thread_deleted() {
    let rename = ThreadCommand::Rename {
        title: "x".into(),
        by: OWNER.into(),
    };
    for command in [
        create(),
        rename,
        delete(),
        start("r2"),
        record(delta("r1", ORCH, "x")),
        answer("cr-1", true),
        cancel(),
    ] {
        given(with(finished("r1"), [deleted()]))
            .when(command)
            .then_expect_error(ThreadError::ThreadDeleted);
    }
}

// ---------- runs ----------

#[test]
fn start_run_emits_user_message_then_run_start_as_the_user() {
    let events = given(thread()).when(start("r1")).inspect_result().unwrap();
    assert_eq!(events, vec![user_message("r1", "hi"), run_start("r1")]);
    assert!(events.iter().all(|e| e.user_id.as_deref() == Some(OWNER)));
    given(thread())
        .when(start("r1"))
        .then_expect_events(vec![user_message("r1", "hi"), run_start("r1")]);
}

#[test]
fn start_run_keeps_the_message_group_id() {
    given(thread())
        .when(ThreadCommand::StartRun {
            run_id: "r1".into(),
            agent_id: ORCH.into(),
            message_id: "m-1".into(),
            message_group_id: Some("g-1".into()),
            text: "build me a workflow".into(),
            user: "u2".into(),
        })
        .then_expect_events(vec![
            AgentEvent::new(
                "r1",
                ORCH,
                EventBody::UserMessage(UserMessage {
                    message_id: "m-1".into(),
                    text: "build me a workflow".into(),
                }),
            )
            .with_user("u2"),
            AgentEvent::new(
                "r1",
                ORCH,
                EventBody::RunStart(RunStart {
                    message_id: "m-1".into(),
                    message_group_id: Some("g-1".into()),
                }),
            )
            .with_user("u2"),
        ]);
}

#[test]
fn start_run_is_refused_while_a_run_is_active() {
    given(live("r1"))
        .when(start("r2"))
        .then_expect_error(ThreadError::RunAlreadyActive {
            run_id: "r1".into(),
        });
    // Also through ingest.
    given(live("r1"))
        .when(record(run_start("r2")))
        .then_expect_error(ThreadError::RunAlreadyActive {
            run_id: "r1".into(),
        });
}

#[test]
fn start_run_is_refused_while_waiting_on_a_confirmation() {
    assert!(fold(&suspended("r1")).is_suspended());
    given(suspended("r1"))
        .when(start("r2"))
        .then_expect_error(ThreadError::RunAlreadyActive {
            run_id: "r1".into(),
        });
}

#[test]
fn start_run_with_a_reused_run_id_is_duplicate_run() {
    given(finished("r1"))
        .when(start("r1"))
        .then_expect_error(ThreadError::DuplicateRun("r1".into()));
}

#[test]
fn start_run_is_allowed_again_after_run_finish() {
    given(finished("r1"))
        .when(start("r2"))
        .then_expect_events(vec![user_message("r2", "hi"), run_start("r2")]);
}

#[test]
fn start_run_needs_run_and_agent_ids() {
    given(thread())
        .when(ThreadCommand::StartRun {
            run_id: "".into(),
            agent_id: ORCH.into(),
            message_id: "m".into(),
            message_group_id: None,
            text: "hi".into(),
            user: OWNER.into(),
        })
        .then_expect_error(ThreadError::Invalid(
            "run-start needs a non-empty runId and agentId".into(),
        ));
}

#[test]
fn run_start_opens_and_run_finish_closes_a_run() {
    let opened = with(thread(), [run_start("r1")]);
    given(thread())
        .when(record(run_start("r1")))
        .then_expect_events(vec![run_start("r1")]);
    assert_eq!(fold(&opened).live_run().unwrap().run_id, "r1");
    given(opened.clone())
        .when(record(delta("r1", ORCH, "hello")))
        .then_expect_events(vec![delta("r1", ORCH, "hello")]);
    given(opened.clone())
        .when(record(run_finish("r1", ORCH)))
        .then_expect_events(vec![run_finish("r1", ORCH)]);
    assert!(fold(&with(opened, [run_finish("r1", ORCH)]))
        .live_run()
        .is_none());
}

#[test]
fn nothing_of_a_run_after_its_run_finish() {
    for e in [
        delta("r1", ORCH, "late"),
        run_finish("r1", ORCH),
        tool_call("r1", ORCH, "tc-9"),
        spawned("r1", "sub", ORCH),
    ] {
        given(finished("r1"))
            .when(record(e))
            .then_expect_error(ThreadError::RunFinished("r1".into()));
    }
    // Still RunFinished while a later run is live.
    given(with(
        finished("r1"),
        [user_message("r2", "again"), run_start("r2")],
    ))
    .when(record(delta("r1", ORCH, "late")))
    .then_expect_error(ThreadError::RunFinished("r1".into()));
}

#[test]
fn events_of_a_run_that_never_started_are_run_not_live() {
    given(thread())
        .when(record(delta("r1", ORCH, "x")))
        .then_expect_error(ThreadError::RunNotLive("r1".into()));
    given(live("r1"))
        .when(record(delta("other", ORCH, "x")))
        .then_expect_error(ThreadError::RunNotLive("other".into()));
    given(thread())
        .when(record(run_finish("r1", ORCH)))
        .then_expect_error(ThreadError::RunNotLive("r1".into()));
}

#[test]
fn run_finish_only_from_the_orchestrator() {
    let base = with(live("r1"), [spawned("r1", "sub", ORCH)]);
    given(base.clone())
        .when(record(run_finish("r1", "sub")))
        .then_expect_error(ThreadError::FinishNotFromOrchestrator {
            expected: ORCH.into(),
            got: "sub".into(),
        });
    given(base)
        .when(record(run_finish("r1", ORCH)))
        .then_expect_events(vec![run_finish("r1", ORCH)]);
}

// ---------- tool calls ----------

#[test]
fn tool_result_and_error_settle_an_open_call_of_the_same_agent() {
    let base = with(live("r1"), [tool_call("r1", ORCH, "tc-1")]);
    given(base.clone())
        .when(record(tool_result("r1", ORCH, "tc-1")))
        .then_expect_events(vec![tool_result("r1", ORCH, "tc-1")]);
    given(base)
        .when(record(tool_error("r1", ORCH, "tc-1")))
        .then_expect_events(vec![tool_error("r1", ORCH, "tc-1")]);
}

#[test]
fn tool_result_for_an_unknown_call_is_not_open() {
    given(live("r1"))
        .when(record(tool_result("r1", ORCH, "nope")))
        .then_expect_error(ThreadError::ToolCallNotOpen {
            tool_call_id: "nope".into(),
            agent_id: ORCH.into(),
        });
    given(live("r1"))
        .when(record(tool_error("r1", ORCH, "nope")))
        .then_expect_error(ThreadError::ToolCallNotOpen {
            tool_call_id: "nope".into(),
            agent_id: ORCH.into(),
        });
}

#[test]
fn tool_result_for_a_settled_call_is_not_open() {
    let base = with(
        live("r1"),
        [
            tool_call("r1", ORCH, "tc-1"),
            tool_result("r1", ORCH, "tc-1"),
        ],
    );
    given(base.clone())
        .when(record(tool_result("r1", ORCH, "tc-1")))
        .then_expect_error(ThreadError::ToolCallNotOpen {
            tool_call_id: "tc-1".into(),
            agent_id: ORCH.into(),
        });
    given(base)
        .when(record(tool_error("r1", ORCH, "tc-1")))
        .then_expect_error(ThreadError::ToolCallNotOpen {
            tool_call_id: "tc-1".into(),
            agent_id: ORCH.into(),
        });
}

#[test]
fn tool_result_for_another_agents_call_is_not_open() {
    let base = with(
        live("r1"),
        [spawned("r1", "sub", ORCH), tool_call("r1", "sub", "tc-1")],
    );
    given(base.clone())
        .when(record(tool_result("r1", ORCH, "tc-1")))
        .then_expect_error(ThreadError::ToolCallNotOpen {
            tool_call_id: "tc-1".into(),
            agent_id: ORCH.into(),
        });
    given(base.clone())
        .when(record(tool_error("r1", ORCH, "tc-1")))
        .then_expect_error(ThreadError::ToolCallNotOpen {
            tool_call_id: "tc-1".into(),
            agent_id: ORCH.into(),
        });
    given(base)
        .when(record(tool_result("r1", "sub", "tc-1")))
        .then_expect_events(vec![tool_result("r1", "sub", "tc-1")]);
}

#[test]
fn duplicate_tool_call_id_is_refused() {
    let open = with(live("r1"), [tool_call("r1", ORCH, "tc-1")]);
    given(open.clone())
        .when(record(tool_call("r1", ORCH, "tc-1")))
        .then_expect_error(ThreadError::DuplicateToolCall("tc-1".into()));
    // Also once settled, and from another agent.
    let settled = with(
        open,
        [tool_result("r1", ORCH, "tc-1"), spawned("r1", "sub", ORCH)],
    );
    given(settled.clone())
        .when(record(tool_call("r1", "sub", "tc-1")))
        .then_expect_error(ThreadError::DuplicateToolCall("tc-1".into()));
    given(settled)
        .when(record(tool_call("r1", "sub", "tc-2")))
        .then_expect_events(vec![tool_call("r1", "sub", "tc-2")]);
}

#[test]
fn tool_call_ids_are_per_run() {
    given(with(
        finished("r1"),
        [user_message("r2", "hi"), run_start("r2")],
    ))
    .when(record(tool_call("r2", ORCH, "tc-1")))
    .then_expect_events(vec![tool_call("r2", ORCH, "tc-1")]);
}

// ---------- agents ----------

#[test]
fn agent_spawned_by_the_orchestrator_is_accepted() {
    given(live("r1"))
        .when(record(spawned("r1", "sub", ORCH)))
        .then_expect_events(vec![spawned("r1", "sub", ORCH)]);
}

#[test]
fn agent_spawned_with_an_unknown_parent_is_refused() {
    given(live("r1"))
        .when(record(spawned("r1", "sub", "ghost")))
        .then_expect_error(ThreadError::UnknownParent("ghost".into()));
}

#[test]
fn a_sub_agent_cannot_spawn() {
    given(with(live("r1"), [spawned("r1", "sub", ORCH)]))
        .when(record(spawned("r1", "subsub", "sub")))
        .then_expect_error(ThreadError::SubAgentCannotSpawn("sub".into()));
}

#[test]
fn duplicate_agent_id_is_refused() {
    let base = with(live("r1"), [spawned("r1", "sub", ORCH)]);
    given(base.clone())
        .when(record(spawned("r1", "sub", ORCH)))
        .then_expect_error(ThreadError::DuplicateAgent("sub".into()));
    // Completed agents keep their id, and the orchestrator's id is taken.
    given(with(base, [completed("r1", "sub")]))
        .when(record(spawned("r1", "sub", ORCH)))
        .then_expect_error(ThreadError::DuplicateAgent("sub".into()));
    given(live("r1"))
        .when(record(spawned("r1", ORCH, ORCH)))
        .then_expect_error(ThreadError::DuplicateAgent(ORCH.into()));
}

#[test]
fn events_from_unknown_agents_are_refused() {
    for e in [
        delta("r1", "ghost", "x"),
        tool_call("r1", "ghost", "tc-1"),
        completed("r1", "ghost"),
    ] {
        given(live("r1"))
            .when(record(e))
            .then_expect_error(ThreadError::UnknownAgent("ghost".into()));
    }
}

#[test]
fn events_from_completed_sub_agents_are_refused() {
    let done = with(
        live("r1"),
        [spawned("r1", "sub", ORCH), completed("r1", "sub")],
    );
    for e in [
        delta("r1", "sub", "x"),
        tool_call("r1", "sub", "tc-1"),
        completed("r1", "sub"),
    ] {
        given(done.clone())
            .when(record(e))
            .then_expect_error(ThreadError::AgentCompleted("sub".into()));
    }
    // The orchestrator goes on.
    given(done)
        .when(record(delta("r1", ORCH, "x")))
        .then_expect_events(vec![delta("r1", ORCH, "x")]);
}

#[test]
fn completed_sub_agent_cannot_settle_or_ask_about_its_calls() {
    // agent-completed settles the agent's loading calls (n8n's reducer does the same), so
    // nothing of that agent follows, and its pending confirmation no longer suspends the run.
    let done = with(
        live("r1"),
        [
            spawned("r1", "sub", ORCH),
            tool_call("r1", "sub", "tc-1"),
            tool_call("r1", "sub", "tc-2"),
            confirmation_request("r1", "sub", "cr-1", "tc-2"),
            completed("r1", "sub"),
        ],
    );
    for e in [
        tool_result("r1", "sub", "tc-1"),
        tool_error("r1", "sub", "tc-1"),
        confirmation_request("r1", "sub", "cr-2", "tc-1"),
    ] {
        given(done.clone())
            .when(record(e))
            .then_expect_error(ThreadError::AgentCompleted("sub".into()));
    }
    let t = fold(&done);
    assert!(!t.is_suspended());
    assert!(t.live_run().unwrap().open_tool_calls.is_empty());
    given(done)
        .when(answer("cr-1", true))
        .then_expect_error(ThreadError::ConfirmationNotFound("cr-1".into()));
}

#[test]
fn a_sub_agent_completes_but_the_orchestrator_cannot() {
    given(with(live("r1"), [spawned("r1", "sub", ORCH)]))
        .when(record(completed("r1", "sub")))
        .then_expect_events(vec![completed("r1", "sub")]);
    given(live("r1"))
        .when(record(completed("r1", ORCH)))
        .then_expect_error(ThreadError::OrchestratorCannotComplete(ORCH.into()));
}

// ---------- confirmations ----------

#[test]
fn confirmation_request_for_an_open_tool_call_suspends_the_run() {
    let base = with(live("r1"), [tool_call("r1", ORCH, "tc-1")]);
    given(base.clone())
        .when(record(confirmation_request("r1", ORCH, "cr-1", "tc-1")))
        .then_expect_events(vec![confirmation_request("r1", ORCH, "cr-1", "tc-1")]);
    assert!(!fold(&base).is_suspended());
    assert!(fold(&suspended("r1")).is_suspended());
}

#[test]
fn confirmation_request_without_an_open_tool_call_is_refused() {
    // Unknown call.
    given(live("r1"))
        .when(record(confirmation_request("r1", ORCH, "cr-1", "nope")))
        .then_expect_error(ThreadError::ToolCallNotOpen {
            tool_call_id: "nope".into(),
            agent_id: ORCH.into(),
        });
    // Settled call.
    given(with(
        live("r1"),
        [
            tool_call("r1", ORCH, "tc-1"),
            tool_result("r1", ORCH, "tc-1"),
        ],
    ))
    .when(record(confirmation_request("r1", ORCH, "cr-1", "tc-1")))
    .then_expect_error(ThreadError::ToolCallNotOpen {
        tool_call_id: "tc-1".into(),
        agent_id: ORCH.into(),
    });
    // Another agent's call.
    given(with(
        live("r1"),
        [spawned("r1", "sub", ORCH), tool_call("r1", "sub", "tc-1")],
    ))
    .when(record(confirmation_request("r1", ORCH, "cr-1", "tc-1")))
    .then_expect_error(ThreadError::ToolCallNotOpen {
        tool_call_id: "tc-1".into(),
        agent_id: ORCH.into(),
    });
}

#[test]
fn duplicate_confirmation_request_id_is_refused() {
    let base = with(suspended("r1"), [tool_call("r1", ORCH, "tc-2")]);
    given(base.clone())
        .when(record(confirmation_request("r1", ORCH, "cr-1", "tc-2")))
        .then_expect_error(ThreadError::DuplicateConfirmation("cr-1".into()));
    // Request ids are unique across the whole thread, even after the run finished.
    let later = with(
        suspended("r1"),
        [
            answered("r1", "cr-1", true),
            tool_result("r1", ORCH, "tc-1"),
            run_finish("r1", ORCH),
            user_message("r2", "again"),
            run_start("r2"),
            tool_call("r2", ORCH, "tc-1"),
        ],
    );
    given(later)
        .when(record(confirmation_request("r2", ORCH, "cr-1", "tc-1")))
        .then_expect_error(ThreadError::DuplicateConfirmation("cr-1".into()));
}

#[test]
fn answer_confirmation_emits_confirmation_answered() {
    given(suspended("r1"))
        .when(answer("cr-1", true))
        .then_expect_events(vec![answered("r1", "cr-1", true)]);
    given(suspended("r1"))
        .when(ThreadCommand::AnswerConfirmation {
            request_id: "cr-1".into(),
            approved: false,
            user_input: Some("not this one".into()),
            answers: Some(json!({"q": "a"})),
            by: "u2".into(),
        })
        .then_expect_events(vec![AgentEvent::new(
            "r1",
            ORCH,
            EventBody::ConfirmationAnswered(ConfirmationAnswered {
                request_id: "cr-1".into(),
                approved: false,
                user_input: Some("not this one".into()),
                answers: Some(json!({"q": "a"})),
            }),
        )
        .with_user("u2")]);
}

#[test]
fn a_confirmation_is_answered_once() {
    given(with(suspended("r1"), [answered("r1", "cr-1", true)]))
        .when(answer("cr-1", false))
        .then_expect_error(ThreadError::ConfirmationNotFound("cr-1".into()));
}

#[test]
fn answering_an_unknown_request_is_not_found() {
    given(suspended("r1"))
        .when(answer("cr-9", true))
        .then_expect_error(ThreadError::ConfirmationNotFound("cr-9".into()));
    given(live("r1"))
        .when(answer("cr-1", true))
        .then_expect_error(ThreadError::ConfirmationNotFound("cr-1".into()));
    // A request of a finished run cannot be answered.
    given(with(suspended("r1"), [run_finish("r1", ORCH)]))
        .when(answer("cr-1", true))
        .then_expect_error(ThreadError::ConfirmationNotFound("cr-1".into()));
}

#[test]
fn a_settled_tool_call_withdraws_its_confirmation_request() {
    let settled = with(suspended("r1"), [tool_error("r1", ORCH, "tc-1")]);
    assert!(!fold(&settled).is_suspended());
    given(settled)
        .when(answer("cr-1", true))
        .then_expect_error(ThreadError::ConfirmationNotFound("cr-1".into()));
}

#[test]
fn after_the_answer_the_thread_is_no_longer_suspended() {
    let before = suspended("r1");
    let t = fold(&before);
    assert!(t.is_suspended());
    let events = given(before.clone())
        .when(answer("cr-1", true))
        .inspect_result()
        .unwrap();
    let mut t = t;
    for e in &events {
        t.apply(e);
    }
    assert!(!t.is_suspended());
    // Still live (the tool call runs now), so a new run is still refused.
    assert_eq!(t.live_run().unwrap().run_id, "r1");
    given(with(before, events))
        .when(start("r2"))
        .then_expect_error(ThreadError::RunAlreadyActive {
            run_id: "r1".into(),
        });
}

#[test]
fn two_pending_confirmations_suspend_until_both_are_answered() {
    let two = with(
        suspended("r1"),
        [
            tool_call("r1", ORCH, "tc-2"),
            confirmation_request("r1", ORCH, "cr-2", "tc-2"),
        ],
    );
    let one_left = with(two, [answered("r1", "cr-1", true)]);
    assert!(fold(&one_left).is_suspended());
    assert!(!fold(&with(one_left, [answered("r1", "cr-2", false)])).is_suspended());
}

// ---------- cancel ----------

#[test]
fn cancel_emits_cancel_requested_when_a_run_is_live() {
    given(live("r1"))
        .when(cancel())
        .then_expect_events(vec![cancel_requested("r1")]);
    given(suspended("r1"))
        .when(cancel())
        .then_expect_events(vec![cancel_requested("r1")]);
}

#[test]
fn a_second_cancel_is_a_no_op() {
    let cancelled = with(live("r1"), [cancel_requested("r1")]);
    given(cancelled.clone())
        .when(cancel())
        .then_expect_events(vec![]);
    // The run is still live until its run-finish.
    assert!(fold(&cancelled).live_run().unwrap().cancel_requested);
    given(cancelled)
        .when(record(AgentEvent::new(
            "r1",
            ORCH,
            EventBody::RunFinish(RunFinish {
                status: RunStatus::Cancelled,
                reason: Some("user_cancelled".into()),
                archived_workflow_ids: None,
            }),
        )))
        .then_expect_events(vec![AgentEvent::new(
            "r1",
            ORCH,
            EventBody::RunFinish(RunFinish {
                status: RunStatus::Cancelled,
                reason: Some("user_cancelled".into()),
                archived_workflow_ids: None,
            }),
        )]);
}

#[test]
fn cancel_without_a_live_run_is_a_no_op() {
    given(thread()).when(cancel()).then_expect_events(vec![]);
    given(finished("r1"))
        .when(cancel())
        .then_expect_events(vec![]);
    given(with(
        live("r1"),
        [cancel_requested("r1"), run_finish("r1", ORCH)],
    ))
    .when(cancel())
    .then_expect_events(vec![]);
}

#[test]
fn cancel_of_a_later_run_is_not_blocked_by_an_earlier_cancel() {
    let second = with(
        live("r1"),
        [
            cancel_requested("r1"),
            run_finish("r1", ORCH),
            user_message("r2", "again"),
            run_start("r2"),
        ],
    );
    given(second)
        .when(cancel())
        .then_expect_events(vec![cancel_requested("r2")]);
}

// ---------- ingest ----------

#[test]
fn record_refuses_internal_event_types() {
    for e in [
        user_message("r1", "hi"),
        answered("r1", "cr-1", true),
        cancel_requested("r1"),
        created(),
        deleted(),
        AgentEvent::new(
            "",
            "",
            EventBody::ThreadRenamed(ThreadTitle { title: "x".into() }),
        ),
    ] {
        let event_type = e.body.event_type().to_string();
        given(suspended("r1"))
            .when(record(e))
            .then_expect_error(ThreadError::InternalEvent { event_type });
    }
}

#[test]
fn record_accepts_the_other_n8n_types_from_a_known_agent() {
    let base = with(live("r1"), [tool_call("r1", ORCH, "tc-1")]);
    for body in [
        EventBody::ReasoningDelta(TextDelta { text: "hm".into() }),
        EventBody::Status(Status {
            message: "thinking".into(),
        }),
        EventBody::Error(ErrorPayload {
            content: "rate limited".into(),
            status_code: None,
            provider: None,
            technical_details: None,
        }),
        EventBody::TasksUpdate(TasksUpdate {
            tasks: TaskList { tasks: vec![] },
            plan_items: None,
        }),
        EventBody::ThreadTitleUpdated(ThreadTitle {
            title: "auto".into(),
        }),
        EventBody::FilesystemRequest(FilesystemRequest {
            request_id: "fs-1".into(),
            tool_call: McpToolCall {
                name: "read".into(),
                arguments: Map::new(),
            },
        }),
    ] {
        let e = AgentEvent::new("r1", ORCH, body).with_response("resp-1");
        given(base.clone())
            .when(record(e.clone()))
            .then_expect_events(vec![e]);
    }
}

// ---------- a long realistic run ----------

/// Decides `command` against `state`, applies what it decided and returns it.
fn step(state: &mut Thread, log: &mut Vec<AgentEvent>, command: ThreadCommand) -> usize {
    let events = state
        .decide(&command)
        .unwrap_or_else(|e| panic!("{command:?} refused: {e}"));
    for e in &events {
        state.apply(e);
    }
    let n = events.len();
    log.extend(events);
    n
}

#[test]
fn a_long_realistic_sequence_folds_to_the_expected_state() {
    let mut t = Thread::default();
    let mut log = Vec::new();

    // Run 1: orchestrator streams, spawns two builders, one asks for a confirmation.
    step(&mut t, &mut log, create());
    step(&mut t, &mut log, create()); // idempotent
    step(&mut t, &mut log, start("r1"));
    for i in 0..50 {
        step(
            &mut t,
            &mut log,
            record(delta("r1", ORCH, &format!("t{i} "))),
        );
    }
    step(&mut t, &mut log, record(tool_call("r1", ORCH, "plan")));
    step(&mut t, &mut log, record(tool_result("r1", ORCH, "plan")));
    for sub in ["b1", "b2"] {
        step(&mut t, &mut log, record(spawned("r1", sub, ORCH)));
        for i in 0..10 {
            step(
                &mut t,
                &mut log,
                record(AgentEvent::new(
                    "r1",
                    sub,
                    EventBody::ReasoningDelta(TextDelta {
                        text: format!("r{i}"),
                    }),
                )),
            );
        }
    }
    step(&mut t, &mut log, record(tool_call("r1", "b1", "b1-tc")));
    step(
        &mut t,
        &mut log,
        record(confirmation_request("r1", "b1", "cr-1", "b1-tc")),
    );
    assert!(t.is_suspended());
    assert!(t.decide(&start("r2")).is_err());
    step(&mut t, &mut log, answer("cr-1", true));
    assert!(!t.is_suspended());
    step(&mut t, &mut log, record(tool_result("r1", "b1", "b1-tc")));
    step(&mut t, &mut log, record(completed("r1", "b1")));
    step(&mut t, &mut log, record(tool_call("r1", "b2", "b2-tc")));
    step(&mut t, &mut log, record(tool_error("r1", "b2", "b2-tc")));
    step(&mut t, &mut log, record(completed("r1", "b2")));
    step(&mut t, &mut log, record(run_finish("r1", ORCH)));
    assert!(t.live_run().is_none());
    assert_eq!(step(&mut t, &mut log, cancel()), 0); // no-op after the run

    // Run 2: a confirmation is pending when the user cancels; the run finishes cancelled.
    step(&mut t, &mut log, start("r2"));
    step(&mut t, &mut log, record(delta("r2", ORCH, "again")));
    step(&mut t, &mut log, record(tool_call("r2", ORCH, "del")));
    step(
        &mut t,
        &mut log,
        record(confirmation_request("r2", ORCH, "cr-2", "del")),
    );
    step(&mut t, &mut log, cancel());
    assert_eq!(step(&mut t, &mut log, cancel()), 0); // idempotent
    step(&mut t, &mut log, record(tool_error("r2", ORCH, "del")));
    step(
        &mut t,
        &mut log,
        record(AgentEvent::new(
            "r2",
            ORCH,
            EventBody::RunFinish(RunFinish {
                status: RunStatus::Cancelled,
                reason: Some("user_cancelled".into()),
                archived_workflow_ids: None,
            }),
        )),
    );

    // Run 3: still live and waiting on a confirmation at the end.
    step(&mut t, &mut log, start("r3"));
    step(&mut t, &mut log, record(spawned("r3", "p1", ORCH)));
    step(&mut t, &mut log, record(tool_call("r3", "p1", "ask")));
    step(
        &mut t,
        &mut log,
        record(confirmation_request("r3", "p1", "cr-3", "ask")),
    );

    // 1 created
    // + run 1: 2 start + 50 deltas + 2 plan + 2 * (1 spawn + 10 reasoning) + 2 ask + 1 answer
    //   + 2 b1 + 3 b2 + 1 finish = 85
    // + run 2: 2 start + 1 delta + 2 ask + 1 cancel + 1 tool-error + 1 finish = 8
    // + run 3: 2 start + 1 spawn + 2 ask = 5.
    let expected = 1 + 85 + 8 + 5;
    assert_eq!(log.len(), expected);
    assert_eq!(t.version, expected as u64);

    // Folding the stored events from scratch gives the same state.
    let replayed = fold(&log);
    assert_eq!(replayed, t);
    let live = replayed.live_run().expect("r3 is live");
    assert_eq!(live.run_id, "r3");
    assert_eq!(live.orchestrator, ORCH);
    assert!(!live.cancel_requested);
    assert_eq!(live.agents.len(), 2);
    assert_eq!(live.open_tool_calls.len(), 1);
    assert!(replayed.is_suspended());
    assert_eq!(
        replayed.runs,
        ["r1", "r2", "r3"].iter().map(|s| s.to_string()).collect()
    );
    assert_eq!(replayed.owner.as_deref(), Some(OWNER));

    // And cqrs-es's framework agrees on what comes next.
    given(log.clone())
        .when(start("r4"))
        .then_expect_error(ThreadError::RunAlreadyActive {
            run_id: "r3".into(),
        });
    given(log.clone())
        .when(answer("cr-3", false))
        .then_expect_events(vec![answered("r3", "cr-3", false)]);
    given(log)
        .when(record(delta("r2", ORCH, "late")))
        .then_expect_error(ThreadError::RunFinished("r2".into()));
}

// ---------- agent-runtime commands: summaries, usage, background tasks ----------

fn task_spawned(run: &str, agent: &str, task: &str) -> AgentEvent {
    let mut e = spawned(run, agent, ORCH);
    if let EventBody::AgentSpawned(p) = &mut e.body {
        p.task_id = Some(task.into());
    }
    e
}

#[test]
fn summarize_and_usage_are_internal_events_of_the_live_run() {
    let summarize = |run: &str| ThreadCommand::Summarize {
        run_id: run.into(),
        agent_id: ORCH.into(),
        summary: "Goal: x".into(),
        covered_through_id: 7,
    };
    given(live("r1"))
        .when(summarize("r1"))
        .then_expect_events(vec![AgentEvent::new(
            "r1",
            ORCH,
            EventBody::ConversationSummary(ConversationSummary {
                summary: "Goal: x".into(),
                covered_through_id: 7,
            }),
        )]);
    given(finished("r1"))
        .when(summarize("r1"))
        .then_expect_error(ThreadError::RunFinished("r1".into()));
    let usage = LlmUsage {
        model: "openai/m".into(),
        input_tokens: 3,
        output_tokens: 4,
        ..Default::default()
    };
    given(live("r1"))
        .when(ThreadCommand::RecordUsage {
            run_id: "r1".into(),
            agent_id: ORCH.into(),
            usage: usage.clone(),
        })
        .then_expect_events(vec![AgentEvent::new(
            "r1",
            ORCH,
            EventBody::LlmUsage(usage.clone()),
        )]);
    given(live("r1"))
        .when(ThreadCommand::RecordUsage {
            run_id: "r1".into(),
            agent_id: "nobody".into(),
            usage,
        })
        .then_expect_error(ThreadError::UnknownAgent("nobody".into()));
    // Ingest cannot write them.
    given(live("r1"))
        .when(record(AgentEvent::new(
            "r1",
            ORCH,
            EventBody::LlmUsage(LlmUsage {
                model: "m".into(),
                input_tokens: 1,
                output_tokens: 1,
                ..Default::default()
            }),
        )))
        .then_expect_error(ThreadError::InternalEvent {
            event_type: "llm-usage".into(),
        });
}

#[test]
fn only_a_running_background_task_can_be_cancelled_or_corrected() {
    let base = with(live("r1"), [task_spawned("r1", "sub-1", "task-1")]);
    given(base.clone())
        .when(ThreadCommand::CancelTask {
            task_id: "task-1".into(),
            by: OWNER.into(),
        })
        .then_expect_events(vec![AgentEvent::new(
            "r1",
            "sub-1",
            EventBody::TaskCancelRequested(TaskRef {
                task_id: "task-1".into(),
            }),
        )
        .with_user(OWNER)]);
    given(base.clone())
        .when(ThreadCommand::CorrectTask {
            task_id: "task-1".into(),
            message: "use B".into(),
            by: OWNER.into(),
        })
        .then_expect_events(vec![AgentEvent::new(
            "r1",
            "sub-1",
            EventBody::TaskCorrection(TaskCorrection {
                task_id: "task-1".into(),
                message: "use B".into(),
            }),
        )
        .with_user(OWNER)]);
    let done = with(base, [completed("r1", "sub-1")]);
    given(done)
        .when(ThreadCommand::CancelTask {
            task_id: "task-1".into(),
            by: OWNER.into(),
        })
        .then_expect_error(ThreadError::TaskNotFound("task-1".into()));
    given(live("r1"))
        .when(ThreadCommand::CorrectTask {
            task_id: "task-9".into(),
            message: "x".into(),
            by: OWNER.into(),
        })
        .then_expect_error(ThreadError::TaskNotFound("task-9".into()));
}

// ---------- background tasks outlive their run ----------

/// r1 finished while its background task `task-1` (agent `bg`) still runs.
fn detached_task() -> Vec<AgentEvent> {
    with(
        live("r1"),
        [task_spawned("r1", "bg", "task-1"), run_finish("r1", ORCH)],
    )
}

#[test]
fn a_run_finished_with_a_running_task_lets_only_the_task_record() {
    let t = fold(&detached_task());
    assert!(t.live_run().is_none(), "the run is finished");
    assert_eq!(t.running_task("task-1").unwrap().1, "bg");
    // The task records text and tool calls under its run's id …
    given(detached_task())
        .when(record(delta("r1", "bg", "still working")))
        .then_expect_events(vec![delta("r1", "bg", "still working")]);
    given(detached_task())
        .when(record(tool_call("r1", "bg", "tc-bg")))
        .then_expect_events(vec![tool_call("r1", "bg", "tc-bg")]);
    // … the finished orchestrator cannot, nor finish the run twice, nor spawn.
    given(detached_task())
        .when(record(delta("r1", ORCH, "late")))
        .then_expect_error(ThreadError::AgentCompleted(ORCH.into()));
    given(detached_task())
        .when(record(run_finish("r1", ORCH)))
        .then_expect_error(ThreadError::RunFinished("r1".into()));
    given(detached_task())
        .when(record(task_spawned("r1", "bg2", "task-2")))
        .then_expect_error(ThreadError::AgentCompleted(ORCH.into()));
    // A new chat message starts a run while the task goes on.
    given(detached_task())
        .when(start("r2"))
        .then_expect_events(vec![user_message("r2", "hi"), run_start("r2")]);
    let both = with(detached_task(), [user_message("r2", "hi"), run_start("r2")]);
    given(both)
        .when(record(delta("r1", "bg", "in parallel")))
        .then_expect_events(vec![delta("r1", "bg", "in parallel")]);
}

#[test]
fn the_tasks_completion_closes_the_finished_run() {
    let done = with(detached_task(), [completed("r1", "bg")]);
    let t = fold(&done);
    assert!(t.detached.is_empty());
    assert!(t.running_task("task-1").is_none());
    given(done)
        .when(record(delta("r1", "bg", "after")))
        .then_expect_error(ThreadError::RunFinished("r1".into()));
    // Without running tasks a run-finish closes the run at once.
    let plain = with(
        live("r1"),
        [
            task_spawned("r1", "bg", "task-1"),
            completed("r1", "bg"),
            run_finish("r1", ORCH),
        ],
    );
    assert!(fold(&plain).detached.is_empty());
}

#[test]
fn cancel_stops_the_tasks_of_finished_runs_once() {
    let cancel_task = AgentEvent::new(
        "r1",
        "bg",
        EventBody::TaskCancelRequested(TaskRef {
            task_id: "task-1".into(),
        }),
    )
    .with_user(OWNER);
    given(detached_task())
        .when(cancel())
        .then_expect_events(vec![cancel_task.clone()]);
    given(with(detached_task(), [cancel_task]))
        .when(cancel())
        .then_expect_events(vec![]);
    // Corrections and per-task cancels reach it too.
    given(detached_task())
        .when(ThreadCommand::CorrectTask {
            task_id: "task-1".into(),
            message: "use B".into(),
            by: OWNER.into(),
        })
        .then_expect_events(vec![AgentEvent::new(
            "r1",
            "bg",
            EventBody::TaskCorrection(TaskCorrection {
                task_id: "task-1".into(),
                message: "use B".into(),
            }),
        )
        .with_user(OWNER)]);
    // The thread cannot be deleted under a running task.
    given(detached_task())
        .when(delete())
        .then_expect_error(ThreadError::RunAlreadyActive {
            run_id: "r1".into(),
        });
}

#[test]
fn a_task_of_a_finished_run_can_ask_and_be_answered() {
    let asked = with(
        detached_task(),
        [
            tool_call("r1", "bg", "tc-bg"),
            confirmation_request("r1", "bg", "req-bg", "tc-bg"),
        ],
    );
    given(asked)
        .when(answer("req-bg", true))
        .then_expect_events(vec![answered("r1", "req-bg", true)]);
}

#[test]
fn a_follow_up_run_starts_without_a_user_message_in_the_group() {
    let follow_up = ThreadCommand::StartFollowUp {
        run_id: "r2".into(),
        agent_id: ORCH.into(),
        message_id: "m-r2".into(),
        message_group_id: "g1".into(),
    };
    let start_event = AgentEvent::new(
        "r2",
        ORCH,
        EventBody::RunStart(RunStart {
            message_id: "m-r2".into(),
            message_group_id: Some("g1".into()),
        }),
    );
    given(with(detached_task(), [completed("r1", "bg")]))
        .when(follow_up.clone())
        .then_expect_events(vec![start_event]);
    given(live("r9"))
        .when(follow_up)
        .then_expect_error(ThreadError::RunAlreadyActive {
            run_id: "r9".into(),
        });
}

/// `verify` and `import` check a stored event by deciding the command that stores it
/// (`StreamAggregate::command_for`): the same rules as the append path.
#[test]
fn a_stored_event_is_admitted_only_where_the_aggregate_decides_it() {
    let mut t = Thread::default();
    let created = AgentEvent::new(
        "",
        "",
        EventBody::ThreadCreated(ThreadCreated {
            owner: "u".into(),
            title: None,
            fork_of: None,
        }),
    )
    .with_user("u");
    threadstream_domain::aggregate::admit(&t, &created).unwrap();
    t.apply(&created);
    assert!(threadstream_domain::aggregate::admit(&t, &created)
        .unwrap_err()
        .contains("changes nothing"));
    let start = AgentEvent::new(
        "r1",
        "o",
        EventBody::RunStart(RunStart {
            message_id: "m".into(),
            message_group_id: None,
        }),
    );
    threadstream_domain::aggregate::admit(&t, &start).unwrap();
    t.apply(&start);
    assert!(
        threadstream_domain::aggregate::admit(&t, &start).is_err(),
        "a second live run"
    );
    let orphan = AgentEvent::new(
        "r1",
        "o",
        EventBody::ToolResult(ToolResult {
            tool_call_id: "nope".into(),
            result: serde_json::Value::Null,
        }),
    );
    let err = threadstream_domain::aggregate::admit(&t, &orphan).unwrap_err();
    assert!(err.contains("nope"), "{err}");
}
