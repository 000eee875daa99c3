//! Compacted text: a finished run's consecutive text (or reasoning) deltas of one agent, stored
//! as one event (docs/architecture.md, "Compaction").
//!
//! The compacted row keeps the type, envelope, id and seq of the range's **last** delta, and its
//! payload holds the whole text with what is needed to cut it again where any of the replaced
//! deltas ended:
//!
//! ```json
//! {"compacted":{"gaps":[3,1,2],"lens":[5,1,4,3],"ms":[20,31,25]},"text":"Hello, world!"}
//! ```
//!
//! - `lens`: each replaced delta's text length in UTF-8 bytes, in order (they add up to `text`);
//! - `gaps`: the differences between consecutive replaced ids (ids of other threads interleave
//!   in the log), so the ids are `id - sum(gaps) .. id`; within the thread the deltas were
//!   consecutive, so their seqs are `seq - gaps.len() ..= seq`;
//! - `ms`: the differences between consecutive replaced deltas' times (`ts`, epoch ms).
//!
//! So the deltas can be told again exactly ([`StoredEvent::expanded`]): the folds that count
//! events or time them (the writer's aggregates, the read models, `verify`'s rules) fold the
//! deltas as they were stored, and a rebuild after compaction gives the same documents.
//!
//! Readers never see the marker: a read with a cursor inside the range gets the rest of the text
//! from there as one delta ([`resume_after`]), a read up to an id inside it gets the text up to
//! there ([`StoredEvent::compacted_part`]), and the wire envelope carries `{"text": …}` alone
//! ([`StoredEvent::wire_payload`]). Decoding a compacted row gives the plain delta of the whole
//! text (`TextDelta` has no `compacted` field and ignores it). Exports and the change feed carry
//! the row as stored, marker included.

use serde::{Deserialize, Serialize};

use crate::StoredEvent;

/// The two event types compaction merges.
pub const COMPACTABLE: [&str; 2] = ["text-delta", "reasoning-delta"];

/// How a compacted payload starts: the marker is serialized first, so telling a compacted row
/// from a delta is a prefix test.
const MARKER_PREFIX: &str = "{\"compacted\":";

/// Where the replaced deltas were cut.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cuts {
    pub gaps: Vec<i64>,
    pub lens: Vec<usize>,
    pub ms: Vec<i64>,
}

#[derive(Serialize, Deserialize)]
struct CompactedPayload<'a> {
    compacted: Cuts,
    #[serde(borrow)]
    text: std::borrow::Cow<'a, str>,
}

#[derive(Serialize)]
struct PlainPayload<'a> {
    text: &'a str,
}

/// One replaced delta inside a compacted row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub id: i64,
    pub seq: i64,
    pub ts: i64,
    /// Its text: `text[start..end]` of the row.
    pub start: usize,
    pub end: usize,
}

/// A row's text with its pieces: one piece for a plain delta.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pieces {
    pub text: String,
    pub pieces: Vec<Piece>,
}

impl StoredEvent {
    /// Whether this row is a compacted range (a prefix test, no parse).
    pub fn is_compacted(&self) -> bool {
        self.payload.starts_with(MARKER_PREFIX) && COMPACTABLE.contains(&self.event_type.as_str())
    }

    /// The text and the deltas it is made of: a compacted row's pieces, or a plain delta as one
    /// piece. `None` for any other event or a payload that does not parse.
    pub fn pieces(&self) -> Option<Pieces> {
        if !COMPACTABLE.contains(&self.event_type.as_str()) {
            return None;
        }
        if !self.is_compacted() {
            #[derive(Deserialize)]
            struct Plain {
                text: String,
            }
            let p: Plain = serde_json::from_str(&self.payload).ok()?;
            let end = p.text.len();
            return Some(Pieces {
                text: p.text,
                pieces: vec![Piece {
                    id: self.id,
                    seq: self.seq,
                    ts: self.ts,
                    start: 0,
                    end,
                }],
            });
        }
        let p: CompactedPayload<'_> = serde_json::from_str(&self.payload).ok()?;
        let Cuts { gaps, lens, ms } = p.compacted;
        let text = p.text.into_owned();
        if lens.len() != gaps.len() + 1
            || ms.len() != gaps.len()
            || lens.iter().sum::<usize>() != text.len()
        {
            return None;
        }
        let mut pieces = Vec::with_capacity(lens.len());
        let mut id = self.id - gaps.iter().sum::<i64>();
        let mut seq = self.seq - gaps.len() as i64;
        let mut ts = self.ts - ms.iter().sum::<i64>();
        let mut start = 0;
        for (i, len) in lens.iter().enumerate() {
            let end = start + len;
            if !text.is_char_boundary(end) {
                return None;
            }
            pieces.push(Piece {
                id,
                seq,
                ts,
                start,
                end,
            });
            start = end;
            if let (Some(g), Some(m)) = (gaps.get(i), ms.get(i)) {
                id += g;
                seq += 1;
                ts += m;
            }
        }
        Some(Pieces { text, pieces })
    }

    /// The first id a compacted row replaced (its own id for any other row).
    pub fn first_id(&self) -> i64 {
        if !self.is_compacted() {
            return self.id;
        }
        self.pieces()
            .and_then(|p| p.pieces.first().map(|f| f.id))
            .unwrap_or(self.id)
    }

    /// The part of a compacted row made of the deltas with `after < id <= through`, as a row of
    /// its own: a compacted row again, or a plain delta when one is left; the row itself when
    /// all are, or it is not compacted; `None` when none is (or the row does not parse).
    pub fn compacted_part(&self, after: i64, through: i64) -> Option<StoredEvent> {
        if !self.is_compacted() {
            return (after < self.id && self.id <= through).then(|| self.clone());
        }
        let Pieces { text, pieces } = self.pieces()?;
        let kept: Vec<Piece> = pieces
            .iter()
            .copied()
            .filter(|p| after < p.id && p.id <= through)
            .collect();
        let (first, last) = (kept.first()?, kept.last()?);
        if kept.len() == pieces.len() {
            return Some(self.clone());
        }
        let mut row = self.clone();
        row.id = last.id;
        row.seq = last.seq;
        row.ts = last.ts;
        let text = &text[first.start..last.end];
        row.payload = if kept.len() == 1 {
            serde_json::to_string(&PlainPayload { text }).expect("strings serialize")
        } else {
            compacted_payload(&kept, text)
        };
        Some(row)
    }

    /// The deltas a compacted row replaced, each as it was stored (id, seq, time, text); any
    /// other row as itself. What folds that count or time events fold.
    pub fn expanded(&self) -> Vec<std::borrow::Cow<'_, StoredEvent>> {
        use std::borrow::Cow;
        if !self.is_compacted() {
            return vec![Cow::Borrowed(self)];
        }
        let Some(Pieces { text, pieces }) = self.pieces() else {
            return vec![Cow::Borrowed(self)];
        };
        pieces
            .iter()
            .map(|p| {
                let mut row = self.clone();
                row.id = p.id;
                row.seq = p.seq;
                row.ts = p.ts;
                row.payload = serde_json::to_string(&PlainPayload {
                    text: &text[p.start..p.end],
                })
                .expect("strings serialize");
                Cow::Owned(row)
            })
            .collect()
    }

    /// The payload as the wire carries it: a compacted row's marker left out.
    pub fn wire_payload(&self) -> std::borrow::Cow<'_, str> {
        if !self.is_compacted() {
            return std::borrow::Cow::Borrowed(&self.payload);
        }
        match serde_json::from_str::<CompactedPayload<'_>>(&self.payload) {
            Ok(p) => std::borrow::Cow::Owned(
                serde_json::to_string(&PlainPayload { text: &p.text }).expect("strings serialize"),
            ),
            Err(_) => std::borrow::Cow::Borrowed(&self.payload),
        }
    }
}

fn compacted_payload(pieces: &[Piece], text: &str) -> String {
    let cuts = Cuts {
        gaps: pieces.windows(2).map(|w| w[1].id - w[0].id).collect(),
        lens: pieces.iter().map(|p| p.end - p.start).collect(),
        ms: pieces.windows(2).map(|w| w[1].ts - w[0].ts).collect(),
    };
    serde_json::to_string(&CompactedPayload {
        compacted: cuts,
        text: std::borrow::Cow::Borrowed(text),
    })
    .expect("payloads serialize")
}

/// A page read with `id > after`: a compacted row whose range starts at or before `after` is cut
/// to the deltas after it, so a reader resuming inside a range gets the rest of its text as one
/// delta.
pub fn resume_after(mut rows: Vec<StoredEvent>, after: i64) -> Vec<StoredEvent> {
    for row in rows.iter_mut() {
        if row.is_compacted() && row.first_id() <= after {
            if let Some(part) = row.compacted_part(after, i64::MAX) {
                *row = part;
            }
        }
    }
    rows
}

/// One range to compact: the rows it replaces (ids, in order) and the row that replaces them
/// (at the last one's id).
#[derive(Debug, Clone, PartialEq)]
pub struct Merge {
    pub replaced: Vec<i64>,
    pub row: StoredEvent,
}

impl Merge {
    /// The ids deleted: every replaced row but the last, which is rewritten.
    pub fn deleted(&self) -> &[i64] {
        &self.replaced[..self.replaced.len() - 1]
    }
}

/// The ranges of `rows` (one log stream's consecutive rows, in order) to compact: maximal runs of
/// two or more rows that are text deltas, or reasoning deltas, of one run, agent, response and
/// user, and belong to run `run_id`.
pub fn plan(rows: &[StoredEvent], run_id: &str) -> Vec<Merge> {
    let mut out = Vec::new();
    let mut group: Vec<&StoredEvent> = Vec::new();
    let same = |a: &StoredEvent, b: &StoredEvent| {
        a.event_type == b.event_type
            && a.run_id == b.run_id
            && a.agent_id == b.agent_id
            && a.response_id == b.response_id
            && a.user_id == b.user_id
            && a.thread_id == b.thread_id
            && a.seq + 1 == b.seq
    };
    let close = |group: &mut Vec<&StoredEvent>, out: &mut Vec<Merge>| {
        if group.len() >= 2 {
            if let Some(m) = merge(group) {
                out.push(m);
            }
        }
        group.clear();
    };
    for row in rows {
        let compactable = COMPACTABLE.contains(&row.event_type.as_str()) && row.run_id == run_id;
        if !compactable {
            close(&mut group, &mut out);
            continue;
        }
        if let Some(prev) = group.last() {
            // A compacted row's seq is its last piece's; the next row follows that.
            if !same(prev, row) {
                close(&mut group, &mut out);
            }
        }
        group.push(row);
    }
    close(&mut group, &mut out);
    out
}

/// Consecutive rows of one kind as one compacted row; `None` if a row does not parse.
fn merge(rows: &[&StoredEvent]) -> Option<Merge> {
    let mut text = String::new();
    let mut pieces = Vec::new();
    for row in rows {
        let p = row.pieces()?;
        let base = text.len();
        text.push_str(&p.text);
        pieces.extend(p.pieces.into_iter().map(|mut piece| {
            piece.start += base;
            piece.end += base;
            piece
        }));
    }
    let last = rows.last()?;
    let mut row = (*last).clone();
    row.payload = compacted_payload(&pieces, &text);
    Some(Merge {
        replaced: rows.iter().map(|r| r.id).collect(),
        row,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{AgentEvent, EventBody, TextDelta};

    fn delta(id: i64, seq: i64, text: &str) -> StoredEvent {
        let e = AgentEvent::new(
            "r1",
            "a1",
            EventBody::TextDelta(TextDelta { text: text.into() }),
        );
        StoredEvent::from_event(id, "t", seq, id * 10, &e)
    }

    fn text_of(row: &StoredEvent) -> String {
        match row.decode().unwrap().body {
            EventBody::TextDelta(d) | EventBody::ReasoningDelta(d) => d.text,
            other => panic!("not a delta: {other:?}"),
        }
    }

    /// Deltas with ids 10, 11, 14, 15, 20 (others interleave) and seqs 3..=7.
    fn deltas() -> Vec<StoredEvent> {
        [
            (10, "Hé"),
            (11, "llo"),
            (14, ", "),
            (15, "wörld"),
            (20, "!\n"),
        ]
        .iter()
        .enumerate()
        .map(|(i, (id, t))| delta(*id, 3 + i as i64, t))
        .collect()
    }

    #[test]
    fn a_compacted_row_resumes_exactly_at_every_cut() {
        let rows = deltas();
        let plan = plan(&rows, "r1");
        assert_eq!(plan.len(), 1);
        let m = &plan[0];
        assert_eq!(m.replaced, vec![10, 11, 14, 15, 20]);
        assert_eq!(m.deleted(), &[10, 11, 14, 15]);
        assert_eq!((m.row.id, m.row.seq, m.row.ts), (20, 7, 200));
        assert!(m.row.is_compacted());
        assert_eq!(m.row.first_id(), 10);
        assert_eq!(text_of(&m.row), "Héllo, wörld!\n");
        // Every cursor from before the range to its end: the rest, at the last id.
        for after in 0..=20 {
            let expected: String = rows.iter().filter(|r| r.id > after).map(text_of).collect();
            let page = resume_after(vec![m.row.clone()], after);
            if expected.is_empty() {
                assert!(m.row.compacted_part(after, i64::MAX).is_none());
                continue;
            }
            assert_eq!(text_of(&page[0]), expected, "after {after}");
            assert_eq!((page[0].id, page[0].seq), (20, 7));
            // The wire never shows the marker.
            assert_eq!(
                page[0].wire_payload(),
                serde_json::json!({ "text": expected }).to_string()
            );
        }
        // Every read up to an id inside it: the text so far, at the last delta's id and seq.
        for through in 10..=20 {
            let part = m.row.compacted_part(0, through).unwrap();
            let kept: Vec<&StoredEvent> = rows.iter().filter(|r| r.id <= through).collect();
            let expected: String = kept.iter().map(|r| text_of(r)).collect();
            assert_eq!(text_of(&part), expected);
            let last = kept.last().unwrap();
            assert_eq!((part.id, part.seq, part.ts), (last.id, last.seq, last.ts));
        }
    }

    #[test]
    fn a_compacted_row_expands_to_the_deltas_it_replaced() {
        let rows = deltas();
        let row = plan(&rows, "r1").remove(0).row;
        let expanded: Vec<StoredEvent> =
            row.expanded().into_iter().map(|r| r.into_owned()).collect();
        assert_eq!(expanded, rows);
        let plain = delta(3, 1, "x");
        assert_eq!(plain.expanded().len(), 1);
    }

    #[test]
    fn a_compacted_row_merges_again_with_its_neighbours() {
        let rows = deltas();
        let first = plan(&rows[..3], "r1").remove(0).row;
        let again = plan(&[first, rows[3].clone(), rows[4].clone()], "r1").remove(0);
        assert_eq!(again.row, plan(&rows, "r1").remove(0).row);
    }

    #[test]
    fn only_consecutive_deltas_of_one_kind_agent_and_run_are_merged() {
        let mut rows = deltas();
        rows[2].agent_id = "sub".into(); // another agent between
        let mut reasoning = rows[4].clone();
        reasoning.event_type = "reasoning-delta".into();
        rows[4] = reasoning;
        let p = plan(&rows, "r1");
        // [10, 11] and [15] (alone) then [20] (other type): one merge.
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].replaced, vec![10, 11]);
        assert!(plan(&deltas(), "another run").is_empty());
        // A seq gap (another event of the thread between) ends a range.
        let mut gap = deltas();
        for r in &mut gap[2..] {
            r.seq += 1;
        }
        assert_eq!(plan(&gap, "r1").len(), 2);
    }

    #[test]
    fn a_plain_delta_is_one_piece_and_untouched() {
        let row = delta(5, 1, "abc");
        assert!(!row.is_compacted());
        assert_eq!(row.wire_payload(), row.payload);
        assert_eq!(row.compacted_part(4, i64::MAX), Some(row.clone()));
        assert_eq!(row.compacted_part(5, i64::MAX), None);
        assert_eq!(row.pieces().unwrap().pieces.len(), 1);
    }
}
