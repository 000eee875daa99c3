//! Stream tickets: a browser's `EventSource` cannot send headers, so it opens a thread's stream
//! with `?ticket=`, a signed value (`super::signed_value`) bound to that thread and usable once
//! within its short lifetime. Used tickets are remembered until they expire: in this process,
//! and on Postgres in a table, so "once" holds across instances.

use std::time::Duration;
use threadstream_domain::ErrorCode;

use super::signed_value::{self, Signed, TICKET};
use super::signer::Rejected;
use super::{now_ms, unauthorized, Authenticator, Credential, Identity, Role};
use crate::error::ApiError;

/// How long a stream ticket can be used, unless configured otherwise.
pub const TICKET_TTL: Duration = Duration::from_secs(60);
/// Used tickets remembered at most (each is forgotten when it expires).
const MAX_USED_TICKETS: usize = 100_000;

/// Where the used tickets are remembered: this process's memory, and where instances share the
/// store (Postgres) the store too, which makes "used once" hold across them.
#[derive(Clone)]
pub enum TicketLedger {
    Memory,
    Shared(std::sync::Arc<dyn threadstream_store::UsedTickets>),
}

impl Authenticator {
    /// A ticket that opens `thread_id`'s stream once, within the ticket lifetime: `(ticket,
    /// expires at epoch ms)`.
    pub fn issue_ticket(&self, who: &Identity, thread_id: &str) -> Result<(String, i64), ApiError> {
        if matches!(who.role, Role::Ingest { .. }) {
            return Err(ApiError::Forbidden {
                code: ErrorCode::IngestOnly,
                message: "an ingest-only token cannot read streams".into(),
            });
        }
        let exp = now_ms() + self.inner.ticket_ttl.as_millis() as i64;
        let ticket = signed_value::seal(
            &self.inner.signer,
            &Signed {
                k: TICKET.into(),
                sub: who.user_id.clone(),
                role: who.role.name().into(),
                exp,
                tok: None,
                th: Some(thread_id.to_string()),
                id: Some(uuid::Uuid::new_v4().simple().to_string()),
            },
        );
        Ok((ticket, exp))
    }

    /// The identity of a stream ticket for `thread_id`'s stream, using it up.
    pub async fn redeem_ticket(&self, ticket: &str, thread_id: &str) -> Result<Identity, ApiError> {
        let now = now_ms();
        let t =
            signed_value::open(&self.inner.signer, ticket, TICKET, now).map_err(|e| match e {
                Rejected::Signature => {
                    unauthorized(ErrorCode::InvalidTicket, "the stream ticket is not valid")
                }
                Rejected::Expired => unauthorized(
                    ErrorCode::TicketExpired,
                    format!(
                        "the stream ticket has expired (they last {} s); ask for a new one",
                        self.inner.ticket_ttl.as_secs()
                    ),
                ),
            })?;
        if t.th.as_deref() != Some(thread_id) {
            return Err(unauthorized(
                ErrorCode::InvalidTicket,
                "the stream ticket was issued for another thread",
            ));
        }
        let role = Self::signed_role(&t.role).ok_or_else(|| {
            unauthorized(ErrorCode::InvalidTicket, "the stream ticket is not valid")
        })?;
        let id = t.id.unwrap_or_default();
        if !self.use_ticket(&id, t.exp, now).await? {
            return Err(unauthorized(
                ErrorCode::TicketUsed,
                "the stream ticket was already used; ask for a new one",
            ));
        }
        Ok(Identity {
            user_id: t.sub,
            role,
            credential: Credential::Ticket,
        })
    }

    /// Where used tickets are remembered (set once the store is open).
    pub fn set_ticket_ledger(&self, ledger: TicketLedger) {
        *self.inner.ledger.write().unwrap_or_else(|e| e.into_inner()) = ledger;
    }

    /// Marks ticket `id` used; `false` when it already was.
    async fn use_ticket(&self, id: &str, exp: i64, now: i64) -> Result<bool, ApiError> {
        {
            let mut used = self
                .inner
                .used_tickets
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if used.len() >= MAX_USED_TICKETS {
                used.retain(|_, e| *e > now);
            }
            if used.len() >= MAX_USED_TICKETS {
                // Fail closed rather than forget a ticket that could then be used again.
                return Err(ApiError::Unavailable(
                    "too many stream tickets in use; retry in a minute".into(),
                ));
            }
            if used.insert(id.to_string(), exp).is_some() {
                return Ok(false);
            }
        }
        let ledger = self
            .inner
            .ledger
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match ledger {
            TicketLedger::Memory => Ok(true),
            TicketLedger::Shared(used) => Ok(used.use_once(id, exp, now).await?),
        }
    }
}
