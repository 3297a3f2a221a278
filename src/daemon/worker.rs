//! Workers: the claim loop, one runner per leased task, the heartbeat that keeps leases alive (and carries
//! cancellations and lease losses back to the runners), and the rescuer of expired leases (which
//! also ends the waits of questions nobody answered in time).
//!
//! Concurrency is a semaphore of `worker.concurrency` permits; a runner holds one for the whole attempt. A
//! task that waits for a human or for the API client's remote tool results is released back to the queue
//! and holds nothing. Every runner is spawned on
//! the daemon's `TaskTracker` and runs the loop through `run_isolated`, so a panic fails that task only.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agent::events::EventSink;
use crate::agent::journal::{Journal, JournalError};
use crate::api::WorkerHandle;
use crate::artifacts::Uploader;
use crate::attempt::{self, Ending};
use crate::attempt::{Assembly, RunContext, Source};
use crate::config::Config;
use crate::metrics::Metrics;
use crate::model::Usage;
use crate::pool::Pool;
use crate::queue::{
    self, AfterFailure, Finish, Lease, LeaseStatus, Queue, QueueError, Release, WorkerIdentity, now_ms,
};
use crate::record::Outcome;
use crate::record::events::{Event, EventKind};

/// What the claim loop and runners share.
pub struct Workers {
    pub config: Arc<Config>,
    pub queue: Arc<dyn Queue>,
    pub uploader: Uploader,
    pub metrics: Arc<Metrics>,
    pub identity: WorkerIdentity,
    /// One HTTP client and rate limiter per model provider for the whole process, so that a retry storm is
    /// not multiplied by the number of tasks.
    pub models: Arc<crate::model::Shared>,
    /// What the API may do to the workers (wake, cancel, count); the workers use the same signals.
    pub handle: WorkerHandle,
    /// The desktops of `[[desktops]]` (docs/providers.md) this process leases to its tasks.
    pub pool: Arc<Pool>,
    /// Leases held by this process: task id → its token and lease state (the runners' cancel tokens are
    /// the handle's).
    active: Mutex<HashMap<String, ActiveLease>>,
    slots: Arc<Semaphore>,
}

struct ActiveLease {
    token: i64,
    lost: CancellationToken,
    /// The runner is telling the queue how the attempt ended: from then on a heartbeat may find the task over
    /// (by this very runner), and a real loss is reported by the runner's own write.
    ending: bool,
}

impl Workers {
    pub fn new(config: Arc<Config>, queue: Arc<dyn Queue>, uploader: Uploader, metrics: Arc<Metrics>) -> Arc<Self> {
        let name = config
            .worker
            .name
            .clone()
            .unwrap_or_else(|| format!("{}:{}", crate::config::host_name(), std::process::id()));
        // With a pool, a task that names no computer takes any free desktop of it (docs/providers.md).
        let any_desktop = crate::task::ComputerSpec::Desktop(crate::task::DesktopSpec::default());
        let default_computer =
            if config.desktops.is_empty() { config.defaults.computer.as_ref() } else { Some(&any_desktop) };
        let desktops = crate::queue::desktop::DesktopScope::of_this_process(default_computer);
        let pool = Pool::new(&config, &desktops);
        // Every worker has the label of its node's computer sessions (`api::sessions`): their tasks run where
        // their clients' models are.
        let mut labels = config.worker.labels.clone();
        labels.insert(crate::api::sessions::SESSION_LABEL.to_string(), name.clone());
        let handle = WorkerHandle::new(now_ms(), &name);
        let identity = WorkerIdentity { name, labels, desktops, pool: Vec::new() };
        let concurrency = config.worker.concurrency.max(1) as usize;
        // The vendors' per-minute budgets: the fleet's when the queue keeps one (PostgreSQL), else this process's.
        let models = crate::model::Shared::new(&config);
        let models = Arc::new(match queue.rate_budget() {
            Some(budget) => models.with_budget(budget),
            None => models,
        });
        Arc::new(Self {
            config,
            queue,
            uploader,
            metrics,
            identity,
            models,
            handle,
            pool,
            active: Mutex::new(HashMap::new()),
            slots: Arc::new(Semaphore::new(concurrency)),
        })
    }

    /// Cancels a task this process is running now (the queue already records the request).
    pub fn cancel_local(&self, task_id: &str) {
        self.handle.cancel_local(task_id);
    }

    pub fn running(&self) -> usize {
        self.handle.running()
    }

    fn lease_for(&self) -> Duration {
        Duration::from_secs(self.config.queue.lease_secs)
    }

    /// Claims tasks while there are free slots, until `stop` fires. `shutdown` is handed to runners: they
    /// stop at their next step boundary when it fires.
    pub async fn claim_loop(
        self: Arc<Self>,
        tracker: TaskTracker,
        stop: CancellationToken,
        shutdown: CancellationToken,
    ) {
        let poll = Duration::from_millis(self.config.queue.poll_ms);
        let mut refusing_for_spool = false;
        loop {
            self.handle.claim_loop_alive_ms.store(now_ms(), Ordering::Relaxed);
            if stop.is_cancelled() {
                return;
            }
            let permit = tokio::select! {
                () = stop.cancelled() => return,
                permit = tokio::time::timeout(poll, self.slots.clone().acquire_owned()) => match permit {
                    Ok(Ok(permit)) => permit,
                    Ok(Err(_)) => return,
                    Err(_) => continue,
                },
            };
            // Back-pressure from the artifact spool: while the local spool (what the store could not take yet)
            // holds `artifacts.spool_max_bytes` or more, take no new task (running ones keep spooling; nothing
            // is dropped). Look again every poll interval; say so once when refusing starts and once when it ends.
            if self.uploader.spool_full() {
                drop(permit);
                if !refusing_for_spool {
                    refusing_for_spool = true;
                    tracing::warn!(
                        spool_bytes = self.uploader.stats().spooled_bytes,
                        bound = self.config.artifacts.spool_max_bytes,
                        "artifact spool is full; taking no new tasks until uploads catch up"
                    );
                }
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(poll) => {}
                }
                continue;
            } else if refusing_for_spool {
                refusing_for_spool = false;
                tracing::info!("artifact spool below its bound again; taking new tasks");
            }
            // The pool's free desktops at this moment: claims are made one at a time, so none is offered twice.
            let identity = if self.pool.is_empty() {
                std::borrow::Cow::Borrowed(&self.identity)
            } else {
                std::borrow::Cow::Owned(WorkerIdentity { pool: self.pool.offers(), ..self.identity.clone() })
            };
            match self.queue.claim(&identity, self.lease_for()).await {
                Ok(Some(lease)) => {
                    let workers = self.clone();
                    let shutdown = shutdown.clone();
                    tracker.spawn(async move { workers.run_lease(lease, permit, shutdown).await });
                }
                Ok(None) => {
                    drop(permit);
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = self.handle.wake.notified() => {}
                        () = tokio::time::sleep(poll) => {}
                    }
                }
                Err(e) => {
                    drop(permit);
                    tracing::warn!(error = %e, "claiming failed; retrying");
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(poll.max(Duration::from_millis(500))) => {}
                    }
                }
            }
        }
    }

    /// Renews every lease this process holds; passes cancellations and lease losses to the runners.
    pub async fn heartbeat_loop(self: Arc<Self>, stop: CancellationToken) {
        let every = Duration::from_secs(self.config.queue.heartbeat_secs.max(1));
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(every) => {}
            }
            self.heartbeat_once().await;
        }
    }

    pub async fn heartbeat_once(&self) {
        let leases: Vec<(String, i64, CancellationToken)> = match self.active.lock() {
            Ok(active) => active.iter().map(|(id, a)| (id.clone(), a.token, a.lost.clone())).collect(),
            Err(_) => return,
        };
        for (id, token, lost) in leases {
            match self.queue.heartbeat(&id, token, self.lease_for()).await {
                Ok(LeaseStatus::Held { cancel_requested, pause_requested }) => {
                    if cancel_requested {
                        self.handle.cancel_local(&id);
                    }
                    if pause_requested {
                        self.handle.pause_local(&id);
                    }
                }
                Ok(LeaseStatus::Lost) if !self.still_running(&id, token) => {
                    tracing::debug!(task_id = %id, "the attempt ended while its lease was renewed");
                }
                Ok(LeaseStatus::Lost) => {
                    tracing::warn!(task_id = %id, "lease lost; stopping the task here");
                    self.metrics.lease_losses.fetch_add(1, Ordering::Relaxed);
                    lost.cancel();
                    self.handle.cancel_local(&id);
                }
                Err(e) => tracing::warn!(task_id = %id, error = %e, "heartbeat failed; will retry"),
            }
        }
    }

    /// Whether this process still runs the attempt holding `token` on `task_id` and is not ending it.
    fn still_running(&self, task_id: &str, token: i64) -> bool {
        match self.active.lock() {
            Ok(active) => active.get(task_id).is_some_and(|lease| lease.token == token && !lease.ending),
            Err(_) => true,
        }
    }

    /// Hands tasks of dead workers back to the queue, and ends the waits of questions nobody answered in
    /// time (`questions`), every half lease.
    pub async fn rescue_loop(self: Arc<Self>, stop: CancellationToken) {
        let every = Duration::from_millis((self.config.queue.lease_secs * 500).max(500));
        loop {
            match self.queue.rescue_expired().await {
                Ok(rescued) if !rescued.is_empty() => {
                    for r in &rescued {
                        tracing::info!(task_id = %r.task_id, state = r.new_state.as_str(), "rescued an expired lease");
                    }
                    self.handle.wake.notify_waiters();
                    self.handle.events_stored.notify_waiters();
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "rescuing expired leases failed"),
            }
            match super::questions::time_out(self.queue.as_ref(), &self.config.defaults.limits).await {
                Ok(ended) if !ended.is_empty() => {
                    for t in &ended {
                        tracing::info!(task_id = %t.task_id, then = ?t.then, "nobody answered the model's question in time");
                        if t.then == crate::task::OnHumanTimeout::Fail {
                            self.metrics
                                .task_finished(crate::record::TaskState::Failed, crate::record::EndReason::Timeout);
                        }
                    }
                    self.handle.wake.notify_waiters();
                    self.handle.events_stored.notify_waiters();
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "ending questions' waits failed"),
            }
            match super::tool_waits::time_out(self.queue.as_ref(), &self.config.tools).await {
                Ok(ended) if !ended.is_empty() => {
                    for id in &ended {
                        tracing::info!(task_id = %id, "the API client did not answer a remote tool call in time");
                    }
                    self.handle.wake.notify_waiters();
                    self.handle.events_stored.notify_waiters();
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "ending remote tool calls' waits failed"),
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(every) => {}
            }
        }
    }

    /// Runs one leased attempt to its end and tells the queue how it ended.
    async fn run_lease(self: Arc<Self>, lease: Lease, permit: OwnedSemaphorePermit, shutdown: CancellationToken) {
        let task_id = lease.task_id.clone();
        let token = lease.token;
        // ERROR level: any log filter that lets a line through keeps the task it belongs to (`cli::telemetry`).
        let span = tracing::error_span!("task", task_id = %task_id, attempt = i64::from(lease.attempt));
        let tokens = crate::api::Running::default();
        let lost = CancellationToken::new();
        if let Ok(mut active) = self.active.lock() {
            active.insert(task_id.clone(), ActiveLease { token, lost: lost.clone(), ending: false });
        }
        self.handle.started(&task_id, tokens.clone());
        self.metrics.tasks_started.fetch_add(1, Ordering::Relaxed);
        tracing::Instrument::instrument(self.clone().attempt(lease, tokens, lost, shutdown), span).await;
        if let Ok(mut active) = self.active.lock() {
            active.remove(&task_id);
        }
        self.handle.stopped(&task_id);
        drop(permit);
        self.handle.wake.notify_one();
    }

    async fn attempt(
        self: Arc<Self>,
        lease: Lease,
        tokens: crate::api::Running,
        lost: CancellationToken,
        shutdown: CancellationToken,
    ) {
        let crate::api::Running { cancel, pause } = tokens;
        let task_id = lease.task_id.clone();
        let token = lease.token;
        let (events, receiver) = EventSink::channel(&task_id, lease.next_seq);
        let (stored_tx, stored_rx) = watch::channel(lease.next_seq.saturating_sub(1));
        // The labels its model usage is counted under (`agentd_model_tokens_total`).
        let model_spec = lease.spec.model_spec(&self.config.defaults);
        let provider = model_spec.provider();
        let model = self.models.model_id(provider, &model_spec.options()).unwrap_or_else(|| "script".into());
        let writer =
            tokio::spawn(self.clone().write_events(task_id.clone(), token, receiver, stored_tx, (provider, model)));
        let journal = Arc::new(QueueJournal {
            queue: self.queue.clone(),
            task_id: task_id.clone(),
            token,
            started: Instant::now(),
            before: lease.elapsed,
            metrics: self.metrics.clone(),
            retry_for: self.lease_for(),
            usage: Mutex::new(lease.steps.iter().map(|s| (s.index, s.usage)).collect()),
        });
        // Assembled as `agentd run`'s and embedders' attempts are, with the daemon's config and model clients;
        // the task came over an API (this node's or another's), so it may name only what this node allows.
        let mut assembly = Assembly {
            task: Some(lease.spec.clone()),
            config: Some(self.config.clone()),
            models: Some(self.models.clone()),
            api_task: true,
            persist_dir: Some(self.config.mock_dir(&task_id)),
            worker: Some(self.identity.name.clone()),
            live: Some(self.handle.live.clone()),
            ..Assembly::default()
        };
        // A desktop of the pool (docs/providers.md): taken, reset unless the task ran on it last, and its computer (opened
        // when the daemon started) given to the attempt.
        if let Some(name) = &lease.desktop {
            if !self.pool.take(name, &task_id) {
                tracing::warn!(desktop = %name, "the claimed desktop is not free here; handing the task back");
                let release =
                    Release::Requeue { count_attempt: false, delay: Duration::ZERO, reason: "desktop busy".into() };
                self.end(&lease, &events, &stored_rx, End::Released(release)).await;
                return;
            }
            match self.pool.prepare(name, &task_id).await {
                Ok(prepared) => {
                    events.emit(EventKind::DesktopLeased {
                        desktop: name.clone(),
                        reset: prepared.reset,
                        duration_ms: prepared.duration.as_millis() as u64,
                    });
                    assembly.computer = Some(Source::Given(prepared.computer));
                }
                Err(failure) => {
                    let failure = serde_json::to_value(&failure).unwrap_or_default();
                    events.emit(EventKind::DesktopFailed { failure: failure.clone() });
                    self.end(&lease, &events, &stored_rx, End::Released(Release::DesktopFailed { failure })).await;
                    return;
                }
            }
        }
        // A computer session's task (`api::sessions`): its model is the session's client.
        if crate::api::sessions::is_session(&lease.spec) {
            assembly.model = Some(Source::Given(self.handle.sessions.model(&task_id)));
        }
        // A replay (docs/replay-and-verify.md) runs on the replayed task's record, read from the queue.
        if let Some(replay) = &lease.spec.replay {
            match self.queue.get(replay.of.as_str()).await {
                Ok(record) => assembly.replay_record = Some(record),
                Err(e) => tracing::warn!(error = %e, of = %replay.of, "cannot read the replayed task's record"),
            }
        }
        let output = assembly
            .run(RunContext {
                task_id: task_id.to_string(),
                attempt: lease.attempt,
                uploader: self.uploader.clone(),
                journal,
                events: events.clone(),
                cancel: cancel.clone(),
                shutdown,
                resume: lease.steps.clone(),
                elapsed_before: lease.elapsed,
                turns: lease.turns.clone(),
                pause,
                handed_back: lease.handed_back.clone(),
            })
            .await;
        for step in &output.steps {
            self.metrics
                .action_errors
                .fetch_add(step.results.iter().filter(|r| !r.ok).count() as u64, Ordering::Relaxed);
        }
        let finish = |outcome: Outcome| Finish {
            outcome,
            usage: output.usage,
            final_screenshot: output.final_screenshot.clone(),
            computer_state: output.computer_state.clone(),
        };
        let end = if lost.is_cancelled() {
            End::Lost
        } else {
            match output.ending {
                Ending::Finished(outcome) => End::Finish(finish(outcome)),
                Ending::Retryable { outcome, retry_after } => End::Retry(outcome.clone(), finish(outcome), retry_after),
                Ending::Interrupted => End::Requeue,
                Ending::LeaseLost(_) => End::Lost,
                Ending::WaitingForHuman(reason) => End::Wait(reason),
                Ending::Paused => End::TakeOver,
                Ending::AwaitingTool(calls) => {
                    tracing::info!(
                        calls = %calls.iter().map(|c| c.id.as_str()).collect::<Vec<_>>().join(", "),
                        "waiting for the API client's tool results"
                    );
                    End::AwaitTools
                }
            }
        };
        // A cancel requested while the attempt ran wins over parking it (for a person, an answer or a tool):
        // a task someone cancelled must not wait in a take-over for ever. (The queue refuses to park a task
        // whose cancel was requested, too: one requested after this look is found when its lease expires.)
        let end = match end {
            End::Wait(_) | End::TakeOver | End::AwaitTools if self.cancel_requested(&lease).await => {
                tracing::info!("a cancel was requested: the task ends cancelled instead of waiting");
                End::Finish(finish(crate::queue::ending::cancelled()))
            }
            end => end,
        };
        self.metrics.model_errors.fetch_add(u64::from(output.model_errors), Ordering::Relaxed);
        for (check, stopped) in &output.guard_fired {
            self.metrics.observe_guard(*check, *stopped);
        }
        if let End::Finish(finish) = &end {
            self.metrics.observe_checks(&finish.outcome.checks);
        }
        if self.end(&lease, &events, &stored_rx, end).await {
            // A computer session's task that finished ends its session (`api::sessions`).
            self.handle.sessions.end(&task_id);
        }
        if let Some(name) = &lease.desktop {
            self.pool.give_back(name, &task_id);
        }
        drop(events);
        // Screenshot events may still arrive from the uploader; the writer task ends by itself once they
        // have, so it is left to finish in the background.
        drop(writer);
    }

    /// Whether a cancel of the attempt's task was requested (asked of the queue now; `false` when it cannot
    /// say).
    async fn cancel_requested(&self, lease: &Lease) -> bool {
        matches!(
            self.queue.heartbeat(&lease.task_id, lease.token, self.lease_for()).await,
            Ok(LeaseStatus::Held { cancel_requested: true, .. })
        )
    }

    /// Gives the task's screenshot uploads a moment to land, so that its `screenshot_saved` events come
    /// before `task_finished` (the last event a follower waits for). Not while the store is down: they are
    /// safe in the spool and their events follow when they are stored.
    async fn wait_for_uploads(&self, task_id: &str) {
        if !self.uploader.store_failing() {
            let prefix = crate::artifacts::task_prefix(task_id);
            let left = self.uploader.wait_for_prefix(&prefix, Duration::from_secs(3)).await;
            if left > 0 {
                tracing::debug!(left, "finishing before every screenshot is uploaded");
            }
        }
    }

    /// Tells the queue how the attempt ended, after the events before it are stored; `true` when the task
    /// finished (it will not run again).
    async fn end(&self, lease: &Lease, events: &EventSink, stored: &watch::Receiver<u64>, end: End) -> bool {
        let task_id = &lease.task_id;
        let mut finished = false;
        if let Ok(mut active) = self.active.lock()
            && let Some(active) = active.get_mut(task_id)
        {
            active.ending = true;
        }
        let result = match end {
            End::Finish(finish) => {
                finished = true;
                self.wait_for_uploads(task_id).await;
                let outcome = finish.outcome.clone();
                let seq = finish_and_wait(events, stored, &outcome, finish.usage).await;
                tracing::info!(
                    state = outcome.state().as_str(),
                    reason = outcome.reason.as_str(),
                    seq,
                    "task finished"
                );
                self.metrics.task_finished(outcome.state(), outcome.reason);
                retry_unavailable(self.lease_for(), || self.queue.finish(task_id, lease.token, &finish)).await
            }
            End::Retry(outcome, mut finish, asked) => {
                match queue::after_retryable_failure(lease.attempt, lease.max_attempts, outcome, asked) {
                    AfterFailure::Retry(release) => {
                        tracing::warn!(?release, "attempt failed; the task will be retried");
                        retry_unavailable(self.lease_for(), || self.queue.release(task_id, lease.token, &release)).await
                    }
                    AfterFailure::Finish(outcome) => {
                        finished = true;
                        self.wait_for_uploads(task_id).await;
                        finish.outcome = outcome;
                        finish_and_wait(events, stored, &finish.outcome, finish.usage).await;
                        self.metrics.task_finished(finish.outcome.state(), finish.outcome.reason);
                        retry_unavailable(self.lease_for(), || self.queue.finish(task_id, lease.token, &finish)).await
                    }
                }
            }
            End::Requeue => {
                tracing::info!("handing the task back (shutdown)");
                let release =
                    Release::Requeue { count_attempt: false, delay: Duration::ZERO, reason: "shutdown".into() };
                retry_unavailable(self.lease_for(), || self.queue.release(task_id, lease.token, &release)).await
            }
            End::Wait(reason) => {
                // As for remote tools: a client that sees the task waiting finds its step's screenshot and
                // events, and an answer's own events are numbered after them.
                self.wait_for_uploads(task_id).await;
                wait_stored(stored, events).await;
                let release = Release::WaitForHuman { reason };
                retry_unavailable(self.lease_for(), || self.queue.release(task_id, lease.token, &release)).await
            }
            End::TakeOver => {
                // The step's screenshot and events are stored before the task parks for the person.
                self.wait_for_uploads(task_id).await;
                wait_stored(stored, events).await;
                tracing::info!("parked for a take-over: a person uses the desktop");
                retry_unavailable(self.lease_for(), || self.queue.release(task_id, lease.token, &Release::TakeOver))
                    .await
            }
            End::AwaitTools => {
                // The step's `screenshot_saved` and `awaiting_tool` are stored before the task parks: a client
                // that sees it waiting finds them, and the queue numbers its own events of the answer after them.
                self.wait_for_uploads(task_id).await;
                wait_stored(stored, events).await;
                let release = Release::AwaitTools;
                retry_unavailable(self.lease_for(), || self.queue.release(task_id, lease.token, &release)).await
            }
            End::Released(release) => {
                wait_stored(stored, events).await;
                retry_unavailable(self.lease_for(), || self.queue.release(task_id, lease.token, &release)).await
            }
            End::Lost => Ok(()),
        };
        match result {
            Ok(()) => {}
            Err(QueueError::LeaseLost(_)) => {
                self.metrics.lease_losses.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("lease lost before the attempt could be recorded; another worker has the task");
            }
            Err(e) => tracing::error!(error = %e, "could not record how the attempt ended; the lease will expire"),
        }
        self.handle.events_stored.notify_waiters();
        self.handle.wake.notify_one();
        finished
    }

    /// Stores a task's events in batches as they come; ends when every sender is gone.
    async fn write_events(
        self: Arc<Self>,
        task_id: String,
        token: i64,
        mut receiver: tokio::sync::mpsc::UnboundedReceiver<Event>,
        stored: watch::Sender<u64>,
        (provider, model): (&'static str, String),
    ) {
        let mut batch = Vec::with_capacity(64);
        while let Some(event) = receiver.recv().await {
            batch.push(event);
            while batch.len() < 256 {
                match receiver.try_recv() {
                    Ok(event) => batch.push(event),
                    Err(_) => break,
                }
            }
            for event in &batch {
                if let EventKind::StepFinished { duration_ms, usage, .. } = &event.kind {
                    self.metrics.observe_step(*duration_ms);
                    self.metrics.model_usage(provider, &model, usage);
                }
            }
            let last = batch.last().map_or(0, |e| e.seq);
            let append = || self.queue.append_events(&task_id, Some(token), &batch);
            match retry_unavailable(self.lease_for(), append).await {
                Ok(()) => {}
                Err(QueueError::LeaseLost(_)) => tracing::debug!(task_id, "events dropped: the lease is gone"),
                Err(e) => tracing::error!(task_id, error = %e, "storing events failed; dropping a batch"),
            }
            batch.clear();
            let _ = stored.send(last);
            self.handle.events_stored.notify_waiters();
        }
    }
}

enum End {
    Finish(Finish),
    /// A retryable failure, what the task ends with if its attempts are used up (the queue's rule decides:
    /// `queue::after_retryable_failure`), and the delay the model provider asked for.
    Retry(Outcome, Finish, Option<Duration>),
    Requeue,
    Wait(String),
    /// Parked until the API client answers the last step's remote tool calls.
    AwaitTools,
    /// Parked for a take-over (docs/humans.md) until a person hands the desktop back.
    TakeOver,
    /// Handed back before the attempt ran (its pool desktop was not free, or failed its reset).
    Released(Release),
    Lost,
}

/// Runs a queue write again while it fails because the database cannot be reached (a restart, a network
/// blip), with backoff, for up to `budget` — one lease: past that the lease has expired, another worker may
/// own the task, and the write would be refused as fenced anyway. Any other outcome is returned at once.
async fn retry_unavailable<T, F, Fut>(budget: Duration, mut write: F) -> Result<T, QueueError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, QueueError>>,
{
    let deadline = tokio::time::Instant::now() + budget;
    let mut delay = Duration::from_millis(100);
    loop {
        match write().await {
            Err(QueueError::Unavailable(e)) if tokio::time::Instant::now() + delay < deadline => {
                tracing::warn!(error = %e, ?delay, "queue write failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
            other => return other,
        }
    }
}

/// Emits `task_finished` and waits (briefly) until it is stored, so the state change that follows is never
/// seen before the event that explains it.
async fn finish_and_wait(events: &EventSink, stored: &watch::Receiver<u64>, outcome: &Outcome, usage: Usage) -> u64 {
    attempt::emit_finished(events, outcome, usage);
    wait_stored(stored, events).await
}

async fn wait_stored(stored: &watch::Receiver<u64>, events: &EventSink) -> u64 {
    let target = events.last_seq();
    let mut stored = stored.clone();
    let _ = tokio::time::timeout(Duration::from_secs(5), stored.wait_for(|s| *s >= target)).await;
    target
}

/// The step journal of a leased task: the queue, fenced by the lease's token.
struct QueueJournal {
    queue: Arc<dyn Queue>,
    task_id: String,
    token: i64,
    started: Instant,
    before: Duration,
    metrics: Arc<Metrics>,
    /// How long a write is retried while the database cannot be reached (one lease).
    retry_for: Duration,
    /// Each stored step's usage, by index (earlier attempts' too): their sum is the task's usage so far.
    usage: Mutex<std::collections::BTreeMap<u32, Usage>>,
}

#[async_trait]
impl Journal for QueueJournal {
    async fn record_step(&self, step: &crate::record::StepRecord) -> Result<(), JournalError> {
        let elapsed = self.before + self.started.elapsed();
        let usage = match self.usage.lock() {
            Ok(mut steps) => {
                steps.insert(step.index, step.usage);
                steps.values().fold(Usage::default(), |mut total, u| {
                    total.add(u);
                    total
                })
            }
            Err(_) => Usage::default(),
        };
        let write = || self.queue.record_step(&self.task_id, self.token, step, elapsed, &usage);
        match retry_unavailable(self.retry_for, write).await {
            Ok(()) => Ok(()),
            Err(QueueError::LeaseLost(why)) => {
                self.metrics.lease_losses.fetch_add(1, Ordering::Relaxed);
                Err(JournalError::LeaseLost(why))
            }
            Err(e) => Err(JournalError::Unavailable(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::queue::sqlite::SqliteQueue;
    use crate::queue::{Cancelled, Decision, ListFilter, NewTask, Rescued, Submitted};
    use crate::record::{StepRecord, TaskState};
    use crate::status::TaskRecord;
    use crate::task::TaskSpec;
    use tokio::sync::Notify;

    /// A SQLite queue whose `finish` holds on, once the task is finished, until the test lets it return.
    struct HeldFinish {
        inner: SqliteQueue,
        finished: Notify,
        release: Semaphore,
    }

    #[async_trait]
    impl Queue for HeldFinish {
        fn describe(&self) -> String {
            self.inner.describe()
        }
        async fn submit(&self, task: NewTask) -> Result<Submitted, QueueError> {
            self.inner.submit(task).await
        }
        async fn get(&self, id: &str) -> Result<TaskRecord, QueueError> {
            self.inner.get(id).await
        }
        async fn list(&self, filter: &ListFilter) -> Result<Vec<crate::status::ListedTask>, QueueError> {
            self.inner.list(filter).await
        }
        async fn claim(&self, worker: &WorkerIdentity, lease_for: Duration) -> Result<Option<Lease>, QueueError> {
            self.inner.claim(worker, lease_for).await
        }
        async fn heartbeat(&self, task_id: &str, token: i64, lease_for: Duration) -> Result<LeaseStatus, QueueError> {
            self.inner.heartbeat(task_id, token, lease_for).await
        }
        async fn record_step(
            &self,
            task_id: &str,
            token: i64,
            step: &StepRecord,
            elapsed: Duration,
            usage: &Usage,
        ) -> Result<(), QueueError> {
            self.inner.record_step(task_id, token, step, elapsed, usage).await
        }
        async fn append_events(&self, task_id: &str, token: Option<i64>, events: &[Event]) -> Result<(), QueueError> {
            self.inner.append_events(task_id, token, events).await
        }
        async fn events_after(&self, task_id: &str, after: u64, limit: u32) -> Result<Vec<Event>, QueueError> {
            self.inner.events_after(task_id, after, limit).await
        }
        async fn finish(&self, task_id: &str, token: i64, finish: &Finish) -> Result<(), QueueError> {
            let result = self.inner.finish(task_id, token, finish).await;
            self.finished.notify_one();
            let _ = self.release.acquire().await;
            result
        }
        async fn release(&self, task_id: &str, token: i64, release: &Release) -> Result<(), QueueError> {
            self.inner.release(task_id, token, release).await
        }
        async fn cancel(&self, id: &str) -> Result<Cancelled, QueueError> {
            self.inner.cancel(id).await
        }
        async fn decide(&self, id: &str, decision: &Decision) -> Result<TaskState, QueueError> {
            self.inner.decide(id, decision).await
        }
        async fn pause(&self, id: &str) -> Result<crate::queue::Paused, QueueError> {
            self.inner.pause(id).await
        }
        async fn resume(&self, id: &str, note: Option<&str>) -> Result<(), QueueError> {
            self.inner.resume(id, note).await
        }
        async fn add_human_step(
            &self,
            id: &str,
            step: &crate::record::StepRecord,
            events: Vec<crate::record::events::EventKind>,
            end: Option<crate::record::Outcome>,
        ) -> Result<(), QueueError> {
            self.inner.add_human_step(id, step, events, end).await
        }
        async fn answer_tools(&self, id: &str, answers: &[crate::queue::ToolAnswer]) -> Result<(), QueueError> {
            self.inner.answer_tools(id, answers).await
        }
        async fn add_turn(&self, id: &str, text: &str) -> Result<TaskRecord, QueueError> {
            self.inner.add_turn(id, text).await
        }
        async fn answer_question(&self, id: &str, answer: &crate::queue::HumanAnswer) -> Result<(), QueueError> {
            self.inner.answer_question(id, answer).await
        }
        async fn rescue_expired(&self) -> Result<Vec<Rescued>, QueueError> {
            self.inner.rescue_expired().await
        }
        async fn counts(&self) -> Result<BTreeMap<TaskState, u64>, QueueError> {
            self.inner.counts().await
        }
        async fn health(&self) -> Result<(), QueueError> {
            self.inner.health().await
        }
        async fn delete(&self, id: &str) -> Result<(), QueueError> {
            self.inner.delete(id).await
        }
        async fn finished_before(&self, age: Duration, limit: u32) -> Result<Vec<String>, QueueError> {
            self.inner.finished_before(age, limit).await
        }
        async fn delete_finished(&self, ids: &[String]) -> Result<Vec<String>, QueueError> {
            self.inner.delete_finished(ids).await
        }
        async fn purges(&self, limit: u32) -> Result<Vec<String>, QueueError> {
            self.inner.purges(limit).await
        }
        async fn purged(&self, ids: &[String]) -> Result<(), QueueError> {
            self.inner.purged(ids).await
        }
    }

    /// The heartbeat renews the leases it listed while the attempt runs; when it reaches a task this runner has
    /// just finished, that is the end of the attempt, not a lost lease.
    #[tokio::test]
    async fn a_heartbeat_after_the_attempt_finished_is_no_lease_loss() {
        let dir = tempfile::tempdir().unwrap();
        let config = Arc::new(Config { data_dir: dir.path().to_path_buf(), ..Config::default() });
        let inner = SqliteQueue::open(&dir.path().join("queue.db")).await.unwrap();
        let queue = Arc::new(HeldFinish { inner, finished: Notify::new(), release: Semaphore::new(0) });
        let tracker = TaskTracker::new();
        let store = Arc::new(crate::artifacts::FsStore::new(dir.path().join("artifacts")));
        let uploader = Uploader::start(store, config.spool_dir(), 16, u64::MAX, &tracker, CancellationToken::new());
        let metrics = Arc::new(Metrics::default());
        let workers = Workers::new(config, queue.clone(), uploader, metrics.clone());
        let task = r#"{"id": "quick", "instructions": "x", "model": {"provider": "scripted",
            "script": {"turns": [{"complete": {"success": true, "summary": "done"}}]}}}"#;
        let spec = TaskSpec::parse(task, "task").unwrap();
        queue.submit(NewTask { spec, max_attempts: 1 }).await.unwrap();
        let lease = queue.claim(&workers.identity, Duration::from_secs(30)).await.unwrap().expect("a lease");
        let permit = workers.slots.clone().acquire_owned().await.unwrap();
        let runner = tokio::spawn(workers.clone().run_lease(lease, permit, CancellationToken::new()));

        queue.finished.notified().await;
        assert_eq!(queue.get("quick").await.unwrap().state, TaskState::Succeeded);
        assert_eq!(workers.running(), 1, "the runner has not returned yet");
        workers.heartbeat_once().await;
        queue.release.add_permits(1);
        runner.await.unwrap();
        workers.heartbeat_once().await;
        assert_eq!(metrics.lease_losses.load(Ordering::Relaxed), 0, "no lease was lost");
    }
}
