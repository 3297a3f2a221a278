//! The queue's decisions about a task, written once for both backends: cancel, approve or reject, pause,
//! resume, a person's step on a desktop they took over, the answers to what the last step waits for (remote
//! tool results, a question), a new turn of a conversation, and the rescue of tasks whose lease expired.
//!
//! Each is the same choreography: begin a write transaction; read the facts under it; let
//! [`transitions`](super::transitions) decide (a pure function: the state machine lives there); apply what it
//! decided; wake the workers when a task became claimable; commit. A refusal, or any failure after the
//! transaction began, rolls it back at once, so that no row or database lock outlives it on a pooled
//! connection (PostgreSQL's row locks would make every claim skip the task meanwhile).
//!
//! A backend supplies the transaction ([`Tx`]): its SQL, its locking (SQLite: one writer in-process and
//! `BEGIN IMMEDIATE`; PostgreSQL: the task's row locked `FOR UPDATE`) and its wake-up (PostgreSQL notifies
//! every node; SQLite's workers are woken in-process by the API). Claims, heartbeats and the fenced writes of
//! a worker stay with each backend: their SQL is where the backends differ.

use super::transitions::{self, Change, Expired, Takeover};
use super::{Cancelled, Decision, Paused, QueueError, Rescued};
use crate::record::events::EventKind;
use crate::record::{Outcome, StepRecord, TaskState, Turn};
use crate::status::TaskRecord;

/// A backend that can open a write transaction for a decision.
pub(super) trait Backend: Sync {
    type Tx<'a>: Tx
    where
        Self: 'a;

    /// Begins a write transaction, holding whatever keeps other writers out until it ends.
    async fn begin(&self) -> Result<Self::Tx<'_>, QueueError>;
}

/// One write transaction of a backend.
pub(super) trait Tx: Send + Sized {
    /// A task's state and take-over marker (its row locked where the backend locks rows).
    async fn facts(&mut self, id: &str) -> Result<(TaskState, Option<Takeover>), QueueError>;
    /// The whole task, locked likewise ([`QueueError::Unreadable`] when its row cannot be decoded).
    async fn record(&mut self, id: &str) -> Result<TaskRecord, QueueError>;
    /// The task's last journaled step.
    async fn last_step(&mut self, id: &str) -> Result<Option<StepRecord>, QueueError>;
    /// The index the task's next step gets.
    async fn next_step(&mut self, id: &str) -> Result<u32, QueueError>;
    /// Writes a step: replaces a journaled one (an answer written into the step it answers), or adds it.
    async fn write_step(&mut self, id: &str, step: &StepRecord) -> Result<(), QueueError>;
    /// Appends an event the queue itself emits, numbered after the task's last one.
    async fn event(&mut self, id: &str, kind: EventKind) -> Result<(), QueueError>;
    /// Writes a decision of [`transitions`] about a task no worker may write to now, with its event.
    async fn apply(&mut self, id: &str, change: &Change) -> Result<(), QueueError>;
    /// Queues a finished task again for a new turn of its conversation: a fresh attempt count, time budget
    /// and start, after its steps.
    async fn start_turn(&mut self, id: &str, turns: &[Turn]) -> Result<(), QueueError>;
    /// The running tasks whose lease has expired, with what the rescue decides on.
    async fn expired(&mut self) -> Result<Vec<(String, Expired)>, QueueError>;
    /// Tells the workers, on commit, that a task may be claimable.
    async fn wake_workers(&mut self) -> Result<(), QueueError>;
    async fn commit(self) -> Result<(), QueueError>;
    /// Rolls back at once and gives back `refusal` (a rollback that fails is logged).
    async fn refuse(self, refusal: QueueError) -> QueueError;
}

/// The value of `$result`, or the transaction rolled back and the error returned.
macro_rules! or_refuse {
    ($tx:ident, $result:expr) => {
        match $result {
            Ok(value) => value,
            Err(e) => return Err($tx.refuse(e).await),
        }
    };
}

/// Cancels a queued or waiting task, asks a running one to stop, refuses a finished one.
pub(super) async fn cancel(backend: &impl Backend, id: &str) -> Result<Cancelled, QueueError> {
    let mut tx = backend.begin().await?;
    let (state, _) = or_refuse!(tx, tx.facts(id).await);
    let change = or_refuse!(tx, transitions::cancel(id, state));
    or_refuse!(tx, tx.apply(id, &change).await);
    tx.commit().await?;
    Ok(transitions::cancelled(&change))
}

/// A person's answer to a held step (approve, reject), written into the step it answers. Returns the
/// state the task is in afterwards.
pub(super) async fn decide(backend: &impl Backend, id: &str, decision: &Decision) -> Result<TaskState, QueueError> {
    let mut tx = backend.begin().await?;
    let (state, takeover) = or_refuse!(tx, tx.facts(id).await);
    let last = or_refuse!(tx, tx.last_step(id).await);
    let decided = or_refuse!(tx, transitions::decide(id, state, takeover, last, decision));
    if let Some(step) = &decided.step {
        or_refuse!(tx, tx.write_step(id, step).await);
    }
    or_refuse!(tx, tx.apply(id, &decided.change).await);
    if decided.change.wakes_workers() {
        or_refuse!(tx, tx.wake_workers().await);
    }
    tx.commit().await?;
    Ok(decided.change.state())
}

/// A person asks for the desktop: a running task parks after its step, a queued one at once.
pub(super) async fn pause(backend: &impl Backend, id: &str) -> Result<Paused, QueueError> {
    let mut tx = backend.begin().await?;
    let (state, _) = or_refuse!(tx, tx.facts(id).await);
    let change = or_refuse!(tx, transitions::pause(id, state));
    or_refuse!(tx, tx.apply(id, &change).await);
    tx.commit().await?;
    Ok(transitions::paused(&change))
}

/// A person hands the desktop back (with an optional note for the model).
pub(super) async fn resume(backend: &impl Backend, id: &str, note: Option<&str>) -> Result<(), QueueError> {
    let mut tx = backend.begin().await?;
    let (state, takeover) = or_refuse!(tx, tx.facts(id).await);
    let change = or_refuse!(tx, transitions::resume(id, state, takeover, note));
    or_refuse!(tx, tx.apply(id, &change).await);
    or_refuse!(tx, tx.wake_workers().await);
    tx.commit().await
}

/// A person's action on a taken-over desktop, journaled as their step (its index the task's next one) with
/// its events; with `end`, the step ends the task (a demonstration finished).
pub(super) async fn add_human_step(
    backend: &impl Backend,
    id: &str,
    step: &StepRecord,
    events: Vec<EventKind>,
    end: Option<Outcome>,
) -> Result<(), QueueError> {
    let mut tx = backend.begin().await?;
    let (state, takeover) = or_refuse!(tx, tx.facts(id).await);
    let next = or_refuse!(tx, tx.next_step(id).await);
    or_refuse!(tx, transitions::human_step(id, state, takeover, next, step.index));
    or_refuse!(tx, tx.write_step(id, step).await);
    for kind in events {
        or_refuse!(tx, tx.event(id, kind).await);
    }
    if let Some(outcome) = end {
        or_refuse!(tx, tx.apply(id, &Change::End { outcome, fence: true }).await);
    }
    tx.commit().await
}

/// Answers what the last step of a task waits for (remote tool results, a question): `decide` reads the
/// state and that step under the transaction (with the time, for timeouts) and says what to write.
pub(super) async fn answer_last_step(
    backend: &impl Backend,
    id: &str,
    decide: impl FnOnce(TaskState, Option<StepRecord>, i64) -> Result<transitions::Answered, QueueError>,
) -> Result<(), QueueError> {
    let mut tx = backend.begin().await?;
    let (state, _) = or_refuse!(tx, tx.facts(id).await);
    let last = or_refuse!(tx, tx.last_step(id).await);
    let answered = or_refuse!(tx, decide(state, last, super::now_ms()));
    or_refuse!(tx, tx.write_step(id, &answered.step).await);
    for kind in answered.events {
        or_refuse!(tx, tx.event(id, kind).await);
    }
    or_refuse!(tx, tx.apply(id, &answered.change).await);
    or_refuse!(tx, tx.wake_workers().await);
    tx.commit().await
}

/// A message to a task: a finished one is queued again for a new turn, after its steps.
pub(super) async fn add_turn(backend: &impl Backend, id: &str, text: &str) -> Result<(), QueueError> {
    let mut tx = backend.begin().await?;
    let record = or_refuse!(tx, tx.record(id).await);
    let next_step = or_refuse!(tx, tx.next_step(id).await);
    let new = or_refuse!(
        tx,
        transitions::add_turn(id, record.state, record.task.replay.as_ref(), record.turns, next_step, text)
    );
    or_refuse!(tx, tx.start_turn(id, &new.turns).await);
    or_refuse!(tx, tx.event(id, new.event).await);
    or_refuse!(tx, tx.wake_workers().await);
    tx.commit().await
}

/// Ends or requeues the running tasks whose worker's lease expired (a worker lost, a node gone).
pub(super) async fn rescue_expired(backend: &impl Backend) -> Result<Vec<Rescued>, QueueError> {
    let mut tx = backend.begin().await?;
    let expired = or_refuse!(tx, tx.expired().await);
    let mut rescued = Vec::with_capacity(expired.len());
    let mut wake = false;
    for (id, facts) in expired {
        let change = transitions::rescue(&facts);
        or_refuse!(tx, tx.apply(&id, &change).await);
        wake |= change.wakes_workers();
        rescued.push(Rescued { task_id: id, new_state: change.state() });
    }
    if wake {
        or_refuse!(tx, tx.wake_workers().await);
    }
    tx.commit().await?;
    Ok(rescued)
}
