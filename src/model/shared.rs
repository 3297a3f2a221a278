//! [`Shared`]: what every model of the process shares — the HTTP clients, one rate limiter per provider
//! endpoint, the price table, and how API keys are found — and [`Settings`], one adapter's resolved options.
//!
//! Create one `Shared` per process (the daemon, or `agentd run`) and build every task's model with it, so
//! that concurrent tasks draw from one limiter per provider instead of multiplying a retry storm.
//!
//! Keys: `api_key_file` wins over `api_key_env`, which defaults to `ANTHROPIC_API_KEY`, `OPENAI_API_KEY`,
//! `GEMINI_API_KEY`; `openai-compatible` has no default variable. A key is only ever sent to the origin
//! (scheme, host, port) of the configured `base_url` (or the provider's default): a task that names another
//! `base_url` for `openai-compatible` gets no key, so a task file cannot make agentd send a key elsewhere.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::ModelError;
use super::http::{Auth, Endpoint, RetryPolicy, Secret, Timeouts, Transport};
use super::pricing::PriceTable;
use crate::budget::{Budget, Limits, LocalBudget};
use crate::config::Price;
use crate::config::{Config, ModelConfig};
use crate::task::ModelOptions;

/// Reads an environment variable (the process's, or a test's map).
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Process-wide model plumbing (see the module docs).
pub struct Shared {
    transport: Transport,
    /// The vendors' per-minute budgets: this process's, or the fleet's ([`Shared::with_budget`]).
    budget: Arc<dyn Budget>,
    prices: PriceTable,
    models: BTreeMap<String, ModelConfig>,
    env: EnvLookup,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("providers", &self.models.keys().collect::<Vec<_>>()).finish()
    }
}

/// A provider's defaults.
struct Defaults {
    base_url: &'static str,
    key_env: Option<&'static str>,
    model: Option<&'static str>,
    auth: Auth,
    stream: bool,
}

fn defaults(provider: &str) -> Defaults {
    match provider {
        "anthropic" => Defaults {
            base_url: "https://api.anthropic.com",
            key_env: Some("ANTHROPIC_API_KEY"),
            model: Some("claude-sonnet-4-5"),
            auth: Auth::Header("x-api-key"),
            stream: true,
        },
        "openai" => Defaults {
            base_url: "https://api.openai.com/v1",
            key_env: Some("OPENAI_API_KEY"),
            model: Some("computer-use-preview"),
            auth: Auth::Bearer,
            stream: true,
        },
        "gemini" => Defaults {
            base_url: "https://generativelanguage.googleapis.com/v1beta",
            key_env: Some("GEMINI_API_KEY"),
            model: Some("gemini-2.5-computer-use-preview-10-2025"),
            auth: Auth::Header("x-goog-api-key"),
            stream: true,
        },
        _ => Defaults {
            base_url: "http://127.0.0.1:8000/v1",
            key_env: None,
            model: None,
            auth: Auth::Bearer,
            stream: false,
        },
    }
}

/// The base URL a provider is reached at when `[models.NAME] base_url` is not set.
pub fn default_base_url(provider: &str) -> &'static str {
    defaults(provider).base_url
}

/// One adapter's options, resolved from the task, the config and the provider's defaults.
#[derive(Debug, Clone)]
pub struct Settings {
    pub provider: &'static str,
    pub model: String,
    /// Without a trailing `/`.
    pub base_url: String,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub tool_version: Option<String>,
    pub stream: bool,
    pub price: Option<Price>,
    pub endpoint: Endpoint,
    pub config: ModelConfig,
}

impl Shared {
    /// With the process environment.
    pub fn new(config: &Config) -> Self {
        Self::with_env(config, Arc::new(|name: &str| std::env::var(name).ok()))
    }

    pub fn with_env(config: &Config, env: EnvLookup) -> Self {
        let overrides = config.models.iter().map(|(name, m)| (name.clone(), m.prices.clone())).collect();
        Self {
            transport: Transport::default(),
            budget: Arc::new(LocalBudget::default()),
            prices: PriceTable::new(overrides),
            models: config.models.clone(),
            env,
        }
    }

    /// Keeps the vendors' per-minute budgets in `budget` (the fleet's, on the PostgreSQL queue) instead of in
    /// this process.
    pub fn with_budget(mut self, budget: Arc<dyn Budget>) -> Self {
        self.budget = budget;
        self
    }

    pub fn prices(&self) -> &PriceTable {
        &self.prices
    }

    /// The model id a task of `provider` with `options` runs with: the task's, else `[models.PROVIDER] model`,
    /// else the provider's default; `None` when none is set (building the model then fails).
    pub fn model_id(&self, provider: &str, options: &ModelOptions) -> Option<String> {
        options
            .model
            .clone()
            .or_else(|| self.models.get(provider).and_then(|config| config.model.clone()))
            .or_else(|| defaults(provider).model.map(str::to_string))
    }

    /// Resolves one adapter's settings. `task_base_url` is a per-task endpoint (openai-compatible only).
    pub fn settings(
        &self,
        provider: &'static str,
        options: &ModelOptions,
        tool_version: Option<&str>,
        task_base_url: Option<&str>,
    ) -> Result<Settings, ModelError> {
        let config = self.models.get(provider).cloned().unwrap_or_default();
        let defaults = defaults(provider);
        let configured_url = config.base_url.clone().unwrap_or_else(|| defaults.base_url.to_string());
        let base_url = task_base_url.unwrap_or(&configured_url).trim_end_matches('/').to_string();
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(ModelError::Config(format!(
                "{provider}: base_url {base_url:?} must start with http:// or https://"
            )));
        }
        let model = self.model_id(provider, options).ok_or_else(|| {
            ModelError::Config(format!("{provider}: no model id: set `model` in the task or in [models.{provider}]"))
        })?;
        let key = if origin(&base_url) == origin(&configured_url) {
            self.api_key(provider, &config, defaults.key_env)?
        } else {
            tracing::info!(provider, "the task's base_url is not the configured one; no API key is sent to it");
            None
        };
        if key.is_none() && defaults.key_env.is_some() {
            let var = config.api_key_env.as_deref().or(defaults.key_env).unwrap_or_default();
            return Err(ModelError::Config(format!(
                "{provider}: no API key: set the environment variable {var} (or api_key_env / api_key_file in \
                 [models.{provider}])"
            )));
        }
        let secs = |v: Option<u64>, default: u64| Duration::from_secs(v.unwrap_or(default).max(1));
        let timeouts = Timeouts {
            connect: secs(config.connect_timeout_secs, 5),
            idle: secs(config.idle_timeout_secs, 60),
            total: secs(config.timeout_secs, 600),
        };
        let retry = RetryPolicy {
            max_retries: config.max_retries.unwrap_or(4),
            rate_limit_wait: secs(config.rate_limit_wait_secs, 600),
            ..RetryPolicy::default()
        };
        let endpoint_key = format!("{provider} {}", origin(&base_url));
        let endpoint = Endpoint {
            provider,
            client: self.transport.client(timeouts.connect)?,
            limiter: self.transport.limiter(&endpoint_key, config.max_concurrency.unwrap_or(8)),
            budget: self.budget.clone(),
            limits: Limits {
                requests_per_minute: config.requests_per_minute,
                tokens_per_minute: config.tokens_per_minute,
            },
            budget_key: endpoint_key,
            retry,
            timeouts,
            key,
            auth: defaults.auth,
        };
        let price = self.prices.price(provider, &model);
        if price.is_none() {
            tracing::warn!(
                provider,
                model,
                "no price known for this model: its cost counts as 0 (set [models.{provider}] prices)"
            );
        }
        Ok(Settings {
            provider,
            max_tokens: options.max_tokens.or(config.max_tokens),
            temperature: options.temperature,
            tool_version: tool_version.map(str::to_string).or_else(|| config.tool_version.clone()),
            stream: config.stream.unwrap_or(defaults.stream),
            price,
            model,
            base_url,
            endpoint,
            config,
        })
    }

    fn api_key(
        &self,
        provider: &str,
        config: &ModelConfig,
        default_env: Option<&str>,
    ) -> Result<Option<Secret>, ModelError> {
        if let Some(path) = &config.api_key_file {
            let text = std::fs::read_to_string(path).map_err(|e| {
                ModelError::Config(format!("{provider}: cannot read api_key_file {}: {e}", path.display()))
            })?;
            let key = Secret::new(text);
            if key.expose().is_empty() {
                return Err(ModelError::Config(format!("{provider}: api_key_file {} is empty", path.display())));
            }
            return Ok(Some(key));
        }
        let Some(var) = config.api_key_env.as_deref().or(default_env) else {
            return Ok(None);
        };
        Ok((self.env)(var).map(Secret::new).filter(|k| !k.expose().is_empty()))
    }
}

/// `scheme://host:port` of a URL (lower case), for comparing where a key may go.
pub fn origin(url: &str) -> String {
    let lower = url.trim().to_ascii_lowercase();
    let (scheme, rest) = lower.split_once("://").unwrap_or(("", lower.as_str()));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority.rsplit('@').next().unwrap_or_default();
    let has_port = authority.rsplit_once(':').is_some_and(|(_, p)| p.chars().all(|c| c.is_ascii_digit()))
        && !authority.ends_with(']');
    if has_port {
        format!("{scheme}://{authority}")
    } else {
        let port = if scheme == "https" { 443 } else { 80 };
        format!("{scheme}://{authority}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(toml: &str, env: &[(&str, &str)]) -> Shared {
        let config = crate::config::parse(toml, "t.toml", &[]).unwrap_or_else(|e| panic!("{e}"));
        let env: BTreeMap<String, String> = env.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        Shared::with_env(&config, Arc::new(move |name: &str| env.get(name).cloned()))
    }

    #[test]
    fn origins() {
        assert_eq!(origin("https://api.anthropic.com"), "https://api.anthropic.com:443");
        assert_eq!(origin("HTTP://127.0.0.1:8000/v1"), "http://127.0.0.1:8000");
        assert_eq!(origin("http://user@host/v1?x"), "http://host:80");
        assert_ne!(origin("http://127.0.0.1:8000/v1"), origin("http://127.0.0.1:8001/v1"));
    }

    #[test]
    fn keys_come_from_env_or_file_and_stay_home() {
        let s = shared("", &[("ANTHROPIC_API_KEY", "sk-1")]);
        let settings = s.settings("anthropic", &ModelOptions::default(), None, None).unwrap();
        assert_eq!(settings.endpoint.key.as_ref().map(Secret::expose), Some("sk-1"));
        assert_eq!(settings.model, "claude-sonnet-4-5");
        let err = shared("", &[]).settings("anthropic", &ModelOptions::default(), None, None).unwrap_err();
        assert!(err.to_string().contains("ANTHROPIC_API_KEY"), "{err}");

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key");
        std::fs::write(&file, "sk-file\n").unwrap();
        let toml = format!(
            "[models.openai-compatible]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\napi_key_file = {:?}\n",
            file.display().to_string()
        );
        let s = shared(&toml, &[]);
        let home = s.settings("openai-compatible", &ModelOptions::default(), None, None).unwrap();
        assert_eq!(home.endpoint.key.as_ref().map(Secret::expose), Some("sk-file"));
        let same =
            s.settings("openai-compatible", &ModelOptions::default(), None, Some("http://127.0.0.1:9/other")).unwrap();
        assert!(same.endpoint.key.is_some());
        let elsewhere =
            s.settings("openai-compatible", &ModelOptions::default(), None, Some("http://evil.example:9/v1")).unwrap();
        assert!(elsewhere.endpoint.key.is_none());
        assert!(!format!("{elsewhere:?}{home:?}").contains("sk-file"));
    }

    #[test]
    fn one_limiter_per_endpoint() {
        let s = shared("", &[("ANTHROPIC_API_KEY", "k"), ("OPENAI_API_KEY", "k")]);
        let a = s.settings("anthropic", &ModelOptions::default(), None, None).unwrap();
        let b = s.settings("anthropic", &ModelOptions::default(), None, None).unwrap();
        let c = s.settings("openai", &ModelOptions::default(), None, None).unwrap();
        assert!(Arc::ptr_eq(&a.endpoint.limiter, &b.endpoint.limiter));
        assert!(!Arc::ptr_eq(&a.endpoint.limiter, &c.endpoint.limiter));
    }
}
