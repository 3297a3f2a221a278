//! The agent loop: screenshot → model → actions → record, until `task_completion` or a limit.
//!
//! One step: capture the screen, prepare it (scale for the model, encode) on the blocking pool, hand the
//! artifact to the uploader (never waiting for it), call the model, journal the step, run its calls in order
//! (stopping at the first failure), journal the results, emit `step_finished`. Limits (steps, time, cost) and
//! cancellation are checked before every model call and every action; an action, once started, always
//! finishes. A graceful shutdown stops the loop at the next step boundary and hands the task back. A model
//! call's deltas become the turn's boundary events (`agent::stream`); a call cut short by a cancel or the time
//! limit still records its step, with what had streamed, as `interrupted`.

use std::time::{Duration, Instant};

use agentd_computer::{Action, Frame, Point, ProviderError, Size};
use time::OffsetDateTime;

use super::attempt::{Attempt, AttemptOutput, Built, Ending, RunContext};
use super::context::ContextPolicy;
use super::guard::{Fired, StuckGuard};
use super::journal::JournalError;
use super::settle::settle;
use super::stream::{Partial, TurnStream};
use crate::artifacts::artifact_key;
use crate::config::SettlePolicy;
use crate::model::ToolSpec;
use crate::model::{
    CallKind, Delta, Exchange, Model, ModelError, ModelImage, ModelRequest, ModelTurn, ToolCall, ToolResult, Usage,
};
use crate::record::events::EventKind;
use crate::record::events::PendingToolCall;
use crate::record::{
    ActionResult, By, CallResult, DownloadRef, EndReason, GuardNote, Outcome, ScreenshotRef, StepApproval, StepRecord,
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

/// Pixels that may differ between two screenshots before the stuck-loop guard calls it a change: more than a
/// blinking text caret (about 1–2 × 20 px), less than one typed letter with the caret moving after it.
pub const GUARD_TOLERANCE_PIXELS: u64 = 40;

/// How long a single action may take beyond its own duration before the computer is deemed stuck.
pub const ACTION_TIMEOUT: Duration = Duration::from_secs(60);

/// How long `action` may take before the computer is deemed stuck: [`ACTION_TIMEOUT`] beyond what the action
/// itself asks to take (a wait, a held key). A model's actions and a person's (`crate::hands`) alike.
pub fn action_bound(action: &Action) -> Duration {
    ACTION_TIMEOUT + action.duration()
}

/// Runs [`run`] on its own task so that a panic anywhere inside (a provider, a model adapter) becomes an
/// `error` outcome instead of taking the caller down.
pub async fn run_isolated(attempt: Attempt, built: Built) -> AttemptOutput {
    let secrets = built.tools.secrets().clone();
    // From here on, every event of the task is redacted (the sink is shared with the caller, so
    // `task_finished` and late screenshot events are too).
    attempt.context.events.seal(secrets.clone());
    // The loop's own task stays inside the caller's span (the task, for logs and traces).
    match tokio::spawn(tracing::Instrument::in_current_span(run(attempt, built))).await {
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
            AttemptOutput::ended(Ending::Finished(error_outcome(&format!(
                "internal error: the task panicked: {message}"
            ))))
        }
    }
}

/// What the model is told when it replied without calling any tool.
pub const NO_TOOL_NOTE: &str = "You did not call a tool. Use the computer tool to act, or call task_completion \
when the task is done or cannot be done.";

struct Loop {
    task: ResolvedTask,
    settle: SettlePolicy,
    context: RunContext,
    built: Built,
    deadline: Instant,
    /// Every step, the resumed ones included.
    steps: Vec<StepRecord>,
    /// The stuck-loop guard, fed every finished step.
    guard: StuckGuard,
    screen: ScreenState,
    conversation: Conversation,
    resumed: Resumed,
    tallies: Tallies,
}

/// What the loop knows of the screen: its size, the model's coordinates on it, and the last captures.
struct ScreenState {
    size: Size,
    coords: CoordinateMap,
    image_size: Size,
    /// The frame of the previous step's screenshot (frames share their pixels: this is no copy).
    previous_frame: Option<Frame>,
    /// Whether the last capture differs from `previous_frame` (`None` for the first).
    last_changed: Option<bool>,
    /// Whether it differs by more than [`GUARD_TOLERANCE_PIXELS`] (what the stuck-loop guard counts).
    last_noticeably_changed: Option<bool>,
    /// The settled screen after the last actions: the next capture uses it instead of a new screenshot.
    next_frame: Option<Frame>,
}

/// What the model is shown besides the screen: the exchanges so far, the notes for the next step, what it may
/// call, and what compaction made of dropped exchanges.
struct Conversation {
    exchanges: Vec<Exchange>,
    notes: Vec<String>,
    policy: ContextPolicy,
    /// What the model is told it may call (from the toolbox, computed once).
    specs: Vec<ToolSpec>,
    /// What compaction made of exchanges dropped from `exchanges` (see `agent::context::compact`).
    summary: Option<String>,
}

/// What earlier attempts and turns left for this one.
#[derive(Default)]
struct Resumed {
    /// The resumed step that waits for a human's answer, if any.
    pending_approval: Option<StepRecord>,
    /// The resumed step that parked for the API client's `remote` tool results, if any.
    pending_tools: Option<StepRecord>,
    /// The completion the last resumed step already made: the worker died after the model called
    /// `task_completion` and before the end was recorded. The task ends with it instead of asking again.
    completion: Option<Outcome>,
    /// The current turn's message, for the history of its first step when an earlier attempt made it.
    turn_notes: Vec<String>,
    /// Steps and cost of the conversation's earlier turns: the current turn's limits count after them.
    turn_base: (usize, f64),
    /// The current turn's steps a person took (a take-over by hand): they do not count against `max_steps`.
    human_steps: usize,
    /// What the person did since the model's last step, told to the model when the desktop is handed back.
    human_actions: Vec<String>,
}

/// What the attempt counted: usage, failed model calls, refusals, verifier rounds, the guard's firings.
#[derive(Default)]
struct Tallies {
    usage: Usage,
    model_errors: u32,
    /// The model provider asked not to be called again before this long (a long `retry-after`).
    retry_after: Option<Duration>,
    /// What the guard did in this attempt (for the daemon's metrics).
    guard_fired: Vec<Fired>,
    /// How many times `task_completion` was refused for its structured output, earlier attempts included.
    invalid_outputs: u32,
    /// Verifier rounds a completion failed, earlier attempts included; rounds run in this attempt; the round
    /// that ended the task (its results go into the outcome).
    verify_failures: u32,
    verify_rounds: u32,
    final_checks: Option<Vec<crate::record::CheckResult>>,
}

/// Why the loop stopped early inside a step.
enum Stop {
    End(Ending),
}

/// How a model call ended without a turn.
enum CallEnd {
    Stop(Stop),
    /// Cancelled or timed out while the model answered: the step is recorded with what had streamed.
    Cut {
        end: Ending,
        partial: Partial,
    },
}

/// Runs one attempt of a task to its end.
pub async fn run(attempt: Attempt, built: Built) -> AttemptOutput {
    let Attempt { mut task, settle, mut context } = attempt;
    let started = Instant::now();
    let remaining = Duration::from_secs(task.limits.timeout_secs).saturating_sub(context.elapsed_before);
    // Saturating: a deadline past what `Instant` can hold is as good as none (a century ahead).
    let deadline = started
        .checked_add(remaining)
        .or_else(|| started.checked_add(Duration::from_secs(100 * 365 * 24 * 3600)))
        .unwrap_or(started);
    let policy = ContextPolicy::new(task.keep_screenshots, built.model.context_chunk());
    // The model is told the secrets' placeholders, never their values.
    if let Some(note) = built.tools.secrets().note() {
        task.instructions = format!("{}\n\n{note}", task.instructions);
    }
    let resume = std::mem::take(&mut context.resume);
    let mut state = Loop {
        deadline,
        steps: Vec::new(),
        guard: StuckGuard::new(task.guard),
        screen: ScreenState {
            size: Size::new(0, 0),
            coords: CoordinateMap::identity(Size::new(1, 1)),
            image_size: Size::new(1, 1),
            previous_frame: None,
            last_changed: None,
            last_noticeably_changed: None,
            next_frame: None,
        },
        conversation: Conversation {
            exchanges: Vec::new(),
            notes: Vec::new(),
            policy,
            specs: built.tools.specs(),
            summary: None,
        },
        resumed: Resumed::default(),
        tallies: Tallies::default(),
        task,
        settle,
        context,
        built,
    };
    let interrupted = state.restore(resume);
    let reconciled = state.journal_interrupted(&interrupted).await;
    let end = match reconciled.and(state.prepare_screen().await) {
        Ok(()) => match state.resumed.completion.take() {
            Some(outcome) => Ending::Finished(outcome),
            None => state.steps_until_end().await,
        },
        Err(end) => end,
    };
    state.finish(end).await
}

impl Loop {
    async fn prepare_screen(&mut self) -> Result<(), Ending> {
        let screen = self.built.computer.screen_size().await.map_err(|e| provider_end(&e))?;
        self.screen.size = screen;
        self.screen.coords = self.built.model.coordinates(screen);
        // Grid models (0–999) are shown the screen scaled to the model's preferred image size; image-space
        // models see exactly their coordinate space.
        self.screen.image_size = self.built.model.image_size(screen);
        Ok(())
    }

    fn check_limits(&self, before_model_call: bool) -> Result<(), Ending> {
        if self.context.cancel.is_cancelled() {
            return Err(finished(false, "cancelled", EndReason::Cancelled));
        }
        if Instant::now() >= self.deadline {
            return Err(finished(
                false,
                &format!("time limit of {} s reached", self.task.limits.timeout_secs),
                EndReason::Timeout,
            ));
        }
        // Spending nothing never trips the budget, so free models run under a zero budget.
        // Limits are per turn (docs/humans.md): the steps and cost of earlier turns do not count.
        let spent = self.tallies.usage.cost_usd - self.resumed.turn_base.1;
        if spent > 0.0 && spent >= self.task.limits.max_cost_usd {
            return Err(finished(
                false,
                &format!("cost limit of ${:.4} reached (spent ${spent:.4})", self.task.limits.max_cost_usd),
                EndReason::Budget,
            ));
        }
        if before_model_call
            && self.steps.len().saturating_sub(self.resumed.turn_base.0 + self.resumed.human_steps) as u32
                >= self.task.limits.max_steps
        {
            return Err(finished(
                false,
                &format!("step limit of {} reached", self.task.limits.max_steps),
                EndReason::MaxSteps,
            ));
        }
        Ok(())
    }

    async fn steps_until_end(&mut self) -> Ending {
        match self.settle_pending_approval().await {
            Ok(Some(outcome)) => return Ending::Finished(outcome),
            Ok(None) => {}
            Err(Stop::End(end)) => return end,
        }
        match self.settle_pending_tools().await {
            Ok(Some(outcome)) => return Ending::Finished(outcome),
            Ok(None) => {}
            Err(Stop::End(end)) => return end,
        }
        loop {
            if self.context.shutdown.is_cancelled() {
                return Ending::Interrupted;
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
                Ok(Some(outcome)) => return Ending::Finished(outcome),
                Ok(None) => {}
                Err(Stop::End(end)) => return end,
            }
        }
    }

    /// Captures and prepares the screen, and hands the artifact to the uploader under `step`'s key.
    async fn capture(&mut self, step: u32) -> Result<(Frame, Prepared, ScreenshotRef), Stop> {
        let frame = match self.screen.next_frame.take() {
            Some(frame) => frame,
            None => self.built.computer.screenshot().await.map_err(|e| Stop::End(provider_end(&e)))?,
        };
        let image_size = self.screen.image_size;
        let for_encode = frame.clone();
        // Pixel work (the comparison with the last screen, scaling, encoding) stays off the async runtime.
        let previous = self.screen.previous_frame.clone();
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
        self.screen.last_changed = changed;
        self.screen.last_noticeably_changed = noticeably;
        let key = artifact_key(&self.context.task_id, self.context.attempt, step, prepared.artifact.extension);
        let reference = ScreenshotRef {
            url: self.context.uploader.store().url(&key),
            width: prepared.artifact.size.width,
            height: prepared.artifact.size.height,
            key: key.clone(),
        };
        let events = self.context.events.clone();
        let (width, height, bytes) =
            (prepared.artifact.size.width, prepared.artifact.size.height, prepared.artifact.bytes.len() as u64);
        let saved_key = key.clone();
        // Returns once the screenshot is in the local spool (a crash cannot lose it), before the step that
        // refers to it is journaled; the upload itself runs beside the loop.
        self.context
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
        self.context.events.emit(EventKind::StepStarted { step: index, by: By::Model });

        let (frame, prepared, screenshot) = self.capture(index).await?;
        let page = self.built.computer.page().await;
        let screen_changed = self.screen.last_changed;
        self.screen.previous_frame = Some(frame.clone());
        let guard_note = self.watch_for_loops(index, self.screen.last_noticeably_changed)?;

        // The history budget (`runner::history`): old screenshots out, old steps compacted into the summary.
        let history_note = self.keep_budget(index, &prepared.model).await;
        let handed_back = self.take_hand_back();
        let called = self.call_model(index, &prepared.model, page.as_ref()).await;
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
        self.tallies.usage.add(&turn.usage);
        let notes = std::mem::take(&mut self.conversation.notes);
        record.model_text = turn.text.clone();
        record.thinking = turn.thinking.clone();
        record.usage.add(&turn.usage);
        record.calls = turn.calls.clone();
        record.raw = turn.raw.clone();
        // Screen-space actions are known before anything runs, so the journal shows what was about to happen.
        record.actions = self.screen_actions(&turn.calls);
        record.approval =
            turn.approval.as_ref().map(|request| StepApproval::asked(request.reason.clone(), request.details.clone()));
        // An approval rule (docs/humans.md) holds the whole turn before any of its calls runs.
        if record.approval.is_none()
            && let Some((rule, reason)) = crate::task::approval::first_match(&self.task.approval, &turn.calls)
        {
            let annotated = self.annotate(index, &frame, &record.actions).await;
            let details = serde_json::json!({ "rule": rule });
            record.approval =
                Some(StepApproval { rule: Some(rule as u32), annotated, ..StepApproval::asked(reason, details) });
        }
        self.journal(&record).await?;

        if let Some(reason) = record.approval.as_ref().map(|a| a.reason.clone()) {
            // The calls wait for a human: the step is journaled as waiting; park the task.
            self.context.events.emit(EventKind::WaitingForHuman {
                reason: reason.clone(),
                question: None,
                call_id: None,
            });
            self.steps.push(record);
            return Err(Stop::End(Ending::WaitingForHuman(reason)));
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
        self.built.tools.secrets().redact_turn(&mut turn);
        self.conversation.exchanges.push(Exchange {
            step: index,
            screenshot: Some(prepared.model),
            notes,
            page: record.page.clone(),
            turn,
            results: executed.tool_results,
        });
        self.steps.push(record);
        if no_calls {
            self.conversation.notes.push(NO_TOOL_NOTE.to_string());
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
        let key = crate::artifacts::proposed_key(&self.context.task_id, self.context.attempt, step);
        let url = self.context.uploader.store().url(&key);
        self.context.uploader.submit(key.clone(), bytes.into(), None).await;
        Some(ScreenshotRef { url, width: size.width, height: size.height, key })
    }

    /// The computer actions of `calls`, in screen pixels (what the record keeps).
    fn screen_actions(&self, calls: &[ToolCall]) -> Vec<Action> {
        calls
            .iter()
            .flat_map(|call| match &call.kind {
                CallKind::Computer { actions } => {
                    actions.iter().map(|a| self.screen.coords.action_to_screen(a)).collect()
                }
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
        self.context.events.emit(EventKind::StuckDetected {
            step,
            check: note.check,
            count: note.count,
            message: note.message.clone(),
            stopped: fired.stop,
        });
        let stop = fired.stop;
        self.tallies.guard_fired.push(fired);
        if stop {
            return Err(Stop::End(finished(false, &note.message, EndReason::Stuck)));
        }
        self.conversation.notes.push(note.message.clone());
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
    /// question (docs/humans.md: `waiting_for_human`, the event says the question), or the API client's `remote` tool
    /// results (docs/tools.md: `awaiting_tool`).
    fn parked(&self, index: u32, calls: Vec<PendingToolCall>) -> Stop {
        if let Some(call) = calls.iter().find(|c| c.name == crate::record::ASK_HUMAN) {
            let question = call.arguments.get("question").and_then(|q| q.as_str()).unwrap_or_default().to_string();
            self.context.events.emit(EventKind::WaitingForHuman {
                reason: question.clone(),
                question: Some(question.clone()),
                call_id: Some(call.id.clone()),
            });
            return Stop::End(Ending::WaitingForHuman(question));
        }
        self.context.events.emit(EventKind::AwaitingTool { step: index, calls: calls.clone() });
        Stop::End(Ending::AwaitingTool(calls))
    }

    /// Waits for the screen to settle after input actions, and records how long and whether it changed.
    async fn settle_after(&mut self, record: &mut StepRecord, executed: &Executed, before: &Frame) -> Result<(), Stop> {
        if !executed.actions.iter().any(Action::is_input) {
            return Ok(());
        }
        let computer = self.built.computer.clone();
        let typed = executed.actions.iter().any(|a| matches!(a, Action::Type { text } if !text.trim().is_empty()));
        match settle(computer.as_ref(), &self.settle, before, self.deadline, typed).await {
            Ok(settled) => {
                record.settle_ms = settled.waited.as_millis() as u64;
                record.visual_change = Some(settled.changed);
                self.screen.next_frame = Some(settled.frame);
                Ok(())
            }
            Err(e) if e.is_tool_error() => Ok(()),
            Err(e) => Err(Stop::End(provider_end(&e))),
        }
    }

    /// The files the computer downloaded since the last step (a browser's), stored as this attempt's artifacts
    /// under `downloads/NAME` (a name an earlier step of the attempt used gets the step's index in front).
    async fn store_downloads(&self) -> Vec<DownloadRef> {
        let downloads = self.built.computer.take_downloads().await;
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
                    let key = crate::artifacts::download_key(&self.context.task_id, self.context.attempt, &name);
                    let url = self.context.uploader.store().url(&key);
                    self.context.uploader.submit(key.clone(), content.into(), None).await;
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
        self.context.events.emit(EventKind::StepFinished {
            step: record.index,
            duration_ms: record.duration_ms,
            usage: record.usage,
        });
        Ok(())
    }

    async fn call_model(
        &mut self,
        step: u32,
        screenshot: &ModelImage,
        page: Option<&agentd_computer::PageInfo>,
    ) -> Result<ModelTurn, CallEnd> {
        let tools = &self.conversation.specs;
        let request = ModelRequest {
            instructions: &self.task.instructions,
            history: &self.conversation.exchanges,
            screenshot,
            notes: &self.conversation.notes,
            tools,
            screen: self.screen.size,
            browser: self.built.computer.navigates(),
            page,
            step,
            summary: self.conversation.summary.as_deref(),
        };
        // The deltas become message/text/thinking/tool-call boundaries (`agent::stream`); the stream outlives
        // the call, so a cut-short turn keeps what it had streamed.
        let stream = std::sync::Mutex::new(TurnStream::begin(step, self.context.events.clone()));
        let deltas = |delta: Delta<'_>| match stream.lock() {
            Ok(mut stream) => stream.delta(delta),
            Err(poisoned) => poisoned.into_inner().delta(delta),
        };
        let model = self.built.model.clone();
        let span = model_call_span(&self.task.model, model.as_ref());
        let call = tracing::Instrument::instrument(model.next_turn(request, &deltas), span.clone());
        let timeout_secs = self.task.limits.timeout_secs;
        let result = tokio::select! {
            result = call => Ok(result),
            () = self.context.cancel.cancelled() => Err(finished(false, "cancelled", EndReason::Cancelled)),
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
                self.tallies.model_errors += 1;
                if let ModelError::RateLimited { retry_after_secs, .. } = &e {
                    self.tallies.retry_after = Some(Duration::from_secs(*retry_after_secs));
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
        end: Ending,
    ) -> Stop {
        record.model_text = partial.text;
        record.thinking = partial.thinking;
        record.interrupted = true;
        record.finished = true;
        record.duration_ms = started.elapsed().as_millis() as u64;
        if let Err(stop) = self.journal(&record).await {
            return stop;
        }
        self.context.events.emit(EventKind::StepFinished {
            step: record.index,
            duration_ms: record.duration_ms,
            usage: record.usage,
        });
        self.steps.push(record);
        Stop::End(end)
    }

    async fn journal(&self, record: &StepRecord) -> Result<(), Stop> {
        // Every step passes here on its way to the records: secrets are redacted out of a copy (docs/security.md).
        let secrets = self.built.tools.secrets();
        let redacted;
        let record = if secrets.is_empty() {
            record
        } else {
            let mut copy = record.clone();
            secrets.redact_step(&mut copy);
            redacted = copy;
            &redacted
        };
        match self.context.journal.record_step(record).await {
            Ok(()) => Ok(()),
            Err(JournalError::LeaseLost(why)) => Err(Stop::End(Ending::LeaseLost(why))),
            Err(e @ JournalError::Unavailable(_)) => {
                Err(Stop::End(Ending::retryable(error_outcome(&format!("cannot record step: {e}")))))
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
                    // A valid `ask_human` call waits for a person, alone (docs/humans.md).
                    if self.built.tools.question(name, arguments).is_some() {
                        out.awaiting = vec![PendingToolCall {
                            id: call.id.clone(),
                            name: name.clone(),
                            arguments: arguments.clone(),
                        }];
                        break;
                    }
                    // A valid remote call and the valid remote calls right after it go to the API client
                    // together.
                    let awaiting = remote_run(&turn.calls[position..], &self.built.tools);
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
                        image: outcome.image.as_ref().map(crate::tools::ToolImage::to_model),
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
            self.context.events.emit(EventKind::ToolStarted {
                step,
                call_id: call_id.to_string(),
                name: name.to_string(),
                arguments: arguments.clone(),
            });
        }
        let started = Instant::now();
        let events = self.context.events.clone();
        let id = call_id.to_string();
        let stream = move |text: &str| {
            events.emit(EventKind::ToolOutput { step, call_id: id.clone(), text: text.to_string() });
        };
        let context = ToolContext { cancel: self.context.cancel.child_token(), output: &stream };
        let tools = self.built.tools.clone();
        let span = tracing::info_span!("tool", otel.name = format!("tool {name}"), tool = name, call_id);
        let called = tokio::select! {
            called = tracing::Instrument::instrument(tools.call(name, arguments, context), span) => called,
            () = self.context.cancel.cancelled() => {
                out.stop = Some(finished(false, "cancelled", EndReason::Cancelled));
                Called::Done(ToolOutcome::error("cancelled: the task was cancelled while this tool ran"), None)
            }
            () = tokio::time::sleep_until(self.deadline.into()) => {
                out.stop = Some(finished(
                    false,
                    &format!("time limit of {} s reached while a tool ran", self.task.limits.timeout_secs),
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
                self.tallies.invalid_outputs += 1;
                let left = MAX_INVALID_OUTPUTS.saturating_sub(self.tallies.invalid_outputs);
                if left == 0 {
                    out.stop = Some(error_end(&out_of_tries(self.tallies.invalid_outputs, &problems)));
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
            self.context.events.emit(EventKind::ToolFinished {
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
            let screen_action = self.screen.coords.action_to_screen(model_action);
            self.context.events.emit(EventKind::ActionStarted { step, index, action: screen_action.clone() });
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
            self.context.events.emit(EventKind::ActionFinished {
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
        model_action.validate(self.screen.coords.model()).map_err(|e| ActionFailure::Tool(e.to_string()))?;
        screen_action.validate(self.screen.size).map_err(|e| ActionFailure::Tool(e.to_string()))?;
        match screen_action {
            Action::Screenshot {} => Ok(Done::text("screenshot taken; it is attached to this result")),
            Action::Zoom { x1, y1, x2, y2 } => {
                let current = match self.built.computer.screenshot().await {
                    Ok(current) => current,
                    Err(e) if e.is_tool_error() => return Err(ActionFailure::Tool(e.to_string())),
                    Err(e) => return Err(ActionFailure::Fatal(provider_end(&e))),
                };
                let region = Size::new((x2 - x1 + 1) as u32, (y2 - y1 + 1) as u32);
                let crop = current.crop(Point::new(*x1, *y1), region);
                let target = zoom_size(crop.size(), self.screen.image_size);
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
        let bound = action_bound(action);
        // Secrets (docs/security.md): a `type` action's placeholders become the values only here, for the computer; the
        // recorded action keeps them, and what the computer says back is redacted.
        let secrets = self.built.tools.secrets();
        let substituted = match action {
            Action::Type { text } => match secrets.substitute(text) {
                std::borrow::Cow::Owned(text) => Some(Action::Type { text }),
                std::borrow::Cow::Borrowed(_) => None,
            },
            _ => None,
        };
        let performed = self.built.computer.perform(substituted.as_ref().unwrap_or(action));
        let result = match tokio::time::timeout(bound, performed).await {
            Ok(result) => result,
            Err(_) => {
                return Err(ActionFailure::Fatal(Ending::retryable(error_outcome(&format!(
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
                    let p = self.screen.coords.to_model(cursor);
                    message = format!("cursor at X={},Y={}", p.x, p.y);
                }
                Ok(Done { message, image: None })
            }
            Err(e) if e.is_tool_error() => Err(ActionFailure::Tool(secrets.redact(&e.to_string()).into_owned())),
            Err(e) => Err(ActionFailure::Fatal(provider_end(&e))),
        }
    }

    /// Ends the attempt: final screenshot, computer state, `task_finished` for finished tasks.
    async fn finish(mut self, end: Ending) -> AttemptOutput {
        let mut final_screenshot = None;
        let acted_last = self.steps.last().is_some_and(|s| s.actions.iter().any(Action::is_input));
        if matches!(end, Ending::Finished(_) | Ending::Interrupted) && acted_last && self.screen.size.width > 0 {
            let index = self.steps.len() as u32;
            if let Ok((_, _, reference)) = self.capture(index).await {
                final_screenshot = Some(reference);
            }
        }
        let mut end = end;
        self.verify_at_end(&mut end).await;
        let mut computer_state = self.built.computer.state().await;
        // What leaves the loop shows placeholders, never secrets' values (docs/security.md): the computer's state holds
        // what was typed; an ending's message may quote a provider's error.
        let secrets = self.built.tools.secrets().clone();
        if !secrets.is_empty() {
            if let Some(state) = &mut computer_state {
                secrets.redact_json(state);
            }
            self.steps.iter_mut().for_each(|step| secrets.redact_step(step));
            let redact = |text: &mut String| *text = secrets.redact(text).into_owned();
            match &mut end {
                Ending::Finished(outcome) | Ending::Retryable { outcome, .. } => {
                    redact(&mut outcome.summary);
                    if let Some(output) = &mut outcome.output {
                        secrets.redact_json(output);
                    }
                }
                Ending::LeaseLost(text) | Ending::WaitingForHuman(text) => redact(text),
                Ending::Interrupted | Ending::Paused | Ending::AwaitingTool(_) => {}
            }
        }
        // The model provider's long `retry-after` goes with a failure a later attempt may not hit.
        if let Ending::Retryable { retry_after, .. } = &mut end {
            *retry_after = retry_after.or(self.tallies.retry_after);
        }
        AttemptOutput {
            ending: end,
            steps: self.steps,
            usage: self.tallies.usage,
            final_screenshot,
            computer_state,
            model_errors: self.tallies.model_errors,
            build_failed: false,
            guard_fired: self.tallies.guard_fired.iter().map(|f| (f.note.check, f.stop)).collect(),
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
    stop: Option<Ending>,
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
    Fatal(Ending),
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

fn finished(success: bool, summary: &str, reason: EndReason) -> Ending {
    Ending::Finished(Outcome {
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

fn error_end(summary: &str) -> Ending {
    Ending::Finished(error_outcome(summary))
}

fn provider_end(e: &ProviderError) -> Ending {
    if e.is_retryable() { Ending::retryable(error_outcome(&e.to_string())) } else { error_end(&e.to_string()) }
}

fn model_end(e: &ModelError) -> Ending {
    if e.is_retryable() { Ending::retryable(error_outcome(&e.to_string())) } else { error_end(&e.to_string()) }
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
