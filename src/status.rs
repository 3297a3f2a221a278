//! The status document (docs/events.md): what `agentd status --json` and `GET /v1/tasks/{id}` return and what `agentd
//! run`
//! writes to `runs/{id}.json` — the task file as submitted beside the stored records of its run.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::record::{Outcome, PendingToolCall, ReplayInfo, ScreenshotRef, StepRecord, TaskState, Turn, Usage, Waiting};
use crate::task::conversation::{Conversation, ConversationStep, ConversationTurn, TurnOutcome};
use crate::task::{Instructions, TaskSpec};

/// The instructions of an exported conversation (docs/humans.md) when no next message is given.
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
    /// The `remote` tool calls the task waits for the API client to answer (in `awaiting_tool`, docs/tools.md); derived
    /// from the last step (its `awaiting_tools` without answers), never stored on its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_tool_calls: Vec<PendingToolCall>,
    /// For a task that replays another (docs/replay-and-verify.md): which, where the screen diverged, where the model
    /// took over;
    /// derived from the task file and the steps, never stored on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<ReplayInfo>,
    /// What a task in `waiting_for_human` waits for (docs/humans.md); derived, never stored on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Waiting>,
    /// The turns of the conversation with the task (docs/humans.md), the current one last; the task's `outcome`,
    /// `started_at` and `finished_at` are the last turn's. A task that was never sent a message has one.
    #[serde(default)]
    pub turns: Vec<Turn>,
    /// The queue's marker that the task waits because a person took its desktop over (`agentd pause`, docs/humans.md):
    /// what `waiting` of kind `takeover` is derived from. Not part of the document (`waiting` shows it).
    #[serde(skip)]
    pub taken_over: bool,
    /// The desktop of the pool (docs/providers.md) the task's latest attempt ran on, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desktop: Option<String>,
    /// The last failure of a pool desktop the task was given (docs/providers.md: `{desktop, command, exit_code, output,
    /// at}`); the task went back to the queue and ran on another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desktop_failure: Option<serde_json::Value>,
}

/// A task in a listing (`GET /v1/tasks`, `agentd list`, the console's list): its record, or — when its stored
/// row cannot be decoded (changed by hand, or written by a broken version) — what could be read of it, so
/// one such row never hides the others.
#[derive(Debug, Clone, PartialEq)]
pub enum ListedTask {
    Record(Box<TaskRecord>),
    Unreadable(UnreadableTask),
}

impl ListedTask {
    pub fn id(&self) -> &str {
        match self {
            Self::Record(record) => &record.id,
            Self::Unreadable(task) => &task.id,
        }
    }

    /// The record, if the task could be read.
    pub fn record(&self) -> Option<&TaskRecord> {
        match self {
            Self::Record(record) => Some(record),
            Self::Unreadable(_) => None,
        }
    }
}

/// What a listing shows of a task whose stored row cannot be decoded: its id, its state when that column is
/// readable, when it was created, and why the rest cannot be read (the column and the decoder's message).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnreadableTask {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<TaskState>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    pub error: String,
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

    /// Fills `replay` from the task file and the steps (docs/replay-and-verify.md).
    pub fn derive_replay(&mut self) {
        // The stored turns (before `derive_turns`): the earlier ones whole and where the current one begins.
        let later_turns_from = self.turns.get(1).map(|turn| turn.first_step);
        self.replay = self
            .task
            .replay
            .as_ref()
            .map(|spec| ReplayInfo::of_steps(spec.of.to_string(), &self.steps, later_turns_from));
    }
}

impl TaskRecord {
    /// The task file that continues this task's conversation in a new task (docs/humans.md, `agentd export ID
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A finished task of `steps` steps whose stored turns are `turns` (`null` for one never continued).
    fn record(steps: u32, turns: serde_json::Value) -> TaskRecord {
        let step = |i: u32| {
            serde_json::json!({"index": i, "started_at": "2026-01-01T00:00:01Z", "duration_ms": 5,
                "screenshot": {"url": "file:///x", "width": 1280, "height": 800, "key": "k"},
                "model_text": format!("step {i}"), "actions": [{"type": "click", "x": 10, "y": i}], "results": [],
                "usage": {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0, "cost_usd": 0.0},
                "calls": [], "call_results": [], "finished": true})
        };
        let mut record: TaskRecord = serde_json::from_value(serde_json::json!({
            "version": 1, "id": "t1", "state": "succeeded", "created_at": "2026-01-01T00:00:00Z",
            "started_at": "2026-01-01T00:00:00Z", "finished_at": "2026-01-01T00:01:00Z", "attempt": 1,
            "worker": null, "task": {"id": "t1", "instructions": "log in"},
            "outcome": {"success": true, "summary": "done", "reason": "completed"},
            "usage": {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0, "cost_usd": 0.0},
            "steps": (0..steps).map(step).collect::<Vec<_>>(),
            "turns": if turns.is_null() { serde_json::json!([]) } else { turns }
        }))
        .expect("record");
        record.derive();
        record
    }

    #[test]
    fn a_task_never_continued_has_one_turn_and_a_continued_one_fills_its_current_turn() {
        let single = record(2, serde_json::Value::Null);
        assert_eq!(single.turns.len(), 1);
        let turn = &single.turns[0];
        assert_eq!(
            (turn.index, turn.instructions.as_str(), turn.first_step, turn.last_step),
            (0, "log in", 0, Some(1))
        );
        assert_eq!((turn.outcome.as_ref(), turn.finished_at), (single.outcome.as_ref(), single.finished_at));

        let earlier = serde_json::json!([
            {"index": 0, "instructions": "log in", "started_at": "2026-01-01T00:00:00Z",
             "finished_at": "2026-01-01T00:00:30Z", "first_step": 0, "last_step": 1,
             "outcome": {"success": false, "summary": "no", "reason": "max_steps"}},
            {"index": 1, "instructions": "now open Reports", "first_step": 2}
        ]);
        let continued = record(4, earlier);
        assert_eq!(continued.turns.len(), 2);
        assert_eq!(continued.turns[0].outcome.as_ref().map(|o| o.summary.as_str()), Some("no"));
        let current = &continued.turns[1];
        assert_eq!((current.first_step, current.last_step), (2, Some(3)));
        assert_eq!(current.outcome, continued.outcome);
        // Deriving again changes nothing.
        let mut again = continued.clone();
        again.derive();
        assert_eq!(again, continued);
    }

    #[test]
    fn the_continuation_holds_every_turn_with_its_steps_and_the_next_message() {
        let earlier = serde_json::json!([
            {"index": 0, "instructions": "log in", "first_step": 0, "last_step": 0,
             "outcome": {"success": true, "summary": "in", "reason": "completed"}},
            {"index": 1, "instructions": "open Reports", "first_step": 1}
        ]);
        let spec = record(3, earlier).continuation(Some("export April"));
        assert_eq!(spec.instructions.as_str(), "export April");
        assert_eq!(spec.id, None);
        let conversation = spec.conversation.expect("conversation");
        assert_eq!(conversation.from.as_ref().map(|id| id.as_str()), Some("t1"));
        let turns: Vec<(&str, usize)> =
            conversation.turns.iter().map(|t| (t.instructions.as_str(), t.steps.len())).collect();
        assert_eq!(turns, [("log in", 1), ("open Reports", 2)]);
        assert_eq!(conversation.turns[1].steps[1].text, "step 2");
        assert_eq!(conversation.turns[1].outcome.as_ref().map(|o| o.summary.as_str()), Some("done"));
        // Read back as a task file, it is one.
        let text = serde_json::to_string(&TaskSpec { conversation: Some(conversation), ..spec_of("x") }).expect("json");
        TaskSpec::parse(&text, "exported.json").expect("a valid task file");
        // Without a message, it says to carry on.
        let plain = record(1, serde_json::Value::Null).continuation(None);
        assert_eq!(plain.instructions.as_str(), CONTINUE_INSTRUCTIONS);
    }

    fn spec_of(instructions: &str) -> TaskSpec {
        serde_json::from_value(serde_json::json!({"instructions": instructions})).expect("spec")
    }
}
