//! One run of an [`Agent`](super::Agent): the handle ([`Run`]: a stream of events, `abort`, the report it
//! resolves to) and what drives it (one [`Attempt`], the same as `agentd run` and the daemon's workers).

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;

use crate::agent::events::EventSink;
use crate::agent::journal::MemoryJournal;
use crate::artifacts::{ArtifactStore, Uploader};
use crate::attempt::{self, Attempt, Built, Ending, RunContext};
use crate::config::Config;
use crate::record::events::EventKind;
use crate::record::{EndReason, Event, Outcome, Proposed, RECORD_VERSION, ScreenshotRef, StepRecord, Usage, Waiting};
use crate::status::TaskRecord;
use crate::task::{ResolvedTask, TaskId, TaskSpec};
use time::OffsetDateTime;

/// How long a run waits for its screenshots to be stored before it resolves (they stay in the spool).
const FLUSH_TIMEOUT: Duration = Duration::from_secs(60);

/// A run under way. It is a [`Stream`] of the run's [`Event`]s (docs/events.md, ending with `task_finished`; the stream
/// ends when the run has); [`Run::abort`] cancels it at its next safe point; [`Run::finish`] resolves to its
/// [`RunReport`]. Dropping a `Run` (or the future of `finish`) before it ended aborts it.
pub struct Run {
    task_id: String,
    events: mpsc::UnboundedReceiver<Event>,
    cancel: CancellationToken,
    task: JoinHandle<RunReport>,
    abort_on_drop: DropGuard,
}

/// Cancels a [`Run`] from elsewhere (a signal handler, another task). Cheap to clone.
#[derive(Clone)]
pub struct AbortHandle(CancellationToken);

impl AbortHandle {
    /// Cancels the run at its next safe point (before a model call or an action; a running tool sees its
    /// cancellation); it ends with the outcome `cancelled`.
    pub fn abort(&self) {
        self.0.cancel();
    }
}

/// How a run ended and what it did.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The run's task id: its events carry it and its artifacts are stored under it.
    pub task_id: String,
    /// `success`, `summary`, `reason` (`completed`, `cancelled`, `max_steps`, …) and the structured `output`.
    pub outcome: Outcome,
    /// Every step, as the record keeps it (actions, tool results with their details, usage).
    pub steps: Vec<StepRecord>,
    pub usage: Usage,
    pub final_screenshot: Option<ScreenshotRef>,
    pub computer_state: Option<serde_json::Value>,
    /// Screenshots not yet in the store when the run resolved; they stay in the spool.
    pub pending_uploads: u64,
}

/// A run that did not succeed, as an error (see [`RunReport::into_result`]).
#[derive(Debug, Clone, thiserror::Error)]
#[error("the task did not succeed ({}): {}", .0.outcome.reason.as_str(), .0.outcome.summary)]
pub struct RunFailed(pub Box<RunReport>);

impl RunReport {
    /// The run's status document (docs/events.md) as `agentd run` writes it: the task file as given beside what the run
    /// recorded, attempt 1, started when it was created.
    pub fn record(&self, task: TaskSpec, created_at: OffsetDateTime, worker: String) -> TaskRecord {
        let mut record = TaskRecord {
            version: RECORD_VERSION,
            id: self.task_id.clone(),
            state: self.outcome.state(),
            created_at,
            started_at: Some(created_at),
            finished_at: Some(OffsetDateTime::now_utc()),
            attempt: 1,
            worker: Some(worker),
            task,
            outcome: Some(self.outcome.clone()),
            usage: self.usage,
            steps: self.steps.clone(),
            final_screenshot: self.final_screenshot.clone(),
            computer_state: self.computer_state.clone(),
            waiting_reason: None,
            pending_tool_calls: Vec::new(),
            replay: None,
            waiting: None,
            turns: Vec::new(),
            taken_over: false,
            desktop: None,
            desktop_failure: None,
        };
        record.derive();
        record
    }

    /// `Ok` when the task succeeded, else the report as an error.
    pub fn into_result(self) -> Result<Self, RunFailed> {
        if self.outcome.success { Ok(self) } else { Err(RunFailed(Box::new(self))) }
    }
}

impl Run {
    /// The run's task id.
    pub fn task_id(&self) -> &str {
        &self.task_id
    }

    /// Cancels the run at its next safe point; it ends with the outcome `cancelled` and its event stream
    /// ends after `task_finished`.
    pub fn abort(&self) {
        self.cancel.cancel();
    }

    /// A handle that aborts this run from elsewhere.
    pub fn abort_handle(&self) -> AbortHandle {
        AbortHandle(self.cancel.clone())
    }

    /// Waits for the run to end. Events not read yet are dropped.
    pub async fn finish(self) -> RunReport {
        let Run { task_id, task, abort_on_drop, .. } = self;
        let report = match task.await {
            Ok(report) => report,
            Err(e) => RunReport {
                task_id,
                outcome: Outcome::new(false, format!("internal error: the run failed: {e}"), EndReason::Error),
                steps: Vec::new(),
                usage: Usage::default(),
                final_screenshot: None,
                computer_state: None,
                pending_uploads: 0,
            },
        };
        // Over: there is nothing left to abort.
        abort_on_drop.disarm();
        report
    }

    /// Waits for the run to end and returns its outcome.
    pub async fn outcome(self) -> Outcome {
        self.finish().await.outcome
    }
}

impl Stream for Run {
    type Item = Event;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        self.events.poll_recv(cx)
    }
}

/// Everything a run needs, taken from the agent.
pub(super) struct Launch {
    pub task_id: TaskId,
    pub worker: String,
    pub task: ResolvedTask,
    pub built: Built,
    pub config: Arc<Config>,
    pub store: Arc<dyn ArtifactStore>,
    pub spool_dir: PathBuf,
    /// Remove `spool_dir` once it is empty (a run's own spool).
    pub own_spool: bool,
    /// Who answers the model's questions and approves its held steps, if anyone.
    pub human: Option<Arc<dyn Human>>,
}

/// A person a run asks (docs/humans.md): the model's `ask_human` questions, and approvals of steps held for one (a
/// vendor's safety check). `agentd run` on a terminal asks on the terminal. `None` from either: no answer —
/// the run ends there as it would with nobody to ask.
#[async_trait::async_trait]
pub trait Human: Send + Sync {
    /// The answer to the model's question; the model reads it as the tool's result.
    async fn answer(&self, question: &str) -> Option<String>;
    /// Whether the held step's calls may run: yes runs them, no ends the run `rejected`.
    async fn approve(&self, reason: &str, proposed: &Proposed) -> Option<bool>;
}

/// Starts a run on the current Tokio runtime.
pub(super) fn start(launch: Launch) -> Run {
    let task_id = launch.task_id.to_string();
    let (events, receiver) = EventSink::channel(&task_id, 1);
    let cancel = CancellationToken::new();
    // ERROR level, as the worker's: any log filter that lets a line through keeps the task it belongs to.
    let span = tracing::error_span!("task", task_id = %task_id, attempt = 1i64);
    let task = tokio::spawn(tracing::Instrument::instrument(drive(launch, events, cancel.clone()), span));
    Run { task_id, events: receiver, abort_on_drop: cancel.clone().drop_guard(), cancel, task }
}

/// One attempt, then what `agentd run` does after it: wait for the screenshots, emit `task_finished`.
async fn drive(launch: Launch, events: EventSink, cancel: CancellationToken) -> RunReport {
    let Launch { task_id, worker, task, built, config, store, spool_dir, own_spool, human } = launch;
    let tracker = TaskTracker::new();
    let background = CancellationToken::new();
    let uploader =
        Uploader::start(store, spool_dir.clone(), 64, config.artifacts.spool_max_bytes, &tracker, background.clone());
    attempt::emit_started(&events, 1, &worker);
    let started = std::time::Instant::now();
    let mut resume = Vec::new();
    let output = loop {
        let attempt = Attempt {
            task: task.clone(),
            settle: config.settle,
            context: RunContext {
                task_id: task_id.to_string(),
                attempt: 1,
                uploader: uploader.clone(),
                journal: Arc::new(MemoryJournal::default()),
                events: events.clone(),
                cancel: cancel.clone(),
                shutdown: CancellationToken::new(),
                resume: std::mem::take(&mut resume),
                elapsed_before: started.elapsed(),
                turns: Vec::new(),
                pause: CancellationToken::new(),
                handed_back: None,
            },
        };
        let mut output = crate::agent::run_isolated(attempt, built.clone()).await;
        // A person to ask: the run goes on with the answer from the step it waited on (as a worker resumes
        // an answered task), in the same attempt.
        let (Some(human), Ending::WaitingForHuman(_)) = (&human, &output.ending) else { break output };
        let Some(last) = output.steps.last_mut() else { break output };
        match Waiting::of_step(last) {
            Some(Waiting::Question { call_id, question, step }) => {
                let asked = tokio::select! {
                    text = human.answer(&question) => text,
                    () = cancel.cancelled() => None,
                };
                let Some(text) = asked else { break output };
                last.answer_question(&call_id, true, &text);
                let name = crate::record::ASK_HUMAN.to_string();
                let (ok, output_text) = (true, text);
                events.emit(EventKind::ToolFinished {
                    step,
                    call_id,
                    name,
                    ok,
                    output: output_text,
                    details: None,
                    duration_ms: 0,
                });
            }
            Some(Waiting::Approval { reason, proposed, .. }) => match tokio::select! {
                yes = human.approve(&reason, &proposed) => yes,
                () = cancel.cancelled() => None,
            } {
                // The answer goes into the step it answers, as the queue writes it: the loop runs it from there.
                Some(true) => {
                    if let Some(approval) = last.approval.as_mut() {
                        approval.approved = Some(true);
                    }
                }
                Some(false) => {
                    if let Some(approval) = last.approval.as_mut() {
                        approval.approved = Some(false);
                    }
                    output.ending = Ending::Finished(Outcome::new(
                        false,
                        format!("rejected on the terminal: {reason}"),
                        EndReason::Rejected,
                    ));
                    break output;
                }
                None => break output,
            },
            _ => break output,
        }
        resume = std::mem::take(&mut output.steps);
    };
    let mut output = output;
    if let (Ending::WaitingForHuman(_), Some(last)) = (&output.ending, output.steps.last()) {
        if cancel.is_cancelled() {
            output.ending = Ending::Finished(Outcome::new(false, "cancelled", EndReason::Cancelled));
        } else if let Some((_, question)) = last.pending_question() {
            // Nobody to ask: the run ends as a waiting one always did here (reason `rejected`).
            output.ending = Ending::Finished(Outcome::new(
                false,
                format!(
                    "the model asks a human: {question} (run it on a terminal to answer, or submit it to the daemon \
                     and use agentd answer)"
                ),
                EndReason::Rejected,
            ));
        }
    }
    // No queue to hand the task back to and no human to wait for: every ending is final here.
    let outcome = output.ending.into_outcome();
    let pending_uploads = uploader.flush(FLUSH_TIMEOUT).await;
    attempt::emit_finished(&events, &outcome, output.usage);
    drop(events);
    background.cancel();
    tracker.close();
    tracker.wait().await;
    if own_spool && pending_uploads == 0 {
        // Only an empty directory goes; a run's leftovers stay for whoever looks.
        let _ = std::fs::remove_dir(&spool_dir);
    }
    RunReport {
        task_id: task_id.to_string(),
        outcome,
        steps: output.steps,
        usage: output.usage,
        final_screenshot: output.final_screenshot,
        computer_state: output.computer_state,
        pending_uploads,
    }
}
