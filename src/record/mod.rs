//! Wire types that are stored and served, the vocabulary every layer may use: the parts of the status
//! document (docs/events.md) — states, outcomes, step records, screenshot references —, the persisted usage and
//! tool-call
//! types, and task events ([`events`]). They derive `Serialize`; [`RECORD_VERSION`] says which shape a stored
//! record has. The whole status document, which also holds the task file, is `status::TaskRecord`.

use agentd_computer::Action;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

/// The shape version of stored records and status documents.
pub const RECORD_VERSION: u32 = 1;

pub mod events;

pub use events::{DeltaKind, Event, EventKind, PendingToolCall};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    Queued,
    Running,
    WaitingForHuman,
    /// Parked until the API client answers the step's `remote` tool calls (docs/tools.md): no worker, no lease.
    AwaitingTool,
    Succeeded,
    Failed,
    Cancelled,
}

impl TaskState {
    /// Every state, in the order a task can pass through them.
    pub const ALL: [TaskState; 7] = [
        Self::Queued,
        Self::Running,
        Self::WaitingForHuman,
        Self::AwaitingTool,
        Self::Succeeded,
        Self::Failed,
        Self::Cancelled,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::WaitingForHuman => "waiting_for_human",
            Self::AwaitingTool => "awaiting_tool",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    pub fn is_terminal(&self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }
}

impl std::str::FromStr for TaskState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        serde_json::from_value(serde_json::Value::String(s.to_string())).map_err(|_| {
            format!(
                "unknown state {s:?} (queued, running, waiting_for_human, awaiting_tool, succeeded, failed, cancelled)"
            )
        })
    }
}

/// Why a task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    Completed,
    MaxSteps,
    Timeout,
    Budget,
    Cancelled,
    Rejected,
    Error,
    /// The stuck-loop guard ended it (docs/task-file.md).
    Stuck,
    /// The task's verifier checks still failed after `limits.verify_retries` rounds (docs/replay-and-verify.md).
    VerificationFailed,
}

impl EndReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::MaxSteps => "max_steps",
            Self::Timeout => "timeout",
            Self::Budget => "budget",
            Self::Cancelled => "cancelled",
            Self::Rejected => "rejected",
            Self::Error => "error",
            Self::Stuck => "stuck",
            Self::VerificationFailed => "verification_failed",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub success: bool,
    pub summary: String,
    pub reason: EndReason,
    /// The structured output `task_completion` gave, valid against the task's `output_schema` (docs/task-file.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<serde_json::Value>,
    /// Whether the task's verifier checks passed (docs/replay-and-verify.md): `null` when it has none (or they could
    /// not run).
    #[serde(default)]
    pub verified: Option<bool>,
    /// The last round of verifier checks, in the task's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<CheckResult>,
}

impl Outcome {
    /// An outcome without structured output.
    pub fn new(success: bool, summary: impl Into<String>, reason: EndReason) -> Self {
        Self { success, summary: summary.into(), reason, output: None, verified: None, checks: Vec::new() }
    }

    /// What the model's `task_completion` said (docs/models.md, docs/task-file.md): reason `completed`, not yet
    /// verified.
    pub fn completed(success: bool, summary: String, output: Option<serde_json::Value>) -> Self {
        Self { output, ..Self::new(success, summary, EndReason::Completed) }
    }
}

/// One verifier check's result (docs/replay-and-verify.md): its kind, whether it passed, what was found, and its
/// evidence (for a
/// `screen` check: where the reference was best found, the score and the crop saved as an artifact).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    pub kind: String,
    pub ok: bool,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<serde_json::Value>,
}

impl Outcome {
    /// The state a task with this outcome ends in.
    pub fn state(&self) -> TaskState {
        match (self.success, self.reason) {
            (true, _) => TaskState::Succeeded,
            (false, EndReason::Cancelled) => TaskState::Cancelled,
            _ => TaskState::Failed,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScreenshotRef {
    pub url: String,
    pub width: u32,
    pub height: u32,
    /// The artifact key (`tasks/{id}/{attempt}/{step:05}.png`).
    pub key: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionResult {
    pub ok: bool,
    pub message: String,
    /// For the result of a declared tool (docs/tools.md): its name. Entries without one pair, in order, with `actions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// For a tool's result: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// For a tool's result: the envelope's `details`, kept for the record and never shown to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

impl ActionResult {
    /// The result of a computer action.
    pub fn action(ok: bool, message: impl Into<String>) -> Self {
        Self { ok, message: message.into(), tool: None, call_id: None, details: None }
    }

    /// Whether this is an action's result (not a tool's).
    pub fn is_action(&self) -> bool {
        self.tool.is_none()
    }
}

/// The result of one tool call as the model saw it (kept so a resumed task can rebuild its history).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallResult {
    pub call_id: String,
    pub ok: bool,
    pub message: String,
    /// The envelope's `details` (never shown to the model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub index: u32,
    /// Who took the step: the model (absent), or a person who had the desktop (`"human"`, docs/humans.md).
    #[serde(default, skip_serializing_if = "By::is_model")]
    pub by: By,
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    pub duration_ms: u64,
    pub screenshot: ScreenshotRef,
    pub model_text: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub thinking: String,
    /// The actions in screen pixels, in the order they were attempted.
    pub actions: Vec<Action>,
    /// One per attempted action, and one per declared tool call (those carry `tool`), in the order they ran.
    pub results: Vec<ActionResult>,
    pub usage: Usage,
    /// Whether this step's screenshot differs from the previous step's (`None` for the first step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screen_changed: Option<bool>,
    /// How long the loop waited after the actions for the screen to settle.
    #[serde(default)]
    pub settle_ms: u64,
    /// Whether the actions changed the screen visibly (`None` when the step had no input actions). `false`
    /// is the "no visual change after this action" signal a stuck-loop guard can use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visual_change: Option<bool>,
    /// The model's calls as it made them (model coordinates) and their results, for resuming.
    pub calls: Vec<ToolCall>,
    pub call_results: Vec<CallResult>,
    /// Vendor data to replay the model's turn exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<serde_json::Value>,
    /// False while the step's actions are running (the journal wrote it before them) or wait for a human.
    pub finished: bool,
    /// Set when the step's calls needed a human's approval before they could run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<StepApproval>,
    /// The `remote` tool calls (their ids) the step waits for the API client to answer (docs/tools.md). The answers
    /// arrive as `call_results`; the calls after them run when the task resumes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub awaiting_tools: Vec<String>,
    /// The model's turn was cut short (the task was cancelled or timed out during the model call): the text
    /// is what had streamed so far and no call of it ran.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    /// The stuck-loop guard's warning the model was given with this step's screenshot (docs/task-file.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<GuardNote>,
    /// A person had taken the desktop over before this step and handed it back (docs/humans.md `agentd resume`): the
    /// model was told so with this step's screenshot, with the person's note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handed_back: Option<HandBack>,
    /// What the history budget did before this step's model call: screenshots it dropped from the model's
    /// context, steps it compacted into the summary. Absent when it did nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<HistoryNote>,
    /// The page the computer showed when this step's screenshot was taken (`url`, `title`): browser
    /// computers only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<agentd_computer::PageInfo>,
    /// Files the computer downloaded during this step (a browser's downloads), stored as its artifacts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub downloads: Vec<DownloadRef>,
}

/// A file downloaded during a step: its name, size, and where it is stored (`None` when it was larger than the
/// provider keeps, and so not stored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DownloadRef {
    pub name: String,
    pub bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// Who took a step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum By {
    /// The task's model decided the step's actions.
    #[default]
    Model,
    /// A person who had taken the desktop over did them by hand, through the live view (docs/humans.md).
    Human,
}

impl By {
    pub fn is_model(&self) -> bool {
        *self == Self::Model
    }
}

/// The `waiting_reason` of a task a person took over (docs/humans.md `agentd pause`).
pub const TAKEOVER_REASON: &str = "a person took the desktop over (agentd resume hands it back)";

/// How a person handed the desktop back after a take-over (docs/humans.md): the note they gave the model, if any.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandBack {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl HandBack {
    /// What the model is told with the first screenshot after the take-over.
    pub fn model_note(&self) -> String {
        let said = match self.note.as_deref().map(str::trim).filter(|n| !n.is_empty()) {
            Some(note) => format!(" Their note: {note}"),
            None => String::new(),
        };
        format!(
            "A person used the desktop while this task was paused, and has handed it back.{said} The screen may \
             have changed: look at the current screenshot before you continue."
        )
    }
}

impl HandBack {
    /// The most of a person's actions the model is told of, the latest ones.
    const ACTIONS_TOLD: usize = 40;

    /// What the model is told of the actions a person did by hand (their steps, `"by": "human"`) while they
    /// had the desktop: `None` when they did none through agentd (they may have used the desktop itself).
    pub fn actions_note(actions: &[String]) -> Option<String> {
        if actions.is_empty() {
            return None;
        }
        let skipped = actions.len().saturating_sub(Self::ACTIONS_TOLD);
        let earlier = if skipped > 0 { format!("({skipped} earlier actions, then) ") } else { String::new() };
        Some(format!("While they had it, the person did: {earlier}{}.", actions[skipped..].join("; ")))
    }
}

/// What the history budget did before a step's model call (the task's `context`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HistoryNote {
    /// Screenshots of earlier steps that left the model's context (each stays in the record).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub screenshots_dropped: u32,
    /// Earlier steps that left the model's context for a summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compacted: Option<CompactionNote>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One compaction: which steps left the history, why, who wrote the summary that took their place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompactionNote {
    /// How many steps left the model's history in this compaction.
    pub steps: u32,
    /// Every step before this index is now in the summary only.
    pub through: u32,
    pub reason: CompactionReason,
    /// Who wrote the summary: `model` only when the model's summary call gave text.
    pub by: Compaction,
    /// The estimated prompt tokens before and after.
    pub tokens_before: u64,
    pub tokens_after: u64,
    /// The summary the model sees from this step on (also what a resumed attempt starts from).
    pub summary: String,
    /// The model's summary call, when there was one (also counted in the step's `usage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Why a `model` compaction fell back to the mechanical summary (the call failed or gave no text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
}

/// Who writes the summary of compacted steps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Compaction {
    /// One line per step from the record (what the model said, its actions and their results): no model
    /// call, so it costs nothing and cannot fail.
    #[default]
    Mechanical,
    /// The model itself, in one extra call to the same adapter (counted in usage and cost).
    Model,
}

impl Compaction {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Mechanical => "mechanical",
            Self::Model => "model",
        }
    }
}

/// Which budget a compaction kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompactionReason {
    /// More steps than `context.keep_steps`.
    Steps,
    /// The estimated prompt over `context.max_tokens`.
    Tokens,
    /// The estimated prompt near the model's context window.
    Window,
}

/// What the stuck-loop guard saw (docs/task-file.md): which check, how many steps or turns in a row, and what the model
/// was told (or why the task ended).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardNote {
    pub check: StuckCheck,
    pub count: u32,
    pub message: String,
}

/// The guard's checks, named as their thresholds are (`[guard]`, a task's `"guard"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StuckCheck {
    /// Steps in a row whose actions changed nothing on screen.
    NoChangeSteps,
    /// The same actions again on an unchanged screen.
    RepeatActions,
    /// Turns with neither an action, a tool call nor a completion.
    IdleTurns,
    /// Steps in a row that only waited (or looked) on an unchanged screen: waiting on purpose has a budget
    /// of its own, larger than `no_change_steps`, instead of counting as steps that changed nothing.
    WaitSteps,
}

impl StuckCheck {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::NoChangeSteps => "no_change_steps",
            Self::RepeatActions => "repeat_actions",
            Self::IdleTurns => "idle_turns",
            Self::WaitSteps => "wait_steps",
        }
    }
}

impl StepRecord {
    /// A step as it begins: its screenshot taken, nothing asked or done yet.
    pub fn begun(index: u32, started_at: OffsetDateTime, screenshot: ScreenshotRef) -> Self {
        Self {
            index,
            by: By::Model,
            started_at,
            duration_ms: 0,
            screenshot,
            model_text: String::new(),
            thinking: String::new(),
            actions: Vec::new(),
            results: Vec::new(),
            usage: Usage::default(),
            screen_changed: None,
            settle_ms: 0,
            visual_change: None,
            calls: Vec::new(),
            call_results: Vec::new(),
            raw: None,
            finished: false,
            approval: None,
            awaiting_tools: Vec::new(),
            interrupted: false,
            guard: None,
            handed_back: None,
            history: None,
            page: None,
            downloads: Vec::new(),
        }
    }

    /// The `remote` tool calls this step still waits for (docs/tools.md `pending_tool_calls`), in the model's order:
    /// those of `awaiting_tools` without an answer in `call_results`, while the step is unfinished.
    pub fn pending_tool_calls(&self) -> Vec<PendingToolCall> {
        if self.finished {
            return Vec::new();
        }
        self.awaiting_tools
            .iter()
            .filter(|id| !self.call_results.iter().any(|r| &r.call_id == *id))
            .filter_map(|id| {
                self.calls.iter().find(|c| &c.id == id).and_then(|call| match &call.kind {
                    CallKind::Function { name, arguments } => {
                        Some(PendingToolCall { id: id.clone(), name: name.clone(), arguments: arguments.clone() })
                    }
                    CallKind::Computer { .. } => None,
                })
            })
            .collect()
    }

    /// Writes a person's answer (or its absence) as the result of the step's `ask_human` call `call_id`:
    /// the result the model reads and a `results[]` entry naming the tool.
    pub fn answer_question(&mut self, call_id: &str, ok: bool, text: &str) {
        self.call_results.push(CallResult {
            call_id: call_id.to_string(),
            ok,
            message: text.to_string(),
            details: None,
        });
        self.results.push(ActionResult {
            ok,
            message: text.to_string(),
            tool: Some(ASK_HUMAN.to_string()),
            call_id: Some(call_id.to_string()),
            details: None,
        });
    }

    /// The `ask_human` call (docs/humans.md) this step waits for a person to answer, and its question: a pending call
    /// (in `awaiting_tools`, unanswered) named `ask_human`.
    pub fn pending_question(&self) -> Option<(String, String)> {
        self.pending_tool_calls().into_iter().find(|call| call.name == ASK_HUMAN).map(|call| {
            let question = call.arguments.get("question").and_then(|q| q.as_str()).unwrap_or_default().to_string();
            (call.id, question)
        })
    }
}

/// The key of a replayed turn's `raw` (and so of its step's `raw`) that says which recorded step it
/// replayed (docs/replay-and-verify.md): `{"agentd_replay": {"step": N, "score": S, "diverged"?: true}}`. A step of a
/// replay task
/// without it is the fallback model's.
pub const REPLAY_MARK: &str = "agentd_replay";

/// What a replay task's record says of its replay (docs/replay-and-verify.md): the task it replays, the step where the
/// live
/// screen first diverged from the recording, and the step from which the model took over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayInfo {
    pub of: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diverged_at: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handed_over: Option<u32>,
}

impl ReplayInfo {
    /// Read from a replay task's steps: the first step marked `diverged`, or the first the model made.
    /// `later_turns_from` is the first step of the conversation's second turn (docs/humans.md), if it has one: a model
    /// answering a message to the finished replay took over without any divergence.
    pub fn of_steps(of: String, steps: &[StepRecord], later_turns_from: Option<u32>) -> Self {
        let mark = |step: &StepRecord| step.raw.as_ref().and_then(|raw| raw.get(REPLAY_MARK)).cloned();
        let handed_over = steps.iter().find(|step| mark(step).is_none()).map(|step| step.index);
        let diverged = steps
            .iter()
            .find(|step| mark(step).is_some_and(|m| m.get("diverged").and_then(|d| d.as_bool()) == Some(true)))
            .map(|step| step.index);
        let took_over = handed_over.filter(|&step| later_turns_from.is_none_or(|later| step < later));
        let diverged_at = match (diverged, took_over) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Self { of, diverged_at, handed_over }
    }
}

/// One turn of a conversation with a task (docs/humans.md): the first is the task file's instructions, each later one a
/// message sent to the finished task (`POST /v1/tasks/{id}/messages`). Step indices keep counting across
/// turns: a turn's steps are `first_step..=last_step` (`last_step` is `None` while it has none).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    pub index: u32,
    pub instructions: String,
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub started_at: Option<OffsetDateTime>,
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub finished_at: Option<OffsetDateTime>,
    #[serde(default)]
    pub outcome: Option<Outcome>,
    pub first_step: u32,
    #[serde(default)]
    pub last_step: Option<u32>,
}

impl Turn {
    /// The last of `steps` that belongs to a turn beginning at `first_step` (steps are in index order).
    pub fn last_step_of(first_step: u32, steps: &[StepRecord]) -> Option<u32> {
        steps.iter().rev().map(|s| s.index).find(|&index| index >= first_step)
    }
}
/// The tool a model asks a person a question with (docs/humans.md): `{"question": string}`.
pub const ASK_HUMAN: &str = "ask_human";

/// What a task in `waiting_for_human` waits for (docs/humans.md `waiting`); derived from the state, the waiting reason
/// and the last step, never stored on its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Waiting {
    /// The step's calls wait for a human's yes or no (a vendor safety check, a scripted `ask_human`, an
    /// approval rule): `proposed` is what would run.
    Approval { reason: String, step: u32, proposed: Proposed },
    /// The model called `ask_human`: its question waits for an answer (`agentd answer`).
    Question { step: u32, call_id: String, question: String },
    /// A person took the desktop over (`agentd pause`); `agentd resume` hands it back.
    Takeover {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<u32>,
    },
}

/// The calls a step proposes, with their computer actions in screen pixels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposed {
    pub calls: Vec<ToolCall>,
    pub actions: Vec<Action>,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub details: serde_json::Value,
    /// The step's screenshot with the proposed actions drawn on it (an approval rule's hold).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotated: Option<ScreenshotRef>,
}

impl Waiting {
    /// What a task taken over by a person waits for (`step`: its last step, if it made any).
    pub fn takeover(last: Option<&StepRecord>) -> Self {
        Self::Takeover { step: last.map(|s| s.index) }
    }

    /// What `step` (the last one, unfinished) waits for, if anything.
    pub fn of_step(step: &StepRecord) -> Option<Self> {
        if step.finished {
            return None;
        }
        if let Some((call_id, question)) = step.pending_question() {
            return Some(Self::Question { step: step.index, call_id, question });
        }
        let approval = step.approval.as_ref().filter(|a| a.approved.is_none())?;
        Some(Self::Approval {
            reason: approval.reason.clone(),
            step: step.index,
            proposed: Proposed {
                calls: step.calls.clone(),
                actions: step.actions.clone(),
                details: approval.details.clone(),
                annotated: approval.annotated.clone(),
            },
        })
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Self::Approval { .. } => "approval",
            Self::Question { .. } => "question",
            Self::Takeover { .. } => "takeover",
        }
    }
}

/// A step that asked for a human: why, and whether the answer was yes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepApproval {
    pub reason: String,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub details: serde_json::Value,
    /// `None` while waiting; the human's answer from the moment it is given (the queue writes it into the
    /// step in the same transaction that answers the API), whatever happens to the task afterwards.
    pub approved: Option<bool>,
    /// The approval rule that held the step (its position among the task's rules, the config's first):
    /// a rejection then tells the model and the task goes on (docs/humans.md). `None` for a vendor's safety check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<u32>,
    /// The step's screenshot with the proposed actions drawn on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotated: Option<ScreenshotRef>,
    /// The actions (screen pixels) a human approved instead of the proposed ones: these ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edited: Option<Vec<Action>>,
    /// Why a human rejected a rule's hold (the model was told; none of the step's calls ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected: Option<String>,
    /// The approved calls began to run: the worker journaled the step so just before them. A step found
    /// unfinished with this set was interrupted while they ran, and they are never run again; an approved
    /// step without it has not run any of them (a cancel that came first ended the task before they ran).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub started: bool,
}

impl StepApproval {
    /// A vendor's or a script's request for approval.
    pub fn asked(reason: String, details: serde_json::Value) -> Self {
        Self {
            reason,
            details,
            approved: None,
            rule: None,
            annotated: None,
            edited: None,
            rejected: None,
            started: false,
        }
    }

    /// Approved and not begun: the step's calls run once the task is claimed again.
    pub fn awaits_its_run(&self) -> bool {
        self.approved == Some(true) && !self.started
    }
}

/// Tokens and money one model call (or a whole task) used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub cost_usd: f64,
}

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
        self.cost_usd += other.cost_usd;
    }
}

/// One call the model made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The vendor's call id (echoed in the result), or one the adapter made up.
    pub id: String,
    #[serde(flatten)]
    pub kind: CallKind,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum CallKind {
    /// Computer actions in the model's coordinate space, to run in order.
    Computer { actions: Vec<Action> },
    /// A declared function tool.
    Function { name: String, arguments: serde_json::Value },
}
