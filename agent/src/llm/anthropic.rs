//! Anthropic messages (`POST {base}/v1/messages`, `stream: true`).
//!
//! Stream events: `message_start` (input usage), `content_block_start` / `_delta` / `_stop` for
//! `text` (→ text), `thinking` (→ reasoning) and `tool_use` blocks (the input arrives as
//! `input_json_delta` fragments; the call is yielded at its block's stop, with the input parsed),
//! `message_delta` (output usage), `message_stop` (the end), `ping`, and `error` (e.g.
//! `overloaded_error` in the middle of a stream).

use std::collections::HashMap;
use std::sync::Arc;

use secrecy::{ExposeSecret, SecretString};
use serde_json::{json, Value};

use super::http::{self, excerpt, Decoder, HttpSettings};
use super::openai::outcome_text;
use super::sse::SseEvent;
use crate::provider::{
    ChatMessage, ChatRequest, Chunk, ChunkStream, Finish, LlmProvider, ProviderError,
    ToolCallRequest, ToolOutcome, Usage,
};

pub const PROVIDER: &str = "anthropic";
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
pub const API_VERSION: &str = "2023-06-01";

/// A Claude model.
pub struct AnthropicProvider {
    name: String,
    model: String,
    base_url: String,
    api_key: Option<SecretString>,
    max_tokens: u32,
    /// Extended thinking's `budget_tokens` (0: not asked for).
    thinking_budget: u32,
    settings: HttpSettings,
    client: reqwest::Client,
}

impl AnthropicProvider {
    /// `base_url` ends before `/v1/messages`.
    pub fn new(
        model: &str,
        base_url: &str,
        api_key: Option<SecretString>,
        max_tokens: u32,
        settings: HttpSettings,
    ) -> Self {
        AnthropicProvider {
            name: format!("{PROVIDER}/{model}"),
            model: model.to_string(),
            base_url: base_url.trim_end_matches('/').to_string(),
            api_key: api_key.filter(|k| !k.expose_secret().is_empty()),
            max_tokens,
            thinking_budget: 0,
            client: http::client(&settings),
            settings,
        }
    }

    /// Asks for extended thinking with this budget (0: off).
    pub fn with_thinking(mut self, budget_tokens: u32) -> Self {
        self.thinking_budget = budget_tokens;
        self
    }
}

impl LlmProvider for AnthropicProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn stream(&self, request: ChatRequest) -> ChunkStream {
        let mut body = request_body(&self.model, self.max_tokens, &request);
        if self.thinking_budget > 0 {
            body["thinking"] = json!({"type": "enabled", "budget_tokens": self.thinking_budget});
        }
        let body = Arc::new(body);
        let url = format!("{}/v1/messages", self.base_url);
        let client = self.client.clone();
        let key = self.api_key.clone();
        let settings = self.settings.clone();
        let idle = settings.idle_timeout;
        let response = async move {
            http::send(PROVIDER, &settings, || {
                let mut rb = client
                    .post(&url)
                    .header("anthropic-version", API_VERSION)
                    .header("accept", "text/event-stream")
                    .json(&*body);
                if let Some(k) = &key {
                    rb = rb.header("x-api-key", k.expose_secret());
                }
                rb
            })
            .await
        };
        http::chunk_stream(PROVIDER, idle, response, AnthropicDecoder::default())
    }
}

/// The JSON body of one call. Consecutive messages of one role are merged (tool results follow
/// their assistant turn as one `user` message of `tool_result` blocks).
pub fn request_body(model: &str, max_tokens: u32, req: &ChatRequest) -> Value {
    let mut messages: Vec<(String, Vec<Value>)> = Vec::new();
    let mut push = |role: &str, block: Value| match messages.last_mut() {
        Some((r, blocks)) if r == role => blocks.push(block),
        _ => messages.push((role.to_string(), vec![block])),
    };
    for m in &req.messages {
        match m {
            ChatMessage::User { text } => push("user", json!({"type": "text", "text": text})),
            ChatMessage::Assistant {
                text,
                tool_calls,
                provider_blocks,
                ..
            } => {
                // Signed thinking blocks go back first, verbatim (required with tool use).
                for b in provider_blocks {
                    push("assistant", b.clone());
                }
                if !text.is_empty() {
                    push("assistant", json!({"type": "text", "text": text}));
                }
                for c in tool_calls {
                    push(
                        "assistant",
                        json!({"type": "tool_use", "id": c.id, "name": c.name, "input": Value::Object(c.args.clone())}),
                    );
                }
            }
            ChatMessage::Tool {
                call_id, outcome, ..
            } => push(
                "user",
                json!({
                    "type": "tool_result",
                    "tool_use_id": call_id,
                    "content": outcome_text(outcome),
                    "is_error": matches!(outcome, ToolOutcome::Err(_)),
                }),
            ),
        }
    }
    let messages: Vec<Value> = messages
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let mut body = json!({
        "model": model,
        "max_tokens": max_tokens,
        "stream": true,
        "system": req.system,
        "messages": messages,
    });
    if !req.tools.is_empty() {
        body["tools"] = req
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
    }
    body
}

enum Block {
    Text,
    Thinking {
        text: String,
        signature: String,
    },
    Redacted(Value),
    ToolUse {
        id: String,
        name: String,
        json: String,
    },
    Other,
}

/// Decodes the messages stream.
#[derive(Default)]
pub struct AnthropicDecoder {
    blocks: HashMap<u64, Block>,
    usage: Usage,
    done: bool,
}

fn protocol(message: String) -> ProviderError {
    ProviderError::Protocol {
        provider: PROVIDER.into(),
        message,
    }
}

impl Decoder for AnthropicDecoder {
    fn event(&mut self, event: SseEvent) -> Result<Vec<Chunk>, ProviderError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(vec![]);
        }
        let v: Value = serde_json::from_str(data)
            .map_err(|e| protocol(format!("malformed chunk ({e}): {}", excerpt(data))))?;
        let kind = v
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| protocol(format!("chunk without a type: {}", excerpt(data))))?;
        let index = v.get("index").and_then(Value::as_u64);
        let need_index =
            || index.ok_or_else(|| protocol(format!("{kind} without an index: {}", excerpt(data))));
        let mut out = Vec::new();
        match kind {
            "message_start" => {
                if let Some(u) = v.pointer("/message/usage") {
                    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
                    self.usage.input_tokens = n("input_tokens")
                        + n("cache_creation_input_tokens")
                        + n("cache_read_input_tokens");
                    self.usage.output_tokens = n("output_tokens");
                }
            }
            "content_block_start" => {
                let i = need_index()?;
                let block = v.get("content_block").cloned().unwrap_or(Value::Null);
                let b = match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        if let Some(t) = block.get("text").and_then(Value::as_str) {
                            if !t.is_empty() {
                                out.push(Chunk::Text(t.to_string()));
                            }
                        }
                        Block::Text
                    }
                    Some("thinking") => {
                        let t = block.get("thinking").and_then(Value::as_str).unwrap_or("");
                        if !t.is_empty() {
                            out.push(Chunk::Reasoning(t.to_string()));
                        }
                        Block::Thinking {
                            text: t.to_string(),
                            signature: block
                                .get("signature")
                                .and_then(Value::as_str)
                                .unwrap_or("")
                                .to_string(),
                        }
                    }
                    Some("redacted_thinking") => Block::Redacted(block.clone()),
                    Some("tool_use") => {
                        let id = block.get("id").and_then(Value::as_str).unwrap_or("");
                        let name = block.get("name").and_then(Value::as_str).unwrap_or("");
                        // The input usually starts as `{}` and arrives through deltas; a
                        // non-empty start is kept.
                        let start = match block.get("input") {
                            Some(Value::Object(o)) if !o.is_empty() => {
                                Value::Object(o.clone()).to_string()
                            }
                            _ => String::new(),
                        };
                        Block::ToolUse {
                            id: id.to_string(),
                            name: name.to_string(),
                            json: start,
                        }
                    }
                    _ => Block::Other,
                };
                self.blocks.insert(i, b);
            }
            "content_block_delta" => {
                let i = need_index()?;
                let delta = v.get("delta").cloned().unwrap_or(Value::Null);
                let dtype = delta.get("type").and_then(Value::as_str).unwrap_or("");
                let block = self
                    .blocks
                    .get_mut(&i)
                    .ok_or_else(|| protocol(format!("delta for unknown block {i}")))?;
                match (dtype, block) {
                    ("text_delta", _) => {
                        if let Some(t) = delta.get("text").and_then(Value::as_str) {
                            if !t.is_empty() {
                                out.push(Chunk::Text(t.to_string()));
                            }
                        }
                    }
                    ("thinking_delta", block) => {
                        if let Some(t) = delta.get("thinking").and_then(Value::as_str) {
                            if !t.is_empty() {
                                out.push(Chunk::Reasoning(t.to_string()));
                                if let Block::Thinking { text, .. } = block {
                                    text.push_str(t);
                                }
                            }
                        }
                    }
                    ("signature_delta", Block::Thinking { signature, .. }) => {
                        if let Some(s) = delta.get("signature").and_then(Value::as_str) {
                            signature.push_str(s);
                        }
                    }
                    ("input_json_delta", Block::ToolUse { json, .. }) => {
                        if let Some(p) = delta.get("partial_json").and_then(Value::as_str) {
                            json.push_str(p);
                        }
                    }
                    ("input_json_delta", _) => {
                        return Err(protocol(format!(
                            "input_json_delta for block {i}, which is not a tool_use"
                        )))
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                let i = need_index()?;
                let block = self.blocks.remove(&i);
                if let Some(Block::Thinking { text, signature }) = &block {
                    out.push(Chunk::ProviderBlock(
                        json!({"type": "thinking", "thinking": text, "signature": signature}),
                    ));
                }
                if let Some(Block::Redacted(b)) = &block {
                    out.push(Chunk::ProviderBlock(b.clone()));
                }
                if let Some(Block::ToolUse { id, name, json }) = block {
                    if name.is_empty() {
                        return Err(protocol(format!("tool_use block {i} has no name")));
                    }
                    let parsed = if json.trim().is_empty() {
                        Ok(serde_json::Map::new())
                    } else {
                        match serde_json::from_str::<Value>(&json) {
                            Ok(Value::Object(m)) => Ok(m),
                            _ => Err(format!(
                                "the input is not a JSON object: {}",
                                excerpt(&json)
                            )),
                        }
                    };
                    let id = if id.is_empty() {
                        format!("toolu_{i}")
                    } else {
                        id
                    };
                    out.push(match parsed {
                        Ok(args) => Chunk::ToolCall(ToolCallRequest { id, name, args }),
                        Err(why) => Chunk::InvalidToolCall(
                            ToolCallRequest {
                                id,
                                name,
                                args: serde_json::Map::new(),
                            },
                            why,
                        ),
                    });
                }
            }
            "message_delta" => {
                if let Some(n) = v.pointer("/usage/output_tokens").and_then(Value::as_u64) {
                    self.usage.output_tokens = n;
                }
            }
            "message_stop" => {
                self.done = true;
                out.push(Chunk::Finish(Finish {
                    usage: Some(self.usage),
                }));
            }
            "error" => {
                let e = v.get("error").cloned().unwrap_or(Value::Null);
                let etype = e.get("type").and_then(Value::as_str).unwrap_or("error");
                let msg = e.get("message").and_then(Value::as_str).unwrap_or("");
                return Err(ProviderError::Unavailable {
                    provider: PROVIDER.into(),
                    message: format!("error in the stream: {etype}: {msg}"),
                    source: None,
                });
            }
            _ => {} // ping and future event types
        }
        Ok(out)
    }

    fn end(&mut self) -> Result<Vec<Chunk>, ProviderError> {
        if self.done {
            return Ok(vec![]);
        }
        Err(protocol(
            "the stream ended before the answer was complete (no message_stop)".into(),
        ))
    }

    fn done(&self) -> bool {
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(data: Value) -> SseEvent {
        SseEvent {
            event: data["type"].as_str().unwrap().into(),
            data: data.to_string(),
        }
    }

    #[test]
    fn thinking_text_and_split_tool_use() {
        let mut d = AnthropicDecoder::default();
        let mut out = Vec::new();
        for e in [
            json!({"type":"message_start","message":{"usage":{"input_tokens":10,"output_tokens":1}}}),
            json!({"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"x"}}),
            json!({"type":"content_block_stop","index":0}),
            json!({"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}),
            json!({"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi"}}),
            json!({"type":"content_block_stop","index":1}),
            json!({"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"get-workflow","input":{}}}),
            json!({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"workflo"}}),
            json!({"type":"ping"}),
            json!({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"wId\": \"wf\"}"}}),
            json!({"type":"content_block_stop","index":2}),
            json!({"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}),
            json!({"type":"message_stop"}),
        ] {
            out.extend(d.event(ev(e)).unwrap());
        }
        assert!(d.done());
        assert_eq!(out[0], Chunk::Reasoning("hmm".into()));
        // The signed block, to send back with the turn.
        assert_eq!(
            out[1],
            Chunk::ProviderBlock(json!({"type": "thinking", "thinking": "hmm", "signature": "x"}))
        );
        assert_eq!(out[2], Chunk::Text("Hi".into()));
        let Chunk::ToolCall(c) = &out[3] else {
            panic!("{out:?}")
        };
        assert_eq!(c.id, "toolu_1");
        assert_eq!(Value::Object(c.args.clone()), json!({"workflowId": "wf"}));
        assert_eq!(
            out[4],
            Chunk::Finish(Finish {
                usage: Some(Usage {
                    input_tokens: 10,
                    output_tokens: 9
                })
            })
        );
    }

    #[test]
    fn tool_results_are_grouped_into_one_user_message() {
        let call = |id: &str| ToolCallRequest {
            id: id.into(),
            name: "x".into(),
            args: serde_json::Map::new(),
        };
        let req = ChatRequest {
            system: "s".into(),
            messages: vec![
                ChatMessage::User { text: "u".into() },
                ChatMessage::Assistant {
                    text: String::new(),
                    reasoning: String::new(),
                    tool_calls: vec![call("a"), call("b")],
                    provider_blocks: vec![],
                },
                ChatMessage::Tool {
                    call_id: "a".into(),
                    tool_name: "x".into(),
                    outcome: ToolOutcome::Ok(json!({"ok": 1})),
                },
                ChatMessage::Tool {
                    call_id: "b".into(),
                    tool_name: "x".into(),
                    outcome: ToolOutcome::Err("nope".into()),
                },
            ],
            tools: vec![],
        };
        let body = request_body("m", 100, &req);
        let msgs = body["messages"].as_array().unwrap();
        assert_eq!(msgs.len(), 3);
        assert_eq!(msgs[1]["content"].as_array().unwrap().len(), 2);
        assert_eq!(msgs[2]["role"], "user");
        assert_eq!(msgs[2]["content"][1]["is_error"], true);
        assert_eq!(msgs[2]["content"][1]["content"], "Error: nope");
    }
}
