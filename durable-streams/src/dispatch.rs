//! The subscriptions' dispatcher: a background task of every process that follows the log and
//! begins wakes, and the webhook deliveries of the wakes it begins.
//!
//! - A message on a stream (`stream-created` with a body, `stream-appended`) links the stream
//!   to each subscription whose glob matches it (once), then wakes each subscription that links
//!   it, unless a wake of it is live.
//! - Every [`TICK`], a subscription whose wake's lease ran out (or that has none) and that has
//!   pending messages is woken again: that is also how a webhook that failed is retried (a new
//!   generation every lease), and how work left pending across a restart is picked up.
//! - Whether a wake begins is the aggregate's decision in the log's writer: when several
//!   processes (instances on one Postgres) try at once, one wake is stored, and the process
//!   that stored it delivers it. The delivery is not itself durable: a process that dies after
//!   storing a wake leaves it to run out, and the next wake is delivered by whoever is up.
//!
//! A webhook answering `{"done": true}` acks the wake's snapshot and ends the wake; any other
//! answer leaves it to a callback (`POST …/callback`) or its lease.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};
use threadstream_domain::durable_stream::StreamChange;
use threadstream_domain::durable_stream::{stream_path as log_stream_path, StreamCommand};
use threadstream_domain::event::durable_stream::StreamData;
use threadstream_domain::event::subscription::{StreamAck, SubscriptionType, SubscriptionWoken};
use threadstream_domain::event::EventBody;
use threadstream_domain::subscription::{
    Subscription, SubscriptionCommand, Subscriptions, LOG_STREAM,
};
use threadstream_domain::{StoredEvent, ThreadError};
use threadstream_store::Part;

use crate::context::Context;
use crate::error::DurableError;
use crate::subscriptions::{action_url, execute, links, log_id, relative_path, tails};

/// How often leases that ran out are looked for.
const TICK: Duration = Duration::from_millis(250);
/// Log events read per page while following the log.
const PAGE: i64 = 1_000;
/// A webhook's answer is waited for this long.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);

/// Follows the log until the server shuts down. While there is no subscription (known from the
/// subscriptions' own log stream, whose head it watches), it reads nothing but that.
pub async fn run(ctx: Context) {
    let mut head = ctx.log.heads().global();
    let mut subs_head = ctx.log.heads().thread(LOG_STREAM);
    let mut shutdown = ctx.shutdown.clone();
    let mut cursor = *head.borrow_and_update();
    let mut any = true;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            changed = subs_head.changed() => {
                if changed.is_err() {
                    return;
                }
                any = true;
            }
            changed = head.changed() => {
                if changed.is_err() {
                    return;
                }
                let target = *head.borrow_and_update();
                if !any {
                    cursor = target;
                    continue;
                }
                match follow(&ctx, cursor, target).await {
                    Ok(done) => cursor = done,
                    Err(e) => tracing::warn!(error = %e, "subscriptions: following the log failed"),
                }
            }
            _ = tick.tick(), if any => {
                match wake_all(&ctx).await {
                    Ok(some) => any = some,
                    Err(e) => tracing::warn!(error = %e, "subscriptions: waking failed"),
                }
            }
            _ = shutdown.changed() => return,
        }
        if *shutdown.borrow() {
            return;
        }
    }
}

/// Handles the log's events after `cursor` up to `target`; returns where it got to.
async fn follow(ctx: &Context, mut cursor: i64, target: i64) -> Result<i64, DurableError> {
    while cursor < target {
        let page = ctx.log.read_all(cursor, PAGE).await?;
        let Some(last) = page.last() else { break };
        cursor = last.id;
        let mut paths: Vec<&str> = page.iter().filter_map(message_stream).collect();
        paths.dedup();
        if paths.is_empty() {
            continue;
        }
        let (subs, _) = ctx.streams.subscriptions(&ctx.log).await?;
        for path in paths {
            on_message(ctx, &subs, path).await?;
        }
    }
    Ok(cursor)
}

/// The relative path of the stream `row` is a message of, if it is one.
fn message_stream(row: &StoredEvent) -> Option<&str> {
    let is_message = match row.event_type.as_str() {
        "stream-appended" => true,
        "stream-created" => row.payload.contains("\"data\":"),
        _ => false,
    };
    if !is_message {
        return None;
    }
    relative_path(log_stream_path(&row.thread_id)?)
}

/// Messages on stream `path`: link it where a glob matches, wake whoever links it.
async fn on_message(ctx: &Context, subs: &Subscriptions, path: &str) -> Result<(), DurableError> {
    let now = threadstream_domain::clock::now_ms();
    for (id, sub) in &subs.by_id {
        if sub.glob_matches(path) && !sub.links.get(path).is_some_and(|l| l.glob) {
            let link = SubscriptionCommand::Link {
                id: id.clone(),
                streams: vec![path.to_string()],
                explicit: false,
            };
            ignore_refusal(execute(ctx, &sub.owner, link, vec![]).await)?;
        } else if !sub.links.contains_key(path) || sub.live_wake(now).is_some() {
            continue;
        }
        try_wake(ctx, id, path).await?;
    }
    Ok(())
}

/// Wakes every subscription with pending messages and no live wake; whether any subscription
/// exists.
async fn wake_all(ctx: &Context) -> Result<bool, DurableError> {
    let (subs, _) = ctx.streams.subscriptions(&ctx.log).await?;
    let now = threadstream_domain::clock::now_ms();
    for (id, sub) in &subs.by_id {
        if sub.live_wake(now).is_none() && !sub.links.is_empty() {
            try_wake(ctx, id, "").await?;
        }
    }
    Ok(!subs.by_id.is_empty())
}

/// Refusals are answers here (another process woke first, nothing pending, deleted meanwhile).
fn ignore_refusal<T>(r: Result<T, DurableError>) -> Result<Option<T>, DurableError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(DurableError::Refused(ThreadError::Subscription(_))) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Begins a wake of subscription `id` if it has pending messages and no live wake (`stream`:
/// the stream that prompted it, if any) and delivers it; whether one began.
pub async fn try_wake(ctx: &Context, id: &str, stream: &str) -> Result<bool, DurableError> {
    let (subs, _) = ctx.streams.subscriptions(&ctx.log).await?;
    let Some(sub) = subs.by_id.get(id) else {
        return Ok(false);
    };
    if sub
        .live_wake(threadstream_domain::clock::now_ms())
        .is_some()
    {
        return Ok(false);
    }
    let tails = tails(ctx, sub).await?;
    if !sub.has_pending(&tails) {
        return Ok(false);
    }
    let stream = if stream.is_empty() || !sub.links.contains_key(stream) {
        first_pending(sub, &tails)
    } else {
        stream.to_string()
    };
    let wake = SubscriptionCommand::Wake {
        id: id.to_string(),
        wake_id: uuid::Uuid::now_v7().to_string(),
        tails: tails.clone(),
        stream,
    };
    let stored = match sub.config.kind {
        SubscriptionType::Webhook => ignore_refusal(execute(ctx, &sub.owner, wake, vec![]).await)?,
        SubscriptionType::PullWake => wake_pull(ctx, sub, wake).await?,
    };
    let Some(woken) = stored.as_deref().and_then(woken_of) else {
        return Ok(false);
    };
    if sub.config.kind == SubscriptionType::Webhook {
        let ctx = ctx.clone();
        let (id, sub) = (id.to_string(), sub.clone());
        tokio::spawn(async move { deliver(&ctx, &id, &sub, woken, tails).await });
    }
    Ok(true)
}

/// The first linked stream with pending messages.
fn first_pending(sub: &Subscription, tails: &BTreeMap<String, i64>) -> String {
    sub.links
        .iter()
        .find(|(p, l)| tails.get(*p).is_some_and(|t| *t > l.acked))
        .map(|(p, _)| p.clone())
        .unwrap_or_default()
}

/// The wake `stored` began, if it did.
fn woken_of(stored: &[StoredEvent]) -> Option<SubscriptionWoken> {
    stored.iter().find_map(|row| match row.decode().ok()?.body {
        EventBody::SubscriptionWoken(w) => Some(w),
        _ => None,
    })
}

/// A pull-wake wake, with its `wake` event appended to the wake stream in the same append; if
/// the wake stream cannot take it (missing, closed, not JSON), the wake is stored alone (a
/// worker may still claim it).
async fn wake_pull(
    ctx: &Context,
    sub: &Subscription,
    wake: SubscriptionCommand,
) -> Result<Option<Vec<StoredEvent>>, DurableError> {
    let SubscriptionCommand::Wake { id, stream, .. } = &wake else {
        unreachable!("a wake");
    };
    let generation = sub.generation + 1;
    let extra = match &sub.config.wake_stream {
        Some(wake_stream) => {
            let event = json!({
                "type": "wake",
                "subscription_id": id,
                "stream": stream,
                "generation": generation,
                "ts": threadstream_domain::clock::now_ms(),
            });
            let path = crate::subscriptions::stream_path(wake_stream);
            let append = StreamChange {
                command: StreamCommand::Append {
                    data: StreamData::Json(vec![event]),
                    content_type: "application/json".into(),
                    seq: None,
                    producer: None,
                    close: false,
                },
                by: sub.owner.clone(),
                now_ms: threadstream_domain::clock::now_ms(),
                last_read_ms: ctx.streams.last_read_ms(&path),
            };
            vec![Part::new(log_id(wake_stream), vec![append])]
        }
        None => vec![],
    };
    match execute(ctx, &sub.owner, wake.clone(), extra).await {
        Err(DurableError::Refused(ThreadError::Stream(refused))) => {
            tracing::warn!(subscription = %id, %refused, "the wake stream refused a wake event");
            ignore_refusal(execute(ctx, &sub.owner, wake, vec![]).await)
        }
        other => ignore_refusal(other),
    }
}

/// Posts wake `woken` of webhook subscription `id`, signed; a `{"done": true}` answer acks the
/// wake's snapshot and ends it.
async fn deliver(
    ctx: &Context,
    id: &str,
    sub: &Subscription,
    woken: SubscriptionWoken,
    tails: BTreeMap<String, i64>,
) {
    let Some(url) = &sub.config.webhook_url else {
        return;
    };
    let now_secs = threadstream_domain::clock::now_ms() / 1000;
    let mut at_wake = sub.clone();
    at_wake.generation = woken.generation;
    let body = json!({
        "subscription_id": id,
        "wake_id": woken.wake_id,
        "generation": woken.generation,
        "streams": links(&at_wake, Some(&tails)),
        "callback_url": action_url(&sub.callback_base, id, "callback"),
        "callback_token": ctx.webhooks.signing.token(id, woken.generation, now_secs),
    })
    .to_string();
    let signature = ctx.webhooks.signing.signature_header(&body, now_secs);
    let sent = ctx
        .webhooks
        .client
        .post(url)
        .header("content-type", "application/json")
        .header("webhook-signature", signature)
        .timeout(DELIVERY_TIMEOUT)
        .body(body)
        .send()
        .await;
    let answer: Option<Value> = match sent {
        Ok(r) if r.status().is_success() => r.json().await.ok(),
        Ok(r) => {
            tracing::warn!(subscription = %id, status = %r.status(), "webhook refused the wake; retried when its lease runs out");
            return;
        }
        Err(e) => {
            tracing::warn!(subscription = %id, error = %e, "webhook delivery failed; retried when its lease runs out");
            return;
        }
    };
    if answer.as_ref().and_then(|a| a.get("done")) != Some(&Value::Bool(true)) {
        return;
    }
    let acks = woken
        .snapshot
        .iter()
        .filter(|(path, tail)| sub.links.get(*path).is_some_and(|l| **tail > l.acked))
        .map(|(path, tail)| StreamAck {
            stream: path.clone(),
            offset: *tail,
        })
        .collect();
    let ack = SubscriptionCommand::Ack {
        id: id.to_string(),
        via: SubscriptionType::Webhook,
        generation: woken.generation,
        wake_id: woken.wake_id.clone(),
        acks,
        done: true,
        tails: woken.snapshot.clone(),
    };
    // A next wake, if more is pending, begins at the dispatcher's next tick.
    if let Err(e) = ignore_refusal(execute(ctx, &sub.owner, ack, vec![]).await) {
        tracing::warn!(subscription = %id, error = %e, "auto-ack of a done webhook failed");
    }
}
