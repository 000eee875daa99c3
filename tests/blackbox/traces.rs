//! OpenTelemetry traces: a real OTLP/HTTP receiver in the test (axum) decodes what the server
//! exports with `opentelemetry-proto`'s own message types, and the GenAI span tree of a demo run
//! with a sub-agent and a confirmation is checked, its root under the `traceparent` the chat
//! request sent. `threadstream traces` then rebuilds the run's tree from the log and posts it to
//! a second receiver: the same shape. Content on spans, opted in, is checked over OTLP/gRPC
//! (a tonic receiver with `opentelemetry-proto`'s generated service).

use crate::common;
use crate::support::{oai_answer, oai_call, FakeLlm};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use common::*;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, Span};
use prost::Message;
use serde_json::json;

/// What a receiver got: `(service.name, span)` per span.
pub(crate) type Received = Arc<Mutex<Vec<(String, Span)>>>;

/// Keeps the spans of an export request.
fn collect(sink: &Received, request: ExportTraceServiceRequest) {
    let mut sink = sink.lock().unwrap();
    for rs in request.resource_spans {
        let service = rs
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| string(kv.value.as_ref()?.value.as_ref()?))
            .unwrap_or_default();
        for ss in rs.scope_spans {
            for span in ss.spans {
                sink.push((service.clone(), span));
            }
        }
    }
}

/// An OTLP/HTTP trace receiver on a free loopback port: `POST /v1/traces` with a protobuf
/// `ExportTraceServiceRequest`, answered as the protocol says (an empty protobuf response).
pub(crate) async fn receiver() -> (String, Received) {
    let got: Received = Arc::default();
    let sink = got.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let sink = sink.clone();
            async move {
                if headers["content-type"] != "application/x-protobuf" {
                    return (StatusCode::UNSUPPORTED_MEDIA_TYPE, Vec::new());
                }
                let Ok(request) = ExportTraceServiceRequest::decode(body) else {
                    return (StatusCode::BAD_REQUEST, Vec::new());
                };
                collect(&sink, request);
                (
                    StatusCode::OK,
                    ExportTraceServiceResponse::default().encode_to_vec(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, got)
}

/// An OTLP/gRPC trace receiver (`opentelemetry.proto.collector.trace.v1.TraceService`) on a
/// free loopback port, served by tonic with the generated service of `opentelemetry-proto`.
async fn grpc_receiver() -> (String, Received) {
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
        TraceService, TraceServiceServer,
    };
    struct Service(Received);
    #[tonic::async_trait]
    impl TraceService for Service {
        async fn export(
            &self,
            request: tonic::Request<ExportTraceServiceRequest>,
        ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
            collect(&self.0, request.into_inner());
            Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
        }
    }
    let got: Received = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let service = TraceServiceServer::new(Service(got.clone()));
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
    });
    (url, got)
}

fn string(v: &Any) -> Option<String> {
    match v {
        Any::StringValue(s) => Some(s.clone()),
        _ => None,
    }
}

fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a Any> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
}

pub(crate) fn attr_str(span: &Span, key: &str) -> Option<String> {
    attr(span, key).and_then(string)
}

fn attr_int(span: &Span, key: &str) -> Option<i64> {
    match attr(span, key)? {
        Any::IntValue(i) => Some(*i),
        _ => None,
    }
}

/// The spans a receiver holds now.
fn spans_of(got: &Received) -> Vec<Span> {
    got.lock().unwrap().iter().map(|(_, s)| s.clone()).collect()
}

/// Waits until the receiver holds a span named `name`, and returns all it holds.
pub(crate) async fn wait_for(got: &Received, name: &str) -> Vec<(String, Span)> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let spans = got.lock().unwrap().clone();
        if spans.iter().any(|(_, s)| s.name == name) {
            return spans;
        }
        assert!(
            Instant::now() < deadline,
            "no span '{name}' exported; got {:?}",
            spans.iter().map(|(_, s)| &s.name).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A tree's shape: per span, its name, its parent's name (`-` for the root), its span events
/// and `error.type`, sorted.
fn shape(spans: &[Span]) -> Vec<String> {
    let by_id: HashMap<&[u8], &Span> = spans.iter().map(|s| (&s.span_id[..], s)).collect();
    let mut shape: Vec<String> = spans
        .iter()
        .map(|s| {
            let parent = by_id
                .get(&s.parent_span_id[..])
                .map_or("-", |p| p.name.as_str());
            let events: Vec<&str> = s.events.iter().map(|e| e.name.as_str()).collect();
            format!(
                "{} <- {parent} {events:?} {:?}",
                s.name,
                attr_str(s, "error.type")
            )
        })
        .collect();
    shape.sort();
    shape
}

/// A server exporting to the collector at `url`, its batches sent every 100 ms, with `env`.
async fn traced_server(url: String, env: &[(&str, &str)]) -> Server {
    let mut vars = vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT".to_string(), url),
        ("OTEL_BSP_SCHEDULE_DELAY".to_string(), "100".to_string()),
    ];
    vars.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    Server::start_with(Opts {
        env: vars,
        ..Opts::default()
    })
    .await
}

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN_ID: &str = "00f067aa0ba902b7";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_traced_under_its_traceparent_and_rebuilt_from_the_log_alike() {
    bounded(120, async {
        let (live_url, live) = receiver().await;
        let s = traced_server(live_url, &[("OTEL_SERVICE_NAME", "threadstream-test")]).await;
        let t = "t-traces";
        let run = confirmed_run(&s, t, "clean up my old workflows", true).await;

        // The orchestrator's span ends at run-finish, after every span of the run.
        let exported = wait_for(&live, "invoke_agent orchestrator").await;
        let spans: Vec<Span> = exported.iter().map(|(_, s)| s.clone()).collect();
        assert!(exported.iter().all(|(svc, _)| svc == "threadstream-test"));
        let trace_id = hex(&spans[0].trace_id);
        assert_eq!(trace_id, TRACE_ID, "the run joins the caller's trace");
        assert!(spans.iter().all(|s| hex(&s.trace_id) == TRACE_ID));
        let root = spans
            .iter()
            .find(|s| s.name == "invoke_agent orchestrator")
            .unwrap();
        assert_eq!(hex(&root.parent_span_id), PARENT_SPAN_ID);
        assert_eq!(
            attr_str(root, "gen_ai.operation.name").unwrap(),
            "invoke_agent"
        );
        assert_eq!(attr_str(root, "threadstream.run.id").unwrap(), run);
        assert_eq!(
            attr_str(root, "threadstream.run.status").unwrap(),
            "completed"
        );
        for span in &spans {
            assert_eq!(
                attr_str(span, "gen_ai.conversation.id").as_deref(),
                Some(t),
                "{}",
                span.name
            );
            assert!(span.end_time_unix_nano >= span.start_time_unix_nano);
            // Content is opt-in.
            for key in [
                "gen_ai.input.messages",
                "gen_ai.output.messages",
                "gen_ai.tool.call.arguments",
                "gen_ai.tool.call.result",
            ] {
                assert!(attr(span, key).is_none(), "{} has {key}", span.name);
            }
        }
        let id_of = |name: &str| {
            spans
                .iter()
                .find(|s| s.name == name)
                .unwrap_or_else(|| panic!("no span {name}: {:#?}", shape(&spans)))
                .span_id
                .clone()
        };
        // Model calls: the orchestrator's steps and the title's under it, the sub-agent's under it.
        let chats: Vec<&Span> = spans.iter().filter(|s| s.name == "chat demo").collect();
        assert!(chats.len() >= 6, "{:#?}", shape(&spans));
        for chat in &chats {
            assert_eq!(chat.kind, SpanKind::Client as i32);
            assert_eq!(attr_str(chat, "gen_ai.provider.name").unwrap(), "demo");
            assert_eq!(attr_str(chat, "gen_ai.request.model").unwrap(), "demo");
            assert!(attr_int(chat, "gen_ai.usage.input_tokens").unwrap() > 0);
            assert!(attr_int(chat, "gen_ai.usage.output_tokens").unwrap() > 0);
            assert!(matches!(
                attr(chat, "gen_ai.response.time_to_first_chunk"),
                Some(Any::DoubleValue(s)) if *s >= 0.0 && *s < 10.0
            ));
        }
        let delegate = id_of("execute_tool delegate");
        let sub_agent = spans
            .iter()
            .find(|s| s.name.starts_with("invoke_agent ") && s.span_id != root.span_id)
            .expect("the sub-agent's span");
        assert_eq!(
            sub_agent.parent_span_id, delegate,
            "a sub-agent runs in its delegate call"
        );
        assert!(chats.iter().any(|c| c.parent_span_id == sub_agent.span_id));
        assert!(chats.iter().any(|c| c.parent_span_id == root.span_id));
        let delete = spans
            .iter()
            .find(|s| s.name == "execute_tool delete-workflow")
            .expect("the confirmed tool call");
        assert_eq!(delete.parent_span_id, root.span_id);
        assert_eq!(
            attr_str(delete, "gen_ai.tool.name").unwrap(),
            "delete-workflow"
        );
        assert!(attr_str(delete, "gen_ai.tool.call.id")
            .unwrap()
            .starts_with("tc-"));
        let events: Vec<&str> = delete.events.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(events, ["confirmation requested", "confirmation answered"]);

        // The same run rebuilt from the log.
        let (rebuilt_url, rebuilt) = receiver().await;
        let out = cli_on(
            &s,
            &[
                "traces",
                "--thread",
                t,
                "--run",
                &run,
                "--otlp-endpoint",
                &rebuilt_url,
            ],
        )
        .await;
        ok(out, "threadstream traces");
        let from_log: Vec<Span> = spans_of(&rebuilt);
        assert_eq!(shape(&from_log), shape(&spans));
        let tokens = |spans: &[Span]| {
            let mut t: Vec<(i64, i64)> = spans
                .iter()
                .filter(|s| s.name == "chat demo")
                .map(|s| {
                    (
                        attr_int(s, "gen_ai.usage.input_tokens").unwrap(),
                        attr_int(s, "gen_ai.usage.output_tokens").unwrap(),
                    )
                })
                .collect();
            t.sort();
            t
        };
        assert_eq!(tokens(&from_log), tokens(&spans));

        // Written as OTLP/JSON without a collector, the same spans.
        let out = cli_on(&s, &["traces", "--thread", t]).await;
        let json: serde_json::Value = serde_json::from_str(&ok(out, "traces as JSON")).unwrap();
        let names = json["resourceSpans"][0]["scopeSpans"][0]["spans"]
            .as_array()
            .unwrap()
            .len();
        assert_eq!(names, from_log.len());
        let out = cli_on(&s, &["traces", "--thread", "t-none"]).await;
        assert!(
            !out.ok && out.stderr.contains("has no run"),
            "{}",
            out.stderr
        );
        // The AG-UI and items routes that start runs take the caller's trace too.
        for (route, body, parent) in [
            (
                "/api/v1/agent/runs",
                json!({"threadId": "t-traces-agui", "message": "please crash"}),
                "00f067aa0ba902b8",
            ),
            (
                "/api/flows/chat/actions/send",
                json!({"message": "please crash"}),
                "00f067aa0ba902b9",
            ),
        ] {
            let r = s
                .client
                .post(s.url(route))
                .header("traceparent", format!("00-{TRACE_ID}-{parent}-01"))
                .json(&body)
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success(), "{route}: {}", r.status());
            let deadline = Instant::now() + Duration::from_secs(20);
            while !spans_of(&live).iter().any(|sp| {
                sp.name == "invoke_agent orchestrator" && hex(&sp.parent_span_id) == parent
            }) {
                assert!(
                    Instant::now() < deadline,
                    "{route}: no run span under {parent}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    })
    .await
}

/// Starts a demo run in `t` (with the test's `traceparent` when `traced`), approves the
/// confirmation it asks for, and follows it to its end; returns its id.
async fn confirmed_run(s: &Server, t: &str, message: &str, traced: bool) -> String {
    let mut sse = s.sse(t, Cursor::None).await;
    let mut post = s.client.post(s.url(&format!("/instance-ai/chat/{t}")));
    if traced {
        post = post.header("traceparent", format!("00-{TRACE_ID}-{PARENT_SPAN_ID}-01"));
    }
    let r = post
        .json(&json!({ "message": message }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let run = r.json::<serde_json::Value>().await.unwrap()["runId"]
        .as_str()
        .unwrap()
        .to_string();
    let evs = sse
        .read_until(Duration::from_secs(30), |e| {
            e.json()["type"] == "confirmation-request"
        })
        .await;
    let request = evs.last().unwrap().json()["payload"]["requestId"]
        .as_str()
        .unwrap()
        .to_string();
    s.confirm(&request, &json!({"kind": "approval", "approved": true}))
        .await
        .ok_json("approve");
    s.follow_run(t, &run, |_| None).await;
    run
}

/// Opted in, model calls carry their messages and tool calls their arguments and results; over
/// OTLP/gRPC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_goes_into_spans_only_when_opted_in() {
    bounded(120, async {
        let (url, got) = grpc_receiver().await;
        let s = traced_server(
            url,
            &[
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true"),
            ],
        )
        .await;
        let t = "t-traces-content";
        confirmed_run(&s, t, "clean up my old workflows about tracing", false).await;
        let spans: Vec<Span> = wait_for(&got, "invoke_agent orchestrator")
            .await
            .into_iter()
            .map(|(svc, s)| {
                assert_eq!(svc, "threadstream");
                s
            })
            .collect();
        let chat = spans
            .iter()
            .find(|s| {
                s.name == "chat demo"
                    && attr_str(s, "gen_ai.input.messages")
                        .is_some_and(|m| m.contains("my old workflows about tracing"))
            })
            .expect("a model call with the user's message");
        let input: serde_json::Value =
            serde_json::from_str(&attr_str(chat, "gen_ai.input.messages").unwrap()).unwrap();
        assert_eq!(input[0]["role"], "system");
        let answered = spans
            .iter()
            .filter_map(|s| attr_str(s, "gen_ai.output.messages"))
            .map(|o| serde_json::from_str::<serde_json::Value>(&o).unwrap())
            .find(|o| {
                o[0]["parts"][0]["content"]
                    .as_str()
                    .is_some_and(|c| !c.is_empty())
            })
            .expect("a model call with its answer");
        assert_eq!(answered[0]["role"], "assistant");
        let delete = spans
            .iter()
            .find(|s| s.name == "execute_tool delete-workflow")
            .unwrap();
        let args: serde_json::Value =
            serde_json::from_str(&attr_str(delete, "gen_ai.tool.call.arguments").unwrap()).unwrap();
        assert!(args.is_object(), "{args}");
        assert!(attr_str(delete, "gen_ai.tool.call.result").is_some());

        // `threadstream traces` speaks gRPC too, to a collector of its own.
        let (rebuilt_url, rebuilt) = grpc_receiver().await;
        let out = cli_on(
            &s,
            &[
                "traces",
                "--thread",
                t,
                "--otlp-endpoint",
                &rebuilt_url,
                "--otlp-protocol",
                "grpc",
            ],
        )
        .await;
        ok(out, "threadstream traces over gRPC");
        assert_eq!(shape(&spans_of(&rebuilt)), shape(&spans));
    })
    .await
}

/// A background task's agent hangs under the `delegate` call that started it although it
/// outlives it, the follow-up run that reports it is a trace of its own, and a failed model
/// call marks its span and the run's; the log rebuilds the same trees (a failed call stored no
/// `llm-usage`, so only the agents' spans are compared for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_tasks_and_failures_keep_their_place_in_the_tree() {
    bounded(120, async {
        let (url, got) = receiver().await;
        let s = traced_server(url, &[]).await;
        let t = "t-traces-background";
        let run = s.chat(t, "build a \"report\" in the background").await;
        s.follow_run(t, &run, |_| None).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        let live: Vec<Span> = loop {
            let spans: Vec<Span> = spans_of(&got);
            let runs = spans
                .iter()
                .filter(|s| s.name == "invoke_agent orchestrator")
                .count();
            if runs == 2 {
                break spans;
            }
            assert!(Instant::now() < deadline, "{:#?}", shape(&spans));
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let roots: Vec<&Span> = live
            .iter()
            .filter(|s| s.name == "invoke_agent orchestrator")
            .collect();
        assert_ne!(
            roots[0].trace_id, roots[1].trace_id,
            "the follow-up is a trace of its own"
        );
        let delegate = live
            .iter()
            .find(|s| s.name == "execute_tool delegate")
            .unwrap();
        let task = live
            .iter()
            .find(|s| s.name.starts_with("invoke_agent ") && s.name != "invoke_agent orchestrator")
            .expect("the background agent's span");
        assert_eq!(task.parent_span_id, delegate.span_id);
        assert_eq!(task.trace_id, delegate.trace_id);
        assert!(
            task.end_time_unix_nano > delegate.end_time_unix_nano,
            "the task outlives the call that started it"
        );
        let (rebuilt_url, rebuilt) = receiver().await;
        let out = cli_on(
            &s,
            &["traces", "--thread", t, "--otlp-endpoint", &rebuilt_url],
        )
        .await;
        ok(out, "threadstream traces of both runs");
        let from_log: Vec<Span> = spans_of(&rebuilt);
        assert_eq!(shape(&from_log), shape(&live));

        // A model call that fails: its span and the run's carry the error.
        got.lock().unwrap().clear();
        let t = "t-traces-crash";
        let run = s.chat(t, "please crash now").await;
        s.follow_run(t, &run, |_| None).await;
        let live: Vec<Span> = wait_for(&got, "invoke_agent orchestrator")
            .await
            .into_iter()
            .map(|(_, s)| s)
            .collect();
        let failed = live
            .iter()
            .find(|s| s.name == "chat demo" && attr_str(s, "error.type").is_some())
            .expect("the failed model call's span");
        assert_eq!(attr_str(failed, "error.type").unwrap(), "_OTHER");
        assert_eq!(failed.status.as_ref().unwrap().code, 2, "status ERROR");
        let root = live
            .iter()
            .find(|s| s.name == "invoke_agent orchestrator")
            .unwrap();
        assert_eq!(attr_str(root, "error.type").unwrap(), "agent_error");
        assert_eq!(attr_str(root, "threadstream.run.status").unwrap(), "error");
        rebuilt.lock().unwrap().clear();
        let out = cli_on(
            &s,
            &["traces", "--thread", t, "--otlp-endpoint", &rebuilt_url],
        )
        .await;
        ok(out, "threadstream traces of the failed run");
        let agents = |spans: &[Span]| {
            let agents: Vec<Span> = spans
                .iter()
                .filter(|s| s.name.starts_with("invoke_agent "))
                .cloned()
                .collect();
            shape(&agents)
        };
        let from_log: Vec<Span> = spans_of(&rebuilt);
        assert_eq!(agents(&from_log), agents(&live));
    })
    .await
}

/// A run resumed after a restart (a `kill -9` while it waits on a confirmation) goes on in the
/// new process as a trace of its own (the caller's `traceparent` is not stored), and the call it
/// was waiting in is an `execute_tool` span again, with the answer as its event: what the new
/// process exported is the part of the tree rebuilt from the log that came after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_resumed_after_a_restart_keeps_its_tool_span() {
    bounded(180, async {
        let (url, got) = receiver().await;
        let mut s = traced_server(url, &[]).await;
        let t = "t-traces-resumed";
        let mut sse = s.sse(t, Cursor::None).await;
        let r = s
            .client
            .post(s.url(&format!("/instance-ai/chat/{t}")))
            .header("traceparent", format!("00-{TRACE_ID}-{PARENT_SPAN_ID}-01"))
            .json(&json!({"message": "clean up my old workflows"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let run = r.json::<serde_json::Value>().await.unwrap()["runId"]
            .as_str()
            .unwrap()
            .to_string();
        let evs = sse
            .read_until(Duration::from_secs(30), |e| {
                e.json()["type"] == "confirmation-request"
            })
            .await;
        let request = evs.last().unwrap().json()["payload"]["requestId"]
            .as_str()
            .unwrap()
            .to_string();
        drop(sse);
        let live = resume_after_a_kill(&mut s, &got, t, &run, &request, true).await;
        let root = live
            .iter()
            .find(|s| s.name == "invoke_agent orchestrator")
            .unwrap();
        assert_ne!(
            hex(&root.trace_id),
            TRACE_ID,
            "a resumed run is a new trace"
        );
        let delete = live
            .iter()
            .find(|s| s.name == "execute_tool delete-workflow")
            .unwrap_or_else(|| panic!("no span of the resumed call: {:#?}", shape(&live)));
        assert_eq!(delete.parent_span_id, root.span_id);
        let events: Vec<&str> = delete.events.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(events, ["confirmation answered"]);
    })
    .await
}

/// A sub-agent waiting on a confirmation when the process is killed is resumed inside its
/// `delegate` call: its span hangs under that call's span, not under the orchestrator's, and
/// its own waiting call is an `execute_tool` span again (the fake OpenAI provider scripts it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agent_resumed_after_a_restart_stays_under_its_delegate_call() {
    bounded(180, async {
        let fake = FakeLlm::start(vec![
            oai_call(
                "c1",
                "delegate",
                json!({"role": "janitor", "instructions": "Delete wf-sample-2.", "tools": ["delete-workflow"]}),
            ),
            oai_call("s1", "delete-workflow", json!({"workflowId": "wf-sample-2"})),
            oai_answer("Not deleted."),
            oai_answer("The janitor was told not to."),
        ])
        .await;
        let (url, got) = receiver().await;
        let mut s = Server::start_with(Opts {
            model: "openai/gpt-test".into(),
            extra_args: vec![
                "--openai-base-url".into(),
                fake.openai_base(),
                "--openai-api-key".into(),
                "sk-test".into(),
            ],
            env: vec![
                ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), url),
                ("OTEL_BSP_SCHEDULE_DELAY".into(), "100".into()),
            ],
            ..Opts::default()
        })
        .await;
        let t = "t-traces-resumed-sub";
        let mut sse = s.sse(t, Cursor::None).await;
        let run = s.chat(t, "clean up").await;
        let evs = sse
            .read_until(Duration::from_secs(30), |e| {
                e.json()["type"] == "confirmation-request"
            })
            .await;
        let request = evs.last().unwrap().json()["payload"]["requestId"]
            .as_str()
            .unwrap()
            .to_string();
        drop(sse);
        let live = resume_after_a_kill(&mut s, &got, t, &run, &request, false).await;
        let id_of = |name: &str| {
            live.iter()
                .find(|s| s.name == name)
                .unwrap_or_else(|| panic!("no span {name}: {:#?}", shape(&live)))
                .clone()
        };
        let delegate = id_of("execute_tool delegate");
        let janitor = id_of("invoke_agent janitor");
        let delete = id_of("execute_tool delete-workflow");
        assert_eq!(janitor.parent_span_id, delegate.span_id);
        assert_eq!(delete.parent_span_id, janitor.span_id);
        assert_eq!(attr_str(&delete, "error.type").as_deref(), Some("tool_error"));
    })
    .await
}

/// Kills `s` while run `run` of `t` waits on confirmation `request`, restarts it on the same
/// data, answers once the resumed run waits again, and follows the run to its end. The spans the
/// new process exported (the resumed run's trace, of its own) must have the shape of the part of
/// the tree rebuilt from the log that came after the restart; returns them.
async fn resume_after_a_kill(
    s: &mut Server,
    got: &Received,
    t: &str,
    run: &str,
    request: &str,
    approved: bool,
) -> Vec<Span> {
    s.kill9();
    let restarted_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    s.restart().await;
    // Answered once the resumed run waits again: an answer that came before it read the log
    // would be taken from the log, with no event on the live span.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let m = crate::metrics::scrape(s).await;
        if crate::metrics::sample(&m, "threadstream_confirmations_waiting", &[]) == Some(1.0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the run was not resumed\n{}",
            s.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    s.confirm(request, &json!({"kind": "approval", "approved": approved}))
        .await
        .ok_json("answer");
    s.follow_run(t, run, |_| None).await;

    // The killed process never ended its run's span: the one exported is the resumed run's.
    let exported = wait_for(got, "invoke_agent orchestrator").await;
    let root = exported
        .iter()
        .map(|(_, s)| s)
        .find(|s| s.name == "invoke_agent orchestrator")
        .unwrap()
        .clone();
    assert_eq!(attr_str(&root, "threadstream.run.id").unwrap(), run);
    assert!(
        root.parent_span_id.is_empty(),
        "a resumed run is a trace of its own"
    );
    let live: Vec<Span> = exported
        .into_iter()
        .map(|(_, s)| s)
        .filter(|s| s.trace_id == root.trace_id)
        .collect();

    let (rebuilt_url, rebuilt) = receiver().await;
    let out = cli_on(
        s,
        &[
            "traces",
            "--thread",
            t,
            "--run",
            run,
            "--otlp-endpoint",
            &rebuilt_url,
        ],
    )
    .await;
    ok(out, "threadstream traces of the resumed run");
    let after_restart: Vec<Span> = spans_of(&rebuilt)
        .into_iter()
        .filter(|s| s.end_time_unix_nano >= restarted_ns)
        .map(|mut s| {
            s.events.retain(|e| e.time_unix_nano >= restarted_ns);
            s
        })
        .collect();
    assert_eq!(shape(&after_restart), shape(&live));
    live
}

/// Over a provider's wire format (the fake OpenAI server), model calls name the model as the
/// provider does (`gen_ai.request.model` `gpt-test`, not the configured `openai/gpt-test`: the
/// provider is `gen_ai.provider.name`), live and rebuilt from the log; the export is configured
/// with the `--otlp-endpoint` flag rather than the environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_calls_name_the_bare_model_on_a_flag_configured_export() {
    bounded(120, async {
        let fake = FakeLlm::start(vec![oai_answer("Hello there.")]).await;
        let (url, got) = receiver().await;
        let s = Server::start_with(Opts {
            model: "openai/gpt-test".into(),
            extra_args: vec![
                "--openai-base-url".into(),
                fake.openai_base(),
                "--openai-api-key".into(),
                "sk-test".into(),
                "--otlp-endpoint".into(),
                url,
            ],
            env: vec![("OTEL_BSP_SCHEDULE_DELAY".into(), "100".into())],
            ..Opts::default()
        })
        .await;
        let t = "t-traces-model";
        let run = s.chat(t, "hello").await;
        s.follow_run(t, &run, |_| None).await;
        let live: Vec<Span> = wait_for(&got, "invoke_agent orchestrator")
            .await
            .into_iter()
            .map(|(_, s)| s)
            .collect();
        let (rebuilt_url, rebuilt) = receiver().await;
        let out = cli_on(
            &s,
            &["traces", "--thread", t, "--otlp-endpoint", &rebuilt_url],
        )
        .await;
        ok(out, "threadstream traces");
        let from_log = spans_of(&rebuilt);
        for (what, spans) in [("live", &live), ("rebuilt", &from_log)] {
            let chats: Vec<&Span> = spans
                .iter()
                .filter(|s| attr_str(s, "gen_ai.operation.name").as_deref() == Some("chat"))
                .collect();
            // The run's answer and the thread's title.
            assert_eq!(chats.len(), 2, "{what}: {:#?}", shape(spans));
            for chat in chats {
                assert_eq!(chat.name, "chat gpt-test", "{what}");
                assert_eq!(
                    attr_str(chat, "gen_ai.request.model").as_deref(),
                    Some("gpt-test"),
                    "{what}"
                );
                assert_eq!(
                    attr_str(chat, "gen_ai.provider.name").as_deref(),
                    Some("openai"),
                    "{what}"
                );
            }
            let root = spans
                .iter()
                .find(|s| s.name == "invoke_agent orchestrator")
                .unwrap();
            assert_eq!(
                attr_str(root, "gen_ai.request.model").as_deref(),
                Some("gpt-test"),
                "{what}"
            );
        }
        assert_eq!(shape(&from_log), shape(&live));
    })
    .await
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
