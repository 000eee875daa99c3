//! Starting runs: what every protocol's "start a run" does (`POST /instance-ai/chat`, AG-UI's
//! `POST /api/v1/agent/runs`, the items and Smith routes), and the run leases taken for the runs
//! this instance stored the start of.

use std::collections::BTreeSet;
use threadstream_domain::ErrorCode;

use threadstream_agent::Runner;
use threadstream_domain::{EventBody, StoredEvent, ThreadCommand};
use threadstream_store::KeyedAppend;

use crate::background::run_leases::{PostingGuard, StartingLease};
use crate::error::ApiError;
use crate::extract::{Caller, RunTrace};
use crate::ids::new_id;
use crate::ApiContext;

/// Stores the run's start (`[Create, StartRun]`), takes its lease and spawns the agent on it;
/// every protocol's "start a run" goes through here. Returns the stored events (the first is
/// the thread's earliest new event, so `id - 1` is a cursor just before the run).
pub async fn start_run(
    ctx: &ApiContext,
    caller: &Caller,
    trace: &RunTrace,
    thread_id: &str,
    run_id: &str,
    message: String,
    message_group_id: Option<String>,
) -> Result<Vec<StoredEvent>, ApiError> {
    start_run_keyed(
        ctx,
        caller,
        trace,
        thread_id,
        run_id,
        message,
        message_group_id,
        None,
        Runner::Builtin,
    )
    .await
}

/// [`start_run`], its start appended under an idempotency key when there is one (see
/// [`crate::idempotency`]): a run whose key is answered already is not started.
#[allow(clippy::too_many_arguments)]
pub async fn start_run_keyed(
    ctx: &ApiContext,
    caller: &Caller,
    trace: &RunTrace,
    thread_id: &str,
    run_id: &str,
    message: String,
    message_group_id: Option<String>,
    key: Option<KeyedAppend>,
    runner: Runner,
) -> Result<Vec<StoredEvent>, ApiError> {
    if message.trim().is_empty() {
        return Err(ApiError::unprocessable(
            ErrorCode::EmptyMessage,
            "message must not be empty",
        ));
    }
    if message.len() > ctx.config.max_message_bytes {
        return Err(ApiError::message_too_large(
            ctx.config.max_message_bytes,
            message.len(),
        ));
    }
    // Held until the run is spawned: a drain (shutdown) waits for it, then cancels the run.
    let admission = ctx
        .runtime
        .admit()
        .await
        .ok_or_else(ApiError::shutting_down)?;
    let run_slot = ctx.limits.run_slot(&caller.user_id)?;
    let agent_id = new_id("agent");
    let commands = vec![
        ThreadCommand::Create {
            owner: caller.user_id.clone(),
            title: None,
        },
        ThreadCommand::StartRun {
            run_id: run_id.to_string(),
            agent_id: agent_id.clone(),
            message_id: new_id("msg"),
            // Every run has a group, so a follow-up run reporting its background
            // tasks joins the same group.
            message_group_id: Some(message_group_id.unwrap_or_else(|| new_id("mg"))),
            text: message.clone(),
            user: caller.user_id.clone(),
        },
    ];
    // The lease comes first: see `RunLeases::hold_starting_run`.
    let lease = match &ctx.leases {
        Some(leases) => Some(leases.hold_starting_run(thread_id, run_id).await),
        None => None,
    };
    let stored = match key {
        Some(key) => ctx.log.append_keyed(thread_id, commands, key).await,
        None => ctx.log.append(thread_id, commands).await,
    };
    // A replayed answer (its key answered already) holds another request's run, not this one.
    let started = stored.as_ref().is_ok_and(|events| {
        events
            .iter()
            .any(|e| e.event_type == "run-start" && e.run_id == run_id)
    });
    if let Some(lease) = lease {
        lease.settle(started).await;
    }
    let stored = stored?;
    if !started {
        // Replayed: the first request spawned the run.
        drop(admission);
        return Ok(stored);
    }
    ctx.runtime.spawn_run_holding(
        thread_id.to_string(),
        run_id.to_string(),
        agent_id,
        message,
        caller.user_id.clone(),
        trace.0.clone(),
        runner,
        run_slot,
    );
    drop(admission);
    Ok(stored)
}

/// The leases of an ingest post's runs, held while its append waits
/// ([`ingest_leases`]).
pub struct IngestLeases {
    /// Runs the post continues: extended while it waits.
    _posting: PostingGuard,
    /// Runs the post starts: leased before their start is stored.
    starting: Vec<(String, StartingLease)>,
}

impl IngestLeases {
    /// The append is over, `stored` if it was: the lease of each run it started is kept, the
    /// others let go.
    pub async fn settle(self, stored: Option<&[StoredEvent]>) {
        for (run_id, lease) in self.starting {
            let started = stored.is_some_and(|events| {
                events
                    .iter()
                    .any(|e| e.event_type == "run-start" && e.run_id == run_id)
            });
            lease.settle(started).await;
        }
    }
}

/// Ingest, as a post arrives (before its append waits for the write order), when runs have
/// leases (Postgres):
/// - the lease of every run its `commands` continue is extended, since its agent just proved
///   alive ([`crate::background::run_leases::RunLeases::agent_posting`]), and kept extended
///   while the append waits;
/// - every run they start is leased before its start is stored
///   ([`crate::background::run_leases::RunLeases::hold_starting_run`]): without its lease an
///   orphaned run would go unnoticed if this instance died, and with it another instance
///   finishes the run.
///
/// Settle what is returned once the append returns.
pub async fn ingest_leases(
    ctx: &ApiContext,
    thread_id: &str,
    commands: &[ThreadCommand],
) -> Option<IngestLeases> {
    let leases = ctx.leases.as_ref()?;
    let events = || {
        commands.iter().filter_map(|c| match c {
            ThreadCommand::Record(e) => Some(e),
            _ => None,
        })
    };
    let started: BTreeSet<&str> = events()
        .filter(|e| matches!(e.body, EventBody::RunStart(_)))
        .map(|e| e.run_id.as_str())
        .collect();
    let continued: BTreeSet<&str> = events()
        .map(|e| e.run_id.as_str())
        .filter(|r| !started.contains(r))
        .collect();
    let posting = leases
        .agent_posting(thread_id, continued.into_iter().map(String::from).collect())
        .await;
    let mut starting = Vec::with_capacity(started.len());
    for run_id in started {
        let lease = leases.hold_starting_run(thread_id, run_id).await;
        starting.push((run_id.to_string(), lease));
    }
    Some(IngestLeases {
        _posting: posting,
        starting,
    })
}
