//! The `Subscriptions` aggregate: the command-side rules of Durable Streams subscriptions
//! (the protocol's reserved `/v1/stream/__ds/subscriptions/*` API), kept in the log stream
//! [`LOG_STREAM`] beside the streams they watch.
//!
//! A subscription links streams (named, or found by a glob when they get a message) and keeps,
//! per stream, the offset its consumer acknowledged. When a linked stream has messages past
//! that, a *wake* begins: a numbered generation with a lease of `lease_ttl_ms`. The consumer
//! acks under that generation (a stale one is fenced), ends the wake with `done`, or lets the
//! lease run out, after which the next wake may begin. Every one of these facts is an event, so
//! a restart (or another instance) knows what was acknowledged and which wake is current.
//!
//! Offsets are log ids, as a Durable Stream's are: a stream's tail is the id of its last message,
//! and a stream linked at some event is acked through that event's id (everything before it).
//! Tails come from the streams' own aggregates, so the commands that need them carry them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::aggregate::{AggregateCommand, StreamAggregate, StreamKind};
pub use crate::error::SubscriptionRefusal;
use crate::error::ThreadError;
use crate::event::subscription::*;
use crate::event::{AgentEvent, EventBody};

/// The log stream that holds every subscription (in the `stream:` namespace, where no stream's
/// path can be: those are request paths, starting with `/v1/stream/`). Defined with the other
/// kinds' ids, where [`StreamKind::of`] tells them apart.
pub use crate::aggregate::SUBSCRIPTIONS_LOG_STREAM as LOG_STREAM;

/// A wake's lease when the create names none, and the bounds a create may name.
pub const DEFAULT_LEASE_TTL_MS: u64 = 30_000;
pub const MIN_LEASE_TTL_MS: u64 = 1_000;
pub const MAX_LEASE_TTL_MS: u64 = 600_000;

/// A command on subscriptions, by the user `by` at `now_ms` (see [`SubscriptionsChange`]).
#[derive(Debug, Clone, PartialEq)]
pub enum SubscriptionCommand {
    Create {
        id: String,
        config: SubscriptionConfig,
        callback_base: String,
    },
    Delete {
        id: String,
    },
    /// Link streams: explicitly named (`explicit`), or found by the glob.
    Link {
        id: String,
        streams: Vec<String>,
        explicit: bool,
    },
    Unlink {
        id: String,
        stream: String,
    },
    /// Begin a wake if there is none live and a linked stream has pending messages.
    Wake {
        id: String,
        wake_id: String,
        tails: BTreeMap<String, i64>,
        stream: String,
    },
    /// A pull-wake worker claims the subscription's wake (begun now if none is live).
    Claim {
        id: String,
        worker: String,
        wake_id: String,
        tails: BTreeMap<String, i64>,
    },
    /// Acks under the wake `generation`/`wake_id`, through a webhook callback (`via` webhook)
    /// or a pull-wake worker's token.
    Ack {
        id: String,
        via: SubscriptionType,
        generation: u64,
        wake_id: String,
        acks: Vec<StreamAck>,
        done: bool,
        tails: BTreeMap<String, i64>,
    },
    Release {
        id: String,
        generation: u64,
        wake_id: String,
    },
}

impl Subscriptions {
    /// `id`, if it exists and is `by`'s (another user's subscription is not there for them).
    fn owned(&self, id: &str, by: &str) -> Result<&Subscription, SubscriptionRefusal> {
        match self.by_id.get(id) {
            Some(s) if s.owner == by => Ok(s),
            _ => Err(SubscriptionRefusal::NotFound),
        }
    }

    /// Decides the events a command by `by` at `now_ms` produces, or why none. Pure.
    pub fn decide(
        &self,
        command: &SubscriptionCommand,
        by: &str,
        now_ms: i64,
    ) -> Result<Vec<EventBody>, SubscriptionRefusal> {
        use SubscriptionCommand as C;
        match command {
            C::Create {
                id,
                config,
                callback_base,
            } => match self.by_id.get(id) {
                Some(s) if s.owner != by => Err(SubscriptionRefusal::NotFound),
                Some(s) if s.config == *config => Err(SubscriptionRefusal::Exists),
                Some(_) => Err(SubscriptionRefusal::ConfigMismatch),
                None => Ok(vec![EventBody::SubscriptionCreated(Box::new(
                    SubscriptionCreated {
                        id: id.clone(),
                        owner: by.to_string(),
                        config: config.clone(),
                        callback_base: callback_base.clone(),
                    },
                ))]),
            },
            C::Delete { id } => {
                self.owned(id, by)?;
                Ok(vec![EventBody::SubscriptionDeleted(SubscriptionRef {
                    id: id.clone(),
                })])
            }
            C::Link {
                id,
                streams,
                explicit,
            } => {
                let sub = self.owned(id, by)?;
                let new: Vec<String> = streams
                    .iter()
                    .filter(|p| {
                        sub.links
                            .get(*p)
                            .is_none_or(|l| if *explicit { !l.explicit } else { !l.glob })
                    })
                    .cloned()
                    .collect();
                if new.is_empty() {
                    return Ok(vec![]);
                }
                Ok(vec![EventBody::SubscriptionLinked(SubscriptionLinked {
                    id: id.clone(),
                    streams: new,
                    explicit: *explicit,
                })])
            }
            C::Unlink { id, stream } => {
                let sub = self.owned(id, by)?;
                if !sub.links.get(stream).is_some_and(|l| l.explicit) {
                    return Ok(vec![]);
                }
                Ok(vec![EventBody::SubscriptionUnlinked(
                    SubscriptionUnlinked {
                        id: id.clone(),
                        stream: stream.clone(),
                    },
                )])
            }
            C::Wake {
                id,
                wake_id,
                tails,
                stream,
            } => {
                let sub = self.owned(id, by)?;
                if sub.live_wake(now_ms).is_some() || !sub.has_pending(tails) {
                    return Err(SubscriptionRefusal::NothingToWake);
                }
                Ok(vec![woken(sub, id, wake_id, tails, stream)])
            }
            C::Claim {
                id,
                worker,
                wake_id,
                tails,
            } => {
                let sub = self.owned(id, by)?;
                if sub.config.kind != SubscriptionType::PullWake {
                    return Err(SubscriptionRefusal::WrongType("pull-wake"));
                }
                let mut events = vec![];
                let generation = match sub.live_wake(now_ms) {
                    Some(w) => {
                        if let Some(holder) = &w.holder {
                            return Err(SubscriptionRefusal::AlreadyClaimed {
                                holder: holder.clone(),
                                generation: w.generation,
                            });
                        }
                        w.generation
                    }
                    None => {
                        if !sub.has_pending(tails) {
                            return Err(SubscriptionRefusal::NoPendingWork);
                        }
                        let first = sub
                            .links
                            .iter()
                            .find(|(p, l)| tails.get(*p).is_some_and(|t| *t > l.acked))
                            .map(|(p, _)| p.clone())
                            .unwrap_or_default();
                        events.push(woken(sub, id, wake_id, tails, &first));
                        sub.generation + 1
                    }
                };
                events.push(EventBody::SubscriptionClaimed(SubscriptionClaimed {
                    id: id.clone(),
                    generation,
                    worker: worker.clone(),
                }));
                Ok(events)
            }
            C::Ack {
                id,
                via,
                generation,
                wake_id,
                acks,
                done,
                tails,
            } => {
                let sub = self.owned(id, by)?;
                if sub.config.kind != *via {
                    return Err(SubscriptionRefusal::WrongType(via.as_str()));
                }
                current_wake(sub, now_ms, *generation, wake_id)?;
                for ack in acks {
                    let Some(link) = sub.links.get(&ack.stream) else {
                        return Err(SubscriptionRefusal::InvalidOffset(
                            "ack names a stream the subscription does not link",
                        ));
                    };
                    if ack.offset <= 0 {
                        return Err(SubscriptionRefusal::InvalidOffset(
                            "ack offset must be a message's offset, not -1",
                        ));
                    }
                    if ack.offset < link.acked {
                        return Err(SubscriptionRefusal::InvalidOffset(
                            "ack offset is before the acked one",
                        ));
                    }
                    if ack.offset > tails.get(&ack.stream).copied().unwrap_or(0) {
                        return Err(SubscriptionRefusal::InvalidOffset(
                            "ack offset is beyond the stream's tail",
                        ));
                    }
                }
                Ok(vec![EventBody::SubscriptionAcked(SubscriptionAcked {
                    id: id.clone(),
                    generation: *generation,
                    acks: acks.clone(),
                    done: *done,
                })])
            }
            C::Release {
                id,
                generation,
                wake_id,
            } => {
                let sub = self.owned(id, by)?;
                if sub.config.kind != SubscriptionType::PullWake {
                    return Err(SubscriptionRefusal::WrongType("pull-wake"));
                }
                current_wake(sub, now_ms, *generation, wake_id)?;
                Ok(vec![EventBody::SubscriptionReleased(
                    SubscriptionReleased {
                        id: id.clone(),
                        generation: *generation,
                    },
                )])
            }
        }
    }

    /// Folds one stored event (its log id and timestamp) into the state. Never fails.
    pub fn apply(&mut self, id: i64, ts: i64, body: &EventBody) {
        match body {
            EventBody::SubscriptionCreated(c) => {
                let links = c
                    .config
                    .streams
                    .iter()
                    .map(|p| {
                        let link = Link {
                            explicit: true,
                            glob: false,
                            acked: id,
                        };
                        (p.clone(), link)
                    })
                    .collect();
                self.owners.insert(c.owner.clone());
                self.by_id.insert(
                    c.id.clone(),
                    Subscription {
                        owner: c.owner.clone(),
                        config: c.config.clone(),
                        callback_base: c.callback_base.clone(),
                        created_id: id,
                        created_ms: ts,
                        links,
                        generation: 0,
                        wake: None,
                    },
                );
            }
            EventBody::SubscriptionDeleted(d) => {
                self.by_id.remove(&d.id);
            }
            EventBody::SubscriptionsRestored(r) => *self = r.subscriptions.clone(),
            EventBody::SubscriptionLinked(l) => {
                let Some(sub) = self.by_id.get_mut(&l.id) else {
                    return;
                };
                // A glob finds a stream at its first message since the subscription began.
                let acked = if l.explicit { id } else { sub.created_id };
                for path in &l.streams {
                    let link = sub.links.entry(path.clone()).or_insert(Link {
                        explicit: false,
                        glob: false,
                        acked,
                    });
                    if l.explicit {
                        link.explicit = true;
                    } else {
                        link.glob = true;
                    }
                }
            }
            EventBody::SubscriptionUnlinked(u) => {
                let Some(sub) = self.by_id.get_mut(&u.id) else {
                    return;
                };
                if let Some(link) = sub.links.get_mut(&u.stream) {
                    link.explicit = false;
                    if !link.glob {
                        sub.links.remove(&u.stream);
                    }
                }
            }
            EventBody::SubscriptionWoken(w) => {
                let Some(sub) = self.by_id.get_mut(&w.id) else {
                    return;
                };
                sub.generation = w.generation;
                sub.wake = Some(Wake {
                    generation: w.generation,
                    wake_id: w.wake_id.clone(),
                    snapshot: w.snapshot.clone(),
                    holder: None,
                    lease_until_ms: lease_end(ts, sub.config.lease_ttl_ms),
                });
            }
            EventBody::SubscriptionClaimed(c) => {
                let Some(sub) = self.by_id.get_mut(&c.id) else {
                    return;
                };
                let ttl = sub.config.lease_ttl_ms;
                if let Some(wake) = sub.wake.as_mut() {
                    wake.holder = Some(c.worker.clone());
                    wake.lease_until_ms = lease_end(ts, ttl);
                }
            }
            EventBody::SubscriptionAcked(a) => {
                let Some(sub) = self.by_id.get_mut(&a.id) else {
                    return;
                };
                for ack in &a.acks {
                    if let Some(link) = sub.links.get_mut(&ack.stream) {
                        link.acked = link.acked.max(ack.offset);
                    }
                }
                if a.done {
                    sub.wake = None;
                } else if let Some(wake) = sub.wake.as_mut() {
                    wake.lease_until_ms = lease_end(ts, sub.config.lease_ttl_ms);
                }
            }
            EventBody::SubscriptionReleased(r) => {
                if let Some(sub) = self.by_id.get_mut(&r.id) {
                    sub.wake = None;
                }
            }
            _ => {}
        }
    }
}

fn lease_end(ts: i64, ttl_ms: u64) -> i64 {
    ts.saturating_add(i64::try_from(ttl_ms).unwrap_or(i64::MAX))
}

/// A new wake of `sub`: the next generation, a snapshot of the linked streams' tails.
fn woken(
    sub: &Subscription,
    id: &str,
    wake_id: &str,
    tails: &BTreeMap<String, i64>,
    stream: &str,
) -> EventBody {
    let snapshot = sub
        .links
        .keys()
        .map(|p| (p.clone(), tails.get(p).copied().unwrap_or(0)))
        .collect();
    EventBody::SubscriptionWoken(SubscriptionWoken {
        id: id.to_string(),
        generation: sub.generation + 1,
        wake_id: wake_id.to_string(),
        snapshot,
        stream: stream.to_string(),
    })
}

/// The live wake, if it is `generation`/`wake_id`; otherwise the caller's wake is over.
fn current_wake<'a>(
    sub: &'a Subscription,
    now_ms: i64,
    generation: u64,
    wake_id: &str,
) -> Result<&'a Wake, SubscriptionRefusal> {
    match sub.live_wake(now_ms) {
        Some(w) if w.generation == generation && w.wake_id == wake_id => Ok(w),
        _ => Err(SubscriptionRefusal::Fenced),
    }
}

mod glob;
mod log;
pub mod state;
pub use glob::{check_pattern, glob_match, normalize_path};
pub use log::{SubscriptionLog, SubscriptionsChange};
pub use state::{Link, Subscription, Subscriptions, Wake};

#[cfg(test)]
mod tests;
