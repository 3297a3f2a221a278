//! `limits` (docs/task-file.md, docs/humans.md): the hard limits of a task — steps, time, cost, verification
//! rounds — and how long a question of the model's waits for a human, with their bounds.

use serde::{Deserialize, Serialize};

use super::verify;
use super::{Cost, Limit};

/// The most `limits.max_steps` a task may ask for.
pub const MAX_STEPS_LIMIT: u64 = 100_000;
/// The longest `limits.timeout_secs` a task may ask for (30 days).
pub const MAX_TIMEOUT_SECS: u64 = 30 * 24 * 3600;
/// The longest `limits.human_timeout_secs` (30 days).
pub const MAX_HUMAN_TIMEOUT_SECS: u64 = 30 * 24 * 3600;

/// docs/task-file.md `limits`: hard limits checked before every model call and every action.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitsSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<Limit<u32, MAX_STEPS_LIMIT>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<Limit<u64, MAX_TIMEOUT_SECS>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<Cost>,
    /// Failed verification rounds the model may fix (docs/replay-and-verify.md).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "verify::retries")]
    #[schemars(range(max = verify::MAX_VERIFY_RETRIES))]
    pub verify_retries: Option<u32>,
    /// How long a question of the model's (`ask_human`, docs/humans.md) waits for an answer; unset: until answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub human_timeout_secs: Option<Limit<u64, MAX_HUMAN_TIMEOUT_SECS>>,
    /// What an unanswered question comes to when `human_timeout_secs` is up (default `fail`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_human_timeout: Option<OnHumanTimeout>,
}

/// docs/humans.md `limits.on_human_timeout`: what a question nobody answered in time comes to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnHumanTimeout {
    /// The task ends failed, reason `timeout`.
    #[default]
    Fail,
    /// The model gets the tool result [`NO_ANSWER`] and goes on.
    Continue,
}

/// The `ask_human` result the model reads when nobody answered in time and the task goes on.
pub const NO_ANSWER: &str = "no answer";

/// When a question of the model's stops waiting (docs/humans.md), from the task's `limits` over the config's
/// `[defaults.limits]`: `None` when neither sets `human_timeout_secs`.
pub fn human_timeout(task: &LimitsSpec, defaults: &LimitsSpec) -> Option<(std::time::Duration, OnHumanTimeout)> {
    let secs = task.human_timeout_secs.or(defaults.human_timeout_secs)?.get();
    let then = task.on_human_timeout.or(defaults.on_human_timeout).unwrap_or_default();
    Some((std::time::Duration::from_secs(secs), then))
}

impl LimitsSpec {
    pub(super) fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}
