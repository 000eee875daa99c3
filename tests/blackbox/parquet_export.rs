//! `threadstream export --format parquet` and `GET /instance-ai/admin/export?format=parquet`,
//! read back the way analysts read them: DuckDB SQL and pyarrow (PyPI, pinned in
//! tests/conformance/analytics/.venv, driven by its query.py). The row count is the log's, a
//! thread's text deltas concatenated in SQL are its message history, the analytics summary
//! recomputed in SQL over `runs`, `llm_calls` and `tool_calls` is `threadstream analytics
//! --format summary`, an incremental export adds exactly the new events, and an erased thread is
//! gone from every export made after its erasure.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::*;
use serde_json::{json, Map, Value};
use tokio::io::AsyncWriteExt;

fn python() -> PathBuf {
    let py = conformance_dir().join("analytics/.venv/bin/python");
    assert!(
        py.is_file(),
        "{} is missing: run `bash tests/conformance/install.sh`",
        py.display()
    );
    py
}

/// Runs query.py on `request` (`{"sql", "schemas", "datasets"}`) and returns its answer.
async fn query(request: Value) -> Value {
    let mut child = tokio::process::Command::new(python())
        .arg(conformance_dir().join("analytics/query.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run query.py");
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(request.to_string().as_bytes())
        .await
        .unwrap();
    drop(stdin);
    let out = bounded(120, child.wait_with_output()).await.unwrap();
    assert!(
        out.status.success(),
        "query.py failed on {request}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("query.py prints JSON")
}

/// The results of each SQL statement (after `SET TimeZone = 'UTC'`, so days are UTC days).
async fn sql(statements: &[String]) -> Vec<Vec<Vec<Value>>> {
    let mut all = vec!["SET TimeZone = 'UTC'".to_string()];
    all.extend(statements.iter().cloned());
    let answer = query(json!({ "sql": all })).await;
    let mut results: Vec<Vec<Vec<Value>>> = serde_json::from_value(answer["sql"].clone()).unwrap();
    results.remove(0);
    results
}

/// The one value of a one-row, one-column result.
async fn scalar(statement: String) -> Value {
    sql(&[statement]).await[0][0][0].clone()
}

/// The `events` table of an export directory, as DuckDB reads hive partitions.
fn events(dir: &Path) -> String {
    format!(
        "read_parquet('{}/events/*/*.parquet', hive_partitioning = true)",
        dir.display()
    )
}

/// A derived table of an export directory.
fn table(dir: &Path, name: &str) -> String {
    format!("read_parquet('{}/{name}/*.parquet')", dir.display())
}

/// `threadstream export --format parquet --out DIR ARGS…` on the server's store: its report.
async fn export_parquet(s: &Server, dir: &Path, args: &[&str]) -> Value {
    let out = export_parquet_out(s, dir, args).await;
    serde_json::from_str(&ok(out, "export --format parquet")).expect("the report is JSON")
}

async fn export_parquet_out(s: &Server, dir: &Path, args: &[&str]) -> Out {
    let dir = dir.display().to_string();
    let mut full = vec!["export", "--format", "parquet", "--out", &dir];
    full.extend(args);
    cli_on(s, &full).await
}

/// Two demo runs (one approved, one denied: confirmations, tool calls, model usage), and an
/// ingested run that fails with a tool error and a sub-agent.
async fn scenario(s: &Server, prefix: &str) {
    let run = s
        .chat(&format!("{prefix}-approve"), "tidy my workflows")
        .await;
    s.follow_run(&format!("{prefix}-approve"), &run, |_| {
        Some(json!({"kind": "approval", "approved": true}))
    })
    .await;
    let run = s
        .chat(&format!("{prefix}-deny"), "delete the old one")
        .await;
    s.follow_run(&format!("{prefix}-deny"), &run, |_| {
        Some(json!({"kind": "approval", "approved": false}))
    })
    .await;
    let r = format!("{prefix}-r1");
    s.ingest_ok(
        &format!("{prefix}-ingest"),
        &[
            run_start(&r, "oi"),
            text_delta(&r, "oi", "Looking "),
            ev(
                "tool-call",
                &r,
                "oi",
                json!({"toolCallId": "tc1", "toolName": "delegate", "args": {}}),
            ),
            ev(
                "agent-spawned",
                &r,
                "si",
                json!({"parentId": "oi", "role": "builder", "tools": ["a"]}),
            ),
            text_delta(&r, "si", "sub text"),
            ev(
                "agent-completed",
                &r,
                "si",
                json!({"role": "builder", "result": "ok"}),
            ),
            ev(
                "tool-result",
                &r,
                "oi",
                json!({"toolCallId": "tc1", "result": "ok"}),
            ),
            ev(
                "tool-call",
                &r,
                "oi",
                json!({"toolCallId": "tc2", "toolName": "list-workflows", "args": {}}),
            ),
            ev(
                "tool-error",
                &r,
                "oi",
                json!({"toolCallId": "tc2", "error": "boom"}),
            ),
            text_delta(&r, "oi", "into it — \"quoted\"\nnewline ✓"),
            run_finish(&r, "oi", "error"),
        ],
    )
    .await;
}

/// A thread's messages as `(role, content)`, from the read model and from the export's text
/// deltas: the user's text, and each run's root agent's deltas concatenated in id order.
async fn messages_both_ways(s: &Server, dir: &Path, thread: &str) {
    let served = s.messages(thread).await["messages"]
        .as_array()
        .cloned()
        .expect("messages");
    let from_history: Vec<Value> = served
        .iter()
        .map(|m| json!([m["role"], m["content"]]))
        .collect();
    let e = events(dir);
    let from_sql = sql(&[format!(
        "WITH e AS (SELECT * FROM {e} WHERE thread = '{thread}'),
         roots AS (SELECT run, agent AS root, id FROM e WHERE type = 'run-start'
                   QUALIFY row_number() OVER (PARTITION BY run ORDER BY id) = 1),
         msgs AS (
           SELECT id, 'user' AS role, json_extract_string(payload, '$.text') AS content
             FROM e WHERE type = 'user-message'
           UNION ALL
           SELECT r.id, 'assistant',
                  coalesce((SELECT string_agg(json_extract_string(d.payload, '$.text'), '' ORDER BY d.id)
                              FROM e d
                             WHERE d.run = r.run AND d.agent = r.root AND d.type = 'text-delta'), '')
             FROM roots r)
         SELECT role, content FROM msgs ORDER BY id"
    )])
    .await
    .remove(0);
    let from_sql: Vec<Value> = from_sql.into_iter().map(Value::from).collect();
    assert!(!from_history.is_empty(), "{thread}: no messages");
    assert_eq!(
        from_sql, from_history,
        "{thread}: SQL over text deltas vs history"
    );
}

/// `threadstream analytics --format summary`, recomputed in SQL over the export's `runs`,
/// `llm_calls` and `tool_calls` (nearest-rank percentiles, UTC days of the runs' starts).
async fn summary_in_sql(dir: &Path) -> Value {
    let runs = table(dir, "runs");
    let llm = table(dir, "llm_calls");
    let tools = table(dir, "tool_calls");
    let day = "strftime(started_at::TIMESTAMP, '%Y-%m-%d')";
    let rank = |col: &str, p: f64| {
        format!(
            "(SELECT list_sort(list({col}))[greatest(1, ceil({p} * count({col})))::BIGINT]
                FROM {runs} WHERE {col} IS NOT NULL)"
        )
    };
    let r = sql(&[
        format!("SELECT count(*) FROM {runs}"),
        format!("SELECT status, count(*) FROM {runs} GROUP BY 1 ORDER BY 1"),
        format!("SELECT {day}, count(*) FROM {runs} GROUP BY 1 ORDER BY 1"),
        format!(
            "SELECT {}, {}, {}, {}",
            rank("duration_ms", 0.5),
            rank("duration_ms", 0.95),
            rank("first_token_ms", 0.5),
            rank("first_token_ms", 0.95)
        ),
        format!("SELECT {day}, status, count(*) FROM {runs} GROUP BY 1, 2 ORDER BY 1, 2"),
        format!(
            "SELECT strftime(r.started_at::TIMESTAMP, '%Y-%m-%d'), l.model,
                    sum(l.input_tokens), sum(l.output_tokens)
               FROM {llm} l JOIN {runs} r USING (thread, run) GROUP BY 1, 2 ORDER BY 1, 2"
        ),
        format!(
            "SELECT tool, count(called_at), count(*) FILTER (WHERE outcome = 'error')
               FROM {tools} GROUP BY tool ORDER BY 2 DESC, 1"
        ),
        format!(
            "SELECT sum(confirmations_asked), sum(confirmations_approved),
                    sum(confirmations_denied), sum(confirmations_timed_out),
                    sum(tool_errors),
                    count(*) FILTER (WHERE status = 'error') / count(duration_ms)
               FROM {runs}"
        ),
        format!(
            "SELECT thread, sum(events), count(*) FROM {runs} GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 10"
        ),
    ])
    .await;
    let pairs = |rows: &Vec<Vec<Value>>| -> Map<String, Value> {
        rows.iter()
            .map(|r| (r[0].as_str().unwrap().to_string(), r[1].clone()))
            .collect()
    };
    let mut by_day_status = Map::new();
    for row in &r[4] {
        let day = by_day_status
            .entry(row[0].as_str().unwrap())
            .or_insert_with(|| json!({}));
        day[row[1].as_str().unwrap()] = row[2].clone();
    }
    let mut tokens = Map::new();
    for row in &r[5] {
        let day = tokens
            .entry(row[0].as_str().unwrap())
            .or_insert_with(|| json!({}));
        day[row[1].as_str().unwrap()] = json!({"inputTokens": row[2], "outputTokens": row[3]});
    }
    let tool_rows = &r[6];
    let [p50, p95, ttft50, ttft95] = [0, 1, 2, 3].map(|i| r[3][0][i].clone());
    let totals = &r[7][0];
    json!({
        "runs": r[0][0][0],
        "byStatus": pairs(&r[1]),
        "perDay": pairs(&r[2]),
        "p50Ms": p50,
        "p95Ms": p95,
        "runsPerDayByStatus": by_day_status,
        "tokensPerDayByModel": tokens,
        "ttftP50Ms": ttft50,
        "ttftP95Ms": ttft95,
        "topTools": tool_rows.iter().filter(|t| t[1].as_i64() > Some(0)).take(10)
            .map(|t| json!([t[0], t[1]])).collect::<Vec<_>>(),
        "tools": tool_rows.iter().map(|t| json!({"tool": t[0], "calls": t[1], "errors": t[2]}))
            .collect::<Vec<_>>(),
        "confirmations": {
            "asked": totals[0], "approved": totals[1], "denied": totals[2], "timedOut": totals[3]
        },
        "topThreads": r[8].iter().map(|t| json!({"threadId": t[0], "events": t[1], "runs": t[2]}))
            .collect::<Vec<_>>(),
        "errorRate": totals[5],
        "toolCalls": tool_rows.iter().map(|t| t[1].as_u64().unwrap()).sum::<u64>(),
        "toolErrors": totals[4],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parquet_export_holds_the_log_its_history_and_its_analytics() {
    bounded(300, async {
        let s = Server::start().await;
        scenario(&s, "pq").await;
        let out = tempfile::tempdir().unwrap();
        let dir = out.path().join("export");
        let report = export_parquet(&s, &dir, &[]).await;
        let logged = s.count_events().await;
        assert_eq!(report["events"], logged, "{report}");
        assert_eq!(report["sinceId"], 0);

        // Every event once, as DuckDB and pyarrow read the hive-partitioned folder.
        let e = events(&dir);
        let counts = sql(&[
            format!("SELECT count(*), count(DISTINCT id), max(id) FROM {e}"),
            format!(
                "SELECT count(*) FROM {e} WHERE date <> strftime(timestamp::TIMESTAMP, '%Y-%m-%d')"
            ),
            format!("SELECT DISTINCT typeof(payload), typeof(timestamp) FROM {e}"),
        ])
        .await;
        assert_eq!(
            counts[0][0],
            vec![json!(logged), json!(logged), report["lastId"].clone()]
        );
        assert_eq!(
            counts[1][0][0], 0,
            "every row sits in the folder of its UTC day"
        );
        assert_eq!(
            counts[2],
            vec![vec![json!("JSON"), json!("TIMESTAMP WITH TIME ZONE")]]
        );
        let file = dir.join(report["files"][0]["path"].as_str().unwrap());
        let answer = query(json!({
            "schemas": [file],
            "datasets": [dir.join("events")],
        }))
        .await;
        assert_eq!(answer["datasets"][0]["rows"], logged, "{answer}");
        assert!(
            answer["datasets"][0]["columns"]
                .as_array()
                .unwrap()
                .contains(&json!("date")),
            "{answer}"
        );
        let schema: Vec<(String, String)> = answer["schemas"][0]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap().into(),
                    c["logical"].as_str().unwrap().into(),
                )
            })
            .collect();
        let names: Vec<&str> = schema.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(
            names,
            [
                "id",
                "thread",
                "seq",
                "run",
                "agent",
                "type",
                "timestamp",
                "user",
                "response_id",
                "payload"
            ]
        );
        assert_eq!(schema[9].1, "JSON", "{schema:?}");
        assert!(
            schema[6]
                .1
                .starts_with("Timestamp(isAdjustedToUTC=true, timeUnit=milliseconds"),
            "{schema:?}"
        );

        // A thread's text deltas, concatenated in SQL, are its message history.
        for thread in ["pq-approve", "pq-deny", "pq-ingest"] {
            messages_both_ways(&s, &dir, thread).await;
        }

        // The analytics summary, recomputed in SQL, is `threadstream analytics --format summary`.
        let cli: Value = serde_json::from_str(&ok(
            cli_on(&s, &["analytics", "--format", "summary"]).await,
            "analytics --format summary",
        ))
        .unwrap();
        assert_eq!(cli["runs"], 3, "{cli}");
        assert!(
            cli["toolErrors"].as_u64() > Some(0) && cli["confirmations"]["denied"] == 1,
            "{cli}"
        );
        assert_eq!(summary_in_sql(&dir).await, cli);
        let manifest: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("_manifest.json")).unwrap())
                .unwrap();
        assert_eq!(manifest["lastId"], report["lastId"]);
        assert_eq!(manifest["tables"]["runs"]["rows"], 3, "{manifest}");
    })
    .await
}

/// The ids of the log, from the NDJSON export.
async fn log_ids(s: &Server) -> Vec<i64> {
    ok(cli_on(s, &["export"]).await, "export")
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_i64()
                .unwrap()
        })
        .collect()
}

/// The ids of the events files a report lists, read with DuckDB.
async fn ids_of_files(dir: &Path, report: &Value) -> Vec<i64> {
    let files: Vec<String> = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| format!("'{}'", dir.join(f["path"].as_str().unwrap()).display()))
        .collect();
    if files.is_empty() {
        return Vec::new();
    }
    sql(&[format!(
        "SELECT id FROM read_parquet([{}]) ORDER BY id",
        files.join(", ")
    )])
    .await
    .remove(0)
    .into_iter()
    .map(|r| r[0].as_i64().unwrap())
    .collect()
}

/// Rows of `thread` in every table of the export.
async fn rows_of_thread(dir: &Path, thread: &str) -> Vec<Value> {
    let mut statements = vec![format!(
        "SELECT count(*) FROM {} WHERE thread = '{thread}'",
        events(dir)
    )];
    for name in ["runs", "llm_calls", "tool_calls", "confirmations"] {
        statements.push(format!(
            "SELECT count(*) FROM {} WHERE thread = '{thread}'",
            table(dir, name)
        ));
    }
    sql(&statements)
        .await
        .into_iter()
        .map(|r| r[0][0].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incremental_export_appends_the_new_events_and_drops_erased_threads() {
    bounded(300, async {
        let s = Server::start().await;
        scenario(&s, "inc").await;
        let out = tempfile::tempdir().unwrap();
        let dir = out.path().join("nightly");
        let first = export_parquet(&s, &dir, &[]).await;
        let last1 = first["lastId"].as_i64().unwrap();
        assert_eq!(
            rows_of_thread(&dir, "inc-deny").await[0],
            json!(ids_of_thread(&s, "inc-deny").await)
        );

        // New events: a run in a thread exported before, and a new thread.
        let run = s.chat("inc-approve", "and again").await;
        s.follow_run("inc-approve", &run, |_| {
            Some(json!({"kind": "approval", "approved": true}))
        })
        .await;
        s.ingest_ok(
            "inc-new",
            &[
                run_start("n1", "o"),
                text_delta("n1", "o", "new"),
                run_finish("n1", "o", "completed"),
            ],
        )
        .await;
        let second = export_parquet(&s, &dir, &["--since-id"]).await;
        assert_eq!(second["sinceId"], last1, "{second}");
        let new_ids: Vec<i64> = log_ids(&s)
            .await
            .into_iter()
            .filter(|id| *id > last1)
            .collect();
        assert!(new_ids.len() > 3, "{new_ids:?}");
        assert_eq!(
            ids_of_files(&dir, &second).await,
            new_ids,
            "exactly the new events"
        );
        assert_eq!(second["events"], new_ids.len());
        let logged = s.count_events().await;
        let all = sql(&[format!(
            "SELECT count(*), count(DISTINCT id) FROM {}",
            events(&dir)
        )])
        .await;
        assert_eq!(all[0][0], vec![json!(logged), json!(logged)]);
        assert_eq!(
            scalar(format!("SELECT count(*) FROM {}", table(&dir, "runs"))).await,
            5,
            "the derived tables cover every run"
        );
        // Nothing new: a run that adds no file.
        let idle = export_parquet(&s, &dir, &["--since-id"]).await;
        assert_eq!(
            (idle["events"].clone(), idle["files"].clone()),
            (json!(0), json!([]))
        );

        // Erase a thread exported before: the next incremental export removes its rows from the
        // earlier files, and a new export never has them.
        s.post("/instance-ai/admin/erase", &json!({"threadId": "inc-deny"}))
            .await
            .ok_json("erase");
        let third = export_parquet(&s, &dir, &["--since-id"]).await;
        assert_eq!(third["erasedThreads"], json!(["inc-deny"]), "{third}");
        assert_eq!(rows_of_thread(&dir, "inc-deny").await, vec![json!(0); 5]);
        let logged = s.count_events().await;
        assert_eq!(
            scalar(format!("SELECT count(*) FROM {}", events(&dir))).await,
            logged,
            "the directory holds the log as it is now"
        );
        let fresh = out.path().join("fresh");
        let report = export_parquet(&s, &fresh, &[]).await;
        assert_eq!(report["events"], logged);
        assert_eq!(
            report["erasedThreads"],
            json!([]),
            "erased before: never read"
        );
        assert_eq!(rows_of_thread(&fresh, "inc-deny").await, vec![json!(0); 5]);
        assert!(rows_of_thread(&fresh, "inc-approve")
            .await
            .iter()
            .all(|n| n.as_i64() > Some(0)));

        // Mistakes are refused with the reason, and leave the directory as it was.
        let manifest = std::fs::read_to_string(dir.join("_manifest.json")).unwrap();
        for (args, says) in [
            (vec![], "already holds an export"),
            (vec!["--since-id", "1"], "does not continue the export"),
            (
                vec!["--since-id", "--thread", "inc-new"],
                "continue it with the same filters",
            ),
            (vec!["--since-id", "x"], "is not an event id"),
            (
                vec!["--from", "2026-01-02", "--to", "2026-01-01"],
                "--from must be before --to",
            ),
        ] {
            let o = export_parquet_out(&s, &dir, &args).await;
            assert!(!o.ok && o.stderr.contains(says), "{args:?}: {}", o.stderr);
        }
        assert_eq!(
            std::fs::read_to_string(dir.join("_manifest.json")).unwrap(),
            manifest
        );
        let o = export_parquet_out(&s, out.path(), &[]).await;
        assert!(!o.ok && o.stderr.contains("is not empty"), "{}", o.stderr);
        let o = export_parquet_out(&s, &out.path().join("none"), &["--since-id"]).await;
        assert!(
            !o.ok && o.stderr.contains("has no _manifest.json"),
            "{}",
            o.stderr
        );
        for (args, says) in [
            (vec!["export", "--format", "xml"], "invalid value 'xml'"),
            (vec!["export", "--format", "parquet"], "--out"),
        ] {
            let o = cli_on(&s, &args).await;
            assert!(!o.ok && o.stderr.contains(says), "{args:?}: {}", o.stderr);
        }
    })
    .await
}

/// Events of one thread in the log.
async fn ids_of_thread(s: &Server, thread: &str) -> usize {
    ok(
        cli_on(s, &["export", "--thread", thread]).await,
        "export --thread",
    )
    .lines()
    .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_route_answers_one_table_of_a_thread_or_a_range_as_parquet() {
    bounded(300, async {
        let tokens = tempfile::tempdir().unwrap();
        let mut s = crate::auth::start_with_tokens(&tokens, &[]).await;
        s.act_as(crate::auth::TOKEN_ADMIN);
        scenario(&s, "adm").await;
        let out = tempfile::tempdir().unwrap();
        let fetch = |query: String| {
            let s = &s;
            async move {
                let resp = s
                    .client
                    .get(s.url(&format!("/instance-ai/admin/export?{query}")))
                    .send()
                    .await
                    .unwrap();
                let status = resp.status().as_u16();
                let kind = resp
                    .headers()
                    .get("content-type")
                    .map(|v| v.to_str().unwrap().to_string());
                (status, kind, resp.bytes().await.unwrap())
            }
        };

        // One thread's events: the rows of the CLI's NDJSON export of it, in order.
        let (status, kind, body) = fetch("format=parquet&threadId=adm-ingest".into()).await;
        assert_eq!(
            (status, kind.as_deref()),
            (200, Some("application/vnd.apache.parquet"))
        );
        let file = out.path().join("thread.parquet");
        std::fs::write(&file, &body).unwrap();
        let ndjson = ok(
            cli_on(&s, &["export", "--thread", "adm-ingest"]).await,
            "export",
        );
        let expected: Vec<Value> = ndjson
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                json!([v["id"], v["type"], v["payload"].to_string()])
            })
            .collect();
        let rows = sql(&[format!(
            "SELECT id, type, payload::VARCHAR FROM '{}' ORDER BY id",
            file.display()
        )])
        .await
        .remove(0);
        let rows: Vec<Value> = rows
            .into_iter()
            .map(|r| {
                let payload: Value = serde_json::from_str(r[2].as_str().unwrap()).unwrap();
                json!([r[0], r[1], payload.to_string()])
            })
            .collect();
        assert_eq!(rows, expected);

        // A derived table of a time range: the runs started in it.
        let (status, _, body) =
            fetch("format=parquet&table=runs&from=2000-01-01&to=2999-01-01".into()).await;
        assert_eq!(status, 200);
        let runs = out.path().join("runs.parquet");
        std::fs::write(&runs, &body).unwrap();
        assert_eq!(
            sql(&[format!(
                "SELECT thread, status FROM '{}' ORDER BY thread",
                runs.display()
            )])
            .await[0],
            vec![
                vec![json!("adm-approve"), json!("completed")],
                vec![json!("adm-deny"), json!("completed")],
                vec![json!("adm-ingest"), json!("error")],
            ]
        );
        // NDJSON too, the same lines as the CLI's.
        let (status, kind, body) = fetch("threadId=adm-ingest".into()).await;
        assert_eq!(
            (status, kind.as_deref()),
            (200, Some("application/x-ndjson"))
        );
        assert_eq!(String::from_utf8(body.to_vec()).unwrap(), ndjson);

        // Bad input: the status, the code and what is wrong.
        for (query, status, code, says) in [
            (
                "format=xml&threadId=adm-ingest",
                400,
                "invalid_query",
                "unknown variant `xml`",
            ),
            (
                "format=parquet&table=nope&threadId=adm-ingest",
                400,
                "invalid_query",
                "unknown variant `nope`",
            ),
            (
                "table=runs&threadId=adm-ingest",
                422,
                "invalid_query",
                "only with format=parquet",
            ),
            (
                "format=parquet",
                422,
                "invalid_scope",
                "give threadId or a time range",
            ),
            (
                "format=parquet&from=2026-01-02&to=2026-01-01",
                422,
                "invalid_query",
                "from must be before to",
            ),
            ("format=parquet&from=yesterday", 400, "invalid_time", "from"),
            (
                "format=parquet&threadId=nobody-here",
                404,
                "not_found",
                "nobody-here",
            ),
        ] {
            let r = s.get(&format!("/instance-ai/admin/export?{query}")).await;
            let (c, message) = r.error(status, query);
            assert_eq!(c, code, "{query}: {message}");
            assert!(message.contains(says), "{query}: {message}");
        }
        s.act_as(crate::auth::TOKEN_A);
        let (c, _) = s
            .get("/instance-ai/admin/export?format=parquet&threadId=adm-ingest")
            .await
            .error(403, "a user's export");
        assert_eq!(c, "admin_only");
    })
    .await
}
