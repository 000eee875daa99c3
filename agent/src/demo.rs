//! The `demo` provider: a built-in, deterministic, scripted model. **It is a demo, not an
//! LLM.** It exists so the whole runtime (streaming, plans, tools, sub-agents, confirmations,
//! cancel) can be seen and tested without an API key. Select it with the model name `demo`.
//!
//! Its answer depends only on the [`ChatRequest`] it is given: whether the `delegate` tool is
//! offered (then it plays the orchestrator, else a sub-agent), the last user message, how many
//! assistant turns came after that message and what the tool results in them say. Text and
//! reasoning are streamed one word per delta, with the configured `demo_delay` before each delta.
//!
//! ## Orchestrator script (a normal message)
//!
//! 1. reasoning + a short text; tool calls `plan` (t1 `in_progress`, t2 and t3 `todo`) and
//!    `list-workflows`.
//! 2. reasoning; `plan` (t1 `done`, t2 `in_progress`) and `delegate` to a `workflow builder`
//!    with the tools `list-workflows`, `get-workflow`, `create-workflow`.
//! 3. if the listed workflows include an inactive one: reasoning; `plan` (t3 `in_progress`) and
//!    `delete-workflow` of the first inactive workflow — destructive, so the runtime asks the user.
//!    (Otherwise this step is skipped.)
//! 4. reasoning; the final `plan`: t3 `done` if deleted, `cancelled` if denied or there was
//!    nothing to delete, `failed` on another error (t2 `failed` if the sub-agent failed).
//! 5. the final answer, streamed as text, with no tool call: the run completes.
//!
//! ## Sub-agent script (no `delegate` tool offered)
//!
//! 1. reasoning; `list-workflows` (if offered).
//! 2. reasoning; `create-workflow` (if offered) named after the first `"quoted"` text of its
//!    instructions, with three nodes.
//! 3. the answer as text, e.g. ``Created workflow `wf-…` "Name" with 3 nodes.``
//!
//! ## Workflow-builder script (a message from `POST /smith/{workflow_id}`, workflow tools only)
//!
//! 1. reasoning; `get-workflow` of the message's workflow.
//! 2. reasoning; `add-node` "Send Email" connected after the last node — or, when the message
//!    says `delete` or `remove`, `delete-workflow` (the runtime asks the user first).
//! 3. reasoning; `validate-workflow` (not after a delete).
//! 4. the answer as text.
//!
//! ## Keywords (whole words of the user's message, any case)
//!
//! - `long`: no tools; the answer is 2,000 text deltas ([`LONG_DELTAS`]), for slow readers
//!   and cancel mid-stream.
//! - `crash`: a few deltas, then the provider fails (`LLM provider 'demo' unavailable`), so the
//!   run ends with `error` and `run-finish {status: "error"}`.
//! - `questions`: `ask-user` with three questions (single choice, multiple choice, free text),
//!   then an answer that repeats what the user chose, so a client's question wizard can be
//!   checked end to end.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use threadstream_domain::event::JsonObject;

use crate::provider::{
    ChatMessage, ChatRequest, Chunk, ChunkStream, Finish, LlmProvider, ProviderError,
    ToolCallRequest, ToolOutcome, Usage,
};
use crate::task_report;
use crate::title::{short_title, TITLE_PROMPT};
use crate::tools::{
    parse_workflow_builder_message, ADD_NODE, ASK_USER, CREATE_WORKFLOW, DELEGATE, DELETE_WORKFLOW,
    GET_WORKFLOW, LIST_WORKFLOWS, PLAN, VALIDATE_WORKFLOW,
};

/// Text deltas of the `long` answer.
pub const LONG_DELTAS: usize = 2_000;

const NAME: &str = "demo";

/// The scripted demo model.
#[derive(Debug, Clone)]
pub struct DemoProvider {
    delay: Duration,
}

impl DemoProvider {
    /// `delay` is the pause before each streamed text or reasoning delta.
    pub fn new(delay: Duration) -> Self {
        DemoProvider { delay }
    }
}

impl LlmProvider for DemoProvider {
    fn name(&self) -> &str {
        NAME
    }

    fn stream(&self, request: ChatRequest) -> ChunkStream {
        let items = script(&request);
        let delay = self.delay;
        Box::pin(futures::stream::iter(items).then(move |item| async move {
            let is_delta = matches!(item, Ok(Chunk::Text(_) | Chunk::Reasoning(_)));
            if is_delta && !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            item
        }))
    }
}

/// Builds one answer.
#[derive(Default)]
struct Script {
    items: Vec<Result<Chunk, ProviderError>>,
    calls: usize,
    turn: usize,
}

impl Script {
    fn words(&mut self, text: &str, reasoning: bool) {
        for w in text.split_inclusive([' ', '\n']) {
            self.items.push(Ok(if reasoning {
                Chunk::Reasoning(w.to_string())
            } else {
                Chunk::Text(w.to_string())
            }));
        }
    }
    fn reason(&mut self, text: &str) {
        self.words(text, true);
    }
    fn say(&mut self, text: &str) {
        self.words(text, false);
    }
    fn call(&mut self, name: &str, args: Value) {
        self.calls += 1;
        let Value::Object(args) = args else {
            unreachable!("demo tool args are objects")
        };
        self.items.push(Ok(Chunk::ToolCall(ToolCallRequest {
            id: format!("call-{}-{}", self.turn, self.calls),
            name: name.to_string(),
            args,
        })));
    }
    fn fail(&mut self, message: &str) {
        self.items.push(Err(ProviderError::Unavailable {
            provider: NAME.into(),
            message: message.into(),
            source: None,
        }));
    }
}

/// What the demo reads off the conversation.
struct View<'a> {
    user: &'a str,
    /// Assistant turns after the last user message.
    turns: usize,
    /// Tool results after the last user message: (tool name, outcome), in order.
    results: Vec<(&'a str, &'a ToolOutcome)>,
    tools: Vec<&'a str>,
}

impl<'a> View<'a> {
    fn new(req: &'a ChatRequest) -> Self {
        let last_user = req
            .messages
            .iter()
            .rposition(|m| matches!(m, ChatMessage::User { .. }));
        let (user, after) = match last_user {
            Some(i) => match &req.messages[i] {
                ChatMessage::User { text } => (text.as_str(), &req.messages[i + 1..]),
                _ => unreachable!(),
            },
            None => ("", &req.messages[..]),
        };
        let mut turns = 0;
        let mut results = Vec::new();
        for m in after {
            match m {
                ChatMessage::Assistant { .. } => turns += 1,
                ChatMessage::Tool {
                    tool_name, outcome, ..
                } => results.push((tool_name.as_str(), outcome)),
                ChatMessage::User { .. } => {}
            }
        }
        View {
            user,
            turns,
            results,
            tools: req.tools.iter().map(|t| t.name.as_str()).collect(),
        }
    }

    fn has_tool(&self, name: &str) -> bool {
        self.tools.contains(&name)
    }

    fn has_word(&self, word: &str) -> bool {
        self.user
            .split(|c: char| !c.is_alphanumeric())
            .any(|w| w.eq_ignore_ascii_case(word))
    }

    /// The last outcome of `tool`.
    fn result(&self, tool: &str) -> Option<&'a ToolOutcome> {
        self.results
            .iter()
            .rev()
            .find(|(n, _)| *n == tool)
            .map(|(_, o)| *o)
    }
}

fn script(req: &ChatRequest) -> Vec<Result<Chunk, ProviderError>> {
    let view = View::new(req);
    let mut s = Script {
        turn: view.turns,
        ..Script::default()
    };
    if req.system == TITLE_PROMPT {
        // No delay: a title is one short chunk.
        s.items.push(Ok(Chunk::Text(short_title(view.user))));
    } else if view.has_tool(DELEGATE) {
        orchestrator(&view, &mut s);
    } else {
        sub_agent(&view, &mut s);
    }
    if s.items.last().is_some_and(|i| i.is_ok()) {
        let input: usize = req.system.len() + format!("{:?}", req.messages).len();
        let output: usize = s
            .items
            .iter()
            .map(|i| match i {
                Ok(Chunk::Text(t) | Chunk::Reasoning(t)) => t.len(),
                Ok(Chunk::ToolCall(c)) => {
                    c.name.len() + Value::Object(c.args.clone()).to_string().len()
                }
                _ => 0,
            })
            .sum();
        s.items.push(Ok(Chunk::Finish(Finish {
            usage: Some(Usage {
                input_tokens: (input / 4) as u64,
                output_tokens: (output / 4) as u64,
            }),
        })));
    }
    s.items
}

fn tasks(subject: &str, statuses: [&str; 3]) -> Value {
    json!({"tasks": [
        {"id": "t1", "description": "Check existing workflows", "status": statuses[0]},
        {"id": "t2", "description": format!("Build \"{subject}\""), "status": statuses[1]},
        {"id": "t3", "description": "Remove an unused workflow", "status": statuses[2]},
    ]})
}

/// The name the demo gives the workflow it builds: the message's short title without a leading
/// "build a" / "create me a" …; no double quotes (it is quoted in the sub-agent's instructions).
fn workflow_name(message: &str) -> String {
    let title = short_title(message).replace('"', "'");
    let mut words: Vec<&str> = title.split_whitespace().collect();
    let lower = |w: Option<&&str>| w.map(|w| w.to_lowercase()).unwrap_or_default();
    if ["build", "create", "make", "add", "write", "set"].contains(&lower(words.first()).as_str()) {
        words.remove(0);
        for filler in ["me", "up", "a", "an", "the", "new"] {
            if lower(words.first()) == filler && words.len() > 1 {
                words.remove(0);
            }
        }
    }
    if words.is_empty() {
        return title;
    }
    short_title(&words.join(" "))
}

/// The listed workflows, from the `list-workflows` result.
fn listed(view: &View<'_>) -> Vec<JsonObject> {
    match view.result(LIST_WORKFLOWS) {
        Some(ToolOutcome::Ok(v)) => v
            .get("workflows")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|w| w.as_object().cloned()).collect())
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// The first inactive listed workflow: what the demo offers to delete.
fn delete_target(view: &View<'_>) -> Option<(String, String)> {
    listed(view).into_iter().find_map(|w| {
        let inactive = w.get("active") == Some(&Value::Bool(false));
        let id = w.get("id")?.as_str()?.to_string();
        let name = w
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        inactive.then_some((id, name))
    })
}

enum Stage {
    PlanAndList,
    Delegate,
    Delete(String, String),
    FinalPlan,
    Answer,
}

fn orchestrator(view: &View<'_>, s: &mut Script) {
    let subject = workflow_name(view.user);
    if let Some(lines) = task_report::task_lines(view.user) {
        // A follow-up run: say how the background tasks ended.
        s.say(&format!(
            "Your background work has finished:\n\n{}\n",
            lines.join("\n")
        ));
        return;
    }
    if view.has_word("background") {
        if view.turns == 0 {
            s.reason("Building can run in the background while we keep talking.");
            s.call(DELEGATE, build_delegation(view, &subject, true));
        } else {
            let task = match view.result(DELEGATE) {
                Some(ToolOutcome::Ok(v)) => v["taskId"].as_str().unwrap_or("a task").to_string(),
                _ => "no task".to_string(),
            };
            s.say(&format!(
                "I started a background task ({task}) to build \"{subject}\". Keep chatting if \
                 you like; I'll report here when it is done."
            ));
        }
        return;
    }
    if view.has_word("questions") && view.has_tool(ASK_USER) {
        ask_questions(view, s);
        return;
    }
    if view.has_word("crash") {
        s.reason("Let me think about this… ");
        s.say("Working on it");
        s.fail("simulated failure (the message contains the keyword 'crash')");
        return;
    }
    if view.has_word("long") {
        if view.turns == 0 {
            s.reason("The user wants a long answer; streaming it.");
            long_answer(s);
        } else {
            s.say("That was the long answer.");
        }
        return;
    }
    let target = delete_target(view);
    let stage = match view.turns {
        0 => Stage::PlanAndList,
        1 => Stage::Delegate,
        n => {
            let mut rest = Vec::new();
            if let Some((id, name)) = target.clone() {
                rest.push(Stage::Delete(id, name));
            }
            rest.push(Stage::FinalPlan);
            rest.into_iter().nth(n - 2).unwrap_or(Stage::Answer)
        }
    };
    match stage {
        Stage::PlanAndList => {
            s.reason(&format!(
                "The user asked: \"{}\". I'll write a short plan, look at the existing workflows, \
                 hand the build to a sub-agent and then tidy up an unused workflow.",
                view.user.trim()
            ));
            s.say("Let me plan this and look at what you already have.\n\n");
            s.call(PLAN, tasks(&subject, ["in_progress", "todo", "todo"]));
            s.call(LIST_WORKFLOWS, json!({"limit": 20}));
        }
        Stage::Delegate => {
            let n = listed(view).len();
            s.reason(&format!(
                "There are {n} workflows. Building is a self-contained job: I'll delegate it to a \
                 workflow builder with only the workflow tools."
            ));
            s.call(PLAN, tasks(&subject, ["done", "in_progress", "todo"]));
            s.call(DELEGATE, build_delegation(view, &subject, false));
        }
        Stage::Delete(id, name) => {
            s.reason(&format!(
                "The builder is done. \"{name}\" ({id}) is inactive; deleting it is destructive, \
                 so the user has to approve."
            ));
            s.call(PLAN, tasks(&subject, ["done", "done", "in_progress"]));
            s.call(DELETE_WORKFLOW, json!({"workflowId": id}));
        }
        Stage::FinalPlan => {
            let built = match view.result(DELEGATE) {
                Some(ToolOutcome::Ok(_)) => "done",
                _ => "failed",
            };
            let removed = match (&target, view.result(DELETE_WORKFLOW)) {
                (Some(_), Some(ToolOutcome::Ok(_))) => "done",
                (Some(_), Some(ToolOutcome::Err(e))) if e.contains("denied") => "cancelled",
                (Some(_), Some(ToolOutcome::Err(_))) => "failed",
                _ => "cancelled",
            };
            s.reason("Updating the checklist with how everything went.");
            s.call(PLAN, tasks(&subject, ["done", built, removed]));
        }
        Stage::Answer => {
            let mut text = String::from("Here's what I did:\n\n");
            text.push_str(&format!(
                "- Checked your workflows: {} found.\n",
                listed(view).len()
            ));
            match view.result(DELEGATE) {
                Some(ToolOutcome::Ok(v)) => text.push_str(&format!(
                    "- The workflow builder reported: {}\n",
                    v.as_str().unwrap_or("done")
                )),
                Some(ToolOutcome::Err(e)) => {
                    text.push_str(&format!("- Building did not work: {e}\n"))
                }
                None => {}
            }
            match (&target, view.result(DELETE_WORKFLOW)) {
                (Some((_, name)), Some(ToolOutcome::Ok(_))) => {
                    text.push_str(&format!("- Deleted the unused workflow \"{name}\".\n"))
                }
                (Some((_, name)), Some(ToolOutcome::Err(e))) if e.contains("denied") => {
                    text.push_str(&format!("- Kept \"{name}\": you declined the deletion.\n"))
                }
                (Some((_, name)), Some(ToolOutcome::Err(e))) => {
                    text.push_str(&format!("- Could not delete \"{name}\": {e}\n"))
                }
                _ => text.push_str("- There was no unused workflow to remove.\n"),
            }
            text.push_str("\nAnything else?");
            s.say(&text);
        }
    }
}

/// The `delegate` arguments that hand the build of `subject` to a workflow builder.
/// The `questions` keyword: three questions, then the answers repeated.
fn ask_questions(view: &View<'_>, s: &mut Script) {
    match view.result(ASK_USER) {
        None => {
            s.reason("A few details first.");
            s.call(
                ASK_USER,
                json!({
                    "introMessage": "Three quick questions before I build it.",
                    "questions": [
                        {"id": "trigger", "question": "What starts the workflow?", "type": "single",
                         "options": ["A schedule", "A webhook", "A new email"]},
                        {"id": "channels", "question": "Where should results go?", "type": "multi",
                         "options": ["Slack", "Email", "A spreadsheet"]},
                        {"id": "name", "question": "What should it be called?", "type": "text"}
                    ]
                }),
            );
        }
        Some(ToolOutcome::Ok(v)) => {
            let answers: Vec<String> = v["answers"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .map(|a| {
                    let mut parts: Vec<String> = a["selectedOptions"]
                        .as_array()
                        .map(Vec::as_slice)
                        .unwrap_or_default()
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect();
                    if let Some(t) = a["customText"].as_str() {
                        parts.push(t.to_string());
                    }
                    format!(
                        "{}: {}",
                        a["questionId"].as_str().unwrap_or("?"),
                        parts.join(", ")
                    )
                })
                .collect();
            s.say(&format!("You answered — {}.", answers.join("; ")));
        }
        Some(ToolOutcome::Err(e)) => s.say(&format!("No answers ({e}).")),
    }
}

fn build_delegation(view: &View<'_>, subject: &str, background: bool) -> Value {
    let mut args = json!({
        "role": "workflow builder",
        "instructions": format!(
            "Build a workflow named \"{subject}\" for this request: {}. Check the existing \
             workflows first, then create it and reply with its id.",
            view.user.trim()
        ),
        "tools": [LIST_WORKFLOWS, "get-workflow", CREATE_WORKFLOW],
    });
    if background {
        args["background"] = json!(true);
    }
    args
}

fn long_answer(s: &mut Script) {
    const WORDS: &[&str] = &[
        "Lorem",
        "ipsum",
        "dolor",
        "sit",
        "amet,",
        "consectetur",
        "adipiscing",
        "elit,",
        "sed",
        "do",
        "eiusmod",
        "tempor",
        "incididunt",
        "ut",
        "labore",
        "et",
        "dolore",
        "magna",
        "aliqua.",
    ];
    for i in 0..LONG_DELTAS {
        let end = if i % 20 == 19 { "\n" } else { " " };
        s.items
            .push(Ok(Chunk::Text(format!("{}{end}", WORDS[i % WORDS.len()]))));
    }
}

fn sub_agent(view: &View<'_>, s: &mut Script) {
    if let Some((workflow_id, _)) = parse_workflow_builder_message(view.user) {
        return workflow_builder(view, s, workflow_id);
    }
    let name = quoted(view.user).unwrap_or_else(|| short_title(view.user));
    let mut stages = Vec::new();
    if view.has_tool(LIST_WORKFLOWS) {
        stages.push(LIST_WORKFLOWS);
    }
    if view.has_tool(CREATE_WORKFLOW) {
        stages.push(CREATE_WORKFLOW);
    }
    match stages.get(view.turns).copied() {
        Some(LIST_WORKFLOWS) => {
            if view.has_word("background") {
                // A background build takes its time: the orchestrator's turn (and run) ends
                // first, as with real builds.
                s.reason(&"Working through the build in the background, step by step. ".repeat(15));
            }
            s.reason("Checking the existing workflows before building anything.");
            s.call(LIST_WORKFLOWS, json!({}));
        }
        Some(_) => {
            s.reason(&format!(
                "Nothing called \"{name}\" yet. Creating it with a schedule trigger, an HTTP \
                 request and a Slack message."
            ));
            s.call(
                CREATE_WORKFLOW,
                json!({
                    "name": name,
                    "nodes": [
                        {"name": "Schedule Trigger", "type": "n8n-nodes-base.scheduleTrigger"},
                        {"name": "HTTP Request", "type": "n8n-nodes-base.httpRequest"},
                        {"name": "Slack", "type": "n8n-nodes-base.slack"},
                    ],
                }),
            );
        }
        None => match view.result(CREATE_WORKFLOW) {
            Some(ToolOutcome::Ok(v)) => {
                let id = v.get("id").and_then(Value::as_str).unwrap_or("?");
                s.say(&format!("Created workflow `{id}` \"{name}\" with 3 nodes."));
            }
            Some(ToolOutcome::Err(e)) => s.say(&format!("Could not create the workflow: {e}")),
            None => s.say("I cannot create workflows with the tools I was given."),
        },
    }
}

/// A workflow-builder turn (a message from `POST /smith/{workflow_id}`) on an existing workflow:
/// look at it, then change it — add a step after its last node and validate, or delete it when
/// asked to (`delete` or `remove`: destructive, so the runtime asks first).
fn workflow_builder(view: &View<'_>, s: &mut Script, workflow_id: &str) {
    if view.has_word("crash") {
        s.reason("Let me look at this workflow… ");
        s.fail("simulated failure (the message contains the keyword 'crash')");
        return;
    }
    let id = json!({"workflowId": workflow_id});
    let delete = view.has_word("delete") || view.has_word("remove");
    match (view.turns, delete) {
        (0, _) => {
            s.reason(&format!("Looking at workflow `{workflow_id}` first."));
            s.call(GET_WORKFLOW, id);
        }
        (1, true) => {
            s.reason("The user wants this workflow gone; deleting it needs their approval.");
            s.call(DELETE_WORKFLOW, id);
        }
        (_, true) => match view.result(DELETE_WORKFLOW) {
            Some(ToolOutcome::Ok(_)) => s.say(&format!("Deleted workflow `{workflow_id}`.")),
            Some(ToolOutcome::Err(e)) => s.say(&format!("The workflow stays: {e}")),
            None => s.say("I could not delete the workflow."),
        },
        (1, false) => {
            let last = match view.result(GET_WORKFLOW) {
                Some(ToolOutcome::Ok(v)) => v["nodes"]
                    .as_array()
                    .and_then(|n| n.last())
                    .and_then(|n| n["name"].as_str())
                    .map(str::to_string),
                _ => None,
            };
            s.reason("Adding an email step after the last node.");
            let mut args = json!({
                "workflowId": workflow_id,
                "name": "Send Email",
                "type": "n8n-nodes-base.emailSend",
            });
            if let Some(last) = last {
                args["connectFrom"] = json!(last);
            }
            s.call(ADD_NODE, args);
        }
        (2, false) => {
            s.reason("Checking that the workflow is still valid.");
            s.call(VALIDATE_WORKFLOW, id);
        }
        _ => match (view.result(ADD_NODE), view.result(VALIDATE_WORKFLOW)) {
            (Some(ToolOutcome::Ok(_)), Some(ToolOutcome::Ok(v))) => s.say(&format!(
                "Added a \"Send Email\" step to workflow `{workflow_id}`; it is {}.",
                if v["valid"] == true {
                    "valid"
                } else {
                    "not valid yet"
                }
            )),
            (Some(ToolOutcome::Err(e)), _) => s.say(&format!("Could not add the step: {e}")),
            _ => s.say(&format!("Workflow `{workflow_id}` is unchanged.")),
        },
    }
}

/// The first `"quoted"` text.
fn quoted(text: &str) -> Option<String> {
    let start = text.find('"')? + 1;
    let len = text[start..].find('"')?;
    let q = text[start..start + len].trim();
    (!q.is_empty()).then(|| q.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ToolSpec;

    fn spec(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters: json!({}),
        }
    }

    fn calls(items: &[Result<Chunk, ProviderError>]) -> Vec<String> {
        items
            .iter()
            .filter_map(|i| match i {
                Ok(Chunk::ToolCall(c)) => Some(c.name.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn orchestrator_starts_with_plan_and_list() {
        let req = ChatRequest {
            system: String::new(),
            messages: vec![ChatMessage::User {
                text: "build a thing".into(),
            }],
            tools: vec![spec(PLAN), spec(DELEGATE), spec(LIST_WORKFLOWS)],
        };
        let items = script(&req);
        assert_eq!(calls(&items), vec![PLAN, LIST_WORKFLOWS]);
        assert!(matches!(items.last(), Some(Ok(Chunk::Finish(_)))));
    }

    #[test]
    fn sub_agent_uses_only_its_tools() {
        let req = ChatRequest {
            system: String::new(),
            messages: vec![ChatMessage::User {
                text: "Build a workflow named \"X\"".into(),
            }],
            tools: vec![spec(CREATE_WORKFLOW)],
        };
        assert_eq!(calls(&script(&req)), vec![CREATE_WORKFLOW]);
    }

    #[test]
    fn workflow_names() {
        assert_eq!(
            workflow_name("Build a weather to Slack workflow"),
            "Weather to Slack workflow"
        );
        assert_eq!(
            workflow_name("create me a new daily digest"),
            "Daily digest"
        );
        assert_eq!(workflow_name("build"), "Build");
        assert_eq!(workflow_name("hello \"there\""), "Hello 'there'");
    }

    #[test]
    fn keywords() {
        let mut req = ChatRequest {
            system: String::new(),
            messages: vec![ChatMessage::User {
                text: "a LONG one".into(),
            }],
            tools: vec![spec(DELEGATE)],
        };
        let items = script(&req);
        let texts = items
            .iter()
            .filter(|i| matches!(i, Ok(Chunk::Text(_))))
            .count();
        assert_eq!(texts, LONG_DELTAS);
        req.messages = vec![ChatMessage::User {
            text: "please crash".into(),
        }];
        assert!(script(&req).last().unwrap().is_err());
        // Not a whole word: no keyword.
        req.messages = vec![ChatMessage::User {
            text: "longer".into(),
        }];
        assert_eq!(calls(&script(&req)), vec![PLAN, LIST_WORKFLOWS]);
    }
}
