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

use crate::error_code::ErrorCode;
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::aggregate::{AggregateCommand, StreamAggregate, StreamKind};
use crate::error::ThreadError;
use crate::event::subscription::*;
use crate::event::{AgentEvent, EventBody};

/// The log stream that holds every subscription (in the `stream:` namespace, where no stream's
/// path can be: those are request paths, starting with `/v1/stream/`).
pub const LOG_STREAM: &str = "stream:__ds/subscriptions";

/// A wake's lease when the create names none, and the bounds a create may name.
pub const DEFAULT_LEASE_TTL_MS: u64 = 30_000;
pub const MIN_LEASE_TTL_MS: u64 = 1_000;
pub const MAX_LEASE_TTL_MS: u64 = 600_000;

/// A stream path relative to `/v1/stream/`, without leading or trailing `/`.
pub fn normalize_path(path: &str) -> String {
    path.trim_matches('/').to_string()
}

/// Whether `path` matches the glob `pattern`: segments split on `/`, `*` matches exactly one
/// segment, `**` zero or more, anything else itself (the reference server's rules).
pub fn glob_match(pattern: &str, path: &str) -> bool {
    let split = |s: &str| -> Vec<String> {
        s.split('/')
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect()
    };
    fn matches(p: &[String], s: &[String]) -> bool {
        match p.split_first() {
            None => s.is_empty(),
            Some((seg, rest)) if seg == "**" => (0..=s.len()).any(|i| matches(rest, &s[i..])),
            Some((seg, rest)) => match s.split_first() {
                Some((first, s_rest)) => (seg == "*" || seg == first) && matches(rest, s_rest),
                None => false,
            },
        }
    }
    matches(&split(pattern), &split(path))
}

/// Why a pattern is not a glob we take: empty segments are fine (dropped), but `*` or `**`
/// inside a segment would silently match nothing.
pub fn check_pattern(pattern: &str) -> Result<(), String> {
    if pattern.trim_matches('/').is_empty() {
        return Err("pattern must name at least one segment".into());
    }
    for seg in pattern.split('/') {
        if seg.contains('*') && seg != "*" && seg != "**" {
            return Err(format!(
                "pattern segment '{seg}': '*' and '**' must be whole segments"
            ));
        }
    }
    Ok(())
}

/// One linked stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// Named by the create or `POST …/streams`.
    pub explicit: bool,
    /// Matched by the subscription's glob.
    pub glob: bool,
    /// The offset (log id) the consumer acknowledged through.
    pub acked: i64,
}

/// The current wake.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wake {
    pub generation: u64,
    pub wake_id: String,
    /// Each linked stream's tail when the wake began.
    pub snapshot: BTreeMap<String, i64>,
    /// The pull-wake worker holding it.
    pub holder: Option<String>,
    /// Epoch ms: the lease ends then unless an ack or claim renews it.
    pub lease_until_ms: i64,
}

/// One subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscription {
    pub owner: String,
    pub config: SubscriptionConfig,
    /// Where its consumers call back (see `SubscriptionCreated::callback_base`).
    pub callback_base: String,
    /// The id and time of its `subscription-created`.
    pub created_id: i64,
    pub created_ms: i64,
    pub links: BTreeMap<String, Link>,
    /// The generation of the last wake (0: none yet).
    pub generation: u64,
    /// The wake that was last begun and not ended (its lease may have run out: see
    /// [`Subscription::live_wake`]).
    pub wake: Option<Wake>,
}

impl Subscription {
    /// The current wake, unless its lease ran out by `now_ms`.
    pub fn live_wake(&self, now_ms: i64) -> Option<&Wake> {
        self.wake.as_ref().filter(|w| now_ms < w.lease_until_ms)
    }

    /// Whether a linked stream has messages after its acked offset (`tails`: the streams'
    /// tails; a stream missing there has none).
    pub fn has_pending(&self, tails: &BTreeMap<String, i64>) -> bool {
        self.links
            .iter()
            .any(|(path, link)| tails.get(path).is_some_and(|t| *t > link.acked))
    }

    /// Whether the glob of this subscription matches `path` (relative).
    pub fn glob_matches(&self, path: &str) -> bool {
        self.config
            .pattern
            .as_deref()
            .is_some_and(|p| glob_match(p, path))
    }
}

/// The aggregate: every subscription, by id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscriptions {
    pub by_id: BTreeMap<String, Subscription>,
    /// Every user who created a subscription here, deleted ones included: whose records the
    /// stream holds (what an erasure of a user asks).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub owners: BTreeSet<String>,
}

impl Subscriptions {
    /// The state without `user`'s subscriptions: what a `subscriptions-restored` starts the
    /// stream again from when `user` is erased. Everyone else's are kept as they are (links,
    /// acked offsets, generations, wakes).
    pub fn without_user(&self, user: &str) -> Subscriptions {
        let by_id: BTreeMap<String, Subscription> = self
            .by_id
            .iter()
            .filter(|(_, s)| s.owner != user)
            .map(|(id, s)| (id.clone(), s.clone()))
            .collect();
        let owners = by_id.values().map(|s| s.owner.clone()).collect();
        Subscriptions { by_id, owners }
    }
}

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

/// Why a subscription command stored nothing. `Exists` and `NothingToWake` are answers, not
/// failures.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SubscriptionRefusal {
    #[error("subscription not found")]
    NotFound,
    #[error("subscription already exists with this configuration")]
    Exists,
    #[error("subscription already exists with a different configuration")]
    ConfigMismatch,
    #[error("subscription is not {0}")]
    WrongType(&'static str),
    #[error("nothing to wake: a wake is live or no linked stream has pending messages")]
    NothingToWake,
    #[error("the wake is already claimed by '{holder}'")]
    AlreadyClaimed { holder: String, generation: u64 },
    #[error("subscription has no pending work")]
    NoPendingWork,
    #[error("wake generation is stale")]
    Fenced,
    #[error("{0}")]
    InvalidOffset(&'static str),
}

impl SubscriptionRefusal {
    /// The protocol's error code.
    pub fn code(&self) -> ErrorCode {
        match self {
            SubscriptionRefusal::NotFound => ErrorCode::NotFound,
            SubscriptionRefusal::Exists => ErrorCode::DsSubscriptionExists,
            SubscriptionRefusal::ConfigMismatch => ErrorCode::DsSubscriptionAlreadyExists,
            SubscriptionRefusal::WrongType(_) => ErrorCode::DsInvalidRequest,
            SubscriptionRefusal::NothingToWake => ErrorCode::DsNothingToWake,
            SubscriptionRefusal::AlreadyClaimed { .. } => ErrorCode::DsAlreadyClaimed,
            SubscriptionRefusal::NoPendingWork => ErrorCode::DsNoPendingWork,
            SubscriptionRefusal::Fenced => ErrorCode::DsFenced,
            SubscriptionRefusal::InvalidOffset(_) => ErrorCode::DsInvalidOffset,
        }
    }
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

/// The subscriptions' log stream's aggregate: every subscription, and how many events were
/// folded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SubscriptionLog {
    pub subscriptions: Subscriptions,
    pub version: u64,
}

/// A change to the subscriptions' log stream.
#[derive(Debug, Clone, PartialEq)]
pub enum SubscriptionsChange {
    /// A command by the user `by`, decided at the request's wall clock (wakes' leases end by it).
    Command {
        command: SubscriptionCommand,
        by: String,
        now_ms: i64,
    },
    /// Begin the stream anew from this state (`subscriptions-restored`): only the log's writer
    /// asks this, in the transaction of a user's erasure that removed the stream's events.
    Restore(Subscriptions),
}

impl AggregateCommand for SubscriptionsChange {
    type Aggregate = SubscriptionLog;
}

impl StreamAggregate for SubscriptionLog {
    type Command = SubscriptionsChange;
    const KIND: StreamKind = StreamKind::Subscriptions;

    fn decide(&self, change: &SubscriptionsChange) -> Result<Vec<AgentEvent>, ThreadError> {
        match change {
            SubscriptionsChange::Command {
                command,
                by,
                now_ms,
            } => Ok(self
                .subscriptions
                .decide(command, by, *now_ms)?
                .into_iter()
                .map(|body| AgentEvent::new("", "", body).with_user(by.clone()))
                .collect()),
            SubscriptionsChange::Restore(subscriptions) => {
                if self.version != 0 {
                    return Err(ThreadError::Invalid(
                        "subscriptions are restored on an empty stream only".into(),
                    ));
                }
                Ok(vec![AgentEvent::new(
                    "",
                    "",
                    EventBody::SubscriptionsRestored(Box::new(SubscriptionsRestored {
                        subscriptions: subscriptions.clone(),
                    })),
                )])
            }
        }
    }

    fn apply_at(&mut self, id: i64, e: &AgentEvent) {
        self.version += 1;
        self.subscriptions.apply(id, e.ts.unwrap_or(0), &e.body);
    }

    fn version(&self) -> u64 {
        self.version
    }

    /// Decided at the event's time. The streams' tails a wake or an ack was decided on are not
    /// in the log: a wake is checked against its snapshot, an ack against its own offsets (it
    /// was admitted, so they were within the tails). The request's clock is not in the log
    /// either, and an event is stamped when committed, a little after it: a claim, ack or
    /// release on a live wake is checked as if made within the wake's lease (it was admitted,
    /// so it was).
    fn command_for(&self, e: &AgentEvent) -> SubscriptionsChange {
        use SubscriptionCommand as C;
        let subs = &self.subscriptions;
        let wake_id_of = |id: &str| {
            subs.by_id
                .get(id)
                .and_then(|s| s.wake.as_ref())
                .map(|w| w.wake_id.clone())
                .unwrap_or_default()
        };
        let command = match &e.body {
            EventBody::SubscriptionsRestored(p) => {
                return SubscriptionsChange::Restore(p.subscriptions.clone())
            }
            EventBody::SubscriptionCreated(c) => C::Create {
                id: c.id.clone(),
                config: c.config.clone(),
                callback_base: c.callback_base.clone(),
            },
            EventBody::SubscriptionLinked(l) => C::Link {
                id: l.id.clone(),
                streams: l.streams.clone(),
                explicit: l.explicit,
            },
            EventBody::SubscriptionUnlinked(u) => C::Unlink {
                id: u.id.clone(),
                stream: u.stream.clone(),
            },
            EventBody::SubscriptionWoken(w) => C::Wake {
                id: w.id.clone(),
                wake_id: w.wake_id.clone(),
                tails: w.snapshot.clone(),
                stream: w.stream.clone(),
            },
            EventBody::SubscriptionClaimed(c) => C::Claim {
                id: c.id.clone(),
                worker: c.worker.clone(),
                wake_id: String::new(),
                tails: Default::default(),
            },
            EventBody::SubscriptionAcked(a) => C::Ack {
                id: a.id.clone(),
                via: subs
                    .by_id
                    .get(&a.id)
                    .map_or(SubscriptionType::Webhook, |s| s.config.kind),
                generation: a.generation,
                wake_id: wake_id_of(&a.id),
                acks: a.acks.clone(),
                done: a.done,
                tails: a
                    .acks
                    .iter()
                    .map(|k| (k.stream.clone(), k.offset))
                    .collect(),
            },
            EventBody::SubscriptionReleased(r) => C::Release {
                id: r.id.clone(),
                generation: r.generation,
                wake_id: wake_id_of(&r.id),
            },
            EventBody::SubscriptionDeleted(d) => C::Delete { id: d.id.clone() },
            // An event of another kind of stream: compared with what a delete of no
            // subscription decides (nothing), and refused.
            _ => C::Delete { id: String::new() },
        };
        let mut now_ms = e.ts.unwrap_or(0);
        if let C::Claim { id, .. } | C::Ack { id, .. } | C::Release { id, .. } = &command {
            if let Some(w) = subs.by_id.get(id).and_then(|s| s.wake.as_ref()) {
                now_ms = now_ms.min(w.lease_until_ms - 1);
            }
        }
        SubscriptionsChange::Command {
            command,
            by: e.user_id.clone().unwrap_or_default(),
            now_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(kind: SubscriptionType) -> SubscriptionConfig {
        SubscriptionConfig {
            kind,
            pattern: Some("events/*".into()),
            streams: vec![],
            webhook_url: Some("http://127.0.0.1:1/hook".into()),
            wake_stream: None,
            lease_ttl_ms: 1_000,
            description: None,
        }
    }

    /// Decides and applies `c` at `now`, the next events numbered after `*last`.
    fn run(
        s: &mut Subscriptions,
        last: &mut i64,
        now: i64,
        c: &SubscriptionCommand,
    ) -> Result<Vec<EventBody>, SubscriptionRefusal> {
        let events = s.decide(c, "u", now)?;
        for e in &events {
            *last += 1;
            s.apply(*last, now, e);
        }
        Ok(events)
    }

    fn tails(path: &str, tail: i64) -> BTreeMap<String, i64> {
        BTreeMap::from([(path.to_string(), tail)])
    }

    #[test]
    fn globs_match_segments() {
        assert!(glob_match("events/*", "events/a"));
        assert!(!glob_match("events/*", "events/a/b"));
        assert!(!glob_match("events/*", "events"));
        assert!(glob_match("events/**", "events"));
        assert!(glob_match("events/**", "events/a/b"));
        assert!(glob_match("**/b", "x/y/b"));
        assert!(!glob_match("other/*", "events/a"));
        assert!(check_pattern("events/*").is_ok());
        assert!(check_pattern("events/a*").is_err());
        assert!(check_pattern("/").is_err());
    }

    #[test]
    fn create_is_idempotent_and_another_users_id_is_not_there() {
        let (mut s, mut last) = (Subscriptions::default(), 0);
        let create = SubscriptionCommand::Create {
            id: "s".into(),
            config: config(SubscriptionType::Webhook),
            callback_base: "http://127.0.0.1:1".into(),
        };
        run(&mut s, &mut last, 0, &create).unwrap();
        assert_eq!(s.decide(&create, "u", 0), Err(SubscriptionRefusal::Exists));
        assert_eq!(
            s.decide(&create, "other", 0),
            Err(SubscriptionRefusal::NotFound)
        );
        let mut changed = config(SubscriptionType::Webhook);
        changed.lease_ttl_ms = 2_000;
        assert_eq!(
            s.decide(
                &SubscriptionCommand::Create {
                    id: "s".into(),
                    config: changed,
                    callback_base: "http://127.0.0.1:1".into(),
                },
                "u",
                0
            ),
            Err(SubscriptionRefusal::ConfigMismatch)
        );
    }

    /// A wake begins on pending messages, acks move the cursor, `done` ends it and fences its
    /// generation; a lease that runs out lets the next wake begin.
    #[test]
    fn wakes_ack_fence_and_expire() {
        let (mut s, mut last) = (Subscriptions::default(), 10);
        let id = "s".to_string();
        run(
            &mut s,
            &mut last,
            0,
            &SubscriptionCommand::Create {
                id: id.clone(),
                config: config(SubscriptionType::Webhook),
                callback_base: String::new(),
            },
        )
        .unwrap();
        let link = SubscriptionCommand::Link {
            id: id.clone(),
            streams: vec!["events/a".into()],
            explicit: false,
        };
        run(&mut s, &mut last, 0, &link).unwrap();
        assert_eq!(s.by_id[&id].links["events/a"].acked, 11, "from creation");
        assert!(run(&mut s, &mut last, 0, &link).unwrap().is_empty());
        let wake = |w: &str, tail| SubscriptionCommand::Wake {
            id: id.clone(),
            wake_id: w.into(),
            tails: tails("events/a", tail),
            stream: "events/a".into(),
        };
        assert_eq!(
            s.decide(&wake("w0", 11), "u", 0),
            Err(SubscriptionRefusal::NothingToWake)
        );
        run(&mut s, &mut last, 0, &wake("w1", 20)).unwrap();
        assert_eq!(
            s.decide(&wake("w2", 20), "u", 500),
            Err(SubscriptionRefusal::NothingToWake),
            "a wake is live"
        );
        let ack = |generation, offset, done| SubscriptionCommand::Ack {
            id: id.clone(),
            via: SubscriptionType::Webhook,
            generation,
            wake_id: "w1".into(),
            acks: vec![StreamAck {
                stream: "events/a".into(),
                offset,
            }],
            done,
            tails: tails("events/a", 20),
        };
        assert!(matches!(
            s.decide(&ack(1, 21, false), "u", 10),
            Err(SubscriptionRefusal::InvalidOffset(_))
        ));
        assert_eq!(
            s.decide(&ack(2, 20, true), "u", 10),
            Err(SubscriptionRefusal::Fenced)
        );
        run(&mut s, &mut last, 10, &ack(1, 20, true)).unwrap();
        assert_eq!(s.by_id[&id].links["events/a"].acked, 20);
        assert_eq!(
            s.decide(&ack(1, 20, true), "u", 20),
            Err(SubscriptionRefusal::Fenced),
            "a finished wake is fenced"
        );
        // A new message: generation 2, whose lease runs out unacked; generation 3 follows.
        run(&mut s, &mut last, 100, &wake("w2", 30)).unwrap();
        assert_eq!(s.by_id[&id].generation, 2);
        assert_eq!(
            s.decide(&wake("w3", 30), "u", 1_099),
            Err(SubscriptionRefusal::NothingToWake)
        );
        run(&mut s, &mut last, 1_100, &wake("w3", 30)).unwrap();
        assert_eq!(s.by_id[&id].generation, 3);
    }

    #[test]
    fn pull_wake_claims_are_exclusive_until_released() {
        let (mut s, mut last) = (Subscriptions::default(), 0);
        let id = "p".to_string();
        let mut cfg = config(SubscriptionType::PullWake);
        cfg.streams = vec!["events/a".into()];
        cfg.webhook_url = None;
        cfg.wake_stream = Some("wake/pool".into());
        run(
            &mut s,
            &mut last,
            0,
            &SubscriptionCommand::Create {
                id: id.clone(),
                config: cfg,
                callback_base: String::new(),
            },
        )
        .unwrap();
        let claim = |worker: &str, tail| SubscriptionCommand::Claim {
            id: id.clone(),
            worker: worker.into(),
            wake_id: "w1".into(),
            tails: tails("events/a", tail),
        };
        assert_eq!(
            s.decide(&claim("a", 1), "u", 0),
            Err(SubscriptionRefusal::NoPendingWork)
        );
        let events = run(&mut s, &mut last, 0, &claim("a", 5)).unwrap();
        assert_eq!(events.len(), 2, "woken and claimed");
        assert_eq!(
            s.decide(&claim("b", 5), "u", 10),
            Err(SubscriptionRefusal::AlreadyClaimed {
                holder: "a".into(),
                generation: 1
            })
        );
        let release = SubscriptionCommand::Release {
            id: id.clone(),
            generation: 1,
            wake_id: "w1".into(),
        };
        run(&mut s, &mut last, 10, &release).unwrap();
        assert_eq!(
            s.decide(&release, "u", 10),
            Err(SubscriptionRefusal::Fenced)
        );
        let events = run(&mut s, &mut last, 20, &claim("b", 5)).unwrap();
        assert_eq!(events.len(), 2, "a new wake for the pending messages");
        assert_eq!(s.by_id[&id].generation, 2);
    }
}
