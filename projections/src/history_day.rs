//! A thread's conversation one UTC day at a time (`GET /api/v1/agent/history`): a read of the
//! thread's events, not a rendering of its stream, so it lives apart from the AG-UI renderer
//! whose snapshot frame it answers in.

use std::collections::HashMap;

use serde_json::{json, Value};
use threadstream_domain::event::ToolResult;
use threadstream_domain::{EventBody, StoredEvent};

use crate::render::result_text;

/// One UTC day of a thread's conversation as an AG-UI `STATE_SNAPSHOT` with
/// `scope: "history_day"`. The day is the latest with messages before `before` (`YYYY-MM-DD`,
/// exclusive; none: the latest of all); `hasMore` says whether an earlier day has messages.
/// Messages: the user's (`role: "user"`), the orchestrator's text of each run (`assistant`, one
/// message per run) and tool results (`tool`), each `{id, seq, role, content, metadata,
/// timestamp}` with the ISO time of its first event.
pub fn history_day(thread_id: Option<&str>, events: &[StoredEvent], before: Option<&str>) -> Value {
    let mut messages: Vec<(String, Value)> = Vec::new();
    let mut orchestrators: HashMap<String, String> = HashMap::new();
    // Per run: its assistant message's index in `messages`, and its text so far (written into
    // the message once every delta is in, so the text is built once, not copied per delta).
    let mut answers: HashMap<String, (usize, String)> = HashMap::new();
    let mut tool_names: HashMap<String, String> = HashMap::new();
    for e in events {
        let Ok(decoded) = e.decode() else { continue };
        let day = crate::time::iso_millis(e.ts)[..10].to_string();
        let message = |id: &str, role: &str, content: &str| {
            json!({"id": id, "seq": e.seq, "role": role, "content": content,
                   "metadata": {"runId": e.run_id}, "timestamp": crate::time::iso_millis(e.ts)})
        };
        match decoded.body {
            EventBody::RunStart(_) => {
                orchestrators.insert(e.run_id.clone(), e.agent_id.clone());
            }
            EventBody::UserMessage(m) => {
                messages.push((day, message(&m.message_id, "user", &m.text)));
            }
            EventBody::TextDelta(d) if orchestrators.get(&e.run_id) == Some(&e.agent_id) => {
                match answers.get_mut(&e.run_id) {
                    Some((_, text)) => text.push_str(&d.text),
                    None => {
                        answers.insert(e.run_id.clone(), (messages.len(), d.text.clone()));
                        messages.push((day, message(&format!("msg-{}", e.id), "assistant", "")));
                    }
                }
            }
            EventBody::ToolCall(c) => {
                tool_names.insert(c.tool_call_id, c.tool_name);
            }
            EventBody::ToolResult(ToolResult {
                tool_call_id,
                result,
            }) => {
                let mut m = message(
                    &format!("{tool_call_id}-result"),
                    "tool",
                    &result_text(&result),
                );
                m["metadata"]["toolCallId"] = json!(tool_call_id);
                if let Some(name) = tool_names.get(&tool_call_id) {
                    m["metadata"]["toolName"] = json!(name);
                }
                messages.push((day, m));
            }
            _ => {}
        }
    }
    for (i, text) in answers.into_values() {
        messages[i].1["content"] = Value::String(text);
    }
    let earlier: Vec<&(String, Value)> = messages
        .iter()
        .filter(|(day, _)| before.is_none_or(|b| day.as_str() < b))
        .collect();
    let day = earlier.iter().map(|(d, _)| d.clone()).max();
    let of_day: Vec<Value> = earlier
        .iter()
        .filter(|(d, _)| Some(d) == day.as_ref())
        .map(|(_, m)| m.clone())
        .collect();
    let has_more = earlier
        .iter()
        .any(|(d, _)| day.as_ref().is_some_and(|day| d < day));
    let mut out = json!({"type": "STATE_SNAPSHOT", "snapshot": {"scope": "history_day",
        "threadId": thread_id, "day": day, "hasMore": has_more, "messages": of_day}});
    if let Some(t) = thread_id {
        out["threadId"] = json!(t);
    }
    out
}

/// Whether `s` is a `YYYY-MM-DD` date.
pub fn is_day(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            _ => c.is_ascii_digit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::fixture::{demo_run, Log};

    #[test]
    fn history_pages_by_day() {
        let day = 86_400_000;
        let mut log = Log::new("t1");
        demo_run(&mut log, "r1", "completed");
        let first_day = log.events.len();
        demo_run(&mut log, "r2", "completed");
        // The second run happens the next day.
        for e in &mut log.events[first_day..] {
            e.ts += day;
        }
        let latest = history_day(Some("t1"), &log.events, None);
        assert_eq!(latest["type"], "STATE_SNAPSHOT");
        let snap = &latest["snapshot"];
        assert_eq!(snap["scope"], "history_day");
        assert_eq!(snap["day"], "2023-11-15");
        assert_eq!(snap["hasMore"], true);
        let roles: Vec<&str> = snap["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["user", "assistant", "tool", "tool"]);
        assert_eq!(snap["messages"][1]["content"], "On it.Done");
        assert_eq!(snap["messages"][0]["timestamp"], "2023-11-15T22:13:20.018Z");
        let earlier = history_day(Some("t1"), &log.events, Some("2023-11-15"));
        assert_eq!(earlier["snapshot"]["day"], "2023-11-14");
        assert_eq!(earlier["snapshot"]["hasMore"], false);
        let none = history_day(Some("t1"), &log.events, Some("2023-11-14"));
        assert_eq!(none["snapshot"]["day"], Value::Null);
        assert_eq!(none["snapshot"]["messages"], json!([]));
        assert!(is_day("2023-11-14") && !is_day("2023-1-14") && !is_day("yesterday"));
    }
}
