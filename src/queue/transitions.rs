//! The task state machine's decisions, written once for every backend.
//!
//! Pure functions: given the facts of a task's row (its state, whether a cancel was requested, its attempts)
//! and a request, each says what changes — the new state, the outcome and its `task_finished` event, whether
//! the lease token is bumped to fence a lost worker out — or why the request is refused. A backend reads the
//! row under its own lock (`BEGIN IMMEDIATE` in SQLite, `FOR UPDATE` in PostgreSQL), calls the function and
//! writes the [`Change`] with its own SQL. No database and no clock here, so each decision is tested alone.
//!
//! A worker's own writes (finish, release, the step journal) are fenced in the statement itself (`WHERE
//! lease_token = ? AND state = 'running'`), one round trip with nothing to race; here they get the values
//! they write ([`release`]) and the answer when the fence held nobody ([`fenced`]).

use std::time::Duration;

use super::{Cancelled, Decision, HumanAnswer, Paused, QueueError, Release, ToolAnswer, ending};
use crate::record::Usage;
use crate::record::events::EventKind;
use crate::record::{ASK_HUMAN, ActionResult, CallKind, CallResult, EndReason, Outcome, StepRecord, TaskState, Turn};
use crate::task::replay::{OnDivergence, ReplaySpec};
use crate::task::{NO_ANSWER, OnHumanTimeout};

/// Whether a task may be deleted (docs/operations.md): only a finished one (succeeded, failed, cancelled). Decided
/// under the
/// row's lock, so a task that moved meanwhile is refused, never deleted.
pub fn delete(id: &str, state: TaskState) -> Result<(), QueueError> {
    if state.is_terminal() {
        Ok(())
    } else {
        Err(QueueError::WrongState {
            id: id.to_string(),
            state: state.as_str(),
            message: "only a finished task (succeeded, failed or cancelled) can be deleted; cancel it first".into(),
        })
    }
}

/// A task's take-over marker (docs/humans.md), stored beside its state (`takeover`; none is NULL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takeover {
    /// Running: a person asked for the desktop; the worker parks the task after its current step.
    Requested,
    /// In `waiting_for_human` because a person has the desktop (what `waiting.kind = takeover` shows).
    Parked,
    /// Queued after `resume`: the next claim hands the note to the loop and clears the marker.
    Resumed,
}

impl Takeover {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Requested => "requested",
            Self::Parked => "parked",
            Self::Resumed => "resumed",
        }
    }

    /// The stored column; an unknown value counts as none.
    pub fn parse(text: Option<&str>) -> Option<Self> {
        match text? {
            "requested" => Some(Self::Requested),
            "parked" => Some(Self::Parked),
            "resumed" => Some(Self::Resumed),
            _ => None,
        }
    }
}

pub use crate::record::TAKEOVER_REASON;

/// What the rescuer needs to know of a running task's row whose lease expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expired {
    /// A cancel was asked for while the task ran.
    pub cancel_requested: bool,
    /// A pause (take-over) was asked for while the task ran.
    pub pause_requested: bool,
    /// Attempts started so far (the running one included).
    pub attempt: u32,
    pub max_attempts: u32,
}

/// How a decision changes a task that no worker may write to now.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// The task ends with `outcome` (and its `task_finished` event); nobody holds its lease any more. With
    /// `fence` the lease token is bumped, so the worker whose lease expired can never write again.
    End { outcome: Outcome, fence: bool },
    /// The task runs: its worker is asked to stop at the next safe point (the heartbeat carries the request).
    RequestCancel,
    /// A human approved (the answer is in the waiting step): back to `queued`, claimable at once, in the same
    /// attempt.
    Approve,
    /// The API client answered the pending remote tool calls: back to `queued`, claimable at once, in the
    /// same attempt (not marked approved: the answers are in the step).
    Resume,
    /// The task runs: its worker is asked to park it after its current step (the heartbeat and the fleet's
    /// signal carry the request).
    RequestPause,
    /// A person takes the desktop over: parked in `waiting_for_human` with the take-over marker, holding no
    /// worker and no lease. With `fence` (a lost worker's task) the lease token is bumped.
    Park { fence: bool },
    /// A person handed the desktop back: `queued`, claimable at once, marked resumed with the note.
    HandBack { note: Option<String> },
    /// The lease expired with attempts left: back to `queued`, without a worker, the token bumped so the lost
    /// worker is fenced out before anyone claims the task again. The next claim counts a new attempt.
    Requeue,
}

impl Change {
    /// The state the task is in afterwards.
    pub fn state(&self) -> TaskState {
        match self {
            Self::End { outcome, .. } => outcome.state(),
            Self::RequestCancel | Self::RequestPause => TaskState::Running,
            Self::Park { .. } => TaskState::WaitingForHuman,
            Self::Approve | Self::Resume | Self::Requeue | Self::HandBack { .. } => TaskState::Queued,
        }
    }

    /// The event the queue appends for this change, numbered after the task's last one.
    pub fn event(&self) -> Option<EventKind> {
        match self {
            Self::End { outcome, .. } => Some(ending::event(outcome, Usage::default())),
            Self::Park { .. } => {
                Some(EventKind::WaitingForHuman { reason: TAKEOVER_REASON.into(), question: None, call_id: None })
            }
            Self::RequestCancel
            | Self::RequestPause
            | Self::Approve
            | Self::Resume
            | Self::Requeue
            | Self::HandBack { .. } => None,
        }
    }

    /// The task became claimable: waiting workers should look.
    pub fn wakes_workers(&self) -> bool {
        matches!(self, Self::Approve | Self::Resume | Self::Requeue | Self::HandBack { .. })
    }
}

/// Cancels a queued or waiting task now; asks a running one to stop; refuses a finished one.
pub fn cancel(id: &str, state: TaskState) -> Result<Change, QueueError> {
    match state {
        TaskState::Queued | TaskState::WaitingForHuman | TaskState::AwaitingTool => {
            Ok(Change::End { outcome: ending::cancelled(), fence: false })
        }
        TaskState::Running => Ok(Change::RequestCancel),
        finished => Err(ending::already_finished(id, finished)),
    }
}

/// What [`Queue::cancel`](super::Queue::cancel) answers for a change [`cancel`] decided.
pub fn cancelled(change: &Change) -> Cancelled {
    if *change == Change::RequestCancel { Cancelled::Requested } else { Cancelled::Now }
}

/// What a human's decision writes: the waiting step changed (an edit, a rule's rejection), if it is, and the
/// change of the task.
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    pub step: Option<StepRecord>,
    pub change: Change,
}

/// What the model reads for each call of a step a human rejected (docs/humans.md).
pub fn rejected_message(reason: &str) -> String {
    if reason.trim().is_empty() {
        "rejected by a human: this call was not run".to_string()
    } else {
        format!("rejected by a human: {reason}; this call was not run")
    }
}

/// A human's answer, only to a task waiting for one (not one a person took over), `last` being its last
/// step. Every answer is written into the waiting step in the transaction that decides it, so the record
/// says what the API answered whatever happens next (a cancel right after an approval ends the task before
/// the approved calls run, and the step still says approved): approval marks the step approved (with an
/// edit, the edited actions too) and queues the task; a rejection of an approval rule's hold finishes the
/// step with every call refused and the reason, and queues the task (the model is told and goes on); any
/// other rejection fails the task.
pub fn decide(
    id: &str,
    state: TaskState,
    takeover: Option<Takeover>,
    last: Option<StepRecord>,
    decision: &Decision,
) -> Result<Decided, QueueError> {
    if state != TaskState::WaitingForHuman {
        return Err(ending::not_waiting(id, state));
    }
    if takeover == Some(Takeover::Parked) {
        return Err(ending::taken_over(id));
    }
    let waiting = last.filter(|s| !s.finished && s.approval.as_ref().is_some_and(|a| a.approved.is_none()));
    let invalid = |message: &str| QueueError::Invalid { field: "actions".into(), message: message.into() };
    Ok(match decision {
        Decision::Approve => {
            let step = waiting.map(|mut step| {
                if let Some(approval) = step.approval.as_mut() {
                    approval.approved = Some(true);
                }
                step
            });
            Decided { step, change: Change::Approve }
        }
        Decision::ApproveEdited { actions } => {
            let Some(mut step) = waiting else {
                return Err(invalid("the task waits for no step's approval, so there is nothing to edit"));
            };
            if !step.calls.iter().any(|c| matches!(c.kind, CallKind::Computer { .. })) {
                return Err(invalid("the waiting step proposes no computer action to edit; approve or reject it"));
            }
            if actions.is_empty() {
                return Err(invalid("give at least one action to run instead"));
            }
            if let Some(approval) = step.approval.as_mut() {
                approval.approved = Some(true);
                approval.edited = Some(actions.clone());
            }
            Decided { step: Some(step), change: Change::Approve }
        }
        Decision::Reject { reason } => match waiting {
            Some(mut step) if step.approval.as_ref().is_some_and(|a| a.rule.is_some()) => {
                let message = rejected_message(reason);
                if let Some(approval) = step.approval.as_mut() {
                    approval.approved = Some(false);
                    approval.rejected = Some(reason.clone());
                }
                for _ in &step.actions {
                    step.results.push(ActionResult::action(false, message.clone()));
                }
                for call in &step.calls {
                    step.call_results.push(CallResult {
                        call_id: call.id.clone(),
                        ok: false,
                        message: message.clone(),
                        details: None,
                    });
                    if let CallKind::Function { name, .. } = &call.kind {
                        step.results.push(ActionResult {
                            ok: false,
                            message: message.clone(),
                            tool: Some(name.clone()),
                            call_id: Some(call.id.clone()),
                            details: None,
                        });
                    }
                }
                step.finished = true;
                Decided { step: Some(step), change: Change::Resume }
            }
            _ => Decided { step: None, change: Change::End { outcome: ending::rejected(reason), fence: false } },
        },
    })
}

/// What a message to a finished task writes (docs/humans.md): every turn, the current one closed and the new one last,
/// and the `turn_queued` event.
#[derive(Debug, Clone, PartialEq)]
pub struct NewTurn {
    pub turns: Vec<Turn>,
    pub event: EventKind,
}

/// A new turn of a finished task (succeeded, failed or cancelled; refused otherwise): `turns` are the task's
/// turns as its row reads (the current one last, with the task's outcome), `next_step` the index after its
/// last step. The current turn keeps its steps below `next_step`; the new one begins at `next_step`, so step
/// indices keep counting across turns.
///
/// A replay task (docs/replay-and-verify.md, `replay` in its task file) answers a message with its model, the replay's
/// fallback:
/// one that replays with `on_divergence: "model"` takes the message; one with `"stop"` has no model (it is
/// never built) and is refused, naming the field and what to do instead.
pub fn add_turn(
    id: &str,
    state: TaskState,
    replay: Option<&ReplaySpec>,
    mut turns: Vec<Turn>,
    next_step: u32,
    text: &str,
) -> Result<NewTurn, QueueError> {
    if !state.is_terminal() {
        return Err(ending::not_finished(id, state));
    }
    if let Some(replay) = replay
        && replay.on_divergence != OnDivergence::Model
    {
        return Err(ending::replay_without_model(id, state, replay.of.as_str()));
    }
    if let Some(current) = turns.last_mut() {
        current.last_step = next_step.checked_sub(1).filter(|&last| last >= current.first_step);
    }
    let index = turns.len() as u32;
    turns.push(Turn {
        index,
        instructions: text.to_string(),
        started_at: None,
        finished_at: None,
        outcome: None,
        first_step: next_step,
        last_step: None,
    });
    Ok(NewTurn { turns, event: EventKind::TurnQueued { turn: index } })
}

/// A person takes the desktop over (docs/humans.md): a queued task is parked before it starts, a running one is asked
/// to park after its current step (asking again changes nothing); a waiting or finished task is refused.
pub fn pause(id: &str, state: TaskState) -> Result<Change, QueueError> {
    match state {
        TaskState::Queued => Ok(Change::Park { fence: false }),
        TaskState::Running => Ok(Change::RequestPause),
        TaskState::WaitingForHuman | TaskState::AwaitingTool => Err(QueueError::WrongState {
            id: id.to_string(),
            state: state.as_str(),
            message: "it is already waiting and holds no desktop; only a queued or running task can be paused".into(),
        }),
        finished => Err(ending::already_finished(id, finished)),
    }
}

/// What [`Queue::pause`](super::Queue::pause) answers for a change [`pause`] decided.
pub fn paused(change: &Change) -> Paused {
    if *change == Change::RequestPause { Paused::Requested } else { Paused::Now }
}

/// A person hands the desktop back: only a task parked for a take-over resumes, with the note.
pub fn resume(
    id: &str,
    state: TaskState,
    takeover: Option<Takeover>,
    note: Option<&str>,
) -> Result<Change, QueueError> {
    if state != TaskState::WaitingForHuman || takeover != Some(Takeover::Parked) {
        return Err(QueueError::WrongState {
            id: id.to_string(),
            state: state.as_str(),
            message: "only a task a person took over (agentd pause) can be resumed".into(),
        });
    }
    Ok(Change::HandBack { note: note.map(str::to_string) })
}

/// A person's action on a taken-over desktop becomes a step of theirs: only while the task is parked for
/// them, and only as the task's next step (`next`: the index the queue would give it).
pub fn human_step(
    id: &str,
    state: TaskState,
    takeover: Option<Takeover>,
    next: u32,
    index: u32,
) -> Result<(), QueueError> {
    if state != TaskState::WaitingForHuman || takeover != Some(Takeover::Parked) {
        return Err(QueueError::WrongState {
            id: id.to_string(),
            state: state.as_str(),
            message: "nobody has taken this desktop over: pause the task first (agentd pause ID)".into(),
        });
    }
    if index != next {
        return Err(QueueError::WrongState {
            id: id.to_string(),
            state: state.as_str(),
            message: format!("its next step is {next}, not {index}: another step was recorded meanwhile"),
        });
    }
    Ok(())
}

/// What answering a task's remote tool calls writes: its last step with the answers in, the `tool_finished`
/// events, and the change of the task itself.
#[derive(Debug, Clone, PartialEq)]
pub struct Answered {
    pub step: StepRecord,
    pub events: Vec<EventKind>,
    pub change: Change,
}

/// The API client's answers to a task's pending `remote` tool calls: only in `awaiting_tool`, exactly one
/// answer per pending call (an unknown id, a repeated id or a missing answer refuses the whole request,
/// naming the field). The answers go into `last` in the model's order of the calls, whatever the request's
/// order. `now_ms` dates the events' `duration_ms` (from the moment the step parked).
pub fn answer_tools(
    id: &str,
    state: TaskState,
    last: Option<StepRecord>,
    answers: &[ToolAnswer],
    now_ms: i64,
) -> Result<Answered, QueueError> {
    if state != TaskState::AwaitingTool {
        return Err(ending::not_awaiting_tools(id, state));
    }
    let Some(mut step) = last else {
        return Err(QueueError::Corrupt(format!("task {id} is awaiting_tool but has no step")));
    };
    let pending = step.pending_tool_calls();
    if pending.is_empty() {
        return Err(QueueError::Corrupt(format!("task {id} is awaiting_tool but its last step awaits no call")));
    }
    let ids = || pending.iter().map(|c| c.id.as_str()).collect::<Vec<_>>().join(", ");
    let invalid = |field: String, message: String| QueueError::Invalid { field, message };
    if answers.is_empty() {
        return Err(invalid("results".into(), format!("no results given; the pending calls are: {}", ids())));
    }
    for (i, answer) in answers.iter().enumerate() {
        if !pending.iter().any(|c| c.id == answer.id) {
            return Err(invalid(
                format!("results[{i}].id"),
                format!("{:?} is not a pending call of task {id}; the pending calls are: {}", answer.id, ids()),
            ));
        }
        if answers[..i].iter().any(|earlier| earlier.id == answer.id) {
            return Err(invalid(format!("results[{i}].id"), format!("a second result for call {:?}", answer.id)));
        }
    }
    let missing: Vec<&str> =
        pending.iter().filter(|c| !answers.iter().any(|a| a.id == c.id)).map(|c| c.id.as_str()).collect();
    if !missing.is_empty() {
        return Err(invalid(
            "results".into(),
            format!(
                "one result per pending call is needed: missing {} (the pending calls are: {})",
                missing.join(", "),
                ids()
            ),
        ));
    }
    let parked_ms = step.started_at.unix_timestamp_nanos() / 1_000_000 + i128::from(step.duration_ms);
    let duration_ms = (i128::from(now_ms) - parked_ms).clamp(0, i128::from(i64::MAX)) as u64;
    let mut events = Vec::with_capacity(pending.len());
    for call in &pending {
        let Some(answer) = answers.iter().find(|a| a.id == call.id) else { continue };
        step.call_results.push(CallResult {
            call_id: call.id.clone(),
            ok: answer.ok,
            message: answer.output.clone(),
            details: answer.details.clone(),
        });
        step.results.push(ActionResult {
            ok: answer.ok,
            message: answer.output.clone(),
            tool: Some(call.name.clone()),
            call_id: Some(call.id.clone()),
            details: answer.details.clone(),
        });
        events.push(EventKind::ToolFinished {
            step: step.index,
            call_id: call.id.clone(),
            name: call.name.clone(),
            ok: answer.ok,
            output: answer.output.clone(),
            details: answer.details.clone(),
            duration_ms,
        });
    }
    Ok(Answered { step, events, change: Change::Resume })
}

/// A person's answer to the `ask_human` question a task waits on (docs/humans.md), or the end of its wait: only in
/// `waiting_for_human` with a pending question in the last step (a task waiting for an approval, or for
/// anything else, is refused). The text becomes the call's result (`call_results`, a `results[]` entry, a
/// `tool_finished` event) and the task is queued again in the same attempt. A timeout names the call it
/// timed out, so a question answered meanwhile (and a later question) is never ended by it; `continue`
/// answers [`NO_ANSWER`], `fail` ends the task (reason `timeout`).
pub fn answer_question(
    id: &str,
    state: TaskState,
    last: Option<StepRecord>,
    answer: &HumanAnswer,
    now_ms: i64,
) -> Result<Answered, QueueError> {
    let refuse = |message: &str| QueueError::WrongState {
        id: id.to_string(),
        state: state.as_str(),
        message: format!("only a task waiting for the answer to its question takes one ({message})"),
    };
    if state != TaskState::WaitingForHuman {
        return Err(refuse("it is not waiting for a human; it may have been answered already"));
    }
    let Some(mut step) = last else {
        return Err(refuse("it waits for an approval: use approve or reject"));
    };
    let Some((call_id, question)) = step.pending_question() else {
        return Err(refuse("it waits for an approval: use approve or reject"));
    };
    let (ok, text) = match answer {
        HumanAnswer::Text(text) => (true, text.clone()),
        HumanAnswer::TimedOut { call_id: timed_out, .. } if *timed_out != call_id => {
            return Err(refuse("the question that timed out was answered"));
        }
        HumanAnswer::TimedOut { then: OnHumanTimeout::Continue, .. } => (true, NO_ANSWER.to_string()),
        HumanAnswer::TimedOut { then: OnHumanTimeout::Fail, after_secs, .. } => {
            let summary = format!("nobody answered the model's question within {after_secs} s: {question}");
            step.answer_question(&call_id, false, &format!("{NO_ANSWER} (timed out after {after_secs} s)"));
            let outcome = Outcome::new(false, summary, EndReason::Timeout);
            return Ok(Answered { step, events: Vec::new(), change: Change::End { outcome, fence: false } });
        }
    };
    let parked_ms = step.started_at.unix_timestamp_nanos() / 1_000_000 + i128::from(step.duration_ms);
    let duration_ms = (i128::from(now_ms) - parked_ms).clamp(0, i128::from(i64::MAX)) as u64;
    step.answer_question(&call_id, ok, &text);
    let events = vec![EventKind::ToolFinished {
        step: step.index,
        call_id,
        name: ASK_HUMAN.to_string(),
        ok,
        output: text,
        details: None,
        duration_ms,
    }];
    Ok(Answered { step, events, change: Change::Resume })
}

/// Whether attempt `attempt` (counting from 1) was the task's last: the one rule for a worker lost
/// ([`rescue`]) and an attempt that failed in a way a later one may not ([`after_retryable_failure`]).
fn attempts_used_up(attempt: u32, max_attempts: u32) -> bool {
    attempt >= max_attempts
}

/// Backoff between attempts of a task that failed in a retryable way: 2 s, 4 s, 8 s … up to 5 minutes.
pub fn retry_delay(attempt: u32) -> Duration {
    Duration::from_secs(2u64.saturating_pow(attempt.min(16)).min(300))
}

/// What becomes of a task whose attempt failed in a way a later attempt may not (a computer or model out
/// of reach): the worker writes it as decided here.
#[derive(Debug, Clone, PartialEq)]
pub enum AfterFailure {
    /// Queued again after a backoff (the longer of [`retry_delay`] and what the model provider asked for).
    Retry(Release),
    /// Its attempts are used up: it ends with the attempt's outcome, saying how many it took.
    Finish(Outcome),
}

/// Decides [`AfterFailure`] for attempt `attempt` of `max_attempts` that ended with `outcome`.
pub fn after_retryable_failure(
    attempt: u32,
    max_attempts: u32,
    outcome: Outcome,
    asked: Option<Duration>,
) -> AfterFailure {
    if attempts_used_up(attempt, max_attempts) {
        AfterFailure::Finish(Outcome { summary: format!("{} (after {attempt} attempts)", outcome.summary), ..outcome })
    } else {
        let delay = retry_delay(attempt).max(asked.unwrap_or_default());
        AfterFailure::Retry(Release::Requeue { count_attempt: true, delay, reason: outcome.summary })
    }
}

/// A running task whose lease expired: queued again while attempts are left; ended when its attempts are
/// used up, or as cancelled when a cancel was requested while the worker lived (a new claim would forget it).
/// A pause asked for while the worker lived is honoured: the task waits for the person, not a new claim.
pub fn rescue(facts: &Expired) -> Change {
    if facts.cancel_requested {
        Change::End { outcome: ending::cancelled(), fence: true }
    } else if attempts_used_up(facts.attempt, facts.max_attempts) {
        Change::End { outcome: ending::worker_lost(i64::from(facts.attempt)), fence: true }
    } else if facts.pause_requested {
        Change::Park { fence: true }
    } else {
        Change::Requeue
    }
}

/// A task a claim took whose stored row (its task file, turns or steps) cannot be decoded: it can never run,
/// so it ends `failed` (reason `error`, the summary saying why) and its lease is fenced, rather than failing
/// that claim and every claim after it while it stays the oldest queued task.
pub fn unreadable(reason: &str) -> Change {
    Change::End { outcome: ending::unreadable(reason), fence: true }
}

/// What a worker's hand-back writes (fenced by its token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handback<'a> {
    /// Back to `queued`, claimable after `delay`. `same_attempt`: the next claim does not count an attempt
    /// (a graceful shutdown). `wakes_workers`: claimable at once, so waiting workers should look.
    Requeue { same_attempt: bool, delay: Duration, wakes_workers: bool },
    /// Parked in `waiting_for_human` with `reason`, its earlier approval spent.
    WaitForHuman { reason: &'a str },
    /// Parked in `awaiting_tool`, holding no worker and no lease; the answers queue it in the same attempt.
    AwaitTools,
    /// Parked in `waiting_for_human` for a take-over (marker [`Takeover::Parked`], reason
    /// [`TAKEOVER_REASON`]), holding no worker and no lease; `resume` queues it in the same attempt.
    TakeOver,
    /// Back to `queued` at once in the same attempt, the failure of its pool desktop (docs/providers.md) kept as
    /// `desktop_failure` (JSON text).
    DesktopFailed { failure: String },
}

pub fn release(release: &Release) -> Handback<'_> {
    match release {
        Release::Requeue { count_attempt, delay, .. } => {
            Handback::Requeue { same_attempt: !count_attempt, delay: *delay, wakes_workers: delay.is_zero() }
        }
        Release::WaitForHuman { reason } => Handback::WaitForHuman { reason },
        Release::AwaitTools => Handback::AwaitTools,
        Release::TakeOver => Handback::TakeOver,
        Release::DesktopFailed { failure } => Handback::DesktopFailed { failure: failure.to_string() },
    }
}

/// A fenced worker write that changed `rows` rows: none means the lease is gone.
pub fn fenced(id: &str, rows: u64) -> Result<(), QueueError> {
    if rows == 0 { Err(QueueError::LeaseLost(id.to_string())) } else { Ok(()) }
}

/// A submission of an id that exists: the same body gets the existing task, another body is refused.
pub fn resubmit(id: &str, stored_hash: &str, hash: &str) -> Result<(), QueueError> {
    if stored_hash == hash { Ok(()) } else { Err(QueueError::Conflict(id.to_string())) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One rule for every kind of failed attempt: the last one of `max_attempts` ends the task, saying how
    /// many it took; an earlier one is retried after the backoff, or later when the provider asked for it.
    #[test]
    fn a_failed_attempt_is_retried_until_the_attempts_are_used_up() {
        let failed = || Outcome::new(false, "model unreachable", EndReason::Error);
        match after_retryable_failure(1, 3, failed(), None) {
            AfterFailure::Retry(Release::Requeue { count_attempt: true, delay, reason }) => {
                assert_eq!(delay, Duration::from_secs(2));
                assert_eq!(reason, "model unreachable");
            }
            other => panic!("{other:?}"),
        }
        match after_retryable_failure(2, 3, failed(), Some(Duration::from_secs(30))) {
            AfterFailure::Retry(Release::Requeue { delay, .. }) => assert_eq!(delay, Duration::from_secs(30)),
            other => panic!("{other:?}"),
        }
        match after_retryable_failure(3, 3, failed(), None) {
            AfterFailure::Finish(outcome) => assert_eq!(outcome.summary, "model unreachable (after 3 attempts)"),
            other => panic!("{other:?}"),
        }
        // The rescue of a lost worker counts the same way.
        let lost =
            |attempt| rescue(&Expired { cancel_requested: false, pause_requested: false, attempt, max_attempts: 3 });
        assert_eq!(lost(2), Change::Requeue);
        assert!(matches!(lost(3), Change::End { .. }));
        assert_eq!(retry_delay(20), Duration::from_secs(300));
    }
    use crate::record::EndReason;

    const ALL: [TaskState; 7] = TaskState::ALL;

    fn reason(change: &Change) -> Option<EndReason> {
        match change {
            Change::End { outcome, .. } => Some(outcome.reason),
            _ => None,
        }
    }

    fn wrong_state(result: &Result<Change, QueueError>) -> Option<&'static str> {
        match result {
            Err(QueueError::WrongState { state, .. }) => Some(state),
            _ => None,
        }
    }

    #[test]
    fn cancel_ends_unclaimed_tasks_asks_running_ones_and_refuses_finished_ones() {
        // (state, what follows: the new state, the answer; or None for a refusal)
        let table = [
            (TaskState::Queued, Some((TaskState::Cancelled, Cancelled::Now))),
            (TaskState::Running, Some((TaskState::Running, Cancelled::Requested))),
            (TaskState::WaitingForHuman, Some((TaskState::Cancelled, Cancelled::Now))),
            (TaskState::AwaitingTool, Some((TaskState::Cancelled, Cancelled::Now))),
            (TaskState::Succeeded, None),
            (TaskState::Failed, None),
            (TaskState::Cancelled, None),
        ];
        assert_eq!(table.each_ref().map(|(s, _)| *s), ALL, "every state is covered");
        for (state, expected) in table {
            let result = cancel("t", state);
            match expected {
                Some((new_state, answer)) => {
                    let change = result.unwrap_or_else(|e| panic!("{state:?}: {e}"));
                    assert_eq!((change.state(), cancelled(&change)), (new_state, answer), "{state:?}");
                    assert!(!change.wakes_workers(), "{state:?}");
                    if let Change::End { fence, .. } = change {
                        assert!(!fence, "no worker holds a {state:?} task: nothing to fence");
                        assert_eq!(reason(&change), Some(EndReason::Cancelled));
                        assert!(
                            matches!(change.event(), Some(EventKind::TaskFinished { state: TaskState::Cancelled, .. })),
                            "{state:?}"
                        );
                    } else {
                        assert_eq!(change.event(), None, "a cancel request is not an event");
                    }
                }
                None => assert_eq!(wrong_state(&result), Some(state.as_str()), "{state:?}: {result:?}"),
            }
        }
    }

    #[test]
    fn only_a_waiting_task_takes_a_decision() {
        let reject = Decision::Reject { reason: "too expensive".into() };
        for state in ALL {
            for decision in [Decision::Approve, reject.clone()] {
                let result = decide("t", state, None, None, &decision).map(|d| d.change);
                if state == TaskState::WaitingForHuman {
                    continue;
                }
                assert_eq!(wrong_state(&result), Some(state.as_str()), "{state:?} {decision:?}: {result:?}");
                let Err(QueueError::WrongState { message, .. }) = result else { unreachable!() };
                assert!(message.contains("waiting for a human"), "{message}");
            }
        }
    }

    #[test]
    fn approval_requeues_and_rejection_fails_with_the_reason() {
        let approve = decide("t", TaskState::WaitingForHuman, None, None, &Decision::Approve).expect("approve").change;
        assert_eq!(approve, Change::Approve);
        assert_eq!(approve.state(), TaskState::Queued);
        assert!(approve.wakes_workers());
        assert_eq!(approve.event(), None);

        // (reason given, the summary it gives)
        let table = [("too expensive", "rejected: too expensive"), ("", "rejected by a human")];
        for (given, summary) in table {
            let decision = Decision::Reject { reason: given.into() };
            let change = decide("t", TaskState::WaitingForHuman, None, None, &decision).expect("reject").change;
            let Change::End { outcome, fence } = &change else { panic!("{change:?}") };
            assert_eq!((outcome.reason, outcome.summary.as_str(), *fence), (EndReason::Rejected, summary, false));
            assert_eq!(change.state(), TaskState::Failed);
            assert!(!change.wakes_workers());
            assert!(matches!(change.event(), Some(EventKind::TaskFinished { state: TaskState::Failed, .. })));
        }
    }

    #[test]
    fn rescue_requeues_while_attempts_last_and_honours_a_cancel() {
        // (cancel requested, attempt, max attempts, new state, end reason)
        let table = [
            (false, 1, 2, TaskState::Queued, None),
            (false, 1, 3, TaskState::Queued, None),
            (false, 2, 2, TaskState::Failed, Some(EndReason::Error)),
            (false, 3, 2, TaskState::Failed, Some(EndReason::Error)),
            (false, 1, 1, TaskState::Failed, Some(EndReason::Error)),
            (true, 1, 2, TaskState::Cancelled, Some(EndReason::Cancelled)),
            (true, 2, 2, TaskState::Cancelled, Some(EndReason::Cancelled)),
        ];
        for (cancel_requested, attempt, max_attempts, state, end) in table {
            let facts = Expired { cancel_requested, pause_requested: false, attempt, max_attempts };
            let change = rescue(&facts);
            assert_eq!((change.state(), reason(&change)), (state, end), "{facts:?}");
            match &change {
                Change::End { fence, .. } => {
                    assert!(fence, "the lost worker is fenced out: {facts:?}");
                    assert!(change.event().is_some() && !change.wakes_workers());
                }
                other => {
                    assert_eq!(*other, Change::Requeue);
                    assert!(change.event().is_none() && change.wakes_workers());
                }
            }
        }
        let lost = rescue(&Expired { cancel_requested: false, pause_requested: false, attempt: 3, max_attempts: 3 });
        let Change::End { outcome, .. } = lost else { panic!("{lost:?}") };
        assert!(outcome.summary.contains("lost 3 time(s)"), "{}", outcome.summary);
    }

    #[test]
    fn hand_backs_keep_or_count_the_attempt_and_wake_only_when_claimable() {
        let requeue = |count_attempt, delay| Release::Requeue { count_attempt, delay, reason: "r".into() };
        // (count the attempt, delay, what is written)
        let hour = Duration::from_secs(3600);
        let table = [
            (false, Duration::ZERO, (true, Duration::ZERO, true)),
            (true, Duration::ZERO, (false, Duration::ZERO, true)),
            (true, hour, (false, hour, false)),
            (false, hour, (true, hour, false)),
        ];
        for (count_attempt, delay, (same_attempt, not_before, wakes)) in table {
            let release = requeue(count_attempt, delay);
            assert_eq!(
                super::release(&release),
                Handback::Requeue { same_attempt, delay: not_before, wakes_workers: wakes },
                "{release:?}"
            );
        }
        let wait = Release::WaitForHuman { reason: "confirm".into() };
        assert_eq!(super::release(&wait), Handback::WaitForHuman { reason: "confirm" });
        assert_eq!(super::release(&Release::AwaitTools), Handback::AwaitTools);
    }

    fn parked() -> StepRecord {
        use crate::record::{CallKind, ScreenshotRef, ToolCall};
        let call = |id: &str, name: &str| ToolCall {
            id: id.into(),
            kind: CallKind::Function { name: name.into(), arguments: serde_json::json!({"q": id}) },
        };
        let screenshot = ScreenshotRef { url: "u".into(), width: 1, height: 1, key: "k".into() };
        let started_at = time::OffsetDateTime::from_unix_timestamp(1_000).expect("time");
        let mut step = StepRecord::begun(3, started_at, screenshot);
        step.duration_ms = 500;
        step.calls = vec![call("a", "ask"), call("b", "look"), call("c", "task_completion")];
        step.awaiting_tools = vec!["a".into(), "b".into()];
        step
    }

    fn answer(id: &str) -> ToolAnswer {
        ToolAnswer { id: id.into(), ok: true, output: format!("out {id}"), details: None }
    }

    /// Step 3 typed, then asked `q1` (the call `c`); nothing after it.
    fn asking() -> StepRecord {
        use crate::record::{CallKind, ToolCall};
        let mut step = parked();
        step.calls = vec![ToolCall {
            id: "q1".into(),
            kind: CallKind::Function { name: ASK_HUMAN.into(), arguments: serde_json::json!({"question": "which?"}) },
        }];
        step.awaiting_tools = vec!["q1".into()];
        step
    }

    fn text(answer: &str) -> HumanAnswer {
        HumanAnswer::Text(answer.into())
    }

    #[test]
    fn a_question_is_answered_only_while_it_waits_and_only_once() {
        for state in ALL.into_iter().filter(|s| *s != TaskState::WaitingForHuman) {
            let result = answer_question("t", state, Some(asking()), &text("x"), 0);
            assert!(
                matches!(&result, Err(QueueError::WrongState { state: s, .. }) if *s == state.as_str()),
                "{state:?}: {result:?}"
            );
        }
        // Waiting for an approval (no pending question), or with no step: refused, naming approvals.
        for last in [Some(parked()), None] {
            let mut last = last;
            if let Some(step) = last.as_mut() {
                step.awaiting_tools.clear();
            }
            match answer_question("t", TaskState::WaitingForHuman, last, &text("x"), 0) {
                Err(QueueError::WrongState { message, .. }) => assert!(message.contains("approval"), "{message}"),
                other => panic!("{other:?}"),
            }
        }
        // Answered 2.5 s after the step started, which ran 0.5 s before it parked: 2 s.
        let answered = answer_question("t", TaskState::WaitingForHuman, Some(asking()), &text("the second"), 1_002_500)
            .expect("answered");
        assert_eq!(answered.change, Change::Resume);
        assert_eq!(answered.step.call_results.len(), 1);
        assert_eq!(answered.step.call_results[0].message, "the second");
        assert_eq!(answered.step.results[0].tool.as_deref(), Some(ASK_HUMAN));
        assert!(matches!(
            &answered.events[..],
            [EventKind::ToolFinished { call_id, duration_ms: 2000, ok: true, .. }] if call_id == "q1"
        ));
        assert_eq!(answered.step.pending_question(), None, "nothing pending once answered");
        // A second answer finds no question (and the queue would find the task queued anyway).
        let again = answer_question("t", TaskState::WaitingForHuman, Some(answered.step), &text("y"), 0);
        assert!(matches!(again, Err(QueueError::WrongState { .. })), "{again:?}");
    }

    #[test]
    fn a_timeout_ends_only_the_question_it_names() {
        let timed_out = |call: &str, then| HumanAnswer::TimedOut { call_id: call.into(), then, after_secs: 60 };
        let other =
            answer_question("t", TaskState::WaitingForHuman, Some(asking()), &timed_out("q0", OnHumanTimeout::Fail), 0);
        assert!(matches!(other, Err(QueueError::WrongState { .. })), "another question's timeout: {other:?}");
        let going_on = answer_question(
            "t",
            TaskState::WaitingForHuman,
            Some(asking()),
            &timed_out("q1", OnHumanTimeout::Continue),
            0,
        )
        .expect("continue");
        assert_eq!(going_on.change, Change::Resume);
        assert_eq!(
            (going_on.step.call_results[0].ok, going_on.step.call_results[0].message.as_str()),
            (true, NO_ANSWER)
        );
        let failed =
            answer_question("t", TaskState::WaitingForHuman, Some(asking()), &timed_out("q1", OnHumanTimeout::Fail), 0)
                .expect("fail");
        match failed.change {
            Change::End { outcome, fence: false } => {
                assert_eq!((outcome.success, outcome.reason), (false, EndReason::Timeout));
                assert!(
                    outcome.summary.contains("within 60 s") && outcome.summary.contains("which?"),
                    "{}",
                    outcome.summary
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(failed.events.is_empty());
    }

    #[test]
    fn tool_answers_are_taken_only_whole_and_only_while_awaiting() {
        for state in ALL.into_iter().filter(|s| *s != TaskState::AwaitingTool) {
            let result = answer_tools("t", state, Some(parked()), &[answer("a"), answer("b")], 0);
            assert!(
                matches!(&result, Err(QueueError::WrongState { state: s, .. }) if *s == state.as_str()),
                "{state:?}: {result:?}"
            );
        }
        // (answers, the field named, a word of the message)
        let table: [(&[&str], &str, &str); 5] = [
            (&[], "results", "a, b"),
            (&["a"], "results", "missing b"),
            (&["a", "c"], "results[1].id", "\"c\" is not a pending call"),
            (&["b", "b"], "results[1].id", "second result"),
            (&["x", "a", "b"], "results[0].id", "x"),
        ];
        for (ids, field, word) in table {
            let answers: Vec<ToolAnswer> = ids.iter().map(|id| answer(id)).collect();
            match answer_tools("t", TaskState::AwaitingTool, Some(parked()), &answers, 0) {
                Err(QueueError::Invalid { field: f, message }) => {
                    assert_eq!(f, field, "{ids:?}: {message}");
                    assert!(message.contains(word), "{ids:?}: {message}");
                }
                other => panic!("{ids:?}: {other:?}"),
            }
        }
        let corrupt = answer_tools("t", TaskState::AwaitingTool, None, &[answer("a")], 0);
        assert!(matches!(corrupt, Err(QueueError::Corrupt(_))), "{corrupt:?}");
    }

    #[test]
    fn tool_answers_go_into_the_step_in_the_models_order_and_resume_the_task() {
        let details = serde_json::json!({"row": 7});
        let answers = [ToolAnswer { ok: false, details: Some(details.clone()), ..answer("b") }, answer("a")];
        // Answered 2.5 s after the step started, which ran 0.5 s before it parked: the call took 2 s.
        let answered =
            answer_tools("t", TaskState::AwaitingTool, Some(parked()), &answers, 1_002_500).expect("answered");
        assert_eq!(answered.change, Change::Resume);
        assert_eq!(answered.change.state(), TaskState::Queued);
        assert!(answered.change.wakes_workers() && answered.change.event().is_none());
        let step = &answered.step;
        let stored: Vec<(&str, bool, Option<&serde_json::Value>)> =
            step.call_results.iter().map(|r| (r.call_id.as_str(), r.ok, r.details.as_ref())).collect();
        assert_eq!(stored, [("a", true, None), ("b", false, Some(&details))]);
        let envelopes: Vec<(Option<&str>, Option<&str>, &str)> =
            step.results.iter().map(|r| (r.tool.as_deref(), r.call_id.as_deref(), r.message.as_str())).collect();
        assert_eq!(envelopes, [(Some("ask"), Some("a"), "out a"), (Some("look"), Some("b"), "out b")]);
        assert!(step.pending_tool_calls().is_empty() && !step.finished);
        let durations: Vec<(String, u64)> = answered
            .events
            .iter()
            .map(|e| match e {
                EventKind::ToolFinished { call_id, duration_ms, step: 3, .. } => (call_id.clone(), *duration_ms),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(durations, [("a".to_string(), 2000), ("b".to_string(), 2000)]);
        // Answered, the task awaits nothing: another answer finds nothing pending.
        let again = answer_tools("t", TaskState::AwaitingTool, Some(answered.step.clone()), &answers, 0);
        assert!(matches!(again, Err(QueueError::Corrupt(_))), "{again:?}");
    }

    #[test]
    fn pause_parks_queued_tasks_asks_running_ones_and_refuses_the_rest() {
        // (state, what follows: the change and the answer; or None for a refusal)
        let table = [
            (TaskState::Queued, Some((Change::Park { fence: false }, Paused::Now))),
            (TaskState::Running, Some((Change::RequestPause, Paused::Requested))),
            (TaskState::WaitingForHuman, None),
            (TaskState::AwaitingTool, None),
            (TaskState::Succeeded, None),
            (TaskState::Failed, None),
            (TaskState::Cancelled, None),
        ];
        assert_eq!(table.each_ref().map(|(s, _)| *s), ALL, "every state is covered");
        for (state, expected) in table {
            let result = pause("t", state);
            match expected {
                Some((change, answer)) => {
                    let got = result.unwrap_or_else(|e| panic!("{state:?}: {e}"));
                    assert_eq!((&got, paused(&got)), (&change, answer), "{state:?}");
                    assert!(!got.wakes_workers(), "{state:?}");
                }
                None => assert_eq!(wrong_state(&result), Some(state.as_str()), "{state:?}: {result:?}"),
            }
        }
        let park = Change::Park { fence: false };
        assert_eq!(park.state(), TaskState::WaitingForHuman);
        assert!(matches!(park.event(), Some(EventKind::WaitingForHuman { reason, .. }) if reason == TAKEOVER_REASON));
    }

    #[test]
    fn a_person_adds_a_step_only_to_a_task_parked_for_them_and_only_the_next_one() {
        for state in TaskState::ALL {
            for takeover in [None, Some(Takeover::Requested), Some(Takeover::Parked), Some(Takeover::Resumed)] {
                let result = human_step("t", state, takeover, 3, 3);
                if state == TaskState::WaitingForHuman && takeover == Some(Takeover::Parked) {
                    assert!(result.is_ok(), "{state:?} {takeover:?}");
                } else {
                    assert_eq!(
                        wrong_state(&result.map(|()| Change::RequestCancel)),
                        Some(state.as_str()),
                        "{state:?} {takeover:?}"
                    );
                }
            }
        }
        let late = human_step("t", TaskState::WaitingForHuman, Some(Takeover::Parked), 4, 3);
        assert!(
            matches!(&late, Err(QueueError::WrongState { message, .. }) if message.contains("next step is 4")),
            "{late:?}"
        );
    }

    #[test]
    fn only_a_taken_over_task_resumes_and_it_takes_no_decision() {
        for state in ALL {
            for takeover in [None, Some(Takeover::Requested), Some(Takeover::Parked), Some(Takeover::Resumed)] {
                let result = resume("t", state, takeover, Some("done"));
                if state == TaskState::WaitingForHuman && takeover == Some(Takeover::Parked) {
                    let change = result.expect("resumes");
                    assert_eq!(change, Change::HandBack { note: Some("done".into()) });
                    assert!(change.wakes_workers() && change.event().is_none());
                    assert_eq!(change.state(), TaskState::Queued);
                } else {
                    assert_eq!(wrong_state(&result), Some(state.as_str()), "{state:?} {takeover:?}");
                }
            }
        }
        let refused = decide("t", TaskState::WaitingForHuman, Some(Takeover::Parked), None, &Decision::Approve);
        assert!(matches!(&refused, Err(QueueError::WrongState { message, .. }) if message.contains("resume")));
        for marker in ["requested", "parked", "resumed"] {
            assert_eq!(Takeover::parse(Some(marker)).map(|t| t.as_str()), Some(marker));
        }
        assert_eq!(Takeover::parse(Some("other")), None);
    }

    #[test]
    fn a_pause_asked_of_a_lost_worker_parks_the_task_unless_cancelled_or_out_of_attempts() {
        let facts =
            |cancel_requested, attempt| Expired { cancel_requested, pause_requested: true, attempt, max_attempts: 2 };
        assert_eq!(rescue(&facts(false, 1)), Change::Park { fence: true });
        assert_eq!(rescue(&facts(true, 1)).state(), TaskState::Cancelled);
        assert_eq!(rescue(&facts(false, 2)).state(), TaskState::Failed);
        assert_eq!(super::release(&Release::TakeOver), Handback::TakeOver);
    }

    /// A step held for approval: a computer call (one click) and a tool call; by a rule or a vendor.
    fn held(rule: Option<u32>) -> StepRecord {
        use crate::record::{ScreenshotRef, StepApproval, ToolCall};
        use agentd_computer::Action;
        let screenshot = ScreenshotRef { url: "u".into(), width: 1, height: 1, key: "k".into() };
        let mut step = StepRecord::begun(2, time::OffsetDateTime::UNIX_EPOCH, screenshot);
        let click = Action::Click { x: 1, y: 2, button: Default::default(), keys: Vec::new() };
        step.calls = vec![
            ToolCall { id: "c".into(), kind: CallKind::Computer { actions: vec![click.clone()] } },
            ToolCall { id: "m".into(), kind: CallKind::Function { name: "mail".into(), arguments: json!({}) } },
        ];
        step.actions = vec![click];
        step.approval = Some(StepApproval { rule, ..StepApproval::asked("r".into(), serde_json::Value::Null) });
        step
    }

    use serde_json::json;

    #[test]
    fn a_rules_hold_rejected_goes_on_with_every_call_refused_and_a_vendors_ends_the_task() {
        let reject = Decision::Reject { reason: "not today".into() };
        let decided = decide("t", TaskState::WaitingForHuman, None, Some(held(Some(0))), &reject).expect("decided");
        assert_eq!(decided.change, Change::Resume, "the task goes on");
        let step = decided.step.expect("the step is written");
        assert!(step.finished);
        let approval = step.approval.as_ref().expect("approval");
        assert_eq!((approval.approved, approval.rejected.as_deref()), (Some(false), Some("not today")));
        let told: Vec<(&str, bool, &str)> =
            step.call_results.iter().map(|r| (r.call_id.as_str(), r.ok, r.message.as_str())).collect();
        let message = "rejected by a human: not today; this call was not run";
        assert_eq!(told, [("c", false, message), ("m", false, message)]);
        assert_eq!(step.results.len(), 2, "one per action and one per tool call");
        assert_eq!(step.results[1].tool.as_deref(), Some("mail"));

        let vendor = decide("t", TaskState::WaitingForHuman, None, Some(held(None)), &reject).expect("decided");
        assert_eq!((vendor.step, vendor.change.state()), (None, TaskState::Failed));
    }

    #[test]
    fn an_approval_is_written_into_the_waiting_step_it_answers() {
        let decided =
            decide("t", TaskState::WaitingForHuman, None, Some(held(None)), &Decision::Approve).expect("decided");
        assert_eq!(decided.change, Change::Approve);
        let step = decided.step.expect("the step is written with the answer");
        let approval = step.approval.as_ref().expect("approval");
        assert_eq!((approval.approved, approval.started, step.finished), (Some(true), false, false));
        assert!(approval.awaits_its_run());
        // No waiting step (nothing journaled yet): the task is queued, nothing else to write.
        let bare = decide("t", TaskState::WaitingForHuman, None, None, &Decision::Approve).expect("decided");
        assert_eq!((bare.step, bare.change), (None, Change::Approve));
        // A step answered already is no longer waiting: a second answer writes nothing into it.
        let again = decide("t", TaskState::WaitingForHuman, None, Some(step), &Decision::Approve).expect("decided");
        assert_eq!(again.step, None);
    }

    #[test]
    fn an_edit_goes_into_the_waiting_step_and_only_there() {
        use agentd_computer::Action;
        let typed = vec![Action::Type { text: "bob".into() }];
        let edit = Decision::ApproveEdited { actions: typed.clone() };
        let decided = decide("t", TaskState::WaitingForHuman, None, Some(held(Some(1))), &edit).expect("decided");
        assert_eq!(decided.change, Change::Approve);
        let step = decided.step.expect("step");
        assert_eq!(step.approval.as_ref().and_then(|a| a.approved), Some(true));
        assert_eq!(step.approval.and_then(|a| a.edited), Some(typed));
        // (the waiting step, the actions, a word of the refusal)
        let mut no_computer = held(Some(0));
        no_computer.calls.remove(0);
        let mut finished = held(Some(0));
        finished.finished = true;
        let cases = [
            (Some(held(Some(0))), Vec::new(), "at least one action"),
            (Some(no_computer), vec![Action::Wait { duration_ms: 1 }], "no computer action"),
            (Some(finished), vec![Action::Wait { duration_ms: 1 }], "nothing to edit"),
            (None, vec![Action::Wait { duration_ms: 1 }], "nothing to edit"),
        ];
        for (last, actions, word) in cases {
            let result = decide("t", TaskState::WaitingForHuman, None, last, &Decision::ApproveEdited { actions });
            match result {
                Err(QueueError::Invalid { field, message }) => {
                    assert_eq!(field, "actions");
                    assert!(message.contains(word), "{message}");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_claimed_task_that_cannot_be_read_fails_fenced_saying_why() {
        let Change::End { outcome, fence } = unreadable("spec: EOF") else { panic!("not an end") };
        assert!(fence);
        assert_eq!((outcome.state(), outcome.reason), (TaskState::Failed, EndReason::Error));
        assert!(outcome.summary.ends_with("cannot run: spec: EOF"), "{}", outcome.summary);
    }

    #[test]
    fn a_fenced_write_that_matched_nothing_lost_its_lease() {
        assert!(fenced("t", 1).is_ok());
        assert!(matches!(fenced("t", 0), Err(QueueError::LeaseLost(id)) if id == "t"));
    }

    #[test]
    fn a_resubmission_must_carry_the_same_body() {
        assert!(resubmit("t", "abc", "abc").is_ok());
        assert!(matches!(resubmit("t", "abc", "abd"), Err(QueueError::Conflict(id)) if id == "t"));
    }

    #[test]
    fn a_new_turn_closes_the_current_one_and_begins_after_the_last_step() {
        let first = Turn {
            index: 0,
            instructions: "log in".into(),
            started_at: None,
            finished_at: None,
            outcome: Some(Outcome::new(true, "done", EndReason::Completed)),
            first_step: 0,
            last_step: None,
        };
        for state in ALL {
            let result = add_turn("t", state, None, vec![first.clone()], 3, "now export April");
            match result {
                Ok(new) => {
                    assert!(state.is_terminal(), "{state:?}");
                    assert_eq!(new.turns.len(), 2);
                    assert_eq!((new.turns[0].first_step, new.turns[0].last_step), (0, Some(2)));
                    assert_eq!(new.turns[0].outcome, first.outcome);
                    let turn = &new.turns[1];
                    assert_eq!((turn.index, turn.first_step, turn.last_step), (1, 3, None));
                    assert_eq!(turn.instructions, "now export April");
                    assert_eq!(new.event, EventKind::TurnQueued { turn: 1 });
                }
                Err(QueueError::WrongState { state: named, .. }) => {
                    assert!(!state.is_terminal());
                    assert_eq!(named, state.as_str());
                }
                Err(other) => panic!("{state:?}: {other:?}"),
            }
        }
        // A turn that ran no step (cancelled while queued) keeps none; the next begins where it would have.
        let empty = Turn { first_step: 3, index: 1, ..first.clone() };
        let new = add_turn("t", TaskState::Cancelled, None, vec![first.clone(), empty], 3, "again").expect("finished");
        assert_eq!((new.turns[1].last_step, new.turns[2].first_step, new.turns[2].index), (None, 3, 2));

        // A replay (docs/replay-and-verify.md) takes a message only when it has a model to answer it: `on_divergence:
        // "model"`.
        let replay = |on_divergence: &str| -> ReplaySpec {
            serde_json::from_value(serde_json::json!({"of": "recorded", "on_divergence": on_divergence})).expect("spec")
        };
        let with_model = replay("model");
        let new = add_turn("t", TaskState::Succeeded, Some(&with_model), vec![first.clone()], 3, "and then?")
            .expect("a model replay takes a message");
        assert_eq!(new.turns.len(), 2);
        let stop = replay("stop");
        match add_turn("t", TaskState::Succeeded, Some(&stop), vec![first.clone()], 3, "and then?") {
            Err(QueueError::WrongState { message, .. }) => {
                assert!(message.contains("recorded") && message.contains("on_divergence"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        // An unfinished replay is refused for that first.
        assert!(matches!(
            add_turn("t", TaskState::Running, Some(&stop), vec![first], 3, "and then?"),
            Err(QueueError::WrongState { state: "running", .. })
        ));
    }
}
