//! What the server checks and utoipa's schema model cannot say (no `not`, `const` or
//! `contains`), written into the document's JSON: thread ids, cursors, names, titles, messages.
//! Limits come from the constants the server checks them with.

use threadstream_domain::event::subscription::SubscriptionType;
use threadstream_domain::subscription::{MAX_LEASE_TTL_MS, MIN_LEASE_TTL_MS};
use threadstream_domain::{MAX_THREAD_ID_CHARS, MAX_TITLE_CHARS};
use threadstream_durable_streams::subscribe::{MAX_ID_CHARS, MAX_STREAM_PATH_CHARS};

/// Adds what the server checks and the derived schemas cannot say (utoipa's schema model has
/// no `not`, `const` or `contains`): the `ThreadId` schema, [`parameter_schema`] on every
/// parameter it names, and [`body_constraints`].
pub(super) fn constrain(doc: &mut serde_json::Value) {
    use serde_json::{json, Value};
    let schemas = doc["components"]["schemas"]
        .as_object_mut()
        .expect("components.schemas");
    // A thread id, as `threadstream_domain::validate_thread_id` checks it.
    schemas.insert(
        "ThreadId".into(),
        json!({
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_THREAD_ID_CHARS,
            "pattern": format!(
                "^(?!{}|{}|{})[^\\u0000-\\u001f\\u007f-\\u009f]*$",
                threadstream_domain::workflow::STREAM_PREFIX,
                threadstream_domain::durable_stream::STREAM_PREFIX,
                threadstream_domain::event::erasure::STREAM_PREFIX
            ),
            "description": format!(
                "1 to {MAX_THREAD_ID_CHARS} characters, no control characters, not starting \
                 with `workflow:`, `stream:` or `erasure:` (else 400 `invalid_thread_id`)"
            )
        }),
    );
    // The stable error codes, one list (`threadstream_domain::ErrorCode`).
    schemas["ErrorDetail"]["properties"]["code"]["enum"] =
        json!(threadstream_domain::ErrorCode::ALL
            .iter()
            .map(|c| c.as_str())
            .collect::<Vec<_>>());
    for (schema, property, constraint) in body_constraints() {
        let derived = schemas
            .get_mut(schema)
            .unwrap_or_else(|| panic!("body_constraints: no schema {schema}"));
        if property.is_empty() {
            *derived = json!({"allOf": [derived.take(), constraint]});
            continue;
        }
        let field = derived["properties"]
            .get_mut(property)
            .unwrap_or_else(|| panic!("body_constraints: {schema} has no property {property}"));
        // Keep the field's own description.
        let description = field.get("description").cloned();
        *field = constraint;
        if let (Some(d), Some(f)) = (description, field.as_object_mut()) {
            f.entry("description").or_insert(d);
        }
    }
    let paths = doc["paths"].as_object_mut().expect("paths");
    for (path, item) in paths.iter_mut() {
        for (method, op) in item.as_object_mut().expect("a path item") {
            // An SSE answer is a list of events; each `data:` is JSON of the route's event schema.
            for response in op["responses"]
                .as_object_mut()
                .into_iter()
                .flat_map(|r| r.values_mut())
            {
                let Some(sse) = response.pointer_mut("/content/text~1event-stream") else {
                    continue;
                };
                let mut data = sse["x-sse-data"].clone();
                // A stream's `event: data` is JSON only in JSON mode: the event's name says
                // which schema its `data` has.
                if path == "/v1/stream/{path}" {
                    sse["schema"] = super::durable::stream_sse_event(&data);
                    if let Some(messages) = super::durable::sse_messages(path) {
                        sse["x-sse-data"] = json!({"anyOf": [data, messages]});
                    }
                    continue;
                }
                // A thread read as a stream sends `event: data` (its n8n events, an array) and
                // `event: control` (`DurableStreamControl`).
                if let Some(messages) = super::durable::sse_messages(path) {
                    data = json!({"anyOf": [data, messages]});
                    sse["x-sse-data"] = data.clone();
                }
                sse["schema"] = json!({
                    "type": "object",
                    "description": "One server-sent event",
                    "properties": {
                        "data": {"type": "string", "contentMediaType": "application/json", "contentSchema": data},
                        "event": {"type": "string"},
                        "id": {"type": "string"},
                        "retry": {"type": "integer"}
                    }
                });
            }
            // A HEAD answer has no body, errors included.
            if method == "head" {
                for response in op["responses"]
                    .as_object_mut()
                    .into_iter()
                    .flat_map(|r| r.values_mut())
                {
                    if let Some(r) = response.as_object_mut() {
                        r.remove("content");
                    }
                }
            }
            // An attachment has at least one byte (else 422 `empty_attachment`).
            if path == "/api/v1/agent/attachments" && method == "post" {
                let body = &mut op["requestBody"];
                body["required"] = json!(true);
                for (media_type, media) in body["content"].as_object_mut().expect("content") {
                    if media_type != "application/json" {
                        media["schema"] =
                            json!({"type": "string", "format": "binary", "minLength": 1});
                    }
                }
            }
            // A stream not in JSON mode is read as its bytes, under its own content type.
            if path == "/v1/stream/{path}" && method == "get" {
                if let Some(ok) = op.pointer_mut("/responses/200/content") {
                    ok["*/*"]["schema"] = super::durable::stream_bytes();
                }
            }
            // A thread's append takes n8n events, as ingest does.
            if path == "/v1/threads/{thread_id}" && method == "post" {
                op["requestBody"]["content"]["application/json"]["schema"] =
                    super::durable::thread_append_body();
            }
            // A CORS preflight answers any path without looking at it.
            if method == "options" {
                continue;
            }
            let Some(params) = op.get_mut("parameters").and_then(Value::as_array_mut) else {
                continue;
            };
            let durable = path.starts_with("/v1/stream/{") || path.starts_with("/v1/threads/");
            if durable && method == "get" {
                super::durable::read_query(params);
            }
            for param in params {
                let name = param["name"].as_str().unwrap_or_default().to_string();
                let schema = if durable && param["in"] == "header" {
                    super::durable::header_schema(&name)
                } else if path == SUBSCRIPTION && method == "put" && name == "id" {
                    // Only a create checks the id; the other routes answer 404 for an id no
                    // subscription can have.
                    Some(subscription_id())
                } else {
                    parameter_schema(path, &name)
                };
                if let Some(schema) = schema {
                    param["schema"] = schema;
                }
            }
        }
    }
}

/// A string of the characters Rust's `char::is_whitespace` counts (Unicode `White_Space`), for
/// "not blank" patterns that agree with the server's `trim`.
const WHITE_SPACE: &str =
    "\\t\\n\\u000b\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";

/// The constraints the server checks of a parameter, by name, written once for every route
/// that has it (the checks: `threadstream_domain::validate_thread_id`, `crate::sse::cursor_from`,
/// `crate::idempotency`, the items names, `audit`'s `parse_time`). `None`: the handler's own
/// `params` say all there is.
fn parameter_schema(path: &str, name: &str) -> Option<serde_json::Value> {
    use serde_json::json;
    Some(match name {
        "thread_id" | "threadId" => json!({"$ref": "#/components/schemas/ThreadId"}),
        // Workflow-builder threads are `smith-{workflow_id}`, a thread id.
        "workflow_id" if path.starts_with("/smith/") => json!({
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_THREAD_ID_CHARS - threadstream_agent::tools::WORKFLOW_BUILDER_THREADS.len(),
            "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
        }),
        "Idempotency-Key" => json!({
            "type": "string",
            // `""` is the quoted form of an empty key (400 `invalid_idempotency_key`).
            "pattern": "^(?!\"\"$)[!-~]{1,255}$",
            "description": "1 to 255 visible ASCII characters, not `\"\"` (a quoted key `\"…\"` is its content)"
        }),
        // The n8n and AG-UI cursors; the items stream's `Last-Event-ID` is `{requestId}:{N}`.
        "lastEventId" => json!({"type": "string", "pattern": "^[0-9]{0,18}$"}),
        "Last-Event-ID" if !path.starts_with("/api/flows/") => {
            json!({"type": "string", "pattern": "^[0-9]{0,18}$"})
        }
        "starting_after" => json!({"type": "string", "pattern": "^[0-9]{0,19}$"}),
        "kind" | "action" => json!({"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"}),
        "before" => json!({"type": "string", "format": "date"}),
        "from" | "to" => json!({
            "description": "Epoch milliseconds, YYYY-MM-DD (midnight UTC) or an RFC 3339 timestamp",
            "anyOf": [
                {"type": "string", "pattern": "^[0-9]{1,15}$"},
                {"type": "string", "maxLength": 0, "description": "Empty: absent"},
                {"type": "string", "format": "date"},
                {"type": "string", "format": "date-time"}
            ]
        }),
        _ => return None,
    })
}

/// A pattern for "not blank" that agrees with the server's `trim().is_empty()` checks.
fn not_blank() -> String {
    format!("[^{WHITE_SPACE}]")
}

/// The characters Rust's `char::is_control` counts (Unicode `Cc`), for a character class.
const CONTROL: &str = "\\u0000-\\u001f\\u007f-\\u009f";

/// The route of a Durable Streams subscription (`PUT` creates it).
const SUBSCRIPTION: &str = "/v1/stream/__ds/subscriptions/{id}";

/// A subscription id, as `check_id` in `durable-streams/src/subscribe.rs` checks it on a create.
fn subscription_id() -> serde_json::Value {
    serde_json::json!({
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_ID_CHARS,
        "pattern": format!("^[^{CONTROL}]*$"),
        "description": format!(
            "1 to {MAX_ID_CHARS} characters, no control characters (else 400 `INVALID_REQUEST`)"
        )
    })
}

/// A Durable Streams subscription's stream path, as `stream_list` in
/// `durable-streams/src/subscribe.rs` checks it.
fn stream_path() -> serde_json::Value {
    serde_json::json!({
        "type": "string",
        "maxLength": MAX_STREAM_PATH_CHARS,
        "pattern": format!("^[^{CONTROL}]*[^/{CONTROL}][^{CONTROL}]*$"),
        "description": format!(
            "A relative stream path: 1 to {MAX_STREAM_PATH_CHARS} characters, not only slashes, \
             no control characters"
        )
    })
}

/// A subscription's glob, as `threadstream_domain::subscription::check_pattern` takes it:
/// segments between `/`, at least one not empty, each `*`, `**` or without `*`. Empty: no
/// glob (the create reads `""` as absent).
const GLOB: &str = "^(?:/*(?:[^/*]+|\\*\\*?)(?:/+(?:[^/*]+|\\*\\*?))*/*)?$";

/// What a subscription create checks of its body as a whole (`config_of` in
/// `durable-streams/src/subscribe.rs`): a glob or at least one stream, and per `type` what that
/// type needs: a `webhook` its `webhook.url` (not empty), a `pull-wake` its `wake_stream` (not
/// only slashes). What the other type's field holds is not read.
fn subscription_create() -> serde_json::Value {
    use serde_json::json;
    let kind = |t: SubscriptionType| serde_json::to_value(t).expect("a subscription type");
    json!({
        "anyOf": [
            {"required": ["pattern"], "properties": {"pattern": {"type": "string", "minLength": 1}}},
            {"required": ["streams"], "properties": {"streams": {"type": "array", "minItems": 1}}}
        ],
        "oneOf": [
            {
                "required": ["type", "webhook"],
                "properties": {
                    "type": {"const": kind(SubscriptionType::Webhook)},
                    "webhook": {
                        "type": "object",
                        "required": ["url"],
                        "properties": {"url": {"type": "string", "minLength": 1}}
                    }
                }
            },
            {
                "required": ["type", "wake_stream"],
                "properties": {
                    "type": {"const": kind(SubscriptionType::PullWake)},
                    "wake_stream": {"type": "string", "pattern": "[^/]"}
                }
            }
        ]
    })
}

/// The constraints the server checks of request body fields that their Rust types do not say,
/// by `(schema, property)`, each replacing the derived property schema; property `""` adds a
/// constraint on the whole object (`allOf` with the derived one).
fn body_constraints() -> Vec<(&'static str, &'static str, serde_json::Value)> {
    use serde_json::json;
    let nullable = |v: serde_json::Value| json!({"anyOf": [v, {"type": "null"}]});
    let message = json!({"type": "string", "pattern": not_blank()});
    let title = json!({
        "type": "string", "maxLength": MAX_TITLE_CHARS, "pattern": not_blank(),
        "description": format!("1 to {MAX_TITLE_CHARS} characters, not blank")
    });
    let thread_id = json!({"$ref": "#/components/schemas/ThreadId"});
    vec![
        ("ChatBody", "message", message.clone()),
        ("CorrectBody", "message", message.clone()),
        ("ActionBody", "message", nullable(message.clone())),
        ("PromptBody", "prompt", message.clone()),
        ("CreateBody", "title", nullable(title.clone())),
        ("ForkBody", "title", nullable(title.clone())),
        ("RenameBody", "title", title),
        ("CreateBody", "threadId", nullable(thread_id.clone())),
        ("ForkBody", "threadId", nullable(thread_id.clone())),
        ("ActionBody", "sessionId", nullable(thread_id.clone())),
        ("RunBody", "threadId", nullable(thread_id.clone())),
        ("EraseBody", "threadId", nullable(thread_id.clone())),
        (
            "EraseBody",
            "userId",
            nullable(json!({"type": "string", "pattern": not_blank()})),
        ),
        // Exactly one scope: a thread or a user.
        (
            "EraseBody",
            "",
            json!({"oneOf": [
                {"required": ["threadId"], "properties": {"threadId": thread_id, "userId": {"type": "null"}}},
                {"required": ["userId"], "properties": {"userId": {"type": "string"}, "threadId": {"type": "null"}}}
            ]}),
        ),
        ("RunBody", "message", nullable(message)),
        // The AI SDK's chat request: a thread id, at least one message, the one trigger served.
        ("ChatRequest", "id", thread_id.clone()),
        (
            "ChatRequest",
            "messages",
            json!({"type": "array", "minItems": 1, "items": {"$ref": "#/components/schemas/ChatMessage"}}),
        ),
        (
            "ChatRequest",
            "trigger",
            nullable(json!({"type": "string", "enum": ["submit-message"]})),
        ),
        // A subscription's stream paths: not empty once the slashes around them are trimmed,
        // at most 1,024 characters, no control characters (else 400 `INVALID_REQUEST`).
        (
            "AddStreams",
            "streams",
            json!({"type": "array", "minItems": 1, "items": stream_path()}),
        ),
        (
            "CreateSubscription",
            "streams",
            nullable(json!({"type": "array", "items": stream_path()})),
        ),
        (
            "CreateSubscription",
            "pattern",
            json!({"type": ["string", "null"], "pattern": GLOB}),
        ),
        (
            "CreateSubscription",
            "lease_ttl_ms",
            nullable(
                json!({"type": "integer", "minimum": MIN_LEASE_TTL_MS, "maximum": MAX_LEASE_TTL_MS}),
            ),
        ),
        // A glob or a stream; a webhook's URL, a pull-wake's wake stream (after the properties:
        // this wraps the derived schema in `allOf`).
        ("CreateSubscription", "", subscription_create()),
        (
            "RunBody",
            "runId",
            nullable(
                json!({"type": "string", "minLength": 1, "maxLength": MAX_THREAD_ID_CHARS, "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"}),
            ),
        ),
        // Exactly one fork point.
        (
            "ForkBody",
            "",
            json!({"oneOf": [
                {"required": ["throughEventId"], "properties": {"throughEventId": {"type": "integer"}}},
                {"required": ["beforeMessageId"], "properties": {"beforeMessageId": {"type": "string"}}}
            ]}),
        ),
        (
            "IngestBody",
            "events",
            json!({"type": "array", "minItems": 1, "items": {"$ref": "#/components/schemas/N8nEvent"}}),
        ),
        // `approved`, unless another kind of confirmation than an approval answers.
        (
            "ConfirmBody",
            "",
            json!({"anyOf": [
                {"required": ["approved"], "properties": {"approved": {"type": "boolean"}}},
                {"required": ["kind"], "properties": {"kind": {"type": "string", "not": {"const": "approval"}}}}
            ]}),
        ),
        // `message` or `input.message`.
        (
            "ActionBody",
            "",
            json!({"anyOf": [
                {"required": ["message"], "properties": {"message": {"type": "string"}}},
                {"required": ["input"], "properties": {"input": {"type": "object", "required": ["message"], "properties": {"message": {"type": "string", "pattern": not_blank()}}}}}
            ]}),
        ),
        // `message` (then `messages` is not read), or `messages` with a user message, where
        // every user message has `content`, a string or a list of parts (else 422
        // `invalid_message`), with text that is not blank: the string, or a `text` part's
        // (else 422 `empty_message`).
        (
            "RunBody",
            "",
            json!({"anyOf": [
                {"required": ["message"], "properties": {"message": {"type": "string"}}},
                {"required": ["messages"], "properties": {
                    "message": {"type": "null"},
                    "messages": {"type": "array", "contains": {"type": "object", "required": ["role"], "properties": {"role": {"const": "user"}}}, "items": {
                        "if": {"type": "object", "required": ["role"], "properties": {"role": {"const": "user"}}},
                        "then": {"required": ["content"], "properties": {"content": {"anyOf": [
                            {"type": "string", "pattern": not_blank()},
                            {"type": "array", "contains": {
                                "type": "object",
                                "required": ["type", "text"],
                                "properties": {"type": {"const": "text"}, "text": {"type": "string", "pattern": not_blank()}}
                            }}
                        ]}}}
                    }}
                }}
            ]}),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::{CONTROL, GLOB};
    use threadstream_domain::subscription::check_pattern;

    /// JSON Schema reads `\u0000` in a pattern as the character; Rust's `regex` does too.
    fn regex(pattern: &str) -> regex::Regex {
        regex::Regex::new(pattern).unwrap()
    }

    #[test]
    fn the_control_class_is_what_char_is_control_counts() {
        let control = regex(&format!("^[{CONTROL}]$"));
        for c in (0..=0x10ffff).filter_map(char::from_u32) {
            let s = c.to_string();
            assert_eq!(control.is_match(&s), c.is_control(), "U+{:04X}", c as u32);
        }
    }

    #[test]
    fn the_glob_pattern_takes_what_check_pattern_takes() {
        let glob = regex(GLOB);
        // Every string of up to 7 of these characters; the create reads `""` as no glob.
        let mut strings = vec![String::new()];
        let mut last = vec![String::new()];
        for _ in 0..7 {
            last = last
                .iter()
                .flat_map(|s| ['a', 'b', '*', '/'].map(|c| format!("{s}{c}")))
                .collect();
            strings.extend(last.iter().cloned());
        }
        for s in &strings {
            let takes = s.is_empty() || check_pattern(s).is_ok();
            assert_eq!(glob.is_match(s), takes, "{s:?}");
        }
        assert!(glob.is_match("jobs/**/a b\u{7}/*"));
        assert!(!glob.is_match("jobs/a*"));
    }
}
