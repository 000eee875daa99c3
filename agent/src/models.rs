//! The configured model: the model names the runtime knows, the settings of the HTTP
//! providers, and [`provider_for`], which picks the [`LlmProvider`] for a model name. It lives
//! apart from the trait ([`crate::provider`]) because it must name every implementation, and
//! the implementations depend on the trait.

use std::sync::Arc;
use std::time::Duration;

use secrecy::SecretString;

use crate::error::AgentError;
use crate::llm::HttpSettings;
use crate::metrics::metered;
use crate::provider::LlmProvider;

/// Model names [`provider_for`] knows.
pub const AVAILABLE_MODELS: &[&str] = &["demo", "openai/<model>", "anthropic/<model>"];

/// Default `max_tokens` of each Anthropic call.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;
/// Default Anthropic extended-thinking budget: off.
pub const DEFAULT_ANTHROPIC_THINKING_BUDGET: u32 = 0;

/// Where the HTTP providers are and how they are called. The keys are [`SecretString`]s, so
/// `Debug` (and so any log of these settings) never shows them; only the providers read them,
/// where they build the request's header.
#[derive(Debug, Clone)]
pub struct LlmSettings {
    /// Base of the OpenAI-compatible API, before `/chat/completions`.
    pub openai_base_url: String,
    pub openai_api_key: Option<SecretString>,
    /// Base of the Anthropic API, before `/v1/messages`.
    pub anthropic_base_url: String,
    pub anthropic_api_key: Option<SecretString>,
    /// `max_tokens` of each Anthropic call (the API requires one).
    pub max_tokens: u32,
    /// Anthropic extended thinking: the `budget_tokens` asked for (0: off; else at least 1024
    /// and below `max_tokens`).
    pub anthropic_thinking_budget: u32,
    pub http: HttpSettings,
}

impl Default for LlmSettings {
    fn default() -> Self {
        LlmSettings {
            openai_base_url: crate::llm::openai::DEFAULT_BASE_URL.into(),
            openai_api_key: None,
            anthropic_base_url: crate::llm::anthropic::DEFAULT_BASE_URL.into(),
            anthropic_api_key: None,
            max_tokens: DEFAULT_MAX_TOKENS,
            anthropic_thinking_budget: DEFAULT_ANTHROPIC_THINKING_BUDGET,
            http: HttpSettings::default(),
        }
    }
}

/// The provider for a configured model name: `demo`, `openai/<model>` or
/// `anthropic/<model>` (the model name may itself contain `/`). A key is required when the
/// provider's public endpoint is used; a local or proxy base URL may go without.
pub fn provider_for(
    model: &str,
    demo_delay: Duration,
    llm: &LlmSettings,
) -> Result<Arc<dyn LlmProvider>, AgentError> {
    let unknown = || AgentError::UnknownModel {
        model: model.to_string(),
        available: AVAILABLE_MODELS.join(", "),
    };
    if model == "demo" {
        return Ok(metered(
            "demo",
            Arc::new(crate::demo::DemoProvider::new(demo_delay)),
        ));
    }
    let (kind, name) = model.split_once('/').ok_or_else(unknown)?;
    if name.trim().is_empty() {
        return Err(unknown());
    }
    match kind {
        "openai" => {
            if llm.openai_api_key.is_none()
                && llm.openai_base_url.trim_end_matches('/') == crate::llm::openai::DEFAULT_BASE_URL
            {
                return Err(AgentError::MissingKey {
                    model: model.to_string(),
                    variable: "OPENAI_API_KEY",
                });
            }
            Ok(metered(
                "openai",
                Arc::new(crate::llm::OpenAiProvider::new(
                    name,
                    &llm.openai_base_url,
                    llm.openai_api_key.clone(),
                    llm.http.clone(),
                )),
            ))
        }
        "anthropic" => {
            if llm.anthropic_api_key.is_none()
                && llm.anthropic_base_url.trim_end_matches('/')
                    == crate::llm::anthropic::DEFAULT_BASE_URL
            {
                return Err(AgentError::MissingKey {
                    model: model.to_string(),
                    variable: "ANTHROPIC_API_KEY",
                });
            }
            let budget = llm.anthropic_thinking_budget;
            if budget > 0 && (budget < 1024 || budget >= llm.max_tokens) {
                return Err(AgentError::InvalidSetting(format!(
                    "the Anthropic thinking budget ({budget}) must be at least 1024 and below \
                     max_tokens ({})",
                    llm.max_tokens
                )));
            }
            Ok(metered(
                "anthropic",
                Arc::new(
                    crate::llm::AnthropicProvider::new(
                        name,
                        &llm.anthropic_base_url,
                        llm.anthropic_api_key.clone(),
                        llm.max_tokens,
                        llm.http.clone(),
                    )
                    .with_thinking(budget),
                ),
            ))
        }
        _ => Err(unknown()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_keys() {
        let settings = LlmSettings {
            openai_api_key: Some("sk-openai-very-secret".into()),
            anthropic_api_key: Some("sk-ant-very-secret".into()),
            ..LlmSettings::default()
        };
        for shown in [format!("{settings:?}"), format!("{settings:#?}")] {
            assert!(!shown.contains("very-secret"), "{shown}");
            // Whether a key is set still shows.
            assert!(shown.contains("openai_api_key: Some("), "{shown}");
        }
        let runtime = crate::RuntimeConfig {
            llm: settings,
            ..crate::RuntimeConfig::default()
        };
        assert!(!format!("{runtime:?}").contains("very-secret"));
    }
}
