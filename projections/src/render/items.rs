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

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Map, Value};
use threadstream_domain::event::RunStatus;
use threadstream_domain::{EventBody, StoredEvent};

use super::{result_text, Frame};

/// Renders one request: the events of `run_id` in its thread.
#[derive(Debug, Clone)]
pub struct ItemsRenderer {
    request_id: String,
    run_id: String,
    unfiltered: bool,
    sequence: u64,
    next_index: u64,
    finished: bool,
    /// Sub-agents: agent id → role.
    agent_names: HashMap<String, String>,
    /// Open text / reasoning per agent.
    text: BTreeMap<String, OpenItem>,
    reasoning: BTreeMap<String, OpenItem>,
    /// Tool outputs by call id.
    tools: HashMap<String, Value>,
    /// Trace per agent: (item, started at, prompt tokens, completion tokens, model).
    traces: BTreeMap<String, Trace>,
    confirmations: HashMap<String, Value>,
    /// The last `error` content, for `request.failed`.
    last_error: Option<String>,
}

#[derive(Debug, Clone)]
struct OpenItem {
    item: Value,
    text: String,
}

#[derive(Debug, Clone)]
struct Trace {
    item: Value,
    started_at: i64,
    prompt: u64,
    completion: u64,
    model: Option<String>,
}

/// One rendered event: its sequence number and frame.
pub type Numbered = (u64, Frame);

impl ItemsRenderer {
    /// `unfiltered`: also show trace items (`?unfiltered=1`).
    pub fn new(request_id: &str, run_id: &str, unfiltered: bool) -> Self {
        ItemsRenderer {
            request_id: request_id.to_string(),
            run_id: run_id.to_string(),
            unfiltered,
            sequence: 0,
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
        let mut out: Vec<(Value, bool)> = Vec::new();
        self.apply(e, decoded.body, &mut out);
        out.into_iter()
            .filter_map(|(v, trace)| {
                self.sequence += 1;
                (!trace || self.unfiltered).then(|| (self.sequence, self.frame(v, e.ts)))
            })
            .collect()
    }

    fn frame(&self, mut v: Value, ts: i64) -> Frame {
        let ty = v["type"].as_str().unwrap_or_default().to_string();
        let mut m = Map::new();
        m.insert("stream".into(), json!("request"));
        m.insert("type".into(), json!(ty));
        m.insert("requestId".into(), json!(self.request_id));
        m.insert("sequence_number".into(), json!(self.sequence));
        m.insert("ts".into(), json!(ts));
        if let Some(fields) = v.as_object_mut() {
            fields.remove("type");
            m.extend(std::mem::take(fields));
        }
        Frame {
            id: Some(format!("{}:{}", self.request_id, self.sequence)),
            event: Some(ty),
            data: Value::Object(m).to_string(),
        }
    }

    fn new_item(&mut self, ty: &str, agent: &str, ts: i64, fields: Value) -> Value {
        let index = self.next_index;
        self.next_index += 1;
        let mut m = Map::new();
        m.insert("id".into(), json!(format!("item_{ty}_{index}")));
        m.insert("type".into(), json!(ty));
        m.insert("status".into(), json!("in_progress"));
        m.insert("requestId".into(), json!(self.request_id));
        m.insert("itemIndex".into(), json!(index));
        m.insert("ts".into(), json!(ts));
        if let Some(name) = self.agent_names.get(agent) {
            m.insert("agentName".into(), json!(name));
        }
        if let Value::Object(f) = fields {
            m.extend(f);
        }
        Value::Object(m)
    }

    fn apply(&mut self, e: &StoredEvent, body: EventBody, out: &mut Vec<(Value, bool)>) {
        let ts = e.ts;
        let agent = e.agent_id.as_str();
        match body {
            EventBody::RunStart(_) => self.trace_start(agent, "orchestrator", ts, out),
            EventBody::UserMessage(m) => {
                let mut item = self.new_item(
                    "message",
                    agent,
                    ts,
                    json!({"role": "user", "content": [{"type": "input_text", "text": m.text}]}),
                );
                item["status"] = json!("completed");
                out.push((json!({"type": "item.added", "item": item}), false));
                out.push((json!({"type": "item.done", "item": item}), false));
            }
            EventBody::TextDelta(d) => {
                self.close_reasoning(agent, out);
                self.delta(agent, &d.text, "output_text", ts, out, false);
            }
            EventBody::ReasoningDelta(d) => {
                self.close_text(agent, out);
                self.delta(agent, &d.text, "reasoning_text", ts, out, true);
            }
            EventBody::ToolCall(c) => {
                self.close_open(agent, out);
                let generator = self
                    .agent_names
                    .get(agent)
                    .cloned()
                    .unwrap_or_else(|| "orchestrator".into());
                let item = self.new_item(
                    "tool_output",
                    agent,
                    ts,
                    json!({"blockName": c.tool_name, "toolCall": {
                        "callId": c.tool_call_id, "name": c.tool_name, "alias": c.tool_name,
                        "arguments": Value::Object(c.args).to_string(), "generatorBlock": generator}}),
                );
                out.push((json!({"type": "item.added", "item": item}), false));
                self.tools.insert(c.tool_call_id, item);
            }
            EventBody::ToolResult(r) => {
                self.close_open(agent, out);
                self.settle_tool(
                    &r.tool_call_id,
                    json!({"status": "completed", "output": r.result}),
                    out,
                );
            }
            EventBody::ToolError(r) => {
                self.close_open(agent, out);
                self.settle_tool(
                    &r.tool_call_id,
                    json!({"status": "failed", "error": {"message": r.error}}),
                    out,
                );
            }
            EventBody::AgentSpawned(s) => {
                self.agent_names.insert(agent.to_string(), s.role.clone());
                self.trace_start(agent, &s.role, ts, out);
            }
            EventBody::AgentCompleted(c) => {
                self.close_open(agent, out);
                let status = if c.error.is_some() {
                    "failed"
                } else {
                    "completed"
                };
                self.trace_done(agent, status, ts, out);
            }
            EventBody::LlmUsage(u) => {
                if let Some(t) = self.traces.get_mut(agent) {
                    t.prompt += u.input_tokens;
                    t.completion += u.output_tokens;
                    t.model = Some(u.model);
                    let patch = json!({"modelUsage": usage(t)});
                    let id = t.item["id"].clone();
                    out.push((
                        json!({"type": "item.updated", "id": id, "patch": patch}),
                        true,
                    ));
                }
            }
            EventBody::ConfirmationRequest(c) => {
                self.close_open(agent, out);
                let request = serde_json::to_value(&*c).expect("payload serializes");
                let item = self.new_item(
                    "confirmation_request",
                    agent,
                    ts,
                    json!({"request": request}),
                );
                out.push((json!({"type": "item.added", "item": item}), false));
                self.confirmations.insert(c.request_id.clone(), item);
            }
            EventBody::ConfirmationAnswered(a) => {
                if let Some(mut item) = self.confirmations.remove(&a.request_id) {
                    item["status"] = json!("completed");
                    item["approved"] = json!(a.approved);
                    out.push((json!({"type": "item.done", "item": item}), false));
                }
            }
            EventBody::TasksUpdate(t) => {
                let tasks = serde_json::to_value(&t.tasks.tasks).expect("tasks serialize");
                let mut item = self.new_item("task_list", agent, ts, json!({"tasks": tasks}));
                item["status"] = json!("completed");
                out.push((json!({"type": "item.added", "item": item}), false));
                out.push((json!({"type": "item.done", "item": item}), false));
            }
            EventBody::Error(err) => {
                self.close_open(agent, out);
                if let Some(t) = self.traces.get_mut(agent) {
                    t.item["error"] = json!({"message": err.content});
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
                    self.close_open(&a, out);
                }
                let status = match f.status {
                    RunStatus::Completed => "completed",
                    _ => "failed",
                };
                let open: Vec<String> = self.traces.keys().cloned().collect();
                for a in open {
                    self.trace_done(&a, status, ts, out);
                }
                let terminal = match f.status {
                    RunStatus::Completed => {
                        json!({"type": "request.completed", "status": "completed"})
                    }
                    RunStatus::Cancelled => json!({"type": "request.aborted", "status": "aborted",
                        "reason": f.reason.clone().unwrap_or_else(|| "cancelled".into())}),
                    RunStatus::Error => json!({"type": "request.failed", "status": "failed",
                        "error": {"message": self.last_error.clone().or_else(|| f.reason.clone())
                            .unwrap_or_else(|| "the run failed".into())}}),
                };
                out.push((terminal, false));
                self.finished = true;
            }
            _ => {}
        }
    }

    fn delta(
        &mut self,
        agent: &str,
        text: &str,
        part: &str,
        ts: i64,
        out: &mut Vec<(Value, bool)>,
        reasoning: bool,
    ) {
        let open = if reasoning {
            &self.reasoning
        } else {
            &self.text
        };
        if !open.contains_key(agent) {
            let (ty, role) = if reasoning {
                ("reasoning", None)
            } else {
                ("message", Some("assistant"))
            };
            let mut fields = json!({"content": []});
            if let Some(r) = role {
                fields["role"] = json!(r);
            }
            let item = self.new_item(ty, agent, ts, fields);
            out.push((json!({"type": "item.added", "item": item}), false));
            out.push((
                json!({"type": "content.added", "itemId": item["id"], "contentIndex": 0,
                       "part": {"type": part, "text": ""}}),
                false,
            ));
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
        out.push((
            json!({"type": "content.delta", "itemId": open.item["id"], "contentIndex": 0,
                   "delta": {"text": text}}),
            false,
        ));
    }

    fn close_open(&mut self, agent: &str, out: &mut Vec<(Value, bool)>) {
        self.close_text(agent, out);
        self.close_reasoning(agent, out);
    }

    fn close_text(&mut self, agent: &str, out: &mut Vec<(Value, bool)>) {
        if let Some(open) = self.text.remove(agent) {
            close_item(open, "output_text", out);
        }
    }

    fn close_reasoning(&mut self, agent: &str, out: &mut Vec<(Value, bool)>) {
        if let Some(open) = self.reasoning.remove(agent) {
            close_item(open, "reasoning_text", out);
        }
    }

    fn settle_tool(&mut self, call_id: &str, patch: Value, out: &mut Vec<(Value, bool)>) {
        let Some(mut item) = self.tools.remove(call_id) else {
            return;
        };
        out.push((
            json!({"type": "item.updated", "id": item["id"], "patch": patch}),
            false,
        ));
        if let (Some(i), Some(p)) = (item.as_object_mut(), patch.as_object()) {
            for (k, v) in p {
                i.insert(k.clone(), v.clone());
            }
        }
        if let Some(output) = item.get("output") {
            // Tool results are any JSON; `outputText` is the text a plain client shows.
            let text = result_text(output);
            item["outputText"] = json!(text);
        }
        out.push((json!({"type": "item.done", "item": item}), false));
    }

    fn trace_start(&mut self, agent: &str, name: &str, ts: i64, out: &mut Vec<(Value, bool)>) {
        let item = self.new_item(
            "block_trace",
            agent,
            ts,
            json!({"blockName": name, "blockKind": "generator", "startedAt": ts}),
        );
        out.push((json!({"type": "item.added", "item": item}), true));
        self.traces.insert(
            agent.to_string(),
            Trace {
                item,
                started_at: ts,
                prompt: 0,
                completion: 0,
                model: None,
            },
        );
    }

    fn trace_done(&mut self, agent: &str, status: &str, ts: i64, out: &mut Vec<(Value, bool)>) {
        let Some(t) = self.traces.remove(agent) else {
            return;
        };
        let mut item = t.item.clone();
        item["status"] = json!(status);
        item["completedAt"] = json!(ts);
        item["duration"] = json!(ts - t.started_at);
        if t.model.is_some() {
            item["modelUsage"] = usage(&t);
        }
        out.push((json!({"type": "item.done", "item": item}), true));
    }
}

fn usage(t: &Trace) -> Value {
    json!({"model": t.model, "promptTokens": t.prompt, "completionTokens": t.completion,
           "totalTokens": t.prompt + t.completion})
}

fn close_item(open: OpenItem, part: &str, out: &mut Vec<(Value, bool)>) {
    let id = open.item["id"].clone();
    out.push((
        json!({"type": "content.done", "itemId": id, "contentIndex": 0,
               "part": {"type": part, "text": open.text}}),
        false,
    ));
    let mut item = open.item;
    item["status"] = json!("completed");
    item["content"] = json!([{"type": part, "text": open.text}]);
    out.push((json!({"type": "item.done", "item": item}), false));
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{demo_run, Log};
    use super::*;

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
