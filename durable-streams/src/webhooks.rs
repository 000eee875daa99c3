//! Which URLs subscriptions may send webhooks to, and what sending them needs: the signing
//! key and one HTTP client ([`webhook_client`], which judges a host name's address when it is
//! resolved, at each delivery).

use std::net::{IpAddr, Ipv4Addr};

use threadstream_net_policy::PublicResolver;

use crate::signing::Signing;

/// What delivering webhooks needs: the signing key and one HTTP client. Cheap to clone.
#[derive(Clone)]
pub struct Webhooks {
    pub signing: Signing,
    pub client: reqwest::Client,
}

/// Which webhook URLs subscriptions may name (`--webhook-targets`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum WebhookTargets {
    /// The reference server's policy: `http` only to this machine (`localhost`, `127.x.y.z`);
    /// otherwise `https`, and not to an IPv4 address that is not public (private, loopback,
    /// link-local, CGNAT, …, as `threadstream_net_policy` judges it), nor to an IPv6 literal.
    #[default]
    Public,
    /// Only this machine (`http` or `https` to `localhost` or `127.x.y.z`): for tests and
    /// machines that must not reach out.
    Loopback,
}

/// Whether a subscription may name `raw` as its webhook under `targets`; the error says why
/// not. Checked when a subscription is created, before anything is sent anywhere. A host name
/// is not resolved here (its answer may change): the server's webhook client judges it at
/// each delivery.
pub fn check_webhook_url(raw: &str, targets: WebhookTargets) -> Result<(), String> {
    let url =
        reqwest::Url::parse(raw).map_err(|_| "webhook.url must be a valid URL".to_string())?;
    let host = url.host_str().unwrap_or("").to_ascii_lowercase();
    // The operator's exemption, not a judgement of publicness: `http` (and, under
    // `Loopback`, everything) may go to this machine.
    let loopback_v4 = host.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback());
    if targets == WebhookTargets::Loopback {
        let web = matches!(url.scheme(), "http" | "https");
        return if web && (host == "localhost" || loopback_v4) {
            Ok(())
        } else {
            Err("this server sends webhooks only to localhost or 127.0.0.x \
                 (--webhook-targets loopback)"
                .into())
        };
    }
    match url.scheme() {
        "http" if host == "localhost" || loopback_v4 => Ok(()),
        "http" => Err("http webhook URLs are only allowed for localhost or 127.0.0.x".into()),
        "https" if host == "localhost" => {
            Err("localhost webhook URLs must use http for dev".into())
        }
        "https" => match url.host() {
            Some(url::Host::Ipv4(ip)) => {
                match threadstream_net_policy::non_public_class(IpAddr::V4(ip)) {
                    Some(class) => Err(format!(
                        "webhook.url must not target {class} address ({ip})"
                    )),
                    None => Ok(()),
                }
            }
            Some(url::Host::Ipv6(_)) => Err("IPv6 webhook hosts are not accepted".into()),
            Some(_) => Ok(()),
            None => Err("webhook.url must name a host".into()),
        },
        _ => Err("webhook.url must use https".into()),
    }
}

/// The client webhooks are sent with. Under [`WebhookTargets::Public`] a host name is judged
/// when it is resolved, at each delivery ([`PublicResolver`]): one whose DNS answer is not a
/// public address (private, loopback, link-local, …) fails to resolve and nothing connects,
/// however its answer changes between lookups. No proxy is used, since a proxy would resolve
/// the name itself. Redirects are not followed: a webhook's answer is its status.
pub fn webhook_client(targets: WebhookTargets) -> reqwest::Result<reqwest::Client> {
    let builder = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
    match targets {
        WebhookTargets::Public => builder
            .no_proxy()
            .dns_resolver(std::sync::Arc::new(PublicResolver::exempting(&[
                "localhost",
            ])))
            .build(),
        // URLs are `localhost` or a 127.x literal (checked at creation).
        WebhookTargets::Loopback => builder.build(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_urls_follow_the_reference_policy() {
        for ok in [
            "http://127.0.0.1:4000/hook",
            "http://localhost/x",
            "https://hooks.example.com/x",
            "https://93.184.216.34/x",
        ] {
            assert_eq!(
                check_webhook_url(ok, WebhookTargets::Public),
                Ok(()),
                "{ok}"
            );
        }
        for bad in [
            "http://10.0.0.1/hook",
            "http://example.com/hook",
            "https://10.1.2.3/x",
            "https://192.168.0.1/x",
            "https://169.254.169.254/latest",
            "https://127.0.0.1/x",
            "https://localhost/x",
            "https://[::1]/x",
            "https://[2606:4700::1111]/x",
            "https://0.0.0.0/x",
            "https://100.64.0.1/x",
            "https://192.0.0.9/x",
            "https://192.0.2.1/x",
            "https://198.18.0.1/x",
            "https://224.0.0.1/x",
            "https://240.0.0.1/x",
            "https://255.255.255.255/x",
            "ftp://example.com/x",
            "not a url",
        ] {
            assert!(
                check_webhook_url(bad, WebhookTargets::Public).is_err(),
                "{bad}"
            );
        }
        // A refused IPv4 literal is named with its class, as `threadstream_net_policy` has it.
        assert_eq!(
            check_webhook_url("https://100.64.0.1/x", WebhookTargets::Public),
            Err("webhook.url must not target a shared (CGNAT) address (100.64.0.1)".into())
        );
        assert_eq!(
            check_webhook_url("https://169.254.169.254/latest", WebhookTargets::Public),
            Err("webhook.url must not target a link-local address (169.254.169.254)".into())
        );
        let loopback = WebhookTargets::Loopback;
        assert_eq!(check_webhook_url("http://127.0.0.1:9/h", loopback), Ok(()));
        assert_eq!(check_webhook_url("https://localhost/h", loopback), Ok(()));
        assert!(check_webhook_url("https://hooks.example.com/x", loopback).is_err());
        assert!(check_webhook_url("https://93.184.216.34/x", loopback).is_err());
    }
}
