//! Compaction of finished runs (`--compact-after-secs`), end to end: a demo run with sub-agents
//! is read on every protocol before compaction, the server restarts compacting, and then a
//! reader resuming at every cut — inside compacted ranges too — ends with exactly what the
//! uncompacted stream gave: n8n SSE, AG-UI (through `@ag-ui/core` and `ag-ui-validate`) and the
//! thread as a Durable Stream. `verify` is clean, a rebuild gives the same read models, the
//! export carries the compacted ranges, and its import into a fresh store reads the same.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::agui::{capture, check_streams};
use crate::common::*;

/// Each (run, agent, type) stream of deltas as text, and every other event as (id, data).
#[derive(Debug, PartialEq)]
struct N8nView {
    texts: BTreeMap<(String, String, String), String>,
    others: Vec<(i64, String)>,
}

/// A text or reasoning delta's stream: (run, agent, type).
fn delta_key(v: &Value) -> Option<(String, String, String)> {
    let ty = v["type"].as_str().unwrap();
    (ty == "text-delta" || ty == "reasoning-delta").then(|| {
        (
            v["runId"].as_str().unwrap().to_string(),
            v["agentId"].as_str().unwrap().to_string(),
            ty.to_string(),
        )
    })
}

fn n8n_view(events: &[SseEvent]) -> N8nView {
    let mut texts: BTreeMap<(String, String, String), String> = BTreeMap::new();
    let mut others = Vec::new();
    for e in events {
        let v = e.json();
        if let Some(key) = delta_key(&v) {
            assert_eq!(
                v["payload"].as_object().unwrap().len(),
                1,
                "a delta's payload is its text alone: {v}"
            );
            texts
                .entry(key)
                .or_default()
                .push_str(v["payload"]["text"].as_str().unwrap());
        } else {
            others.push((e.id(), e.data.clone()));
        }
    }
    N8nView { texts, others }
}

/// The n8n stream of `thread` after `cursor` up to id `last`.
async fn n8n_after(server: &Server, thread: &str, cursor: i64, last: i64) -> Vec<SseEvent> {
    if cursor >= last {
        return Vec::new();
    }
    let mut sse = server.sse(thread, Cursor::header_id(cursor)).await;
    let mut out: Vec<SseEvent> = Vec::new();
    loop {
        let ev = sse
            .next_event(Duration::from_secs(20))
            .await
            .unwrap_or_else(|e| panic!("n8n from {cursor} up to {last}: {e:?}"));
        let id = ev.id();
        out.push(ev);
        if id >= last {
            return out;
        }
    }
}

/// The thread as a Durable Stream, read from `offset` to its end: the n8n envelopes.
async fn ds_after(server: &Server, thread: &str, cursor: i64) -> Vec<Value> {
    let mut items = Vec::new();
    let mut offset = if cursor == 0 {
        "-1".to_string()
    } else {
        format!("{cursor}_0")
    };
    loop {
        let r = server
            .get(&format!("/v1/threads/{}?offset={offset}", enc(thread)))
            .await;
        assert_eq!(r.status, 200, "catch-up read at {offset}: {}", r.text);
        offset = r.headers["stream-next-offset"]
            .to_str()
            .unwrap()
            .to_string();
        let up_to_date = r.headers.get("stream-up-to-date").is_some();
        items.extend(r.json().as_array().unwrap().clone());
        if up_to_date {
            return items;
        }
    }
}

fn ds_text(items: &[Value]) -> BTreeMap<(String, String, String), String> {
    let mut texts: BTreeMap<(String, String, String), String> = BTreeMap::new();
    for v in items {
        if let Some(key) = delta_key(v) {
            texts
                .entry(key)
                .or_default()
                .push_str(v["payload"]["text"].as_str().unwrap());
        }
    }
    texts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reader_resumes_exactly_inside_a_compacted_run() {
    bounded(600, async {
        let mut server = Server::start_with(Opts {
            extra_args: vec!["--no-compaction".into()],
            ..Opts::default()
        })
        .await;
        let t = "t-compact";
        let run = server.chat(t, "Build me a weather to Slack workflow").await;
        server
            .follow_run(t, &run, |_| {
                Some(serde_json::json!({"kind": "approval", "approved": true}))
            })
            .await;
        let before = server
            .read_idle(t, Cursor::None, Duration::from_millis(300))
            .await;
        let last = before.last().unwrap().id();
        let agui_full = capture(&server, t, None, last).await;
        let agui_through = parse_sse(&agui_full)
            .iter()
            .filter_map(|e| e.id_field.as_deref().map(|i| i.parse::<i64>().unwrap()))
            .max()
            .unwrap();
        let messages = server.messages(t).await;
        let status = server.status(t).await;
        let events_before = server.count_events().await;
        let deltas_before = before.iter().filter(|e| e.ty().ends_with("-delta")).count();
        assert!(deltas_before > 20, "a demo run streams many deltas");

        // Restarted compacting at once: wait for the run's deltas to become a few rows.
        server.opts_mut().extra_args = vec![
            "--compact-after-secs".into(),
            "0".into(),
            "--compact-every-secs".into(),
            "1".into(),
        ];
        server.restart().await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let events_after = loop {
            let n = server.count_events().await;
            if n < events_before {
                break n;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the run was not compacted within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let after = server
            .read_idle(t, Cursor::None, Duration::from_millis(300))
            .await;
        let deltas_after = after.iter().filter(|e| e.ty().ends_with("-delta")).count();
        assert!(
            deltas_after * 4 < deltas_before,
            "{deltas_before} deltas became {deltas_after} ({events_before} → {events_after} rows)"
        );
        let ids_after: std::collections::HashSet<i64> = after.iter().map(|e| e.id()).collect();

        // n8n and Durable Streams: from every cut of the uncompacted stream.
        let mut inside = 0;
        let cuts: Vec<i64> = std::iter::once(0)
            .chain(before.iter().map(|e| e.id()))
            .collect();
        for &cut in &cuts {
            if !ids_after.contains(&cut) && cut != 0 {
                inside += 1;
            }
            let expected: Vec<SseEvent> = before.iter().filter(|e| e.id() > cut).cloned().collect();
            let resumed = n8n_after(&server, t, cut, last).await;
            assert_eq!(
                n8n_view(&resumed),
                n8n_view(&expected),
                "n8n resumed after {cut}"
            );
            let items = ds_after(&server, t, cut).await;
            assert_eq!(
                ds_text(&items),
                n8n_view(&expected).texts,
                "Durable Stream read from {cut}"
            );
            let ds_others: Vec<Value> = items
                .iter()
                .filter(|v| !v["type"].as_str().unwrap().ends_with("-delta"))
                .cloned()
                .collect();
            let n8n_others: Vec<Value> = expected
                .iter()
                .filter(|e| !e.ty().ends_with("-delta"))
                .map(|e| e.json())
                .collect();
            assert_eq!(ds_others, n8n_others, "Durable Stream read from {cut}");
        }
        assert!(
            inside > 10,
            "cuts inside compacted ranges: {inside} of {}",
            cuts.len()
        );

        // AG-UI: the same messages (ids and text) from every cut, each stream valid.
        let want = crate::agui::texts(&parse_sse(&agui_full));
        let agui_cuts: Vec<i64> = parse_sse(&agui_full)
            .iter()
            .filter_map(|e| e.id_field.as_deref().map(|i| i.parse().unwrap()))
            .filter(|id| *id < agui_through)
            .collect();
        let full_after = capture(&server, t, None, agui_through).await;
        assert_eq!(crate::agui::texts(&parse_sse(&full_after)), want);
        let mut streams = vec![("compacted, full".to_string(), full_after)];
        for cut in agui_cuts {
            let resumed = capture(&server, t, Some(cut), agui_through).await;
            assert_eq!(
                crate::agui::texts(&parse_sse(&resumed)),
                want,
                "AG-UI resumed at {cut}: messages differ from the uncompacted stream"
            );
            streams.push((format!("compacted, resumed at {cut}"), resumed));
        }
        check_streams(&streams, 15).await;

        // The read models as before; verify clean; a rebuild the same; the export knows.
        assert_eq!(server.messages(t).await, messages);
        assert_eq!(server.status(t).await, status);
        server.stop().await;
        let report = ok(cli_on(&server, &["verify"]).await, "verify");
        assert!(report.contains("result: clean"), "{report}");
        server.rebuild_projections().await;
        let export = ok(cli_on(&server, &["export", "--thread", t]).await, "export");
        assert!(
            export.contains("\"compacted\""),
            "the export keeps the ranges"
        );
        server.restart().await;
        assert_eq!(server.messages(t).await, messages);
        assert_eq!(server.status(t).await, status);

        // The whole log exported and imported into a fresh store: the import's rules fold the
        // ranges' deltas (their seqs are the thread's), the copy verifies clean, and a reader
        // resuming inside a range there gets what it got here.
        server.stop().await;
        let dump = tempfile::tempdir().unwrap();
        let file = dump.path().join("log.ndjson").display().to_string();
        ok(
            cli_on(&server, &["export", "--output", &file]).await,
            "export of the log",
        );
        let mut copy = Server::start_with(Opts {
            extra_args: vec!["--no-compaction".into()],
            ..Opts::default()
        })
        .await;
        copy.stop().await;
        ok(
            cli_on(&copy, &["import", "--input", &file]).await,
            "import of a compacted log",
        );
        let report = ok(cli_on(&copy, &["verify"]).await, "verify the copy");
        assert!(report.contains("result: clean"), "{report}");
        copy.restart().await;
        assert_eq!(copy.messages(t).await, messages, "messages after import");
        assert_eq!(copy.status(t).await, status, "status after import");
        for &cut in cuts.iter().filter(|c| !ids_after.contains(c)).take(3) {
            let expected: Vec<SseEvent> = before.iter().filter(|e| e.id() > cut).cloned().collect();
            assert_eq!(
                n8n_view(&n8n_after(&copy, t, cut, last).await),
                n8n_view(&expected),
                "n8n on the imported copy, resumed after {cut}"
            );
        }
        drop(copy);
    })
    .await;
}
