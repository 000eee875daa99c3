//! Request extractors shared by every route: who is calling, and JSON bodies with our errors.

use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::ApiContext;

/// The user making the request. The one place identity comes from: for now every request is the
/// local user; authentication replaces this extractor's body, not its callers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub user_id: String,
}

/// The user id of the single local user when no authentication is configured.
pub const LOCAL_USER: &str = "local";

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(_parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(Caller {
            user_id: LOCAL_USER.to_string(),
        })
    }
}

/// A JSON body read within the configured size limit. Unparseable JSON is a 400, JSON of the
/// wrong shape a 422 naming the field, an oversized body a 413.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<ApiContext> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request<Body>, ctx: &ApiContext) -> Result<Self, Self::Rejection> {
        let is_json = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json") || v.contains("+json"));
        if !is_json {
            return Err(ApiError::bad_request(
                "unsupported_media_type",
                "expected Content-Type: application/json",
            ));
        }
        let limit = ctx.config.max_body_bytes;
        let bytes = axum::body::to_bytes(req.into_body(), limit)
            .await
            .map_err(|_| ApiError::PayloadTooLarge { limit })?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// Parses `bytes` as `T`, telling a syntax error (400) from a shape error (422).
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    use serde_json::error::Category;
    serde_json::from_slice(bytes).map_err(|e| {
        if e.classify() != Category::Data {
            return ApiError::bad_request("malformed_json", e.to_string());
        }
        // A shape error can be reported before the parser reaches a syntax error further on;
        // on this (cold) path, check the whole text so broken JSON is always a 400.
        match serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
            Err(syntax) => ApiError::bad_request("malformed_json", syntax.to_string()),
            Ok(_) => ApiError::unprocessable("invalid_body", e.to_string()),
        }
    })
}
