//! What both HTTP providers share: the client (connect timeout), sending with bounded retries
//! (429 and 5xx and connection failures, exponential backoff with jitter by `backon`,
//! `Retry-After` honoured as seconds or as an HTTP date), and turning a streamed SSE body into [`Chunk`]s with an idle-read timeout.
//!
//! Cancelling is dropping: the stream owns the response body (or the request still being
//! sent), so when the run drops the stream the connection is closed at once and the server sees
//! it go.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use backon::{ExponentialBuilder, Retryable};
use futures::stream::BoxStream;
use futures::StreamExt;
use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::{RequestBuilder, Response, StatusCode};

use super::sse::{SseEvent, SseParser};
use crate::provider::{Chunk, ChunkStream, ProviderError};

/// Default longest wait for a connection to the provider.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default longest wait for response headers, then between two reads of a streamed answer.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Default retries of a call answered 429 or 5xx, or that could not connect.
pub const DEFAULT_MAX_RETRIES: u32 = 4;

/// Timeouts and retries of the HTTP providers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSettings {
    /// Longest wait for a TCP/TLS connection to the provider.
    pub connect_timeout: Duration,
    /// Longest wait for the response headers, and then between two reads of the streamed body.
    pub idle_timeout: Duration,
    /// Retries after the first attempt (so `max_retries + 1` attempts at most).
    pub max_retries: u32,
    /// The first retry's pause; each later one doubles it (before jitter).
    pub backoff_base: Duration,
    /// Cap of a pause, computed or asked for with `Retry-After`.
    pub backoff_max: Duration,
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_retries: DEFAULT_MAX_RETRIES,
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
        }
    }
}

/// A reqwest client with the connect timeout set.
pub fn client(settings: &HttpSettings) -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(settings.connect_timeout)
        .build()
        .expect("the HTTP client builds")
}

/// The pauses between attempts: `base * 2^retry`, capped, times a random factor in
/// [0.5, 1.0) so many clients do not retry in step. `backon` jitters upwards (a pause becomes
/// `d * [1, 2)`), hence its delays are half of ours.
fn backoff(settings: &HttpSettings) -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(settings.backoff_base / 2)
        .with_max_delay(settings.backoff_max / 2)
        .with_max_times(settings.max_retries as usize)
        .with_jitter()
}

/// `Retry-After` as seconds (a non-negative number) or as an HTTP date (the wait until then,
/// nothing when it has passed); at most a day.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let v = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    let wait = match v.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => Duration::from_secs_f64(secs.min(86_400.0)),
        Ok(_) => return None,
        Err(_) => httpdate::parse_http_date(v)
            .ok()?
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    };
    Some(wait.min(Duration::from_secs(86_400)))
}

fn retryable(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error()
}

/// The message of an error body: `error.message` of a JSON body, else the text (shortened).
async fn error_message(resp: Response, idle: Duration) -> String {
    let text = match tokio::time::timeout(idle, resp.text()).await {
        Ok(Ok(t)) => t,
        _ => String::new(),
    };
    let from_json = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| {
            let e = v.get("error")?;
            e.get("message")
                .and_then(|m| m.as_str())
                .map(str::to_string)
                .or_else(|| e.as_str().map(str::to_string))
        });
    let mut msg = from_json.unwrap_or(text);
    if msg.len() > 500 {
        let mut end = 500;
        while !msg.is_char_boundary(end) {
            end -= 1;
        }
        msg.truncate(end);
        msg.push('…');
    }
    if msg.trim().is_empty() {
        "no details".into()
    } else {
        msg
    }
}

/// One failed attempt: what to report, whether another attempt may succeed, and the pause the
/// provider asked for.
struct Failed {
    error: ProviderError,
    retryable: bool,
    asked: Option<Duration>,
}

async fn attempt(
    provider: &str,
    settings: &HttpSettings,
    request: RequestBuilder,
) -> Result<Response, Failed> {
    match tokio::time::timeout(settings.idle_timeout, request.send()).await {
        Ok(Ok(resp)) if resp.status().is_success() => Ok(resp),
        Ok(Ok(resp)) => {
            let status = resp.status();
            let asked = retry_after(resp.headers());
            let message = error_message(resp, settings.idle_timeout).await;
            Err(Failed {
                error: ProviderError::Status {
                    provider: provider.to_string(),
                    status: status.as_u16(),
                    message,
                },
                retryable: retryable(status),
                asked,
            })
        }
        Ok(Err(e)) => {
            let retryable = e.is_connect() || e.is_timeout() || e.is_request();
            Err(Failed {
                error: ProviderError::Unavailable {
                    provider: provider.to_string(),
                    message: describe(&e, "the request failed"),
                    source: Some(Arc::new(e)),
                },
                retryable,
                asked: None,
            })
        }
        Err(_) => Err(Failed {
            error: ProviderError::Unavailable {
                provider: provider.to_string(),
                message: format!(
                    "no response within {} s",
                    settings.idle_timeout.as_secs_f64()
                ),
                source: None,
            },
            retryable: true,
            asked: None,
        }),
    }
}

/// Sends the request `make` builds, retrying 429, 5xx, connection failures and header timeouts
/// up to `max_retries` times. Returns the successful response, or the last failure.
pub async fn send(
    provider: &str,
    settings: &HttpSettings,
    make: impl Fn() -> RequestBuilder,
) -> Result<Response, ProviderError> {
    let mut retries = 0u32;
    let sent = (|| attempt(provider, settings, make()))
        .retry(backoff(settings))
        .when(|f: &Failed| f.retryable)
        // A pause the provider asked for replaces the computed one (still capped); `None` means
        // the retries have run out.
        .adjust(|f: &Failed, computed| {
            computed.map(|d| f.asked.map_or(d, |a| a.min(settings.backoff_max)))
        })
        .notify(|f: &Failed, pause| {
            retries += 1;
            tracing::info!(%provider, retry = retries, pause_ms = pause.as_millis() as u64, error = &f.error as &dyn std::error::Error, "retrying the provider");
        })
        .await;
    sent.map_err(|f| {
        if f.retryable {
            tracing::warn!(%provider, attempts = retries + 1, error = &f.error as &dyn std::error::Error, "giving up on the provider");
        }
        f.error
    })
}

/// A reqwest error with its causes, without the URL's query (no secrets go in URLs here, but
/// keep messages short).
/// What a client may read of a transport failure; the error itself (hosts, addresses, the
/// OS's words) is kept as the `source()` of the [`ProviderError`] for the log.
fn describe(e: &reqwest::Error, otherwise: &str) -> String {
    if e.is_connect() {
        "cannot connect".to_string()
    } else if e.is_timeout() {
        "timed out".to_string()
    } else {
        otherwise.to_string()
    }
}

/// Turns SSE events of one provider's stream into chunks.
pub trait Decoder: Send + 'static {
    /// One event. `Err` ends the stream with that error.
    fn event(&mut self, event: SseEvent) -> Result<Vec<Chunk>, ProviderError>;
    /// The body ended. `Err` when the answer was cut short.
    fn end(&mut self) -> Result<Vec<Chunk>, ProviderError>;
    /// The provider said the answer is complete (nothing after it is read).
    fn done(&self) -> bool;
}

struct Body<D> {
    provider: String,
    body: BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    parser: SseParser,
    decoder: D,
    queue: VecDeque<Result<Chunk, ProviderError>>,
    idle: Duration,
    /// When the last piece of the body arrived.
    data_at: tokio::time::Instant,
    /// Fires `idle` after the last piece (checked against `data_at` when it does): one timer
    /// for the body, re-armed only when it fires, not one per read (a token is one read, and
    /// each timer costs two timer-wheel updates; docs/performance.md, "Cost per token at model
    /// speed").
    stall: std::pin::Pin<Box<tokio::time::Sleep>>,
    ended: bool,
}

enum State<F, D> {
    Connecting(F, D, String, Duration),
    Reading(Box<Body<D>>),
    Done,
}

/// The chunk stream of one call: awaits `response` (the request with its retries), then reads
/// the SSE body through `decoder`. Any error is the stream's last item.
pub fn chunk_stream<F, D>(provider: &str, idle: Duration, response: F, decoder: D) -> ChunkStream
where
    F: Future<Output = Result<Response, ProviderError>> + Send + 'static,
    D: Decoder,
{
    let start = State::Connecting(response, decoder, provider.to_string(), idle);
    Box::pin(futures::stream::unfold(start, |state| async move {
        let mut b = match state {
            State::Done => return None,
            State::Connecting(fut, decoder, provider, idle) => match fut.await {
                Err(e) => return Some((Err(e), State::Done)),
                Ok(resp) => Box::new(Body {
                    provider,
                    body: resp.bytes_stream().boxed(),
                    parser: SseParser::default(),
                    decoder,
                    queue: VecDeque::new(),
                    idle,
                    data_at: tokio::time::Instant::now(),
                    stall: Box::pin(tokio::time::sleep(idle)),
                    ended: false,
                }),
            },
            State::Reading(b) => b,
        };
        loop {
            if let Some(item) = b.queue.pop_front() {
                let next = if item.is_err() {
                    State::Done
                } else {
                    State::Reading(b)
                };
                return Some((item, next));
            }
            if b.ended {
                return None;
            }
            b.read().await;
        }
    }))
}

impl<D: Decoder> Body<D> {
    /// Reads one piece of the body and queues what it completes.
    async fn read(&mut self) {
        let protocol = |provider: &str, message: String| ProviderError::Protocol {
            provider: provider.to_string(),
            message,
        };
        let next = loop {
            tokio::select! {
                next = self.body.next() => {
                    self.data_at = tokio::time::Instant::now();
                    break Ok(next);
                }
                _ = self.stall.as_mut() => {
                    let due = self.data_at + self.idle;
                    if tokio::time::Instant::now() >= due {
                        break Err(());
                    }
                    self.stall.as_mut().reset(due);
                }
            }
        };
        match next {
            Err(()) => {
                self.fail(ProviderError::Unavailable {
                    provider: self.provider.clone(),
                    message: format!(
                        "the stream stalled: no data for {} s",
                        self.idle.as_secs_f64()
                    ),
                    source: None,
                });
            }
            Ok(Some(Err(e))) => {
                self.fail(ProviderError::Unavailable {
                    provider: self.provider.clone(),
                    message: format!("the stream broke: {}", describe(&e, "read failed")),
                    source: Some(Arc::new(e)),
                });
            }
            Ok(Some(Ok(bytes))) => match self.parser.feed(&bytes) {
                Err(m) => {
                    let e = protocol(&self.provider, m);
                    self.fail(e)
                }
                Ok(events) => {
                    for ev in events {
                        self.decode(ev);
                        if self.ended {
                            return;
                        }
                    }
                }
            },
            Ok(None) => {
                if let Some(ev) = self.parser.finish() {
                    self.decode(ev);
                    if self.ended {
                        return;
                    }
                }
                match self.decoder.end() {
                    Ok(chunks) => self.queue.extend(chunks.into_iter().map(Ok)),
                    Err(e) => self.queue.push_back(Err(e)),
                }
                self.ended = true;
            }
        }
    }

    fn decode(&mut self, ev: SseEvent) {
        match self.decoder.event(ev) {
            Ok(chunks) => {
                self.queue.extend(chunks.into_iter().map(Ok));
                if self.decoder.done() {
                    // Nothing after the end marker matters; the body is dropped with the stream.
                    self.ended = true;
                }
            }
            Err(e) => self.fail(e),
        }
    }

    fn fail(&mut self, e: ProviderError) {
        self.queue.push_back(Err(e));
        self.ended = true;
    }
}

/// Shortens a chunk quoted in an error message.
pub fn excerpt(text: &str) -> String {
    let mut end = text.len().min(200);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    if end < text.len() {
        format!("{}…", &text[..end])
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use backon::BackoffBuilder;

    #[test]
    fn backoff_doubles_with_jitter_and_is_capped() {
        let s = HttpSettings {
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_millis(1_000),
            max_retries: 10,
            ..HttpSettings::default()
        };
        for _ in 0..50 {
            let pauses: Vec<Duration> = backoff(&s).build().collect();
            assert_eq!(pauses.len(), 10, "one pause per retry");
            let d0 = pauses[0];
            assert!(d0 >= Duration::from_millis(50) && d0 <= Duration::from_millis(100));
            let d2 = pauses[2];
            assert!(d2 >= Duration::from_millis(200) && d2 <= Duration::from_millis(400));
            let d9 = pauses[9];
            assert!(d9 >= Duration::from_millis(500) && d9 <= Duration::from_millis(1_000));
        }
    }

    #[test]
    fn retry_after_seconds() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert(RETRY_AFTER, "2".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert(RETRY_AFTER, "0.5".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_millis(500)));
        h.insert(RETRY_AFTER, "soon".parse().unwrap());
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn retry_after_http_date() {
        let mut h = HeaderMap::new();
        // A date that has passed: retry at once.
        h.insert(
            RETRY_AFTER,
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&h), Some(Duration::ZERO));
        // HTTP dates have whole seconds: 10 s ahead is a wait of 9 to 10 s.
        let ahead = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(10));
        h.insert(RETRY_AFTER, ahead.parse().unwrap());
        let wait = retry_after(&h).unwrap();
        assert!(
            wait > Duration::from_secs(8) && wait <= Duration::from_secs(10),
            "{wait:?}"
        );
    }
}
