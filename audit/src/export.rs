//! `threadstream export` and `GET /instance-ai/threads/:threadId/export`: the events a
//! [`Selection`] picks, as NDJSON ([`crate::line`]), streamed page by page. Memory stays constant
//! (one page) except for the ids of a user's threads when selecting by user.

use std::collections::HashSet;

use bytes::Bytes;
use futures::Stream;
use threadstream_domain::StoredEvent;
use threadstream_store::EventLog;

use crate::line::write_line;
use crate::{AuditError, PAGE};

/// Which events to export; every filter given must hold (none: the whole log).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Selection {
    pub thread: Option<String>,
    pub run: Option<String>,
    /// The threads this user created (owner), every event of them.
    pub user: Option<String>,
    /// Epoch ms, inclusive.
    pub from_ts: Option<i64>,
    /// Epoch ms, exclusive.
    pub to_ts: Option<i64>,
}

impl Selection {
    pub fn thread(thread_id: &str) -> Self {
        Selection {
            thread: Some(thread_id.to_string()),
            ..Selection::default()
        }
    }
}

/// Reads the events a [`Selection`] picks, page by page, in log order.
pub(crate) struct Cursor {
    log: EventLog,
    sel: Selection,
    after: i64,
    /// Threads of `sel.user`, learnt from their `thread-created` (which comes first).
    owned: HashSet<String>,
    done: bool,
}

impl Cursor {
    pub(crate) fn new(log: EventLog, sel: Selection) -> Self {
        Cursor {
            log,
            sel,
            after: 0,
            owned: HashSet::new(),
            done: false,
        }
    }

    /// The id of the last event read (selected or not).
    pub(crate) fn read_through(&self) -> i64 {
        self.after
    }

    fn wants(&mut self, e: &StoredEvent) -> bool {
        if let Some(user) = &self.sel.user {
            if e.event_type == "thread-created" && owner_of(e).as_deref() == Some(user.as_str()) {
                self.owned.insert(e.thread_id.clone());
            }
            if !self.owned.contains(&e.thread_id) {
                return false;
            }
        }
        let s = &self.sel;
        s.thread.as_ref().is_none_or(|t| *t == e.thread_id)
            && s.run.as_ref().is_none_or(|r| *r == e.run_id)
            && s.from_ts.is_none_or(|f| e.ts >= f)
            && s.to_ts.is_none_or(|t| e.ts < t)
    }

    /// The selected events of the next page (possibly none); `None` at the end of the log.
    pub(crate) async fn next_page(&mut self) -> Result<Option<Vec<StoredEvent>>, AuditError> {
        if self.done {
            return Ok(None);
        }
        let page = match &self.sel.thread {
            Some(t) => self.log.read_thread(t, self.after, PAGE).await?,
            None => self.log.read_all(self.after, PAGE).await?,
        };
        let Some(last) = page.last() else {
            self.done = true;
            return Ok(None);
        };
        self.after = last.id;
        let mut page = page;
        page.retain(|e| self.wants(e));
        Ok(Some(page))
    }

    /// The next page's lines (possibly empty when nothing on the page is selected); `None` at the
    /// end of the log.
    async fn next_chunk(&mut self) -> Result<Option<String>, AuditError> {
        let Some(page) = self.next_page().await? else {
            return Ok(None);
        };
        let mut out = String::new();
        for e in &page {
            write_line(e, &mut out);
        }
        Ok(Some(out))
    }
}

fn owner_of(e: &StoredEvent) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(&e.payload).ok()?;
    v.get("owner")?.as_str().map(str::to_string)
}

/// The selected events as NDJSON chunks (one per page that selected anything), in log order.
pub fn export(log: EventLog, sel: Selection) -> impl Stream<Item = Result<Bytes, AuditError>> {
    let cursor = Cursor::new(log, sel);
    futures::stream::unfold(cursor, |mut c| async move {
        loop {
            match c.next_chunk().await {
                Ok(None) => return None,
                Ok(Some(chunk)) if chunk.is_empty() => continue,
                Ok(Some(chunk)) => return Some((Ok(Bytes::from(chunk)), c)),
                Err(e) => {
                    c.done = true;
                    return Some((Err(e), c));
                }
            }
        }
    })
}

/// Writes the selected events to `out`; returns how many lines were written.
pub async fn export_to(
    log: EventLog,
    sel: Selection,
    out: &mut (impl tokio::io::AsyncWrite + Unpin),
) -> Result<u64, AuditError> {
    use futures::StreamExt;
    use tokio::io::AsyncWriteExt;
    let mut lines = 0;
    let stream = export(log, sel);
    futures::pin_mut!(stream);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        lines += chunk.iter().filter(|b| **b == b'\n').count() as u64;
        out.write_all(&chunk).await?;
    }
    out.flush().await?;
    Ok(lines)
}
