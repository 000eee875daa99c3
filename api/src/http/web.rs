//! The web page: `GET /` and `GET /assets/{file}`, served from the bundle in `api/web/dist/`
//! embedded at compile time, so the binary needs no node and no files at run time.
//!
//! Every answer carries a strict CSP (`default-src 'self'`: the page has no inline script or
//! style and loads nothing from elsewhere). The asset names are not fingerprinted, so they are
//! served `no-cache` with a content-hash `ETag`: browsers revalidate and get a 304 until the
//! binary changes.

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

const INDEX_HTML: &[u8] = include_bytes!("../../web/dist/index.html");
const APP_JS: &[u8] = include_bytes!("../../web/dist/app.js");
const STYLE_CSS: &[u8] = include_bytes!("../../web/dist/style.css");

/// The page's Content-Security-Policy.
pub const CSP: &str =
    "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

struct Asset {
    body: &'static [u8],
    content_type: &'static str,
    etag: u64,
}

/// FNV-1a, computed at compile time: a stable ETag per build of the bundle.
const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    hash
}

const INDEX: Asset = Asset {
    body: INDEX_HTML,
    content_type: "text/html; charset=utf-8",
    etag: fnv1a(INDEX_HTML),
};
const APP: Asset = Asset {
    body: APP_JS,
    content_type: "text/javascript; charset=utf-8",
    etag: fnv1a(APP_JS),
};
const STYLE: Asset = Asset {
    body: STYLE_CSS,
    content_type: "text/css; charset=utf-8",
    etag: fnv1a(STYLE_CSS),
};

fn serve(asset: &Asset, request: &HeaderMap) -> Response {
    let etag = format!("\"{:016x}\"", asset.etag);
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let mut resp = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            [(header::CONTENT_TYPE, asset.content_type)],
            asset.body.to_vec(),
        )
            .into_response()
    };
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    resp
}

/// `GET /`: the page.
#[utoipa::path(
    get,
    operation_id = "webIndex",
    path = "/",
    tag = "service",
    security(()),
    params(("If-None-Match" = Option<String>, Header, description = "The page's ETag (304)")),
    responses(
        (status = 200, description = "The web page", content_type = "text/html", body = String),
        (status = 304, description = "Not modified"),
    )
)]
pub async fn index(headers: HeaderMap) -> Response {
    serve(&INDEX, &headers)
}

/// `GET /assets/{file}`: the script and the style sheet; anything else is a JSON 404.
#[utoipa::path(
    get,
    operation_id = "webAsset",
    path = "/assets/{file}",
    tag = "service",
    security(()),
    params(
        ("file" = String, Path, description = "`app.js` or `style.css`"),
        ("If-None-Match" = Option<String>, Header, description = "The asset's ETag (304)"),
    ),
    responses(
        (status = 200, description = "The asset", content(
            (String = "text/javascript"),
            (String = "text/css"),
        )),
        (status = 304, description = "Not modified"),
        (status = 404, description = "No such asset (`not_found`)", body = crate::error::ErrorBody),
    )
)]
pub async fn asset(Path(file): Path<String>, headers: HeaderMap) -> Result<Response, ApiError> {
    let asset = match file.as_str() {
        "app.js" => &APP,
        "style.css" => &STYLE,
        _ => return Err(ApiError::NotFound(format!("no asset named '{file}'"))),
    };
    Ok(serve(asset, &headers))
}
