//! A task's `conversation` field (docs/humans.md): the earlier turns of a conversation this task continues, as
//! `agentd export ID --conversation` writes them. Text only: each turn's instructions, what the model said and
//! did at each step (its actions in screen pixels, docs/task-file.md), and how the turn ended; no screenshots (the task
//! begins on a fresh one). The model is shown them, oldest first, before the task's own instructions, which
//! are the user's next message.
//!
//! `{"from"?: "ID", "turns": [{"instructions", "steps"?: [{"text"?, "actions"?: [ACTION, …]}],
//! "outcome"?: {"success", "summary", "reason"}}, …]}` — 1 to [`MAX_TURNS`] turns, at most [`MAX_STEPS`] steps in
//! all; unknown fields are errors, and every error names its field and line.

use agentd_computer::Action;
use serde::{Deserialize, Deserializer, Serialize};

use super::{Instructions, TaskId};
use crate::record::EndReason;

/// The most turns a conversation may hold.
pub const MAX_TURNS: usize = 1_000;
/// The most steps its turns may hold together.
pub const MAX_STEPS: usize = 10_000;

/// The `conversation` field of a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Conversation {
    /// The task whose conversation this continues (for the reader; nothing is looked up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<TaskId>,
    #[serde(deserialize_with = "turns")]
    #[schemars(length(min = 1, max = MAX_TURNS))]
    pub turns: Vec<ConversationTurn>,
}

/// One earlier turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConversationTurn {
    /// What the user asked in this turn.
    pub instructions: Instructions,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<ConversationStep>,
    /// How the turn ended; absent for one that had not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<TurnOutcome>,
}

/// What the model said and did at one step of an earlier turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConversationStep {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<Action>,
}

/// How an earlier turn ended (the docs/events.md outcome's `success`, `summary`, `reason`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnOutcome {
    pub success: bool,
    pub summary: String,
    pub reason: EndReason,
}

fn turns<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ConversationTurn>, D::Error> {
    let turns = Vec::<ConversationTurn>::deserialize(d)?;
    if turns.is_empty() {
        return Err(serde::de::Error::custom("a conversation holds at least one turn"));
    }
    if turns.len() > MAX_TURNS {
        return Err(serde::de::Error::custom(format!("a conversation holds at most {MAX_TURNS} turns")));
    }
    let steps: usize = turns.iter().map(|t| t.steps.len()).sum();
    if steps > MAX_STEPS {
        return Err(serde::de::Error::custom(format!("a conversation holds at most {MAX_STEPS} steps in all")));
    }
    Ok(turns)
}

impl Conversation {
    /// What the model reads before the task's instructions: the earlier turns, oldest first, then where the
    /// user's next message begins.
    pub fn preamble(&self) -> String {
        let mut text = String::from("This task continues an earlier conversation");
        if let Some(from) = &self.from {
            text.push_str(&format!(" (task {from})"));
        }
        text.push_str(". What happened so far, oldest first (screens of those turns are not shown):\n");
        for (i, turn) in self.turns.iter().enumerate() {
            text.push_str(&format!("\nTurn {}: the user asked: {}\n", i + 1, turn.instructions.as_str()));
            for (n, step) in turn.steps.iter().enumerate() {
                let actions: Vec<String> =
                    step.actions.iter().map(|a| serde_json::to_string(a).unwrap_or_default()).collect();
                let said = if step.text.is_empty() { String::new() } else { format!(" you said: {}", step.text) };
                let did = if actions.is_empty() { String::new() } else { format!(" you did: {}", actions.join(", ")) };
                text.push_str(&format!("  step {}:{said}{did}\n", n + 1));
            }
            match &turn.outcome {
                Some(o) => {
                    let state = if o.success { "succeeded" } else { "did not succeed" };
                    text.push_str(&format!("  the turn {state} ({}): {}\n", o.reason.as_str(), o.summary));
                }
                None => text.push_str("  the turn had not ended\n"),
            }
        }
        text.push_str("\nThe user's next message, which this task is about:\n");
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_preamble_tells_each_turn_in_order_and_what_it_did() {
        let conversation: Conversation = serde_json::from_value(serde_json::json!({
            "from": "t1",
            "turns": [
                {"instructions": "log in as alice",
                 "steps": [{"text": "clicking the name field", "actions": [{"type": "click", "x": 10, "y": 20}]}],
                 "outcome": {"success": true, "summary": "logged in", "reason": "completed"}},
                {"instructions": "open Reports"}
            ]
        }))
        .expect("a conversation");
        let text = conversation.preamble();
        let first = text.find("Turn 1: the user asked: log in as alice").expect("turn 1");
        let second = text.find("Turn 2: the user asked: open Reports").expect("turn 2");
        assert!(first < second, "{text}");
        assert!(text.contains("(task t1)"), "{text}");
        assert!(text.contains(r#"you did: {"type":"click","x":10,"y":20}"#), "{text}");
        assert!(text.contains("succeeded (completed): logged in"), "{text}");
        assert!(text.contains("the turn had not ended"), "{text}");
    }

    #[test]
    fn an_empty_or_unknown_shaped_conversation_is_refused() {
        for bad in [
            serde_json::json!({"turns": []}),
            serde_json::json!({"turns": [{"instructions": ""}]}),
            serde_json::json!({"turns": [{"instructions": "x", "said": "y"}]}),
            serde_json::json!({"turns": [{"instructions": "x", "outcome": {"success": true, "summary": "", "reason": "bored"}}]}),
            serde_json::json!([{"instructions": "x"}]),
        ] {
            assert!(serde_json::from_value::<Conversation>(bad.clone()).is_err(), "{bad}");
        }
    }
}
