//! The scripted model (docs/models.md): plays a fixed script (`task::script`), no network. It is how CI and examples
//! run
//! without a model.
//!
//! Script format: `{"turns": [TURN, …]}` where a TURN has any of
//! - `say`: text the model "says" (becomes `model_text`);
//! - `actions`: actions of docs/task-file.md, in screen pixels, run in order as one computer call;
//! - `calls`: `[{"name": "lookup_order", "arguments": {…}}, …]` — calls of declared tools (docs/tools.md), run in order
//!   after the turn's actions;
//! - `complete`: `{"success": bool, "summary": "…", "output"?: …}` — calls `task_completion` (after the turn's
//!   actions and calls; `output` is the structured output of docs/task-file.md);
//! - `usage`: `{"input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "cost_usd"}`
//!   to report for the turn (all optional, default 0) — lets budgets be tested without a vendor model;
//! - `ask_human`: a reason — the turn's actions wait until a human approves them (`agentd approve`), as a
//!   vendor safety check would make them; a rejection ends the task (reason `rejected`).
//!
//! The model plays turn N at step N (it counts the exchanges in the history), so a task resumed after a
//! crash continues with the turn after the last recorded step and never replays one.

use agentd_computer::Size;
use async_trait::async_trait;

use super::TASK_COMPLETION;
use super::{ApprovalRequest, CallKind, Delta, DeltaSink, Model, ModelError, ModelRequest, ModelTurn, ToolCall, Usage};
use crate::screen::CoordinateMap;
pub use crate::task::script::{Completion, Script, ScriptTurn, ScriptUsage};

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
        for (position, call) in turn.calls.iter().enumerate() {
            calls.push(ToolCall {
                id: format!("script_{index}_call_{position}"),
                kind: CallKind::Function { name: call.name.clone(), arguments: call.arguments.clone() },
            });
        }
        if let Some(complete) = &turn.complete {
            let mut arguments = serde_json::json!({ "success": complete.success, "summary": complete.summary });
            if let Some(output) = &complete.output {
                arguments["output"] = output.clone();
            }
            calls.push(ToolCall {
                id: format!("script_{index}_complete"),
                kind: CallKind::Function { name: TASK_COMPLETION.to_string(), arguments },
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
