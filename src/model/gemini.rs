//! The Gemini adapter: `generateContent` / `streamGenerateContent?alt=sse` with the `computerUse` tool.
//!
//! Follows the Gemini API computer-use guide (ai.google.dev/gemini-api/docs/computer-use, revision of
//! 2026-02-26), the `ComputerUse`, `FunctionResponse.parts` and `excluded_predefined_functions` fields of the
//! googleapis proto at commit c288189, and the reference loop google/computer-use-preview c0e60499 `agent.py`
//! (predefined functions, 0–999 grid, `safety_decision` → `safety_acknowledgement`, screenshots kept in the
//! last turns only). Both predefined sets are understood: the 2.5/3.x legacy set (`click_at`, `type_text_at`,
//! `scroll_at`, …) and the newer one of google-gemini/computer-use-preview c93bb2d8 (`click`, `type`,
//! `hotkey`, …).
//!
//! Coordinates are a 1000 × 1000 grid (0–999) whatever the image size; [`CoordinateMap::normalized`] converts
//! them, values past 999 are clamped first (they do occur). The browser functions (`open_web_browser`,
//! `navigate`, `search`, `go_back`, `go_forward`) are carried out on a browser computer, and every function
//! response then carries the page's `url`, as the reference loop sends it; on a desktop they are excluded in
//! the request and, when a model sends them anyway, answered with an error.
//! Our function tools (`task_completion`, declared tools) go in `functionDeclarations` with their JSON Schema
//! as `parametersJsonSchema` (the API reference's `FunctionDeclaration`; `parameters` only takes an OpenAPI
//! subset). Every `functionCall` of a model turn is answered by one `functionResponse` part, in order, in the
//! next user turn (`response: {"output": …}`, or `{"error": …}` for a failed call: the keys the API reference
//! names); the screenshot rides in the last one's `parts`. Model turns are replayed verbatim from
//! [`ModelTurn::raw`], which keeps their `thoughtSignature`s. A call carrying `safety_decision.decision ==
//! "require_confirmation"` becomes [`ModelTurn::approval`]; once the turn is replayed with results (a human
//! approved), its response carries `"safety_acknowledgement": "true"`.

use agentd_computer::{Action, MouseButton, Point, Size, keys::split_chord};
use async_trait::async_trait;
use serde_json::{Map, Value, json};

use super::http::{AttemptError, Decoder, HttpRequest, SseEvent};
use super::shared::Settings;
use super::wire::{self, Screen};
use super::{
    ApprovalRequest, CallKind, Delta, DeltaSink, Model, ModelError, ModelImage, ModelRequest, ModelTurn, ToolCall,
    Usage,
};
use crate::config::ComputerEnvironment;
use crate::screen::coords::{CoordinateMap, fit_within};

/// The grid Gemini's coordinates live on.
pub const GRID: u32 = 1000;

/// Functions of a browser that a desktop has no use for.
pub const EXCLUDED: [&str; 5] = ["open_web_browser", "search", "navigate", "go_back", "go_forward"];

/// Where `search` goes: the search engine's start page, as the reference's browser computer does.
pub const SEARCH_URL: &str = "https://www.google.com/";

/// Grid units `scroll_document` moves.
const DOCUMENT_SCROLL: i32 = 800;

pub struct GeminiModel {
    settings: Settings,
    environment: &'static str,
}

impl GeminiModel {
    pub fn new(settings: Settings) -> Result<Self, ModelError> {
        // Gemini's computer-use tool has one environment.
        let environment = match settings.config.environment.unwrap_or(ComputerEnvironment::Browser) {
            ComputerEnvironment::Browser => "ENVIRONMENT_BROWSER",
            other => {
                return Err(ModelError::Config(format!(
                    "gemini: environment {:?}: the Gemini computer-use tool has only `browser`",
                    other.as_str()
                )));
            }
        };
        Ok(Self { settings, environment })
    }

    pub fn build_request(&self, request: &ModelRequest<'_>) -> HttpRequest {
        let (method, stream) =
            if self.settings.stream { ("streamGenerateContent?alt=sse", true) } else { ("generateContent", false) };
        HttpRequest {
            url: format!("{}/models/{}:{method}", self.settings.base_url, self.settings.model),
            headers: Vec::new(),
            body: serde_json::to_vec(&self.body(request)).unwrap_or_default(),
            stream,
        }
    }

    pub fn body(&self, request: &ModelRequest<'_>) -> Value {
        let declarations: Vec<Value> = request
            .tools
            .iter()
            .map(|spec| {
                json!({"name": spec.name, "description": spec.description,
                       "parametersJsonSchema": json_schema(&spec.parameters)})
            })
            .collect();
        let mut generation = json!({});
        if let Some(max) = self.settings.max_tokens {
            generation["maxOutputTokens"] = json!(max);
        }
        if let Some(t) = self.settings.temperature {
            generation["temperature"] = json!(t);
        }
        let mut computer_use = json!({"environment": self.environment});
        if !request.browser {
            computer_use["excludedPredefinedFunctions"] = json!(EXCLUDED);
        }
        json!({
            "systemInstruction": {"parts": [{"text": wire::SYSTEM_PROMPT}]},
            "contents": contents(request),
            "tools": [
                {"computerUse": computer_use},
                {"functionDeclarations": declarations},
            ],
            "generationConfig": generation,
        })
    }
}

/// A tool's schema as `parametersJsonSchema`: the JSON Schema as declared. `parameters` takes Gemini's own
/// `Schema` (a select subset of OpenAPI 3.0: no `additionalProperties`, `const`, `$ref`, type arrays, …) and
/// rejects what it does not know; `parametersJsonSchema` (mutually exclusive with it) takes JSON Schema, so a
/// task's own schemas pass unchanged. Only the root's `$schema` (which dialect: nothing for the model) is left
/// out.
fn json_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            Value::Object(map.iter().filter(|(k, _)| *k != "$schema").map(|(k, v)| (k.clone(), v.clone())).collect())
        }
        other => other.clone(),
    }
}

fn inline(image: &ModelImage) -> Value {
    json!({"inlineData": {"mimeType": image.media_type, "data": image.base64()}})
}

fn screen_parts(screen: Screen<'_>) -> Vec<Value> {
    let mut parts: Vec<Value> = screen.notes.iter().map(|n| json!({"text": n})).collect();
    parts.push(match screen.image {
        Some(image) => inline(image),
        None => json!({"text": wire::placeholder()}),
    });
    parts
}

fn model_content(turn: &ModelTurn) -> Value {
    if let Some(raw) = &turn.raw
        && raw.is_object()
    {
        return raw.clone();
    }
    let mut parts = Vec::new();
    if !turn.text.is_empty() {
        parts.push(json!({"text": turn.text}));
    }
    for call in &turn.calls {
        if let CallKind::Function { name, arguments } = &call.kind {
            parts.push(json!({"functionCall": {"name": name, "args": arguments}}));
        }
    }
    if parts.is_empty() {
        parts.push(json!({"text": "(no reply)"}));
    }
    json!({"role": "model", "parts": parts})
}

/// The `contents` of a request.
pub fn contents(request: &ModelRequest<'_>) -> Vec<Value> {
    let (first, slots) = wire::layout(request);
    let mut first_parts = vec![json!({"text": wire::task_text(request)})];
    first_parts.extend(screen_parts(first));
    let mut contents = vec![json!({"role": "user", "parts": first_parts})];
    for slot in &slots {
        let content = model_content(&slot.exchange.turn);
        let calls: Vec<&Value> = content
            .get("parts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("functionCall"))
            .collect();
        let mut parts = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            let id = call_id(call, slot.exchange.step, i);
            let result = wire::result_for(&slot.exchange.results, &id);
            let mut response = Map::new();
            if result.ok {
                response.insert("output".into(), json!(result.message));
            } else {
                response.insert("error".into(), json!(result.message));
            }
            if needs_confirmation(call) {
                response.insert("safety_acknowledgement".into(), json!("true"));
            }
            // On a browser every response names the page after the turn (the API requires the URL).
            if request.browser {
                response.insert("url".into(), json!(slot.next.page.map_or("", |p| p.url.as_str())));
            }
            let last = i + 1 == calls.len();
            if last && !slot.next.notes.is_empty() {
                response.insert("note".into(), json!(slot.next.notes.join("\n")));
            }
            let mut images: Vec<Value> = result.image.iter().map(inline).collect();
            if last {
                match slot.next.image {
                    Some(image) => images.push(inline(image)),
                    None => {
                        response.insert("screenshot".into(), json!(wire::placeholder()));
                    }
                }
            }
            let mut function_response = json!({
                "name": call.get("name").cloned().unwrap_or(json!("")),
                "response": Value::Object(response),
            });
            if let Some(id) = call.get("id") {
                function_response["id"] = id.clone();
            }
            if !images.is_empty() {
                function_response["parts"] = Value::Array(images);
            }
            parts.push(json!({"functionResponse": function_response}));
        }
        if calls.is_empty() {
            parts.extend(screen_parts(slot.next));
        }
        contents.push(content);
        contents.push(json!({"role": "user", "parts": parts}));
    }
    contents
}

/// Our id of the `index`th call of a turn: the model's own `id` when it sent one.
fn call_id(call: &Value, step: u32, index: usize) -> String {
    match call.get("id").and_then(Value::as_str) {
        Some(id) if !id.is_empty() => id.to_string(),
        _ => format!("gemini_{step}_{index}"),
    }
}

fn needs_confirmation(call: &Value) -> bool {
    call.pointer("/args/safety_decision/decision").and_then(Value::as_str) == Some("require_confirmation")
}

/// A grid coordinate, clamped to 0–999.
fn grid(args: &Value, key: &str) -> Result<i32, String> {
    wire::int(args.get(key)).map(|v| v.clamp(0, GRID as i32 - 1)).ok_or_else(|| format!("missing `{key}`"))
}

fn direction(args: &Value, magnitude: i32) -> Result<(i32, i32), String> {
    Ok(match wire::str_of(args, "direction").unwrap_or("down") {
        "up" => (0, -magnitude),
        "down" => (0, magnitude),
        "left" => (-magnitude, 0),
        "right" => (magnitude, 0),
        other => return Err(format!("unknown direction {other:?}")),
    })
}

/// `navigate`'s URL as the reference's browser computer opens it: `https://` added when no scheme is given.
fn navigable(url: &str) -> String {
    let url = url.trim();
    if url.contains("://") || url.starts_with("about:") || url.starts_with("data:") {
        url.to_string()
    } else {
        format!("https://{url}")
    }
}

/// Maps one predefined function call to actions (in grid coordinates); the browser functions only when
/// `browser` (the computer is a browser).
pub fn function_actions(name: &str, args: &Value, browser: bool) -> Result<Vec<Action>, String> {
    let at = || -> Result<Point, String> { Ok(Point::new(grid(args, "x")?, grid(args, "y")?)) };
    let click = |button| -> Result<Vec<Action>, String> {
        let p = at()?;
        Ok(vec![Action::Click { x: p.x, y: p.y, button, keys: Vec::new() }])
    };
    let flag = |key: &str, default: bool| args.get(key).and_then(Value::as_bool).unwrap_or(default);
    Ok(match name {
        "click_at" | "click" => click(MouseButton::Left)?,
        "right_click" => click(MouseButton::Right)?,
        "middle_click" => click(MouseButton::Middle)?,
        "double_click" => {
            let p = at()?;
            vec![Action::DoubleClick { x: p.x, y: p.y }]
        }
        "triple_click" => {
            let p = at()?;
            vec![Action::TripleClick { x: p.x, y: p.y }]
        }
        "hover_at" | "move" => {
            let p = at()?;
            vec![Action::Move { x: p.x, y: p.y, keys: Vec::new() }]
        }
        "mouse_down" | "mouse_up" => {
            let mut out = Vec::new();
            if let Ok(p) = at() {
                out.push(Action::Move { x: p.x, y: p.y, keys: Vec::new() });
            }
            let button = MouseButton::Left;
            out.push(if name == "mouse_down" {
                Action::MouseDown { button, keys: Vec::new() }
            } else {
                Action::MouseUp { button }
            });
            out
        }
        "type_text_at" | "type" => {
            let text = wire::str_of(args, "text").ok_or("missing `text`")?.to_string();
            let mut out = Vec::new();
            let positioned = name == "type_text_at" || args.get("x").is_some();
            if positioned {
                let p = at()?;
                out.push(Action::Click { x: p.x, y: p.y, button: MouseButton::Left, keys: Vec::new() });
            }
            if name == "type_text_at" && flag("clear_before_typing", true) {
                out.push(Action::Keypress { keys: vec!["ctrl".into(), "a".into()] });
                out.push(Action::Keypress { keys: vec!["Delete".into()] });
            }
            out.push(Action::Type { text });
            if flag("press_enter", name == "type_text_at") {
                out.push(Action::Keypress { keys: vec!["Return".into()] });
            }
            out
        }
        "key_combination" | "press_key" => {
            let keys = wire::str_of(args, "keys").or_else(|| wire::str_of(args, "key")).ok_or("missing `keys`")?;
            vec![Action::Keypress { keys: split_chord(keys) }]
        }
        "hotkey" => {
            let keys = args.get("keys").and_then(Value::as_array).ok_or("missing `keys`")?;
            vec![Action::Keypress { keys: keys.iter().filter_map(Value::as_str).map(str::to_string).collect() }]
        }
        "scroll_document" => {
            let (scroll_x, scroll_y) = direction(args, DOCUMENT_SCROLL)?;
            vec![Action::Scroll { x: 500, y: 500, scroll_x, scroll_y, keys: Vec::new() }]
        }
        "scroll_at" | "scroll" => {
            let p = at()?;
            let key = if name == "scroll" { "magnitude_in_pixels" } else { "magnitude" };
            let default = if name == "scroll" { 300 } else { DOCUMENT_SCROLL };
            let magnitude = wire::int(args.get(key)).unwrap_or(default).clamp(0, GRID as i32);
            let (scroll_x, scroll_y) = direction(args, magnitude)?;
            vec![Action::Scroll { x: p.x, y: p.y, scroll_x, scroll_y, keys: Vec::new() }]
        }
        "drag_and_drop" => {
            let from = at()?;
            let to = Point::new(grid(args, "destination_x")?, grid(args, "destination_y")?);
            vec![Action::Drag { path: vec![from, to], button: Default::default(), keys: Vec::new() }]
        }
        "wait_5_seconds" => vec![Action::Wait { duration_ms: 5000 }],
        "wait" => vec![Action::Wait { duration_ms: wire::seconds_ms(args.get("seconds"), 1000) }],
        "take_screenshot" => vec![Action::Screenshot {}],
        // The browser is open already: the answer is its page and screenshot.
        "open_web_browser" if browser => vec![Action::Screenshot {}],
        "navigate" if browser => {
            vec![Action::Navigate { url: navigable(wire::str_of(args, "url").ok_or("missing `url`")?) }]
        }
        "search" if browser => vec![Action::Navigate { url: SEARCH_URL.to_string() }],
        "go_back" if browser => vec![Action::Back {}],
        "go_forward" if browser => vec![Action::Forward {}],
        other => return Err(format!("{other} is not available on this desktop")),
    })
}

/// Reads a candidate's `content` and the `usageMetadata` into a turn. `declared` are our own function tools.
pub fn parse_content(
    content: &Value,
    usage_metadata: &Value,
    step: u32,
    declared: &[&str],
    browser: bool,
    price: Option<&crate::config::Price>,
) -> Result<ModelTurn, AttemptError> {
    let parts = content
        .get("parts")
        .and_then(Value::as_array)
        .ok_or_else(|| AttemptError::protocol(format!("no `parts` in {}", wire::describe_json(content))))?;
    let mut turn = ModelTurn::default();
    let mut confirmations = Vec::new();
    let mut index = 0;
    for part in parts {
        if let Some(text) = wire::str_of(part, "text") {
            if part.get("thought").and_then(Value::as_bool) == Some(true) {
                turn.thinking.push_str(text);
            } else {
                turn.text.push_str(text);
            }
        }
        if let Some(call) = part.get("functionCall") {
            let id = call_id(call, step, index);
            index += 1;
            let name = wire::str_of(call, "name").unwrap_or_default();
            let args = call.get("args").cloned().unwrap_or_else(|| json!({}));
            if needs_confirmation(call) {
                let explanation = call.pointer("/args/safety_decision/explanation").and_then(Value::as_str);
                confirmations.push(explanation.unwrap_or("the model asks for confirmation").to_string());
            }
            turn.calls.push(if declared.contains(&name) {
                ToolCall { id, kind: CallKind::Function { name: name.to_string(), arguments: args } }
            } else {
                match function_actions(name, &args, browser) {
                    Ok(actions) => wire::computer(id, actions),
                    Err(why) => wire::unsupported(id, &why, args),
                }
            });
        }
    }
    if !confirmations.is_empty() {
        turn.approval = Some(ApprovalRequest {
            reason: confirmations.join("; "),
            details: json!({"safety_decision": "require_confirmation"}),
        });
    }
    let mut raw = content.clone();
    if raw.get("role").is_none() {
        raw["role"] = json!("model");
    }
    turn.raw = Some(raw);
    turn.usage = wire::with_cost(usage(usage_metadata), price);
    Ok(turn)
}

pub fn usage(u: &Value) -> Usage {
    Usage {
        input_tokens: wire::u64_of(u, "/promptTokenCount"),
        output_tokens: wire::u64_of(u, "/candidatesTokenCount") + wire::u64_of(u, "/thoughtsTokenCount"),
        cache_read_tokens: wire::u64_of(u, "/cachedContentTokenCount"),
        cache_write_tokens: 0,
        cost_usd: 0.0,
    }
}

/// Decodes `generateContent` bodies and `streamGenerateContent` chunks (each a partial response).
pub struct ContentDecoder<'a> {
    deltas: DeltaSink<'a>,
    step: u32,
    declared: Vec<String>,
    browser: bool,
    price: Option<crate::config::Price>,
    parts: Vec<Value>,
    usage: Value,
    finish_reason: Option<String>,
    blocked: Option<String>,
    /// Responses begun so far (one per attempt that got a 2xx); from the second on, `Delta::Restart`.
    responses: u32,
}

impl<'a> ContentDecoder<'a> {
    pub fn new(
        deltas: DeltaSink<'a>,
        step: u32,
        declared: Vec<String>,
        browser: bool,
        price: Option<crate::config::Price>,
    ) -> Self {
        Self {
            deltas,
            step,
            declared,
            browser,
            price,
            parts: Vec::new(),
            usage: Value::Null,
            finish_reason: None,
            blocked: None,
            responses: 0,
        }
    }

    fn chunk(&mut self, chunk: &Value, stream: bool) -> Result<(), AttemptError> {
        if let Some(error) = chunk.get("error") {
            return Err(super::http::stream_error("gemini", &json!({ "error": error }), &|t| t.to_string()));
        }
        if let Some(reason) = chunk.pointer("/promptFeedback/blockReason").and_then(Value::as_str) {
            self.blocked = Some(reason.to_string());
        }
        if let Some(u) = chunk.get("usageMetadata") {
            self.usage = u.clone();
        }
        let Some(candidate) = chunk.get("candidates").and_then(Value::as_array).and_then(|c| c.first()) else {
            return Ok(());
        };
        for part in candidate.pointer("/content/parts").and_then(Value::as_array).into_iter().flatten() {
            if stream && let Some(text) = wire::str_of(part, "text") {
                let thought = part.get("thought").and_then(Value::as_bool) == Some(true);
                (self.deltas)(if thought { Delta::Thinking(text) } else { Delta::Text(text) });
            }
            if stream && let Some(call) = part.get("functionCall") {
                // Gemini streams a call whole: its start and all of its arguments at once, under the id
                // `parse_content` gives it (the model's own, else one counted over the response's calls).
                let index = self.parts.iter().filter(|p| p.get("functionCall").is_some()).count();
                let id = call_id(call, self.step, index);
                let name = wire::str_of(call, "name").unwrap_or_default();
                (self.deltas)(Delta::ToolCall { id: &id, name });
                let args = call.get("args").map(Value::to_string).unwrap_or_else(|| "{}".into());
                (self.deltas)(Delta::ToolArgs { id: &id, delta: &args });
            }
            self.parts.push(part.clone());
        }
        if let Some(reason) = candidate.get("finishReason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_string());
        }
        Ok(())
    }
}

impl Decoder for ContentDecoder<'_> {
    type Output = ModelTurn;

    fn start(&mut self) {
        self.parts.clear();
        self.usage = Value::Null;
        self.finish_reason = None;
        self.blocked = None;
        self.responses += 1;
        if self.responses > 1 {
            (self.deltas)(Delta::Restart);
        }
    }

    fn event(&mut self, event: SseEvent) -> Result<(), AttemptError> {
        let chunk: Value = serde_json::from_str(&event.data)
            .map_err(|e| AttemptError::protocol(format!("stream chunk is not JSON: {e}")))?;
        self.chunk(&chunk, true)
    }

    fn body(&mut self, body: &[u8]) -> Result<(), AttemptError> {
        let response: Value =
            serde_json::from_slice(body).map_err(|e| AttemptError::protocol(format!("response is not JSON: {e}")))?;
        self.chunk(&response, false)?;
        if self.finish_reason.is_none() && self.blocked.is_none() {
            self.finish_reason = Some("STOP".into());
        }
        if !self.parts.is_empty() {
            let text: String = self
                .parts
                .iter()
                .filter(|p| p.get("thought").and_then(Value::as_bool) != Some(true))
                .filter_map(|p| wire::str_of(p, "text"))
                .collect();
            if !text.is_empty() {
                (self.deltas)(Delta::Text(&text));
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<ModelTurn, AttemptError> {
        if let Some(reason) = &self.blocked {
            return Err(AttemptError::Fatal(ModelError::Rejected {
                status: 200,
                message: format!("gemini blocked the prompt: {reason}"),
            }));
        }
        let Some(reason) = &self.finish_reason else {
            return Err(AttemptError::retry("the stream ended before a finishReason"));
        };
        if self.parts.is_empty() && reason == "MALFORMED_FUNCTION_CALL" {
            return Err(AttemptError::retry("gemini returned a malformed function call"));
        }
        let content = json!({"role": "model", "parts": self.parts});
        let declared: Vec<&str> = self.declared.iter().map(String::as_str).collect();
        parse_content(&content, &self.usage, self.step, &declared, self.browser, self.price.as_ref())
    }
}

#[async_trait]
impl Model for GeminiModel {
    fn model_id(&self) -> Option<&str> {
        Some(&self.settings.model)
    }

    fn describe(&self) -> String {
        format!("gemini {} (computerUse)", self.settings.model)
    }

    fn coordinates(&self, screen: Size) -> CoordinateMap {
        CoordinateMap::normalized(screen, GRID)
    }

    /// The screen fitted within 1440×900, the guide's recommended size.
    fn image_size(&self, screen: Size) -> Size {
        fit_within(screen, Size::new(1440, 900))
    }

    fn context_chunk(&self) -> u32 {
        self.settings.config.screenshot_chunk.unwrap_or(1).max(1)
    }

    fn context_window(&self) -> Option<u64> {
        Some(self.settings.config.context_window.unwrap_or(128_000))
    }

    async fn next_turn(&self, request: ModelRequest<'_>, deltas: DeltaSink<'_>) -> Result<ModelTurn, ModelError> {
        let http = self.build_request(&request);
        let declared = request.tools.iter().map(|t| t.name.clone()).collect();
        let mut decoder = ContentDecoder::new(deltas, request.step, declared, request.browser, self.settings.price);
        self.settings.endpoint.execute(&http, &mut decoder).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predefined_functions_map_in_grid_space() {
        let f = |name: &str, args: Value| function_actions(name, &args, false);
        assert_eq!(
            f("click_at", json!({"x": 500, "y": 1200})).unwrap(),
            vec![Action::Click { x: 500, y: 999, button: MouseButton::Left, keys: vec![] }]
        );
        assert_eq!(
            f("type_text_at", json!({"x": 371, "y": 470, "text": "fridges", "press_enter": true})).unwrap(),
            vec![
                Action::Click { x: 371, y: 470, button: MouseButton::Left, keys: vec![] },
                Action::Keypress { keys: vec!["ctrl".into(), "a".into()] },
                Action::Keypress { keys: vec!["Delete".into()] },
                Action::Type { text: "fridges".into() },
                Action::Keypress { keys: vec!["Return".into()] },
            ]
        );
        assert_eq!(
            f("key_combination", json!({"keys": "Control+A"})).unwrap(),
            vec![Action::Keypress { keys: vec!["Control".into(), "A".into()] }]
        );
        assert_eq!(
            f("scroll_at", json!({"x": 10, "y": 20, "direction": "up", "magnitude": 400})).unwrap(),
            vec![Action::Scroll { x: 10, y: 20, scroll_x: 0, scroll_y: -400, keys: Vec::new() }]
        );
        assert_eq!(
            f("drag_and_drop", json!({"x": 1, "y": 2, "destination_x": 3, "destination_y": 4})).unwrap(),
            vec![Action::Drag {
                path: vec![Point::new(1, 2), Point::new(3, 4)],
                button: Default::default(),
                keys: Vec::new()
            }]
        );
        assert_eq!(f("wait_5_seconds", json!({})).unwrap(), vec![Action::Wait { duration_ms: 5000 }]);
        assert_eq!(
            f("hotkey", json!({"keys": ["ctrl", "c"]})).unwrap(),
            vec![Action::Keypress { keys: vec!["ctrl".into(), "c".into()] }]
        );
        assert!(f("navigate", json!({"url": "https://example.com"})).is_err());
    }

    #[test]
    fn browser_functions_map_on_a_browser_only() {
        let on = |name: &str, args: Value| function_actions(name, &args, true);
        assert_eq!(
            on("navigate", json!({"url": "example.com/a"})).unwrap(),
            vec![Action::Navigate { url: "https://example.com/a".into() }]
        );
        assert_eq!(
            on("navigate", json!({"url": "http://127.0.0.1:8080/"})).unwrap(),
            vec![Action::Navigate { url: "http://127.0.0.1:8080/".into() }]
        );
        assert_eq!(on("search", json!({})).unwrap(), vec![Action::Navigate { url: SEARCH_URL.into() }]);
        assert_eq!(on("go_back", json!({})).unwrap(), vec![Action::Back {}]);
        assert_eq!(on("go_forward", json!({})).unwrap(), vec![Action::Forward {}]);
        assert_eq!(on("open_web_browser", json!({})).unwrap(), vec![Action::Screenshot {}]);
        assert!(on("navigate", json!({})).is_err());
        for name in EXCLUDED {
            let error = function_actions(name, &json!({"url": "https://example.com"}), false).unwrap_err();
            assert!(error.contains("not available on this desktop"), "{name}: {error}");
        }
    }

    #[test]
    fn confirmation_becomes_an_approval() {
        let content = json!({"role": "model", "parts": [{"functionCall": {"name": "click_at", "args": {"x": 60, "y": 100,
            "safety_decision": {"explanation": "I have encountered a CAPTCHA.", "decision": "require_confirmation"}}},
            "thoughtSignature": "sig"}]});
        let turn = parse_content(&content, &Value::Null, 3, &["task_completion"], false, None).unwrap();
        assert_eq!(turn.approval.unwrap().reason, "I have encountered a CAPTCHA.");
        assert_eq!(turn.calls[0].id, "gemini_3_0");
        assert_eq!(turn.raw.unwrap()["parts"][0]["thoughtSignature"], "sig");
    }
}
