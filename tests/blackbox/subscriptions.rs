//! Durable Streams subscriptions across a restart (the conformance suite runs its own tests
//! against one process): a webhook subscription keeps its signing key (the JWKS is the same),
//! its acked offsets and its wake generations, a stale callback is fenced after the restart,
//! and a message appended after it wakes the receiver with a signature the JWKS fetched before
//! the restart verifies. Bad input gets the protocol's 400s.

use crate::common;

use std::time::Duration;

use axum::http::HeaderMap;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine;
use common::*;
use ed25519_dalek::{Signature, Verifier, VerifyingKey};
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// One webhook delivery: its `Webhook-Signature` header and raw body.
struct Delivery {
    signature: String,
    body: String,
}

impl Delivery {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

/// A webhook receiver on loopback that records each delivery and answers `{}` (the wake stays
/// open until the test acks it through the callback).
async fn receiver() -> (String, mpsc::UnboundedReceiver<Delivery>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: String| {
            let tx = tx.clone();
            async move {
                let signature = headers
                    .get("webhook-signature")
                    .map(|v| v.to_str().unwrap().to_string())
                    .unwrap_or_default();
                let _ = tx.send(Delivery { signature, body });
                axum::Json(json!({}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, rx)
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Delivery>) -> Delivery {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("a webhook delivery within 10 s")
        .unwrap()
}

/// Whether `d` is signed, as the protocol says (`t=<secs>,kid=<kid>,ed25519=<sig>` over
/// `<secs>.<body>`), by the key `kid` of `jwks`.
fn verifies(d: &Delivery, jwks: &Value) -> bool {
    let mut parts = d.signature.split(',');
    let (Some(t), Some(kid), Some(sig)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let (t, kid, sig) = (
        t.strip_prefix("t=").unwrap(),
        kid.strip_prefix("kid=").unwrap(),
        sig.strip_prefix("ed25519=").unwrap(),
    );
    let Some(key) = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kid"] == kid)
    else {
        return false;
    };
    let x: [u8; 32] = B64URL
        .decode(key["x"].as_str().unwrap())
        .unwrap()
        .try_into()
        .unwrap();
    let sig = Signature::from_slice(&B64URL.decode(sig).unwrap()).unwrap();
    VerifyingKey::from_bytes(&x)
        .unwrap()
        .verify(format!("{t}.{}", d.body).as_bytes(), &sig)
        .is_ok()
}

async fn send(s: &Server, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    send_as(s, method, &s.url(path), None, body).await
}

async fn send_as(
    s: &Server,
    method: &str,
    url: &str,
    bearer: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = s
        .client
        .request(method.parse().unwrap(), url)
        .header("content-type", "application/json");
    if let Some(t) = bearer {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.body(b.to_string());
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// The callback URL of a notification, on the server as it runs now (a restart picks a new port;
/// the path and the token are what must survive it).
fn callback_on(s: &Server, notification: &Value) -> String {
    let url = notification["callback_url"].as_str().unwrap();
    let path = &url[url.find("/v1/stream/").unwrap()..];
    s.url(path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_subscription_survives_a_restart() {
    bounded(90, async {
        let mut server = Server::start().await;
        let (hook, mut deliveries) = receiver().await;
        let sub = "/v1/stream/__ds/subscriptions/lasting";
        let (status, created) = send(
            &server,
            "PUT",
            sub,
            Some(json!({"type": "webhook", "pattern": "jobs/*", "webhook": {"url": hook}, "lease_ttl_ms": 60_000})),
        )
        .await;
        assert_eq!(status, 201, "{created}");
        let kid = created["webhook"]["signing"]["kid"].as_str().unwrap().to_string();
        let (_, jwks) = send(&server, "GET", "/v1/stream/__ds/jwks.json", None).await;

        // A first message: wake 1, acked through the callback.
        let r = common_put(&server, "/v1/stream/jobs/a", json!({"n": 1})).await;
        assert_eq!(r, 201);
        let first = next(&mut deliveries).await;
        assert!(verifies(&first, &jwks), "signed with the published key");
        let wake = first.json();
        assert_eq!(wake["generation"], 1);
        let tail = wake["streams"][0]["tail_offset"].as_str().unwrap().to_string();
        assert_eq!(wake["streams"][0]["path"], "jobs/a");
        let token = wake["callback_token"].as_str().unwrap().to_string();
        let ack = json!({"wake_id": wake["wake_id"], "generation": 1, "acks": [{"stream": "jobs/a", "offset": tail}], "done": true});
        let (status, answer) = send_as(&server, "POST", &callback_on(&server, &wake), Some(&token), Some(ack.clone())).await;
        assert_eq!((status, answer), (200, json!({"ok": true, "next_wake": false})));
        let (_, before) = send(&server, "GET", sub, None).await;
        assert_eq!(before["streams"][0]["acked_offset"], tail.as_str(), "{before}");

        server.restart().await;

        let (_, jwks_after) = send(&server, "GET", "/v1/stream/__ds/jwks.json", None).await;
        assert_eq!(jwks_after, jwks, "the same key after a restart");
        let (status, after) = send(&server, "GET", sub, None).await;
        assert_eq!(status, 200, "{after}");
        assert_eq!(after["streams"], before["streams"], "acked offsets kept");
        assert_eq!(after["webhook"]["signing"]["kid"], kid.as_str());
        // The old wake's token is still recognised (the key is the stored one), and fenced.
        let (status, stale) = send_as(&server, "POST", &callback_on(&server, &wake), Some(&token), Some(ack)).await;
        assert_eq!(status, 409, "{stale}");
        assert_eq!(stale["error"]["code"], "FENCED");
        assert!(deliveries.try_recv().is_err(), "nothing pending: no wake after the restart");

        // A message after the restart: wake 2, from the acked offset, signed as before.
        let r = server
            .client
            .post(server.url("/v1/stream/jobs/a"))
            .header("content-type", "application/json")
            .body(json!({"n": 2}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204);
        let second = next(&mut deliveries).await;
        assert!(verifies(&second, &jwks), "the JWKS fetched before the restart verifies it");
        let wake = second.json();
        assert_eq!(wake["generation"], 2);
        assert_eq!(wake["subscription_id"], "lasting");
        let stream = &wake["streams"][0];
        assert_eq!(stream["acked_offset"], tail.as_str());
        assert_eq!(stream["has_pending"], true);
        assert!(stream["tail_offset"].as_str().unwrap() > tail.as_str());
        let token = wake["callback_token"].as_str().unwrap();
        let ack = json!({"wake_id": wake["wake_id"], "generation": 2, "acks": [{"stream": "jobs/a", "offset": stream["tail_offset"]}], "done": true});
        let (status, answer) = send_as(&server, "POST", &callback_on(&server, &wake), Some(token), Some(ack)).await;
        assert_eq!((status, answer), (200, json!({"ok": true, "next_wake": false})));
        let (_, last) = send(&server, "GET", sub, None).await;
        assert_eq!(last["streams"][0]["acked_offset"], stream["tail_offset"]);
    })
    .await
}

async fn common_put(s: &Server, path: &str, body: Value) -> u16 {
    s.client
        .put(s.url(path))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Bad input is a 400 naming the problem, and stores nothing.
#[tokio::test]
async fn bad_subscriptions_are_refused_with_the_protocols_codes() {
    let server = Server::start().await;
    let sub = "/v1/stream/__ds/subscriptions/bad";
    for (body, code) in [
        (
            json!({"type": "carrier-pigeon", "pattern": "a/*"}),
            "INVALID_REQUEST",
        ),
        (
            json!({"type": "webhook", "pattern": "a/*"}),
            "INVALID_REQUEST",
        ),
        (
            json!({"type": "webhook", "pattern": "a/b*", "webhook": {"url": "http://127.0.0.1:9/h"}}),
            "INVALID_REQUEST",
        ),
        (
            json!({"type": "webhook", "webhook": {"url": "http://127.0.0.1:9/h"}}),
            "INVALID_REQUEST",
        ),
        (
            json!({"type": "webhook", "pattern": "a/*", "webhook": {"url": "http://127.0.0.1:9/h"}, "lease_ttl_ms": 5}),
            "INVALID_REQUEST",
        ),
        (
            json!({"type": "pull-wake", "pattern": "a/*"}),
            "INVALID_REQUEST",
        ),
        (
            json!({"type": "webhook", "pattern": "a/*", "webhook": {"url": "https://hooks.example.com/h"}}),
            "WEBHOOK_URL_REJECTED",
        ),
    ] {
        let (status, answer) = send(&server, "PUT", sub, Some(body.clone())).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(answer["error"]["code"], code, "{body}: {answer}");
        assert!(answer["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    let r = server
        .client
        .put(server.url(sub))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let (status, _) = send(&server, "GET", sub, None).await;
    assert_eq!(status, 404, "nothing was stored");
    // A callback without a token, or with a forged one.
    let (status, answer) = send(&server, "POST", &format!("{sub}/callback"), Some(json!({}))).await;
    assert_eq!(
        (status, answer["error"]["code"].clone()),
        (401, json!("TOKEN_INVALID"))
    );
    let (status, answer) = send_as(
        &server,
        "POST",
        &server.url(&format!("{sub}/ack")),
        Some("e30.AAAA"),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, 404, "{answer}");
}

/// A claim on a webhook subscription is well formed and conflicts with the subscription's type:
/// 409 with the protocol's `INVALID_REQUEST` (docs/protocol.md, "Subscriptions"), and no wake is
/// begun or claimed.
#[tokio::test]
async fn claiming_a_webhook_subscription_is_a_conflict() {
    let server = Server::start().await;
    let sub = "/v1/stream/__ds/subscriptions/hooked";
    let body = json!({"type": "webhook", "streams": ["hooked-a"], "webhook": {"url": "http://127.0.0.1:9/h"}});
    let (status, answer) = send(&server, "PUT", sub, Some(body)).await;
    assert_eq!(status, 201, "{answer}");
    let (status, answer) = send(
        &server,
        "POST",
        &format!("{sub}/claim"),
        Some(json!({"worker": "w1"})),
    )
    .await;
    assert_eq!(status, 409, "{answer}");
    assert_eq!(answer["error"]["code"], "INVALID_REQUEST", "{answer}");
    assert_eq!(answer["error"]["message"], "subscription is not pull-wake");
    let (status, view) = send(&server, "GET", sub, None).await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["type"], "webhook", "{view}");
}
