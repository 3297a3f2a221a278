//! `agentd mcp`: the MCP server of the task tools on standard input and output, for a client that starts it
//! (Claude Code, Claude Desktop, editors). It reaches the daemon through the CLI's client (`--socket`,
//! `--url`, `$AGENTD_TOKEN`), or with `--local` runs the tasks in this process (`crate::mcp::local`).
//! Standard output carries the protocol and nothing else; logs go to stderr.

use serde_json::Value;
use tokio::sync::mpsc;

use super::client::{Client, Method};
use super::exit::{CliError, CliResult, Exit};
use crate::config::Config;
use crate::mcp::{Backend, DaemonApi};
use crate::record::events::Event;
use crate::task::{TaskSource, TaskSpec};

/// The daemon's API through the CLI's client.
struct ClientApi {
    client: Client,
}

#[async_trait::async_trait]
impl DaemonApi for ClientApi {
    async fn request(&self, method: &str, path: &str, body: Option<Value>) -> Result<(u16, Value), String> {
        let method = Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?;
        let body = body.map(|body| body.to_string().into_bytes());
        let (status, reply) = self.client.request(method, path, body).await.map_err(|e| format!("{:#}", e.error))?;
        Ok((status.as_u16(), reply))
    }

    async fn get_bytes(&self, path: &str) -> Result<(u16, Vec<u8>), String> {
        self.client.get_bytes(path).await.map_err(|e| format!("{:#}", e.error))
    }

    async fn follow(&self, task_id: &str, events: mpsc::UnboundedSender<Event>) -> Result<(), String> {
        self.client
            .follow_events(task_id, 0, true, |event| {
                let _ = events.send(event.clone());
            })
            .await
            .map_err(|e| format!("{:#}", e.error))
    }

    fn prepare(&self, spec: TaskSpec) -> Result<TaskSpec, String> {
        // Relative paths resolve against the directory the server was started in, as for a task on stdin.
        let source = TaskSource::of(std::path::Path::new("-"));
        super::remote::prepare_for_daemon(spec, &source).map_err(|e| format!("{:#}", e.error))
    }
}

/// Serves MCP on stdio until the client closes it: over the daemon's API, or (`local`) on runs in this process.
pub async fn serve(config: Config, client: Option<Client>) -> CliResult {
    let (backend, local) = match client {
        Some(client) => (Backend::Daemon(std::sync::Arc::new(ClientApi { client })), None),
        None => {
            let cwd =
                std::env::current_dir().map_err(|e| CliError::failed(anyhow::anyhow!("the working directory: {e}")))?;
            let runs = std::sync::Arc::new(crate::mcp::local::LocalRuns::new(config, cwd));
            (Backend::Local(runs.clone()), Some(runs))
        }
    };
    let served = crate::mcp::serve_stdio(backend).await;
    if let Some(runs) = local {
        runs.shutdown().await;
    }
    served.map_err(|e| CliError::unreachable(anyhow::anyhow!(e)))?;
    Ok(Exit::Success)
}

/// What a computer session's task is asked when `--instructions` says nothing.
const SESSION_INSTRUCTIONS: &str = "An MCP client operates this computer through agentd's computer tools.";

/// `agentd mcp --computer`'s arguments.
pub struct Session<'a> {
    /// A file holding a task's `computer` object, or the name of a pool desktop.
    pub computer: &'a str,
    pub instructions: Option<&'a str>,
    /// `NAME=VAR`: a secret read from the environment variable VAR.
    pub secrets: &'a [String],
}

impl Session<'_> {
    /// The computer (the file's object, or `{"desktop": NAME}`), the directory relative paths in it
    /// resolve against, and how errors name it.
    fn computer(&self) -> Result<(Value, std::path::PathBuf, String), CliError> {
        let path = std::path::Path::new(self.computer);
        if !path.is_file() {
            let cwd =
                std::env::current_dir().map_err(|e| CliError::failed(anyhow::anyhow!("the working directory: {e}")))?;
            return Ok((serde_json::json!({ "desktop": self.computer }), cwd, format!("--computer {}", self.computer)));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::invalid(anyhow::anyhow!("--computer {}: {e}", path.display())))?;
        let value: Value = serde_json::from_str(&text).map_err(|e| {
            CliError::invalid(anyhow::anyhow!(
                "--computer {}: not JSON at line {} column {}: {e}",
                path.display(),
                e.line(),
                e.column()
            ))
        })?;
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
        Ok((value, dir.to_path_buf(), path.display().to_string()))
    }

    /// The task file's `secrets` of the `--secret NAME=VAR` arguments.
    fn secrets(&self) -> Result<Option<Value>, CliError> {
        if self.secrets.is_empty() {
            return Ok(None);
        }
        let mut secrets = serde_json::Map::new();
        for secret in self.secrets {
            let Some((name, var)) = secret.split_once('=').filter(|(n, v)| !n.is_empty() && !v.is_empty()) else {
                return Err(CliError::invalid(anyhow::anyhow!("--secret {secret:?}: expected NAME=VAR")));
            };
            secrets.insert(name.to_string(), serde_json::json!({ "env": var }));
        }
        Ok(Some(Value::Object(secrets)))
    }
}

/// `agentd mcp --computer FILE|DESKTOP`: the computer tools on one computer until the client closes the
/// session, which is recorded as a task (`crate::mcp::computer`): a session of the daemon (`/v1/sessions`),
/// or with `--local` (no `client`) a task run in this process.
pub async fn serve_computer(config: Config, client: Option<Client>, session: Session<'_>) -> CliResult {
    let (computer, base_dir, origin) = session.computer()?;
    let secrets = session.secrets()?;
    let instructions = session.instructions.unwrap_or(SESSION_INSTRUCTIONS);
    if let Some(client) = client {
        let api = std::sync::Arc::new(ClientApi { client });
        let mut body = serde_json::json!({ "instructions": instructions });
        if computer.get("desktop").is_some() && computer.as_object().is_some_and(|o| o.len() == 1) {
            body["desktop"] = computer["desktop"].clone();
        } else {
            // Relative paths in the computer (a scene file) are read here, as `agentd submit` reads them.
            let task = serde_json::json!({ "instructions": instructions, "computer": computer });
            let spec = TaskSpec::parse(&task.to_string(), &origin)?;
            let source = TaskSource::of(&base_dir.join("session.json"));
            let spec = super::remote::prepare_for_daemon(spec, &source)?;
            body["computer"] = serde_json::to_value(&spec.computer).unwrap_or_default();
        }
        if let Some(secrets) = secrets {
            body["secrets"] = secrets;
        }
        let server = crate::mcp::computer::lease(api.clone(), body)
            .await
            .map_err(|e| CliError::unreachable(anyhow::anyhow!("{origin}: {e}")))?;
        let task_id = server.task_id().to_string();
        eprintln!("agentd: MCP computer session recorded as task {task_id} of the daemon (agentd show {task_id})");
        let served = crate::mcp::computer::serve_stdio(server).await;
        let released = crate::mcp::computer::release(api.as_ref(), &task_id).await;
        served.and(released).map_err(|e| CliError::unreachable(anyhow::anyhow!(e)))?;
        return Ok(Exit::Success);
    }
    let mut task = crate::mcp::computer::session_task(instructions);
    task["computer"] = computer;
    if let Some(secrets) = secrets {
        task["secrets"] = secrets;
    }
    let mut spec = TaskSpec::parse(&task.to_string(), &origin)?;
    let task_id = crate::task::TaskId::generate();
    spec.id = Some(task_id.clone());
    let runs = std::sync::Arc::new(crate::mcp::local::LocalRuns::new(config, base_dir));
    let (server, model) = crate::mcp::computer::ComputerServer::new(task_id.to_string());
    runs.start_with_model(spec, model).await.map_err(|e| CliError::invalid(anyhow::anyhow!("{origin}: {e}")))?;
    eprintln!("agentd: MCP computer session recorded as task {task_id} (agentd show {task_id} --local)");
    let served = crate::mcp::computer::serve_stdio(server).await;
    // The server (and with it the calls' sender) is gone: the model completes the task.
    runs.finish().await;
    tracing::info!(%task_id, "the MCP computer session ended; its task is recorded");
    served.map_err(|e| CliError::unreachable(anyhow::anyhow!(e)))?;
    Ok(Exit::Success)
}
