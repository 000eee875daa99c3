//! Attachments: `POST /api/v1/agent/attachments?threadId&fileName` stores a file a
//! user attaches to a thread; `GET /api/v1/agent/attachments/signed-url?bucket&path` gives the
//! owner a URL signed with an expiry (by the same signer as session cookies and stream
//! tickets, `crate::auth::signer`); `GET /api/v1/agent/attachments/object?…`
//! serves the bytes to whoever holds an unexpired, untampered URL (an `<img src>` cannot send
//! credentials of its own, so the signature is the credential, as with S3 presigned URLs).
//!
//! Object paths are `agent-inputs/{user_id}/{attachment_id}/{file name}`: a user can only get a
//! URL signed for a path under their own prefix.

use std::time::Duration;
use threadstream_domain::ErrorCode;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use secrecy::SecretString;
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use threadstream_domain::clock::now_ms;
use threadstream_store::{AttachmentMeta, AttachmentStore};

use crate::access::authorize_thread;
use crate::auth::signer::{Rejected, Signer};
use crate::error::ApiError;
use crate::extract::{ApiQuery, Caller};
use crate::ids::new_id;
use crate::ApiContext;

/// Content types accepted for upload. Nothing a browser would run (HTML, SVG, JavaScript).
pub const ALLOWED_TYPES: &[&str] = &[
    "image/png",
    "image/jpeg",
    "image/gif",
    "image/webp",
    "application/pdf",
    "text/plain",
    "text/markdown",
    "text/csv",
    "application/json",
];

/// The prefix every user's objects live under.
const USER_PREFIX: &str = "agent-inputs";

/// The attachment store and the key URLs are signed with. Cheap to clone.
#[derive(Clone)]
pub struct Attachments {
    store: AttachmentStore,
    signer: Signer,
    bucket: String,
    ttl: Duration,
    max_bytes: usize,
}

impl Attachments {
    /// Where the bytes live (an erasure removes a thread's or user's from there).
    pub fn store(&self) -> &AttachmentStore {
        &self.store
    }

    /// `key`: the HMAC key of signed URLs; with `None` a random key per process (URLs then only
    /// work on the instance that signed them, until it restarts).
    pub fn new(
        store: AttachmentStore,
        key: Option<&SecretString>,
        bucket: String,
        ttl: Duration,
        max_bytes: usize,
    ) -> Self {
        Attachments {
            store,
            signer: Signer::new(key),
            bucket,
            ttl,
            max_bytes,
        }
    }

    /// The query string of a URL for `path` valid until `expires` (seconds since the epoch).
    fn sign(&self, path: &str, expires: u64) -> String {
        let sig = hex::encode(
            self.signer
                .sign(&signed_fields(&self.bucket, path, expires)),
        );
        format!(
            "bucket={}&path={}&expires={expires}&signature={sig}",
            utf8_percent_encode(&self.bucket, QUERY_VALUE),
            utf8_percent_encode(path, QUERY_VALUE)
        )
    }

    /// Whether `signature` (hex) is this instance's for the other fields, and then whether the
    /// URL is still valid at `now_ms`: through the whole second `expires`.
    fn verify(
        &self,
        bucket: &str,
        path: &str,
        expires: u64,
        signature: &str,
        now_ms: i64,
    ) -> Result<(), Rejected> {
        let mut sig = [0u8; 32];
        hex::decode_to_slice(signature, &mut sig).map_err(|_| Rejected::Signature)?;
        let valid_until_ms = i64::try_from(expires)
            .unwrap_or(i64::MAX)
            .saturating_add(1)
            .saturating_mul(1000);
        self.signer.verify(
            &signed_fields(bucket, path, expires),
            &sig,
            valid_until_ms,
            now_ms,
        )
    }
}

/// What a URL's signature covers: length-free fields joined by a byte none of them may contain.
fn signed_fields(bucket: &str, path: &str, expires: u64) -> Vec<u8> {
    format!("v1\n{bucket}\n{path}\n{expires}").into_bytes()
}

/// Bytes percent-encoded in a query value: all but RFC 3986's unreserved characters.
const QUERY_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'.')
    .remove(b'_')
    .remove(b'-')
    .remove(b'~');

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(rename_all = "camelCase")]
pub struct UploadQuery {
    thread_id: String,
    file_name: Option<String>,
}

/// `POST /api/v1/agent/attachments?threadId&fileName`, the bytes as the body with their
/// `Content-Type` → 201 with the stored object's bucket, path and digest.
#[utoipa::path(
    post,
    operation_id = "attachmentsUpload",
    path = "/api/v1/agent/attachments",
    tag = "attachments",
    params(UploadQuery),
    request_body(content(("image/png"), ("image/jpeg"), ("image/gif"), ("image/webp"), ("application/pdf"), ("text/plain"), ("text/markdown"), ("text/csv"), ("application/json")), description = "The file's bytes, with its `Content-Type`"),
    responses(
        (status = 201, description = "The attachment is stored", body = crate::openapi::AttachmentStored),
        (status = 400, description = "A missing or malformed query parameter (`invalid_query`) or thread id", body = crate::error::ErrorBody),
        (status = 403, description = "The caller's role may not do this (`read_only`, `ingest_only`, `thread_not_granted`)", body = crate::error::ErrorBody),
        (status = 404, description = "The thread is another user's (`not_found`)", body = crate::error::ErrorBody),
        (status = 413, description = "Larger than `--max-attachment-bytes` (`payload_too_large`)", body = crate::error::ErrorBody),
        (status = 422, description = "A type that is not accepted (`unsupported_attachment_type`) or no bytes (`empty_attachment`)", body = crate::error::ErrorBody)
    )
)]
pub async fn upload(
    State(ctx): State<ApiContext>,
    caller: Caller,
    ApiQuery(q): ApiQuery<UploadQuery>,
    req: Request,
) -> Result<Response, ApiError> {
    authorize_thread(&ctx, &caller, &q.thread_id).await?;
    let att = &ctx.attachments;
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default();
    if !ALLOWED_TYPES.contains(&content_type.as_str()) {
        return Err(ApiError::unprocessable(
            ErrorCode::UnsupportedAttachmentType,
            format!(
                "attachments of type {content_type:?} are not accepted; allowed: {}",
                ALLOWED_TYPES.join(", ")
            ),
        ));
    }
    let limit = att.max_bytes;
    let bytes = axum::body::to_bytes(req.into_body(), limit)
        .await
        .map_err(|e| crate::extract::body_error(&e, limit))?;
    if bytes.is_empty() {
        return Err(ApiError::unprocessable(
            ErrorCode::EmptyAttachment,
            "the attachment has no bytes",
        ));
    }
    let file_name = safe_file_name(q.file_name.as_deref().unwrap_or("attachment"));
    let path = format!(
        "{USER_PREFIX}/{}/{}/{file_name}",
        path_segment(&caller.user_id),
        new_id("att")
    );
    let meta = AttachmentMeta {
        path,
        thread_id: q.thread_id,
        user_id: caller.user_id,
        file_name,
        content_type,
        size: bytes.len() as u64,
        sha256: hex::encode(Sha256::digest(&bytes)),
        created_at: now_ms(),
    };
    att.store.put(&meta, bytes.to_vec()).await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "bucket": att.bucket,
            "path": meta.path,
            "threadId": meta.thread_id,
            "fileName": meta.file_name,
            "contentType": meta.content_type,
            "size": meta.size,
            "sha256": meta.sha256,
        })),
    )
        .into_response())
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SignQuery {
    bucket: String,
    path: String,
}

/// `GET /api/v1/agent/attachments/signed-url?bucket&path` → `{url, expiresAt}` for one of the
/// caller's own attachments.
#[utoipa::path(
    get,
    operation_id = "attachmentsSignedUrl",
    path = "/api/v1/agent/attachments/signed-url",
    tag = "attachments",
    params(SignQuery),
    responses(
        (status = 200, description = "A short-lived URL of the object", body = crate::openapi::SignedUrl),
        (status = 400, description = "A missing query parameter (`invalid_query`)", body = crate::error::ErrorBody),
        (status = 403, description = "Another bucket (`unknown_bucket`) or a path outside the caller's prefix (`path_outside_user_prefix`)", body = crate::error::ErrorBody),
        (status = 404, description = "No such object (`not_found`)", body = crate::error::ErrorBody)
    )
)]
pub async fn signed_url(
    State(ctx): State<ApiContext>,
    caller: Caller,
    ApiQuery(q): ApiQuery<SignQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let att = &ctx.attachments;
    if q.bucket != att.bucket {
        return Err(ApiError::Forbidden {
            code: ErrorCode::UnknownBucket,
            message: format!("bucket {:?} is not this service's bucket", q.bucket),
        });
    }
    let prefix = format!("{USER_PREFIX}/{}/", path_segment(&caller.user_id));
    if !q.path.starts_with(&prefix) || q.path.split('/').any(|s| s == ".." || s == ".") {
        return Err(ApiError::Forbidden {
            code: ErrorCode::PathOutsideUserPrefix,
            message: format!("path must lie under {prefix}"),
        });
    }
    let not_found = || ApiError::NotFound(format!("attachment {:?} not found", q.path));
    if !valid_object_path(&q.path) {
        return Err(not_found());
    }
    match att.store.get(&q.path).await? {
        Some((meta, _)) if meta.user_id == caller.user_id => {}
        _ => return Err(not_found()),
    }
    let expires = now_secs() + att.ttl.as_secs();
    Ok(Json(json!({
        "url": format!("/api/v1/agent/attachments/object?{}", att.sign(&q.path, expires)),
        "expiresAt": expires,
    })))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ObjectQuery {
    bucket: String,
    path: String,
    expires: u64,
    signature: String,
}

/// `GET /api/v1/agent/attachments/object?bucket&path&expires&signature`: the bytes, while the
/// URL is unexpired and its signature matches; 403 otherwise.
#[utoipa::path(
    get,
    operation_id = "attachmentsObject",
    path = "/api/v1/agent/attachments/object",
    tag = "attachments",
    security(()),
    params(ObjectQuery),
    responses(
        (status = 200, description = "The bytes, with their content type, `nosniff` and `Content-Security-Policy: sandbox`", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 400, description = "A missing query parameter (`invalid_query`)", body = crate::error::ErrorBody),
        (status = 403, description = "A changed parameter (`invalid_signature`) or an expired URL (`url_expired`)", body = crate::error::ErrorBody),
        (status = 404, description = "No such object (`not_found`)", body = crate::error::ErrorBody)
    )
)]
pub async fn object(
    State(ctx): State<ApiContext>,
    ApiQuery(q): ApiQuery<ObjectQuery>,
) -> Result<Response, ApiError> {
    let att = &ctx.attachments;
    match att.verify(&q.bucket, &q.path, q.expires, &q.signature, now_ms()) {
        Ok(()) => {}
        Err(Rejected::Signature) => {
            return Err(ApiError::Forbidden {
                code: ErrorCode::InvalidSignature,
                message: "the URL's signature does not match".into(),
            })
        }
        Err(Rejected::Expired) => {
            return Err(ApiError::Forbidden {
                code: ErrorCode::UrlExpired,
                message: "the signed URL has expired".into(),
            })
        }
    }
    let Some((meta, bytes)) = att.store.get(&q.path).await? else {
        return Err(ApiError::NotFound(format!(
            "attachment {:?} not found",
            q.path
        )));
    };
    let mut resp = Response::new(Body::from(bytes));
    let h = resp.headers_mut();
    let value = |s: &str| HeaderValue::from_str(s).unwrap_or(HeaderValue::from_static(""));
    h.insert(header::CONTENT_TYPE, value(&meta.content_type));
    h.insert(
        header::CONTENT_DISPOSITION,
        value(&format!("inline; filename=\"{}\"", meta.file_name)),
    );
    // Served bytes are user input: never sniffed into something runnable, never scripted.
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox; default-src 'none'"),
    );
    h.insert(
        header::CACHE_CONTROL,
        value(&format!(
            "private, max-age={}",
            q.expires.saturating_sub(now_secs())
        )),
    );
    Ok(resp)
}

fn valid_object_path(path: &str) -> bool {
    path.split('/').all(|s| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    })
}

/// A file name reduced to `[A-Za-z0-9._-]` (other characters become `_`), at most 100
/// characters, never starting with a dot.
fn safe_file_name(name: &str) -> String {
    let base = name.rsplit(['/', '\\']).next().unwrap_or("");
    let mut out: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    while out.starts_with('.') {
        out.replace_range(0..1, "_");
    }
    if out.is_empty() {
        out.push_str("attachment");
    }
    out
}

/// A user id as one path segment: kept when it is plain, else hex-encoded with an `x-` prefix
/// (user ids from identity providers may hold `@`, `/`, `|`…; an encoded id never collides
/// with a plain one, which cannot start with `x-` and hold only hex after it… unless it does,
/// hence the `x-` ids are always encoded).
fn path_segment(user_id: &str) -> String {
    let plain = !user_id.is_empty()
        && !user_id.starts_with("x-")
        && !user_id.starts_with('.')
        && user_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if plain {
        user_id.to_string()
    } else {
        format!("x-{}", hex::encode(user_id.as_bytes()))
    }
}

fn now_secs() -> u64 {
    (now_ms() / 1000) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attachments() -> Attachments {
        Attachments::new(
            AttachmentStore::Dir("/nonexistent".into()),
            Some(&SecretString::from("k")),
            "b".into(),
            Duration::from_secs(60),
            10,
        )
    }

    #[test]
    fn signatures_bind_every_field() {
        let a = attachments();
        let q = a.sign("agent-inputs/u/att_1/f.png", 100);
        let sig = q.rsplit("signature=").next().unwrap();
        let valid = |a: &Attachments, bucket: &str, path: &str, expires: u64, sig: &str| {
            a.verify(bucket, path, expires, sig, 0).is_ok()
        };
        assert!(valid(&a, "b", "agent-inputs/u/att_1/f.png", 100, sig));
        assert!(!valid(&a, "b", "agent-inputs/u/att_1/g.png", 100, sig));
        assert!(!valid(&a, "b", "agent-inputs/u/att_1/f.png", 101, sig));
        assert!(!valid(&a, "c", "agent-inputs/u/att_1/f.png", 100, sig));
        assert!(!valid(&a, "b", "agent-inputs/u/att_1/f.png", 100, "zz"));
        let other = Attachments::new(
            AttachmentStore::Dir("/nonexistent".into()),
            Some(&SecretString::from("other key")),
            "b".into(),
            Duration::from_secs(60),
            10,
        );
        assert!(!valid(&other, "b", "agent-inputs/u/att_1/f.png", 100, sig));
    }

    #[test]
    fn a_url_is_valid_through_its_expiry_second_and_the_signature_is_checked_first() {
        let a = attachments();
        let path = "agent-inputs/u/att_1/f.png";
        let q = a.sign(path, 100);
        let sig = q.rsplit("signature=").next().unwrap();
        assert_eq!(a.verify("b", path, 100, sig, 100_999), Ok(()));
        assert_eq!(
            a.verify("b", path, 100, sig, 101_000),
            Err(Rejected::Expired)
        );
        assert_eq!(
            a.verify("b", path, 99, sig, 101_000),
            Err(Rejected::Signature)
        );
    }

    #[test]
    fn query_values_are_percent_encoded_as_before() {
        let a = Attachments::new(
            AttachmentStore::Dir("/nonexistent".into()),
            Some(&SecretString::from("k")),
            "my bucket/ü".into(),
            Duration::from_secs(60),
            10,
        );
        let q = a.sign("agent-inputs/x-40/att_1/a~b.c-d_e", 5);
        assert!(
            q.starts_with(
                "bucket=my%20bucket%2F%C3%BC&path=agent-inputs%2Fx-40%2Fatt_1%2Fa~b.c-d_e&expires=5&signature="
            ),
            "{q}"
        );
    }

    #[test]
    fn names_and_user_segments_stay_inside_one_segment() {
        assert_eq!(safe_file_name("../../etc/passwd"), "passwd");
        assert_eq!(safe_file_name(".htaccess"), "_htaccess");
        assert_eq!(safe_file_name("a b<c>.png"), "a_b_c_.png");
        assert_eq!(safe_file_name(""), "attachment");
        assert_eq!(path_segment("alice"), "alice");
        assert_eq!(path_segment("a@b"), "x-614062");
        assert_eq!(path_segment("x-61"), "x-782d3631");
        assert_eq!(path_segment(".."), "x-2e2e");
        assert!(valid_object_path(&format!(
            "agent-inputs/{}/att_1/{}",
            path_segment("../x|y"),
            safe_file_name("../q")
        )));
    }
}
