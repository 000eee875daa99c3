//! Background tasks over HTTP with the demo model: a run that starts a background build
//! finishes while the build goes on; the thread takes a new message meanwhile (no 409); the
//! status lists the running task; once it settles a follow-up run in the same message group
//! reports; every event validates against both `@n8n/api-types` schemas. Also the task routes:
//! an unknown task is 404, a finished one too.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_build_outlives_its_run_and_a_follow_up_run_reports() {
    bounded(180, async {
        let s = Server::start().await;
        let thread = "bg-1";
        let run = s
            .chat(
                thread,
                "build a weather to slack workflow in the background",
            )
            .await;
        let mut sse = s.sse(thread, Cursor::None).await;
        let first = sse
            .read_until(Duration::from_secs(30), |e| {
                let v = e.json();
                v["runId"] == run.as_str() && v["type"] == "run-finish"
            })
            .await;
        let spawned: Vec<Value> = first
            .iter()
            .map(SseEvent::json)
            .filter(|v| v["type"] == "agent-spawned")
            .collect();
        assert_eq!(spawned.len(), 1, "one background builder");
        let task_id = spawned[0]["payload"]["taskId"]
            .as_str()
            .expect("taskId")
            .to_string();
        let group = first
            .iter()
            .map(SseEvent::json)
            .find(|v| v["type"] == "run-start")
            .unwrap()["payload"]["messageGroupId"]
            .as_str()
            .expect("every chat run has a messageGroupId")
            .to_string();

        // The run is over, the task is not: the thread is free for a new message.
        let st = s.status(thread).await;
        assert_eq!(st["hasActiveRun"], false, "{st}");
        let tasks = st["backgroundTasks"].as_array().unwrap();
        assert_eq!(tasks.len(), 1, "{st}");
        assert_eq!(tasks[0]["taskId"], task_id.as_str());
        assert_eq!(tasks[0]["status"], "running");
        let second = s.chat(thread, "crash please").await;
        assert_ne!(second, run);

        // Read on until a follow-up run (a run-start without a user message of ours) finishes.
        let rest = sse
            .read_until(Duration::from_secs(60), |e| {
                let v = e.json();
                v["type"] == "run-finish"
                    && v["runId"] != run.as_str()
                    && v["runId"] != second.as_str()
            })
            .await;
        let all: Vec<Value> = first
            .iter()
            .chain(rest.iter())
            .map(SseEvent::json)
            .collect();
        let follow_up = all.last().unwrap()["runId"].as_str().unwrap().to_string();
        let start = all
            .iter()
            .find(|v| v["type"] == "run-start" && v["runId"] == follow_up.as_str())
            .unwrap();
        assert_eq!(
            start["payload"]["messageGroupId"],
            group.as_str(),
            "same message group"
        );
        let completed = all
            .iter()
            .find(|v| v["type"] == "agent-completed")
            .expect("the builder completed");
        assert_eq!(
            completed["runId"],
            run.as_str(),
            "the task records under its own run"
        );
        assert!(completed["payload"]["result"]
            .as_str()
            .unwrap()
            .contains("Created workflow"));
        let report: String = all
            .iter()
            .filter(|v| v["type"] == "text-delta" && v["runId"] == follow_up.as_str())
            .map(|v| v["payload"]["text"].as_str().unwrap().to_string())
            .collect();
        assert!(
            report.starts_with("Your background work has finished"),
            "{report}"
        );
        assert!(report.contains(&task_id), "{report}");
        let st = s.status(thread).await;
        assert_eq!(st["backgroundTasks"], json!([]), "{st}");
        assert_eq!(st["hasActiveRun"], false, "{st}");

        // The follow-up is an assistant message of the same group in the history.
        let msgs = s.messages(thread).await;
        let grouped: Vec<&Value> = msgs["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "assistant" && m["messageGroupId"] == group.as_str())
            .collect();
        assert_eq!(grouped.len(), 2, "{msgs}");

        // A settled task, and an unknown one, cannot be cancelled or corrected.
        for path in [
            format!("/instance-ai/chat/{thread}/tasks/{task_id}/cancel"),
            "/instance-ai/chat/bg-1/tasks/task-nope/cancel".to_string(),
        ] {
            s.post(&path, &json!({}))
                .await
                .error(404, "settled or unknown task");
        }
        s.post(
            &format!("/instance-ai/chat/{thread}/tasks/{task_id}/correct"),
            &json!({"message": "use B"}),
        )
        .await
        .error(404, "correct a settled task");

        let data: Vec<String> = all.iter().map(|v| v.to_string()).collect();
        validate_n8n(&data).await;
    })
    .await
}
