//! Local fake servers of the four vendor APIs, for tests and benchmarks (no network: they listen on
//! 127.0.0.1, port 0).
//!
//! A [`FakeServer`] records every request (path, headers, JSON body, arrival time on tokio's clock — so a test
//! on a paused clock measures in virtual time), checks it against the vendor's documented wire rules with a
//! [`Vendor`] checker (auth and version headers, tool definitions, every tool call of the previous turn
//! answered in order, images as base64 PNG at the declared size), and answers with whatever its responder
//! returns for that request: a JSON body, an SSE stream, an error status, a stream cut in the middle, or
//! headers followed by silence. Reply builders for each vendor produce both the JSON and the streamed form
//! of a turn, with the stream quirks the reference lists (`ping`s, a first `input_json_delta` of `""`, JSON
//! split mid-token). [`CacheSim`] models Anthropic's prompt cache (prefix hashes at breakpoints, 20-block
//! lookback) for the context-cost benchmark.

use std::collections::{BTreeMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use base64::Engine;
use serde_json::{Value, json};
use tokio::time::Instant;

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub index: usize,
    pub at: Instant,
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub body: Value,
    /// The size of the body in bytes.
    pub bytes: usize,
    /// Wire-rule violations found in this request.
    pub problems: Vec<String>,
}

/// What the fake answers.
#[derive(Debug, Clone)]
pub enum Reply {
    Json(Value),
    /// SSE: `(event name, data)` pairs.
    Sse(Vec<(Option<String>, String)>),
    Status {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// These events, then the connection ends before the terminal event.
    Cut(Vec<(Option<String>, String)>),
    /// Headers (200, event stream), then nothing ever.
    Idle,
    /// These events whole, then nothing ever (a model that streams part of its answer and stalls).
    Stall(Vec<(Option<String>, String)>),
}

impl Reply {
    pub fn error(status: u16, body: Value) -> Self {
        Self::Status { status, headers: Vec::new(), body: body.to_string() }
    }

    pub fn error_with(status: u16, headers: &[(&str, &str)], body: Value) -> Self {
        Self::Status {
            status,
            headers: headers.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
            body: body.to_string(),
        }
    }
}

pub type Responder = Box<dyn FnMut(&Recorded) -> Reply + Send>;

/// The vendor whose wire rules a fake checks.
#[derive(Debug, Clone)]
pub enum Vendor {
    Anthropic { key: String },
    OpenAi { key: String },
    Gemini { key: String },
    Compatible { key: Option<String> },
}

struct State {
    vendor: Vendor,
    responder: Responder,
    requests: Vec<Recorded>,
}

/// A running fake (stops when dropped).
pub struct FakeServer {
    pub url: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeServer {
    pub async fn start(vendor: Vendor, responder: Responder) -> std::io::Result<Self> {
        Self::start_with_latency(vendor, responder, std::time::Duration::ZERO).await
    }

    /// A fake that waits `latency` before it answers each request (a vendor's think time, for benchmarks).
    pub async fn start_with_latency(
        vendor: Vendor,
        responder: Responder,
        latency: std::time::Duration,
    ) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let state = Arc::new(Mutex::new(State { vendor, responder, requests: Vec::new() }));
        let shared = state.clone();
        let handler = move |uri: axum::http::Uri, headers: HeaderMap, body: axum::body::Bytes| {
            let state = shared.clone();
            async move {
                if !latency.is_zero() {
                    tokio::time::sleep(latency).await;
                }
                handle(&state, uri, headers, body)
            }
        };
        let app = axum::Router::new()
            .route("/{*path}", axum::routing::any(handler))
            // Well above the vendors' limits (Anthropic: 32 MB), which the checkers report instead.
            .layer(axum::extract::DefaultBodyLimit::max(512 * 1024 * 1024));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { url, state, task })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.lock().requests.clone()
    }

    /// Every violation in every request, prefixed with the request's index.
    pub fn problems(&self) -> Vec<String> {
        self.lock()
            .requests
            .iter()
            .flat_map(|r| r.problems.iter().map(move |p| format!("request {}: {p}", r.index)))
            .collect()
    }
}

fn handle(state: &Arc<Mutex<State>>, uri: axum::http::Uri, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    let mut state = state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let headers: BTreeMap<String, String> =
        headers.iter().map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or_default().to_string())).collect();
    let parsed: Result<Value, _> = serde_json::from_slice(&body);
    let mut recorded = Recorded {
        index: state.requests.len(),
        at: Instant::now(),
        path: uri.path_and_query().map(|p| p.to_string()).unwrap_or_default(),
        headers,
        body: parsed.as_ref().cloned().unwrap_or(Value::Null),
        bytes: body.len(),
        problems: Vec::new(),
    };
    if let Err(e) = parsed {
        recorded.problems.push(format!("body is not JSON: {e}"));
    } else {
        recorded.problems = check(&state.vendor, &recorded);
    }
    let reply = (state.responder)(&recorded);
    state.requests.push(recorded);
    respond(reply)
}

fn sse_text(events: &[(Option<String>, String)]) -> String {
    let mut out = String::new();
    for (event, data) in events {
        if let Some(event) = event {
            out.push_str(&format!("event: {event}\n"));
        }
        for line in data.split('\n') {
            out.push_str(&format!("data: {line}\n"));
        }
        out.push('\n');
    }
    out
}

fn respond(reply: Reply) -> Response {
    let build = |status: u16, content_type: &str, body: Body| {
        Response::builder()
            .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
            .header("content-type", content_type)
            .body(body)
            .unwrap_or_default()
    };
    match reply {
        Reply::Json(value) => build(200, "application/json", Body::from(value.to_string())),
        Reply::Sse(events) => {
            // Sent in small pieces, so that events and JSON split across reads.
            let text = sse_text(&events).into_bytes();
            let chunks: Vec<Result<Vec<u8>, std::io::Error>> = text.chunks(97).map(|c| Ok(c.to_vec())).collect();
            build(200, "text/event-stream", Body::from_stream(futures_util::stream::iter(chunks)))
        }
        Reply::Cut(events) => {
            let text = sse_text(&events).into_bytes();
            let half = text.len() / 2;
            let chunks: Vec<Result<Vec<u8>, std::io::Error>> = vec![Ok(text[..half].to_vec())];
            build(200, "text/event-stream", Body::from_stream(futures_util::stream::iter(chunks)))
        }
        Reply::Stall(events) => {
            let sent = futures_util::stream::iter(vec![Ok::<_, std::io::Error>(sse_text(&events).into_bytes())]);
            let stream = futures_util::StreamExt::chain(sent, futures_util::stream::pending());
            build(200, "text/event-stream", Body::from_stream(stream))
        }
        Reply::Idle => build(
            200,
            "text/event-stream",
            Body::from_stream(futures_util::stream::pending::<Result<Vec<u8>, std::io::Error>>()),
        ),
        Reply::Status { status, headers, body } => {
            let mut response = build(status, "application/json", Body::from(body));
            for (name, value) in headers {
                if let (Ok(name), Ok(value)) =
                    (axum::http::HeaderName::from_bytes(name.as_bytes()), axum::http::HeaderValue::from_str(&value))
                {
                    response.headers_mut().insert(name, value);
                }
            }
            response
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Wire checks

/// A responder that answers Anthropic requests with `turns[N]` (content blocks) at the N-th turn (the
/// assistant messages already in the request), and the last turn after that.
pub fn anthropic_turns(turns: Vec<Vec<Value>>, usage: Value) -> Responder {
    Box::new(move |r| {
        let n = r.body["messages"].as_array().map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
        let content = turns.get(n).or(turns.last()).cloned().unwrap_or_default();
        anthropic_reply(content, usage.clone(), true)
    })
}

/// Width and height of a base64 PNG, or why it is not one.
pub fn png_size(data: &str) -> Result<(u32, u32), String> {
    let bytes =
        base64::engine::general_purpose::STANDARD.decode(data).map_err(|e| format!("image is not base64: {e}"))?;
    if bytes.len() < 24 || &bytes[..8] != b"\x89PNG\r\n\x1a\n" || &bytes[12..16] != b"IHDR" {
        return Err("image is not a PNG".into());
    }
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    Ok((be(&bytes[16..20]), be(&bytes[20..24])))
}

fn data_url_size(url: &str) -> Result<(u32, u32), String> {
    let data = url.strip_prefix("data:image/png;base64,").ok_or("image URL is not a PNG data URL")?;
    png_size(data)
}

/// The wire-rule violations a fake finds in this request (what [`Recorded::problems`] holds).
pub fn check_request(vendor: &Vendor, r: &Recorded) -> Vec<String> {
    check(vendor, r)
}

fn check(vendor: &Vendor, r: &Recorded) -> Vec<String> {
    let mut problems = Vec::new();
    match vendor {
        Vendor::Anthropic { key } => check_anthropic(key, r, &mut problems),
        Vendor::OpenAi { key } => check_openai(key, r, &mut problems),
        Vendor::Gemini { key } => check_gemini(key, r, &mut problems),
        Vendor::Compatible { key } => check_compatible(key.as_deref(), r, &mut problems),
    }
    problems
}

fn header<'a>(r: &'a Recorded, name: &str) -> Option<&'a str> {
    r.headers.get(name).map(String::as_str)
}

fn check_anthropic(key: &str, r: &Recorded, p: &mut Vec<String>) {
    let b = &r.body;
    if r.bytes > 32 * 1000 * 1000 {
        p.push(format!("request of {} bytes is over the 32 MB limit", r.bytes));
    }
    if r.path != "/v1/messages" {
        p.push(format!("path {}", r.path));
    }
    if header(r, "x-api-key") != Some(key) {
        p.push("missing or wrong x-api-key".into());
    }
    if header(r, "anthropic-version") != Some("2023-06-01") {
        p.push("anthropic-version must be 2023-06-01".into());
    }
    if b["model"].as_str().is_none() || b["max_tokens"].as_u64().is_none() {
        p.push("model and max_tokens are required".into());
    }
    let tools = b["tools"].as_array().cloned().unwrap_or_default();
    let computers: Vec<&Value> = tools.iter().filter(|t| t["name"] == "computer").collect();
    let mut display = (0, 0);
    match computers.as_slice() {
        [tool] => {
            let kind = tool["type"].as_str().unwrap_or_default();
            let beta = match kind {
                "computer_20250124" => "computer-use-2025-01-24",
                "computer_20251124" => "computer-use-2025-11-24",
                _ => {
                    p.push(format!("unknown computer tool type {kind:?}"));
                    ""
                }
            };
            if !header(r, "anthropic-beta").unwrap_or_default().split(',').any(|b| b.trim() == beta) {
                p.push(format!("anthropic-beta must include {beta} for {kind}"));
            }
            match (tool["display_width_px"].as_u64(), tool["display_height_px"].as_u64()) {
                (Some(w), Some(h)) => display = (w as u32, h as u32),
                _ => p.push("computer tool without display_width_px/display_height_px".into()),
            }
            if kind == "computer_20251124" && tool["enable_zoom"] != true {
                p.push("computer_20251124 without enable_zoom".into());
            }
            if kind == "computer_20250124" && tool.get("enable_zoom").is_some() {
                p.push("enable_zoom is not a field of computer_20250124".into());
            }
        }
        _ => p.push(format!("expected one computer tool, found {}", computers.len())),
    }
    if !tools.iter().any(|t| t["name"] == "task_completion" && t["input_schema"]["type"] == "object") {
        p.push("task_completion is not declared with an input_schema".into());
    }
    // Client tools: `{name, description?, input_schema}` with a JSON Schema of "type": "object".
    for (i, tool) in tools.iter().enumerate().filter(|(_, t)| t.get("type").is_none_or(|k| k == "custom")) {
        if tool["name"].as_str().is_none() || tool["input_schema"]["type"] != "object" {
            p.push(format!("tools.{i}: a client tool needs a name and an input_schema of type object"));
        }
        if let Some(extra) = tool.as_object().and_then(|o| {
            o.keys().find(|k| !["type", "name", "description", "input_schema", "cache_control"].contains(&k.as_str()))
        }) {
            p.push(format!("tools.{i}: unknown field {extra:?} of a client tool"));
        }
    }
    let breakpoints = b.to_string().matches("\"cache_control\"").count();
    if breakpoints > 4 {
        p.push(format!("{breakpoints} cache breakpoints (at most 4)"));
    }
    let messages = b["messages"].as_array().cloned().unwrap_or_default();
    for (i, m) in messages.iter().enumerate() {
        let want = if i % 2 == 0 { "user" } else { "assistant" };
        if m["role"] != want {
            p.push(format!("messages.{i}: role must be {want}"));
        }
    }
    if messages.last().map(|m| &m["role"]) != Some(&json!("user")) {
        p.push("the last message must be the user's".into());
    }
    for (i, m) in messages.iter().enumerate() {
        let content = m["content"].as_array().cloned().unwrap_or_default();
        if m["role"] == "assistant" {
            let uses: Vec<&str> =
                content.iter().filter(|c| c["type"] == "tool_use").filter_map(|c| c["id"].as_str()).collect();
            let next = messages.get(i + 1).and_then(|n| n["content"].as_array()).cloned().unwrap_or_default();
            let results: Vec<&str> = next
                .iter()
                .take_while(|c| c["type"] == "tool_result")
                .filter_map(|c| c["tool_use_id"].as_str())
                .collect();
            let all_results = next.iter().filter(|c| c["type"] == "tool_result").count();
            if uses != results || all_results != results.len() {
                p.push(format!(
                    "messages.{}: tool_results {results:?} do not answer tool_uses {uses:?} in order, first",
                    i + 1
                ));
            }
        }
        for (j, block) in content.iter().enumerate().filter(|(_, c)| c["type"] == "tool_result") {
            if block.get("is_error").is_some_and(|e| !e.is_boolean()) {
                p.push(format!("messages.{i}.content.{j}: is_error must be a boolean"));
            }
            let parts_ok = match &block["content"] {
                Value::Null | Value::String(_) => true,
                Value::Array(parts) => parts.iter().all(|c| c["type"] == "text" || c["type"] == "image"),
                _ => false,
            };
            if !parts_ok {
                p.push(format!("messages.{i}.content.{j}: tool_result content must be a string or text/image blocks"));
            }
        }
        visit_images(&m["content"], &mut |image| {
            if image["source"]["type"] != "base64" || image["source"]["media_type"] != "image/png" {
                p.push(format!("messages.{i}: image source must be base64 image/png"));
                return;
            }
            match png_size(image["source"]["data"].as_str().unwrap_or_default()) {
                Ok((w, h)) if w > display.0 || h > display.1 => {
                    p.push(format!("messages.{i}: image {w}x{h} larger than the declared display {display:?}"))
                }
                Ok(_) => {}
                Err(e) => p.push(format!("messages.{i}: {e}")),
            }
        });
    }
    // The newest screenshot is exactly the declared size (coordinates are in that space).
    let mut last_size = None;
    visit_images(&json!(messages.last().map(|m| m["content"].clone())), &mut |image| {
        last_size = png_size(image["source"]["data"].as_str().unwrap_or_default()).ok();
    });
    if last_size.is_some_and(|s| s != display) {
        p.push(format!("the newest screenshot is {last_size:?}, not the declared {display:?}"));
    }
}

fn visit_images(value: &Value, f: &mut dyn FnMut(&Value)) {
    match value {
        Value::Object(map) => {
            if map.get("type") == Some(&json!("image")) {
                f(value);
            }
            for v in map.values() {
                visit_images(v, f);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| visit_images(v, f)),
        _ => {}
    }
}

fn check_openai(key: &str, r: &Recorded, p: &mut Vec<String>) {
    let b = &r.body;
    if r.path != "/v1/responses" {
        p.push(format!("path {}", r.path));
    }
    if header(r, "authorization") != Some(&format!("Bearer {key}")) {
        p.push("missing or wrong bearer token".into());
    }
    if b["truncation"] != "auto" {
        p.push("truncation must be \"auto\"".into());
    }
    let tools = b["tools"].as_array().cloned().unwrap_or_default();
    let mut display = None;
    match tools.first().and_then(|t| t["type"].as_str()) {
        Some("computer_use_preview") => {
            let t = &tools[0];
            match (t["display_width"].as_u64(), t["display_height"].as_u64(), t["environment"].as_str()) {
                (Some(w), Some(h), Some(_)) => display = Some((w as u32, h as u32)),
                _ => p.push("computer_use_preview needs display_width, display_height and environment".into()),
            }
            if !b["model"].as_str().unwrap_or_default().starts_with("computer-use-preview") {
                p.push("computer_use_preview is for computer-use-preview models".into());
            }
        }
        Some("computer") => {
            if tools[0].as_object().is_some_and(|o| o.len() != 1) {
                p.push("the GA computer tool has no fields besides type".into());
            }
        }
        other => p.push(format!("first tool must be the computer tool, found {other:?}")),
    }
    if !tools.iter().any(|t| t["type"] == "function" && t["name"] == "task_completion") {
        p.push("task_completion is not declared".into());
    }
    // Function tools are flat: `{type, name, description?, parameters, strict}`. `strict` defaults to true, and
    // a strict schema must close every object and require every property.
    for (i, tool) in tools.iter().enumerate().filter(|(_, t)| t["type"] == "function") {
        if tool["name"].as_str().is_none() || !tool["parameters"].is_object() || tool.get("function").is_some() {
            p.push(format!("tools.{i}: a function tool needs a name and parameters at its top level"));
        }
        if tool.get("strict").is_some_and(|s| !s.is_boolean()) {
            p.push(format!("tools.{i}: strict must be a boolean"));
        }
        if tool.get("strict").is_none_or(|s| s == true) && !strict_compatible(&tool["parameters"]) {
            p.push(format!("tools.{i}: strict (the default) with a schema strict mode refuses"));
        }
    }
    let input = b["input"].as_array().cloned().unwrap_or_default();
    let mut calls = Vec::new();
    let mut outputs = Vec::new();
    let mut checked_calls: HashSet<String> = HashSet::new();
    for (i, item) in input.iter().enumerate() {
        match item["type"].as_str() {
            Some("computer_call") | Some("function_call") => {
                let id = item["call_id"].as_str().unwrap_or_default().to_string();
                if item["pending_safety_checks"].as_array().is_some_and(|c| !c.is_empty()) {
                    checked_calls.insert(id.clone());
                }
                calls.push(id);
            }
            Some("computer_call_output") | Some("function_call_output") => {
                let id = item["call_id"].as_str().unwrap_or_default().to_string();
                if !calls.contains(&id) {
                    p.push(format!("input.{i}: output for {id} before (or without) its call"));
                }
                let acknowledged = item.get("acknowledged_safety_checks").is_some();
                if acknowledged != checked_calls.contains(&id) {
                    p.push(format!("input.{i}: acknowledged_safety_checks must match the call's pending checks"));
                }
                if item["type"] == "function_call_output" && !item["output"].is_string() {
                    p.push(format!("input.{i}: a function_call_output's output must be a string"));
                }
                if item["type"] == "computer_call_output" {
                    if item["output"]["type"] != "computer_screenshot" {
                        p.push(format!("input.{i}: output.type must be computer_screenshot"));
                    }
                    match data_url_size(item["output"]["image_url"].as_str().unwrap_or_default()) {
                        Ok(size) if size != (8, 8) && display.is_some_and(|d| d != size) => {
                            p.push(format!("input.{i}: screenshot {size:?} is not the declared display {display:?}"))
                        }
                        Ok(_) => {}
                        Err(e) => p.push(format!("input.{i}: {e}")),
                    }
                    // The browser environment's page URL (openai-cua-sample-app): a string, and only there.
                    if let Some(url) = item["output"].get("current_url") {
                        let browser = tools.first().is_some_and(|t| t["environment"] == "browser");
                        if !url.is_string() || !browser {
                            p.push(format!("input.{i}: current_url is a string, sent in the browser environment only"));
                        }
                    }
                }
                outputs.push(id);
            }
            _ => {}
        }
        visit_typed(item, "input_image", &mut |image| {
            if let Err(e) = data_url_size(image["image_url"].as_str().unwrap_or_default()) {
                p.push(format!("input.{i}: {e}"));
            }
        });
    }
    if calls != outputs {
        p.push(format!("calls {calls:?} are not answered in order by outputs {outputs:?}"));
    }
}

/// Whether OpenAI's strict mode accepts a schema: every object has `additionalProperties: false` and
/// requires all of its properties.
fn strict_compatible(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            if map.get("type") == Some(&json!("object")) {
                let keys: HashSet<&str> = map
                    .get("properties")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                    .map(|(k, _)| k.as_str())
                    .collect();
                let required: HashSet<&str> = map
                    .get("required")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                if map.get("additionalProperties") != Some(&json!(false)) || keys != required {
                    return false;
                }
            }
            map.values().all(strict_compatible)
        }
        Value::Array(items) => items.iter().all(strict_compatible),
        _ => true,
    }
}

fn visit_typed(value: &Value, kind: &str, f: &mut dyn FnMut(&Value)) {
    match value {
        Value::Object(map) => {
            if map.get("type") == Some(&json!(kind)) {
                f(value);
            }
            map.values().for_each(|v| visit_typed(v, kind, f));
        }
        Value::Array(items) => items.iter().for_each(|v| visit_typed(v, kind, f)),
        _ => {}
    }
}

fn check_gemini(key: &str, r: &Recorded, p: &mut Vec<String>) {
    let b = &r.body;
    if !(r.path.starts_with("/models/")
        && (r.path.ends_with(":streamGenerateContent?alt=sse") || r.path.ends_with(":generateContent")))
    {
        p.push(format!("path {}", r.path));
    }
    if header(r, "x-goog-api-key") != Some(key) {
        p.push("missing or wrong x-goog-api-key".into());
    }
    if b["tools"][0]["computerUse"]["environment"].as_str().is_none() {
        p.push("tools[0] must be computerUse with an environment".into());
    }
    let declared = b["tools"][1]["functionDeclarations"].as_array().cloned().unwrap_or_default();
    if !declared.iter().any(|d| d["name"] == "task_completion") {
        p.push("task_completion is not declared".into());
    }
    // `parameters` (Gemini's OpenAPI-subset `Schema`) and `parametersJsonSchema` (JSON Schema) are mutually
    // exclusive; `parameters` refuses fields outside its subset.
    for (i, d) in declared.iter().enumerate() {
        let name_ok = d["name"].as_str().is_some_and(|n| {
            !n.is_empty()
                && n.len() <= 64
                && n.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && n.chars().all(|c| c.is_ascii_alphanumeric() || "_.:-".contains(c))
        });
        if !name_ok {
            p.push(format!("functionDeclarations.{i}: invalid name {}", d["name"]));
        }
        match (d.get("parameters"), d.get("parametersJsonSchema")) {
            (Some(_), Some(_)) => {
                p.push(format!("functionDeclarations.{i}: parameters and parametersJsonSchema both set"))
            }
            (Some(schema), None) => openapi_subset(schema, &format!("functionDeclarations.{i}.parameters"), p),
            (None, Some(schema)) if schema["type"] != "object" => {
                p.push(format!("functionDeclarations.{i}: parametersJsonSchema must describe an object"))
            }
            _ => {}
        }
    }
    let contents = b["contents"].as_array().cloned().unwrap_or_default();
    for (i, c) in contents.iter().enumerate() {
        let want = if i % 2 == 0 { "user" } else { "model" };
        if c["role"] != want {
            p.push(format!("contents.{i}: role must be {want}"));
        }
        let parts = c["parts"].as_array().cloned().unwrap_or_default();
        if c["role"] == "model" {
            let calls: Vec<(Value, Value)> = parts
                .iter()
                .filter_map(|p| p.get("functionCall"))
                .map(|f| (f["name"].clone(), f["id"].clone()))
                .collect();
            let next = contents.get(i + 1).and_then(|n| n["parts"].as_array()).cloned().unwrap_or_default();
            let responses: Vec<(Value, Value)> = next
                .iter()
                .filter_map(|p| p.get("functionResponse"))
                .map(|f| (f["name"].clone(), f["id"].clone()))
                .collect();
            if calls != responses {
                p.push(format!("contents.{}: function responses {responses:?} do not answer calls {calls:?}", i + 1));
            }
            for response in next.iter().filter_map(|p| p.get("functionResponse")) {
                if !response["response"].is_object() || response["name"].as_str().is_none() {
                    p.push(format!("contents.{}: a functionResponse needs a name and a response object", i + 1));
                }
            }
        }
        let mut inline = Vec::new();
        collect_key(c, "inlineData", &mut inline);
        for d in inline {
            if d["mimeType"] != "image/png" {
                p.push(format!("contents.{i}: inlineData must be image/png"));
            } else if let Err(e) = png_size(d["data"].as_str().unwrap_or_default()) {
                p.push(format!("contents.{i}: {e}"));
            }
        }
    }
}

/// Reports fields of a Gemini `Schema` (the OpenAPI 3.0 subset of `parameters`) that it does not have.
fn openapi_subset(schema: &Value, at: &str, p: &mut Vec<String>) {
    const FIELDS: &[&str] = &[
        "type",
        "format",
        "title",
        "description",
        "nullable",
        "enum",
        "maxItems",
        "minItems",
        "properties",
        "required",
        "minProperties",
        "maxProperties",
        "minLength",
        "maxLength",
        "pattern",
        "example",
        "anyOf",
        "propertyOrdering",
        "default",
        "items",
        "minimum",
        "maximum",
    ];
    let Some(map) = schema.as_object() else {
        p.push(format!("{at}: not a Schema object"));
        return;
    };
    for (key, value) in map {
        match key.as_str() {
            "properties" => {
                for (name, property) in value.as_object().into_iter().flatten() {
                    openapi_subset(property, &format!("{at}.properties.{name}"), p);
                }
            }
            "items" => openapi_subset(value, &format!("{at}.items"), p),
            "anyOf" => {
                for (j, option) in value.as_array().into_iter().flatten().enumerate() {
                    openapi_subset(option, &format!("{at}.anyOf.{j}"), p);
                }
            }
            "type" if !value.is_string() => p.push(format!("{at}.type: must be one type name")),
            other if !FIELDS.contains(&other) => p.push(format!("{at}: unknown Schema field {other:?}")),
            _ => {}
        }
    }
}

fn collect_key(value: &Value, key: &str, out: &mut Vec<Value>) {
    match value {
        Value::Object(map) => {
            if let Some(v) = map.get(key) {
                out.push(v.clone());
            }
            map.values().for_each(|v| collect_key(v, key, out));
        }
        Value::Array(items) => items.iter().for_each(|v| collect_key(v, key, out)),
        _ => {}
    }
}

fn check_compatible(key: Option<&str>, r: &Recorded, p: &mut Vec<String>) {
    let b = &r.body;
    if r.path != "/v1/chat/completions" {
        p.push(format!("path {}", r.path));
    }
    let auth = header(r, "authorization");
    match key {
        Some(key) if auth != Some(&format!("Bearer {key}")) => p.push("missing or wrong bearer token".into()),
        None if auth.is_some() => p.push("a key was sent to an endpoint that should get none".into()),
        _ => {}
    }
    for (i, tool) in b["tools"].as_array().into_iter().flatten().enumerate() {
        if tool["type"] != "function"
            || tool["function"]["name"].as_str().is_none()
            || !tool["function"]["parameters"].is_object()
        {
            p.push(format!("tools.{i}: must be {{type: function, function: {{name, description?, parameters}}}}"));
        }
    }
    let messages = b["messages"].as_array().cloned().unwrap_or_default();
    for (i, m) in messages.iter().enumerate() {
        if m["role"] == "tool" && !m["content"].is_string() && !m["content"].is_array() {
            p.push(format!("messages.{i}: a tool message's content must be a string or parts"));
        }
        if let Some(calls) = m["tool_calls"].as_array() {
            let ids: Vec<&str> = calls.iter().filter_map(|c| c["id"].as_str()).collect();
            let answers: Vec<&str> = messages[i + 1..]
                .iter()
                .take_while(|n| n["role"] == "tool")
                .filter_map(|n| n["tool_call_id"].as_str())
                .collect();
            if ids != answers {
                p.push(format!("messages.{i}: tool calls {ids:?} answered by {answers:?}"));
            }
        }
        visit_typed(m, "image_url", &mut |part| {
            if let Err(e) = data_url_size(part["image_url"]["url"].as_str().unwrap_or_default()) {
                p.push(format!("messages.{i}: {e}"));
            }
        });
    }
}

// ---------------------------------------------------------------------------------------------------------
// Replies

fn ev(name: &str, data: Value) -> (Option<String>, String) {
    (Some(name.to_string()), data.to_string())
}

/// An Anthropic message with `content` blocks, as JSON or as a stream.
pub fn anthropic_reply(content: Vec<Value>, usage: Value, stream: bool) -> Reply {
    let stop_reason = if content.iter().any(|b| b["type"] == "tool_use") { "tool_use" } else { "end_turn" };
    let message = json!({"id": "msg_fake", "type": "message", "role": "assistant", "model": "claude-fake",
        "content": content, "stop_reason": stop_reason, "stop_sequence": null, "usage": usage});
    if !stream {
        return Reply::Json(message);
    }
    let mut events = vec![ev(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_fake", "type": "message", "role": "assistant",
            "content": [], "model": "claude-fake", "stop_reason": null, "usage": {"input_tokens": usage["input_tokens"],
            "cache_creation_input_tokens": usage["cache_creation_input_tokens"],
            "cache_read_input_tokens": usage["cache_read_input_tokens"], "output_tokens": 1}}}),
    )];
    for (index, block) in message["content"].as_array().into_iter().flatten().enumerate() {
        match block["type"].as_str() {
            Some("text") => {
                events.push(ev(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "text", "text": ""}}),
                ));
                let text = block["text"].as_str().unwrap_or_default();
                let mid = text.char_indices().nth(text.chars().count() / 2).map_or(0, |(i, _)| i);
                for piece in [&text[..mid], &text[mid..]] {
                    events.push(ev(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "text_delta", "text": piece}}),
                    ));
                }
            }
            Some("tool_use") => {
                events.push(ev(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}}),
                ));
                events.push(ev(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": ""}}),
                ));
                events.push(ev("ping", json!({"type": "ping"})));
                let input = block["input"].to_string();
                let mid = input.len() / 2;
                let mid = (mid..input.len()).find(|&i| input.is_char_boundary(i)).unwrap_or(input.len());
                for piece in [&input[..mid], &input[mid..]] {
                    events.push(ev(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece}}),
                    ));
                }
            }
            _ => {
                events.push(ev(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": index, "content_block": block}),
                ));
            }
        }
        events.push(ev("content_block_stop", json!({"type": "content_block_stop", "index": index})));
    }
    events.push(ev(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null},
        "usage": {"output_tokens": usage["output_tokens"]}}),
    ));
    events.push(ev("message_stop", json!({"type": "message_stop"})));
    Reply::Sse(events)
}

/// An OpenAI Response with these output items, as JSON or as a stream.
pub fn openai_reply(output: Vec<Value>, usage: Value, stream: bool) -> Reply {
    let response = json!({"id": "resp_fake", "object": "response", "status": "completed", "model": "fake",
        "output": output, "usage": usage,
        "tools": [{"type": "computer-use-preview-2025-03-11"}]});
    if !stream {
        return Reply::Json(response);
    }
    let mut seq = 0;
    let mut next = |mut data: Value| {
        data["sequence_number"] = json!(seq);
        seq += 1;
        let name = data["type"].as_str().unwrap_or_default().to_string();
        (Some(name), data.to_string())
    };
    let mut events = vec![next(
        json!({"type": "response.created", "response": {"id": "resp_fake", "status": "in_progress", "output": []}}),
    )];
    for (i, item) in output.iter().enumerate() {
        let item_id = item["id"].as_str().map_or_else(|| format!("item_{i}"), str::to_string);
        if item["type"] == "function_call" {
            // As documented: the item is added with empty arguments, which then stream as deltas.
            let mut added = item.clone();
            added["id"] = json!(item_id);
            added["arguments"] = json!("");
            added["status"] = json!("in_progress");
            events.push(next(json!({"type": "response.output_item.added", "output_index": i, "item": added})));
            let arguments = item["arguments"].as_str().unwrap_or("{}").to_string();
            let mid = (arguments.len() / 2..arguments.len()).find(|&m| arguments.is_char_boundary(m)).unwrap_or(0);
            for piece in [&arguments[..mid], &arguments[mid..]] {
                events.push(next(json!({"type": "response.function_call_arguments.delta", "item_id": item_id,
                    "output_index": i, "delta": piece})));
            }
            events.push(next(json!({"type": "response.function_call_arguments.done", "item_id": item_id,
                "output_index": i, "arguments": arguments})));
            events.push(next(json!({"type": "response.output_item.done", "output_index": i, "item": item})));
            continue;
        }
        events.push(next(json!({"type": "response.output_item.added", "output_index": i, "item": item})));
        if item["type"] == "reasoning" {
            for (j, part) in item["summary"].as_array().into_iter().flatten().enumerate() {
                if let Some(text) = part["text"].as_str() {
                    events.push(next(json!({"type": "response.reasoning_summary_text.delta", "item_id": item_id,
                        "output_index": i, "summary_index": j, "delta": text})));
                }
            }
        }
        if item["type"] == "message" {
            for part in item["content"].as_array().into_iter().flatten() {
                if let Some(text) = part["text"].as_str() {
                    events.push(next(json!({"type": "response.output_text.delta", "output_index": i, "content_index": 0, "delta": text})));
                }
            }
        }
        events.push(next(json!({"type": "response.output_item.done", "output_index": i, "item": item})));
    }
    events.push(next(json!({"type": "response.completed", "response": response})));
    Reply::Sse(events)
}

/// A Gemini response with these model parts, as JSON or as two streamed chunks.
pub fn gemini_reply(parts: Vec<Value>, usage: Value, stream: bool) -> Reply {
    let whole = json!({"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": usage, "modelVersion": "gemini-fake", "responseId": "fake"});
    if !stream {
        return Reply::Json(whole);
    }
    let (text, rest): (Vec<Value>, Vec<Value>) = parts.into_iter().partition(|p| p.get("text").is_some());
    let first = json!({"candidates": [{"content": {"role": "model", "parts": text}, "index": 0}]});
    let last = json!({"candidates": [{"content": {"role": "model", "parts": rest}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": usage});
    Reply::Sse(vec![(None, first.to_string()), (None, last.to_string())])
}

/// A chat completion with this text and these `(id, name, arguments)` tool calls.
pub fn compatible_reply(content: &str, calls: &[(&str, &str, Value)], usage: Value) -> Reply {
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}}))
        .collect();
    let mut message = json!({"role": "assistant", "content": content});
    if !tool_calls.is_empty() {
        message["tool_calls"] = Value::Array(tool_calls);
    }
    Reply::Json(json!({"id": "chatcmpl-fake", "object": "chat.completion", "model": "fake",
        "choices": [{"index": 0, "message": message, "finish_reason": if calls.is_empty() { "stop" } else { "tool_calls" }}],
        "usage": usage}))
}

// ---------------------------------------------------------------------------------------------------------
// Token counting and Anthropic's prompt cache

/// Tokens of one block: 4 characters a token for text and JSON, `w·h/750` per image.
fn block_tokens(block: &Value) -> u64 {
    let mut images = 0;
    let mut without_images = block.clone();
    strip_images(&mut without_images, &mut images);
    images + (without_images.to_string().len() as u64).div_ceil(4)
}

fn strip_images(value: &mut Value, tokens: &mut u64) {
    match value {
        Value::Object(map) => {
            if map.get("type") == Some(&json!("image"))
                && let Some(data) = map.get("source").and_then(|s| s.get("data")).and_then(Value::as_str)
            {
                if let Ok((w, h)) = png_size(data) {
                    *tokens += (u64::from(w) * u64::from(h) / 750).max(1);
                }
                map.remove("source");
            }
            map.values_mut().for_each(|v| strip_images(v, tokens));
        }
        Value::Array(items) => items.iter_mut().for_each(|v| strip_images(v, tokens)),
        _ => {}
    }
}

/// Input tokens of any vendor's request body as the fakes count them: 4 characters a token for the JSON
/// text, `w·h/750` for every PNG (Anthropic's base64 sources, and the data URLs of OpenAI and compatible
/// servers). No cache: what OpenAI-style APIs bill as input.
pub fn request_tokens(body: &Value) -> u64 {
    let mut images = 0;
    let mut plain = body.clone();
    strip_images(&mut plain, &mut images);
    strip_data_urls(&mut plain, &mut images);
    images + (plain.to_string().len() as u64).div_ceil(4)
}

fn strip_data_urls(value: &mut Value, tokens: &mut u64) {
    const PREFIX: &str = "data:image/png;base64,";
    match value {
        Value::String(text) if text.starts_with(PREFIX) => {
            if let Ok((w, h)) = png_size(&text[PREFIX.len()..]) {
                *tokens += (u64::from(w) * u64::from(h) / 750).max(1);
            }
            text.clear();
        }
        Value::Object(map) => map.values_mut().for_each(|v| strip_data_urls(v, tokens)),
        Value::Array(items) => items.iter_mut().for_each(|v| strip_data_urls(v, tokens)),
        _ => {}
    }
}

/// A model of Anthropic's prompt cache: entries are prefixes ending at a `cache_control` breakpoint; a
/// request reads the longest cached prefix ending at a breakpoint or up to 20 blocks before one, writes
/// the rest up to its last breakpoint, and pays full price after it.
#[derive(Debug, Default)]
pub struct CacheSim {
    entries: HashSet<u64>,
}

impl CacheSim {
    /// Anthropic `usage` for a Messages request body (tools → system → messages order).
    pub fn usage(&mut self, body: &Value) -> Value {
        let mut blocks: Vec<Value> = Vec::new();
        blocks.extend(body["tools"].as_array().cloned().unwrap_or_default());
        blocks.extend(body["system"].as_array().cloned().unwrap_or_default());
        for m in body["messages"].as_array().into_iter().flatten() {
            blocks.extend(m["content"].as_array().cloned().unwrap_or_default());
        }
        let mut prefix = Vec::with_capacity(blocks.len());
        let mut tokens = Vec::with_capacity(blocks.len());
        let mut breakpoints = Vec::new();
        let mut hash = 0u64;
        let mut total = 0u64;
        for (i, block) in blocks.iter().enumerate() {
            let mut plain = block.clone();
            if let Some(map) = plain.as_object_mut()
                && map.remove("cache_control").is_some()
            {
                breakpoints.push(i);
            }
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            hash.hash(&mut hasher);
            plain.to_string().hash(&mut hasher);
            hash = hasher.finish();
            prefix.push(hash);
            total += block_tokens(&plain);
            tokens.push(total);
        }
        let mut read_end = None;
        for &b in &breakpoints {
            for i in (b.saturating_sub(20)..=b).rev() {
                if self.entries.contains(&prefix[i]) {
                    read_end = Some(read_end.map_or(i, |r: usize| r.max(i)));
                    break;
                }
            }
        }
        for &b in &breakpoints {
            self.entries.insert(prefix[b]);
        }
        let read = read_end.map_or(0, |i| tokens[i]);
        let cached_end = breakpoints.last().map_or(0, |&b| tokens[b]);
        let write = cached_end.saturating_sub(read);
        let input = total - read - write;
        json!({"input_tokens": input, "cache_creation_input_tokens": write, "cache_read_input_tokens": read, "output_tokens": 50})
    }
}
