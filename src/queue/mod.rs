//! The task queue: durable task state, leases, the step journal and the event log, behind one trait.
//!
//! Lease-based: a worker [`Queue::claim`]s a task and holds it by [`Queue::heartbeat`] (separate from
//! claiming); every write a worker makes carries the lease's fencing token, and a write with a stale token
//! is refused with [`QueueError::LeaseLost`], so a worker that was paused past its lease cannot act on a
//! task another worker now owns. [`Queue::rescue_expired`] hands tasks of dead workers back. Backends:
//! [`sqlite::SqliteQueue`] (embedded, default) and [`postgres::PostgresQueue`] (shared by a fleet of
//! workers on many machines). Both apply the same decisions (`transitions`) with their own SQL, decode rows
//! the same way (`row`), and pass the same scenarios (the `queue_suite` integration tests, one test per
//! scenario and backend).

mod choreography;
pub mod desktop;
pub mod postgres;
mod row;
pub mod sqlite;
mod transitions;

pub use transitions::{AfterFailure, after_retryable_failure};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use thiserror::Error;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use crate::record::Usage;
use crate::record::events::Event;
use crate::record::{HandBack, Outcome, ScreenshotRef, StepRecord, TaskState, Turn};
use crate::status::{ListedTask, TaskRecord};
use crate::task::TaskSpec;

#[derive(Debug, Error)]
pub enum QueueError {
    /// The same task id was submitted before with a different body.
    #[error("task {0} exists with a different body")]
    Conflict(String),
    #[error("task {0} not found")]
    NotFound(String),
    /// The operation does not apply to the task's current state.
    #[error("task {id} is {state}: {message}")]
    WrongState { id: String, state: &'static str, message: String },
    /// This worker's lease is gone (expired and taken, or the task was finished elsewhere).
    #[error("lease lost on task {0}")]
    LeaseLost(String),
    /// The database cannot be reached or failed.
    #[error("queue unavailable: {0}")]
    Unavailable(String),
    /// Stored data could not be read back.
    #[error("queue data corrupt: {0}")]
    Corrupt(String),
    /// One task's stored row, or one of its steps, cannot be decoded (changed outside agentd, or written by a
    /// broken version); `reason` names the column or step and says why. Other tasks are not affected.
    #[error(
        "task {id} cannot be read: {reason} (its stored record was changed outside agentd or written by a broken \
         version; once it is finished, agentd delete {id} removes it)"
    )]
    Unreadable { id: String, reason: String },
    /// The request does not fit the task (answers to remote tool calls it does not wait for, or not all of
    /// them): `field` names the part of the request at fault (`results[1].id`).
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
}

/// A task to enqueue. `spec.id` is set (a generated id when the client gave none).
#[derive(Debug, Clone)]
pub struct NewTask {
    pub spec: TaskSpec,
    pub max_attempts: u32,
}

impl NewTask {
    pub fn id(&self) -> &str {
        self.spec.id.as_ref().map_or("", |id| id.as_str())
    }
}

#[derive(Debug, Clone)]
pub enum Submitted {
    Created(TaskRecord),
    /// The same id and body were submitted before: here is that task.
    Existing(TaskRecord),
}

impl Submitted {
    pub fn record(&self) -> &TaskRecord {
        match self {
            Self::Created(r) | Self::Existing(r) => r,
        }
    }
}

/// Who is claiming.
#[derive(Debug, Clone)]
pub struct WorkerIdentity {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// What the worker's machine fills into desktop keys (one task per desktop at a time).
    pub desktops: desktop::DesktopScope,
    /// The free desktops of the worker's pool (docs/providers.md) a pool task may take, in the order it prefers them.
    pub pool: Vec<desktop::PoolOffer>,
}

/// A claimed task: what a worker needs to run (or resume) it, and the token every write must carry.
#[derive(Debug, Clone)]
pub struct Lease {
    pub task_id: String,
    pub token: i64,
    pub attempt: u32,
    pub max_attempts: u32,
    pub spec: TaskSpec,
    /// Steps recorded by earlier attempts.
    pub steps: Vec<StepRecord>,
    /// The seq the next event of this task gets.
    pub next_seq: u64,
    /// Time the task ran in earlier attempts.
    pub elapsed: Duration,
    /// The turns of the conversation (docs/humans.md), the current one last; empty for a task never sent a message.
    pub turns: Vec<Turn>,
    /// A person had taken the desktop over (`pause`) and handed it back (`resume`) since the last attempt
    /// ran: the next step tells the model so, with the note.
    pub handed_back: Option<HandBack>,
    /// The desktop of the worker's pool (docs/providers.md) the claim gave the task, by name.
    pub desktop: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseStatus {
    /// `pause_requested`: a person wants the desktop (docs/humans.md): park the task after its current step.
    Held {
        cancel_requested: bool,
        pause_requested: bool,
    },
    Lost,
}

/// How a finished attempt ends the task.
#[derive(Debug, Clone)]
pub struct Finish {
    pub outcome: Outcome,
    pub usage: Usage,
    pub final_screenshot: Option<ScreenshotRef>,
    pub computer_state: Option<serde_json::Value>,
}

/// How a worker hands a task back without finishing it.
#[derive(Debug, Clone, PartialEq)]
pub enum Release {
    /// Back to `queued`. `count_attempt: false` for a graceful shutdown (the attempt did not fail).
    Requeue { count_attempt: bool, delay: Duration, reason: String },
    /// Back to `queued` in the same attempt, because the pool desktop the claim gave it failed its `reset`
    /// (docs/providers.md); `failure` (JSON: desktop, command, exit code, output) is kept in the task's record.
    DesktopFailed { failure: serde_json::Value },
    /// Park in `waiting_for_human` until approved or rejected.
    WaitForHuman { reason: String },
    /// Park in `waiting_for_human` for a take-over (docs/humans.md: a pause was asked for), until `resume`; the next
    /// claim continues the same attempt.
    TakeOver,
    /// Park in `awaiting_tool` until the API client answers the last step's `remote` tool calls (docs/tools.md), in the
    /// same attempt. The pending calls are the journaled step's (`StepRecord::pending_tool_calls`).
    AwaitTools,
}

/// The API client's answer to one pending `remote` tool call (docs/tools.md): the envelope `{ok, output, details?}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolAnswer {
    pub id: String,
    pub ok: bool,
    pub output: String,
    pub details: Option<serde_json::Value>,
}

/// What ends a task's wait for the answer to its `ask_human` question (docs/humans.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HumanAnswer {
    /// A person's answer: the call's result, and the task goes on.
    Text(String),
    /// Nobody answered the question of call `call_id` within `after_secs` (the daemon's sweep).
    TimedOut { call_id: String, then: crate::task::OnHumanTimeout, after_secs: u64 },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancelled {
    /// It was queued or waiting: it is cancelled now.
    Now,
    /// It is running: its worker stops at the next safe point.
    Requested,
}

/// What a pause (docs/humans.md take-over) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Paused {
    /// It was queued: it waits for the person now, before it starts.
    Now,
    /// It is running: its worker parks it after its current step.
    Requested,
}

/// A human's answer to a task waiting for one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Approve,
    /// Approve, with these actions (screen pixels) run instead of the waiting step's computer actions (docs/humans.md).
    ApproveEdited {
        actions: Vec<agentd_computer::Action>,
    },
    /// A rejection. Of an approval rule's hold the model is told why and the task goes on; of a vendor's
    /// safety check (or a script's question) the task ends `rejected`.
    Reject {
        reason: String,
    },
}

/// Filter for [`Queue::list`].
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub state: Option<TaskState>,
    pub limit: u32,
    /// Only tasks whose id starts with this (an evaluation's runs, docs/eval.md).
    pub id_prefix: Option<String>,
    /// Only tasks whose id ends with this (an evaluation's first run names it).
    pub id_suffix: Option<String>,
}

/// What the rescuer did with one expired lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rescued {
    pub task_id: String,
    pub new_state: TaskState,
}

/// What another process sharing the queue tells this one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueSignal {
    /// A task may have become claimable (submitted, requeued, approved, answered, rescued), or signals may have been
    /// missed (the listening connection was re-established): look for work now.
    Work,
    /// A cancel was requested for this task; the process running it stops it at the next safe point.
    Cancel(String),
    /// A pause (take-over, docs/humans.md) was requested for this task; the process running it parks it after its
    /// current step.
    Pause(String),
}

/// Receives [`QueueSignal`]s.
pub type SignalHandler = std::sync::Arc<dyn Fn(QueueSignal) + Send + Sync>;

#[async_trait]
pub trait Queue: Send + Sync {
    /// For logs and `config check`.
    fn describe(&self) -> String;

    /// The model vendors' per-minute budget every node of this queue shares (`crate::budget`), when the
    /// backend can keep one; `None`: each process keeps its own.
    fn rate_budget(&self) -> Option<Arc<dyn crate::budget::Budget>> {
        None
    }

    /// Enqueues a task (writing its `task_queued` event), or returns the existing task with that id.
    async fn submit(&self, task: NewTask) -> Result<Submitted, QueueError>;

    /// A task with its steps; one whose row or a step of which cannot be decoded is
    /// [`QueueError::Unreadable`], naming the column or step.
    async fn get(&self, id: &str) -> Result<TaskRecord, QueueError>;

    /// Tasks newest first, without their steps. A task whose row cannot be decoded is listed as
    /// [`ListedTask::Unreadable`] in its place, never failing the listing.
    async fn list(&self, filter: &ListFilter) -> Result<Vec<ListedTask>, QueueError>;

    /// How many steps each of these tasks has recorded (what [`Queue::list`] leaves out). A task with no
    /// step, or unknown, is missing from the answer. The backends count in one query; this default reads
    /// each task.
    async fn step_counts(&self, ids: &[String]) -> Result<BTreeMap<String, u64>, QueueError> {
        let mut counts = BTreeMap::new();
        for id in ids {
            match self.get(id).await {
                Ok(record) if !record.steps.is_empty() => {
                    counts.insert(id.clone(), record.steps.len() as u64);
                }
                Ok(_) | Err(QueueError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(counts)
    }

    /// Claims the oldest queued task whose labels the worker has, leasing it for `lease_for`. A task whose
    /// desktop ([`desktop`]) is held by a task running under a live lease is skipped: it waits its turn.
    async fn claim(&self, worker: &WorkerIdentity, lease_for: Duration) -> Result<Option<Lease>, QueueError>;

    /// Extends a lease; tells whether it is still held and whether a cancel was requested.
    async fn heartbeat(&self, task_id: &str, token: i64, lease_for: Duration) -> Result<LeaseStatus, QueueError>;

    /// Journals a step (fenced). `elapsed` is the task's total run time so far, `usage` what its model calls
    /// have used so far (shown while it runs: a budget can be watched).
    async fn record_step(
        &self,
        task_id: &str,
        token: i64,
        step: &StepRecord,
        elapsed: Duration,
        usage: &Usage,
    ) -> Result<(), QueueError>;

    /// Appends events. With a token the write is fenced (a worker's events); without, it is the daemon's own.
    async fn append_events(&self, task_id: &str, token: Option<i64>, events: &[Event]) -> Result<(), QueueError>;

    /// Events with `seq > after`, in order, at most `limit`.
    async fn events_after(&self, task_id: &str, after: u64, limit: u32) -> Result<Vec<Event>, QueueError>;

    /// Ends the task (fenced).
    async fn finish(&self, task_id: &str, token: i64, finish: &Finish) -> Result<(), QueueError>;

    /// Hands the task back unfinished (fenced).
    async fn release(&self, task_id: &str, token: i64, release: &Release) -> Result<(), QueueError>;

    /// Cancels a queued, waiting or running task.
    async fn cancel(&self, id: &str) -> Result<Cancelled, QueueError>;

    /// Answers a task in `waiting_for_human` (not one a person took over: that one is resumed), writing the
    /// answer into its waiting step in the same transaction; returns the state the answer left the task in
    /// (what the API reports: read again later, a cancel may have moved it on).
    async fn decide(&self, id: &str, decision: &Decision) -> Result<TaskState, QueueError>;

    /// A person takes the task's desktop over (docs/humans.md): a queued task waits in `waiting_for_human` at once, a
    /// running one is asked to park after its current step (the heartbeat and `QueueSignal::Pause` carry the
    /// request). A waiting or finished task is [`QueueError::WrongState`].
    async fn pause(&self, id: &str) -> Result<Paused, QueueError>;

    /// Hands a taken-over task back (docs/humans.md): queued again, claimable at once, in the same attempt; the next
    /// claim's [`Lease::handed_back`] carries `note`. Only a task parked by [`Queue::pause`] is resumed.
    async fn resume(&self, id: &str, note: Option<&str>) -> Result<(), QueueError>;

    /// Journals a person's step on a desktop they took over (docs/humans.md), with its events: only while the task
    /// is parked for them, and only as its next step (else [`QueueError::WrongState`]). With `end`, the same write
    /// ends the task with that outcome (a demonstration finished).
    async fn add_human_step(
        &self,
        id: &str,
        step: &StepRecord,
        events: Vec<crate::record::events::EventKind>,
        end: Option<Outcome>,
    ) -> Result<(), QueueError>;

    /// Answers every pending `remote` tool call of a task in `awaiting_tool` at once: the answers go into its
    /// last step (`call_results`, and `results[]` entries with `tool`, `call_id`, `details`), a
    /// `tool_finished` event each, and the task is queued again in the same attempt, claimable at once.
    /// Refused whole, naming the field ([`QueueError::Invalid`]): an unknown or repeated call id, a missing
    /// answer; a task not awaiting tools is [`QueueError::WrongState`].
    async fn answer_tools(&self, id: &str, answers: &[ToolAnswer]) -> Result<(), QueueError>;

    /// Queues a new turn of a finished task (docs/humans.md): `text` is the user's next message. In one transaction
    /// under
    /// the row's lock: the current turn is closed with the task's outcome, a turn beginning after the last
    /// step is added, the task goes back to `queued` with a fresh attempt count and time budget, and a
    /// `turn_queued` event follows its events. A task that is not finished is [`QueueError::WrongState`] and
    /// nothing changes.
    async fn add_turn(&self, id: &str, text: &str) -> Result<TaskRecord, QueueError>;
    /// Ends the wait of a task in `waiting_for_human` for the answer to its `ask_human` question (docs/humans.md): the
    /// text goes into its last step as the call's result with a `tool_finished` event, and the task is
    /// queued again in the same attempt, claimable at once; a timeout with `fail` ends the task instead.
    /// Decided under the row's lock: a task not waiting for a question (running, finished, waiting for an
    /// approval, answered already) is [`QueueError::WrongState`] and nothing changes.
    async fn answer_question(&self, id: &str, answer: &HumanAnswer) -> Result<(), QueueError>;

    /// Hands back tasks whose lease expired; a task out of attempts fails.
    async fn rescue_expired(&self) -> Result<Vec<Rescued>, QueueError>;

    /// Number of tasks in each state.
    async fn counts(&self) -> Result<BTreeMap<TaskState, u64>, QueueError>;

    /// Whether the database answers.
    async fn health(&self) -> Result<(), QueueError>;

    /// Deletes a finished task (docs/operations.md) with its steps and events, in one transaction that checks its state
    /// under the row's lock: a task that is not finished is [`QueueError::WrongState`] and nothing changes.
    /// The same transaction puts the id on the purge list ([`Queue::purges`]): its artifacts are deleted
    /// afterwards, and a crash in between leaves them listed, not forgotten.
    async fn delete(&self, id: &str) -> Result<(), QueueError>;

    /// Ids of finished tasks that finished more than `age` ago (by the database's clock), oldest first, at
    /// most `limit`.
    async fn finished_before(&self, age: Duration, limit: u32) -> Result<Vec<String>, QueueError>;

    /// Deletes those of `ids` that are still finished, as [`Queue::delete`] does, in one transaction; returns
    /// the ids deleted (a task that is gone or moved meanwhile is skipped).
    async fn delete_finished(&self, ids: &[String]) -> Result<Vec<String>, QueueError>;

    /// Deleted tasks whose artifacts may still exist, longest deleted first, at most `limit`.
    async fn purges(&self, limit: u32) -> Result<Vec<String>, QueueError>;

    /// The artifacts of these deleted tasks are gone: takes them off the purge list.
    async fn purged(&self, ids: &[String]) -> Result<(), QueueError>;

    /// Delivers the signals other processes sharing this queue send, until `stop` fires, reconnecting as
    /// needed. A backend only one process uses (SQLite) has nothing to deliver and returns at once: the
    /// daemon's own submissions wake its workers directly, and the poll interval is the safety net.
    async fn listen(&self, on_signal: SignalHandler, stop: CancellationToken) {
        let _ = (on_signal, stop);
    }
}

/// How the queue itself ends tasks, the same in every backend.
pub(crate) mod ending {
    use super::QueueError;
    use crate::record::Usage;
    use crate::record::events::EventKind;
    use crate::record::{EndReason, Outcome, TaskState};

    pub fn cancelled() -> Outcome {
        Outcome {
            success: false,
            summary: "cancelled".into(),
            reason: EndReason::Cancelled,
            output: None,
            verified: None,
            checks: Vec::new(),
        }
    }

    pub fn rejected(reason: &str) -> Outcome {
        let summary = if reason.is_empty() { "rejected by a human".to_string() } else { format!("rejected: {reason}") };
        Outcome {
            success: false,
            summary,
            reason: EndReason::Rejected,
            output: None,
            verified: None,
            checks: Vec::new(),
        }
    }

    /// A task a claim found whose stored row cannot be decoded: it can never run.
    pub fn unreadable(reason: &str) -> Outcome {
        Outcome {
            success: false,
            summary: format!("the stored task cannot be read, so it cannot run: {reason}"),
            reason: EndReason::Error,
            output: None,
            verified: None,
            checks: Vec::new(),
        }
    }

    /// A task whose lease expired for the last time.
    pub fn worker_lost(attempts: i64) -> Outcome {
        Outcome {
            success: false,
            summary: format!("the worker running this task was lost {attempts} time(s)"),
            reason: EndReason::Error,
            output: None,
            verified: None,
            checks: Vec::new(),
        }
    }

    /// The `task_finished` event of an ending.
    pub fn event(outcome: &Outcome, usage: Usage) -> EventKind {
        EventKind::TaskFinished { state: outcome.state(), outcome: outcome.clone(), usage }
    }

    pub fn already_finished(id: &str, state: TaskState) -> QueueError {
        QueueError::WrongState { id: id.to_string(), state: state.as_str(), message: "it has already finished".into() }
    }

    pub fn not_awaiting_tools(id: &str, state: TaskState) -> QueueError {
        QueueError::WrongState {
            id: id.to_string(),
            state: state.as_str(),
            message: "only a task in awaiting_tool takes tool results (they may have been answered already)".into(),
        }
    }

    pub fn not_finished(id: &str, state: TaskState) -> QueueError {
        QueueError::WrongState {
            id: id.to_string(),
            state: state.as_str(),
            message: "only a finished task (succeeded, failed or cancelled) takes a new message; wait for it to end"
                .into(),
        }
    }

    /// A message to a replay (docs/replay-and-verify.md) that has no model to answer it (`on_divergence: "stop"`).
    pub fn replay_without_model(id: &str, state: TaskState, of: &str) -> QueueError {
        QueueError::WrongState {
            id: id.to_string(),
            state: state.as_str(),
            message: format!(
                "it replays task {of} with replay.on_divergence \"stop\", so it has no model to answer a message; \
                 replay with a model to continue with (agentd replay {of} --fallback PROVIDER[:MODEL], or \
                 \"on_divergence\": \"model\"), or submit the message as a task of its own"
            ),
        }
    }

    pub fn taken_over(id: &str) -> QueueError {
        QueueError::WrongState {
            id: id.to_string(),
            state: TaskState::WaitingForHuman.as_str(),
            message: "a person took its desktop over (agentd pause): hand it back with resume, not approve/reject"
                .into(),
        }
    }

    pub fn not_waiting(id: &str, state: TaskState) -> QueueError {
        QueueError::WrongState {
            id: id.to_string(),
            state: state.as_str(),
            message: "only a task waiting for a human can be approved or rejected".into(),
        }
    }
}

/// A task runs on a worker only if every label of the task is a label of the worker with the same value.
pub fn labels_match(task: &BTreeMap<String, String>, worker: &BTreeMap<String, String>) -> bool {
    task.iter().all(|(k, v)| worker.get(k) == Some(v))
}

/// A stable hash of a task body, for idempotent submission (same id, same body → same task).
pub fn body_hash(spec: &TaskSpec) -> String {
    let json = serde_json::to_string(spec).unwrap_or_default();
    // FNV-1a 64: stable across versions and platforms, and this is not a security boundary.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in json.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

pub fn now_ms() -> i64 {
    (OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as i64
}

pub fn from_ms(ms: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_a_subset_match() {
        let worker: BTreeMap<String, String> =
            [("os".to_string(), "ubuntu".to_string()), ("gpu".to_string(), "no".to_string())].into();
        assert!(labels_match(&BTreeMap::new(), &worker));
        assert!(labels_match(&[("os".to_string(), "ubuntu".to_string())].into(), &worker));
        assert!(!labels_match(&[("os".to_string(), "windows".to_string())].into(), &worker));
        assert!(!labels_match(&[("arch".to_string(), "arm".to_string())].into(), &worker));
    }
}
