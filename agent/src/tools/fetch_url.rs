//! `fetch-url`: a public http(s) page, fetched under the configured [`FetchPolicy`]
//! (offered only when one is configured: it lets the model reach the network).
//!
//! [`FetchPolicy`]: crate::fetch::FetchPolicy

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use threadstream_domain::event::JsonObject;

use super::args::{self, NonBlank};
use super::{Tool, ToolCtx};
use crate::error::ToolFailure;
use crate::fetch::SafeFetcher;

pub const FETCH_URL: &str = "fetch-url";

// Field doc comments are the descriptions the model reads.
#[derive(Deserialize, JsonSchema)]
struct FetchUrlArgs {
    /// the http(s) URL
    url: NonBlank,
}

/// Fetches a public http(s) URL through [`SafeFetcher`].
pub struct FetchUrl {
    fetcher: SafeFetcher,
}

impl FetchUrl {
    pub fn new(fetcher: SafeFetcher) -> Self {
        FetchUrl { fetcher }
    }
}

impl Tool for FetchUrl {
    fn name(&self) -> &str {
        FETCH_URL
    }
    fn description(&self) -> &str {
        "Fetch a public http or https URL and return its status, content type and text. \
         Private, loopback and link-local addresses are refused; responses over 1 MB or slower \
         than 10 s fail."
    }
    fn parameters(&self) -> Value {
        args::schema::<FetchUrlArgs>()
    }
    fn status_message(&self, args: &JsonObject) -> Option<String> {
        args.get("url")
            .and_then(Value::as_str)
            .map(|u| format!("Fetching {u}…"))
    }
    fn execute<'a>(
        &'a self,
        _ctx: &'a ToolCtx<'a>,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            let FetchUrlArgs { url } = args::parse(&args)?;
            let page = self
                .fetcher
                .fetch(url.as_str())
                .await
                .map_err(|e| ToolFailure::failed(e.to_string()))?;
            Ok(json!({
                "url": page.url,
                "status": page.status,
                "contentType": page.content_type,
                "body": page.body,
            }))
        })
    }
}
