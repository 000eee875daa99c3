//! What the log reports to the process's metrics recorder (the `metrics` facade; the server
//! renders it for Prometheus at `/metrics`, see docs/operations.md). Without a recorder these
//! are no-ops. Every name the store records is here, with its description.

use std::time::Duration;

/// Events committed and acknowledged, counted once per event.
pub const EVENTS_APPENDED: &str = "threadstream_events_appended_total";
/// Events per committed batch (group commit).
pub const BATCH_EVENTS: &str = "threadstream_append_batch_events";
/// An append's time from being handed to the writer to its acknowledgement.
pub const ACK_SECONDS: &str = "threadstream_append_ack_seconds";
/// Times a connection that carries head hints between instances was re-established.
pub const NOTIFY_RECONNECTS: &str = "threadstream_notify_reconnects_total";

/// Describes the store's metrics to the recorder (once, at start-up).
pub fn describe() {
    metrics::describe_counter!(
        EVENTS_APPENDED,
        metrics::Unit::Count,
        "Events committed to the log and acknowledged"
    );
    metrics::describe_histogram!(
        BATCH_EVENTS,
        metrics::Unit::Count,
        "Events per committed batch (group commit)"
    );
    metrics::describe_histogram!(
        ACK_SECONDS,
        metrics::Unit::Seconds,
        "An append's time from the writer's queue to its acknowledgement"
    );
    metrics::describe_counter!(
        NOTIFY_RECONNECTS,
        metrics::Unit::Count,
        "Re-established connections of the head hints between instances (LISTEN or Redis), by kind"
    );
}

/// A batch of `events` events was acknowledged.
pub(crate) fn batch_acknowledged(events: usize) {
    metrics::counter!(EVENTS_APPENDED).increment(events as u64);
    metrics::histogram!(BATCH_EVENTS).record(events as f64);
}

/// An append was acknowledged `took` after it was handed to the writer.
pub(crate) fn append_acknowledged(took: Duration) {
    metrics::histogram!(ACK_SECONDS).record(took.as_secs_f64());
}

/// The head-hint connection of `kind` (`postgres`, `redis`) is being re-established.
pub(crate) fn notify_reconnect(kind: &'static str) {
    metrics::counter!(NOTIFY_RECONNECTS, "kind" => kind).increment(1);
}
