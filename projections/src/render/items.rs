//! The items protocol: one request (= one run) rendered as `item.*`, `content.*` and
//! `request.*` events, each `{stream: "request", type, requestId, sequence_number, ts, …}` in a
//! frame `id: {requestId}:{sequence_number}` / `event: {type}`.
//!
//! Items: `message` (user input, or assistant `output_text` streamed by `content.delta`),
//! `reasoning` (`reasoning_text`), `tool_output` (a placeholder at the call, patched by
//! `item.updated` at the result), `confirmation_request`, `task_list`, and trace items
//! (`block_trace`, one per agent: model usage and timing) that only the unfiltered view shows.
//! Items of a sub-agent carry `agentName` (its role).
//!
//! Every event of the request gets a sequence number, trace items included, in both views, so
//! a cursor means the same in both. Because every delta is stored, a resumed client is sent
//! exactly the frames it missed: the renderer is deterministic, so the server re-renders the
//! request and skips what the client has ([`ItemsRenderer::render`] returns sequence numbers).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use threadstream_domain::event::RunStatus;
use threadstream_domain::{EventBody, StoredEvent};

use super::schemas::items::{
    AbortedStatus, CompletedStatus, FailedStatus, Item, ItemCommon, ItemPatch, ItemStatus,
    ItemToolCall, ItemsContentPart, ItemsContentPartType, ItemsError, ItemsEventBody, ItemsFrame,
    ItemsTextDelta, MessageRole, ModelUsage, RequestStream,
};
use super::{result_text, wire, Frame};

/// Renders one request: the events of `run_id` in its thread.
#[derive(Debug, Clone)]
pub struct ItemsRenderer {
    run_id: String,
    emit: Emitter,
    next_index: u64,
    finished: bool,
    /// Sub-agents: agent id → role.
    agent_names: HashMap<String, String>,
    /// Open text / reasoning per agent.
    text: BTreeMap<String, OpenItem>,
    reasoning: BTreeMap<String, OpenItem>,
    /// Tool outputs by call id.
    tools: HashMap<String, Item>,
    /// Trace per agent.
    traces: BTreeMap<String, Trace>,
    confirmations: HashMap<String, Item>,
    /// The last `error` content, for `request.failed`.
    last_error: Option<String>,
}

/// Numbers the request's events and writes the visible ones.
#[derive(Debug, Clone)]
struct Emitter {
    request_id: String,
    unfiltered: bool,
    sequence: u64,
    /// The stored event being rendered: its time.
    ts: i64,
    out: Vec<Numbered>,
}

impl Emitter {
    fn send(&mut self, body: ItemsEventBody<'_>) {
        self.push(body, false);
    }

    /// A trace item's event: numbered in both views, sent in the unfiltered one only.
    fn trace(&mut self, body: ItemsEventBody<'_>) {
        self.push(body, true);
    }

    fn push(&mut self, body: ItemsEventBody<'_>, trace: bool) {
        self.sequence += 1;
        if trace && !self.unfiltered {
            return;
        }
        let event = body.kind();
        let frame = ItemsFrame {
            stream: RequestStream::Request,
            body,
            request_id: &self.request_id,
            sequence_number: self.sequence,
            ts: self.ts,
        };
        let data = wire::to_string(&frame);
        self.out.push((
            self.sequence,
            Frame {
                id: Some(format!("{}:{}", self.request_id, self.sequence)),
                event: Some(event.to_string()),
                data,
            },
        ));
    }
}

#[derive(Debug, Clone)]
struct OpenItem {
    item: Item,
    text: String,
}

#[derive(Debug, Clone)]
struct Trace {
    item: Item,
    started_at: i64,
    usage: Option<ModelUsage>,
}

/// One rendered event: its sequence number and frame.
pub type Numbered = (u64, Frame);

fn part(part_type: ItemsContentPartType, text: &str) -> ItemsContentPart<'_> {
    ItemsContentPart {
        part_type,
        text: Cow::Borrowed(text),
    }
}

impl ItemsRenderer {
    /// `unfiltered`: also show trace items (`?unfiltered=1`).
    pub fn new(request_id: &str, run_id: &str, unfiltered: bool) -> Self {
        ItemsRenderer {
            run_id: run_id.to_string(),
            emit: Emitter {
                request_id: request_id.to_string(),
                unfiltered,
                sequence: 0,
                ts: 0,
                out: Vec::new(),
            },
            next_index: 0,
            finished: false,
            agent_names: HashMap::new(),
            text: BTreeMap::new(),
            reasoning: BTreeMap::new(),
            tools: HashMap::new(),
            traces: BTreeMap::new(),
            confirmations: HashMap::new(),
            last_error: None,
        }
    }

    /// Whether the request's terminal event (`request.completed|failed|aborted`) was rendered:
    /// the stream closes after it.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// The events of one stored event (none when it is another run's, or after the end).
    pub fn render(&mut self, e: &StoredEvent) -> Vec<Numbered> {
        if self.finished || e.run_id != self.run_id {
            return Vec::new();
        }
        let Ok(decoded) = e.decode() else {
            return Vec::new();
        };
        self.emit.ts = e.ts;
        self.apply(e, decoded.body);
        std::mem::take(&mut self.emit.out)
    }

    fn common(&mut self, ty: &str, agent: &str, ts: i64) -> ItemCommon {
        let index = self.next_index;
        self.next_index += 1;
        ItemCommon {
            id: format!("item_{ty}_{index}"),
            status: ItemStatus::InProgress,
            request_id: self.emit.request_id.clone(),
            item_index: index,
            ts,
            agent_name: self.agent_names.get(agent).cloned(),
        }
    }

    fn apply(&mut self, e: &StoredEvent, body: EventBody) {
        let ts = e.ts;
        let agent = e.agent_id.as_str();
        match body {
            EventBody::RunStart(_) => self.trace_start(agent, "orchestrator", ts),
            EventBody::UserMessage(m) => {
                let mut common = self.common("message", agent, ts);
                common.status = ItemStatus::Completed;
                let item = Item::Message {
                    common,
                    role: MessageRole::User,
                    content: vec![ItemsContentPart {
                        part_type: ItemsContentPartType::InputText,
                        text: Cow::Owned(m.text),
                    }],
                };
                self.emit.send(ItemsEventBody::ItemAdded { item: &item });
                self.emit.send(ItemsEventBody::ItemDone { item: &item });
            }
            EventBody::TextDelta(d) => {
                self.close_reasoning(agent);
                self.delta(agent, &d.text, ts, false);
            }
            EventBody::ReasoningDelta(d) => {
                self.close_text(agent);
                self.delta(agent, &d.text, ts, true);
            }
            EventBody::ToolCall(c) => {
                self.close_open(agent);
                let generator = self
                    .agent_names
                    .get(agent)
                    .cloned()
                    .unwrap_or_else(|| "orchestrator".into());
                let item = Item::ToolOutput {
                    common: self.common("tool_output", agent, ts),
                    block_name: c.tool_name.clone(),
                    tool_call: ItemToolCall {
                        call_id: c.tool_call_id.clone(),
                        name: c.tool_name.clone(),
                        alias: c.tool_name,
                        arguments: wire::to_string(&c.args),
                        generator_block: generator,
                    },
                    output: None,
                    output_text: None,
                    error: None,
                };
                self.emit.send(ItemsEventBody::ItemAdded { item: &item });
                self.tools.insert(c.tool_call_id, item);
            }
            EventBody::ToolResult(r) => {
                self.close_open(agent);
                self.settle_tool(&r.tool_call_id, Ok(r.result));
            }
            EventBody::ToolError(r) => {
                self.close_open(agent);
                self.settle_tool(&r.tool_call_id, Err(r.error));
            }
            EventBody::AgentSpawned(s) => {
                self.agent_names.insert(agent.to_string(), s.role.clone());
                self.trace_start(agent, &s.role, ts);
            }
            EventBody::AgentCompleted(c) => {
                self.close_open(agent);
                let status = if c.error.is_some() {
                    ItemStatus::Failed
                } else {
                    ItemStatus::Completed
                };
                self.trace_done(agent, status, ts);
            }
            EventBody::LlmUsage(u) => {
                if let Some(t) = self.traces.get_mut(agent) {
                    let usage = t.usage.get_or_insert_with(|| ModelUsage {
                        model: String::new(),
                        prompt_tokens: 0,
                        completion_tokens: 0,
                        total_tokens: 0,
                    });
                    usage.prompt_tokens += u.input_tokens;
                    usage.completion_tokens += u.output_tokens;
                    usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
                    usage.model = u.model;
                    self.emit.trace(ItemsEventBody::ItemUpdated {
                        id: &t.item.common().id,
                        patch: ItemPatch {
                            model_usage: Some(usage),
                            ..ItemPatch::default()
                        },
                    });
                }
            }
            EventBody::ConfirmationRequest(c) => {
                self.close_open(agent);
                let request_id = c.request_id.clone();
                let item = Item::ConfirmationRequest {
                    common: self.common("confirmation_request", agent, ts),
                    request: c,
                    approved: None,
                };
                self.emit.send(ItemsEventBody::ItemAdded { item: &item });
                self.confirmations.insert(request_id, item);
            }
            EventBody::ConfirmationAnswered(a) => {
                if let Some(mut item) = self.confirmations.remove(&a.request_id) {
                    item.common_mut().status = ItemStatus::Completed;
                    if let Item::ConfirmationRequest { approved, .. } = &mut item {
                        *approved = Some(a.approved);
                    }
                    self.emit.send(ItemsEventBody::ItemDone { item: &item });
                }
            }
            EventBody::TasksUpdate(t) => {
                let mut common = self.common("task_list", agent, ts);
                common.status = ItemStatus::Completed;
                let item = Item::TaskList {
                    common,
                    tasks: t.tasks.tasks,
                };
                self.emit.send(ItemsEventBody::ItemAdded { item: &item });
                self.emit.send(ItemsEventBody::ItemDone { item: &item });
            }
            EventBody::Error(err) => {
                self.close_open(agent);
                if let Some(Trace {
                    item: Item::BlockTrace { error, .. },
                    ..
                }) = self.traces.get_mut(agent)
                {
                    *error = Some(ItemsError {
                        message: err.content.clone(),
                    });
                }
                self.last_error = Some(err.content);
            }
            EventBody::RunFinish(f) => {
                let agents: Vec<String> = self
                    .text
                    .keys()
                    .chain(self.reasoning.keys())
                    .cloned()
                    .collect();
                for a in agents {
                    self.close_open(&a);
                }
                let status = match f.status {
                    RunStatus::Completed => ItemStatus::Completed,
                    _ => ItemStatus::Failed,
                };
                let open: Vec<String> = self.traces.keys().cloned().collect();
                for a in open {
                    self.trace_done(&a, status, ts);
                }
                let terminal = match f.status {
                    RunStatus::Completed => ItemsEventBody::RequestCompleted {
                        status: CompletedStatus::Completed,
                    },
                    RunStatus::Cancelled => ItemsEventBody::RequestAborted {
                        status: AbortedStatus::Aborted,
                        reason: f.reason.as_deref().unwrap_or("cancelled"),
                    },
                    RunStatus::Error => ItemsEventBody::RequestFailed {
                        status: FailedStatus::Failed,
                        error: ItemsError {
                            message: self
                                .last_error
                                .clone()
                                .or_else(|| f.reason.clone())
                                .unwrap_or_else(|| "the run failed".into()),
                        },
                    },
                };
                self.emit.send(terminal);
                self.finished = true;
            }
            _ => {}
        }
    }

    fn delta(&mut self, agent: &str, text: &str, ts: i64, reasoning: bool) {
        let part_type = if reasoning {
            ItemsContentPartType::ReasoningText
        } else {
            ItemsContentPartType::OutputText
        };
        let open = if reasoning {
            &self.reasoning
        } else {
            &self.text
        };
        if !open.contains_key(agent) {
            let item = if reasoning {
                Item::Reasoning {
                    common: self.common("reasoning", agent, ts),
                    content: Vec::new(),
                }
            } else {
                Item::Message {
                    common: self.common("message", agent, ts),
                    role: MessageRole::Assistant,
                    content: Vec::new(),
                }
            };
            self.emit.send(ItemsEventBody::ItemAdded { item: &item });
            self.emit.send(ItemsEventBody::ContentAdded {
                item_id: &item.common().id,
                content_index: 0,
                part: part(part_type, ""),
            });
            let slot = if reasoning {
                &mut self.reasoning
            } else {
                &mut self.text
            };
            slot.insert(
                agent.to_string(),
                OpenItem {
                    item,
                    text: String::new(),
                },
            );
        }
        let slot = if reasoning {
            &mut self.reasoning
        } else {
            &mut self.text
        };
        let open = slot.get_mut(agent).expect("opened above");
        open.text.push_str(text);
        self.emit.send(ItemsEventBody::ContentDelta {
            item_id: &open.item.common().id,
            content_index: 0,
            delta: ItemsTextDelta { text },
        });
    }

    fn close_open(&mut self, agent: &str) {
        self.close_text(agent);
        self.close_reasoning(agent);
    }

    fn close_text(&mut self, agent: &str) {
        if let Some(open) = self.text.remove(agent) {
            close_item(&mut self.emit, open, ItemsContentPartType::OutputText);
        }
    }

    fn close_reasoning(&mut self, agent: &str) {
        if let Some(open) = self.reasoning.remove(agent) {
            close_item(&mut self.emit, open, ItemsContentPartType::ReasoningText);
        }
    }

    /// A tool's result (`Ok`) or error: `item.updated` with the patch, then `item.done`.
    fn settle_tool(&mut self, call_id: &str, result: Result<serde_json::Value, String>) {
        let Some(mut item) = self.tools.remove(call_id) else {
            return;
        };
        let (status, patch_error) = match &result {
            Ok(_) => (ItemStatus::Completed, None),
            Err(message) => (
                ItemStatus::Failed,
                Some(ItemsError {
                    message: message.clone(),
                }),
            ),
        };
        self.emit.send(ItemsEventBody::ItemUpdated {
            id: &item.common().id,
            patch: ItemPatch {
                status: Some(status),
                output: result.as_ref().ok(),
                error: patch_error,
                model_usage: None,
            },
        });
        item.common_mut().status = status;
        if let Item::ToolOutput {
            output,
            output_text,
            error,
            ..
        } = &mut item
        {
            match result {
                Ok(result) => {
                    // Tool results are any JSON; `outputText` is the text a plain client shows.
                    *output_text = Some(result_text(&result));
                    *output = Some(result);
                }
                Err(message) => *error = Some(ItemsError { message }),
            }
        }
        self.emit.send(ItemsEventBody::ItemDone { item: &item });
    }

    fn trace_start(&mut self, agent: &str, name: &str, ts: i64) {
        let item = Item::BlockTrace {
            common: self.common("block_trace", agent, ts),
            block_name: name.to_string(),
            block_kind: "generator".into(),
            started_at: ts,
            completed_at: None,
            duration: None,
            model_usage: None,
            error: None,
        };
        self.emit.trace(ItemsEventBody::ItemAdded { item: &item });
        self.traces.insert(
            agent.to_string(),
            Trace {
                item,
                started_at: ts,
                usage: None,
            },
        );
    }

    fn trace_done(&mut self, agent: &str, status: ItemStatus, ts: i64) {
        let Some(t) = self.traces.remove(agent) else {
            return;
        };
        let mut item = t.item;
        item.common_mut().status = status;
        if let Item::BlockTrace {
            completed_at,
            duration,
            model_usage,
            ..
        } = &mut item
        {
            *completed_at = Some(ts);
            *duration = Some(ts - t.started_at);
            *model_usage = t.usage;
        }
        self.emit.trace(ItemsEventBody::ItemDone { item: &item });
    }
}

fn close_item(emit: &mut Emitter, open: OpenItem, part_type: ItemsContentPartType) {
    emit.send(ItemsEventBody::ContentDone {
        item_id: &open.item.common().id,
        content_index: 0,
        part: part(part_type, &open.text),
    });
    let mut item = open.item;
    item.common_mut().status = ItemStatus::Completed;
    if let Item::Message { content, .. } | Item::Reasoning { content, .. } = &mut item {
        *content = vec![ItemsContentPart {
            part_type,
            text: Cow::Owned(open.text),
        }];
    }
    emit.send(ItemsEventBody::ItemDone { item: &item });
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{demo_run, Log};
    use super::*;
    use serde_json::{json, Value};

    fn render(unfiltered: bool, log: &Log) -> Vec<Numbered> {
        let mut r = ItemsRenderer::new("req1", "r1", unfiltered);
        log.events.iter().flat_map(|e| r.render(e)).collect()
    }

    fn data(f: &Frame) -> Value {
        serde_json::from_str(&f.data).unwrap()
    }

    #[test]
    fn a_request_streams_items_and_ends_with_its_terminal_event() {
        let mut log = Log::new("t1");
        demo_run(&mut log, "r1", "completed");
        demo_run(&mut log, "other-run", "completed");
        let frames = render(false, &log);
        let types: Vec<String> = frames
            .iter()
            .map(|(_, f)| f.event.clone().unwrap())
            .collect();
        assert_eq!(types.last().unwrap(), "request.completed");
        assert_eq!(
            types.iter().filter(|t| *t == "request.completed").count(),
            1,
            "other runs are not this request"
        );
        for (seq, f) in &frames {
            let v = data(f);
            assert_eq!(v["stream"], "request");
            assert_eq!(v["requestId"], "req1");
            assert_eq!(v["sequence_number"], *seq);
            assert_eq!(f.id.as_deref(), Some(format!("req1:{seq}").as_str()));
            assert_eq!(v["type"].as_str(), f.event.as_deref());
            assert!(v["ts"].is_i64());
        }
        // The text assembled from deltas is the text of item.done.
        let mut text = String::new();
        let mut done_texts = Vec::new();
        for (_, f) in &frames {
            let v = data(f);
            if v["type"] == "content.delta" && v["itemId"] == "item_message_3" {
                text.push_str(v["delta"]["text"].as_str().unwrap());
            }
            if v["type"] == "item.done" && v["item"]["type"] == "message" {
                done_texts.push(
                    v["item"]["content"][0]["text"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                );
            }
        }
        assert_eq!(text, "On it.");
        assert!(done_texts.contains(&"On it.".to_string()));
        // A tool_output is a placeholder at the call, patched at the result.
        let tool: Vec<Value> = frames
            .iter()
            .map(|(_, f)| data(f))
            .filter(|v| {
                v["item"]["toolCall"]["callId"] == "tc2" || v["patch"]["output"]["id"] == "wf1"
            })
            .collect();
        assert_eq!(tool[0]["type"], "item.added");
        assert_eq!(tool[0]["item"]["status"], "in_progress");
        assert_eq!(
            tool[0]["item"]["agentName"], "builder",
            "sub-agent items carry agentName"
        );
        assert_eq!(tool[1]["type"], "item.updated");
        assert_eq!(tool[2]["item"]["output"], json!({"id": "wf1"}));
        // Trace items only in the unfiltered view, with the same sequence numbers.
        assert!(!frames.iter().any(|(_, f)| f.data.contains("block_trace")));
        let all = render(true, &log);
        let traces: Vec<Value> = all
            .iter()
            .map(|(_, f)| data(f))
            .filter(|v| v["item"]["type"] == "block_trace" && v["type"] == "item.done")
            .collect();
        assert_eq!(traces.len(), 2, "orchestrator and sub-agent");
        let orch = traces
            .iter()
            .find(|t| t["item"]["blockName"] == "orchestrator")
            .unwrap();
        assert_eq!(orch["item"]["modelUsage"]["totalTokens"], 15);
        assert!(orch["item"]["duration"].is_i64());
        for (seq, f) in &frames {
            assert!(
                all.iter().any(|(s, g)| s == seq && g == f),
                "seq {seq} differs between views"
            );
        }
    }

    #[test]
    fn an_error_request_fails_and_nothing_follows_the_end() {
        let mut log = Log::new("t1");
        demo_run(&mut log, "r1", "error");
        log.push("r1", "late", "text-delta", json!({"text": "after the end"}));
        let frames = render(false, &log);
        let last = data(&frames.last().unwrap().1);
        assert_eq!(last["type"], "request.failed");
        assert_eq!(last["error"]["message"], "LLM provider 'demo' unavailable");
        assert!(!frames.iter().any(|(_, f)| f.data.contains("after the end")));
    }
}
