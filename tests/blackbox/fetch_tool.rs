//! `--tool-fetch-url` through the real binary: a fake OpenAI provider (a real
//! HTTP server, from agent/tests/it/support) makes the model call `fetch-url` on a loopback URL; the
//! stored `tool-error` names the refusal and the loopback server is never contacted. Without the
//! flag the tool is not offered to the model.

use crate::common;
use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{bounded, Opts, Server};
use serde_json::{json, Value};
use support::{oai_answer, oai_call, FakeLlm};

fn offers_fetch_url(requests: &[Value]) -> bool {
    requests.iter().any(|r| {
        r["tools"]
            .as_array()
            .is_some_and(|tools| tools.iter().any(|t| t["function"]["name"] == "fetch-url"))
    })
}

async fn start(fake: &FakeLlm, fetch: bool) -> Server {
    let mut extra_args = vec![
        "--openai-base-url".to_string(),
        fake.openai_base(),
        "--openai-api-key".into(),
        "sk-test".into(),
    ];
    if fetch {
        extra_args.push("--tool-fetch-url".into());
    }
    Server::start_with(Opts {
        model: "openai/gpt-test".into(),
        extra_args,
        ..Opts::default()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flag_offers_fetch_url_and_loopback_is_refused() {
    bounded(120, async {
        // A loopback server that must never be contacted.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = hits.clone();
        tokio::spawn(async move {
            while listener.accept().await.is_ok() {
                counter.fetch_add(1, Ordering::SeqCst);
            }
        });

        let off = FakeLlm::start(vec![oai_answer("Hello.")]).await;
        let s = start(&off, false).await;
        let run = s.chat("t0", "hi").await;
        s.follow_run("t0", &run, |_| None).await;
        let requests = off.requests();
        assert!(
            requests.iter().any(|r| r["tools"].is_array()),
            "{requests:?}"
        );
        assert!(
            !offers_fetch_url(&requests),
            "offered without --tool-fetch-url"
        );

        let on = FakeLlm::start(vec![
            oai_call(
                "c1",
                "fetch-url",
                json!({"url": format!("http://127.0.0.1:{port}/admin")}),
            ),
            oai_answer("That address is not allowed."),
        ])
        .await;
        let s = start(&on, true).await;
        let run = s.chat("t1", "fetch my local admin page").await;
        let events = s.follow_run("t1", &run, |_| None).await;
        assert!(
            offers_fetch_url(&on.requests()),
            "not offered with --tool-fetch-url"
        );
        let errors: Vec<Value> = events
            .iter()
            .map(|e| e.json())
            .filter(|e| e["type"] == "tool-error")
            .collect();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(
            errors[0]["payload"]["error"],
            "refused: 127.0.0.1 is a loopback address"
        );
        assert_eq!(
            hits.load(Ordering::SeqCst),
            0,
            "the loopback server was contacted"
        );
    })
    .await;
}
