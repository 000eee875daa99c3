//! The MCP client's failure behaviour, against a small server on the pinned Python SDK
//! (`tests/blackbox/mcp_servers/failing.py`): tools that change, an annotated destructive tool,
//! a process that crashes mid-call and cannot start again for a while, a slow call (timeout,
//! and the run's cancel), and an HTTP session the server expired.

use crate::common;
use crate::mcp::{
    outcome_of, payloads, python, start, validate, wait_ready, write_config, HttpServer,
};
use crate::support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{bounded, Server, SseEvent};
use serde_json::{json, Value};
use support::{oai_answer, oai_call, FakeLlm};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/blackbox/mcp_servers/failing.py")
}

/// Lines of the server's mark file `name` (none when it does not exist).
fn marks(dir: &Path, name: &str) -> Vec<String> {
    std::fs::read_to_string(dir.join(name))
        .map(|t| t.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

fn stdio_config(dir: &Path, marks: &Path) -> PathBuf {
    write_config(
        dir,
        &json!({"mcpServers": {"py": {"command": python(), "args": [script(), marks]}}}),
    )
}

async fn server_view(s: &Server, name: &str) -> Value {
    let v = s
        .get("/instance-ai/mcp/servers")
        .await
        .ok_json("mcp servers");
    v["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no server {name}: {v}"))
}

/// Polls the route until `pred` holds for server `name`.
async fn wait_for(s: &Server, name: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = server_view(s, name).await;
        if pred(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: {v}\n{}", s.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn run(s: &Server, thread: &str, approve: bool) -> (Vec<SseEvent>, Vec<Value>) {
    let run = s.chat(thread, "go").await;
    let events = s
        .follow_run(thread, &run, |_| {
            Some(json!({"kind": "approval", "approved": approve}))
        })
        .await;
    // The stream is read from the thread's start: keep this run's events.
    let events: Vec<SseEvent> = events
        .into_iter()
        .filter(|e| e.json()["runId"] == run)
        .collect();
    let values = events.iter().map(|e| e.json()).collect();
    (events, values)
}

fn offered(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_tools_are_offered_and_annotated_destructive_tools_ask_first() {
    bounded(180, async {
        let dir = tempfile::tempdir().unwrap();
        let config = stdio_config(dir.path(), dir.path());
        let fake = FakeLlm::start(vec![
            oai_call("c1", "py__wipe", json!({"target": "prod"})),
            oai_call("c2", "py__add_tool", json!({})),
            oai_call("c3", "py__fresh", json!({"word": "hi"})),
            oai_answer("Done."),
            oai_call("c4", "py__fresh", json!({"word": "again"})),
            oai_answer("Done again."),
        ])
        .await;
        let s = start(&fake, &config, &[], vec![]).await;
        let listed = wait_ready(&s, &["py"]).await;
        let tools = listed["servers"][0]["tools"].as_array().unwrap().clone();
        let wipe = tools.iter().find(|t| t["name"] == "py__wipe").unwrap();
        assert_eq!(wipe["destructive"], true, "annotated destructiveHint: true");
        assert!(!tools.iter().any(|t| t["name"] == "py__fresh"));

        let (mut all, values) = run(&s, "t-change", false).await;
        // Annotated destructive: asked first; denied, it is not run.
        let asks = payloads(&values, "confirmation-request");
        assert_eq!(asks.len(), 1, "{asks:?}");
        assert_eq!(asks[0]["toolName"], "py__wipe");
        assert_eq!(asks[0]["severity"], "destructive");
        let r = outcome_of(&values, "py__wipe");
        assert_eq!(r["type"], "tool-error");
        assert_eq!(r["payload"]["error"], "py__wipe was denied by the user");
        assert!(marks(dir.path(), "calls-wipe").is_empty());
        assert_eq!(outcome_of(&values, "py__add_tool")["type"], "tool-result");
        // The model call right after the one that changed the list is offered the new tool.
        let requests = fake.requests();
        assert!(
            offered(&requests[2]).contains(&"py__fresh".to_string()),
            "{:?}",
            offered(&requests[2])
        );
        assert!(!offered(&requests[1]).contains(&"py__fresh".to_string()));
        let r = outcome_of(&values, "py__fresh");
        assert_eq!(r["payload"]["result"]["content"][0]["text"], "fresh: hi");

        // notifications/tools/list_changed: the new tool is listed and offered.
        let v = wait_for(&s, "py", "the new tool listed", |v| {
            v["tools"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["name"] == "py__fresh")
        })
        .await;
        assert_eq!(v["state"], "ready");
        let (events, values) = run(&s, "t-change", true).await;
        let requests = fake.requests();
        assert!(
            offered(requests.last().unwrap()).contains(&"py__fresh".to_string()),
            "{:?}",
            offered(requests.last().unwrap())
        );
        let r = outcome_of(&values, "py__fresh");
        assert_eq!(r["payload"]["result"]["content"][0]["text"], "fresh: again");
        all.extend(events);
        validate(&all).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_server_is_restarted_and_its_call_never_replayed() {
    bounded(180, async {
        let dir = tempfile::tempdir().unwrap();
        let config = stdio_config(dir.path(), dir.path());
        let fake = FakeLlm::start(vec![
            oai_call("c1", "py__crash", json!({})),
            oai_answer("It crashed."),
            oai_call("c2", "py__echo", json!({"message": "are you there"})),
            oai_answer("Not there."),
            oai_call("c3", "py__echo", json!({"message": "back"})),
            oai_answer("Back."),
        ])
        .await;
        let s = start(&fake, &config, &[], vec![]).await;
        wait_ready(&s, &["py"]).await;
        // From now on a new process exits at once: the server stays down.
        std::fs::write(dir.path().join("down"), "").unwrap();

        let (mut all, values) = run(&s, "t-crash", true).await;
        let r = outcome_of(&values, "py__crash");
        assert_eq!(r["type"], "tool-error", "{r}");
        let error = r["payload"]["error"].as_str().unwrap();
        assert!(
            error.contains("closed during the call") && error.contains("not sent again"),
            "{error}"
        );
        assert_eq!(
            marks(dir.path(), "calls-crash").len(),
            1,
            "the call was replayed"
        );

        // Restarted with backoff; down meanwhile, its tools withdrawn.
        let v = wait_for(&s, "py", "restarting after failed restarts", |v| {
            v["state"] == "restarting" && v["restarts"].as_u64().unwrap() >= 2
        })
        .await;
        assert_eq!(v["tools"], json!([]));
        assert!(v["lastError"].is_string(), "{v}");
        let (events, values) = run(&s, "t-crash", true).await;
        all.extend(events);
        assert!(
            !offered(fake.requests().last().unwrap())
                .iter()
                .any(|t| t.starts_with("py__")),
            "a down server's tools are offered"
        );
        let r = outcome_of(&values, "py__echo");
        assert_eq!(r["type"], "tool-error");
        assert!(
            r["payload"]["error"]
                .as_str()
                .unwrap()
                .contains("MCP server 'py' is unavailable"),
            "{r}"
        );

        // It can start again: back, with its tools.
        std::fs::remove_file(dir.path().join("down")).unwrap();
        wait_ready(&s, &["py"]).await;
        let (events, values) = run(&s, "t-crash", true).await;
        all.extend(events);
        let r = outcome_of(&values, "py__echo");
        assert_eq!(
            r["payload"]["result"]["content"][0]["text"], "echo: back",
            "{r}"
        );
        assert_eq!(marks(dir.path(), "calls-echo"), ["back"]);
        assert_eq!(marks(dir.path(), "calls-crash").len(), 1);
        validate(&all).await;
    })
    .await;
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_call_times_out_and_a_cancelled_run_cancels_its_call() {
    bounded(180, async {
        let dir = tempfile::tempdir().unwrap();
        let config = stdio_config(dir.path(), dir.path());
        let fake = FakeLlm::start(vec![
            oai_call("c1", "py__slow", json!({"seconds": 30})),
            oai_answer("Too slow."),
            oai_call("c2", "py__slow", json!({"seconds": 30})),
        ])
        .await;
        let s = start(&fake, &config, &["--mcp-call-timeout-secs", "3"], vec![]).await;
        wait_ready(&s, &["py"]).await;

        // Timeout: cancelled on the server, a tool-error for the model.
        let started = Instant::now();
        let (mut all, values) = run(&s, "t-slow", true).await;
        let r = outcome_of(&values, "py__slow");
        assert_eq!(r["type"], "tool-error");
        assert_eq!(
            r["payload"]["error"],
            "the MCP tool 'slow' of server 'py' did not answer within 3 s; the call was cancelled"
        );
        assert!(started.elapsed() < Duration::from_secs(20));
        let deadline = Instant::now() + Duration::from_secs(10);
        while marks(dir.path(), "cancelled-slow").is_empty() {
            assert!(Instant::now() < deadline, "the server never saw the cancel");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        // The run's cancel: notifications/cancelled reaches the server within 100 ms.
        std::fs::remove_file(dir.path().join("cancelled-slow")).unwrap();
        let run_id = s.chat("t-slow", "again").await;
        let mut sse = s.sse("t-slow", common::Cursor::None).await;
        loop {
            let ev = sse.next_event(Duration::from_secs(20)).await.unwrap();
            let v = ev.json();
            all.push(ev);
            if v["runId"] == run_id && v["type"] == "tool-call" {
                break;
            }
        }
        // The call is under way on the server.
        let deadline = Instant::now() + Duration::from_secs(10);
        while marks(dir.path(), "calls-slow").len() < 2 {
            assert!(Instant::now() < deadline, "the second call never started");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let asked = now_secs();
        s.cancel("t-slow").await.ok_json("cancel");
        // The cancel is stored (the run reads it from the log) once the request is answered.
        let stored = now_secs();
        let deadline = Instant::now() + Duration::from_secs(10);
        let cancelled_at = loop {
            if let Some(t) = marks(dir.path(), "cancelled-slow").first() {
                break t.parse::<f64>().unwrap();
            }
            assert!(Instant::now() < deadline, "the server never saw the run's cancel");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let ms = (cancelled_at - stored) * 1000.0;
        println!(
            "the server's call cancelled {:.1} ms after the cancel request was sent, {ms:.1} ms after it was answered",
            (cancelled_at - asked) * 1000.0
        );
        assert!(
            ms < 100.0,
            "the call was cancelled {ms:.1} ms after the run's cancel was stored"
        );
        let rest: Vec<SseEvent> = s
            .follow_run("t-slow", &run_id, |_| None)
            .await
            .into_iter()
            .filter(|e| e.json()["runId"] == run_id)
            .collect();
        let values: Vec<Value> = rest.iter().map(|e| e.json()).collect();
        let finish = values.last().unwrap();
        assert_eq!(finish["payload"]["status"], "cancelled");
        let errors = payloads(&values, "tool-error");
        assert!(
            errors.iter().any(|e| e["error"] == "Cancelled by user"),
            "{errors:?}"
        );
        all.extend(rest);
        validate(&all).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_http_session_is_reinitialised_and_the_call_retried_once() {
    bounded(180, async {
        let dir = tempfile::tempdir().unwrap();
        let port = crate::mcp::free_port();
        let mut cmd = tokio::process::Command::new(python());
        cmd.arg(script())
            .arg(dir.path())
            .arg("http")
            .arg(port.to_string());
        let _web = HttpServer::start(cmd, port).await;
        let config = write_config(
            dir.path(),
            &json!({"mcpServers": {"pyweb": {"url": format!("http://127.0.0.1:{port}/mcp")}}}),
        );
        let fake = FakeLlm::start(vec![
            oai_call("c1", "pyweb__expire_sessions", json!({})),
            oai_call("c2", "pyweb__echo", json!({"message": "after expiry"})),
            oai_answer("Done."),
        ])
        .await;
        let s = start(&fake, &config, &[], vec![]).await;
        wait_ready(&s, &["pyweb"]).await;
        assert_eq!(marks(dir.path(), "sessions").len(), 1);

        let (events, values) = run(&s, "t-expire", true).await;
        assert_eq!(
            outcome_of(&values, "pyweb__expire_sessions")["type"],
            "tool-result"
        );
        let r = outcome_of(&values, "pyweb__echo");
        assert_eq!(r["type"], "tool-result", "{r}");
        assert_eq!(
            r["payload"]["result"]["content"][0]["text"],
            "echo: after expiry"
        );
        // A new session, and the call that met the 404 ran once.
        assert_eq!(marks(dir.path(), "sessions").len(), 2);
        assert_eq!(marks(dir.path(), "calls-echo"), ["after expiry"]);
        let v = server_view(&s, "pyweb").await;
        assert_eq!(v["state"], "ready");
        assert_eq!(v["restarts"], 0, "recovered within the connection");
        validate(&events).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_server_that_goes_away_is_reconnected_when_it_is_back() {
    bounded(180, async {
        let dir = tempfile::tempdir().unwrap();
        let port = crate::mcp::free_port();
        let web_cmd = || {
            let mut cmd = tokio::process::Command::new(python());
            cmd.arg(script())
                .arg(dir.path())
                .arg("http")
                .arg(port.to_string());
            cmd
        };
        let web = HttpServer::start(web_cmd(), port).await;
        let config = write_config(
            dir.path(),
            &json!({"mcpServers": {"pyweb": {"url": format!("http://127.0.0.1:{port}/mcp")}}}),
        );
        let fake = FakeLlm::start(vec![
            oai_call("c1", "pyweb__echo", json!({"message": "while away"})),
            oai_answer("It is away."),
            oai_call("c2", "pyweb__echo", json!({"message": "back"})),
            oai_answer("Back."),
        ])
        .await;
        let s = start(&fake, &config, &[], vec![]).await;
        wait_ready(&s, &["pyweb"]).await;
        drop(web);
        tokio::time::sleep(Duration::from_millis(500)).await;
        // A call while it is away fails, and is not retried.
        let (mut all, values) = run(&s, "t-away", true).await;
        let r = outcome_of(&values, "pyweb__echo");
        assert_eq!(r["type"], "tool-error");
        assert!(
            r["payload"]["error"]
                .as_str()
                .unwrap()
                .contains("closed during the call"),
            "{r}"
        );
        // The broken connection is dropped (rmcp's HTTP transport does not end by itself when
        // the server goes away): restarting, its tools withdrawn, until the server is back.
        let v = wait_for(&s, "pyweb", "restarting", |v| v["state"] == "restarting").await;
        assert_eq!(v["tools"], json!([]));
        assert!(marks(dir.path(), "calls-echo").is_empty());
        let _web = HttpServer::start(web_cmd(), port).await;
        wait_for(&s, "pyweb", "reconnected", |v| {
            v["state"] == "ready" && v["restarts"].as_u64().unwrap() >= 1
        })
        .await;
        let (events, values) = run(&s, "t-away", true).await;
        all.extend(events);
        let r = outcome_of(&values, "pyweb__echo");
        assert_eq!(
            r["payload"]["result"]["content"][0]["text"], "echo: back",
            "{r}"
        );
        validate(&all).await;
    })
    .await;
}
