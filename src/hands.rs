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
use std::time::{Duration, Instant};

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
    /// The person's steps; held while an action runs (one step at a time).
    recorder: tokio::sync::Mutex<Recorder>,
    queue: Arc<dyn Queue>,
    /// Fired when a person's step was stored (event followers wake up).
    events_stored: Arc<Notify>,
    _shown: Registration,
}

/// What a held desktop's person did that the record has yet to take.
struct Recorder {
    /// The index of the person's next step.
    next: u32,
    /// A `type` step not journaled yet, because its text ends with the beginning of a secret's value: a person
    /// types in bursts (the console sends what was typed after a short pause), and a step journaled with the
    /// first part of a value would keep that part, too short to be taken for the secret, unredacted. Their
    /// next typing joins this step, and the whole text is redacted once it no longer ends that way; any other
    /// action, the hand-back, or the last viewer leaving journals it as it is.
    typing: Option<Draft>,
}

/// A person's step, ready to be journaled (its screenshot is stored).
struct Draft {
    step: StepRecord,
    outcome: Option<Outcome>,
    /// The stored screenshot's size in bytes.
    bytes: u64,
    /// How long the step's action took.
    action_ms: u64,
}

impl Held {
    /// Journals a step of the person's (see [`journal`]); a refusal (the task is no longer parked for them:
    /// handed back through another node, or cancelled) lets the desktop go.
    async fn journal(&self, draft: Draft) -> Result<(), HandsError> {
        match journal(&*self.queue, &self.task_id, &self.secrets, draft).await {
            Ok(()) => {
                self.events_stored.notify_waiters();
                Ok(())
            }
            Err(e @ QueueError::WrongState { .. }) => {
                self.gone.cancel();
                self.give_back_desktop();
                Err(e.into())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Journals the typing held back, if any.
    async fn journal_typing(&self, recorder: &mut Recorder) -> Result<(), HandsError> {
        match recorder.typing.take() {
            Some(draft) => self.journal(draft).await,
            None => Ok(()),
        }
    }

    fn give_back_desktop(&self) {
        if let Some(name) = lock(&self.desktop).take() {
            self.pool.give_back(&name, &self.task_id);
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // Typing still held back when the last viewer left is journaled as it is (the write is refused if the
        // task is no longer parked for the person).
        if let Some(draft) = self.recorder.get_mut().typing.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let (queue, events_stored) = (self.queue.clone(), self.events_stored.clone());
            let (task_id, secrets) = (self.task_id.clone(), self.secrets.clone());
            runtime.spawn(async move {
                if let Err(e) = journal(&*queue, &task_id, &secrets, draft).await {
                    tracing::warn!(task = %task_id, error = %e, "a person's last typing could not be recorded");
                }
                events_stored.notify_waiters();
            });
        }
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
        let next = record.steps.last().map_or(0, |s| s.index + 1);
        let held = Arc::new(Held {
            task_id: task_id.to_string(),
            attempt: record.attempt,
            _shown: self.live.register(task_id, computer.clone()),
            computer,
            secrets,
            desktop: Mutex::new(desktop),
            pool: self.pool.clone(),
            gone: CancellationToken::new(),
            recorder: tokio::sync::Mutex::new(Recorder { next, typing: None }),
            queue: self.queue.clone(),
            events_stored: self.events_stored.clone(),
        });
        tracing::info!(task = %task_id, "a person holds the taken-over desktop");
        lock(&self.held).insert(task_id.to_string(), Arc::downgrade(&held));
        tokio::spawn(let_go_once_unparked(Arc::downgrade(&held)));
        Ok(Hold(held))
    }

    /// Lets task `task_id`'s desktop go (the person hands it back, or the task is cancelled): its further
    /// actions are refused, one running now is waited for, its pool desktop is given back, and its live view
    /// here ends once its viewers let go.
    pub async fn let_go(&self, task_id: &str) {
        let held = lock(&self.held).remove(task_id).and_then(|h| h.upgrade());
        if let Some(held) = held {
            held.gone.cancel();
            let mut recorder = held.recorder.lock().await;
            if let Err(e) = held.journal_typing(&mut recorder).await {
                tracing::warn!(task = %task_id, error = %e, "a person's last typing could not be recorded");
            }
            drop(recorder);
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
    /// completes the task with that summary. Typing that may go on into a secret's value is held back (see
    /// [`Recorder::typing`]).
    async fn step(&self, hold: &Hold, action: Option<Action>, end: Option<&str>) -> Result<Acted, HandsError> {
        let held = &hold.0;
        let mut recorder = held.recorder.lock().await;
        if held.gone.is_cancelled() {
            return Err(HandsError::NotTakenOver);
        }
        // Typing that goes on from typing held back joins its step (as long as the joined text is one action).
        if let (Some(action @ Action::Type { text }), Some(draft)) = (&action, recorder.typing.as_mut())
            && (Action::Type { text: format!("{}{text}", draft.typed()) }).validate(draft.screen()).is_ok()
        {
            let started = Instant::now();
            let (ok, message) = perform(&held.computer, action).await;
            draft.join_typing(text, ok, &message, started.elapsed().as_millis() as u64);
            let step = draft.step.index;
            if !held.secrets.may_go_on_into_a_value(draft.typed()) {
                held.journal_typing(&mut recorder).await?;
            }
            return Ok(Acted { step, ok, message: held.secrets.redact(&message).into_owned() });
        }
        held.journal_typing(&mut recorder).await?;
        let index = recorder.next;
        let started_at = OffsetDateTime::now_utc();
        let started = Instant::now();
        // The screen the person acted on is the step's screenshot, as a model's step keeps the screen it saw.
        let frame = held.computer.screenshot().await.map_err(|e| HandsError::Unavailable(e.to_string()))?;
        let size = frame.size();
        if let Some(action) = &action {
            action.validate(size).map_err(|e| HandsError::Invalid(e.to_string()))?;
        }
        let png = tokio::task::spawn_blocking(move || crate::screen::image::encode_png(&frame))
            .await
            .map_err(|e| HandsError::Unavailable(format!("screenshot encoding stopped: {e}")))?
            .map_err(|e| HandsError::Unavailable(e.to_string()))?;
        let key = artifact_key(&held.task_id, held.attempt, index, "png");
        self.store
            .put(&key, &png, crate::screen::image::PNG)
            .await
            .map_err(|e| HandsError::Unavailable(format!("the screenshot cannot be stored: {e}")))?;
        let screenshot = ScreenshotRef { url: self.store.url(&key), width: size.width, height: size.height, key };
        let mut step = StepRecord::begun(index, started_at, screenshot);
        step.by = By::Human;
        step.page = held.computer.page().await;
        let mut action_ms = 0;
        if let Some(action) = action {
            let (ok, message) = perform(&held.computer, &action).await;
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
        let draft = Draft { step, outcome, bytes: png.len() as u64, action_ms };
        let (ok, message) = draft.answer();
        recorder.next = index + 1;
        if matches!(draft.step.actions.first(), Some(Action::Type { .. }))
            && held.secrets.may_go_on_into_a_value(draft.typed())
        {
            recorder.typing = Some(draft);
        } else {
            held.journal(draft).await?;
        }
        // What the person typed stays out of the answer as it stays out of the record.
        Ok(Acted { step: index, ok, message: held.secrets.redact(&message).into_owned() })
    }
}

/// How often a held desktop's task is looked at while it is held (see [`let_go_once_unparked`]).
const LOOK_AGAIN: Duration = Duration::from_secs(2);

/// Lets a held desktop go once its task is no longer parked for its person: handed back or cancelled through
/// another fleet node, which cannot tell this one, it is let go here within [`LOOK_AGAIN`] (an action running
/// finishes first; typing held back is not recorded, the task having left the person), as [`Hands::let_go`]
/// lets it go at once on the node it is handed back through. Ends when the desktop is let go or nobody holds
/// it any more.
async fn let_go_once_unparked(held: Weak<Held>) {
    loop {
        let Some((queue, task_id, gone)) = held.upgrade().map(|h| (h.queue.clone(), h.task_id.clone(), h.gone.clone()))
        else {
            return;
        };
        tokio::select! {
            () = gone.cancelled() => return,
            () = tokio::time::sleep(LOOK_AGAIN) => {}
        }
        let parked = match queue.get(&task_id).await {
            Ok(record) => record.state == TaskState::WaitingForHuman && record.taken_over,
            Err(QueueError::NotFound(_)) => false,
            // The queue cannot tell now: look again later.
            Err(_) => continue,
        };
        if parked {
            continue;
        }
        let Some(held) = held.upgrade() else { return };
        let mut recorder = held.recorder.lock().await;
        held.gone.cancel();
        if recorder.typing.take().is_some() {
            tracing::warn!(task = %task_id, "the task left its person through another node: their last typing is not recorded");
        }
        drop(recorder);
        held.give_back_desktop();
        tracing::info!(task = %task_id, "the taken-over desktop was let go: its task is no longer parked for a person");
        return;
    }
}

/// Runs a person's action on the computer, bounded as a model's action is: whether it worked, and the
/// computer's answer.
async fn perform(computer: &Arc<dyn ComputerProvider>, action: &Action) -> (bool, String) {
    let bound = crate::agent::runner::action_bound(action);
    match tokio::time::timeout(bound, computer.perform(action)).await {
        Ok(Ok(report)) => (true, report.message.unwrap_or_default()),
        Ok(Err(e)) => (false, e.to_string()),
        Err(_) => (false, format!("the computer did not finish {} within {} s", action.summary(), bound.as_secs())),
    }
}

impl Draft {
    /// The text of the step's `type` action (empty for another action).
    fn typed(&self) -> &str {
        match self.step.actions.first() {
            Some(Action::Type { text }) => text,
            _ => "",
        }
    }

    /// The size of the screen the step was taken on.
    fn screen(&self) -> agentd_computer::Size {
        agentd_computer::Size { width: self.step.screenshot.width, height: self.step.screenshot.height }
    }

    /// Adds a burst of typing to the step's `type` action: its text is appended, its result joins the step's
    /// (the first failure is kept), and its time is added.
    fn join_typing(&mut self, text: &str, ok: bool, message: &str, took_ms: u64) {
        if let Some(Action::Type { text: typed }) = self.step.actions.first_mut() {
            typed.push_str(text);
        }
        if let Some(result) = self.step.results.first_mut()
            && result.ok
        {
            *result = ActionResult::action(ok, message.to_string());
        }
        self.action_ms += took_ms;
        self.step.duration_ms += took_ms;
    }

    /// Whether the step's action worked, and its answer (a finishing step's: its summary).
    fn answer(&self) -> (bool, String) {
        match self.step.results.first() {
            Some(result) => (result.ok, result.message.clone()),
            None => (true, self.outcome.as_ref().map(|o| o.summary.clone()).unwrap_or_default()),
        }
    }
}

/// Journals a person's step: redacted as a model's step is (what they typed, what the computer answered, the
/// summary: a secret's value becomes its placeholder; the events are read from the redacted step), with its
/// events and, for a finishing step, the task's outcome, in one write.
async fn journal(queue: &dyn Queue, task_id: &str, secrets: &Secrets, draft: Draft) -> Result<(), QueueError> {
    let Draft { mut step, outcome, bytes, action_ms } = draft;
    secrets.redact_step(&mut step);
    let outcome = outcome.map(|mut outcome| {
        outcome.summary = secrets.redact(&outcome.summary).into_owned();
        outcome
    });
    let index = step.index;
    let screenshot = &step.screenshot;
    let mut events = vec![
        EventKind::StepStarted { step: index, by: By::Human },
        EventKind::ScreenshotSaved {
            step: index,
            key: screenshot.key.clone(),
            url: screenshot.url.clone(),
            width: screenshot.width,
            height: screenshot.height,
            bytes,
        },
    ];
    if let (Some(action), Some(result)) = (step.actions.first(), step.results.first()) {
        events.push(EventKind::ActionStarted { step: index, index: 0, action: action.clone() });
        events.push(EventKind::ActionFinished {
            step: index,
            index: 0,
            ok: result.ok,
            message: result.message.clone(),
            duration_ms: action_ms,
        });
    }
    events.push(EventKind::StepFinished { step: index, duration_ms: step.duration_ms, usage: Usage::default() });
    queue.add_human_step(task_id, &step, events, outcome).await
}
