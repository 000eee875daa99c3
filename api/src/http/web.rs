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
const API_DOCS_HTML: &[u8] = include_bytes!("../../web/dist/api-docs.html");
const API_DOCS_JS: &[u8] = include_bytes!("../../web/dist/api-docs.js");
/// npm `@scalar/api-reference`'s browser bundle (`api/web/vendor-scalar.sh`).
const SCALAR_JS: &[u8] = include_bytes!("../../web/dist/scalar.js");
/// The pinned version and digest of [`SCALAR_JS`] (`tests/blackbox/api_docs.rs` checks it).
pub const SCALAR: &str =
    "@scalar/api-reference 1.72.1 sha256:bf091006bdc3af6067af77c2f534812e3e633e94a94e87138069f570f33b762c";

/// The page's Content-Security-Policy.
pub const CSP: &str =
    "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The API reference's: Scalar injects its style sheets and uses `data:` images, and still
/// loads and connects to nothing but this origin.
pub const API_DOCS_CSP: &str = "default-src 'self'; style-src 'self' 'unsafe-inline'; \
     img-src 'self' data:; font-src 'self' data:; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

struct Asset {
    body: &'static [u8],
    content_type: &'static str,
    etag: u64,
    csp: &'static str,
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
    csp: CSP,
};
const APP: Asset = Asset {
    body: APP_JS,
    content_type: "text/javascript; charset=utf-8",
    etag: fnv1a(APP_JS),
    csp: CSP,
};
const STYLE: Asset = Asset {
    body: STYLE_CSS,
    content_type: "text/css; charset=utf-8",
    etag: fnv1a(STYLE_CSS),
    csp: CSP,
};
const API_DOCS: Asset = Asset {
    body: API_DOCS_HTML,
    content_type: "text/html; charset=utf-8",
    etag: fnv1a(API_DOCS_HTML),
    csp: API_DOCS_CSP,
};
const API_DOCS_SCRIPT: Asset = Asset {
    body: API_DOCS_JS,
    content_type: "text/javascript; charset=utf-8",
    etag: fnv1a(API_DOCS_JS),
    csp: API_DOCS_CSP,
};
/// Hashing 4 MB at compile time is slow: the pin (version and digest) is the ETag's input.
const SCALAR_ASSET: Asset = Asset {
    body: SCALAR_JS,
    content_type: "text/javascript; charset=utf-8",
    etag: fnv1a(SCALAR.as_bytes()),
    csp: API_DOCS_CSP,
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
        HeaderValue::from_static(asset.csp),
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
        ("file" = String, Path, description = "`app.js`, `style.css`, `api-docs.js` or `scalar.js`"),
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
        "api-docs.js" => &API_DOCS_SCRIPT,
        "scalar.js" => &SCALAR_ASSET,
        _ => return Err(ApiError::NotFound(format!("no asset named '{file}'"))),
    };
    Ok(serve(asset, &headers))
}

/// `GET /api-docs`: the API reference, rendered from `/openapi.json` by the embedded Scalar.
#[utoipa::path(
    get,
    operation_id = "webApiDocs",
    path = "/api-docs",
    tag = "service",
    security(()),
    params(("If-None-Match" = Option<String>, Header, description = "The page's ETag (304)")),
    responses(
        (status = 200, description = "The API reference page", content_type = "text/html", body = String),
        (status = 304, description = "Not modified"),
    )
)]
pub async fn api_docs(headers: HeaderMap) -> Response {
    serve(&API_DOCS, &headers)
}
