//! Upstream AG-UI agents (`--agui-agent NAME=URL`): agent servers that speak AG-UI (pydantic-ai's
//! `AGUIAdapter`, LangGraph through `ag-ui-langgraph`, …), run through threadstream so that what
//! they stream is stored in the thread's log and served on every protocol.
//!
//! - [`input`]: the `RunAgentInput` sent upstream, its messages rebuilt from the log;
//! - [`events`]: the upstream's AG-UI events mapped to this log's events (pure);
//! - the run itself (the request, its stream, the tool calls left to the client) is the
//!   orchestrator's `upstream` entry, so cancel, failure and restart end it as they end the
//!   built-in agent's runs.

pub mod events;
pub mod input;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use threadstream_net_policy::PublicResolver;

/// Default for `--agui-agent-timeout`: the longest silence of an upstream's stream (and its
/// wait for the answer's headers) before the run ends with an error.
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long connecting to an upstream may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One named upstream agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AguiAgent {
    /// `[A-Za-z0-9_-]{1,64}`: the `{name}` of `POST /agui/agents/{name}/run`.
    pub name: String,
    pub url: reqwest::Url,
}

/// Which upstream URLs `--agui-agent` may name (`--agui-agent-targets`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AguiTargets {
    /// Public addresses only: a literal address must be public, and a host name is judged
    /// when it is resolved, at each request (as webhooks are).
    #[default]
    Public,
    /// Only this machine (`localhost`, `127.x.y.z`): agents run beside the server, and tests.
    Loopback,
    /// Any address: agents on the operator's private network.
    Any,
}

impl std::str::FromStr for AguiTargets {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "public" => Ok(AguiTargets::Public),
            "loopback" => Ok(AguiTargets::Loopback),
            "any" => Ok(AguiTargets::Any),
            _ => Err(format!(
                "'{s}' is not a target policy: public, loopback or any"
            )),
        }
    }
}

/// `NAME=URL`, as `--agui-agent` takes it.
pub fn parse_agent(spec: &str) -> Result<AguiAgent, String> {
    let (name, url) = spec
        .split_once('=')
        .ok_or_else(|| format!("'{spec}': an AG-UI agent is NAME=URL"))?;
    let name = name.trim();
    let valid_name = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !valid_name {
        return Err(format!(
            "'{name}': an AG-UI agent's name is 1 to 64 characters of A-Z, a-z, 0-9, - and _"
        ));
    }
    let url = reqwest::Url::parse(url.trim()).map_err(|e| format!("'{url}': {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!("'{url}': an AG-UI agent's URL is http or https"));
    }
    Ok(AguiAgent {
        name: name.to_string(),
        url,
    })
}

/// Whether `url` may be named under `targets`; the error says why not. A host name is judged
/// at each request under [`AguiTargets::Public`] (see [`AguiAgents::new`]).
pub fn check_url(url: &reqwest::Url, targets: AguiTargets) -> Result<(), String> {
    let loopback = match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    match targets {
        AguiTargets::Any => Ok(()),
        AguiTargets::Loopback if loopback => Ok(()),
        AguiTargets::Loopback => Err(format!(
            "{url}: only localhost or 127.x agents are allowed (--agui-agent-targets loopback)"
        )),
        AguiTargets::Public if loopback => Err(format!(
            "{url}: a loopback agent needs --agui-agent-targets loopback (or any)"
        )),
        AguiTargets::Public => {
            let literal: Option<IpAddr> = match url.host() {
                Some(url::Host::Ipv4(ip)) => Some(ip.into()),
                Some(url::Host::Ipv6(ip)) => Some(ip.into()),
                _ => None,
            };
            match literal.and_then(threadstream_net_policy::non_public_class) {
                Some(class) => Err(format!(
                    "{url}: {class} address; allow it with --agui-agent-targets any"
                )),
                None => Ok(()),
            }
        }
    }
}

/// The configured upstream agents and the one HTTP client that calls them. Cheap to clone.
#[derive(Clone)]
pub struct AguiAgents {
    agents: Arc<BTreeMap<String, AguiAgent>>,
    client: reqwest::Client,
    stall_timeout: Duration,
}

/// How `--agui-agent`, `--agui-agent-targets` and `--agui-agent-timeout` configure the agents.
#[derive(Debug, Clone)]
pub struct AguiSettings {
    pub agents: Vec<AguiAgent>,
    pub targets: AguiTargets,
    pub stall_timeout: Duration,
}

impl Default for AguiSettings {
    fn default() -> Self {
        AguiSettings {
            agents: Vec::new(),
            targets: AguiTargets::default(),
            stall_timeout: DEFAULT_STALL_TIMEOUT,
        }
    }
}

impl AguiAgents {
    /// Checks every agent against the policy (a name given twice, or a URL it forbids, is an
    /// error) and builds the client. Under [`AguiTargets::Public`] the client resolves host
    /// names through [`PublicResolver`], so a name whose answer is not public never connects.
    /// Redirects are not followed: an agent's answer is its stream.
    pub fn new(settings: AguiSettings) -> Result<Self, String> {
        let mut agents = BTreeMap::new();
        for a in settings.agents {
            check_url(&a.url, settings.targets)?;
            let name = a.name.clone();
            if agents.insert(name.clone(), a).is_some() {
                return Err(format!("the AG-UI agent '{name}' is named twice"));
            }
        }
        let builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT);
        let client = match settings.targets {
            AguiTargets::Public => builder
                .no_proxy()
                .dns_resolver(Arc::new(PublicResolver::exempting(&[])))
                .build(),
            AguiTargets::Loopback => builder.no_proxy().build(),
            AguiTargets::Any => builder.build(),
        }
        .map_err(|e| format!("cannot build the AG-UI agents' HTTP client: {e}"))?;
        Ok(AguiAgents {
            agents: Arc::new(agents),
            client,
            stall_timeout: settings.stall_timeout,
        })
    }

    /// No agents.
    pub fn none() -> Self {
        AguiAgents::new(AguiSettings::default()).expect("no agents, nothing to refuse")
    }

    /// The agent named `name`.
    pub fn get(&self, name: &str) -> Option<&AguiAgent> {
        self.agents.get(name)
    }

    pub(crate) fn client(&self) -> &reqwest::Client {
        &self.client
    }

    pub(crate) fn stall_timeout(&self) -> Duration {
        self.stall_timeout
    }
}

/// What a client's `RunAgentInput` carries besides its messages, passed on to the upstream as
/// sent (the messages are rebuilt from the log).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClientInput {
    /// Tools the client offers (frontend tools): a call of one ends the upstream's run and
    /// waits, as a confirmation, for the client's answer.
    pub tools: Vec<Value>,
    pub state: Value,
    pub context: Vec<Value>,
    pub forwarded_props: Value,
}

/// A run of an upstream agent, as the runtime spawns it.
#[derive(Clone)]
pub struct UpstreamRun {
    pub agent: AguiAgent,
    pub input: ClientInput,
    pub(crate) agents: AguiAgents,
}

impl std::fmt::Debug for AguiAgents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AguiAgents")
            .field("agents", &self.agents)
            .field("stall_timeout", &self.stall_timeout)
            .finish()
    }
}
