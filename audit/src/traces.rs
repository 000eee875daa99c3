//! `threadstream traces`: a thread's runs as OpenTelemetry traces rebuilt from the log
//! ([`threadstream_projections::trace`]), as an OTLP export request: sent to a collector over
//! OTLP/HTTP (protobuf) or OTLP/gRPC, or written as OTLP/JSON.
//!
//! Ids are derived from the log, so exporting a run twice gives the same trace: the trace id
//! from the thread and run ids, each span's id from its key in the log. They are not the ids the
//! live export used (those were random); a run exported live and again from the log appears in
//! the backend as two traces of the same shape.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    span, status, ResourceSpans, ScopeSpans, Span, Status,
};
use prost::Message;
use sha2::{Digest, Sha256};
use threadstream_domain::StoredEvent;
use threadstream_projections::trace::{run_traces, AttrValue, RunTrace};
use threadstream_store::EventLog;

use crate::{AuditError, PAGE};

/// The thread's events, every page.
async fn thread_events(log: &EventLog, thread: &str) -> Result<Vec<StoredEvent>, AuditError> {
    let mut events = Vec::new();
    let mut after = 0;
    loop {
        let page = log.read_thread(thread, after, PAGE).await?;
        let Some(last) = page.last() else { break };
        after = last.id;
        events.extend(page);
    }
    Ok(events)
}

/// The traces of `thread`'s runs (only `run`'s when given); an error when there is none.
pub async fn read(
    log: &EventLog,
    thread: &str,
    run: Option<&str>,
) -> Result<Vec<RunTrace>, AuditError> {
    let traces = run_traces(&thread_events(log, thread).await?, run);
    if traces.is_empty() {
        return Err(AuditError::Invalid(match run {
            Some(r) => format!("thread '{thread}' has no run '{r}' in the log"),
            None => format!("thread '{thread}' has no run in the log"),
        }));
    }
    Ok(traces)
}

/// The OTLP export request of `traces`, under `service_name`.
pub fn otlp_request(traces: &[RunTrace], service_name: &str) -> ExportTraceServiceRequest {
    let spans = traces.iter().flat_map(otlp_spans).collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", AttrValue::Str(service_name.into()))],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "threadstream".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                spans,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

/// Posts `request` to the collector at `endpoint` (a base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT`
/// means it: the request goes to `<endpoint>/v1/traces`).
pub async fn post(endpoint: &str, request: &ExportTraceServiceRequest) -> Result<(), AuditError> {
    let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
    let answer = reqwest::Client::new()
        .post(&url)
        .header("content-type", "application/x-protobuf")
        .body(request.encode_to_vec())
        .send()
        .await
        .map_err(|e| AuditError::Invalid(format!("cannot reach the collector at {url}: {e}")))?;
    if !answer.status().is_success() {
        return Err(AuditError::Invalid(format!(
            "the collector at {url} answered {}",
            answer.status()
        )));
    }
    Ok(())
}

/// Sends `request` to the collector at `endpoint` over OTLP/gRPC (`TraceService/Export` at the
/// endpoint itself, as `OTEL_EXPORTER_OTLP_ENDPOINT` means it for gRPC).
pub async fn export_grpc(
    endpoint: &str,
    request: ExportTraceServiceRequest,
) -> Result<(), AuditError> {
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
    let mut client = TraceServiceClient::connect(endpoint.to_string())
        .await
        .map_err(|e| {
            AuditError::Invalid(format!("cannot reach the collector at {endpoint}: {e}"))
        })?;
    client.export(request).await.map_err(|e| {
        AuditError::Invalid(format!(
            "the collector at {endpoint} refused the export: {e}"
        ))
    })?;
    Ok(())
}

fn otlp_spans(trace: &RunTrace) -> Vec<Span> {
    let trace_id = digest(&["trace", &trace.thread_id, &trace.run_id])[..16].to_vec();
    let span_id = |key: &str| digest(&["span", &trace.thread_id, &trace.run_id, key])[..8].to_vec();
    // A span the log never ended (a run still live) ends at the last thing the trace saw.
    let last = trace
        .spans
        .iter()
        .flat_map(|s| [Some(s.start_ms), s.end_ms])
        .flatten()
        .max()
        .unwrap_or(0);
    trace
        .spans
        .iter()
        .map(|s| Span {
            trace_id: trace_id.clone(),
            span_id: span_id(&s.key),
            parent_span_id: s.parent.as_deref().map(span_id).unwrap_or_default(),
            name: s.name.clone(),
            kind: match s.kind {
                "client" => span::SpanKind::Client,
                _ => span::SpanKind::Internal,
            } as i32,
            start_time_unix_nano: nanos(s.start_ms),
            end_time_unix_nano: nanos(s.end_ms.unwrap_or(last)),
            attributes: s
                .attributes
                .iter()
                .cloned()
                .chain(
                    s.error_type
                        .clone()
                        .map(|e| ("error.type", AttrValue::Str(e))),
                )
                .map(|(k, v)| kv(k, v))
                .collect(),
            events: s
                .events
                .iter()
                .map(|e| span::Event {
                    time_unix_nano: nanos(e.ts),
                    name: e.name.into(),
                    attributes: e
                        .attributes
                        .iter()
                        .cloned()
                        .map(|(k, v)| kv(k, v))
                        .collect(),
                    dropped_attributes_count: 0,
                })
                .collect(),
            status: s.error_type.as_ref().map(|_| Status {
                code: status::StatusCode::Error as i32,
                message: String::new(),
            }),
            ..Default::default()
        })
        .collect()
}

fn kv(key: &str, value: AttrValue) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(match value {
                AttrValue::Str(s) => any_value::Value::StringValue(s),
                AttrValue::Int(i) => any_value::Value::IntValue(i),
                AttrValue::Float(f) => any_value::Value::DoubleValue(f),
            }),
        }),
        ..Default::default()
    }
}

fn nanos(ms: i64) -> u64 {
    ms.max(0) as u64 * 1_000_000
}

fn digest(parts: &[&str]) -> Vec<u8> {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    h.finalize().to_vec()
}
