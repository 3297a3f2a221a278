//! Request bodies against golden files (one per adapter, for a fixed two-step history with a dropped
//! screenshot, a failed call and loop notes), and garbage in every decoder: random bytes, random JSON and
//! random stream events give a typed error or a turn, never a panic.
//!
//! Regenerate the golden files with `UPDATE_GOLDEN=1 cargo test --test it models_wire`: the tests whose file
//! changed rewrite it and still fail, so the run that wrote them never passes; run again without
//! `UPDATE_GOLDEN` to check. Under CI (`CI` set) a golden file is never rewritten.

use std::path::PathBuf;
use std::sync::Arc;

use agentd::model::anthropic::{self, AnthropicModel, MessageDecoder};
use agentd::model::compatible::CompatibleModel;
use agentd::model::gemini::{self, ContentDecoder, GeminiModel};
use agentd::model::http::{AttemptError, Decoder, SseEvent};
use agentd::model::openai::{self, OpenAiModel, ResponseDecoder};
use agentd::model::{CallKind, Delta, Exchange, ModelImage, ModelRequest, ModelTurn, Shared, ToolResult};
use agentd::screen::image::encode_png;
use agentd::task::ModelOptions;
use agentd_computer::{Frame, Size};
use proptest::prelude::*;
use serde_json::{Value, json};

const SCREEN: Size = Size::new(1280, 800);

fn image(shade: u8) -> ModelImage {
    let size = Size::new(4, 4);
    let frame = Frame::from_rgb(size, vec![shade; 48]).unwrap();
    ModelImage::new(size, "image/png", encode_png(&frame).unwrap().into())
}

fn shared() -> Shared {
    let toml = "[models.openai-compatible]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"qwen2.5-vl\"\n";
    let config = agentd::config::parse(toml, "t.toml", &[]).unwrap();
    Shared::with_env(&config, Arc::new(|_: &str| Some("sk-golden".to_string())))
}

fn options(model: &str) -> ModelOptions {
    ModelOptions { model: Some(model.into()), max_tokens: Some(1024), temperature: None }
}

/// Two exchanges: the first's screenshot was dropped by the context policy; its second call failed.
fn history(turns: [ModelTurn; 2]) -> Vec<Exchange> {
    let [first, second] = turns;
    let results = |turn: &ModelTurn, fail_second: bool| -> Vec<ToolResult> {
        turn.calls
            .iter()
            .enumerate()
            .map(|(i, c)| ToolResult {
                call_id: c.id.clone(),
                ok: !(fail_second && i == 1),
                message: if fail_second && i == 1 { "action 1 (type) failed: no focus".into() } else { "ok".into() },
                image: None,
            })
            .collect()
    };
    vec![
        Exchange { step: 0, screenshot: None, notes: vec![], page: None, results: results(&first, true), turn: first },
        Exchange {
            step: 1,
            screenshot: Some(image(100)),
            notes: vec!["Note: resumed.".into()],
            page: None,
            results: results(&second, false),
            turn: second,
        },
    ]
}

fn golden(name: &str, body: &Value) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/golden").join(format!("{name}.json"));
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let ci = std::env::var_os("CI").is_some();
    if let Err(why) = check_golden(&path, body, update, ci) {
        panic!("{name}: {why}");
    }
}

/// Compares `body` with the golden file at `path`. With `update` a file that differs (or is missing) is
/// rewritten and the check still fails, so a run that rewrote anything never passes; under `ci` rewriting is
/// refused.
fn check_golden(path: &std::path::Path, body: &Value, update: bool, ci: bool) -> Result<(), String> {
    let text = serde_json::to_string_pretty(body).unwrap() + "\n";
    if update && ci {
        return Err(format!("UPDATE_GOLDEN is set under CI: {} is not rewritten there", path.display()));
    }
    let expected = std::fs::read_to_string(path);
    if expected.as_deref().is_ok_and(|expected| expected == text) {
        return Ok(());
    }
    if update {
        std::fs::create_dir_all(path.parent().unwrap()).map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::write(path, &text).map_err(|e| format!("{}: {e}", path.display()))?;
        return Err(format!(
            "golden file {} rewritten; re-run without UPDATE_GOLDEN (and review the diff)",
            path.display()
        ));
    }
    match expected {
        Err(e) => Err(format!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display())),
        Ok(_) => Err(format!("the request body differs from {}; UPDATE_GOLDEN=1 rewrites it\n{text}", path.display())),
    }
}

#[test]
fn golden_files_are_rewritten_only_by_a_failing_run_and_never_under_ci() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("golden").join("x.json");
    let body = json!({"a": 1});
    let same = serde_json::to_string_pretty(&body).unwrap() + "\n";
    let written = || std::fs::read_to_string(&path).ok();

    // Missing: fails; with UPDATE_GOLDEN it is written, and the run still fails.
    let missing = check_golden(&path, &body, false, false);
    assert!(missing.as_ref().is_err_and(|e| e.contains("UPDATE_GOLDEN=1 writes it")), "{missing:?}");
    assert_eq!(written(), None);
    let rewritten = check_golden(&path, &body, true, false);
    assert!(rewritten.as_ref().is_err_and(|e| e.contains("re-run without UPDATE_GOLDEN")), "{rewritten:?}");
    assert_eq!(written().as_deref(), Some(same.as_str()));
    // Now the same: passes, with or without UPDATE_GOLDEN, and nothing is written.
    assert_eq!(check_golden(&path, &body, false, false), Ok(()));
    assert_eq!(check_golden(&path, &body, true, false), Ok(()));

    // Different: fails and says how; with UPDATE_GOLDEN it is rewritten and still fails.
    let other = json!({"a": 2});
    let differs = check_golden(&path, &other, false, false);
    assert!(differs.as_ref().is_err_and(|e| e.contains("differs")), "{differs:?}");
    assert_eq!(written().as_deref(), Some(same.as_str()));
    let rewritten = check_golden(&path, &other, true, false);
    assert!(rewritten.as_ref().is_err_and(|e| e.contains("rewritten")), "{rewritten:?}");
    assert_ne!(written().as_deref(), Some(same.as_str()));

    // Under CI: refused, and the file is left as it was (also when it would not change).
    let before = written();
    for body in [&body, &other] {
        let refused = check_golden(&path, body, true, true);
        assert!(refused.as_ref().is_err_and(|e| e.contains("under CI")), "{refused:?}");
        assert_eq!(written(), before);
    }
}

fn request<'a>(
    history: &'a [Exchange],
    current: &'a ModelImage,
    notes: &'a [String],
    tools: &'a [agentd::model::ToolSpec],
) -> ModelRequest<'a> {
    ModelRequest {
        instructions: "Log in as alice",
        history,
        screenshot: current,
        notes,
        tools,
        screen: SCREEN,
        browser: false,
        page: None,
        step: 2,
        summary: Some("Step 0; you said \"hi\""),
    }
}

#[test]
fn anthropic_request_body() {
    let parse = |content: Value| {
        anthropic::parse_message(
            &json!({"content": content, "stop_reason": "tool_use", "usage": {}}),
            Size::new(1280, 800),
            None,
        )
        .unwrap()
    };
    let turns = [
        parse(json!([{"type": "text", "text": "Clicking."},
            {"type": "tool_use", "id": "toolu_a", "name": "computer", "input": {"action": "left_click", "coordinate": [10, 20]}},
            {"type": "tool_use", "id": "toolu_b", "name": "computer", "input": {"action": "type", "text": "alice"}}])),
        parse(json!([{"type": "thinking", "thinking": "hm", "signature": "sig"},
            {"type": "tool_use", "id": "toolu_c", "name": "computer", "input": {"action": "key", "text": "Return"}}])),
    ];
    let history = history(turns);
    let current = image(200);
    let tools = agentd::tools::Toolbox::empty().specs();
    let notes = vec!["You did not call a tool.".to_string()];
    let model = AnthropicModel::new(shared().settings("anthropic", &options("claude-sonnet-4-5"), None, None).unwrap())
        .unwrap();
    golden("anthropic", &model.body(&request(&history, &current, &notes, &tools)));
}

#[test]
fn openai_request_body() {
    let parse = |output: Value| openai::parse_response(&json!({"output": output, "usage": {}}), None, false).unwrap();
    let turns = [
        parse(json!([{"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "computer_call", "id": "cu_1", "call_id": "call_a", "status": "completed", "action": {"type": "click", "x": 10, "y": 20, "button": "left"}, "pending_safety_checks": []},
            {"type": "function_call", "id": "fc_1", "call_id": "call_b", "name": "task_completion", "arguments": "{\"success\": \"maybe\"}"}])),
        parse(json!([{"type": "computer_call", "id": "cu_2", "call_id": "call_c", "status": "completed",
            "action": {"type": "keypress", "keys": ["ENTER"]},
            "pending_safety_checks": [{"id": "cu_sc_1", "code": "malicious_instructions", "message": "Check."}]}])),
    ];
    let history = history(turns);
    let current = image(200);
    let tools = agentd::tools::Toolbox::empty().specs();
    let model =
        OpenAiModel::new(shared().settings("openai", &options("computer-use-preview"), None, None).unwrap()).unwrap();
    golden("openai", &model.body(&request(&history, &current, &[], &tools)));
}

#[test]
fn gemini_request_body() {
    let parse = |parts: Value, step| {
        gemini::parse_content(
            &json!({"role": "model", "parts": parts}),
            &Value::Null,
            step,
            &["task_completion"],
            false,
            None,
        )
        .unwrap()
    };
    let turns = [
        parse(
            json!([{"text": "Typing."}, {"functionCall": {"name": "click_at", "args": {"x": 10, "y": 20}}, "thoughtSignature": "sig0"},
            {"functionCall": {"name": "navigate", "args": {"url": "https://example.com"}}}]),
            0,
        ),
        parse(
            json!([{"functionCall": {"id": "f3", "name": "key_combination", "args": {"keys": "Enter",
            "safety_decision": {"decision": "require_confirmation", "explanation": "Submitting."}}}}]),
            1,
        ),
    ];
    let history = history(turns);
    let current = image(200);
    let tools = agentd::tools::Toolbox::empty().specs();
    let model = GeminiModel::new(
        shared().settings("gemini", &options("gemini-2.5-computer-use-preview-10-2025"), None, None).unwrap(),
    )
    .unwrap();
    golden("gemini", &model.body(&request(&history, &current, &[], &tools)));
}

#[test]
fn compatible_request_body() {
    let model =
        CompatibleModel::new(shared().settings("openai-compatible", &ModelOptions::default(), None, None).unwrap())
            .unwrap();
    let parse = |message: Value, step| {
        model.parse(&json!({"choices": [{"message": message}], "usage": {}}), step, &["task_completion"]).unwrap()
    };
    let turns = [
        parse(
            json!({"role": "assistant", "content": "Clicking.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "click", "arguments": "{\"x\": 10, \"y\": 20}"}},
            {"id": "c2", "type": "function", "function": {"name": "type_text", "arguments": "{\"text\": \"alice\"}"}}]}),
            0,
        ),
        parse(
            json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c3", "type": "function", "function": {"name": "keypress", "arguments": "{\"keys\": [\"Return\"]}"}}]}),
            1,
        ),
    ];
    let history = history(turns);
    let current = image(200);
    let tools = agentd::tools::Toolbox::empty().specs();
    golden("compatible", &model.body(&request(&history, &current, &[], &tools)));
}

// ---------------------------------------------------------------------------------------------------------
// Garbage in

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| json!(f)),
        prop_oneof![
            Just("text".to_string()),
            Just("tool_use".to_string()),
            Just("computer".to_string()),
            Just("computer_call".to_string()),
            Just("functionCall".to_string()),
            Just("left_click".to_string()),
            Just("content_block_delta".to_string()),
            Just("input_json_delta".to_string()),
            Just("message_stop".to_string()),
            Just("response.completed".to_string()),
            Just("scroll".to_string()),
            ".{0,12}",
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let keys = prop_oneof![
            Just("type".to_string()),
            Just("content".to_string()),
            Just("id".to_string()),
            Just("name".to_string()),
            Just("input".to_string()),
            Just("action".to_string()),
            Just("coordinate".to_string()),
            Just("index".to_string()),
            Just("delta".to_string()),
            Just("output".to_string()),
            Just("actions".to_string()),
            Just("call_id".to_string()),
            Just("candidates".to_string()),
            Just("parts".to_string()),
            Just("args".to_string()),
            Just("x".to_string()),
            Just("y".to_string()),
            Just("message".to_string()),
            Just("choices".to_string()),
            Just("tool_calls".to_string()),
            Just("usage".to_string()),
            Just("response".to_string()),
            Just("region".to_string()),
            "[a-z_]{1,8}",
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(keys, inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn feed_all(body: &[u8], events: &[String]) {
    let sink = |_: Delta<'_>| {};
    let redact = |t: &str| t.to_string();
    let display = Size::new(1280, 800);
    static COMPAT: std::sync::LazyLock<CompatibleModel> = std::sync::LazyLock::new(|| {
        CompatibleModel::new(shared().settings("openai-compatible", &ModelOptions::default(), None, None).unwrap())
            .unwrap()
    });
    let compat = &*COMPAT;
    let run = |decoder: &mut dyn FnMut(bool)| {
        decoder(true);
        decoder(false);
    };
    let mut anthropic = MessageDecoder::new(&sink, display, None, &redact);
    let mut openai = ResponseDecoder::new(&sink, None, false, &redact);
    let mut gemini = ContentDecoder::new(&sink, 0, vec!["task_completion".to_string()], false, None);
    fn drive<D: Decoder>(d: &mut D, body: &[u8], events: &[String], streamed: bool) {
        d.start();
        if streamed {
            for data in events {
                if d.event(SseEvent { id: None, event: None, data: data.clone() }).is_err() {
                    return;
                }
            }
        } else if d.body(body).is_err() {
            return;
        }
        let _ = d.finish();
    }
    run(&mut |streamed| drive(&mut anthropic, body, events, streamed));
    run(&mut |streamed| drive(&mut openai, body, events, streamed));
    run(&mut |streamed| drive(&mut gemini, body, events, streamed));
    if let Ok(value) = serde_json::from_slice::<Value>(body) {
        let _ = compat.parse(&value, 0, &["task_completion"]);
        let _ = anthropic::parse_message(&value, display, None);
        let _ = openai::parse_response(&value, None, false);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn random_bytes_never_panic(body in prop::collection::vec(any::<u8>(), 0..300), events in prop::collection::vec(".{0,40}", 0..6)) {
        feed_all(&body, &events);
    }

    #[test]
    fn random_json_never_panics(body in json_value(), events in prop::collection::vec(json_value(), 0..8)) {
        let events: Vec<String> = events.iter().map(Value::to_string).collect();
        feed_all(body.to_string().as_bytes(), &events);
    }

    #[test]
    fn random_streams_never_panic_the_sse_parser(bytes in prop::collection::vec(any::<u8>(), 0..400), split in 0usize..400) {
        let mut parser = agentd::model::http::SseParser::default();
        let mut events = Vec::new();
        let split = split.min(bytes.len());
        let _ = parser.push(&bytes[..split], &mut events);
        let _ = parser.push(&bytes[split..], &mut events);
        let data: Vec<String> = events.into_iter().map(|e| e.data).collect();
        feed_all(b"", &data);
    }

    #[test]
    fn random_computer_inputs_never_panic(input in json_value()) {
        let _ = anthropic::computer_actions(&input, Size::new(1280, 800));
        let _ = openai::action(&input);
        if let Some(name) = input.get("name").and_then(Value::as_str) {
            let _ = gemini::function_actions(name, &input, true);
        }
        let _ = agentd::model::compatible::parse_ui_tars(&input.to_string(), 0);
    }
}

/// Decodes `events` as one streamed Anthropic response, as the adapter does.
fn anthropic_stream(events: &[String]) -> Result<ModelTurn, AttemptError> {
    let sink = |_: Delta<'_>| {};
    let redact = |t: &str| t.to_string();
    let mut decoder = MessageDecoder::new(&sink, Size::new(1280, 800), None, &redact);
    decoder.start();
    for data in events {
        decoder.event(SseEvent { id: None, event: None, data: data.clone() })?;
    }
    decoder.finish()
}

#[test]
fn structured_streams_survive_reordering_and_truncation() {
    // A real stream shape: a tool call whose input arrives in two pieces.
    let events: Vec<String> = [
        json!({"type": "message_start", "message": {"content": [], "usage": {"input_tokens": 5}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "computer", "input": {}}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"action\": \"left_"}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "click\", \"coordinate\": [1, 2]}"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 3}}),
        json!({"type": "message_stop"}),
    ]
    .iter()
    .map(Value::to_string)
    .collect();
    let whole = anthropic_stream(&events).unwrap_or_else(|e| panic!("the whole stream is no turn: {e:?}"));
    assert_eq!(whole.calls.len(), 1, "{whole:?}");
    assert_eq!(whole.calls[0].id, "t", "{whole:?}");
    let CallKind::Computer { actions } = &whole.calls[0].kind else { panic!("not a computer call: {whole:?}") };
    assert_eq!(actions.len(), 1, "{whole:?}");
    assert!(matches!(actions[0], agentd_computer::Action::Click { x: 1, y: 2, .. }), "the click at (1, 2): {whole:?}");
    assert_eq!((whole.usage.input_tokens, whole.usage.output_tokens), (5, 3), "{whole:?}");

    // Truncated: every stream cut before its `message_stop` is retried, never taken for a turn.
    for end in 0..events.len() {
        match anthropic_stream(&events[..end]) {
            Err(AttemptError::Retry { .. }) => {}
            other => panic!("the first {end} events gave {other:?}, not a retry"),
        }
    }

    // Reordered: each event moved one place, and the whole stream reversed, gives a typed error or a turn
    // whose calls are all calls of the whole stream: never an action made of pieces out of order. (Input
    // pieces swapped do not parse: that call is left out, as for a turn cut off by max_tokens, and the turn
    // has none.)
    let mut orders: Vec<Vec<String>> = (0..events.len() - 1)
        .map(|i| {
            let mut order = events.clone();
            order.swap(i, i + 1);
            order
        })
        .collect();
    orders.push(events.iter().rev().cloned().collect());
    for order in &orders {
        match anthropic_stream(order) {
            Ok(turn) => assert!(
                turn.calls.iter().all(|call| whole.calls.contains(call)),
                "a reordered stream gave another call: {turn:?}\n{order:#?}"
            ),
            Err(AttemptError::Retry { .. } | AttemptError::Fatal(_)) => {}
        }
    }
    let reversed = anthropic_stream(orders.last().expect("reversed"));
    assert!(reversed.is_err(), "the reversed stream gave a turn: {reversed:?}");
    // Events whose order carries nothing (the message's start and its first block's, the block's end and the
    // message's delta, the delta and the message's end) swapped: the same turn.
    for i in [0, 4, 5] {
        let turn = anthropic_stream(&orders[i]);
        assert_eq!(turn.as_ref().ok(), Some(&whole), "events {i} and {} swapped gave {turn:?}", i + 1);
    }
    // A delta before its block started: a protocol error, not a turn.
    let early = anthropic_stream(&orders[1]);
    assert!(matches!(early, Err(AttemptError::Fatal(_))), "a delta before its block: {early:?}");

    // Every decoder, with every prefix and order of these events (and as a body), gives a turn or a typed
    // error, never a panic.
    for end in 0..=events.len() {
        feed_all(b"", &events[..end]);
    }
    for order in &orders {
        feed_all(b"", order);
    }
}

/// Anthropic's cache breakpoints survive the context policy: step after step, each request reads most of its
/// prompt from the cache the previous requests wrote, including at the steps where old screenshots leave.
#[test]
fn anthropic_cache_breakpoints_survive_dropping_screenshots() {
    use agentd::agent::context::ContextPolicy;
    use agentd_testkit::fake::CacheSim;
    let big = |shade: u8| {
        let frame = Frame::from_rgb(SCREEN, vec![shade; SCREEN.area() as usize * 3]).unwrap();
        ModelImage::new(SCREEN, "image/png", encode_png(&frame).unwrap().into())
    };
    let model = AnthropicModel::new(shared().settings("anthropic", &options("claude-sonnet-4-5"), None, None).unwrap())
        .unwrap();
    let tools = agentd::tools::Toolbox::empty().specs();
    for chunk in [1, 3] {
        let policy = ContextPolicy::new(3, chunk);
        let mut sim = CacheSim::default();
        let mut history: Vec<Exchange> = Vec::new();
        let (mut read, mut total) = (0, 0);
        for step in 0..12u32 {
            policy.apply(&mut history);
            let current = big(step as u8 * 10);
            let mut request = request(&history, &current, &[], &tools);
            request.summary = None;
            let body = model.body(&request);
            let usage = sim.usage(&body);
            let step_read = usage["cache_read_input_tokens"].as_u64().unwrap();
            let step_total = step_read
                + usage["input_tokens"].as_u64().unwrap()
                + usage["cache_creation_input_tokens"].as_u64().unwrap();
            if step > 0 {
                assert!(step_read > 0, "chunk {chunk}, step {step}: nothing read from the cache");
            }
            read += step_read;
            total += step_total;
            let images = body.to_string().matches("\"type\":\"image\"").count();
            assert!(images < 3 + chunk as usize, "chunk {chunk}, step {step}: {images} images");
            let turn = anthropic::parse_message(
                &json!({"content": [{"type": "tool_use", "id": format!("toolu_{step}"), "name": "computer",
                    "input": {"action": "mouse_move", "coordinate": [step, step]}}], "usage": {}}),
                SCREEN,
                None,
            )
            .unwrap();
            let results =
                vec![ToolResult { call_id: format!("toolu_{step}"), ok: true, message: "ok".into(), image: None }];
            history.push(Exchange { step, screenshot: Some(current), notes: vec![], page: None, turn, results });
        }
        let ratio = read as f64 / total as f64;
        println!("chunk {chunk}: cache hit ratio {ratio:.2}");
        assert!(ratio > if chunk == 1 { 0.15 } else { 0.5 }, "chunk {chunk}: hit ratio {ratio:.2}");
    }
}

// ---------------------------------------------------------------------------------------------------------
// Declared tools on the wire: a whole task per vendor against its fake, whose model calls a declared
// in-process tool twice (one call succeeds, one fails) and then completes. The first request must declare the
// tool's schema in the vendor's own format; the second must carry both results as the vendor expects (the
// failure flagged as one), with the envelope's `output` text and never its `details`, which the step record
// keeps.

mod declared_tools {
    use std::sync::Arc;

    use agentd::agent::{AttemptOutput, Ending};
    use agentd::backends;
    use agentd::model::{Model, ToolSpec};
    use agentd::task::ModelSpec;
    use agentd::tools::{Tool, ToolContext, ToolOutcome, Toolbox};
    use agentd_computer::Size;
    use agentd_testkit::fake::{self, FakeServer, Recorded, Vendor};
    use async_trait::async_trait;
    use serde_json::{Value, json};

    use crate::models::{KEY, login_desktop, shared_for, spec, task, turns_in};

    /// Kept in `details` only: it must never reach a model request.
    const DETAIL: &str = "DETAIL-only-for-the-record";
    const FOUND: &str = "order 42: 3 items, total 99.50 EUR";
    const MISSING: &str = "no order 7";

    fn schema() -> Value {
        json!({"type": "object", "properties": {"order": {"type": "string", "pattern": "^[0-9]+$",
            "description": "The order number"}}, "required": ["order"], "additionalProperties": false})
    }

    struct Lookup;

    #[async_trait]
    impl Tool for Lookup {
        fn spec(&self) -> ToolSpec {
            ToolSpec { name: "lookup_order".into(), description: "Looks an order up.".into(), parameters: schema() }
        }

        async fn call(&self, arguments: Value, _: ToolContext<'_>) -> ToolOutcome {
            match arguments["order"].as_str() {
                Some("42") => ToolOutcome::ok(FOUND).with_details(json!({"row": DETAIL})),
                _ => ToolOutcome::error(MISSING).with_details(json!({"query": DETAIL})),
            }
        }
    }

    async fn run_with_tool(model_spec: ModelSpec, model: Arc<dyn Model>) -> AttemptOutput {
        let tools = Toolbox::empty().with_tool(Arc::new(Lookup)).expect("toolbox");
        crate::models::one_attempt(
            task(model_spec, 5, 3),
            login_desktop(Size::new(1280, 800)),
            model,
            Arc::new(tools),
            Vec::new(),
        )
        .await
    }

    /// What every vendor's run must show: success, no wire problem, two requests, no details on the wire, and
    /// the record holding both envelopes with their details.
    fn check_run(output: &AttemptOutput, server: &FakeServer) -> Vec<Recorded> {
        assert!(matches!(&output.ending, Ending::Finished(o) if o.success), "{:?}", output.ending);
        assert!(server.problems().is_empty(), "wire problems: {:#?}", server.problems());
        let requests = server.requests();
        assert_eq!(requests.len(), 2);
        for r in &requests {
            assert!(!r.body.to_string().contains(DETAIL), "details reached the model: {}", r.body);
        }
        let results: Vec<(bool, &str, Option<&Value>)> = output.steps[0]
            .results
            .iter()
            .filter(|r| r.tool.as_deref() == Some("lookup_order"))
            .map(|r| (r.ok, r.message.as_str(), r.details.as_ref()))
            .collect();
        assert_eq!(
            results,
            vec![(true, FOUND, Some(&json!({"row": DETAIL}))), (false, MISSING, Some(&json!({"query": DETAIL})))]
        );
        requests
    }

    fn declared<'a>(tools: &'a Value, name: &str, key: &str) -> &'a Value {
        tools
            .as_array()
            .and_then(|tools| tools.iter().find(|t| t[key] == name))
            .unwrap_or_else(|| panic!("{name} is not declared: {tools}"))
    }

    #[tokio::test(flavor = "current_thread")]
    async fn anthropic_declares_input_schema_and_answers_with_tool_results() {
        let server = FakeServer::start(
            Vendor::Anthropic { key: KEY.into() },
            Box::new(|r| {
                let usage = json!({"input_tokens": 10, "output_tokens": 5});
                let content = match turns_in(r) {
                    0 => vec![
                        json!({"type": "tool_use", "id": "toolu_a", "name": "lookup_order", "input": {"order": "42"}}),
                        json!({"type": "tool_use", "id": "toolu_b", "name": "lookup_order", "input": {"order": "7"}}),
                    ],
                    _ => vec![json!({"type": "tool_use", "id": "toolu_c", "name": "task_completion",
                        "input": {"success": true, "summary": "looked up"}})],
                };
                fake::anthropic_reply(content, usage, true)
            }),
        )
        .await
        .unwrap();
        let model_spec = spec(json!({"provider": "anthropic", "model": "claude-sonnet-4-5"}));
        let model = backends::model(&model_spec, &shared_for("anthropic", &server.url, ""), None).unwrap();
        let output = run_with_tool(model_spec, model).await;
        let requests = check_run(&output, &server);
        let tool = declared(&requests[0].body["tools"], "lookup_order", "name");
        assert_eq!(tool["input_schema"], schema(), "{tool}");
        assert_eq!(tool["description"], "Looks an order up.");
        assert!(tool.get("type").is_none(), "a client tool has no type: {tool}");
        let messages = requests[1].body["messages"].as_array().unwrap();
        let results = messages[2]["content"].as_array().unwrap();
        assert_eq!(results[0]["type"], "tool_result");
        assert_eq!(results[0]["tool_use_id"], "toolu_a");
        assert!(results[0].get("is_error").is_none_or(|e| e == false), "{}", results[0]);
        assert_eq!(results[0]["content"][0], json!({"type": "text", "text": FOUND}));
        assert_eq!(results[1]["tool_use_id"], "toolu_b");
        assert_eq!(results[1]["is_error"], true, "{}", results[1]);
        assert_eq!(results[1]["content"][0], json!({"type": "text", "text": MISSING}));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn openai_declares_a_non_strict_function_and_answers_with_function_call_outputs() {
        let server = FakeServer::start(
            Vendor::OpenAi { key: KEY.into() },
            Box::new(|r| {
                let output = match turns_in(r) {
                    0 => vec![
                        json!({"type": "function_call", "id": "fc_a", "call_id": "call_a", "name": "lookup_order",
                            "arguments": "{\"order\": \"42\"}", "status": "completed"}),
                        json!({"type": "function_call", "id": "fc_b", "call_id": "call_b", "name": "lookup_order",
                            "arguments": "{\"order\": \"7\"}", "status": "completed"}),
                    ],
                    _ => vec![json!({"type": "function_call", "id": "fc_c", "call_id": "call_c",
                        "name": "task_completion", "arguments": "{\"success\": true, \"summary\": \"ok\"}"})],
                };
                fake::openai_reply(output, json!({"input_tokens": 10, "output_tokens": 5}), true)
            }),
        )
        .await
        .unwrap();
        let model_spec = spec(json!({"provider": "openai"}));
        let model = backends::model(&model_spec, &shared_for("openai", &server.url, ""), None).unwrap();
        let output = run_with_tool(model_spec, model).await;
        let requests = check_run(&output, &server);
        let tool = declared(&requests[0].body["tools"], "lookup_order", "name");
        assert_eq!(
            *tool,
            json!({"type": "function", "name": "lookup_order", "description": "Looks an order up.",
                "parameters": schema(), "strict": false})
        );
        let input = requests[1].body["input"].as_array().unwrap();
        let outputs: Vec<&Value> = input.iter().filter(|i| i["type"] == "function_call_output").collect();
        assert_eq!(outputs.len(), 2, "{input:?}");
        assert_eq!(outputs[0]["call_id"], "call_a");
        assert_eq!(outputs[1]["call_id"], "call_b");
        let read = |o: &Value| -> Value { serde_json::from_str(o["output"].as_str().expect("a string")).unwrap() };
        assert_eq!(read(outputs[0]), json!({"ok": true, "message": FOUND}));
        assert_eq!(read(outputs[1]), json!({"ok": false, "message": MISSING}));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn gemini_declares_parameters_json_schema_and_answers_with_function_responses() {
        let server = FakeServer::start(
            Vendor::Gemini { key: KEY.into() },
            Box::new(|r| {
                let parts = match turns_in(r) {
                    0 => vec![
                        json!({"functionCall": {"id": "g1", "name": "lookup_order", "args": {"order": "42"}}}),
                        json!({"functionCall": {"id": "g2", "name": "lookup_order", "args": {"order": "7"}}}),
                    ],
                    _ => vec![json!({"functionCall": {"name": "task_completion",
                        "args": {"success": true, "summary": "ok"}}})],
                };
                fake::gemini_reply(parts, json!({"promptTokenCount": 10, "candidatesTokenCount": 5}), true)
            }),
        )
        .await
        .unwrap();
        let model_spec = spec(json!({"provider": "gemini"}));
        let model = backends::model(&model_spec, &shared_for("gemini", &server.url, ""), None).unwrap();
        let output = run_with_tool(model_spec, model).await;
        let requests = check_run(&output, &server);
        let declarations = &requests[0].body["tools"][1]["functionDeclarations"];
        let tool = declared(declarations, "lookup_order", "name");
        // JSON Schema as declared (`additionalProperties` included), never the OpenAPI-subset `parameters`.
        assert_eq!(
            *tool,
            json!({"name": "lookup_order", "description": "Looks an order up.", "parametersJsonSchema": schema()})
        );
        let parts = requests[1].body["contents"][2]["parts"].as_array().unwrap();
        let responses: Vec<&Value> = parts.iter().filter_map(|p| p.get("functionResponse")).collect();
        assert_eq!(responses.len(), 2, "{parts:?}");
        assert_eq!((&responses[0]["id"], &responses[0]["name"]), (&json!("g1"), &json!("lookup_order")));
        assert_eq!(responses[0]["response"]["output"], FOUND);
        assert!(responses[0]["response"].get("error").is_none());
        assert_eq!(responses[1]["id"], "g2");
        assert_eq!(responses[1]["response"]["error"], MISSING);
        assert!(responses[1]["response"].get("output").is_none());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn compatible_declares_a_function_and_answers_with_tool_messages() {
        let server = FakeServer::start(
            Vendor::Compatible { key: Some(KEY.into()) },
            Box::new(|r| {
                let usage = json!({"prompt_tokens": 10, "completion_tokens": 5});
                match turns_in(r) {
                    0 => fake::compatible_reply(
                        "",
                        &[
                            ("c1", "lookup_order", json!({"order": "42"})),
                            ("c2", "lookup_order", json!({"order": "7"})),
                        ],
                        usage,
                    ),
                    _ => fake::compatible_reply(
                        "",
                        &[("c3", "task_completion", json!({"success": true, "summary": "ok"}))],
                        usage,
                    ),
                }
            }),
        )
        .await
        .unwrap();
        let shared =
            shared_for("openai-compatible", &server.url, "model = \"qwen2.5-vl\"\napi_key_env = \"LOCAL_KEY\"");
        let model_spec = spec(json!({"provider": "openai-compatible"}));
        let model = backends::model(&model_spec, &shared, None).unwrap();
        let output = run_with_tool(model_spec, model).await;
        let requests = check_run(&output, &server);
        let tools = requests[0].body["tools"].as_array().unwrap();
        let tool = tools.iter().find(|t| t["function"]["name"] == "lookup_order").expect("declared");
        assert_eq!(
            *tool,
            json!({"type": "function", "function": {"name": "lookup_order", "description": "Looks an order up.",
                "parameters": schema()}})
        );
        let messages = requests[1].body["messages"].as_array().unwrap();
        let answers: Vec<&Value> = messages.iter().filter(|m| m["role"] == "tool").collect();
        assert_eq!(answers.len(), 2, "{messages:?}");
        assert_eq!(answers[0]["tool_call_id"], "c1");
        assert_eq!(answers[0]["content"], format!("ok: {FOUND}"));
        assert_eq!(answers[1]["tool_call_id"], "c2");
        assert_eq!(answers[1]["content"], format!("error: {MISSING}"));
    }

    /// The fakes' checkers see what they are meant to: a strict OpenAI function with an open schema, Gemini
    /// `parameters` with a field outside its subset, an Anthropic client tool without a schema, and a
    /// non-boolean `is_error`.
    #[test]
    fn the_fakes_report_tool_declarations_their_vendor_refuses() {
        let recorded = |body: Value| Recorded {
            index: 0,
            at: tokio::time::Instant::now(),
            path: String::new(),
            headers: Default::default(),
            body,
            bytes: 0,
            problems: Vec::new(),
        };
        let openai = fake::check_request(
            &Vendor::OpenAi { key: KEY.into() },
            &recorded(json!({"tools": [{"type": "function", "name": "f", "parameters": {"type": "object",
                "properties": {"a": {"type": "string"}}}}]})),
        );
        assert!(openai.iter().any(|p| p.contains("strict")), "{openai:?}");
        let gemini = fake::check_request(
            &Vendor::Gemini { key: KEY.into() },
            &recorded(json!({"tools": [{}, {"functionDeclarations": [{"name": "f", "parameters": {"type": "object",
                "additionalProperties": false}}]}]})),
        );
        assert!(gemini.iter().any(|p| p.contains("additionalProperties")), "{gemini:?}");
        let anthropic = fake::check_request(
            &Vendor::Anthropic { key: KEY.into() },
            &recorded(json!({"tools": [{"name": "f"}], "messages": [{"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "x", "is_error": "yes"}]}]})),
        );
        assert!(anthropic.iter().any(|p| p.contains("input_schema")), "{anthropic:?}");
        assert!(anthropic.iter().any(|p| p.contains("is_error")), "{anthropic:?}");
    }
}
