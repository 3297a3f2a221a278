//! The Anthropic adapter: Messages API with the computer-use tool.
//!
//! Follows: Messages API `anthropic-version: 2023-06-01`; computer tool `computer_20250124` (beta header
//! `computer-use-2025-01-24`) and `computer_20251124` (`computer-use-2025-11-24`, with `enable_zoom`) as typed
//! in anthropic-sdk-python 009b0353 (`beta_tool_computer_use_20250124_param.py`,
//! `beta_tool_computer_use_20251124_param.py`) and the tool page platform.claude.com/docs/en/agents-and-tools/
//! tool-use/computer-use-tool (model ↔ version table); action inputs as the reference implementation
//! anthropic-quickstarts 44c2b5c9 `computer_use_demo/tools/computer.py` reads them; streaming events as
//! `beta_raw_*_event.py`; prompt caching as `loop.py` `_inject_prompt_caching` (breakpoints) and
//! `_maybe_filter_to_n_most_recent_images` (chunked screenshot removal).
//!
//! Wire rules kept here: every `tool_use` of an assistant turn is answered, in order, by a `tool_result` in
//! the next user message (images inside it, `is_error: true` with text for failures); assistant turns are
//! replayed verbatim from [`ModelTurn::raw`] (thinking blocks keep their signatures); screenshots are scaled
//! to XGA/WXGA/FWXGA and that size is declared, so coordinates come back in the image's space and the loop
//! maps them; at most 4 cache breakpoints: the system prompt, the newest user turn before the oldest kept
//! screenshot (a prefix that survives dropping), and the two newest user turns.

use agentd_computer::{Action, MouseButton, Point, Size, keys::split_chord};
use async_trait::async_trait;
use serde_json::{Value, json};

use super::http::{AttemptError, Decoder, HttpRequest, SseEvent, stream_error};
use super::shared::Settings;
use super::wire::{self, Screen};
use super::{
    CallKind, Delta, DeltaSink, Model, ModelError, ModelImage, ModelRequest, ModelTurn, ToolCall, ToolResult, ToolSpec,
    Usage, navigation,
};
use crate::screen::coords::CoordinateMap;

pub const API_VERSION: &str = "2023-06-01";

/// Pixels one wheel "click" of `scroll_amount` moves, in the model's image space.
pub const SCROLL_CLICK_PX: i32 = 100;

/// A computer tool version and what goes with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolVersion {
    V20250124,
    V20251124,
}

impl ToolVersion {
    pub fn tool_type(self) -> &'static str {
        match self {
            Self::V20250124 => "computer_20250124",
            Self::V20251124 => "computer_20251124",
        }
    }

    pub fn beta(self) -> &'static str {
        match self {
            Self::V20250124 => "computer-use-2025-01-24",
            Self::V20251124 => "computer-use-2025-11-24",
        }
    }

    /// The newest version a model supports (tool page, model table): `computer_20251124` for Opus 4.5, 4.6,
    /// 4.7 and Sonnet 4.6; `computer_20250124` for Sonnet 4.5, Haiku 4.5, Opus 4.1, Sonnet 4, Opus 4,
    /// Sonnet 3.7 and unknown models.
    pub fn for_model(model: &str) -> Self {
        const NEWER: [&str; 4] = ["claude-opus-4-5", "claude-opus-4-6", "claude-opus-4-7", "claude-sonnet-4-6"];
        if NEWER.iter().any(|prefix| model.starts_with(prefix)) { Self::V20251124 } else { Self::V20250124 }
    }

    pub fn parse(text: &str) -> Result<Self, ModelError> {
        match text.trim_start_matches("computer_") {
            "20250124" => Ok(Self::V20250124),
            "20251124" => Ok(Self::V20251124),
            _ => Err(ModelError::Config(format!(
                "anthropic: unknown tool_version {text:?}; expected computer_20250124 or computer_20251124"
            ))),
        }
    }
}

pub struct AnthropicModel {
    settings: Settings,
    tool: ToolVersion,
    max_tokens: u32,
}

impl AnthropicModel {
    pub fn new(settings: Settings) -> Result<Self, ModelError> {
        let tool = match &settings.tool_version {
            Some(v) => ToolVersion::parse(v)?,
            None => ToolVersion::for_model(&settings.model),
        };
        let max_tokens = settings.max_tokens.unwrap_or(4096);
        Ok(Self { settings, tool, max_tokens })
    }

    pub fn tool_version(&self) -> ToolVersion {
        self.tool
    }

    /// The HTTP request for `request` (public for golden tests).
    pub fn build_request(&self, request: &ModelRequest<'_>) -> HttpRequest {
        let body = self.body(request);
        HttpRequest {
            url: format!("{}/v1/messages", self.settings.base_url),
            headers: vec![
                ("anthropic-version", API_VERSION.to_string()),
                ("anthropic-beta", self.tool.beta().to_string()),
            ],
            body: serde_json::to_vec(&body).unwrap_or_default(),
            stream: self.settings.stream,
        }
    }

    /// The request body.
    pub fn body(&self, request: &ModelRequest<'_>) -> Value {
        let image = self.coordinates(request.screen).model();
        let mut computer = json!({
            "type": self.tool.tool_type(),
            "name": "computer",
            "display_width_px": image.width,
            "display_height_px": image.height,
        });
        if self.tool == ToolVersion::V20251124 {
            computer["enable_zoom"] = json!(true);
        }
        let mut tools = vec![computer];
        tools.extend(request.tools.iter().map(function_tool));
        // The computer tool has no navigation: on a browser, navigation goes in function tools.
        tools.extend(navigation::tools(request).iter().map(function_tool));
        let mut body = json!({
            "model": self.settings.model,
            "max_tokens": self.max_tokens,
            "system": [{"type": "text", "text": wire::SYSTEM_PROMPT, "cache_control": {"type": "ephemeral"}}],
            "tools": tools,
            "messages": messages(request),
        });
        if let Some(t) = self.settings.temperature {
            body["temperature"] = json!(t);
        }
        if self.settings.stream {
            body["stream"] = json!(true);
        }
        body
    }
}

fn function_tool(spec: &ToolSpec) -> Value {
    json!({"name": spec.name, "description": spec.description, "input_schema": spec.parameters})
}

fn image_block(image: &ModelImage) -> Value {
    json!({"type": "image", "source": {"type": "base64", "media_type": image.media_type, "data": image.base64()}})
}

fn text_block(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

/// Text blocks for a screen's notes, and its image (or the placeholder).
fn screen_blocks(screen: Screen<'_>) -> Vec<Value> {
    let mut blocks: Vec<Value> = screen.notes.iter().map(|n| text_block(n)).collect();
    blocks.push(match screen.image {
        Some(image) => image_block(image),
        None => text_block(wire::placeholder()),
    });
    blocks
}

/// The assistant content of a past turn: verbatim when the adapter kept it, rebuilt otherwise.
fn assistant_content(turn: &ModelTurn) -> Vec<Value> {
    if let Some(Value::Array(content)) = &turn.raw {
        return content.clone();
    }
    let mut content = Vec::new();
    if !turn.text.is_empty() {
        content.push(text_block(&turn.text));
    }
    for call in &turn.calls {
        let (name, input) = match &call.kind {
            CallKind::Function { name, arguments } => (name.clone(), arguments.clone()),
            CallKind::Computer { actions } => {
                ("computer".to_string(), json!({"action": "agentd_actions", "actions": actions}))
            }
        };
        content.push(json!({"type": "tool_use", "id": call.id, "name": name, "input": input}));
    }
    if content.is_empty() {
        content.push(text_block("(no reply)"));
    }
    content
}

fn tool_result(result: &ToolResult, extra_image: Option<&ModelImage>) -> Value {
    if !result.ok {
        return json!({"type": "tool_result", "tool_use_id": result.call_id, "is_error": true,
                      "content": [text_block(&result.message)]});
    }
    let mut content = vec![text_block(&result.message)];
    if let Some(image) = &result.image {
        content.push(image_block(image));
    }
    if let Some(image) = extra_image {
        content.push(image_block(image));
    }
    json!({"type": "tool_result", "tool_use_id": result.call_id, "content": content})
}

/// The messages of a request, with cache breakpoints.
pub fn messages(request: &ModelRequest<'_>) -> Vec<Value> {
    let (first, slots) = wire::layout(request);
    let mut messages = Vec::new();
    let mut first_content = vec![text_block(&wire::task_text(request))];
    first_content.extend(screen_blocks(first));
    messages.push(json!({"role": "user", "content": first_content}));
    for slot in &slots {
        let assistant = assistant_content(&slot.exchange.turn);
        let tool_uses: Vec<(String, bool)> = assistant
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
            .filter_map(|b| Some((b.get("id")?.as_str()?.to_string(), b.get("name")?.as_str()? == "computer")))
            .collect();
        messages.push(json!({"role": "assistant", "content": assistant}));
        // The screenshot rides in the last successful computer result, as the reference loop does; when there
        // is none it follows the results as its own block.
        let carrier = tool_uses
            .iter()
            .rposition(|(id, is_computer)| *is_computer && wire::result_for(&slot.exchange.results, id).ok)
            .filter(|_| slot.next.image.is_some());
        let mut content = Vec::new();
        for (i, (id, _)) in tool_uses.iter().enumerate() {
            let result = wire::result_for(&slot.exchange.results, id);
            let extra = if carrier == Some(i) { slot.next.image } else { None };
            content.push(tool_result(&result, extra));
        }
        let mut after: Vec<Value> = slot.next.notes.iter().map(|n| text_block(n)).collect();
        if carrier.is_none() {
            after.push(match slot.next.image {
                Some(image) => image_block(image),
                None => text_block(wire::placeholder()),
            });
        }
        content.extend(after);
        messages.push(json!({"role": "user", "content": content}));
    }
    place_breakpoints(&mut messages);
    messages
}

fn has_image(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.get("type").and_then(Value::as_str) == Some("image") || map.values().any(has_image),
        Value::Array(items) => items.iter().any(has_image),
        _ => false,
    }
}

/// Cache breakpoints on user messages: the newest one before the first that still holds an image (its prefix
/// survives the next chunked drop), and the two newest. With the system prompt's, at most 4.
fn place_breakpoints(messages: &mut [Value]) {
    let users: Vec<usize> = messages.iter().enumerate().filter(|(_, m)| m["role"] == "user").map(|(i, _)| i).collect();
    let mut marks: Vec<usize> = users.iter().rev().take(2).copied().collect();
    if let Some(first_with_image) = users.iter().position(|&i| has_image(&messages[i]["content"]))
        && first_with_image > 0
    {
        marks.push(users[first_with_image - 1]);
    }
    for index in marks {
        if let Some(last) = messages[index]["content"].as_array_mut().and_then(|c| c.last_mut())
            && let Some(block) = last.as_object_mut()
        {
            block.insert("cache_control".into(), json!({"type": "ephemeral"}));
        }
    }
}

/// Maps one `computer` tool input to actions (in the declared display space).
pub fn computer_actions(input: &Value, display: Size) -> Result<Vec<Action>, String> {
    let action = wire::str_of(input, "action").ok_or("missing `action`")?;
    let coordinate = wire::point(input.get("coordinate"));
    // The held modifier: `text` per the docs, `key` per the reference implementation.
    let modifiers = || -> Vec<String> {
        wire::str_of(input, "text").or_else(|| wire::str_of(input, "key")).map(split_chord).unwrap_or_default()
    };
    let need = |p: Option<Point>| p.ok_or_else(|| format!("`{action}` needs `coordinate: [x, y]`"));
    let click = |button: MouseButton, count: u32| -> Vec<Action> {
        match coordinate {
            Some(p) => match (button, count) {
                (_, 2) => vec![Action::DoubleClick { x: p.x, y: p.y }],
                (_, 3) => vec![Action::TripleClick { x: p.x, y: p.y }],
                _ => vec![Action::Click { x: p.x, y: p.y, button, keys: modifiers() }],
            },
            // No coordinate: click where the pointer is.
            None => (0..count)
                .flat_map(|_| [Action::MouseDown { button, keys: Vec::new() }, Action::MouseUp { button }])
                .collect(),
        }
    };
    Ok(match action {
        "screenshot" => vec![Action::Screenshot {}],
        "cursor_position" => vec![Action::CursorPosition {}],
        "key" => {
            let text = wire::str_of(input, "text").ok_or("`key` needs `text`")?;
            // xdotool syntax: chords separated by spaces ("ctrl+a Delete").
            text.split_whitespace().map(|chord| Action::Keypress { keys: split_chord(chord) }).collect()
        }
        "type" => vec![Action::Type { text: wire::str_of(input, "text").ok_or("`type` needs `text`")?.to_string() }],
        "mouse_move" => {
            let p = need(coordinate)?;
            vec![Action::Move { x: p.x, y: p.y, keys: modifiers() }]
        }
        "left_click" => click(MouseButton::Left, 1),
        "right_click" => click(MouseButton::Right, 1),
        "middle_click" => click(MouseButton::Middle, 1),
        "double_click" => click(MouseButton::Left, 2),
        "triple_click" => click(MouseButton::Left, 3),
        "left_click_drag" => {
            let start =
                wire::point(input.get("start_coordinate")).ok_or("`left_click_drag` needs `start_coordinate`")?;
            let end = need(coordinate)?;
            vec![Action::Drag { path: vec![start, end], button: MouseButton::Left, keys: modifiers() }]
        }
        "left_mouse_down" | "left_mouse_up" => {
            let button = MouseButton::Left;
            let press = if action == "left_mouse_down" {
                Action::MouseDown { button, keys: modifiers() }
            } else {
                Action::MouseUp { button }
            };
            match coordinate {
                Some(p) => vec![Action::Move { x: p.x, y: p.y, keys: Vec::new() }, press],
                None => vec![press],
            }
        }
        "scroll" => {
            let at = coordinate.unwrap_or(Point::new(display.width as i32 / 2, display.height as i32 / 2));
            let amount = wire::int(input.get("scroll_amount")).unwrap_or(3).clamp(0, 100) * SCROLL_CLICK_PX;
            let (scroll_x, scroll_y) = match wire::str_of(input, "scroll_direction").unwrap_or("down") {
                "up" => (0, -amount),
                "down" => (0, amount),
                "left" => (-amount, 0),
                "right" => (amount, 0),
                other => return Err(format!("unknown scroll_direction {other:?}")),
            };
            vec![Action::Scroll { x: at.x, y: at.y, scroll_x, scroll_y, keys: modifiers() }]
        }
        "hold_key" => vec![Action::HoldKey {
            keys: split_chord(wire::str_of(input, "text").ok_or("`hold_key` needs `text`")?),
            duration_ms: wire::seconds_ms(input.get("duration"), 1000),
        }],
        "wait" => vec![Action::Wait { duration_ms: wire::seconds_ms(input.get("duration"), 1000) }],
        "zoom" => {
            let region =
                input.get("region").and_then(Value::as_array).ok_or("`zoom` needs `region: [x1, y1, x2, y2]`")?;
            let v: Vec<i32> = region.iter().filter_map(|v| wire::int(Some(v))).collect();
            if v.len() != 4 {
                return Err("`region` must be [x1, y1, x2, y2]".into());
            }
            vec![Action::Zoom { x1: v[0], y1: v[1], x2: v[2], y2: v[3] }]
        }
        other => return Err(format!("unknown computer action {other:?}")),
    })
}

/// Reads a complete assistant message (`content`, `stop_reason`, `usage`) into a turn.
pub fn parse_message(
    message: &Value,
    display: Size,
    price: Option<&crate::config::Price>,
) -> Result<ModelTurn, AttemptError> {
    let content = message
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| AttemptError::protocol(format!("no `content` array in {}", wire::describe_json(message))))?;
    let stop_reason = message.get("stop_reason").and_then(Value::as_str).unwrap_or_default();
    let mut turn = ModelTurn::default();
    let mut raw = Vec::new();
    for block in content {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                if let Some(text) = block.get("text").and_then(Value::as_str) {
                    if !turn.text.is_empty() {
                        turn.text.push('\n');
                    }
                    turn.text.push_str(text);
                }
            }
            Some("thinking") => {
                if let Some(text) = block.get("thinking").and_then(Value::as_str) {
                    turn.thinking.push_str(text);
                }
            }
            Some("tool_use") => {
                let (Some(id), Some(name)) = (wire::str_of(block, "id"), wire::str_of(block, "name")) else {
                    return Err(AttemptError::protocol("a tool_use block without id or name"));
                };
                let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
                if input.get(PARTIAL_INPUT).is_some() {
                    // Cut off by max_tokens: the call is incomplete and is not replayed.
                    continue;
                }
                let call = if name == "computer" {
                    match computer_actions(&input, display) {
                        Ok(actions) => ToolCall { id: id.to_string(), kind: CallKind::Computer { actions } },
                        Err(why) => wire::unsupported(id.to_string(), &why, input.clone()),
                    }
                } else {
                    ToolCall {
                        id: id.to_string(),
                        kind: CallKind::Function { name: name.to_string(), arguments: input.clone() },
                    }
                };
                turn.calls.push(call);
            }
            _ => {}
        }
        raw.push(block.clone());
    }
    if raw.is_empty() {
        raw.push(text_block(if stop_reason.is_empty() { "(empty reply)" } else { stop_reason }));
    }
    turn.raw = Some(Value::Array(raw));
    turn.usage = wire::with_cost(usage(message.get("usage").unwrap_or(&Value::Null)), price);
    Ok(turn)
}

/// Normalised usage: `input_tokens` is the whole prompt (uncached + cache writes + cache reads).
pub fn usage(u: &Value) -> Usage {
    let read = wire::u64_of(u, "/cache_read_input_tokens");
    let write = wire::u64_of(u, "/cache_creation_input_tokens");
    Usage {
        input_tokens: wire::u64_of(u, "/input_tokens") + read + write,
        output_tokens: wire::u64_of(u, "/output_tokens"),
        cache_read_tokens: read,
        cache_write_tokens: write,
        cost_usd: 0.0,
    }
}

/// Marks a tool input whose JSON never completed.
const PARTIAL_INPUT: &str = "__agentd_partial_input";

/// Decodes a Messages response: a JSON body, or the SSE stream of `message_start` … `message_stop`.
pub struct MessageDecoder<'a> {
    deltas: DeltaSink<'a>,
    display: Size,
    price: Option<crate::config::Price>,
    redact: &'a (dyn Fn(&str) -> String + Send + Sync),
    message: Value,
    blocks: Vec<Value>,
    partial_json: Vec<String>,
    done: bool,
    /// Responses begun so far (one per attempt that got a 2xx); from the second on, `Delta::Restart`.
    responses: u32,
}

impl<'a> MessageDecoder<'a> {
    pub fn new(
        deltas: DeltaSink<'a>,
        display: Size,
        price: Option<crate::config::Price>,
        redact: &'a (dyn Fn(&str) -> String + Send + Sync),
    ) -> Self {
        Self {
            deltas,
            display,
            price,
            redact,
            message: Value::Null,
            blocks: Vec::new(),
            partial_json: Vec::new(),
            done: false,
            responses: 0,
        }
    }

    fn block(&mut self, index: &Value) -> Result<(usize, &mut Value), AttemptError> {
        let i = index.as_u64().map(|i| i as usize).filter(|&i| i < self.blocks.len());
        let i = i.ok_or_else(|| AttemptError::protocol(format!("stream names unknown content block {index}")))?;
        Ok((i, &mut self.blocks[i]))
    }
}

impl Decoder for MessageDecoder<'_> {
    type Output = ModelTurn;

    fn start(&mut self) {
        self.message = Value::Null;
        self.blocks.clear();
        self.partial_json.clear();
        self.done = false;
        self.responses += 1;
        if self.responses > 1 {
            (self.deltas)(Delta::Restart);
        }
    }

    fn event(&mut self, event: SseEvent) -> Result<(), AttemptError> {
        let data: Value = serde_json::from_str(&event.data)
            .map_err(|e| AttemptError::protocol(format!("stream event is not JSON: {e}")))?;
        let kind = data.get("type").and_then(Value::as_str).or(event.event.as_deref()).unwrap_or_default();
        match kind {
            "message_start" => {
                self.message = data.get("message").cloned().unwrap_or_else(|| json!({}));
            }
            "content_block_start" => {
                let index = data.get("index").and_then(Value::as_u64).unwrap_or(self.blocks.len() as u64) as usize;
                if index != self.blocks.len() {
                    return Err(AttemptError::protocol(format!("content block {index} started out of order")));
                }
                let block = data
                    .get("content_block")
                    .cloned()
                    .ok_or_else(|| AttemptError::protocol("content_block_start without a block"))?;
                if let Some(text) = block.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                    (self.deltas)(Delta::Text(text));
                }
                if let Some(text) = block.get("thinking").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                    (self.deltas)(Delta::Thinking(text));
                }
                if block.get("type").and_then(Value::as_str) == Some("tool_use")
                    && let (Some(id), Some(name)) = (wire::str_of(&block, "id"), wire::str_of(&block, "name"))
                {
                    (self.deltas)(Delta::ToolCall { id, name });
                }
                self.blocks.push(block);
                self.partial_json.push(String::new());
            }
            "content_block_delta" => {
                let delta = data.get("delta").cloned().unwrap_or(Value::Null);
                let deltas = self.deltas;
                let (i, block) = self.block(data.get("index").unwrap_or(&Value::Null))?;
                let piece = |key: &str| delta.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
                match delta.get("type").and_then(Value::as_str).unwrap_or_default() {
                    "text_delta" => {
                        let text = piece("text");
                        append(block, "text", &text);
                        deltas(Delta::Text(&text));
                    }
                    "thinking_delta" => {
                        let text = piece("thinking");
                        append(block, "thinking", &text);
                        deltas(Delta::Thinking(&text));
                    }
                    "signature_delta" => append(block, "signature", &piece("signature")),
                    "input_json_delta" => {
                        let json_text = piece("partial_json");
                        if !json_text.is_empty()
                            && let Some(id) = block.get("id").and_then(Value::as_str)
                        {
                            deltas(Delta::ToolArgs { id, delta: &json_text });
                        }
                        self.partial_json[i].push_str(&json_text);
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                let (i, _) = self.block(data.get("index").unwrap_or(&Value::Null))?;
                self.finish_block(i)?;
            }
            "message_delta" => {
                if let Some(reason) = data.pointer("/delta/stop_reason") {
                    self.message["stop_reason"] = reason.clone();
                }
                if let Some(u) = data.get("usage").and_then(Value::as_object) {
                    let usage = self.message.get_mut("usage").and_then(Value::as_object_mut);
                    match usage {
                        Some(existing) => {
                            for (k, v) in u {
                                if !v.is_null() {
                                    existing.insert(k.clone(), v.clone());
                                }
                            }
                        }
                        None => self.message["usage"] = Value::Object(u.clone()),
                    }
                }
            }
            "message_stop" => self.done = true,
            "error" => return Err(stream_error("anthropic", &data, self.redact)),
            _ => {} // ping, and event types added later
        }
        Ok(())
    }

    fn body(&mut self, body: &[u8]) -> Result<(), AttemptError> {
        let message: Value =
            serde_json::from_slice(body).map_err(|e| AttemptError::protocol(format!("response is not JSON: {e}")))?;
        if message.get("type").and_then(Value::as_str) == Some("error") {
            return Err(stream_error("anthropic", &message, self.redact));
        }
        for block in message.get("content").and_then(Value::as_array).into_iter().flatten() {
            match block.get("type").and_then(Value::as_str) {
                Some("text") => {
                    (self.deltas)(Delta::Text(block.get("text").and_then(Value::as_str).unwrap_or_default()))
                }
                Some("thinking") => {
                    (self.deltas)(Delta::Thinking(block.get("thinking").and_then(Value::as_str).unwrap_or_default()))
                }
                Some("tool_use") => {
                    if let (Some(id), Some(name)) = (wire::str_of(block, "id"), wire::str_of(block, "name")) {
                        (self.deltas)(Delta::ToolCall { id, name });
                        let input = block.get("input").map(Value::to_string).unwrap_or_else(|| "{}".into());
                        (self.deltas)(Delta::ToolArgs { id, delta: &input });
                    }
                }
                _ => {}
            }
        }
        self.message = message;
        self.done = true;
        Ok(())
    }

    fn finish(&mut self) -> Result<ModelTurn, AttemptError> {
        if !self.done {
            return Err(AttemptError::retry("the stream ended before message_stop"));
        }
        if !self.blocks.is_empty() {
            for i in 0..self.blocks.len() {
                if self.blocks[i].get("input").is_some() && !self.partial_json[i].is_empty() {
                    self.finish_block(i)?;
                }
            }
            self.message["content"] = Value::Array(std::mem::take(&mut self.blocks));
        }
        if !self.message.is_object() {
            return Err(AttemptError::protocol("no message in the response"));
        }
        let truncated = self.message.get("stop_reason").and_then(Value::as_str) == Some("max_tokens");
        if truncated && let Some(content) = self.message.get_mut("content").and_then(Value::as_array_mut) {
            content.retain(|b| b.get("input").and_then(|i| i.get(PARTIAL_INPUT)).is_none());
        }
        parse_message(&self.message, self.display, self.price.as_ref())
    }
}

impl MessageDecoder<'_> {
    /// Parses a tool_use block's accumulated `partial_json` (an empty string means `{}`).
    fn finish_block(&mut self, i: usize) -> Result<(), AttemptError> {
        let json_text = std::mem::take(&mut self.partial_json[i]);
        if self.blocks[i].get("type").and_then(Value::as_str) != Some("tool_use") {
            return Ok(());
        }
        let input = if json_text.trim().is_empty() {
            self.blocks[i].get("input").cloned().unwrap_or_else(|| json!({}))
        } else {
            match serde_json::from_str::<Value>(&json_text) {
                Ok(v) => v,
                Err(_) => json!({ PARTIAL_INPUT: true }),
            }
        };
        self.blocks[i]["input"] = input;
        Ok(())
    }
}

fn append(block: &mut Value, key: &str, text: &str) {
    let current = block.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
    block[key] = Value::String(current + text);
}

#[async_trait]
impl Model for AnthropicModel {
    fn model_id(&self) -> Option<&str> {
        Some(&self.settings.model)
    }

    fn describe(&self) -> String {
        format!("anthropic {} ({})", self.settings.model, self.tool.tool_type())
    }

    fn coordinates(&self, screen: Size) -> CoordinateMap {
        CoordinateMap::scaled(screen, wire::recommended_image_size(screen))
    }

    fn context_chunk(&self) -> u32 {
        self.settings.config.screenshot_chunk.unwrap_or(3).max(1)
    }

    fn context_window(&self) -> Option<u64> {
        Some(self.settings.config.context_window.unwrap_or(200_000))
    }

    async fn next_turn(&self, request: ModelRequest<'_>, deltas: DeltaSink<'_>) -> Result<ModelTurn, ModelError> {
        let http = self.build_request(&request);
        let endpoint = &self.settings.endpoint;
        let redact = |t: &str| endpoint.redact(t);
        let display = self.coordinates(request.screen).model();
        let mut decoder = MessageDecoder::new(deltas, display, self.settings.price, &redact);
        let mut turn = endpoint.execute(&http, &mut decoder).await?;
        navigation::claim(&request, &mut turn);
        Ok(turn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_version_follows_the_model() {
        assert_eq!(ToolVersion::for_model("claude-opus-4-5-20251101"), ToolVersion::V20251124);
        assert_eq!(ToolVersion::for_model("claude-sonnet-4-6"), ToolVersion::V20251124);
        assert_eq!(ToolVersion::for_model("claude-sonnet-4-5"), ToolVersion::V20250124);
        assert_eq!(ToolVersion::for_model("claude-haiku-4-5"), ToolVersion::V20250124);
        assert_eq!(ToolVersion::parse("computer_20251124").unwrap().beta(), "computer-use-2025-11-24");
        assert!(ToolVersion::parse("computer_20241022").is_err());
    }

    #[test]
    fn every_documented_action_maps() {
        let d = Size::new(1280, 800);
        let map = |input: Value| computer_actions(&input, d);
        assert_eq!(
            map(json!({"action": "left_click", "coordinate": [500, 300]})).unwrap(),
            vec![Action::Click { x: 500, y: 300, button: MouseButton::Left, keys: vec![] }]
        );
        assert_eq!(
            map(json!({"action": "left_click", "coordinate": [5, 3], "text": "shift"})).unwrap(),
            vec![Action::Click { x: 5, y: 3, button: MouseButton::Left, keys: vec!["shift".into()] }]
        );
        // Held modifiers on the other pointer actions (docs/task-file.md).
        assert_eq!(
            map(json!({"action": "scroll", "coordinate": [10, 20], "scroll_direction": "up", "scroll_amount": 2, "text": "ctrl"}))
                .unwrap(),
            vec![Action::Scroll { x: 10, y: 20, scroll_x: 0, scroll_y: -2 * SCROLL_CLICK_PX, keys: vec!["ctrl".into()] }]
        );
        assert_eq!(
            map(
                json!({"action": "left_click_drag", "start_coordinate": [1, 2], "coordinate": [3, 4], "text": "shift"})
            )
            .unwrap(),
            vec![Action::Drag {
                path: vec![Point::new(1, 2), Point::new(3, 4)],
                button: MouseButton::Left,
                keys: vec!["shift".into()]
            }]
        );
        assert_eq!(
            map(json!({"action": "left_mouse_down", "text": "ctrl+alt"})).unwrap(),
            vec![Action::MouseDown { button: MouseButton::Left, keys: vec!["ctrl".into(), "alt".into()] }]
        );
        assert_eq!(
            map(json!({"action": "left_click", "coordinate": [5, 3], "key": "ctrl"})).unwrap()[0],
            Action::Click { x: 5, y: 3, button: MouseButton::Left, keys: vec!["ctrl".into()] }
        );
        assert_eq!(
            map(json!({"action": "right_click"})).unwrap(),
            vec![
                Action::MouseDown { button: MouseButton::Right, keys: Vec::new() },
                Action::MouseUp { button: MouseButton::Right }
            ]
        );
        assert_eq!(
            map(json!({"action": "scroll", "coordinate": [500, 400], "scroll_direction": "down", "scroll_amount": 3}))
                .unwrap(),
            vec![Action::Scroll { x: 500, y: 400, scroll_x: 0, scroll_y: 300, keys: Vec::new() }]
        );
        assert_eq!(
            map(json!({"action": "left_click_drag", "start_coordinate": [100, 200], "coordinate": [300, 400]}))
                .unwrap(),
            vec![Action::Drag {
                path: vec![Point::new(100, 200), Point::new(300, 400)],
                button: Default::default(),
                keys: Vec::new()
            }]
        );
        assert_eq!(
            map(json!({"action": "hold_key", "text": "shift", "duration": 1.5})).unwrap(),
            vec![Action::HoldKey { keys: vec!["shift".into()], duration_ms: 1500 }]
        );
        assert_eq!(map(json!({"action": "wait", "duration": 1.5})).unwrap(), vec![Action::Wait { duration_ms: 1500 }]);
        assert_eq!(
            map(json!({"action": "zoom", "region": [100, 200, 400, 350]})).unwrap(),
            vec![Action::Zoom { x1: 100, y1: 200, x2: 400, y2: 350 }]
        );
        assert_eq!(
            map(json!({"action": "key", "text": "ctrl+a Delete"})).unwrap(),
            vec![
                Action::Keypress { keys: vec!["ctrl".into(), "a".into()] },
                Action::Keypress { keys: vec!["Delete".into()] }
            ]
        );
        assert_eq!(
            map(json!({"action": "triple_click", "coordinate": [1, 2]})).unwrap(),
            vec![Action::TripleClick { x: 1, y: 2 }]
        );
        assert_eq!(
            map(json!({"action": "left_mouse_down"})).unwrap(),
            vec![Action::MouseDown { button: MouseButton::Left, keys: Vec::new() }]
        );
        assert!(map(json!({"action": "mouse_move"})).is_err());
        assert!(map(json!({"action": "teleport"})).is_err());
        assert!(map(json!({})).is_err());
    }
}
