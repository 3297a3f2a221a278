//! The status document (§8): what `agentd status --json` and `GET /v1/tasks/{id}` return and what `agentd run`
//! writes to `runs/{id}.json` — the task file as submitted beside the stored records of its run.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::record::{Outcome, PendingToolCall, ReplayInfo, ScreenshotRef, StepRecord, TaskState, Turn, Usage, Waiting};
use crate::task::conversation::{Conversation, ConversationStep, ConversationTurn, TurnOutcome};
use crate::task::{Instructions, TaskSpec};

/// The instructions of an exported conversation (§19) when no next message is given.
pub const CONTINUE_INSTRUCTIONS: &str = "Carry on from where the conversation left off: look at the screen and \
finish what the last turn did not.";

/// The whole task record; `version` is [`crate::record::RECORD_VERSION`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    pub version: u32,
    pub id: String,
    pub state: TaskState,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub started_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub finished_at: Option<OffsetDateTime>,
    pub attempt: u32,
    pub worker: Option<String>,
    pub task: TaskSpec,
    pub outcome: Option<Outcome>,
    pub usage: Usage,
    pub steps: Vec<StepRecord>,
    /// The screen after the last step's actions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_screenshot: Option<ScreenshotRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub computer_state: Option<serde_json::Value>,
    /// Why the task waits for a human (in `waiting_for_human`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_reason: Option<String>,
    /// The `remote` tool calls the task waits for the API client to answer (in `awaiting_tool`, §13); derived
    /// from the last step (its `awaiting_tools` without answers), never stored on its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_tool_calls: Vec<PendingToolCall>,
    /// For a task that replays another (§18): which, where the screen diverged, where the model took over;
    /// derived from the task file and the steps, never stored on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<ReplayInfo>,
    /// What a task in `waiting_for_human` waits for (§20); derived, never stored on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Waiting>,
    /// The turns of the conversation with the task (§19), the current one last; the task's `outcome`,
    /// `started_at` and `finished_at` are the last turn's. A task that was never sent a message has one.
    #[serde(default)]
    pub turns: Vec<Turn>,
}

impl TaskRecord {
    /// Fills every derived field (`pending_tool_calls`, `replay`, `waiting`) from the stored ones.
    pub fn derive(&mut self) {
        self.derive_pending_tool_calls();
        self.derive_replay();
        self.derive_waiting();
        self.derive_turns();
    }

    /// Fills the current (last) turn from the task's row and steps: the stored turns hold the earlier ones
    /// whole and where the current one begins; a task never continued has no stored turn, and its one turn is
    /// the task file's instructions. Without steps (a listing), the current turn's `last_step` is `None`.
    pub fn derive_turns(&mut self) {
        if self.turns.is_empty() {
            self.turns.push(Turn {
                index: 0,
                instructions: self.task.instructions.as_str().to_string(),
                started_at: None,
                finished_at: None,
                outcome: None,
                first_step: 0,
                last_step: None,
            });
        }
        let (started_at, finished_at, outcome) = (self.started_at, self.finished_at, self.outcome.clone());
        if let Some(current) = self.turns.last_mut() {
            current.started_at = started_at;
            current.finished_at = finished_at;
            current.outcome = outcome;
            current.last_step = Turn::last_step_of(current.first_step, &self.steps);
        }
    }

    /// Fills `waiting` from the state and the last step, for a task in `waiting_for_human`.
    pub fn derive_waiting(&mut self) {
        self.waiting = match (self.state, self.steps.last()) {
            (TaskState::WaitingForHuman, Some(step)) => Waiting::of_step(step),
            _ => None,
        };
    }

    /// Fills `pending_tool_calls` from the last step, for a task in `awaiting_tool`.
    pub fn derive_pending_tool_calls(&mut self) {
        self.pending_tool_calls = match (self.state, self.steps.last()) {
            (TaskState::AwaitingTool, Some(step)) => step.pending_tool_calls(),
            _ => Vec::new(),
        };
    }

    /// Fills `replay` from the task file and the steps (§18).
    pub fn derive_replay(&mut self) {
        self.replay = self.task.replay.as_ref().map(|spec| ReplayInfo::of_steps(spec.of.to_string(), &self.steps));
    }
}

impl TaskRecord {
    /// The task file that continues this task's conversation in a new task (§19, `agentd export ID
    /// --conversation`): the task file as submitted, without its id (and without `replay`), its earlier
    /// conversation and every turn of this one as `conversation` (text and actions, no screenshots), and
    /// `next` (else [`CONTINUE_INSTRUCTIONS`]) as the instructions.
    pub fn continuation(&self, next: Option<&str>) -> TaskSpec {
        let mut turns: Vec<ConversationTurn> =
            self.task.conversation.as_ref().map(|c| c.turns.clone()).unwrap_or_default();
        for turn in &self.turns {
            let steps = self
                .steps
                .iter()
                .filter(|step| step.index >= turn.first_step && turn.last_step.is_some_and(|last| step.index <= last))
                .map(|step| ConversationStep { text: step.model_text.clone(), actions: step.actions.clone() })
                .collect();
            turns.push(ConversationTurn {
                instructions: Instructions::from(turn.instructions.as_str()),
                steps,
                outcome: turn.outcome.as_ref().map(|o| TurnOutcome {
                    success: o.success,
                    summary: o.summary.clone(),
                    reason: o.reason,
                }),
            });
        }
        let mut spec = self.task.clone();
        spec.id = None;
        spec.replay = None;
        spec.instructions = Instructions::from(next.unwrap_or(CONTINUE_INSTRUCTIONS));
        spec.conversation = Some(Conversation { from: crate::task::TaskId::parse(&self.id).ok(), turns });
        spec
    }
}
