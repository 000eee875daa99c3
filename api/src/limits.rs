//! The service's per-request, per-user and per-process limits, in one place.
//!
//! [`LimitsConfig`] holds the configured values (flags and `THREADSTREAM_*` variables, see
//! `src/main.rs`; defaults in `docs/operations.md`). [`Limits`] is the cheap-to-clone handle in
//! `ApiContext` that enforces them:
//!
//! - sizes and counts of one request ([`Limits::check_ingest`]) → 413;
//! - requests per user per second, a token bucket per user (`governor`'s keyed GCRA limiter,
//!   [`Limits::take_request`], applied to every route by [`rate_limit`]) → 429 with
//!   `Retry-After`;
//! - open SSE streams per user and in total ([`Limits::sse_slot`]) and runs executing per user
//!   ([`Limits::run_slot`]) → 429. Both hand out a guard that gives its slot back when dropped,
//!   so a closed stream or a finished run frees it however it ended.
//!
//! Per-user limits are keyed on `Caller::user_id` only: how the caller was identified is the
//! extractor's business. Counts are per process (each instance on a shared Postgres counts its
//! own streams and runs).
//!
//! A count limit of 0 means unlimited (the load benchmarks use that).

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, MutexGuard};
use threadstream_domain::ErrorCode;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};

use axum::extract::{FromRequestParts, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::extract::Caller;
use crate::ApiContext;

/// The configured limits (the two older size limits, `max_body_bytes` and `max_message_bytes`,
/// stay in [`crate::Config`]).
#[derive(Debug, Clone, PartialEq)]
pub struct LimitsConfig {
    /// Events in one ingest request (413 above it).
    pub max_events_per_ingest: usize,
    /// Bytes of one ingested event's JSON, as sent (413 above it).
    pub max_event_bytes: usize,
    /// SSE streams one user may have open at once, all protocols together (429 above it).
    pub max_sse_per_user: usize,
    /// SSE streams open at once in this process (429 above it).
    pub max_sse_total: usize,
    /// Sustained requests per second per user (the bucket's refill rate; 0: no rate limit).
    pub requests_per_sec: u32,
    /// Requests a user may send at once after being idle (the bucket's size).
    pub request_burst: u32,
    /// Runs one user may have executing in this process at once (429 above it).
    pub max_runs_per_user: usize,
}

/// Default of [`LimitsConfig::max_events_per_ingest`].
pub const DEFAULT_MAX_EVENTS_PER_INGEST: usize = 1_000;
/// Default of [`LimitsConfig::max_event_bytes`].
pub const DEFAULT_MAX_EVENT_BYTES: usize = 256 * 1024;
/// Default of [`LimitsConfig::max_sse_per_user`].
pub const DEFAULT_MAX_SSE_PER_USER: usize = 1_000;
/// Default of [`LimitsConfig::max_sse_total`].
pub const DEFAULT_MAX_SSE_TOTAL: usize = 10_000;
/// Default of [`LimitsConfig::requests_per_sec`].
pub const DEFAULT_REQUESTS_PER_SEC: u32 = 1_000;
/// Default of [`LimitsConfig::request_burst`].
pub const DEFAULT_REQUEST_BURST: u32 = 2_000;
/// Default of [`LimitsConfig::max_runs_per_user`].
pub const DEFAULT_MAX_RUNS_PER_USER: usize = 20;

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_events_per_ingest: DEFAULT_MAX_EVENTS_PER_INGEST,
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
            max_sse_per_user: DEFAULT_MAX_SSE_PER_USER,
            max_sse_total: DEFAULT_MAX_SSE_TOTAL,
            requests_per_sec: DEFAULT_REQUESTS_PER_SEC,
            request_burst: DEFAULT_REQUEST_BURST,
            max_runs_per_user: DEFAULT_MAX_RUNS_PER_USER,
        }
    }
}

/// Users' rate-limit states kept before those indistinguishable from a fresh one (a full bucket)
/// are forgotten.
const PRUNE_BUCKETS_ABOVE: usize = 10_000;

/// Handle to the limits and their live counts. Cheap to clone.
#[derive(Clone)]
pub struct Limits {
    inner: Arc<Inner>,
}

struct Inner {
    config: LimitsConfig,
    sse: Mutex<Counts>,
    runs: Mutex<HashMap<String, usize>>,
    /// `None` when `requests_per_sec` is 0 (no rate limit).
    requests: Option<DefaultKeyedRateLimiter<String>>,
}

#[derive(Default)]
struct Counts {
    total: usize,
    per_user: HashMap<String, usize>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update under these locks is a whole-value change: a poisoned lock is still sound.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Limits {
    pub fn new(config: LimitsConfig) -> Self {
        let requests = NonZeroU32::new(config.requests_per_sec).map(|rate| {
            let burst = NonZeroU32::new(config.request_burst).unwrap_or(NonZeroU32::MIN);
            DefaultKeyedRateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
        });
        Limits {
            inner: Arc::new(Inner {
                config,
                sse: Mutex::new(Counts::default()),
                runs: Mutex::new(HashMap::new()),
                requests,
            }),
        }
    }

    pub fn config(&self) -> &LimitsConfig {
        &self.inner.config
    }

    /// Checks an ingest request's event count and each event's size (its JSON as sent).
    pub fn check_ingest<'a>(
        &self,
        event_sizes: impl ExactSizeIterator<Item = usize> + 'a,
    ) -> Result<(), ApiError> {
        let c = &self.inner.config;
        if event_sizes.len() > c.max_events_per_ingest {
            return Err(ApiError::too_large(
                "max_events_per_ingest",
                c.max_events_per_ingest,
                format!(
                    "{} events in one request; at most {} are accepted",
                    event_sizes.len(),
                    c.max_events_per_ingest
                ),
            ));
        }
        for (i, size) in event_sizes.enumerate() {
            if size > c.max_event_bytes {
                return Err(ApiError::too_large(
                    "max_event_bytes",
                    c.max_event_bytes,
                    format!(
                        "events[{i}] is {size} bytes; one event may be at most {} bytes",
                        c.max_event_bytes
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Takes one token of `user`'s bucket, or says how long until one is there.
    pub fn take_request(&self, user: &str) -> Result<(), ApiError> {
        let Some(requests) = &self.inner.requests else {
            return Ok(());
        };
        if requests.len() > PRUNE_BUCKETS_ABOVE {
            requests.retain_recent();
        }
        let Err(not_until) = requests.check_key(&user.to_string()) else {
            return Ok(());
        };
        let wait = not_until.wait_time_from(DefaultClock::default().now());
        let c = &self.inner.config;
        Err(ApiError::TooMany {
            code: ErrorCode::RateLimited,
            limit: "requests_per_sec",
            value: u64::from(c.requests_per_sec),
            message: format!(
                "more than {} requests per second (bursts of {}) from one user; retry later",
                c.requests_per_sec, c.request_burst
            ),
            // Whole seconds, rounded up: `Retry-After` has no finer unit.
            retry_after: Some(wait.as_secs() + u64::from(wait.subsec_nanos() > 0)),
        })
    }

    /// A slot for one SSE stream of `user` on `protocol` (`crate::metrics::SSE_PROTOCOLS`); the
    /// stream holds it until it ends.
    pub fn sse_slot(&self, user: &str, protocol: &'static str) -> Result<SseSlot, ApiError> {
        let c = &self.inner.config;
        let mut sse = lock(&self.inner.sse);
        if c.max_sse_total != 0 && sse.total >= c.max_sse_total {
            return Err(ApiError::TooMany {
                code: ErrorCode::TooManyStreams,
                limit: "max_sse_total",
                value: c.max_sse_total as u64,
                message: format!(
                    "the server has {} event streams open, its limit; retry later",
                    c.max_sse_total
                ),
                retry_after: None,
            });
        }
        let mine = sse.per_user.get(user).copied().unwrap_or(0);
        if c.max_sse_per_user != 0 && mine >= c.max_sse_per_user {
            return Err(ApiError::TooMany {
                code: ErrorCode::TooManyStreams,
                limit: "max_sse_per_user",
                value: c.max_sse_per_user as u64,
                message: format!(
                    "this user has {} event streams open, the limit; close one first",
                    c.max_sse_per_user
                ),
                retry_after: None,
            });
        }
        sse.total += 1;
        *sse.per_user.entry(user.to_string()).or_default() += 1;
        crate::metrics::sse_opened(protocol);
        Ok(SseSlot {
            limits: self.clone(),
            user: user.to_string(),
            protocol,
        })
    }

    /// A slot for one run of `user`; the run's task holds it until the run ends.
    pub fn run_slot(&self, user: &str) -> Result<RunSlot, ApiError> {
        let max = self.inner.config.max_runs_per_user;
        let mut runs = lock(&self.inner.runs);
        let mine = runs.entry(user.to_string()).or_default();
        if max != 0 && *mine >= max {
            return Err(ApiError::TooMany {
                code: ErrorCode::TooManyRuns,
                limit: "max_runs_per_user",
                value: max as u64,
                message: format!(
                    "this user has {max} runs executing, the limit; wait for one to finish"
                ),
                retry_after: None,
            });
        }
        *mine += 1;
        Ok(RunSlot {
            limits: self.clone(),
            user: user.to_string(),
        })
    }

    /// SSE streams open now: (this user's, all).
    pub fn open_streams(&self, user: &str) -> (usize, usize) {
        let sse = lock(&self.inner.sse);
        (sse.per_user.get(user).copied().unwrap_or(0), sse.total)
    }
}

/// One open SSE stream's place in the counts; given back on drop.
pub struct SseSlot {
    limits: Limits,
    user: String,
    protocol: &'static str,
}

impl Drop for SseSlot {
    fn drop(&mut self) {
        crate::metrics::sse_closed(self.protocol);
        let mut sse = lock(&self.limits.inner.sse);
        sse.total = sse.total.saturating_sub(1);
        if let Some(n) = sse.per_user.get_mut(&self.user) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                sse.per_user.remove(&self.user);
            }
        }
    }
}

/// One executing run's place in its user's count; given back on drop.
pub struct RunSlot {
    limits: Limits,
    user: String,
}

impl Drop for RunSlot {
    fn drop(&mut self) {
        let mut runs = lock(&self.limits.inner.runs);
        if let Some(n) = runs.get_mut(&self.user) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                runs.remove(&self.user);
            }
        }
    }
}

/// Middleware: every request takes a token of its caller's bucket first. A request whose
/// caller cannot be identified goes on, so the route answers it with the extractor's error.
pub async fn rate_limit(State(ctx): State<ApiContext>, req: Request, next: Next) -> Response {
    if ctx.limits.config().requests_per_sec == 0 {
        return next.run(req).await;
    }
    let (mut parts, body) = req.into_parts();
    let caller = Caller::from_request_parts(&mut parts, &ctx).await;
    if let Ok(caller) = caller {
        if let Err(e) = ctx.limits.take_request(&caller.user_id) {
            return e.into_response();
        }
        // The handler's `Caller` is this one: identifying twice would spend a single-use
        // stream ticket before the handler sees it.
        parts.extensions.insert(caller);
    }
    next.run(Request::from_parts(parts, body)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limits(f: impl FnOnce(&mut LimitsConfig)) -> Limits {
        let mut c = LimitsConfig::default();
        f(&mut c);
        Limits::new(c)
    }

    #[test]
    fn bucket_allows_the_burst_then_refuses_with_a_wait() {
        let l = limits(|c| {
            c.requests_per_sec = 2;
            c.request_burst = 3;
        });
        for _ in 0..3 {
            l.take_request("u").unwrap();
        }
        match l.take_request("u") {
            Err(ApiError::TooMany { retry_after, .. }) => assert_eq!(retry_after, Some(1)),
            other => panic!("expected 429, got {other:?}"),
        }
        // Another user has a bucket of their own.
        l.take_request("v").unwrap();
        std::thread::sleep(Duration::from_millis(600));
        l.take_request("u")
            .expect("a token refilled after 0.5 s at 2/s");
    }

    #[test]
    fn slots_count_per_user_and_total_and_free_on_drop() {
        let l = limits(|c| {
            c.max_sse_per_user = 2;
            c.max_sse_total = 3;
        });
        let a1 = l.sse_slot("a", "n8n").unwrap();
        let _a2 = l.sse_slot("a", "n8n").unwrap();
        assert!(l.sse_slot("a", "n8n").is_err(), "third stream of one user");
        let _b1 = l.sse_slot("b", "n8n").unwrap();
        assert!(l.sse_slot("c", "n8n").is_err(), "fourth stream in total");
        drop(a1);
        assert_eq!(l.open_streams("a"), (1, 2));
        l.sse_slot("c", "n8n").expect("a freed slot is reusable");
    }

    #[test]
    fn run_slots_and_zero_means_unlimited() {
        let l = limits(|c| c.max_runs_per_user = 1);
        let r = l.run_slot("a").unwrap();
        assert!(l.run_slot("a").is_err());
        drop(r);
        l.run_slot("a").unwrap();
        let l = limits(|c| {
            c.max_runs_per_user = 0;
            c.requests_per_sec = 0;
        });
        let _held: Vec<RunSlot> = (0..100).map(|_| l.run_slot("a").unwrap()).collect();
        for _ in 0..10_000 {
            l.take_request("a").unwrap();
        }
    }

    #[test]
    fn ingest_counts_and_sizes() {
        let l = limits(|c| {
            c.max_events_per_ingest = 2;
            c.max_event_bytes = 10;
        });
        l.check_ingest([1, 10].into_iter()).unwrap();
        let too_many = l.check_ingest([1, 1, 1].into_iter()).unwrap_err();
        assert!(matches!(
            too_many,
            ApiError::TooLarge {
                limit: "max_events_per_ingest",
                ..
            }
        ));
        let too_big = l.check_ingest([1, 11].into_iter()).unwrap_err();
        assert!(too_big.to_string().contains("events[1]"), "{too_big}");
    }
}
