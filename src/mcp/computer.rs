//! `agentd mcp --computer FILE|DESKTOP`: the computer tools — `screenshot`, `click`, `double_click`, `type`,
//! `key`, `scroll`, `drag`, `move`, `wait` — on one computer, for an MCP client that does the looking and
//! deciding itself (an agent in an editor, a model of the client's own). Each tool carries out one action and
//! returns the screenshot after it.
//!
//! The session is a task whose model is the client: [`ClientModel`] answers each of the loop's model calls with
//! the client's next tool call as a turn of one action, and hands the loop's next screenshot back as that
//! call's result. So the session is everything a task is — the computer opened (and a pool desktop leased) as
//! for any task, every step with its screenshot and action recorded, `export` and `compile` on its record, its
//! metadata `"source": "mcp"` — and nothing is written twice: the actions are the task file's, checked and
//! carried out by the same loop. The task runs in this process (`--local`: [`super::local::LocalRuns`]), or in
//! the daemon, which holds the [`ComputerServer`] and the model of each of its sessions (`api::sessions`) and is
//! reached over its API by a [`ComputerServer::remote`] (`agentd mcp --computer`, the `lease_computer` tool).
//!
//! The client works in screen pixels (the model's coordinate space is the screen's). When the client closes
//! the session, the task completes `succeeded` with a summary of how many steps it took.

use std::sync::Arc;

use agentd_computer::{Action, PageInfo, Size};
use async_trait::async_trait;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, InitializeResult, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Value, json};
use tokio::sync::{Mutex, mpsc, oneshot};

use super::DaemonApi;
use crate::model::{CallKind, DeltaSink, Model, ModelError, ModelRequest, ModelTurn, TASK_COMPLETION, ToolCall, Usage};
use crate::screen::{CoordinateMap, ModelImage};

/// The tools: their names, the action type each carries out, and what the client reads about them.
const TOOLS: [(&str, &str, &str); 9] = [
    ("screenshot", "screenshot", "Take a screenshot of the computer's screen."),
    (
        "click",
        "click",
        "Click at (x, y) in screen pixels: `button` left (default), right, middle, back or forward; `keys` are \
         modifiers held during the click.",
    ),
    ("double_click", "double_click", "Double-click with the left button at (x, y)."),
    ("type", "type", "Type `text` (any Unicode) as keystrokes."),
    ("key", "keypress", "Press one chord: `keys` pressed in order, released in reverse (\"ctrl\", \"c\")."),
    ("scroll", "scroll", "Scroll at (x, y) by `scroll_x`/`scroll_y` pixels (positive: right/down), `keys` held."),
    ("drag", "drag", "Press at the first point of `path`, move through the others, release (`button` default left)."),
    ("move", "move", "Move the pointer to (x, y), `keys` held."),
    ("wait", "wait", "Wait `duration_ms` milliseconds, then take a screenshot."),
];

/// One tool call on its way to the loop, and where its screen goes.
struct Call {
    action: Action,
    reply: oneshot::Sender<Screen>,
}

/// What a call came to: its result as the loop reported it, and the screen after it.
struct Screen {
    step: u32,
    ok: bool,
    message: String,
    image: ModelImage,
    page: Option<PageInfo>,
}

/// What one action of a session came to, as a tool result and as the HTTP API's answer
/// (`POST /v1/sessions/{id}/actions`): `summary` is `{"step", "ok", "screen": "WxH", "message"?, "page"?}`,
/// the screenshot after the action is `image` (base64 of `media_type`).
#[derive(Debug, Clone, PartialEq)]
pub struct ActionResult {
    pub summary: Value,
    pub ok: bool,
    pub media_type: String,
    pub image: String,
}

impl ActionResult {
    fn of(screen: Screen) -> Self {
        let mut summary = json!({"step": screen.step, "ok": screen.ok, "screen": screen.image.size.to_string()});
        if !screen.message.is_empty() {
            summary["message"] = json!(screen.message);
        }
        if let Some(page) = &screen.page {
            summary["page"] = json!({"url": page.url, "title": page.title});
        }
        Self {
            summary,
            ok: screen.ok,
            media_type: screen.image.media_type.to_string(),
            image: screen.image.base64().to_string(),
        }
    }

    /// The HTTP API's body: the summary's fields and `image: {media_type, data}`.
    pub fn to_json(&self) -> Value {
        let mut body = self.summary.clone();
        body["image"] = json!({"media_type": self.media_type, "data": self.image});
        body
    }

    /// Reads the HTTP API's body back.
    pub fn from_json(mut body: Value) -> Result<Self, String> {
        let image = body.as_object_mut().and_then(|o| o.remove("image")).unwrap_or_default();
        let (Some(media_type), Some(data)) = (image["media_type"].as_str(), image["data"].as_str()) else {
            return Err("unexpected reply from agentd: an action's result without its screenshot".into());
        };
        let ok = body["ok"].as_bool().unwrap_or(false);
        Ok(Self { ok, media_type: media_type.to_string(), image: data.to_string(), summary: body })
    }

    /// As an MCP tool result: the summary as JSON text and the screenshot; an error result when the action
    /// failed.
    pub fn tool_result(self) -> CallToolResult {
        let content =
            vec![ContentBlock::text(self.summary.to_string()), ContentBlock::image(self.image, self.media_type)];
        if self.ok { CallToolResult::success(content) } else { CallToolResult::error(content) }
    }
}

/// The MCP client as the session task's model: each model call of the loop returns the client's next tool
/// call (waiting for it), after handing the screen the loop shows now to the call before.
pub struct ClientModel {
    inbox: Mutex<Inbox>,
}

struct Inbox {
    calls: mpsc::Receiver<Call>,
    /// The call whose action the loop is carrying out: its screen is the next model call's.
    pending: Option<oneshot::Sender<Screen>>,
}

#[async_trait]
impl Model for ClientModel {
    fn describe(&self) -> String {
        "mcp client".into()
    }

    fn coordinates(&self, screen: Size) -> CoordinateMap {
        CoordinateMap::identity(screen)
    }

    async fn next_turn(&self, request: ModelRequest<'_>, _deltas: DeltaSink<'_>) -> Result<ModelTurn, ModelError> {
        let mut inbox = self.inbox.lock().await;
        if let Some(reply) = inbox.pending.take() {
            let result = request.history.last().and_then(|exchange| exchange.results.first());
            let _ = reply.send(Screen {
                step: request.step.saturating_sub(1),
                ok: result.is_none_or(|r| r.ok),
                message: result.map(|r| r.message.clone()).unwrap_or_default(),
                image: request.screenshot.clone(),
                page: request.page.cloned(),
            });
        }
        let index = request.history.len();
        let call = match inbox.calls.recv().await {
            Some(call) => {
                inbox.pending = Some(call.reply);
                ToolCall { id: format!("mcp_{index}"), kind: CallKind::Computer { actions: vec![call.action] } }
            }
            // The client closed the session.
            None => ToolCall {
                id: format!("mcp_{index}_end"),
                kind: CallKind::Function {
                    name: TASK_COMPLETION.to_string(),
                    arguments: json!({
                        "success": true,
                        "summary": format!("the MCP client ended the session after {index} steps"),
                    }),
                },
            },
        };
        Ok(ModelTurn {
            text: String::new(),
            thinking: String::new(),
            calls: vec![call],
            usage: Usage::default(),
            raw: None,
            approval: None,
        })
    }
}

/// The client's side of the session: the MCP server of the computer tools, on the session's task in this
/// process (or in this daemon: its `/v1/sessions` endpoints hold one per session), or on a session of the
/// daemon reached over its API.
#[derive(Clone)]
pub struct ComputerServer {
    computer: Computer,
    task_id: String,
}

#[derive(Clone)]
enum Computer {
    /// The session's task runs in this process: a call goes to its loop.
    Here(mpsc::Sender<Call>),
    /// A session of the daemon (`POST /v1/sessions`).
    Daemon(Arc<dyn DaemonApi>),
}

impl ComputerServer {
    /// A server and the model that carries its calls to the task's loop.
    pub fn new(task_id: String) -> (Self, Arc<ClientModel>) {
        let (calls, receiver) = mpsc::channel(1);
        let model = Arc::new(ClientModel { inbox: Mutex::new(Inbox { calls: receiver, pending: None }) });
        (Self { computer: Computer::Here(calls), task_id }, model)
    }

    /// A server whose calls go to the daemon's session `task_id`.
    pub fn remote(api: Arc<dyn DaemonApi>, task_id: String) -> Self {
        Self { computer: Computer::Daemon(api), task_id }
    }

    /// The session's task.
    pub fn task_id(&self) -> &str {
        &self.task_id
    }

    /// The tools `tools/list` answers, their input schemas those of the task file's actions.
    pub fn tools() -> Vec<rmcp::model::Tool> {
        listed().to_vec()
    }

    /// The computer tool named `name`.
    pub fn tool_named(name: &str) -> Option<rmcp::model::Tool> {
        listed().iter().find(|tool| tool.name == name).cloned()
    }

    /// Whether `name` is one of the computer tools.
    pub fn has_tool(name: &str) -> bool {
        TOOLS.iter().any(|(n, _, _)| *n == name)
    }

    /// Carries out one action on the session's computer; `Err` when the session has ended (or the daemon
    /// refused the action), in words for the client.
    pub async fn act(&self, action: Action) -> Result<ActionResult, String> {
        match &self.computer {
            Computer::Here(calls) => {
                let (reply, screen) = oneshot::channel();
                let ended = || format!("the session's task {} has ended; start a new session", self.task_id);
                calls.send(Call { action, reply }).await.map_err(|_| ended())?;
                screen.await.map(ActionResult::of).map_err(|_| ended())
            }
            Computer::Daemon(api) => {
                let path = format!("/v1/sessions/{}/actions", super::encode(&self.task_id));
                let body = json!({ "action": action });
                let reply = super::daemon::call_api(api.as_ref(), "POST", &path, Some(body)).await?;
                ActionResult::from_json(reply)
            }
        }
    }

    /// One computer tool's call: the action its arguments make, carried out.
    pub async fn call_tool_named(&self, name: &str, arguments: serde_json::Map<String, Value>) -> CallToolResult {
        let Some((_, action_type, _)) = TOOLS.iter().find(|(n, _, _)| *n == name) else {
            return CallToolResult::error(vec![ContentBlock::text(format!("no tool named {name:?}"))]);
        };
        match action_of(action_type, arguments) {
            Ok(action) => match self.act(action).await {
                Ok(result) => result.tool_result(),
                Err(message) => CallToolResult::error(vec![ContentBlock::text(message)]),
            },
            Err(message) => CallToolResult::error(vec![ContentBlock::text(format!("{name}: {message}"))]),
        }
    }
}

/// The action a tool's arguments make: the arguments are the action's fields (`type` is the tool's).
fn action_of(action_type: &str, arguments: serde_json::Map<String, Value>) -> Result<Action, String> {
    let mut object = arguments;
    if object.contains_key("type") {
        return Err("`type` is not an argument of this tool (the tool names the action)".into());
    }
    object.insert("type".into(), Value::String(action_type.into()));
    serde_json::from_value(Value::Object(object)).map_err(|e| format!("the arguments: {e}"))
}

/// The computer tools, made once: each input schema is derived from the action type's JSON Schema, which
/// `tools/list` and every call's lookup would otherwise derive anew.
fn listed() -> &'static [rmcp::model::Tool] {
    static LISTED: std::sync::OnceLock<Vec<rmcp::model::Tool>> = std::sync::OnceLock::new();
    LISTED.get_or_init(|| TOOLS.iter().map(|(name, action, description)| tool(name, action, description)).collect())
}

/// A tool whose input schema is its action's, from the action type's own JSON Schema (`type` left out).
fn tool(name: &str, action_type: &str, description: &str) -> rmcp::model::Tool {
    let root = serde_json::to_value(schemars::schema_for!(Action)).unwrap_or_default();
    let variant = root["oneOf"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| {
            let tag = &v["properties"]["type"];
            tag["const"] == action_type || tag["enum"].as_array().is_some_and(|e| e.len() == 1 && e[0] == action_type)
        })
        .cloned()
        .unwrap_or_else(|| json!({"type": "object"}));
    let mut schema = serde_json::Map::new();
    schema.insert("type".into(), json!("object"));
    let mut properties = variant["properties"].as_object().cloned().unwrap_or_default();
    properties.remove("type");
    schema.insert("properties".into(), Value::Object(properties));
    let required: Vec<Value> =
        variant["required"].as_array().into_iter().flatten().filter(|r| *r != "type").cloned().collect();
    if !required.is_empty() {
        schema.insert("required".into(), Value::Array(required));
    }
    schema.insert("additionalProperties".into(), json!(false));
    if let Some(defs) = root.get("$defs") {
        schema.insert("$defs".into(), defs.clone());
    }
    // Every action may change the computer but `screenshot` and `wait`; none reaches beyond it.
    let read_only = matches!(action_type, "screenshot" | "wait");
    let annotations = rmcp::model::ToolAnnotations::new()
        .read_only(read_only)
        .destructive(!read_only)
        .idempotent(read_only)
        .open_world(false);
    rmcp::model::Tool::new(name.to_string(), description.to_string(), Arc::new(schema)).with_annotations(annotations)
}

impl ServerHandler for ComputerServer {
    fn get_info(&self) -> InitializeResult {
        super::server_info(
            "agentd computer",
            "One computer's screen, pointer and keyboard; every step recorded",
            format!(
                "Operate one computer: each tool carries out one action in screen pixels and returns the screenshot \
                 after it (start with `screenshot`). The session is recorded as agentd task {}.",
                self.task_id
            ),
        )
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        super::protocol_versions()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(Self::tools()))
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        Self::tool_named(name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if !Self::has_tool(&request.name) {
            return Err(ErrorData::invalid_params(format!("no tool named {:?}", request.name), None));
        }
        let result = self.call_tool_named(&request.name, request.arguments.unwrap_or_default()).await;
        Ok(result.into())
    }
}

/// The task file of a computer session, before its computer (and secrets): the client's `instructions`,
/// `"source": "mcp"`, the largest limits a task may have (a session lasts as long as its client), and the
/// stuck-loop guard off — it stops a model that repeats itself, and a client polling an unchanged screen is not
/// one (the client decides when it is done).
pub fn session_task(instructions: &str) -> Value {
    json!({
        "instructions": instructions,
        "metadata": { "source": "mcp" },
        "limits": {
            "max_steps": crate::task::MAX_STEPS_LIMIT,
            "timeout_secs": crate::task::MAX_TIMEOUT_SECS,
        },
        "guard": { "no_change_steps": 0, "repeat_actions": 0, "idle_turns": 0, "wait_steps": 0 },
    })
}

/// Serves the computer tools on standard input and output until the client closes them.
pub async fn serve_stdio(server: ComputerServer) -> Result<(), String> {
    use rmcp::ServiceExt;
    let running =
        server.serve(rmcp::transport::stdio()).await.map_err(|e| format!("the MCP session did not start: {e}"))?;
    running.waiting().await.map_err(|e| format!("the MCP session failed: {e}"))?;
    Ok(())
}

/// Opens a session of the daemon (`POST /v1/sessions` with `body`: `desktop` or `computer`, `instructions`,
/// `secrets`): a server whose calls go to it.
pub async fn lease(api: Arc<dyn DaemonApi>, body: Value) -> Result<ComputerServer, String> {
    let reply = super::daemon::call_api(api.as_ref(), "POST", "/v1/sessions", Some(body)).await?;
    let task_id = reply["task_id"].as_str().ok_or("unexpected reply from agentd: a session without its task id")?;
    Ok(ComputerServer::remote(api, task_id.to_string()))
}

/// Ends a session of the daemon: its task completes after the step it is on.
pub async fn release(api: &dyn DaemonApi, task_id: &str) -> Result<(), String> {
    let path = format!("/v1/sessions/{}", super::encode(task_id));
    super::daemon::call_api(api, "DELETE", &path, None).await.map(drop)
}

/// A session of the daemon an MCP session of the task tools leased (`lease_computer`): released by
/// `release_computer`, or when it is dropped with the MCP session that leased it.
pub struct Leased {
    pub server: ComputerServer,
    api: Arc<dyn DaemonApi>,
    released: bool,
}

impl Leased {
    pub fn new(server: ComputerServer, api: Arc<dyn DaemonApi>) -> Self {
        Self { server, api, released: false }
    }

    pub async fn release(mut self) -> Result<(), String> {
        self.released = true;
        release(self.api.as_ref(), &self.server.task_id).await
    }
}

impl Drop for Leased {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let (api, task_id) = (self.api.clone(), self.server.task_id.clone());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = release(api.as_ref(), &task_id).await {
                    tracing::warn!(%task_id, error = %e, "could not end the computer session of a closed MCP session");
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_takes_its_actions_fields_and_nothing_else() {
        let tools = ComputerServer::tools();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names, ["screenshot", "click", "double_click", "type", "key", "scroll", "drag", "move", "wait"]);
        let fields = |name: &str| -> Vec<String> {
            let tool = tools.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("{name}"));
            let mut keys: Vec<String> = tool
                .input_schema
                .get("properties")
                .and_then(Value::as_object)
                .map_or_else(Vec::new, |p| p.keys().cloned().collect());
            keys.sort();
            keys
        };
        assert_eq!(fields("click"), ["button", "keys", "x", "y"]);
        assert_eq!(fields("key"), ["keys"]);
        assert_eq!(fields("drag"), ["button", "keys", "path"]);
        assert_eq!(fields("screenshot"), Vec::<String>::new());
        let click = tools.iter().find(|t| t.name == "click").map(|t| t.input_schema.clone()).unwrap_or_default();
        assert_eq!(click.get("required"), Some(&json!(["x", "y"])), "{click:?}");

        let args = |v: Value| v.as_object().cloned().unwrap_or_default();
        assert_eq!(
            action_of("click", args(json!({"x": 3, "y": 4}))),
            Ok(Action::Click { x: 3, y: 4, button: Default::default(), keys: vec![] })
        );
        assert_eq!(
            action_of("keypress", args(json!({"keys": ["ctrl", "c"]}))),
            Ok(Action::Keypress { keys: vec!["ctrl".into(), "c".into()] })
        );
        let missing = action_of("click", args(json!({"x": 3}))).unwrap_err();
        assert!(missing.contains("`y`"), "{missing}");
        let typed = action_of("click", args(json!({"type": "type", "x": 1, "y": 1}))).unwrap_err();
        assert!(typed.contains("`type`"), "{typed}");
        let unknown = action_of("move", args(json!({"x": 1, "y": 1, "speed": 3}))).unwrap_err();
        assert!(unknown.contains("speed"), "{unknown}");
    }
}
