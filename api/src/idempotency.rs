//! `Idempotency-Key` on the write routes (`POST /instance-ai/threads/:threadId/events`,
//! `POST /instance-ai/chat/:threadId`, `POST /api/v1/agent/runs`): a retry gets the first
//! answer and stores nothing, on any instance, for the configured window (docs/protocol.md,
//! "Idempotency-Key").
//!
//! A request with a key claims it in the log's database, executes, and its append carries the
//! key: the writer stores the answer in the same transaction as the events, and refuses an
//! append whose key is answered already (`threadstream_store::idempotency`). So a key is
//! answered exactly when its events are stored, and is stored once however often it is
//! executed. The claim only keeps duplicates from executing at the same time: a duplicate
//! waits for the answer (then gets it), and a claim whose holder died runs out and is taken
//! over by the next retry.

use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use threadstream_domain::ErrorCode;

use axum::body::Body;
use axum::extract::{FromRequest, Request};
use axum::http::HeaderName;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sha2::{Digest, Sha256};
use threadstream_domain::clock::now_ms;
use threadstream_domain::StoredEvent;
use threadstream_store::{Claim, IdempotencyKey, KeyClaim, KeyedAppend};

use crate::error::ApiError;
use crate::extract::{json_body, parse_json, Caller};
use crate::ApiContext;

pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// The longest key accepted.
const MAX_KEY_LEN: usize = 255;

/// How long one execution holds its key. An append takes milliseconds, so only a holder that
/// died (or hangs) loses its claim; one that is merely slow and loses it is still safe: the
/// writer stores the key once.
const CLAIM_LEASE: Duration = Duration::from_secs(10);

/// How long a duplicate waits for the first execution's answer before a 409. Longer than the
/// lease: a retry of a request whose process died takes its key over within this wait.
const WAIT_FOR_ANSWER: Duration = Duration::from_secs(15);

/// Between two looks at a held key.
const POLL: Duration = Duration::from_millis(50);

/// Expired keys are pruned at most this often (and at most once per window).
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// The process's idempotency settings and state: the window, and when expired keys were last
/// pruned.
#[derive(Clone)]
pub struct Keys {
    window: Duration,
    pruned_at: Arc<AtomicI64>,
}

impl Keys {
    pub fn new(window: Duration) -> Self {
        Keys {
            window,
            pruned_at: Arc::new(AtomicI64::new(0)),
        }
    }

    /// Drops expired keys, unless this process did so recently. Housekeeping only: an expired
    /// key is forgotten by every read and claim whether or not its row is still there.
    async fn prune(&self, ctx: &ApiContext, now: i64) {
        let every = PRUNE_EVERY.min(self.window).as_millis() as i64;
        let last = self.pruned_at.load(Ordering::Relaxed);
        if now - last < every
            || self
                .pruned_at
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        if let Err(e) = ctx.log.prune_keys(now).await {
            tracing::warn!(
                error = &e as &dyn std::error::Error,
                "expired idempotency keys not pruned"
            );
        }
    }
}

/// A request's `Idempotency-Key` and what identifies the request (its fingerprint).
pub struct RequestKey {
    key: String,
    fingerprint: String,
}

/// A JSON body read as [`crate::extract::ApiJson`] reads it, with the request's
/// `Idempotency-Key` (checked: 400 `invalid_idempotency_key`) and the fingerprint of the
/// request it belongs to (method, path and body bytes).
pub struct KeyedJson<T> {
    pub body: T,
    pub key: Option<RequestKey>,
}

impl<T: DeserializeOwned> FromRequest<ApiContext> for KeyedJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request<Body>, ctx: &ApiContext) -> Result<Self, Self::Rejection> {
        let key = request_key(&req)?;
        let method = req.method().clone();
        let path = req.uri().path().to_string();
        let bytes = json_body(req, ctx).await?;
        let body = parse_json(&bytes)?;
        let key = key.map(|key| {
            let mut hash = Sha256::new();
            hash.update(method.as_str());
            hash.update(b" ");
            hash.update(path.as_bytes());
            hash.update(b"\n");
            hash.update(&bytes);
            RequestKey {
                key,
                fingerprint: hex::encode(hash.finalize()),
            }
        });
        Ok(KeyedJson { body, key })
    }
}

fn invalid_key(message: impl Into<String>) -> ApiError {
    ApiError::bad_request(ErrorCode::InvalidIdempotencyKey, message)
}

/// The request's key: 1 to 255 visible ASCII characters, bare or as a quoted string (the
/// header's structured form, `"…"`, is the same key as its content).
fn request_key(req: &Request<Body>) -> Result<Option<String>, ApiError> {
    let mut values = req.headers().get_all(IDEMPOTENCY_KEY).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(invalid_key("send one Idempotency-Key header, not several"));
    }
    let raw = value.as_bytes();
    let key = match raw {
        [b'"', inner @ .., b'"'] => inner,
        _ => raw,
    };
    if key.is_empty() || key.len() > MAX_KEY_LEN || !key.iter().all(|b| b.is_ascii_graphic()) {
        return Err(invalid_key(format!(
            "Idempotency-Key must be 1 to {MAX_KEY_LEN} visible ASCII characters"
        )));
    }
    Ok(Some(String::from_utf8_lossy(key).into_owned()))
}

fn reused() -> ApiError {
    ApiError::unprocessable(
        ErrorCode::IdempotencyKeyReused,
        "this Idempotency-Key was used for a different request (another method, path or \
         body); send a new key for a new request",
    )
}

fn in_use() -> ApiError {
    ApiError::Conflict {
        code: ErrorCode::IdempotencyKeyInUse,
        message: "a request with this Idempotency-Key is still being executed; retry later".into(),
    }
}

/// Executes a write once per key: without a key, `work(None)` and its answer; with one, the
/// first answer stored under the caller's key if there is one (422 if it was given for another
/// request), else `work` with the key to append under, then its answer. `answer` makes the
/// answer from the events `work` stored: it is stored as the key's answer with them, so every
/// retry gets exactly what the first execution answered. A `work` that fails gives the key
/// back (it stored nothing): a retry executes it again.
pub async fn once<A, W, F>(
    ctx: &ApiContext,
    caller: &Caller,
    key: Option<RequestKey>,
    answer: A,
    work: W,
) -> Result<Value, ApiError>
where
    A: Fn(&[StoredEvent]) -> Value + Send + Sync + 'static,
    W: FnOnce(Option<KeyedAppend>) -> F,
    F: Future<Output = Result<Vec<StoredEvent>, ApiError>>,
{
    let Some(RequestKey { key, fingerprint }) = key else {
        let stored = work(None).await?;
        return Ok(answer(&stored));
    };
    let key = IdempotencyKey {
        scope: caller.user_id.clone(),
        key,
    };
    let token = uuid::Uuid::new_v4().to_string();
    let answer = Arc::new(answer);
    let stored_answer = answer.clone();
    let mut work = Some(work);
    let waiting_since = Instant::now();
    loop {
        let now = now_ms();
        ctx.idempotency.prune(ctx, now).await;
        let claim = KeyClaim {
            key: key.clone(),
            fingerprint: fingerprint.clone(),
            token: token.clone(),
            now,
            claimed_until: now + CLAIM_LEASE.as_millis() as i64,
            expires_at: now + ctx.idempotency.window.as_millis() as i64,
        };
        match ctx.log.claim_key(&claim).await? {
            Claim::Answered {
                fingerprint: first,
                answer,
            } => {
                if first != fingerprint {
                    return Err(reused());
                }
                return serde_json::from_str(&answer).map_err(|e| ApiError::Internal(e.into()));
            }
            Claim::Held { fingerprint: first } => {
                if first != fingerprint {
                    return Err(reused());
                }
                if waiting_since.elapsed() >= WAIT_FOR_ANSWER {
                    return Err(in_use());
                }
                tokio::time::sleep(POLL).await;
            }
            Claim::Taken => {
                // Taken at most once: the claim is ours until answered or given back.
                let Some(work) = work.take() else {
                    return Err(in_use());
                };
                let stored_answer = stored_answer.clone();
                let keyed = KeyedAppend {
                    key: key.clone(),
                    fingerprint: fingerprint.clone(),
                    expires_at: claim.expires_at,
                    answer: Arc::new(move |stored: &[StoredEvent]| {
                        stored_answer(stored).to_string()
                    }),
                };
                match work(Some(keyed)).await {
                    Ok(stored) => return Ok(answer(&stored)),
                    // Another execution (a takeover of our claim) stored it first: its answer,
                    // read on the next round.
                    Err(ApiError::KeyAnswered) => {}
                    Err(e) => {
                        if let Err(release) = ctx.log.release_key(&key, &token).await {
                            // Not given back: a retry takes it over once the claim runs out.
                            tracing::warn!(
                                error = &release as &dyn std::error::Error,
                                "an idempotency key was not released after its request failed"
                            );
                        }
                        return Err(e);
                    }
                }
            }
        }
    }
}
