//! Identity and access, black-box: bearer tokens from a tokens file (reloaded without restart),
//! 401/403/404 semantics, two users on every route of the router, admin and ingest roles, the
//! SSE ownership re-check, session cookie, stream tickets, and the loopback-only rule without
//! authentication.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

pub(crate) const TOKEN_A: &str = "tok-alice-0123456789abcdef";
pub(crate) const TOKEN_B: &str = "tok-bob-0123456789abcdef";
pub(crate) const TOKEN_ADMIN: &str = "tok-admin-0123456789abcdef";
const TOKEN_INGEST: &str = "tok-ingest-0123456789abcdef";

fn sha256_hex(token: &str) -> String {
    // Same hash as `threadstream token hash`, computed by the binary so the test checks it too.
    use std::io::Write;
    let mut child = std::process::Command::new(BIN)
        .args(["token", "hash"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn token hash");
    writeln!(child.stdin.take().unwrap(), "{token}").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let h = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert_eq!(h.len(), 64, "hash {h:?}");
    h
}

pub(crate) fn write_tokens(path: &Path, entries: &[(&str, &str, &str, Option<&[&str]>)]) {
    let tokens: Vec<Value> = entries
        .iter()
        .map(|(tok, user, role, threads)| {
            let mut e = json!({"sha256": sha256_hex(tok), "user": user, "role": role});
            if let Some(t) = threads {
                e["threads"] = json!(t);
            }
            e
        })
        .collect();
    // Write then rename: the server never sees a half-written file.
    let tmp = path.with_extension("tmp");
    std::fs::write(
        &tmp,
        serde_json::to_vec(&json!({ "tokens": tokens })).unwrap(),
    )
    .unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn default_tokens(path: &Path) {
    write_tokens(
        path,
        &[
            (TOKEN_A, "alice", "user", None),
            (TOKEN_B, "bob", "user", None),
            (TOKEN_ADMIN, "root", "admin", None),
            (TOKEN_INGEST, "alice", "ingest", Some(&["ta"])),
        ],
    );
}

pub(crate) async fn start_with_tokens(dir: &tempfile::TempDir, extra: &[&str]) -> Server {
    let file = dir.path().join("tokens.json");
    if !file.exists() {
        default_tokens(&file);
    }
    let mut extra_args = vec!["--tokens-file".to_string(), file.display().to_string()];
    extra_args.extend(extra.iter().map(|s| s.to_string()));
    Server::start_with(Opts {
        extra_args,
        ..Opts::default()
    })
    .await
}

async fn call(
    s: &Server,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Resp {
    let mut req = s.client.request(method.parse().unwrap(), s.url(path));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.json(b);
    }
    // Streams: only the status and headers matter here, so do not wait for the body (a Durable
    // Streams catch-up read without `live` is a plain response, read whole).
    let live = path.contains("/events") || path.contains("/stream");
    if method == "GET" && live && !path.starts_with("/v1/") {
        let r = req
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .expect("send");
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let text = if status == 200 {
            String::new()
        } else {
            r.text().await.unwrap_or_default()
        };
        return Resp {
            status,
            headers,
            text,
        };
    }
    s.try_send(req).await.expect("send")
}

/// What each route of `api/src/http/mod.rs` is, for bob calling on alice's thread `ta`.
enum Expect {
    /// Acts on or reads a thread: 404 for another user, alice's data unchanged.
    NotFound,
    /// Not about one thread (lists, workflows, session): only needs credentials.
    CallerScoped,
}

struct Case {
    route: &'static str,
    method: &'static str,
    path: &'static str,
    body: Option<Value>,
    expect: Expect,
}

fn cases(request_id: &str) -> Vec<Case> {
    use Expect::*;
    let c = |route, method, path: &str, body: Option<Value>, expect| Case {
        route,
        method,
        path: Box::leak(path.to_string().into_boxed_str()),
        body,
        expect,
    };
    let flow_req =
        Box::leak(format!("/api/flows/chat/requests/ta~{}/stream", "r1").into_boxed_str());
    vec![
        c(
            "/instance-ai/chat/{thread_id}",
            "POST",
            "/instance-ai/chat/ta",
            Some(json!({"message": "hi"})),
            NotFound,
        ),
        c(
            "/api/v1/agent/runs",
            "POST",
            "/api/v1/agent/runs",
            Some(json!({"threadId": "ta", "message": "hi"})),
            NotFound,
        ),
        c(
            "/agui/agents/{name}/run",
            "POST",
            "/agui/agents/py/run",
            Some(json!({"threadId": "ta", "messages": [{"id": "1", "role": "user", "content": "hi"}]})),
            NotFound,
        ),
        c(
            "/api/v1/agent/runs/{thread_id}/events",
            "GET",
            "/api/v1/agent/runs/ta/events",
            None,
            NotFound,
        ),
        c(
            "/api/v1/agent/history",
            "GET",
            "/api/v1/agent/history?threadId=ta",
            None,
            NotFound,
        ),
        c(
            "/api/chat",
            "POST",
            "/api/chat",
            Some(json!({"id": "ta", "messages": [{"role": "user", "parts": [{"type": "text", "text": "hi"}]}]})),
            NotFound,
        ),
        c(
            "/api/chat/{thread_id}/stream",
            "GET",
            "/api/chat/ta/stream",
            None,
            NotFound,
        ),
        c(
            "/api/flows/{kind}/actions/{action}",
            "POST",
            "/api/flows/chat/actions/send",
            Some(json!({"message": "hi", "sessionId": "ta"})),
            NotFound,
        ),
        c(
            "/api/flows/{kind}/requests/{request_id}/stream",
            "GET",
            flow_req,
            None,
            NotFound,
        ),
        c("/smith", "POST", "/smith", None, CallerScoped),
        c(
            "/smith/{workflow_id}",
            "POST",
            "/smith/none",
            None,
            CallerScoped,
        ),
        c(
            "/instance-ai/chat/{thread_id}/cancel",
            "POST",
            "/instance-ai/chat/ta/cancel",
            Some(json!({})),
            NotFound,
        ),
        c(
            "/instance-ai/chat/{thread_id}/tasks/{task_id}/cancel",
            "POST",
            "/instance-ai/chat/ta/tasks/t1/cancel",
            Some(json!({})),
            NotFound,
        ),
        c(
            "/instance-ai/chat/{thread_id}/tasks/{task_id}/correct",
            "POST",
            "/instance-ai/chat/ta/tasks/t1/correct",
            Some(json!({"message": "x"})),
            NotFound,
        ),
        c(
            "/instance-ai/workflows",
            "GET",
            "/instance-ai/workflows",
            None,
            CallerScoped,
        ),
        c(
            "/instance-ai/workflows/{workflow_id}",
            "GET",
            "/instance-ai/workflows/none",
            None,
            CallerScoped,
        ),
        c(
            "/instance-ai/mcp/servers",
            "GET",
            "/instance-ai/mcp/servers",
            None,
            CallerScoped,
        ),
        // An admin's only (tests/blackbox/metrics.rs).
        c("/metrics", "GET", "/metrics", None, CallerScoped),
        // An admin's only: bob's attempt on alice's thread is a 403, checked below.
        c(
            "/instance-ai/admin/erase",
            "POST",
            "/instance-ai/admin/erase",
            Some(json!({"threadId": "ta"})),
            CallerScoped,
        ),
        c(
            "/instance-ai/admin/export",
            "GET",
            "/instance-ai/admin/export?format=parquet&threadId=ta",
            None,
            CallerScoped,
        ),
        c(
            "/instance-ai/admin/change-feed",
            "GET",
            "/instance-ai/admin/change-feed",
            None,
            CallerScoped,
        ),
        c(
            "/instance-ai/confirm/{request_id}",
            "POST",
            &format!("/instance-ai/confirm/{request_id}"),
            Some(json!({"approved": true})),
            NotFound,
        ),
        c(
            "/instance-ai/events/{thread_id}",
            "GET",
            "/instance-ai/events/ta",
            None,
            NotFound,
        ),
        c(
            "/instance-ai/events/{thread_id}/ticket",
            "POST",
            "/instance-ai/events/ta/ticket",
            None,
            NotFound,
        ),
        c(
            "/instance-ai/session",
            "POST",
            "/instance-ai/session",
            None,
            CallerScoped,
        ),
        c(
            "/instance-ai/threads",
            "GET",
            "/instance-ai/threads",
            None,
            CallerScoped,
        ),
        c(
            "/instance-ai/threads/{thread_id}",
            "PATCH",
            "/instance-ai/threads/ta",
            Some(json!({"title": "stolen"})),
            NotFound,
        ),
        c(
            "/instance-ai/threads/{thread_id}",
            "DELETE",
            "/instance-ai/threads/ta",
            None,
            NotFound,
        ),
        c(
            "/instance-ai/threads/{thread_id}/messages",
            "GET",
            "/instance-ai/threads/ta/messages",
            None,
            NotFound,
        ),
        c(
            "/instance-ai/threads/{thread_id}/status",
            "GET",
            "/instance-ai/threads/ta/status",
            None,
            NotFound,
        ),
        c(
            "/instance-ai/threads/{thread_id}/fork",
            "POST",
            "/instance-ai/threads/ta/fork",
            Some(json!({"throughEventId": 1, "threadId": "bobs-fork"})),
            NotFound,
        ),
        c(
            "/instance-ai/threads/{thread_id}/events",
            "POST",
            "/instance-ai/threads/ta/events",
            Some(json!({"events": [run_start("rb", "ob")]})),
            NotFound,
        ),
        c(
            "/instance-ai/threads/{thread_id}/export",
            "GET",
            "/instance-ai/threads/ta/export",
            None,
            NotFound,
        ),
        c(
            "/api/v1/agent/attachments",
            "POST",
            "/api/v1/agent/attachments?threadId=ta&fileName=a.txt",
            Some(json!({})),
            NotFound,
        ),
        // Not about one thread: the path prefix decides (`agent-inputs/{caller}/`); bob asking
        // for alice's object is in `attachments_are_their_owners`.
        c(
            "/api/v1/agent/attachments/signed-url",
            "GET",
            "/api/v1/agent/attachments/signed-url?bucket=threadstream&path=agent-inputs/alice/att_1/a.txt",
            None,
            CallerScoped,
        ),
        c(
            "/instance-ai/analytics/runs",
            "GET",
            "/instance-ai/analytics/runs?user=alice",
            None,
            CallerScoped,
        ),
        c(
            "/instance-ai/analytics/summary",
            "GET",
            "/instance-ai/analytics/summary?user=alice",
            None,
            CallerScoped,
        ),
        // Durable Streams: alice's stream (created by the test) and her thread read as one.
        c(
            "/v1/stream/{path}",
            "GET",
            "/v1/stream/alice-stream?offset=-1",
            None,
            NotFound,
        ),
        c(
            "/v1/stream/{path}",
            "POST",
            "/v1/stream/alice-stream",
            Some(json!({"from": "bob"})),
            NotFound,
        ),
        c(
            "/v1/stream/{path}",
            "PUT",
            "/v1/stream/alice-stream",
            Some(json!({"from": "bob"})),
            NotFound,
        ),
        c(
            "/v1/stream/{path}",
            "DELETE",
            "/v1/stream/alice-stream",
            None,
            NotFound,
        ),
        // Durable Streams subscriptions: alice's (created by the test).
        c(
            "/v1/stream/__ds/subscriptions/{id}",
            "GET",
            "/v1/stream/__ds/subscriptions/alice-sub",
            None,
            NotFound,
        ),
        c(
            "/v1/stream/__ds/subscriptions/{id}",
            "PUT",
            "/v1/stream/__ds/subscriptions/alice-sub",
            Some(alice_subscription()),
            NotFound,
        ),
        c(
            "/v1/stream/__ds/subscriptions/{id}",
            "DELETE",
            "/v1/stream/__ds/subscriptions/alice-sub",
            None,
            NotFound,
        ),
        c(
            "/v1/stream/__ds/subscriptions/{id}/streams",
            "POST",
            "/v1/stream/__ds/subscriptions/alice-sub/streams",
            Some(json!({"streams": ["bob/x"]})),
            NotFound,
        ),
        c(
            "/v1/stream/__ds/subscriptions/{id}/streams/{path}",
            "DELETE",
            "/v1/stream/__ds/subscriptions/alice-sub/streams/manual%2Falice",
            None,
            NotFound,
        ),
        c(
            "/v1/stream/__ds/subscriptions/{id}/claim",
            "POST",
            "/v1/stream/__ds/subscriptions/alice-sub/claim",
            Some(json!({"worker": "bob"})),
            NotFound,
        ),
        c(
            "/v1/threads/{thread_id}",
            "GET",
            "/v1/threads/ta?offset=-1",
            None,
            NotFound,
        ),
        c(
            "/v1/threads/{thread_id}",
            "POST",
            "/v1/threads/ta",
            Some(json!([text_delta("r1", "o1", "bob's words")])),
            NotFound,
        ),
        c(
            "/v1/threads/{thread_id}",
            "PUT",
            "/v1/threads/ta",
            None,
            NotFound,
        ),
    ]
}

/// Routes that take no credentials: the health and readiness checks, the web page's static assets (they hold
/// no data: every call the page makes is authenticated), the signed attachment URL (its
/// HMAC signature is the credential — `tests/blackbox/attachments.rs`), the JWKS of the webhook
/// signing key, and a subscription's wake routes (the wake token is the credential —
/// `tests/blackbox/subscriptions.rs`).
const PUBLIC_ROUTES: &[&str] = &[
    "/healthz",
    "/readyz",
    "/",
    "/assets/{file}",
    "/api/v1/agent/attachments/object",
    "/openapi.json",
    "/api-docs",
    "/v1/stream/__ds/jwks.json",
    "/v1/stream/__ds/subscriptions/{id}/callback",
    "/v1/stream/__ds/subscriptions/{id}/ack",
    "/v1/stream/__ds/subscriptions/{id}/release",
];

/// Alice's subscription in the table's cases (a webhook to a loopback port nobody listens on,
/// on a stream nobody writes).
fn alice_subscription() -> Value {
    json!({"type": "webhook", "streams": ["manual/alice"], "webhook": {"url": "http://127.0.0.1:9/hook"}})
}

/// Every route the server serves, with whether it takes no credentials: the document is built
/// from the one list the router is (`api/src/http/mod.rs`, `routes`), and an operation that
/// takes none says `security: [{}]`.
fn documented_routes() -> Vec<(String, bool)> {
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json"))
            .unwrap(),
    )
    .unwrap();
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        let public = item.as_object().unwrap().values().all(|op| {
            op["security"]
                .as_array()
                .is_some_and(|s| s.len() == 1 && s[0].as_object().is_some_and(|o| o.is_empty()))
        });
        out.push((path.clone(), public));
    }
    out
}

#[tokio::test]
async fn two_users_on_every_route() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_with_tokens(&dir, &[]).await;

    // The table covers every route the server serves (so a new route cannot skip this test),
    // and the document calls public exactly the routes listed as such here.
    let table = cases("x");
    let routes = documented_routes();
    assert!(routes.len() > 40, "the document looks unread: {routes:?}");
    let public: Vec<&str> = routes
        .iter()
        .filter(|(_, public)| *public)
        .map(|(r, _)| r.as_str())
        .collect();
    let mut expected_public = PUBLIC_ROUTES.to_vec();
    expected_public.sort();
    let mut public_sorted = public.clone();
    public_sorted.sort();
    assert_eq!(
        public_sorted, expected_public,
        "routes the document says need no credentials"
    );
    for (route, public) in &routes {
        if *public {
            continue;
        }
        assert!(
            table.iter().any(|c| c.route == route),
            "route {route} (docs/openapi.json) is not in the auth test table"
        );
    }

    // Alice's thread with a run waiting for a confirmation is not needed for the 404s: the
    // confirm id is the id of a real pending request when there is one, else an unknown id,
    // which must look the same to bob.
    let r = call(&s, "POST", "/instance-ai/threads/ta/events", Some(TOKEN_A), Some(&json!({"events": [run_start("r1", "o1"), text_delta("r1", "o1", "alice secret text")]}))).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let before = call(
        &s,
        "GET",
        "/instance-ai/threads/ta/messages",
        Some(TOKEN_A),
        None,
    )
    .await;
    assert_eq!(before.status, 200, "{}", before.text);
    let alice_stream = "/v1/stream/alice-stream?offset=-1";
    let r = call(
        &s,
        "PUT",
        "/v1/stream/alice-stream",
        Some(TOKEN_A),
        Some(&json!({"n": 1})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let stream_before = call(&s, "GET", alice_stream, Some(TOKEN_A), None).await;
    assert_eq!(stream_before.status, 200, "{}", stream_before.text);
    let alice_sub = "/v1/stream/__ds/subscriptions/alice-sub";
    let r = call(
        &s,
        "PUT",
        alice_sub,
        Some(TOKEN_A),
        Some(&alice_subscription()),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let sub_before = call(&s, "GET", alice_sub, Some(TOKEN_A), None).await;
    assert_eq!(sub_before.status, 200, "{}", sub_before.text);

    for case in cases("ta-req-unknown") {
        // Without credentials: 401 JSON with a Bearer challenge, on every route.
        let r = call(&s, case.method, case.path, None, case.body.as_ref()).await;
        assert_eq!(
            r.status, 401,
            "{} {} without a token: {}",
            case.method, case.path, r.text
        );
        assert!(r
            .headers
            .get("www-authenticate")
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("Bearer"));
        assert_eq!(r.json()["error"]["code"], "missing_credentials");
        if let Expect::NotFound = case.expect {
            let r = call(
                &s,
                case.method,
                case.path,
                Some(TOKEN_B),
                case.body.as_ref(),
            )
            .await;
            assert_eq!(
                r.status, 404,
                "bob: {} {}: {}",
                case.method, case.path, r.text
            );
            assert_eq!(r.json()["error"]["code"], "not_found", "{}", r.text);
        }
    }
    // Only an admin erases or exports through the admin routes: bob (and alice herself) are
    // refused, and nothing is removed.
    for token in [TOKEN_B, TOKEN_A] {
        let body = json!({"threadId": "ta"});
        for (method, path, body) in [
            ("POST", "/instance-ai/admin/erase", Some(&body)),
            ("GET", "/instance-ai/admin/export?threadId=ta", None),
            ("GET", "/instance-ai/admin/change-feed", None),
        ] {
            let r = call(&s, method, path, Some(token), body).await;
            assert_eq!(r.status, 403, "{path}: {}", r.text);
            assert_eq!(r.json()["error"]["code"], "admin_only", "{}", r.text);
        }
    }
    // Alice's thread is untouched and still hers; bob's list does not show it.
    let after = call(
        &s,
        "GET",
        "/instance-ai/threads/ta/messages",
        Some(TOKEN_A),
        None,
    )
    .await;
    assert_eq!(after.json(), before.json());
    let stream_after = call(&s, "GET", alice_stream, Some(TOKEN_A), None).await;
    assert_eq!(
        stream_after.text, stream_before.text,
        "alice's stream is untouched"
    );
    let sub_after = call(&s, "GET", alice_sub, Some(TOKEN_A), None).await;
    assert_eq!(
        sub_after.text, sub_before.text,
        "alice's subscription is untouched"
    );
    let bob_list = call(&s, "GET", "/instance-ai/threads", Some(TOKEN_B), None)
        .await
        .json();
    assert_eq!(bob_list["threads"], json!([]), "{bob_list}");
    let alice_list = call(&s, "GET", "/instance-ai/threads", Some(TOKEN_A), None)
        .await
        .json();
    assert_eq!(alice_list["threads"][0]["id"], "ta", "{alice_list}");
    // Analytics: bob may not name alice.
    let r = call(
        &s,
        "GET",
        "/instance-ai/analytics/runs?user=alice",
        Some(TOKEN_B),
        None,
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.text);
    // Bob cannot take over alice's thread id by creating or chatting on it.
    let r = call(
        &s,
        "POST",
        "/instance-ai/chat/ta",
        Some(TOKEN_B),
        Some(&json!({"message": "mine"})),
    )
    .await;
    assert_eq!(r.status, 404);
}

#[tokio::test]
async fn bad_credentials_are_401_and_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_with_tokens(&dir, &[]).await;
    let r = call(&s, "GET", "/instance-ai/threads", Some("not-a-token"), None).await;
    assert_eq!(r.status, 401, "{}", r.text);
    assert!(r.headers["www-authenticate"]
        .to_str()
        .unwrap()
        .contains("invalid_token"));
    assert!(
        !r.text.contains("not-a-token"),
        "the token is echoed: {}",
        r.text
    );
    let r = s
        .try_send(
            s.client
                .get(s.url("/instance-ai/threads"))
                .header("authorization", "Basic abc"),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["code"], "invalid_authorization");
    // /healthz and /readyz need nothing.
    assert_eq!(s.get("/healthz").await.status, 200);
    assert_eq!(s.get("/readyz").await.status, 200);
}

#[tokio::test]
async fn tokens_file_changes_apply_without_restart() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_with_tokens(&dir, &[]).await;
    let file = dir.path().join("tokens.json");
    const NEW: &str = "tok-carol-0123456789abcdef";
    assert_eq!(
        call(&s, "GET", "/instance-ai/threads", Some(NEW), None)
            .await
            .status,
        401
    );
    write_tokens(
        &file,
        &[
            (TOKEN_A, "alice", "user", None),
            (NEW, "carol", "user", None),
        ],
    );
    assert_eq!(
        call(&s, "GET", "/instance-ai/threads", Some(NEW), None)
            .await
            .status,
        200
    );
    // Bob was removed: his token stops working.
    assert_eq!(
        call(&s, "GET", "/instance-ai/threads", Some(TOKEN_B), None)
            .await
            .status,
        401
    );
}

#[tokio::test]
async fn admin_reads_everything_and_ingest_token_only_appends_to_granted_threads() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_with_tokens(&dir, &[]).await;
    let r = call(
        &s,
        "POST",
        "/instance-ai/threads/ta/events",
        Some(TOKEN_A),
        Some(&json!({"events": [run_start("r1", "o1")]})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);

    // Admin: list all (with owners), read and export alice's thread, but not act on it.
    let all = call(
        &s,
        "GET",
        "/instance-ai/threads?all=true",
        Some(TOKEN_ADMIN),
        None,
    )
    .await;
    assert_eq!(all.status, 200, "{}", all.text);
    assert!(all.json()["threads"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["id"] == "ta" && t["owner"] == "alice"));
    assert_eq!(
        call(
            &s,
            "GET",
            "/instance-ai/threads?all=true",
            Some(TOKEN_B),
            None
        )
        .await
        .status,
        403
    );
    assert_eq!(
        call(
            &s,
            "GET",
            "/instance-ai/threads/ta/messages",
            Some(TOKEN_ADMIN),
            None
        )
        .await
        .status,
        200
    );
    assert_eq!(
        call(
            &s,
            "GET",
            "/instance-ai/threads/ta/status",
            Some(TOKEN_ADMIN),
            None
        )
        .await
        .status,
        200
    );
    let export = call(
        &s,
        "GET",
        "/instance-ai/threads/ta/export",
        Some(TOKEN_ADMIN),
        None,
    )
    .await;
    assert_eq!(export.status, 200, "{}", export.text);
    assert!(export.text.contains("\"r1\""), "{}", export.text);
    assert_eq!(
        call(
            &s,
            "GET",
            "/instance-ai/analytics/runs?user=alice",
            Some(TOKEN_ADMIN),
            None
        )
        .await
        .status,
        200
    );
    let r = call(
        &s,
        "POST",
        "/instance-ai/chat/ta",
        Some(TOKEN_ADMIN),
        Some(&json!({"message": "x"})),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.text);
    // The same on Durable Streams: alice's stream and her thread read as one.
    let r = call(
        &s,
        "PUT",
        "/v1/stream/alice-s",
        Some(TOKEN_A),
        Some(&json!({"n": 1})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    for p in ["/v1/stream/alice-s?offset=-1", "/v1/threads/ta?offset=-1"] {
        let r = call(&s, "GET", p, Some(TOKEN_ADMIN), None).await;
        assert_eq!(r.status, 200, "admin reads {p}: {}", r.text);
    }
    let r = call(
        &s,
        "POST",
        "/v1/stream/alice-s",
        Some(TOKEN_ADMIN),
        Some(&json!({"n": 2})),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(r.json()["error"]["code"], "read_only");
    let r = call(
        &s,
        "POST",
        "/v1/threads/ta",
        Some(TOKEN_ADMIN),
        Some(&json!(run_finish("r1", "o1", "completed"))),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.text);

    // Ingest token (alice's, granted `ta`): appends to ta, nothing else.
    let r = call(
        &s,
        "POST",
        "/instance-ai/threads/ta/events",
        Some(TOKEN_INGEST),
        Some(&json!({"events": [run_finish("r1", "o1", "completed")]})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = call(
        &s,
        "POST",
        "/instance-ai/threads/tb/events",
        Some(TOKEN_INGEST),
        Some(&json!({"events": [run_start("r2", "o1")]})),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(r.json()["error"]["code"], "thread_not_granted");
    for (m, p) in [
        ("GET", "/instance-ai/threads/ta/messages"),
        ("GET", "/instance-ai/threads"),
        ("GET", "/instance-ai/threads/ta/export"),
        ("GET", "/v1/threads/ta?offset=-1"),
        ("GET", "/v1/stream/alice-s?offset=-1"),
        ("POST", "/v1/stream/alice-s"),
        ("PUT", "/v1/stream/__ds/subscriptions/alice-sub"),
        ("GET", "/v1/stream/__ds/subscriptions/alice-sub"),
        ("POST", "/v1/stream/__ds/subscriptions/alice-sub/claim"),
    ] {
        let r = call(&s, m, p, Some(TOKEN_INGEST), None).await;
        assert_eq!(r.status, 403, "{m} {p}: {}", r.text);
        assert_eq!(r.json()["error"]["code"], "ingest_only");
    }
    let r = call(
        &s,
        "POST",
        "/instance-ai/chat/ta",
        Some(TOKEN_INGEST),
        Some(&json!({"message": "x"})),
    )
    .await;
    assert_eq!(r.status, 403);
    // Neither an ingest token nor an admin forks alice's thread.
    for (token, code) in [(TOKEN_INGEST, "ingest_only"), (TOKEN_ADMIN, "read_only")] {
        let r = call(
            &s,
            "POST",
            "/instance-ai/threads/ta/fork",
            Some(token),
            Some(&json!({"throughEventId": 1})),
        )
        .await;
        assert_eq!(r.status, 403, "{}", r.text);
        assert_eq!(r.json()["error"]["code"], code, "{}", r.text);
    }
}

/// Bob opens a stream on a thread id nobody has yet; alice then creates it. Bob must receive
/// none of alice's events, and his stream must end.
#[tokio::test]
async fn a_stream_opened_before_the_thread_existed_leaks_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_with_tokens(&dir, &[]).await;
    let mut resp = s
        .client
        .get(s.url("/instance-ai/events/later"))
        .bearer_auth(TOKEN_B)
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let r = call(&s, "POST", "/instance-ai/threads/later/events", Some(TOKEN_A), Some(&json!({"events": [run_start("r1", "o1"), text_delta("r1", "o1", "alice secret text")]}))).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let mut got = Vec::new();
    let ended = bounded(10, async {
        while let Ok(Some(chunk)) = resp.chunk().await {
            got.extend_from_slice(&chunk);
        }
    })
    .await;
    let _: () = ended;
    let text = String::from_utf8_lossy(&got);
    assert!(!text.contains("data:"), "bob received events: {text}");
    assert!(!text.contains("alice secret"), "{text}");
}

#[tokio::test]
async fn session_cookie_and_single_use_stream_tickets() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_with_tokens(&dir, &[]).await;
    let r = call(
        &s,
        "POST",
        "/instance-ai/threads/ta/events",
        Some(TOKEN_A),
        Some(&json!({"events": [run_start("r1", "o1")]})),
    )
    .await;
    assert_eq!(r.status, 200);

    // Session cookie.
    let r = call(&s, "POST", "/instance-ai/session", Some(TOKEN_A), None).await;
    assert_eq!(r.status, 204, "{}", r.text);
    let set = r.headers["set-cookie"].to_str().unwrap().to_string();
    for part in [
        "threadstream_session=",
        "HttpOnly",
        "SameSite=Strict",
        "Path=/",
    ] {
        assert!(set.contains(part), "{set}");
    }
    let cookie = set.split(';').next().unwrap().to_string();
    let with_cookie = |path: &str| s.client.get(s.url(path)).header("cookie", cookie.clone());
    let r = s
        .try_send(with_cookie("/instance-ai/threads"))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["threads"][0]["id"], "ta");
    // A tampered cookie is refused.
    let bad = format!("{}x", cookie);
    let r = s
        .try_send(
            s.client
                .get(s.url("/instance-ai/threads"))
                .header("cookie", bad),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 401, "{}", r.text);
    let r = call(&s, "DELETE", "/instance-ai/session", None, None).await;
    assert_eq!(r.status, 204);
    assert!(r.headers["set-cookie"]
        .to_str()
        .unwrap()
        .contains("Max-Age=0"));

    // Stream ticket: once, for that thread only; bob cannot get one for alice's thread.
    let t = call(
        &s,
        "POST",
        "/instance-ai/events/ta/ticket",
        Some(TOKEN_A),
        None,
    )
    .await;
    assert_eq!(t.status, 200, "{}", t.text);
    let t = t.json();
    let ticket = t["ticket"].as_str().unwrap().to_string();
    assert!(t["expiresAt"].as_i64().unwrap() > 0);
    let wrong = call(
        &s,
        "GET",
        &format!("/instance-ai/events/tb?ticket={}", enc(&ticket)),
        None,
        None,
    )
    .await;
    assert_eq!(wrong.status, 401, "another thread: {}", wrong.text);
    let first = call(
        &s,
        "GET",
        &format!(
            "/instance-ai/events/ta?ticket={}&lastEventId=0",
            enc(&ticket)
        ),
        None,
        None,
    )
    .await;
    assert_eq!(first.status, 200, "{}", first.text);
    let again = call(
        &s,
        "GET",
        &format!("/instance-ai/events/ta?ticket={}", enc(&ticket)),
        None,
        None,
    )
    .await;
    assert_eq!(again.status, 401, "second use: {}", again.text);
    // A ticket is not a credential anywhere else.
    let t2 = call(
        &s,
        "POST",
        "/instance-ai/events/ta/ticket",
        Some(TOKEN_A),
        None,
    )
    .await
    .json();
    let other = call(
        &s,
        "GET",
        &format!(
            "/instance-ai/threads/ta/messages?ticket={}",
            enc(t2["ticket"].as_str().unwrap())
        ),
        None,
        None,
    )
    .await;
    assert_eq!(other.status, 401);
    assert_eq!(
        call(
            &s,
            "POST",
            "/instance-ai/events/ta/ticket",
            Some(TOKEN_B),
            None
        )
        .await
        .status,
        404
    );
}

#[tokio::test]
async fn without_auth_only_loopback_is_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(BIN)
        .args(["serve", "--addr", "0.0.0.0:0", "--data-dir"])
        .arg(dir.path())
        .env_remove("THREADSTREAM_TOKENS_FILE")
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = strip_ansi(&String::from_utf8_lossy(&out.stderr));
    assert!(
        err.contains("refusing to listen on 0.0.0.0:0 without authentication"),
        "{err}"
    );
    assert!(err.contains("--tokens-file"), "{err}");
}

// ------------------------------------------------------------------------------------------------
// JWTs and secrets
// ------------------------------------------------------------------------------------------------

const HS_SECRET: &str = "hs256-secret-for-tests-0123456789abcdef";

fn jwt(alg: jsonwebtoken::Algorithm, key: &jsonwebtoken::EncodingKey, claims: Value) -> String {
    jsonwebtoken::encode(&jsonwebtoken::Header::new(alg), &claims, key).unwrap()
}

fn claims(sub: &str, iss: &str, aud: &str, exp_in_secs: i64) -> Value {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    json!({"sub": sub, "iss": iss, "aud": aud, "exp": now + exp_in_secs, "roles": ["user"]})
}

async fn jwt_server(key_args: &[&str]) -> Server {
    let mut extra_args: Vec<String> = key_args.iter().map(|s| s.to_string()).collect();
    extra_args.extend(
        [
            "--jwt-issuer",
            "https://idp.test",
            "--jwt-audience",
            "threadstream",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    Server::start_with(Opts {
        extra_args,
        ..Opts::default()
    })
    .await
}

async fn check_jwts(s: &Server, alg: jsonwebtoken::Algorithm, key: &jsonwebtoken::EncodingKey) {
    let good = jwt(
        alg,
        key,
        claims("dana", "https://idp.test", "threadstream", 300),
    );
    let r = call(
        s,
        "POST",
        "/instance-ai/threads/td/events",
        Some(&good),
        Some(&json!({"events": [run_start("r1", "o1")]})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let list = call(s, "GET", "/instance-ai/threads", Some(&good), None)
        .await
        .json();
    assert_eq!(list["threads"][0]["owner"], "dana", "{list}");
    for (what, bad, needle) in [
        (
            "wrong iss",
            claims("dana", "https://evil.test", "threadstream", 300),
            "issuer",
        ),
        (
            "wrong aud",
            claims("dana", "https://idp.test", "other", 300),
            "audience",
        ),
        (
            "expired",
            claims("dana", "https://idp.test", "threadstream", -3600),
            "expired",
        ),
    ] {
        let r = call(
            s,
            "GET",
            "/instance-ai/threads",
            Some(&jwt(alg, key, bad)),
            None,
        )
        .await;
        assert_eq!(r.status, 401, "{what}: {}", r.text);
        assert!(r.text.contains(needle), "{what}: {}", r.text);
    }
}

#[tokio::test]
async fn hs256_jwts_check_issuer_audience_and_expiry() {
    let s = jwt_server(&["--jwt-hs256-secret", HS_SECRET]).await;
    let key = jsonwebtoken::EncodingKey::from_secret(HS_SECRET.as_bytes());
    check_jwts(&s, jsonwebtoken::Algorithm::HS256, &key).await;
    // Signed with another secret: refused.
    let other = jsonwebtoken::EncodingKey::from_secret(b"another-secret-0123456789abcdef0123");
    let t = jwt(
        jsonwebtoken::Algorithm::HS256,
        &other,
        claims("dana", "https://idp.test", "threadstream", 300),
    );
    assert_eq!(
        call(&s, "GET", "/instance-ai/threads", Some(&t), None)
            .await
            .status,
        401
    );
}

#[tokio::test]
async fn rs256_jwts_check_issuer_audience_and_expiry() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    let s = jwt_server(&[
        "--jwt-rs256-public-key",
        &format!("{fixtures}/jwt-test-rsa.pub.pem"),
    ])
    .await;
    let pem = std::fs::read(format!("{fixtures}/jwt-test-rsa.pem")).unwrap();
    let key = jsonwebtoken::EncodingKey::from_rsa_pem(&pem).unwrap();
    check_jwts(&s, jsonwebtoken::Algorithm::RS256, &key).await;
    // An HS256 token "signed" with the public key (algorithm confusion) is refused.
    let public = std::fs::read(format!("{fixtures}/jwt-test-rsa.pub.pem")).unwrap();
    let t = jwt(
        jsonwebtoken::Algorithm::HS256,
        &jsonwebtoken::EncodingKey::from_secret(&public),
        claims("dana", "https://idp.test", "threadstream", 300),
    );
    assert_eq!(
        call(&s, "GET", "/instance-ai/threads", Some(&t), None)
            .await
            .status,
        401
    );
}

/// Provider keys, tokens, the JWT and session secrets never appear in the logs of a full run,
/// in error bodies or in `--help`.
#[tokio::test]
async fn secrets_never_appear_in_logs_errors_or_help() {
    const OPENAI: &str = "sk-openai-test-secret-5f3a9c";
    const ANTHROPIC: &str = "sk-ant-test-secret-77b1e0";
    const SESSION: &str = "session-secret-test-0123456789abcdef";
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens.json");
    default_tokens(&file);
    let s = Server::start_with(Opts {
        extra_args: vec![
            "--tokens-file".into(),
            file.display().to_string(),
            "--jwt-hs256-secret".into(),
            HS_SECRET.into(),
            "--jwt-issuer".into(),
            "https://idp.test".into(),
            "--jwt-audience".into(),
            "threadstream".into(),
            "--session-secret".into(),
            SESSION.into(),
            "--openai-api-key".into(),
            OPENAI.into(),
            "--anthropic-api-key".into(),
            ANTHROPIC.into(),
        ],
        ..Opts::default()
    })
    .await;
    let mut bodies = String::new();
    // Failures and successes of every credential kind, and a demo run.
    for tok in [TOKEN_A, "wrong-token-value", TOKEN_INGEST] {
        bodies += &call(&s, "GET", "/instance-ai/threads", Some(tok), None)
            .await
            .text;
    }
    let key = jsonwebtoken::EncodingKey::from_secret(HS_SECRET.as_bytes());
    let expired = jwt(
        jsonwebtoken::Algorithm::HS256,
        &key,
        claims("dana", "https://idp.test", "threadstream", -3600),
    );
    bodies += &call(&s, "GET", "/instance-ai/threads", Some(&expired), None)
        .await
        .text;
    let r = call(
        &s,
        "POST",
        "/instance-ai/chat/ta",
        Some(TOKEN_A),
        Some(&json!({"message": "hello"})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    bodies += &r.text;
    let session = call(&s, "POST", "/instance-ai/session", Some(TOKEN_A), None).await;
    bodies += &session.text;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let logs = s.logs();
    assert!(logs.contains("listening"), "the logs were captured");
    let help = std::process::Command::new(BIN)
        .args(["serve", "--help"])
        .env("THREADSTREAM_JWT_HS256_SECRET", HS_SECRET)
        .env("THREADSTREAM_SESSION_SECRET", SESSION)
        .env("OPENAI_API_KEY", OPENAI)
        .env("ANTHROPIC_API_KEY", ANTHROPIC)
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout).to_string();
    assert!(help.contains("--jwt-hs256-secret"), "{help}");
    for secret in [
        OPENAI,
        ANTHROPIC,
        SESSION,
        HS_SECRET,
        TOKEN_A,
        TOKEN_INGEST,
        "wrong-token-value",
        &expired,
    ] {
        assert!(!logs.contains(secret), "a secret is in the logs:\n{logs}");
        assert!(
            !bodies.contains(secret),
            "a secret is in a response body: {bodies}"
        );
        assert!(!help.contains(secret), "a secret is in --help: {help}");
    }
}

#[tokio::test]
async fn attachments_are_their_owners() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_with_tokens(&dir, &[]).await;
    let upload = |token: &'static str, thread: &'static str| {
        s.try_send(
            s.client
                .post(s.url(&format!(
                    "/api/v1/agent/attachments?threadId={thread}&fileName=notes.txt"
                )))
                .bearer_auth(token)
                .header("content-type", "text/plain")
                .body("alice's notes"),
        )
    };
    let r = call(
        &s,
        "POST",
        "/instance-ai/threads/ta-att/events",
        Some(TOKEN_A),
        Some(&json!({"events": [run_start("r1", "o1")]})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = upload(TOKEN_A, "ta-att").await.unwrap();
    assert_eq!(r.status, 201, "{}", r.text);
    let path = r.json()["path"].as_str().unwrap().to_string();
    assert!(path.starts_with("agent-inputs/alice/"), "{path}");
    // Bob cannot attach to alice's thread, nor get a URL for her object.
    let r = upload(TOKEN_B, "ta-att").await.unwrap();
    assert_eq!(r.status, 404, "{}", r.text);
    let sign = |token: &'static str| {
        let url = s.url(&format!(
            "/api/v1/agent/attachments/signed-url?bucket=threadstream&path={}",
            enc(&path)
        ));
        s.try_send(s.client.get(url).bearer_auth(token))
    };
    let r = sign(TOKEN_B).await.unwrap();
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(r.json()["error"]["code"], "path_outside_user_prefix");
    // Alice can, and the URL serves the bytes without further credentials (it is the
    // credential), while a guessed URL without a valid signature is refused.
    let r = sign(TOKEN_A).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    let url = r.json()["url"].as_str().unwrap().to_string();
    let r = s.get(&url).await;
    assert_eq!((r.status, r.text.as_str()), (200, "alice's notes"));
    let forged = format!(
        "{}0",
        url.split("&signature=").next().unwrap().to_string() + "&signature="
    );
    assert_eq!(s.get(&forged).await.status, 403);
}

/// Bob cannot answer alice's confirmation even with the id of a real, pending request: 404 as for
/// an unknown id, and the request stays pending (alice can still answer it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_user_cannot_answer_a_real_pending_confirmation() {
    bounded(60, async {
        let dir = tempfile::tempdir().unwrap();
        let s = start_with_tokens(&dir, &[]).await;
        let events = json!({"events": [
            run_start("r1", "o1"),
            ev("tool-call", "r1", "o1", json!({"toolCallId": "tc1", "toolName": "delete-workflow", "args": {}})),
            ev("confirmation-request", "r1", "o1", json!({"requestId": "cr-real", "toolCallId": "tc1", "toolName": "delete-workflow", "args": {}, "severity": "destructive", "message": "delete?"})),
        ]});
        let r = call(&s, "POST", "/instance-ai/threads/ta/events", Some(TOKEN_A), Some(&events)).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let approve = json!({"kind": "approval", "approved": true});

        let unknown = call(&s, "POST", "/instance-ai/confirm/cr-unknown", Some(TOKEN_B), Some(&approve)).await;
        let real = call(&s, "POST", "/instance-ai/confirm/cr-real", Some(TOKEN_B), Some(&approve)).await;
        assert_eq!(real.status, 404, "bob on alice's pending request: {}", real.text);
        assert_eq!(unknown.status, 404, "{}", unknown.text);
        assert_eq!(real.json()["error"]["code"], unknown.json()["error"]["code"]);

        // Still pending: alice's answer is taken, once.
        let mine = call(&s, "POST", "/instance-ai/confirm/cr-real", Some(TOKEN_A), Some(&approve)).await;
        assert_eq!(mine.status, 200, "alice answering her own request: {}", mine.text);
        let again = call(&s, "POST", "/instance-ai/confirm/cr-real", Some(TOKEN_A), Some(&approve)).await;
        assert_eq!(again.status, 404, "answered twice: {}", again.text);
    })
    .await;
}

/// `--stream-ticket-ttl-secs`: a ticket not used in time is refused as expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_tickets_expire() {
    bounded(60, async {
        let dir = tempfile::tempdir().unwrap();
        let s = start_with_tokens(&dir, &["--stream-ticket-ttl-secs", "1"]).await;
        let r = call(
            &s,
            "POST",
            "/instance-ai/threads/ta/events",
            Some(TOKEN_A),
            Some(&json!({"events": [run_start("r1", "o1")]})),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text);
        let t = call(
            &s,
            "POST",
            "/instance-ai/events/ta/ticket",
            Some(TOKEN_A),
            None,
        )
        .await;
        assert_eq!(t.status, 200, "{}", t.text);
        let t = t.json();
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let left = t["expiresAt"].as_i64().unwrap() - now_ms;
        assert!(
            (0..=1500).contains(&left),
            "a 1 s ticket expires in {left} ms"
        );
        tokio::time::sleep(Duration::from_millis(2100)).await;
        let late = call(
            &s,
            "GET",
            &format!(
                "/instance-ai/events/ta?ticket={}",
                enc(t["ticket"].as_str().unwrap())
            ),
            None,
            None,
        )
        .await;
        assert_eq!(late.status, 401, "{}", late.text);
        assert_eq!(
            late.json()["error"]["code"],
            "ticket_expired",
            "{}",
            late.text
        );
    })
    .await;
}

/// Two instances on one Postgres sharing `--session-secret`: a ticket issued by A opens the
/// stream once on B, and is then refused on A as used (the ledger is the database).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_ticket_is_used_once_across_instances() {
    bounded(120, async {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens.json");
        default_tokens(&file);
        let (name, url) = create_database().await;
        let opts = || Opts {
            database_url: Some(url.clone()),
            extra_args: vec![
                "--tokens-file".into(),
                file.display().to_string(),
                "--session-secret".into(),
                "a-shared-secret-of-at-least-32-bytes!".into(),
            ],
            ..Opts::default()
        };
        let (a, b) = tokio::join!(Server::start_with(opts()), Server::start_with(opts()));
        let r = call(
            &a,
            "POST",
            "/instance-ai/threads/ta/events",
            Some(TOKEN_A),
            Some(&json!({"events": [run_start("r1", "o1")]})),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text);
        let t = call(
            &a,
            "POST",
            "/instance-ai/events/ta/ticket",
            Some(TOKEN_A),
            None,
        )
        .await;
        assert_eq!(t.status, 200, "{}", t.text);
        let path = format!(
            "/instance-ai/events/ta?ticket={}",
            enc(t.json()["ticket"].as_str().unwrap())
        );
        let on_b = call(&b, "GET", &path, None, None).await;
        assert_eq!(on_b.status, 200, "issued by A, used on B: {}", on_b.text);
        let on_a = call(&a, "GET", &path, None, None).await;
        assert_eq!(on_a.status, 401, "used on B, then on A: {}", on_a.text);
        assert_eq!(on_a.json()["error"]["code"], "ticket_used", "{}", on_a.text);
        drop((a, b));
        drop_database(name);
    })
    .await;
}
