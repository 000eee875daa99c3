//! The NDJSON line of one stored event, what export writes and import reads:
//! `{"id","seq","thread","run","agent","type","payload","ts","responseId"?,"user"?}`.
//! `payload` is the stored JSON text, written and read back byte for byte.

use serde::Deserialize;
use serde_json::value::RawValue;
use threadstream_domain::StoredEvent;

/// Appends `e` as one line (with its `\n`) to `out`.
pub fn write_line(e: &StoredEvent, out: &mut String) {
    use std::fmt::Write;
    let s = |v: &str| serde_json::to_string(v).expect("strings serialize");
    let _ = write!(
        out,
        "{{\"id\":{},\"seq\":{},\"thread\":{},\"run\":{},\"agent\":{},\"type\":{},\"payload\":{},\"ts\":{}",
        e.id,
        e.seq,
        s(&e.thread_id),
        s(&e.run_id),
        s(&e.agent_id),
        s(&e.event_type),
        e.payload,
        e.ts
    );
    if let Some(r) = &e.response_id {
        let _ = write!(out, ",\"responseId\":{}", s(r));
    }
    if let Some(u) = &e.user_id {
        let _ = write!(out, ",\"user\":{}", s(u));
    }
    out.push_str("}\n");
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Line<'a> {
    id: i64,
    seq: i64,
    thread: String,
    run: String,
    agent: String,
    #[serde(rename = "type")]
    event_type: String,
    #[serde(borrow)]
    payload: &'a RawValue,
    ts: i64,
    #[serde(default)]
    response_id: Option<String>,
    #[serde(default)]
    user: Option<String>,
}

/// Parses one line; the error says which field is wrong.
pub fn parse_line(text: &str) -> Result<StoredEvent, String> {
    let l: Line<'_> = serde_json::from_str(text).map_err(|e| e.to_string())?;
    Ok(StoredEvent {
        id: l.id,
        thread_id: l.thread,
        seq: l.seq,
        run_id: l.run,
        agent_id: l.agent,
        event_type: l.event_type,
        payload: l.payload.get().to_string(),
        ts: l.ts,
        response_id: l.response_id,
        user_id: l.user,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_round_trips_exactly() {
        let e = StoredEvent {
            id: 42,
            thread_id: "t\"1".into(),
            seq: 3,
            run_id: "r".into(),
            agent_id: "a".into(),
            event_type: "text-delta".into(),
            payload: "{\"text\": \"h\u{e9}\\n\" }".into(),
            ts: 1_700_000_000_123,
            response_id: Some("resp".into()),
            user_id: None,
        };
        let mut out = String::new();
        write_line(&e, &mut out);
        assert!(
            out.ends_with('\n') && out.matches('\n').count() == 1,
            "{out}"
        );
        assert_eq!(parse_line(out.trim_end()).unwrap(), e);
        assert!(parse_line("{\"id\":1}")
            .unwrap_err()
            .contains("missing field"));
        let extra = out.trim_end().replace("\"ts\"", "\"bogus\":1,\"ts\"");
        assert!(parse_line(&extra).unwrap_err().contains("unknown field"));
    }
}
