//! The agent loop: screenshot → model → actions → record, until `task_completion` or a limit.
//!
//! One step: capture the screen, prepare it (scale for the model, encode) on the blocking pool, hand the
//! artifact to the uploader (never waiting for it), call the model, journal the step, run its calls in order
//! (stopping at the first failure), journal the results, emit `step_finished`. Limits (steps, time, cost) and
//! cancellation are checked before every model call and every action; an action, once started, always
//! finishes. A graceful shutdown stops the loop at the next step boundary and hands the task back. A model
//! call's deltas become the turn's boundary events (`agent::stream`); a call cut short by a cancel or the time
//! limit still records its step, with what had streamed, as `interrupted`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentd_computer::{Action, ComputerProvider, Frame, Point, ProviderError, Size};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use super::context::ContextPolicy;
use super::events::EventSink;
use super::guard::{Fired, StuckGuard};
use super::journal::{Journal, JournalError};
use super::settle::settle;
use super::stream::{Partial, TurnStream};
use crate::artifacts::{Uploader, artifact_key};
use crate::config::SettlePolicy;
use crate::model::ToolSpec;
use crate::model::{
    CallKind, Delta, Exchange, Model, ModelError, ModelImage, ModelRequest, ModelTurn, ToolCall, ToolResult, Usage,
};
use crate::record::events::EventKind;
use crate::record::events::PendingToolCall;
use crate::record::{
    ActionResult, CallResult, DownloadRef, EndReason, GuardNote, Outcome, ScreenshotRef, StepApproval, StepRecord, Turn,
};
use crate::screen::coords::{CoordinateMap, fit_within};
use crate::screen::image::{self, Prepared};
use crate::task::ResolvedTask;
use crate::tools::{Called, Effect, MAX_INVALID_OUTPUTS, ToolContext, ToolOutcome, Toolbox};

mod history;
mod resume;
mod verifying;
mod waits;

pub use resume::{INTERRUPTED_ACTION, RESUME_NOTE, TURN_MESSAGE};

/// Everything one attempt of a task needs.
pub struct LoopInput {
    pub task_id: String,
    pub attempt: u32,
    pub task: ResolvedTask,
    pub computer: Arc<dyn ComputerProvider>,
    pub model: Arc<dyn Model>,
    /// The declared tools (§13) and `task_completion`.
    pub tools: Arc<Toolbox>,
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
    /// A person wants the desktop (§20 take-over): stop after the current step with [`LoopEnd::Paused`].
    pub pause: CancellationToken,
    /// A person had the desktop since the last attempt and handed it back: the next step's screenshot goes
    /// to the model with their note (and the step's record keeps it).
    pub handed_back: Option<crate::record::HandBack>,
    /// How to wait for the screen after actions.
    pub settle: SettlePolicy,
    /// The task's verifier checks (§16); empty when it has none.
    pub verifier: Arc<crate::verify::Verifier>,
    /// The turns of the conversation (§19), the current one last; empty (or one) for a task never sent a
    /// message. The model sees the earlier turns' steps as history, each later turn's message beside the
    /// screenshot of its first step; limits count from the current turn's first step.
    pub turns: Vec<Turn>,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum LoopEnd {
    /// The task is over.
    Finished(Outcome),
    /// The daemon is shutting down; the task goes back to the queue with its steps.
    Interrupted,
    /// The journal refused a write: another worker owns the task now. Nothing more may be done.
    LeaseLost(String),
    /// The last step's calls wait for a human; the step is journaled, nothing of it has run.
    WaitingForHuman { reason: String },
    /// The last step waits for the API client to answer its `remote` tool calls (journaled with
    /// `awaiting_tools`); the calls before them ran, the ones after them run when the task resumes.
    AwaitingTool { calls: Vec<PendingToolCall> },
    /// A failure a later attempt may not hit (the computer or model was unreachable).
    Retryable(Outcome),
    /// A pause was asked for (§20 take-over): the loop stopped after a finished step; a person uses the
    /// desktop until they hand it back.
    Paused,
}

#[derive(Debug)]
pub struct LoopOutput {
    pub end: LoopEnd,
    /// Every step, including the resumed ones.
    pub steps: Vec<StepRecord>,
    pub usage: Usage,
    pub final_screenshot: Option<ScreenshotRef>,
    pub computer_state: Option<serde_json::Value>,
    /// Model calls that failed (after the adapter's own retries).
    pub model_errors: u32,
    /// The model provider asked not to be called again before this long (a long `retry-after`).
    pub retry_after: Option<Duration>,
    /// What the stuck-loop guard did in this attempt.
    pub guard_fired: Vec<Fired>,
}

/// Pixels that may differ between two screenshots before the stuck-loop guard calls it a change: more than a
/// blinking text caret (about 1–2 × 20 px), less than one typed letter with the caret moving after it.
pub const GUARD_TOLERANCE_PIXELS: u64 = 40;

/// How long a single action may take beyond its own duration before the computer is deemed stuck.
pub const ACTION_TIMEOUT: Duration = Duration::from_secs(60);

fn action_duration(action: &Action) -> Duration {
    match action {
        Action::Wait { duration_ms } | Action::HoldKey { duration_ms, .. } => Duration::from_millis(*duration_ms),
        _ => Duration::ZERO,
    }
}

/// Runs [`run`] on its own task so that a panic anywhere inside (a provider, a model adapter) becomes an
/// `error` outcome instead of taking the caller down.
pub async fn run_isolated(input: LoopInput) -> LoopOutput {
    let secrets = input.tools.secrets().clone();
    // The loop's own task stays inside the caller's span (the task, for logs and traces).
    match tokio::spawn(tracing::Instrument::in_current_span(run(input))).await {
        Ok(output) => output,
        Err(e) => {
            let message = match e.try_into_panic() {
                Ok(payload) => payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into()),
                Err(e) => e.to_string(),
            };
            let message = secrets.redact(&message).into_owned();
            tracing::error!(%message, "agent loop panicked");
            LoopOutput {
                end: LoopEnd::Finished(error_outcome(&format!("internal error: the task panicked: {message}"))),
                steps: Vec::new(),
                usage: Usage::default(),
                final_screenshot: None,
                computer_state: None,
                model_errors: 0,
                retry_after: None,
                guard_fired: Vec::new(),
            }
        }
    }
}

/// What the model is told when it replied without calling any tool.
pub const NO_TOOL_NOTE: &str = "You did not call a tool. Use the computer tool to act, or call task_completion \
when the task is done or cannot be done.";

struct Loop {
    input: LoopInput,
    screen: Size,
    coords: CoordinateMap,
    image_size: Size,
    deadline: Instant,
    steps: Vec<StepRecord>,
    history: Vec<Exchange>,
    usage: Usage,
    notes: Vec<String>,
    /// The frame of the previous step's screenshot (frames share their pixels: this is no copy).
    previous_frame: Option<Frame>,
    /// Whether the last capture differs from `previous_frame` (`None` for the first).
    last_changed: Option<bool>,
    /// Whether it differs by more than [`GUARD_TOLERANCE_PIXELS`] (what the stuck-loop guard counts).
    last_noticeably_changed: Option<bool>,
    policy: ContextPolicy,
    /// What the model is told it may call (from the toolbox, computed once).
    specs: Vec<ToolSpec>,
    /// The resumed step that waits for a human's answer, if any.
    pending_approval: Option<StepRecord>,
    /// The resumed step that parked for the API client's `remote` tool results (§13), if any.
    pending_tools: Option<StepRecord>,
    /// The completion the last resumed step already made: the worker died after the model called
    /// `task_completion` and before the end was recorded. The task ends with it instead of asking again.
    resumed_completion: Option<Outcome>,
    /// How many times `task_completion` was refused for its structured output (§14), earlier attempts included.
    invalid_outputs: u32,
    retry_after: Option<Duration>,
    /// The settled screen after the last actions: the next capture uses it instead of a new screenshot.
    next_frame: Option<Frame>,
    model_errors: u32,
    // --- context compaction (model adapters' issue) ---
    /// What compaction made of exchanges dropped from `history` (see `agent::context::compact`).
    summary: Option<String>,
    /// The stuck-loop guard (§17), fed every finished step.
    guard: StuckGuard,
    /// What the guard did in this attempt (for the daemon's metrics).
    guard_fired: Vec<Fired>,
    /// Verifier rounds (§16) a completion failed, earlier attempts included; rounds run in this attempt; the
    /// round that ended the task (its results go into the outcome).
    verify_failures: u32,
    verify_rounds: u32,
    final_checks: Option<Vec<crate::record::CheckResult>>,
    /// Steps and cost of the conversation's earlier turns (§19): the current turn's limits count after them.
    turn_base: (usize, f64),
    /// The current turn's message, for the history of its first step when an earlier attempt made it.
    resumed_turn_notes: Vec<String>,
}

/// Why the loop stopped early inside a step.
enum Stop {
    End(LoopEnd),
}

/// How a model call ended without a turn.
enum CallEnd {
    Stop(Stop),
    /// Cancelled or timed out while the model answered: the step is recorded with what had streamed.
    Cut {
        end: LoopEnd,
        partial: Partial,
    },
}

/// Runs one attempt of a task to its end.
pub async fn run(input: LoopInput) -> LoopOutput {
    let started = Instant::now();
    let remaining = Duration::from_secs(input.task.limits.timeout_secs).saturating_sub(input.elapsed_before);
    // Saturating: a deadline past what `Instant` can hold is as good as none (a century ahead).
    let deadline = started
        .checked_add(remaining)
        .or_else(|| started.checked_add(Duration::from_secs(100 * 365 * 24 * 3600)))
        .unwrap_or(started);
    let policy = ContextPolicy::new(input.task.keep_screenshots, input.model.context_chunk());
    let mut input = input;
    // The model is told the secrets' placeholders, never their values (§15).
    if let Some(note) = input.tools.secrets().note() {
        input.task.instructions = format!("{}\n\n{note}", input.task.instructions);
    }
    let resume = std::mem::take(&mut input.resume);
    let mut state = Loop {
        screen: Size::new(0, 0),
        coords: CoordinateMap::identity(Size::new(1, 1)),
        image_size: Size::new(1, 1),
        deadline,
        steps: Vec::new(),
        history: Vec::new(),
        usage: Usage::default(),
        notes: Vec::new(),
        previous_frame: None,
        last_changed: None,
        last_noticeably_changed: None,
        policy,
        specs: input.tools.specs(),
        pending_approval: None,
        pending_tools: None,
        resumed_completion: None,
        invalid_outputs: 0,
        retry_after: None,
        next_frame: None,
        model_errors: 0,
        summary: None,
        guard: StuckGuard::new(input.task.guard),
        guard_fired: Vec::new(),
        verify_failures: 0,
        verify_rounds: 0,
        final_checks: None,
        turn_base: (0, 0.0),
        resumed_turn_notes: Vec::new(),
        input,
    };
    let interrupted = state.restore(resume);
    let reconciled = state.journal_interrupted(&interrupted).await;
    let end = match reconciled.and(state.prepare_screen().await) {
        Ok(()) => match state.resumed_completion.take() {
            Some(outcome) => LoopEnd::Finished(outcome),
            None => state.steps_until_end().await,
        },
        Err(end) => end,
    };
    state.finish(end).await
}

impl Loop {
    async fn prepare_screen(&mut self) -> Result<(), LoopEnd> {
        let screen = self.input.computer.screen_size().await.map_err(|e| provider_end(&e))?;
        self.screen = screen;
        self.coords = self.input.model.coordinates(screen);
        // Grid models (0–999) are shown the screen scaled to the model's preferred image size; image-space
        // models see exactly their coordinate space.
        self.image_size = self.input.model.image_size(screen);
        Ok(())
    }

    fn check_limits(&self, before_model_call: bool) -> Result<(), LoopEnd> {
        if self.input.cancel.is_cancelled() {
            return Err(finished(false, "cancelled", EndReason::Cancelled));
        }
        if Instant::now() >= self.deadline {
            return Err(finished(
                false,
                &format!("time limit of {} s reached", self.input.task.limits.timeout_secs),
                EndReason::Timeout,
            ));
        }
        // Spending nothing never trips the budget, so free models run under a zero budget.
        // Limits are per turn (§19): the steps and cost of earlier turns do not count.
        let spent = self.usage.cost_usd - self.turn_base.1;
        if spent > 0.0 && spent >= self.input.task.limits.max_cost_usd {
            return Err(finished(
                false,
                &format!("cost limit of ${:.4} reached (spent ${spent:.4})", self.input.task.limits.max_cost_usd),
                EndReason::Budget,
            ));
        }
        if before_model_call
            && self.steps.len().saturating_sub(self.turn_base.0) as u32 >= self.input.task.limits.max_steps
        {
            return Err(finished(
                false,
                &format!("step limit of {} reached", self.input.task.limits.max_steps),
                EndReason::MaxSteps,
            ));
        }
        Ok(())
    }

    async fn steps_until_end(&mut self) -> LoopEnd {
        match self.settle_pending_approval().await {
            Ok(Some(outcome)) => return LoopEnd::Finished(outcome),
            Ok(None) => {}
            Err(Stop::End(end)) => return end,
        }
        match self.settle_pending_tools().await {
            Ok(Some(outcome)) => return LoopEnd::Finished(outcome),
            Ok(None) => {}
            Err(Stop::End(end)) => return end,
        }
        loop {
            if self.input.shutdown.is_cancelled() {
                return LoopEnd::Interrupted;
            }
            if let Err(end) = self.check_limits(true) {
                return end;
            }
            // After the cancel and the limits (a cancelled task ends rather than waits: a cancel and a pause
            // requested together end the task), before the model is called again: the step that ran when the
            // pause came finished whole.
            if let Some(paused) = self.pause_requested() {
                return paused;
            }
            // ERROR level: any filter that lets a line through keeps the step it belongs to (`cli::telemetry`).
            let span = tracing::error_span!("step", step = self.steps.len() as i64);
            let step = async {
                let started = Instant::now();
                let result = self.step().await;
                tracing::debug!(duration_ms = started.elapsed().as_millis() as u64, "step finished");
                result
            };
            match tracing::Instrument::instrument(step, span).await {
                Ok(Some(outcome)) => return LoopEnd::Finished(outcome),
                Ok(None) => {}
                Err(Stop::End(end)) => return end,
            }
        }
    }

    /// Captures and prepares the screen, and hands the artifact to the uploader under `step`'s key.
    async fn capture(&mut self, step: u32) -> Result<(Frame, Prepared, ScreenshotRef), Stop> {
        let frame = match self.next_frame.take() {
            Some(frame) => frame,
            None => self.input.computer.screenshot().await.map_err(|e| Stop::End(provider_end(&e)))?,
        };
        let image_size = self.image_size;
        let for_encode = frame.clone();
        // Pixel work (the comparison with the last screen, scaling, encoding) stays off the async runtime.
        let previous = self.previous_frame.clone();
        let (prepared, changed, noticeably) = tokio::task::spawn_blocking(move || {
            let changed = previous.as_ref().map(|p| p.as_rgb() != for_encode.as_rgb() || p.size() != for_encode.size());
            // For the stuck-loop guard: a blinking caret is no progress, a typed letter is.
            let noticeably = match (&previous, changed) {
                (Some(p), Some(true)) => Some(super::settle::differs(p, &for_encode, GUARD_TOLERANCE_PIXELS)),
                _ => changed,
            };
            image::prepare(&for_encode, image_size).map(|prepared| (prepared, changed, noticeably))
        })
        .await
        .map_err(|e| Stop::End(error_end(&format!("screenshot processing panicked: {e}"))))?
        .map_err(|e| Stop::End(error_end(&e.to_string())))?;
        self.last_changed = changed;
        self.last_noticeably_changed = noticeably;
        let key = artifact_key(&self.input.task_id, self.input.attempt, step, prepared.artifact.extension);
        let reference = ScreenshotRef {
            url: self.input.uploader.store().url(&key),
            width: prepared.artifact.size.width,
            height: prepared.artifact.size.height,
            key: key.clone(),
        };
        let events = self.input.events.clone();
        let (width, height, bytes) =
            (prepared.artifact.size.width, prepared.artifact.size.height, prepared.artifact.bytes.len() as u64);
        let saved_key = key.clone();
        // Returns once the screenshot is in the local spool (a crash cannot lose it), before the step that
        // refers to it is journaled; the upload itself runs beside the loop.
        self.input
            .uploader
            .submit(
                key,
                prepared.artifact.bytes.clone(),
                Some(Box::new(move |url: &str| {
                    events.emit(EventKind::ScreenshotSaved {
                        step,
                        key: saved_key,
                        url: url.to_string(),
                        width,
                        height,
                        bytes,
                    })
                })),
            )
            .await;
        Ok((frame, prepared, reference))
    }

    /// One step. `Ok(Some(outcome))` when the model completed the task.
    async fn step(&mut self) -> Result<Option<Outcome>, Stop> {
        let index = self.steps.len() as u32;
        let started_at = OffsetDateTime::now_utc();
        let started = Instant::now();
        self.input.events.emit(EventKind::StepStarted { step: index });

        let (frame, prepared, screenshot) = self.capture(index).await?;
        let page = self.input.computer.page().await;
        let screen_changed = self.last_changed;
        self.previous_frame = Some(frame.clone());
        let guard_note = self.watch_for_loops(index, self.last_noticeably_changed)?;

        // The history budget (`runner::history`): old screenshots out, old steps compacted into the summary.
        let history_note = self.keep_budget(index, &prepared.model).await;
        let handed_back = self.take_hand_back();
        let called = self.call_model(index, &prepared.model).await;
        let mut record = StepRecord::begun(index, started_at, screenshot);
        record.page = page;
        record.screen_changed = screen_changed;
        record.guard = guard_note;
        record.handed_back = handed_back;
        // A model-written summary's call is this step's usage too.
        if let Some(usage) = history_note.as_ref().and_then(|h| h.compacted.as_ref()).and_then(|c| c.usage) {
            record.usage = usage;
        }
        record.history = history_note;
        let turn = match called {
            Ok(turn) => turn,
            Err(CallEnd::Stop(stop)) => return Err(stop),
            Err(CallEnd::Cut { end, partial }) => {
                return Err(self.record_cut_step(record, partial, started, end).await);
            }
        };
        self.usage.add(&turn.usage);
        let notes = std::mem::take(&mut self.notes);
        record.model_text = turn.text.clone();
        record.thinking = turn.thinking.clone();
        record.usage.add(&turn.usage);
        record.calls = turn.calls.clone();
        record.raw = turn.raw.clone();
        // Screen-space actions are known before anything runs, so the journal shows what was about to happen.
        record.actions = self.screen_actions(&turn.calls);
        record.approval =
            turn.approval.as_ref().map(|request| StepApproval::asked(request.reason.clone(), request.details.clone()));
        // An approval rule (§20) holds the whole turn before any of its calls runs.
        if record.approval.is_none()
            && let Some((rule, reason)) = crate::task::approval::first_match(&self.input.task.approval, &turn.calls)
        {
            let annotated = self.annotate(index, &frame, &record.actions).await;
            let details = serde_json::json!({ "rule": rule });
            record.approval =
                Some(StepApproval { rule: Some(rule as u32), annotated, ..StepApproval::asked(reason, details) });
        }
        self.journal(&record).await?;

        if let Some(reason) = record.approval.as_ref().map(|a| a.reason.clone()) {
            // The calls wait for a human: the step is journaled as waiting; park the task.
            self.input.events.emit(EventKind::WaitingForHuman {
                reason: reason.clone(),
                question: None,
                call_id: None,
            });
            self.steps.push(record);
            return Err(Stop::End(LoopEnd::WaitingForHuman { reason }));
        }

        let mut executed = self.run_calls(index, &turn).await;
        if !executed.awaiting.is_empty() {
            record.duration_ms = started.elapsed().as_millis() as u64;
            return Err(self.park_for_tools(record, &executed).await);
        }
        if executed.stop.is_none() {
            self.settle_after(&mut record, &executed, &frame).await?;
        }
        self.complete_step(&mut record, &mut executed, started).await?;

        let no_calls = turn.calls.is_empty();
        let mut turn = turn;
        self.input.tools.secrets().redact_turn(&mut turn);
        self.history.push(Exchange {
            step: index,
            screenshot: Some(prepared.model),
            notes,
            turn,
            results: executed.tool_results,
        });
        self.steps.push(record);
        if no_calls {
            self.notes.push(NO_TOOL_NOTE.to_string());
        }
        if let Some(end) = executed.stop {
            return Err(Stop::End(end));
        }
        Ok(executed.completion)
    }

    /// The step's screenshot with `actions` (screen pixels) drawn on it — click points, drag paths, scroll
    /// arrows, and the keyboard's actions as lines of text at the top — stored beside the screenshot for the
    /// human who approves them. `None` (and a warning) when it cannot be drawn.
    async fn annotate(&self, step: u32, frame: &Frame, actions: &[Action]) -> Option<ScreenshotRef> {
        use crate::report::draw::{Canvas, marks};
        let (marks, labels) = marks(actions);
        let frame = frame.clone();
        let size = frame.size();
        let drawn = tokio::task::spawn_blocking(move || {
            let mut pixels = frame.as_rgb().to_vec();
            if let Some(mut canvas) = Canvas::new(size.width, size.height, &mut pixels) {
                canvas.marks(&marks, 1.0);
                let px = (size.height as f32 / 40.0).clamp(12.0, 28.0);
                for (i, label) in labels.iter().enumerate() {
                    let y = (px * 1.4 * (i as f32 + 1.0)).round() as i32;
                    canvas.band(0, y - px as i32, size.width, (px * 1.4) as u32, [0, 0, 0], 0.6);
                    canvas.text(
                        8,
                        y,
                        px,
                        &format!("{}. {}", label.n, label.text),
                        size.width.saturating_sub(16),
                        [0xff; 3],
                    );
                }
            }
            Frame::from_rgb(size, pixels).ok().and_then(|f| image::encode_png(&f).ok())
        })
        .await;
        let Ok(Some(bytes)) = drawn else {
            tracing::warn!("cannot draw the proposed actions on the screenshot");
            return None;
        };
        let key = crate::artifacts::proposed_key(&self.input.task_id, self.input.attempt, step);
        let url = self.input.uploader.store().url(&key);
        self.input.uploader.submit(key.clone(), bytes.into(), None).await;
        Some(ScreenshotRef { url, width: size.width, height: size.height, key })
    }

    /// The computer actions of `calls`, in screen pixels (what the record keeps).
    fn screen_actions(&self, calls: &[ToolCall]) -> Vec<Action> {
        calls
            .iter()
            .flat_map(|call| match &call.kind {
                CallKind::Computer { actions } => actions.iter().map(|a| self.coords.action_to_screen(a)).collect(),
                CallKind::Function { .. } => Vec::new(),
            })
            .collect()
    }

    /// Feeds the last finished step to the stuck-loop guard, with whether the screen changed since its
    /// screenshot. A warning goes to the model with this step's screenshot (and into its record); a second
    /// one ends the task `stuck` before the model is called again.
    fn watch_for_loops(&mut self, step: u32, screen_changed: Option<bool>) -> Result<Option<GuardNote>, Stop> {
        let Some(last) = self.steps.last().filter(|s| s.finished) else {
            return Ok(None);
        };
        let Some(fired) = self.guard.observe(last, screen_changed) else {
            return Ok(None);
        };
        let note = fired.note.clone();
        tracing::info!(check = note.check.as_str(), count = note.count, stopped = fired.stop, "stuck-loop guard fired");
        self.input.events.emit(EventKind::StuckDetected {
            step,
            check: note.check,
            count: note.count,
            message: note.message.clone(),
            stopped: fired.stop,
        });
        let stop = fired.stop;
        self.guard_fired.push(fired);
        if stop {
            return Err(Stop::End(finished(false, &note.message, EndReason::Stuck)));
        }
        self.notes.push(note.message.clone());
        Ok(Some(note))
    }

    /// Journals a step whose remote tool calls wait for the API client (what ran so far, and which calls
    /// are awaited), emits `awaiting_tool`, and ends the attempt.
    async fn park_for_tools(&mut self, mut record: StepRecord, executed: &Executed) -> Stop {
        executed.fill(&mut record);
        record.awaiting_tools = executed.awaiting.iter().map(|c| c.id.clone()).collect();
        if let Err(stop) = self.journal(&record).await {
            return stop;
        }
        let index = record.index;
        self.steps.push(record);
        self.parked(index, executed.awaiting.clone())
    }

    /// The end of an attempt whose step `index` waits for `calls`: a person's answer to an `ask_human`
    /// question (§20: `waiting_for_human`, the event says the question), or the API client's `remote` tool
    /// results (§13: `awaiting_tool`).
    fn parked(&self, index: u32, calls: Vec<PendingToolCall>) -> Stop {
        if let Some(call) = calls.iter().find(|c| c.name == crate::record::ASK_HUMAN) {
            let question = call.arguments.get("question").and_then(|q| q.as_str()).unwrap_or_default().to_string();
            self.input.events.emit(EventKind::WaitingForHuman {
                reason: question.clone(),
                question: Some(question.clone()),
                call_id: Some(call.id.clone()),
            });
            return Stop::End(LoopEnd::WaitingForHuman { reason: question });
        }
        self.input.events.emit(EventKind::AwaitingTool { step: index, calls: calls.clone() });
        Stop::End(LoopEnd::AwaitingTool { calls })
    }

    /// Waits for the screen to settle after input actions, and records how long and whether it changed.
    async fn settle_after(&mut self, record: &mut StepRecord, executed: &Executed, before: &Frame) -> Result<(), Stop> {
        if !executed.actions.iter().any(Action::is_input) {
            return Ok(());
        }
        let computer = self.input.computer.clone();
        let typed = executed.actions.iter().any(|a| matches!(a, Action::Type { text } if !text.trim().is_empty()));
        match settle(computer.as_ref(), &self.input.settle, before, self.deadline, typed).await {
            Ok(settled) => {
                record.settle_ms = settled.waited.as_millis() as u64;
                record.visual_change = Some(settled.changed);
                self.next_frame = Some(settled.frame);
                Ok(())
            }
            Err(e) if e.is_tool_error() => Ok(()),
            Err(e) => Err(Stop::End(provider_end(&e))),
        }
    }

    /// The files the computer downloaded since the last step (a browser's), stored as this attempt's artifacts
    /// under `downloads/NAME` (a name an earlier step of the attempt used gets the step's index in front).
    async fn store_downloads(&self) -> Vec<DownloadRef> {
        let downloads = self.input.computer.take_downloads().await;
        let mut stored = Vec::with_capacity(downloads.len());
        for download in downloads {
            let mut name = crate::artifacts::safe_file_name(&download.name);
            let taken = |name: &str, stored: &[DownloadRef]| {
                stored.iter().chain(self.steps.iter().flat_map(|s| s.downloads.iter())).any(|d| d.name == name)
            };
            let mut n = 2;
            while taken(&name, &stored) {
                name = format!("{n}-{}", crate::artifacts::safe_file_name(&download.name));
                n += 1;
            }
            let (key, url) = match download.content {
                Some(content) => {
                    let key = crate::artifacts::download_key(&self.input.task_id, self.input.attempt, &name);
                    let url = self.input.uploader.store().url(&key);
                    self.input.uploader.submit(key.clone(), content.into(), None).await;
                    (Some(key), Some(url))
                }
                None => (None, None),
            };
            stored.push(DownloadRef { name, bytes: download.size, key, url });
        }
        stored
    }

    /// Fills in a step's results, journals it as finished and emits `step_finished`.
    async fn complete_step(
        &mut self,
        record: &mut StepRecord,
        executed: &mut Executed,
        started: Instant,
    ) -> Result<(), Stop> {
        self.verify_completion(record, executed).await;
        executed.fill(record);
        record.downloads = self.store_downloads().await;
        record.duration_ms = started.elapsed().as_millis() as u64;
        record.finished = true;
        self.journal(record).await?;
        self.input.events.emit(EventKind::StepFinished {
            step: record.index,
            duration_ms: record.duration_ms,
            usage: record.usage,
        });
        Ok(())
    }

    async fn call_model(&mut self, step: u32, screenshot: &ModelImage) -> Result<ModelTurn, CallEnd> {
        let tools = &self.specs;
        let request = ModelRequest {
            instructions: &self.input.task.instructions,
            history: &self.history,
            screenshot,
            notes: &self.notes,
            tools,
            screen: self.screen,
            step,
            summary: self.summary.as_deref(),
        };
        // The deltas become message/text/thinking/tool-call boundaries (`agent::stream`); the stream outlives
        // the call, so a cut-short turn keeps what it had streamed.
        let stream = std::sync::Mutex::new(TurnStream::begin(step, self.input.events.clone()));
        let deltas = |delta: Delta<'_>| match stream.lock() {
            Ok(mut stream) => stream.delta(delta),
            Err(poisoned) => poisoned.into_inner().delta(delta),
        };
        let model = self.input.model.clone();
        let span = model_call_span(&self.input.task.model, model.as_ref());
        let call = tracing::Instrument::instrument(model.next_turn(request, &deltas), span.clone());
        let timeout_secs = self.input.task.limits.timeout_secs;
        let result = tokio::select! {
            result = call => Ok(result),
            () = self.input.cancel.cancelled() => Err(finished(false, "cancelled", EndReason::Cancelled)),
            () = tokio::time::sleep_until(self.deadline.into()) => Err(finished(
                false,
                &format!("time limit of {timeout_secs} s reached while waiting for the model"),
                EndReason::Timeout,
            )),
        };
        let stream = stream.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
        match result {
            Ok(Ok(turn)) => {
                stream.finish(&turn);
                record_usage(&span, &turn.usage);
                Ok(turn)
            }
            Ok(Err(e)) => {
                stream.fail(&e);
                span.record("otel.status_code", "ERROR");
                self.model_errors += 1;
                if let ModelError::RateLimited { retry_after_secs, .. } = &e {
                    self.retry_after = Some(Duration::from_secs(*retry_after_secs));
                }
                tracing::warn!(error = %e, "model call failed");
                Err(CallEnd::Stop(Stop::End(model_end(&e))))
            }
            Err(end) => Err(CallEnd::Cut { end, partial: stream.interrupt() }),
        }
    }

    /// Records the step whose model call was cut short (cancel, timeout): its screenshot and the text the
    /// model had streamed, `interrupted`, journaled as finished with no call run.
    async fn record_cut_step(
        &mut self,
        mut record: StepRecord,
        partial: Partial,
        started: Instant,
        end: LoopEnd,
    ) -> Stop {
        record.model_text = partial.text;
        record.thinking = partial.thinking;
        record.interrupted = true;
        record.finished = true;
        record.duration_ms = started.elapsed().as_millis() as u64;
        if let Err(stop) = self.journal(&record).await {
            return stop;
        }
        self.input.events.emit(EventKind::StepFinished {
            step: record.index,
            duration_ms: record.duration_ms,
            usage: record.usage,
        });
        self.steps.push(record);
        Stop::End(end)
    }

    async fn journal(&self, record: &StepRecord) -> Result<(), Stop> {
        // Every step passes here on its way to the records: secrets are redacted out of a copy (§15).
        let secrets = self.input.tools.secrets();
        let redacted;
        let record = if secrets.is_empty() {
            record
        } else {
            let mut copy = record.clone();
            secrets.redact_step(&mut copy);
            redacted = copy;
            &redacted
        };
        match self.input.journal.record_step(record).await {
            Ok(()) => Ok(()),
            Err(JournalError::LeaseLost(why)) => Err(Stop::End(LoopEnd::LeaseLost(why))),
            Err(e @ JournalError::Unavailable(_)) => {
                Err(Stop::End(LoopEnd::Retryable(error_outcome(&format!("cannot record step: {e}")))))
            }
        }
    }

    async fn run_calls(&mut self, step: u32, turn: &ModelTurn) -> Executed {
        self.run_calls_from(step, turn, 0, Executed::default(), false).await
    }

    /// Runs the turn's calls from `start` on, after what `out` says ran before (`failed`: one of those
    /// failed, so the rest are not run).
    async fn run_calls_from(
        &mut self,
        step: u32,
        turn: &ModelTurn,
        start: usize,
        mut out: Executed,
        mut failed: bool,
    ) -> Executed {
        let mut action_index = out.actions.len() as u32;
        for (position, call) in turn.calls.iter().enumerate().skip(start) {
            if failed || out.stop.is_some() {
                out.tool_results.push(ToolResult {
                    call_id: call.id.clone(),
                    ok: false,
                    message: "not run: an earlier call in this turn failed or the task stopped".into(),
                    image: None,
                });
                continue;
            }
            match &call.kind {
                CallKind::Computer { actions } => {
                    let result = self.run_actions(step, &call.id, actions, &mut action_index, &mut out).await;
                    failed = !result.ok;
                    out.tool_results.push(result);
                }
                CallKind::Function { name, arguments } => {
                    // A valid `ask_human` call waits for a person, alone (§20).
                    if self.input.tools.question(name, arguments).is_some() {
                        out.awaiting = vec![PendingToolCall {
                            id: call.id.clone(),
                            name: name.clone(),
                            arguments: arguments.clone(),
                        }];
                        break;
                    }
                    // A valid remote call and the valid remote calls right after it go to the API client
                    // together.
                    let awaiting = remote_run(&turn.calls[position..], &self.input.tools);
                    if !awaiting.is_empty() {
                        out.awaiting = awaiting;
                        break;
                    }
                    let outcome = self.call_tool(step, &call.id, name, arguments, &mut out).await;
                    failed = !outcome.ok;
                    out.tool_results.push(ToolResult {
                        call_id: call.id.clone(),
                        ok: outcome.ok,
                        message: outcome.message,
                        image: None,
                    });
                    if let Some(details) = outcome.details {
                        out.details.insert(call.id.clone(), details);
                    }
                }
            }
        }
        out
    }

    /// Runs one function call (a declared tool or `task_completion`) with its events; a cancel during the
    /// call ends it with a result saying so.
    async fn call_tool(
        &mut self,
        step: u32,
        call_id: &str,
        name: &str,
        arguments: &serde_json::Value,
        out: &mut Executed,
    ) -> ToolOutcome {
        let declared = name != crate::model::TASK_COMPLETION;
        if declared {
            self.input.events.emit(EventKind::ToolStarted {
                step,
                call_id: call_id.to_string(),
                name: name.to_string(),
                arguments: arguments.clone(),
            });
        }
        let started = Instant::now();
        let events = self.input.events.clone();
        let id = call_id.to_string();
        let stream = move |text: &str| {
            events.emit(EventKind::ToolOutput { step, call_id: id.clone(), text: text.to_string() });
        };
        let context = ToolContext { cancel: self.input.cancel.child_token(), output: &stream };
        let tools = self.input.tools.clone();
        let span = tracing::info_span!("tool", otel.name = format!("tool {name}"), tool = name, call_id);
        let called = tokio::select! {
            called = tracing::Instrument::instrument(tools.call(name, arguments, context), span) => called,
            () = self.input.cancel.cancelled() => {
                out.stop = Some(finished(false, "cancelled", EndReason::Cancelled));
                Called::Done(ToolOutcome::error("cancelled: the task was cancelled while this tool ran"), None)
            }
            () = tokio::time::sleep_until(self.deadline.into()) => {
                out.stop = Some(finished(
                    false,
                    &format!("time limit of {} s reached while a tool ran", self.input.task.limits.timeout_secs),
                    EndReason::Timeout,
                ));
                Called::Done(ToolOutcome::error("stopped: the task's time limit was reached while this tool ran"), None)
            }
        };
        let (mut outcome, effect) = match called {
            Called::Done(outcome, effect) => (outcome, effect),
            // `run_calls` sends valid remote calls to the API client before calling here.
            Called::Remote => (ToolOutcome::error("internal error: a remote tool was run in-process"), None),
        };
        match effect {
            Some(Effect::Complete { success, summary, output }) => {
                out.completion = Some(Outcome::completed(success, summary, output));
            }
            Some(Effect::InvalidOutput { problems }) => {
                self.invalid_outputs += 1;
                let left = MAX_INVALID_OUTPUTS.saturating_sub(self.invalid_outputs);
                if left == 0 {
                    out.stop = Some(error_end(&out_of_tries(self.invalid_outputs, &problems)));
                    outcome.message.push_str(" (no tries left: the task ends failed)");
                } else {
                    outcome.message.push_str(&format!(
                        " (call task_completion again with a valid `output`; {left} tr{} left)",
                        if left == 1 { "y" } else { "ies" }
                    ));
                }
            }
            None => {}
        }
        if declared {
            self.input.events.emit(EventKind::ToolFinished {
                step,
                call_id: call_id.to_string(),
                name: name.to_string(),
                ok: outcome.ok,
                output: outcome.message.clone(),
                details: outcome.details.clone(),
                duration_ms: started.elapsed().as_millis() as u64,
            });
            out.action_results.push(ActionResult {
                ok: outcome.ok,
                message: outcome.message.clone(),
                tool: Some(name.to_string()),
                call_id: Some(call_id.to_string()),
                details: outcome.details.clone(),
            });
        }
        outcome
    }

    /// Runs one computer call's actions in order; the first failure stops the rest.
    async fn run_actions(
        &mut self,
        step: u32,
        call_id: &str,
        actions: &[Action],
        action_index: &mut u32,
        out: &mut Executed,
    ) -> ToolResult {
        let mut messages = Vec::new();
        let mut image = None;
        for (position, model_action) in actions.iter().enumerate() {
            if let Err(end) = self.check_limits(false) {
                out.stop = Some(end);
                let skipped = actions.len() - position;
                return ToolResult {
                    call_id: call_id.to_string(),
                    ok: false,
                    message: format!("stopped before {skipped} action(s): the task reached a limit or was cancelled"),
                    image: None,
                };
            }
            let index = *action_index;
            *action_index += 1;
            let screen_action = self.coords.action_to_screen(model_action);
            self.input.events.emit(EventKind::ActionStarted { step, index, action: screen_action.clone() });
            let started = Instant::now();
            let span = tracing::info_span!(
                "action",
                otel.name = format!("action {}", model_action.kind()),
                action = model_action.kind(),
                index = i64::from(index),
                otel.status_code = tracing::field::Empty,
            );
            let result =
                tracing::Instrument::instrument(self.perform(model_action, &screen_action), span.clone()).await;
            if result.is_err() {
                span.record("otel.status_code", "ERROR");
            }
            drop(span);
            let duration_ms = started.elapsed().as_millis() as u64;
            let (ok, message) = match &result {
                Ok(done) => (true, done.message.clone()),
                Err(ActionFailure::Tool(message)) => (false, message.clone()),
                Err(ActionFailure::Fatal(end)) => {
                    out.stop = Some(end.clone());
                    (false, "the computer failed".to_string())
                }
            };
            self.input.events.emit(EventKind::ActionFinished {
                step,
                index,
                ok,
                message: message.clone(),
                duration_ms,
            });
            out.actions.push(screen_action);
            out.action_results.push(ActionResult::action(ok, message.clone()));
            match result {
                Ok(done) => {
                    if !done.message.is_empty() {
                        messages.push(done.message);
                    }
                    if done.image.is_some() {
                        image = done.image;
                    }
                }
                Err(_) => {
                    let rest = actions.len() - position - 1;
                    let mut text = format!("action {} ({}) failed: {message}", position + 1, model_action.summary());
                    if rest > 0 {
                        text.push_str(&format!("; the {rest} action(s) after it were not run"));
                    }
                    return ToolResult { call_id: call_id.to_string(), ok: false, message: text, image: None };
                }
            }
        }
        let message = if messages.is_empty() { "ok".to_string() } else { messages.join("\n") };
        ToolResult { call_id: call_id.to_string(), ok: true, message, image }
    }

    /// Performs one action: validation in the model's space (so errors speak its coordinates), then in
    /// screen space, then the provider (or the loop itself for observations).
    async fn perform(&self, model_action: &Action, screen_action: &Action) -> Result<Done, ActionFailure> {
        model_action.validate(self.coords.model()).map_err(|e| ActionFailure::Tool(e.to_string()))?;
        screen_action.validate(self.screen).map_err(|e| ActionFailure::Tool(e.to_string()))?;
        match screen_action {
            Action::Screenshot {} => Ok(Done::text("screenshot taken; it is attached to this result")),
            Action::Zoom { x1, y1, x2, y2 } => {
                let current = match self.input.computer.screenshot().await {
                    Ok(current) => current,
                    Err(e) if e.is_tool_error() => return Err(ActionFailure::Tool(e.to_string())),
                    Err(e) => return Err(ActionFailure::Fatal(provider_end(&e))),
                };
                let region = Size::new((x2 - x1 + 1) as u32, (y2 - y1 + 1) as u32);
                let crop = current.crop(Point::new(*x1, *y1), region);
                let target = zoom_size(crop.size(), self.image_size);
                let zoomed = tokio::task::spawn_blocking(move || {
                    image::scale(&crop, target).and_then(|scaled| image::encode_png(&scaled))
                })
                .await
                .map_err(|e| ActionFailure::Tool(format!("zoom failed: {e}")))?
                .map_err(|e| ActionFailure::Tool(format!("zoom failed: {e}")))?;
                Ok(Done {
                    message: format!("zoomed image of region ({x1},{y1})-({x2},{y2}) attached"),
                    image: Some(ModelImage::new(target, image::PNG, zoomed.into())),
                })
            }
            Action::Wait { duration_ms } => {
                // A wait never outlives the task's deadline.
                let wait =
                    Duration::from_millis(*duration_ms).min(self.deadline.saturating_duration_since(Instant::now()));
                let shortened = Action::Wait { duration_ms: wait.as_millis() as u64 };
                self.provider_perform(&shortened).await
            }
            _ => self.provider_perform(screen_action).await,
        }
    }

    async fn provider_perform(&self, action: &Action) -> Result<Done, ActionFailure> {
        // An action is never cut short on purpose; one that outlives this bound means the computer is stuck,
        // and the attempt ends so that another one can start on a fresh connection.
        let bound = ACTION_TIMEOUT + action_duration(action);
        // Secrets (§15): a `type` action's placeholders become the values only here, for the computer; the
        // recorded action keeps them, and what the computer says back is redacted.
        let secrets = self.input.tools.secrets();
        let substituted = match action {
            Action::Type { text } => match secrets.substitute(text) {
                std::borrow::Cow::Owned(text) => Some(Action::Type { text }),
                std::borrow::Cow::Borrowed(_) => None,
            },
            _ => None,
        };
        let performed = self.input.computer.perform(substituted.as_ref().unwrap_or(action));
        let result = match tokio::time::timeout(bound, performed).await {
            Ok(result) => result,
            Err(_) => {
                return Err(ActionFailure::Fatal(LoopEnd::Retryable(error_outcome(&format!(
                    "the computer did not finish {} within {} s",
                    action.summary(),
                    bound.as_secs()
                )))));
            }
        };
        match result {
            Ok(report) => {
                let mut message = secrets.redact(&report.message.unwrap_or_default()).into_owned();
                if let Some(cursor) = report.cursor {
                    let p = self.coords.to_model(cursor);
                    message = format!("cursor at X={},Y={}", p.x, p.y);
                }
                Ok(Done { message, image: None })
            }
            Err(e) if e.is_tool_error() => Err(ActionFailure::Tool(secrets.redact(&e.to_string()).into_owned())),
            Err(e) => Err(ActionFailure::Fatal(provider_end(&e))),
        }
    }

    /// Ends the attempt: final screenshot, computer state, `task_finished` for finished tasks.
    async fn finish(mut self, end: LoopEnd) -> LoopOutput {
        let mut final_screenshot = None;
        let acted_last = self.steps.last().is_some_and(|s| s.actions.iter().any(Action::is_input));
        if matches!(end, LoopEnd::Finished(_) | LoopEnd::Interrupted) && acted_last && self.screen.width > 0 {
            let index = self.steps.len() as u32;
            if let Ok((_, _, reference)) = self.capture(index).await {
                final_screenshot = Some(reference);
            }
        }
        let mut end = end;
        self.verify_at_end(&mut end).await;
        let mut computer_state = self.input.computer.state().await;
        // What leaves the loop shows placeholders, never secrets' values (§15): the computer's state holds
        // what was typed; an ending's message may quote a provider's error.
        let secrets = self.input.tools.secrets().clone();
        if !secrets.is_empty() {
            if let Some(state) = &mut computer_state {
                secrets.redact_json(state);
            }
            self.steps.iter_mut().for_each(|step| secrets.redact_step(step));
            let redact = |text: &mut String| *text = secrets.redact(text).into_owned();
            match &mut end {
                LoopEnd::Finished(outcome) | LoopEnd::Retryable(outcome) => {
                    redact(&mut outcome.summary);
                    if let Some(output) = &mut outcome.output {
                        secrets.redact_json(output);
                    }
                }
                LoopEnd::LeaseLost(text) | LoopEnd::WaitingForHuman { reason: text } => redact(text),
                LoopEnd::Interrupted | LoopEnd::Paused | LoopEnd::AwaitingTool { .. } => {}
            }
        }
        LoopOutput {
            end,
            steps: self.steps,
            usage: self.usage,
            final_screenshot,
            computer_state,
            model_errors: self.model_errors,
            retry_after: self.retry_after,
            guard_fired: self.guard_fired,
        }
    }
}

#[derive(Default)]
struct Executed {
    actions: Vec<Action>,
    /// One per attempted action and per declared tool call, in order.
    action_results: Vec<ActionResult>,
    tool_results: Vec<ToolResult>,
    completion: Option<Outcome>,
    stop: Option<LoopEnd>,
    /// The remote calls the step now waits for (the calls before them ran; none after them did).
    awaiting: Vec<PendingToolCall>,
    /// The envelopes' `details`, by call id (for the record; the model never sees them).
    details: std::collections::BTreeMap<String, serde_json::Value>,
}

impl Executed {
    /// Writes what ran into the step's record: the actions, every result (actions' and tools'), and the
    /// results as the model saw them with their envelopes' details.
    fn fill(&self, record: &mut StepRecord) {
        record.actions = self.actions.clone();
        record.results = self.action_results.clone();
        record.call_results = self
            .tool_results
            .iter()
            .map(|r| CallResult {
                call_id: r.call_id.clone(),
                ok: r.ok,
                message: r.message.clone(),
                details: self.details.get(&r.call_id).cloned(),
            })
            .collect();
    }
}

/// The remote calls at the head of `calls` whose arguments are valid: they wait for the API client together.
fn remote_run(calls: &[ToolCall], tools: &Toolbox) -> Vec<PendingToolCall> {
    calls
        .iter()
        .map_while(|call| match &call.kind {
            CallKind::Function { name, arguments } if tools.is_remote(name) && tools.check(name, arguments).is_ok() => {
                Some(PendingToolCall { id: call.id.clone(), name: name.clone(), arguments: arguments.clone() })
            }
            _ => None,
        })
        .collect()
}

struct Done {
    message: String,
    image: Option<ModelImage>,
}

impl Done {
    fn text(message: &str) -> Self {
        Self { message: message.to_string(), image: None }
    }
}

enum ActionFailure {
    /// Goes back to the model; the task goes on.
    Tool(String),
    /// Ends the attempt.
    Fatal(LoopEnd),
}

/// The size a zoomed region is shown at: as large as fits the model's image size, keeping the aspect.
fn zoom_size(region: Size, max: Size) -> Size {
    let scale = (f64::from(max.width) / f64::from(region.width.max(1)))
        .min(f64::from(max.height) / f64::from(region.height.max(1)));
    let scaled = Size::new(
        ((f64::from(region.width) * scale).round() as u32).max(1),
        ((f64::from(region.height) * scale).round() as u32).max(1),
    );
    fit_within(scaled, max)
}

/// The summary of a task whose model gave no valid structured output in its tries.
fn out_of_tries(tries: u32, problems: &str) -> String {
    format!(
        "task_completion's `output` did not match the task's output_schema in {tries} tries (the limit is \
         {MAX_INVALID_OUTPUTS}); the last problems: {problems}"
    )
}

/// The model turn a journaled step recorded.
fn turn_of(step: &StepRecord) -> ModelTurn {
    ModelTurn {
        text: step.model_text.clone(),
        thinking: step.thinking.clone(),
        calls: step.calls.clone(),
        usage: step.usage,
        raw: step.raw.clone(),
        approval: step
            .approval
            .as_ref()
            .map(|a| crate::model::ApprovalRequest { reason: a.reason.clone(), details: a.details.clone() }),
    }
}

fn finished(success: bool, summary: &str, reason: EndReason) -> LoopEnd {
    LoopEnd::Finished(Outcome {
        success,
        summary: summary.to_string(),
        reason,
        output: None,
        verified: None,
        checks: Vec::new(),
    })
}

fn error_outcome(summary: &str) -> Outcome {
    Outcome {
        success: false,
        summary: summary.to_string(),
        reason: EndReason::Error,
        output: None,
        verified: None,
        checks: Vec::new(),
    }
}

fn error_end(summary: &str) -> LoopEnd {
    LoopEnd::Finished(error_outcome(summary))
}

fn provider_end(e: &ProviderError) -> LoopEnd {
    if e.is_retryable() { LoopEnd::Retryable(error_outcome(&e.to_string())) } else { error_end(&e.to_string()) }
}

fn model_end(e: &ModelError) -> LoopEnd {
    if e.is_retryable() { LoopEnd::Retryable(error_outcome(&e.to_string())) } else { error_end(&e.to_string()) }
}

/// The span of one model call, named and attributed after OpenTelemetry's semantic conventions for generative
/// AI (`gen_ai.*`); the usage is recorded when the turn arrives ([`record_usage`]).
fn model_call_span(spec: &crate::task::ModelSpec, model: &dyn Model) -> tracing::Span {
    let provider = spec.provider();
    // The conventions' names for the providers that have one.
    let system = match provider {
        "gemini" => "gcp.gemini",
        other => other,
    };
    let model_id = model.model_id().unwrap_or(provider);
    tracing::info_span!(
        "model call",
        otel.name = format!("chat {model_id}"),
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        gen_ai.operation.name = "chat",
        gen_ai.system = system,
        gen_ai.provider.name = system,
        gen_ai.request.model = model_id,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        gen_ai.usage.cache_read.input_tokens = tracing::field::Empty,
        gen_ai.usage.cache_creation.input_tokens = tracing::field::Empty,
        agentd.cost_usd = tracing::field::Empty,
    )
}

/// A turn's usage on its model call's span.
/// Numbers are recorded as i64: OpenTelemetry's attributes have no unsigned integers (a u64 would arrive as text).
fn record_usage(span: &tracing::Span, usage: &Usage) {
    let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    span.record("gen_ai.usage.input_tokens", int(usage.input_tokens));
    span.record("gen_ai.usage.output_tokens", int(usage.output_tokens));
    span.record("gen_ai.usage.cache_read.input_tokens", int(usage.cache_read_tokens));
    span.record("gen_ai.usage.cache_creation.input_tokens", int(usage.cache_write_tokens));
    span.record("agentd.cost_usd", usage.cost_usd);
}
