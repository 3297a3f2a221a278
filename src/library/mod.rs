//! agentd as a library: an [`Agent`] made of a model, a computer, tools, instructions and limits, built with
//! [`Agent::builder`]; [`Agent::run`] starts a [`Run`], a stream of events that can be aborted and resolves
//! to a [`RunReport`]. In-process tools with typed arguments come from [`tool_fn`] (`typed.rs`).
//!
//! A run is one [`Attempt`](crate::attempt::Attempt), the same as `agentd run` and the daemon's workers: the
//! builder only decides where the pieces come from (given objects, or the task file's declarative specs built
//! by `backends`). Its journal is in memory; its screenshots go to a filesystem store in the agent's data
//! directory (a fresh directory under the system's temporary directory unless one is given) or the store
//! given.

mod run;
mod typed;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentd_computer::ComputerProvider;

use crate::artifacts::{ArtifactStore, FsStore};
use crate::attempt::{Assembled, Assembly, Built, Source};
use crate::backends::BuildError;
use crate::config::Config;
use crate::model::scripted::{Script, ScriptedModel};
use crate::model::{Model, Shared};
use crate::status::TaskRecord;
use crate::task::tools::ToolDecl;
use crate::task::{ComputerSpec, Limits, ModelSpec, ResolvedTask, TaskId, TaskSpec};
use crate::tools::Tool;

pub use crate::attempt::replay::check_replayable;
pub use run::{AbortHandle, Human, Run, RunFailed, RunReport};
pub use typed::{CallContext, FnTool, parameters_of, tool_fn};

/// An agent: a model, a computer, tools, instructions and limits. Each [`Agent::run`] is one task on them;
/// runs of one agent share its computer (one at a time is what a desktop can take).
pub struct Agent {
    task: ResolvedTask,
    task_id: Option<TaskId>,
    built: Built,
    config: Arc<Config>,
    store: Arc<dyn ArtifactStore>,
    data_dir: PathBuf,
    spool_dir: Option<PathBuf>,
    worker: String,
    human: Option<Arc<dyn Human>>,
}

/// Builds an [`Agent`]. Whatever is not given is resolved as a task file's would be: from the
/// [`task`](AgentBuilder::task) if one is given, then the config's `[defaults]`, then the built-in defaults
/// (the mock desktop's `blank` scene, Anthropic's model, 50 steps, 1800 s, $2).
#[derive(Default)]
pub struct AgentBuilder {
    /// What every run's attempt is assembled from (`crate::attempt`, as for the daemon's attempts).
    assembly: Assembly,
    data_dir: Option<PathBuf>,
    store: Option<Arc<dyn ArtifactStore>>,
    spool_dir: Option<PathBuf>,
    task_id: Option<TaskId>,
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
            built: self.built.clone(),
            config: self.config.clone(),
            store: self.store.clone(),
            spool_dir,
            own_spool,
            human: self.human.clone(),
        })
    }

    /// The model, as built.
    pub fn model(&self) -> &Arc<dyn Model> {
        &self.built.model
    }

    /// The computer, as built.
    pub fn computer(&self) -> &Arc<dyn ComputerProvider> {
        &self.built.computer
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
        self.assembly.task = Some(task);
        self
    }

    /// What the agent is asked to do.
    pub fn instructions(mut self, instructions: impl Into<String>) -> Self {
        self.assembly.instructions = Some(instructions.into());
        self
    }

    /// The model (any [`Model`]: a vendor adapter, [`scripted_model`], your own).
    pub fn model(mut self, model: Arc<dyn Model>) -> Self {
        self.assembly.model = Some(Source::Given(model));
        self
    }

    /// The model as a task file names it (`{"provider": "anthropic", …}`), built with the config's keys.
    pub fn model_spec(mut self, spec: ModelSpec) -> Self {
        self.assembly.model = Some(Source::Spec);
        self.assembly.model_spec = Some(spec);
        self
    }

    /// The computer (any [`ComputerProvider`]: [`mock_desktop`], a local display, VNC, your own).
    pub fn computer(mut self, computer: Arc<dyn ComputerProvider>) -> Self {
        self.assembly.computer = Some(Source::Given(computer));
        self
    }

    /// The computer as a task file names it (`{"provider": "mock", "scene": "login"}`).
    pub fn computer_spec(mut self, spec: ComputerSpec) -> Self {
        self.assembly.computer = Some(Source::Spec);
        self.assembly.computer_spec = Some(spec);
        self
    }

    /// An in-process tool (see [`tool_fn`] for one with typed arguments).
    pub fn tool(mut self, tool: impl Tool + 'static) -> Self {
        self.assembly.tools.push(Arc::new(tool));
        self
    }

    /// In-process tools already shared.
    pub fn tools(mut self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        self.assembly.tools.extend(tools);
        self
    }

    /// A tool declared as a task file declares it (docs/tools.md: `http`, `command`, `remote`).
    pub fn declared_tool(mut self, decl: ToolDecl) -> Self {
        self.assembly.declared.push(decl);
        self
    }

    /// Steps, time and cost the run may take.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.assembly.limits = Some(limits);
        self
    }

    /// How many of the latest screenshots the model keeps seeing (at least 1).
    pub fn keep_screenshots(mut self, keep: u32) -> Self {
        self.assembly.keep_screenshots = Some(keep);
        self
    }

    /// The JSON Schema of the structured output `task_completion` must give (docs/task-file.md).
    pub fn output_schema(mut self, schema: serde_json::Value) -> Self {
        self.assembly.output_schema = Some(schema);
        self
    }

    /// The config: model keys and endpoints, `[defaults]`, `[tools]` (named by `{"use": …}`), settling.
    /// Without one, [`Config::default`] (keys from the environment).
    pub fn config(mut self, config: Config) -> Self {
        self.assembly.config = Some(Arc::new(config));
        self
    }

    /// The model clients and rate limiters, shared with other agents of the process (each agent has its own
    /// otherwise): agents calling one vendor then keep to its rate limits together.
    pub fn shared_models(mut self, models: Arc<Shared>) -> Self {
        self.assembly.models = Some(models);
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
        self.assembly.base_dir = Some(dir.into());
        self
    }

    /// The task id of the runs (a new one per run otherwise); artifacts are stored under it.
    pub fn task_id(mut self, id: TaskId) -> Self {
        self.task_id = Some(id);
        self
    }

    /// Who runs it, as `task_started` says (`library@HOST` otherwise).
    pub fn worker(mut self, worker: impl Into<String>) -> Self {
        self.assembly.worker = Some(worker.into());
        self
    }

    /// The record of the task a replay task (`"replay": {"of": …}`, docs/replay-and-verify.md) replays: it must have
    /// succeeded; its
    /// screenshots are read from the artifact store the runs use.
    pub fn replay_recording(mut self, record: TaskRecord) -> Self {
        self.assembly.replay_record = Some(record);
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
        let worker = self.assembly.worker_name();
        let human = self.human.take();
        let data_dir = match data_dir {
            Some(dir) => dir,
            None => std::env::temp_dir().join(format!("agentd-{}", uuid::Uuid::now_v7())),
        };
        let store: Arc<dyn ArtifactStore> = match store {
            Some(store) => store,
            None => Arc::new(FsStore::new(data_dir.join("artifacts"))),
        };
        let Assembled { task, built, config } = self.assembly.assemble(store.as_ref()).await?;
        Ok(Agent { task, task_id, built, config, store, data_dir, spool_dir, worker, human })
    }

    /// A person the run asks when the model calls `ask_human` or a step waits for approval (`agentd run` on
    /// a terminal). Without one, such a run ends there (the question or the approval is in its outcome).
    pub fn human(mut self, human: Arc<dyn Human>) -> Self {
        self.human = Some(human);
        self
    }
}

/// The built-in mock desktop showing a built-in scene (`blank`, `login`, `form`, …) or a scene file.
pub fn mock_desktop(scene: &str) -> Result<Arc<dyn ComputerProvider>, BuildError> {
    let scene =
        agentd_mock::Scene::resolve(scene, None).map_err(|e| BuildError::invalid("computer.scene", e.to_string()))?;
    let desktop =
        agentd_mock::MockDesktop::new(scene, None).map_err(|e| BuildError::invalid("computer", e.to_string()))?;
    Ok(Arc::new(desktop))
}

/// The scripted model playing a script (docs/models.md: `{"turns": [{"actions": […], "calls": […], "complete": …}]}`).
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
