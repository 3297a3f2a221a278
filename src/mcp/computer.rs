//! `agentd mcp --computer FILE|DESKTOP`: the computer tools — `screenshot`, `click`, `double_click`, `type`,
//! `key`, `scroll`, `drag`, `move`, `wait` — on one computer, for an MCP client that does the looking and
//! deciding itself (an agent in an editor, a model of the client's own). Each tool carries out one action and
//! returns the screenshot after it.
//!
//! The session is a task, run in this process as `agentd mcp --local` runs tasks ([`LocalRuns`]), whose model
//! is the client: [`ClientModel`] answers each of the loop's model calls with the client's next tool call as a
//! turn of one action, and hands the loop's next screenshot back as that call's result. So the session is
//! everything a task is — the computer opened (and a pool desktop chosen) as for `agentd run`, every step with
//! its screenshot and action recorded, the record in `data_dir/runs/ID.json` when the client disconnects
//! (`agentd show ID --local`, `export`, `compile`), its metadata `"source": "mcp"` — and nothing is written
//! twice: the actions are the task file's, checked and carried out by the same loop.
//!
//! The client works in screen pixels (the model's coordinate space is the screen's). When the client closes
//! the session, the task completes `succeeded` with a summary of how many steps it took.

use std::sync::Arc;

use agentd_computer::{Action, PageInfo, Size};
use async_trait::async_trait;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, InitializeResult,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Value, json};
use tokio::sync::{Mutex, mpsc, oneshot};

use super::PROTOCOL_VERSION;
use super::local::LocalRuns;
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

/// The client's side of the session: the MCP server of the computer tools.
#[derive(Clone)]
pub struct ComputerServer {
    calls: mpsc::Sender<Call>,
    task_id: String,
}

impl ComputerServer {
    /// A server and the model that carries its calls to the task's loop.
    pub fn new(task_id: String) -> (Self, Arc<ClientModel>) {
        let (calls, receiver) = mpsc::channel(1);
        let model = Arc::new(ClientModel { inbox: Mutex::new(Inbox { calls: receiver, pending: None }) });
        (Self { calls, task_id }, model)
    }

    /// The tools `tools/list` answers, their input schemas those of the task file's actions.
    pub fn tools() -> Vec<rmcp::model::Tool> {
        TOOLS.iter().map(|(name, action, description)| tool(name, action, description)).collect()
    }

    async fn call(&self, action: Action) -> Result<Screen, String> {
        let (reply, screen) = oneshot::channel();
        let ended = || format!("the session's task {} has ended; start a new session", self.task_id);
        self.calls.send(Call { action, reply }).await.map_err(|_| ended())?;
        screen.await.map_err(|_| ended())
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

/// The result of a tool: the step and its outcome as JSON text, and the screenshot after it.
fn result_of(screen: Screen) -> CallToolResult {
    use base64::Engine;
    let mut summary = json!({"step": screen.step, "ok": screen.ok, "screen": screen.image.size.to_string()});
    if !screen.message.is_empty() {
        summary["message"] = json!(screen.message);
    }
    if let Some(page) = &screen.page {
        summary["page"] = json!({"url": page.url, "title": page.title});
    }
    let content = vec![
        ContentBlock::text(summary.to_string()),
        ContentBlock::image(
            base64::engine::general_purpose::STANDARD.encode(&screen.image.bytes),
            screen.image.media_type,
        ),
    ];
    if screen.ok { CallToolResult::success(content) } else { CallToolResult::error(content) }
}

impl ServerHandler for ComputerServer {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_protocol_version(PROTOCOL_VERSION)
            .with_server_info(
                Implementation::new("agentd", env!("CARGO_PKG_VERSION"))
                    .with_title("agentd computer")
                    .with_description("One computer's screen, pointer and keyboard; every step recorded"),
            )
            .with_instructions(format!(
                "Operate one computer: each tool carries out one action in screen pixels and returns the screenshot \
                 after it (start with `screenshot`). The session is recorded as agentd task {}.",
                self.task_id
            ))
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(ProtocolVersion::known_up_to(&PROTOCOL_VERSION))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(Self::tools()))
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        TOOLS.iter().find(|(n, _, _)| *n == name).map(|(name, action, description)| tool(name, action, description))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some((_, action_type, _)) = TOOLS.iter().find(|(n, _, _)| *n == request.name) else {
            return Err(ErrorData::invalid_params(format!("no tool named {:?}", request.name), None));
        };
        let result = match action_of(action_type, request.arguments.unwrap_or_default()) {
            Ok(action) => match self.call(action).await {
                Ok(screen) => result_of(screen),
                Err(message) => CallToolResult::error(vec![ContentBlock::text(message)]),
            },
            Err(message) => CallToolResult::error(vec![ContentBlock::text(format!("{}: {message}", request.name))]),
        };
        Ok(result.into())
    }
}

/// Serves the computer tools on standard input and output for the session task `task_id` (started on
/// `runs` with the returned model by the caller) until the client closes them; then the task completes and
/// its record is written.
pub async fn serve_stdio(server: ComputerServer, runs: Arc<LocalRuns>) -> Result<(), String> {
    use rmcp::ServiceExt;
    let task_id = server.task_id.clone();
    let served = async {
        let running =
            server.serve(rmcp::transport::stdio()).await.map_err(|e| format!("the MCP session did not start: {e}"))?;
        running.waiting().await.map_err(|e| format!("the MCP session failed: {e}"))?;
        Ok::<_, String>(())
    }
    .await;
    // The server (and with it the calls' sender) is gone: the model completes the task.
    runs.finish().await;
    tracing::info!(%task_id, "the MCP computer session ended; its task is recorded");
    served
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
