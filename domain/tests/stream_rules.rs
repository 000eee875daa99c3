//! The rules of the log's other kinds of stream — workflows, Durable Streams, the
//! subscriptions' log and the erasure log — each through its own aggregate's cqrs-es
//! `TestFramework` (the `Thread`'s are in `thread_rules.rs`), and the kinds told apart by
//! stream id.

use cqrs_es::test::TestFramework;
use threadstream_domain::aggregate::{admit, StreamKind};
use threadstream_domain::durable_stream::{
    log_stream_id, CreateSpec, DurableStream, StreamChange, StreamCommand, StreamRefusal,
};
use threadstream_domain::erasure_log::{ErasureLog, RecordErasure};
use threadstream_domain::event::durable_stream::StreamData;
use threadstream_domain::event::erasure::{Erased, ErasureReason, ErasureScope};
use threadstream_domain::event::subscription::SubscriptionType;
use threadstream_domain::event::workflow::WorkflowCreated;
use threadstream_domain::event::EventBody;
use threadstream_domain::subscription::{
    SubscriptionCommand, SubscriptionLog, SubscriptionRefusal, Subscriptions, SubscriptionsChange,
};
use threadstream_domain::workflow::{self, Workflow, WorkflowChange, WorkflowCommand};
use threadstream_domain::{AgentEvent, StreamAggregate, Thread, ThreadError};

const OWNER: &str = "u1";

fn wf(command: WorkflowCommand) -> WorkflowChange {
    WorkflowChange {
        command,
        run_id: "r1".into(),
        agent_id: "orch".into(),
        by: OWNER.into(),
    }
}

fn create_wf() -> WorkflowChange {
    wf(WorkflowCommand::Create {
        workflow_id: "wf-1".into(),
        name: "W".into(),
        active: false,
    })
}

fn created_wf() -> AgentEvent {
    AgentEvent::new(
        "r1",
        "orch",
        EventBody::WorkflowCreated(WorkflowCreated {
            workflow_id: "wf-1".into(),
            name: "W".into(),
            active: false,
        }),
    )
    .with_user(OWNER)
}

#[test]
fn a_workflow_is_created_once_and_changed_only_while_it_exists() {
    TestFramework::<Workflow>::with(())
        .given_no_previous_events()
        .when(create_wf())
        .then_expect_events(vec![created_wf()]);
    TestFramework::<Workflow>::with(())
        .given(vec![created_wf()])
        .when(create_wf())
        .then_expect_error(ThreadError::WorkflowExists("wf-1".into()));
    TestFramework::<Workflow>::with(())
        .given_no_previous_events()
        .when(wf(WorkflowCommand::Delete))
        .then_expect_error(ThreadError::WorkflowNotFound(String::new()));
}

fn stream_change(command: StreamCommand) -> StreamChange {
    StreamChange {
        command,
        by: OWNER.into(),
        now_ms: 1_000,
        last_read_ms: 0,
    }
}

fn create_stream() -> StreamChange {
    stream_change(StreamCommand::Create(Box::new(CreateSpec {
        owner: OWNER.into(),
        content_type: "application/json".into(),
        ttl_seconds: None,
        expires_at: None,
        expires_at_ms: None,
        closed: false,
        data: None,
        fork: None,
    })))
}

#[test]
fn a_durable_stream_decides_its_own_commands_and_counts_its_events() {
    let mut stream = DurableStream::default();
    let created = StreamAggregate::decide(&stream, &create_stream()).unwrap();
    assert_eq!(created.len(), 1);
    admit(&stream, &created[0]).unwrap();
    StreamAggregate::apply_at(&mut stream, 7, &created[0]);
    assert_eq!(StreamAggregate::version(&stream), 1);
    assert_eq!(stream.life.as_ref().unwrap().created_id, 7);
    // A create again with the same configuration is an answer, not an event.
    assert_eq!(
        StreamAggregate::decide(&stream, &create_stream()),
        Err(ThreadError::Stream(StreamRefusal::Exists {
            offset: 0,
            closed: false
        }))
    );
    let append = stream_change(StreamCommand::Append {
        data: StreamData::Json(vec![serde_json::json!({"t": 1})]),
        content_type: "application/json".into(),
        seq: None,
        producer: None,
        close: false,
    });
    TestFramework::<DurableStream>::with(())
        .given(created)
        .when(append)
        .inspect_result()
        .unwrap();
    TestFramework::<DurableStream>::with(())
        .given_no_previous_events()
        .when(stream_change(StreamCommand::Delete))
        .then_expect_error(ThreadError::Stream(StreamRefusal::NotFound));
}

#[test]
fn the_subscriptions_log_is_restored_only_when_empty() {
    let restore = SubscriptionsChange::Restore(Subscriptions::default());
    let restored = TestFramework::<SubscriptionLog>::with(())
        .given_no_previous_events()
        .when(restore.clone())
        .inspect_result()
        .unwrap();
    assert!(matches!(
        restored[0].body,
        EventBody::SubscriptionsRestored(_)
    ));
    TestFramework::<SubscriptionLog>::with(())
        .given(restored)
        .when(restore)
        .then_expect_error(ThreadError::Invalid(
            "subscriptions are restored on an empty stream only".into(),
        ));
    TestFramework::<SubscriptionLog>::with(())
        .given_no_previous_events()
        .when(SubscriptionsChange::Command {
            command: SubscriptionCommand::Delete { id: "s1".into() },
            by: OWNER.into(),
            now_ms: 1_000,
        })
        .then_expect_error(ThreadError::Subscription(SubscriptionRefusal::NotFound));
}

#[test]
fn the_erasure_log_stores_what_the_writer_records() {
    let erased = Erased {
        requested_by: "cli".into(),
        reason: ErasureReason::Request,
        scope: ErasureScope {
            thread_id: Some("t1".into()),
            ..ErasureScope::default()
        },
        events: 3,
        streams: Vec::new(),
    };
    TestFramework::<ErasureLog>::with(())
        .given_no_previous_events()
        .when(RecordErasure(Box::new(erased.clone())))
        .then_expect_events(vec![AgentEvent::new(
            "",
            "",
            EventBody::Erased(Box::new(erased)),
        )
        .with_user("cli")]);
}

/// Each kind's events are refused by every other kind's aggregate when checked (`verify`,
/// `import`): an event can only be stored in a stream of its own kind.
#[test]
fn an_event_of_one_kind_is_not_admitted_in_a_stream_of_another() {
    let workflow_event = created_wf();
    assert!(admit(&Thread::default(), &workflow_event).is_err());
    assert!(admit(&DurableStream::default(), &workflow_event).is_err());
    assert!(admit(&SubscriptionLog::default(), &workflow_event).is_err());
    assert!(admit(&ErasureLog::default(), &workflow_event).is_err());
    admit(&Workflow::default(), &workflow_event).unwrap();
}

#[test]
fn stream_ids_name_their_kind() {
    assert_eq!(StreamKind::of("t1"), StreamKind::Thread);
    assert_eq!(
        StreamKind::of(&workflow::stream_id("wf")),
        StreamKind::Workflow
    );
    assert_eq!(
        StreamKind::of(&log_stream_id("/a")),
        StreamKind::DurableStream
    );
    assert_eq!(
        StreamKind::of(threadstream_domain::subscription::LOG_STREAM),
        StreamKind::Subscriptions
    );
    assert_eq!(
        StreamKind::of(threadstream_domain::event::erasure::STREAM),
        StreamKind::ErasureLog
    );
}

/// Every subscription event the aggregate decides is admitted where it was decided, and a
/// replayed ack of a finished wake is refused (fenced).
#[test]
fn subscription_events_are_admitted_as_decided() {
    use std::collections::BTreeMap;
    use threadstream_domain::event::subscription::{StreamAck, SubscriptionConfig};
    let mut t = SubscriptionLog::default();
    let config = SubscriptionConfig {
        kind: SubscriptionType::PullWake,
        pattern: Some("events/*".into()),
        streams: vec!["manual/a".into()],
        webhook_url: None,
        wake_stream: Some("wake/pool".into()),
        lease_ttl_ms: 1_000,
        description: None,
    };
    let tails = BTreeMap::from([("events/x".to_string(), 50)]);
    let commands = [
        SubscriptionCommand::Create {
            id: "p".into(),
            config,
            callback_base: "http://127.0.0.1:7700".into(),
        },
        SubscriptionCommand::Link {
            id: "p".into(),
            streams: vec!["events/x".into()],
            explicit: false,
        },
        SubscriptionCommand::Claim {
            id: "p".into(),
            worker: "w".into(),
            wake_id: "k1".into(),
            tails: tails.clone(),
        },
        SubscriptionCommand::Ack {
            id: "p".into(),
            via: SubscriptionType::PullWake,
            generation: 1,
            wake_id: "k1".into(),
            acks: vec![StreamAck {
                stream: "events/x".into(),
                offset: 50,
            }],
            done: true,
            tails,
        },
        SubscriptionCommand::Unlink {
            id: "p".into(),
            stream: "manual/a".into(),
        },
        SubscriptionCommand::Delete { id: "p".into() },
    ];
    let (mut id, ts) = (10, 1_000);
    let mut acked = None;
    for command in commands {
        let change = SubscriptionsChange::Command {
            command,
            by: "u".into(),
            now_ms: ts,
        };
        let events = StreamAggregate::decide(&t, &change).unwrap();
        for mut e in events {
            // The ack is committed after its wake's lease ran out (decided just before).
            let late = matches!(e.body, EventBody::SubscriptionAcked(_));
            e.ts = Some(if late { ts + 1_005 } else { ts });
            admit(&t, &e).unwrap_or_else(|err| panic!("{:?}: {err}", e.body));
            id += 1;
            StreamAggregate::apply_at(&mut t, id, &e);
            if let EventBody::SubscriptionAcked(_) = e.body {
                acked = Some(e);
            }
        }
    }
    let err = admit(&t, &acked.unwrap()).unwrap_err();
    assert!(err.contains("not found") || err.contains("stale"), "{err}");
}
