//! The openai-compatible adapter: Chat Completions (`POST {base_url}/chat/completions`) with image content,
//! for vision models served by vLLM, SGLang and similar.
//!
//! Follows the OpenAI Chat Completions shape as vLLM serves it (openai-python e43b4224
//! `chat_completion_*_param.py`: `image_url` content parts with data URLs, `tools` of `type: "function"`,
//! `tool_calls` answered by `role: "tool"` messages in order); images go in a `user` message after the tool
//! messages, since servers handle images inside tool messages poorly. vLLM needs `--enable-auto-tool-choice
//! --tool-call-parser …` for function calling; without it, use `action_format = "ui-tars"`.
//!
//! Two action formats:
//! - `tools` (default): our own function tools — one per action (`click`, `double_click`, `move`, `drag`,
//!   `scroll`, `type_text`, `keypress`, `wait`) plus the loop's `task_completion` — whose JSON Schemas are
//!   generated from the argument types below with schemars;
//! - `ui-tars`: no tools; the model writes `Thought: … Action: click(start_box='(x,y)')` in the UI-TARS
//!   grammar (bytedance/UI-TARS 582f3a7e `codes/ui_tars/prompt.py`, `action_parser.py`), parsed here.
//!
//! Coordinates (`coordinate_space`): `pixels` of the screenshot sent (the screen fitted within WXGA),
//! `relative-1000` (a 0–1000 grid: Qwen3-VL, UI-TARS 1.0), or `smart-resize` (absolute pixels of the image
//! resized to multiples of 28 within 4·28²…16384·28² pixels, as Qwen2.5-VL / UI-TARS-1.5 see it — the image is
//! sent at exactly that size, so the model's space is the image's).

use agentd_computer::{Action, MouseButton, Point, Size, keys::split_chord};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::TASK_COMPLETION;
use super::http::{AttemptError, Decoder, HttpRequest, SseEvent};
use super::shared::Settings;
use super::wire::{self, Screen};
use super::{
    CallKind, DeltaSink, Model, ModelError, ModelImage, ModelRequest, ModelTurn, ToolCall, ToolSpec, Usage, navigation,
};
use crate::screen::coords::{CoordinateMap, fit_within};

/// Scroll distance when the model gives none, in its own units.
const DEFAULT_SCROLL: i32 = 300;

use crate::config::{ActionFormat, CoordinateSpace};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Button {
    Left,
    Right,
    Middle,
}

/// Click a point of the screenshot.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ClickArgs {
    pub x: i32,
    pub y: i32,
    /// Mouse button (default left).
    #[serde(default)]
    pub button: Option<Button>,
}

/// A point of the screenshot.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct PointArgs {
    pub x: i32,
    pub y: i32,
}

/// Press at (x1, y1), move to (x2, y2), release.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct DragArgs {
    pub x1: i32,
    pub y1: i32,
    pub x2: i32,
    pub y2: i32,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Up,
    Down,
    Left,
    Right,
}

/// Scroll with the mouse over (x, y).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ScrollArgs {
    pub x: i32,
    pub y: i32,
    pub direction: Direction,
    /// Distance in the same units as x and y (default 300).
    #[serde(default)]
    pub amount: Option<i32>,
}

/// Type text at the keyboard focus.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct TypeArgs {
    pub text: String,
}

/// Press one key combination, e.g. ["ctrl", "s"] or ["Return"].
#[derive(Debug, Deserialize, JsonSchema)]
pub struct KeypressArgs {
    pub keys: Vec<String>,
}

/// Wait before the next screenshot.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WaitArgs {
    pub seconds: f64,
}

/// The computer function tools, with schemas generated from the argument types.
pub fn computer_tools() -> Vec<(&'static str, &'static str, Value)> {
    fn schema<T: JsonSchema>() -> Value {
        let mut value = serde_json::to_value(schemars::schema_for!(T)).unwrap_or_else(|_| json!({"type": "object"}));
        if let Some(map) = value.as_object_mut() {
            map.remove("$schema");
            map.remove("title");
        }
        value
    }
    vec![
        ("click", "Click a point of the screenshot.", schema::<ClickArgs>()),
        ("double_click", "Double-click a point of the screenshot.", schema::<PointArgs>()),
        ("move", "Move the mouse pointer to a point.", schema::<PointArgs>()),
        ("drag", "Drag with the left button from (x1, y1) to (x2, y2).", schema::<DragArgs>()),
        ("scroll", "Scroll over a point.", schema::<ScrollArgs>()),
        ("type_text", "Type text at the keyboard focus.", schema::<TypeArgs>()),
        ("keypress", "Press one key combination.", schema::<KeypressArgs>()),
        ("wait", "Wait, then look at the screen again.", schema::<WaitArgs>()),
    ]
}

/// Maps one of our computer functions to actions.
pub fn function_actions(name: &str, arguments: &Value) -> Result<Option<Vec<Action>>, String> {
    fn args<T: for<'de> Deserialize<'de>>(value: &Value) -> Result<T, String> {
        T::deserialize(value).map_err(|e| format!("invalid arguments: {e}"))
    }
    Ok(Some(match name {
        "click" => {
            let a: ClickArgs = args(arguments)?;
            let button = match a.button {
                None | Some(Button::Left) => MouseButton::Left,
                Some(Button::Right) => MouseButton::Right,
                Some(Button::Middle) => MouseButton::Middle,
            };
            vec![Action::Click { x: a.x, y: a.y, button, keys: Vec::new() }]
        }
        "double_click" => {
            let a: PointArgs = args(arguments)?;
            vec![Action::DoubleClick { x: a.x, y: a.y }]
        }
        "move" => {
            let a: PointArgs = args(arguments)?;
            vec![Action::Move { x: a.x, y: a.y, keys: Vec::new() }]
        }
        "drag" => {
            let a: DragArgs = args(arguments)?;
            vec![Action::Drag {
                path: vec![Point::new(a.x1, a.y1), Point::new(a.x2, a.y2)],
                button: Default::default(),
                keys: Vec::new(),
            }]
        }
        "scroll" => {
            let a: ScrollArgs = args(arguments)?;
            let d = a.amount.unwrap_or(DEFAULT_SCROLL).clamp(0, 10_000);
            let (scroll_x, scroll_y) = match a.direction {
                Direction::Up => (0, -d),
                Direction::Down => (0, d),
                Direction::Left => (-d, 0),
                Direction::Right => (d, 0),
            };
            vec![Action::Scroll { x: a.x, y: a.y, scroll_x, scroll_y, keys: Vec::new() }]
        }
        "type_text" => vec![Action::Type { text: args::<TypeArgs>(arguments)?.text }],
        "keypress" => vec![Action::Keypress { keys: args::<KeypressArgs>(arguments)?.keys }],
        "wait" => vec![Action::Wait { duration_ms: wire::seconds_ms(arguments.get("seconds"), 1000) }],
        _ => return Ok(None),
    }))
}

/// Qwen2.5-VL `smart_resize`: both sides multiples of 28, area within [4·28², 16384·28²], aspect kept.
pub fn smart_resize(size: Size) -> Size {
    const F: f64 = 28.0;
    let (h, w) = (f64::from(size.height.max(1)), f64::from(size.width.max(1)));
    let (min_pixels, max_pixels) = (4.0 * F * F, 16384.0 * F * F);
    let mut h_bar = ((h / F).round() * F).max(F);
    let mut w_bar = ((w / F).round() * F).max(F);
    if h_bar * w_bar > max_pixels {
        let beta = (h * w / max_pixels).sqrt();
        h_bar = ((h / beta / F).floor() * F).max(F);
        w_bar = ((w / beta / F).floor() * F).max(F);
    } else if h_bar * w_bar < min_pixels {
        let beta = (min_pixels / (h * w)).sqrt();
        h_bar = (h * beta / F).ceil() * F;
        w_bar = (w * beta / F).ceil() * F;
    }
    Size::new(w_bar as u32, h_bar as u32)
}

pub struct CompatibleModel {
    settings: Settings,
    space: CoordinateSpace,
    format: ActionFormat,
}

impl CompatibleModel {
    pub fn new(settings: Settings) -> Result<Self, ModelError> {
        let space = settings.config.coordinate_space.unwrap_or_default();
        let format = settings.config.action_format.unwrap_or_default();
        Ok(Self { settings, space, format })
    }

    pub fn build_request(&self, request: &ModelRequest<'_>) -> HttpRequest {
        HttpRequest {
            url: format!("{}/chat/completions", self.settings.base_url),
            headers: Vec::new(),
            body: serde_json::to_vec(&self.body(request)).unwrap_or_default(),
            stream: false,
        }
    }

    fn space_text(&self, image: Size) -> String {
        match self.space {
            CoordinateSpace::Relative1000 => {
                "Coordinates are relative: x and y from 0 to 1000 across the screenshot.".into()
            }
            _ => format!(
                "Coordinates are pixels of the screenshot, which is {} wide and {} high; (0, 0) is its top-left corner.",
                image.width, image.height
            ),
        }
    }

    pub fn body(&self, request: &ModelRequest<'_>) -> Value {
        let image = self.image_size(request.screen);
        let mut system = format!("{}\n{}", wire::SYSTEM_PROMPT, self.space_text(image));
        if self.format == ActionFormat::UiTars {
            system.push_str(UI_TARS_PROMPT);
        }
        let mut messages = vec![json!({"role": "system", "content": system})];
        messages.extend(self.messages(request));
        let mut body = json!({"model": self.settings.model, "messages": messages});
        if self.format == ActionFormat::Tools {
            let mut tools: Vec<Value> = computer_tools()
                .into_iter()
                .map(|(name, description, parameters)| {
                    json!({"type": "function", "function": {"name": name, "description": description, "parameters": parameters}})
                })
                .collect();
            tools.extend(request.tools.iter().chain(navigation::tools(request).iter()).map(function_tool));
            body["tools"] = Value::Array(tools);
            body["tool_choice"] = json!("auto");
        }
        if let Some(max) = self.settings.max_tokens {
            body["max_tokens"] = json!(max);
        }
        if let Some(t) = self.settings.temperature {
            body["temperature"] = json!(t);
        }
        body
    }

    fn messages(&self, request: &ModelRequest<'_>) -> Vec<Value> {
        let (first, slots) = wire::layout(request);
        let mut first_content = vec![text_part(&wire::task_text(request))];
        first_content.extend(screen_parts(first));
        let mut messages = vec![json!({"role": "user", "content": first_content})];
        for slot in &slots {
            let assistant = assistant_message(&slot.exchange.turn);
            let ids: Vec<String> = assistant
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|c| wire::str_of(c, "id").map(str::to_string))
                .collect();
            messages.push(assistant);
            let mut extra = Vec::new();
            for id in &ids {
                let result = wire::result_for(&slot.exchange.results, id);
                let status = if result.ok { "ok" } else { "error" };
                messages.push(
                    json!({"role": "tool", "tool_call_id": id, "content": format!("{status}: {}", result.message)}),
                );
                if let Some(image) = &result.image {
                    extra.push(image_part(image));
                }
            }
            if ids.is_empty() && self.format == ActionFormat::UiTars {
                // Results of text actions have no tool message: tell the model in the next user turn.
                for result in &slot.exchange.results {
                    if !result.ok {
                        extra.push(text_part(&format!("The action failed: {}", result.message)));
                    }
                }
            }
            extra.extend(screen_parts(slot.next));
            messages.push(json!({"role": "user", "content": extra}));
        }
        messages
    }

    /// Reads a chat completion into a turn.
    pub fn parse(&self, response: &Value, step: u32, declared: &[&str]) -> Result<ModelTurn, AttemptError> {
        let message = response.pointer("/choices/0/message").ok_or_else(|| {
            AttemptError::protocol(format!("no choices[0].message in {}", wire::describe_json(response)))
        })?;
        let mut turn = ModelTurn {
            text: wire::str_of(message, "content").unwrap_or_default().to_string(),
            thinking: wire::str_of(message, "reasoning_content").unwrap_or_default().to_string(),
            ..ModelTurn::default()
        };
        let mut raw = json!({"role": "assistant", "content": message.get("content").cloned().unwrap_or(Value::Null)});
        match self.format {
            ActionFormat::Tools => {
                let calls = message.get("tool_calls").and_then(Value::as_array).cloned().unwrap_or_default();
                let mut kept = Vec::new();
                for (i, call) in calls.iter().enumerate() {
                    let id = wire::str_of(call, "id").map(str::to_string).unwrap_or_else(|| format!("call_{step}_{i}"));
                    let name = call.pointer("/function/name").and_then(Value::as_str).unwrap_or_default().to_string();
                    let arguments = match call.pointer("/function/arguments") {
                        Some(Value::String(text)) => serde_json::from_str(text).unwrap_or(Value::String(text.clone())),
                        Some(other) => other.clone(),
                        None => json!({}),
                    };
                    turn.calls.push(if declared.contains(&name.as_str()) {
                        ToolCall {
                            id: id.clone(),
                            kind: CallKind::Function { name: name.clone(), arguments: arguments.clone() },
                        }
                    } else {
                        match function_actions(&name, &arguments) {
                            Ok(Some(actions)) => wire::computer(id.clone(), actions),
                            Ok(None) => ToolCall {
                                id: id.clone(),
                                kind: CallKind::Function { name: name.clone(), arguments: arguments.clone() },
                            },
                            Err(why) => wire::unsupported(id.clone(), &format!("{name}: {why}"), arguments.clone()),
                        }
                    });
                    kept.push(json!({"id": id, "type": "function",
                        "function": {"name": name, "arguments": call.pointer("/function/arguments").cloned().unwrap_or(json!("{}"))}}));
                }
                if !kept.is_empty() {
                    raw["tool_calls"] = Value::Array(kept);
                }
            }
            ActionFormat::UiTars => {
                if let Some(call) = parse_ui_tars(&turn.text, step) {
                    turn.calls.push(call);
                }
            }
        }
        turn.raw = Some(raw);
        let u = response.get("usage").unwrap_or(&Value::Null);
        turn.usage = wire::with_cost(
            Usage {
                input_tokens: wire::u64_of(u, "/prompt_tokens"),
                output_tokens: wire::u64_of(u, "/completion_tokens"),
                cache_read_tokens: wire::u64_of(u, "/prompt_tokens_details/cached_tokens"),
                cache_write_tokens: 0,
                cost_usd: 0.0,
            },
            self.settings.price.as_ref(),
        );
        Ok(turn)
    }
}

fn function_tool(spec: &ToolSpec) -> Value {
    json!({"type": "function", "function": {"name": spec.name, "description": spec.description, "parameters": spec.parameters}})
}

fn text_part(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

fn image_part(image: &ModelImage) -> Value {
    json!({"type": "image_url", "image_url": {"url": wire::data_url(image)}})
}

fn screen_parts(screen: Screen<'_>) -> Vec<Value> {
    let mut parts: Vec<Value> = screen.notes.iter().map(|n| text_part(n)).collect();
    parts.push(match screen.image {
        Some(image) => image_part(image),
        None => text_part(wire::placeholder()),
    });
    parts
}

fn assistant_message(turn: &ModelTurn) -> Value {
    if let Some(raw) = &turn.raw
        && raw.is_object()
    {
        return raw.clone();
    }
    let calls: Vec<Value> = turn
        .calls
        .iter()
        .filter_map(|call| match &call.kind {
            CallKind::Function { name, arguments } => Some(json!({"id": call.id, "type": "function",
                "function": {"name": name, "arguments": arguments.to_string()}})),
            CallKind::Computer { .. } => None,
        })
        .collect();
    let mut message = json!({"role": "assistant", "content": turn.text});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    message
}

const UI_TARS_PROMPT: &str = "\n\nReply in this format:\nThought: what you see and plan\nAction: one action\n\n\
Actions:\nclick(start_box='(x,y)')\nleft_double(start_box='(x,y)')\nright_single(start_box='(x,y)')\n\
drag(start_box='(x1,y1)', end_box='(x2,y2)')\nhotkey(key='ctrl c')\ntype(content='text')\n\
scroll(start_box='(x,y)', direction='down or up or right or left')\nwait()\nfinished(content='summary')\n";

/// The `name(key='value', …)` call after the last `Action:` of a UI-TARS reply, as agentd actions (or a
/// `task_completion` for `finished`). `None` when the reply holds no action.
pub fn parse_ui_tars(text: &str, step: u32) -> Option<ToolCall> {
    let action = text.rsplit("Action:").next().filter(|_| text.contains("Action:"))?.trim();
    let open = action.find('(')?;
    let name = action[..open].trim();
    let args = parse_kwargs(&action[open + 1..]);
    let get = |keys: &[&str]| keys.iter().find_map(|k| args.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str()));
    let id = format!("uitars_{step}");
    let point = |keys: &[&str]| get(keys).and_then(box_point);
    let computer = |actions: Vec<Action>| Some(wire::computer(id.clone(), actions));
    let bad = |why: &str| Some(wire::unsupported(id.clone(), why, json!({"action": action})));
    match name {
        "click" | "left_single" | "left_double" | "right_single" => {
            let Some(p) = point(&["start_box", "point"]) else { return bad("the action has no point") };
            match name {
                "left_double" => computer(vec![Action::DoubleClick { x: p.x, y: p.y }]),
                "right_single" => {
                    computer(vec![Action::Click { x: p.x, y: p.y, button: MouseButton::Right, keys: vec![] }])
                }
                _ => computer(vec![Action::Click { x: p.x, y: p.y, button: MouseButton::Left, keys: vec![] }]),
            }
        }
        "drag" | "select" => match (point(&["start_box", "start_point"]), point(&["end_box", "end_point"])) {
            (Some(a), Some(b)) => {
                computer(vec![Action::Drag { path: vec![a, b], button: Default::default(), keys: Vec::new() }])
            }
            _ => bad("drag needs start and end points"),
        },
        "hotkey" => {
            let keys = get(&["key", "hotkey"]).unwrap_or_default();
            let keys: Vec<String> = keys.split_whitespace().flat_map(split_chord).collect();
            if keys.is_empty() { bad("hotkey needs keys") } else { computer(vec![Action::Keypress { keys }]) }
        }
        "type" => {
            let content = get(&["content"]).unwrap_or_default();
            // A trailing newline submits.
            let (text, submit) = match content.strip_suffix('\n') {
                Some(text) => (text, true),
                None => (content, false),
            };
            let mut actions = vec![Action::Type { text: text.to_string() }];
            if submit {
                actions.push(Action::Keypress { keys: vec!["Return".into()] });
            }
            computer(actions)
        }
        "scroll" => {
            let Some(p) = point(&["start_box", "point"]) else { return bad("scroll needs a point") };
            let (scroll_x, scroll_y) = match get(&["direction"]).unwrap_or("down") {
                "up" => (0, -DEFAULT_SCROLL),
                "left" => (-DEFAULT_SCROLL, 0),
                "right" => (DEFAULT_SCROLL, 0),
                _ => (0, DEFAULT_SCROLL),
            };
            computer(vec![Action::Scroll { x: p.x, y: p.y, scroll_x, scroll_y, keys: Vec::new() }])
        }
        "wait" => computer(vec![Action::Wait { duration_ms: 5000 }]),
        "finished" => Some(ToolCall {
            id,
            kind: CallKind::Function {
                name: TASK_COMPLETION.into(),
                arguments: json!({"success": true, "summary": get(&["content"]).unwrap_or("finished")}),
            },
        }),
        "call_user" => Some(ToolCall {
            id,
            kind: CallKind::Function {
                name: TASK_COMPLETION.into(),
                arguments: json!({"success": false, "summary": "the model asked for help (call_user)"}),
            },
        }),
        other => bad(&format!("unknown UI-TARS action {other:?}")),
    }
}

/// `key='value', key2="v"` pairs (Python-literal quoting: `\'`, `\"`, `\\`, `\n`).
fn parse_kwargs(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            chars.next();
            if c == '=' {
                break;
            }
            if c == ')' && key.trim().is_empty() {
                return out;
            }
            key.push(c);
        }
        let key = key.trim().trim_start_matches(',').trim().to_string();
        let Some(quote) = chars.next() else { return out };
        if quote != '\'' && quote != '"' {
            return out;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some('t') => value.push('\t'),
                    Some(other) => value.push(other),
                    None => break,
                },
                c if c == quote => break,
                c => value.push(c),
            }
        }
        out.push((key, value));
    }
}

/// The point a UI-TARS box names: `(x,y)`, `<point>x y</point>`, `[x1, y1, x2, y2]` (its centre).
fn box_point(text: &str) -> Option<Point> {
    let numbers: Vec<f64> = text
        .split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect();
    let (x, y) = match numbers.as_slice() {
        [x, y] => (*x, *y),
        [x1, y1, x2, y2] => ((x1 + x2) / 2.0, (y1 + y2) / 2.0),
        _ => return None,
    };
    (x.is_finite() && y.is_finite() && x.abs() < 1e7 && y.abs() < 1e7)
        .then(|| Point::new(x.round() as i32, y.round() as i32))
}

/// Decodes a (non-streamed) chat completion.
pub struct CompletionDecoder<'a> {
    model: &'a CompatibleModel,
    deltas: DeltaSink<'a>,
    step: u32,
    declared: Vec<String>,
    turn: Option<ModelTurn>,
    /// Responses begun so far (one per attempt that got a 2xx); from the second on, `Delta::Restart`.
    responses: u32,
}

impl Decoder for CompletionDecoder<'_> {
    type Output = ModelTurn;

    fn start(&mut self) {
        self.turn = None;
        self.responses += 1;
        if self.responses > 1 {
            (self.deltas)(super::Delta::Restart);
        }
    }

    fn event(&mut self, _event: SseEvent) -> Result<(), AttemptError> {
        Err(AttemptError::protocol("unexpected stream"))
    }

    fn body(&mut self, body: &[u8]) -> Result<(), AttemptError> {
        let response: Value =
            serde_json::from_slice(body).map_err(|e| AttemptError::protocol(format!("response is not JSON: {e}")))?;
        if let Some(error) = response.get("error").filter(|e| !e.is_null()) {
            return Err(super::http::stream_error("openai-compatible", &json!({ "error": error }), &|t| t.to_string()));
        }
        let declared: Vec<&str> = self.declared.iter().map(String::as_str).collect();
        let turn = self.model.parse(&response, self.step, &declared)?;
        // Not streamed: the whole turn is reported at once, in the order it came (reasoning, text, calls).
        if !turn.thinking.is_empty() {
            (self.deltas)(super::Delta::Thinking(&turn.thinking));
        }
        if !turn.text.is_empty() {
            (self.deltas)(super::Delta::Text(&turn.text));
        }
        let kept = turn.raw.as_ref().and_then(|raw| raw.get("tool_calls")).and_then(Value::as_array);
        for call in kept.into_iter().flatten() {
            let (Some(id), Some(name)) =
                (wire::str_of(call, "id"), call.pointer("/function/name").and_then(Value::as_str))
            else {
                continue;
            };
            (self.deltas)(super::Delta::ToolCall { id, name });
            let arguments = match call.pointer("/function/arguments") {
                Some(Value::String(text)) => text.clone(),
                Some(other) => other.to_string(),
                None => "{}".into(),
            };
            (self.deltas)(super::Delta::ToolArgs { id, delta: &arguments });
        }
        self.turn = Some(turn);
        Ok(())
    }

    fn finish(&mut self) -> Result<ModelTurn, AttemptError> {
        self.turn.take().ok_or_else(|| AttemptError::protocol("empty response"))
    }
}

#[async_trait]
impl Model for CompatibleModel {
    fn model_id(&self) -> Option<&str> {
        Some(&self.settings.model)
    }

    fn describe(&self) -> String {
        format!("openai-compatible {} at {}", self.settings.model, self.settings.base_url)
    }

    fn coordinates(&self, screen: Size) -> CoordinateMap {
        match self.space {
            CoordinateSpace::Relative1000 => CoordinateMap::normalized(screen, 1000),
            CoordinateSpace::Pixels => CoordinateMap::scaled(screen, fit_within(screen, Size::new(1280, 800))),
            CoordinateSpace::SmartResize => {
                CoordinateMap::scaled(screen, smart_resize(fit_within(screen, Size::new(1280, 800))))
            }
        }
    }

    fn image_size(&self, screen: Size) -> Size {
        match self.space {
            CoordinateSpace::Relative1000 => fit_within(screen, Size::new(1280, 800)),
            _ => self.coordinates(screen).model(),
        }
    }

    fn context_chunk(&self) -> u32 {
        self.settings.config.screenshot_chunk.unwrap_or(1).max(1)
    }

    fn context_window(&self) -> Option<u64> {
        self.settings.config.context_window
    }

    async fn next_turn(&self, request: ModelRequest<'_>, deltas: DeltaSink<'_>) -> Result<ModelTurn, ModelError> {
        let http = self.build_request(&request);
        let declared = request.tools.iter().map(|t| t.name.clone()).collect();
        let mut decoder =
            CompletionDecoder { model: self, deltas, step: request.step, declared, turn: None, responses: 0 };
        let mut turn = self.settings.endpoint.execute(&http, &mut decoder).await?;
        navigation::claim(&request, &mut turn);
        Ok(turn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_come_from_the_types() {
        let tools = computer_tools();
        let scroll = &tools.iter().find(|t| t.0 == "scroll").unwrap().2;
        assert_eq!(scroll["type"], "object");
        let required: Vec<&str> = scroll["required"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert_eq!(required, vec!["x", "y", "direction"]);
        assert!(scroll.to_string().contains("\"up\""), "{scroll}");
        assert!(scroll.get("$schema").is_none());
    }

    #[test]
    fn smart_resize_matches_the_reference() {
        // Values from Qwen2.5-VL's smart_resize: multiples of 28, aspect kept.
        assert_eq!(smart_resize(Size::new(1280, 800)), Size::new(1288, 812));
        assert_eq!(smart_resize(Size::new(1920, 1080)), Size::new(1932, 1092));
        let s = smart_resize(Size::new(10, 10));
        assert!(s.width.is_multiple_of(28) && s.height.is_multiple_of(28) && s.area() >= 4 * 28 * 28);
    }

    #[test]
    fn ui_tars_grammar() {
        let call = |t: &str| parse_ui_tars(t, 1).map(|c| c.kind);
        assert_eq!(
            call("Thought: the button.\nAction: click(start_box='<|box_start|>(153,97)<|box_end|>')"),
            Some(CallKind::Computer {
                actions: vec![Action::Click { x: 153, y: 97, button: MouseButton::Left, keys: vec![] }]
            })
        );
        assert_eq!(
            call("Action: left_double(point='<point>10 20</point>')"),
            Some(CallKind::Computer { actions: vec![Action::DoubleClick { x: 10, y: 20 }] })
        );
        assert_eq!(
            call("Action: type(content='it\\'s me\\n')"),
            Some(CallKind::Computer {
                actions: vec![
                    Action::Type { text: "it's me".into() },
                    Action::Keypress { keys: vec!["Return".into()] }
                ]
            })
        );
        assert_eq!(
            call("Action: hotkey(key='ctrl c')"),
            Some(CallKind::Computer { actions: vec![Action::Keypress { keys: vec!["ctrl".into(), "c".into()] }] })
        );
        assert_eq!(
            call("Action: drag(start_box='(1,2)', end_box='(3,4)')"),
            Some(CallKind::Computer {
                actions: vec![Action::Drag {
                    path: vec![Point::new(1, 2), Point::new(3, 4)],
                    button: Default::default(),
                    keys: Vec::new()
                }]
            })
        );
        assert!(matches!(call("Action: finished(content='done')"), Some(CallKind::Function { .. })));
        assert_eq!(call("Thought: nothing to do"), None);
    }
}
