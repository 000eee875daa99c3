//! Attachment bytes and their metadata, beside the log: files under the data dir for the embedded
//! deployment, a `bytea` table when the log is on Postgres (so every instance sees every upload).
//!
//! An attachment is immutable once written and addressed by its object path
//! (`agent-inputs/{user_id}/{attachment_id}/{file name}`); who may sign or read a path is decided
//! by the API, not here. A put is all or nothing: on disk the bytes are written to a temporary
//! file, synced and renamed, and the metadata file — written the same way, last — is what makes
//! the attachment exist.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sqlx::{PgPool, Row};

use crate::error::StoreError;

/// What is known of a stored attachment besides its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttachmentMeta {
    pub path: String,
    pub thread_id: String,
    pub user_id: String,
    pub file_name: String,
    pub content_type: String,
    pub size: u64,
    /// Hex SHA-256 of the bytes.
    pub sha256: String,
    /// Milliseconds since the epoch.
    pub created_at: i64,
}

/// Where attachments live. Cheap to clone.
#[derive(Clone, Debug)]
pub enum AttachmentStore {
    /// `root/<object path>` holds the bytes, `root/<object path>.meta.json` the metadata.
    Dir(PathBuf),
    Postgres(PgPool),
}

impl AttachmentStore {
    /// Stores `bytes` under `meta.path`. Writing a path that exists is refused (paths carry a
    /// fresh id, so a clash is a bug, never an overwrite).
    pub async fn put(&self, meta: &AttachmentMeta, bytes: Vec<u8>) -> Result<(), StoreError> {
        check_path(&meta.path)?;
        match self {
            AttachmentStore::Dir(root) => {
                let root = root.clone();
                let meta = meta.clone();
                tokio::task::spawn_blocking(move || put_file(&root, &meta, &bytes))
                    .await
                    .map_err(|e| StoreError::unavailable("attachment write", e))?
            }
            AttachmentStore::Postgres(pool) => {
                sqlx::query(
                    "INSERT INTO attachments (path, thread_id, user_id, file_name, content_type, \
                     size, sha256, created_at, bytes) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)",
                )
                .bind(&meta.path)
                .bind(&meta.thread_id)
                .bind(&meta.user_id)
                .bind(&meta.file_name)
                .bind(&meta.content_type)
                .bind(meta.size as i64)
                .bind(&meta.sha256)
                .bind(meta.created_at)
                .bind(bytes)
                .execute(pool)
                .await?;
                Ok(())
            }
        }
    }

    /// The attachment at `path`, or `None`.
    pub async fn get(&self, path: &str) -> Result<Option<(AttachmentMeta, Vec<u8>)>, StoreError> {
        check_path(path)?;
        match self {
            AttachmentStore::Dir(root) => {
                let root = root.clone();
                let path = path.to_string();
                tokio::task::spawn_blocking(move || get_file(&root, &path))
                    .await
                    .map_err(|e| StoreError::unavailable("attachment read", e))?
            }
            AttachmentStore::Postgres(pool) => {
                let row = sqlx::query(
                    "SELECT path, thread_id, user_id, file_name, content_type, size, sha256, \
                     created_at, bytes FROM attachments WHERE path = $1",
                )
                .bind(path)
                .fetch_optional(pool)
                .await?;
                Ok(row.map(|r| {
                    let meta = AttachmentMeta {
                        path: r.get(0),
                        thread_id: r.get(1),
                        user_id: r.get(2),
                        file_name: r.get(3),
                        content_type: r.get(4),
                        size: r.get::<i64, _>(5) as u64,
                        sha256: r.get(6),
                        created_at: r.get(7),
                    };
                    (meta, r.get(8))
                }))
            }
        }
    }
}

/// Object paths are relative, `/`-separated, made of `[A-Za-z0-9._-]` segments that are not
/// `.` or `..`: they can never leave the attachment root.
fn check_path(path: &str) -> Result<(), StoreError> {
    let ok = !path.is_empty()
        && path.len() <= 512
        && path.split('/').all(|seg| {
            !seg.is_empty()
                && seg != "."
                && seg != ".."
                && seg
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        });
    if ok {
        Ok(())
    } else {
        Err(StoreError::refused(format!(
            "invalid attachment path {path:?}"
        )))
    }
}

fn meta_file(root: &Path, path: &str) -> PathBuf {
    root.join(format!("{path}.meta.json"))
}

fn io_err(what: &str, e: std::io::Error) -> StoreError {
    StoreError::unavailable(format!("attachment {what}"), e)
}

/// Writes `bytes` to `dest` through a synced temporary file and a rename, so a reader never sees
/// a partial file and a crash leaves at most a stray temporary.
fn write_atomically(dest: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    use std::io::Write;
    let dir = dest.parent().expect("object paths have a parent");
    let mut tmp = tempfile_in(dir)?;
    tmp.1.write_all(bytes).map_err(|e| io_err("write", e))?;
    tmp.1.sync_all().map_err(|e| io_err("sync", e))?;
    std::fs::rename(&tmp.0, dest).map_err(|e| {
        let _ = std::fs::remove_file(&tmp.0);
        io_err("rename", e)
    })
}

fn tempfile_in(dir: &Path) -> Result<(PathBuf, std::fs::File), StoreError> {
    let name = dir.join(format!(".tmp-{}", uuid_like()));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&name)
        .map_err(|e| io_err("create", e))?;
    Ok((name, file))
}

/// A unique-enough temporary name without another dependency.
fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn put_file(root: &Path, meta: &AttachmentMeta, bytes: &[u8]) -> Result<(), StoreError> {
    let data = root.join(&meta.path);
    let meta_path = meta_file(root, &meta.path);
    if meta_path.exists() {
        return Err(StoreError::refused(format!(
            "attachment {} exists already",
            meta.path
        )));
    }
    let dir = data.parent().expect("object paths have a parent");
    std::fs::create_dir_all(dir).map_err(|e| io_err("mkdir", e))?;
    write_atomically(&data, bytes)?;
    let json = serde_json::to_vec(meta).expect("metadata serializes");
    write_atomically(&meta_path, &json)?;
    // The renames are durable once the directory itself is synced.
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err("sync dir", e))
}

fn get_file(root: &Path, path: &str) -> Result<Option<(AttachmentMeta, Vec<u8>)>, StoreError> {
    let meta = match std::fs::read(meta_file(root, path)) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("read", e)),
    };
    let meta: AttachmentMeta = serde_json::from_slice(&meta)
        .map_err(|e| StoreError::unavailable(format!("attachment metadata of {path}"), e))?;
    let bytes = std::fs::read(root.join(path)).map_err(|e| io_err("read", e))?;
    Ok(Some((meta, bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(path: &str, bytes: &[u8]) -> AttachmentMeta {
        AttachmentMeta {
            path: path.into(),
            thread_id: "t1".into(),
            user_id: "u1".into(),
            file_name: "a.txt".into(),
            content_type: "text/plain".into(),
            size: bytes.len() as u64,
            sha256: "00".into(),
            created_at: 1,
        }
    }

    #[tokio::test]
    async fn dir_store_round_trips_and_refuses_overwrite_and_escapes() {
        let dir = tempfile::tempdir().unwrap();
        let store = AttachmentStore::Dir(dir.path().to_path_buf());
        let m = meta("agent-inputs/u1/att_1/a.txt", b"hello");
        store.put(&m, b"hello".to_vec()).await.unwrap();
        let (got, bytes) = store.get(&m.path).await.unwrap().unwrap();
        assert_eq!(got, m);
        assert_eq!(bytes, b"hello");
        assert!(store.put(&m, b"other".to_vec()).await.is_err());
        assert_eq!(store.get(&m.path).await.unwrap().unwrap().1, b"hello");
        assert!(store.get("agent-inputs/u1/none").await.unwrap().is_none());
        for bad in ["../x", "a//b", "/abs", "a/../../b", "a/./b", "a\\b", ""] {
            assert!(store.get(bad).await.is_err(), "{bad:?} accepted");
        }
        // No temporaries left behind.
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("agent-inputs/u1/att_1"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with(".tmp-"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }
}
