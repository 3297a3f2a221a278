//! `[log]` and `[otel]`: how log lines are written and where OpenTelemetry traces go (docs/operations.md).

use serde::{Deserialize, Serialize};

/// How log lines on stderr are written (`[log] format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One human-readable line per event (the default).
    #[default]
    Text,
    /// One JSON object per line, with the fields of the task and step the event happened in.
    Json,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `text` (default) or `json`. Which events are written is `AGENTD_LOG` (a `tracing` filter).
    pub format: LogFormat,
}

/// `[otel]`: OpenTelemetry traces over OTLP/HTTP (protobuf), for builds with the cargo feature `otel`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct OtelConfig {
    /// The collector's OTLP/HTTP base URL (`http://127.0.0.1:4318`); spans go to `{endpoint}/v1/traces`
    /// (an endpoint already ending in `/v1/traces` is used as it is). Unset (the default): no traces.
    pub endpoint: Option<String>,
    /// The `service.name` resource attribute of every span.
    pub service_name: String,
    /// How long one export may take before it is abandoned.
    pub timeout_secs: u64,
}

impl Default for OtelConfig {
    fn default() -> Self {
        Self { endpoint: None, service_name: "agentd".into(), timeout_secs: 10 }
    }
}

impl OtelConfig {
    /// The URL spans are posted to, when an endpoint is set.
    pub fn traces_url(&self) -> Option<String> {
        let endpoint = self.endpoint.as_deref()?.trim_end_matches('/');
        Some(if endpoint.ends_with("/v1/traces") { endpoint.to_string() } else { format!("{endpoint}/v1/traces") })
    }
}
