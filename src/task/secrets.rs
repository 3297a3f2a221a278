//! Secrets a task names (docs/security.md): `"secrets": {"NAME": {"env": "VAR"} | {"file": "/path"}}`. The model is
//! told
//! only the placeholder `<secret:NAME>`; the values are read on the worker when the task runs and substituted
//! where the placeholder appears in a `type` action or a tool's arguments (see `tools::secrets`).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

/// A secret's name: 1–64 characters of `[A-Za-z0-9_-]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct SecretName(String);

impl SecretName {
    pub fn parse(s: &str) -> Result<Self, String> {
        let ok =
            !s.is_empty() && s.len() <= 64 && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
        if !ok {
            return Err(format!("invalid secret name {s:?}: use 1-64 characters of A-Z a-z 0-9 _ -"));
        }
        Ok(Self(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// What the model, the records and the logs see instead of the value.
    pub fn placeholder(&self) -> String {
        format!("<secret:{}>", self.0)
    }
}

impl fmt::Display for SecretName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for SecretName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        SecretName::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Where a secret's value is read on the worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum SecretSource {
    /// An environment variable of the worker.
    Env(String),
    /// A file on the worker (its whole content, one trailing newline removed).
    File(String),
}
