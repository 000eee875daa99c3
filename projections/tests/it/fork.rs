//! Forks, as the read models see them: over random command sequences, a fork's documents folded
//! from the whole log (`rebuild`, which reads a fork through its source as the projector does)
//! equal a plain fold of the source's events up to the fork point followed by the fork's own,
//! and the source's documents are the same as in a log without the fork. The fork's commands are
//! decided on the source's aggregate as it stood at the fork point, as the log's writer does.

use std::collections::BTreeMap;

use proptest::prelude::*;
use threadstream_domain::{ForkOf, StoredEvent, Thread, ThreadCommand};
use threadstream_projections::{rebuild, Analytics, History, ReadModel, Status, ThreadList};

use crate::thread_properties::command;

/// One log stream being written: its aggregate and its events.
struct Stream {
    id: &'static str,
    thread: Thread,
}

impl Stream {
    /// Decides `command` and stores what it decides in `log` at the next global ids; returns
    /// the stored events (none when refused).
    fn append(&mut self, log: &mut Vec<StoredEvent>, command: &ThreadCommand) -> Vec<StoredEvent> {
        let Ok(events) = self.thread.decide(command) else {
            return Vec::new();
        };
        let mut stored = Vec::new();
        for event in events {
            self.thread.apply(&event);
            let id = log.len() as i64 + 1;
            let row = StoredEvent::from_event(
                id,
                self.id,
                self.thread.version as i64,
                1_700_000_000_000 + 1_000 * id,
                &event,
            );
            log.push(row.clone());
            stored.push(row);
        }
        stored
    }
}

/// `M` folded over `events` as one thread's, with no read-through at all.
fn plain<M: ReadModel>(events: &[StoredEvent]) -> BTreeMap<String, M::Doc> {
    let mut docs: BTreeMap<String, M::Doc> = BTreeMap::new();
    for e in events {
        if let Some(key) = M::key(e) {
            M::apply(docs.entry(key).or_default(), e);
        }
    }
    docs
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn a_forks_folds_equal_a_fold_of_its_prefix_and_its_own_events(
        before in prop::collection::vec(command(), 0..80),
        point in any::<prop::sample::Index>(),
        // (true: the fork's, false: the source's) commands after the fork, interleaved.
        after in prop::collection::vec((any::<bool>(), command()), 0..80),
    ) {
        let mut log = Vec::new();
        let mut source = Stream { id: "s", thread: Thread::default() };
        source.append(&mut log, &ThreadCommand::Create { owner: "u".into(), title: Some("t".into()) });
        for c in &before {
            source.append(&mut log, c);
        }
        // The points where a fork may start (nothing running) and the aggregate there; the
        // other events of the source are refused as fork points.
        let mut points = Vec::new();
        let mut state = Thread::default();
        for e in &log {
            state.apply(&e.decode().unwrap());
            if state.live_run().is_none() && state.running_tasks().next().is_none() {
                prop_assert!(state.decide(&fork_command(e.id)).is_ok());
                points.push((e.id, state.clone()));
            } else {
                prop_assert!(state.decide(&fork_command(e.id)).is_err());
            }
        }
        let (through, at_point) = points[point.index(points.len())].clone();
        let mut fork = Stream { id: "f", thread: at_point };
        let created = fork.append(&mut log, &fork_command(through));
        prop_assert_eq!(created.len(), 1);
        let prefix_len = log.iter().filter(|e| e.thread_id == "s" && e.id <= through).count();
        prop_assert_eq!(created[0].seq, prefix_len as i64 + 1);
        for (to_fork, c) in &after {
            if *to_fork { fork.append(&mut log, c); } else { source.append(&mut log, c); }
        }

        // What the fork is: the source's events through the fork point, then its own.
        let mut composed: Vec<StoredEvent> = log
            .iter()
            .filter(|e| e.thread_id == "s" && e.id <= through)
            .cloned()
            .map(|mut e| { e.thread_id = "f".into(); e })
            .collect();
        composed.extend(log.iter().filter(|e| e.thread_id == "f").cloned());
        for (i, e) in composed.iter().enumerate() {
            prop_assert_eq!(e.seq, i as i64 + 1, "a fork's seqs go on from its prefix");
        }
        // Its aggregate, folded from what it reads, is the one that decided its commands.
        let mut folded = Thread::default();
        for e in &composed {
            folded.apply(&e.decode().unwrap());
        }
        prop_assert_eq!(&folded, &fork.thread);
        let source_only: Vec<StoredEvent> =
            log.iter().filter(|e| e.thread_id == "s").cloned().collect();

        prop_assert_eq!(&rebuild::<History>(&log)["f"], &plain::<History>(&composed)["f"]);
        prop_assert_eq!(&rebuild::<Status>(&log)["f"], &plain::<Status>(&composed)["f"]);
        prop_assert_eq!(&rebuild::<ThreadList>(&log)["f"], &plain::<ThreadList>(&composed)["f"]);
        prop_assert_eq!(&rebuild::<History>(&log)["s"], &plain::<History>(&source_only)["s"]);
        prop_assert_eq!(&rebuild::<Status>(&log)["s"], &plain::<Status>(&source_only)["s"]);
        prop_assert_eq!(&rebuild::<ThreadList>(&log)["s"], &plain::<ThreadList>(&source_only)["s"]);
        // Runs are counted once, where they ran: the fork's analytics are its own runs only.
        let own: Vec<StoredEvent> = log.iter().filter(|e| e.thread_id == "f").cloned().collect();
        let mut want = plain::<Analytics>(&source_only);
        want.extend(plain::<Analytics>(&own));
        prop_assert_eq!(rebuild::<Analytics>(&log), want);
    }
}

fn fork_command(through: i64) -> ThreadCommand {
    ThreadCommand::Fork {
        owner: "u".into(),
        title: None,
        fork_of: ForkOf {
            thread_id: "s".into(),
            through_event_id: through,
        },
    }
}
