//! Task events (§8): the ordered stream a task emits while it runs, stored by the queue and served over SSE.
//!
//! Every event is `{seq, task_id, ts, type, …}`; `seq` is per task, strictly increasing, and continues
//! across attempts. The sink that numbers them lives with the loop (`agent::events::EventSink`).

use agentd_computer::Action;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::{Outcome, TaskState, Usage};

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
    TaskStarted { attempt: u32, worker: String },
    StepStarted { step: u32 },
    ModelDelta { step: u32, kind: DeltaKind, text: String },
    ActionStarted { step: u32, index: u32, action: Action },
    ActionFinished { step: u32, index: u32, ok: bool, message: String, duration_ms: u64 },
    ScreenshotSaved { step: u32, key: String, url: String, width: u32, height: u32, bytes: u64 },
    StepFinished { step: u32, duration_ms: u64, usage: Usage },
    WaitingForHuman { reason: String },
    TaskFinished { state: TaskState, outcome: Outcome, usage: Usage },
}

impl EventKind {
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::TaskQueued {} => "task_queued",
            Self::TaskStarted { .. } => "task_started",
            Self::StepStarted { .. } => "step_started",
            Self::ModelDelta { .. } => "model_delta",
            Self::ActionStarted { .. } => "action_started",
            Self::ActionFinished { .. } => "action_finished",
            Self::ScreenshotSaved { .. } => "screenshot_saved",
            Self::StepFinished { .. } => "step_finished",
            Self::WaitingForHuman { .. } => "waiting_for_human",
            Self::TaskFinished { .. } => "task_finished",
        }
    }
}
