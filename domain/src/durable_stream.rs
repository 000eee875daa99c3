//! The `DurableStream` aggregate: the command-side rules of one Durable Stream
//! (<https://github.com/durable-streams/durable-streams>), kept in the log under
//! `stream:<path>` beside threads and workflows.
//!
//! A stream has lives: `stream-created` begins one, deletion or expiry ends it, and the next
//! create begins another. Its messages are the `stream-created` (when the create had a body) and
//! `stream-appended` events of the current life; a message's offset is its event's log id, so
//! offsets sort, resume exactly, and say where a fork reads through its source.
//!
//! Everything the protocol needs to answer a retry the same way (producers' epochs and last
//! sequence numbers, `Stream-Seq`, who closed the stream) is folded from the events: nothing
//! lives only in a process's memory.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::aggregate::{AggregateCommand, StreamAggregate, StreamKind};
pub use crate::error::StreamRefusal;
use crate::error::ThreadError;
use crate::event::durable_stream::*;
use crate::event::{AgentEvent, Empty, EventBody};

/// Log stream ids of Durable Streams start with this; the rest is the stream's path. (Defined with
/// the other kinds' ids, where [`StreamKind::of`] tells them apart.)
pub use crate::aggregate::DURABLE_STREAM_PREFIX as STREAM_PREFIX;

/// The log stream that holds the Durable Stream at `path`.
pub fn log_stream_id(path: &str) -> String {
    format!("{STREAM_PREFIX}{path}")
}

/// The Durable Stream path of a log stream id, when it is one.
pub fn stream_path(log_stream_id: &str) -> Option<&str> {
    log_stream_id.strip_prefix(STREAM_PREFIX)
}

/// An offset as the protocol shows it: `<log id>_<0>`, each part 16 digits, so offsets of one
/// log sort as strings in the order of their ids. `0` is before every message.
pub fn format_offset(id: i64) -> String {
    format!("{id:016}_{:016}", 0)
}

/// Parses an offset a client sent: `-1` (the start) or `<digits>_<digits>`. The first part is
/// the log id; the second is accepted and ignored (the offsets we hand out carry 0 there).
pub fn parse_offset(s: &str) -> Option<i64> {
    if s == "-1" {
        return Some(0);
    }
    let (id, sub) = s.split_once('_')?;
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    if !digits(id) || !digits(sub) {
        return None;
    }
    id.parse().ok()
}

/// The content type as compared: the media type without parameters, lower case.
pub fn normalize_content_type(ct: &str) -> String {
    ct.split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// Whether a stream of this content type is JSON-mode.
pub fn is_json(content_type: &str) -> bool {
    normalize_content_type(content_type) == "application/json"
}

/// A producer's last accepted write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerState {
    pub epoch: u64,
    pub last_seq: u64,
}

/// One life of a stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamLife {
    pub owner: String,
    pub content_type: String,
    pub ttl_seconds: Option<u64>,
    pub expires_at: Option<String>,
    pub expires_at_ms: Option<i64>,
    /// The id of the `stream-created` event that began this life.
    pub created_id: i64,
    /// The id of the last message (data-bearing event) of this life.
    pub last_message_id: Option<i64>,
    /// When the stream was last written (epoch ms): the start of its TTL window, with reads.
    pub last_write_ms: i64,
    pub closed: bool,
    pub closed_by: Option<ProducerStamp>,
    /// The last `Stream-Seq` accepted.
    pub seq: Option<String>,
    pub producers: BTreeMap<String, ProducerState>,
    pub fork: Option<ForkOf>,
    /// Forks that read through this life's data.
    pub live_forks: BTreeSet<String>,
    /// Deleted while forks still read through it: gone for its own clients (410), kept for
    /// theirs until the last fork is released.
    pub soft_deleted: bool,
}

impl StreamLife {
    /// The offset after every message of this life: its last message's, else where it began
    /// (a fork: its fork offset; otherwise before everything).
    pub fn current_offset(&self) -> i64 {
        self.last_message_id
            .unwrap_or_else(|| self.fork.as_ref().map_or(0, |f| f.offset))
    }

    /// Whether the stream has expired at `now_ms`, its TTL window counted from the later of its
    /// last write and `last_read_ms` (reads this process served).
    pub fn expired(&self, now_ms: i64, last_read_ms: i64) -> bool {
        if self.expires_at_ms.is_some_and(|at| now_ms >= at) {
            return true;
        }
        match self.ttl_seconds {
            Some(ttl) => {
                let since = self.last_write_ms.max(last_read_ms);
                now_ms >= since.saturating_add((ttl as i64).saturating_mul(1000))
            }
            None => false,
        }
    }
}

/// The aggregate: the current life, if the stream has one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DurableStream {
    pub life: Option<StreamLife>,
    /// Events folded (every life's).
    #[serde(skip)]
    pub version: u64,
}

/// What a create asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateSpec {
    pub owner: String,
    pub content_type: String,
    pub ttl_seconds: Option<u64>,
    pub expires_at: Option<String>,
    pub expires_at_ms: Option<i64>,
    pub closed: bool,
    pub data: Option<StreamData>,
    pub fork: Option<ForkOf>,
}

/// A command on a Durable Stream. `now_ms` is the wall clock of the request; `last_read_ms` the
/// last read this process served (TTL windows slide on reads too).
#[derive(Debug, Clone, PartialEq)]
pub enum StreamCommand {
    Create(Box<CreateSpec>),
    Append {
        data: StreamData,
        content_type: String,
        seq: Option<String>,
        producer: Option<ProducerStamp>,
        close: bool,
    },
    Close {
        producer: Option<ProducerStamp>,
    },
    Delete,
    /// On the source, in the same append as the fork's create: `fork` reads through this life
    /// (which must be `created_id`) up to `offset`.
    AddFork {
        fork: String,
        created_id: i64,
        offset: i64,
    },
    /// On the source: `fork` no longer reads through it.
    ReleaseFork {
        fork: String,
    },
}

impl DurableStream {
    /// The current life, unless it has expired (`now_ms`, `last_read_ms`: see
    /// [`StreamLife::expired`]) or was deleted.
    pub fn live(&self, now_ms: i64, last_read_ms: i64) -> Option<&StreamLife> {
        self.life
            .as_ref()
            .filter(|l| !l.expired(now_ms, last_read_ms) || !l.live_forks.is_empty())
    }

    /// The current life for a command that needs a stream clients can use: not expired, not
    /// soft-deleted.
    fn usable(&self, now_ms: i64, last_read_ms: i64) -> Result<&StreamLife, StreamRefusal> {
        let life = self
            .live(now_ms, last_read_ms)
            .ok_or(StreamRefusal::NotFound)?;
        if life.soft_deleted || life.expired(now_ms, last_read_ms) {
            // Expired with forks reading through it: as good as deleted, kept for them.
            return Err(StreamRefusal::Gone);
        }
        Ok(life)
    }

    /// [`DurableStream::usable`] for a write by `by`: another user's stream is not there for
    /// them (as another user's thread).
    fn writable(
        &self,
        by: &str,
        now_ms: i64,
        last_read_ms: i64,
    ) -> Result<&StreamLife, StreamRefusal> {
        match self.live(now_ms, last_read_ms) {
            Some(life) if life.owner != by => Err(StreamRefusal::NotFound),
            _ => self.usable(now_ms, last_read_ms),
        }
    }

    /// Decides the events a command by the user `by` produces, or why it produces none. Pure.
    pub fn decide(
        &self,
        command: &StreamCommand,
        by: &str,
        now_ms: i64,
        last_read_ms: i64,
    ) -> Result<Vec<EventBody>, StreamRefusal> {
        match command {
            StreamCommand::Create(spec) => self.decide_create(spec, now_ms, last_read_ms),
            StreamCommand::Append {
                data,
                content_type,
                seq,
                producer,
                close,
            } => {
                let life = self.writable(by, now_ms, last_read_ms)?;
                if life.closed {
                    return Err(closed_refusal(life, producer.as_ref()));
                }
                if normalize_content_type(content_type)
                    != normalize_content_type(&life.content_type)
                {
                    return Err(StreamRefusal::ContentTypeMismatch {
                        expected: life.content_type.clone(),
                        got: content_type.clone(),
                    });
                }
                if let Some(p) = producer {
                    check_producer(life, p)?;
                }
                if let (Some(got), Some(last)) = (seq, &life.seq) {
                    if got <= last {
                        return Err(StreamRefusal::SeqConflict {
                            last: last.clone(),
                            got: got.clone(),
                        });
                    }
                }
                Ok(vec![EventBody::StreamAppended(StreamAppended {
                    data: data.clone(),
                    seq: seq.clone(),
                    producer: producer.clone(),
                    close: *close,
                })])
            }
            StreamCommand::Close { producer } => {
                let life = self.writable(by, now_ms, last_read_ms)?;
                if life.closed {
                    return Err(match producer {
                        Some(p) => closed_refusal(life, Some(p)),
                        None => StreamRefusal::AlreadyClosed {
                            offset: life.current_offset(),
                        },
                    });
                }
                if let Some(p) = producer {
                    check_producer(life, p)?;
                }
                Ok(vec![EventBody::StreamClosed(StreamClosed {
                    producer: producer.clone(),
                })])
            }
            StreamCommand::Delete => {
                let life = self
                    .live(now_ms, last_read_ms)
                    .ok_or(StreamRefusal::NotFound)?;
                if life.soft_deleted {
                    return Err(StreamRefusal::Gone);
                }
                Ok(vec![EventBody::StreamDeleted(Empty {})])
            }
            StreamCommand::AddFork {
                fork,
                created_id,
                offset,
            } => {
                let life = self.usable(now_ms, last_read_ms)?;
                if life.created_id != *created_id {
                    return Err(StreamRefusal::NotFound);
                }
                if *offset > life.current_offset() {
                    return Err(StreamRefusal::ForkOffsetBeyond);
                }
                Ok(vec![EventBody::StreamForkAdded(StreamForkAdded {
                    fork: fork.clone(),
                    created_id: *created_id,
                    offset: *offset,
                })])
            }
            StreamCommand::ReleaseFork { fork } => match &self.life {
                Some(life) if life.live_forks.contains(fork) => {
                    Ok(vec![EventBody::StreamForkReleased(StreamForkRef {
                        fork: fork.clone(),
                    })])
                }
                _ => Ok(vec![]),
            },
        }
    }

    fn decide_create(
        &self,
        spec: &CreateSpec,
        now_ms: i64,
        last_read_ms: i64,
    ) -> Result<Vec<EventBody>, StreamRefusal> {
        if let Some(life) = self.live(now_ms, last_read_ms) {
            if life.owner != spec.owner {
                // Another user's stream is not there for them (as another user's thread).
                return Err(StreamRefusal::NotFound);
            }
            if life.soft_deleted || life.expired(now_ms, last_read_ms) {
                return Err(StreamRefusal::Gone);
            }
            let same_fork = match (&spec.fork, &life.fork) {
                (None, None) => true,
                (Some(a), Some(b)) => a.source == b.source && a.sub_offset == b.sub_offset,
                _ => false,
            };
            let same = normalize_content_type(&spec.content_type)
                == normalize_content_type(&life.content_type)
                && spec.ttl_seconds == life.ttl_seconds
                && spec.expires_at == life.expires_at
                && spec.closed == life.closed
                && same_fork;
            return Err(if same {
                StreamRefusal::Exists {
                    offset: life.current_offset(),
                    closed: life.closed,
                }
            } else {
                StreamRefusal::ConfigMismatch
            });
        }
        Ok(vec![EventBody::StreamCreated(Box::new(StreamCreated {
            owner: spec.owner.clone(),
            content_type: spec.content_type.clone(),
            ttl_seconds: spec.ttl_seconds,
            expires_at: spec.expires_at.clone(),
            expires_at_ms: spec.expires_at_ms,
            closed: spec.closed,
            data: spec.data.clone(),
            fork: spec.fork.clone(),
        }))])
    }

    /// Folds one stored event (its log id and timestamp) into the state. Never fails.
    pub fn apply(&mut self, id: i64, ts: i64, body: &EventBody) {
        match body {
            EventBody::StreamCreated(c) => {
                self.life = Some(StreamLife {
                    owner: c.owner.clone(),
                    content_type: c.content_type.clone(),
                    ttl_seconds: c.ttl_seconds,
                    expires_at: c.expires_at.clone(),
                    expires_at_ms: c.expires_at_ms,
                    created_id: id,
                    last_message_id: c.data.as_ref().map(|_| id),
                    last_write_ms: ts,
                    closed: c.closed,
                    closed_by: None,
                    seq: None,
                    producers: BTreeMap::new(),
                    fork: c.fork.clone(),
                    live_forks: BTreeSet::new(),
                    soft_deleted: false,
                });
            }
            EventBody::StreamAppended(a) => {
                let Some(life) = self.life.as_mut() else {
                    return;
                };
                life.last_message_id = Some(id);
                life.last_write_ms = ts;
                if let Some(seq) = &a.seq {
                    life.seq = Some(seq.clone());
                }
                if let Some(p) = &a.producer {
                    life.producers.insert(
                        p.id.clone(),
                        ProducerState {
                            epoch: p.epoch,
                            last_seq: p.seq,
                        },
                    );
                }
                if a.close {
                    life.closed = true;
                    life.closed_by = a.producer.clone();
                }
            }
            EventBody::StreamClosed(c) => {
                let Some(life) = self.life.as_mut() else {
                    return;
                };
                life.closed = true;
                life.last_write_ms = ts;
                if let Some(p) = &c.producer {
                    life.producers.insert(
                        p.id.clone(),
                        ProducerState {
                            epoch: p.epoch,
                            last_seq: p.seq,
                        },
                    );
                }
                life.closed_by = c.producer.clone();
            }
            EventBody::StreamDeleted(_) => {
                if let Some(life) = self.life.as_mut() {
                    if life.live_forks.is_empty() {
                        self.life = None;
                    } else {
                        life.soft_deleted = true;
                    }
                }
            }
            EventBody::StreamForkAdded(f) => {
                if let Some(life) = self.life.as_mut() {
                    life.live_forks.insert(f.fork.clone());
                }
            }
            EventBody::StreamForkReleased(f) => {
                if let Some(life) = self.life.as_mut() {
                    life.live_forks.remove(&f.fork);
                    if life.live_forks.is_empty() && life.soft_deleted {
                        self.life = None;
                    }
                }
            }
            _ => {}
        }
    }
}

/// A change to a Durable Stream: a [`StreamCommand`] by the user `by`, at the request's wall
/// clock, with the last read this process served (a stream's TTL window slides on both).
#[derive(Debug, Clone, PartialEq)]
pub struct StreamChange {
    pub command: StreamCommand,
    pub by: String,
    pub now_ms: i64,
    pub last_read_ms: i64,
}

impl AggregateCommand for StreamChange {
    type Aggregate = DurableStream;

    /// An append that leaves the stream open (a producer's values).
    fn is_fragment(&self) -> bool {
        matches!(self.command, StreamCommand::Append { close: false, .. })
    }
}

impl StreamAggregate for DurableStream {
    type Command = StreamChange;
    const KIND: StreamKind = StreamKind::DurableStream;

    fn decide(&self, change: &StreamChange) -> Result<Vec<AgentEvent>, ThreadError> {
        Ok(DurableStream::decide(
            self,
            &change.command,
            &change.by,
            change.now_ms,
            change.last_read_ms,
        )?
        .into_iter()
        .map(|body| AgentEvent::new("", "", body).with_user(change.by.clone()))
        .collect())
    }

    fn apply_at(&mut self, id: i64, e: &AgentEvent) {
        self.version += 1;
        self.apply(id, e.ts.unwrap_or(0), &e.body);
    }

    fn version(&self) -> u64 {
        self.version
    }

    /// Decided at the event's time. Reads that slid a TTL window are not in the log: an append
    /// is checked as if read just then (it was admitted, so the stream was alive), a create as
    /// if never read (a life it replaced had ended).
    fn command_for(&self, e: &AgentEvent) -> StreamChange {
        let now_ms = e.ts.unwrap_or(0);
        let mut last_read_ms = now_ms;
        let command = match &e.body {
            EventBody::StreamCreated(c) => {
                last_read_ms = 0;
                StreamCommand::Create(Box::new(CreateSpec {
                    owner: c.owner.clone(),
                    content_type: c.content_type.clone(),
                    ttl_seconds: c.ttl_seconds,
                    expires_at: c.expires_at.clone(),
                    expires_at_ms: c.expires_at_ms,
                    closed: c.closed,
                    data: c.data.clone(),
                    fork: c.fork.clone(),
                }))
            }
            EventBody::StreamAppended(a) => StreamCommand::Append {
                data: a.data.clone(),
                content_type: self
                    .life
                    .as_ref()
                    .map(|l| l.content_type.clone())
                    .unwrap_or_default(),
                seq: a.seq.clone(),
                producer: a.producer.clone(),
                close: a.close,
            },
            EventBody::StreamClosed(c) => StreamCommand::Close {
                producer: c.producer.clone(),
            },
            EventBody::StreamForkAdded(f) => StreamCommand::AddFork {
                fork: f.fork.clone(),
                created_id: f.created_id,
                offset: f.offset,
            },
            EventBody::StreamForkReleased(f) => StreamCommand::ReleaseFork {
                fork: f.fork.clone(),
            },
            // A delete, or an event of another kind of stream: compared with what a delete
            // stores, and refused.
            _ => StreamCommand::Delete,
        };
        StreamChange {
            command,
            by: e.user_id.clone().unwrap_or_default(),
            now_ms,
            last_read_ms,
        }
    }
}

/// The answer to a write on a closed stream: the producer that closed it retrying its closing
/// write is a duplicate; anyone else finds it closed.
fn closed_refusal(life: &StreamLife, producer: Option<&ProducerStamp>) -> StreamRefusal {
    match (producer, &life.closed_by) {
        (Some(p), Some(by)) if p == by => StreamRefusal::Duplicate {
            last_seq: p.seq,
            closed: true,
            offset: life.current_offset(),
        },
        _ => StreamRefusal::Closed {
            offset: life.current_offset(),
        },
    }
}

/// The idempotent-producer rules: a new producer starts at 0; a newer epoch starts at 0 and
/// fences the older; a seen sequence number is a duplicate; a skipped one is a gap.
fn check_producer(life: &StreamLife, p: &ProducerStamp) -> Result<(), StreamRefusal> {
    check_producer_in(&life.producers, p, life.closed, life.current_offset())
}

/// [`check_producer`] over any producers' states (a thread's too); a duplicate is answered with
/// `closed` and `offset`.
pub fn check_producer_in(
    producers: &BTreeMap<String, ProducerState>,
    p: &ProducerStamp,
    closed: bool,
    offset: i64,
) -> Result<(), StreamRefusal> {
    let Some(state) = producers.get(&p.id) else {
        return if p.seq == 0 {
            Ok(())
        } else {
            Err(StreamRefusal::SequenceGap {
                expected: 0,
                received: p.seq,
            })
        };
    };
    if p.epoch < state.epoch {
        return Err(StreamRefusal::StaleEpoch {
            current: state.epoch,
        });
    }
    if p.epoch > state.epoch {
        return if p.seq == 0 {
            Ok(())
        } else {
            Err(StreamRefusal::InvalidEpochSeq)
        };
    }
    if p.seq <= state.last_seq {
        return Err(StreamRefusal::Duplicate {
            last_seq: state.last_seq,
            closed,
            offset,
        });
    }
    if p.seq == state.last_seq + 1 {
        Ok(())
    } else {
        Err(StreamRefusal::SequenceGap {
            expected: state.last_seq + 1,
            received: p.seq,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(ct: &str) -> StreamCommand {
        StreamCommand::Create(Box::new(CreateSpec {
            owner: "u".into(),
            content_type: ct.into(),
            ttl_seconds: None,
            expires_at: None,
            expires_at_ms: None,
            closed: false,
            data: None,
            fork: None,
        }))
    }

    fn run(s: &mut DurableStream, id: &mut i64, c: &StreamCommand) -> Result<(), StreamRefusal> {
        for e in s.decide(c, "u", 1000, 0)? {
            *id += 1;
            s.apply(*id, 1000, &e);
        }
        Ok(())
    }

    fn append(producer: Option<(u64, u64)>) -> StreamCommand {
        StreamCommand::Append {
            data: StreamData::Text("x".into()),
            content_type: "text/plain".into(),
            seq: None,
            producer: producer.map(|(epoch, seq)| ProducerStamp {
                id: "p".into(),
                epoch,
                seq,
            }),
            close: false,
        }
    }

    #[test]
    fn offsets_sort_as_their_ids_and_parse_back() {
        assert!(format_offset(9) < format_offset(10));
        assert_eq!(parse_offset(&format_offset(12345)), Some(12345));
        assert_eq!(parse_offset("-1"), Some(0));
        for bad in ["", "abc", "1_", "_1", "1-2", "now"] {
            assert_eq!(parse_offset(bad), None, "{bad}");
        }
    }

    #[test]
    fn producer_rules_duplicate_gap_and_fencing() {
        let (mut s, mut id) = (DurableStream::default(), 0);
        run(&mut s, &mut id, &create("text/plain")).unwrap();
        assert_eq!(
            run(&mut s, &mut id, &append(Some((0, 1)))),
            Err(StreamRefusal::SequenceGap {
                expected: 0,
                received: 1
            })
        );
        run(&mut s, &mut id, &append(Some((0, 0)))).unwrap();
        assert!(matches!(
            run(&mut s, &mut id, &append(Some((0, 0)))),
            Err(StreamRefusal::Duplicate { last_seq: 0, .. })
        ));
        run(&mut s, &mut id, &append(Some((1, 0)))).unwrap();
        assert_eq!(
            run(&mut s, &mut id, &append(Some((0, 1)))),
            Err(StreamRefusal::StaleEpoch { current: 1 })
        );
        assert_eq!(
            run(&mut s, &mut id, &append(Some((2, 3)))),
            Err(StreamRefusal::InvalidEpochSeq)
        );
        assert_eq!(s.life.as_ref().unwrap().last_message_id, Some(id));
    }

    #[test]
    fn delete_with_live_forks_is_soft_until_the_last_is_released() {
        let (mut s, mut id) = (DurableStream::default(), 0);
        run(&mut s, &mut id, &create("text/plain")).unwrap();
        let created = s.life.as_ref().unwrap().created_id;
        let add = StreamCommand::AddFork {
            fork: "f".into(),
            created_id: created,
            offset: 0,
        };
        run(&mut s, &mut id, &add).unwrap();
        run(&mut s, &mut id, &StreamCommand::Delete).unwrap();
        assert_eq!(
            run(&mut s, &mut id, &create("text/plain")),
            Err(StreamRefusal::Gone)
        );
        run(
            &mut s,
            &mut id,
            &StreamCommand::ReleaseFork { fork: "f".into() },
        )
        .unwrap();
        assert!(s.life.is_none());
        run(&mut s, &mut id, &create("text/plain")).unwrap();
    }

    /// Writes are the owner's: to anyone else the stream is not there, whatever its state, and
    /// nothing is decided.
    #[test]
    fn only_the_owner_appends_or_closes() {
        let (mut s, mut id) = (DurableStream::default(), 0);
        run(&mut s, &mut id, &create("text/plain")).unwrap();
        let close = StreamCommand::Close { producer: None };
        for command in [append(None), append(Some((0, 0))), close.clone()] {
            assert_eq!(
                s.decide(&command, "someone-else", 1000, 0),
                Err(StreamRefusal::NotFound)
            );
        }
        run(&mut s, &mut id, &close).unwrap();
        assert_eq!(
            s.decide(&append(None), "someone-else", 1000, 0),
            Err(StreamRefusal::NotFound),
            "not even that it is closed"
        );
        assert!(matches!(
            s.decide(&append(None), "u", 1000, 0),
            Err(StreamRefusal::Closed { .. })
        ));
    }
}
