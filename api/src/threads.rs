//! What the protocols share about whole threads: listing them (the caller's, or every user's
//! for an admin) and deleting one.

use serde_json::Value;
use threadstream_domain::ThreadCommand;
use threadstream_projections::ThreadList;

use crate::access::authorize_thread;
use crate::background::projector;
use crate::error::ApiError;
use crate::extract::Caller;
use crate::ApiContext;

/// The caller's threads (not deleted), newest activity first.
pub async fn caller_threads(ctx: &ApiContext, caller: &Caller) -> Result<Vec<Value>, ApiError> {
    threads_where(ctx, |t| t["owner"] == caller.user_id.as_str()).await
}

/// The threads (not deleted) `keep` accepts, newest activity first.
pub async fn threads_where(
    ctx: &ApiContext,
    keep: impl Fn(&Value) -> bool,
) -> Result<Vec<Value>, ApiError> {
    let docs = projector::view_all::<ThreadList>(&ctx.log, ctx.log.client_sight()).await?;
    let mut threads: Vec<Value> = docs
        .values()
        .map(ThreadList::render)
        .filter(|t| keep(t) && t["deleted"] != true)
        .collect();
    threads.sort_by(|a, b| b["lastEventId"].as_i64().cmp(&a["lastEventId"].as_i64()));
    Ok(threads)
}

/// Deletes a thread of the caller's (refused while a run is live).
pub async fn delete_thread(
    ctx: &ApiContext,
    caller: &Caller,
    thread_id: &str,
) -> Result<(), ApiError> {
    authorize_thread(ctx, caller, thread_id).await?;
    ctx.log
        .append(
            thread_id,
            vec![ThreadCommand::Delete {
                by: caller.user_id.clone(),
            }],
        )
        .await?;
    Ok(())
}
