//! Prometheus metrics: the process's one `metrics` recorder, what the API records itself (open
//! SSE streams per protocol, projector lag), and the rendering `GET /metrics` and
//! `--metrics-addr` serve in the Prometheus text exposition format. The store and the agent
//! record their own (`threadstream_store::metrics`, `threadstream_agent::metrics`); every metric
//! is listed in docs/operations.md.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use threadstream_store::{metrics as store, EventLog, StoreError};

/// SSE streams open now, by protocol.
pub const SSE_OPEN: &str = "threadstream_sse_streams_open";
/// Events of the log a read model has not folded yet, by model.
pub const PROJECTOR_LAG: &str = "threadstream_projector_lag_events";
/// 1 while this instance folds the read models (holds the projector's lock), else 0.
pub const PROJECTOR_LEADER: &str = "threadstream_projector_leader";

/// Thread pages stream readers read from the store, by where: `standby` or `primary` (only with
/// `--read-database-url`; a page is read on the primary when no standby had replayed far enough).
pub const THREAD_PAGES: &str = "threadstream_thread_pages_read_total";
pub const VIEW_READS: &str = "threadstream_view_reads_total";
/// The async runtime's worker threads (`--worker-threads`).
pub const RUNTIME_WORKERS: &str = "threadstream_runtime_workers";

/// The `protocol` label of [`SSE_OPEN`]: one per SSE dialect.
pub const N8N: &str = "n8n";
pub const AG_UI: &str = "ag-ui";
pub const ITEMS: &str = "items";
pub const WORKFLOW_BUILDER: &str = "workflow-builder";
pub const DURABLE_STREAMS: &str = "durable-streams";
/// The AI SDK's UI message stream (`/api/chat`).
pub const AI_SDK: &str = "ai-sdk";

/// The process's recorder, installed once (a second `serve` in one process shares it).
static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the recorder (once per process) and describes every metric; returns the handle the
/// scrape renders from.
pub fn install() -> anyhow::Result<PrometheusHandle> {
    if let Some(h) = HANDLE.get() {
        return Ok(h.clone());
    }
    // Buckets: batch sizes in events (1 to the writer's 4,096 requests of many events), and
    // acknowledgement latency from 100 µs (a batch's fsync on a quiet disk) to 10 s.
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(store::BATCH_EVENTS.into()),
            &[1., 4., 16., 64., 256., 1024., 4096., 16384.],
        )?
        .set_buckets_for_metric(
            Matcher::Full(store::ACK_SECONDS.into()),
            &[
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                1., 2.5, 10.,
            ],
        )?
        .build_recorder();
    let handle = recorder.handle();
    if metrics::set_global_recorder(recorder).is_err() {
        // Another recorder won a race to be global: this process reports through it.
        anyhow::bail!("a metrics recorder is already installed in this process");
    }
    let handle = HANDLE.get_or_init(|| handle).clone();
    store::describe();
    threadstream_agent::metrics::describe();
    threadstream_change_feed::metrics::describe();
    metrics::describe_gauge!(
        SSE_OPEN,
        metrics::Unit::Count,
        "SSE streams open now, by protocol (n8n, ag-ui, items, workflow-builder, durable-streams, ai-sdk)"
    );
    metrics::describe_gauge!(
        PROJECTOR_LAG,
        metrics::Unit::Count,
        "Events of the log the read model has not folded yet, by model (measured at the scrape)"
    );
    metrics::describe_gauge!(
        PROJECTOR_LEADER,
        metrics::Unit::Count,
        "1 while this instance folds the read models (one instance of a fleet on one Postgres does), else 0"
    );
    metrics::describe_counter!(
        THREAD_PAGES,
        metrics::Unit::Count,
        "Thread pages clients read from the store with --read-database-url, by where (read_on: standby, primary)"
    );
    metrics::describe_counter!(
        VIEW_READS,
        metrics::Unit::Count,
        "Read-model reads (history, status, thread lists) with --read-database-url, by where (read_on: standby, primary)"
    );
    metrics::describe_gauge!(
        RUNTIME_WORKERS,
        metrics::Unit::Count,
        "Worker threads of this instance's async runtime (--worker-threads)"
    );
    metrics::gauge!(PROJECTOR_LEADER).set(0.0);
    // Fixed for the runtime's life: read once, when serving starts on it.
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        metrics::gauge!(RUNTIME_WORKERS).set(rt.metrics().num_workers() as f64);
    }
    // Every protocol appears from the start, at 0.
    for p in [N8N, AG_UI, ITEMS, WORKFLOW_BUILDER, DURABLE_STREAMS, AI_SDK] {
        metrics::gauge!(SSE_OPEN, "protocol" => p).set(0.0);
    }
    Ok(handle)
}

pub(crate) fn projector_leads(leads: bool) {
    metrics::gauge!(PROJECTOR_LEADER).set(if leads { 1.0 } else { 0.0 });
}

pub(crate) fn sse_opened(protocol: &'static str) {
    metrics::gauge!(SSE_OPEN, "protocol" => protocol).increment(1.0);
}

pub(crate) fn sse_closed(protocol: &'static str) {
    metrics::gauge!(SSE_OPEN, "protocol" => protocol).decrement(1.0);
}

/// The text exposition of every metric now, the projector's and the change feed's lag measured
/// first.
pub async fn render(
    log: &EventLog,
    change_feed: Option<&threadstream_change_feed::ChangeFeed>,
) -> Result<String, StoreError> {
    let backend = log.backend();
    let head = backend.max_id().await?;
    for &model in crate::background::read_models::MODELS {
        let at = backend.checkpoint(model).await?;
        metrics::gauge!(PROJECTOR_LAG, "model" => model).set((head - at).max(0) as f64);
    }
    if let Some(reads) = log.replica_reads() {
        metrics::counter!(THREAD_PAGES, "read_on" => "standby").absolute(reads.standby_pages);
        metrics::counter!(THREAD_PAGES, "read_on" => "primary").absolute(reads.primary_pages);
        metrics::counter!(VIEW_READS, "read_on" => "standby").absolute(reads.standby_views);
        metrics::counter!(VIEW_READS, "read_on" => "primary").absolute(reads.primary_views);
    }
    if let Some(feed) = change_feed {
        threadstream_change_feed::metrics::lag(&feed.lag(log).await?);
    }
    Ok(HANDLE
        .get()
        .map(PrometheusHandle::render)
        .unwrap_or_default())
}
