//! A thread as a JSON-mode Durable Stream (`/v1/threads/:threadId`): its reads, through the one
//! read engine, and its creation. The server's routes check the caller may read or act on the
//! thread first; appends go through the `Thread` aggregate like ingest (the server's route).
//!
//! Each message is one n8n event, its envelope exactly as the n8n stream sends it, at the
//! offset made of its log id: offset `<id>_0` here is SSE id `<id>` there, so a client can
//! switch between the two with no gap and no duplicate.
#![allow(clippy::result_large_err)] // a refusal is a whole protocol answer (see crate::error)

use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use threadstream_domain::durable_stream::{format_offset, normalize_content_type};
use threadstream_domain::{ErrorCode, StoredEvent, ThreadCommand};
use threadstream_store::Sight;

use crate::context::Context;
use crate::error::DurableError;
use crate::protocol::{header_str, refuse, set_header, NEXT_OFFSET};
use crate::read::Message;
use crate::reader::{self, Lookup, ReadSource, View};

/// A thread's stream's content type: JSON mode.
pub const CONTENT_TYPE: &str = "application/json";
/// Log events read per query.
const PAGE: i64 = 1_000;

/// A thread as the read engine sees it.
#[derive(Clone)]
struct ThreadSource {
    ctx: Context,
    thread_id: String,
    name: String,
}

impl ReadSource for ThreadSource {
    type State = ();

    fn log_id(&self) -> String {
        self.thread_id.clone()
    }

    fn name(&self) -> &str {
        &self.name
    }

    async fn lookup(&self) -> Result<Lookup<()>, DurableError> {
        let end = self
            .ctx
            .streams
            .thread_end(&self.ctx.log, &self.thread_id)
            .await?;
        Ok(if end.deleted {
            Lookup::Gone
        } else if !end.exists {
            Lookup::Missing
        } else {
            Lookup::Live(View {
                content_type: CONTENT_TYPE.into(),
                current: end.last_id,
                closed: false,
                log_cursor: end.last_id,
                state: (),
            })
        })
    }

    async fn messages(
        &self,
        view: &View<()>,
        after: i64,
        limit: usize,
    ) -> Result<(Vec<Message>, bool), DurableError> {
        let mut out = Vec::new();
        let mut cursor = after;
        loop {
            let page = self
                .ctx
                .log
                .read_thread_in(Sight::Upto(view.log_cursor), &self.thread_id, cursor, PAGE)
                .await?;
            for row in &page {
                if out.len() >= limit {
                    return Ok((out, false));
                }
                out.extend(message_of(row));
                cursor = row.id;
            }
            if (page.len() as i64) < PAGE {
                return Ok((out, true));
            }
        }
    }

    fn follow(&self, view: &mut View<()>, events: &[&StoredEvent]) -> Option<Vec<Message>> {
        let mut msgs = Vec::with_capacity(events.len());
        for &row in events {
            if row.event_type == "thread-deleted" {
                return None;
            }
            msgs.extend(message_of(row));
            view.current = row.id;
            view.log_cursor = row.id;
        }
        Some(msgs)
    }
}

/// A thread's event as a message of its stream: its n8n envelope, exactly the n8n stream's
/// `data:` (events that stream does not carry are none).
fn message_of(row: &StoredEvent) -> Option<Message> {
    row.is_n8n()
        .then(|| Message::json_array(row.id, format!("[{}]", row.envelope_json())))
}

fn source(ctx: &Context, thread_id: &str) -> ThreadSource {
    ThreadSource {
        ctx: ctx.clone(),
        thread_id: thread_id.to_string(),
        name: format!("/v1/threads/{thread_id}"),
    }
}

/// `HEAD /v1/threads/:threadId`: the thread's offset, no body.
pub async fn head(ctx: &Context, thread_id: &str) -> Result<Response, DurableError> {
    reader::head(&source(ctx, thread_id)).await
}

/// `GET /v1/threads/:threadId`: the thread's n8n events, catch-up, long-poll or SSE
/// (`sse_slot`: see [`reader::read`]).
pub async fn read<S: Send + 'static>(
    ctx: &Context,
    thread_id: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    sse_slot: impl FnOnce() -> Result<S, Response>,
) -> Result<Response, DurableError> {
    reader::read(ctx, sse_slot, source(ctx, thread_id), query, headers).await
}

/// `PUT /v1/threads/:threadId` by `user`: creates the thread (201), or finds it (200).
pub async fn create(
    ctx: &Context,
    user: &str,
    thread_id: &str,
    headers: &HeaderMap,
) -> Result<Response, DurableError> {
    if let Some(ct) = header_str(headers, header::CONTENT_TYPE.as_str()) {
        if normalize_content_type(ct) != CONTENT_TYPE {
            return Ok(refuse(
                StatusCode::CONFLICT,
                ErrorCode::ContentTypeMismatch,
                "a thread is a JSON-mode stream: application/json",
            ));
        }
    }
    let create = ThreadCommand::Create {
        owner: user.to_string(),
        title: None,
    };
    let stored = ctx.log.append(thread_id, vec![create]).await?;
    let status = if stored.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    let end = ctx.streams.thread_end(&ctx.log, thread_id).await?;
    let mut resp = status.into_response();
    set_header(&mut resp, "content-type", CONTENT_TYPE);
    set_header(&mut resp, NEXT_OFFSET, format_offset(end.last_id));
    Ok(resp)
}
