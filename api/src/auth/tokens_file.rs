//! The tokens file: bearer tokens by their sha256, each with its user and role, re-read when
//! the file changes so tokens are added and revoked without a restart (format in
//! `docs/security.md`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use serde::Deserialize;

use super::Role;

/// `{"tokens": [{"sha256": "<hex>", "user": "alice", "role": "user|admin|ingest",
/// "threads": [...]}]}`; `threads` only (and required) for `ingest`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensDoc {
    tokens: Vec<TokenEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    sha256: String,
    user: String,
    #[serde(default = "default_role")]
    role: String,
    #[serde(default)]
    threads: Option<Vec<String>>,
}

fn default_role() -> String {
    "user".into()
}

/// Parses the tokens file's text into `sha256 → (user, role)`. Errors name the entry, never a
/// hash (the hashes are not secret, but the file is nobody else's business).
pub(super) fn parse_tokens(text: &str) -> Result<HashMap<String, (String, Role)>, String> {
    let doc: TokensDoc = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let mut out = HashMap::new();
    for (i, t) in doc.tokens.into_iter().enumerate() {
        let hash = t.sha256.to_ascii_lowercase();
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "tokens[{i}].sha256 must be 64 hex digits (threadstream token hash)"
            ));
        }
        if t.user.trim().is_empty() {
            return Err(format!("tokens[{i}].user must not be empty"));
        }
        let role = match (t.role.as_str(), t.threads) {
            ("user", None) => Role::User,
            ("admin", None) => Role::Admin,
            ("ingest", Some(threads)) => Role::Ingest {
                threads: Arc::new(threads.into_iter().collect()),
            },
            ("ingest", None) => {
                return Err(format!("tokens[{i}]: an ingest token needs `threads`"))
            }
            ("user" | "admin", Some(_)) => {
                return Err(format!("tokens[{i}]: only ingest tokens take `threads`"))
            }
            (other, _) => {
                return Err(format!(
                    "tokens[{i}].role must be user, admin or ingest, not {other:?}"
                ))
            }
        };
        if out.insert(hash, (t.user, role)).is_some() {
            return Err(format!("tokens[{i}]: the same token is listed twice"));
        }
    }
    Ok(out)
}

/// What identifies a version of the file: a rewrite, an edit or an atomic rename changes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(path: &Path) -> std::io::Result<FileStamp> {
    let m = std::fs::metadata(path)?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&m);
    #[cfg(not(unix))]
    let inode = 0;
    Ok(FileStamp {
        modified: m.modified().ok(),
        len: m.len(),
        inode,
    })
}

pub(super) type TokenTable = Arc<HashMap<String, (String, Role)>>;

/// The tokens file, re-read whenever its stamp changes (checked on each use: one `stat`), so
/// tokens are added and revoked without a restart. A file that stops parsing keeps the last good
/// table and logs why.
pub(super) struct TokensFile {
    path: PathBuf,
    loaded: RwLock<(FileStamp, TokenTable)>,
}

impl TokensFile {
    pub(super) fn open(path: &Path) -> anyhow::Result<Self> {
        let st = stamp(path)
            .map_err(|e| anyhow::anyhow!("cannot read the tokens file {}: {e}", path.display()))?;
        let text = std::fs::read_to_string(path)?;
        let table = parse_tokens(&text)
            .map_err(|e| anyhow::anyhow!("tokens file {}: {e}", path.display()))?;
        Ok(TokensFile {
            path: path.to_path_buf(),
            loaded: RwLock::new((st, Arc::new(table))),
        })
    }

    pub(super) fn table(&self) -> TokenTable {
        let current = stamp(&self.path).ok();
        {
            let loaded = self.loaded.read().unwrap_or_else(|e| e.into_inner());
            if current.as_ref().is_none_or(|s| *s == loaded.0) {
                return loaded.1.clone();
            }
        }
        let st = current.expect("checked above");
        let mut loaded = self.loaded.write().unwrap_or_else(|e| e.into_inner());
        if st == loaded.0 {
            return loaded.1.clone();
        }
        match std::fs::read_to_string(&self.path)
            .map_err(|e| e.to_string())
            .and_then(|t| parse_tokens(&t))
        {
            Ok(table) => {
                tracing::info!(path = %self.path.display(), tokens = table.len(), "reloaded the tokens file");
                *loaded = (st, Arc::new(table));
            }
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "the tokens file does not parse; keeping the previous tokens");
                // Do not re-read the same broken version on every request.
                loaded.0 = st;
            }
        }
        loaded.1.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::hash_token;

    #[test]
    fn tokens_file_entries_are_checked() {
        let h = hash_token("t");
        let ok = format!(
            r#"{{"tokens":[{{"sha256":"{h}","user":"a"}},{{"sha256":"{}","user":"b","role":"ingest","threads":["x"]}}]}}"#,
            hash_token("u")
        );
        let t = parse_tokens(&ok).unwrap();
        assert_eq!(t[&h], ("a".to_string(), Role::User));
        for (bad, why) in [
            (r#"{"tokens":[{"sha256":"xyz","user":"a"}]}"#, "64 hex"),
            (
                &format!(r#"{{"tokens":[{{"sha256":"{h}","user":"a","role":"root"}}]}}"#),
                "role must be",
            ),
            (
                &format!(r#"{{"tokens":[{{"sha256":"{h}","user":"a","role":"ingest"}}]}}"#),
                "needs `threads`",
            ),
            (
                &format!(r#"{{"tokens":[{{"sha256":"{h}","user":""}}]}}"#),
                "must not be empty",
            ),
        ] {
            let e = parse_tokens(bad).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }
}
