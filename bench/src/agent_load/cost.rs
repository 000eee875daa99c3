//! What a configuration of the agent-load scenario cost, per unit of work: CPU of the server
//! and of the store per appended and per delivered event and per second of a live run, and
//! bytes the store holds per token delta. The row's extras.

use super::logdb::{StoreKind, Stored};
use crate::procstat::GroupUsage;
use crate::report::{round, Row};

/// What a configuration cost: CPU per unit of work, and bytes per token.
pub struct Cost {
    pub kind: StoreKind,
    /// The servers' CPU over the load window.
    pub server_cpu_s: f64,
    /// Postgres's processes over the same window; `None` on SQLite (in the server).
    pub store: Option<GroupUsage>,
    pub appended: u64,
    pub deliveries: u64,
    /// The runs' live time summed (chat runs and ingest agents' runs): first `run-start` to
    /// last `run-finish` of each thread.
    pub live_run_secs: f64,
    /// `text-delta` events in the log: the model's and the ingest agents' token deltas.
    pub text_deltas: u64,
    pub stored: Stored,
    /// Postgres: WAL written over the window (the cluster's).
    pub wal_bytes: Option<u64>,
    pub machine_busy_percent: f64,
}

impl Cost {
    pub fn extras(&self, row: Row) -> Row {
        // Per unit of work; none (null) when there was none (no watchers: no deliveries).
        let us_per = |cpu_s: f64, n: u64| (n > 0).then(|| round(cpu_s * 1e6 / n as f64, 1));
        let per = |bytes: u64, n: u64| (n > 0).then(|| round(bytes as f64 / n as f64, 1));
        let store_s = self.store.as_ref().map_or(0.0, |g| g.cpu_seconds);
        let row = row
            .extra(
                "server_cpu_us_per_appended",
                us_per(self.server_cpu_s, self.appended),
            )
            .extra(
                "server_cpu_us_per_delivered",
                us_per(self.server_cpu_s, self.deliveries),
            )
            .extra("live_run_seconds", round(self.live_run_secs, 1))
            .extra(
                "server_cpu_us_per_live_run_second",
                (self.live_run_secs > 0.0)
                    .then(|| round(self.server_cpu_s * 1e6 / self.live_run_secs, 0)),
            )
            .extra(
                "store_cpu_is",
                match self.kind {
                    StoreKind::Postgres => {
                        "every postgres process of the cluster (postmaster, background \
                         processes, all backends)"
                    }
                    StoreKind::Sqlite => "in the server process (server CPU holds it)",
                },
            )
            .extra("store_cpu_seconds", round(store_s, 2))
            .extra(
                "store_processes",
                self.store.as_ref().map(|g| g.processes as u64),
            )
            .extra(
                "store_cpu_seconds_other_databases",
                self.store.as_ref().map(|g| g.other_databases_cpu_seconds),
            )
            .extra("store_cpu_us_per_appended", us_per(store_s, self.appended))
            .extra(
                "server_plus_store_cpu_us_per_appended",
                us_per(self.server_cpu_s + store_s, self.appended),
            )
            .extra(
                "server_plus_store_cpu_us_per_delivered",
                us_per(self.server_cpu_s + store_s, self.deliveries),
            )
            .extra("text_deltas", self.text_deltas)
            .extra("stored_log_bytes", self.stored.log)
            .extra("stored_read_model_bytes", self.stored.read_models)
            .extra("stored_all_bytes", self.stored.all)
            .extra(
                "stored_is",
                match self.kind {
                    StoreKind::Postgres => {
                        "log: events with its indexes and TOAST; all: every table of the \
                         database with indexes and TOAST"
                    }
                    StoreKind::Sqlite => {
                        "log: events' pages with its indexes (dbstat) + threadstream-index.db \
                         and its -wal; all: every file of the data dir but -shm (databases and \
                         their -wal)"
                    }
                },
            )
            .extra(
                "log_bytes_per_text_delta",
                per(self.stored.log, self.text_deltas),
            )
            .extra(
                "all_bytes_per_text_delta",
                per(self.stored.all, self.text_deltas),
            )
            .extra(
                "log_bytes_per_appended",
                per(self.stored.log, self.appended),
            )
            .extra(
                "all_bytes_per_appended",
                per(self.stored.all, self.appended),
            )
            .extra("wal_bytes_written", self.wal_bytes)
            .extra(
                "wal_bytes_per_text_delta",
                self.wal_bytes.and_then(|w| per(w, self.text_deltas)),
            )
            .extra(
                "wal_bytes_per_appended",
                self.wal_bytes.and_then(|w| per(w, self.appended)),
            )
            .extra("machine_busy_percent", round(self.machine_busy_percent, 1))
            .extra(
                "machine_idle_percent",
                round(100.0 - self.machine_busy_percent, 1),
            );
        row
    }
}
