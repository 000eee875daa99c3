//! Idempotency keys (`Idempotency-Key`, docs/protocol.md): the table `idempotency_keys` in the
//! log's database (migrations `sqlite/0003`, `postgres/0007`).
//!
//! Two parts with two jobs:
//!
//! - **The claim** (outside the writer): a request inserts its key's row before it executes; the
//!   primary key decides which of two racing requests executes, the other waits for the answer.
//!   A claim lasts until `claimed_until`, so one left by a process that died is taken over.
//!   Claims only keep duplicates from running at the same time; they are not what makes a key
//!   store once.
//! - **The answer** (in the writer): an append carrying a key ([`KeyedAppend`]) is refused with
//!   [`StoreError::KeyAnswered`] when the key already has an answer, and otherwise stores the
//!   answer in the same transaction as its events. The check is made under the log's write
//!   order (SQLite's write lock, Postgres's advisory lock, which every instance's batches take),
//!   and the answer is written with an upsert that changes nothing once an answer exists (the
//!   batch then fails rather than store twice). So however many times a key is executed — a
//!   takeover after a crash, a holder slower than its claim — its events are stored once.

use std::sync::Arc;

use threadstream_domain::StoredEvent;

use crate::error::StoreError;

/// Makes a keyed append's answer from the events it stored (the same function answers the
/// request that stored them and, through the stored text, every retry).
pub type AnswerFn = Arc<dyn Fn(&[StoredEvent]) -> String + Send + Sync>;

/// An idempotency key of one caller.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey {
    /// Whose key it is (the caller's user id).
    pub scope: String,
    pub key: String,
}

/// The claim a request makes on its key before executing it.
#[derive(Debug, Clone)]
pub struct KeyClaim {
    pub key: IdempotencyKey,
    /// What the request is (its method, path and body, hashed): the same key for another
    /// request is refused.
    pub fingerprint: String,
    /// Identifies this execution: only it releases the claim.
    pub token: String,
    /// Epoch ms: now (rows expired before it are dropped), until when the claim holds, and
    /// until when the key is remembered.
    pub now: i64,
    pub claimed_until: i64,
    pub expires_at: i64,
}

/// What claiming a key found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The key is this request's to execute (new, or its holder's claim ran out).
    Taken,
    /// Another request holds the key and has not answered yet.
    Held { fingerprint: String },
    /// The key is answered: the first answer.
    Answered { fingerprint: String, answer: String },
}

/// A key's row as claims read it.
#[derive(Debug, Clone)]
pub struct StoredKey {
    pub fingerprint: String,
    /// `None` while the key is claimed and not answered.
    pub answer: Option<String>,
}

/// An append made under an idempotency key: stored only if the key has no answer yet, and then
/// with its answer, in the same transaction.
#[derive(Clone)]
pub struct KeyedAppend {
    pub key: IdempotencyKey,
    pub fingerprint: String,
    /// Epoch ms: until when the answer is remembered.
    pub expires_at: i64,
    pub answer: AnswerFn,
}

/// A key's answer as the writer stores it with the batch.
#[derive(Debug, Clone)]
pub(crate) struct AnsweredKey {
    pub key: IdempotencyKey,
    pub fingerprint: String,
    pub expires_at: i64,
    pub answer: String,
    /// The last id the keyed append stored (`None`: it stored nothing).
    pub last_id: Option<i64>,
}

/// A batch would store a second answer for a key (its events twice): the writer's check under
/// the write order prevents this, so it is refused as a failure of the store, never stored.
pub(crate) fn answered_twice() -> StoreError {
    StoreError::refused("a batch would answer an idempotency key twice; refused")
}

/// SQLite's statements (`?` placeholders); Postgres's are in `postgres.rs`.
pub(crate) mod sqlite_sql {
    pub const PRUNE: &str = "DELETE FROM idempotency_keys WHERE expires_at < ?";
    /// Inserts the claim, or replaces a row that expired (not pruned yet).
    pub const INSERT_CLAIM: &str = "INSERT INTO idempotency_keys \
         (scope, key, fingerprint, expires_at, claim, claimed_until) VALUES (?, ?, ?, ?, ?, ?) \
         ON CONFLICT (scope, key) DO UPDATE SET fingerprint = excluded.fingerprint, \
         expires_at = excluded.expires_at, claim = excluded.claim, \
         claimed_until = excluded.claimed_until, answer = NULL, last_id = NULL \
         WHERE idempotency_keys.expires_at < ?";
    /// Takes over an unanswered claim that ran out (its holder died, or is slower than its
    /// claim: the writer still stores the key once).
    pub const TAKE_OVER: &str = "UPDATE idempotency_keys SET claim = ?, claimed_until = ? \
         WHERE scope = ? AND key = ? AND fingerprint = ? AND answer IS NULL AND claimed_until < ?";
    pub const READ: &str = "SELECT fingerprint, answer, last_id FROM idempotency_keys \
         WHERE scope = ? AND key = ? AND expires_at >= ?";
    pub const RELEASE: &str = "DELETE FROM idempotency_keys \
         WHERE scope = ? AND key = ? AND claim = ? AND answer IS NULL";
    pub const IS_ANSWERED: &str = "SELECT 1 FROM idempotency_keys \
         WHERE scope = ?1 AND key = ?2 AND answer IS NOT NULL AND expires_at >= ?3";
    /// Changes no row when the key is answered already (and not expired).
    pub const STORE_ANSWER: &str = "INSERT INTO idempotency_keys \
         (scope, key, fingerprint, expires_at, answer, last_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
         ON CONFLICT (scope, key) DO UPDATE SET fingerprint = excluded.fingerprint, \
         expires_at = excluded.expires_at, answer = excluded.answer, last_id = excluded.last_id, \
         claim = NULL, claimed_until = NULL \
         WHERE idempotency_keys.answer IS NULL OR idempotency_keys.expires_at < ?7";
}
