//! The feed's side of JetStream: the connection, the stream, the highest id it holds, publishing
//! one event and purging an erased stream's subject.

use std::time::Duration;

use async_nats::jetstream::context::PublishAckFuture;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::{Config, StorageType, Stream};
use async_nats::{HeaderMap, HeaderValue, ServerAddr};
use bytes::Bytes;
use threadstream_domain::StoredEvent;

use crate::subject::{subject, token, SUBJECTS};

/// Why the feed could not publish; it retries after a pause.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    #[error("NATS: {0}")]
    Bus(String),
    #[error(transparent)]
    Store(#[from] threadstream_store::StoreError),
}

/// `what` failed with `e`.
pub(crate) fn bus<E: std::fmt::Display>(what: &'static str) -> impl FnOnce(E) -> FeedError {
    move |e| FeedError::Bus(format!("{what}: {e}"))
}

/// A message's headers besides `Nats-Msg-Id`.
pub const THREAD_HEADER: &str = "Threadstream-Thread";
pub const TYPE_HEADER: &str = "Threadstream-Type";
pub const RUN_HEADER: &str = "Threadstream-Run";

/// How long one request to the server (a publish's acknowledgement among them) may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How far back from the stream's last sequence [`Bus::last_published_id`] looks for a message
/// that is still there (an erasure's purge may have removed the last ones).
const LAST_MESSAGE_SEARCH: u64 = 10_000;

/// A connection to NATS and the feed's stream on it.
pub struct Bus {
    context: async_nats::jetstream::Context,
    stream: Stream,
    name: String,
}

impl Bus {
    /// Connects to `url` (one or several `nats://` addresses, comma-separated) and finds the
    /// stream `name`, creating it when missing (file storage, capturing
    /// `threadstream.events.>`, JetStream's default duplicate window of two minutes).
    pub async fn connect(url: &str, name: &str) -> Result<Bus, FeedError> {
        let addrs = url
            .split(',')
            .map(|a| a.trim().parse::<ServerAddr>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(bus("the change feed's address"))?;
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(REQUEST_TIMEOUT)
            // Back within a second of the server: the backlog waits on this.
            .reconnect_delay_callback(|attempts| {
                Duration::from_millis((attempts as u64 * 100).min(1_000))
            })
            .connect(addrs.as_slice())
            .await
            .map_err(bus("connecting"))?;
        let context = async_nats::jetstream::ContextBuilder::new()
            .timeout(REQUEST_TIMEOUT)
            .build(client);
        let stream = context
            .get_or_create_stream(Config {
                name: name.to_string(),
                subjects: vec![SUBJECTS.to_string()],
                storage: StorageType::File,
                ..Config::default()
            })
            .await
            .map_err(bus("finding or creating the stream"))?;
        Ok(Bus {
            context,
            stream,
            name: name.to_string(),
        })
    }

    /// The stream's duplicate window: how long it remembers a `Nats-Msg-Id`.
    pub fn duplicate_window(&self) -> Duration {
        self.stream.cached_info().config.duplicate_window
    }

    /// The highest log id the stream holds: its last message's `Nats-Msg-Id` (0 when it holds
    /// none). The last sequences may be gone (an erasure purged them and the publisher stopped
    /// before publishing the tombstone), so it looks back from the last sequence for a message
    /// still there.
    pub async fn last_published_id(&self) -> Result<i64, FeedError> {
        let state = self
            .stream
            .get_info()
            .await
            .map_err(bus("reading the stream's state"))?
            .state;
        if state.messages == 0 {
            return Ok(0);
        }
        let lowest = state
            .first_sequence
            .max(state.last_sequence.saturating_sub(LAST_MESSAGE_SEARCH));
        let mut seq = state.last_sequence;
        while seq >= lowest && seq > 0 {
            match self.stream.get_raw_message(seq).await {
                Ok(m) => {
                    let id = m
                        .headers
                        .get(async_nats::header::NATS_MESSAGE_ID)
                        .and_then(|v| v.as_str().parse::<i64>().ok());
                    return id.ok_or_else(|| {
                        FeedError::Bus(format!(
                            "message {seq} of stream {} has no log id in Nats-Msg-Id: \
                             is something else publishing to {SUBJECTS}?",
                            self.name
                        ))
                    });
                }
                Err(e)
                    if e.kind()
                        == async_nats::jetstream::stream::RawMessageErrorKind::NoMessageFound =>
                {
                    seq -= 1;
                }
                Err(e) => return Err(bus("reading the stream's last message")(e)),
            }
        }
        Ok(0)
    }

    /// Sends `event` (without waiting for its acknowledgement).
    pub async fn publish(&self, event: &StoredEvent) -> Result<PublishAckFuture, FeedError> {
        let mut line = String::with_capacity(event.payload.len() + 192);
        threadstream_audit::line::write_line(event, &mut line);
        line.pop(); // the line's `\n`
        let mut headers = HeaderMap::new();
        headers.insert(THREAD_HEADER, header_value(&event.thread_id));
        headers.insert(TYPE_HEADER, header_value(&event.event_type));
        if !event.run_id.is_empty() {
            headers.insert(RUN_HEADER, header_value(&event.run_id));
        }
        // After `headers`, which replaces every header set before it.
        let message = PublishMessage::build()
            .headers(headers)
            .message_id(event.id.to_string())
            .payload(Bytes::from(line));
        self.context
            .send_publish(subject(&event.thread_id), message)
            .await
            .map_err(bus("publishing"))
    }

    /// Waits for a publish's acknowledgement by the feed's stream.
    pub async fn acknowledged(&self, ack: PublishAckFuture) -> Result<(), FeedError> {
        let ack = ack.await.map_err(bus("publishing"))?;
        if ack.stream != self.name {
            return Err(FeedError::Bus(format!(
                "stream {} took the message, not {}: two streams capture {SUBJECTS}",
                ack.stream, self.name
            )));
        }
        Ok(())
    }

    /// Removes every message of log stream `stream` from the feed's stream.
    pub async fn purge(&self, stream: &str) -> Result<u64, FeedError> {
        let purged = self
            .stream
            .purge()
            .filter(subject(stream))
            .await
            .map_err(bus("purging an erased stream"))?;
        Ok(purged.purged)
    }
}

/// A header's value: the text itself, or its subject token when it holds a CR or LF (which a
/// NATS header cannot carry).
fn header_value(text: &str) -> HeaderValue {
    text.parse()
        .unwrap_or_else(|_| token(text).parse().expect("tokens are valid header values"))
}
