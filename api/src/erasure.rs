//! Erasure as the service offers it: one function behind `threadstream erase`, the admin route
//! `POST /instance-ai/admin/erase` and the retention sweeper, so there is one way to delete.
//! The log's part (one transaction: rows deleted, tombstone stored) is
//! `threadstream_store::erasure`; this adds the attachments on disk and the answer.

use serde::Serialize;
use threadstream_domain::event::erasure::{ErasureReason, ErasureScope};
use threadstream_store::{
    AttachmentStore, Erasure, ErasurePlan, ErasureRequest, EventLog, NotErased, StoreError,
};

/// What an erasure did, as the route answers it and the CLI prints it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErasureAnswer {
    /// The `erased` tombstone's id (`null`: nothing of the scope was left in the log, only
    /// leftovers were removed).
    pub tombstone_id: Option<i64>,
    /// Events removed, over every stream.
    pub events_erased: u64,
    /// Each log stream removed (the thread and its forks, or the user's streams) with its count.
    pub streams: Vec<ErasedStreamAnswer>,
    /// Attachments removed after the log's transaction: files on SQLite; on Postgres the
    /// transaction deletes the rows, so only those of a user with no stream (or of a repeated
    /// erasure) are counted here.
    pub attachments_removed: u64,
    /// Idempotency records of the user removed outside the log's transaction: those of a user
    /// with no stream left, or found by a repeated erasure (those the transaction deletes with
    /// the events are not counted here).
    pub idempotency_records_removed: u64,
    /// The thread or user had been erased already: only leftovers (attachments, idempotency
    /// records, the files' scrub) were looked for.
    pub already_erased: bool,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErasedStreamAnswer {
    pub stream: String,
    pub events: u64,
}

/// Runs `plan` (scrubbing the files after it when `scrub`) and removes the attachments of what
/// it erased. When nothing of the scope is left in the log, the leftovers are removed: a
/// thread's attachments if it was erased before; a user's attachments and idempotency records
/// (whether or not they were erased before), with the scrub. `NotErased::NothingFound`: there
/// was nothing at all (a thread never erased, a user with nothing stored and never erased);
/// `NotErased::Busy`: a retention erasure found it in use.
pub async fn erase_planned(
    log: &EventLog,
    attachments: &AttachmentStore,
    plan: ErasurePlan,
    scrub: bool,
) -> Result<Result<ErasureAnswer, NotErased>, StoreError> {
    let thread = plan.request().scope.thread_id.clone();
    let user = plan.request().scope.user_id.clone();
    match log.erase_planned(plan, scrub).await? {
        Ok(erasure) => Ok(Ok(answer(attachments, erasure).await?)),
        Err(NotErased::NothingFound) => {
            // Nothing of the scope is left in the log: an erasure repeated (after a crash
            // between the commit and the attachments or the scrub, or a request made twice),
            // or a user with attachments or idempotency records but no stream. Finish what may
            // be left.
            if let Some(thread) = thread {
                if log.erased_stream(&thread).await?.is_none() {
                    return Ok(Err(NotErased::NothingFound));
                }
                let removed = attachments
                    .erase(std::slice::from_ref(&thread), None)
                    .await?;
                if scrub {
                    log.scrub(std::slice::from_ref(&thread)).await?;
                }
                return Ok(Ok(leftovers(removed, 0, true)));
            }
            let Some(user) = user else {
                return Ok(Err(NotErased::NothingFound));
            };
            let erased_before = log.user_erased_streams(&user).await?;
            let removed = attachments.erase(&[], Some(&user)).await?;
            let keys = log.erase_user_keys(&user).await?;
            if erased_before.is_none() && removed == 0 && keys == 0 {
                return Ok(Err(NotErased::NothingFound));
            }
            if scrub {
                // The thread index forgets the streams erased before (a crash may have come
                // before it did), and the WALs are truncated.
                log.scrub(erased_before.as_deref().unwrap_or_default())
                    .await?;
            }
            Ok(Ok(leftovers(removed, keys, erased_before.is_some())))
        }
        Err(busy) => Ok(Err(busy)),
    }
}

/// The answer of an erasure that found nothing of its scope in the log but leftovers.
fn leftovers(attachments_removed: u64, keys: u64, already_erased: bool) -> ErasureAnswer {
    ErasureAnswer {
        tombstone_id: None,
        events_erased: 0,
        streams: Vec::new(),
        attachments_removed,
        idempotency_records_removed: keys,
        already_erased,
    }
}

/// Plans and runs an erasure, scrubbing the files after it.
pub async fn erase(
    log: &EventLog,
    attachments: &AttachmentStore,
    request: ErasureRequest,
) -> Result<Result<ErasureAnswer, NotErased>, StoreError> {
    let plan = log.plan_erasure(request, None).await?;
    erase_planned(log, attachments, plan, true).await
}

async fn answer(attachments: &AttachmentStore, e: Erasure) -> Result<ErasureAnswer, StoreError> {
    let streams: Vec<String> = e.erased.streams.iter().map(|s| s.stream.clone()).collect();
    let removed = attachments
        .erase(&streams, e.erased.scope.user_id.as_deref())
        .await?;
    Ok(ErasureAnswer {
        tombstone_id: Some(e.tombstone.id),
        events_erased: e.erased.events,
        streams: e
            .erased
            .streams
            .iter()
            .map(|s| ErasedStreamAnswer {
                stream: s.stream.clone(),
                events: s.events,
            })
            .collect(),
        attachments_removed: removed,
        idempotency_records_removed: 0,
        already_erased: false,
    })
}

/// `threadstream erase --thread T | --user U`: opens the configured store, erases, closes it;
/// the answer as JSON, `None` when nothing of the scope is stored. With SQLite it refuses while
/// a server runs on the data dir ([`crate::data_dir_lock`]): that server would keep the erased
/// threads in its memory caches and thread index; the admin route erases inside it.
pub async fn run_cli(
    config: &crate::Config,
    thread: Option<String>,
    user: Option<String>,
    requested_by: String,
) -> anyhow::Result<Option<String>> {
    if let Some(thread) = &thread {
        threadstream_domain::validate_thread_id(thread).map_err(anyhow::Error::msg)?;
    }
    if user.as_ref().is_some_and(|u| u.trim().is_empty()) {
        anyhow::bail!("--user must not be blank");
    }
    let request = ErasureRequest {
        scope: ErasureScope {
            thread_id: thread,
            user_id: user,
            idle_before_ms: None,
        },
        requested_by,
        reason: ErasureReason::Request,
    };
    let _data_dir = match &config.database_url {
        None => Some(crate::data_dir_lock::exclusive(&config.data_dir)?),
        Some(_) => None,
    };
    let log = crate::open_log(config).await?;
    let attachments = crate::attachment_store(&log, config);
    let outcome = erase(&log, &attachments, request).await;
    log.shutdown().await;
    Ok(match outcome? {
        Ok(answer) => Some(serde_json::to_string(&answer)?),
        Err(_) => None,
    })
}
