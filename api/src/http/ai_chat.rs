//! The AI SDK's default chat endpoints (npm `ai`: `useChat` with `DefaultChatTransport`), on the
//! same origin: `POST /api/chat` starts a run on the thread named by the chat id and answers
//! its UI message stream, or, when the last message is the assistant's with approval responses
//! on its tool calls or answers on its `data-confirmation` parts, answers those confirmations and continues the run's message, or, with
//! `regenerate-message`, forks the thread before the regenerated answer's user message and asks
//! it again there (the chat id then names the fork: `chat-forked`); `GET /api/chat/{thread_id}/stream` resumes the thread's live run (204 when
//! there is none), replaying its message from the start, then live
//! ([`threadstream_projections::render::ui_message`]). Both read the same cursor over the log as
//! every other protocol, so a second tab, a reload, or a reader on another instance sees the
//! same message (docs/integrations.md, "The AI SDK's useChat").

use std::collections::HashSet;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;
use threadstream_domain::{ErrorCode, EventBody, ForkOf, StoredEvent, ThreadCommand, ThreadError};
use threadstream_projections::render::ui_message::{UiMessageRenderer, HEADER, VERSION};

use crate::access::{authorize_thread, authorize_thread_read, check_thread_id};
use crate::error::ApiError;
use crate::extract::{ApiJson, Caller, RunTrace};
use crate::ids::new_id;
use crate::runs::start_run;
use crate::sse::{frames, read_range, sse_response, SseRender};
use crate::ApiContext;

/// What `DefaultChatTransport` posts. Fields this server does not use (`messageId`, metadata,
/// a message's other parts) are accepted and ignored, as the SDK adds them across versions.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChatRequest {
    /// The chat id: the thread.
    id: String,
    /// The conversation as the client holds it; only the last user message is read (the
    /// thread's log holds the rest).
    messages: Vec<ChatMessage>,
    /// `submit-message` (the default), or `regenerate-message`: fork the chat's thread just
    /// before the user message that `messageId` (an assistant message, `msg-<runId>`; the last
    /// one when absent) answered, and answer that message again on the fork, which the chat id
    /// names from then on.
    #[serde(default)]
    trigger: Option<String>,
    /// With `regenerate-message`: the assistant message to answer again.
    #[serde(default)]
    message_id: Option<String>,
}

#[derive(Deserialize, utoipa::ToSchema)]
pub struct ChatMessage {
    role: ChatRole,
    /// The message's parts; the `text` of its `text` parts is the message.
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    parts: Vec<serde_json::Map<String, Value>>,
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ChatRole {
    User,
    Assistant,
    System,
}

/// The UI message renderer as an SSE renderer: the stream ends after the run's `finish`.
struct UiMessageSse(UiMessageRenderer);

impl SseRender for UiMessageSse {
    fn render(&mut self, event: &StoredEvent, out: &mut String) -> bool {
        self.0.render(event, out);
        !self.0.finished()
    }
}

/// The confirmation requests of `run` answered in `history`.
fn answered_in(history: &[StoredEvent], run: &str) -> HashSet<String> {
    history
        .iter()
        .filter(|e| e.run_id == run)
        .filter_map(|e| match e.decode().ok()?.body {
            EventBody::ConfirmationAnswered(a) => Some(a.request_id),
            _ => None,
        })
        .collect()
}

/// The run's UI message stream from its first event (`from_id`), or the continuation of a
/// message the client holds through `after`.
fn message_stream(
    ctx: &ApiContext,
    caller: &Caller,
    thread_id: &str,
    renderer: UiMessageRenderer,
    from_id: i64,
) -> Result<Response, ApiError> {
    let slot = ctx
        .limits
        .sse_slot(&caller.user_id, crate::metrics::AI_SDK)?;
    let mut resp = sse_response(Body::from_stream(frames(
        ctx,
        caller,
        slot,
        thread_id.to_string(),
        from_id - 1,
        String::new(),
        UiMessageSse(renderer),
    )));
    resp.headers_mut()
        .insert(HEADER, HeaderValue::from_static(VERSION));
    Ok(resp)
}

#[utoipa::path(
    post,
    operation_id = "aiSdkChat",
    path = "/api/chat",
    tag = "ai-sdk",
    params(crate::extract::RunTraceHeaders),
    request_body(content = ChatRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The run's UI message stream (`x-vercel-ai-ui-message-stream: v1`), ended by `data: [DONE]`", content_type = "text/event-stream", body = String),
        (status = 400, description = "Malformed JSON, or a malformed chat id (`invalid_thread_id`)", body = crate::error::ErrorBody),
        (status = 403, description = "The caller's role may not do this (`read_only`, `ingest_only`, `thread_not_granted`)", body = crate::error::ErrorBody),
        (status = 404, description = "The chat is another user's thread, or its thread is deleted (`thread_deleted`), or an approval names a request of another thread (`not_found`) or one unknown or answered already (`confirmation_not_found`)", body = crate::error::ErrorBody),
        (status = 409, description = "The chat has a live run (`run_active`); `regenerate-message` of a message that is not an answer of the chat's thread, or with nothing to regenerate (`fork_point_not_found`)", body = crate::error::ErrorBody),
        (status = 413, description = "The body is larger than `--max-body-bytes` (`payload_too_large`)", body = crate::error::ErrorBody),
        (status = 422, description = "Wrong shape (`invalid_body`), no user message with text (`missing_message`, `empty_message`), a trigger other than `submit-message` and `regenerate-message` or a malformed `data.answer` of a `data-confirmation` part (`invalid_body`)", body = crate::error::ErrorBody)
    )
)]
pub async fn chat(
    State(ctx): State<ApiContext>,
    caller: Caller,
    trace: RunTrace,
    ApiJson(body): ApiJson<ChatRequest>,
) -> Result<Response, ApiError> {
    check_thread_id(&body.id)?;
    let regenerate = match body.trigger.as_deref() {
        None | Some("submit-message") => false,
        Some("regenerate-message") => true,
        Some(other) => {
            return Err(ApiError::unprocessable(
                ErrorCode::InvalidBody,
                format!("trigger: `submit-message` or `regenerate-message`, not {other:?}"),
            ))
        }
    };
    if regenerate {
        authorize_thread(&ctx, &caller, &body.id).await?;
        let thread = chat_thread(&ctx, &caller, &body.id, false).await?;
        return regenerate_message(&ctx, &caller, &trace, &body.id, &thread, body.message_id).await;
    }
    if let Some(last) = body
        .messages
        .last()
        .filter(|m| m.role == ChatRole::Assistant)
    {
        authorize_thread(&ctx, &caller, &body.id).await?;
        let thread = chat_thread(&ctx, &caller, &body.id, false).await?;
        return answer_approvals(&ctx, &caller, &thread, last).await;
    }
    let text = body
        .messages
        .iter()
        .rev()
        .find(|m| m.role == ChatRole::User)
        .map(|m| {
            m.parts
                .iter()
                .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("")
        })
        .ok_or_else(|| {
            ApiError::unprocessable(
                ErrorCode::MissingMessage,
                "messages: no message with role `user`",
            )
        })?;
    authorize_thread(&ctx, &caller, &body.id).await?;
    let thread = chat_thread(&ctx, &caller, &body.id, false).await?;
    run_message(&ctx, &caller, &trace, &thread, text).await
}

/// Starts a run of `text` on `thread` and answers its UI message stream.
async fn run_message(
    ctx: &ApiContext,
    caller: &Caller,
    trace: &RunTrace,
    thread: &str,
    text: String,
) -> Result<Response, ApiError> {
    let run_id = new_id("run");
    let stored = start_run(ctx, caller, trace, thread, &run_id, text, None).await?;
    let first = stored
        .iter()
        .find(|e| e.run_id == run_id)
        .map(|e| e.id)
        .ok_or_else(|| ApiError::Internal("start_run stored no event of the run".into()))?;
    message_stream(ctx, caller, thread, UiMessageRenderer::new(&run_id), first)
}

/// The thread the chat `chat_id` goes on in: its own, or the fork its last `chat-forked` names
/// (`regenerate-message`), checked for the caller as the chat's own thread is. A chat whose
/// own thread is deleted is gone: writing to it is refused (`thread_deleted`).
async fn chat_thread(
    ctx: &ApiContext,
    caller: &Caller,
    chat_id: &str,
    read: bool,
) -> Result<String, ApiError> {
    let state = ctx.log.thread_state(chat_id).await?;
    if state.deleted && !read {
        return Err(ApiError::Rule(ThreadError::ThreadDeleted));
    }
    let Some(thread) = state.chat_thread else {
        return Ok(chat_id.to_string());
    };
    if read {
        authorize_thread_read(ctx, caller, &thread).await?;
    } else {
        authorize_thread(ctx, caller, &thread).await?;
    }
    Ok(thread)
}

/// `regenerate-message`: forks `thread` (the chat's current thread) just before the user
/// message that the run of `message_id` answered, records on the chat's own thread that the chat
/// goes on in the fork, and answers that user message again there: a new run on the fork, whose
/// message the SDK puts in place of the one it regenerates. The thread forked is unchanged.
async fn regenerate_message(
    ctx: &ApiContext,
    caller: &Caller,
    trace: &RunTrace,
    chat_id: &str,
    thread: &str,
    message_id: Option<String>,
) -> Result<Response, ApiError> {
    let state = ctx.log.thread_state(thread).await?;
    if state.deleted {
        return Err(ApiError::Rule(ThreadError::ThreadDeleted));
    }
    if let Some(live) = state.live_run() {
        return Err(ApiError::Rule(ThreadError::RunAlreadyActive {
            run_id: live.run_id.clone(),
        }));
    }
    let history = read_range(&ctx.log, thread, 0, i64::MAX).await?;
    // The user messages of the thread, with where each is: `regenerate()` with no message id
    // answers the last one again, `regenerate({messageId})` the one its assistant message
    // answered.
    let asked: Vec<(usize, String, String)> = history
        .iter()
        .enumerate()
        .filter(|(_, e)| e.event_type == "user-message")
        .filter_map(|(i, e)| match e.decode().ok()?.body {
            EventBody::UserMessage(m) => Some((i, e.run_id.clone(), m.text)),
            _ => None,
        })
        .collect();
    let target = match &message_id {
        None => asked.last(),
        Some(id) => asked
            .iter()
            .find(|(_, run, _)| id.strip_prefix("msg-") == Some(run.as_str())),
    };
    let Some((at, _, text)) = target.filter(|(at, _, _)| *at > 0).cloned() else {
        return Err(ApiError::Conflict {
            code: ErrorCode::ForkPointNotFound,
            message: match message_id {
                None => format!("chat '{chat_id}' has no message to regenerate"),
                Some(id) => format!(
                    "messageId: '{id}' is no assistant message of chat '{chat_id}' that answers a user message"
                ),
            },
        });
    };
    let fork_id = new_id("thread");
    ctx.log
        .append(
            &fork_id,
            vec![ThreadCommand::Fork {
                owner: caller.user_id.clone(),
                title: None,
                fork_of: ForkOf {
                    thread_id: thread.to_string(),
                    through_event_id: history[at - 1].id,
                },
            }],
        )
        .await?;
    ctx.log
        .append(
            chat_id,
            vec![ThreadCommand::MoveChat {
                thread_id: fork_id.clone(),
                by: caller.user_id.clone(),
            }],
        )
        .await?;
    run_message(ctx, caller, trace, &fork_id, text).await
}

/// One answer the client's assistant message carries.
struct Answer {
    request_id: String,
    approved: bool,
    user_input: Option<String>,
    answers: Option<Value>,
}

/// The answer of a `data-confirmation` part (a question, text or plan review): its
/// `data.answer`, `{approved?, userInput?, answers?}` (`approved` defaults to true, as on
/// `POST /instance-ai/confirm/:requestId`).
fn confirmation_answer(part: &serde_json::Map<String, Value>) -> Option<Result<Answer, ApiError>> {
    if part.get("type").and_then(Value::as_str) != Some("data-confirmation") {
        return None;
    }
    let request_id = part.get("id").and_then(Value::as_str)?.to_string();
    let answer = part.get("data")?.get("answer")?;
    let bad = |what: &str| {
        Some(Err(ApiError::unprocessable(
            ErrorCode::InvalidBody,
            format!("data-confirmation '{request_id}': data.answer.{what}"),
        )))
    };
    let Some(answer) = answer.as_object() else {
        return bad("answer must be an object");
    };
    let approved = match answer.get("approved") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return bad("approved must be a boolean"),
    };
    let user_input = match answer.get("userInput") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) => Some(t.clone()),
        Some(_) => return bad("userInput must be a string"),
    };
    let answers = match answer.get("answers") {
        None | Some(Value::Null) => None,
        Some(a @ Value::Array(_)) => Some(a.clone()),
        Some(_) => return bad("answers must be an array"),
    };
    Some(Ok(Answer {
        request_id,
        approved,
        user_input,
        answers,
    }))
}

/// The last message is the assistant's: its tool parts in state `approval-responded` answer
/// their confirmation requests (the approval id is the request id), and its `data-confirmation`
/// parts with an `answer` answer theirs (questions, text, plan review; those answered in the log
/// already, as the server sent them back, are skipped). The answer is the run's message from the
/// first answer on, which the SDK appends to the message it holds.
async fn answer_approvals(
    ctx: &ApiContext,
    caller: &Caller,
    thread_id: &str,
    message: &ChatMessage,
) -> Result<Response, ApiError> {
    let mut answers: Vec<Answer> = message
        .parts
        .iter()
        .filter(|p| p.get("state").and_then(Value::as_str) == Some("approval-responded"))
        .filter_map(|p| {
            let approval = p.get("approval")?;
            Some(Answer {
                request_id: approval["id"].as_str()?.to_string(),
                approved: approval["approved"].as_bool()?,
                user_input: None,
                answers: None,
            })
        })
        .collect();
    let given: Vec<Answer> = message
        .parts
        .iter()
        .filter_map(confirmation_answer)
        .collect::<Result<_, _>>()?;
    if !given.is_empty() {
        let before = read_range(&ctx.log, thread_id, 0, i64::MAX).await?;
        let done: HashSet<String> = before
            .iter()
            .filter_map(|e| match e.decode().ok()?.body {
                EventBody::ConfirmationAnswered(a) => Some(a.request_id),
                _ => None,
            })
            .collect();
        answers.extend(given.into_iter().filter(|a| !done.contains(&a.request_id)));
    }
    if answers.is_empty() {
        return Err(ApiError::unprocessable(
            ErrorCode::MissingMessage,
            "the last message is the assistant's with no approval response or confirmation answer not answered yet: send a user message",
        ));
    }
    let mut first_answer = None;
    for Answer {
        request_id,
        approved,
        user_input,
        answers,
    } in answers
    {
        let not_found = || {
            ApiError::NotFound(format!(
                "approval '{request_id}' is unknown or already answered"
            ))
        };
        if ctx.log.confirmation_thread(&request_id).await?.as_deref() != Some(thread_id) {
            return Err(not_found());
        }
        let stored = ctx
            .log
            .append(
                thread_id,
                vec![ThreadCommand::AnswerConfirmation {
                    request_id: request_id.clone(),
                    approved,
                    user_input,
                    answers,
                    by: caller.user_id.clone(),
                }],
            )
            .await?;
        if first_answer.is_none() {
            first_answer = stored.first().map(|e| (e.id, e.run_id.clone()));
        }
    }
    let (answer_id, run_id) =
        first_answer.ok_or_else(|| ApiError::Internal("an answer stored no event".into()))?;
    let history = read_range(&ctx.log, thread_id, 0, i64::MAX).await?;
    let first = history
        .iter()
        .find(|e| e.run_id == run_id)
        .map_or(answer_id, |e| e.id);
    let renderer = UiMessageRenderer::new(&run_id)
        .answered(answered_in(&history, &run_id))
        .after(answer_id - 1);
    message_stream(ctx, caller, thread_id, renderer, first)
}

#[utoipa::path(
    get,
    operation_id = "aiSdkResume",
    path = "/api/chat/{thread_id}/stream",
    tag = "ai-sdk",
    params(("thread_id" = String, Path, description = "The chat id: the thread")),
    responses(
        (status = 200, description = "The live run's UI message stream from its start (`x-vercel-ai-ui-message-stream: v1`)", content_type = "text/event-stream", body = String),
        (status = 204, description = "The chat has no live run"),
        (status = 400, description = "A malformed chat id (`invalid_thread_id`)", body = crate::error::ErrorBody),
        (status = 403, description = "The caller's role may not do this (`ingest_only`, `thread_not_granted`)", body = crate::error::ErrorBody),
        (status = 404, description = "Another user's thread (`not_found`)", body = crate::error::ErrorBody)
    )
)]
pub async fn resume(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    check_thread_id(&id)?;
    authorize_thread_read(&ctx, &caller, &id).await?;
    let id = chat_thread(&ctx, &caller, &id, true).await?;
    let state = ctx.log.thread_state(&id).await?;
    let Some(live) = state.live_run() else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    let run_id = live.run_id.clone();
    let history = read_range(&ctx.log, &id, 0, i64::MAX).await?;
    let Some(first) = history.iter().find(|e| e.run_id == run_id) else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    let renderer = UiMessageRenderer::new(&run_id).answered(answered_in(&history, &run_id));
    message_stream(&ctx, &caller, &id, renderer, first.id)
}
