//! agentd as a library: an [`Agent`] made of a model, a computer, tools, instructions and limits, built with
//! [`Agent::builder`]; [`Agent::run`] starts a [`Run`], a stream of events that can be aborted and resolves
//! to a [`RunReport`]. In-process tools with typed arguments come from [`tool_fn`] (`typed.rs`).
//!
//! A run is one [`Attempt`](crate::attempt::Attempt), the same as `agentd run` and the daemon's workers: the
//! builder only decides where the pieces come from (given objects, or the task file's declarative specs built
//! by `backends`). Its journal is in memory; its screenshots go to a filesystem store in the agent's data
//! directory (a fresh directory under the system's temporary directory unless one is given) or the store
//! given.

mod hosted;
mod replay;
mod run;
mod typed;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentd_computer::ComputerProvider;
use agentd_computer::outbound::Outbound;

use crate::artifacts::{ArtifactStore, FsStore};
use crate::attempt::Built;
use crate::backends::{self, BuildError, ComputerContext};
use crate::config::Config;
use crate::input::FileAccess;
use crate::model::scripted::{Script, ScriptedModel};
use crate::model::{Model, Shared};
use crate::status::TaskRecord;
use crate::task::replay::OnDivergence;
use crate::task::tools::{JsonSchema, TaskTool, ToolDecl, check_unique};
use crate::task::{ComputerSpec, Limits, ModelSpec, ResolvedTask, TaskId, TaskSpec};
use crate::tools::{Tool, Toolbox, ToolboxError};

#[doc(hidden)]
pub use hosted::Hosting;
pub use replay::check_replayable;
pub use run::{AbortHandle, Human, Run, RunFailed, RunReport};
pub use typed::{CallContext, FnTool, parameters_of, tool_fn};

/// An agent: a model, a computer, tools, instructions and limits. Each [`Agent::run`] is one task on them;
/// runs of one agent share its computer (one at a time is what a desktop can take).
pub struct Agent {
    task: ResolvedTask,
    task_id: Option<TaskId>,
    model: Arc<dyn Model>,
    computer: Arc<dyn ComputerProvider>,
    tools: Arc<Toolbox>,
    verifier: Arc<crate::verify::Verifier>,
    config: Arc<Config>,
    store: Arc<dyn ArtifactStore>,
    data_dir: PathBuf,
    spool_dir: Option<PathBuf>,
    worker: String,
    human: Option<Arc<dyn Human>>,
}

enum Source<T> {
    Given(T),
    Spec,
}

/// Builds an [`Agent`]. Whatever is not given is resolved as a task file's would be: from the
/// [`task`](AgentBuilder::task) if one is given, then the config's `[defaults]`, then the built-in defaults
/// (the mock desktop's `blank` scene, Anthropic's model, 50 steps, 1800 s, $2).
#[derive(Default)]
pub struct AgentBuilder {
    task: Option<TaskSpec>,
    instructions: Option<String>,
    model: Option<Source<Arc<dyn Model>>>,
    model_spec: Option<ModelSpec>,
    computer: Option<Source<Arc<dyn ComputerProvider>>>,
    computer_spec: Option<ComputerSpec>,
    tools: Vec<Arc<dyn Tool>>,
    declared: Vec<ToolDecl>,
    limits: Option<Limits>,
    keep_screenshots: Option<u32>,
    output_schema: Option<serde_json::Value>,
    config: Option<Arc<Config>>,
    models: Option<Arc<Shared>>,
    persist_dir: Option<PathBuf>,
    api_task: bool,
    data_dir: Option<PathBuf>,
    store: Option<Arc<dyn ArtifactStore>>,
    spool_dir: Option<PathBuf>,
    base_dir: Option<PathBuf>,
    task_id: Option<TaskId>,
    worker: Option<String>,
    replay_record: Option<TaskRecord>,
    human: Option<Arc<dyn Human>>,
}

impl Agent {
    pub fn builder() -> AgentBuilder {
        AgentBuilder::default()
    }

    /// Starts a run of the agent's instructions.
    ///
    /// # Panics
    /// Outside a Tokio runtime (the run is a task of the current runtime).
    pub fn run(&self) -> Run {
        self.start(self.task.instructions.clone())
    }

    /// Starts a run of other instructions with the agent's model, computer, tools and limits.
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn run_task(&self, instructions: impl Into<String>) -> Run {
        self.start(instructions.into())
    }

    fn start(&self, instructions: String) -> Run {
        let task_id = self.task_id.clone().unwrap_or_else(TaskId::generate);
        let (spool_dir, own_spool) = match &self.spool_dir {
            Some(dir) => (dir.clone(), false),
            None => (self.data_dir.join("spool").join(task_id.as_str()), true),
        };
        run::start(run::Launch {
            task_id,
            worker: self.worker.clone(),
            task: ResolvedTask { instructions, ..self.task.clone() },
            built: Built {
                computer: self.computer.clone(),
                model: self.model.clone(),
                tools: self.tools.clone(),
                verifier: self.verifier.clone(),
            },
            config: self.config.clone(),
            store: self.store.clone(),
            spool_dir,
            own_spool,
            human: self.human.clone(),
        })
    }

    /// The model, as built.
    pub fn model(&self) -> &Arc<dyn Model> {
        &self.model
    }

    /// The computer, as built.
    pub fn computer(&self) -> &Arc<dyn ComputerProvider> {
        &self.computer
    }

    /// The store the runs' screenshots go to.
    pub fn artifact_store(&self) -> &Arc<dyn ArtifactStore> {
        &self.store
    }

    /// Where the runs keep their files (the default store's `artifacts/` and the spool).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The task every run starts from (instructions, limits, the declared tools' specs).
    pub fn task(&self) -> &ResolvedTask {
        &self.task
    }
}

impl AgentBuilder {
    /// A task file's contents: what the other calls do not set comes from it (its `id` names the runs).
    pub fn task(mut self, task: TaskSpec) -> Self {
        self.task_id = self.task_id.or_else(|| task.id.clone());
        self.task = Some(task);
        self
    }

    /// What the agent is asked to do.
    pub fn instructions(mut self, instructions: impl Into<String>) -> Self {
        self.instructions = Some(instructions.into());
        self
    }

    /// The model (any [`Model`]: a vendor adapter, [`scripted_model`], your own).
    pub fn model(mut self, model: Arc<dyn Model>) -> Self {
        self.model = Some(Source::Given(model));
        self
    }

    /// The model as a task file names it (`{"provider": "anthropic", …}`), built with the config's keys.
    pub fn model_spec(mut self, spec: ModelSpec) -> Self {
        self.model = Some(Source::Spec);
        self.model_spec = Some(spec);
        self
    }

    /// The computer (any [`ComputerProvider`]: [`mock_desktop`], a local display, VNC, your own).
    pub fn computer(mut self, computer: Arc<dyn ComputerProvider>) -> Self {
        self.computer = Some(Source::Given(computer));
        self
    }

    /// The computer as a task file names it (`{"provider": "mock", "scene": "login"}`).
    pub fn computer_spec(mut self, spec: ComputerSpec) -> Self {
        self.computer = Some(Source::Spec);
        self.computer_spec = Some(spec);
        self
    }

    /// An in-process tool (see [`tool_fn`] for one with typed arguments).
    pub fn tool(mut self, tool: impl Tool + 'static) -> Self {
        self.tools.push(Arc::new(tool));
        self
    }

    /// In-process tools already shared.
    pub fn tools(mut self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        self.tools.extend(tools);
        self
    }

    /// A tool declared as a task file declares it (§13: `http`, `command`, `remote`).
    pub fn declared_tool(mut self, decl: ToolDecl) -> Self {
        self.declared.push(decl);
        self
    }

    /// Steps, time and cost the run may take.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = Some(limits);
        self
    }

    /// How many of the latest screenshots the model keeps seeing (at least 1).
    pub fn keep_screenshots(mut self, keep: u32) -> Self {
        self.keep_screenshots = Some(keep);
        self
    }

    /// The JSON Schema of the structured output `task_completion` must give (§14).
    pub fn output_schema(mut self, schema: serde_json::Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// The config: model keys and endpoints, `[defaults]`, `[tools]` (named by `{"use": …}`), settling.
    /// Without one, [`Config::default`] (keys from the environment).
    pub fn config(mut self, config: Config) -> Self {
        self.config = Some(Arc::new(config));
        self
    }

    /// The config, shared (the daemon's, read once for all its attempts).
    #[doc(hidden)]
    pub fn shared_config(mut self, config: Arc<Config>) -> Self {
        self.config = Some(config);
        self
    }

    /// The model clients and rate limiters, shared with other agents of the process (each agent has its own
    /// otherwise).
    #[doc(hidden)]
    pub fn shared_models(mut self, models: Arc<Shared>) -> Self {
        self.models = Some(models);
        self
    }

    /// Where the mock desktop keeps its state between attempts of the task.
    #[doc(hidden)]
    pub fn persist_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.persist_dir = Some(dir.into());
        self
    }

    /// The task came over the API (this node's or another's): it may name only the files, environment
    /// variables and base URLs the config allows, checked again here since the node that accepted it may
    /// allow more.
    #[doc(hidden)]
    pub fn api_task(mut self) -> Self {
        self.api_task = true;
        self
    }

    /// Where the runs keep their files: screenshots under `artifacts/` (unless a store is given) and the
    /// spool. Without one, a new directory under the system's temporary directory, left in place.
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self
    }

    /// The store the screenshots go to, instead of a filesystem store in the data directory.
    pub fn artifact_store(mut self, store: Arc<dyn ArtifactStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// The spool screenshots wait in until the store has them (shared by runs; leftovers of an earlier
    /// process are uploaded). Without one, each run has its own under the data directory.
    pub fn spool_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.spool_dir = Some(dir.into());
        self
    }

    /// What relative scene and script paths of specs resolve against (the current directory otherwise).
    pub fn base_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.base_dir = Some(dir.into());
        self
    }

    /// The task id of the runs (a new one per run otherwise); artifacts are stored under it.
    pub fn task_id(mut self, id: TaskId) -> Self {
        self.task_id = Some(id);
        self
    }

    /// Who runs it, as `task_started` says (`library@HOST` otherwise).
    pub fn worker(mut self, worker: impl Into<String>) -> Self {
        self.worker = Some(worker.into());
        self
    }

    /// The record of the task a replay task (`"replay": {"of": …}`, §18) replays: it must have succeeded; its
    /// screenshots are read from the artifact store the runs use.
    pub fn replay_recording(mut self, record: TaskRecord) -> Self {
        self.replay_record = Some(record);
        self
    }

    /// Checks everything and builds what is given as specs (the computer is opened, the model's keys are
    /// looked up, declared tools are made). Errors name the field at fault (`instructions`, `tools[1].name`,
    /// `output_schema`, `computer.scene`, …).
    pub async fn build(mut self) -> Result<Agent, BuildError> {
        let data_dir = self.data_dir.take();
        let store = self.store.take();
        let spool_dir = self.spool_dir.take();
        let task_id = self.task_id.clone();
        let worker = self.worker_name();
        let human = self.human.take();
        let data_dir = match data_dir {
            Some(dir) => dir,
            None => std::env::temp_dir().join(format!("agentd-{}", uuid::Uuid::now_v7())),
        };
        let store: Arc<dyn ArtifactStore> = match store {
            Some(store) => store,
            None => Arc::new(FsStore::new(data_dir.join("artifacts"))),
        };
        let Assembled { task, built, config } = self.assemble(store.as_ref()).await?;
        Ok(Agent {
            task,
            task_id,
            model: built.model,
            computer: built.computer,
            tools: built.tools,
            verifier: built.verifier,
            config,
            store,
            data_dir,
            spool_dir,
            worker,
            human,
        })
    }

    /// A person the run asks when the model calls `ask_human` or a step waits for approval (`agentd run` on
    /// a terminal). Without one, such a run ends there (the question or the approval is in its outcome).
    pub fn human(mut self, human: Arc<dyn Human>) -> Self {
        self.human = Some(human);
        self
    }

    fn worker_name(&self) -> String {
        self.worker.clone().unwrap_or_else(|| format!("library@{}", crate::config::host_name()))
    }

    /// Resolves the task and builds its model, secrets, tools and computer: the one assembly of an
    /// attempt's parts, for agents and the daemon's attempts alike.
    async fn assemble(self, store: &dyn ArtifactStore) -> Result<Assembled, BuildError> {
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
        // The config's approval rules first, then the task's own (§20): a rule's number counts them so.
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
        let computer_outbound = if matches!(task.computer, ComputerSpec::Desktop(_))
            || config.defaults.computer.as_ref() == Some(&task.computer)
        {
            Outbound::open()
        } else {
            outbound.clone()
        };
        // Outside the daemon nothing is leased: a pool request runs on the first desktop it matches (§23).
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
        // A replay (§18) builds the task's model only for a model to hand over to.
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
                self::replay::replay_model(replay, record, store, fallback).await?
            }
            (None, Some(model)) => model,
            (None, None) => return Err(BuildError::invalid("model", "no model was built")),
        };
        // The secrets' values are read here, when the agent is built (§15): a worker builds per attempt.
        // An API task's secret files are only those `[api] allowed_secret_paths` names.
        let secret_files = if self.api_task { config.secret_file_access() } else { files.clone() };
        let secrets = backends::secrets(&task, &secret_files).await?;
        let tools = toolbox(&task, &config, self.tools, secrets.clone(), &outbound)?;
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
        // The verifier checks' reference images are read and their programs looked up here (§16).
        let verifier =
            crate::verify::Verifier::build(&task.verify, task.verify_retries, &config.verifiers, &files, &outbound)
                .await
                .map_err(|e| BuildError::invalid(e.field, e.message))?;
        Ok(Assembled { task, built: Built { computer, model, tools, verifier: Arc::new(verifier) }, config })
    }
}

/// An attempt's parts, built.
struct Assembled {
    task: ResolvedTask,
    built: Built,
    config: Arc<Config>,
}

/// The task's declared tools (through `backends`, as for every task) and the in-process ones.
fn toolbox(
    task: &ResolvedTask,
    config: &Config,
    tools: Vec<Arc<dyn Tool>>,
    secrets: crate::tools::secrets::Secrets,
    outbound: &Outbound,
) -> Result<Arc<Toolbox>, BuildError> {
    let declared = backends::toolbox(task, &config.tools, secrets, outbound)?;
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

/// The built-in mock desktop showing a built-in scene (`blank`, `login`, `form`, …) or a scene file.
pub fn mock_desktop(scene: &str) -> Result<Arc<dyn ComputerProvider>, BuildError> {
    let scene =
        agentd_mock::Scene::resolve(scene, None).map_err(|e| BuildError::invalid("computer.scene", e.to_string()))?;
    let desktop =
        agentd_mock::MockDesktop::new(scene, None).map_err(|e| BuildError::invalid("computer", e.to_string()))?;
    Ok(Arc::new(desktop))
}

/// The scripted model playing a script (§6: `{"turns": [{"actions": […], "calls": […], "complete": …}]}`).
pub fn scripted_model(script: &serde_json::Value) -> Result<Arc<dyn Model>, BuildError> {
    let script =
        Script::parse(&script.to_string(), "script").map_err(|e| BuildError::invalid("model.script", e.to_string()))?;
    Ok(Arc::new(ScriptedModel::new(script)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An agent may be shared between tasks and threads, and a run handed to another task.
    #[test]
    fn agents_and_runs_cross_threads() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send + Unpin>() {}
        send_sync::<Agent>();
        send::<Run>();
        send::<RunReport>();
        send_sync::<AbortHandle>();
    }
}
