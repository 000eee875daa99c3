//! The web page in a real browser: starts the real server and runs
//! `node tests/browser/ui.mjs <base> <screenshot-dir>` (playwright-core driving Debian's
//! headless Chromium): a demo run whose tree grows, a denied and an approved confirmation, a
//! message edited and resent (a fork of the thread), agent activity in words (tool lines, plan
//! changes, folded sub-agents, marked denials, SVG icons, a header that never covers content),
//! following the bottom only while the reader is there, Esc to stop, hostile Markdown shown as
//! text and a provider error on its run, a reload mid-run compared with an uninterrupted run, the
//! audit view (coalesced deltas, filters, search, NDJSON, links into the chat, a 10,000-event
//! thread's first screen and scrolling measured), a phone-sized screen, dark mode, no emoji font. Screenshots land in `target/browser-screenshots/` (CI artifacts).
//!
//! Also checks what the binary serves at `/` and `/assets/*` (types, CSP, no inline script),
//! and that `api/web/dist/` is what the pinned esbuild builds from `api/web/`.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// node_modules installed by `tests/conformance/install.sh`; fail (not skip) when absent.
fn require_installed(dir: &Path, package: &str) {
    assert!(
        dir.join("node_modules").join(package).exists(),
        "{package} is not installed under {}: run tests/conformance/install.sh",
        dir.display()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn page_and_assets_are_served_with_csp() {
    let s = Server::start().await;
    let client = reqwest::Client::new();
    for (path, ty) in [
        ("/", "text/html"),
        ("/assets/app.js", "text/javascript"),
        ("/assets/style.css", "text/css"),
    ] {
        let r = client.get(s.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let h = r.headers();
        assert!(
            h["content-type"].to_str().unwrap().starts_with(ty),
            "{path}: {h:?}"
        );
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("default-src 'self'"), "{path}: {csp}");
        let etag = h["etag"].clone();
        // Revalidation: the same ETag answers 304.
        let again = client
            .get(s.url(path))
            .header("if-none-match", etag)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 304, "{path}");
    }
    let html = client
        .get(s.url("/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // CSP forbids inline script: every <script> must load a file.
    for tag in html.split("<script").skip(1) {
        assert!(
            tag.trim_start()
                .starts_with("type=\"module\" src=\"/assets/"),
            "inline script: {tag}"
        );
    }
    let missing = client.get(s.url("/assets/nope.js")).send().await.unwrap();
    assert_eq!(missing.status(), 404);
}

/// The committed bundle must be what the pinned esbuild builds from the sources.
#[test]
fn committed_bundle_is_fresh() {
    let web = repo().join("api/web");
    require_installed(&web, "esbuild");
    let out = tempfile::tempdir().unwrap();
    let status = Command::new("node")
        .arg(web.join("build.mjs"))
        .arg(out.path())
        .status()
        .expect("run node (Node 20+ is required)");
    assert!(status.success(), "api/web/build.mjs failed");
    for f in [
        "index.html",
        "app.js",
        "style.css",
        "api-docs.html",
        "api-docs.js",
    ] {
        let built = std::fs::read(out.path().join(f)).unwrap();
        let committed = std::fs::read(web.join("dist").join(f)).unwrap();
        assert!(
            built == committed,
            "api/web/dist/{f} is stale: run `cd api/web && npm ci && node build.mjs` and commit dist/"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_page_in_headless_chromium() {
    assert!(
        Path::new("/usr/bin/chromium").exists(),
        "/usr/bin/chromium is missing: install it with `apt-get install -y chromium` \
         (tests/conformance/install.sh does)"
    );
    let dir = repo().join("tests/browser");
    require_installed(&dir, "playwright-core");
    let s = Server::start_with(Opts {
        // 2,000 deltas of the `long` answer at 5 ms: ~10 s, time enough to reload mid-run.
        demo_delay_ms: 5,
        ..Opts::default()
    })
    .await;
    let shots = repo().join("target/browser-screenshots");
    let base = s.base.clone();
    let out = bounded(
        180,
        tokio::process::Command::new("node")
            .arg(dir.join("ui.mjs"))
            .arg(&base)
            .arg(&shots)
            .current_dir(&dir)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "browser test failed\nstdout:\n{stdout}\nstderr:\n{stderr}\nserver logs:\n{}",
        s.logs()
    );
    for step in [
        "load",
        "tree-and-deny",
        "approve",
        "readable-activity",
        "edit-and-resend",
        "stop",
        "hostile-markdown-and-error",
        "reload",
        "timeline",
        "phone",
        "rename-delete",
        "question-wizard",
        "audit-link-to-chat",
        "conflict-409",
        "audit-10k",
        "analytics",
        "dark-mode-no-emoji-font",
        "accessibility",
    ] {
        assert!(
            stdout.contains(&format!("STEP {step} ok")),
            "step {step} did not run:\n{stdout}"
        );
    }
    assert!(stdout.contains("ALL OK"), "{stdout}");
    // The figures the script measured (visible with --nocapture).
    println!("{stdout}");
    analytics_page_matches_the_cli(&s, &stdout).await;
    for f in [
        "tree.png",
        "confirmation.png",
        "activity.png",
        "chat-dark.png",
        "audit.png",
        "audit-link.png",
        "audit-10k.png",
        "analytics.png",
        "phone.png",
    ] {
        assert!(shots.join(f).exists(), "no screenshot {f}");
    }
}

/// The analytics page showed (one entry per figure: `caption|row|column` → text) what
/// `threadstream analytics --format summary` computes for the same range, figure for figure.
async fn analytics_page_matches_the_cli(s: &Server, stdout: &str) {
    use serde_json::Value;
    use std::collections::BTreeMap;
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("ANALYTICS-FIGURES "))
        .expect("the script printed the analytics figures");
    let page: Value = serde_json::from_str(line).unwrap();
    let from = page["from"].as_str().unwrap();
    let to = page["toExclusive"].as_str().unwrap().to_string();
    let mut args = vec![
        "analytics".to_string(),
        "--format".into(),
        "summary".into(),
        "--from".into(),
        from.to_string(),
        "--to".into(),
        to,
        "--user".into(),
        "local".into(),
        "--data-dir".into(),
        s.data_dir().display().to_string(),
    ];
    if let Some(url) = &s.database_url {
        args.push("--database-url".into());
        args.push(url.clone());
    }
    let mut cmd = tokio::process::Command::new(BIN);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("THREADSTREAM_") {
            cmd.env_remove(&k);
        }
    }
    let out = cmd
        .args(&args)
        .env_remove("DATABASE_URL")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("run threadstream analytics");
    assert!(
        out.status.success(),
        "threadstream analytics: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cli: Value = serde_json::from_slice(&out.stdout).unwrap();
    let n = |v: &Value| match v {
        Value::Null => "–".to_string(),
        v => v.to_string(),
    };
    let mut want: BTreeMap<String, String> = BTreeMap::new();
    let per_day = cli["runsPerDayByStatus"].as_object().unwrap();
    let statuses: std::collections::BTreeSet<&String> = per_day
        .values()
        .flat_map(|m| m.as_object().unwrap().keys())
        .collect();
    for (d, m) in per_day {
        for st in &statuses {
            let v = m.get(st.as_str()).cloned().unwrap_or(Value::from(0));
            want.insert(format!("Runs per day by status|{d}|{st}"), n(&v));
        }
    }
    for (d, models) in cli["tokensPerDayByModel"].as_object().unwrap() {
        for (m, t) in models.as_object().unwrap() {
            want.insert(
                format!("Tokens per day by model|{d}/{m}|Input"),
                n(&t["inputTokens"]),
            );
            want.insert(
                format!("Tokens per day by model|{d}/{m}|Output"),
                n(&t["outputTokens"]),
            );
        }
    }
    for (key, p50, p95) in [
        ("duration", "p50Ms", "p95Ms"),
        ("ttft", "ttftP50Ms", "ttftP95Ms"),
    ] {
        want.insert(format!("Latency (ms)|{key}|p50"), n(&cli[p50]));
        want.insert(format!("Latency (ms)|{key}|p95"), n(&cli[p95]));
    }
    for t in cli["tools"].as_array().unwrap() {
        let tool = t["tool"].as_str().unwrap();
        want.insert(
            format!("Tool calls and errors|{tool}|Calls"),
            n(&t["calls"]),
        );
        want.insert(
            format!("Tool calls and errors|{tool}|Errors"),
            n(&t["errors"]),
        );
    }
    for k in ["approved", "denied", "timedOut", "asked"] {
        want.insert(
            format!("Confirmations|{k}|Count"),
            n(&cli["confirmations"][k]),
        );
    }
    for t in cli["topThreads"].as_array().unwrap() {
        let id = t["threadId"].as_str().unwrap();
        want.insert(
            format!("Top threads by events|{id}|Events"),
            n(&t["events"]),
        );
        want.insert(format!("Top threads by events|{id}|Runs"), n(&t["runs"]));
    }
    let shown: BTreeMap<String, String> = page["figures"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect();
    assert!(
        cli["runs"].as_u64().unwrap() > 10,
        "too few runs to compare: {cli}"
    );
    assert_eq!(
        shown, want,
        "the analytics page and `threadstream analytics` differ"
    );
    println!(
        "analytics page = CLI: {} figures, {} runs",
        want.len(),
        cli["runs"]
    );
}
