//! `threadstream export --format parquet --out DIR` and `GET /instance-ai/admin/export?format=parquet`:
//! the events a [`Selection`] picks as Parquet, with the derived tables beside them.
//!
//! A directory export ([`export_dir`]) lays out
//!
//! ```text
//! DIR/_manifest.json                                   what the directory holds (manifest.rs)
//! DIR/events/date=YYYY-MM-DD/part-FIRST-LAST.parquet   events by UTC day, ids FIRST..=LAST
//! DIR/runs/runs.parquet                                derived tables, rewritten by every export
//! DIR/llm_calls/llm_calls.parquet
//! DIR/tool_calls/tool_calls.parquet
//! DIR/confirmations/confirmations.parquet
//! ```
//!
//! `--since-id` continues the export the manifest describes: new events go to new files (a day
//! already exported gets another part), the derived tables are folded again from every selected
//! event (the run of a day may go on the next), and threads erased since the last run are
//! removed from the files written before. Files are written under temporary names and renamed;
//! the manifest is written last, so an interrupted export leaves the previous one intact (its
//! leftovers are removed by the next).
//!
//! The route writes one table of a selection as one file ([`export_table`]).

pub mod columns;
pub mod derived;
pub mod manifest;
pub mod partitions;
pub mod tables;

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::Path;

use serde::Serialize;
use threadstream_domain::event::erasure::{Erased, STREAM as ERASURE_STREAM};
use threadstream_store::EventLog;

use crate::export::{Cursor, Selection};
use crate::{AuditError, PAGE};
use columns::TableWriter;
use derived::Derived;
use manifest::{EventsFile, ExportRun, Manifest, TableFile, MANIFEST};
use partitions::DayPartitions;
pub use tables::Table;

/// Where an export starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// A new export of every selected event, into an empty (or new) directory.
    Start,
    /// Continue the directory's export after its manifest's `lastId`.
    Manifest,
    /// Events with a larger id: the manifest's `lastId` when there is one, else a new export
    /// that leaves out the earlier events.
    Id(i64),
}

/// What one run of [`export_dir`] did (printed by the CLI).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportReport {
    pub since_id: i64,
    pub last_id: i64,
    pub events: u64,
    /// Events files this run wrote.
    pub files: Vec<EventsFile>,
    /// Rows of each derived table.
    pub tables: BTreeMap<String, u64>,
    pub erased_threads: Vec<String>,
}

/// Checks the directory and `since` against its manifest; returns the manifest to extend.
fn prepare(dir: &Path, selection: &Selection, since: Since) -> Result<Manifest, AuditError> {
    let shown = dir.display();
    let found = Manifest::read(dir)?;
    let Some(m) = found else {
        let empty = match std::fs::read_dir(dir) {
            Ok(mut entries) => entries.next().is_none(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            Err(e) => return Err(e.into()),
        };
        if since == Since::Manifest {
            return Err(AuditError::Invalid(format!(
                "--since-id without a value continues an export, but {shown} has no {MANIFEST}"
            )));
        }
        if !empty {
            return Err(AuditError::Invalid(format!(
                "{shown} is not empty and holds no export ({MANIFEST}): export into a new or empty directory"
            )));
        }
        let mut m = Manifest::new(selection.clone());
        if let Since::Id(id) = since {
            m.last_id = id.max(0);
        }
        return Ok(m);
    };
    match since {
        Since::Start => {
            return Err(AuditError::Invalid(format!(
                "{shown} already holds an export (through id {}): continue it with --since-id, or export into an empty directory",
                m.last_id
            )))
        }
        Since::Id(id) if id != m.last_id => {
            return Err(AuditError::Invalid(format!(
                "--since-id {id} does not continue the export in {shown}, which ends at id {} (give --since-id without a value to continue it)",
                m.last_id
            )))
        }
        _ => {}
    }
    if m.selection != *selection {
        let was = serde_json::to_string(&m.selection).expect("a selection serializes");
        return Err(AuditError::Invalid(format!(
            "the export in {shown} selected {was}: continue it with the same filters"
        )));
    }
    Ok(m)
}

/// Removes what an interrupted export left: temporary files, and events files the manifest does
/// not list (they were renamed into place but the manifest was not written).
fn remove_leftovers(dir: &Path, m: &Manifest) -> Result<(), AuditError> {
    let listed: HashSet<&str> = m.files.iter().map(|f| f.path.as_str()).collect();
    let events = dir.join(Table::Events.name());
    let Ok(days) = std::fs::read_dir(&events) else {
        return Ok(());
    };
    for day in days {
        let day = day?;
        if !day.file_type()?.is_dir() {
            continue;
        }
        for file in std::fs::read_dir(day.path())? {
            let path = file?.path();
            let rel = relative(dir, &path);
            if !listed.contains(rel.as_str()) {
                std::fs::remove_file(&path)?;
            }
        }
    }
    Ok(())
}

/// `path` relative to `dir`, `/`-separated.
fn relative(dir: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(dir).unwrap_or(path);
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// Threads erased after `since`: the streams the `erased` tombstones name.
async fn erased_since(log: &EventLog, since: i64) -> Result<Vec<String>, AuditError> {
    let mut streams = Vec::new();
    let mut after = since;
    loop {
        let page = log.read_thread(ERASURE_STREAM, after, PAGE).await?;
        let Some(last) = page.last() else { break };
        after = last.id;
        for e in &page {
            if let Ok(erased) = serde_json::from_str::<Erased>(&e.payload) {
                streams.extend(erased.streams.into_iter().map(|s| s.stream));
            }
        }
    }
    streams.sort();
    streams.dedup();
    Ok(streams)
}

/// Exports the selection into `dir` (see the module's doc); the directory is created if needed.
pub async fn export_dir(
    log: &EventLog,
    dir: &Path,
    selection: Selection,
    since: Since,
) -> Result<ExportReport, AuditError> {
    let mut m = prepare(dir, &selection, since)?;
    std::fs::create_dir_all(dir)?;
    remove_leftovers(dir, &m)?;
    let since_id = m.last_id;
    let continuing = !m.exports.is_empty();

    let mut days = DayPartitions::new(dir.join(Table::Events.name()));
    let mut derived = Derived::default();
    let mut cursor = Cursor::new(log.clone(), selection);
    while let Some(page) = cursor.next_page().await? {
        for e in &page {
            derived.apply(e);
            if e.id > since_id {
                days.push(e)?;
            }
        }
    }
    let last_id = cursor.read_through().max(since_id);
    // Read after the pass, so an erasure that ran meanwhile (whose events the pass may have read
    // before they were removed) is seen now rather than never: its tombstone may be at or below
    // `last_id`, which the next run starts after.
    let erased = erased_since(log, since_id).await?;
    let erased_set: HashSet<&str> = erased.iter().map(String::as_str).collect();
    let written = days.finish()?;
    let mut removed: Vec<String> = Vec::new();
    for f in &written {
        removed.extend(
            f.threads
                .iter()
                .filter(|t| erased_set.contains(t.as_str()))
                .cloned(),
        );
    }
    let mut files: Vec<EventsFile> = Vec::with_capacity(written.len());
    for f in written {
        let entry = EventsFile {
            path: relative(dir, &f.path),
            rows: f.rows,
            first_id: f.first_id,
            last_id: f.last_id,
        };
        if f.threads.iter().any(|t| erased_set.contains(t.as_str())) {
            files.extend(partitions::remove_threads(dir, vec![entry], &erased_set)?);
        } else {
            files.push(entry);
        }
    }
    if continuing && !erased_set.is_empty() {
        m.files = partitions::remove_threads(dir, std::mem::take(&mut m.files), &erased_set)?;
    }
    derived.forget(&erased_set);
    // A continued run names every thread erased since the last; a new export only those it had
    // read before their erasure (the others were already gone).
    let erased = if continuing {
        erased
    } else {
        removed.sort();
        removed.dedup();
        removed
    };

    let mut tables = BTreeMap::new();
    for table in Table::ALL.into_iter().filter(|t| *t != Table::Events) {
        let name = table.name();
        let folder = dir.join(name);
        std::fs::create_dir_all(&folder)?;
        let path = folder.join(format!("{name}.parquet"));
        let tmp = folder.join(format!("{name}.parquet.tmp"));
        let mut out = TableWriter::new(
            table.columns(),
            std::io::BufWriter::new(std::fs::File::create(&tmp)?),
        )?;
        derived.write(table, &mut out)?;
        let (file, rows) = out.finish()?;
        finish_file(file)?;
        std::fs::rename(&tmp, &path)?;
        tables.insert(name.to_string(), rows);
        m.tables.insert(
            name.to_string(),
            TableFile {
                path: relative(dir, &path),
                rows,
            },
        );
    }

    let events = files.iter().map(|f| f.rows).sum();
    m.files.extend(files.iter().cloned());
    m.last_id = last_id;
    m.exports.push(ExportRun {
        at: jiff::Timestamp::now().to_string(),
        since_id,
        last_id,
        events,
        erased_threads: erased.clone(),
    });
    m.write(dir)?;
    Ok(ExportReport {
        since_id,
        last_id,
        events,
        files,
        tables,
        erased_threads: erased,
    })
}

/// Flushes a written file to disk.
pub(crate) fn finish_file(out: std::io::BufWriter<std::fs::File>) -> Result<(), AuditError> {
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    Ok(())
}

/// One table of the selection as one Parquet file written to `out` (the route's answer);
/// returns `out` and the number of rows.
pub async fn export_table<W: Write + Send>(
    log: &EventLog,
    selection: Selection,
    table: Table,
    out: W,
) -> Result<(W, u64), AuditError> {
    let mut writer = TableWriter::new(table.columns(), out)?;
    let mut derived = Derived::default();
    let mut cursor = Cursor::new(log.clone(), selection);
    while let Some(page) = cursor.next_page().await? {
        for e in &page {
            if table == Table::Events {
                tables::event_row(writer.row(), e);
                writer.row_done()?;
            } else {
                derived.apply(e);
            }
        }
    }
    derived.write(table, &mut writer)?;
    writer.finish()
}
