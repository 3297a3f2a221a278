//! agentd as a Model Context Protocol server (specification 2025-11-25): the task tools (`tools.rs`) over a
//! [`Backend`] — the daemon's API ([`DaemonApi`]: the CLI's client over the Unix socket or TCP, or the
//! daemon's own router for `/mcp`) or runs in this process ([`local::LocalRuns`], `agentd mcp --local`).
//!
//! The protocol is the official Rust SDK's, `rmcp`: it is the SDK the specification's maintainers publish
//! (the same organisation as the Python and TypeScript SDKs whose clients the tests drive it with), tracks
//! each specification revision, and carries both transports agentd serves (stdio, Streamable HTTP on axum,
//! which the API already runs on). Its default features are off on purpose: no `macros` (the tools' schemas
//! are agentd's own — the task file's — not derived from Rust types) and no `base64` helper (agentd encodes
//! images itself); `server` and the transports are named one by one. The server answers `initialize` with
//! 2025-11-25, or the older revision a client asks for (2025-06-18, 2025-03-26, 2024-11-05); the SDK's newer
//! draft revisions (per-request negotiation without `initialize`) are not offered.
//!
//! `run_task` submits (or, locally, starts) a task and follows its events: each `step_finished` becomes a
//! `notifications/progress` when the request carried a `progressToken` (progress = steps finished, message =
//! the step's model text and actions); `notifications/cancelled` for the request cancels the task. A task of
//! the daemon that waits for a person is asked about through the client when it supports elicitation
//! (`elicit.rs`). Its result
//! is a text block with the outcome as JSON, the structured `output` as `structuredContent` when the task has an
//! `output_schema` (an output that is not a JSON object is given as `{"output": VALUE}`), and the last
//! screenshot as an image block; `isError` is true when the task did not succeed. Refusals (a bad task file,
//! an unknown task, a task in the wrong state) are tool errors whose text names the problem.

pub mod computer;
mod daemon;
mod elicit;
pub mod local;
mod tools;

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, InitializeResult,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ProtocolVersion,
    ServerCapabilities,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Value, json};

use crate::record::events::{DeltaKind, Event, EventKind};
use crate::status::TaskRecord;

pub use daemon::DaemonApi;
pub use tools::TaskTool;

/// The protocol revision agentd implements.
pub const PROTOCOL_VERSION: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// Where the task tools act.
#[derive(Clone)]
pub enum Backend {
    /// The daemon's API.
    Daemon(Arc<dyn DaemonApi>),
    /// Tasks run in this process, as `agentd run` runs them.
    Local(Arc<local::LocalRuns>),
}

/// The MCP server of the task tools.
#[derive(Clone)]
pub struct TaskServer {
    backend: Backend,
    /// The computer this MCP session leased (`lease_computer`), which the computer tools operate; released
    /// with the session.
    leased: Arc<tokio::sync::Mutex<Option<computer::Leased>>>,
}

impl TaskServer {
    pub fn new(backend: Backend) -> Self {
        Self { backend, leased: Arc::default() }
    }

    /// The tools `tools/list` answers: the task tools, and the computer tools `lease_computer` makes usable.
    pub fn tools() -> Vec<rmcp::model::Tool> {
        TaskTool::ALL.into_iter().map(TaskTool::tool).chain(computer::ComputerServer::tools()).collect()
    }

    async fn call(&self, tool: TaskTool, args: serde_json::Map<String, Value>, context: &Call) -> CallToolResult {
        let result = match (&self.backend, tool) {
            (Backend::Daemon(api), TaskTool::LeaseComputer) => self.lease(api.clone(), args).await,
            (Backend::Daemon(_), TaskTool::ReleaseComputer) => self.release().await,
            (Backend::Daemon(api), _) => daemon::call(api.as_ref(), tool, args, context).await,
            (Backend::Local(runs), _) => runs.call(tool, args, context).await,
        };
        result.unwrap_or_else(|message| CallToolResult::error(vec![ContentBlock::text(message)]))
    }

    /// `lease_computer`: a session of the daemon on the computer the arguments name, and its first screenshot.
    async fn lease(
        &self,
        api: Arc<dyn DaemonApi>,
        args: serde_json::Map<String, Value>,
    ) -> Result<CallToolResult, String> {
        let mut leased = self.leased.lock().await;
        if let Some(held) = leased.as_ref() {
            return Err(format!(
                "this MCP session already holds a computer (task {}): release_computer first",
                held.server.task_id()
            ));
        }
        let server = computer::lease(api.clone(), Value::Object(args)).await?;
        let task_id = server.task_id().to_string();
        let first = server.act(agentd_computer::Action::Screenshot {}).await;
        *leased = Some(computer::Leased::new(server, api));
        let first = first?;
        let mut result = first.tool_result();
        result.content.insert(0, ContentBlock::text(json!({ "task_id": task_id }).to_string()));
        Ok(result)
    }

    /// `release_computer`: the leased computer's session ends.
    async fn release(&self) -> Result<CallToolResult, String> {
        let Some(held) = self.leased.lock().await.take() else {
            return Err("this MCP session holds no computer (lease_computer leases one)".into());
        };
        let task_id = held.server.task_id().to_string();
        held.release().await?;
        Ok(json_result(&json!({ "task_id": task_id, "released": true })))
    }

    /// A computer tool: on the leased computer.
    async fn computer_call(&self, name: &str, args: serde_json::Map<String, Value>) -> CallToolResult {
        let server = self.leased.lock().await.as_ref().map(|held| held.server.clone());
        match server {
            Some(server) => server.call_tool_named(name, args).await,
            None => CallToolResult::error(vec![ContentBlock::text(format!(
                "{name}: this MCP session holds no computer; lease one with lease_computer first"
            ))]),
        }
    }
}

/// What a tool call may use of its request: its progress token and peer, the client (to ask its person:
/// elicitation), and its cancellation.
pub struct Call {
    progress: Option<(ProgressToken, rmcp::Peer<RoleServer>)>,
    peer: rmcp::Peer<RoleServer>,
    pub cancelled: tokio_util::sync::CancellationToken,
}

impl Call {
    fn of(context: &RequestContext<RoleServer>) -> Self {
        let progress = context.meta.get_progress_token().map(|token| (token, context.peer.clone()));
        Self { progress, peer: context.peer.clone(), cancelled: context.ct.clone() }
    }
}

impl ServerHandler for TaskServer {
    fn get_info(&self) -> InitializeResult {
        let mode = match self.backend {
            Backend::Daemon(_) => {
                "Tasks go to the agentd daemon's queue; lease_computer leases one of its computers to operate \
                 yourself with the computer tools."
            }
            Backend::Local(_) => {
                "Tasks run in this process (--local): answer, approve, reject and send_message are \
                                  refused here; a question or a held approval ends the task."
            }
        };
        server_info(
            "agentd",
            "A vision model operates a computer; every step recorded",
            format!(
                "run_task runs a computer-use task (a vision model operating a computer) and waits for its outcome; \
                 submit_task queues one and get_task follows it. {mode}"
            ),
        )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        protocol_versions()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(Self::tools()))
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        TaskTool::from_name(name).map(TaskTool::tool).or_else(|| computer::ComputerServer::tool_named(name))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if computer::ComputerServer::has_tool(&request.name) {
            return Ok(self.computer_call(&request.name, request.arguments.unwrap_or_default()).await.into());
        }
        let Some(tool) = TaskTool::from_name(&request.name) else {
            return Err(ErrorData::invalid_params(format!("no tool named {:?}", request.name), None));
        };
        let call = Call::of(&context);
        Ok(self.call(tool, request.arguments.unwrap_or_default(), &call).await.into())
    }
}

/// What `initialize` answers, for both servers: the protocol revision, tools, who agentd is, and `instructions`.
fn server_info(title: &str, description: &str, instructions: String) -> InitializeResult {
    InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
        .with_protocol_version(PROTOCOL_VERSION)
        .with_server_info(
            Implementation::new("agentd", env!("CARGO_PKG_VERSION")).with_title(title).with_description(description),
        )
        .with_instructions(instructions)
}

/// The protocol revisions offered: this one and the older ones a client may ask for.
fn protocol_versions() -> Cow<'static, [ProtocolVersion]> {
    Cow::Borrowed(ProtocolVersion::known_up_to(&PROTOCOL_VERSION))
}

/// Serves the task tools on standard input and output until the client closes them.
pub async fn serve_stdio(backend: Backend) -> Result<(), String> {
    use rmcp::ServiceExt;
    let running = TaskServer::new(backend)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("the MCP session did not start: {e}"))?;
    running.waiting().await.map_err(|e| format!("the MCP session failed: {e}"))?;
    Ok(())
}

/// An argument a tool requires, as text.
fn text_arg(args: &serde_json::Map<String, Value>, name: &str) -> Result<String, String> {
    match args.get(name) {
        Some(Value::String(text)) if !text.is_empty() => Ok(text.clone()),
        Some(Value::String(_)) => Err(format!("`{name}` must not be empty")),
        Some(_) => Err(format!("`{name}` must be a string")),
        None => Err(format!("`{name}` is required")),
    }
}

/// An optional text argument.
fn optional_text(args: &serde_json::Map<String, Value>, name: &str) -> Result<Option<String>, String> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(format!("`{name}` must be a string")),
    }
}

/// The task file of `run_task`/`submit_task`: the arguments, checked as a task file (errors name the field).
fn task_of(args: serde_json::Map<String, Value>) -> Result<crate::task::TaskSpec, String> {
    let text = Value::Object(args).to_string();
    crate::task::TaskSpec::parse(&text, "the task").map_err(|e| e.to_string())
}

/// A plain result: the value as JSON text.
fn json_result(value: &Value) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(value.to_string())])
}

/// Turns a run's events into progress notifications: one per finished step, with what the model said and
/// the actions it took in that step.
#[derive(Default)]
struct StepProgress {
    finished: u32,
    text: String,
    actions: Vec<String>,
    /// A notification was sent for a wait since the last finished step (progress then is `finished + 0.5`).
    told_waiting: bool,
}

impl StepProgress {
    /// Notes an event; sends the notification when it ends a step.
    async fn event(&mut self, event: &Event, call: &Call) {
        match &event.kind {
            EventKind::StepStarted { .. } => {
                self.text.clear();
                self.actions.clear();
            }
            EventKind::ModelDelta { kind: DeltaKind::Text, text, .. } if self.text.chars().count() < 300 => {
                self.text.push_str(text);
            }
            EventKind::ActionStarted { action, .. } => {
                let name = serde_json::to_value(action)
                    .ok()
                    .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_string))
                    .unwrap_or_else(|| "action".into());
                self.actions.push(name);
            }
            EventKind::ToolStarted { name, .. } => self.actions.push(name.clone()),
            // The task waits for a person: the client is told, between two steps' values, once per step.
            EventKind::WaitingForHuman { reason, question, .. } if !self.told_waiting => {
                self.told_waiting = true;
                let Some((token, peer)) = &call.progress else { return };
                let why = question.as_ref().map_or_else(|| reason.clone(), |q| format!("the model asks: {q}"));
                let message = format!(
                    "waiting for a human: {why} (the answer, approve and reject tools, or agentd answer/approve/reject \
                     {}, resume it)",
                    event.task_id
                );
                let param =
                    ProgressNotificationParam::new(token.clone(), f64::from(self.finished) + 0.5).with_message(message);
                let _ = peer.notify_progress(param).await;
            }
            EventKind::StepFinished { step, .. } => {
                self.finished += 1;
                self.told_waiting = false;
                let Some((token, peer)) = &call.progress else { return };
                let said: String = self.text.split_whitespace().collect::<Vec<_>>().join(" ");
                let said: String = said.chars().take(200).collect();
                let mut message = format!("step {step}");
                if !said.is_empty() {
                    message.push_str(&format!(": {said}"));
                }
                if !self.actions.is_empty() {
                    message.push_str(&format!(" [{}]", self.actions.join(", ")));
                }
                let param =
                    ProgressNotificationParam::new(token.clone(), f64::from(self.finished)).with_message(message);
                // A client that went away is noticed by the session, not here.
                let _ = peer.notify_progress(param).await;
            }
            _ => {}
        }
    }
}

/// The result of `run_task` from the finished task's record and its last screenshot (PNG or JPEG bytes).
fn run_result(record: &TaskRecord, screenshot: Option<(Vec<u8>, &str)>) -> CallToolResult {
    use base64::Engine;
    let outcome = record.outcome.as_ref();
    let summary = json!({
        "id": record.id,
        "state": record.state,
        "outcome": outcome,
        "steps": record.steps.len(),
        "usage": record.usage,
    });
    let mut content = vec![ContentBlock::text(summary.to_string())];
    if let Some((bytes, mime)) = screenshot {
        content.push(ContentBlock::image(base64::engine::general_purpose::STANDARD.encode(bytes), mime));
    }
    let success = outcome.is_some_and(|o| o.success);
    let mut result = if success { CallToolResult::success(content) } else { CallToolResult::error(content) };
    if record.task.output_schema.is_some()
        && let Some(output) = outcome.and_then(|o| o.output.clone())
    {
        result.structured_content = Some(match output {
            Value::Object(_) => output,
            other => json!({ "output": other }),
        });
    }
    result
}

/// Percent-encodes a path segment or query value.
pub fn encode(s: &str) -> String {
    let mut out = String::new();
    for byte in s.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The MIME type of a stored screenshot, by its key.
fn mime_of(key: &str) -> &'static str {
    if key.ends_with(".jpg") || key.ends_with(".jpeg") {
        "image/jpeg"
    } else if key.ends_with(".webp") {
        "image/webp"
    } else {
        "image/png"
    }
}
