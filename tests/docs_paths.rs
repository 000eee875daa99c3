//! Every repository path that README.md and docs/*.md cite names a file or folder that exists
//! (issue #34, "Docs are current").
//!
//! Checked: markdown links to relative files (resolved from the doc's folder, `#anchor` dropped),
//! and inline code spans (outside fenced blocks) that look like repository paths:
//! - a span whose first segment is a top-level entry of the repository (`store/…`, `docs/…`,
//!   `tests/…`, `Cargo.toml`) must exist from the root;
//! - any other span ending in a known extension (`access.rs`, `chat/follow.ts`) is cited relative
//!   to a folder the text names, so it must be the tail of some path in the repository;
//! - anything else (`application/json`, `openai/gpt-4o`, `http/protobuf`) is not a path.
//!
//! Not paths either: URLs, HTTP routes (leading `/`), flags (`-`), globs, placeholders (`<…>`,
//! `{x}`, `…`), things with spaces and runtime paths (`./data`, `target/`, `node_modules`, `.venv`).
//! A `path:line` or `path::item` suffix is dropped, and `dir/{a,b}.rs` is checked as `dir/a.rs`
//! and `dir/b.rs`.

use std::fs;
use std::path::Path;

const EXTENSIONS: &[&str] = &[
    "rs", "md", "sql", "json", "toml", "sh", "mjs", "cfg", "yml", "yaml", "txt", "py", "ts", "js",
];
/// Folders that are built or installed, never committed.
const RUNTIME: &[&str] = &["target", "node_modules", ".venv", ".git"];

/// Every file and folder under `dir`, as `/`-separated paths from the root (runtime folders left out).
fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if RUNTIME.contains(&name.as_str()) {
            continue;
        }
        let relative = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        out.push(relative);
        if path.is_dir() {
            walk(root, &path, out);
        }
    }
}

/// `a/{b,c}.rs` → `a/b.rs`, `a/c.rs`; a brace group without a comma is a placeholder: nothing.
fn expand(span: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (span.find('{'), span.find('}')) else {
        return vec![span.to_string()];
    };
    let inner = &span[open + 1..close.max(open + 1)];
    if close < open || !inner.contains(',') {
        return Vec::new();
    }
    inner
        .split(',')
        .flat_map(|alt| expand(&format!("{}{alt}{}", &span[..open], &span[close + 1..])))
        .collect()
}

/// The repository paths an inline code span cites, with whether they are anchored at the root.
fn cited_paths(span: &str, top_level: &[String]) -> Vec<(String, bool)> {
    let skip_start = ["/", "-", "./", "../", "~", "$", "#", "@"];
    let skip_within = [" ", "\t", "*", "<", ">", "…", "...", "://", "?", "=", "\\"];
    if skip_start.iter().any(|s| span.starts_with(s))
        || skip_within.iter().any(|s| span.contains(s))
    {
        return Vec::new();
    }
    let span = span.split(':').next().unwrap();
    let mut paths = Vec::new();
    for path in expand(span) {
        let path = path.trim_end_matches('/');
        let segments: Vec<&str> = path.split('/').collect();
        if path.is_empty() || segments.iter().any(|s| s.is_empty() || RUNTIME.contains(s)) {
            continue;
        }
        let anchored = top_level.iter().any(|t| t == segments[0]);
        let last = segments[segments.len() - 1];
        let known = last
            .rsplit_once('.')
            .is_some_and(|(stem, ext)| !stem.is_empty() && EXTENSIONS.contains(&ext));
        if anchored || (known && !path.starts_with('.')) {
            paths.push((path.to_string(), anchored));
        }
    }
    paths
}

/// The targets of the markdown links on a line of prose: `[text](target "title")`.
fn link_targets(prose: &str) -> Vec<&str> {
    prose
        .match_indices("](")
        .filter_map(|(at, _)| prose[at + 2..].split(')').next())
        .filter_map(|target| target.split_whitespace().next())
        .map(|target| target.trim_matches(|c| c == '<' || c == '>'))
        .map(|target| target.split('#').next().unwrap())
        .filter(|target| {
            !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:")
        })
        .collect()
}

#[test]
fn docs_cite_only_paths_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut entries = Vec::new();
    walk(root, root, &mut entries);
    let top_level: Vec<String> = entries
        .iter()
        .filter(|e| !e.contains('/'))
        .cloned()
        .collect();

    let mut docs: Vec<String> = entries
        .iter()
        .filter(|e| e.starts_with("docs/") && e.ends_with(".md") && e.matches('/').count() == 1)
        .cloned()
        .collect();
    docs.sort();
    docs.push("README.md".to_string());

    let (mut missing, mut checked) = (Vec::new(), 0);
    for doc in &docs {
        let text = fs::read_to_string(root.join(doc)).unwrap();
        let doc_dir = Path::new(doc).parent().unwrap();
        let (mut in_fence, mut in_code, mut span) = (false, false, (0, String::new()));
        for (number, line) in text.lines().enumerate().map(|(i, l)| (i + 1, l)) {
            if !in_code && line.trim_start().starts_with("```") {
                in_fence = !in_fence;
            }
            if in_fence || line.trim_start().starts_with("```") {
                continue;
            }
            for (i, piece) in line.split('`').enumerate() {
                if i > 0 {
                    in_code = !in_code;
                    if in_code {
                        span = (number, String::new());
                    } else {
                        for (path, anchored) in cited_paths(&span.1, &top_level) {
                            checked += 1;
                            let exists = if anchored {
                                root.join(&path).exists()
                            } else {
                                entries
                                    .iter()
                                    .any(|e| *e == path || e.ends_with(&format!("/{path}")))
                            };
                            if !exists {
                                missing.push(format!("{doc}:{}: `{path}`", span.0));
                            }
                        }
                    }
                }
                if in_code {
                    span.1.push_str(piece);
                } else {
                    for target in link_targets(piece) {
                        checked += 1;
                        if !root.join(doc_dir).join(target).exists() {
                            missing.push(format!("{doc}:{number}: link ({target})"));
                        }
                    }
                }
            }
            if in_code {
                span.1.push('\n');
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} paths found in {} docs: is the parsing broken?",
        docs.len()
    );
    assert!(
        missing.is_empty(),
        "{} of {checked} cited paths do not exist:\n{}",
        missing.len(),
        missing.join("\n")
    );
}
