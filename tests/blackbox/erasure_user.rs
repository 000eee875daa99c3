//! Erasing a user (`POST /instance-ai/admin/erase {"userId"}`), black-box on both stores: a
//! marker the user wrote into a thread, into the workflow the agent built for them, into a
//! Durable Stream and into a subscription is in no row afterwards (and, on SQLite, in no file of
//! the data dir), while another user's thread, workflow and subscription are untouched and the
//! store verifies clean.

use crate::auth::{start_with_tokens, TOKEN_A, TOKEN_ADMIN, TOKEN_B};
use crate::common;
use crate::erasure::{files_containing, marker, rows_containing};

use common::*;
use serde_json::{json, Value};

/// Refuses whatever the demo asks (it offers to delete an inactive workflow): a run changes
/// no workflow but the one it builds.
fn deny(_: &Value) -> Option<Value> {
    Some(json!({"kind": "approval", "approved": false}))
}

async fn put(s: &Server, path: &str, body: Value) -> Resp {
    s.try_send(
        s.client
            .put(s.url(path))
            .header("content-type", "application/json")
            .body(body.to_string()),
    )
    .await
    .expect("PUT")
}

async fn workflow_names(s: &Server) -> String {
    s.get("/instance-ai/workflows").await.ok_json("workflows")["workflows"].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasing_a_user_takes_their_workflows_and_subscriptions_too() {
    bounded(240, async {
        let dir = tempfile::tempdir().unwrap();
        let mut s = start_with_tokens(&dir, &[]).await;
        let mark = marker("user");

        // Bob first (his agent lists the workflows there are: a list made after alice's would copy
        // her workflow's name into his thread, which is his record, not hers): a thread, a
        // workflow and a subscription, which must stay.
        s.act_as(TOKEN_B);
        let run = s.chat("eu-bob", "build bob kept alerts").await;
        s.follow_run("eu-bob", &run, deny).await;
        let r = put(
            &s,
            "/v1/stream/__ds/subscriptions/eu-bob-sub",
            json!({"type": "webhook", "pattern": "bob/*",
                   "webhook": {"url": "http://127.0.0.1:9/hook"}, "description": "bob's"}),
        )
        .await;
        assert_eq!(r.status, 201, "{}", r.text);
        assert!(workflow_names(&s).await.contains("Bob kept alerts"));

        // Alice: a thread whose agent builds a workflow named after her words, a Durable Stream
        // and a subscription, each holding the marker.
        s.act_as(TOKEN_A);
        let run = s.chat("eu-alice", &format!("build {mark} alerts")).await;
        s.follow_run("eu-alice", &run, deny).await;
        assert!(
            workflow_names(&s).await.contains(&mark),
            "the demo built it"
        );
        let r = put(&s, "/v1/stream/eu-alice-notes", json!({"note": mark})).await;
        assert_eq!(r.status, 201, "{}", r.text);
        let r = put(
            &s,
            "/v1/stream/__ds/subscriptions/eu-alice-sub",
            json!({"type": "webhook", "streams": ["eu-alice-notes"],
                   "webhook": {"url": "http://127.0.0.1:9/hook"}, "description": mark}),
        )
        .await;
        assert_eq!(r.status, 201, "{}", r.text);
        s.act_as(TOKEN_B);
        let bob_sub = s
            .get("/v1/stream/__ds/subscriptions/eu-bob-sub")
            .await
            .ok_json("bob's subscription");
        let bob_messages = s.messages("eu-bob").await;

        // Let the projector store the read models, so their rows are erased too.
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        assert!(rows_containing(&s, &mark).await > 0, "the marker is stored");

        s.act_as(TOKEN_ADMIN);
        let answer = s
            .post("/instance-ai/admin/erase", &json!({"userId": "alice"}))
            .await
            .ok_json("erase alice");
        let streams = answer["streams"].to_string();
        for stream in [
            "\"eu-alice\"",
            "\"workflow:",
            "eu-alice-notes",
            "__ds/subscriptions",
        ] {
            assert!(streams.contains(stream), "{stream} not erased: {answer}");
        }
        assert!(!streams.contains("eu-bob"), "{answer}");

        assert_eq!(
            rows_containing(&s, &mark).await,
            0,
            "a row still holds the marker"
        );
        if s.database_url.is_none() {
            let hits = files_containing(s.data_dir(), &mark);
            assert!(hits.is_empty(), "files still holding the marker: {hits:?}");
        }
        let names = workflow_names(&s).await;
        assert!(!names.contains(&mark), "{names}");
        assert!(names.contains("Bob kept alerts"), "{names}");

        s.act_as(TOKEN_A);
        let r = s.get("/v1/stream/__ds/subscriptions/eu-alice-sub").await;
        assert_eq!(r.status, 404, "{}", r.text);
        s.act_as(TOKEN_B);
        let after = s
            .get("/v1/stream/__ds/subscriptions/eu-bob-sub")
            .await
            .ok_json("bob's subscription after");
        assert_eq!(after, bob_sub, "bob's subscription as it was");
        assert_eq!(s.messages("eu-bob").await, bob_messages);

        // The store verifies clean, and after a restart bob's subscription is read back from
        // the restored stream.
        s.stop().await;
        let (ok, out, err) = cli_on(&s, &["verify"]).await.parts();
        assert!(ok, "verify after erasure:\n{out}\n{err}");
        s.restart().await;
        let mut after = s
            .get("/v1/stream/__ds/subscriptions/eu-bob-sub")
            .await
            .ok_json("bob's subscription after a restart");
        // The JWKS address names the port, which a restart changes.
        let mut before = bob_sub.clone();
        for v in [&mut after, &mut before] {
            v["webhook"]["signing"]["jwks_url"].take();
        }
        assert_eq!(after, before);
        s.act_as(TOKEN_A);
        let r = s.get("/v1/stream/__ds/subscriptions/eu-alice-sub").await;
        assert_eq!(r.status, 404, "{}", r.text);
    })
    .await;
}
