//! Every vendor adapter against its local fake server: whole tasks on the mock desktop (the actions the
//! desktop records are the ones the fake model asked for, mapped to screen pixels), and every error shape of
//! the reference (400, 401, 429 with and without a delay, 529, 5xx, a stream cut short, a silent stream,
//! quota exhaustion, Gemini's RetryInfo, errors inside a stream). Time runs on tokio's paused clock, so
//! backoff and timeouts cost no wall time and delays are measured exactly.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentd::agent::events::EventSink;
use agentd::agent::journal::MemoryJournal;
use agentd::agent::{Attempt, AttemptOutput, Built, Ending, RunContext, run};
use agentd::artifacts::{FsStore, Uploader};
use agentd::backends;
use agentd::model::{Delta, Model, ModelError, ModelImage, ModelRequest, ModelTurn, Shared};
use agentd::record::events::{Event, EventKind};
use agentd::task::{Compaction, ComputerSpec, HistoryBudget, Limits, MockSpec, ModelSpec, ResolvedTask};
use agentd_computer::{Action, Frame, MouseButton, Point, Size};
use agentd_mock::{MockDesktop, Scene};
use agentd_testkit::fake::{self, FakeServer, Recorded, Reply, Vendor};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub const KEY: &str = "sk-test-0123456789";

/// A `Shared` whose config points `provider` at `url`, with `extra` config lines, and the test key in the
/// provider's usual variable.
pub fn shared_for(provider: &str, url: &str, extra: &str) -> Shared {
    let base = match provider {
        "anthropic" | "gemini" => url.to_string(),
        _ => format!("{url}/v1"),
    };
    let toml = format!("[models.{provider}]\nbase_url = {base:?}\n{extra}\n");
    let config = agentd::config::parse(&toml, "test.toml", &[]).unwrap_or_else(|e| panic!("{e}"));
    let env: BTreeMap<String, String> =
        [("ANTHROPIC_API_KEY", KEY), ("OPENAI_API_KEY", KEY), ("GEMINI_API_KEY", KEY), ("LOCAL_KEY", KEY)]
            .into_iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
    Shared::with_env(&config, Arc::new(move |name: &str| env.get(name).cloned()))
}

pub fn spec(json: Value) -> ModelSpec {
    serde_json::from_value(json).expect("model spec")
}

pub fn task(model: ModelSpec, max_steps: u32, keep: u32) -> ResolvedTask {
    ResolvedTask {
        instructions: "Log in as alice (the password is in the note) ".into(),
        computer: ComputerSpec::Mock(MockSpec::default()),
        model,
        limits: Limits { max_steps, timeout_secs: 3600, max_cost_usd: 100.0 },
        keep_screenshots: keep,
        history: Default::default(),
        tools: Vec::new(),
        output_schema: None,
        secrets: Default::default(),
        guard: Default::default(),
        verify: Vec::new(),
        verify_retries: 2,
        ask_human: false,
        approval: Vec::new(),
    }
}

/// Runs a whole task in-process on `desktop`.
pub async fn run_task(
    task: ResolvedTask,
    model: Arc<dyn Model>,
    desktop: Arc<MockDesktop>,
) -> (AttemptOutput, Vec<Event>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let tracker = TaskTracker::new();
    let background = CancellationToken::new();
    let store = Arc::new(FsStore::new(dir.path().join("artifacts")));
    let uploader = Uploader::start(store, dir.path().join("spool"), 16, u64::MAX, &tracker, background.clone());
    let (events, mut rx) = EventSink::channel("t1", 1);
    // A human approves every turn that asks (a vendor safety check), as `agentd approve` would: the task is
    // resumed from its journaled steps with the approval.
    let mut resume = Vec::new();
    let mut approvals = 0;
    let output = loop {
        let output = run(
            Attempt {
                task: task.clone(),
                settle: Default::default(),
                context: RunContext {
                    task_id: "t1".into(),
                    attempt: 1,
                    uploader: uploader.clone(),
                    journal: Arc::new(MemoryJournal::default()),
                    events: events.clone(),
                    cancel: CancellationToken::new(),
                    shutdown: CancellationToken::new(),
                    resume: std::mem::take(&mut resume),
                    elapsed_before: Duration::ZERO,
                    turns: Vec::new(),
                    pause: Default::default(),
                    handed_back: None,
                },
            },
            Built {
                computer: desktop.clone(),
                model: model.clone(),
                tools: Arc::new(agentd::tools::Toolbox::empty()),
                verifier: Default::default(),
            },
        )
        .await;
        match output.ending {
            Ending::WaitingForHuman(_) if approvals < 10 => {
                approvals += 1;
                resume = output.steps;
                // The answer goes into the waiting step, as the queue writes it.
                if let Some(approval) =
                    resume.last_mut().and_then(|s: &mut agentd::record::StepRecord| s.approval.as_mut())
                {
                    approval.approved = Some(true);
                }
            }
            _ => break output,
        }
    };
    drop(events);
    uploader.flush(Duration::from_secs(30)).await;
    background.cancel();
    tracker.close();
    tracker.wait().await;
    let mut all = Vec::new();
    while let Ok(event) = rx.try_recv() {
        all.push(event);
    }
    (output, all)
}

/// One attempt of `task` in-process, as a worker runs it after a restart or a human's answer: `resume` are
/// the steps earlier attempts recorded (empty for the first). Its own artifact store and uploader, flushed
/// before it returns; no events kept.
pub async fn one_attempt(
    task: ResolvedTask,
    computer: Arc<dyn agentd_computer::ComputerProvider>,
    model: Arc<dyn Model>,
    tools: Arc<agentd::tools::Toolbox>,
    resume: Vec<agentd::record::StepRecord>,
) -> AttemptOutput {
    let dir = tempfile::tempdir().expect("tempdir");
    let tracker = TaskTracker::new();
    let background = CancellationToken::new();
    let store = Arc::new(FsStore::new(dir.path().join("artifacts")));
    let uploader = Uploader::start(store, dir.path().join("spool"), 16, u64::MAX, &tracker, background.clone());
    let (events, _rx) = EventSink::channel("t1", 1);
    let output = run(
        Attempt {
            task,
            settle: Default::default(),
            context: RunContext {
                task_id: "t1".into(),
                attempt: 1,
                uploader: uploader.clone(),
                journal: Arc::new(MemoryJournal::default()),
                events,
                cancel: CancellationToken::new(),
                shutdown: CancellationToken::new(),
                resume,
                elapsed_before: Duration::ZERO,
                turns: Vec::new(),
                pause: Default::default(),
                handed_back: None,
            },
        },
        Built { computer, model, tools, verifier: Default::default() },
    )
    .await;
    uploader.flush(Duration::from_secs(30)).await;
    background.cancel();
    tracker.close();
    tracker.wait().await;
    output
}

pub fn login_desktop(size: Size) -> Arc<MockDesktop> {
    Arc::new(MockDesktop::new(Scene::resolve("login", None).expect("scene"), Some(size)).expect("desktop"))
}

fn succeeded(output: &AttemptOutput) -> bool {
    matches!(&output.ending, Ending::Finished(o) if o.success)
}

/// How many assistant/model turns a request already holds (= the step it asks for).
pub fn turns_in(r: &Recorded) -> usize {
    let list = r.body.get("messages").or_else(|| r.body.get("contents")).and_then(Value::as_array);
    match list {
        Some(list) => list.iter().filter(|m| m["role"] == "assistant" || m["role"] == "model").count(),
        None => r.body["input"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter(|i| i["type"] == "computer_call_output" || i["type"] == "function_call_output")
                    .count()
            })
            .unwrap_or(0),
    }
}

/// What the login task needs: the widgets' centres in the model's space, and the screen pixels those map to.
struct Login {
    username: Point,
    password: Point,
    username_screen: Point,
    password_screen: Point,
}

fn login_points(desktop: &MockDesktop, model: &dyn Model) -> Login {
    let map = model.coordinates(desktop.size());
    let username = map.to_model(desktop.widget_center("username").expect("username field"));
    let password = map.to_model(desktop.widget_center("password").expect("password field"));
    Login { username, password, username_screen: map.to_screen(username), password_screen: map.to_screen(password) }
}

fn expected_login_actions(l: &Login, enter: &str) -> Vec<Action> {
    vec![
        Action::Click { x: l.username_screen.x, y: l.username_screen.y, button: MouseButton::Left, keys: vec![] },
        Action::Type { text: "alice".into() },
        Action::Click { x: l.password_screen.x, y: l.password_screen.y, button: MouseButton::Left, keys: vec![] },
        Action::Type { text: "hunter2".into() },
        Action::Keypress { keys: vec![enter.into()] },
    ]
}

fn assert_logged_in(desktop: &MockDesktop, output: &AttemptOutput, server: &FakeServer, enter: &str, login: &Login) {
    assert!(server.problems().is_empty(), "wire problems: {:#?}", server.problems());
    assert!(succeeded(output), "{:?}", output.ending);
    assert_eq!(desktop.actions(), expected_login_actions(login, enter));
    let state = desktop.mock_state();
    assert_eq!(state.screen, "welcome", "{state:?}");
    assert_eq!(state.fields.get("username").map(String::as_str), Some("alice"));
}

fn deltas(events: &[Event]) -> String {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ModelDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn usage_anthropic() -> Value {
    json!({"input_tokens": 1200, "cache_creation_input_tokens": 300, "cache_read_input_tokens": 500, "output_tokens": 40})
}

fn anthropic_login_turn(step: usize, l: &Login, stream: bool) -> Reply {
    let content = match step {
        0 => vec![
            json!({"type": "text", "text": "I'll sign in as alice."}),
            json!({"type": "tool_use", "id": "toolu_1", "name": "computer", "input": {"action": "left_click", "coordinate": [l.username.x, l.username.y]}}),
            json!({"type": "tool_use", "id": "toolu_2", "name": "computer", "input": {"action": "type", "text": "alice"}}),
        ],
        1 => vec![
            json!({"type": "thinking", "thinking": "The note says hunter2.", "signature": "sig-abc"}),
            json!({"type": "tool_use", "id": "toolu_3", "name": "computer", "input": {"action": "left_click", "coordinate": [l.password.x, l.password.y]}}),
            json!({"type": "tool_use", "id": "toolu_4", "name": "computer", "input": {"action": "type", "text": "hunter2"}}),
            json!({"type": "tool_use", "id": "toolu_5", "name": "computer", "input": {"action": "key", "text": "Return"}}),
        ],
        _ => vec![
            json!({"type": "text", "text": "Signed in."}),
            json!({"type": "tool_use", "id": "toolu_6", "name": "task_completion", "input": {"success": true, "summary": "signed in"}}),
        ],
    };
    fake::anthropic_reply(content, usage_anthropic(), stream)
}

async fn anthropic_login(stream: bool) {
    let desktop = login_desktop(Size::new(1920, 1200));
    let points = Arc::new(Mutex::new(None::<Login>));
    let p = points.clone();
    let server = FakeServer::start(
        Vendor::Anthropic { key: KEY.into() },
        Box::new(move |r| {
            let guard = p.lock().unwrap();
            anthropic_login_turn(turns_in(r), guard.as_ref().expect("points"), stream)
        }),
    )
    .await
    .unwrap();
    let shared = shared_for("anthropic", &server.url, &format!("stream = {stream}"));
    let model_spec = spec(json!({"provider": "anthropic", "model": "claude-sonnet-4-5"}));
    let model = backends::model(&model_spec, &shared, None).unwrap();
    let login = login_points(&desktop, model.as_ref());
    // The screen is 1920×1200: the model works in WXGA 1280×800.
    assert_eq!(model.coordinates(desktop.size()).model(), Size::new(1280, 800));
    *points.lock().unwrap() = Some(login_points(&desktop, model.as_ref()));
    let (output, events) = run_task(task(model_spec, 10, 3), model, desktop.clone()).await;
    assert_logged_in(&desktop, &output, &server, "Return", &login);
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0].headers["anthropic-beta"], "computer-use-2025-01-24");
    // Thinking is replayed verbatim with its signature.
    assert_eq!(requests[2].body["messages"][3]["content"][0]["signature"], "sig-abc");
    assert_eq!(output.steps[1].thinking, "The note says hunter2.");
    // Usage is normalised (all prompt tokens) and priced (Sonnet 4.5: $3 in, $0.30 read, $3.75 write, $15 out).
    let usage = output.steps[0].usage;
    assert_eq!((usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens), (2000, 500, 300));
    let cost = (1200.0 * 3.0 + 500.0 * 0.3 + 300.0 * 3.75 + 40.0 * 15.0) / 1e6;
    assert!((usage.cost_usd - cost).abs() < 1e-12, "{}", usage.cost_usd);
    assert!(deltas(&events).contains("I'll sign in as alice."));
    assert!(!format!("{events:?}{output:?}").contains(KEY), "the key leaked into events or records");
}

#[tokio::test(flavor = "current_thread")]
async fn anthropic_streams_a_whole_task() {
    anthropic_login(true).await;
}

#[tokio::test(flavor = "current_thread")]
async fn anthropic_whole_task_without_streaming() {
    anthropic_login(false).await;
}

#[tokio::test(flavor = "current_thread")]
async fn anthropic_zoom_on_the_newer_tool() {
    let desktop = login_desktop(Size::new(1280, 800));
    let server = FakeServer::start(
        Vendor::Anthropic { key: KEY.into() },
        Box::new(|r| {
            let content = match turns_in(r) {
                0 => vec![json!({"type": "tool_use", "id": "toolu_z", "name": "computer",
                    "input": {"action": "zoom", "region": [0, 0, 639, 399]}})],
                _ => vec![json!({"type": "tool_use", "id": "toolu_done", "name": "task_completion",
                    "input": {"success": true, "summary": "looked"}})],
            };
            fake::anthropic_reply(content, usage_anthropic(), true)
        }),
    )
    .await
    .unwrap();
    let shared = shared_for("anthropic", &server.url, "");
    let model_spec = spec(json!({"provider": "anthropic", "model": "claude-opus-4-5"}));
    let model = backends::model(&model_spec, &shared, None).unwrap();
    let (output, _) = run_task(task(model_spec, 5, 3), model, desktop).await;
    assert!(succeeded(&output), "{:?}", output.ending);
    assert!(server.problems().is_empty(), "{:#?}", server.problems());
    let requests = server.requests();
    assert_eq!(requests[0].headers["anthropic-beta"], "computer-use-2025-11-24");
    assert_eq!(requests[0].body["tools"][0]["enable_zoom"], true);
    // The zoom's result carries the zoomed image and the next screenshot.
    let result = &requests[1].body["messages"][2]["content"][0];
    assert_eq!(result["tool_use_id"], "toolu_z");
    let images = result["content"].as_array().unwrap().iter().filter(|c| c["type"] == "image").count();
    assert_eq!(images, 2, "{result}");
}

#[tokio::test(flavor = "current_thread")]
async fn openai_ga_batched_actions_safety_checks_and_reasoning() {
    let desktop = login_desktop(Size::new(1920, 1200));
    let points = Arc::new(Mutex::new(None::<Login>));
    let p = points.clone();
    let server = FakeServer::start(
        Vendor::OpenAi { key: KEY.into() },
        Box::new(move |r| {
            let guard = p.lock().unwrap();
            let l = guard.as_ref().expect("points");
            let output = match turns_in(r) {
                0 => vec![
                    json!({"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Find the form."}]}),
                    json!({"type": "computer_call", "id": "cu_1", "call_id": "call_1", "status": "completed", "action": null,
                        "pending_safety_checks": null,
                        "actions": [{"type": "click", "button": "left", "keys": null, "x": l.username.x, "y": l.username.y},
                                    {"type": "type", "text": "alice"}]}),
                ],
                1 => vec![
                    json!({"type": "computer_call", "id": "cu_2", "call_id": "call_2", "status": "completed",
                        "pending_safety_checks": [{"id": "cu_sc_1", "code": "sensitive_domain", "message": "A password is typed."}],
                        "actions": [{"type": "click", "button": "left", "x": l.password.x, "y": l.password.y},
                                    {"type": "type", "text": "hunter2"}, {"type": "keypress", "keys": ["ENTER"]}]}),
                ],
                _ => vec![
                    json!({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": "Signed in.", "annotations": []}]}),
                    json!({"type": "function_call", "id": "fc_1", "call_id": "call_3", "name": "task_completion",
                        "arguments": "{\"success\": true, \"summary\": \"signed in\"}", "status": "completed"}),
                ],
            };
            fake::openai_reply(output, json!({"input_tokens": 900, "input_tokens_details": {"cached_tokens": 100},
                "output_tokens": 30, "output_tokens_details": {"reasoning_tokens": 10}, "total_tokens": 930}), true)
        }),
    )
    .await
    .unwrap();
    let shared = shared_for("openai", &server.url, "");
    let model_spec = spec(json!({"provider": "openai", "model": "gpt-5.5"}));
    let model = backends::model(&model_spec, &shared, None).unwrap();
    let login = login_points(&desktop, model.as_ref());
    *points.lock().unwrap() = Some(login_points(&desktop, model.as_ref()));
    let (output, events) = run_task(task(model_spec, 10, 3), model, desktop.clone()).await;
    assert_logged_in(&desktop, &output, &server, "ENTER", &login);
    let requests = server.requests();
    assert_eq!(requests[0].body["tools"][0], json!({"type": "computer"}));
    // The reasoning item is replayed before its call; the safety check is acknowledged with the results.
    let input = requests[1].body["input"].as_array().unwrap();
    assert_eq!(input[1]["type"], "reasoning");
    let acknowledged = &requests[2].body["input"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["call_id"] == "call_2" && i["type"] == "computer_call_output")
        .unwrap()["acknowledged_safety_checks"];
    assert_eq!(acknowledged[0]["id"], "cu_sc_1");
    assert_eq!(output.steps[1].calls.len(), 1);
    assert!(deltas(&events).contains("Signed in."));
}

#[tokio::test(flavor = "current_thread")]
async fn openai_preview_tool_declares_the_scaled_display() {
    let desktop = login_desktop(Size::new(1920, 1200));
    let server = FakeServer::start(
        Vendor::OpenAi { key: KEY.into() },
        Box::new(|r| {
            let output = match turns_in(r) {
                0 => vec![json!({"type": "computer_call", "id": "cu_1", "call_id": "call_p", "status": "completed",
                    "action": {"type": "screenshot"}, "pending_safety_checks": []})],
                _ => vec![json!({"type": "function_call", "call_id": "call_d", "name": "task_completion",
                    "arguments": "{\"success\": true, \"summary\": \"ok\"}"})],
            };
            fake::openai_reply(output, json!({"input_tokens": 18, "output_tokens": 53}), false)
        }),
    )
    .await
    .unwrap();
    let shared = shared_for("openai", &server.url, "stream = false");
    let model_spec = spec(json!({"provider": "openai"}));
    let model = backends::model(&model_spec, &shared, None).unwrap();
    let (output, _) = run_task(task(model_spec, 5, 3), model, desktop).await;
    assert!(succeeded(&output), "{:?}", output.ending);
    assert!(server.problems().is_empty(), "{:#?}", server.problems());
    let tool = &server.requests()[0].body["tools"][0];
    assert_eq!(
        *tool,
        json!({"type": "computer_use_preview", "display_width": 1280, "display_height": 800, "environment": "linux"})
    );
}

#[tokio::test(flavor = "current_thread")]
async fn gemini_grid_thought_signatures_and_confirmation() {
    let desktop = login_desktop(Size::new(1440, 900));
    let points = Arc::new(Mutex::new(None::<Login>));
    let p = points.clone();
    let server = FakeServer::start(
        Vendor::Gemini { key: KEY.into() },
        Box::new(move |r| {
            let guard = p.lock().unwrap();
            let l = guard.as_ref().expect("points");
            let parts = match turns_in(r) {
                0 => vec![
                    json!({"text": "Typing the user name."}),
                    json!({"functionCall": {"name": "click_at", "args": {"x": l.username.x, "y": l.username.y}}, "thoughtSignature": "sig-0"}),
                    json!({"functionCall": {"name": "type_text_at", "args": {"x": l.username.x, "y": l.username.y, "text": "alice",
                        "press_enter": false, "clear_before_typing": false}}}),
                ],
                1 => vec![json!({"functionCall": {"id": "fc-2", "name": "type_text_at", "args": {"x": l.password.x, "y": l.password.y,
                    "text": "hunter2", "press_enter": true, "clear_before_typing": false,
                    "safety_decision": {"decision": "require_confirmation", "explanation": "Typing a password."}}}})],
                _ => vec![json!({"functionCall": {"name": "task_completion", "args": {"success": true, "summary": "signed in"}}})],
            };
            fake::gemini_reply(parts, json!({"promptTokenCount": 1000, "candidatesTokenCount": 20, "thoughtsTokenCount": 5,
                "cachedContentTokenCount": 200}), true)
        }),
    )
    .await
    .unwrap();
    let shared = shared_for("gemini", &server.url, "");
    let model_spec = spec(json!({"provider": "gemini"}));
    let model = backends::model(&model_spec, &shared, None).unwrap();
    let map = model.coordinates(desktop.size());
    assert_eq!(map.model(), Size::new(1000, 1000));
    let login = login_points(&desktop, model.as_ref());
    *points.lock().unwrap() = Some(login_points(&desktop, model.as_ref()));
    let (output, events) = run_task(task(model_spec, 10, 3), model, desktop.clone()).await;
    assert!(server.problems().is_empty(), "{:#?}", server.problems());
    assert!(succeeded(&output), "{:?}", output.ending);
    // click_at, then type_text_at = click + type; then click + type + Enter.
    let u = login.username_screen;
    let pw = login.password_screen;
    let click = |p: Point| Action::Click { x: p.x, y: p.y, button: MouseButton::Left, keys: vec![] };
    assert_eq!(
        desktop.actions(),
        vec![
            click(u),
            click(u),
            Action::Type { text: "alice".into() },
            click(pw),
            Action::Type { text: "hunter2".into() },
            Action::Keypress { keys: vec!["Return".into()] }
        ]
    );
    let requests = server.requests();
    assert_eq!(requests[1].body["contents"][1]["parts"][1]["thoughtSignature"], "sig-0");
    let responses = &requests[2].body["contents"][4]["parts"];
    assert_eq!(responses[0]["functionResponse"]["id"], "fc-2");
    assert_eq!(responses[0]["functionResponse"]["response"]["safety_acknowledgement"], "true");
    assert_eq!(responses[0]["functionResponse"]["parts"][0]["inlineData"]["mimeType"], "image/png");
    assert_eq!(output.steps[0].usage.output_tokens, 25);
    assert!(deltas(&events).contains("Typing the user name."));
}

/// `via_localhost`: the task names the same server under another origin (localhost, not 127.0.0.1).
async fn compatible_login(via_localhost: bool, expect_key: bool) {
    let desktop = login_desktop(Size::new(1920, 1200));
    let points = Arc::new(Mutex::new(None::<Login>));
    let p = points.clone();
    let server = FakeServer::start(
        Vendor::Compatible { key: expect_key.then(|| KEY.to_string()) },
        Box::new(move |r| {
            let guard = p.lock().unwrap();
            let l = guard.as_ref().expect("points");
            let usage = json!({"prompt_tokens": 800, "completion_tokens": 20});
            match turns_in(r) {
                0 => fake::compatible_reply(
                    "",
                    &[
                        ("c1", "click", json!({"x": l.username.x, "y": l.username.y})),
                        ("c2", "type_text", json!({"text": "alice"})),
                    ],
                    usage,
                ),
                1 => fake::compatible_reply(
                    "Password next.",
                    &[
                        ("c3", "click", json!({"x": l.password.x, "y": l.password.y})),
                        ("c4", "type_text", json!({"text": "hunter2"})),
                        ("c5", "keypress", json!({"keys": ["Return"]})),
                    ],
                    usage,
                ),
                _ => fake::compatible_reply(
                    "",
                    &[("c6", "task_completion", json!({"success": true, "summary": "done"}))],
                    usage,
                ),
            }
        }),
    )
    .await
    .unwrap();
    let shared =
        shared_for("openai-compatible", &server.url, "model = \"ui-tars-1.5-7b\"\napi_key_env = \"LOCAL_KEY\"");
    let mut model_json = json!({"provider": "openai-compatible"});
    if via_localhost {
        model_json["base_url"] = json!(format!("{}/v1", server.url.replace("127.0.0.1", "localhost")));
    }
    let model_spec = spec(model_json);
    let model = backends::model(&model_spec, &shared, None).unwrap();
    let login = login_points(&desktop, model.as_ref());
    *points.lock().unwrap() = Some(login_points(&desktop, model.as_ref()));
    let (output, _) = run_task(task(model_spec, 10, 3), model, desktop.clone()).await;
    assert_logged_in(&desktop, &output, &server, "Return", &login);
    let tools = server.requests()[0].body["tools"].as_array().unwrap().clone();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["function"]["name"].as_str()).collect();
    assert!(names.contains(&"click") && names.contains(&"task_completion"), "{names:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn compatible_whole_task_with_the_configured_key() {
    compatible_login(false, true).await;
}

#[tokio::test(flavor = "current_thread")]
async fn compatible_task_base_url_elsewhere_gets_no_key() {
    // Same server, reached under another origin (localhost instead of 127.0.0.1): no key is sent.
    compatible_login(true, false).await;
}

// ---------------------------------------------------------------------------------------------------------
// Errors, retries and timeouts, one call at a time

fn tiny_image(size: Size) -> ModelImage {
    let frame = Frame::from_rgb(size, vec![200; size.area() as usize * 3]).unwrap();
    ModelImage::new(size, "image/png", agentd::screen::image::encode_png(&frame).unwrap().into())
}

/// Calls `model` once for a fresh task on a 1280×800 screen.
pub async fn call(model: &dyn Model) -> Result<ModelTurn, ModelError> {
    let screen = Size::new(1280, 800);
    let image = tiny_image(model.image_size(screen));
    let tools = agentd::tools::Toolbox::empty().specs();
    let request = ModelRequest {
        instructions: "test",
        history: &[],
        screenshot: &image,
        notes: &[],
        tools: &tools,
        screen,
        browser: false,
        page: None,
        step: 0,
        summary: None,
    };
    let sink = |_: Delta<'_>| {};
    model.next_turn(request, &sink).await
}

fn ok_anthropic(stream: bool) -> Reply {
    fake::anthropic_reply(vec![json!({"type": "text", "text": "hello"})], usage_anthropic(), stream)
}

/// A fake that answers the given replies in order (then success), and an anthropic model on it.
async fn anthropic_with(replies: Vec<Reply>, extra: &str) -> (FakeServer, Arc<dyn Model>) {
    let queue = Mutex::new(replies.into_iter());
    let server = FakeServer::start(
        Vendor::Anthropic { key: KEY.into() },
        Box::new(move |_| queue.lock().unwrap().next().unwrap_or_else(|| ok_anthropic(true))),
    )
    .await
    .unwrap();
    let shared = shared_for("anthropic", &server.url, extra);
    let model = backends::model(&spec(json!({"provider": "anthropic"})), &shared, None).unwrap();
    (server, model)
}

fn gaps(server: &FakeServer) -> Vec<Duration> {
    let r = server.requests();
    r.windows(2).map(|w| w[1].at - w[0].at).collect()
}

fn anthropic_error(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_1"})
}

#[tokio::test(flavor = "current_thread")]
async fn non_retryable_errors_fail_at_once_with_their_kind() {
    let (server, model) = anthropic_with(
        vec![Reply::error(
            400,
            anthropic_error(
                "invalid_request_error",
                "messages.2.content.0: unexpected tool_use_id found in tool_result blocks",
            ),
        )],
        "",
    )
    .await;
    let err = call(model.as_ref()).await.unwrap_err();
    assert!(matches!(err, ModelError::Rejected { status: 400, .. }) && !err.is_retryable(), "{err}");
    assert!(err.to_string().contains("unexpected tool_use_id"), "{err}");
    assert_eq!(server.requests().len(), 1);

    let (server, model) = anthropic_with(
        vec![Reply::error(401, anthropic_error("authentication_error", &format!("invalid x-api-key {KEY}")))],
        "",
    )
    .await;
    let err = call(model.as_ref()).await.unwrap_err();
    assert!(matches!(err, ModelError::Auth(_)), "{err}");
    assert!(!err.to_string().contains(KEY), "the key must not appear in errors: {err}");
    assert_eq!(server.requests().len(), 1);

    for status in [404, 413, 422] {
        let (server, model) = anthropic_with(vec![Reply::error(status, anthropic_error("x", "no"))], "").await;
        assert!(matches!(call(model.as_ref()).await, Err(ModelError::Rejected { .. })));
        assert_eq!(server.requests().len(), 1, "{status}");
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn retry_after_is_honoured_and_overload_backs_off() {
    let (server, model) = anthropic_with(
        vec![Reply::error_with(429, &[("retry-after", "3")], anthropic_error("rate_limit_error", "slow down"))],
        "",
    )
    .await;
    assert_eq!(call(model.as_ref()).await.unwrap().text, "hello");
    assert_eq!(gaps(&server), vec![Duration::from_secs(3)]);

    let (server, model) = anthropic_with(
        vec![Reply::error_with(
            429,
            &[("retry-after-ms", "1500"), ("retry-after", "9")],
            anthropic_error("rate_limit_error", "x"),
        )],
        "",
    )
    .await;
    call(model.as_ref()).await.unwrap();
    assert_eq!(gaps(&server), vec![Duration::from_millis(1500)]);

    // 529 without a hint (as recorded: only x-should-retry), 500, 503, and a 429 without retry-after: backoff.
    let (server, model) = anthropic_with(
        vec![
            Reply::error_with(529, &[("x-should-retry", "true")], anthropic_error("overloaded_error", "Overloaded")),
            Reply::error(500, anthropic_error("api_error", "boom")),
            Reply::error(503, json!({})),
            Reply::error(429, anthropic_error("rate_limit_error", "x")),
        ],
        "",
    )
    .await;
    call(model.as_ref()).await.unwrap();
    let g = gaps(&server);
    assert_eq!(g.len(), 4);
    for (n, gap) in g.iter().enumerate() {
        let full = 0.5 * 2f64.powi(n as i32);
        assert!(gap.as_secs_f64() >= full / 2.0 - 1e-6 && gap.as_secs_f64() <= full + 1e-6, "retry {n}: {gap:?}");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn retries_run_out_and_long_waits_are_not_slept() {
    let overloaded = || Reply::error(529, anthropic_error("overloaded_error", "Overloaded"));
    let (server, model) = anthropic_with((0..10).map(|_| overloaded()).collect(), "max_retries = 2").await;
    let err = call(model.as_ref()).await.unwrap_err();
    assert!(matches!(err, ModelError::Unavailable(_)) && err.is_retryable(), "{err}");
    assert_eq!(server.requests().len(), 3);

    let started = tokio::time::Instant::now();
    let (server, model) = anthropic_with(
        vec![Reply::error_with(429, &[("retry-after", "600")], anthropic_error("rate_limit_error", "x"))],
        "",
    )
    .await;
    let err = call(model.as_ref()).await.unwrap_err();
    assert!(matches!(err, ModelError::RateLimited { retry_after_secs: 600, .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(server.requests().len(), 1);
}

/// On tokio's paused clock (the fake server runs on the same runtime): the waits are the policy's own, to the
/// nanosecond, however slow the machine.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn broken_and_silent_streams_are_retried() {
    let events = match ok_anthropic(true) {
        Reply::Sse(events) => events,
        _ => unreachable!(),
    };
    let (server, model) = anthropic_with(vec![Reply::Cut(events.clone()), Reply::Idle], "idle_timeout_secs = 60").await;
    let started = tokio::time::Instant::now();
    assert_eq!(call(model.as_ref()).await.unwrap().text, "hello");
    assert_eq!(server.requests().len(), 3);
    // The cut stream was retried after the first backoff (0.5 s with equal jitter: 0.25–0.5 s); the silent one
    // was abandoned after the idle timeout and retried after the second backoff (1 s: 0.5–1 s).
    let g = gaps(&server);
    assert_eq!(g.len(), 2, "{g:?}");
    assert!(g[0] >= Duration::from_millis(250) && g[0] <= Duration::from_millis(500), "first backoff: {g:?}");
    assert!(g[1] >= Duration::from_millis(60_500) && g[1] <= Duration::from_secs(61), "idle timeout, backoff: {g:?}");
    assert_eq!(started.elapsed(), g[0] + g[1], "the call took exactly its waits: {g:?}");

    // The idle timeout alone, with no retry after it: exactly 60 s.
    let (server, model) = anthropic_with(vec![Reply::Idle], "idle_timeout_secs = 60\nmax_retries = 0").await;
    let started = tokio::time::Instant::now();
    let err = call(model.as_ref()).await.unwrap_err();
    assert_eq!(started.elapsed(), Duration::from_secs(60), "{err}");
    assert!(err.to_string().contains("silent for 60 s"), "{err}");
    assert_eq!(server.requests().len(), 1);

    // An overloaded error inside the stream is retried; an invalid-request one is not.
    let overloaded = vec![(Some("error".to_string()), anthropic_error("overloaded_error", "Overloaded").to_string())];
    let (server, model) = anthropic_with(vec![Reply::Sse(overloaded)], "").await;
    call(model.as_ref()).await.unwrap();
    assert_eq!(server.requests().len(), 2);
    let invalid = vec![(Some("error".to_string()), anthropic_error("invalid_request_error", "bad").to_string())];
    let (server, model) = anthropic_with(vec![Reply::Sse(invalid)], "").await;
    assert!(call(model.as_ref()).await.is_err());
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn openai_quota_is_final_and_gemini_retry_info_is_honoured() {
    let queue = Mutex::new(
        vec![Reply::error(
            429,
            json!({"error": {"message": "You exceeded your current quota",
        "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}}),
        )]
        .into_iter(),
    );
    let server = FakeServer::start(
        Vendor::OpenAi { key: KEY.into() },
        Box::new(move |_| queue.lock().unwrap().next().unwrap_or_else(|| fake::openai_reply(vec![], json!({}), true))),
    )
    .await
    .unwrap();
    let model =
        backends::model(&spec(json!({"provider": "openai"})), &shared_for("openai", &server.url, ""), None).unwrap();
    let err = call(model.as_ref()).await.unwrap_err();
    assert!(matches!(err, ModelError::Rejected { status: 429, .. }), "{err}");
    assert_eq!(server.requests().len(), 1);

    let queue = Mutex::new(vec![Reply::error(429, json!({"error": {"code": 429, "message": "Resource exhausted",
        "status": "RESOURCE_EXHAUSTED", "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "2.5s"}]}}))]
        .into_iter());
    let server = FakeServer::start(
        Vendor::Gemini { key: KEY.into() },
        Box::new(move |_| {
            queue
                .lock()
                .unwrap()
                .next()
                .unwrap_or_else(|| fake::gemini_reply(vec![json!({"text": "hi"})], json!({}), true))
        }),
    )
    .await
    .unwrap();
    let model =
        backends::model(&spec(json!({"provider": "gemini"})), &shared_for("gemini", &server.url, ""), None).unwrap();
    assert_eq!(call(model.as_ref()).await.unwrap().text, "hi");
    assert_eq!(gaps(&server), vec![Duration::from_millis(2500)]);
}

// ---------------------------------------------------------------------------------------------------------
// The binary

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agentd_run_drives_a_vendor_model_end_to_end() {
    let server = FakeServer::start(
        Vendor::Anthropic { key: KEY.into() },
        Box::new(|r| {
            let content = match turns_in(r) {
                0 => vec![
                    json!({"type": "tool_use", "id": "toolu_1", "name": "computer", "input": {"action": "screenshot"}}),
                ],
                _ => vec![json!({"type": "tool_use", "id": "toolu_2", "name": "task_completion",
                    "input": {"success": true, "summary": "saw the screen"}})],
            };
            fake::anthropic_reply(content, usage_anthropic(), true)
        }),
    )
    .await
    .unwrap();
    let agentd = crate::support::Agentd::with_config(&format!("[models.anthropic]\nbase_url = {:?}\n", server.url));
    let task = agentd.dir.path().join("task.json");
    std::fs::write(
        &task,
        json!({"instructions": "look", "computer": {"provider": "mock", "scene": "login"},
            "model": {"provider": "anthropic", "model": "claude-sonnet-4-5"}})
        .to_string(),
    )
    .unwrap();
    let run = tokio::task::spawn_blocking(move || {
        let output = agentd
            .command()
            .env("ANTHROPIC_API_KEY", KEY)
            .args(["run", task.to_str().unwrap(), "--json"])
            .output()
            .expect("spawn agentd");
        crate::support::Run::from(output)
    })
    .await
    .unwrap();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let record = run.json();
    assert_eq!(record["state"], "succeeded");
    assert_eq!(record["steps"].as_array().map(Vec::len), Some(2));
    assert!(record["usage"]["cost_usd"].as_f64().unwrap_or(0.0) > 0.0);
    assert!(!run.stdout.contains(KEY) && !run.stderr.contains(KEY), "the key leaked");
    assert!(server.problems().is_empty(), "{:#?}", server.problems());

    // Without a key the model is not built: invalid input, exit 2, and the message names the variable.
    let agentd = crate::support::Agentd::with_config(&format!("[models.anthropic]\nbase_url = {:?}\n", server.url));
    let task = agentd.dir.path().join("task.json");
    std::fs::write(&task, json!({"instructions": "look", "model": {"provider": "anthropic"}}).to_string()).unwrap();
    let run = tokio::task::spawn_blocking(move || {
        let output =
            agentd.command().env_remove("ANTHROPIC_API_KEY").args(["run", task.to_str().unwrap()]).output().unwrap();
        crate::support::Run::from(output)
    })
    .await
    .unwrap();
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("ANTHROPIC_API_KEY"), "{}", run.stderr);
}

/// Compaction, through the loop and a real adapter: with a small context window, old steps leave the request
/// and come back as a summary after the task text, every tool call stays answered, and the request stops
/// growing.
#[tokio::test(flavor = "current_thread")]
async fn a_small_context_window_compacts_old_steps_into_a_summary() {
    let desktop = login_desktop(Size::new(1280, 800));
    let server = FakeServer::start(
        Vendor::Anthropic { key: KEY.into() },
        // Counted here: after compaction the request no longer shows every earlier turn.
        Box::new({
            let calls = std::sync::atomic::AtomicUsize::new(0);
            move |_| {
                let turn = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let content = if turn < 24 {
                    vec![
                        json!({"type": "text", "text": format!("Moving the pointer, turn {turn}, to look around.")}),
                        json!({"type": "tool_use", "id": format!("toolu_{turn}"), "name": "computer",
                        "input": {"action": "mouse_move", "coordinate": [10 + turn * 7, 20 + turn * 3]}}),
                    ]
                } else {
                    vec![json!({"type": "tool_use", "id": "toolu_done", "name": "task_completion",
                    "input": {"success": true, "summary": "looked around"}})]
                };
                fake::anthropic_reply(content, usage_anthropic(), false)
            }
        }),
    )
    .await
    .unwrap();
    let shared = shared_for("anthropic", &server.url, "context_window = 9000\nstream = false");
    let model_spec = spec(json!({"provider": "anthropic", "model": "claude-sonnet-4-5"}));
    let model = backends::model(&model_spec, &shared, None).unwrap();
    let (output, _) = run_task(task(model_spec, 40, 3), model, desktop.clone()).await;
    assert!(succeeded(&output), "{:?}", output.ending);
    assert!(server.problems().is_empty(), "{:#?}", server.problems());
    let requests = server.requests();
    assert_eq!(requests.len(), 25);
    let first_text = |r: &Recorded| r.body["messages"][0]["content"][0]["text"].as_str().unwrap_or("").to_string();
    let last = requests.last().unwrap();
    assert!(first_text(last).contains("Earlier steps, summarised"), "{}", first_text(last));
    assert!(first_text(last).contains("Step 1; you said \"Moving the pointer, turn 0"), "{}", first_text(last));
    assert!(!first_text(&requests[2]).contains("summarised"), "nothing compacted early on");
    // Bounded: the last request carries far fewer turns than the 24 the task took.
    let messages = |r: &Recorded| r.body["messages"].as_array().map_or(0, Vec::len);
    assert!(messages(last) < 20, "{} messages in the last request", messages(last));
    // Every move still reached the desktop once.
    assert_eq!(desktop.actions().len(), 24);
}

// ---------------------------------------------------------------------------------------------------------
// The history budget with every adapter

/// The text of a whole request body (to look for the summary and the task in it, whatever the wire shape).
fn body_text(r: &Recorded) -> String {
    r.body.to_string()
}

/// Whether a request is the loop's summary call (model-written compaction).
fn is_summary_call(r: &Recorded) -> bool {
    body_text(r).contains("Context compaction:")
}

/// A fake of `vendor` that moves the pointer `moves` times (one move a turn), then completes; a summary call
/// gets `summary` as text (`None`: no text, a move instead). Step calls use 900 input tokens, summary calls
/// 7777.
async fn mover(vendor: Vendor, moves: usize, summary: Option<&'static str>) -> FakeServer {
    let kind = match &vendor {
        Vendor::Anthropic { .. } => 0,
        Vendor::OpenAi { .. } => 1,
        _ => 2,
    };
    let turn = std::sync::atomic::AtomicUsize::new(0);
    FakeServer::start(
        vendor,
        Box::new(move |r| {
            let summarising = is_summary_call(r);
            let stream = r.body["stream"] == json!(true);
            let input = if summarising { 7777 } else { 900 };
            let n = if summarising { 0 } else { turn.fetch_add(1, std::sync::atomic::Ordering::SeqCst) };
            let text = match (summarising, summary) {
                (true, Some(text)) => Some(text.to_string()),
                (true, None) => None,
                (false, _) => Some(format!("Moving the pointer, turn {n}, to look around.")),
            };
            let done = !summarising && n >= moves;
            let (x, y) = (10 + n as i64 * 7, 20 + n as i64 * 3);
            match kind {
                0 => {
                    let mut content: Vec<Value> =
                        text.iter().map(|t| json!({"type": "text", "text": t})).collect();
                    if done {
                        content = vec![json!({"type": "tool_use", "id": "toolu_done", "name": "task_completion",
                            "input": {"success": true, "summary": "looked around"}})];
                    } else if !(summarising && summary.is_some()) {
                        content.push(json!({"type": "tool_use", "id": format!("toolu_{n}"), "name": "computer",
                            "input": {"action": "mouse_move", "coordinate": [x, y]}}));
                    }
                    let usage = json!({"input_tokens": input, "output_tokens": 20, "cache_creation_input_tokens": 0,
                        "cache_read_input_tokens": 0});
                    fake::anthropic_reply(content, usage, stream)
                }
                1 => {
                    let mut output: Vec<Value> = text
                        .iter()
                        .map(|t| json!({"type": "message", "id": format!("msg_{n}"), "role": "assistant",
                            "status": "completed", "content": [{"type": "output_text", "text": t, "annotations": []}]}))
                        .collect();
                    if done {
                        output = vec![json!({"type": "function_call", "id": "fc_done", "call_id": "call_done",
                            "name": "task_completion", "status": "completed",
                            "arguments": "{\"success\": true, \"summary\": \"looked around\"}"})];
                    } else if !(summarising && summary.is_some()) {
                        output.push(json!({"type": "computer_call", "id": format!("cu_{n}"), "call_id": format!("call_{n}"),
                            "status": "completed", "pending_safety_checks": null,
                            "actions": [{"type": "move", "x": x, "y": y}]}));
                    }
                    let usage = json!({"input_tokens": input, "input_tokens_details": {"cached_tokens": 0},
                        "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": input + 20});
                    fake::openai_reply(output, usage, stream)
                }
                _ => {
                    let usage = json!({"prompt_tokens": input, "completion_tokens": 20});
                    let text = text.unwrap_or_default();
                    if done {
                        fake::compatible_reply(
                            "",
                            &[("c_done", "task_completion", json!({"success": true, "summary": "looked around"}))],
                            usage,
                        )
                    } else if summarising && summary.is_some() {
                        fake::compatible_reply(&text, &[], usage)
                    } else {
                        fake::compatible_reply(&text, &[(&format!("c{n}"), "move", json!({"x": x, "y": y}))], usage)
                    }
                }
            }
        }),
    )
    .await
    .unwrap()
}

/// The compactions the record notes: (step, steps compacted, reason, by).
fn compactions(output: &AttemptOutput) -> Vec<(u32, u32, String, String)> {
    output
        .steps
        .iter()
        .filter_map(|s| {
            let c = s.history.as_ref()?.compacted.as_ref()?;
            Some((s.index, c.steps, format!("{:?}", c.reason), c.by.as_str().to_string()))
        })
        .collect()
}

/// OpenAI and an OpenAI-compatible server compact near a configured `context_window` as Anthropic does:
/// old steps leave the requests for the summary after the task, the requests stop growing, and the record
/// says which steps compacted, why and how.
// Real time: with the clock paused, tokio moves it on whenever the runtime waits for the fake's socket, so on
// a loaded machine the adapters' timeouts fired and requests were sent twice (measured: 12 of 24 moves).
#[tokio::test(flavor = "current_thread")]
async fn openai_and_compatible_compact_near_a_configured_window() {
    for (provider, vendor, spec_json, extra) in [
        (
            "openai",
            Vendor::OpenAi { key: KEY.into() },
            json!({"provider": "openai", "model": "gpt-5.5"}),
            "context_window = 9000",
        ),
        (
            "openai-compatible",
            Vendor::Compatible { key: Some(KEY.into()) },
            json!({"provider": "openai-compatible"}),
            "context_window = 9000\nmodel = \"ui-tars-1.5-7b\"\napi_key_env = \"LOCAL_KEY\"",
        ),
    ] {
        let desktop = login_desktop(Size::new(1280, 800));
        let server = mover(vendor, 24, None).await;
        let shared = shared_for(provider, &server.url, extra);
        let model_spec = spec(spec_json);
        let model = backends::model(&model_spec, &shared, None).unwrap();
        assert_eq!(model.context_window(), Some(9000), "{provider}");
        let (output, _) = run_task(task(model_spec, 40, 3), model, desktop.clone()).await;
        assert!(succeeded(&output), "{provider}: {:?}", output.ending);
        assert!(server.problems().is_empty(), "{provider}: {:#?}", server.problems());
        let requests = server.requests();
        assert_eq!(requests.len(), 25, "{provider}: no extra call for a mechanical summary");
        let last = body_text(requests.last().unwrap());
        assert!(last.contains("Earlier steps, summarised"), "{provider}: {last}");
        assert!(last.contains("you said \\\"Moving the pointer, turn"), "{provider}");
        assert!(!body_text(&requests[2]).contains("summarised"), "{provider}: nothing compacted early on");
        // Bounded: the last request is far smaller than it would be with all 24 turns in it.
        assert!(!last.contains("turn 0, to look around.\""), "{provider}: the first turn is still verbatim");
        let noted = compactions(&output);
        assert!(!noted.is_empty(), "{provider}: the record notes no compaction");
        assert!(noted.iter().all(|(_, n, reason, by)| *n > 0 && reason == "Window" && by == "mechanical"), "{noted:?}");
        let first = output.steps.iter().find_map(|s| s.history.as_ref()?.compacted.as_ref()).unwrap();
        assert!(first.tokens_after < first.tokens_before && first.summary.starts_with("Step 1;"), "{first:?}");
        assert_eq!(desktop.actions().len(), 24, "{provider}: every move reached the desktop once");
    }
}

/// `compaction: model`: the summary is one extra call to the same adapter (answered by the fake), its text
/// is what later requests carry, and its usage counts in the step's and the task's.
#[tokio::test(flavor = "current_thread")]
async fn a_model_written_summary_is_one_extra_call_counted_in_usage() {
    const SUMMARY: &str = "SUMMARY-BY-MODEL: moved the pointer over the sign-in form; nothing found yet.";
    for (provider, vendor, spec_json) in [
        ("openai", Vendor::OpenAi { key: KEY.into() }, json!({"provider": "openai", "model": "gpt-5.5"})),
        (
            "anthropic",
            Vendor::Anthropic { key: KEY.into() },
            json!({"provider": "anthropic", "model": "claude-sonnet-4-5"}),
        ),
    ] {
        let desktop = login_desktop(Size::new(1280, 800));
        let server = mover(vendor, 12, Some(SUMMARY)).await;
        let shared = shared_for(provider, &server.url, "stream = false");
        let model_spec = spec(spec_json);
        let model = backends::model(&model_spec, &shared, None).unwrap();
        let mut task = task(model_spec, 40, 3);
        task.history = HistoryBudget { keep_steps: Some(4), max_tokens: None, compaction: Compaction::Model };
        let (output, _) = run_task(task, model, desktop.clone()).await;
        assert!(succeeded(&output), "{provider}: {:?}", output.ending);
        assert!(server.problems().is_empty(), "{provider}: {:#?}", server.problems());
        let requests = server.requests();
        let summaries: Vec<&Recorded> = requests.iter().filter(|r| is_summary_call(r)).collect();
        let noted = compactions(&output);
        // 13 step calls; beyond 4 kept steps, down to 2: a compaction every 3 steps from step 5 on.
        assert_eq!(requests.len() - summaries.len(), 13, "{provider}");
        assert_eq!(summaries.len(), noted.len(), "{provider}: {noted:?}");
        assert!(noted.len() >= 3, "{provider}: {noted:?}");
        assert!(noted.iter().all(|(_, _, reason, by)| reason == "Steps" && by == "model"), "{provider}: {noted:?}");
        // The summary call shows the task and the steps that leave; what it wrote is in the next requests.
        assert!(body_text(summaries[0]).contains("Log in as alice"), "{provider}");
        assert!(body_text(summaries[0]).contains("turn 0, to look around"), "{provider}");
        let after: Vec<&Recorded> = requests.iter().skip_while(|r| !is_summary_call(r)).skip(1).collect();
        assert!(body_text(after[0]).contains(SUMMARY), "{provider}: the summary is not in the next request");
        // A later summary call sees the earlier summary (the model rewrites it).
        assert!(body_text(summaries[1]).contains(SUMMARY), "{provider}");
        // Usage: the compacting step carries its summary call's usage beside its own turn's.
        let step = output.steps.iter().find(|s| s.history.as_ref().is_some_and(|h| h.compacted.is_some())).unwrap();
        let note = step.history.as_ref().and_then(|h| h.compacted.as_ref()).unwrap();
        assert_eq!(note.usage.map(|u| u.input_tokens), Some(7777), "{provider}");
        assert_eq!(step.usage.input_tokens, 7777 + 900, "{provider}");
        assert!(note.summary.contains(SUMMARY) && note.fallback.is_none(), "{provider}: {note:?}");
        let total: u64 = output.steps.iter().map(|s| s.usage.input_tokens).sum();
        assert_eq!(total, 13 * 900 + 7777 * summaries.len() as u64, "{provider}");
        assert!(output.steps.iter().map(|s| s.usage.cost_usd).sum::<f64>() > 0.0);
        assert_eq!(desktop.actions().len(), 12, "{provider}: the summary calls ran no action");
    }
}

/// A summary call without text falls back to the mechanical summary, and the record says why.
#[tokio::test(flavor = "current_thread")]
async fn a_summary_call_without_text_falls_back_to_the_mechanical_summary() {
    let desktop = login_desktop(Size::new(1280, 800));
    let server = mover(Vendor::Compatible { key: Some(KEY.into()) }, 6, None).await;
    let shared =
        shared_for("openai-compatible", &server.url, "model = \"ui-tars-1.5-7b\"\napi_key_env = \"LOCAL_KEY\"");
    let model_spec = spec(json!({"provider": "openai-compatible"}));
    let model = backends::model(&model_spec, &shared, None).unwrap();
    let mut task = task(model_spec, 40, 3);
    task.history = HistoryBudget { keep_steps: Some(4), max_tokens: None, compaction: Compaction::Model };
    let (output, _) = run_task(task, model, desktop.clone()).await;
    assert!(succeeded(&output), "{:?}", output.ending);
    let note = output.steps.iter().find_map(|s| s.history.as_ref()?.compacted.clone()).expect("a compaction");
    assert_eq!(note.by, Compaction::Mechanical);
    assert!(note.fallback.as_deref().is_some_and(|f| f.contains("no text")), "{note:?}");
    assert!(note.summary.starts_with("Step 1;"), "{}", note.summary);
    // The summary call's tokens still count.
    assert_eq!(note.usage.map(|u| u.input_tokens), Some(7777));
    assert_eq!(desktop.actions().len(), 6, "the move the summary call asked for did not run");
}

/// Through the binary: the task file's `context` budget, the record's note in the status document, and the
/// model's summary call in the task's usage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_files_history_budget_is_noted_in_the_record() {
    const SUMMARY: &str = "SUMMARY-FROM-THE-FILE: looked at the form.";
    let server = mover(Vendor::Compatible { key: Some(KEY.into()) }, 8, Some(SUMMARY)).await;
    let agentd = crate::support::Agentd::with_config(&format!(
        "[models.openai-compatible]\nbase_url = \"{}/v1\"\nmodel = \"ui-tars-1.5-7b\"\napi_key_env = \"LOCAL_KEY\"\n",
        server.url
    ));
    let task = agentd.dir.path().join("task.json");
    std::fs::write(
        &task,
        json!({"instructions": "look", "computer": {"provider": "mock", "scene": "login"},
            "model": {"provider": "openai-compatible"}, "limits": {"max_steps": 20},
            "context": {"keep_screenshots": 2, "keep_steps": 4, "compaction": "model"}})
        .to_string(),
    )
    .unwrap();
    let run = tokio::task::spawn_blocking(move || {
        let output =
            agentd.command().env("LOCAL_KEY", KEY).args(["run", task.to_str().unwrap(), "--json"]).output().unwrap();
        crate::support::Run::from(output)
    })
    .await
    .unwrap();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let record = run.json();
    let steps = record["steps"].as_array().cloned().unwrap_or_default();
    assert_eq!(steps.len(), 9);
    let noted: Vec<&Value> = steps.iter().filter(|s| !s["history"]["compacted"].is_null()).collect();
    assert!(!noted.is_empty(), "{steps:#?}");
    let first = &noted[0]["history"]["compacted"];
    assert_eq!((first["reason"].as_str(), first["by"].as_str()), (Some("steps"), Some("model")), "{first}");
    assert_eq!(first["summary"], SUMMARY);
    assert_eq!(first["usage"]["input_tokens"], 7777);
    // Screenshots beyond the 2 kept were dropped, and that is noted too.
    assert!(steps.iter().any(|s| s["history"]["screenshots_dropped"].as_u64() > Some(0)), "{steps:#?}");
    let summaries = server.requests().iter().filter(|r| is_summary_call(r)).count() as u64;
    assert_eq!(summaries, noted.len() as u64);
    assert_eq!(record["usage"]["input_tokens"], 9 * 900 + 7777 * summaries);
}

/// A resumed attempt (the worker died) starts from the summary its record holds: no new summary call, and
/// the steps compacted before stay out of the requests.
#[tokio::test(flavor = "current_thread")]
async fn a_resumed_attempt_starts_from_the_recorded_summary() {
    const SUMMARY: &str = "SUMMARY-BEFORE-THE-CRASH: moved over the form.";
    let desktop = login_desktop(Size::new(1280, 800));
    let server = mover(Vendor::Compatible { key: Some(KEY.into()) }, 12, Some(SUMMARY)).await;
    let shared =
        shared_for("openai-compatible", &server.url, "model = \"ui-tars-1.5-7b\"\napi_key_env = \"LOCAL_KEY\"");
    let model_spec = spec(json!({"provider": "openai-compatible"}));
    let model = backends::model(&model_spec, &shared, None).unwrap();
    let attempt = |max_steps: u32, resume: Vec<agentd::record::StepRecord>| {
        let mut task = task(model_spec.clone(), max_steps, 3);
        task.history = HistoryBudget { keep_steps: Some(4), max_tokens: None, compaction: Compaction::Model };
        one_attempt(task, desktop.clone(), model.clone(), Arc::new(agentd::tools::Toolbox::empty()), resume)
    };
    // The first attempt stops after 7 steps (as a lost worker would leave it): one compaction, at step 5.
    let first = attempt(7, Vec::new()).await;
    assert_eq!(first.steps.len(), 7, "{:?}", first.ending);
    assert_eq!(compactions(&first).iter().map(|c| c.0).collect::<Vec<_>>(), [5]);
    let before = server.requests().len();
    let second = attempt(40, first.steps.clone()).await;
    assert!(succeeded(&second), "{:?}", second.ending);
    let requests = server.requests();
    let resumed = &requests[before];
    assert!(!is_summary_call(resumed), "the resumed attempt summarised again");
    assert!(body_text(resumed).contains(SUMMARY), "{}", body_text(resumed));
    assert!(!body_text(resumed).contains("turn 0, to look around"), "a compacted step is back in the request");
    assert!(body_text(resumed).contains("turn 6, to look around"));
}
