//! `model` (docs/task-file.md, docs/models.md): which model drives a task, tagged by `provider` — the vendors'
//! per-task options, an openai-compatible endpoint, or a script — and the validated `temperature`.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

use super::Positive;
use super::script::Script;
use super::{tagged, variant};

/// Which model drives the task (docs/task-file.md `model`), tagged by `provider`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "provider", rename_all = "kebab-case")]
pub enum ModelSpec {
    Anthropic(VendorModelSpec),
    Openai(VendorModelSpec),
    Gemini(GeminiSpec),
    OpenaiCompatible(CompatibleSpec),
    Scripted(ScriptedSpec),
}

/// Per-task options of the Anthropic and OpenAI adapters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VendorModelSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<Positive<u32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<Temperature>,
    /// The computer tool version (default: the newest the model supports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_version: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GeminiSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<Positive<u32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<Temperature>,
}

/// A vision model behind an OpenAI-compatible Chat Completions endpoint (vLLM and similar).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompatibleSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<Positive<u32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<Temperature>,
}

/// Plays a fixed script (docs/models.md): `script` is a path or the script itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScriptedSpec {
    pub script: ScriptSource,
    /// Values for the `{{NAME}}` parameters of the script's typed texts (a script `agentd compile` wrote).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, String>,
}

impl<'de> Deserialize<'de> for ModelSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (provider, rest) =
            tagged(d, "provider", &["anthropic", "openai", "gemini", "openai-compatible", "scripted"])?;
        match provider.as_str() {
            "anthropic" => variant(rest).map(Self::Anthropic),
            "openai" => variant(rest).map(Self::Openai),
            "gemini" => variant(rest).map(Self::Gemini),
            "openai-compatible" => variant(rest).map(Self::OpenaiCompatible),
            _ => variant(rest).map(Self::Scripted),
        }
    }
}

impl ModelSpec {
    pub fn provider(&self) -> &'static str {
        match self {
            Self::Anthropic(_) => "anthropic",
            Self::Openai(_) => "openai",
            Self::Gemini(_) => "gemini",
            Self::OpenaiCompatible(_) => "openai-compatible",
            Self::Scripted(_) => "scripted",
        }
    }

    /// The per-task options of a vendor model (empty for `scripted`).
    pub fn options(&self) -> ModelOptions {
        let (model, max_tokens, temperature) = match self {
            Self::Anthropic(s) | Self::Openai(s) => (&s.model, s.max_tokens, s.temperature),
            Self::Gemini(s) => (&s.model, s.max_tokens, s.temperature),
            Self::OpenaiCompatible(s) => (&s.model, s.max_tokens, s.temperature),
            Self::Scripted(_) => return ModelOptions::default(),
        };
        ModelOptions {
            model: model.clone(),
            max_tokens: max_tokens.map(Positive::get),
            temperature: temperature.map(Temperature::get),
        }
    }
}

/// Options every vendor model accepts per task.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelOptions {
    pub model: Option<String>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
}

/// A sampling temperature: 0.0 to 2.0.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Temperature(f64);

impl Temperature {
    pub fn get(self) -> f64 {
        self.0
    }
}

impl<'de> Deserialize<'de> for Temperature {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if !(0.0..=2.0).contains(&v) {
            return Err(serde::de::Error::custom(format!("temperature must be between 0 and 2, got {v}")));
        }
        Ok(Self(v))
    }
}

/// A script given inline (a JSON object, checked with the task file) or as a path to a JSON file.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ScriptSource {
    Path(String),
    Inline(Script),
}

impl<'de> Deserialize<'de> for ScriptSource {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct SourceVisitor;
        impl<'de> serde::de::Visitor<'de> for SourceVisitor {
            type Value = ScriptSource;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a path to a script file, or a script object {\"turns\": [...]}")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ScriptSource, E> {
                if v.is_empty() {
                    return Err(E::custom("script path must not be empty"));
                }
                Ok(ScriptSource::Path(v.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<ScriptSource, A::Error> {
                let script = Script::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                script.check("script").map_err(|e| serde::de::Error::custom(e.to_string()))?;
                Ok(ScriptSource::Inline(script))
            }
        }
        d.deserialize_any(SourceVisitor)
    }
}
