//! The agent-load scenario's own reads of the log, straight from the store and not through the
//! server: on Postgres a connection to the run's database, on SQLite a read-only connection to
//! the server's `threadstream.db` (WAL mode lets a reader in another process sit beside the
//! server's writer). Each query is written once, with the two schemas' column names filled in:
//!
//! | | Postgres (`migrations/postgres`) | SQLite (`migrations/sqlite`) |
//! |---|---|---|
//! | thread | `aggregate_id` (and `aggregate_type = 'thread'`) | `thread_id` |
//! | type | `event_type` | `type` |
//! | payload | `payload` (`json`, read `::text`) | `payload` (`TEXT`) |
//!
//! Also what the store holds after the load (bytes), and on Postgres its WAL position.

use std::path::{Path, PathBuf};

use anyhow::Context;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{Connection, PgConnection};

/// Which store a configuration runs on (`--store`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    Postgres,
    Sqlite,
}

impl StoreKind {
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Postgres => "postgres",
            StoreKind::Sqlite => "sqlite",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            StoreKind::Postgres => "Postgres",
            StoreKind::Sqlite => "SQLite",
        }
    }
}

/// A connection to the log.
pub enum LogDb {
    Postgres(PgConnection),
    /// And the data directory, for the files' sizes.
    Sqlite(SqliteConnection, PathBuf),
}

/// A value bound to a query.
enum Arg<'a> {
    I(i64),
    S(&'a str),
}

/// Runs `$body` with `$c` bound to either connection (the body compiles once per driver).
macro_rules! on_conn {
    ($db:expr, $c:ident => $body:expr) => {
        match $db {
            LogDb::Postgres($c) => $body,
            LogDb::Sqlite($c, _) => $body,
        }
    };
}

/// One scalar (`i64`) query with its arguments bound in order.
macro_rules! scalar {
    ($db:expr, $sql:expr, $args:expr) => {
        on_conn!($db, c => {
            let mut q = sqlx::query_scalar::<_, i64>($sql);
            for a in $args {
                q = match a {
                    Arg::I(v) => q.bind(*v),
                    Arg::S(v) => q.bind(*v),
                };
            }
            q.fetch_one(&mut *c).await
        })
    };
}

/// One event of the log as the checks read it.
pub struct LogRow {
    pub thread: String,
    pub id: i64,
    pub ty: String,
    pub ts: i64,
    /// The payload's JSON text.
    pub payload: String,
}

/// What the store holds, bytes.
#[derive(Debug, Default, Clone)]
pub struct Stored {
    /// The log: the events table with its indexes (and TOAST on Postgres; on SQLite also the
    /// thread index's file, `threadstream-index.db`, which is the log's thread-keyed index).
    pub log: u64,
    /// The read models (`read_models` and `checkpoints`).
    pub read_models: u64,
    /// Everything the store holds: on Postgres every table of the database with its indexes
    /// and TOAST; on SQLite every file of the data directory but the `-shm` files (so the
    /// databases and their `-wal` files, and attachments if any).
    pub all: u64,
}

impl LogDb {
    pub async fn postgres(url: &str) -> anyhow::Result<LogDb> {
        Ok(LogDb::Postgres(PgConnection::connect(url).await?))
    }

    /// A read-only connection to the log in `data_dir` (the server must have created it).
    pub async fn sqlite(data_dir: &Path) -> anyhow::Result<LogDb> {
        let opts = SqliteConnectOptions::new()
            .filename(data_dir.join("threadstream.db"))
            .read_only(true);
        let c = SqliteConnection::connect_with(&opts)
            .await
            .with_context(|| format!("opening {}/threadstream.db", data_dir.display()))?;
        Ok(LogDb::Sqlite(c, data_dir.to_path_buf()))
    }

    fn is_pg(&self) -> bool {
        matches!(self, LogDb::Postgres(_))
    }

    /// `$n` on Postgres, `?n` on SQLite.
    fn p(&self, n: usize) -> String {
        if self.is_pg() {
            format!("${n}")
        } else {
            format!("?{n}")
        }
    }

    fn thread_col(&self) -> &'static str {
        if self.is_pg() {
            "aggregate_id"
        } else {
            "thread_id"
        }
    }

    fn type_col(&self) -> &'static str {
        if self.is_pg() {
            "event_type"
        } else {
            "type"
        }
    }

    /// The condition that a row is a thread's event (`AND` after it), and the payload as text.
    fn thread_rows(&self) -> (&'static str, &'static str) {
        if self.is_pg() {
            ("aggregate_type = 'thread' AND", "payload::text")
        } else {
            ("", "payload")
        }
    }

    /// The highest id of the log (ids are the global order: the count of events appended).
    pub async fn max_id(&mut self) -> anyhow::Result<u64> {
        let n = scalar!(
            self,
            "SELECT coalesce(max(id), 0) FROM events",
            &[] as &[Arg<'_>]
        )
        .context("counting events")?;
        Ok(n as u64)
    }

    /// `run-finish` events of threads starting with `prefix` among ids `(after, upto]`: a
    /// range of the primary key, so polling stays cheap for the store whose CPU is measured.
    pub async fn finishes_between(
        &mut self,
        prefix: &str,
        after: u64,
        upto: u64,
    ) -> anyhow::Result<u64> {
        let sql = format!(
            "SELECT count(*) FROM events WHERE id > {} AND id <= {} AND {} = 'run-finish' \
             AND {} LIKE {}",
            self.p(1),
            self.p(2),
            self.type_col(),
            self.thread_col(),
            self.p(3)
        );
        let like = format!("{prefix}%");
        let args = [Arg::I(after as i64), Arg::I(upto as i64), Arg::S(&like)];
        Ok(scalar!(self, &sql, &args)? as u64)
    }

    /// Events of the given type in the whole log.
    pub async fn count_type(&mut self, ty: &str) -> anyhow::Result<u64> {
        let sql = format!(
            "SELECT count(*) FROM events WHERE {} = {}",
            self.type_col(),
            self.p(1)
        );
        Ok(scalar!(self, &sql, &[Arg::S(ty)])? as u64)
    }

    /// Every event of the threads whose id starts with `prefix`, in id order.
    pub async fn thread_events(&mut self, prefix: &str) -> anyhow::Result<Vec<LogRow>> {
        let (only_threads, payload) = self.thread_rows();
        let sql = format!(
            "SELECT {th} AS thread, id, {ty} AS ty, ts, {payload} AS payload FROM events \
             WHERE {only_threads} {th} LIKE {p} ORDER BY id",
            th = self.thread_col(),
            ty = self.type_col(),
            p = self.p(1),
        );
        let like = format!("{prefix}%");
        let rows: Vec<(String, i64, String, i64, String)> = on_conn!(self, c => {
            sqlx::query_as(&sql).bind(&like).fetch_all(&mut *c).await?
        });
        Ok(rows
            .into_iter()
            .map(|(thread, id, ty, ts, payload)| LogRow {
                thread,
                id,
                ty,
                ts,
                payload,
            })
            .collect())
    }

    /// Postgres: the WAL's position now (bytes since the cluster began); `None` on SQLite.
    pub async fn wal_lsn(&mut self) -> anyhow::Result<Option<i64>> {
        match self {
            LogDb::Postgres(c) => Ok(Some(
                sqlx::query_scalar("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint")
                    .fetch_one(&mut *c)
                    .await?,
            )),
            LogDb::Sqlite(..) => Ok(None),
        }
    }

    /// What the store holds now.
    pub async fn stored(&mut self) -> anyhow::Result<Stored> {
        match self {
            LogDb::Postgres(c) => {
                let size = "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint \
                            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                            WHERE c.relkind IN ('r', 'p', 'm') AND n.nspname = 'public'";
                let log: i64 = sqlx::query_scalar(&format!("{size} AND c.relname = 'events'"))
                    .fetch_one(&mut *c)
                    .await?;
                let rm: i64 = sqlx::query_scalar(&format!(
                    "{size} AND c.relname IN ('read_models', 'checkpoints')"
                ))
                .fetch_one(&mut *c)
                .await?;
                let all: i64 = sqlx::query_scalar(size).fetch_one(&mut *c).await?;
                Ok(Stored {
                    log: log as u64,
                    read_models: rm as u64,
                    all: all as u64,
                })
            }
            LogDb::Sqlite(c, dir) => {
                // dbstat (compiled into the bundled SQLite) counts the pages of each table and
                // index, through the WAL: what the tables hold, not where the pages lie.
                let pages = "SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name IN \
                             (SELECT name FROM sqlite_schema WHERE tbl_name";
                let events: i64 = sqlx::query_scalar(&format!("{pages} = 'events')"))
                    .fetch_one(&mut *c)
                    .await
                    .context("dbstat")?;
                let rm: i64 =
                    sqlx::query_scalar(&format!("{pages} IN ('read_models', 'checkpoints'))"))
                        .fetch_one(&mut *c)
                        .await?;
                let index = ["threadstream-index.db", "threadstream-index.db-wal"]
                    .iter()
                    .map(|f| std::fs::metadata(dir.join(f)).map_or(0, |m| m.len()))
                    .sum::<u64>();
                Ok(Stored {
                    log: events as u64 + index,
                    read_models: rm as u64,
                    all: dir_bytes(dir),
                })
            }
        }
    }

    pub async fn close(self) {
        let _ = on_conn!(self, c => c.close().await);
    }
}

/// Bytes of every file under `dir` but SQLite's `-shm` files (shared memory, not data).
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let p = e.path();
            match e.metadata() {
                Ok(m) if m.is_dir() => dir_bytes(&p),
                Ok(m) if !p.to_string_lossy().ends_with("-shm") => m.len(),
                _ => 0,
            }
        })
        .sum()
}
