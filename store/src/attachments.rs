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

impl AttachmentStore {
    /// After an erasure: removes the attachments of `streams` and (user scope) every attachment
    /// of `user`; returns how many went. On disk each file is overwritten with zeros and synced
    /// before it is unlinked; on Postgres the erasure's own transaction deleted the rows, so
    /// this finds only those the transaction could not see (a user with no stream: there was
    /// no transaction).
    pub async fn erase(&self, streams: &[String], user: Option<&str>) -> Result<u64, StoreError> {
        match self {
            AttachmentStore::Dir(root) => {
                let root = root.clone();
                let streams = streams.to_vec();
                let user = user.map(str::to_string);
                tokio::task::spawn_blocking(move || erase_files(&root, &streams, user.as_deref()))
                    .await
                    .map_err(|e| StoreError::unavailable("attachment erase", e))?
            }
            AttachmentStore::Postgres(pool) => {
                // The erasure's own transaction deleted these rows: this finds those of a user
                // with no stream, or of an erasure repeated.
                let done = sqlx::query(
                    "DELETE FROM attachments WHERE thread_id = ANY($1) OR user_id = $2",
                )
                .bind(streams)
                .bind(user)
                .execute(pool)
                .await?;
                Ok(done.rows_affected())
            }
        }
    }
}

/// Every attachment under `root` whose metadata names one of `streams` or `user`: its bytes
/// and metadata files overwritten, synced and removed, then its folder. Blocking.
fn erase_files(root: &Path, streams: &[String], user: Option<&str>) -> Result<u64, StoreError> {
    let inputs = root.join("agent-inputs");
    let users = match std::fs::read_dir(&inputs) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io_err("list", e)),
    };
    let mut erased = 0;
    for user_dir in users {
        let user_dir = user_dir.map_err(|e| io_err("list", e))?.path();
        let whole_user = user.is_some_and(|u| user_dir.file_name().is_some_and(|n| n == u));
        let Ok(attachments) = std::fs::read_dir(&user_dir) else {
            continue;
        };
        for dir in attachments {
            let dir = dir.map_err(|e| io_err("list", e))?.path();
            let Ok(files) = std::fs::read_dir(&dir) else {
                continue;
            };
            let files: Vec<PathBuf> = files.filter_map(|f| f.ok().map(|f| f.path())).collect();
            let Some(meta) = files
                .iter()
                .find(|f| f.to_string_lossy().ends_with(".meta.json"))
            else {
                continue;
            };
            let matches = whole_user
                || std::fs::read(meta)
                    .ok()
                    .and_then(|m| serde_json::from_slice::<AttachmentMeta>(&m).ok())
                    .is_some_and(|m| {
                        streams.contains(&m.thread_id) || user == Some(m.user_id.as_str())
                    });
            if !matches {
                continue;
            }
            for f in &files {
                overwrite_and_remove(f)?;
            }
            let _ = std::fs::remove_dir(&dir);
            erased += 1;
        }
        if whole_user {
            let _ = std::fs::remove_dir(&user_dir);
        }
    }
    Ok(erased)
}

/// Overwrites a file with zeros, syncs it and unlinks it (on a copy-on-write or flash file
/// system the old blocks may still exist below the file system: docs/operations.md).
fn overwrite_and_remove(path: &Path) -> Result<(), StoreError> {
    use std::io::Write;
    let len = std::fs::metadata(path)
        .map_err(|e| io_err("stat", e))?
        .len();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| io_err("open", e))?;
    let zeros = vec![0u8; 64 * 1024];
    let mut left = len;
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        f.write_all(&zeros[..n])
            .map_err(|e| io_err("overwrite", e))?;
        left -= n as u64;
    }
    f.sync_all().map_err(|e| io_err("sync", e))?;
    std::fs::remove_file(path).map_err(|e| io_err("remove", e))
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
    async fn erase_removes_a_threads_and_a_users_attachments_only() {
        let dir = tempfile::tempdir().unwrap();
        let store = AttachmentStore::Dir(dir.path().to_path_buf());
        let mut a = meta("agent-inputs/u1/att_1/a.txt", b"one");
        a.thread_id = "t1".into();
        let mut b = meta("agent-inputs/u1/att_2/b.txt", b"two");
        b.thread_id = "t2".into();
        let mut c = meta("agent-inputs/u2/att_3/c.txt", b"three");
        c.user_id = "u2".into();
        c.thread_id = "t3".into();
        for (m, bytes) in [
            (&a, b"one".to_vec()),
            (&b, b"two".to_vec()),
            (&c, b"three".to_vec()),
        ] {
            store.put(m, bytes).await.unwrap();
        }
        assert_eq!(store.erase(&["t1".into()], None).await.unwrap(), 1);
        assert!(store.get(&a.path).await.unwrap().is_none());
        assert!(!dir.path().join("agent-inputs/u1/att_1").exists());
        assert!(store.get(&b.path).await.unwrap().is_some());
        assert_eq!(store.erase(&[], Some("u2")).await.unwrap(), 1);
        assert!(!dir.path().join("agent-inputs/u2").exists());
        assert!(store.get(&b.path).await.unwrap().is_some());
        assert_eq!(store.erase(&["t1".into()], None).await.unwrap(), 0);
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
