//! Granular events (docs/events.md, issue 12): the boundaries of a model turn for each streaming adapter (against its
//! fake server), for the scripted model, for a response the adapter retried, and for a turn cut short by a
//! cancel or the time limit (its step is recorded with the partial text, `interrupted`, and its screenshot);
//! a tool call cancelled mid-run lands in the step record; SSE clients and `agentd events --json` see the same
//! kinds in the same order, and the progress printer stays quiet on them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentd::agent::events::EventSink;
use agentd::agent::journal::MemoryJournal;
use agentd::agent::stream::RESTART_MESSAGE;
use agentd::agent::{Attempt, AttemptOutput, Built, Ending, RunContext, run};
use agentd::artifacts::{FsStore, Uploader};
use agentd::backends;
use agentd::model::scripted::{Script, ScriptedModel};
use agentd::model::{Delta, DeltaSink, Model, ModelError, ModelRequest, ModelTurn, ToolSpec};
use agentd::record::events::{DeltaKind, Event, EventKind};
use agentd::record::{EndReason, StepRecord};
use agentd::tools::{Tool, ToolContext, ToolOutcome, Toolbox};
use agentd_computer::Size;
use agentd_mock::MockDesktop;
use agentd_testkit::fake::{self, FakeServer, Reply, Vendor};
use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::models::{KEY, login_desktop, shared_for, spec, task, turns_in};

/// The granular kinds (and `model_delta`), as the names clients see.
const GRANULAR: [&str; 11] = [
    "message_start",
    "message_end",
    "text_start",
    "model_delta",
    "text_end",
    "thinking_start",
    "thinking_end",
    "tool_call_start",
    "tool_call_delta",
    "tool_call_end",
    "error",
];

fn step_of(kind: &EventKind) -> Option<u32> {
    let value = serde_json::to_value(kind).ok()?;
    value.get("step").and_then(Value::as_u64).map(|s| s as u32)
}

/// The granular events of one step, in order.
fn of_step(events: &[Event], step: u32) -> Vec<EventKind> {
    events
        .iter()
        .filter(|e| GRANULAR.contains(&e.kind.type_name()) && step_of(&e.kind) == Some(step))
        .map(|e| e.kind.clone())
        .collect()
}

fn names(kinds: &[EventKind]) -> Vec<&'static str> {
    kinds.iter().map(EventKind::type_name).collect()
}

/// The concatenated `tool_call_delta`s of one call.
fn streamed_args(kinds: &[EventKind], call: &str) -> String {
    kinds
        .iter()
        .filter_map(|k| match k {
            EventKind::ToolCallDelta { call_id, delta, .. } if call_id == call => Some(delta.as_str()),
            _ => None,
        })
        .collect()
}

/// What one in-process run left behind.
struct Ran {
    output: AttemptOutput,
    events: Vec<Event>,
    journal: Vec<StepRecord>,
    store: Arc<FsStore>,
    _dir: tempfile::TempDir,
}

/// Runs a task in-process with this toolbox and cancel token.
async fn run_with(
    task: agentd::task::ResolvedTask,
    model: Arc<dyn Model>,
    desktop: Arc<MockDesktop>,
    tools: Toolbox,
    cancel: CancellationToken,
) -> Ran {
    let dir = tempfile::tempdir().expect("tempdir");
    let tracker = TaskTracker::new();
    let background = CancellationToken::new();
    let store = Arc::new(FsStore::new(dir.path().join("artifacts")));
    let uploader = Uploader::start(store.clone(), dir.path().join("spool"), 16, u64::MAX, &tracker, background.clone());
    let (events, mut rx) = EventSink::channel("t1", 1);
    let journal = Arc::new(MemoryJournal::default());
    let output = run(
        Attempt {
            task,
            settle: Default::default(),
            context: RunContext {
                task_id: "t1".into(),
                attempt: 1,
                uploader: uploader.clone(),
                journal: journal.clone(),
                events: events.clone(),
                cancel,
                shutdown: CancellationToken::new(),
                resume: Vec::new(),
                elapsed_before: Duration::ZERO,
                turns: Vec::new(),
                pause: Default::default(),
                handed_back: None,
            },
        },
        Built { computer: desktop, model, tools: Arc::new(tools), verifier: Default::default() },
    )
    .await;
    drop(events);
    assert_eq!(uploader.flush(Duration::from_secs(30)).await, 0);
    background.cancel();
    tracker.close();
    tracker.wait().await;
    let mut all = Vec::new();
    while let Ok(event) = rx.try_recv() {
        all.push(event);
    }
    Ran { output, events: all, journal: journal.steps(), store, _dir: dir }
}

fn end_reason(output: &AttemptOutput) -> Option<(bool, EndReason)> {
    match &output.ending {
        Ending::Finished(o) | Ending::Retryable { outcome: o, .. } => Some((o.success, o.reason)),
        _ => None,
    }
}

fn scripted(json: Value) -> Arc<dyn Model> {
    Arc::new(ScriptedModel::new(Script::parse(&json.to_string(), "test script").expect("script")))
}

fn scripted_task() -> agentd::task::ResolvedTask {
    task(spec(json!({"provider": "scripted", "script": "unused"})), 10, 3)
}

#[tokio::test]
async fn the_scripted_model_has_the_same_shape() {
    let model = scripted(json!({"turns": [
        {"say": "Typing the name.", "actions": [{"type": "click", "x": 640, "y": 370}, {"type": "type", "text": "alice"}]},
        {"complete": {"success": true, "summary": "typed"}}
    ]}));
    let ran = run_with(
        scripted_task(),
        model,
        login_desktop(Size::new(1280, 800)),
        Toolbox::empty(),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(end_reason(&ran.output), Some((true, EndReason::Completed)));
    let step0 = of_step(&ran.events, 0);
    assert_eq!(
        names(&step0),
        ["message_start", "text_start", "model_delta", "text_end", "tool_call_start", "tool_call_end", "message_end"]
    );
    assert_eq!(step0[3], EventKind::TextEnd { step: 0, text: "Typing the name.".into() });
    assert_eq!(
        step0[4],
        EventKind::ToolCallStart { step: 0, call_id: "script_0_computer".into(), name: "computer".into() }
    );
    assert_eq!(
        step0[5],
        EventKind::ToolCallEnd {
            step: 0,
            call_id: "script_0_computer".into(),
            name: "computer".into(),
            arguments: json!({"actions": [{"type": "click", "x": 640, "y": 370},
                {"type": "type", "text": "alice"}]}),
        }
    );
    assert_eq!(step0[6], EventKind::MessageEnd { step: 0, interrupted: false });
    let step1 = of_step(&ran.events, 1);
    assert_eq!(names(&step1), ["message_start", "tool_call_start", "tool_call_end", "message_end"]);
    assert_eq!(
        step1[2],
        EventKind::ToolCallEnd {
            step: 1,
            call_id: "script_1_complete".into(),
            name: "task_completion".into(),
            arguments: json!({"success": true, "summary": "typed"}),
        }
    );
    // Whole-step order: the message ends before the step's first action starts.
    let types: Vec<&str> = ran.events.iter().map(|e| e.kind.type_name()).collect();
    let end = types.iter().position(|t| *t == "message_end").expect("message_end");
    let action = types.iter().position(|t| *t == "action_started").expect("action_started");
    let start = types.iter().position(|t| *t == "step_started").expect("step_started");
    assert!(start < end && end < action, "{types:?}");
}

async fn anthropic_model(server: &FakeServer) -> Arc<dyn Model> {
    let shared = shared_for("anthropic", &server.url, "stream = true");
    backends::model(&spec(json!({"provider": "anthropic", "model": "claude-sonnet-4-5"})), &shared, None)
        .expect("model")
}

fn anthropic_usage() -> Value {
    json!({"input_tokens": 100, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 10})
}

#[tokio::test]
async fn anthropic_streams_thinking_text_and_tool_call_boundaries() {
    let server = FakeServer::start(
        Vendor::Anthropic { key: KEY.into() },
        Box::new(|r| {
            let content = match turns_in(r) {
                0 => vec![
                    json!({"type": "thinking", "thinking": "The form is empty.", "signature": "sig"}),
                    json!({"type": "text", "text": "I'll take a look."}),
                    json!({"type": "tool_use", "id": "toolu_1", "name": "computer", "input": {"action": "screenshot"}}),
                ],
                _ => vec![json!({"type": "tool_use", "id": "toolu_2", "name": "task_completion",
                    "input": {"success": true, "summary": "looked"}})],
            };
            fake::anthropic_reply(content, anthropic_usage(), true)
        }),
    )
    .await
    .unwrap();
    let model = anthropic_model(&server).await;
    let ran = run_with(
        task(spec(json!({"provider": "anthropic"})), 5, 3),
        model,
        login_desktop(Size::new(1280, 800)),
        Toolbox::empty(),
        CancellationToken::new(),
    )
    .await;
    assert!(server.problems().is_empty(), "{:#?}", server.problems());
    assert_eq!(end_reason(&ran.output), Some((true, EndReason::Completed)));
    let step0 = of_step(&ran.events, 0);
    assert_eq!(
        names(&step0),
        [
            "message_start",
            "thinking_start",
            "model_delta",
            "thinking_end",
            "text_start",
            "model_delta",
            "model_delta",
            "text_end",
            "tool_call_start",
            "tool_call_delta",
            "tool_call_delta",
            "tool_call_end",
            "message_end"
        ]
    );
    assert_eq!(
        step0[2],
        EventKind::ModelDelta { step: 0, kind: DeltaKind::Thinking, text: "The form is empty.".into() }
    );
    assert_eq!(step0[3], EventKind::ThinkingEnd { step: 0, text: "The form is empty.".into() });
    assert_eq!(step0[7], EventKind::TextEnd { step: 0, text: "I'll take a look.".into() });
    assert_eq!(step0[8], EventKind::ToolCallStart { step: 0, call_id: "toolu_1".into(), name: "computer".into() });
    let args: Value = serde_json::from_str(&streamed_args(&step0, "toolu_1")).expect("the deltas make the input");
    assert_eq!(args, json!({"action": "screenshot"}));
    assert_eq!(
        step0[11],
        EventKind::ToolCallEnd {
            step: 0,
            call_id: "toolu_1".into(),
            name: "computer".into(),
            arguments: json!({"actions": [{"type": "screenshot"}]})
        }
    );
    let step1 = of_step(&ran.events, 1);
    assert_eq!(
        names(&step1),
        ["message_start", "tool_call_start", "tool_call_delta", "tool_call_delta", "tool_call_end", "message_end"]
    );
    assert_eq!(
        step1[4],
        EventKind::ToolCallEnd {
            step: 1,
            call_id: "toolu_2".into(),
            name: "task_completion".into(),
            arguments: json!({"success": true, "summary": "looked"})
        }
    );
}

#[tokio::test]
async fn a_stream_the_adapter_retries_voids_its_first_message() {
    let replies = Arc::new(Mutex::new(0));
    let counter = replies.clone();
    let server = FakeServer::start(
        Vendor::Anthropic { key: KEY.into() },
        Box::new(move |r| {
            let mut n = counter.lock().unwrap();
            *n += 1;
            let content = match turns_in(r) {
                0 => vec![
                    json!({"type": "text", "text": "Half a thought that breaks off"}),
                    json!({"type": "tool_use", "id": "toolu_1", "name": "computer", "input": {"action": "screenshot"}}),
                ],
                _ => vec![json!({"type": "tool_use", "id": "toolu_2", "name": "task_completion",
                    "input": {"success": true, "summary": "done"}})],
            };
            let reply = fake::anthropic_reply(content, anthropic_usage(), true);
            match (*n, reply) {
                // The first response streams its text and the tool call's start, then the connection drops.
                (1, Reply::Sse(events)) => {
                    let upto = events.iter().position(|(_, d)| d.contains("input_json_delta")).unwrap_or(3);
                    let mut cut = events[..upto].to_vec();
                    cut.extend(std::iter::repeat_n((Some("ping".into()), json!({"type": "ping"}).to_string()), 60));
                    Reply::Cut(cut)
                }
                (_, reply) => reply,
            }
        }),
    )
    .await
    .unwrap();
    let model = anthropic_model(&server).await;
    let ran = run_with(
        task(spec(json!({"provider": "anthropic"})), 5, 3),
        model,
        login_desktop(Size::new(1280, 800)),
        Toolbox::empty(),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(end_reason(&ran.output), Some((true, EndReason::Completed)));
    let turns: Vec<usize> = server.requests().iter().map(turns_in).collect();
    // The cut response was sent again (a reused connection the fake closed may cost one more request).
    assert!(turns.len() >= 3 && turns[..turns.len() - 1].iter().all(|t| *t == 0), "{turns:?}");
    assert_eq!(turns.last(), Some(&1), "{turns:?}");
    let step0 = of_step(&ran.events, 0);
    let first_end = step0.iter().position(|k| matches!(k, EventKind::MessageEnd { .. })).expect("message_end");
    assert_eq!(
        names(&step0[..first_end + 3]),
        [
            "message_start",
            "text_start",
            "model_delta",
            "model_delta",
            "text_end",
            "tool_call_start",
            "tool_call_end",
            "message_end",
            "error",
            "message_start"
        ]
    );
    assert_eq!(
        step0[6],
        EventKind::ToolCallEnd { step: 0, call_id: "toolu_1".into(), name: "computer".into(), arguments: Value::Null }
    );
    assert_eq!(step0[first_end], EventKind::MessageEnd { step: 0, interrupted: true });
    assert_eq!(
        step0[first_end + 1],
        EventKind::Error { step: Some(0), message: RESTART_MESSAGE.into(), retryable: true }
    );
    // The second message is the turn, whole.
    let second = &step0[first_end + 2..];
    assert_eq!(second.iter().filter(|k| matches!(k, EventKind::TextEnd { .. })).count(), 1);
    assert_eq!(second.last(), Some(&EventKind::MessageEnd { step: 0, interrupted: false }));
    assert!(second.iter().any(|k| matches!(k, EventKind::ToolCallEnd { call_id, arguments, .. }
        if call_id == "toolu_1" && *arguments == json!({"actions": [{"type": "screenshot"}]}))));
    assert_eq!(ran.output.steps[0].model_text, "Half a thought that breaks off");
}

#[tokio::test]
async fn openai_streams_reasoning_text_and_function_arguments() {
    let server = FakeServer::start(
        Vendor::OpenAi { key: KEY.into() },
        Box::new(|r| {
            let output = match turns_in(r) {
                0 => vec![
                    json!({"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Look first."}]}),
                    json!({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": "Taking a screenshot.", "annotations": []}]}),
                    json!({"type": "computer_call", "id": "cu_1", "call_id": "call_1", "status": "completed",
                        "action": {"type": "screenshot"}, "pending_safety_checks": []}),
                ],
                _ => vec![json!({"type": "function_call", "id": "fc_1", "call_id": "call_2", "name": "task_completion",
                    "arguments": "{\"success\": true, \"summary\": \"done\"}", "status": "completed"})],
            };
            fake::openai_reply(output, json!({"input_tokens": 10, "output_tokens": 3}), true)
        }),
    )
    .await
    .unwrap();
    let shared = shared_for("openai", &server.url, "");
    let model_spec = spec(json!({"provider": "openai", "model": "gpt-5.5"}));
    let model = backends::model(&model_spec, &shared, None).expect("model");
    let ran = run_with(
        task(model_spec, 5, 3),
        model,
        login_desktop(Size::new(1280, 800)),
        Toolbox::empty(),
        CancellationToken::new(),
    )
    .await;
    assert!(server.problems().is_empty(), "{:#?}", server.problems());
    assert_eq!(end_reason(&ran.output), Some((true, EndReason::Completed)));
    let step0 = of_step(&ran.events, 0);
    assert_eq!(
        names(&step0),
        [
            "message_start",
            "thinking_start",
            "model_delta",
            "thinking_end",
            "text_start",
            "model_delta",
            "text_end",
            "tool_call_start",
            "tool_call_end",
            "message_end"
        ]
    );
    assert_eq!(step0[3], EventKind::ThinkingEnd { step: 0, text: "Look first.".into() });
    assert_eq!(step0[6], EventKind::TextEnd { step: 0, text: "Taking a screenshot.".into() });
    assert_eq!(step0[7], EventKind::ToolCallStart { step: 0, call_id: "call_1".into(), name: "computer".into() });
    let step1 = of_step(&ran.events, 1);
    assert_eq!(
        names(&step1),
        ["message_start", "tool_call_start", "tool_call_delta", "tool_call_delta", "tool_call_end", "message_end"]
    );
    assert_eq!(
        step1[1],
        EventKind::ToolCallStart { step: 1, call_id: "call_2".into(), name: "task_completion".into() }
    );
    assert_eq!(streamed_args(&step1, "call_2"), "{\"success\": true, \"summary\": \"done\"}");
    assert_eq!(
        step1[4],
        EventKind::ToolCallEnd {
            step: 1,
            call_id: "call_2".into(),
            name: "task_completion".into(),
            arguments: json!({"success": true, "summary": "done"})
        }
    );
}

#[tokio::test]
async fn gemini_streams_whole_function_calls() {
    let server = FakeServer::start(
        Vendor::Gemini { key: KEY.into() },
        Box::new(|r| {
            let parts = match turns_in(r) {
                0 => vec![
                    json!({"text": "Clicking the user name."}),
                    json!({"functionCall": {"name": "click_at", "args": {"x": 500, "y": 460}}}),
                ],
                _ => vec![
                    json!({"functionCall": {"name": "task_completion", "args": {"success": true, "summary": "ok"}}}),
                ],
            };
            fake::gemini_reply(parts, json!({"promptTokenCount": 10, "candidatesTokenCount": 2}), true)
        }),
    )
    .await
    .unwrap();
    let shared = shared_for("gemini", &server.url, "");
    let model_spec = spec(json!({"provider": "gemini"}));
    let model = backends::model(&model_spec, &shared, None).expect("model");
    let ran = run_with(
        task(model_spec, 5, 3),
        model,
        login_desktop(Size::new(1000, 1000)),
        Toolbox::empty(),
        CancellationToken::new(),
    )
    .await;
    assert!(server.problems().is_empty(), "{:#?}", server.problems());
    assert_eq!(end_reason(&ran.output), Some((true, EndReason::Completed)));
    let step0 = of_step(&ran.events, 0);
    assert_eq!(
        names(&step0),
        [
            "message_start",
            "text_start",
            "model_delta",
            "text_end",
            "tool_call_start",
            "tool_call_delta",
            "tool_call_end",
            "message_end"
        ]
    );
    assert_eq!(step0[4], EventKind::ToolCallStart { step: 0, call_id: "gemini_0_0".into(), name: "click_at".into() });
    assert_eq!(
        serde_json::from_str::<Value>(&streamed_args(&step0, "gemini_0_0")).unwrap(),
        json!({"x": 500, "y": 460})
    );
    assert_eq!(
        step0[6],
        EventKind::ToolCallEnd {
            step: 0,
            call_id: "gemini_0_0".into(),
            name: "click_at".into(),
            arguments: json!({"actions": [{"type": "click", "x": 500, "y": 460}]})
        }
    );
    let step1 = of_step(&ran.events, 1);
    assert_eq!(names(&step1), ["message_start", "tool_call_start", "tool_call_delta", "tool_call_end", "message_end"]);
}

/// Streams some text (and a tool call's start), then never answers; says when it has streamed.
struct StreamsThenHangs {
    streamed: Arc<tokio::sync::Notify>,
}

#[async_trait]
impl Model for StreamsThenHangs {
    fn describe(&self) -> String {
        "streams then hangs".into()
    }
    fn coordinates(&self, screen: Size) -> agentd::screen::CoordinateMap {
        agentd::screen::CoordinateMap::identity(screen)
    }
    async fn next_turn(&self, _request: ModelRequest<'_>, deltas: DeltaSink<'_>) -> Result<ModelTurn, ModelError> {
        deltas(Delta::Thinking("The form"));
        deltas(Delta::Text("I can see the sign-in"));
        deltas(Delta::Text(" form; typing"));
        deltas(Delta::ToolCall { id: "call_9", name: "computer" });
        deltas(Delta::ToolArgs { id: "call_9", delta: "{\"action\": \"ty" });
        self.streamed.notify_one();
        std::future::pending().await
    }
}

/// The cut-short step: recorded with its partial text, `interrupted`, its screenshot stored, no call run;
/// the events close the open blocks and end the message `interrupted` before the loop ends.
fn assert_cut_turn(ran: &Ran, reason: EndReason) {
    assert_eq!(end_reason(&ran.output), Some((false, reason)));
    assert_eq!(ran.output.steps.len(), 1);
    let step = &ran.output.steps[0];
    assert!(step.interrupted && step.finished, "{step:?}");
    assert_eq!(step.model_text, "I can see the sign-in form; typing");
    assert_eq!(step.thinking, "The form");
    assert!(step.calls.is_empty() && step.actions.is_empty() && step.results.is_empty(), "{step:?}");
    let path = ran.store.path_of(&step.screenshot.key).expect("key");
    assert!(std::fs::metadata(&path).is_ok_and(|m| m.len() > 0), "the screenshot {} is stored", path.display());
    assert_eq!(ran.journal, ran.output.steps, "the journal holds the interrupted step, finished");
    let step0 = of_step(&ran.events, 0);
    assert_eq!(
        names(&step0),
        [
            "message_start",
            "thinking_start",
            "model_delta",
            "thinking_end",
            "text_start",
            "model_delta",
            "model_delta",
            "text_end",
            "tool_call_start",
            "tool_call_delta",
            "tool_call_end",
            "message_end"
        ]
    );
    assert_eq!(step0[7], EventKind::TextEnd { step: 0, text: "I can see the sign-in form; typing".into() });
    assert_eq!(
        step0[10],
        EventKind::ToolCallEnd { step: 0, call_id: "call_9".into(), name: "computer".into(), arguments: Value::Null }
    );
    assert_eq!(step0[11], EventKind::MessageEnd { step: 0, interrupted: true });
    let types: Vec<&str> = ran.events.iter().map(|e| e.kind.type_name()).collect();
    assert_eq!(types.iter().rev().find(|t| **t != "screenshot_saved"), Some(&"step_finished"), "{types:?}");
    assert!(!types.contains(&"action_started"));
}

#[tokio::test]
async fn a_turn_cancelled_mid_stream_keeps_what_it_said() {
    let streamed = Arc::new(tokio::sync::Notify::new());
    let cancel = CancellationToken::new();
    let (trigger, token) = (streamed.clone(), cancel.clone());
    tokio::spawn(async move {
        trigger.notified().await;
        token.cancel();
    });
    let model = Arc::new(StreamsThenHangs { streamed });
    let ran = run_with(scripted_task(), model, login_desktop(Size::new(1280, 800)), Toolbox::empty(), cancel).await;
    assert_cut_turn(&ran, EndReason::Cancelled);
}

#[tokio::test(start_paused = true)]
async fn a_turn_cut_by_the_time_limit_keeps_what_it_said() {
    let model = Arc::new(StreamsThenHangs { streamed: Arc::new(tokio::sync::Notify::new()) });
    let mut task = scripted_task();
    task.limits.timeout_secs = 30;
    let ran =
        run_with(task, model, login_desktop(Size::new(1280, 800)), Toolbox::empty(), CancellationToken::new()).await;
    assert_cut_turn(&ran, EndReason::Timeout);
}

/// An in-process tool that runs until it is cancelled; says when it started.
struct Forever {
    started: Arc<tokio::sync::Notify>,
}

#[async_trait]
impl Tool for Forever {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "wait_forever".into(),
            description: "never returns".into(),
            parameters: json!({"type": "object", "properties": {}}),
        }
    }
    async fn call(&self, _arguments: Value, context: ToolContext<'_>) -> ToolOutcome {
        (context.output)("working");
        self.started.notify_one();
        std::future::pending().await
    }
}

#[tokio::test]
async fn a_tool_call_cancelled_mid_run_is_recorded_as_cancelled() {
    let started = Arc::new(tokio::sync::Notify::new());
    let tools = Toolbox::empty().with_tool(Arc::new(Forever { started: started.clone() })).expect("toolbox");
    let cancel = CancellationToken::new();
    let token = cancel.clone();
    tokio::spawn(async move {
        started.notified().await;
        token.cancel();
    });
    let model = scripted(json!({"turns": [
        {"say": "Waiting.", "calls": [{"name": "wait_forever", "arguments": {}}]},
        {"complete": {"success": true, "summary": "never reached"}}
    ]}));
    let ran = run_with(scripted_task(), model, login_desktop(Size::new(1280, 800)), tools, cancel).await;
    assert_eq!(end_reason(&ran.output), Some((false, EndReason::Cancelled)));
    assert_eq!(ran.output.steps.len(), 1);
    let step = &ran.output.steps[0];
    assert!(step.finished && !step.interrupted, "the turn itself was whole: {step:?}");
    assert_eq!(step.model_text, "Waiting.");
    assert_eq!(step.results.len(), 1, "{step:?}");
    let result = &step.results[0];
    assert_eq!(result.tool.as_deref(), Some("wait_forever"));
    assert_eq!(result.call_id.as_deref(), Some("script_0_call_0"));
    assert!(!result.ok && result.message.contains("cancelled"), "{result:?}");
    assert_eq!(step.call_results.len(), 1);
    assert!(!step.call_results[0].ok && step.call_results[0].message.contains("cancelled"));
    assert_eq!(ran.journal, ran.output.steps, "journaled with the cancelled result");
    let types: Vec<&str> = ran.events.iter().map(|e| e.kind.type_name()).collect();
    let order: Vec<&str> = types
        .iter()
        .copied()
        .filter(|t| ["tool_call_end", "message_end", "tool_started", "tool_output", "tool_finished"].contains(t))
        .collect();
    assert_eq!(order, ["tool_call_end", "message_end", "tool_started", "tool_output", "tool_finished"]);
    assert!(ran.events.iter().any(|e| matches!(&e.kind, EventKind::ToolFinished { ok: false, output, .. }
        if output.contains("cancelled"))));
}

/// The SSE body's events, in order, as JSON.
fn sse_events(body: &str) -> Vec<Value> {
    body.lines().filter_map(|l| l.strip_prefix("data:")).filter_map(|d| serde_json::from_str(d.trim()).ok()).collect()
}

fn types_of(events: &[Value]) -> Vec<String> {
    events.iter().filter_map(|e| e["type"].as_str().map(str::to_string)).collect()
}

#[test]
fn sse_clients_and_the_cli_see_the_granular_kinds_in_order() {
    let daemon = crate::support::Daemon::start("");
    let run = daemon.cli(&["submit", "config/tasks/mock-login.json", "--wait"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, daemon.log());
    let id = run.stdout.trim().to_string();
    // The progress printer stays quiet on the model's stream: no delta or boundary reaches it.
    assert!(!run.stderr.contains("I see the Acme Portal"), "{}", run.stderr);
    assert!(!run.stderr.contains("message_") && !run.stderr.contains("text_"), "{}", run.stderr);

    let (code, body) =
        crate::support::http(&daemon.socket, "GET", &format!("/v1/tasks/{id}/events"), None, &[]).expect("sse");
    assert_eq!(code, 200);
    let sse = sse_events(&body);
    let names: Vec<&str> = body.lines().filter_map(|l| l.strip_prefix("event:")).map(str::trim).collect();
    assert_eq!(names, types_of(&sse), "each SSE event is named by its type");
    let step0: Vec<String> = sse
        .iter()
        .filter(|e| e["step"] == 0 && GRANULAR.contains(&e["type"].as_str().unwrap_or_default()))
        .filter_map(|e| e["type"].as_str().map(str::to_string))
        .collect();
    assert_eq!(
        step0,
        ["message_start", "text_start", "model_delta", "text_end", "tool_call_start", "tool_call_end", "message_end"]
    );
    let text_end = sse.iter().find(|e| e["type"] == "text_end" && e["step"] == 0).expect("text_end");
    assert!(text_end["text"].as_str().is_some_and(|t| t.starts_with("I see the Acme Portal")), "{text_end}");
    let call_end = sse.iter().find(|e| e["type"] == "tool_call_end" && e["step"] == 3).expect("tool_call_end");
    assert_eq!(call_end["name"], "task_completion");
    assert_eq!(call_end["arguments"]["summary"], "Logged in as alice and opened Reports");
    let all = types_of(&sse);
    let last_message_end = all.iter().rposition(|t| t == "message_end").expect("message_end");
    let finished = all.iter().position(|t| t == "task_finished").expect("task_finished");
    assert!(last_message_end < finished);

    // `agentd events --json` prints the same events.
    let events = daemon.cli(&["events", &id, "--json"]);
    assert_eq!(events.code, 0, "{}", events.stderr);
    let printed: Vec<Value> = events.stdout.lines().map(|l| serde_json::from_str(l).expect("JSON line")).collect();
    assert_eq!(printed, sse);
    // The human listing of `agentd events` names them, one line each.
    let human = daemon.cli(&["events", &id]);
    assert_eq!(human.code, 0, "{}", human.stderr);
    assert_eq!(human.stdout.lines().count(), sse.len());
    for kind in ["message_start", "text_end", "tool_call_start", "tool_call_end", "message_end"] {
        assert!(human.stdout.lines().any(|l| l.split_whitespace().nth(1) == Some(kind)), "{kind}: {}", human.stdout);
    }
}

/// A daemon whose anthropic provider is `url`, with the fake's key in its environment.
struct AnthropicDaemon {
    agentd: crate::support::Agentd,
    child: std::process::Child,
    socket: std::path::PathBuf,
}

impl AnthropicDaemon {
    fn start(url: &str) -> Self {
        let agentd = crate::support::Agentd::new();
        let socket = agentd.dir.path().join("agentd.sock");
        let config = format!(
            "data_dir = {:?}\n[api]\nsocket = {:?}\n[queue]\npoll_ms = 100\n[models.anthropic]\nbase_url = {url:?}\n",
            agentd.data_dir().display().to_string(),
            socket.display().to_string()
        );
        std::fs::write(agentd.dir.path().join("agentd.toml"), config).expect("config");
        let log = std::fs::File::create(agentd.dir.path().join("serve.log")).expect("log");
        let child = agentd
            .command()
            .arg("serve")
            .env("ANTHROPIC_API_KEY", KEY)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn agentd serve");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while crate::support::http(&socket, "GET", "/healthz", None, &[]).map(|r| r.0).unwrap_or(0) != 200 {
            assert!(std::time::Instant::now() < deadline, "the daemon did not become healthy");
            std::thread::sleep(Duration::from_millis(50));
        }
        Self { agentd, child, socket }
    }

    fn cli(&self, args: &[&str]) -> crate::support::Run {
        let mut full = vec!["--socket", self.socket.to_str().expect("socket")];
        full.extend_from_slice(args);
        self.agentd.run(&full)
    }

    fn events(&self, id: &str) -> Vec<Value> {
        let path = format!("/v1/tasks/{id}/events?follow=false");
        let (code, body) = crate::support::http(&self.socket, "GET", &path, None, &[]).expect("sse");
        assert_eq!(code, 200, "{body}");
        sse_events(&body)
    }
}

impl Drop for AnthropicDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_task_cancelled_while_the_model_streams_keeps_the_partial_turn() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let server = runtime
        .block_on(FakeServer::start(
            Vendor::Anthropic { key: KEY.into() },
            Box::new(|_| {
                let content = vec![json!({"type": "text", "text": "I see the sign-in form; typing alice"})];
                match fake::anthropic_reply(content, anthropic_usage(), true) {
                    // The text streams, then the model goes quiet (well within the adapter's idle timeout).
                    Reply::Sse(events) => {
                        let upto = events.iter().position(|(name, _)| name.as_deref() == Some("content_block_stop"));
                        Reply::Stall(events[..upto.unwrap_or(events.len())].to_vec())
                    }
                    other => other,
                }
            }),
        ))
        .expect("fake server");
    let daemon = AnthropicDaemon::start(&server.url);
    let task = json!({"instructions": "sign in", "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "anthropic", "model": "claude-sonnet-4-5"}});
    let file = daemon.agentd.dir.path().join("task.json");
    std::fs::write(&file, task.to_string()).expect("task");
    let submitted = daemon.cli(&["submit", file.to_str().expect("path")]);
    assert_eq!(submitted.code, 0, "{}", submitted.stderr);
    let id = submitted.stdout.trim().to_string();

    // Wait until the partial text has streamed, then cancel.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !daemon.events(&id).iter().any(|e| e["type"] == "model_delta") {
        assert!(std::time::Instant::now() < deadline, "no delta streamed: {:?}", daemon.events(&id));
        std::thread::sleep(Duration::from_millis(50));
    }
    let cancelled = daemon.cli(&["cancel", &id]);
    assert_eq!(cancelled.code, 0, "{}", cancelled.stderr);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (_, body) =
            crate::support::http(&daemon.socket, "GET", &format!("/v1/tasks/{id}"), None, &[]).expect("status");
        if serde_json::from_str::<Value>(&body).is_ok_and(|doc| doc["state"] == "cancelled") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not cancelled: {body}");
        std::thread::sleep(Duration::from_millis(50));
    }

    let status = daemon.cli(&["status", &id, "--json"]);
    assert_eq!(status.code, 1, "a cancelled task: {}", status.stderr);
    let doc = status.json();
    assert_eq!(doc["state"], "cancelled", "{doc}");
    let step = &doc["steps"][0];
    assert_eq!(step["interrupted"], true, "{step}");
    assert_eq!(step["finished"], true);
    assert_eq!(step["model_text"], "I see the sign-in form; typing alice");
    assert_eq!(step["calls"], json!([]));
    assert_eq!(doc["steps"].as_array().map(Vec::len), Some(1));
    let (code, png) =
        crate::support::http(&daemon.socket, "GET", &format!("/v1/tasks/{id}/steps/0/screenshot"), None, &[])
            .expect("screenshot");
    assert_eq!(code, 200);
    assert!(png.contains("PNG"));

    let events = daemon.events(&id);
    let types = types_of(&events);
    let tail: Vec<&str> = types
        .iter()
        .map(String::as_str)
        .filter(|t| ["text_end", "message_end", "step_finished", "task_finished"].contains(t))
        .collect();
    assert_eq!(tail, ["text_end", "message_end", "step_finished", "task_finished"], "{types:?}");
    let text_end = events.iter().find(|e| e["type"] == "text_end").expect("text_end");
    assert_eq!(text_end["text"], "I see the sign-in form; typing alice");
    let message_end = events.iter().find(|e| e["type"] == "message_end").expect("message_end");
    assert_eq!(message_end["interrupted"], true);
    drop(daemon);
    drop(server);
}
