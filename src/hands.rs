//! A person's hands on a desktop they took over (docs/humans.md "Take-over by hand"): while a task is parked
//! for a take-over, the live view (`GET /v1/tasks/{id}/live`) shows its desktop and carries the person's
//! actions to it.
//!
//! The first viewer of a parked task opens its computer here ([`Hands::hold`]), as the task's attempts open
//! it — the pool's desktop it ran on, or its own computer with the mock desktop's saved state — and shows it
//! to the live viewers; the last viewer to leave lets it go. Each action a person sends ([`Hands::act`]) is one
//! step of theirs (`"by": "human"`): the screen they acted on is stored as the step's screenshot, the action
//! runs through the provider, and the step is journaled with its events in one write that the queue accepts
//! only while the task is still parked for them. Handing the desktop back ([`Hands::let_go`], before the task
//! is resumed) lets the desktop go at once, so the task's next attempt finds it free.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Instant;

use agentd_computer::{Action, ComputerProvider};
use thiserror::Error;
use time::OffsetDateTime;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::artifacts::{ArtifactStore, artifact_key};
use crate::config::Config;
use crate::live::{LiveScreens, Registration};
use crate::pool::Pool;
use crate::queue::{Queue, QueueError};
use crate::record::events::EventKind;
use crate::record::{
    ActionResult, By, CallKind, EndReason, Outcome, ScreenshotRef, StepRecord, TaskState, ToolCall, Usage,
};
use crate::tools::secrets::Secrets;

#[derive(Debug, Error)]
pub enum HandsError {
    /// Nobody has taken the task's desktop over (it runs, waits for something else, or has finished).
    #[error("nobody has taken this desktop over: pause the task first (agentd pause ID)")]
    NotTakenOver,
    /// The desktop cannot be opened here (its computer cannot be built or reached, its pool desktop is on
    /// another node).
    #[error("the desktop cannot be opened here: {0}")]
    Unavailable(String),
    /// The action is not one a person's hands do, or does not fit the screen.
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Queue(#[from] QueueError),
}

impl HandsError {
    /// A short code for the error, as the live view's `error` messages carry it.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotTakenOver => "not_taken_over",
            Self::Unavailable(_) => "unavailable",
            Self::Invalid(_) => "invalid_action",
            Self::Queue(QueueError::WrongState { .. }) => "not_taken_over",
            Self::Queue(_) => "queue_unavailable",
        }
    }
}

/// The taken-over desktops this node holds open for people, by task id.
pub struct Hands {
    config: Arc<Config>,
    queue: Arc<dyn Queue>,
    store: Arc<dyn ArtifactStore>,
    live: Arc<LiveScreens>,
    pool: Arc<Pool>,
    /// Fired when a person's step was stored (event followers wake up).
    events_stored: Arc<Notify>,
    held: Mutex<HashMap<String, Weak<Held>>>,
    /// One opening at a time: two viewers arriving together share one computer.
    opening: tokio::sync::Mutex<()>,
}

/// One taken-over desktop, open for as long as someone holds it.
struct Held {
    task_id: String,
    attempt: u32,
    computer: Arc<dyn ComputerProvider>,
    secrets: Secrets,
    /// The pool desktop it is, while held (given back once).
    desktop: Mutex<Option<String>>,
    pool: Arc<Pool>,
    /// Cancelled when the desktop was handed back: its actions are refused from then on.
    gone: CancellationToken,
    /// The index of the person's next step; held while an action runs (one step at a time).
    next_step: tokio::sync::Mutex<u32>,
    _shown: Registration,
}

impl Held {
    fn give_back_desktop(&self) {
        if let Some(name) = lock(&self.desktop).take() {
            self.pool.give_back(&name, &self.task_id);
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.give_back_desktop();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every change under these locks is one insert, remove or take: a panic left the value whole.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A viewer's hold on a taken-over desktop: the desktop stays open while one exists.
#[derive(Clone)]
pub struct Hold(Arc<Held>);

impl Hold {
    /// Cancelled once the desktop was handed back (or its task stopped being parked for a person).
    pub fn gone(&self) -> &CancellationToken {
        &self.0.gone
    }
}

/// What a person's action did: the step it was recorded as, and the computer's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Acted {
    pub step: u32,
    pub ok: bool,
    pub message: String,
}

impl Hands {
    pub fn new(
        config: Arc<Config>,
        queue: Arc<dyn Queue>,
        store: Arc<dyn ArtifactStore>,
        live: Arc<LiveScreens>,
        pool: Arc<Pool>,
        events_stored: Arc<Notify>,
    ) -> Self {
        Self {
            config,
            queue,
            store,
            live,
            pool,
            events_stored,
            held: Mutex::default(),
            opening: tokio::sync::Mutex::new(()),
        }
    }

    /// Holds task `task_id`'s desktop open for a person (opening it if nobody holds it yet) and shows it to
    /// its live viewers. Refused unless the task is parked for a take-over.
    pub async fn hold(&self, task_id: &str) -> Result<Hold, HandsError> {
        let _opening = self.opening.lock().await;
        if let Some(held) = lock(&self.held).get(task_id).and_then(Weak::upgrade).filter(|h| !h.gone.is_cancelled()) {
            return Ok(Hold(held));
        }
        let record = self.queue.get(task_id).await?;
        if record.state != TaskState::WaitingForHuman || !record.taken_over {
            return Err(HandsError::NotTakenOver);
        }
        // The pool desktop it ran on; a demonstration (never run) on the desktop its computer names.
        let named = match &record.task.computer {
            Some(crate::task::ComputerSpec::Desktop(request)) => {
                request.desktop.as_ref().map(|d| d.as_str().to_string())
            }
            _ => None,
        };
        let (computer, secrets, desktop) = match record.desktop.clone().or(named) {
            Some(name) => {
                let task = record.task.resolve(&self.config.defaults, &self.config.guard);
                let secrets = crate::attempt::api_task_secrets(&task, &self.config)
                    .await
                    .map_err(|e| HandsError::Unavailable(e.to_string()))?;
                if !self.pool.take(&name, task_id) {
                    return Err(HandsError::Unavailable(format!(
                        "the pool desktop {name:?} is not free in this node's pool: open the live view on the node \
                         whose pool it is"
                    )));
                }
                let prepared = match self.pool.prepare(&name, task_id).await {
                    Ok(prepared) => prepared,
                    Err(failure) => {
                        self.pool.give_back(&name, task_id);
                        return Err(HandsError::Unavailable(failure.reason));
                    }
                };
                (prepared.computer, secrets, Some(name))
            }
            None => {
                let (computer, secrets) =
                    crate::attempt::open_for_person(&record.task, &self.config, &self.config.mock_dir(task_id))
                        .await
                        .map_err(|e| HandsError::Unavailable(e.to_string()))?;
                (computer, secrets, None)
            }
        };
        let next_step = record.steps.last().map_or(0, |s| s.index + 1);
        let held = Arc::new(Held {
            task_id: task_id.to_string(),
            attempt: record.attempt,
            _shown: self.live.register(task_id, computer.clone()),
            computer,
            secrets,
            desktop: Mutex::new(desktop),
            pool: self.pool.clone(),
            gone: CancellationToken::new(),
            next_step: tokio::sync::Mutex::new(next_step),
        });
        tracing::info!(task = %task_id, "a person holds the taken-over desktop");
        lock(&self.held).insert(task_id.to_string(), Arc::downgrade(&held));
        Ok(Hold(held))
    }

    /// Lets task `task_id`'s desktop go (the person hands it back, or the task is cancelled): its further
    /// actions are refused, one running now is waited for, its pool desktop is given back, and its live view
    /// here ends once its viewers let go.
    pub async fn let_go(&self, task_id: &str) {
        let held = lock(&self.held).remove(task_id).and_then(|h| h.upgrade());
        if let Some(held) = held {
            held.gone.cancel();
            drop(held.next_step.lock().await);
            held.give_back_desktop();
        }
    }

    /// Carries out a person's `action` (screen pixels) on the held desktop, recorded as their step.
    pub async fn act(&self, hold: &Hold, action: Action) -> Result<Acted, HandsError> {
        if matches!(action, Action::Screenshot {} | Action::Zoom { .. } | Action::CursorPosition {}) {
            return Err(HandsError::Invalid(format!(
                "{} is not an action on the desktop: the live view already shows the screen",
                action.kind()
            )));
        }
        self.step(hold, Some(action), None).await
    }

    /// Finishes a demonstration (docs/humans.md): the screen as the person left it is its last step, which
    /// completes the task `succeeded` with `summary` (a `task_completion` of theirs, so a compiled script ends
    /// with it and a replay completes with it). Holds the desktop for that screenshot if nobody does, then
    /// lets it go.
    pub async fn finish(&self, task_id: &str, summary: &str) -> Result<Acted, HandsError> {
        let hold = self.hold(task_id).await?;
        let finished = self.step(&hold, None, Some(summary)).await;
        self.let_go(task_id).await;
        finished
    }

    /// One step of the person's: the screen now, then `action` (if any), journaled; with `end`, the step
    /// completes the task with that summary.
    async fn step(&self, hold: &Hold, action: Option<Action>, end: Option<&str>) -> Result<Acted, HandsError> {
        let held = &hold.0;
        let mut next_step = held.next_step.lock().await;
        if held.gone.is_cancelled() {
            return Err(HandsError::NotTakenOver);
        }
        let index = *next_step;
        let started_at = OffsetDateTime::now_utc();
        let started = Instant::now();
        // The screen the person acted on is the step's screenshot, as a model's step keeps the screen it saw.
        let frame = held.computer.screenshot().await.map_err(|e| HandsError::Unavailable(e.to_string()))?;
        if let Some(action) = &action {
            action.validate(frame.size()).map_err(|e| HandsError::Invalid(e.to_string()))?;
        }
        let size = frame.size();
        let png = tokio::task::spawn_blocking(move || crate::screen::image::encode_png(&frame))
            .await
            .map_err(|e| HandsError::Unavailable(format!("screenshot encoding stopped: {e}")))?
            .map_err(|e| HandsError::Unavailable(e.to_string()))?;
        let key = artifact_key(&held.task_id, held.attempt, index, "png");
        self.store
            .put(&key, &png, crate::screen::image::PNG)
            .await
            .map_err(|e| HandsError::Unavailable(format!("the screenshot cannot be stored: {e}")))?;
        let screenshot =
            ScreenshotRef { url: self.store.url(&key), width: size.width, height: size.height, key: key.clone() };
        let mut step = StepRecord::begun(index, started_at, screenshot);
        step.by = By::Human;
        step.page = held.computer.page().await;
        let mut action_ms = 0;
        if let Some(action) = action {
            let bound = crate::agent::runner::action_bound(&action);
            let (ok, message) = match tokio::time::timeout(bound, held.computer.perform(&action)).await {
                Ok(Ok(report)) => (true, report.message.unwrap_or_default()),
                Ok(Err(e)) => (false, e.to_string()),
                Err(_) => {
                    (false, format!("the computer did not finish {} within {} s", action.summary(), bound.as_secs()))
                }
            };
            action_ms = started.elapsed().as_millis() as u64;
            step.actions = vec![action];
            step.results = vec![ActionResult::action(ok, message)];
        }
        let outcome = end.map(|summary| {
            step.calls = vec![ToolCall {
                id: format!("human_{index}"),
                kind: CallKind::Function {
                    name: crate::model::TASK_COMPLETION.to_string(),
                    arguments: serde_json::json!({"success": true, "summary": summary}),
                },
            }];
            Outcome::new(true, summary, EndReason::Completed)
        });
        step.duration_ms = started.elapsed().as_millis() as u64;
        step.finished = true;
        // What the person typed, the computer answered or the summary says is kept as a model's step keeps it:
        // a secret's value becomes its placeholder (the events and the answer below are read from the step).
        held.secrets.redact_step(&mut step);
        let outcome = outcome.map(|mut outcome| {
            outcome.summary = held.secrets.redact(&outcome.summary).into_owned();
            outcome
        });
        let mut events = vec![
            EventKind::StepStarted { step: index, by: By::Human },
            EventKind::ScreenshotSaved {
                step: index,
                key,
                url: step.screenshot.url.clone(),
                width: size.width,
                height: size.height,
                bytes: png.len() as u64,
            },
        ];
        let (ok, message) = match (step.actions.first(), step.results.first()) {
            (Some(action), Some(result)) => {
                events.push(EventKind::ActionStarted { step: index, index: 0, action: action.clone() });
                events.push(EventKind::ActionFinished {
                    step: index,
                    index: 0,
                    ok: result.ok,
                    message: result.message.clone(),
                    duration_ms: action_ms,
                });
                (result.ok, result.message.clone())
            }
            _ => (true, outcome.as_ref().map(|o| o.summary.clone()).unwrap_or_default()),
        };
        events.push(EventKind::StepFinished { step: index, duration_ms: step.duration_ms, usage: Usage::default() });
        match self.queue.add_human_step(&held.task_id, &step, events, outcome).await {
            Ok(()) => {}
            Err(e @ QueueError::WrongState { .. }) => {
                // Handed back through another node, or cancelled: this desktop is not the person's any more.
                held.gone.cancel();
                held.give_back_desktop();
                return Err(e.into());
            }
            Err(e) => return Err(e.into()),
        }
        *next_step = index + 1;
        self.events_stored.notify_waiters();
        Ok(Acted { step: index, ok, message })
    }
}
