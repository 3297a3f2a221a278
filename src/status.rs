//! The status document (§8): what `agentd status --json` and `GET /v1/tasks/{id}` return and what `agentd run`
//! writes to `runs/{id}.json` — the task file as submitted beside the stored records of its run.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::record::{Outcome, PendingToolCall, ReplayInfo, ScreenshotRef, StepRecord, TaskState, Usage, Waiting};
use crate::task::TaskSpec;

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
    /// The queue's marker that the task waits because a person took its desktop over (`agentd pause`, §20):
    /// what `waiting` of kind `takeover` is derived from. Not part of the document (`waiting` shows it).
    #[serde(skip)]
    pub taken_over: bool,
}

impl TaskRecord {
    /// Fills every derived field (`pending_tool_calls`, `replay`, `waiting`) from the stored ones.
    pub fn derive(&mut self) {
        self.derive_pending_tool_calls();
        self.derive_replay();
        self.derive_waiting();
    }

    /// Fills `waiting` from the state and the last step, for a task in `waiting_for_human`.
    pub fn derive_waiting(&mut self) {
        self.waiting = match (self.state, self.steps.last()) {
            (TaskState::WaitingForHuman, last) if self.taken_over => Some(Waiting::takeover(last)),
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
