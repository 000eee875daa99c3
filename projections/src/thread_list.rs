//! The thread list: one summary per thread, for listing a user's threads.
//!
//! [`ThreadSummary`] owns a thread's identity and bookkeeping: owner (from `thread-created`),
//! title (the latest of `thread-created`, `thread-renamed` and the agent's
//! `thread-title-updated`, the same rule as the `Thread` aggregate), creation and last-activity
//! times, the deleted flag, and the last event id. Deleted threads keep their summary (flagged)
//! so a rebuild from the log gives the same table; callers filter them out.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use threadstream_domain::event::EventBody;
use threadstream_domain::{ForkOf, StoredEvent};

use crate::time::iso_millis;

/// The thread-list read model's document for one thread.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadSummary {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub owner: String,
    /// Epoch ms of the thread's first event.
    pub created_at: i64,
    /// Epoch ms of its latest event, of any kind.
    pub updated_at: i64,
    pub deleted: bool,
    /// Id of the last event folded (0 before any).
    pub last_event_id: i64,
    /// What the thread reads through, when it is a fork.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork_of: Option<ForkOf>,
}

impl ThreadSummary {
    /// Folds one stored event; already-folded ids are skipped. An undecodable event still counts
    /// as activity (it is in the thread's log) but changes nothing else.
    pub fn apply(&mut self, event: &StoredEvent) {
        if self.last_event_id > 0 && event.id <= self.last_event_id {
            return;
        }
        if self.last_event_id == 0 {
            self.id = event.thread_id.clone();
            self.created_at = event.ts;
        }
        self.last_event_id = event.id;
        self.updated_at = self.updated_at.max(event.ts);
        let Ok(decoded) = event.decode() else { return };
        match decoded.body {
            EventBody::ThreadCreated(p) => {
                if p.fork_of.is_some() {
                    // A fork was created now, whatever the age of the history it reads through.
                    self.id = event.thread_id.clone();
                    self.created_at = event.ts;
                }
                self.fork_of = p.fork_of;
                self.owner = p.owner;
                if p.title.is_some() {
                    self.title = p.title;
                }
            }
            EventBody::ThreadRenamed(p) | EventBody::ThreadTitleUpdated(p) => {
                self.title = Some(p.title)
            }
            EventBody::ThreadDeleted(_) => self.deleted = true,
            _ => {}
        }
    }

    /// `{id, title?, owner, createdAt, updatedAt, deleted, lastEventId}` with ISO times.
    pub fn render(&self) -> Value {
        let mut v = json!({
            "id": self.id,
            "owner": self.owner,
            "createdAt": iso_millis(self.created_at),
            "updatedAt": iso_millis(self.updated_at),
            "deleted": self.deleted,
            "lastEventId": self.last_event_id,
        });
        if let Some(title) = &self.title {
            v["title"] = Value::String(title.clone());
        }
        if let Some(f) = &self.fork_of {
            v["forkOf"] = json!({"threadId": f.thread_id, "throughEventId": f.through_event_id});
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Log;

    fn fold(log: &Log) -> ThreadSummary {
        let mut doc = ThreadSummary::default();
        for e in &log.events {
            doc.apply(e);
        }
        doc
    }

    #[test]
    fn created_renamed_titled_deleted() {
        let mut log = Log::new("t9");
        log.internal("thread-created", json!({"owner":"alice"}));
        let created = log.events[0].ts;
        let s = fold(&log).render();
        assert_eq!(
            s,
            json!({"id":"t9","owner":"alice","createdAt":iso_millis(created),"updatedAt":iso_millis(created),
                "deleted":false,"lastEventId":log.events[0].id})
        );
        log.internal("thread-renamed", json!({"title":"Mine"}));
        assert_eq!(fold(&log).render()["title"], "Mine");
        log.start_run("r1", "o", "m1", "hi", None);
        log.n8n(
            "r1",
            "o",
            "thread-title-updated",
            json!({"title":"Auto title"}),
        );
        log.n8n("r1", "o", "run-finish", json!({"status":"completed"}));
        let s = fold(&log);
        assert_eq!(s.title.as_deref(), Some("Auto title"));
        assert_eq!(s.updated_at, log.events.last().unwrap().ts);
        assert_eq!(s.created_at, created);
        log.internal("thread-renamed", json!({"title":"Final"}));
        log.internal("thread-deleted", json!({}));
        let s = fold(&log).render();
        assert_eq!(s["title"], "Final");
        assert_eq!(s["deleted"], true);
        assert_eq!(s["lastEventId"], log.events.last().unwrap().id);
    }

    #[test]
    fn created_title_is_kept_until_renamed() {
        let mut log = Log::new("t");
        log.internal("thread-created", json!({"owner":"bob","title":"Start"}));
        log.start_run("r1", "o", "m1", "hi", None);
        assert_eq!(fold(&log).render()["title"], "Start");
    }
}
