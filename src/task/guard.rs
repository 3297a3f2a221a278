//! The stuck-loop guard's thresholds (docs/task-file.md) as a task file's `"guard"` and the config's `[guard]` write
//! them,
//! and the thresholds an attempt runs with once the two are merged over the built-in defaults.
//!
//! Each threshold counts steps (or turns) in a row; 0 turns that check off. The defaults are low enough that
//! a looping run ends well before the usual step limits (a warning at the threshold, `stuck` at twice it) and
//! high enough that a page that takes a few steps to load is not mistaken for a loop.

use serde::{Deserialize, Serialize};

/// Steps in a row whose actions changed nothing on screen before the model is warned.
pub const DEFAULT_NO_CHANGE_STEPS: u32 = 5;
/// Times in a row the same actions ran on an unchanged screen before the model is warned.
pub const DEFAULT_REPEAT_ACTIONS: u32 = 3;
/// Model turns in a row with neither an action, a tool call nor a completion before the model is warned.
pub const DEFAULT_IDLE_TURNS: u32 = 3;
/// Steps in a row that only waited on an unchanged screen before the model is warned: waiting for a slow
/// page or a person is what a model should do, so it has a budget of its own, well above
/// `no_change_steps` (at a few seconds a wait, minutes before the warning).
pub const DEFAULT_WAIT_STEPS: u32 = 30;
/// The largest threshold accepted (a larger one is as good as off, which 0 says plainly).
pub const MAX_THRESHOLD: u32 = 10_000;

/// `"guard"` in a task, `[guard]` in the config: each field optional, 0 = off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GuardSpec {
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "threshold")]
    #[schemars(range(max = MAX_THRESHOLD))]
    pub no_change_steps: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "threshold")]
    #[schemars(range(max = MAX_THRESHOLD))]
    pub repeat_actions: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "threshold")]
    #[schemars(range(max = MAX_THRESHOLD))]
    pub idle_turns: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "threshold")]
    #[schemars(range(max = MAX_THRESHOLD))]
    pub wait_steps: Option<u32>,
}

fn threshold<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let value = u32::deserialize(d)?;
    if value > MAX_THRESHOLD {
        return Err(serde::de::Error::custom(format!(
            "must be at most {MAX_THRESHOLD} (0 turns the check off), got {value}"
        )));
    }
    Ok(Some(value))
}

impl GuardSpec {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// This spec's thresholds, then `base`'s, then the built-in defaults.
    pub fn over(&self, base: &GuardSpec) -> Guard {
        Guard {
            no_change_steps: self.no_change_steps.or(base.no_change_steps).unwrap_or(DEFAULT_NO_CHANGE_STEPS),
            repeat_actions: self.repeat_actions.or(base.repeat_actions).unwrap_or(DEFAULT_REPEAT_ACTIONS),
            idle_turns: self.idle_turns.or(base.idle_turns).unwrap_or(DEFAULT_IDLE_TURNS),
            wait_steps: self.wait_steps.or(base.wait_steps).unwrap_or(DEFAULT_WAIT_STEPS),
        }
    }
}

/// The thresholds an attempt runs with (0 = that check is off).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Guard {
    pub no_change_steps: u32,
    pub repeat_actions: u32,
    pub idle_turns: u32,
    /// Steps in a row that only waited on an unchanged screen (not counted in `no_change_steps`).
    #[serde(default = "default_wait_steps")]
    pub wait_steps: u32,
}

fn default_wait_steps() -> u32 {
    DEFAULT_WAIT_STEPS
}

impl Default for Guard {
    fn default() -> Self {
        GuardSpec::default().over(&GuardSpec::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_wins_over_the_config_which_wins_over_the_defaults() {
        let config: GuardSpec = serde_json::from_str(r#"{"no_change_steps": 8, "idle_turns": 0}"#).unwrap();
        let task: GuardSpec = serde_json::from_str(r#"{"no_change_steps": 2}"#).unwrap();
        assert_eq!(task.over(&config), Guard { no_change_steps: 2, repeat_actions: 3, idle_turns: 0, wait_steps: 30 });
        assert_eq!(Guard::default(), Guard { no_change_steps: 5, repeat_actions: 3, idle_turns: 3, wait_steps: 30 });
    }

    #[test]
    fn unknown_fields_and_huge_thresholds_are_refused() {
        let e = serde_json::from_str::<GuardSpec>(r#"{"no_change": 2}"#).unwrap_err().to_string();
        assert!(e.contains("unknown field `no_change`"), "{e}");
        let e = serde_json::from_str::<GuardSpec>(r#"{"idle_turns": 20000}"#).unwrap_err().to_string();
        assert!(e.contains("at most 10000"), "{e}");
        assert!(serde_json::from_str::<GuardSpec>(r#"{"idle_turns": -1}"#).is_err());
    }
}
