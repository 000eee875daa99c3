//! What both HTTP providers share: the client (connect timeout), sending with bounded retries
//! (429 and 5xx and connection failures, exponential backoff with jitter, `Retry-After`
//! honoured), and turning a streamed SSE body into [`Chunk`]s with an idle-read timeout.
//!
//! Cancelling is dropping: the stream owns the response body (or the request still being
//! sent), so when the run drops the stream the connection is closed at once and the server sees
//! it go.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use rand::Rng;
use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::{RequestBuilder, Response, StatusCode};

use super::sse::{SseEvent, SseParser};
use crate::provider::{Chunk, ChunkStream, ProviderError};

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
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            max_retries: 4,
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

/// The pause before retry number `retry` (0-based): `base * 2^retry`, capped, times a random
/// factor in [0.5, 1.0] so many clients do not retry in step.
pub fn backoff(settings: &HttpSettings, retry: u32) -> Duration {
    let exp = settings
        .backoff_base
        .saturating_mul(2u32.saturating_pow(retry.min(20)));
    let capped = exp.min(settings.backoff_max);
    capped.mul_f64(rand::thread_rng().gen_range(0.5..=1.0))
}

/// `Retry-After` in seconds (a non-negative number); HTTP dates are not honoured.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let v = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    let secs: f64 = v.parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(86_400.0)))
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

/// Sends the request `make` builds, retrying 429, 5xx, connection failures and header timeouts
/// up to `max_retries` times. Returns the successful response, or the last failure.
pub async fn send(
    provider: &str,
    settings: &HttpSettings,
    make: impl Fn() -> RequestBuilder,
) -> Result<Response, ProviderError> {
    let mut retry = 0u32;
    loop {
        let attempt = tokio::time::timeout(settings.idle_timeout, make().send()).await;
        let (pause, failure) = match attempt {
            Ok(Ok(resp)) if resp.status().is_success() => return Ok(resp),
            Ok(Ok(resp)) => {
                let status = resp.status();
                let asked = retry_after(resp.headers());
                let message = error_message(resp, settings.idle_timeout).await;
                let failure = ProviderError::Status {
                    provider: provider.to_string(),
                    status: status.as_u16(),
                    message,
                };
                if !retryable(status) {
                    return Err(failure);
                }
                let pause = match asked {
                    Some(a) => a.min(settings.backoff_max),
                    None => backoff(settings, retry),
                };
                (pause, failure)
            }
            Ok(Err(e)) => {
                let retry_it = e.is_connect() || e.is_timeout() || e.is_request();
                let failure = ProviderError::Unavailable {
                    provider: provider.to_string(),
                    message: describe(&e, "the request failed"),
                    source: Some(Arc::new(e)),
                };
                if !retry_it {
                    return Err(failure);
                }
                (backoff(settings, retry), failure)
            }
            Err(_) => (
                backoff(settings, retry),
                ProviderError::Unavailable {
                    provider: provider.to_string(),
                    message: format!(
                        "no response within {} s",
                        settings.idle_timeout.as_secs_f64()
                    ),
                    source: None,
                },
            ),
        };
        if retry >= settings.max_retries {
            tracing::warn!(%provider, attempts = retry + 1, error = &failure as &dyn std::error::Error, "giving up on the provider");
            return Err(failure);
        }
        tracing::info!(%provider, retry = retry + 1, pause_ms = pause.as_millis() as u64, error = &failure as &dyn std::error::Error, "retrying the provider");
        tokio::time::sleep(pause).await;
        retry += 1;
    }
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
        match tokio::time::timeout(self.idle, self.body.next()).await {
            Err(_) => {
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

    #[test]
    fn backoff_doubles_with_jitter_and_is_capped() {
        let s = HttpSettings {
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_millis(1_000),
            ..HttpSettings::default()
        };
        for _ in 0..50 {
            let d0 = backoff(&s, 0);
            assert!(d0 >= Duration::from_millis(50) && d0 <= Duration::from_millis(100));
            let d2 = backoff(&s, 2);
            assert!(d2 >= Duration::from_millis(200) && d2 <= Duration::from_millis(400));
            let d9 = backoff(&s, 9);
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
        h.insert(
            RETRY_AFTER,
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&h), None);
    }
}
