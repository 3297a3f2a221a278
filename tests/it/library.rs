//! agentd as a library: an agent built with `Agent::builder`, an in-process tool with typed arguments, a
//! run's event stream, its report, abort and drop; the builder's errors name the field at fault.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentd::{
    Agent, BuildError, CallContext, EndReason, Event, EventKind, Limits, Run, TaskState, ToolOutcome, mock_desktop,
    scripted_model, tool_fn,
};
use futures_util::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Arguments of the test tool: a nested type and an optional field, so the derived schema is not trivial.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
struct Lookup {
    /// The user name.
    username: String,
    #[serde(default)]
    with_roles: bool,
    filter: Filter,
}

#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
struct Filter {
    active_only: bool,
}

/// Reads every event until the stream ends (bounded: a stream that never ends fails the test).
async fn drain(run: &mut Run) -> Vec<Event> {
    let mut events = Vec::new();
    let read = async {
        while let Some(event) = run.next().await {
            events.push(event);
        }
    };
    tokio::time::timeout(Duration::from_secs(60), read).await.expect("the event stream ends");
    events
}

fn types(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(|e| e.kind.type_name()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_process_tool_runs_with_typed_arguments_and_the_run_reports_its_outcome() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seen: Arc<Mutex<Vec<Lookup>>> = Arc::default();
    let record = seen.clone();
    let tool = tool_fn("lookup_account", "Looks an account up", move |args: Lookup, ctx: CallContext| {
        let record = record.clone();
        async move {
            ctx.output("searching");
            let roles = if args.with_roles { " with roles admin" } else { "" };
            let message = format!("{} is active{roles}", args.username);
            record.lock().expect("lock").push(args);
            ToolOutcome::ok(message).with_details(json!({"directory_id": 1001}))
        }
    });
    let script = json!({"turns": [
        {"actions": [{"type": "click", "x": 640, "y": 370}, {"type": "type", "text": "alice"}]},
        {"calls": [
            {"name": "lookup_account", "arguments": {"username": "alice", "with_roles": true, "filter": {"active_only": true}}},
            {"name": "lookup_account", "arguments": {"username": 7, "filter": {"active_only": true}}}
        ]},
        {"complete": {"success": true, "summary": "alice is active", "output": {"user": "alice", "active": true}}}
    ]});
    let agent = Agent::builder()
        .instructions("Type alice, then look her account up")
        .model(scripted_model(&script).expect("script"))
        .computer(mock_desktop("login").expect("scene"))
        .tool(tool)
        .output_schema(json!({"type": "object", "required": ["user", "active"],
            "properties": {"user": {"type": "string"}, "active": {"type": "boolean"}}}))
        .data_dir(dir.path())
        .build()
        .await
        .expect("agent");
    let mut run = agent.run();
    let task_id = run.task_id().to_string();
    let events = drain(&mut run).await;
    let report = run.finish().await;

    // The tool ran once, with its arguments deserialized; the call the schema refuses never reached it.
    assert_eq!(
        *seen.lock().expect("lock"),
        vec![Lookup { username: "alice".into(), with_roles: true, filter: Filter { active_only: true } }]
    );
    assert!(report.outcome.success, "{:?}", report.outcome);
    assert_eq!(report.outcome.reason, EndReason::Completed);
    assert_eq!(report.outcome.summary, "alice is active");
    assert_eq!(report.outcome.output, Some(json!({"user": "alice", "active": true})));
    assert_eq!(report.task_id, task_id);
    assert_eq!(report.steps.len(), 3);
    assert_eq!(report.pending_uploads, 0);
    assert_eq!(report.computer_state.as_ref().map(|s| s["fields"]["username"].clone()), Some(json!("alice")));
    // The step record keeps both envelopes: the model's message and the details it never sees.
    let results: Vec<_> = report.steps[1].results.iter().filter(|r| r.tool.is_some()).collect();
    assert_eq!(results.len(), 2, "{:?}", report.steps[1].results);
    assert!(results[0].ok && results[0].message == "alice is active with roles admin", "{:?}", results[0]);
    assert_eq!(results[0].details, Some(json!({"directory_id": 1001})));
    assert!(!results[1].ok && results[1].message.contains("invalid arguments for lookup_account"), "{:?}", results[1]);
    // Screenshots are in the default store under the data dir.
    // (No final screenshot: the last step did not act.)
    assert!(report.final_screenshot.is_none());
    let shot = &report.steps[2].screenshot;
    let path = shot.url.strip_prefix("file://").expect("a file URL");
    assert!(std::path::Path::new(path).starts_with(dir.path()) && std::path::Path::new(path).is_file(), "{path}");

    // The stream: task_started first, task_finished last (succeeded), the tool's own events between.
    let kinds = types(&events);
    assert_eq!(kinds.first(), Some(&"task_started"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"task_finished"), "{kinds:?}");
    assert!(events.windows(2).all(|w| w[1].seq == w[0].seq + 1), "numbered in order");
    assert!(events.iter().all(|e| e.task_id == task_id));
    let started = events.iter().find_map(|e| match &e.kind {
        EventKind::ToolStarted { name, arguments, .. } if name == "lookup_account" => Some(arguments.clone()),
        _ => None,
    });
    assert_eq!(started, Some(json!({"username": "alice", "with_roles": true, "filter": {"active_only": true}})));
    assert!(events.iter().any(|e| matches!(&e.kind, EventKind::ToolOutput { text, .. } if text == "searching")));
    let Some(EventKind::TaskFinished { state, outcome, .. }) = events.last().map(|e| &e.kind) else {
        panic!("no task_finished: {kinds:?}")
    };
    assert_eq!((*state, outcome), (TaskState::Succeeded, &report.outcome));
}

struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// An agent whose first turn calls a tool that tells when it started and then waits for its run to be
/// cancelled; `dropped` is set when the loop drops the call.
async fn waiting_agent(
    dir: &std::path::Path,
    tool_started: tokio::sync::mpsc::UnboundedSender<()>,
    dropped: Arc<AtomicBool>,
) -> Agent {
    let script = json!({"turns": [
        {"calls": [{"name": "lookup_account", "arguments": {"username": "alice", "filter": {"active_only": false}}}]},
        {"actions": [{"type": "click", "x": 10, "y": 10}]},
        {"complete": {"success": true, "summary": "should not get here"}}
    ]});
    Agent::builder()
        .instructions("Look alice up")
        .model(scripted_model(&script).expect("script"))
        .computer(mock_desktop("login").expect("scene"))
        .tool(tool_fn("lookup_account", "Waits", move |_: Lookup, ctx: CallContext| {
            let started = tool_started.clone();
            let guard = SetOnDrop(dropped.clone());
            async move {
                let _guard = guard;
                let _ = started.send(());
                ctx.cancelled().await;
                ToolOutcome::error("cancelled")
            }
        }))
        .data_dir(dir)
        .build()
        .await
        .expect("agent")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborting_a_run_midway_cancels_it_and_ends_its_event_stream() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
    let dropped = Arc::new(AtomicBool::new(false));
    let agent = waiting_agent(dir.path(), started_tx, dropped.clone()).await;
    let mut run = agent.run();
    let abort = run.abort_handle();
    // Read the stream beside the run; abort once the tool is running.
    let reader = async {
        let mut events = Vec::new();
        while let Some(event) = run.next().await {
            events.push(event);
        }
        events
    };
    let aborter = async {
        tokio::time::timeout(Duration::from_secs(30), started.recv()).await.expect("the tool starts");
        abort.abort();
    };
    let (events, ()) =
        tokio::time::timeout(Duration::from_secs(60), async { tokio::join!(reader, aborter) }).await.expect("ends");
    let report = run.finish().await;

    assert!(!report.outcome.success);
    assert_eq!(report.outcome.reason, EndReason::Cancelled, "{:?}", report.outcome);
    assert!(dropped.load(Ordering::SeqCst), "the tool's call was stopped");
    // Nothing after the cancelled step ran: one step, its tool result recorded as cancelled.
    assert_eq!(report.steps.len(), 1, "{:?}", report.steps);
    let result = report.steps[0].results.iter().find(|r| r.tool.is_some()).expect("the tool's result");
    assert!(!result.ok && result.message.contains("cancelled"), "{result:?}");
    let kinds = types(&events);
    assert_eq!(kinds.last(), Some(&"task_finished"), "{kinds:?}");
    assert!(!kinds.contains(&"action_started") || kinds.iter().filter(|k| **k == "step_started").count() == 1);
    let Some(EventKind::TaskFinished { state, .. }) = events.last().map(|e| &e.kind) else { panic!("{kinds:?}") };
    assert_eq!(*state, TaskState::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_run_aborts_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
    let dropped = Arc::new(AtomicBool::new(false));
    let agent = waiting_agent(dir.path(), started_tx, dropped.clone()).await;
    let run = agent.run();
    tokio::time::timeout(Duration::from_secs(30), started.recv()).await.expect("the tool starts");
    assert!(!dropped.load(Ordering::SeqCst));
    drop(run);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !dropped.load(Ordering::SeqCst) {
        assert!(tokio::time::Instant::now() < deadline, "the run went on after its handle was dropped");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn the_builder_names_the_field_at_fault() {
    let model = || scripted_model(&json!({"turns": [{"complete": {"success": true}}]})).expect("script");
    let field = |e: BuildError| e.field().map(str::to_string);

    let error = Agent::builder().model(model()).build().await.err().expect("no instructions");
    assert_eq!(field(error), Some("instructions".into()));

    let error = Agent::builder().instructions("  ").model(model()).build().await.err().expect("blank instructions");
    assert_eq!(field(error), Some("instructions".into()));

    let noop = || tool_fn("same", "a", |_: Filter, _| async { ToolOutcome::ok("") });
    let error =
        Agent::builder().instructions("x").model(model()).tool(noop()).tool(noop()).build().await.err().expect("twice");
    assert!(error.to_string().contains("declared twice"), "{error}");

    let not_object = tool_fn("text", "a", |_: String, _| async { ToolOutcome::ok("") });
    let error = Agent::builder().instructions("x").model(model()).tool(not_object).build().await.err().expect("string");
    assert_eq!(field(error), Some("tools.text.parameters".into()));

    let error = Agent::builder()
        .instructions("x")
        .model(model())
        .output_schema(json!({"type": 12}))
        .build()
        .await
        .err()
        .expect("bad schema");
    assert_eq!(field(error), Some("output_schema".into()));

    let error = Agent::builder()
        .instructions("x")
        .model(model())
        .limits(Limits { max_steps: 0, timeout_secs: 10, max_cost_usd: 1.0 })
        .build()
        .await
        .err()
        .expect("zero steps");
    assert_eq!(field(error), Some("limits.max_steps".into()));

    let error = mock_desktop("no-such-scene").err().expect("unknown scene");
    assert_eq!(field(error), Some("computer.scene".into()));
    let error = scripted_model(&json!({"turns": [{"clicks": []}]})).err().expect("bad script");
    assert_eq!(field(error), Some("model.script".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_declarative_path_builds_a_task_file_and_runs_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string(crate::support::repo().join("config/tasks/mock-login.json")).expect("task");
    let spec = agentd::TaskSpec::parse(&text, "mock-login.json").expect("task file");
    let agent = Agent::builder()
        .task(spec)
        .base_dir(crate::support::repo().join("config/tasks"))
        .data_dir(dir.path())
        .build()
        .await
        .expect("agent");
    let mut run = agent.run();
    let events = drain(&mut run).await;
    let report = run.finish().await.into_result().expect("succeeds");
    assert_eq!(report.outcome.summary, "Logged in as alice and opened Reports");
    assert_eq!(report.computer_state.as_ref().map(|s| s["screen"].clone()), Some(json!("reports")));
    assert_eq!(types(&events).last(), Some(&"task_finished"));
}
