//! The scripted model (§6): plays a fixed script, no network. It is how CI and examples run without a model.
//!
//! Script format: `{"turns": [TURN, …]}` where a TURN has any of
//! - `say`: text the model "says" (becomes `model_text`);
//! - `actions`: actions of §4, in screen pixels, run in order as one computer call;
//! - `complete`: `{"success": bool, "summary": "…"}` — calls `task_completion` (after the turn's actions);
//! - `usage`: `{"input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "cost_usd"}`
//!   to report for the turn (all optional, default 0) — lets budgets be tested without a vendor model;
//! - `ask_human`: a reason — the turn's actions wait until a human approves them (`agentd approve`), as a
//!   vendor safety check would make them; a rejection ends the task (reason `rejected`).
//!
//! The model plays turn N at step N (it counts the exchanges in the history), so a task resumed after a
//! crash continues with the turn after the last recorded step and never replays one.

use std::path::Path;

use agentd_computer::{Action, Size};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::{ApprovalRequest, CallKind, Delta, DeltaSink, Model, ModelError, ModelRequest, ModelTurn, ToolCall, Usage};
use crate::agent::coords::CoordinateMap;
use crate::task::{TaskFileError, parse_json};
use crate::tools::TASK_COMPLETION;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    pub turns: Vec<ScriptTurn>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptTurn {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub say: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<Action>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complete: Option<Completion>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ScriptUsage>,
    /// Ask a human before the turn's actions run (the task waits in `waiting_for_human`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask_human: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Completion {
    pub success: bool,
    #[serde(default)]
    pub summary: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptUsage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_read_tokens: u64,
    #[serde(default)]
    pub cache_write_tokens: u64,
    #[serde(default)]
    pub cost_usd: f64,
}

impl Script {
    /// Parses a script file's text; errors name `source_name`, the field and the line/column.
    pub fn parse(text: &str, source_name: &str) -> Result<Self, TaskFileError> {
        let script: Script = parse_json(text, source_name)?;
        script.check(source_name)?;
        Ok(script)
    }

    /// Reads and parses a script file (blocking; a regular file of bounded size, see [`crate::input`]).
    pub fn load(path: &Path) -> Result<Self, TaskFileError> {
        let name = path.display().to_string();
        let text = crate::input::read_text_blocking(path)
            .map_err(|e| TaskFileError::Read { source_name: name.clone(), error: e.into_io() })?;
        Self::parse(&text, &name)
    }

    /// Checks what the types cannot: a script has turns, and no turn is empty.
    pub fn check(&self, source_name: &str) -> Result<(), TaskFileError> {
        let invalid = |field: String, message: &str| TaskFileError::Invalid {
            source_name: source_name.to_string(),
            field: Some(field),
            line: 0,
            column: 0,
            message: message.to_string(),
        };
        if self.turns.is_empty() {
            return Err(invalid("turns".into(), "a script needs at least one turn"));
        }
        for (i, turn) in self.turns.iter().enumerate() {
            if turn.say.is_none() && turn.actions.is_empty() && turn.complete.is_none() && turn.ask_human.is_none() {
                return Err(invalid(format!("turns[{i}]"), "a turn needs `say`, `actions` or `complete`"));
            }
            if let Some(usage) = &turn.usage
                && (!usage.cost_usd.is_finite() || usage.cost_usd < 0.0)
            {
                return Err(invalid(format!("turns[{i}].usage.cost_usd"), "must be a non-negative number"));
            }
        }
        Ok(())
    }
}

/// A [`Model`] that plays a [`Script`].
pub struct ScriptedModel {
    script: Script,
}

impl ScriptedModel {
    pub fn new(script: Script) -> Self {
        Self { script }
    }
}

#[async_trait]
impl Model for ScriptedModel {
    fn describe(&self) -> String {
        format!("scripted ({} turns)", self.script.turns.len())
    }

    fn coordinates(&self, screen: Size) -> CoordinateMap {
        CoordinateMap::identity(screen)
    }

    async fn next_turn(&self, request: ModelRequest<'_>, deltas: DeltaSink<'_>) -> Result<ModelTurn, ModelError> {
        let index = request.history.len();
        let turn = self.script.turns.get(index).ok_or_else(|| {
            ModelError::Script(format!(
                "the script has {} turns and the task needs turn {} (add a turn with `complete`)",
                self.script.turns.len(),
                index + 1
            ))
        })?;
        let text = turn.say.clone().unwrap_or_default();
        if !text.is_empty() {
            deltas(Delta::Text(&text));
        }
        let mut calls = Vec::new();
        if !turn.actions.is_empty() {
            calls.push(ToolCall {
                id: format!("script_{index}_computer"),
                kind: CallKind::Computer { actions: turn.actions.clone() },
            });
        }
        if let Some(complete) = &turn.complete {
            calls.push(ToolCall {
                id: format!("script_{index}_complete"),
                kind: CallKind::Function {
                    name: TASK_COMPLETION.to_string(),
                    arguments: serde_json::json!({ "success": complete.success, "summary": complete.summary }),
                },
            });
        }
        let usage = turn.usage.map_or_else(Usage::default, |u| Usage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_write_tokens: u.cache_write_tokens,
            cost_usd: u.cost_usd,
        });
        let approval = turn
            .ask_human
            .as_ref()
            .map(|reason| ApprovalRequest { reason: reason.clone(), details: serde_json::Value::Null });
        Ok(ModelTurn { text, thinking: String::new(), calls, usage, raw: None, approval })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_errors_name_the_field() {
        let err =
            Script::parse(r#"{"turns":[{"say":"hi","actions":[{"type":"click","x":1}]}]}"#, "s.json").unwrap_err();
        assert_eq!(err.field(), Some("turns[0].actions[0].y"), "{err}");
        let err = Script::parse(r#"{"turns":[]}"#, "s.json").unwrap_err();
        assert_eq!(err.field(), Some("turns"));
        let err = Script::parse(r#"{"turns":[{}]}"#, "s.json").unwrap_err();
        assert_eq!(err.field(), Some("turns[0]"));
        let err = Script::parse(r#"{"turns":[{"sya":"x"}]}"#, "s.json").unwrap_err();
        assert_eq!(err.field(), Some("turns[0].sya"), "{err}");
    }
}
