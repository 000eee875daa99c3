//! Readiness: whether this instance should be sent new requests (`GET /readyz`), kept apart
//! from liveness (`GET /healthz`: the process serves). A load balancer checking `/readyz` stops
//! routing to an instance that cannot reach its store or is shutting down, and routes to it
//! again once it can; restarting it would not help, so `/healthz` stays 200 meanwhile.
//!
//! The one place "ready" is decided: [`Readiness::check`].

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use threadstream_agent::AgentRuntime;
use threadstream_store::{EventLog, StoreError};

/// A store that has not answered within this is unreachable for the check (sqlx's own acquire
/// timeout is longer; a load balancer's check should not wait for it).
pub const STORE_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Why the instance is not ready.
#[derive(Debug)]
pub enum NotReady {
    /// SIGTERM came: the instance drains (its `--shutdown-unready-ms`, then its runs' cancel).
    ShuttingDown,
    /// The store did not answer a round trip (or refuses appends).
    StoreUnreachable(Option<StoreError>),
}

impl NotReady {
    /// The stable name of the cause, in the 503 body's `cause`.
    pub fn cause(&self) -> &'static str {
        match self {
            NotReady::ShuttingDown => "shutting_down",
            NotReady::StoreUnreachable(_) => "store_unreachable",
        }
    }

    /// For the operator reading the body.
    pub fn message(&self) -> String {
        match self {
            NotReady::ShuttingDown => {
                "the instance is shutting down; send requests to another instance".into()
            }
            NotReady::StoreUnreachable(None) => format!(
                "the store did not answer within {} ms",
                STORE_PROBE_TIMEOUT.as_millis()
            ),
            // The store's own words say what failed (no SQL or credentials are in them).
            NotReady::StoreUnreachable(Some(e)) => format!("the store is unreachable: {e}"),
        }
    }
}

/// Last answer, so a change is logged once rather than on every probe (0: none yet).
const READY: u8 = 1;
const SHUTTING_DOWN: u8 = 2;
const STORE_UNREACHABLE: u8 = 3;

/// Shared by every clone: the drain flag the shutdown sets, and the last answer.
#[derive(Clone, Default)]
pub struct Readiness {
    draining: Arc<AtomicBool>,
    last: Arc<AtomicU8>,
}

impl Readiness {
    /// From now on the instance answers not ready (`shutting_down`), while it still serves.
    pub fn begin_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// Ready unless shutting down (the drain began, or the runtime stopped admitting runs) or
    /// the store does not answer a round trip within [`STORE_PROBE_TIMEOUT`].
    pub async fn check(&self, runtime: &AgentRuntime, log: &EventLog) -> Result<(), NotReady> {
        let answer = if self.draining.load(Ordering::SeqCst) || runtime.is_stopping() {
            Err(NotReady::ShuttingDown)
        } else {
            match tokio::time::timeout(STORE_PROBE_TIMEOUT, log.backend().ping()).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(NotReady::StoreUnreachable(Some(e))),
                Err(_) => Err(NotReady::StoreUnreachable(None)),
            }
        };
        let now = match &answer {
            Ok(()) => READY,
            Err(NotReady::ShuttingDown) => SHUTTING_DOWN,
            Err(NotReady::StoreUnreachable(_)) => STORE_UNREACHABLE,
        };
        if self.last.swap(now, Ordering::SeqCst) != now {
            match &answer {
                Ok(()) => tracing::info!("ready"),
                Err(e) => tracing::warn!(cause = e.cause(), detail = ?e, "not ready"),
            }
        }
        answer
    }
}
