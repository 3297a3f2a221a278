//! What one attempt of a task is, for every caller of the loop (`agentd run`, the library's runs, the daemon's
//! workers): its input — the task, what was built for it ([`Built`]) and what it runs in ([`RunContext`]) —
//! and its ending ([`Ending`], inside [`AttemptOutput`]). The loop (`runner`) takes an [`Attempt`] and gives
//! an [`AttemptOutput`]; no caller translates either.

use std::sync::Arc;
use std::time::Duration;

use agentd_computer::ComputerProvider;
use tokio_util::sync::CancellationToken;

use super::events::EventSink;
use super::journal::Journal;
use crate::artifacts::Uploader;
use crate::config::SettlePolicy;
use crate::model::Model;
use crate::record::{
    EndReason, HandBack, Outcome, PendingToolCall, ScreenshotRef, StepRecord, StuckCheck, Turn, Usage,
};
use crate::task::ResolvedTask;
use crate::tools::Toolbox;

/// One attempt of a task: the task, how to wait for the screen, and what it runs in.
pub struct Attempt {
    pub task: ResolvedTask,
    pub settle: SettlePolicy,
    pub context: RunContext,
}

/// What an attempt runs in, besides its task and what was built: which attempt of which task it is, where
/// its screenshots, steps and events go, its cancellation, and what earlier attempts left.
pub struct RunContext {
    pub task_id: String,
    pub attempt: u32,
    pub uploader: Uploader,
    pub journal: Arc<dyn Journal>,
    pub events: EventSink,
    /// The user cancelled the task: stop before the next model call or action, outcome `cancelled`.
    pub cancel: CancellationToken,
    /// The daemon is shutting down: stop at the next step boundary and hand the task back.
    pub shutdown: CancellationToken,
    /// Steps an earlier attempt recorded; the loop continues after them and never replays their actions.
    pub resume: Vec<StepRecord>,
    /// Time the task already ran in earlier attempts (counts against `timeout_secs`).
    pub elapsed_before: Duration,
    /// The turns of the conversation, the current one last; empty (or one) for a task never sent a message.
    /// The model sees the earlier turns' steps as history, each later turn's message beside the screenshot of
    /// its first step; limits count from the current turn's first step.
    pub turns: Vec<Turn>,
    /// A person wants the desktop (take-over): stop after the current step, [`Ending::Paused`].
    pub pause: CancellationToken,
    /// A person had the desktop since the last attempt and handed it back: the next step's screenshot goes
    /// to the model with their note (and the step's record keeps it).
    pub handed_back: Option<HandBack>,
}

/// The computer, the model, the tools and the verifier an attempt runs with (cheap to clone: a run on a
/// terminal resumes on them).
#[derive(Clone)]
pub struct Built {
    pub computer: Arc<dyn ComputerProvider>,
    pub model: Arc<dyn Model>,
    /// The declared tools and `task_completion`.
    pub tools: Arc<Toolbox>,
    /// The task's verifier checks, made ready; empty when it has none.
    pub verifier: Arc<crate::verify::Verifier>,
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
    /// The last step's calls wait for a human; the step is journaled, nothing of it has run.
    WaitingForHuman(String),
    /// The journal refused a write: another worker owns the task now; nothing more may be written.
    LeaseLost(String),
    /// The last step waits for the API client to answer these `remote` tool calls (journaled with
    /// `awaiting_tools`); the calls before them ran, the ones after them run when the task resumes.
    AwaitingTool(Vec<PendingToolCall>),
    /// A pause was asked for (take-over): stopped after a finished step, to wait for the person.
    Paused,
}

impl Ending {
    /// A failure a later attempt may not hit.
    pub fn retryable(outcome: Outcome) -> Self {
        Self::Retryable { outcome, retry_after: None }
    }

    /// The final outcome when there is no queue to hand the task back to and no human to wait for
    /// (`agentd run`, the library).
    pub fn into_outcome(self) -> Outcome {
        match self {
            Self::Finished(outcome) | Self::Retryable { outcome, .. } => outcome,
            Self::Interrupted | Self::Paused => Outcome::new(false, "interrupted", EndReason::Cancelled),
            Self::LeaseLost(why) => Outcome::new(false, why, EndReason::Error),
            Self::WaitingForHuman(reason) => Outcome::new(
                false,
                format!("needs a human's approval ({reason}); submit it to the daemon to approve it"),
                EndReason::Rejected,
            ),
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
    /// Model calls that failed (after the adapter's own retries).
    pub model_errors: u32,
    /// The computer or model could not be built; the attempt never ran (the message is in the ending).
    pub build_failed: bool,
    /// The stuck-loop guard's checks that fired, and whether each ended the task.
    pub guard_fired: Vec<(StuckCheck, bool)>,
}

impl AttemptOutput {
    /// An attempt that ended before its loop ran, with `ending`.
    pub fn ended(ending: Ending) -> Self {
        Self {
            ending,
            steps: Vec::new(),
            usage: Usage::default(),
            final_screenshot: None,
            computer_state: None,
            model_errors: 0,
            build_failed: false,
            guard_fired: Vec::new(),
        }
    }
}
