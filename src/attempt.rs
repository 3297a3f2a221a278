//! One attempt of a task, for `agentd run`, the daemon's workers and the library alike: the one place that
//! emits `task_started` and `task_finished`, runs the agent loop on what the library's builder built, and maps
//! how the loop ended (or why nothing could be built) to an [`Ending`].
//!
//! What differs between the callers stays with them: `agentd run` and the library have no queue, so an
//! ending that would go back to the queue becomes a final outcome ([`Ending::into_outcome`]); a worker
//! releases, requeues or finishes its lease.

use std::sync::Arc;
use std::time::Duration;

use agentd_computer::ComputerProvider;
use tokio_util::sync::CancellationToken;

use crate::agent::events::EventSink;
use crate::agent::journal::Journal;
use crate::agent::{LoopEnd, LoopInput, run_isolated};
use crate::artifacts::Uploader;
use crate::backends::BuildError;
use crate::config::SettlePolicy;
use crate::model::Model;
use crate::record::{EndReason, EventKind, Outcome, ScreenshotRef, StepRecord, StuckCheck, Usage};
use crate::record::{HandBack, PendingToolCall};
use crate::task::ResolvedTask;
use crate::tools::Toolbox;

/// Everything one attempt needs once its computer, model and tools are built (the library's builder builds
/// them, for `agentd run`, the daemon and embedders alike: `crate::library`).
pub struct Attempt<'a> {
    pub task: ResolvedTask,
    pub settle: SettlePolicy,
    pub context: RunContext<'a>,
}

/// What an attempt runs in, besides its task and what was built: which attempt of which task it is, where
/// its screenshots, steps and events go, its cancellation, and what earlier attempts left.
pub struct RunContext<'a> {
    pub task_id: &'a str,
    pub attempt: u32,
    pub uploader: Uploader,
    pub journal: Arc<dyn Journal>,
    pub events: EventSink,
    pub cancel: CancellationToken,
    pub shutdown: CancellationToken,
    /// Steps of earlier attempts (the loop continues after them).
    pub resume: Vec<StepRecord>,
    pub elapsed_before: Duration,
    /// The turns of the conversation (docs/humans.md), the current one last; empty for a task never sent a message.
    pub turns: Vec<crate::record::Turn>,
    /// A person wants the desktop (docs/humans.md take-over): stop after the current step, [`Ending::Paused`].
    pub pause: CancellationToken,
    /// A person had the desktop since the last attempt and handed it back: the next step tells the model.
    pub handed_back: Option<HandBack>,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// The task is over with this outcome.
    Finished(Outcome),
    /// It failed in a way a later attempt may not (a computer or model out of reach); the outcome is how
    /// it ends if no attempt is left, `retry_after` what the model provider asked for.
    Retryable { outcome: Outcome, retry_after: Option<Duration> },
    /// Shutdown stopped it at a step boundary; it goes back to the queue with its steps.
    Interrupted,
    /// The last step's calls wait for a human; nothing of that step has run.
    WaitingForHuman(String),
    /// Another worker owns the task now; nothing more may be written.
    LeaseLost(String),
    /// The last step waits for the API client to answer these `remote` tool calls.
    AwaitingTool(Vec<PendingToolCall>),
    /// A pause was asked for (docs/humans.md take-over): stopped after a finished step, to wait for the person.
    Paused,
}

impl Ending {
    /// The final outcome when there is no queue to hand the task back to and no human to wait for
    /// (`agentd run`).
    pub fn into_outcome(self) -> Outcome {
        match self {
            Self::Finished(outcome) | Self::Retryable { outcome, .. } => outcome,
            Self::Interrupted | Self::Paused => Outcome {
                success: false,
                summary: "interrupted".into(),
                reason: EndReason::Cancelled,
                output: None,
                verified: None,
                checks: Vec::new(),
            },
            Self::LeaseLost(why) => Outcome {
                success: false,
                summary: why,
                reason: EndReason::Error,
                output: None,
                verified: None,
                checks: Vec::new(),
            },
            Self::WaitingForHuman(reason) => Outcome {
                success: false,
                summary: format!("needs a human's approval ({reason}); submit it to the daemon to approve it"),
                reason: EndReason::Rejected,
                output: None,
                verified: None,
                checks: Vec::new(),
            },
            Self::AwaitingTool(calls) => Outcome::new(
                false,
                format!(
                    "the remote tool call(s) {} need an API client's answer; submit the task to the daemon to answer them",
                    calls.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
                ),
                EndReason::Error,
            ),
        }
    }
}

/// What an attempt produced.
#[derive(Debug)]
pub struct AttemptOutput {
    pub ending: Ending,
    /// Every step, the resumed ones included.
    pub steps: Vec<StepRecord>,
    pub usage: Usage,
    pub final_screenshot: Option<ScreenshotRef>,
    pub computer_state: Option<serde_json::Value>,
    pub model_errors: u32,
    /// The computer or model could not be built; the attempt never ran (the message is in the ending).
    pub build_failed: bool,
    /// The stuck-loop guard's checks that fired, and whether each ended the task.
    pub guard_fired: Vec<(StuckCheck, bool)>,
}

/// The computer and the model an attempt runs with (cheap to clone: a run on a terminal resumes on them).
#[derive(Clone)]
pub struct Built {
    pub computer: Arc<dyn ComputerProvider>,
    pub model: Arc<dyn Model>,
    pub tools: Arc<Toolbox>,
    /// The task's verifier checks (docs/replay-and-verify.md), made ready.
    pub verifier: Arc<crate::verify::Verifier>,
}

impl Attempt<'_> {
    /// Runs the loop to its end on what was built (emit `task_started` with [`emit_started`] first; what
    /// could not be built is [`AttemptOutput::unbuilt`]). Never panics: a panic in the loop is the attempt's
    /// `error` outcome.
    pub async fn run(self, built: Built) -> AttemptOutput {
        let Built { computer, model, tools, verifier } = built;
        // From here on, every event of the task is redacted (the sink is shared with the caller, so
        // `task_finished` and late screenshot events are too).
        let Attempt { task, settle, context } = self;
        context.events.seal(tools.secrets().clone());
        let output = run_isolated(LoopInput {
            task_id: context.task_id.to_string(),
            attempt: context.attempt,
            task,
            computer,
            model,
            tools,
            uploader: context.uploader,
            journal: context.journal,
            events: context.events,
            cancel: context.cancel,
            shutdown: context.shutdown,
            resume: context.resume,
            elapsed_before: context.elapsed_before,
            pause: context.pause,
            handed_back: context.handed_back,
            settle,
            verifier,
            turns: context.turns,
        })
        .await;
        let ending = match output.end {
            LoopEnd::Finished(outcome) => Ending::Finished(outcome),
            LoopEnd::Retryable(outcome) => Ending::Retryable { outcome, retry_after: output.retry_after },
            LoopEnd::Interrupted => Ending::Interrupted,
            LoopEnd::LeaseLost(why) => Ending::LeaseLost(why),
            LoopEnd::WaitingForHuman { reason } => Ending::WaitingForHuman(reason),
            LoopEnd::AwaitingTool { calls } => Ending::AwaitingTool(calls),
            LoopEnd::Paused => Ending::Paused,
        };
        AttemptOutput {
            ending,
            steps: output.steps,
            usage: output.usage,
            final_screenshot: output.final_screenshot,
            computer_state: output.computer_state,
            model_errors: output.model_errors,
            build_failed: false,
            guard_fired: output.guard_fired.iter().map(|f| (f.note.check, f.stop)).collect(),
        }
    }
}

impl AttemptOutput {
    /// An attempt whose computer or model could not be built: wrong input ends the task, an unreachable
    /// backend may pass by the next attempt.
    pub fn unbuilt(error: BuildError) -> Self {
        let outcome = Outcome {
            success: false,
            summary: error.to_string(),
            reason: EndReason::Error,
            output: None,
            verified: None,
            checks: Vec::new(),
        };
        let ending = match error {
            BuildError::Invalid { .. } => Ending::Finished(outcome),
            BuildError::Unreachable(_) => Ending::Retryable { outcome, retry_after: None },
        };
        Self {
            ending,
            steps: Vec::new(),
            usage: Usage::default(),
            final_screenshot: None,
            computer_state: None,
            model_errors: 0,
            build_failed: true,
            guard_fired: Vec::new(),
        }
    }
}

/// Emits the attempt's first event, `task_started`: who runs it (`host:pid` for a worker, `run@host` for
/// `agentd run`). The one place it is made.
pub fn emit_started(events: &EventSink, attempt: u32, worker: &str) {
    events.emit(EventKind::TaskStarted { attempt, worker: worker.to_string() });
}

/// Emits the task's last event, `task_finished`, for `outcome`. The one place it is made.
pub fn emit_finished(events: &EventSink, outcome: &Outcome, usage: Usage) {
    events.emit(EventKind::TaskFinished { state: outcome.state(), outcome: outcome.clone(), usage });
}
