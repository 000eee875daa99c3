//! The thread routes: create (generated or given id, title), list, rename, delete, and what a
//! deleted thread answers; titles set by the agent (`thread-title-updated`) reach the list.

use crate::common;

use common::*;
use serde_json::{json, Value};

fn summary_shape(t: &Value) {
    for key in [
        "id",
        "owner",
        "createdAt",
        "updatedAt",
        "deleted",
        "lastEventId",
    ] {
        assert!(t.get(key).is_some(), "thread summary without {key}: {t}");
    }
    assert!(t["id"].is_string() && t["owner"].is_string(), "{t}");
    assert!(t["lastEventId"].is_i64(), "{t}");
    assert!(t["deleted"].is_boolean(), "{t}");
    if let Some(title) = t.get("title") {
        assert!(title.is_string(), "title is present but not a string: {t}");
    }
}

fn listed(list: &Value) -> Vec<String> {
    list["threads"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .map(|t| {
            summary_shape(t);
            t["id"].as_str().unwrap().to_string()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_list_rename_delete() {
    bounded(120, async {
        let s = Server::start().await;
        assert_eq!(listed(&s.threads().await), Vec::<String>::new());

        // Generated id.
        let r = s.post("/instance-ai/threads", &json!({})).await;
        assert_eq!(r.status, 201, "{}", r.text);
        let generated = r.json();
        summary_shape(&generated);
        assert_eq!(generated["deleted"], false);
        let gen_id = generated["id"].as_str().unwrap().to_string();
        // An empty body works too.
        let r = s
            .post_raw("/instance-ai/threads", "application/json", Vec::new())
            .await;
        assert_eq!(r.status, 201, "empty body: {}", r.text);

        // Given id and title.
        let r = s
            .post(
                "/instance-ai/threads",
                &json!({"threadId": "th-1", "title": "My thread"}),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        let th1 = r.json();
        assert_eq!(th1["id"], "th-1");
        assert_eq!(th1["title"], "My thread");
        s.post("/instance-ai/threads", &json!({"threadId": "th-1"}))
            .await
            .error(409, "creating an existing thread");

        let ids = listed(&s.threads().await);
        assert_eq!(ids.len(), 3, "{ids:?}");
        assert!(ids.contains(&gen_id) && ids.contains(&"th-1".to_string()));

        // Rename.
        let renamed = s
            .patch("/instance-ai/threads/th-1", &json!({"title": "Renamed"}))
            .await
            .ok_json("rename");
        assert_eq!(renamed["title"], "Renamed");
        assert!(renamed["lastEventId"].as_i64() > th1["lastEventId"].as_i64());
        for bad in [json!({"title": ""}), json!({}), json!({"title": 5})] {
            s.patch("/instance-ai/threads/th-1", &bad)
                .await
                .error(422, &format!("rename with {bad}"));
        }
        s.patch("/instance-ai/threads/th-nope", &json!({"title": "x"}))
            .await
            .error(404, "rename of an unknown thread");
        let list = s.threads().await;
        let th = list["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == "th-1")
            .unwrap();
        assert_eq!(th["title"], "Renamed");

        // Delete: gone from the list; a deleted thread takes no chat, ingest or rename.
        let ok = s
            .delete("/instance-ai/threads/th-1")
            .await
            .ok_json("delete");
        assert_eq!(ok, json!({"ok": true}));
        let ids = listed(&s.threads().await);
        assert!(!ids.contains(&"th-1".to_string()), "{ids:?}");
        // The exact statuses and codes the document gives (`docs/openapi.json`).
        let (code, _) = s
            .chat_resp("th-1", "hello")
            .await
            .error(404, "chat on a deleted thread");
        assert_eq!(code, "thread_deleted");
        let (code, _) = s
            .ingest("th-1", &[run_start("r1", "o1")])
            .await
            .error(404, "ingest into a deleted thread");
        assert_eq!(code, "thread_deleted");
        let (code, _) = s
            .patch("/instance-ai/threads/th-1", &json!({"title": "again"}))
            .await
            .error(404, "rename of a deleted thread");
        assert_eq!(code, "thread_deleted");
        let (code, _) = s
            .delete("/instance-ai/threads/th-1")
            .await
            .error(404, "delete of a deleted thread");
        assert_eq!(code, "thread_deleted");
        let (code, _) = s
            .post("/instance-ai/threads", &json!({"threadId": "th-1"}))
            .await
            .error(409, "re-creating a deleted thread id");
        assert_eq!(code, "thread_exists");
        let (code, _) = s
            .delete("/instance-ai/threads/th-nope")
            .await
            .error(404, "delete of an unknown thread");
        assert_eq!(code, "thread_not_found");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_creates_the_thread_and_the_agent_title_reaches_the_list() {
    bounded(120, async {
        let s = Server::start().await;
        let run = s.chat("th-chat", "build a weather to slack workflow").await;
        let evs = s
            .follow_run("th-chat", &run, |_| {
                Some(json!({"kind": "approval", "approved": true}))
            })
            .await;
        let title = evs
            .iter()
            .rev()
            .map(|e| e.json())
            .find(|v| v["type"] == "thread-title-updated")
            .map(|v| v["payload"]["title"].as_str().unwrap().to_string())
            .expect("the demo run sets a title");
        let list = s.threads().await;
        let th = list["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == "th-chat")
            .unwrap_or_else(|| panic!("chat did not create the thread: {list}"))
            .clone();
        summary_shape(&th);
        assert_eq!(th["title"], title.as_str(), "{th}");
        assert_eq!(th["owner"], "local");
        // lastEventId is the thread's last event: the stream has nothing after it.
        let last = th["lastEventId"].as_i64().unwrap();
        assert!(last >= evs.last().unwrap().id(), "{th}");
        let after = s
            .read_idle(
                "th-chat",
                Cursor::query_id(last),
                std::time::Duration::from_millis(300),
            )
            .await;
        assert!(after.is_empty());
        s.ingest_ok("th-other", &[run_start("r1", "o1")]).await;
        let mut ids = listed(&s.threads().await);
        ids.sort();
        assert_eq!(ids, ["th-chat", "th-other"]);
    })
    .await
}
