//! Pieces every vendor adapter uses to render a [`ModelRequest`] and read a response: the conversation laid
//! out as (screen, turn, results) slots, the system prompt, image sizes, data URLs, JSON helpers.

use agentd_computer::{Action, PageInfo, Point, Size};
use serde_json::Value;

use super::SCREENSHOT_PLACEHOLDER;
use super::{CallKind, Exchange, ModelImage, ModelRequest, ToolCall, ToolResult, Usage};
use crate::screen::coords::fit_within;

/// What the model is told in every request, besides the task.
pub const SYSTEM_PROMPT: &str = "You operate a computer through the tools you are given, to carry out the task the \
user describes. After your actions you receive a new screenshot of the screen. Work step by step, check the \
screen after each action, and do not ask the user questions: nobody answers. When the task is done, or if it \
cannot be done, call task_completion with success and a short summary.";

/// What one user turn shows: the screenshot (or `None` when the context policy dropped it) and loop notes.
#[derive(Debug, Clone, Copy)]
pub struct Screen<'a> {
    pub image: Option<&'a ModelImage>,
    pub notes: &'a [String],
    /// The page a browser showed with it; `None` on desktops.
    pub page: Option<&'a PageInfo>,
}

/// One exchange with the screen shown *after* its results (the next exchange's, or the current one).
#[derive(Debug, Clone, Copy)]
pub struct Slot<'a> {
    pub exchange: &'a Exchange,
    pub next: Screen<'a>,
}

/// The conversation in the order every API wants it: the first screen (with the instructions), then each
/// exchange followed by the screen after it.
pub fn layout<'a>(request: &ModelRequest<'a>) -> (Screen<'a>, Vec<Slot<'a>>) {
    let current = Screen { image: Some(request.screenshot), notes: request.notes, page: request.page };
    let history = request.history;
    let shown = |e: &'a Exchange| Screen { image: e.screenshot.as_ref(), notes: &e.notes, page: e.page.as_ref() };
    let first = match history.first() {
        Some(e) => shown(e),
        None => current,
    };
    let slots = history
        .iter()
        .enumerate()
        .map(|(i, exchange)| {
            let next = match history.get(i + 1) {
                Some(e) => shown(e),
                None => current,
            };
            Slot { exchange, next }
        })
        .collect();
    (first, slots)
}

/// The first user text: the task, and the summary of compacted steps.
pub fn task_text(request: &ModelRequest<'_>) -> String {
    let mut text = format!("Task: {}", request.instructions);
    if let Some(summary) = request.summary {
        text.push_str("\n\nEarlier steps, summarised (their screenshots are gone):\n");
        text.push_str(summary);
    }
    text
}

pub fn placeholder() -> &'static str {
    SCREENSHOT_PLACEHOLDER
}

pub fn data_url(image: &ModelImage) -> String {
    format!("data:{};base64,{}", image.media_type, image.base64())
}

/// The result of `call_id` in `results`, or an error result when the loop gave none.
pub fn result_for<'a>(results: &'a [ToolResult], call_id: &str) -> std::borrow::Cow<'a, ToolResult> {
    match results.iter().find(|r| r.call_id == call_id) {
        Some(r) => std::borrow::Cow::Borrowed(r),
        None => std::borrow::Cow::Owned(ToolResult {
            call_id: call_id.to_string(),
            ok: false,
            message: "not run".into(),
            image: None,
        }),
    }
}

/// The screenshot size for image-space models: the reference recommendation (Anthropic computer-use demo
/// `computer.py`, scaling targets XGA 1024×768, WXGA 1280×800, FWXGA 1366×768 matched by aspect ratio within
/// 0.02), else the screen fitted within WXGA. Screens smaller than the target are sent as they are.
pub fn recommended_image_size(screen: Size) -> Size {
    const TARGETS: [Size; 3] = [Size::new(1024, 768), Size::new(1280, 800), Size::new(1366, 768)];
    let ratio = f64::from(screen.width) / f64::from(screen.height.max(1));
    for target in TARGETS {
        let target_ratio = f64::from(target.width) / f64::from(target.height);
        if (target_ratio - ratio).abs() < 0.02 && screen.width > target.width {
            return target;
        }
    }
    fit_within(screen, Size::new(1280, 800))
}

/// A JSON value as an integer coordinate (models send `500`, `500.0` or `"500"`).
pub fn int(value: Option<&Value>) -> Option<i32> {
    let value = value?;
    let n = match value {
        Value::Number(n) => n.as_f64()?,
        Value::String(s) => s.trim().parse::<f64>().ok()?,
        _ => return None,
    };
    (n.is_finite() && n.abs() < 1e9).then(|| n.round() as i32)
}

/// `[x, y]` as a point.
pub fn point(value: Option<&Value>) -> Option<Point> {
    let array = value?.as_array()?;
    if array.len() != 2 {
        return None;
    }
    Some(Point::new(int(array.first())?, int(array.get(1))?))
}

/// Seconds (a number or numeric string) as milliseconds, bounded.
pub fn seconds_ms(value: Option<&Value>, default_ms: u64) -> u64 {
    let secs = match value {
        Some(Value::Number(n)) => n.as_f64(),
        Some(Value::String(s)) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    match secs {
        Some(s) if s.is_finite() && s >= 0.0 => (s * 1000.0).min(1e9) as u64,
        _ => default_ms,
    }
}

pub fn str_of<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

pub fn u64_of(value: &Value, pointer: &str) -> u64 {
    value.pointer(pointer).and_then(Value::as_u64).unwrap_or(0)
}

/// A call the adapter cannot express in agentd's action vocabulary: it still gets an (error) answer, so the
/// pairing every API demands stays intact.
pub fn unsupported(id: String, what: &str, arguments: Value) -> ToolCall {
    ToolCall { id, kind: CallKind::Function { name: format!("unsupported: {what}"), arguments } }
}

pub fn computer(id: String, actions: Vec<Action>) -> ToolCall {
    ToolCall { id, kind: CallKind::Computer { actions } }
}

/// Computes cost from a price (USD per million tokens) and normalised usage (see [`Usage`]).
pub fn with_cost(mut usage: Usage, price: Option<&crate::config::Price>) -> Usage {
    if let Some(price) = price {
        usage.cost_usd = price.cost(&usage);
    }
    usage
}

/// Short description of a JSON value for error messages (never the whole body: it may hold an image).
pub fn describe_json(value: &Value) -> String {
    let text = value.to_string();
    if text.len() > 200 {
        let mut end = 200;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &text[..end])
    } else {
        text
    }
}
