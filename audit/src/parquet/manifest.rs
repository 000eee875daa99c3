//! `_manifest.json`, what an export directory holds: the selection, the id the log was read
//! through, every events file with its rows, the derived tables, and one entry per export run.
//! `--since-id` continues from it; readers can use it to see what is complete.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::export::Selection;
use crate::AuditError;

/// The manifest's file name in an export directory.
pub const MANIFEST: &str = "_manifest.json";

/// The layout this code writes; another value is refused rather than misread.
pub const FORMAT: &str = "threadstream-parquet/1";

/// One events file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventsFile {
    /// Relative to the export directory, `/`-separated.
    pub path: String,
    pub rows: u64,
    pub first_id: i64,
    pub last_id: i64,
}

/// One derived table's file (rewritten by every export).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TableFile {
    pub path: String,
    pub rows: u64,
}

/// One run of `export --format parquet` into the directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportRun {
    /// UTC, RFC 3339.
    pub at: String,
    /// Events with a larger id were written by this run…
    pub since_id: i64,
    /// …up to this one: the log was read through it.
    pub last_id: i64,
    pub events: u64,
    /// Threads erased since the previous run, whose rows this run removed (for the first run:
    /// those erased while it read the log).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub erased_threads: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub format: String,
    pub selection: Selection,
    /// The log was read through this id: every selected event up to it is in `files`, except
    /// those at or below the first run's `sinceId`.
    pub last_id: i64,
    pub files: Vec<EventsFile>,
    /// Derived tables by name.
    pub tables: BTreeMap<String, TableFile>,
    pub exports: Vec<ExportRun>,
}

impl Manifest {
    pub fn new(selection: Selection) -> Self {
        Manifest {
            format: FORMAT.into(),
            selection,
            last_id: 0,
            files: Vec::new(),
            tables: BTreeMap::new(),
            exports: Vec::new(),
        }
    }

    /// The directory's manifest, `None` when it has none.
    pub fn read(dir: &Path) -> Result<Option<Manifest>, AuditError> {
        let path = dir.join(MANIFEST);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let m: Manifest = serde_json::from_str(&text).map_err(|e| {
            AuditError::Invalid(format!("{} is not an export manifest: {e}", path.display()))
        })?;
        if m.format != FORMAT {
            return Err(AuditError::Invalid(format!(
                "{} has format '{}'; this version writes '{FORMAT}'",
                path.display(),
                m.format
            )));
        }
        Ok(Some(m))
    }

    /// Writes the manifest atomically (a temporary file renamed over it): a reader or a later
    /// export sees the old one or the new one, never half of one.
    pub fn write(&self, dir: &Path) -> Result<(), AuditError> {
        let tmp = dir.join(format!("{MANIFEST}.tmp"));
        let text = serde_json::to_string_pretty(self).expect("a manifest serializes");
        std::fs::write(&tmp, text + "\n")?;
        std::fs::rename(&tmp, dir.join(MANIFEST))?;
        Ok(())
    }
}
