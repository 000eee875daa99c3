//! The audit, replay and analytics tools on the stores the black-box scenario leaves
//! behind: `export` / `GET …/export`, `import` (SQLite → Postgres migration), `verify` (clean,
//! then corrupted), `replay` (NDJSON and SSE), analytics (HTTP JSON/CSV and the CLI), and
//! `projections rebuild --name` while the server serves.

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

const THREADS: [&str; 4] = ["au-approve", "au-deny", "au-ingest", "au-renamed"];

/// A scenario touching every kind of event: runs approved and denied (confirmations, sub-agents,
/// workflow streams, token usage of the demo model), an ingested run with a tool error and a
/// sub-agent, a renamed thread.
async fn scenario(s: &Server) {
    let run = s.chat("au-approve", "tidy my workflows").await;
    s.follow_run("au-approve", &run, |_| {
        Some(json!({"kind": "approval", "approved": true}))
    })
    .await;
    let run = s.chat("au-deny", "delete the old one").await;
    s.follow_run("au-deny", &run, |_| {
        Some(json!({"kind": "approval", "approved": false}))
    })
    .await;
    s.ingest_ok(
        "au-ingest",
        &[
            run_start("ri1", "oi"),
            ev("reasoning-delta", "ri1", "oi", json!({"text": "hmm"})),
            ev(
                "tool-call",
                "ri1",
                "oi",
                json!({"toolCallId": "tc1", "toolName": "delegate", "args": {}}),
            ),
            ev(
                "agent-spawned",
                "ri1",
                "si",
                json!({"parentId": "oi", "role": "builder", "tools": ["a"]}),
            ),
            text_delta("ri1", "si", "sub text"),
            ev(
                "agent-completed",
                "ri1",
                "si",
                json!({"role": "builder", "result": "ok"}),
            ),
            ev(
                "tool-result",
                "ri1",
                "oi",
                json!({"toolCallId": "tc1", "result": "ok"}),
            ),
            ev(
                "tool-call",
                "ri1",
                "oi",
                json!({"toolCallId": "tc2", "toolName": "list-workflows", "args": {}}),
            ),
            ev(
                "tool-error",
                "ri1",
                "oi",
                json!({"toolCallId": "tc2", "error": "boom"}),
            ),
            text_delta("ri1", "oi", "all done"),
            run_finish("ri1", "oi", "completed"),
        ],
    )
    .await;
    s.post(
        "/instance-ai/threads",
        &json!({"threadId": "au-renamed", "title": "First"}),
    )
    .await
    .ok_json("create");
    let run = s.chat("au-renamed", "hello").await;
    s.follow_run("au-renamed", &run, |_| {
        Some(json!({"kind": "approval", "approved": true}))
    })
    .await;
    s.patch(
        "/instance-ai/threads/au-renamed",
        &json!({"title": "Second"}),
    )
    .await
    .ok_json("rename");
}

/// Everything a client can read about the scenario's threads: SSE streams, messages, status,
/// the thread list and analytics.
async fn everything(s: &Server) -> Vec<(String, Value)> {
    let mut out = vec![
        ("threads".to_string(), s.threads().await),
        (
            "analytics".to_string(),
            s.get("/instance-ai/analytics/runs")
                .await
                .ok_json("analytics"),
        ),
    ];
    for t in THREADS {
        let sse = s
            .read_idle(t, Cursor::None, Duration::from_millis(700))
            .await;
        assert!(!sse.is_empty(), "{t}: empty SSE stream");
        out.push((format!("{t} sse"), json!(id_data(&sse))));
        out.push((format!("{t} messages"), s.messages(t).await));
        out.push((format!("{t} status"), s.status(t).await));
    }
    out
}

fn assert_same(a: &[(String, Value)], b: &[(String, Value)], what: &str) {
    assert_eq!(a.len(), b.len());
    for ((name, x), (_, y)) in a.iter().zip(b) {
        assert_eq!(x, y, "{what}: {name} differs");
    }
}

/// Runs one SQL statement on the server's store.
async fn exec_sql(s: &Server, sqlite: &str, postgres: &str) {
    use sqlx::Connection;
    match &s.database_url {
        None => {
            let url = format!(
                "sqlite://{}",
                s.data_dir().join("threadstream.db").display()
            );
            let mut c = sqlx::SqliteConnection::connect(&url).await.unwrap();
            sqlx::query(sqlite).execute(&mut c).await.unwrap();
            c.close().await.unwrap();
        }
        Some(url) => {
            let mut c = sqlx::PgConnection::connect(url).await.unwrap();
            sqlx::query(postgres).execute(&mut c).await.unwrap();
            c.close().await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_import_into_postgres_keeps_ids_streams_and_read_models() {
    bounded(300, async {
        let mut src = Server::start().await;
        scenario(&src).await;
        let before = everything(&src).await;
        let analytics = &before[1].1["runs"];
        assert_eq!(analytics.as_array().map(Vec::len), Some(4), "{analytics}");

        // HTTP export of one thread = CLI export of that thread.
        let http = src.get("/instance-ai/threads/au-ingest/export").await;
        assert_eq!(http.status, 200, "{}", http.text);
        assert_eq!(
            http.headers["content-type"].to_str().unwrap(),
            "application/x-ndjson"
        );
        let cli_thread = ok(
            cli_on(&src, &["export", "--thread", "au-ingest"]).await,
            "export --thread",
        );
        assert_eq!(http.text, cli_thread);
        assert_eq!(http.text.lines().count(), 12, "thread-created + 11 events");
        let first: Value = serde_json::from_str(http.text.lines().next().unwrap()).unwrap();
        for field in [
            "id", "seq", "thread", "run", "agent", "type", "payload", "ts",
        ] {
            assert!(first.get(field).is_some(), "{field} missing: {first}");
        }
        src.get("/instance-ai/threads/no-such-thread/export")
            .await
            .error(404, "export of a missing thread");
        src.get("/instance-ai/threads/workflow:x/export")
            .await
            .error(400, "export with a bad id");

        // Filters: a run, a user, a time range.
        let run_lines = ok(
            cli_on(&src, &["export", "--run", "ri1"]).await,
            "export --run",
        );
        assert_eq!(run_lines.lines().count(), 11);
        src.stop().await;
        let dump = src.data_dir().join("dump.ndjson");
        let dump_s = dump.display().to_string();
        ok(
            cli_on(&src, &["export", "--output", &dump_s]).await,
            "export",
        );
        let all = std::fs::read_to_string(&dump).unwrap();
        assert_eq!(all.lines().count() as i64, src.count_events().await);
        let mine = ok(
            cli_on(&src, &["export", "--user", "local"]).await,
            "export --user",
        );
        assert!(mine.lines().count() > 40, "the user's threads");
        assert!(mine.lines().all(|l| !l.contains("\"thread\":\"workflow:")));
        let nobody = ok(
            cli_on(&src, &["export", "--user", "nobody"]).await,
            "export --user nobody",
        );
        assert_eq!(nobody, "");
        let last_ts = serde_json::from_str::<Value>(all.lines().last().unwrap()).unwrap()["ts"]
            .as_i64()
            .unwrap();
        let tail = ok(
            cli_on(&src, &["export", "--from", &last_ts.to_string()]).await,
            "export --from",
        );
        assert!(tail.lines().count() >= 1 && tail.lines().count() < all.lines().count());

        // Import into a fresh Postgres database, then serve from it.
        let (db, url) = create_database().await;
        let imported = ok(
            cli(&[
                "import".into(),
                "--database-url".into(),
                url.clone(),
                "--input".into(),
                dump_s.clone(),
            ])
            .await,
            "import",
        );
        assert!(
            imported.contains(&format!("imported {} events", all.lines().count())),
            "{imported}"
        );
        let dst = Server::start_with(Opts {
            database_url: Some(url.clone()),
            ..Opts::default()
        })
        .await;
        assert_same(&before, &everything(&dst).await, "after import");
        let again = ok(cli_on(&dst, &["export"]).await, "export from the target");
        assert_eq!(again, all, "export → import → export is the identity");
        let report = cli_on(&dst, &["verify"]).await;
        assert!(report.ok, "{}", report.stdout);
        drop(dst);
        drop_database(db);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_refuses_what_the_rules_refuse_and_stores_nothing() {
    bounded(200, async {
        let mut src = Server::start().await;
        scenario(&src).await;
        src.stop().await;
        let all = ok(cli_on(&src, &["export"]).await, "export");
        let last: Value = serde_json::from_str(all.lines().last().unwrap()).unwrap();
        let next_id = last["id"].as_i64().unwrap() + 1;
        let ingest_lines: Vec<Value> = all
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|v| v["thread"] == "au-ingest")
            .collect();
        let next_seq = ingest_lines.len() as i64 + 1;
        let bad_cases = [
            // A result for a call that was never made, in a finished run.
            (
                json!({"id": next_id, "seq": next_seq, "thread": "au-ingest", "run": "ri1", "agent": "oi",
                       "type": "tool-result", "payload": {"toolCallId": "nope", "result": 1}, "ts": 1}),
                "refused",
            ),
            // A seq gap.
            (
                json!({"id": next_id, "seq": next_seq + 1, "thread": "au-ingest", "run": "", "agent": "",
                       "type": "thread-renamed", "payload": {"title": "x"}, "ts": 1, "user": "local"}),
                "seq",
            ),
            // An id that goes back.
            (
                json!({"id": next_id - 5, "seq": next_seq, "thread": "au-ingest", "run": "", "agent": "",
                       "type": "thread-renamed", "payload": {"title": "x"}, "ts": 1, "user": "local"}),
                "is not above",
            ),
        ];
        for (i, (bad, expect)) in bad_cases.iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("in.ndjson");
            std::fs::write(&file, format!("{all}{bad}\n")).unwrap();
            let out = cli(&[
                "import".into(),
                "--data-dir".into(),
                dir.path().join("db").display().to_string(),
                "--input".into(),
                file.display().to_string(),
            ])
            .await;
            assert!(!out.ok, "case {i}: a bad line was accepted: {}", out.stdout);
            let line_no = all.lines().count() + 1;
            assert!(
                out.stderr.contains(&format!("line {line_no}")) && out.stderr.contains(expect),
                "case {i}: {}",
                out.stderr
            );
            assert_eq!(
                sqlite_i64(&dir.path().join("db"), "SELECT count(*) FROM events").await,
                0,
                "case {i}: nothing may be stored"
            );
        }
        // Importing the same log twice: the ids are already there.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("in.ndjson");
        std::fs::write(&file, &all).unwrap();
        let args = [
            "import".to_string(),
            "--data-dir".into(),
            dir.path().join("db").display().to_string(),
            "--input".into(),
            file.display().to_string(),
        ];
        ok(cli(&args).await, "first import");
        let twice = cli(&args).await;
        assert!(!twice.ok && twice.stderr.contains("is not above"), "{}", twice.stderr);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_is_clean_after_a_scenario_and_names_what_was_corrupted() {
    bounded(200, async {
        let mut s = Server::start().await;
        scenario(&s).await;
        // A Durable Stream beside the threads: counted as one, not as a thread.
        let r = s
            .client
            .put(s.url("/v1/stream/au-stream"))
            .header("content-type", "application/json")
            .body("[1,2]")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        s.stop().await;
        let clean = cli_on(&s, &["verify"]).await;
        assert!(clean.ok, "{}\n{}", clean.stdout, clean.stderr);
        assert!(clean.stdout.contains("result: clean"), "{}", clean.stdout);
        // Threads: as many as the thread list's documents (one per thread, none per stream).
        let listed = clean
            .stdout
            .split("read model thread_list: ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or_else(|| panic!("{}", clean.stdout))
            .to_string();
        assert!(
            clean
                .stdout
                .contains(&format!(" events, {listed} threads, 1 Durable Streams, ")),
            "{}",
            clean.stdout
        );
        assert!(
            clean.stdout.contains("read model analytics: 4 documents, 0 differ"),
            "{}",
            clean.stdout
        );

        // A read-model document that no longer matches the log.
        s.store_damaged = true;
        exec_sql(
            &s,
            "UPDATE read_models SET doc = (SELECT doc FROM read_models WHERE model = 'thread_list' AND key = 'au-deny') WHERE model = 'thread_list' AND key = 'au-ingest'",
            "UPDATE read_models SET doc = (SELECT doc FROM read_models WHERE model = 'thread_list' AND key = 'au-deny') WHERE model = 'thread_list' AND key = 'au-ingest'",
        )
        .await;
        let doc = cli_on(&s, &["verify"]).await;
        assert!(!doc.ok, "{}", doc.stdout);
        assert!(
            doc.stdout
                .contains("read model 'thread_list': document \"au-ingest\" differs"),
            "{}",
            doc.stdout
        );

        // A lost event: the thread's seq has a gap and the run's rules break after it.
        exec_sql(
            &s,
            "DELETE FROM events WHERE thread_id = 'au-ingest' AND seq = 4",
            "DELETE FROM events WHERE aggregate_id = 'au-ingest' AND sequence = 4",
        )
        .await;
        let lost = cli_on(&s, &["verify"]).await;
        assert!(!lost.ok);
        assert!(
            lost.stdout.contains("thread 'au-ingest' seq 5 where 4 was next"),
            "{}",
            lost.stdout
        );
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuild_one_model_while_the_server_serves_then_switch() {
    bounded(200, async {
        let s = Server::start().await;
        scenario(&s).await;
        let good = s.messages("au-deny").await;
        // Give the projector time to store the documents.
        tokio::time::sleep(Duration::from_millis(500)).await;
        exec_sql(
            &s,
            "UPDATE read_models SET doc = (SELECT doc FROM read_models WHERE model = 'history' AND key = 'au-approve') WHERE model = 'history' AND key = 'au-deny'",
            "UPDATE read_models SET doc = (SELECT doc FROM read_models WHERE model = 'history' AND key = 'au-approve') WHERE model = 'history' AND key = 'au-deny'",
        )
        .await;
        assert_ne!(
            s.messages("au-deny").await["messages"],
            good["messages"],
            "the server serves the stored (now wrong) document"
        );
        // A document no event leads to (a key only the old model has) must not survive.
        exec_sql(
            &s,
            "INSERT INTO read_models (model, key, doc, last_id) SELECT model, 'au-ghost', doc, 1 FROM read_models WHERE model = 'history' AND key = 'au-approve'",
            "INSERT INTO read_models (model, key, doc, last_id) SELECT model, 'au-ghost', doc, 1 FROM read_models WHERE model = 'history' AND key = 'au-approve'",
        )
        .await;
        let before = cli_on(&s, &["verify"]).await;
        assert!(
            before.stdout.contains("\"au-ghost\" matches no event"),
            "{}",
            before.stdout
        );
        let out = ok(
            cli_on(&s, &["projections", "rebuild", "--name", "history"]).await,
            "rebuild --name history",
        );
        assert!(out.contains("rebuild history: "), "progress lines: {out}");
        assert!(out.contains("(100%)"), "{out}");
        assert!(
            out.contains("rebuilt read model history from ") && out.contains("switched"),
            "{out}"
        );
        assert_eq!(s.messages("au-deny").await, good, "switched to the rebuilt model");
        // The server keeps working on the switched model.
        let run = s.chat("au-deny", "once more").await;
        s.follow_run("au-deny", &run, |_| {
            Some(json!({"kind": "approval", "approved": true}))
        })
        .await;
        let unknown = cli_on(&s, &["projections", "rebuild", "--name", "nope"]).await;
        assert!(!unknown.ok && unknown.stderr.contains("history, status, thread_list, analytics"));
        // `verify` reports stored-only documents, so this also proves the ghost is gone.
        let report = cli_on(&s, &["verify"]).await;
        assert!(report.ok, "{}", report.stdout);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_re_emits_a_thread_with_its_timing_as_ndjson_and_sse() {
    bounded(200, async {
        let s = Server::start_with(Opts {
            demo_delay_ms: 10,
            ..Opts::default()
        })
        .await;
        let run = s.chat("au-replay", "tidy my workflows").await;
        s.follow_run("au-replay", &run, |_| {
            Some(json!({"kind": "approval", "approved": true}))
        })
        .await;
        let live = s
            .read_idle("au-replay", Cursor::None, Duration::from_millis(700))
            .await;
        let export = ok(
            cli_on(&s, &["export", "--thread", "au-replay"]).await,
            "export",
        );
        let fast = ok(
            cli_on(&s, &["replay", "--thread", "au-replay", "--speed", "max"]).await,
            "replay max",
        );
        assert_eq!(fast, export);
        let ts: Vec<i64> = export
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["ts"]
                    .as_i64()
                    .unwrap()
            })
            .collect();
        let span = ts.last().unwrap() - ts[0];
        assert!(span > 200, "the run took {span} ms");
        let started = Instant::now();
        let timed = ok(
            cli_on(&s, &["replay", "--thread", "au-replay", "--speed", "1"]).await,
            "replay 1",
        );
        assert_eq!(timed, export);
        assert!(
            started.elapsed() >= Duration::from_millis(span as u64),
            "replayed in {:?}, the original took {span} ms",
            started.elapsed()
        );
        // From an id on.
        let from = ts.len() / 2;
        let from_id = serde_json::from_str::<Value>(export.lines().nth(from - 1).unwrap()).unwrap()
            ["id"]
            .as_i64()
            .unwrap();
        let rest = ok(
            cli_on(
                &s,
                &[
                    "replay",
                    "--thread",
                    "au-replay",
                    "--speed",
                    "max",
                    "--from",
                    &from_id.to_string(),
                ],
            )
            .await,
            "replay --from",
        );
        assert_eq!(rest.lines().count(), ts.len() - from);

        // As SSE on a local port: the same frames as the live stream.
        let mut cmd = std::process::Command::new(BIN);
        cmd.args([
            "replay",
            "--thread",
            "au-replay",
            "--speed",
            "max",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(s.data_dir())
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info")
        .env_remove("DATABASE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        if let Some(url) = &s.database_url {
            cmd.arg("--database-url").arg(url);
        }
        let mut child = cmd.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let addr = tokio::task::spawn_blocking(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr).lines() {
                if let Some(a) = parse_listening(&line.unwrap()) {
                    return a;
                }
            }
            panic!("replay printed no listening line")
        })
        .await
        .unwrap();
        let body = reqwest::get(format!("http://{addr}/instance-ai/events/au-replay"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let other = reqwest::get(format!("http://{addr}/instance-ai/events/other"))
            .await
            .unwrap();
        // `Last-Event-ID` is read as on the server's own streams: a cursor resumes after it, a
        // blank one is no cursor, anything else is refused.
        let with_cursor = |cursor: &str| {
            reqwest::Client::new()
                .get(format!("http://{addr}/instance-ai/events/au-replay"))
                .header("last-event-id", cursor)
                .send()
        };
        let resumed = with_cursor(&from_id.to_string())
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let blank = with_cursor(" ").await.unwrap().text().await.unwrap();
        let refused = with_cursor("-1").await.unwrap();
        child.kill().unwrap();
        assert_eq!(blank, body);
        assert_eq!(refused.status().as_u16(), 400);
        assert_eq!(
            refused.json::<Value>().await.unwrap()["error"]["code"],
            "invalid_cursor"
        );
        let resumed_ids: Vec<String> = resumed
            .lines()
            .filter_map(|l| l.strip_prefix("id: "))
            .map(str::to_string)
            .collect();
        assert!(!resumed_ids.is_empty());
        assert!(
            resumed_ids
                .iter()
                .all(|id| id.parse::<i64>().unwrap() > from_id),
            "{resumed_ids:?} after {from_id}"
        );
        let _ = child.wait();
        assert_eq!(other.status().as_u16(), 404);
        let mut parser = SseParser::new();
        let mut events: Vec<SseEvent> = Vec::new();
        for item in parser
            .push(body.as_bytes())
            .into_iter()
            .chain(parser.finish())
        {
            if let SseItem::Event(e) = item {
                events.push(e);
            }
        }
        assert_eq!(id_data(&events), id_data(&live));
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn analytics_per_run_over_http_as_json_and_csv_and_on_the_command_line() {
    bounded(200, async {
        let s = Server::start().await;
        scenario(&s).await;
        let all = s
            .get("/instance-ai/analytics/runs")
            .await
            .ok_json("analytics");
        let runs = all["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 4, "{all}");
        let ingest = runs.iter().find(|r| r["runId"] == "ri1").unwrap();
        assert_eq!(ingest["status"], "completed");
        assert_eq!(
            ingest["toolCalls"],
            json!({"delegate": 1, "list-workflows": 1})
        );
        assert_eq!(ingest["toolErrors"], 1);
        assert_eq!(ingest["subAgents"], 1);
        assert_eq!(ingest["textChars"], 16);
        assert_eq!(ingest["reasoningChars"], 3);
        assert!(
            ingest.get("inputTokens").is_none(),
            "no provider usage: {ingest}"
        );
        let approved = runs.iter().find(|r| r["threadId"] == "au-approve").unwrap();
        let asked = approved["confirmationsAsked"].as_u64().unwrap();
        assert!(asked >= 1, "{approved}");
        assert_eq!(approved["confirmationsApproved"], asked, "{approved}");
        assert!(approved["inputTokens"].as_u64().unwrap() > 0, "{approved}");
        let denied = runs.iter().find(|r| r["threadId"] == "au-deny").unwrap();
        assert!(
            denied["confirmationsDenied"].as_u64().unwrap() >= 1,
            "{denied}"
        );
        assert!(denied["durationMs"].as_i64().unwrap() >= 0);

        // Time filters.
        let first_start = runs[0]["startedAt"].as_i64().unwrap();
        let later = s
            .get(&format!(
                "/instance-ai/analytics/runs?from={}",
                first_start + 1
            ))
            .await
            .ok_json("from");
        assert!(later["runs"].as_array().unwrap().len() < 4);
        let none = s
            .get("/instance-ai/analytics/runs?to=1970-01-02")
            .await
            .ok_json("to");
        assert_eq!(none["runs"], json!([]));
        s.get("/instance-ai/analytics/runs?from=yesterday")
            .await
            .error(400, "bad from");
        s.get("/instance-ai/analytics/runs?user=someone-else")
            .await
            .error(403, "another user's runs");

        // CSV.
        let csv = s
            .try_send(
                s.client
                    .get(s.url("/instance-ai/analytics/runs"))
                    .header("accept", "text/csv"),
            )
            .await
            .unwrap();
        assert_eq!(csv.status, 200);
        assert!(csv.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/csv"));
        let rows: Vec<&str> = csv.text.lines().collect();
        assert_eq!(rows.len(), 5, "{}", csv.text);
        assert!(rows[0].starts_with("threadId,runId,user,startedAt,"));
        let ri1 = rows.iter().find(|r| r.contains(",ri1,")).unwrap();
        assert!(
            ri1.contains(",completed,,2,delegate=1;list-workflows=1,1,0,0,0,1,16,3,,"),
            "{ri1}"
        );

        // The command line: the same runs, and a summary.
        let json_out = ok(
            cli_on(&s, &["analytics", "--format", "json", "--user", "local"]).await,
            "analytics json",
        );
        assert_eq!(serde_json::from_str::<Value>(&json_out).unwrap(), all);
        let text = ok(cli_on(&s, &["analytics"]).await, "analytics");
        assert!(text.contains("runs: 4 (completed "), "{text}");
        assert!(
            text.contains("duration: p50 ") && text.contains("p95 "),
            "{text}"
        );
        assert!(
            text.contains("error rate: ") && text.contains("% of finished runs"),
            "{text}"
        );
        assert!(
            text.contains("runs per day:") && text.contains("top tools:"),
            "{text}"
        );
        // The summary as JSON: the same runs, folded into the charts' figures.
        let summary: Value = serde_json::from_str(&ok(
            cli_on(&s, &["analytics", "--format", "summary", "--user", "local"]).await,
            "analytics summary",
        ))
        .unwrap();
        assert_eq!(summary["runs"], 4, "{summary}");
        let sum = |k: &str| runs.iter().map(|r| r[k].as_u64().unwrap()).sum::<u64>();
        let c = &summary["confirmations"];
        assert_eq!(c["asked"], sum("confirmationsAsked"), "{summary}");
        assert_eq!(c["approved"], sum("confirmationsApproved"), "{summary}");
        assert_eq!(c["denied"], sum("confirmationsDenied"), "{summary}");
        assert_eq!(c["timedOut"], 0, "{summary}");
        let ingest_tools = &summary["tools"];
        assert!(
            ingest_tools
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["tool"] == "list-workflows" && t["calls"].as_u64() >= Some(1)),
            "{summary}"
        );
        let top_events: u64 = summary["topThreads"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["events"].as_u64().unwrap())
            .sum();
        assert_eq!(top_events, sum("events"), "{summary}");
        let tokens = summary["tokensPerDayByModel"].as_object().unwrap();
        assert!(
            tokens
                .values()
                .any(|m| m.as_object().is_some_and(|m| !m.is_empty())),
            "the demo provider reports usage: {summary}"
        );
        assert!(summary["ttftP50Ms"].as_i64().is_some(), "{summary}");
    })
    .await
}
