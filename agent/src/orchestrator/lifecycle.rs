//! A run from its start to its `run-finish`: the work raced against a cancel, panics caught,
//! background tasks polled beside the work, the ending settled, and — when background tasks
//! outlive a completed run — the follow-up run that reports how they ended.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;
use threadstream_domain::event::*;
use threadstream_domain::{genai, StoredEvent};
use threadstream_store::EventLog;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::Instrument;

use super::context::RunCtx;
use super::resume::resume;
use super::settle::{finish_without_ctx, settle, Ending};
use super::turns::{orchestrate, report_tasks};
use super::upstream::run_upstream;
use super::{read_thread, Entry, FollowUp, RunIds, RunSettings};
use crate::control::Control;
use crate::error::RunError;
use crate::provider::LlmProvider;
use crate::telemetry;
use crate::tools::ToolRegistry;
use crate::workflows::WorkflowStore;

/// Runs one run to its `run-finish`. Called on the spawned task.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn execute_run(
    log: EventLog,
    provider: Arc<dyn LlmProvider>,
    tools: Arc<ToolRegistry>,
    workflows: Arc<WorkflowStore>,
    settings: RunSettings,
    ids: RunIds,
    entry: Entry,
) -> Option<FollowUp> {
    let started = Instant::now();
    let _running = crate::metrics::Present::new(crate::metrics::RUNS_RUNNING);
    let (control, state) = match Control::start(&log, &ids.thread_id, &ids.run_id).await {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(
                error = &e as &dyn std::error::Error,
                "cannot start watching the run's log"
            );
            finish_without_ctx(&log, &ids, &RunError::Store(e)).await;
            return None;
        }
    };
    let live = state
        .live_run()
        .filter(|r| r.run_id == ids.run_id && r.orchestrator == ids.orchestrator_id);
    if live.is_none() {
        tracing::warn!(
            "run is not live in its thread (already finished, or never started); nothing to do"
        );
        return None;
    }
    let first_untitled_run = state.title.is_none() && state.runs.len() == 1;
    // Ended at the run's `run-finish`, not with the task: background tasks may go on after it.
    let agent_span = telemetry::orchestrator_span(
        &ids.thread_id,
        &ids.run_id,
        &ids.orchestrator_id,
        provider.name(),
        ids.trace_parent.as_ref(),
    );
    let (spawner, mut spawned) = mpsc::unbounded_channel();
    let ctx = Arc::new_cyclic(|me| {
        RunCtx::new(
            me.clone(),
            spawner,
            log,
            ids,
            provider,
            tools,
            workflows,
            control,
            settings,
        )
    });
    tracing::info!(
        resumed = matches!(entry, Entry::Resume),
        follow_up = matches!(entry, Entry::FollowUp { .. }),
        "run started"
    );

    enum Outcome {
        Completed,
        Cancelled,
        Failed(RunError),
    }
    let work = AssertUnwindSafe(
        async {
            match entry {
                Entry::Start { message } => orchestrate(&ctx, message, first_untitled_run).await,
                Entry::Resume => resume(&ctx).await,
                Entry::FollowUp { report } => report_tasks(&ctx, report).await,
                Entry::Upstream(run) => run_upstream(&ctx, *run).await,
            }
        }
        .instrument(agent_span.clone()),
    )
    .catch_unwind();
    // Boxed so it can be dropped (with its hold on the span) once the run is settled.
    let mut work = Box::pin(work);
    // Background tasks run in this set: dropped (aborted) with the run, whatever ends it.
    let mut background: JoinSet<()> = JoinSet::new();
    let outcome = loop {
        tokio::select! {
            biased;
            _ = ctx.control.cancelled() => break Outcome::Cancelled,
            Some(task) = spawned.recv() => {
                background.spawn(task);
            }
            Some(_) = background.join_next(), if !background.is_empty() => {}
            r = &mut work => break match r {
                Ok(Ok(())) => Outcome::Completed,
                Ok(Err(e)) => Outcome::Failed(e),
                Err(panic) => {
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "panic".into());
                    let panic: Box<dyn std::error::Error + Send + Sync> =
                        format!("the run panicked: {what}").into();
                    Outcome::Failed(RunError::Internal(panic.into()))
                }
            },
        }
    };
    // A run that did not complete stops its tasks before settling, so nothing races the final
    // append; a completed one leaves them running past its run-finish (see below).
    if !matches!(outcome, Outcome::Completed) {
        background.abort_all();
        while background.join_next().await.is_some() {}
    }
    let completed = matches!(outcome, Outcome::Completed);
    let usage = ctx.state().usage;
    let settled = async {
        match outcome {
            Outcome::Completed => {
                let finish = EventBody::RunFinish(RunFinish {
                    status: RunStatus::Completed,
                    reason: None,
                    archived_workflow_ids: None,
                });
                match ctx.record(&ctx.ids.orchestrator_id, finish).await {
                    Ok(()) => (RunStatus::Completed, Ok(())),
                    Err(e) => {
                        settle(&ctx, Ending::Failed(&e)).await;
                        (RunStatus::Error, Err(e))
                    }
                }
            }
            Outcome::Cancelled => {
                settle(&ctx, Ending::Cancelled).await;
                (RunStatus::Cancelled, Ok(()))
            }
            Outcome::Failed(RunError::ConfirmationTimeout) => {
                settle(&ctx, Ending::TimedOut).await;
                (RunStatus::Cancelled, Ok(()))
            }
            Outcome::Failed(e) => {
                settle(&ctx, Ending::Failed(&e)).await;
                (RunStatus::Error, Err(e))
            }
        }
    };
    let (status, result) = settled.instrument(agent_span.clone()).await;
    telemetry::agent_ended(
        &agent_span,
        Some(status.as_str()),
        result.is_err().then_some(genai::AGENT_ERROR),
    );
    drop(work);
    drop(agent_span);
    let ms = started.elapsed().as_millis() as u64;
    crate::metrics::run_finished(status.as_str());
    match result {
        Ok(()) => tracing::info!(
            status = status.as_str(),
            duration_ms = ms,
            input_tokens = usage.input_tokens,
            output_tokens = usage.output_tokens,
            "run finished"
        ),
        Err(e) => tracing::warn!(
            status = status.as_str(),
            duration_ms = ms,
            input_tokens = usage.input_tokens,
            output_tokens = usage.output_tokens,
            error = &e as &dyn std::error::Error,
            "run failed"
        ),
    }
    if !completed || background.is_empty() {
        return None;
    }
    // The run is finished; its background tasks go on (they record under its id, and stop on
    // their own cancel or the thread's). Once the last one settles, a follow-up run reports.
    tracing::info!(
        tasks = background.len(),
        "run finished with background tasks running"
    );
    while background.join_next().await.is_some() {}
    let report = ctx.take_report()?;
    let message_group_id = match read_thread(&ctx.log, &ctx.ids.thread_id).await {
        Ok(events) => message_group_of(&events, &ctx.ids.run_id),
        Err(e) => {
            tracing::warn!(
                error = &e as &dyn std::error::Error,
                "cannot read the thread for the follow-up run"
            );
            ctx.ids.run_id.clone()
        }
    };
    Some(FollowUp {
        message_group_id,
        report,
    })
}

/// The `messageGroupId` of `run_id`'s `run-start`, or the run id when it has none.
pub(crate) fn message_group_of(events: &[StoredEvent], run_id: &str) -> String {
    events
        .iter()
        .find(|e| e.run_id == run_id && e.event_type == "run-start")
        .and_then(|e| serde_json::from_str::<RunStart>(&e.payload).ok())
        .and_then(|p| p.message_group_id)
        .unwrap_or_else(|| run_id.to_string())
}
