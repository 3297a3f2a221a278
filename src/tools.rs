//! The tools the agent loop declares next to a model's computer tool, and the result envelope every tool
//! call produces.
//!
//! A tool call ends in a [`ToolOutcome`]: `ok`, a `message` the model reads, and `details` kept for the
//! record only. Adding a tool means adding a [`ToolSpec`] to [`declared_tools`] and a branch to
//! [`handle_function`]; adapters declare every spec as a function tool, so no adapter changes.

use serde::Deserialize;
use serde_json::json;

use crate::model::ToolSpec;

use crate::model::TASK_COMPLETION;

/// The envelope every tool call produces.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    pub ok: bool,
    /// What the model reads.
    pub message: String,
    /// Kept in the record, never shown to the model.
    pub details: Option<serde_json::Value>,
}

impl ToolOutcome {
    pub fn ok(message: impl Into<String>) -> Self {
        Self { ok: true, message: message.into(), details: None }
    }

    pub fn error(message: impl Into<String>) -> Self {
        Self { ok: false, message: message.into(), details: None }
    }
}

/// What a function call asks of the loop beyond its result.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// End the task with this outcome.
    Complete { success: bool, summary: String },
}

/// The function tools every model is given.
pub fn declared_tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: TASK_COMPLETION,
        description: "Call this when the task is finished, or when it cannot be finished. Set success to \
                      true only if everything the task asked for was done, and summarise what happened.",
        parameters: json!({
            "type": "object",
            "properties": {
                "success": {"type": "boolean", "description": "Whether the task was accomplished."},
                "summary": {"type": "string", "description": "What was done, or why it could not be done."}
            },
            "required": ["success", "summary"],
            "additionalProperties": false
        }),
    }]
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CompletionArgs {
    success: bool,
    #[serde(default)]
    summary: String,
}

/// Runs a function call: its outcome for the model, and what the loop must do.
pub fn handle_function(name: &str, arguments: &serde_json::Value) -> (ToolOutcome, Option<Effect>) {
    match name {
        TASK_COMPLETION => match CompletionArgs::deserialize(arguments) {
            Ok(args) => (
                ToolOutcome::ok("Task completion recorded."),
                Some(Effect::Complete { success: args.success, summary: args.summary }),
            ),
            Err(e) => (
                ToolOutcome::error(format!(
                    "invalid arguments for {TASK_COMPLETION}: {e}; expected {{\"success\": bool, \"summary\": string}}"
                )),
                None,
            ),
        },
        other => (ToolOutcome::error(format!("unknown tool {other:?}")), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_is_parsed_and_validated() {
        let (outcome, effect) = handle_function(TASK_COMPLETION, &json!({"success": true, "summary": "done"}));
        assert!(outcome.ok);
        assert_eq!(effect, Some(Effect::Complete { success: true, summary: "done".into() }));
        let (outcome, effect) = handle_function(TASK_COMPLETION, &json!({"success": "yes"}));
        assert!(!outcome.ok && effect.is_none());
        let (outcome, _) = handle_function("rm_rf", &json!({}));
        assert!(!outcome.ok && outcome.message.contains("rm_rf"));
    }
}
