//! Exporting the agent's GenAI spans (`threadstream_agent::telemetry`) over OTLP, when an
//! endpoint is configured (`--otlp-endpoint` or `OTEL_EXPORTER_OTLP_ENDPOINT`); see
//! docs/operations.md, "Traces". Without one, nothing here runs and no layer enables the spans'
//! target, so they cost nothing.
//!
//! The pipeline is the OpenTelemetry SDK's: a batch span processor on its own thread, exporting
//! with OTLP/HTTP (protobuf, the default) or OTLP/gRPC, under the service name
//! `OTEL_SERVICE_NAME` (default `threadstream`). The batch processor takes the standard
//! `OTEL_BSP_*` variables.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::Layer;

/// The service name when `OTEL_SERVICE_NAME` is not set.
pub const DEFAULT_SERVICE_NAME: &str = "threadstream";

/// How spans leave the process: the OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OtlpProtocol {
    /// OTLP/HTTP with protobuf bodies (`POST <endpoint>/v1/traces`).
    #[value(name = "http/protobuf")]
    HttpProtobuf,
    /// OTLP/gRPC (`TraceService/Export` at the endpoint).
    Grpc,
}

/// Where and how spans are exported.
#[derive(Debug, Clone)]
pub struct OtlpSettings {
    /// The collector's base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT` means it: OTLP/HTTP posts to
    /// `<endpoint>/v1/traces`, gRPC calls the endpoint itself.
    pub endpoint: String,
    pub protocol: OtlpProtocol,
    pub service_name: String,
    /// Message and tool content on the spans (off unless opted in: it may be personal data).
    pub capture_content: bool,
}

/// The running export pipeline. Dropping it flushes the spans still in the batch and stops the
/// exporter (call it at shutdown, after the server stopped: spans of runs settled by the drain
/// are exported too).
pub struct TracingGuard {
    provider: SdkTracerProvider,
}

impl Drop for TracingGuard {
    fn drop(&mut self) {
        if let Err(e) = self.provider.shutdown() {
            eprintln!("threadstream: flushing the last spans failed: {e}");
        }
    }
}

/// The `tracing` layer that exports the GenAI spans to `settings.endpoint`, and the guard that
/// keeps its pipeline alive. Must be called within the Tokio runtime (the gRPC channel is
/// built on it).
pub fn otlp_layer<S>(settings: &OtlpSettings) -> anyhow::Result<(impl Layer<S>, TracingGuard)>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    threadstream_agent::install_tls_provider();
    let base = settings.endpoint.trim_end_matches('/');
    let exporter = match settings.protocol {
        OtlpProtocol::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(format!("{base}/v1/traces"))
            .build()?,
        OtlpProtocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(base)
            .build()?,
    };
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name(settings.service_name.clone())
                .build(),
        )
        .build();
    threadstream_agent::telemetry::capture_content(settings.capture_content);
    let tracer = provider.tracer("threadstream");
    // Only the conventions' attributes: no source locations, threads, targets or busy/idle.
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        .with_filter(
            Targets::new().with_target(threadstream_agent::telemetry::TARGET, LevelFilter::INFO),
        );
    Ok((layer, TracingGuard { provider }))
}
