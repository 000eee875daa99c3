//! OpenAI-compatible chat completions (`POST {base}/chat/completions`, `stream: true`): OpenAI,
//! Ollama, vLLM, llama.cpp's server, and anything else that speaks the format.
//!
//! Streamed deltas: `content` → text; `reasoning_content` (vLLM, DeepSeek) or `reasoning`
//! (Ollama, OpenRouter) → reasoning; `tool_calls` fragments keyed by `index` — the id and name
//! usually in the first fragment, the arguments spread over many, several calls interleaved —
//! are assembled and each complete call is yielded once, with its arguments parsed. `usage`
//! (asked for with `stream_options.include_usage`) is recorded. `data: [DONE]` ends the answer.

use std::collections::BTreeMap;
use std::sync::Arc;

use secrecy::{ExposeSecret, SecretString};
use serde_json::{json, Value};

use super::http::{self, excerpt, Decoder, HttpSettings};
use super::sse::SseEvent;
use crate::provider::{
    ChatMessage, ChatRequest, Chunk, ChunkStream, Finish, LlmProvider, ProviderError,
    ToolCallRequest, ToolOutcome, Usage,
};

pub const PROVIDER: &str = "openai";
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// A model behind an OpenAI-compatible endpoint.
pub struct OpenAiProvider {
    name: String,
    model: String,
    base_url: String,
    api_key: Option<SecretString>,
    settings: HttpSettings,
    client: reqwest::Client,
}

impl OpenAiProvider {
    /// `model` is the provider's model name (e.g. `gpt-4o-mini`, `llama3.1`); `base_url`
    /// ends before `/chat/completions` (e.g. `http://localhost:11434/v1`).
    pub fn new(
        model: &str,
        base_url: &str,
        api_key: Option<SecretString>,
        settings: HttpSettings,
    ) -> Self {
        OpenAiProvider {
            name: format!("{PROVIDER}/{model}"),
            model: model.to_string(),
            base_url: base_url.trim_end_matches('/').to_string(),
            api_key: api_key.filter(|k| !k.expose_secret().is_empty()),
            client: http::client(&settings),
            settings,
        }
    }
}

impl LlmProvider for OpenAiProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn stream(&self, request: ChatRequest) -> ChunkStream {
        let body = Arc::new(request_body(&self.model, &request));
        let url = format!("{}/chat/completions", self.base_url);
        let client = self.client.clone();
        let key = self.api_key.clone();
        let settings = self.settings.clone();
        let idle = settings.idle_timeout;
        let response = async move {
            http::send(PROVIDER, &settings, || {
                let mut rb = client
                    .post(&url)
                    .header("accept", "text/event-stream")
                    .json(&*body);
                if let Some(k) = &key {
                    rb = rb.bearer_auth(k.expose_secret());
                }
                rb
            })
            .await
        };
        http::chunk_stream(PROVIDER, idle, response, OpenAiDecoder::default())
    }
}

/// The JSON body of one call.
pub fn request_body(model: &str, req: &ChatRequest) -> Value {
    let mut messages = vec![json!({"role": "system", "content": req.system})];
    for m in &req.messages {
        match m {
            ChatMessage::User { text } => messages.push(json!({"role": "user", "content": text})),
            ChatMessage::Assistant {
                text, tool_calls, ..
            } => {
                if text.is_empty() && tool_calls.is_empty() {
                    continue;
                }
                let mut msg = json!({"role": "assistant", "content": text});
                if !tool_calls.is_empty() {
                    msg["tool_calls"] = tool_calls
                        .iter()
                        .map(ToolCallRequest::function_call_json)
                        .collect();
                }
                messages.push(msg);
            }
            ChatMessage::Tool {
                call_id, outcome, ..
            } => messages.push(json!({
                "role": "tool",
                "tool_call_id": call_id,
                "content": outcome_text(outcome),
            })),
        }
    }
    let mut body = json!({
        "model": model,
        "stream": true,
        "stream_options": {"include_usage": true},
        "messages": messages,
    });
    if !req.tools.is_empty() {
        body["tools"] = req
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                })
            })
            .collect();
    }
    body
}

/// A tool outcome as the text the model reads.
pub fn outcome_text(outcome: &ToolOutcome) -> String {
    match outcome {
        ToolOutcome::Ok(Value::String(s)) => s.clone(),
        ToolOutcome::Ok(v) => v.to_string(),
        ToolOutcome::Err(e) => format!("Error: {e}"),
    }
}

#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Decodes the chat-completions stream.
#[derive(Default)]
pub struct OpenAiDecoder {
    calls: BTreeMap<u64, PartialCall>,
    usage: Option<Usage>,
    finish_reason: Option<String>,
    done: bool,
}

fn protocol(message: String) -> ProviderError {
    ProviderError::Protocol {
        provider: PROVIDER.into(),
        message,
    }
}

impl OpenAiDecoder {
    /// The assembled tool calls, in index order.
    fn take_calls(&mut self) -> Result<Vec<Chunk>, ProviderError> {
        let calls = std::mem::take(&mut self.calls);
        let mut out = Vec::new();
        for (index, c) in calls {
            if c.name.is_empty() {
                return Err(protocol(format!("tool call {index} has no name")));
            }
            let id = if c.id.is_empty() {
                format!("call_{index}")
            } else {
                c.id
            };
            let parsed = if c.arguments.trim().is_empty() {
                Ok(serde_json::Map::new())
            } else {
                match serde_json::from_str::<Value>(&c.arguments) {
                    Ok(Value::Object(m)) => Ok(m),
                    _ => Err(format!(
                        "the arguments are not a JSON object: {}",
                        excerpt(&c.arguments)
                    )),
                }
            };
            out.push(match parsed {
                Ok(args) => Chunk::ToolCall(ToolCallRequest {
                    id,
                    name: c.name,
                    args,
                }),
                Err(why) => Chunk::InvalidToolCall(
                    ToolCallRequest {
                        id,
                        name: c.name,
                        args: serde_json::Map::new(),
                    },
                    why,
                ),
            });
        }
        Ok(out)
    }

    fn finish(&mut self) -> Result<Vec<Chunk>, ProviderError> {
        let mut out = self.take_calls()?;
        out.push(Chunk::Finish(Finish { usage: self.usage }));
        Ok(out)
    }
}

impl Decoder for OpenAiDecoder {
    fn event(&mut self, event: SseEvent) -> Result<Vec<Chunk>, ProviderError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(vec![]);
        }
        if data == "[DONE]" {
            self.done = true;
            return self.finish();
        }
        let v: Value = serde_json::from_str(data)
            .map_err(|e| protocol(format!("malformed chunk ({e}): {}", excerpt(data))))?;
        if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
            let msg = err
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| err.to_string());
            return Err(ProviderError::Unavailable {
                provider: PROVIDER.into(),
                message: format!("error in the stream: {msg}"),
                source: None,
            });
        }
        if !v.is_object() {
            return Err(protocol(format!("malformed chunk: {}", excerpt(data))));
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
            self.usage = Some(Usage {
                input_tokens: n("prompt_tokens"),
                output_tokens: n("completion_tokens"),
            });
        }
        let mut out = Vec::new();
        let choices = match v.get("choices") {
            None | Some(Value::Null) => return Ok(out),
            Some(Value::Array(c)) => c,
            Some(_) => return Err(protocol(format!("malformed chunk: {}", excerpt(data)))),
        };
        let Some(choice) = choices.first() else {
            return Ok(out);
        };
        if let Some(delta) = choice.get("delta").filter(|d| d.is_object()) {
            // Some servers send the same text under both names: take one.
            let reasoning = ["reasoning_content", "reasoning"]
                .iter()
                .filter_map(|k| delta.get(*k).and_then(Value::as_str))
                .find(|t| !t.is_empty());
            if let Some(t) = reasoning {
                out.push(Chunk::Reasoning(t.to_string()));
            }
            if let Some(t) = delta.get("content").and_then(Value::as_str) {
                if !t.is_empty() {
                    out.push(Chunk::Text(t.to_string()));
                }
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                for (pos, c) in calls.iter().enumerate() {
                    let index = c.get("index").and_then(Value::as_u64).unwrap_or(pos as u64);
                    let entry = self.calls.entry(index).or_default();
                    if let Some(id) = c.get("id").and_then(Value::as_str) {
                        if entry.id.is_empty() {
                            entry.id = id.to_string();
                        }
                    }
                    if let Some(f) = c.get("function") {
                        if let Some(n) = f.get("name").and_then(Value::as_str) {
                            entry.name.push_str(n);
                        }
                        match f.get("arguments") {
                            Some(Value::String(a)) => entry.arguments.push_str(a),
                            // Some servers send the arguments as an object, whole.
                            Some(Value::Object(o)) => {
                                entry.arguments = Value::Object(o.clone()).to_string()
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_string());
            out.extend(self.take_calls()?);
        }
        Ok(out)
    }

    fn end(&mut self) -> Result<Vec<Chunk>, ProviderError> {
        if self.done {
            return Ok(vec![]);
        }
        if self.finish_reason.is_none() {
            return Err(protocol(
                "the stream ended before the answer was complete (no finish_reason, no [DONE])"
                    .into(),
            ));
        }
        self.done = true;
        self.finish()
    }

    fn done(&self) -> bool {
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(data: &str) -> SseEvent {
        SseEvent {
            event: String::new(),
            data: data.into(),
        }
    }

    #[test]
    fn parallel_split_tool_calls_are_assembled_in_index_order() {
        let mut d = OpenAiDecoder::default();
        let mut out = Vec::new();
        for data in [
            r#"{"choices":[{"delta":{"reasoning_content":"think","reasoning":"think"}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"get-","arguments":""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"list-workflows","arguments":"{\"li"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"name":"workflow","arguments":"{\"workflowId\":"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"mit\":3}"}},{"index":1,"function":{"arguments":"\"x\"}"}}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":5}}"#,
            "[DONE]",
        ] {
            out.extend(d.event(ev(data)).unwrap());
        }
        assert!(d.done());
        assert_eq!(out[0], Chunk::Reasoning("think".into()));
        let Chunk::ToolCall(a) = &out[1] else {
            panic!("{out:?}")
        };
        assert_eq!((a.id.as_str(), a.name.as_str()), ("a", "list-workflows"));
        assert_eq!(Value::Object(a.args.clone()), json!({"limit": 3}));
        let Chunk::ToolCall(b) = &out[2] else {
            panic!("{out:?}")
        };
        assert_eq!(b.name, "get-workflow");
        assert_eq!(Value::Object(b.args.clone()), json!({"workflowId": "x"}));
        assert_eq!(
            out[3],
            Chunk::Finish(Finish {
                usage: Some(Usage {
                    input_tokens: 7,
                    output_tokens: 5
                })
            })
        );
    }

    #[test]
    fn malformed_and_truncated_streams_are_errors() {
        let mut d = OpenAiDecoder::default();
        assert!(matches!(
            d.event(ev("{not json")),
            Err(ProviderError::Protocol { .. })
        ));
        let mut d = OpenAiDecoder::default();
        d.event(ev(r#"{"choices":[{"delta":{"content":"hi"}}]}"#))
            .unwrap();
        assert!(d.end().is_err());
        // Arguments that are not an object are the model's mistake: an invalid call.
        let mut d = OpenAiDecoder::default();
        let out = d
            .event(ev(
                r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"x","arguments":"[1]"}}]},"finish_reason":"tool_calls"}]}"#,
            ))
            .unwrap();
        assert!(
            matches!(&out[0], Chunk::InvalidToolCall(c, why) if c.id == "a" && why.contains("[1]"))
        );
    }
}
