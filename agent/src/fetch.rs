//! Outbound HTTP for tools: owns the rules every URL a tool fetches must pass.
//!
//! Only `http`/`https`. The host is resolved here and every address it resolves to must be
//! public, as `threadstream_net_policy` judges it (no loopback, private, link-local, CGNAT,
//! multicast, documentation, reserved or unspecified address, nor an IPv6 form carrying one);
//! the connection is then pinned to the checked address, so a DNS answer that changes between
//! the check and the connect (rebinding) cannot move it.
//! Redirects are followed here, not by the client, and every hop is checked the same way. The
//! body is read chunk by chunk up to a size cap, and the whole fetch has a time cap.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use thiserror::Error;

// Which addresses are public is decided by `threadstream_net_policy`, for the webhooks too;
// re-exported for the callers and tests that name them through this module.
pub use threadstream_net_policy::{is_public, non_public_class};

/// Limits of one fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPolicy {
    /// Largest body read; a longer one fails (it is never truncated silently).
    pub max_bytes: usize,
    /// The whole fetch, redirects included.
    pub timeout: Duration,
    /// Redirects followed at most.
    pub max_redirects: usize,
    /// Exact addresses allowed although not public. Empty in the server: only tests use it,
    /// to fetch from servers they run on loopback.
    pub allowed: HashSet<SocketAddr>,
}

impl Default for FetchPolicy {
    fn default() -> Self {
        FetchPolicy {
            max_bytes: 1024 * 1024,
            timeout: Duration::from_secs(10),
            max_redirects: 5,
            allowed: HashSet::new(),
        }
    }
}

/// Why a fetch did not happen or did not finish.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum FetchError {
    #[error("invalid URL: {0}")]
    InvalidUrl(String),
    #[error("refused: only http and https URLs can be fetched, not '{0}'")]
    Scheme(String),
    #[error("refused: {addr} is {class} address")]
    NotPublic { addr: IpAddr, class: &'static str },
    #[error("cannot resolve {0}")]
    Resolve(String),
    #[error("refused: more than {0} redirects")]
    TooManyRedirects(usize),
    #[error("refused: the response is larger than {0} bytes")]
    TooLarge(usize),
    #[error("refused: the fetch took longer than {0} s")]
    Timeout(u64),
    #[error("the response has content type '{0}', which is not text")]
    NotText(String),
    #[error("request failed: {0}")]
    Http(String),
}

/// A fetched response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// The URL that answered (after redirects).
    pub url: String,
    pub status: u16,
    pub content_type: String,
    pub body: String,
}

/// The first of `addrs` (what `host` resolved to) when every one is public or in `allowed`.
fn check_addresses(
    host: &str,
    addrs: &[SocketAddr],
    allowed: &HashSet<SocketAddr>,
) -> Result<SocketAddr, FetchError> {
    let first = *addrs
        .first()
        .ok_or_else(|| FetchError::Resolve(host.to_string()))?;
    for a in addrs {
        if allowed.contains(a) {
            continue;
        }
        if let Some(class) = non_public_class(a.ip()) {
            return Err(FetchError::NotPublic {
                addr: a.ip(),
                class,
            });
        }
    }
    Ok(first)
}

/// Fetches URLs under a [`FetchPolicy`].
#[derive(Debug, Clone, Default)]
pub struct SafeFetcher {
    policy: FetchPolicy,
}

impl SafeFetcher {
    pub fn new(policy: FetchPolicy) -> Self {
        SafeFetcher { policy }
    }

    /// GETs `url`, following redirects, under the policy.
    pub async fn fetch(&self, url: &str) -> Result<Fetched, FetchError> {
        let secs = self.policy.timeout.as_secs().max(1);
        tokio::time::timeout(self.policy.timeout, self.fetch_unbounded(url))
            .await
            .map_err(|_| FetchError::Timeout(secs))?
    }

    async fn fetch_unbounded(&self, url: &str) -> Result<Fetched, FetchError> {
        let mut url =
            reqwest::Url::parse(url).map_err(|e| FetchError::InvalidUrl(e.to_string()))?;
        let mut redirects = 0;
        loop {
            let response = self.get_once(&url).await?;
            if response.status().is_redirection() {
                let Some(location) = response.headers().get(reqwest::header::LOCATION) else {
                    return self.read(url, response).await;
                };
                redirects += 1;
                if redirects > self.policy.max_redirects {
                    return Err(FetchError::TooManyRedirects(self.policy.max_redirects));
                }
                let location = location
                    .to_str()
                    .map_err(|_| FetchError::InvalidUrl("redirect location is not text".into()))?;
                url = url
                    .join(location)
                    .map_err(|e| FetchError::InvalidUrl(e.to_string()))?;
                continue;
            }
            return self.read(url, response).await;
        }
    }

    /// One request to `url`, on a connection pinned to its checked address.
    async fn get_once(&self, url: &reqwest::Url) -> Result<reqwest::Response, FetchError> {
        let scheme = url.scheme();
        if scheme != "http" && scheme != "https" {
            return Err(FetchError::Scheme(scheme.to_string()));
        }
        let host = url
            .host_str()
            .ok_or_else(|| FetchError::InvalidUrl("no host".into()))?
            .to_string();
        let port = url
            .port_or_known_default()
            .ok_or_else(|| FetchError::InvalidUrl("no port".into()))?;
        let addr = self.checked_address(&host, port).await?;
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            // Pinned: the connection goes to the address just checked, whatever DNS says next.
            .resolve(host.trim_start_matches('[').trim_end_matches(']'), addr)
            .build()
            .map_err(|e| FetchError::Http(e.to_string()))?;
        client
            .get(url.clone())
            .send()
            .await
            .map_err(|e| FetchError::Http(e.without_url().to_string()))
    }

    /// The address to connect to for `host:port`: every address it resolves to must pass.
    async fn checked_address(&self, host: &str, port: u16) -> Result<SocketAddr, FetchError> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => tokio::net::lookup_host((bare, port))
                .await
                .map_err(|_| FetchError::Resolve(bare.to_string()))?
                .collect(),
        };
        check_addresses(bare, &addrs, &self.policy.allowed)
    }

    /// The body of `response`, within the size cap, if it is text.
    async fn read(
        &self,
        url: reqwest::Url,
        mut response: reqwest::Response,
    ) -> Result<Fetched, FetchError> {
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let essence = content_type
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let texty = essence.is_empty()
            || essence.starts_with("text/")
            || essence.ends_with("json")
            || essence.ends_with("xml")
            || essence == "application/javascript";
        if !texty {
            return Err(FetchError::NotText(content_type));
        }
        let max = self.policy.max_bytes;
        if response.content_length().is_some_and(|n| n > max as u64) {
            return Err(FetchError::TooLarge(max));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| FetchError::Http(e.without_url().to_string()))?
        {
            if body.len() + chunk.len() > max {
                return Err(FetchError::TooLarge(max));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Fetched {
            url: url.to_string(),
            status,
            content_type,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    }
}
