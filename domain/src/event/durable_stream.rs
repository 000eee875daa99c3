//! The events of Durable Streams (internal: stored in the log under `stream:<path>`, never on the
//! n8n stream). The rules that produce them are the `DurableStream` aggregate's
//! (`domain/src/durable_stream.rs`); the protocol is <https://github.com/durable-streams/durable-streams>.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The bytes of one append, kept as the log can hold them (its payloads are JSON text).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamData {
    /// Bytes that are valid UTF-8 on a stream that is not JSON-mode.
    Text(String),
    /// Any other bytes, base64 (standard alphabet, padded).
    Base64(String),
    /// A JSON-mode append: its messages (a top-level array is flattened into its items).
    Json(Vec<Value>),
}

impl StreamData {
    /// How many messages (JSON mode) or bytes (other modes) it holds: what a fork's
    /// sub-offset counts.
    pub fn units(&self) -> usize {
        match self {
            StreamData::Text(s) => s.len(),
            StreamData::Base64(b) => base64_decoded_len(b),
            StreamData::Json(items) => items.len(),
        }
    }
}

fn base64_decoded_len(b: &str) -> usize {
    let padding = b.bytes().rev().take_while(|c| *c == b'=').count();
    (b.len() / 4) * 3 - padding
}

/// An idempotent producer's stamp on a write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerStamp {
    pub id: String,
    pub epoch: u64,
    pub seq: u64,
}

/// What a fork was forked from: the source stream, which of its lives (the id of the
/// `stream-created` event that began it), and the offset (a log id) up to which its data is
/// the fork's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForkOf {
    pub source: String,
    pub source_created_id: i64,
    pub offset: i64,
    /// Units of the source's next message that were copied into the fork (`Stream-Fork-Sub-Offset`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sub_offset: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// `stream-created`: a stream begins a new life (the first, or one after deletion or expiry).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamCreated {
    pub owner: String,
    pub content_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<u64>,
    /// As the client sent it (echoed back in `Stream-Expires-At`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// `expires_at` in epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
    #[serde(default)]
    pub closed: bool,
    /// The body of the create, if any: the stream's first message, at this event's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<StreamData>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<ForkOf>,
}

/// `stream-appended`: one append (a message, at this event's id).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamAppended {
    pub data: StreamData,
    /// `Stream-Seq`, the writer-coordination sequence, when the append carried one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub producer: Option<ProducerStamp>,
    /// The append also closed the stream.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub close: bool,
}

/// `stream-closed`: the stream takes no more appends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamClosed {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub producer: Option<ProducerStamp>,
}

/// `stream-fork-added`, on the source: a fork now reads through the source's life that began at
/// `created_id`, up to `offset`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamForkAdded {
    pub fork: String,
    pub created_id: i64,
    pub offset: i64,
}

/// `stream-fork-released`, on the source: the fork no longer reads through it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamForkRef {
    pub fork: String,
}
