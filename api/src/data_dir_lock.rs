//! Who is using a SQLite data dir: `serve` holds a shared lock on `DIR/threadstream.lock` for as
//! long as it runs, and `threadstream erase` needs it exclusively. Why: an erasure deletes rows
//! a running server keeps in memory (its hot tails, owner and fork caches, the aggregates of its
//! writer) and in its thread index, and on SQLite nothing tells another process that it
//! happened (Postgres has the head notification). So the CLI refuses while a server runs,
//! pointing to the admin route, which erases inside the server; and a server started during a
//! CLI erasure waits for it to finish. The lock is the operating system's (`flock`): a killed
//! process holds nothing.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use rustix::fs::{flock, FlockOperation};
use rustix::io::Errno;

/// The lock file in `data_dir`.
pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join("threadstream.lock")
}

/// A held lock on a data dir; released when dropped (or when the process ends).
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
}

fn open(data_dir: &Path) -> std::io::Result<File> {
    std::fs::create_dir_all(data_dir)?;
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path(data_dir))
}

/// `serve`'s shared lock: several servers may hold it at once; an erasure running from the CLI
/// is waited for (its end is logged when the wait was needed).
pub async fn serving(data_dir: &Path) -> anyhow::Result<DataDirLock> {
    let file = open(data_dir)?;
    match flock(&file, FlockOperation::NonBlockingLockShared) {
        Ok(()) => return Ok(DataDirLock { _file: file }),
        Err(Errno::WOULDBLOCK) => {}
        Err(e) => return Err(std::io::Error::from(e).into()),
    }
    tracing::warn!(
        data_dir = %data_dir.display(),
        "`threadstream erase` is running on this data dir: waiting for it to finish"
    );
    let file = tokio::task::spawn_blocking(move || {
        flock(&file, FlockOperation::LockShared).map(|()| file)
    })
    .await?
    .map_err(std::io::Error::from)?;
    tracing::info!("the erasure finished; starting");
    Ok(DataDirLock { _file: file })
}

/// `threadstream erase`'s exclusive lock, or why not: a server holds the data dir.
pub fn exclusive(data_dir: &Path) -> anyhow::Result<DataDirLock> {
    let file = open(data_dir)?;
    match flock(&file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(DataDirLock { _file: file }),
        Err(Errno::WOULDBLOCK) => anyhow::bail!(
            "a server is running on the data dir {}: erase through it with \
             `POST /instance-ai/admin/erase` (an admin's route; docs/operations.md, \"Erasure \
             and retention\"), or stop it first. Erasing from here would leave that server's \
             caches and thread index holding the erased thread",
            data_dir.display()
        ),
        Err(e) => Err(std::io::Error::from(e).into()),
    }
}
