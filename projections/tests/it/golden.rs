//! Golden wire tests: one demo run (`tests/golden/demo-run.events.jsonl`, regenerated from the
//! real runtime and compared by `agent/tests/it/golden_recording.rs`, ids and clock normalized) rendered in
//! every protocol and compared byte for byte with the checked-in streams next to it, so any
//! change of a wire is a visible diff. `THREADSTREAM_BLESS=1 cargo test -p
//! threadstream-projections --test it golden` rewrites the expected files.

use std::path::PathBuf;

use serde_json::Value;
use threadstream_domain::StoredEvent;
use threadstream_projections::render::agui::AgUiRenderer;
use threadstream_projections::render::items::ItemsRenderer;
use threadstream_projections::render::smith::SmithRenderer;
use threadstream_projections::render::to_sse;

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/golden")
}

fn recording() -> Vec<StoredEvent> {
    let text = std::fs::read_to_string(golden_dir().join("demo-run.events.jsonl"))
        .expect("tests/golden/demo-run.events.jsonl");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("a JSON row");
            let s = |k: &str| v[k].as_str().expect(k).to_string();
            StoredEvent {
                id: v["id"].as_i64().unwrap(),
                thread_id: s("thread_id"),
                seq: v["seq"].as_i64().unwrap(),
                run_id: s("run_id"),
                agent_id: s("agent_id"),
                event_type: s("event_type"),
                payload: s("payload"),
                ts: v["ts"].as_i64().unwrap(),
                response_id: v["response_id"].as_str().map(str::to_string),
                user_id: v["user_id"].as_str().map(str::to_string),
            }
        })
        .collect()
}

fn check(name: &str, actual: &str) {
    let path = golden_dir().join(name);
    if std::env::var_os("THREADSTREAM_BLESS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "{} is missing; bless it with THREADSTREAM_BLESS=1",
            path.display()
        )
    });
    if expected != actual {
        let line = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(expected.lines().count().min(actual.lines().count()));
        panic!(
            "{name} differs from the golden stream at line {}:\n expected: {:?}\n   actual: {:?}\n(re-bless with THREADSTREAM_BLESS=1 if the change is intended)",
            line + 1,
            expected.lines().nth(line),
            actual.lines().nth(line)
        );
    }
}

#[test]
fn the_recording_is_a_whole_demo_run() {
    let events = recording();
    let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    for t in [
        "run-start",
        "agent-spawned",
        "tool-call",
        "confirmation-request",
        "run-finish",
    ] {
        assert!(types.contains(&t), "{t} missing from the recording");
    }
    assert_eq!(types.last(), Some(&"run-finish"));
}

#[test]
fn n8n_golden() {
    let mut out = String::new();
    for e in recording().iter().filter(|e| e.is_n8n()) {
        out.push_str(&format!("id: {}\ndata: {}\n\n", e.id, e.envelope_json()));
    }
    check("demo-run.n8n.sse", &out);
}

#[test]
fn agui_golden() {
    let events = recording();
    let mut r = AgUiRenderer::new("golden", true);
    let frames: Vec<_> = events.iter().flat_map(|e| r.render(e)).collect();
    check("demo-run.agui.sse", &to_sse(&frames));
    // And one resumed mid-run: the join prelude is part of the wire too.
    let cut = events[events.len() / 2].id;
    let mut r = AgUiRenderer::new("golden", true);
    for e in events.iter().filter(|e| e.id <= cut) {
        r.render(e);
    }
    let mut frames = r.join_prelude(cut, events[events.len() / 2].ts);
    frames.extend(
        events
            .iter()
            .filter(|e| e.id > cut)
            .flat_map(|e| r.render(e)),
    );
    check("demo-run.agui-resumed.sse", &to_sse(&frames));
}

#[test]
fn items_golden() {
    let events = recording();
    let run = events
        .iter()
        .find(|e| e.event_type == "run-start")
        .unwrap()
        .run_id
        .clone();
    for (unfiltered, name) in [
        (false, "demo-run.items.sse"),
        (true, "demo-run.items-unfiltered.sse"),
    ] {
        let mut r = ItemsRenderer::new("golden~run_1", &run, unfiltered);
        let frames: Vec<_> = events
            .iter()
            .flat_map(|e| r.render(e))
            .map(|(_, f)| f)
            .collect();
        check(name, &to_sse(&frames));
    }
}

#[test]
fn smith_golden() {
    let events = recording();
    let run = events
        .iter()
        .find(|e| e.event_type == "run-start")
        .unwrap()
        .run_id
        .clone();
    let mut r = SmithRenderer::new(&run, None);
    let frames: Vec<_> = events.iter().flat_map(|e| r.render(e)).collect();
    assert!(r.finished());
    check("demo-run.smith.sse", &to_sse(&frames));
}
