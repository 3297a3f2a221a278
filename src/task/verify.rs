//! Verifier checks (docs/replay-and-verify.md) as a task file's `"verify"` writes them, `limits.verify_retries`, and
//! the config's
//! `[verifiers.NAME]` programs a `command` check names. Parsing only: `crate::verify` runs them.
//!
//! Every check is tagged by `kind`; a check's errors name its field (`verify[1].min_score`).

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use super::{Limit, json_kind, tagged, variant};

/// How many failed verification rounds the model may fix before the task fails `verification_failed`.
pub const DEFAULT_VERIFY_RETRIES: u32 = 2;
/// The most `limits.verify_retries` a task may ask for.
pub const MAX_VERIFY_RETRIES: u32 = 100;
/// The score a `screen` check needs when it names no `min_score`.
pub const DEFAULT_MIN_SCORE: f64 = 0.95;
/// The most checks one task may declare.
pub const MAX_CHECKS: usize = 32;
/// How long a `[verifiers.NAME]` program may run when its `timeout_secs` is absent.
pub const DEFAULT_VERIFIER_TIMEOUT_SECS: u64 = 60;
/// The longest `timeout_secs` a verifier program may have.
pub const MAX_VERIFIER_TIMEOUT_SECS: u64 = 3600;

/// One check of `"verify"`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Check {
    /// The computer's state (`computer_state`) contains `expect` (see [`json_subset`]).
    MockState { expect: serde_json::Map<String, serde_json::Value> },
    /// The reference image found on the final screen.
    Screen(ScreenCheck),
    /// A GET of `url` answers as expected.
    Http(HttpCheck),
    /// `task_completion`'s `output` holds these values at these JSON pointers.
    Output { expect: BTreeMap<Pointer, serde_json::Value> },
    /// A `[verifiers.NAME]` program from config exits 0.
    Command {
        #[serde(rename = "use")]
        use_: String,
    },
    /// A shell command run inside the guest (providers that run commands: computer-server) exits with
    /// `expect_exit` (default 0) and, with `expect_stdout`, prints that text.
    GuestCommand(GuestCheck),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GuestCheck {
    pub command: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_exit: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_stdout: Option<String>,
}

impl Check {
    pub fn kind(&self) -> &'static str {
        match self {
            Self::MockState { .. } => "mock_state",
            Self::Screen(_) => "screen",
            Self::Http(_) => "http",
            Self::Output { .. } => "output",
            Self::Command { .. } => "command",
            Self::GuestCommand(_) => "guest_command",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScreenCheck {
    /// A PNG file: relative to the task file for `agentd run`, under `[api] allowed_paths` over the API.
    pub image: String,
    /// Where on the screen the reference must be (anywhere when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<Region>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_score: Option<Score>,
}

/// A rectangle of the screen in pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Region {
    pub x: u32,
    pub y: u32,
    pub width: Limit<u32, 100_000>,
    pub height: Limit<u32, 100_000>,
}

/// A similarity score from 0 to 1.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Score(f64);

impl Score {
    pub fn get(self) -> f64 {
        self.0
    }
}

impl<'de> Deserialize<'de> for Score {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if !(0.0..=1.0).contains(&v) {
            return Err(serde::de::Error::custom(format!("must be a score from 0.0 to 1.0, got {v}")));
        }
        Ok(Self(v))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpCheck {
    pub url: String,
    /// The status the answer must have (any 2xx when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_status: Option<Status>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub expect_json: BTreeMap<Pointer, serde_json::Value>,
}

/// An HTTP status code (100–599).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Status(u16);

impl Status {
    pub fn get(self) -> u16 {
        self.0
    }
}

impl<'de> Deserialize<'de> for Status {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = u16::deserialize(d)?;
        if !(100..=599).contains(&v) {
            return Err(serde::de::Error::custom(format!("must be an HTTP status from 100 to 599, got {v}")));
        }
        Ok(Self(v))
    }
}

/// A JSON pointer (RFC 6901): empty (the whole document) or starting with `/`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Pointer(String);

impl Pointer {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for Pointer {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if !s.is_empty() && !s.starts_with('/') {
            return Err(serde::de::Error::custom(format!("{s:?} is not a JSON pointer (write \"/a/b\")")));
        }
        Ok(Self(s))
    }
}

impl<'de> Deserialize<'de> for Check {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let (kind, mut rest) =
            tagged(d, "kind", &["mock_state", "screen", "http", "output", "command", "guest_command"])?;
        let only = |rest: &serde_json::Map<String, serde_json::Value>, allowed: &str| match rest
            .keys()
            .find(|k| k.as_str() != allowed)
        {
            Some(field) => Err(D::Error::custom(format!("field `{field}`: unknown field for a `{kind}` check"))),
            None => Ok(()),
        };
        match kind.as_str() {
            "mock_state" => {
                only(&rest, "expect")?;
                match rest.remove("expect") {
                    Some(serde_json::Value::Object(expect)) => Ok(Self::MockState { expect }),
                    Some(other) => Err(D::Error::custom(format!(
                        "field `expect`: invalid type: {}, expected an object (a subset of computer_state)",
                        json_kind(&other)
                    ))),
                    None => Err(D::Error::missing_field("expect")),
                }
            }
            "screen" => {
                let check: ScreenCheck = variant(rest)?;
                if check.image.is_empty() {
                    return Err(D::Error::custom("field `image`: name a PNG file"));
                }
                Ok(Self::Screen(check))
            }
            "http" => {
                let check: HttpCheck = variant(rest)?;
                super::tools::http_url(&check.url).map_err(|m| D::Error::custom(format!("field `url`: {m}")))?;
                Ok(Self::Http(check))
            }
            "output" => {
                #[derive(Deserialize)]
                #[serde(deny_unknown_fields)]
                struct Output {
                    expect: BTreeMap<Pointer, serde_json::Value>,
                }
                let Output { expect } = variant(rest)?;
                Ok(Self::Output { expect })
            }
            "guest_command" => {
                let check: GuestCheck = variant(rest)?;
                if check.command.trim().is_empty() {
                    return Err(D::Error::custom("field `command`: name the shell command to run in the guest"));
                }
                if check.command.len() > MAX_GUEST_COMMAND_BYTES {
                    return Err(D::Error::custom(format!(
                        "field `command`: at most {MAX_GUEST_COMMAND_BYTES} bytes, got {}",
                        check.command.len()
                    )));
                }
                Ok(Self::GuestCommand(check))
            }
            _ => {
                #[derive(Deserialize)]
                #[serde(deny_unknown_fields)]
                struct Command {
                    #[serde(rename = "use")]
                    use_: String,
                }
                let Command { use_ } = variant(rest)?;
                if use_.is_empty() {
                    return Err(D::Error::custom("field `use`: name a [verifiers.NAME] program from config"));
                }
                Ok(Self::Command { use_ })
            }
        }
    }
}

/// The longest command a `guest_command` check may run.
pub const MAX_GUEST_COMMAND_BYTES: usize = 4096;

/// `"verify"`: at most [`MAX_CHECKS`] checks.
pub fn checks<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Check>, D::Error> {
    let checks = Vec::<Check>::deserialize(d)?;
    if checks.len() > MAX_CHECKS {
        return Err(serde::de::Error::custom(format!("at most {MAX_CHECKS} checks, got {}", checks.len())));
    }
    Ok(checks)
}

/// `limits.verify_retries`: 0 to [`MAX_VERIFY_RETRIES`].
pub fn retries<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let v = u32::deserialize(d)?;
    if v > MAX_VERIFY_RETRIES {
        return Err(serde::de::Error::custom(format!("must be at most {MAX_VERIFY_RETRIES}, got {v}")));
    }
    Ok(Some(v))
}

/// `[verifiers.NAME]` in config: a program a `command` check runs, given the task record as JSON on stdin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VerifierDecl {
    /// The program and its arguments (no shell).
    pub command: Vec<String>,
    /// The working directory (the worker's own when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The worker's environment variables the program is given besides the base ones (as for `command`
    /// tools: a clean environment otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<Limit<u64, MAX_VERIFIER_TIMEOUT_SECS>>,
}

/// Whether `actual` contains `expected`: objects match when every expected key matches recursively (extra
/// keys in `actual` are fine); arrays and scalars must be equal.
pub fn json_subset(expected: &serde_json::Value, actual: &serde_json::Value) -> bool {
    match (expected, actual) {
        (serde_json::Value::Object(want), serde_json::Value::Object(have)) => {
            want.iter().all(|(k, v)| have.get(k).is_some_and(|h| json_subset(v, h)))
        }
        _ => expected == actual,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subsets_match_objects_by_key_and_everything_else_exactly() {
        let have = json!({"screen": "welcome", "fields": {"username": "alice", "remember": true}, "list": [1, 2]});
        assert!(json_subset(&json!({"fields": {"username": "alice"}}), &have));
        assert!(json_subset(&json!({}), &have));
        assert!(!json_subset(&json!({"fields": {"username": "bob"}}), &have));
        assert!(!json_subset(&json!({"list": [1]}), &have));
        assert!(json_subset(&json!({"list": [1, 2]}), &have));
        assert!(!json_subset(&json!({"missing": null}), &have));
    }
}
