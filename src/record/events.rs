//! Task events (docs/events.md): the ordered stream a task emits while it runs, stored by the queue and served over
//! SSE.
//!
//! Every event is `{seq, task_id, ts, type, …}`; `seq` is per task, strictly increasing, and continues
//! across attempts. The sink that numbers them lives with the loop (`agent::events::EventSink`).

use agentd_computer::Action;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::{Outcome, StuckCheck, TaskState, Usage};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub seq: u64,
    pub task_id: String,
    #[serde(with = "time::serde::rfc3339")]
    pub ts: OffsetDateTime,
    #[serde(flatten)]
    pub kind: EventKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeltaKind {
    Text,
    Thinking,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    TaskQueued {},
    /// A message to a finished task queued a new turn of it (docs/humans.md): `turn` is the new turn's index.
    TurnQueued {
        turn: u32,
    },
    TaskStarted {
        attempt: u32,
        worker: String,
    },
    /// The claim gave the task a desktop of the pool (docs/providers.md); `reset`: its reset command ran first.
    DesktopLeased {
        desktop: String,
        reset: bool,
        duration_ms: u64,
    },
    /// The pool desktop the claim gave the task failed (its reset): it left the pool and the task went back
    /// to the queue. `failure`: `{desktop, command, exit_code?, reason, output, at}`.
    DesktopFailed {
        failure: serde_json::Value,
    },
    StepStarted {
        step: u32,
        /// Who takes the step: absent for the model, `"human"` for a person who took the desktop over.
        #[serde(default, skip_serializing_if = "crate::record::By::is_model")]
        by: crate::record::By,
    },
    ModelDelta {
        step: u32,
        kind: DeltaKind,
        text: String,
    },
    ActionStarted {
        step: u32,
        index: u32,
        action: Action,
    },
    ActionFinished {
        step: u32,
        index: u32,
        ok: bool,
        message: String,
        duration_ms: u64,
    },
    ScreenshotSaved {
        step: u32,
        key: String,
        url: String,
        width: u32,
        height: u32,
        bytes: u64,
    },
    StepFinished {
        step: u32,
        duration_ms: u64,
        usage: Usage,
    },
    WaitingForHuman {
        reason: String,
        /// The model's question (`ask_human`, docs/humans.md), when that is what the task waits for.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        question: Option<String>,
        /// The `ask_human` call the answer becomes the result of.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
    },
    TaskFinished {
        state: TaskState,
        outcome: Outcome,
        usage: Usage,
    },
    // --- Granular events (docs/tools.md): the boundaries of a model turn as it streams, and of tool executions. ---
    /// The model was asked for the step's turn.
    MessageStart {
        step: u32,
    },
    /// The turn is over; `interrupted` when it was cut short (cancel, timeout, error) and nothing of it ran.
    MessageEnd {
        step: u32,
        interrupted: bool,
    },
    /// A text block begins; its deltas are `model_delta` with `kind: "text"`.
    TextStart {
        step: u32,
    },
    /// The text block is complete.
    TextEnd {
        step: u32,
        text: String,
    },
    /// A thinking block begins; its deltas are `model_delta` with `kind: "thinking"`.
    ThinkingStart {
        step: u32,
    },
    ThinkingEnd {
        step: u32,
        text: String,
    },
    /// The model begins a tool call.
    ToolCallStart {
        step: u32,
        call_id: String,
        name: String,
    },
    /// A piece of the call's arguments as the model streams them (JSON text, not yet complete).
    ToolCallDelta {
        step: u32,
        call_id: String,
        delta: String,
    },
    /// The call as the model made it.
    ToolCallEnd {
        step: u32,
        call_id: String,
        name: String,
        arguments: serde_json::Value,
    },
    /// A declared tool (docs/tools.md) starts running.
    ToolStarted {
        step: u32,
        call_id: String,
        name: String,
        arguments: serde_json::Value,
    },
    /// Output a tool streams while it runs.
    ToolOutput {
        step: u32,
        call_id: String,
        text: String,
    },
    /// The tool's envelope: the model reads `output`; `details` are for the record only.
    ToolFinished {
        step: u32,
        call_id: String,
        name: String,
        ok: bool,
        output: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        details: Option<serde_json::Value>,
        duration_ms: u64,
    },
    /// The task parked for the API client to answer its `remote` tool calls.
    AwaitingTool {
        step: u32,
        calls: Vec<PendingToolCall>,
    },
    /// The stuck-loop guard fired (docs/task-file.md): the model is warned (`stopped: false`, with the step whose
    /// model call
    /// carries the warning) or the task ends with reason `stuck`.
    StuckDetected {
        step: u32,
        check: StuckCheck,
        count: u32,
        message: String,
        stopped: bool,
    },
    /// A round of the task's verifier checks ran (docs/replay-and-verify.md): `round` counts from 1 in the attempt;
    /// `ok` when every
    /// check passed.
    VerifyFinished {
        round: u32,
        ok: bool,
        checks: Vec<super::CheckResult>,
    },
    /// Something failed (a model call, a tool's transport); `retryable` when a later attempt may not hit it.
    Error {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<u32>,
        message: String,
        retryable: bool,
    },
}

/// A `remote` tool call waiting for the API client's answer (docs/tools.md `pending_tool_calls`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingToolCall {
    pub id: String,
    pub name: String,
    pub arguments: serde_json::Value,
}

impl EventKind {
    /// Every event type's name, as [`EventKind::type_name`] gives them.
    pub const TYPE_NAMES: &'static [&'static str] = &[
        "task_queued",
        "turn_queued",
        "task_started",
        "desktop_leased",
        "desktop_failed",
        "step_started",
        "model_delta",
        "action_started",
        "action_finished",
        "screenshot_saved",
        "step_finished",
        "waiting_for_human",
        "task_finished",
        "message_start",
        "message_end",
        "text_start",
        "text_end",
        "thinking_start",
        "thinking_end",
        "tool_call_start",
        "tool_call_delta",
        "tool_call_end",
        "tool_started",
        "tool_output",
        "tool_finished",
        "awaiting_tool",
        "stuck_detected",
        "verify_finished",
        "error",
    ];

    pub fn type_name(&self) -> &'static str {
        match self {
            Self::TaskQueued {} => "task_queued",
            Self::TurnQueued { .. } => "turn_queued",
            Self::TaskStarted { .. } => "task_started",
            Self::DesktopLeased { .. } => "desktop_leased",
            Self::DesktopFailed { .. } => "desktop_failed",
            Self::StepStarted { .. } => "step_started",
            Self::ModelDelta { .. } => "model_delta",
            Self::ActionStarted { .. } => "action_started",
            Self::ActionFinished { .. } => "action_finished",
            Self::ScreenshotSaved { .. } => "screenshot_saved",
            Self::StepFinished { .. } => "step_finished",
            Self::WaitingForHuman { .. } => "waiting_for_human",
            Self::TaskFinished { .. } => "task_finished",
            Self::MessageStart { .. } => "message_start",
            Self::MessageEnd { .. } => "message_end",
            Self::TextStart { .. } => "text_start",
            Self::TextEnd { .. } => "text_end",
            Self::ThinkingStart { .. } => "thinking_start",
            Self::ThinkingEnd { .. } => "thinking_end",
            Self::ToolCallStart { .. } => "tool_call_start",
            Self::ToolCallDelta { .. } => "tool_call_delta",
            Self::ToolCallEnd { .. } => "tool_call_end",
            Self::ToolStarted { .. } => "tool_started",
            Self::ToolOutput { .. } => "tool_output",
            Self::ToolFinished { .. } => "tool_finished",
            Self::AwaitingTool { .. } => "awaiting_tool",
            Self::StuckDetected { .. } => "stuck_detected",
            Self::VerifyFinished { .. } => "verify_finished",
            Self::Error { .. } => "error",
        }
    }
}
