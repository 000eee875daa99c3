//! A `reqwest` resolver for clients that send to hosts users name (webhook URLs): a name any
//! of whose addresses is not public ([`crate::non_public_class`]) fails to resolve, so nothing
//! connects to it. The client connects to the very addresses checked, so a DNS answer that
//! changes between lookups (rebinding) cannot slip a private address past the check. IP
//! literals never reach a resolver: whoever accepts the URL judges those. Names in `exempt`
//! (`localhost`, which the webhook policy allows over http for development) resolve unchecked.

use std::net::{IpAddr, SocketAddr};

use crate::non_public_class;

/// Why a name did not resolve.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ResolveError {
    #[error("cannot resolve {0}")]
    Lookup(String),
    #[error("refused: {host} resolves to {addr}, which is {class} address")]
    NotPublic {
        host: String,
        addr: IpAddr,
        class: &'static str,
    },
}

/// The resolver; `Default` exempts no name.
#[derive(Debug, Clone, Default)]
pub struct PublicResolver {
    exempt: Vec<String>,
}

impl PublicResolver {
    /// A resolver that leaves `names` (compared without case) unchecked.
    pub fn exempting(names: &[&str]) -> Self {
        PublicResolver {
            exempt: names.iter().map(|n| n.to_ascii_lowercase()).collect(),
        }
    }
}

/// `addrs`, what `host` resolved to, when every one is public.
pub fn public_addresses(
    host: &str,
    addrs: Vec<SocketAddr>,
) -> Result<Vec<SocketAddr>, ResolveError> {
    if addrs.is_empty() {
        return Err(ResolveError::Lookup(host.to_string()));
    }
    for a in &addrs {
        if let Some(class) = non_public_class(a.ip()) {
            return Err(ResolveError::NotPublic {
                host: host.to_string(),
                addr: a.ip(),
                class,
            });
        }
    }
    Ok(addrs)
}

impl reqwest::dns::Resolve for PublicResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_ascii_lowercase();
        let exempt = self.exempt.contains(&host);
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map_err(|_| ResolveError::Lookup(host.clone()))?
                .collect();
            let addrs = if exempt {
                addrs
            } else {
                public_addresses(&host, addrs)?
            };
            let addrs: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use reqwest::dns::Resolve;

    use super::*;

    async fn resolve(resolver: &PublicResolver, host: &str) -> Result<Vec<SocketAddr>, String> {
        match resolver.resolve(host.parse().unwrap()).await {
            Ok(addrs) => Ok(addrs.collect()),
            Err(e) => Err(e.to_string()),
        }
    }

    #[test]
    fn every_address_must_be_public() {
        let public: SocketAddr = "93.184.216.34:0".parse().unwrap();
        let private: SocketAddr = "10.1.2.3:0".parse().unwrap();
        assert_eq!(public_addresses("a", vec![public]), Ok(vec![public]));
        assert_eq!(
            public_addresses("a", vec![public, private]),
            Err(ResolveError::NotPublic {
                host: "a".into(),
                addr: private.ip(),
                class: "a private"
            })
        );
        assert_eq!(
            public_addresses("a", vec![]),
            Err(ResolveError::Lookup("a".into()))
        );
    }

    /// `localhost` stands in for a public name whose DNS answer is a loopback address.
    #[tokio::test]
    async fn a_name_that_resolves_to_a_loopback_address_does_not_resolve_unless_exempt() {
        let err = resolve(&PublicResolver::default(), "localhost")
            .await
            .unwrap_err();
        assert!(err.contains("loopback"), "{err}");
        let addrs = resolve(&PublicResolver::exempting(&["LocalHost"]), "localhost")
            .await
            .unwrap();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()), "{addrs:?}");
    }

    /// Through a client: the request fails before anything connects.
    #[tokio::test]
    async fn a_client_with_the_resolver_never_connects_to_a_refused_name() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = reqwest::Client::builder()
            .no_proxy()
            .dns_resolver(std::sync::Arc::new(PublicResolver::default()))
            .build()
            .unwrap();
        let err = client
            .get(format!("http://localhost:{port}/"))
            .send()
            .await
            .unwrap_err();
        assert!(err.is_connect(), "{err:?}");
        let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
        assert!(accepted.is_err(), "something connected");
    }
}
