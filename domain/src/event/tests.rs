use super::*;
use serde_json::json;

#[test]
fn envelope_omits_absent_optionals() {
    let e = AgentEvent::new(
        "r1",
        "a1",
        EventBody::RunStart(RunStart {
            message_id: "m1".into(),
            message_group_id: None,
        }),
    );
    let v = serde_json::to_value(&e).unwrap();
    assert_eq!(
        v,
        json!({"type":"run-start","runId":"r1","agentId":"a1","payload":{"messageId":"m1"}})
    );
}

#[test]
fn round_trips_every_field() {
    let raw = json!({"type":"confirmation-request","runId":"r","agentId":"a","userId":"u","responseId":"x","ts":5,
        "payload":{"requestId":"cr","toolCallId":"tc","toolName":"delete-workflow","args":{"id":1},
        "severity":"destructive","message":"Delete?","inputType":"questions",
        "questions":[{"id":"q","question":"Which?","type":"single","options":["a","b"]}]}});
    let e: AgentEvent = serde_json::from_value(raw.clone()).unwrap();
    assert_eq!(serde_json::to_value(&e).unwrap(), raw);
}

#[test]
fn unknown_type_and_missing_field_are_named() {
    let err = EventBody::from_parts("nope", json!({})).unwrap_err();
    assert_eq!(err.to_string(), "unknown event type 'nope'");
    let err = EventBody::from_parts("tool-call", json!({"toolCallId":"t"})).unwrap_err();
    assert!(err.to_string().contains("tool-call"), "{err}");
    assert!(err.to_string().contains("toolName"), "{err}");
}

#[test]
fn the_openapi_payload_schemas_name_every_wire_type() {
    let listed: Vec<&str> = n8n_payload_schemas().iter().map(|(t, _)| *t).collect();
    let wire: Vec<&str> = EventBody::TYPES
        .iter()
        .copied()
        .filter(|t| is_n8n_type(t))
        .collect();
    assert_eq!(listed, wire);
}

#[test]
fn null_optional_is_treated_as_absent() {
    let e =
        EventBody::from_parts("run-finish", json!({"status":"completed","reason":null})).unwrap();
    assert_eq!(e.payload_value(), json!({"status":"completed"}));
}

#[test]
fn internal_events_are_not_n8n() {
    assert!(!EventBody::ThreadDeleted(Empty {}).is_n8n());
    assert!(is_n8n_type("tasks-update"));
    assert!(!is_n8n_type("user-message"));
    assert_eq!(
        EventBody::TYPES.iter().filter(|t| is_n8n_type(t)).count(),
        15
    );
}
