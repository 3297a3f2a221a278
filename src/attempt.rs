//! One attempt of a task, for `agentd run` and the daemon's workers alike: the one place that emits
//! `task_started` and `task_finished`, builds the attempt's computer and model, runs the agent loop, maps how
//! the loop ended (or why nothing could be built) to an [`Ending`], and names the attempt's artifacts.
//!
//! What differs between the two callers stays with them: `agentd run` has no queue, so an ending that would
//! go back to the queue becomes a final outcome ([`Ending::into_outcome`]); a worker releases, requeues or
//! finishes its lease.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agentd_computer::ComputerProvider;
use tokio_util::sync::CancellationToken;

use crate::agent::events::EventSink;
use crate::agent::journal::Journal;
use crate::agent::{LoopEnd, LoopInput, run_isolated};
use crate::artifacts::Uploader;
use crate::backends::{self, BuildError, ComputerContext};
use crate::config::Config;
use crate::config::SettlePolicy;
use crate::input::FileAccess;
use crate::model::{Model, Shared};
use crate::record::PendingToolCall;
use crate::record::{EndReason, EventKind, Outcome, ScreenshotRef, StepRecord, Usage};
use crate::task::ResolvedTask;
use crate::task::tools::ToolDecl;
use crate::tools::Toolbox;

/// Everything one attempt needs.
pub struct Attempt<'a> {
    pub task_id: &'a str,
    pub attempt: u32,
    /// Who runs it (`host:pid` for a worker, `run@host` for `agentd run`), as `task_started` says.
    pub worker: &'a str,
    pub task: ResolvedTask,
    /// Which files the task may name: the user's own (`agentd run`) or what the config allows an API task.
    pub files: &'a FileAccess,
    /// For a task that came over the API: the config whose allowed environment variables and base URLs it
    /// must keep to (checked again here, since the node that accepted it may allow more).
    pub allowed_by: Option<&'a Config>,
    /// The config's `[tools.NAME]` declarations, which a task names with `{"use": NAME}`.
    pub tool_catalog: &'a BTreeMap<String, ToolDecl>,
    /// Where the mock desktop keeps its state between attempts, if anywhere.
    pub persist_dir: Option<&'a Path>,
    /// The process's model clients and rate limiters.
    pub models: &'a Shared,
    pub uploader: Uploader,
    pub journal: Arc<dyn Journal>,
    pub events: EventSink,
    pub cancel: CancellationToken,
    pub shutdown: CancellationToken,
    /// Steps of earlier attempts (the loop continues after them).
    pub resume: Vec<StepRecord>,
    pub elapsed_before: Duration,
    pub approved: bool,
    pub settle: SettlePolicy,
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
}

impl Ending {
    /// The final outcome when there is no queue to hand the task back to and no human to wait for
    /// (`agentd run`).
    pub fn into_outcome(self) -> Outcome {
        match self {
            Self::Finished(outcome) | Self::Retryable { outcome, .. } => outcome,
            Self::Interrupted => {
                Outcome { success: false, summary: "interrupted".into(), reason: EndReason::Cancelled, output: None }
            }
            Self::LeaseLost(why) => Outcome { success: false, summary: why, reason: EndReason::Error, output: None },
            Self::WaitingForHuman(reason) => Outcome {
                success: false,
                summary: format!("needs a human's approval ({reason}); submit it to the daemon to approve it"),
                reason: EndReason::Rejected,
                output: None,
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
}

/// The computer and the model an attempt runs with.
pub struct Built {
    pub computer: Arc<dyn ComputerProvider>,
    pub model: Arc<dyn Model>,
    pub tools: Arc<Toolbox>,
}

impl Attempt<'_> {
    /// Builds the task's computer and model (`agentd run` does this first, to refuse bad input before the
    /// task starts).
    pub async fn build(&self) -> Result<Built, BuildError> {
        if let Some(config) = self.allowed_by {
            backends::check_names(&self.task, config)?;
        }
        let base_dir = match self.files {
            FileAccess::Local { base_dir } => Some(base_dir.as_path()),
            FileAccess::Api { .. } => None,
        };
        let model_spec = backends::inline_script(&self.task.model, self.files).await?;
        let model = backends::model(&model_spec, self.models, base_dir)?;
        // The secrets' values are read here, on the worker, when the attempt starts (§15).
        let secrets = backends::secrets(&self.task, self.files).await?;
        let tools = backends::toolbox(&self.task, self.tool_catalog, secrets.clone())?;
        let context = ComputerContext { files: self.files, persist_dir: self.persist_dir, secrets: &secrets };
        let computer = backends::computer(&self.task.computer, &context).await?;
        Ok(Built { computer, model, tools })
    }

    /// Emits `task_started`, builds the computer and the model unless `built` brings them, and runs the loop
    /// to its end. Never panics: a panic in the loop is the attempt's `error` outcome.
    pub async fn run(self, built: Option<Built>) -> AttemptOutput {
        self.events.emit(EventKind::TaskStarted { attempt: self.attempt, worker: self.worker.to_string() });
        let built = match built {
            Some(built) => built,
            None => match self.build().await {
                Ok(built) => built,
                Err(error) => return AttemptOutput::unbuilt(error),
            },
        };
        let Built { computer, model, tools } = built;
        // From here on, every event of the task is redacted (the sink is shared with the caller, so
        // `task_finished` and late screenshot events are too).
        self.events.seal(tools.secrets().clone());
        let output = run_isolated(LoopInput {
            task_id: self.task_id.to_string(),
            attempt: self.attempt,
            task: self.task,
            computer,
            model,
            tools,
            uploader: self.uploader,
            journal: self.journal,
            events: self.events,
            cancel: self.cancel,
            shutdown: self.shutdown,
            resume: self.resume,
            elapsed_before: self.elapsed_before,
            approved: self.approved,
            settle: self.settle,
        })
        .await;
        let ending = match output.end {
            LoopEnd::Finished(outcome) => Ending::Finished(outcome),
            LoopEnd::Retryable(outcome) => Ending::Retryable { outcome, retry_after: output.retry_after },
            LoopEnd::Interrupted => Ending::Interrupted,
            LoopEnd::LeaseLost(why) => Ending::LeaseLost(why),
            LoopEnd::WaitingForHuman { reason } => Ending::WaitingForHuman(reason),
            LoopEnd::AwaitingTool { calls } => Ending::AwaitingTool(calls),
        };
        AttemptOutput {
            ending,
            steps: output.steps,
            usage: output.usage,
            final_screenshot: output.final_screenshot,
            computer_state: output.computer_state,
            model_errors: output.model_errors,
            build_failed: false,
        }
    }
}

impl AttemptOutput {
    /// An attempt whose computer or model could not be built: wrong input ends the task, an unreachable
    /// backend may pass by the next attempt.
    fn unbuilt(error: BuildError) -> Self {
        let outcome = Outcome { success: false, summary: error.to_string(), reason: EndReason::Error, output: None };
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
        }
    }
}

/// Emits the task's last event, `task_finished`, for `outcome`. The one place it is made.
pub fn emit_finished(events: &EventSink, outcome: &Outcome, usage: Usage) {
    events.emit(EventKind::TaskFinished { state: outcome.state(), outcome: outcome.clone(), usage });
}
