//! The storage backends behind the log. An enum rather than a trait object: the set is closed
//! (SQLite now, Postgres next) and every call site stays a plain `async fn`.

use threadstream_domain::StoredEvent;

use crate::error::StoreError;
use crate::sqlite::SqliteLog;

/// The database the log lives in.
#[derive(Clone)]
pub enum Backend {
    Sqlite(SqliteLog),
}

macro_rules! dispatch {
    ($self:ident, $b:ident => $e:expr) => {
        match $self {
            Backend::Sqlite($b) => $e,
        }
    };
}

impl Backend {
    pub async fn max_id(&self) -> Result<i64, StoreError> {
        dispatch!(self, b => b.max_id().await)
    }

    pub async fn insert(&self, rows: &[StoredEvent]) -> Result<(), StoreError> {
        dispatch!(self, b => b.insert(rows).await)
    }

    pub async fn read_thread(
        &self,
        thread_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        dispatch!(self, b => b.read_thread(thread_id, after, limit).await)
    }

    pub async fn read_all(&self, after: i64, limit: i64) -> Result<Vec<StoredEvent>, StoreError> {
        dispatch!(self, b => b.read_all(after, limit).await)
    }

    pub async fn confirmation_thread(
        &self,
        request_id: &str,
    ) -> Result<Option<String>, StoreError> {
        dispatch!(self, b => b.confirmation_thread(request_id).await)
    }

    pub async fn load_doc(
        &self,
        model: &str,
        key: &str,
    ) -> Result<Option<(String, i64)>, StoreError> {
        dispatch!(self, b => b.load_doc(model, key).await)
    }

    pub async fn load_docs(&self, model: &str) -> Result<Vec<(String, String, i64)>, StoreError> {
        dispatch!(self, b => b.load_docs(model).await)
    }

    pub async fn checkpoint(&self, model: &str) -> Result<i64, StoreError> {
        dispatch!(self, b => b.checkpoint(model).await)
    }

    pub async fn save_docs(
        &self,
        model: &str,
        docs: &[(String, String, i64)],
        checkpoint: i64,
    ) -> Result<(), StoreError> {
        dispatch!(self, b => b.save_docs(model, docs, checkpoint).await)
    }

    pub async fn clear_model(&self, model: &str) -> Result<(), StoreError> {
        dispatch!(self, b => b.clear_model(model).await)
    }

    pub async fn close(&self) {
        dispatch!(self, b => b.close().await)
    }
}
