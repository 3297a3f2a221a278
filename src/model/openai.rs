//! The OpenAI adapter: Responses API (`POST /v1/responses`) with the computer-use tool.
//!
//! Follows openai-python e43b4224 (generated from the OpenAPI spec): `computer_use_preview_tool.py`
//! (`computer_use_preview` with `display_width`, `display_height`, `environment`) for `computer-use-preview*`
//! models and `computer_tool.py` (the GA `{"type": "computer"}`, no display fields, batched `actions`) for
//! every other model; `response_computer_tool_call.py` / `computer_action.py` for `computer_call` items;
//! `response_input_item_param.py` `ComputerCallOutput` (`output: {"type": "computer_screenshot",
//! "image_url"}`, `acknowledged_safety_checks`) and `FunctionCallOutput`; streaming event types of
//! `src/openai/types/responses/`; `truncation: "auto"` as the computer-use guide and the openai-cua-sample-app
//! eb2d58ba require.
//!
//! Conversation state: the full history is sent each time (no `previous_response_id`), so every output item
//! of a past response — reasoning items included, as the API requires when replaying — is replayed verbatim
//! from [`ModelTurn::raw`], and every `computer_call` / `function_call` is answered by its output item in
//! order. A `computer_call` with `pending_safety_checks` becomes [`ModelTurn::approval`]; the checks are
//! acknowledged (`acknowledged_safety_checks`) only when that turn is replayed with results, i.e. after a
//! human approved and the actions ran — or at once when `auto_acknowledge_safety_checks` is set.
//!
//! A `computer_call_output` must carry an image; when the context policy dropped that screenshot, a tiny
//! grey placeholder PNG is sent instead (the text placeholder goes in a user message beside it).

use std::sync::OnceLock;

use agentd_computer::{Action, MouseButton, Point, Size};
use async_trait::async_trait;
use serde_json::{Value, json};

use super::http::{AttemptError, Decoder, HttpRequest, SseEvent, stream_error};
use super::shared::Settings;
use super::wire;
use super::{
    ApprovalRequest, CallKind, Delta, DeltaSink, Model, ModelError, ModelImage, ModelRequest, ModelTurn, ToolCall,
    Usage, navigation,
};
use crate::config::ComputerEnvironment;
use crate::screen::coords::CoordinateMap;

/// How long the model's `wait` action waits.
pub const WAIT_MS: u64 = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolKind {
    /// `computer_use_preview`: declared display size and environment.
    Preview,
    /// The GA `computer` tool: coordinates are in the screenshot sent.
    Ga,
}

impl ToolKind {
    pub fn for_model(model: &str) -> Self {
        if model.starts_with("computer-use-preview") { Self::Preview } else { Self::Ga }
    }

    pub fn parse(text: &str) -> Result<Self, ModelError> {
        match text {
            "computer_use_preview" | "computer-use-preview" => Ok(Self::Preview),
            "computer" => Ok(Self::Ga),
            _ => Err(ModelError::Config(format!(
                "openai: unknown tool_version {text:?}; expected computer_use_preview or computer"
            ))),
        }
    }
}

pub struct OpenAiModel {
    settings: Settings,
    tool: ToolKind,
    /// `[models.openai] environment`; unset, it follows the computer (`browser` on a browser, else `linux`).
    environment: Option<ComputerEnvironment>,
}

impl OpenAiModel {
    pub fn new(settings: Settings) -> Result<Self, ModelError> {
        let tool = match &settings.tool_version {
            Some(v) => ToolKind::parse(v)?,
            None => ToolKind::for_model(&settings.model),
        };
        let environment = settings.config.environment;
        Ok(Self { settings, tool, environment })
    }

    pub fn tool_kind(&self) -> ToolKind {
        self.tool
    }

    pub fn build_request(&self, request: &ModelRequest<'_>) -> HttpRequest {
        HttpRequest {
            url: format!("{}/responses", self.settings.base_url),
            headers: Vec::new(),
            body: serde_json::to_vec(&self.body(request)).unwrap_or_default(),
            stream: self.settings.stream,
        }
    }

    /// The environment the `computer_use_preview` tool declares for `request`.
    pub fn environment(&self, request: &ModelRequest<'_>) -> ComputerEnvironment {
        self.environment.unwrap_or(if request.browser {
            ComputerEnvironment::Browser
        } else {
            ComputerEnvironment::Linux
        })
    }

    pub fn body(&self, request: &ModelRequest<'_>) -> Value {
        let image = self.coordinates(request.screen).model();
        let environment = self.environment(request);
        let computer = match self.tool {
            ToolKind::Preview => json!({"type": "computer_use_preview", "display_width": image.width,
                                         "display_height": image.height, "environment": environment.as_str()}),
            ToolKind::Ga => json!({"type": "computer"}),
        };
        let mut tools = vec![computer];
        // Function tools are flat (`{type, name, description, parameters, strict}`). `strict` defaults to true,
        // and strict mode takes only schemas that close every object and require every property: a task's own
        // schemas need not, so strict is off (the toolbox checks every call against the schema anyway).
        // On a browser, navigation is declared in function tools, as OpenAI's browser sample does.
        tools.extend(request.tools.iter().chain(navigation::tools(request).iter()).map(|spec| {
            json!({"type": "function", "name": spec.name, "description": spec.description,
                   "parameters": spec.parameters, "strict": false})
        }));
        // The preview tool's browser environment takes the page's URL with every screenshot (the sample's
        // `current_url`, which the API's safety checks read).
        let current_url = self.tool == ToolKind::Preview && environment == ComputerEnvironment::Browser;
        let summary = if self.tool == ToolKind::Preview { "concise" } else { "auto" };
        let mut body = json!({
            "model": self.settings.model,
            "instructions": wire::SYSTEM_PROMPT,
            "tools": tools,
            "input": input(request, self.settings.config.auto_acknowledge_safety_checks, current_url),
            "reasoning": {"summary": summary},
            "truncation": "auto",
        });
        if let Some(max) = self.settings.max_tokens {
            body["max_output_tokens"] = json!(max);
        }
        if let Some(t) = self.settings.temperature {
            body["temperature"] = json!(t);
        }
        if self.settings.stream {
            body["stream"] = json!(true);
        }
        body
    }
}

fn input_image(image: &ModelImage) -> Value {
    json!({"type": "input_image", "image_url": wire::data_url(image)})
}

fn input_text(text: &str) -> Value {
    json!({"type": "input_text", "text": text})
}

/// An 8×8 grey PNG for `computer_call_output`s whose screenshot the context policy dropped.
fn placeholder_image() -> &'static ModelImage {
    static IMAGE: OnceLock<ModelImage> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let size = Size::new(8, 8);
        let bytes = agentd_computer::Frame::from_rgb(size, vec![128; 8 * 8 * 3])
            .ok()
            .and_then(|frame| crate::screen::image::encode_png(&frame).ok())
            .unwrap_or_default();
        ModelImage::new(size, crate::screen::image::PNG, bytes.into())
    })
}

/// Output items of a past turn: verbatim when kept, rebuilt otherwise.
fn output_items(turn: &ModelTurn) -> Vec<Value> {
    if let Some(Value::Array(items)) = &turn.raw {
        return items.clone();
    }
    let mut items = Vec::new();
    if !turn.text.is_empty() {
        items.push(json!({"type": "message", "role": "assistant",
                          "content": [{"type": "output_text", "text": turn.text, "annotations": []}]}));
    }
    for call in &turn.calls {
        match &call.kind {
            CallKind::Function { name, arguments } => items.push(json!({"type": "function_call", "call_id": call.id,
                "name": name, "arguments": arguments.to_string()})),
            CallKind::Computer { actions } => items.push(json!({"type": "computer_call", "call_id": call.id,
                "id": call.id, "status": "completed", "pending_safety_checks": [], "actions": actions})),
        }
    }
    items
}

/// The `input` array of a request; with `current_url`, every `computer_call_output` carries the page's URL.
pub fn input(request: &ModelRequest<'_>, auto_acknowledge: bool, current_url: bool) -> Vec<Value> {
    let _ = auto_acknowledge; // Checks are acknowledged when replayed with results, approved or automatic.
    let (first, slots) = wire::layout(request);
    let mut items = Vec::new();
    let mut content = vec![input_text(&wire::task_text(request))];
    content.extend(first.notes.iter().map(|n| input_text(n)));
    content.push(match first.image {
        Some(image) => input_image(image),
        None => input_text(wire::placeholder()),
    });
    items.push(json!({"role": "user", "content": content}));
    for slot in &slots {
        let outputs = output_items(&slot.exchange.turn);
        let mut answers = Vec::new();
        let mut follow_up = Vec::new();
        let mut screenshot_sent = false;
        for item in &outputs {
            let Some(call_id) = wire::str_of(item, "call_id") else { continue };
            let result = wire::result_for(&slot.exchange.results, call_id);
            match item.get("type").and_then(Value::as_str) {
                Some("computer_call") => {
                    let image = slot.next.image.unwrap_or_else(|| placeholder_image());
                    screenshot_sent |= slot.next.image.is_some();
                    let mut answer = json!({"type": "computer_call_output", "call_id": call_id,
                        "output": {"type": "computer_screenshot", "image_url": wire::data_url(image)}});
                    if current_url && let Some(page) = slot.next.page {
                        answer["output"]["current_url"] = json!(page.url);
                    }
                    if let Some(checks) = item.get("pending_safety_checks").and_then(Value::as_array)
                        && !checks.is_empty()
                    {
                        answer["acknowledged_safety_checks"] = Value::Array(checks.clone());
                    }
                    answers.push(answer);
                    if !result.ok {
                        follow_up.push(input_text(&format!("The computer action failed: {}", result.message)));
                    } else if result.message != "ok" && !result.message.is_empty() {
                        follow_up.push(input_text(&result.message));
                    }
                    if let Some(image) = &result.image {
                        follow_up.push(input_image(image));
                    }
                }
                Some("function_call") => {
                    let output = json!({"ok": result.ok, "message": result.message}).to_string();
                    answers.push(json!({"type": "function_call_output", "call_id": call_id, "output": output}));
                }
                _ => {}
            }
        }
        items.extend(outputs);
        items.extend(answers);
        follow_up.extend(slot.next.notes.iter().map(|n| input_text(n)));
        if !screenshot_sent {
            follow_up.push(match slot.next.image {
                Some(image) => input_image(image),
                None => input_text(wire::placeholder()),
            });
        }
        if !follow_up.is_empty() {
            items.push(json!({"role": "user", "content": follow_up}));
        }
    }
    items
}

/// Maps one action object of a `computer_call` to ours.
pub fn action(value: &Value) -> Result<Vec<Action>, String> {
    let kind = wire::str_of(value, "type").ok_or("an action without `type`")?;
    let xy = || -> Result<Point, String> {
        Ok(Point::new(
            wire::int(value.get("x")).ok_or_else(|| format!("`{kind}` needs x"))?,
            wire::int(value.get("y")).ok_or_else(|| format!("`{kind}` needs y"))?,
        ))
    };
    let keys = || -> Vec<String> {
        value
            .get("keys")
            .and_then(Value::as_array)
            .map(|k| k.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default()
    };
    Ok(vec![match kind {
        "click" => {
            let p = xy()?;
            let button = match wire::str_of(value, "button").unwrap_or("left") {
                "left" => MouseButton::Left,
                "right" => MouseButton::Right,
                "wheel" | "middle" => MouseButton::Middle,
                "back" => MouseButton::Back,
                "forward" => MouseButton::Forward,
                other => return Err(format!("unknown button {other:?}")),
            };
            Action::Click { x: p.x, y: p.y, button, keys: keys() }
        }
        "double_click" => {
            let p = xy()?;
            Action::DoubleClick { x: p.x, y: p.y }
        }
        "drag" => {
            let path = value.get("path").and_then(Value::as_array).ok_or("`drag` needs `path`")?;
            let path: Option<Vec<Point>> =
                path.iter().map(|p| Some(Point::new(wire::int(p.get("x"))?, wire::int(p.get("y"))?))).collect();
            Action::Drag {
                path: path.ok_or("`drag` path points need x and y")?,
                button: MouseButton::Left,
                keys: keys(),
            }
        }
        "keypress" => Action::Keypress { keys: keys() },
        "move" => {
            let p = xy()?;
            Action::Move { x: p.x, y: p.y, keys: keys() }
        }
        "screenshot" => Action::Screenshot {},
        "scroll" => {
            let p = xy()?;
            Action::Scroll {
                x: p.x,
                y: p.y,
                scroll_x: wire::int(value.get("scroll_x")).unwrap_or(0),
                scroll_y: wire::int(value.get("scroll_y")).unwrap_or(0),
                keys: keys(),
            }
        }
        "type" => Action::Type { text: wire::str_of(value, "text").ok_or("`type` needs `text`")?.to_string() },
        "wait" => Action::Wait { duration_ms: WAIT_MS },
        other => return Err(format!("unknown action type {other:?}")),
    }])
}

/// Reads a Response object (`output`, `usage`) into a turn.
pub fn parse_response(
    response: &Value,
    price: Option<&crate::config::Price>,
    auto_acknowledge: bool,
) -> Result<ModelTurn, AttemptError> {
    let output = response
        .get("output")
        .and_then(Value::as_array)
        .ok_or_else(|| AttemptError::protocol(format!("no `output` array in {}", wire::describe_json(response))))?;
    let mut turn = ModelTurn::default();
    let mut checks = Vec::new();
    for item in output {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                for part in item.get("content").and_then(Value::as_array).into_iter().flatten() {
                    let text = wire::str_of(part, "text").or_else(|| wire::str_of(part, "refusal"));
                    if let Some(text) = text {
                        if !turn.text.is_empty() {
                            turn.text.push('\n');
                        }
                        turn.text.push_str(text);
                    }
                }
            }
            Some("reasoning") => {
                for part in item.get("summary").and_then(Value::as_array).into_iter().flatten() {
                    if let Some(text) = wire::str_of(part, "text") {
                        turn.thinking.push_str(text);
                    }
                }
            }
            Some("computer_call") => {
                let call_id = wire::str_of(item, "call_id")
                    .ok_or_else(|| AttemptError::protocol("computer_call without call_id"))?;
                let list: Vec<&Value> = match (item.get("actions"), item.get("action")) {
                    (Some(Value::Array(actions)), _) => actions.iter().collect(),
                    (_, Some(action)) if action.is_object() => vec![action],
                    _ => Vec::new(),
                };
                let mapped: Result<Vec<Vec<Action>>, String> = list.into_iter().map(action).collect();
                turn.calls.push(match mapped {
                    Ok(actions) if !actions.is_empty() => wire::computer(call_id.to_string(), actions.concat()),
                    Ok(_) => wire::unsupported(call_id.to_string(), "a computer_call without actions", item.clone()),
                    Err(why) => wire::unsupported(call_id.to_string(), &why, item.clone()),
                });
                if let Some(pending) = item.get("pending_safety_checks").and_then(Value::as_array) {
                    checks.extend(pending.iter().cloned());
                }
            }
            Some("function_call") => {
                let call_id = wire::str_of(item, "call_id")
                    .ok_or_else(|| AttemptError::protocol("function_call without call_id"))?;
                let name = wire::str_of(item, "name").unwrap_or_default().to_string();
                let arguments = match item.get("arguments") {
                    Some(Value::String(text)) => serde_json::from_str(text).unwrap_or(Value::String(text.clone())),
                    Some(other) => other.clone(),
                    None => json!({}),
                };
                turn.calls.push(ToolCall { id: call_id.to_string(), kind: CallKind::Function { name, arguments } });
            }
            _ => {}
        }
    }
    if !checks.is_empty() && !auto_acknowledge {
        let reason = checks
            .iter()
            .map(|c| {
                wire::str_of(c, "message").or_else(|| wire::str_of(c, "code")).unwrap_or("safety check").to_string()
            })
            .collect::<Vec<_>>()
            .join("; ");
        turn.approval = Some(ApprovalRequest { reason, details: json!({"pending_safety_checks": checks}) });
    }
    turn.raw = Some(Value::Array(output.clone()));
    turn.usage = wire::with_cost(usage(response.get("usage").unwrap_or(&Value::Null)), price);
    Ok(turn)
}

pub fn usage(u: &Value) -> Usage {
    Usage {
        input_tokens: wire::u64_of(u, "/input_tokens"),
        output_tokens: wire::u64_of(u, "/output_tokens"),
        cache_read_tokens: wire::u64_of(u, "/input_tokens_details/cached_tokens"),
        cache_write_tokens: wire::u64_of(u, "/input_tokens_details/cache_write_tokens"),
        cost_usd: 0.0,
    }
}

/// Decodes a Responses response: a Response JSON body, or the stream up to `response.completed`.
pub struct ResponseDecoder<'a> {
    deltas: DeltaSink<'a>,
    price: Option<crate::config::Price>,
    auto_acknowledge: bool,
    redact: &'a (dyn Fn(&str) -> String + Send + Sync),
    response: Option<Value>,
    /// Output item id → the call id the turn will give the call (argument deltas name the item).
    call_ids: std::collections::HashMap<String, String>,
    /// Responses begun so far (one per attempt that got a 2xx); from the second on, `Delta::Restart`.
    responses: u32,
}

impl<'a> ResponseDecoder<'a> {
    pub fn new(
        deltas: DeltaSink<'a>,
        price: Option<crate::config::Price>,
        auto_acknowledge: bool,
        redact: &'a (dyn Fn(&str) -> String + Send + Sync),
    ) -> Self {
        Self {
            deltas,
            price,
            auto_acknowledge,
            redact,
            response: None,
            call_ids: std::collections::HashMap::new(),
            responses: 0,
        }
    }

    fn failed(&self, response: &Value) -> AttemptError {
        let error = response.get("error").cloned().unwrap_or(Value::Null);
        stream_error("openai", &json!({ "error": error }), self.redact)
    }
}

impl Decoder for ResponseDecoder<'_> {
    type Output = ModelTurn;

    fn start(&mut self) {
        self.response = None;
        self.call_ids.clear();
        self.responses += 1;
        if self.responses > 1 {
            (self.deltas)(Delta::Restart);
        }
    }

    fn event(&mut self, event: SseEvent) -> Result<(), AttemptError> {
        if event.data.trim() == "[DONE]" {
            return Ok(());
        }
        let data: Value = serde_json::from_str(&event.data)
            .map_err(|e| AttemptError::protocol(format!("stream event is not JSON: {e}")))?;
        match data.get("type").and_then(Value::as_str).unwrap_or_default() {
            "response.output_text.delta" | "response.refusal.delta" => {
                if let Some(text) = wire::str_of(&data, "delta") {
                    (self.deltas)(Delta::Text(text));
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                if let Some(text) = wire::str_of(&data, "delta") {
                    (self.deltas)(Delta::Thinking(text));
                }
            }
            "response.output_item.added" => {
                let item = data.get("item").unwrap_or(&Value::Null);
                let name = match wire::str_of(item, "type") {
                    Some("function_call") => wire::str_of(item, "name"),
                    Some("computer_call") => Some("computer"),
                    _ => None,
                };
                if let (Some(name), Some(call_id)) = (name, wire::str_of(item, "call_id")) {
                    (self.deltas)(Delta::ToolCall { id: call_id, name });
                    if let Some(item_id) = wire::str_of(item, "id") {
                        self.call_ids.insert(item_id.to_string(), call_id.to_string());
                    }
                    // Arguments an added item already carries (the documented stream sends "" and deltas).
                    if let Some(arguments) = wire::str_of(item, "arguments").filter(|a| !a.is_empty()) {
                        (self.deltas)(Delta::ToolArgs { id: call_id, delta: arguments });
                    }
                }
            }
            "response.function_call_arguments.delta" => {
                let call_id = wire::str_of(&data, "item_id").and_then(|item| self.call_ids.get(item));
                if let (Some(id), Some(delta)) = (call_id, wire::str_of(&data, "delta")) {
                    (self.deltas)(Delta::ToolArgs { id, delta });
                }
            }
            "response.completed" | "response.incomplete" => {
                self.response = data.get("response").cloned();
            }
            "response.failed" => return Err(self.failed(data.get("response").unwrap_or(&Value::Null))),
            "error" => return Err(stream_error("openai", &json!({"error": data}), self.redact)),
            _ => {}
        }
        Ok(())
    }

    fn body(&mut self, body: &[u8]) -> Result<(), AttemptError> {
        let response: Value =
            serde_json::from_slice(body).map_err(|e| AttemptError::protocol(format!("response is not JSON: {e}")))?;
        if response.get("status").and_then(Value::as_str) == Some("failed") {
            return Err(self.failed(&response));
        }
        self.response = Some(response);
        Ok(())
    }

    fn finish(&mut self) -> Result<ModelTurn, AttemptError> {
        let response =
            self.response.take().ok_or_else(|| AttemptError::retry("the stream ended before response.completed"))?;
        parse_response(&response, self.price.as_ref(), self.auto_acknowledge)
    }
}

#[async_trait]
impl Model for OpenAiModel {
    fn model_id(&self) -> Option<&str> {
        Some(&self.settings.model)
    }

    fn describe(&self) -> String {
        let tool = match self.tool {
            ToolKind::Preview => "computer_use_preview",
            ToolKind::Ga => "computer",
        };
        format!("openai {} ({tool})", self.settings.model)
    }

    fn coordinates(&self, screen: Size) -> CoordinateMap {
        CoordinateMap::scaled(screen, wire::recommended_image_size(screen))
    }

    fn context_chunk(&self) -> u32 {
        self.settings.config.screenshot_chunk.unwrap_or(1).max(1)
    }

    fn context_window(&self) -> Option<u64> {
        self.settings.config.context_window
    }

    async fn next_turn(&self, request: ModelRequest<'_>, deltas: DeltaSink<'_>) -> Result<ModelTurn, ModelError> {
        let http = self.build_request(&request);
        let endpoint = &self.settings.endpoint;
        let redact = |t: &str| endpoint.redact(t);
        let auto = self.settings.config.auto_acknowledge_safety_checks;
        let mut decoder = ResponseDecoder::new(deltas, self.settings.price, auto, &redact);
        let mut turn = endpoint.execute(&http, &mut decoder).await?;
        navigation::claim(&request, &mut turn);
        Ok(turn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_keys_of_drag_move_and_scroll() {
        assert_eq!(
            action(&json!({"type":"scroll","x":5,"y":6,"scroll_x":0,"scroll_y":200,"keys":["CTRL"]})).unwrap(),
            vec![Action::Scroll { x: 5, y: 6, scroll_x: 0, scroll_y: 200, keys: vec!["CTRL".into()] }]
        );
        assert_eq!(
            action(&json!({"type":"drag","path":[{"x":1,"y":2},{"x":3,"y":4}],"keys":["SHIFT"]})).unwrap(),
            vec![Action::Drag {
                path: vec![Point::new(1, 2), Point::new(3, 4)],
                button: MouseButton::Left,
                keys: vec!["SHIFT".into()]
            }]
        );
        assert_eq!(
            action(&json!({"type":"move","x":7,"y":8,"keys":["ALT"]})).unwrap(),
            vec![Action::Move { x: 7, y: 8, keys: vec!["ALT".into()] }]
        );
    }

    #[test]
    fn actions_of_both_shapes() {
        assert_eq!(
            action(&json!({"type":"click","button":"left","keys":null,"x":126,"y":111})).unwrap(),
            vec![Action::Click { x: 126, y: 111, button: MouseButton::Left, keys: vec![] }]
        );
        assert_eq!(
            action(&json!({"type":"click","button":"wheel","x":1,"y":2})).unwrap()[0],
            Action::Click { x: 1, y: 2, button: MouseButton::Middle, keys: vec![] }
        );
        assert_eq!(
            action(&json!({"type":"keypress","keys":["CTRL","O"]})).unwrap(),
            vec![Action::Keypress { keys: vec!["CTRL".into(), "O".into()] }]
        );
        assert_eq!(
            action(&json!({"type":"drag","path":[{"x":1,"y":2},{"x":3,"y":4}]})).unwrap(),
            vec![Action::Drag {
                path: vec![Point::new(1, 2), Point::new(3, 4)],
                button: Default::default(),
                keys: Vec::new()
            }]
        );
        assert_eq!(
            action(&json!({"type":"scroll","x":5,"y":6,"scroll_x":0,"scroll_y":-300})).unwrap(),
            vec![Action::Scroll { x: 5, y: 6, scroll_x: 0, scroll_y: -300, keys: Vec::new() }]
        );
        assert_eq!(action(&json!({"type":"wait"})).unwrap(), vec![Action::Wait { duration_ms: WAIT_MS }]);
        assert!(action(&json!({"type":"click"})).is_err());
        assert!(action(&json!({"type":"levitate"})).is_err());
    }

    #[test]
    fn safety_checks_become_an_approval_unless_automatic() {
        let response = json!({"output": [{"type": "computer_call", "id": "cu_1", "call_id": "call_1", "status": "completed",
            "action": {"type": "click", "x": 1, "y": 2, "button": "left"},
            "pending_safety_checks": [{"id": "cu_sc_1", "code": "malicious_instructions", "message": "Check the page."}]}],
            "usage": {"input_tokens": 10, "output_tokens": 2, "input_tokens_details": {"cached_tokens": 4}}});
        let turn = parse_response(&response, None, false).unwrap();
        let approval = turn.approval.unwrap();
        assert_eq!(approval.reason, "Check the page.");
        assert_eq!(turn.usage.cache_read_tokens, 4);
        assert!(parse_response(&response, None, true).unwrap().approval.is_none());
    }
}
