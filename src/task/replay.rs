//! A task's `replay` field (docs/replay-and-verify.md): which succeeded task's recorded actions to run again without a
//! model,
//! the parameters typed in place of recorded texts, what a divergence does, and how screens are compared.
//!
//! `{"of": "ID", "params"?: {"recorded text": "new text"}, "on_divergence"?: "stop" | "model",
//! "masks"?: [{"x", "y", "width", "height"}], "min_score"?: 0..1, "tolerance"?: 0..255}`.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use super::TaskId;
pub use crate::screen::compare::{DEFAULT_TOLERANCE, Region};

/// The share of grid cells (`screen::compare`) that must agree for a live screen to match its recording.
pub const DEFAULT_MIN_SCORE: f64 = 0.99;

/// The `replay` field of a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplaySpec {
    /// The succeeded task whose recorded steps are replayed.
    pub of: TaskId,
    /// Recorded typed text → the text to type instead, wherever a recorded `type` action's text equals or
    /// contains the name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<ParamName, String>,
    #[serde(default)]
    pub on_divergence: OnDivergence,
    /// Regions of the screen (recorded screen pixels) the comparison ignores: clocks, spinners.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub masks: Vec<Region>,
    /// The least share (0..1) of compared grid cells that must agree; default [`DEFAULT_MIN_SCORE`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_score: Option<Score>,
    /// How far (0–255) a cell's mean luminance may move and still agree; default [`DEFAULT_TOLERANCE`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<u8>,
}

impl ReplaySpec {
    pub fn min_score(&self) -> f64 {
        self.min_score.map_or(DEFAULT_MIN_SCORE, |s| s.0)
    }

    pub fn tolerance(&self) -> u8 {
        self.tolerance.unwrap_or(DEFAULT_TOLERANCE)
    }

    /// A recorded `type` text with the parameters applied: every occurrence of a parameter's name is
    /// replaced by its value (longer names first, so one name inside another does not cut it).
    pub fn apply_params(&self, text: &str) -> String {
        let mut names: Vec<(&ParamName, &String)> = self.params.iter().collect();
        names.sort_by_key(|(name, _)| std::cmp::Reverse(name.0.len()));
        let mut out = text.to_string();
        for (name, value) in names {
            if out.contains(name.as_str()) {
                out = out.replace(name.as_str(), value);
            }
        }
        out
    }
}

/// What a replay does when the live screen does not match the recording.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnDivergence {
    /// Wait for a human (`waiting_for_human`): approve runs the recorded actions anyway, reject ends it.
    #[default]
    Stop,
    /// The task's model takes over from that step.
    Model,
}

/// A parameter's name: the recorded text it stands for (not empty).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct ParamName(String);

impl ParamName {
    pub fn parse(s: &str) -> Result<Self, String> {
        if s.is_empty() {
            return Err("a parameter's name (the recorded text it replaces) must not be empty".into());
        }
        Ok(Self(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for ParamName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        ParamName::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A similarity score threshold, 0 to 1.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Score(f64);

impl<'de> Deserialize<'de> for Score {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if !(0.0..=1.0).contains(&v) {
            return Err(serde::de::Error::custom(format!("min_score must be between 0 and 1, got {v}")));
        }
        Ok(Self(v))
    }
}

#[cfg(test)]
mod tests {
    use super::super::TaskSpec;
    use super::*;

    #[test]
    fn a_replay_field_parses_with_defaults_and_round_trips() {
        let text = r#"{"instructions":"x","replay":{"of":"form-1","params":{"zoe@example.com":"ada@example.com"}}}"#;
        let task = TaskSpec::parse(text, "t.json").unwrap();
        let replay = task.replay.clone().unwrap();
        assert_eq!(replay.of.as_str(), "form-1");
        assert_eq!(replay.on_divergence, OnDivergence::Stop);
        assert_eq!(replay.min_score(), DEFAULT_MIN_SCORE);
        assert_eq!(replay.apply_params("mail zoe@example.com now"), "mail ada@example.com now");
        assert_eq!(replay.apply_params("<secret:PW>"), "<secret:PW>");
        let back = serde_json::to_string(&task).unwrap();
        assert_eq!(TaskSpec::parse(&back, "x").unwrap(), task);
    }

    #[test]
    fn malformed_replay_fields_are_named() {
        let field = |replay: &str| {
            let text = format!(r#"{{"instructions":"x","replay":{replay}}}"#);
            TaskSpec::parse(&text, "t.json").unwrap_err().field().map(str::to_string)
        };
        assert_eq!(field(r#"{"of":"../x"}"#).as_deref(), Some("replay.of"));
        assert_eq!(field(r#"{}"#).as_deref(), Some("replay.of"));
        assert_eq!(field(r#"{"of":"a","on_divergence":"ask"}"#).as_deref(), Some("replay.on_divergence"));
        assert_eq!(field(r#"{"of":"a","params":{"":"b"}}"#).as_deref(), Some("replay.params"));
        assert_eq!(field(r#"{"of":"a","min_score":2}"#).as_deref(), Some("replay.min_score"));
        assert_eq!(field(r#"{"of":"a","masks":[{"x":1}]}"#).as_deref(), Some("replay.masks[0].y"));
        assert_eq!(field(r#"{"of":"a","colour":1}"#).as_deref(), Some("replay.colour"));
    }
}
