//! `GET /instance-ai/admin/change-feed`: how far the change feed (`--change-feed`) is behind the
//! log, and whether this instance publishes it (docs/integrations.md, "Change feed").

use axum::extract::State;
use axum::Json;
use serde::Serialize;

use super::admin::admin_only;
use crate::error::ApiError;
use crate::extract::Caller;
use crate::ApiContext;

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChangeFeedStatus {
    /// The JetStream stream the feed publishes to.
    stream: String,
    /// The subjects it publishes on: `threadstream.events.<thread token>`.
    subjects: &'static str,
    /// This instance holds the feed's lock and publishes (one instance of a fleet does).
    publishing: bool,
    /// This instance's publisher is connected to NATS and its stream (false on the others).
    connected: bool,
    /// The log's highest id.
    head_id: i64,
    /// The highest id the stream acknowledged: the publisher's own count on the publishing
    /// instance, the stored checkpoint (at most a second behind) on the others.
    published_id: i64,
    /// Ids of the log after `publishedId`: events not yet on the bus.
    lag_events: i64,
    /// Age in seconds of the oldest event not yet on the bus (0 when caught up).
    lag_seconds: f64,
    /// Events this instance published since it started (JetStream's duplicates included).
    published_events: u64,
    /// Why this instance's publisher last failed, while it has not published since.
    #[serde(skip_serializing_if = "Option::is_none")]
    last_error: Option<String>,
}

#[utoipa::path(
    get,
    operation_id = "adminChangeFeed",
    path = "/instance-ai/admin/change-feed",
    tag = "service",
    responses(
        (status = 200, description = "The change feed's lag and publisher", body = ChangeFeedStatus),
        (status = 403, description = "Not an admin (`admin_only`)", body = crate::error::ErrorBody),
        (status = 404, description = "The change feed is off: no `--change-feed` (`not_found`)", body = crate::error::ErrorBody)
    )
)]
pub async fn status(
    State(ctx): State<ApiContext>,
    caller: Caller,
) -> Result<Json<ChangeFeedStatus>, ApiError> {
    admin_only(&ctx, &caller, "read the change feed's status")?;
    let Some(feed) = &ctx.change_feed else {
        return Err(ApiError::NotFound(
            "the change feed is off: start the server with --change-feed nats://HOST:PORT".into(),
        ));
    };
    let lag = feed.lag(&ctx.log).await?;
    let state = feed.state();
    Ok(Json(ChangeFeedStatus {
        stream: feed.config().stream.clone(),
        subjects: threadstream_change_feed::subject::SUBJECTS,
        publishing: state.publishing,
        connected: state.connected,
        head_id: lag.head_id,
        published_id: lag.published_id,
        lag_events: lag.events,
        lag_seconds: lag.seconds,
        published_events: state.published_events,
        last_error: state.last_error,
    }))
}
