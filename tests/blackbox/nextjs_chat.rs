//! docs/integrations.md's `useChat` page as written (issue #36 part 4): the test copies the
//! snippet unchanged into a minimal Next.js app (tests/conformance/nextjs/: pinned `next`,
//! `react`, `react-dom`, `@ai-sdk/react` for `ai` 7.0.173; its next.config rewrites
//! `/api/chat` and `/api/chat/*` to the test's server, so threadstream is same-origin), runs
//! `next build` (offline: in a network namespace of its own) and `next start` with no
//! telemetry, and drives the page in Debian's headless
//! Chromium (nextjs/drive.mjs): a message typed and its answer seen streaming in, a reload
//! mid-run that resumes the same message (`resume: true`), a second message on the same chat.

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

use crate::ai_sdk::log_of;

/// The snippet of docs/integrations.md's "The AI SDK's useChat" section, as written.
fn snippet() -> String {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/integrations.md"),
    )
    .expect("docs/integrations.md");
    let section = doc
        .split("\n## The AI SDK's useChat\n")
        .nth(1)
        .expect("the useChat section");
    let code = section
        .split("```tsx\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```\n").next())
        .expect("a tsx block in the useChat section");
    assert!(
        code.lines().count() < 20,
        "the page is to stay under 20 lines:\n{code}"
    );
    format!("{code}\n")
}

/// A free loopback port (bound, then released for `next start`).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The text of `run`'s own agent (not its sub-agents'): what the page shows.
fn run_text(log: &[Value], run: &str) -> String {
    let root = log
        .iter()
        .find(|e| e["run"] == run && e["type"] == "run-start")
        .map(|e| e["agent"].clone())
        .expect("the run's run-start");
    log.iter()
        .filter(|e| e["run"] == run && e["type"] == "text-delta" && e["agent"] == root)
        .map(|e| e["payload"]["text"].as_str().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_use_chat_page_streams_resumes_after_a_reload_and_goes_on() {
    bounded(600, async {
        let dir = conformance_dir().join("nextjs");
        assert!(
            dir.join("node_modules/next").exists()
                && dir.join("node_modules/@ai-sdk/react").exists(),
            "the Next.js app's packages are missing: bash tests/conformance/install.sh"
        );
        assert!(
            std::path::Path::new("/usr/bin/chromium").exists(),
            "Chromium is missing: bash tests/conformance/install.sh"
        );
        // The first message says `long`: 2,000 text deltas, 5 ms apart, so the reload lands
        // while the run is live.
        let s = Server::start_with(Opts {
            demo_delay_ms: 5,
            extra_args: vec!["--sample-workflows".into(), "false".into()],
            ..Opts::default()
        })
        .await;
        std::fs::write(dir.join("app/chat.tsx"), snippet()).unwrap();
        // Rewrites are fixed at build time: build with this server's address.
        let env = [
            ("THREADSTREAM_URL", s.base.as_str()),
            ("NEXT_TELEMETRY_DISABLED", "1"),
        ];
        let started = Instant::now();
        // In a network namespace of its own: the build must need nothing from outside.
        let build = tokio::process::Command::new("unshare")
            .arg("--net")
            .arg(dir.join("node_modules/.bin/next"))
            .arg("build")
            .envs(env)
            .current_dir(&dir)
            .output()
            .await
            .expect("next build");
        let build_secs = started.elapsed().as_secs_f64();
        assert!(
            build.status.success(),
            "next build failed:\n{}\n{}",
            String::from_utf8_lossy(&build.stdout),
            String::from_utf8_lossy(&build.stderr)
        );
        eprintln!("next build: {build_secs:.1} s");
        let port = free_port();
        let _next = tokio::process::Command::new(dir.join("node_modules/.bin/next"))
            .args(["start", "-H", "127.0.0.1", "-p", &port.to_string()])
            .envs(env)
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("next start");
        let next_base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(60);
        while reqwest::get(format!("{next_base}/?thread=probe"))
            .await
            .map(|r| r.status().as_u16())
            .ok()
            != Some(200)
        {
            assert!(
                Instant::now() < deadline,
                "next start did not serve the page in 60 s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        let thread = "nextjs-chat";
        let out = tokio::process::Command::new("node")
            .arg(dir.join("drive.mjs"))
            .args([next_base.as_str(), thread])
            .env(
                "SCREENSHOT",
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/nextjs-chat.png"),
            )
            .current_dir(&dir)
            .output()
            .await
            .expect("node drive.mjs");
        assert!(
            out.status.success(),
            "drive.mjs failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            s.logs()
        );
        let out: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "drive.mjs printed no JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        assert_eq!(out["errors"], serde_json::json!([]), "page errors: {out}");

        let log = log_of(&s, thread).await;
        let runs: Vec<&str> = log
            .iter()
            .filter(|e| e["type"] == "run-start")
            .map(|e| e["run"].as_str().unwrap())
            .collect();
        assert_eq!(runs.len(), 2, "one run per message typed: {out}");
        let (first, second) = (run_text(&log, runs[0]), run_text(&log, runs[1]));
        assert!(!first.is_empty() && !second.is_empty());

        // Typed and streamed: the page showed the user's message and the answer growing.
        let before = &out["beforeReload"];
        assert_eq!(
            before["user"],
            serde_json::json!(["Give me a long answer"]),
            "{out}"
        );
        let lengths = before["lengths"].as_array().unwrap();
        assert!(
            lengths.len() >= 3,
            "the answer was not seen streaming: {out}"
        );
        let partial = before["assistant"][0].as_str().unwrap();
        assert!(
            partial.len() < first.len() && first.starts_with(partial),
            "the reload came after the run's end, or the page showed other text: {out}"
        );

        // The reload resumed: the stream route answered 200 and the page ends with the whole
        // message (replayed from its start, then live), as the log holds it.
        let after = &out["afterReload"];
        assert_eq!(after["status"], 200, "{out}");
        assert_eq!(after["assistant"], serde_json::json!([first]), "{out}");

        // The chat goes on after the resume.
        let more = &out["second"];
        assert_eq!(
            more["user"],
            serde_json::json!(["Build me a workflow"]),
            "{out}"
        );
        assert_eq!(
            more["assistant"],
            serde_json::json!([first, second]),
            "{out}"
        );
        let posts = out["chatResponses"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["method"] == "POST")
            .count();
        assert_eq!(posts, 2, "{out}");
    })
    .await
}
