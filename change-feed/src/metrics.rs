//! What the change feed reports to the process's metrics recorder (rendered at `/metrics`, see
//! docs/operations.md). Every name the feed records is here, with its description.

use crate::Lag;

/// Events published to the stream (JetStream's duplicates included).
pub const PUBLISHED: &str = "threadstream_change_feed_published_total";
/// Ids of the log not yet acknowledged by the stream.
pub const LAG_EVENTS: &str = "threadstream_change_feed_lag_events";
/// Age of the oldest event not yet acknowledged by the stream.
pub const LAG_SECONDS: &str = "threadstream_change_feed_lag_seconds";
/// 1 on the instance that publishes, 0 on the others.
pub const PUBLISHING: &str = "threadstream_change_feed_publishing";

/// Describes the feed's metrics to the recorder (once, at start-up).
pub fn describe() {
    metrics::describe_counter!(
        PUBLISHED,
        metrics::Unit::Count,
        "Events this instance published to the change feed's JetStream stream (duplicates JetStream dropped included)"
    );
    metrics::describe_gauge!(
        LAG_EVENTS,
        metrics::Unit::Count,
        "Ids of the log after the highest one the change feed's stream acknowledged (the publishing instance's view)"
    );
    metrics::describe_gauge!(
        LAG_SECONDS,
        metrics::Unit::Seconds,
        "Age of the oldest event the change feed's stream has not acknowledged (0 when caught up)"
    );
    metrics::describe_gauge!(
        PUBLISHING,
        metrics::Unit::Count,
        "1 when this instance holds the change feed's lock and publishes"
    );
}

pub(crate) fn published(events: usize) {
    metrics::counter!(PUBLISHED).increment(events as u64);
}

/// Sets the lag gauges (the server measures the lag at each scrape, like the projector's).
pub fn lag(lag: &Lag) {
    metrics::gauge!(LAG_EVENTS).set(lag.events as f64);
    metrics::gauge!(LAG_SECONDS).set(lag.seconds);
}

pub(crate) fn publishing(yes: bool) {
    metrics::gauge!(PUBLISHING).set(if yes { 1.0 } else { 0.0 });
}
