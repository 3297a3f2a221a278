//! `agentd mcp --local`: the task tools on runs in this process, as `agentd run` runs a task — the library's
//! agent built from the task file (relative script and scene paths resolve against the directory the server
//! was started in), screenshots in the configured artifact store, the record written to
//! `data_dir/runs/{id}.json` at the end (so `agentd show ID --local` and `agentd export ID --local` work on it).
//!
//! `submit_task`, `get_task`, `list_tasks` and `cancel` work on the runs this server started (they end with the
//! server: a run still going when the client disconnects is cancelled and recorded). `answer`, `approve`,
//! `reject` and `send_message` are refused with a tool error that says so: without the daemon's queue there is
//! nothing to park a waiting task in, so a model's question or a held approval ends the run (its outcome says
//! what it asked, as `agentd run` off a terminal does), and a finished run has no conversation to continue.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use rmcp::model::CallToolResult;
use serde_json::{Value, json};
use time::OffsetDateTime;
use tokio::sync::{mpsc, watch};
use tokio_util::task::TaskTracker;

use super::{Call, StepProgress, TaskTool, json_result, mime_of, optional_text, run_result, task_of, text_arg};
use crate::artifacts::ArtifactStore;
use crate::config::Config;
use crate::library::{AbortHandle, Agent};
use crate::private::write_atomically;
use crate::record::TaskState;
use crate::record::events::{Event, EventKind};
use crate::status::TaskRecord;
use crate::task::{TaskId, TaskSpec};

/// How long the server waits, when the client has gone, for the runs it cancels to be recorded.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// The runs of one `agentd mcp --local` server.
pub struct LocalRuns {
    config: Config,
    /// Where relative paths in task files resolve: the server's working directory.
    base_dir: PathBuf,
    runs: Mutex<HashMap<String, LocalRun>>,
    tracker: TaskTracker,
}

/// One run: what it is, and how far it got.
struct LocalRun {
    task: TaskSpec,
    created_at: OffsetDateTime,
    abort: AbortHandle,
    steps: u32,
    /// The record, once the run has ended.
    record: watch::Receiver<Option<Arc<TaskRecord>>>,
    store: Arc<dyn ArtifactStore>,
}

impl LocalRuns {
    pub fn new(config: Config, base_dir: PathBuf) -> Self {
        Self { config, base_dir, runs: Mutex::new(HashMap::new()), tracker: TaskTracker::new() }
    }

    /// Waits (at most 30 s) for every run to end on its own and be recorded — a computer session's task
    /// completes once its client has gone — then cancels what is still going, as [`LocalRuns::shutdown`].
    pub async fn finish(&self) {
        self.tracker.close();
        if tokio::time::timeout(SHUTDOWN_GRACE, self.tracker.wait()).await.is_err() {
            self.shutdown().await;
        }
    }

    /// Starts the run of `spec` whose model is `model` (an MCP computer session's client), not the task's
    /// own; returns its id.
    pub async fn start_with_model(
        self: &Arc<Self>,
        spec: TaskSpec,
        model: Arc<dyn crate::model::Model>,
    ) -> Result<String, String> {
        self.start(spec, Some(model)).await.map(|(id, _events)| id)
    }

    /// Cancels every run still going and waits (at most 30 s) for each to be recorded: what the server does
    /// when its client has gone.
    pub async fn shutdown(&self) {
        for run in self.lock().values() {
            run.abort.abort();
        }
        self.tracker.close();
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, self.tracker.wait()).await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, LocalRun>> {
        // A panic while the map was held left it whole (every change is one insert or field write).
        self.runs.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) async fn call(
        self: &Arc<Self>,
        tool: TaskTool,
        args: serde_json::Map<String, Value>,
        call: &Call,
    ) -> Result<CallToolResult, String> {
        match tool {
            TaskTool::RunTask => self.run_task(args, call).await,
            TaskTool::SubmitTask => {
                let (id, _events) = self.start(task_of(args)?, None).await?;
                Ok(json_result(&json!({"id": id, "state": TaskState::Running})))
            }
            TaskTool::GetTask => {
                let id = text_arg(&args, "id")?;
                Ok(json_result(&self.document(&id)?))
            }
            TaskTool::ListTasks => {
                let state = optional_text(&args, "state")?;
                let limit = match args.get("limit") {
                    None | Some(Value::Null) => 20,
                    Some(limit) => {
                        limit.as_u64().filter(|n| (1..=1000).contains(n)).ok_or("`limit` must be 1–1000")? as usize
                    }
                };
                Ok(json_result(&json!({ "tasks": self.list(state.as_deref(), limit) })))
            }
            TaskTool::Cancel => {
                let id = text_arg(&args, "id")?;
                let runs = self.lock();
                let run = runs.get(&id).ok_or_else(|| unknown(&id))?;
                if let Some(record) = run.record.borrow().as_ref() {
                    return Ok(json_result(&json!({"id": id, "state": record.state, "cancel": "already_finished"})));
                }
                run.abort.abort();
                Ok(json_result(&json!({"id": id, "cancel": "requested"})))
            }
            TaskTool::Answer | TaskTool::Approve | TaskTool::Reject | TaskTool::SendMessage => Err(format!(
                "{} is not available with `agentd mcp --local`: tasks run in this process, where a model's question \
                 or a held approval ends the run (its outcome says what it asked) and a finished run cannot be \
                 continued; run `agentd mcp` against a daemon (`agentd serve`) to answer, approve, reject and send \
                 messages",
                tool.name()
            )),
            TaskTool::LeaseComputer | TaskTool::ReleaseComputer => Err(format!(
                "{} is not available with `agentd mcp --local`: run `agentd mcp --computer FILE|DESKTOP --local` \
                 for a computer in this process, or `agentd mcp` against a daemon",
                tool.name()
            )),
        }
    }

    /// Builds the task's agent (with `model` instead of the task's own, when given) and starts it; the run
    /// goes on in the background. Returns its id and its events.
    async fn start(
        self: &Arc<Self>,
        spec: TaskSpec,
        model: Option<Arc<dyn crate::model::Model>>,
    ) -> Result<(String, mpsc::UnboundedReceiver<Event>), String> {
        let config = &self.config;
        let task_id = spec.id.clone().unwrap_or_else(TaskId::generate);
        if self.lock().contains_key(task_id.as_str()) {
            return Err(format!("field `id`: task {task_id} was already started by this server"));
        }
        let store = crate::backends::artifact_store(config).await.map_err(|e| e.to_string())?;
        let worker = format!("mcp@{}", crate::config::host_name());
        let mut builder = Agent::builder();
        if let Some(model) = model {
            builder = builder.model(model);
        }
        let agent = builder
            .task(spec.clone())
            .task_id(task_id.clone())
            .config(config.clone())
            .base_dir(self.base_dir.clone())
            .data_dir(config.data_dir.clone())
            .artifact_store(store.clone())
            .spool_dir(config.spool_dir())
            .worker(worker.clone())
            .build()
            .await
            .map_err(|e| e.to_string())?;
        let created_at = OffsetDateTime::now_utc();
        let mut run = agent.run();
        let (record_sender, record) = watch::channel(None);
        let (events, receiver) = mpsc::unbounded_channel();
        let id = task_id.to_string();
        self.lock().insert(
            id.clone(),
            LocalRun { task: spec.clone(), created_at, abort: run.abort_handle(), steps: 0, record, store },
        );
        let runs = Arc::clone(self);
        let record_path = config.data_dir.join("runs").join(format!("{id}.json"));
        let run_id = id.clone();
        self.tracker.spawn(async move {
            // The agent lives as long as its run.
            let _agent = agent;
            while let Some(event) = run.next().await {
                if matches!(event.kind, EventKind::StepFinished { .. })
                    && let Some(entry) = runs.lock().get_mut(&run_id)
                {
                    entry.steps += 1;
                }
                // Nobody following (submit_task, or a run_task whose request went): the run goes on.
                let _ = events.send(event);
            }
            let report = run.finish().await;
            let record = report.record(spec, created_at, worker);
            match serde_json::to_vec_pretty(&record) {
                Ok(document) => {
                    if let Err(e) = write_atomically(&record_path, &document) {
                        tracing::warn!(task_id = %run_id, "cannot write {}: {e}", record_path.display());
                    }
                }
                Err(e) => tracing::warn!(task_id = %run_id, "serializing the task record: {e}"),
            }
            let _ = record_sender.send(Some(Arc::new(record)));
        });
        Ok((id, receiver))
    }

    async fn run_task(
        self: &Arc<Self>,
        args: serde_json::Map<String, Value>,
        call: &Call,
    ) -> Result<CallToolResult, String> {
        let (id, mut events) = self.start(task_of(args)?, None).await?;
        let mut progress = StepProgress::default();
        loop {
            tokio::select! {
                () = call.cancelled.cancelled() => {
                    if let Some(run) = self.lock().get(&id) {
                        run.abort.abort();
                    }
                    return Err(format!("the request was cancelled; task {id} is cancelled"));
                }
                event = events.recv() => match event {
                    Some(event) => progress.event(&event, call).await,
                    None => break,
                },
            }
        }
        let (mut record, store) = {
            let runs = self.lock();
            let run = runs.get(&id).ok_or_else(|| unknown(&id))?;
            (run.record.clone(), run.store.clone())
        };
        let record = match record.wait_for(Option::is_some).await {
            Ok(record) => record.clone(),
            Err(_) => None,
        }
        .ok_or_else(|| format!("task {id}: the run ended without a record"))?;
        let key =
            record.final_screenshot.as_ref().or(record.steps.last().map(|s| &s.screenshot)).map(|s| s.key.clone());
        let screenshot = match key {
            Some(key) => store.get(&key).await.ok().map(|bytes| (bytes.to_vec(), mime_of(&key))),
            None => None,
        };
        Ok(run_result(&record, screenshot))
    }

    /// A run's status document: the record once it ended; while it runs, the task file, `running` and the
    /// steps finished so far (`step_count`).
    fn document(&self, id: &str) -> Result<Value, String> {
        let runs = self.lock();
        let run = runs.get(id).ok_or_else(|| unknown(id))?;
        if let Some(record) = run.record.borrow().as_ref() {
            return serde_json::to_value(record.as_ref()).map_err(|e| e.to_string());
        }
        Ok(json!({
            "id": id,
            "state": TaskState::Running,
            "created_at": run.created_at.format(&time::format_description::well_known::Rfc3339).ok(),
            "task": run.task,
            "step_count": run.steps,
        }))
    }

    /// The runs, newest first.
    fn list(&self, state: Option<&str>, limit: usize) -> Vec<Value> {
        let runs = self.lock();
        let mut listed: Vec<(OffsetDateTime, Value)> = runs
            .iter()
            .map(|(id, run)| {
                let record = run.record.borrow();
                let (state, outcome) = match record.as_ref() {
                    Some(record) => (record.state, record.outcome.clone()),
                    None => (TaskState::Running, None),
                };
                let mut entry = json!({
                    "id": id,
                    "state": state,
                    "created_at": run.created_at.format(&time::format_description::well_known::Rfc3339).ok(),
                    "steps": run.steps,
                    "instructions": run.task.instructions,
                });
                if let Some(outcome) = outcome {
                    entry["outcome"] =
                        json!({"success": outcome.success, "summary": outcome.summary, "reason": outcome.reason});
                }
                (run.created_at, entry)
            })
            .filter(|(_, entry)| state.is_none_or(|state| entry["state"] == state))
            .collect();
        listed.sort_by_key(|(created_at, _)| std::cmp::Reverse(*created_at));
        listed.into_iter().take(limit).map(|(_, entry)| entry).collect()
    }
}

fn unknown(id: &str) -> String {
    format!("no task {id} was started by this server (with --local, the tools know only the runs they started)")
}
