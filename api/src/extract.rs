//! Request extractors shared by every route: who is calling, and JSON bodies with our errors.

use std::collections::HashMap;
use threadstream_domain::ErrorCode;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, FromRequestParts, MatchedPath, Path, Query, Request};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, COOKIE};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::auth::{session_cookie_value, Credential, Identity, Role};

use crate::error::ApiError;
use crate::ApiContext;

/// The one route an ingest-only token may use (the router serves it from `crate::http`).
pub const INGEST_ROUTE: &str = "/instance-ai/threads/{thread_id}/events";
/// The stream that accepts a `?ticket=` (browsers' `EventSource` cannot send headers).
pub const TICKET_STREAM_ROUTE: &str = "/instance-ai/events/{thread_id}";

/// The user making the request: the one place identity comes from. Authenticated by
/// [`crate::auth::Authenticator`] from, in this order, `Authorization: Bearer <token or JWT>`,
/// the session cookie, or (on the n8n event stream only) a `?ticket=` stream ticket; without
/// authentication configured, every request is [`LOCAL_USER`]. Missing or bad credentials are
/// a 401; an ingest-only token on any route but ingest is a 403.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub user_id: String,
    pub role: Role,
    /// How the caller proved it (a session is only opened from a bearer credential).
    pub credential: Credential,
}

impl Caller {
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// The caller as the identity the authenticator signs into cookies and tickets.
    pub fn identity(&self) -> Identity {
        Identity {
            user_id: self.user_id.clone(),
            role: self.role.clone(),
            credential: self.credential.clone(),
        }
    }
}

/// The W3C trace context (`traceparent`, `tracestate`) of a request that starts a run: the
/// run's spans join that trace (docs/operations.md, "Traces"). Absent or not valid UTF-8, the
/// run's trace is a new one; a malformed `traceparent` is ignored the same way, as W3C Trace
/// Context asks.
#[derive(Debug, Clone, Default)]
pub struct RunTrace(pub Option<threadstream_agent::telemetry::TraceParent>);

/// The headers [`RunTrace`] reads, for the OpenAPI document of the routes that start runs.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)]
pub struct RunTraceHeaders {
    /// W3C Trace Context: the run's spans join this trace (docs/operations.md, "Traces"); a
    /// malformed value is ignored.
    traceparent: Option<String>,
    /// W3C Trace Context vendor state, with `traceparent`.
    tracestate: Option<String>,
}

impl<S: Send + Sync> FromRequestParts<S> for RunTrace {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let header = |name: &str| {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        Ok(RunTrace(header("traceparent").map(|traceparent| {
            threadstream_agent::telemetry::TraceParent {
                traceparent,
                tracestate: header("tracestate"),
            }
        })))
    }
}

/// The user id of the single local user when no authentication is configured.
pub const LOCAL_USER: &str = "local";

impl FromRequestParts<ApiContext> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        ctx: &ApiContext,
    ) -> Result<Self, Self::Rejection> {
        // Already identified for this request (by the rate limiter).
        if let Some(caller) = parts.extensions.get::<Caller>() {
            return Ok(caller.clone());
        }
        let who = identify(parts, ctx).await?;
        if let Role::Ingest { .. } = who.role {
            let route = parts
                .extensions
                .get::<MatchedPath>()
                .map(MatchedPath::as_str);
            if route != Some(INGEST_ROUTE) {
                return Err(ApiError::Forbidden {
                    code: ErrorCode::IngestOnly,
                    message: format!(
                        "an ingest-only token may only append events (POST {}) to its granted threads",
                        INGEST_ROUTE
                    ),
                });
            }
        }
        Ok(Caller {
            user_id: who.user_id,
            role: who.role,
            credential: who.credential,
        })
    }
}

async fn identify(parts: &mut Parts, ctx: &ApiContext) -> Result<Identity, ApiError> {
    let auth = &ctx.auth;
    if !auth.enabled() {
        return Ok(Identity {
            user_id: LOCAL_USER.to_string(),
            role: Role::User,
            credential: Credential::Local,
        });
    }
    if let Some(h) = parts.headers.get(AUTHORIZATION) {
        let h = h.to_str().unwrap_or_default();
        let token = match h.split_once(' ') {
            Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token,
            _ => {
                return Err(ApiError::Unauthorized {
                    code: ErrorCode::InvalidAuthorization,
                    message: "the Authorization header must be `Bearer <token>`".into(),
                })
            }
        };
        return auth.bearer(token);
    }
    let cookies = parts.headers.get_all(COOKIE).iter();
    if let Some(value) = session_cookie_value(cookies.filter_map(|v| v.to_str().ok())) {
        return auth.session(&value);
    }
    let route = parts
        .extensions
        .get::<MatchedPath>()
        .map(MatchedPath::as_str);
    if route == Some(TICKET_STREAM_ROUTE) {
        let query = Query::<HashMap<String, String>>::try_from_uri(&parts.uri)
            .map(|q| q.0)
            .unwrap_or_default();
        if let Some(ticket) = query.get("ticket") {
            let Path(thread_id) = Path::<String>::from_request_parts(parts, ctx)
                .await
                .map_err(|e| ApiError::bad_request(ErrorCode::InvalidPath, e.body_text()))?;
            return auth.redeem_ticket(ticket, &thread_id).await;
        }
    }
    Err(ApiError::Unauthorized {
        code: ErrorCode::MissingCredentials,
        message: "authentication required: send `Authorization: Bearer <token>`, the session \
                  cookie, or (on an event stream) a `?ticket=`"
            .into(),
    })
}

/// A JSON body read within the configured size limit. Unparseable JSON is a 400, JSON of the
/// wrong shape a 422 naming the field, an oversized body a 413.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<ApiContext> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request<Body>, ctx: &ApiContext) -> Result<Self, Self::Rejection> {
        let bytes = json_body(req, ctx).await?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// The bytes of a JSON body (`Content-Type` checked: 400), read within the configured size
/// limit (413).
pub async fn json_body(req: Request<Body>, ctx: &ApiContext) -> Result<Bytes, ApiError> {
    let is_json = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.contains("+json"));
    if !is_json {
        return Err(ApiError::bad_request(
            ErrorCode::UnsupportedMediaType,
            "expected Content-Type: application/json",
        ));
    }
    let limit = ctx.config.max_body_bytes;
    axum::body::to_bytes(req.into_body(), limit)
        .await
        .map_err(|e| body_error(&e, limit))
}

/// Why a request body could not be read whole within `limit` bytes: it paused longer than the
/// idle timeout (400 `request_body_timeout`), else it was too large (413).
pub fn body_error(error: &axum::Error, limit: usize) -> ApiError {
    if threadstream_http1::is_body_timeout(error) {
        return ApiError::bad_request(
            ErrorCode::RequestBodyTimeout,
            "the request body paused longer than the idle timeout",
        );
    }
    ApiError::PayloadTooLarge { limit }
}

/// Parses `bytes` as `T`, telling a syntax error (400) from a shape error (422).
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    use serde_json::error::Category;
    // Every JSON body is an object; serde would read a struct from an array too (`[null,null]`
    // as its fields in order).
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(
            match serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
                Err(syntax) => ApiError::bad_request(ErrorCode::MalformedJson, syntax.to_string()),
                Ok(_) => ApiError::unprocessable(
                    ErrorCode::InvalidBody,
                    "the body must be a JSON object",
                ),
            },
        );
    }
    serde_json::from_slice(bytes).map_err(|e| {
        if e.classify() != Category::Data {
            return ApiError::bad_request(ErrorCode::MalformedJson, e.to_string());
        }
        // A shape error can be reported before the parser reaches a syntax error further on;
        // on this (cold) path, check the whole text so broken JSON is always a 400.
        match serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
            Err(syntax) => ApiError::bad_request(ErrorCode::MalformedJson, syntax.to_string()),
            Ok(_) => ApiError::unprocessable(ErrorCode::InvalidBody, e.to_string()),
        }
    })
}

/// A query string parsed as `T`; a missing or malformed parameter is a 400 JSON error naming it
/// (axum's own `Query` answers in plain text).
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| ApiQuery(q.0))
            .map_err(|e| ApiError::bad_request(ErrorCode::InvalidQuery, e.body_text()))
    }
}
