//! [`EventLog`]'s idempotency keys: claimed, answered, released and pruned, each call waiting
//! out a store outage like an append (`patiently`).

use super::*;

impl EventLog {
    /// Claims an idempotency key for one execution of its request (see [`idempotency`]):
    /// [`Claim::Taken`] when it is new, expired, or its holder's claim ran out.
    pub async fn claim_key(&self, claim: &KeyClaim) -> Result<Claim, StoreError> {
        // A keyed append claims its key before it reaches the writer: it waits for the
        // database as the writer would (a failover), rather than failing first.
        self.patiently(|| self.claim_key_once(claim)).await
    }

    async fn claim_key_once(&self, claim: &KeyClaim) -> Result<Claim, StoreError> {
        let backend = &self.inner.backend;
        // A row released or expired between two of these steps: claim again (a few times; then
        // the caller waits as for a held key, and asks again).
        for _ in 0..3 {
            if backend.insert_claim(claim).await? || backend.take_over_claim(claim).await? {
                return Ok(Claim::Taken);
            }
            if let Some(row) = backend.read_key(&claim.key, claim.now).await? {
                return Ok(match row.answer {
                    Some(answer) => Claim::Answered {
                        fingerprint: row.fingerprint,
                        answer,
                    },
                    None => Claim::Held {
                        fingerprint: row.fingerprint,
                    },
                });
            }
        }
        Ok(Claim::Held {
            fingerprint: claim.fingerprint.clone(),
        })
    }

    /// The key's answer, if it has one (not expired at `now`).
    pub async fn key_answer(
        &self,
        key: &IdempotencyKey,
        now: i64,
    ) -> Result<Option<String>, StoreError> {
        let row = self
            .patiently(|| self.inner.backend.read_key(key, now))
            .await?;
        Ok(row.and_then(|r| r.answer))
    }

    /// Gives up the claim `token` made on `key`, unless it is answered or was taken over: a
    /// request that stored nothing does not keep its key from being retried.
    pub async fn release_key(&self, key: &IdempotencyKey, token: &str) -> Result<(), StoreError> {
        self.patiently(|| self.inner.backend.release_claim(key, token))
            .await
    }

    /// Drops the idempotency keys that expired before `now`.
    pub async fn prune_keys(&self, now: i64) -> Result<(), StoreError> {
        self.inner.backend.prune_keys(now).await
    }
}
