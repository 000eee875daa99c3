//! Checking a stored event against the `Thread` aggregate: each event is turned back into the
//! command that produces it, the aggregate decides that command, and the event must be what it
//! decided. So import and verify enforce exactly the rules of the one append path, and follow
//! them when the domain changes.

use hashlink::LruCache;
use threadstream_domain::durable_stream::{CreateSpec, StreamCommand};
use threadstream_domain::event::subscription::SubscriptionType;
use threadstream_domain::event::EventBody;
use threadstream_domain::subscription::SubscriptionCommand;
use threadstream_domain::workflow::WorkflowCommand;
use threadstream_domain::{AgentEvent, StoredEvent, Thread, ThreadCommand};
use threadstream_store::backend::BatchTx;

use crate::AuditError;

/// The Durable Stream command whose decision stores `e`, decided at the event's time. Reads
/// that slid a TTL window are not in the log: an append is checked as if read just then (it was
/// admitted, so the stream was alive), a create as if never read (a life it replaced had ended).
fn stream_command_for(thread: &Thread, e: &AgentEvent) -> ThreadCommand {
    let now_ms = e.ts.unwrap_or(0);
    let mut last_read_ms = now_ms;
    let command = match &e.body {
        EventBody::StreamCreated(c) => {
            last_read_ms = 0;
            StreamCommand::Create(Box::new(CreateSpec {
                owner: c.owner.clone(),
                content_type: c.content_type.clone(),
                ttl_seconds: c.ttl_seconds,
                expires_at: c.expires_at.clone(),
                expires_at_ms: c.expires_at_ms,
                closed: c.closed,
                data: c.data.clone(),
                fork: c.fork.clone(),
            }))
        }
        EventBody::StreamAppended(a) => StreamCommand::Append {
            data: a.data.clone(),
            content_type: thread
                .stream
                .life
                .as_ref()
                .map(|l| l.content_type.clone())
                .unwrap_or_default(),
            seq: a.seq.clone(),
            producer: a.producer.clone(),
            close: a.close,
        },
        EventBody::StreamClosed(c) => StreamCommand::Close {
            producer: c.producer.clone(),
        },
        EventBody::StreamForkAdded(f) => StreamCommand::AddFork {
            fork: f.fork.clone(),
            created_id: f.created_id,
            offset: f.offset,
        },
        EventBody::StreamForkReleased(f) => StreamCommand::ReleaseFork {
            fork: f.fork.clone(),
        },
        _ => StreamCommand::Delete,
    };
    ThreadCommand::Stream {
        command,
        by: e.user_id.clone().unwrap_or_default(),
        now_ms,
        last_read_ms,
    }
}

/// The subscription command whose decision stores `e`, decided at the event's time. The
/// streams' tails a wake or an ack was decided on are not in the log: a wake is checked against
/// its snapshot, an ack against its own offsets (it was admitted, so they were within the tails).
/// The request's clock is not in the log either, and an event is stamped when committed, a
/// little after it: a claim, ack or release on a live wake is checked as if made within the
/// wake's lease (it was admitted, so it was).
fn subscription_command_for(thread: &Thread, e: &AgentEvent) -> Option<ThreadCommand> {
    use SubscriptionCommand as C;
    let command = match &e.body {
        EventBody::SubscriptionCreated(c) => C::Create {
            id: c.id.clone(),
            config: c.config.clone(),
            callback_base: c.callback_base.clone(),
        },
        EventBody::SubscriptionDeleted(d) => C::Delete { id: d.id.clone() },
        EventBody::SubscriptionLinked(l) => C::Link {
            id: l.id.clone(),
            streams: l.streams.clone(),
            explicit: l.explicit,
        },
        EventBody::SubscriptionUnlinked(u) => C::Unlink {
            id: u.id.clone(),
            stream: u.stream.clone(),
        },
        EventBody::SubscriptionWoken(w) => C::Wake {
            id: w.id.clone(),
            wake_id: w.wake_id.clone(),
            tails: w.snapshot.clone(),
            stream: w.stream.clone(),
        },
        EventBody::SubscriptionClaimed(c) => C::Claim {
            id: c.id.clone(),
            worker: c.worker.clone(),
            wake_id: String::new(),
            tails: Default::default(),
        },
        EventBody::SubscriptionAcked(a) => {
            let sub = thread.subscriptions.by_id.get(&a.id);
            C::Ack {
                id: a.id.clone(),
                via: sub.map_or(SubscriptionType::Webhook, |s| s.config.kind),
                generation: a.generation,
                wake_id: wake_id_of(thread, &a.id),
                acks: a.acks.clone(),
                done: a.done,
                tails: a
                    .acks
                    .iter()
                    .map(|k| (k.stream.clone(), k.offset))
                    .collect(),
            }
        }
        EventBody::SubscriptionReleased(r) => C::Release {
            id: r.id.clone(),
            generation: r.generation,
            wake_id: wake_id_of(thread, &r.id),
        },
        _ => return None,
    };
    let mut now_ms = e.ts.unwrap_or(0);
    if let C::Claim { id, .. } | C::Ack { id, .. } | C::Release { id, .. } = &command {
        let lease = thread
            .subscriptions
            .by_id
            .get(id)
            .and_then(|s| s.wake.as_ref());
        if let Some(w) = lease {
            now_ms = now_ms.min(w.lease_until_ms - 1);
        }
    }
    Some(ThreadCommand::Subscription {
        command,
        by: e.user_id.clone().unwrap_or_default(),
        now_ms,
    })
}

/// The id of `id`'s current wake (acks and releases carry its generation; the wake id they
/// were checked against is the wake's).
fn wake_id_of(thread: &Thread, id: &str) -> String {
    thread
        .subscriptions
        .by_id
        .get(id)
        .and_then(|s| s.wake.as_ref())
        .map(|w| w.wake_id.clone())
        .unwrap_or_default()
}

/// The command whose decision stores `e` (in a thread in state `thread`).
fn command_for(thread: &Thread, e: &AgentEvent) -> ThreadCommand {
    let by = e.user_id.clone().unwrap_or_default();
    let workflow = |command| ThreadCommand::Workflow {
        command,
        run_id: e.run_id.clone(),
        agent_id: e.agent_id.clone(),
        by: by.clone(),
    };
    if let Some(command) = subscription_command_for(thread, e) {
        return command;
    }
    match &e.body {
        EventBody::ThreadCreated(p) => match &p.fork_of {
            // Checked on the aggregate seeded with the fork's prefix (see `Aggregates`).
            Some(fork_of) => ThreadCommand::Fork {
                owner: p.owner.clone(),
                title: p.title.clone(),
                fork_of: fork_of.clone(),
            },
            None => ThreadCommand::Create {
                owner: p.owner.clone(),
                title: p.title.clone(),
            },
        },
        EventBody::ThreadRenamed(p) => ThreadCommand::Rename {
            title: p.title.clone(),
            by,
        },
        EventBody::ThreadDeleted(_) => ThreadCommand::Delete { by },
        EventBody::UserMessage(p) => ThreadCommand::StartRun {
            run_id: e.run_id.clone(),
            agent_id: e.agent_id.clone(),
            message_id: p.message_id.clone(),
            message_group_id: None,
            text: p.text.clone(),
            user: by,
        },
        EventBody::ConfirmationAnswered(p) => ThreadCommand::AnswerConfirmation {
            request_id: p.request_id.clone(),
            approved: p.approved,
            user_input: p.user_input.clone(),
            answers: p.answers.clone(),
            by,
        },
        EventBody::CancelRequested(p) => ThreadCommand::Cancel {
            by,
            reason: p.reason.clone(),
        },
        EventBody::TaskCancelRequested(p) => ThreadCommand::CancelTask {
            task_id: p.task_id.clone(),
            by,
        },
        EventBody::TaskCorrection(p) => ThreadCommand::CorrectTask {
            task_id: p.task_id.clone(),
            message: p.message.clone(),
            by,
        },
        EventBody::LlmUsage(u) => ThreadCommand::RecordUsage {
            run_id: e.run_id.clone(),
            agent_id: e.agent_id.clone(),
            usage: u.clone(),
        },
        EventBody::ConversationSummary(p) => ThreadCommand::Summarize {
            run_id: e.run_id.clone(),
            agent_id: e.agent_id.clone(),
            summary: p.summary.clone(),
            covered_through_id: p.covered_through_id,
        },
        EventBody::WorkflowCreated(p) => workflow(WorkflowCommand::Create {
            workflow_id: p.workflow_id.clone(),
            name: p.name.clone(),
            active: p.active,
        }),
        EventBody::WorkflowNodeAdded(p) => workflow(WorkflowCommand::AddNode(p.node.clone())),
        EventBody::WorkflowNodesConnected(p) => workflow(WorkflowCommand::Connect(p.clone())),
        EventBody::WorkflowNodeUpdated(p) => workflow(WorkflowCommand::UpdateNode(p.clone())),
        EventBody::WorkflowNodeRemoved(p) => workflow(WorkflowCommand::RemoveNode {
            node_id: p.node_id.clone(),
        }),
        EventBody::WorkflowDeleted(_) => workflow(WorkflowCommand::Delete),
        EventBody::ProducerWrite(p) => ThreadCommand::Produce(p.clone()),
        EventBody::Erased(p) => ThreadCommand::RecordErasure(p.clone()),
        EventBody::SubscriptionsRestored(p) => {
            ThreadCommand::RestoreSubscriptions(Box::new(p.subscriptions.clone()))
        }
        EventBody::StreamCreated(_)
        | EventBody::StreamAppended(_)
        | EventBody::StreamClosed(_)
        | EventBody::StreamDeleted(_)
        | EventBody::StreamForkAdded(_)
        | EventBody::StreamForkReleased(_) => stream_command_for(thread, e),
        // Every n8n wire event (run-start included) is recorded as it is.
        _ => ThreadCommand::Record(e.clone()),
    }
}

/// Whether the aggregate in state `thread` stores `e` next; the error names the broken rule.
/// A `user-message` is the first of the two events of `StartRun`, so it is checked as that.
pub fn admit(thread: &Thread, e: &AgentEvent) -> Result<(), String> {
    let decided = thread
        .decide(&command_for(thread, e))
        .map_err(|err| err.to_string())?;
    let same =
        |d: &AgentEvent| d.body == e.body && d.run_id == e.run_id && d.agent_id == e.agent_id;
    let ok = match &e.body {
        EventBody::UserMessage(_) => decided.first().is_some_and(same),
        _ => decided.len() == 1 && same(&decided[0]),
    };
    if ok {
        Ok(())
    } else if decided.is_empty() {
        Err(format!(
            "'{}' changes nothing here (e.g. a thread created twice)",
            e.body.event_type()
        ))
    } else {
        Err(format!(
            "the aggregate would store {} here, not this '{}'",
            decided
                .iter()
                .map(|d| format!("'{}'", d.body.event_type()))
                .collect::<Vec<_>>()
                .join(", "),
            e.body.event_type()
        ))
    }
}

/// Where a walk of events in log order reads what it has not seen itself.
pub enum Walk<'a> {
    /// `threadstream verify`: the whole log from its start, in the store behind this log.
    Log(&'a threadstream_store::EventLog),
    /// An import: its transaction (the target's events and those the import inserted).
    Tx(&'a mut BatchTx),
}

/// Folds `thread_id`'s events with id at most `through` (a fork read through its source) into
/// `thread`, reading from `walk`'s store; returns the last id folded (0: none).
async fn fold_into(
    thread: &mut Thread,
    walk: &mut Walk<'_>,
    thread_id: &str,
    through: i64,
) -> Result<i64, AuditError> {
    let mut after = 0;
    loop {
        let page = match walk {
            Walk::Tx(tx) => tx.read_thread(thread_id, after, crate::PAGE).await?,
            Walk::Log(log) => log.read_thread(thread_id, after, crate::PAGE).await?,
        };
        let Some(last) = page.last() else { break };
        let last_id = last.id;
        for e in page.iter().filter(|e| e.id <= through) {
            thread.apply_at(
                e.id,
                &e.decode().map_err(threadstream_store::StoreError::from)?,
            );
            after = e.id;
        }
        if last_id > through {
            break;
        }
    }
    Ok(after)
}

/// Thread aggregates folded while walking events in log order, each with its last seq.
/// Unbounded by default (a walk of the whole log needs every thread at its end); an import
/// keeps the most recently used ones and folds an evicted thread again from its transaction.
pub struct Aggregates {
    threads: LruCache<String, Thread>,
}

impl Default for Aggregates {
    fn default() -> Self {
        Aggregates {
            threads: LruCache::new_unbounded(),
        }
    }
}

impl Aggregates {
    /// At most `capacity` threads in memory.
    pub fn bounded(capacity: usize) -> Self {
        Aggregates {
            threads: LruCache::new(capacity.max(1)),
        }
    }

    /// Whether `thread_id`'s state is in memory (a check of its next event needs no read).
    pub fn is_loaded(&self, thread_id: &str) -> bool {
        self.threads.contains_key(thread_id)
    }

    /// Checks `row` (seq and rules) against its thread and folds it in. A thread not in memory
    /// is folded from the import's transaction ([`Walk::Tx`]: the target's events and those the
    /// import already inserted), else starts empty (a walk from the start of the log). A fork's
    /// first event is checked on its source folded through the fork point, read from the walk's
    /// store (a fork's events are numbered on after that prefix). The event is folded even when
    /// refused, so one broken event is reported once, not again for everything after it.
    pub async fn check_and_apply(
        &mut self,
        mut walk: Walk<'_>,
        row: &StoredEvent,
    ) -> Result<Result<(), String>, AuditError> {
        if !self.threads.contains_key(&row.thread_id) {
            let mut thread = Thread::default();
            if let Walk::Tx(_) = walk {
                fold_into(&mut thread, &mut walk, &row.thread_id, i64::MAX).await?;
            }
            self.threads.insert(row.thread_id.clone(), thread);
        }
        let mut fork_point_missing = None;
        if let Some(fork_of) = threadstream_store::fork::fork_of(row) {
            if self
                .threads
                .peek(&row.thread_id)
                .is_some_and(|t| t.version == 0)
            {
                let mut prefix = Thread::default();
                let last = fold_into(
                    &mut prefix,
                    &mut walk,
                    &fork_of.thread_id,
                    fork_of.through_event_id,
                )
                .await?;
                if last != fork_of.through_event_id {
                    fork_point_missing = Some(format!(
                        "fork point {} is not an event of thread '{}'",
                        fork_of.through_event_id, fork_of.thread_id
                    ));
                }
                self.threads.insert(row.thread_id.clone(), prefix);
            }
        }
        let thread = self.threads.get_mut(&row.thread_id).expect("just loaded");
        let expected_seq = thread.version as i64 + 1;
        let event = match row.decode() {
            Ok(e) => e,
            Err(err) => {
                thread.version += 1;
                return Ok(Err(format!("undecodable event: {err}")));
            }
        };
        let verdict = if let Some(m) = fork_point_missing {
            Err(m)
        } else if row.seq != expected_seq {
            Err(format!(
                "thread '{}' seq {} where {} was next",
                row.thread_id, row.seq, expected_seq
            ))
        } else {
            admit(thread, &event)
        };
        thread.apply_at(row.id, &event);
        Ok(verdict)
    }

    /// The threads walked so far.
    pub fn threads(&self) -> impl Iterator<Item = (&String, &Thread)> {
        self.threads.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use threadstream_domain::event::{RunStart, ThreadCreated, ToolResult};
    use threadstream_domain::AgentEvent;

    #[test]
    fn admits_what_the_aggregate_decides_and_refuses_the_rest() {
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
        admit(&t, &created).unwrap();
        t.apply(&created);
        assert!(admit(&t, &created).unwrap_err().contains("changes nothing"));
        let start = AgentEvent::new(
            "r1",
            "o",
            EventBody::RunStart(RunStart {
                message_id: "m".into(),
                message_group_id: None,
            }),
        );
        admit(&t, &start).unwrap();
        t.apply(&start);
        assert!(admit(&t, &start).is_err(), "a second live run");
        let orphan = AgentEvent::new(
            "r1",
            "o",
            EventBody::ToolResult(ToolResult {
                tool_call_id: "nope".into(),
                result: serde_json::Value::Null,
            }),
        );
        let err = admit(&t, &orphan).unwrap_err();
        assert!(err.contains("nope"), "{err}");
    }

    /// Every subscription event the aggregate decides is admitted where it was decided, and a
    /// replayed ack of a finished wake is refused (fenced).
    #[test]
    fn subscription_events_are_admitted_as_decided() {
        use std::collections::BTreeMap;
        use threadstream_domain::event::subscription::{StreamAck, SubscriptionConfig};
        let mut t = Thread::default();
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
            let events = t
                .decide(&ThreadCommand::Subscription {
                    command,
                    by: "u".into(),
                    now_ms: ts,
                })
                .unwrap();
            for mut e in events {
                // The ack is committed after its wake's lease ran out (decided just before).
                let late = matches!(e.body, EventBody::SubscriptionAcked(_));
                e.ts = Some(if late { ts + 1_005 } else { ts });
                admit(&t, &e).unwrap_or_else(|err| panic!("{:?}: {err}", e.body));
                id += 1;
                t.apply_at(id, &e);
                if let EventBody::SubscriptionAcked(_) = e.body {
                    acked = Some(e);
                }
            }
        }
        let err = admit(&t, &acked.unwrap()).unwrap_err();
        assert!(err.contains("not found") || err.contains("stale"), "{err}");
    }
}
