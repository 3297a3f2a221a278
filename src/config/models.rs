//! `[models.NAME]`: how to reach each model provider and how its adapter behaves — endpoints, credentials
//! (an environment variable or a file), timeouts and retries, the computer tool's environment, an
//! openai-compatible model's coordinates and action format, and prices (`Price`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::Config;
use crate::record::Usage;

/// The environment a vendor's computer tool declares (`[models.NAME] environment`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ComputerEnvironment {
    Linux,
    Ubuntu,
    Windows,
    Mac,
    #[serde(alias = "ENVIRONMENT_BROWSER")]
    Browser,
}

impl ComputerEnvironment {
    /// The name OpenAI's `computer_use_preview` tool takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Linux => "linux",
            Self::Ubuntu => "ubuntu",
            Self::Windows => "windows",
            Self::Mac => "mac",
            Self::Browser => "browser",
        }
    }
}

/// An openai-compatible model's coordinate space (`[models.openai-compatible] coordinate_space`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CoordinateSpace {
    /// Pixels of the screenshot sent.
    #[default]
    Pixels,
    /// 0–1000 across the screenshot.
    #[serde(rename = "relative-1000")]
    Relative1000,
    /// Pixels of the image after Qwen2.5-VL's smart resize.
    SmartResize,
}

/// How an openai-compatible model states its actions (`[models.openai-compatible] action_format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ActionFormat {
    /// Function calling.
    #[default]
    Tools,
    /// The UI-TARS text action grammar.
    UiTars,
}

/// `[models.NAME]`: how to reach one model provider, and how its adapter behaves. Every key is optional; the
/// adapter's defaults are in `docs/models.md` and `config/agentd.example.toml`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    pub base_url: Option<String>,
    /// Base URLs a task submitted over the API may name for this provider (`openai-compatible`'s per-task
    /// `base_url`), besides `base_url` (or the provider's default). Empty by default.
    pub allowed_base_urls: Vec<String>,
    /// The environment variable holding the API key (default: the provider's usual one).
    pub api_key_env: Option<String>,
    /// A file holding the API key (read when a task's model is built; wins over `api_key_env`).
    pub api_key_file: Option<PathBuf>,
    /// The default model id.
    pub model: Option<String>,
    pub max_tokens: Option<u32>,
    pub tool_version: Option<String>,
    /// Longest time one request attempt may take, from sending to the last byte (default 600).
    pub timeout_secs: Option<u64>,
    /// TCP/TLS connect timeout (default 5).
    pub connect_timeout_secs: Option<u64>,
    /// Longest silence inside a response body or stream before the attempt is abandoned (default 60).
    pub idle_timeout_secs: Option<u64>,
    /// Retries of a failed request (5xx, 529, timeouts, 429 without a delay) (default 4).
    pub max_retries: Option<u32>,
    /// Longest total time one call waits out 429s that say how long to wait (default 600).
    pub rate_limit_wait_secs: Option<u64>,
    /// Most requests in flight to this provider from the whole process (default 8).
    pub max_concurrency: Option<u32>,
    /// The vendor's request limit per minute, kept by every task of the process — of the fleet, on the
    /// PostgreSQL queue (docs/models.md). Unset: not limited here.
    pub requests_per_minute: Option<u32>,
    /// The vendor's token limit per minute (input and output tokens), kept as `requests_per_minute` is.
    pub tokens_per_minute: Option<u64>,
    /// Stream responses (`model_delta` events as text arrives). Default: true, except openai-compatible.
    pub stream: Option<bool>,
    /// The environment the computer tool declares: OpenAI `linux`/`windows`/`mac`/`ubuntu`/`browser`
    /// (default: `browser` on a browser computer, else `linux`), Gemini `browser` (`ENVIRONMENT_BROWSER`, the
    /// default and the only one it has).
    pub environment: Option<ComputerEnvironment>,
    /// openai-compatible: the model's coordinate space, `pixels` (default), `relative-1000` or
    /// `smart-resize` (Qwen2.5-VL / UI-TARS-1.5).
    pub coordinate_space: Option<CoordinateSpace>,
    /// openai-compatible: `tools` (function calling, default) or `ui-tars` (the UI-TARS text action grammar).
    pub action_format: Option<ActionFormat>,
    /// Old screenshots leave the context in chunks of this many (default 3 for anthropic, keeping its prompt
    /// cache valid between drops; 1 elsewhere).
    pub screenshot_chunk: Option<u32>,
    /// The model's context window in tokens; older turns are summarised before a request comes near it.
    pub context_window: Option<u64>,
    /// Prices in USD per million tokens by model id prefix, overriding the built-in table:
    /// `{ "model-id" = { input = 3.0, output = 15.0, cache_read = 0.3, cache_write = 3.75 } }`.
    pub prices: BTreeMap<String, Price>,
    /// Acknowledge vendor safety checks without asking a human. Off unless set.
    pub auto_acknowledge_safety_checks: bool,
}

/// The model provider names `[models.NAME]` accepts.
pub const MODEL_PROVIDERS: &[&str] = &["anthropic", "openai", "gemini", "openai-compatible"];

/// The keys of `[models.NAME]`, for `AGENTD_MODELS_<NAME>_<KEY>` variables (a test checks they are
/// [`ModelConfig`]'s fields).
pub(super) const MODEL_KEYS: &[&str] = &[
    "base_url",
    "allowed_base_urls",
    "api_key_env",
    "api_key_file",
    "model",
    "max_tokens",
    "tool_version",
    "timeout_secs",
    "connect_timeout_secs",
    "idle_timeout_secs",
    "max_retries",
    "rate_limit_wait_secs",
    "max_concurrency",
    "requests_per_minute",
    "tokens_per_minute",
    "stream",
    "environment",
    "coordinate_space",
    "action_format",
    "screenshot_chunk",
    "context_window",
    "prices",
    "auto_acknowledge_safety_checks",
];

impl Config {
    pub fn model(&self, provider: &str) -> ModelConfig {
        self.models.get(provider).cloned().unwrap_or_default()
    }
}

/// USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    /// Cache reads (default: the input price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<f64>,
    /// Cache writes (default: the input price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
}

impl Price {
    pub const fn new(input: f64, output: f64, cache_read: f64, cache_write: f64) -> Self {
        Self { input, output, cache_read: Some(cache_read), cache_write: Some(cache_write) }
    }

    pub fn cost(&self, usage: &Usage) -> f64 {
        let read = usage.cache_read_tokens.min(usage.input_tokens);
        let write = usage.cache_write_tokens.min(usage.input_tokens - read);
        let plain = usage.input_tokens - read - write;
        (plain as f64 * self.input
            + read as f64 * self.cache_read.unwrap_or(self.input)
            + write as f64 * self.cache_write.unwrap_or(self.input)
            + usage.output_tokens as f64 * self.output)
            / 1_000_000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_keys_are_the_model_sections_fields() {
        let value = serde_json::to_value(ModelConfig::default()).unwrap_or_default();
        let mut fields: Vec<&str> =
            value.as_object().map(|o| o.keys().map(String::as_str).collect()).unwrap_or_default();
        let mut keys = MODEL_KEYS.to_vec();
        fields.sort_unstable();
        keys.sort_unstable();
        assert_eq!(keys, fields);
    }
}
