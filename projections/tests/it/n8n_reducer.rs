//! Conformance of `agent_tree` with the real npm reducer.
//!
//! Every sequence below is folded twice: by `AgentRunState::reduce` and by `reduceEvent` from
//! `@n8n/api-types` 1.25.0 run in node (`tests/conformance/reduce.mjs`). The trees must be equal
//! as JSON values *and* byte for byte (key order included), with `startedAt`/`completedAt`
//! removed because 1.25.0 stamps them with the wall clock. The same sequences also go through
//! 1.41.0's reducer, with timestamps kept (1.41.0 takes them from the event's `ts`, as we do);
//! there only the sequences that avoid 1.41.0's documented behaviour changes must agree.
//!
//! Needs node and the pinned packages: `bash tests/conformance/install.sh`.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{json, Value};
use threadstream_domain::event::{AgentEvent, EventBody};
use threadstream_domain::StoredEvent;
use threadstream_projections::agent_tree::{is_safe_object_key, AgentNode, AgentRunState};

// ---------------------------------------------------------------------------------------------
// Running node

fn conformance_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance")
}

fn require_installed(version: &str) {
    let dir = conformance_dir().join(format!("n8n-{version}/node_modules/@n8n/api-types"));
    assert!(
        dir.join("package.json").exists(),
        "@n8n/api-types {version} is not installed ({} is missing).\n\
         Install the pinned npm oracles with:\n\n    bash tests/conformance/install.sh\n\n\
         (from the workspace root; needs node >= 20 and npm)",
        dir.display()
    );
}

/// Runs `node <script> <args>` with `input` on stdin; returns stdout and the exit code.
fn node(script: &str, args: &[&str], input: String) -> (String, i32) {
    let mut child = Command::new("node")
        .arg(conformance_dir().join(script))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run node ({e}); install node >= 20, then bash tests/conformance/install.sh"
            )
        });
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    let code = out.status.code().unwrap_or(-1);
    assert!(
        code == 0 || code == 1,
        "node {script} {args:?} failed ({code}): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (String::from_utf8(out.stdout).unwrap(), code)
}

/// Outcome of the npm reducer on one sequence: the tree's JSON text, or the error it threw.
enum JsOutcome {
    Tree(String),
    Threw(String),
}

fn run_js_reducer(version: &str, keep_times: bool, cases: &[Seq]) -> Vec<JsOutcome> {
    require_installed(version);
    // Events go over as the log stores and serves them (`StoredEvent::envelope_json`), not
    // through a `serde_json::Value`, which would sort payload keys.
    let mut input = String::from("[");
    for (i, c) in cases.iter().enumerate() {
        if i > 0 {
            input.push(',');
        }
        input.push_str(&format!("{{\"name\":{}", json!(c.name)));
        if let Some(root) = &c.root {
            input.push_str(&format!(",\"rootAgentId\":{}", json!(root)));
        }
        input.push_str(",\"events\":[");
        for (j, e) in c.events.iter().enumerate() {
            if j > 0 {
                input.push(',');
            }
            input.push_str(&wire(e, j));
        }
        input.push_str("]}");
    }
    input.push(']');
    let mut args = vec![version];
    if keep_times {
        args.push("--keep-times");
    }
    let (out, code) = node("reduce.mjs", &args, input);
    assert_eq!(code, 0, "reduce.mjs failed");
    let results: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(results.len(), cases.len());
    results
        .into_iter()
        .zip(cases)
        .map(|(r, c)| {
            assert_eq!(r["name"], c.name.as_str());
            match (r.get("tree"), r.get("error")) {
                (Some(Value::String(t)), _) => JsOutcome::Tree(t.clone()),
                (_, Some(Value::String(e))) => JsOutcome::Threw(e.clone()),
                _ => panic!("bad driver output {r}"),
            }
        })
        .collect()
}

/// The n8n envelope of `event` exactly as the log serves it.
fn wire(event: &AgentEvent, seq: usize) -> String {
    let ts = event.ts.expect("sequence events carry ts");
    StoredEvent::from_event(seq as i64 + 1, "thread", seq as i64 + 1, ts, event).envelope_json()
}

// ---------------------------------------------------------------------------------------------
// Our side

fn our_state(case: &Seq) -> AgentRunState {
    let mut state = match &case.root {
        Some(root) => AgentRunState::new(root),
        None => AgentRunState::default(),
    };
    for e in &case.events {
        state.reduce(e);
    }
    state
}

fn strip_times(node: &mut AgentNode) {
    for tc in &mut node.tool_calls {
        tc.started_at = None;
        tc.completed_at = None;
    }
    node.children.iter_mut().for_each(strip_times);
}

fn our_tree_json(case: &Seq, keep_times: bool) -> String {
    let mut tree = our_state(case).to_agent_tree();
    if !keep_times {
        strip_times(&mut tree);
    }
    serde_json::to_string(&tree).unwrap()
}

/// Whether the state's child links contain a cycle reachable from the root (on which the JS
/// `toAgentTree` overflows its stack).
fn has_cycle(state: &AgentRunState) -> bool {
    fn visit<'a>(s: &'a AgentRunState, id: &'a str, path: &mut Vec<&'a str>) -> bool {
        if path.contains(&id) {
            return true;
        }
        path.push(id);
        let found = s.children_by_agent_id.get(id).is_some_and(|c| {
            c.iter()
                .filter(|c| is_safe_object_key(c))
                .any(|c| visit(s, c, path))
        });
        path.pop();
        found
    }
    visit(state, &state.root_agent_id, &mut Vec::new())
}

// ---------------------------------------------------------------------------------------------
// Building sequences

struct Seq {
    name: String,
    root: Option<String>,
    events: Vec<AgentEvent>,
    run_id: String,
    ts: i64,
    /// For hand-written sequences on which 1.25.0 is known to throw: a substring of the error.
    js_throws: Option<&'static str>,
}

impl Seq {
    fn new(name: &str) -> Seq {
        Seq {
            name: name.to_string(),
            root: None,
            events: Vec::new(),
            run_id: "run-1".to_string(),
            ts: 1_795_313_483_123,
            js_throws: None,
        }
    }

    fn root(mut self, root: &str) -> Seq {
        self.root = Some(root.to_string());
        self
    }

    fn throws(mut self, what: &'static str) -> Seq {
        self.js_throws = Some(what);
        self
    }

    fn run(&mut self, run_id: &str) -> &mut Self {
        self.run_id = run_id.to_string();
        self
    }

    fn ev(&mut self, agent: &str, event_type: &str, payload: Value) -> &mut Self {
        let raw = json!({"type": event_type, "runId": self.run_id, "agentId": agent,
            "payload": payload, "ts": self.ts});
        let event: AgentEvent = serde_json::from_value(raw.clone())
            .unwrap_or_else(|e| panic!("{}: bad event {raw}: {e}", self.name));
        assert!(event.body.is_n8n(), "{event_type} is not an n8n type");
        self.ts += 250;
        self.events.push(event);
        self
    }

    /// Sets the last event's `responseId`.
    fn resp(&mut self, response_id: &str) -> &mut Self {
        self.events.last_mut().unwrap().response_id = Some(response_id.to_string());
        self
    }

    fn start(&mut self, agent: &str) -> &mut Self {
        self.ev(agent, "run-start", json!({"messageId": "msg-1"}))
    }
    fn text(&mut self, agent: &str, text: &str) -> &mut Self {
        self.ev(agent, "text-delta", json!({ "text": text }))
    }
    fn reason(&mut self, agent: &str, text: &str) -> &mut Self {
        self.ev(agent, "reasoning-delta", json!({ "text": text }))
    }
    fn call(&mut self, agent: &str, id: &str, tool: &str, args: Value) -> &mut Self {
        self.ev(
            agent,
            "tool-call",
            json!({"toolCallId": id, "toolName": tool, "args": args}),
        )
    }
    fn result(&mut self, agent: &str, id: &str, result: Value) -> &mut Self {
        self.ev(
            agent,
            "tool-result",
            json!({"toolCallId": id, "result": result}),
        )
    }
    fn fail(&mut self, agent: &str, id: &str, error: &str) -> &mut Self {
        self.ev(
            agent,
            "tool-error",
            json!({"toolCallId": id, "error": error}),
        )
    }
    fn spawn(&mut self, agent: &str, parent: &str, extra: Value) -> &mut Self {
        let mut p = json!({"parentId": parent, "role": "sub-agent", "tools": ["search-nodes"]});
        merge(&mut p, extra);
        self.ev(agent, "agent-spawned", p)
    }
    fn done(&mut self, agent: &str, result: &str, error: Option<&str>) -> &mut Self {
        let mut p = json!({"role": "sub-agent", "result": result});
        if let Some(e) = error {
            p["error"] = json!(e);
        }
        self.ev(agent, "agent-completed", p)
    }
    fn confirm(&mut self, agent: &str, request: &str, tc: &str, extra: Value) -> &mut Self {
        let mut p = json!({"requestId": request, "toolCallId": tc, "toolName": "delete-workflow",
            "args": {"workflowId": "wf-1"}, "severity": "destructive", "message": "Delete workflow?"});
        merge(&mut p, extra);
        self.ev(agent, "confirmation-request", p)
    }
    fn tasks(&mut self, agent: &str, tasks: Value, plan_items: Option<Value>) -> &mut Self {
        let mut p = json!({"tasks": {"tasks": tasks}});
        if let Some(items) = plan_items {
            p["planItems"] = items;
        }
        self.ev(agent, "tasks-update", p)
    }
    fn status(&mut self, agent: &str, message: &str) -> &mut Self {
        self.ev(agent, "status", json!({ "message": message }))
    }
    fn error(&mut self, agent: &str, content: &str) -> &mut Self {
        self.ev(agent, "error", json!({ "content": content }))
    }
    fn finish(&mut self, agent: &str, status: &str, reason: Option<&str>) -> &mut Self {
        let mut p = json!({ "status": status });
        if let Some(r) = reason {
            p["reason"] = json!(r);
        }
        self.ev(agent, "run-finish", p)
    }
}

fn merge(into: &mut Value, extra: Value) {
    if let (Value::Object(a), Value::Object(b)) = (into, extra) {
        a.extend(b);
    }
}

const O: &str = "agent-001";

fn task(id: &str, status: &str) -> Value {
    json!({"id": id, "description": format!("Do {id}"), "status": status})
}

fn plan_item(id: &str) -> Value {
    json!({"id": id, "title": format!("Build {id}"), "kind": "workflow", "spec": "A spec", "deps": [],
        "tools": ["build-workflow"], "workflowId": "wf-9"})
}

/// Hand-written sequences: realistic runs first, then adversarial ones.
fn hand_written() -> Vec<Seq> {
    let mut all = Vec::new();
    let mut add = |mut s: Seq, f: &dyn Fn(&mut Seq)| {
        f(&mut s);
        all.push(s);
    };

    add(Seq::new("plain text run"), &|s| {
        s.start(O)
            .text(O, "Hello")
            .resp("r1")
            .text(O, ", world")
            .resp("r1")
            .text(O, "!")
            .resp("r1")
            .finish(O, "completed", None);
    });
    add(Seq::new("text and reasoning interleaved"), &|s| {
        s.start(O)
            .reason(O, "The user wants ")
            .reason(O, "a workflow.")
            .text(O, "Sure — ")
            .reason(O, " Let me plan.")
            .text(O, "let me build it.\n\n\"quoted\" \\ back\u{1}slash ✓ 🚀")
            .finish(O, "completed", None);
    });
    add(Seq::new("tool call with result"), &|s| {
        s.start(O)
            .text(O, "Searching nodes.")
            .resp("r1")
            .call(O, "tc-1", "search-nodes", json!({"query": "slack", "limit": 5, "nested": {"b": [1, 2.5, null, true], "a": "x"}}))
            .resp("r1")
            .result(O, "tc-1", json!({"nodes": [{"name": "Slack", "version": 2}], "count": 1}))
            .text(O, "Found Slack.")
            .resp("r2")
            .finish(O, "completed", None);
    });
    add(Seq::new("tool error then errored run"), &|s| {
        s.start(O)
            .call(O, "tc-1", "run-workflow", json!({"workflowId": "wf-1"}))
            .fail(O, "tc-1", "Workflow has no trigger")
            .error(O, "The workflow could not run")
            .finish(O, "error", Some("tool failed"));
    });
    add(Seq::new("parallel tools settle out of order"), &|s| {
        s.start(O)
            .call(O, "tc-1", "get-workflow", json!({"id": "1"}))
            .call(O, "tc-2", "get-workflow", json!({"id": "2"}))
            .call(O, "tc-3", "list_skills", json!({}))
            .result(O, "tc-2", json!("two"))
            .result(O, "tc-3", json!(["skill-a"]))
            .result(O, "tc-1", json!(null))
            .finish(O, "completed", None);
    });
    add(Seq::new("delegate to sub-agent"), &|s| {
        s.start(O)
            .text(O, "Delegating.")
            .resp("resp-1")
            .call(O, "tc-d", "delegate", json!({"role": "workflow builder", "instructions": "Build it"}))
            .resp("resp-1")
            .spawn("sub-1", O, json!({"role": "workflow builder", "tools": ["build-workflow", "get-node"],
                "kind": "builder", "title": "Building", "subtitle": "Slack → Sheets", "goal": "Working workflow",
                "targetResource": {"type": "workflow", "id": "wf-1", "name": "Sync"}}))
            .text("sub-1", "Building the workflow")
            .call("sub-1", "tc-s1", "build-workflow-with-agent", json!({"spec": "..."}))
            .result("sub-1", "tc-s1", json!({"workflowId": "wf-1"}))
            .done("sub-1", "Built wf-1", None)
            .result(O, "tc-d", json!("Built wf-1"))
            .text(O, "Done.")
            .resp("resp-2")
            .finish(O, "completed", None);
    });
    add(Seq::new("background task with status and failure"), &|s| {
        s.start(O)
            .call(O, "tc-b", "build-workflow-with-agent", json!({"task": "x"}))
            .spawn(
                "bg-1",
                O,
                json!({"role": "builder", "taskId": "task-1", "kind": "builder",
                "targetResource": {"type": "data-table"}}),
            )
            .result(O, "tc-b", json!({"started": true}))
            .status("bg-1", "Resolving credentials")
            .call("bg-1", "tc-x", "get-credentials", json!({}))
            .status("bg-1", "Still working")
            .done("bg-1", "", Some("Credential missing"))
            .finish(O, "completed", None);
    });
    add(Seq::new("approval confirmation"), &|s| {
        s.start(O)
            .call(O, "tc-1", "delete-workflow", json!({"workflowId": "wf-1"}))
            .confirm(O, "req-1", "tc-1", json!({}))
            .result(O, "tc-1", json!({"deleted": true}))
            .finish(O, "completed", None);
    });
    add(Seq::new("questions confirmation"), &|s| {
        s.start(O)
            .call(O, "tc-q", "ask-user", json!({}))
            .confirm(O, "req-q", "tc-q", json!({"toolName": "ask-user", "severity": "info", "message": "A few questions",
                "inputType": "questions", "introMessage": "Before I start:",
                "questions": [{"id": "q1", "question": "Which channel?", "type": "single", "options": ["#a", "#b"]},
                              {"id": "q2", "question": "Anything else?", "type": "text"}]}))
            .result(O, "tc-q", json!({"answers": {"q1": "#a"}}))
            .finish(O, "completed", None);
    });
    add(Seq::new("plan review confirmation"), &|s| {
        s.start(O)
            .call(O, "tc-p", "plan", json!({"goal": "x"}))
            .confirm(
                O,
                "req-p",
                "tc-p",
                json!({"toolName": "plan", "severity": "warning", "message": "Review the plan",
                "inputType": "plan-review", "planItems": [plan_item("p1"), plan_item("p2")],
                "tasks": {"tasks": [task("t1", "todo"), task("t2", "in_progress")]}}),
            )
            .fail(O, "tc-p", "User rejected the plan")
            .finish(O, "completed", None);
    });
    add(Seq::new("confirmation with every optional field"), &|s| {
        s.start(O)
            .call(O, "tc-f", "fetch-url", json!({"url": "https://example.com"}))
            .confirm(O, "req-f", "tc-f", json!({"toolName": "fetch-url", "severity": "info", "message": "Allow access?",
                "inputThreadId": "thr-2", "inputType": "approval", "projectId": "proj-1", "workflowId": "wf-2",
                "domainAccess": {"url": "https://example.com/a", "host": "example.com"},
                "webSearch": {"query": "n8n slack"}, "credentialFlow": {"stage": "finalize"},
                "credentialRequests": [{"credentialType": "slackApi", "reason": "post",
                    "existingCredentials": [{"id": "c1", "name": "Slack (work)"}], "suggestedName": "Slack"}],
                "setupRequests": [{"node": {"name": "Slack", "type": "n8n-nodes-base.slack", "typeVersion": 2.5,
                    "parameters": {"channel": "#general"}, "position": [250, -100], "id": "node-1"},
                    "credentialType": "slackApi", "isTrigger": false}],
                "resourceDecision": {"toolGroup": "filesystem", "resource": "/tmp/a", "description": "Read a file",
                    "options": ["denyOnce", "allowOnce", "allowForSession"]}}))
            .result(O, "tc-f", json!("ok"))
            .finish(O, "completed", None);
    });
    add(Seq::new("tasks update keeps plan items"), &|s| {
        s.start(O)
            .tasks(O, json!([task("t1", "todo"), task("t2", "todo")]), None)
            .tasks(
                O,
                json!([task("t1", "in_progress"), task("t2", "todo")]),
                Some(json!([plan_item("p1")])),
            )
            .tasks(
                O,
                json!([
                    task("t1", "done"),
                    task("t2", "failed"),
                    task("t3", "cancelled")
                ]),
                None,
            )
            .tasks(O, json!([]), Some(json!([])))
            .finish(O, "completed", None);
    });
    add(Seq::new("status set and cleared"), &|s| {
        s.start(O)
            .status(O, "Thinking…")
            .status(O, "")
            .status(O, "Building")
            .spawn("sub-1", O, json!({}))
            .status("sub-1", "Sub status")
            .finish(O, "completed", None);
    });
    add(Seq::new("error event on known agents"), &|s| {
        s.start(O)
            .text(O, "Working")
            .resp("r1")
            .ev(
                O,
                "error",
                json!({"content": "Rate limited", "statusCode": 429, "provider": "anthropic",
                "technicalDetails": "retry-after: 3"}),
            )
            .resp("r1")
            .spawn("sub-1", O, json!({}))
            .error("sub-1", "sub broke")
            .error("sub-1", "again")
            .finish(O, "error", None);
    });
    add(
        Seq::new("error event from unknown agent lands on root"),
        &|s| {
            s.start(O)
                .text(O, "A")
                .error("ghost", "from nowhere")
                .resp("r9")
                .error("__proto__", "proto error")
                .finish(O, "error", None);
        },
    );
    add(
        Seq::new("cancelled finish settles every loading call"),
        &|s| {
            s.start(O)
                .call(O, "tc-1", "task-control", json!({}))
                .spawn("bg-1", O, json!({"taskId": "task-1"}))
                .call("bg-1", "tc-2", "eval-setup-with-agent", json!({}))
                .call("bg-1", "tc-3", "research-with-agent", json!({}))
                .result("bg-1", "tc-3", json!(1))
                .done("bg-1", "", Some("Cancelled by user"))
                .finish(O, "cancelled", Some("user_cancelled"));
        },
    );
    add(Seq::new("errored finish settles loading calls"), &|s| {
        s.start(O)
            .call(O, "tc-1", "load_skill", json!({"name": "x"}))
            .spawn("sub-1", O, json!({}))
            .call("sub-1", "tc-2", "search-nodes", json!({}))
            .finish(O, "error", Some("crash"));
    });
    add(Seq::new("completed finish leaves loading calls"), &|s| {
        s.start(O)
            .call(O, "tc-1", "search-nodes", json!({}))
            .finish(O, "completed", None);
    });
    add(Seq::new("second run-start on a tree with content"), &|s| {
        s.start(O)
            .text(O, "First answer.")
            .resp("r1")
            .finish(O, "completed", None)
            .run("run-2")
            .start(O)
            .text(O, " Second answer.")
            .resp("r2")
            .call(O, "tc-1", "search-nodes", json!({}))
            .finish(O, "cancelled", Some("timeout"));
    });
    add(Seq::new("second run-start without content resets"), &|s| {
        s.start(O)
            .reason(O, "only reasoning")
            .status(O, "a status")
            .tasks(O, json!([task("t1", "todo")]), None)
            .finish(O, "completed", None)
            .run("run-2")
            .start("orchestrator-2")
            .text("orchestrator-2", "fresh")
            .text(O, "old root is gone")
            .finish("orchestrator-2", "completed", None);
    });
    add(
        Seq::new("second run-start from another agent keeps the root"),
        &|s| {
            s.start(O)
                .call(O, "tc-1", "search-nodes", json!({}))
                .result(O, "tc-1", json!([]))
                .finish(O, "error", None)
                .run("run-2")
                .start("orchestrator-2")
                .text("orchestrator-2", "lost: unknown agent")
                .text(O, "still the root")
                .finish("orchestrator-2", "completed", None);
        },
    );
    add(Seq::new("second run-start with only a child"), &|s| {
        s.start(O)
            .spawn("sub-1", O, json!({}))
            .done("sub-1", "ok", None)
            .finish(O, "completed", None)
            .run("run-2")
            .start(O)
            .finish(O, "completed", None);
    });
    add(Seq::new("responseId variations"), &|s| {
        s.start(O)
            .text(O, "a1")
            .resp("a")
            .text(O, "a2")
            .resp("a")
            .text(O, "b1")
            .resp("b")
            .text(O, "n1")
            .text(O, "n2")
            .text(O, "e1")
            .resp("")
            .text(O, "e2")
            .resp("")
            .text(O, "n3")
            .call(O, "tc-1", "search-nodes", json!({}))
            .resp("")
            .call(O, "tc-2", "search-nodes", json!({}))
            .resp("c")
            .spawn("sub-1", O, json!({}))
            .spawn("sub-2", O, json!({}))
            .resp("")
            .spawn("sub-3", O, json!({}))
            .text(O, "after")
            .resp("c")
            .spawn("sub-4", O, json!({}))
            .resp("d")
            .finish(O, "completed", None);
    });
    add(
        Seq::new("spawn inherits responseId from the parent's last entry"),
        &|s| {
            s.start(O)
                .text(O, "x")
                .resp("resp-7")
                .spawn("sub-1", O, json!({}))
                .spawn("sub-2", O, json!({}))
                .text(O, "y")
                .spawn("sub-3", O, json!({}))
                .finish(O, "completed", None);
        },
    );
    add(
        Seq::new("agent-completed settles only its own calls"),
        &|s| {
            s.start(O)
                .call(O, "tc-o", "search-nodes", json!({}))
                .spawn("sub-1", O, json!({}))
                .call("sub-1", "tc-1", "a", json!({}))
                .call("sub-1", "tc-2", "b", json!({}))
                .result("sub-1", "tc-1", json!("r"))
                .done("sub-1", "done", None)
                .result("sub-1", "tc-2", json!("late"))
                .finish(O, "completed", None);
        },
    );
    add(
        Seq::new("filesystem request and title update change nothing"),
        &|s| {
            s.start(O)
                .ev(
                    O,
                    "filesystem-request",
                    json!({"requestId": "fs-1",
                "toolCall": {"name": "read_file", "arguments": {"path": "/etc/hosts"}}}),
                )
                .ev(O, "thread-title-updated", json!({"title": "New title"}))
                .text(O, "ok")
                .finish(O, "completed", None);
        },
    );
    add(Seq::new("cancel with background tasks"), &|s| {
        s.start(O)
            .spawn("bg-1", O, json!({"taskId": "t-1", "role": "builder"}))
            .spawn(
                "bg-2",
                O,
                json!({"taskId": "t-2", "role": "researcher", "kind": "planner"}),
            )
            .text("bg-1", "partial")
            .done("bg-1", "", Some("Cancelled by user"))
            .done("bg-2", "", Some("Cancelled by user"))
            .finish(O, "cancelled", Some("user_cancelled"));
    });
    add(Seq::new("background task limit reached"), &|s| {
        s.start(O);
        for i in 1..=6 {
            let id = format!("bg-{i}");
            s.spawn(
                &id,
                O,
                json!({"taskId": format!("task-{i}"), "kind": "data-table"}),
            );
        }
        s.done("bg-6", "", Some("Cannot start background task: limit of 5 concurrent tasks reached. Wait for existing tasks to complete."))
            .finish(O, "completed", None);
    });
    add(Seq::new("agent completed twice clears its error"), &|s| {
        s.start(O)
            .spawn("sub-1", O, json!({}))
            .done("sub-1", "first", Some("bad"))
            .done("sub-1", "second", None)
            .spawn("sub-2", O, json!({}))
            .done("sub-2", "empty error is not an error", Some(""))
            .finish(O, "completed", None);
    });

    // ---- adversarial ----
    add(
        Seq::new("tool-result and tool-error for unknown ids"),
        &|s| {
            s.start(O)
                .result(O, "nope", json!(1))
                .fail(O, "nope-2", "x")
                .confirm(O, "req", "nope-3", json!({}))
                .finish(O, "completed", None);
        },
    );
    add(Seq::new("agent-spawned with unknown parent"), &|s| {
        s.start(O)
            .spawn("sub-1", "ghost", json!({}))
            .text("sub-1", "ignored")
            .spawn("sub-2", "sub-1", json!({}))
            .finish(O, "completed", None);
    });
    add(Seq::new("events for unknown agents"), &|s| {
        s.start(O)
            .text("ghost", "t")
            .reason("ghost", "r")
            .call("ghost", "tc-g", "search-nodes", json!({}))
            .result("ghost", "tc-g", json!(1))
            .tasks("ghost", json!([task("t", "todo")]), None)
            .status("ghost", "s")
            .done("ghost", "r", Some("e"))
            .finish("ghost", "completed", None);
    });
    add(Seq::new("unsafe keys as agent ids"), &|s| {
        s.start("__proto__")
            .start("constructor")
            .start(O)
            .spawn("__proto__", O, json!({}))
            .spawn("sub-1", "constructor", json!({}))
            .spawn("prototype", O, json!({}))
            .text("prototype", "x")
            .reason("__proto__", "y")
            .call("constructor", "tc-1", "a", json!({}))
            .tasks("__proto__", json!([]), None)
            .status("prototype", "s")
            .done("__proto__", "r", None)
            .text(O, "root text")
            .finish("__proto__", "completed", None);
    });
    add(Seq::new("unsafe keys as tool call ids"), &|s| {
        s.start(O)
            .call(O, "__proto__", "a", json!({}))
            .call(O, "constructor", "b", json!({}))
            .call(O, "tc-1", "c", json!({}))
            .result(O, "prototype", json!(1))
            .fail(O, "__proto__", "e")
            .confirm(O, "req", "constructor", json!({}))
            .finish(O, "error", None);
    });
    add(Seq::new("unsafe initial root").root("__proto__"), &|s| {
        s.text(O, "default root");
    });
    add(
        Seq::new("custom initial root without run-start").root("boss"),
        &|s| {
            s.text("boss", "hi").call("boss", "tc-1", "x", json!({}));
        },
    );
    add(Seq::new("no run-start at all"), &|s| {
        s.text(O, "text before any run-start")
            .spawn("sub-1", O, json!({}))
            .finish(O, "completed", None);
    });
    add(Seq::new("results before calls"), &|s| {
        s.start(O)
            .result(O, "tc-1", json!("early"))
            .fail(O, "tc-2", "early error")
            .call(O, "tc-1", "search-nodes", json!({}))
            .call(O, "tc-2", "search-nodes", json!({}))
            .result(O, "tc-2", json!("now"))
            .finish(O, "completed", None);
    });
    add(Seq::new("duplicate tool-call ids on one agent"), &|s| {
        s.start(O)
            .call(O, "tc-1", "search-nodes", json!({"n": 1}))
            .confirm(O, "req-1", "tc-1", json!({}))
            .result(O, "tc-1", json!("first"))
            .call(O, "tc-1", "plan", json!({"n": 2}))
            .finish(O, "completed", None);
    });
    add(Seq::new("duplicate tool-call ids across agents"), &|s| {
        s.start(O)
            .spawn("sub-1", O, json!({}))
            .call(O, "tc-1", "a", json!({}))
            .call("sub-1", "tc-1", "b", json!({}))
            .done("sub-1", "done", None)
            .result(O, "tc-1", json!("r"))
            .finish(O, "completed", None);
    });
    add(Seq::new("respawning an agent resets it"), &|s| {
        s.start(O)
            .spawn("sub-1", O, json!({"role": "first"}))
            .text("sub-1", "first life")
            .call("sub-1", "tc-1", "a", json!({}))
            .spawn("sub-2", O, json!({}))
            .spawn("sub-1", O, json!({"role": "second", "taskId": "t-9"}))
            .text("sub-1", " second life")
            .finish(O, "completed", None);
    });
    add(Seq::new("sub-agent of a sub-agent"), &|s| {
        s.start(O)
            .spawn("sub-1", O, json!({}))
            .spawn("sub-1-1", "sub-1", json!({}))
            .text("sub-1-1", "deep")
            .call("sub-1-1", "tc-1", "a", json!({}))
            .done("sub-1", "parent done", None)
            .finish(O, "cancelled", Some("service_shutdown"));
    });
    add(Seq::new("empty strings everywhere"), &|s| {
        s.start(O)
            .text(O, "")
            .text(O, "")
            .resp("")
            .reason(O, "")
            .status(O, "")
            .error(O, "")
            .call(O, "", "", json!({}))
            .result(O, "", json!(""))
            .finish(O, "completed", Some(""));
    });
    add(
        Seq::new("confirmation then re-issued call loses it"),
        &|s| {
            s.start(O)
                .call(O, "tc-1", "delete-workflow", json!({}))
                .confirm(O, "req-1", "tc-1", json!({}))
                .call(O, "tc-1", "delete-workflow", json!({}))
                .confirm(
                    O,
                    "req-2",
                    "tc-1",
                    json!({"severity": "warning", "message": "Really?"}),
                )
                .confirm(
                    O,
                    "req-3",
                    "tc-1",
                    json!({"severity": "info", "message": "Really really?"}),
                )
                .finish(O, "cancelled", Some("crash_interrupted"));
        },
    );
    add(
        Seq::new("respawn creating a cycle").throws("Maximum call stack"),
        &|s| {
            s.start(O)
                .spawn("sub-1", O, json!({}))
                .spawn(O, "sub-1", json!({"role": "looped"}))
                .text(O, "x");
        },
    );
    add(
        Seq::new("self-parented agent").throws("Maximum call stack"),
        &|s| {
            s.start(O).spawn(O, O, json!({}));
        },
    );
    add(
        Seq::new("Object.prototype member as agent id").throws("TypeError"),
        &|s| {
            s.start(O).text("toString", "x");
        },
    );
    all
}

// ---------------------------------------------------------------------------------------------
// Seeded random sequences

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn text(&mut self) -> String {
        const PIECES: &[&str] = &[
            "Hello",
            " world",
            "\n",
            "é",
            "🚀",
            "\"q\"",
            "\\",
            "\t",
            "\u{7}",
            "",
            " ",
            "ok.",
            "</script>",
            "\u{2028}",
        ];
        (0..self.below(4)).map(|_| self.pick(PIECES)).collect()
    }
    fn value(&mut self, depth: usize) -> Value {
        match self.below(if depth > 1 { 5 } else { 7 }) {
            0 => Value::Null,
            1 => json!(self.chance(50)),
            2 => json!(self.below(1_000_000) as i64 - 500_000),
            3 => json!(self.pick(&["0.5", "2.25", "-3.75"]).parse::<f64>().unwrap()),
            4 => json!(self.text()),
            5 => Value::Array((0..self.below(3)).map(|_| self.value(depth + 1)).collect()),
            _ => self.object(depth + 1),
        }
    }
    fn object(&mut self, depth: usize) -> Value {
        const KEYS: &[&str] = &["query", "id", "nodes", "x-y", "Ünï", "a b", ""];
        let mut m = serde_json::Map::new();
        for _ in 0..self.below(4) {
            let k = self.pick(KEYS).to_string();
            let v = self.value(depth);
            m.insert(k, v);
        }
        Value::Object(m)
    }
}

/// A seeded random sequence. `classic` sequences avoid what 1.41.0 changed (reasoning, the
/// render hints it remapped, repeated tool-call ids, re-spawns, categorized cancel reasons) so
/// they also exercise the 1.41.0 comparison; the others use everything.
fn random_sequence(seed: u64, classic: bool) -> Seq {
    const AGENTS: &[&str] = &[
        O,
        O,
        O,
        "sub-1",
        "sub-1",
        "sub-2",
        "sub-3",
        "o2",
        "ghost",
        "__proto__",
        "constructor",
        "prototype",
    ];
    const TOOL_IDS: &[&str] = &[
        "tc-1",
        "tc-2",
        "tc-3",
        "tc-4",
        "tc-5",
        "tc-6",
        "__proto__",
        "constructor",
        "prototype",
    ];
    const TOOLS: &[&str] = &[
        "search-nodes",
        "delegate",
        "plan",
        "task-control",
        "build-workflow-with-agent",
        "research-with-agent",
        "eval-setup-with-agent",
        "list_skills",
        "load_skill",
        "build-workflow",
        "create-tasks",
        "read_skill",
        "get-workflow",
    ];
    const RESPONSES: &[&str] = &["", "resp-a", "resp-b"];
    const STARTS: &[i64] = &[
        1_795_313_483_123,
        0,
        -86_400_001,
        951_782_399_999,
        253_402_300_790_000,
        8_639_999_000_000_000,
        -8_639_999_999_000_000,
    ];

    const CLASSIC_TOOLS: &[&str] = &[
        "search-nodes",
        "task-control",
        "build-workflow-with-agent",
        "research-with-agent",
        "eval-setup-with-agent",
        "list_skills",
        "load_skill",
        "get-workflow",
    ];
    let mut rng = Rng(seed);
    let kind = if classic { "classic" } else { "any" };
    let mut s = Seq::new(&format!("random {kind} seed {seed}"));
    let mut spawned: Vec<String> = Vec::new();
    let mut next_tool_call = 0;
    if rng.chance(15) {
        s.root = Some(rng.pick(&[O, "o2", "__proto__", "sub-1"]).to_string());
    }
    s.ts = STARTS[rng.below(STARTS.len())];
    if rng.chance(90) {
        let a = rng.pick(&[O, O, "o2"]);
        s.start(a);
    }
    let n = 10 + rng.below(50);
    for _ in 0..n {
        let agent = rng.pick(AGENTS);
        let mut tc = rng.pick(TOOL_IDS).to_string();
        match rng.below(100) {
            0..=19 => {
                let t = rng.text();
                s.text(agent, &t);
            }
            20..=27 if !classic => {
                let t = rng.text();
                s.reason(agent, &t);
            }
            20..=39 => {
                let tool = rng.pick(if classic { CLASSIC_TOOLS } else { TOOLS });
                if classic {
                    next_tool_call += 1;
                    tc = format!("tc-{next_tool_call}");
                }
                let args = rng.object(0);
                s.call(agent, &tc, tool, args);
            }
            40..=48 => {
                let v = rng.value(0);
                s.result(agent, &tc, v);
            }
            49..=52 => {
                let t = rng.text();
                s.fail(agent, &tc, &t);
            }
            53..=61 => {
                let parent = rng.pick(&[O, O, O, "sub-1", "o2", "ghost", "__proto__"]);
                // Re-spawning known agents mostly makes cycles (the JS then overflows), so it
                // is rare in `any` sequences and absent from `classic` ones.
                let fresh = ["sub-1", "sub-2", "sub-3", "o2", "__proto__", "constructor"];
                let agent = if rng.chance(if classic { 100 } else { 85 }) {
                    match fresh.iter().find(|a| !spawned.iter().any(|s| s == *a)) {
                        Some(a) => *a,
                        None => continue,
                    }
                } else {
                    agent
                };
                spawned.push(agent.to_string());
                let mut extra = json!({"role": rng.pick(&["builder", "researcher", ""])});
                if rng.chance(40) {
                    extra["taskId"] = json!(format!("task-{}", rng.below(5)));
                }
                if rng.chance(30) {
                    // The kinds both schemas accept (1.41.0 dropped "delegate"; the domain
                    // refuses it).
                    extra["kind"] =
                        json!(rng.pick(&["builder", "data-table", "planner", "eval-setup"]));
                }
                if rng.chance(20) {
                    extra["targetResource"] = json!({"type": "workflow", "id": "wf-1"});
                }
                if rng.chance(20) {
                    extra["title"] = json!("T");
                    extra["goal"] = json!("G");
                }
                s.spawn(agent, parent, extra);
            }
            62..=66 => {
                let err = if rng.chance(50) {
                    Some(rng.pick(&["", "failed", "Cancelled by user"]))
                } else {
                    None
                };
                s.done(agent, "result", err);
            }
            67..=71 => {
                let extra = if rng.chance(50) {
                    json!({"inputType": "questions", "questions": [{"id": "q", "question": "?", "type": "multi", "options": ["a"]}]})
                } else {
                    json!({"severity": "warning", "tasks": {"tasks": [task("t", "done")]}})
                };
                let req = format!("req-{}", rng.below(4));
                s.confirm(agent, &req, &tc, extra);
            }
            72..=75 => {
                let items = rng.chance(50).then(|| json!([plan_item("p")]));
                s.tasks(agent, json!([task("t1", "in_progress")]), items);
            }
            76..=80 => {
                let m = rng.pick(&["", "Working", "Almost"]);
                s.status(agent, m);
            }
            81..=84 => {
                let t = rng.text();
                s.error(agent, &t);
            }
            85..=89 => {
                let st = rng.pick(&["completed", "cancelled", "error"]);
                let reasons: &[&str] = if classic {
                    &["other"]
                } else {
                    &["user_cancelled", "timeout", "other"]
                };
                let reason = rng.chance(50).then(|| rng.pick(reasons));
                s.finish(agent, st, reason);
            }
            90..=93 => {
                s.start(agent);
            }
            94..=96 => {
                s.ev(agent, "thread-title-updated", json!({"title": "t"}));
            }
            _ => {
                s.ev(
                    agent,
                    "filesystem-request",
                    json!({"requestId": "f", "toolCall": {"name": "ls", "arguments": {}}}),
                );
            }
        }
        if rng.chance(35) {
            let r = rng.pick(RESPONSES);
            s.resp(r);
        }
        s.ts += rng.below(5000) as i64;
    }
    s
}

fn random_sequences() -> Vec<Seq> {
    (0..60u64)
        .map(|i| random_sequence(0x7EAD_57EA_u64 + i * 7919, i % 2 == 1))
        .collect()
}

fn all_sequences() -> Vec<Seq> {
    let mut all = hand_written();
    all.extend(random_sequences());
    all
}

// ---------------------------------------------------------------------------------------------
// Tests

#[test]
fn agent_tree_matches_n8n_1_25_0_reducer() {
    let cases = all_sequences();
    assert!(hand_written().len() >= 30);
    let js = run_js_reducer("1.25.0", false, &cases);

    let mut failures = Vec::new();
    let (mut compared, mut cycles) = (0, 0);
    for (case, outcome) in cases.iter().zip(&js) {
        let ours = our_tree_json(case, false);
        match outcome {
            JsOutcome::Tree(theirs) => {
                if let Some(expected) = case.js_throws {
                    failures.push(format!(
                        "{}: expected the npm reducer to throw {expected:?}, it gave a tree",
                        case.name
                    ));
                    continue;
                }
                compared += 1;
                let a: Value = serde_json::from_str(theirs).unwrap();
                let b: Value = serde_json::from_str(&ours).unwrap();
                if a != b {
                    failures.push(format!(
                        "{}: trees differ\n  n8n:  {theirs}\n  ours: {ours}",
                        case.name
                    ));
                } else if *theirs != ours {
                    failures.push(format!(
                        "{}: equal values but different JSON text (key order?)\n  n8n:  {theirs}\n  ours: {ours}",
                        case.name
                    ));
                }
            }
            JsOutcome::Threw(err) => match case.js_throws {
                Some(expected) if err.contains(expected) => {}
                Some(expected) => failures.push(format!(
                    "{}: expected a throw containing {expected:?}, got {err}",
                    case.name
                )),
                // Random sequences may re-spawn agents into a cycle; the JS then overflows its
                // stack in toAgentTree. Anything else is a failure.
                None if err.contains("Maximum call stack") && has_cycle(&our_state(case)) => {
                    cycles += 1
                }
                None => failures.push(format!("{}: npm reducer threw {err}", case.name)),
            },
        }
    }
    eprintln!(
        "n8n 1.25.0: {} sequences, {compared} trees compared byte for byte, {cycles} random cycles (JS stack overflow)",
        cases.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} sequences diverge from @n8n/api-types 1.25.0:\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
    assert!(
        compared >= 80,
        "too few sequences were compared ({compared})"
    );
}

/// Why 1.41.0's reducer may legitimately disagree with the 1.25.0 port on a sequence.
fn changed_in_1_41(case: &Seq) -> Vec<&'static str> {
    let mut why = Vec::new();
    let mut state = match &case.root {
        Some(r) => AgentRunState::new(r),
        None => AgentRunState::default(),
    };
    let mut seen_tool_calls = std::collections::HashSet::new();
    for e in &case.events {
        match &e.body {
            EventBody::ReasoningDelta(_) => why.push("reasoning gets timeline entries"),
            EventBody::ToolCall(p) => {
                if [
                    "delegate",
                    "plan",
                    "build-workflow",
                    "create-tasks",
                    "create_skills",
                    "read_skill",
                    "update_skill",
                ]
                .contains(&p.tool_name.as_str())
                {
                    why.push("getRenderHint table changed");
                }
                if !seen_tool_calls.insert(p.tool_call_id.clone()) {
                    why.push("a repeated tool-call id only updates args");
                }
            }
            EventBody::AgentSpawned(_) if state.agents_by_id.contains_key(&e.agent_id) => {
                why.push("re-spawning a known agent is ignored")
            }
            EventBody::RunFinish(p)
                if p.reason.as_deref().is_some_and(|r| {
                    [
                        "timeout",
                        "service_shutdown",
                        "user_cancelled",
                        "crash_interrupted",
                    ]
                    .contains(&r)
                }) && p.status.as_str() == "cancelled" =>
            {
                why.push("cancellationReason on the root")
            }
            EventBody::RunStart(_) if is_safe_object_key(&e.agent_id) => {
                let root_id = state.root_agent_id.clone();
                let root = state.agents_by_id.get(&root_id);
                let n = |m: &threadstream_projections::ordered_map::OrderedMap<Vec<String>>| {
                    m.get(&root_id).map_or(0, Vec::len)
                };
                let old_rule = state.agents_by_id.len() > 1
                    || root.is_some_and(|r| !r.text_content.is_empty())
                    || n(&state.children_by_agent_id) > 0
                    || n(&state.tool_call_ids_by_agent_id) > 0;
                let new_rule = state.agents_by_id.len() > 1
                    || old_rule
                    || root.is_some_and(|r| {
                        !r.reasoning.is_empty()
                            || r.status_message.is_some()
                            || r.tasks.is_some()
                            || r.plan_items.as_ref().is_some_and(|p| !p.is_empty())
                            || r.result.as_ref().is_some_and(|x| !x.is_empty())
                            || r.error.as_ref().is_some_and(|x| !x.is_empty())
                    })
                    || state
                        .timeline_by_agent_id
                        .get(&root_id)
                        .is_some_and(|t| !t.is_empty());
                if old_rule != new_rule {
                    why.push("run-start re-activation rule widened");
                }
                if old_rule && e.agent_id != root_id {
                    why.push("run-start aliases a new root id");
                }
            }
            _ => {}
        }
        state.reduce(e);
    }
    why.sort();
    why.dedup();
    why
}

#[test]
fn agent_tree_against_n8n_1_41_0_reducer() {
    let cases = all_sequences();
    let js = run_js_reducer("1.41.0", true, &cases);
    let mut failures = Vec::new();
    let (mut neutral, mut changed_equal, mut changed_differ) = (0, 0, Vec::new());
    for (case, outcome) in cases.iter().zip(&js) {
        let mut why = changed_in_1_41(case);
        if case.js_throws.is_some() {
            why.push("1.25.0 throws on it");
        }
        let ours: Value = serde_json::from_str(&our_tree_json(case, true)).unwrap();
        let equal = match outcome {
            JsOutcome::Tree(t) => serde_json::from_str::<Value>(t).unwrap() == ours,
            JsOutcome::Threw(_) => false,
        };
        let cycle_or_throw = case.js_throws.is_some() || has_cycle(&our_state(case));
        if why.is_empty() && !cycle_or_throw {
            neutral += 1;
            if !equal {
                let theirs = match outcome {
                    JsOutcome::Tree(t) => t.clone(),
                    JsOutcome::Threw(e) => format!("threw {e}"),
                };
                failures.push(format!(
                    "{}: 1.41.0 differs on a sequence that avoids its documented changes\n  n8n:  {theirs}\n  ours: {ours}",
                    case.name
                ));
            }
        } else if equal {
            changed_equal += 1;
        } else {
            changed_differ.push(format!("{} ({})", case.name, why.join("; ")));
        }
    }
    eprintln!(
        "n8n 1.41.0: {neutral} sequences without 1.41 changes all agree (timestamps included); \
         {changed_equal} touching them still agree; {} differ as expected:\n  {}",
        changed_differ.len(),
        changed_differ.join("\n  ")
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(neutral >= 15, "too few neutral sequences ({neutral})");
}

#[test]
fn conformance_events_pass_the_published_schemas() {
    let cases = all_sequences();
    let ndjson: String = cases
        .iter()
        .flat_map(|c| &c.events)
        .enumerate()
        .map(|(i, e)| wire(e, i) + "\n")
        .collect();
    let total = cases.iter().map(|c| c.events.len()).sum::<usize>();
    require_installed("1.25.0");
    let (out, code) = node("validate.mjs", &["1.25.0"], ndjson.clone());
    let summary: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["checked"], total);
    assert_eq!(
        code, 0,
        "1.25.0 rejects events we feed the reducer: {}",
        summary["failures"]
    );

    // The same events under 1.41.0: we only send agent kinds both versions accept.
    require_installed("1.41.0");
    let (out, code) = node("validate.mjs", &["1.41.0"], ndjson);
    let summary: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["checked"], total);
    assert_eq!(
        code, 0,
        "1.41.0 rejects events we feed the reducer: {}",
        summary["failures"]
    );
}

#[test]
fn validate_script_reports_failures() {
    require_installed("1.25.0");
    let input = [
        r#"{"type":"run-start","runId":"r","agentId":"a","payload":{"messageId":"m"}}"#,
        "",
        r#"{"type":"tool-call","runId":"r","agentId":"a","payload":{"toolCallId":"t"}}"#,
        "not json",
    ]
    .join("\n");
    let (out, code) = node("validate.mjs", &["1.25.0"], input);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["checked"], 3);
    let lines: Vec<_> = v["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, [3, 4]);
}
