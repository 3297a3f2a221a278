//! One attempt of a task, for `agentd run`, the daemon's workers and the library alike: the one place that
//! assembles an attempt's parts ([`Assembly`]: the task resolved, its model, secrets, tools, computer and
//! verifier built from what was given and what the task file names), emits `task_started` and
//! `task_finished`, and says what could not be built as the attempt's [`Ending`].
//!
//! What an attempt is and how it ends belong to the loop (`crate::agent::attempt`); what differs between the
//! callers stays with them: `agentd run` and the library have no queue, so an ending that would go back to the
//! queue becomes a final outcome ([`Ending::into_outcome`]); a worker releases, requeues or finishes its
//! lease.

pub mod replay;

use std::path::PathBuf;
use std::sync::Arc;

use agentd_computer::ComputerProvider;
use agentd_computer::outbound::Outbound;

pub use crate::agent::attempt::{Attempt, AttemptOutput, Built, Ending, RunContext};
use crate::agent::events::EventSink;
use crate::artifacts::ArtifactStore;
use crate::backends::{self, BuildError, ComputerContext};
use crate::config::Config;
use crate::input::FileAccess;
use crate::model::{Model, Shared};
use crate::record::{EndReason, EventKind, Outcome, Usage};
use crate::status::TaskRecord;
use crate::task::replay::OnDivergence;
use crate::task::tools::{JsonSchema, TaskTool, ToolDecl, check_unique};
use crate::task::{ComputerSpec, Limits, ModelSpec, ResolvedTask, TaskSpec};
use crate::tools::{Tool, Toolbox, ToolboxError};

/// Where one part of an attempt comes from: given as an object, or built from the task's spec.
pub enum Source<T> {
    Given(T),
    Spec,
}

/// What an attempt is assembled from. Whatever is not given is resolved as a task file's would be: from the
/// task if one is given, then the config's `[defaults]`, then the built-in defaults.
#[derive(Default)]
pub struct Assembly {
    pub task: Option<TaskSpec>,
    pub instructions: Option<String>,
    pub model: Option<Source<Arc<dyn Model>>>,
    pub model_spec: Option<ModelSpec>,
    pub computer: Option<Source<Arc<dyn ComputerProvider>>>,
    pub computer_spec: Option<ComputerSpec>,
    /// In-process tools, beside the task's declared ones.
    pub tools: Vec<Arc<dyn Tool>>,
    pub declared: Vec<ToolDecl>,
    pub limits: Option<Limits>,
    pub keep_screenshots: Option<u32>,
    pub output_schema: Option<serde_json::Value>,
    /// The config (shared: the daemon reads it once for all its attempts); [`Config::default`] otherwise.
    pub config: Option<Arc<Config>>,
    /// The model clients and rate limiters, shared with other attempts of the process.
    pub models: Option<Arc<Shared>>,
    /// Where the mock desktop keeps its state between attempts of the task.
    pub persist_dir: Option<PathBuf>,
    /// The task came over the API (this node's or another's): it may name only the files, environment
    /// variables and base URLs the config allows, and connect only where the outbound policy lets it; checked
    /// again here since the node that accepted it may allow more.
    pub api_task: bool,
    /// What relative scene and script paths resolve against (the current directory otherwise).
    pub base_dir: Option<PathBuf>,
    /// Who runs it, as `task_started` says.
    pub worker: Option<String>,
    /// The record a replay task replays.
    pub replay_record: Option<TaskRecord>,
    /// Where the attempt shows its screen to live viewers while it runs (the daemon's; none elsewhere).
    pub live: Option<Arc<crate::live::LiveScreens>>,
}

/// An attempt's parts, built.
pub struct Assembled {
    pub task: ResolvedTask,
    pub built: Built,
    pub config: Arc<Config>,
}

impl Assembly {
    /// Who runs the attempt, as `task_started` says (`library@HOST` unless a worker is named).
    pub fn worker_name(&self) -> String {
        self.worker.clone().unwrap_or_else(|| format!("library@{}", crate::config::host_name()))
    }

    /// Emits `task_started`, assembles the attempt's parts (what cannot be built is the attempt's ending) and
    /// runs the loop to its end: one attempt of a queued task, in the context the worker gives it.
    pub async fn run(self, context: RunContext) -> AttemptOutput {
        emit_started(&context.events, context.attempt, &self.worker_name());
        let store = context.uploader.store().clone();
        let live = self.live.clone();
        let Assembled { task, built, config } = match self.assemble(store.as_ref()).await {
            Ok(assembled) => assembled,
            Err(error) => return unbuilt(error),
        };
        // Viewers see the computer for as long as the attempt runs.
        let _shown = live.map(|live| live.register(&context.task_id, built.computer.clone()));
        crate::agent::run_isolated(Attempt { task, settle: config.settle, context }, built).await
    }

    /// Resolves the task and builds its model, secrets, tools and computer: the one assembly of an
    /// attempt's parts, for the library's agents and the daemon's attempts alike.
    pub async fn assemble(self, store: &dyn ArtifactStore) -> Result<Assembled, BuildError> {
        let config = self.config.unwrap_or_default();
        let mut spec = match self.task {
            Some(spec) => spec,
            None => {
                let instructions = self.instructions.as_deref().ok_or_else(|| {
                    BuildError::invalid("instructions", "required: give the agent instructions (or a task)")
                })?;
                TaskSpec::parse(&serde_json::json!({ "instructions": instructions }).to_string(), "agent")
                    .map_err(|e| BuildError::invalid("instructions", e.to_string()))?
            }
        };
        if let Some(instructions) = self.instructions {
            spec.instructions = serde_json::from_value(serde_json::Value::String(instructions))
                .map_err(|e| BuildError::invalid("instructions", e.to_string()))?;
        }
        if let Some(model) = self.model_spec {
            spec.model = Some(model);
        }
        if let Some(computer) = self.computer_spec {
            spec.computer = Some(computer);
        }
        if let Some(schema) = self.output_schema {
            spec.output_schema = Some(JsonSchema::new(schema).map_err(|m| BuildError::invalid("output_schema", m))?);
        }
        spec.tools.extend(self.declared.into_iter().map(TaskTool::Declared));
        check_unique(spec.tools.iter().map(TaskTool::name))
            .map_err(|(i, message)| BuildError::invalid(format!("tools[{i}].name"), message))?;
        let replay = spec.replay.clone();
        let mut task = spec.resolve(&config.defaults, &config.guard);
        // The config's approval rules first, then the task's own (docs/humans.md): a rule's number counts them so.
        task.approval = config.approval.iter().cloned().chain(std::mem::take(&mut task.approval)).collect();
        if let Some(limits) = self.limits {
            check_limits(&limits)?;
            task.limits = limits;
        }
        if let Some(keep) = self.keep_screenshots {
            if keep == 0 {
                return Err(BuildError::invalid("keep_screenshots", "must be at least 1"));
            }
            task.keep_screenshots = keep;
        }
        if self.api_task {
            backends::check_names(&task, &config)?;
        }
        // Where the task may connect: an API task reaches public addresses and what `[outbound] allow` adds;
        // what the operator configured (a pool desktop, the default computer, `[tools]`) reaches anything.
        let outbound = if self.api_task { config.api_outbound() } else { Outbound::open() };
        let computer_outbound = computer_outbound(&task, &config, &outbound);
        // Outside the daemon nothing is leased: a pool request runs on the first desktop it matches (docs/providers.md).
        if !matches!(self.computer, Some(Source::Given(_))) {
            task.computer = backends::pool_computer(&task.computer, &config)?;
        }

        let files = if self.api_task {
            config.file_access()
        } else {
            let base_dir = match self.base_dir {
                Some(dir) => dir,
                None => std::env::current_dir().map_err(|e| BuildError::invalid("base_dir", e.to_string()))?,
            };
            FileAccess::Local { base_dir }
        };
        let base_dir = match &files {
            FileAccess::Local { base_dir } => Some(base_dir.as_path()),
            FileAccess::Api { .. } => None,
        };
        let models = self.models.unwrap_or_else(|| Arc::new(Shared::new(&config)));
        // A replay (docs/replay-and-verify.md) builds the task's model only for a model to hand over to.
        let needs_model = replay.as_ref().is_none_or(|r| r.on_divergence == OnDivergence::Model);
        let model = match self.model {
            Some(Source::Given(model)) => Some(model),
            Some(Source::Spec) | None if needs_model => {
                let spec = backends::inline_script(&task.model, &files).await?;
                Some(backends::model(&spec, &models, base_dir)?)
            }
            Some(Source::Spec) | None => None,
        };
        let model = match (&replay, model) {
            (Some(replay), fallback) => {
                let record = self.replay_record.as_ref().ok_or_else(|| {
                    BuildError::invalid(
                        "replay.of",
                        format!("the record of task {} is not available here to replay", replay.of),
                    )
                })?;
                let fallback = fallback.filter(|_| replay.on_divergence == OnDivergence::Model);
                replay::replay_model(replay, record, store, fallback).await?
            }
            (None, Some(model)) => model,
            (None, None) => return Err(BuildError::invalid("model", "no model was built")),
        };
        // The secrets' values are read here, when the agent is built (docs/security.md): a worker builds per attempt.
        let secrets = if self.api_task {
            api_task_secrets(&task, &config).await?
        } else {
            backends::secrets(&task, &files).await?
        };
        let tools = toolbox(&task, &config, self.tools, secrets.clone(), &outbound).await?;
        let computer = match self.computer {
            Some(Source::Given(computer)) => computer,
            Some(Source::Spec) | None => {
                // What a browser may open is the task's to ask, whoever configured the browser.
                let pages = self.api_task.then_some((config.browser.allowed_urls.as_slice(), &outbound));
                let context = ComputerContext {
                    files: &files,
                    persist_dir: self.persist_dir.as_deref(),
                    secrets: &secrets,
                    outbound: &computer_outbound,
                    pages,
                };
                backends::computer(&task.computer, &context).await?
            }
        };
        // The verifier checks' reference images are read and their programs looked up here (docs/replay-and-verify.md).
        let verifier =
            crate::verify::Verifier::build(&task.verify, task.verify_retries, &config.verifiers, &files, &outbound)
                .await
                .map_err(|e| BuildError::invalid(e.field, e.message))?;
        Ok(Assembled { task, built: Built { computer, model, tools, verifier: Arc::new(verifier) }, config })
    }
}

/// Where a task's computer may be: what the operator configured (a pool desktop, the default computer)
/// anywhere; a computer the task names itself only where the task may connect (`outbound`).
fn computer_outbound(task: &ResolvedTask, config: &Config, outbound: &Outbound) -> Outbound {
    if matches!(task.computer, ComputerSpec::Desktop(_)) || config.defaults.computer.as_ref() == Some(&task.computer) {
        Outbound::open()
    } else {
        outbound.clone()
    }
}

/// The secrets of a task that came over the API: read only from the files `[api] allowed_secret_paths` names
/// (and the environment variables the config allows).
pub async fn api_task_secrets(
    task: &ResolvedTask,
    config: &Config,
) -> Result<crate::tools::secrets::Secrets, BuildError> {
    backends::secrets(task, &config.secret_file_access()).await
}

/// The computer of a task that came over the API, opened for a person who took its desktop over
/// (docs/humans.md), as its attempts open it: the same checks of what it names and where it may connect, the
/// mock desktop's state in `persist_dir`. Returns it with the task's secrets (a person's typed text is
/// redacted with them). A pool desktop is the pool's to give, not opened here.
pub async fn open_for_person(
    spec: &TaskSpec,
    config: &Config,
    persist_dir: &std::path::Path,
) -> Result<(Arc<dyn ComputerProvider>, crate::tools::secrets::Secrets), BuildError> {
    let task = spec.resolve(&config.defaults, &config.guard);
    backends::check_names(&task, config)?;
    let outbound = config.api_outbound();
    let computer_outbound = computer_outbound(&task, config, &outbound);
    let files = config.file_access();
    let secrets = api_task_secrets(&task, config).await?;
    let context = ComputerContext {
        files: &files,
        persist_dir: Some(persist_dir),
        secrets: &secrets,
        outbound: &computer_outbound,
        pages: Some((config.browser.allowed_urls.as_slice(), &outbound)),
    };
    let computer = backends::computer(&task.computer, &context).await?;
    Ok((computer, secrets))
}

/// The task's declared tools (through `backends`, as for every task), its MCP servers' tools (each server
/// reached now, for this attempt) and the in-process ones.
async fn toolbox(
    task: &ResolvedTask,
    config: &Config,
    mut tools: Vec<Arc<dyn Tool>>,
    secrets: crate::tools::secrets::Secrets,
    outbound: &Outbound,
) -> Result<Arc<Toolbox>, BuildError> {
    let declared = backends::toolbox(task, &config.tools, secrets.clone(), outbound)?;
    tools.extend(mcp_tools(task, outbound, &secrets).await?);
    if tools.is_empty() {
        return Ok(declared);
    }
    let mut toolbox = Arc::try_unwrap(declared)
        .map_err(|_| BuildError::Invalid { field: None, message: "internal error: the toolbox is shared".into() })?;
    for tool in tools {
        let spec = tool.spec();
        // Every vendor passes a call's arguments as an object (a task file's `parameters` is checked the same).
        if spec.parameters.get("type").and_then(|t| t.as_str()) != Some("object") {
            return Err(BuildError::invalid(
                format!("tools.{}.parameters", spec.name),
                "a tool's parameters must be a JSON Schema of \"type\": \"object\" (make the arguments a struct)",
            ));
        }
        toolbox =
            toolbox.with_tool(tool).map_err(|ToolboxError { field, message }| BuildError::invalid(field, message))?;
    }
    Ok(Arc::new(toolbox))
}

/// The tools of the task's MCP servers (docs/tools.md), started or connected to for this attempt; they stop
/// when the attempt's toolbox is dropped.
#[cfg(feature = "daemon")]
async fn mcp_tools(
    task: &ResolvedTask,
    outbound: &Outbound,
    secrets: &crate::tools::secrets::Secrets,
) -> Result<Vec<Arc<dyn Tool>>, BuildError> {
    use crate::tools::mcp::{self, McpError};
    let mut tools = Vec::new();
    for (i, entry) in task.tools.iter().enumerate() {
        let crate::task::tools::TaskTool::Mcp(source) = entry else { continue };
        match mcp::connect(source, &format!("tools[{i}]"), outbound, secrets.clone()).await {
            Ok(found) => tools.extend(found),
            Err(McpError::Invalid { field, message }) => return Err(BuildError::invalid(field, message)),
            Err(McpError::Unreachable { field, message }) => {
                return Err(BuildError::Unreachable(format!("{field}: {message}")));
            }
        }
    }
    Ok(tools)
}

/// Without the daemon's feature set there is no MCP client: a task naming an MCP server is refused.
#[cfg(not(feature = "daemon"))]
async fn mcp_tools(
    task: &ResolvedTask,
    _: &Outbound,
    _: &crate::tools::secrets::Secrets,
) -> Result<Vec<Arc<dyn Tool>>, BuildError> {
    match task.tools.iter().position(|t| matches!(t, crate::task::tools::TaskTool::Mcp(_))) {
        Some(i) => Err(BuildError::invalid(
            format!("tools[{i}]"),
            "MCP servers as tools need agentd built with its `daemon` feature",
        )),
        None => Ok(Vec::new()),
    }
}

fn check_limits(limits: &Limits) -> Result<(), BuildError> {
    if limits.max_steps == 0 {
        return Err(BuildError::invalid("limits.max_steps", "must be at least 1"));
    }
    if limits.timeout_secs == 0 {
        return Err(BuildError::invalid("limits.timeout_secs", "must be at least 1"));
    }
    if !limits.max_cost_usd.is_finite() || limits.max_cost_usd < 0.0 {
        return Err(BuildError::invalid("limits.max_cost_usd", "must be a number of dollars, 0 or more"));
    }
    Ok(())
}

/// The output of an attempt whose computer or model could not be built: wrong input ends the task, an
/// unreachable backend may pass by the next attempt.
pub fn unbuilt(error: BuildError) -> AttemptOutput {
    let outcome = Outcome::new(false, error.to_string(), EndReason::Error);
    let ending = match error {
        BuildError::Invalid { .. } => Ending::Finished(outcome),
        BuildError::Unreachable(_) => Ending::retryable(outcome),
    };
    AttemptOutput { build_failed: true, ..AttemptOutput::ended(ending) }
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
