//! Attachments (seed 003): `POST /api/v1/agent/attachments?threadId&fileName` stores a file a
//! user attaches to a thread; `GET /api/v1/agent/attachments/signed-url?bucket&path` gives the
//! owner a URL signed with an HMAC and an expiry; `GET /api/v1/agent/attachments/object?…`
//! serves the bytes to whoever holds an unexpired, untampered URL (an `<img src>` cannot send
//! credentials of its own, so the signature is the credential, as with S3 presigned URLs).
//!
//! Object paths are `agent-inputs/{user_id}/{attachment_id}/{file name}`: a user can only get a
//! URL signed for a path under their own prefix.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use hmac::{Hmac, Mac};
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use threadstream_store::{AttachmentMeta, AttachmentStore};

use crate::error::ApiError;
use crate::extract::{ApiQuery, Caller};
use crate::http::{authorize_thread, new_id};
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
    key: std::sync::Arc<[u8]>,
    bucket: String,
    ttl: Duration,
    max_bytes: usize,
}

impl Attachments {
    /// `key`: the HMAC key of signed URLs; with `None` a random key per process (URLs then only
    /// work on the instance that signed them, until it restarts).
    pub fn new(
        store: AttachmentStore,
        key: Option<&str>,
        bucket: String,
        ttl: Duration,
        max_bytes: usize,
    ) -> Self {
        let key: Vec<u8> = match key {
            Some(k) => k.as_bytes().to_vec(),
            None => {
                use rand::RngCore;
                let mut k = vec![0u8; 32];
                rand::thread_rng().fill_bytes(&mut k);
                k
            }
        };
        Attachments {
            store,
            key: key.into(),
            bucket,
            ttl,
            max_bytes,
        }
    }

    fn mac(&self, bucket: &str, path: &str, expires: u64) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key");
        // Length-free fields joined by a byte none of them may contain.
        mac.update(format!("v1\n{bucket}\n{path}\n{expires}").as_bytes());
        mac
    }

    /// The query string of a URL for `path` valid until `expires` (seconds since the epoch).
    fn sign(&self, path: &str, expires: u64) -> String {
        let sig = hex(&self
            .mac(&self.bucket, path, expires)
            .finalize()
            .into_bytes());
        format!(
            "bucket={}&path={}&expires={expires}&signature={sig}",
            enc(&self.bucket),
            enc(path)
        )
    }

    /// Whether `signature` is this instance's for the other fields (constant time).
    fn verify(&self, bucket: &str, path: &str, expires: u64, signature: &str) -> bool {
        let Some(sig) = unhex(signature) else {
            return false;
        };
        self.mac(bucket, path, expires).verify_slice(&sig).is_ok()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UploadQuery {
    thread_id: String,
    file_name: Option<String>,
}

/// `POST /api/v1/agent/attachments?threadId&fileName`, the bytes as the body with their
/// `Content-Type` → 201 with the stored object's bucket, path and digest.
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
            "unsupported_attachment_type",
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
            "empty_attachment",
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
        sha256: hex(&Sha256::digest(&bytes)),
        created_at: now_millis(),
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

#[derive(Deserialize)]
pub struct SignQuery {
    bucket: String,
    path: String,
}

/// `GET /api/v1/agent/attachments/signed-url?bucket&path` → `{url, expiresAt}` for one of the
/// caller's own attachments.
pub async fn signed_url(
    State(ctx): State<ApiContext>,
    caller: Caller,
    ApiQuery(q): ApiQuery<SignQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let att = &ctx.attachments;
    if q.bucket != att.bucket {
        return Err(ApiError::Forbidden {
            code: "unknown_bucket",
            message: format!("bucket {:?} is not this service's bucket", q.bucket),
        });
    }
    let prefix = format!("{USER_PREFIX}/{}/", path_segment(&caller.user_id));
    if !q.path.starts_with(&prefix) || q.path.split('/').any(|s| s == ".." || s == ".") {
        return Err(ApiError::Forbidden {
            code: "path_outside_user_prefix",
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

#[derive(Deserialize)]
pub struct ObjectQuery {
    bucket: String,
    path: String,
    expires: u64,
    signature: String,
}

/// `GET /api/v1/agent/attachments/object?bucket&path&expires&signature`: the bytes, while the
/// URL is unexpired and its signature matches; 403 otherwise.
pub async fn object(
    State(ctx): State<ApiContext>,
    ApiQuery(q): ApiQuery<ObjectQuery>,
) -> Result<Response, ApiError> {
    let att = &ctx.attachments;
    if !att.verify(&q.bucket, &q.path, q.expires, &q.signature) {
        return Err(ApiError::Forbidden {
            code: "invalid_signature",
            message: "the URL's signature does not match".into(),
        });
    }
    if q.expires < now_secs() {
        return Err(ApiError::Forbidden {
            code: "url_expired",
            message: "the signed URL has expired".into(),
        });
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
        format!("x-{}", hex(user_id.as_bytes()))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 128 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Percent-encodes a query value.
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attachments() -> Attachments {
        Attachments::new(
            AttachmentStore::Dir("/nonexistent".into()),
            Some("k"),
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
        assert!(a.verify("b", "agent-inputs/u/att_1/f.png", 100, sig));
        assert!(!a.verify("b", "agent-inputs/u/att_1/g.png", 100, sig));
        assert!(!a.verify("b", "agent-inputs/u/att_1/f.png", 101, sig));
        assert!(!a.verify("c", "agent-inputs/u/att_1/f.png", 100, sig));
        assert!(!a.verify("b", "agent-inputs/u/att_1/f.png", 100, "zz"));
        let other = Attachments::new(
            AttachmentStore::Dir("/nonexistent".into()),
            Some("other key"),
            "b".into(),
            Duration::from_secs(60),
            10,
        );
        assert!(!other.verify("b", "agent-inputs/u/att_1/f.png", 100, sig));
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
