//! The `events` table on disk: one folder per UTC day (`date=YYYY-MM-DD`, the hive-style
//! partition every engine reads), one file per day and export run, named by the ids it holds;
//! and removing erased threads from files written before.

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use arrow_array::{Array, BooleanArray, RecordBatch, StringArray};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use threadstream_domain::StoredEvent;
use threadstream_projections::iso_millis;

use super::columns::TableWriter;
use super::finish_file;
use super::manifest::EventsFile;
use super::tables::{self, Table};
use crate::AuditError;

const DAY_MS: i64 = 86_400_000;

/// A day's file being written.
struct DayFile {
    folder: PathBuf,
    tmp: PathBuf,
    writer: TableWriter<BufWriter<File>>,
    first_id: i64,
    last_id: i64,
    threads: HashSet<String>,
}

/// A file written and renamed into place.
pub struct WrittenFile {
    pub path: PathBuf,
    pub rows: u64,
    pub first_id: i64,
    pub last_id: i64,
    /// The threads it holds rows of.
    pub threads: HashSet<String>,
}

/// The events of one export run, split by day. Events come in id order, which is nearly time
/// order, so few days are open at once.
pub struct DayPartitions {
    root: PathBuf,
    /// By day number since the epoch.
    open: BTreeMap<i64, DayFile>,
}

impl DayPartitions {
    pub fn new(root: PathBuf) -> Self {
        DayPartitions {
            root,
            open: BTreeMap::new(),
        }
    }

    pub fn push(&mut self, e: &StoredEvent) -> Result<(), AuditError> {
        let day = e.ts.div_euclid(DAY_MS);
        let file = match self.open.entry(day) {
            std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => {
                let date = &iso_millis(day * DAY_MS)[..10];
                let folder = self.root.join(format!("date={date}"));
                std::fs::create_dir_all(&folder)?;
                let tmp = folder.join(format!("part-{}.parquet.tmp", e.id));
                let out = BufWriter::new(File::create(&tmp)?);
                v.insert(DayFile {
                    folder,
                    tmp,
                    writer: TableWriter::new(Table::Events.columns(), out)?,
                    first_id: e.id,
                    last_id: e.id,
                    threads: HashSet::new(),
                })
            }
        };
        tables::event_row(file.writer.row(), e);
        file.writer.row_done()?;
        file.last_id = e.id;
        if !file.threads.contains(e.thread_id.as_str()) {
            file.threads.insert(e.thread_id.clone());
        }
        Ok(())
    }

    /// Closes every file and renames it to `part-FIRST-LAST.parquet`; oldest day first.
    pub fn finish(self) -> Result<Vec<WrittenFile>, AuditError> {
        let mut done = Vec::new();
        for f in self.open.into_values() {
            let (out, rows) = f.writer.finish()?;
            finish_file(out)?;
            let path = f
                .folder
                .join(format!("part-{}-{}.parquet", f.first_id, f.last_id));
            std::fs::rename(&f.tmp, &path)?;
            done.push(WrittenFile {
                path,
                rows,
                first_id: f.first_id,
                last_id: f.last_id,
                threads: f.threads,
            });
        }
        Ok(done)
    }
}

/// Rewrites the files that hold rows of `threads` without them (a file left empty is removed);
/// returns the files as they are now.
pub fn remove_threads(
    dir: &Path,
    files: Vec<EventsFile>,
    threads: &HashSet<&str>,
) -> Result<Vec<EventsFile>, AuditError> {
    let mut kept = Vec::with_capacity(files.len());
    for mut f in files {
        let path = dir.join(&f.path);
        let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(&path)?)?;
        let schema = reader.schema().clone();
        let mut batches = Vec::new();
        let mut removed = 0;
        for batch in reader.build()? {
            let batch = batch.map_err(|e| AuditError::Parquet(e.to_string()))?;
            let keep = rows_not_of(&batch, threads)?;
            removed += keep.false_count();
            batches.push(
                arrow_select::filter::filter_record_batch(&batch, &keep)
                    .map_err(|e| AuditError::Parquet(e.to_string()))?,
            );
        }
        if removed == 0 {
            kept.push(f);
            continue;
        }
        f.rows -= removed as u64;
        if f.rows == 0 {
            std::fs::remove_file(&path)?;
            continue;
        }
        let tmp = path.with_extension("parquet.tmp");
        let mut writer = ArrowWriter::try_new(
            BufWriter::new(File::create(&tmp)?),
            schema,
            Some(super::columns::properties()),
        )?;
        for b in batches.iter().filter(|b| b.num_rows() > 0) {
            writer.write(b)?;
        }
        finish_file(writer.into_inner()?)?;
        std::fs::rename(&tmp, &path)?;
        kept.push(f);
    }
    Ok(kept)
}

/// `true` for the rows whose `thread` is not one of `threads`.
fn rows_not_of(batch: &RecordBatch, threads: &HashSet<&str>) -> Result<BooleanArray, AuditError> {
    let column = batch
        .column_by_name("thread")
        .and_then(|c| c.as_any().downcast_ref::<StringArray>())
        .ok_or_else(|| AuditError::Parquet("an events file without a thread column".into()))?;
    Ok((0..column.len())
        .map(|i| Some(column.is_null(i) || !threads.contains(column.value(i))))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: i64, thread: &str, ts: i64) -> StoredEvent {
        StoredEvent {
            id,
            thread_id: thread.into(),
            seq: id,
            run_id: String::new(),
            agent_id: String::new(),
            event_type: "thread-created".into(),
            payload: "{}".into(),
            ts,
            response_id: None,
            user_id: None,
        }
    }

    #[test]
    fn events_split_by_utc_day_and_erased_threads_leave_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut days = DayPartitions::new(dir.path().join("events"));
        // 2026-12-01T23:59:59.999Z, then the next day.
        let midnight = 1_796_169_600_000;
        for (id, thread, ts) in [
            (1, "a", midnight - 1),
            (2, "b", midnight),
            (3, "a", midnight + 5),
        ] {
            days.push(&event(id, thread, ts)).unwrap();
        }
        let written = days.finish().unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|f| {
                f.path
                    .strip_prefix(dir.path())
                    .unwrap()
                    .display()
                    .to_string()
            })
            .collect();
        assert_eq!(
            names,
            [
                "events/date=2026-12-01/part-1-1.parquet",
                "events/date=2026-12-02/part-2-3.parquet"
            ]
        );
        assert_eq!(written[1].threads, HashSet::from(["a".into(), "b".into()]));

        let files: Vec<EventsFile> = written
            .iter()
            .map(|f| EventsFile {
                path: f
                    .path
                    .strip_prefix(dir.path())
                    .unwrap()
                    .display()
                    .to_string(),
                rows: f.rows,
                first_id: f.first_id,
                last_id: f.last_id,
            })
            .collect();
        let kept = remove_threads(dir.path(), files, &HashSet::from(["a"])).unwrap();
        assert_eq!(kept.len(), 1, "the first day held only `a`: removed");
        assert_eq!(kept[0].rows, 1);
        assert!(!written[0].path.exists());
        let reader =
            ParquetRecordBatchReaderBuilder::try_new(File::open(&written[1].path).unwrap())
                .unwrap();
        let batches: Vec<RecordBatch> = reader.build().unwrap().map(Result::unwrap).collect();
        let keep = rows_not_of(&batches[0], &HashSet::from(["a"])).unwrap();
        assert_eq!((batches[0].num_rows(), keep.false_count()), (1, 0));
    }
}
