//! The agent loop in-process: limits, tool errors, context policy, coordinates, resume, cancellation and
//! shutdown, against the doubles of `doubles.rs` and the real scripted model and artifact store.

use std::sync::Arc;
use std::time::Duration;

use agentd::agent::events::EventSink;
use agentd::agent::journal::{Journal, JournalError, MemoryJournal};
use agentd::agent::runner::{NO_TOOL_NOTE, RESUME_NOTE};
use agentd::agent::{Attempt, AttemptOutput, Built, Ending, RunContext, run};
use agentd::artifacts::{ArtifactStore, FsStore, Uploader};
use agentd::model::Model;
use agentd::model::scripted::{Script, ScriptedModel};
use agentd::record::events::Event;
use agentd::record::{EndReason, StepRecord};
use agentd::task::{ComputerSpec, Limits, MockSpec, ModelSpec, ResolvedTask, ScriptSource, ScriptedSpec};
use agentd_computer::{Action, ComputerProvider, Point, Size};
use async_trait::async_trait;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::doubles::*;

const SCREEN: Size = Size::new(640, 400);

fn script(json: serde_json::Value) -> ScriptedModel {
    ScriptedModel::new(Script::parse(&json.to_string(), "test script").expect("valid script"))
}

fn task(max_steps: u32, timeout_secs: u64, max_cost_usd: f64, keep: u32) -> ResolvedTask {
    ResolvedTask {
        instructions: "test task".into(),
        computer: ComputerSpec::Mock(MockSpec::default()),
        model: ModelSpec::Scripted(ScriptedSpec {
            script: ScriptSource::Path("unused".into()),
            params: Default::default(),
        }),
        limits: Limits { max_steps, timeout_secs, max_cost_usd },
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

struct Harness {
    dir: tempfile::TempDir,
    store: Arc<FsStore>,
    uploader: Uploader,
    tracker: TaskTracker,
    background: CancellationToken,
    journal: Arc<MemoryJournal>,
    cancel: CancellationToken,
    shutdown: CancellationToken,
}

impl Harness {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(FsStore::new(dir.path().join("artifacts")));
        let tracker = TaskTracker::new();
        let background = CancellationToken::new();
        let uploader =
            Uploader::start(store.clone(), dir.path().join("spool"), 16, u64::MAX, &tracker, background.clone());
        Self {
            dir,
            store,
            uploader,
            tracker,
            background,
            journal: Arc::new(MemoryJournal::default()),
            cancel: CancellationToken::new(),
            shutdown: CancellationToken::new(),
        }
    }

    fn input(
        &self,
        task: ResolvedTask,
        computer: Arc<dyn ComputerProvider>,
        model: Arc<dyn Model>,
    ) -> ((Attempt, Built), UnboundedReceiver<Event>) {
        let (events, rx) = EventSink::channel("t1", 1);
        let input = (
            Attempt {
                task,
                settle: Default::default(),
                context: RunContext {
                    task_id: "t1".into(),
                    attempt: 1,
                    uploader: self.uploader.clone(),
                    journal: self.journal.clone(),
                    events,
                    cancel: self.cancel.clone(),
                    shutdown: self.shutdown.clone(),
                    resume: Vec::new(),
                    elapsed_before: Duration::ZERO,
                    turns: Vec::new(),
                    pause: Default::default(),
                    handed_back: None,
                },
            },
            Built { computer, model, tools: Arc::new(agentd::tools::Toolbox::empty()), verifier: Default::default() },
        );
        (input, rx)
    }

    async fn finish(self) -> tempfile::TempDir {
        assert_eq!(self.uploader.flush(Duration::from_secs(10)).await, 0);
        self.background.cancel();
        self.tracker.close();
        self.tracker.wait().await;
        self.dir
    }
}

fn drain(mut rx: UnboundedReceiver<Event>) -> Vec<Event> {
    let mut out = Vec::new();
    while let Ok(event) = rx.try_recv() {
        out.push(event);
    }
    out
}

fn outcome(output: &AttemptOutput) -> (bool, EndReason) {
    match &output.ending {
        Ending::Finished(o) | Ending::Retryable { outcome: o, .. } => (o.success, o.reason),
        other => panic!("not finished: {other:?}"),
    }
}

#[tokio::test]
async fn completes_records_every_step_and_emits_ordered_events() {
    let harness = Harness::new();
    let screen = RecordingScreen::new(SCREEN);
    let model = Arc::new(script(serde_json::json!({"turns": [
        {"say": "first", "actions": [{"type": "click", "x": 10, "y": 20}, {"type": "type", "text": "héllo"}]},
        {"say": "second", "actions": [{"type": "scroll", "x": 5, "y": 5, "scroll_x": 0, "scroll_y": 100}]},
        {"say": "done", "complete": {"success": true, "summary": "all good"}}
    ]})));
    let (input, rx) = harness.input(task(10, 60, 1.0, 3), screen.clone(), model);
    let output = run(input.0, input.1).await;
    assert_eq!(outcome(&output), (true, EndReason::Completed));
    assert_eq!(output.steps.len(), 3);
    assert_eq!(output.steps[0].model_text, "first");
    assert_eq!(output.steps[0].actions.len(), 2);
    assert!(output.steps[0].results.iter().all(|r| r.ok));
    assert!(output.steps.iter().all(|s| s.finished));
    assert_eq!(output.steps[1].screen_changed, Some(true), "the screen changed after two actions");
    // This screen is polled until it is quiet (100 ms by default) after each step that acted.
    assert_eq!(output.steps[0].visual_change, Some(true));
    assert!(output.steps[0].settle_ms >= 100, "settled for {} ms", output.steps[0].settle_ms);
    assert_eq!(output.steps[2].visual_change, None, "no input actions, no settling");
    assert_eq!(output.steps[2].settle_ms, 0);
    assert_eq!(screen.received().len(), 3);
    // The final screenshot is taken when the last step acted; here it did not.
    assert!(output.final_screenshot.is_none());
    assert_eq!(output.computer_state, Some(serde_json::json!({"actions_received": 3})));

    // Journal holds the same steps.
    assert_eq!(harness.journal.steps(), output.steps);
    let store = harness.store.clone();
    let dir = harness.finish().await;
    for step in &output.steps {
        assert_eq!(step.screenshot.key, format!("tasks/t1/1/{:05}.png", step.index));
        let bytes = store.get(&step.screenshot.key).await.expect("screenshot stored");
        assert_eq!(&bytes[1..4], b"PNG");
    }
    drop(dir);

    let events = drain(rx);
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.type_name()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "step_started").count(), 3);
    assert_eq!(kinds.iter().filter(|k| **k == "action_started").count(), 3);
    assert_eq!(kinds.iter().filter(|k| **k == "action_finished").count(), 3);
    assert_eq!(kinds.iter().filter(|k| **k == "screenshot_saved").count(), 3);
    assert_eq!(kinds.iter().filter(|k| **k == "model_delta").count(), 3);
    let first_step_end = kinds.iter().position(|k| *k == "step_finished").expect("step_finished");
    assert!(kinds[..first_step_end].contains(&"action_finished"));
}

#[tokio::test]
async fn tool_errors_go_back_to_the_model_and_stop_the_rest_of_the_turn() {
    let harness = Harness::new();
    let screen = RecordingScreen::new(SCREEN);
    let model = Observed::new(script(serde_json::json!({"turns": [
        {"actions": [{"type": "click", "x": 10, "y": 10}, {"type": "click", "x": 640, "y": 10}, {"type": "type", "text": "never"}]},
        {"actions": [{"type": "keypress", "keys": ["ctrl", "hyperdrive"]}]},
        {"actions": [{"type": "move", "x": 33, "y": 44}, {"type": "cursor_position"}]},
        {"complete": {"success": false, "summary": "gave up"}}
    ]})));
    let (input, _rx) = harness.input(task(10, 60, 1.0, 3), screen.clone(), model.clone());
    let output = run(input.0, input.1).await;
    assert_eq!(outcome(&output), (false, EndReason::Completed));
    // Only the first click reached the screen from turn 1; the unknown key never did.
    let received = screen.received();
    assert_eq!(received[0], Action::Click { x: 10, y: 10, button: Default::default(), keys: vec![] });
    assert!(!received.iter().any(|a| matches!(a, Action::Type { .. })));
    assert!(!received.iter().any(|a| matches!(a, Action::Keypress { .. })));
    let seen = model.seen();
    let (ok, message) = &seen[1].last_results[0];
    assert!(!ok && message.contains("off the screen") && message.contains("not run"), "{message}");
    let (ok, message) = &seen[2].last_results[0];
    assert!(!ok && message.contains("hyperdrive"), "{message}");
    let (ok, message) = &seen[3].last_results[0];
    assert!(*ok && message.contains("X=33,Y=44"), "{message}");
    // The record keeps one result per attempted action.
    assert_eq!(output.steps[0].actions.len(), 2);
    assert!(output.steps[0].results[0].ok && !output.steps[0].results[1].ok);
    harness.finish().await;
}

#[tokio::test]
async fn max_steps_ends_the_task() {
    let harness = Harness::new();
    let turns: Vec<_> = (0..10).map(|i| serde_json::json!({"actions": [{"type": "move", "x": i, "y": i}]})).collect();
    let model = Arc::new(script(serde_json::json!({ "turns": turns })));
    let screen = RecordingScreen::new(SCREEN);
    let (input, _rx) = harness.input(task(3, 60, 1.0, 3), screen.clone(), model);
    let output = run(input.0, input.1).await;
    assert_eq!(outcome(&output), (false, EndReason::MaxSteps));
    assert_eq!(output.steps.len(), 3);
    assert_eq!(screen.received().len(), 3);
    assert!(output.final_screenshot.is_some(), "the last step acted, so the final screen is recorded");
    harness.finish().await;
}

#[tokio::test]
async fn a_time_limit_past_what_the_clock_holds_does_not_panic() {
    // Before: `Instant + Duration` overflowed ("overflow when adding duration to instant") and the loop panicked.
    let harness = Harness::new();
    let model = Arc::new(script(serde_json::json!({"turns": [
        {"actions": [{"type": "move", "x": 1, "y": 1}]},
        {"complete": {"success": true, "summary": "done"}}
    ]})));
    for timeout_secs in [i64::MAX as u64, u64::MAX] {
        let (input, _rx) = harness.input(task(5, timeout_secs, 1.0, 3), RecordingScreen::new(SCREEN), model.clone());
        let output = run(input.0, input.1).await;
        assert_eq!(outcome(&output), (true, EndReason::Completed), "timeout_secs = {timeout_secs}");
    }
    harness.finish().await;
}

#[tokio::test]
async fn budget_is_checked_before_actions_and_model_calls() {
    let harness = Harness::new();
    let model = Observed::new(script(serde_json::json!({"turns": [
        {"actions": [{"type": "move", "x": 1, "y": 1}], "usage": {"input_tokens": 1000, "cost_usd": 0.6}},
        {"actions": [{"type": "move", "x": 2, "y": 2}], "usage": {"input_tokens": 1000, "cost_usd": 0.6}},
        {"actions": [{"type": "move", "x": 3, "y": 3}], "usage": {"input_tokens": 1000, "cost_usd": 0.6}},
        {"complete": {"success": true, "summary": "x"}}
    ]})));
    let screen = RecordingScreen::new(SCREEN);
    let (input, _rx) = harness.input(task(10, 60, 1.0, 3), screen.clone(), model.clone());
    let output = run(input.0, input.1).await;
    assert_eq!(outcome(&output), (false, EndReason::Budget));
    assert_eq!(model.calls.load(std::sync::atomic::Ordering::SeqCst), 2, "no third model call");
    assert_eq!(
        screen.received(),
        vec![Action::Move { x: 1, y: 1, keys: Vec::new() }],
        "turn 2's action crossed the budget"
    );
    assert!((output.usage.cost_usd - 1.2).abs() < 1e-9);
    assert_eq!(output.usage.input_tokens, 2000);
    harness.finish().await;
}

#[tokio::test(start_paused = true)]
async fn a_hanging_model_hits_the_timeout() {
    let harness = Harness::new();
    let screen = RecordingScreen::new(SCREEN);
    let (input, _rx) = harness.input(task(10, 30, 1.0, 3), screen, Arc::new(BrokenModel(ModelBreakage::Hangs)));
    let output = run(input.0, input.1).await;
    assert_eq!(outcome(&output), (false, EndReason::Timeout));
    harness.finish().await;
}

#[tokio::test]
async fn cancellation_during_a_model_call_ends_the_task() {
    let harness = Harness::new();
    let screen = RecordingScreen::new(SCREEN);
    let (input, _rx) = harness.input(task(10, 600, 1.0, 3), screen, Arc::new(BrokenModel(ModelBreakage::Hangs)));
    let cancel = harness.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        cancel.cancel();
    });
    let output = run(input.0, input.1).await;
    assert_eq!(outcome(&output), (false, EndReason::Cancelled));
    harness.finish().await;
}

#[tokio::test]
async fn model_failures_are_classified() {
    let harness = Harness::new();
    let screen = RecordingScreen::new(SCREEN);
    let (input, _rx) =
        harness.input(task(10, 60, 1.0, 3), screen.clone(), Arc::new(BrokenModel(ModelBreakage::Unavailable)));
    let output = run(input.0, input.1).await;
    assert!(
        matches!(&output.ending, Ending::Retryable { outcome: o, .. } if o.reason == EndReason::Error && o.summary.contains("529"))
    );
    let (input, _rx) = harness.input(task(10, 60, 1.0, 3), screen, Arc::new(BrokenModel(ModelBreakage::Rejects)));
    let output = run(input.0, input.1).await;
    assert!(matches!(&output.ending, Ending::Finished(o) if o.reason == EndReason::Error && o.summary.contains("400")));
    harness.finish().await;
}

#[tokio::test]
async fn an_unreachable_computer_is_a_retryable_error() {
    let harness = Harness::new();
    let broken = Arc::new(BrokenScreen { inner: RecordingScreen::new(SCREEN), breakage: Breakage::Unreachable });
    let model = Arc::new(script(serde_json::json!({"turns": [{"complete": {"success": true, "summary": "x"}}]})));
    let (input, _rx) = harness.input(task(10, 60, 1.0, 3), broken, model);
    let output = run(input.0, input.1).await;
    assert!(
        matches!(&output.ending, Ending::Retryable { outcome: o, .. } if o.summary.contains("connection refused")),
        "{:?}",
        output.ending
    );
    harness.finish().await;
}

#[tokio::test(start_paused = true)]
async fn a_stuck_action_ends_the_attempt_as_retryable() {
    // An action is never cut short on purpose, but one that hangs far past any sane duration means the
    // computer is stuck: the attempt ends (retryable) instead of holding its worker forever.
    let harness = Harness::new();
    let broken = Arc::new(BrokenScreen { inner: RecordingScreen::new(SCREEN), breakage: Breakage::HangsOnAction });
    let model = Arc::new(script(serde_json::json!({"turns": [{"actions": [{"type": "move", "x": 1, "y": 1}]}]})));
    let (input, _rx) = harness.input(task(10, 600, 1.0, 3), broken, model);
    let output = run(input.0, input.1).await;
    assert!(
        matches!(&output.ending, Ending::Retryable { outcome: o, .. } if o.summary.contains("did not finish")),
        "{:?}",
        output.ending
    );
    harness.finish().await;
}

#[tokio::test]
async fn a_panicking_provider_does_not_take_the_caller_down() {
    let harness = Harness::new();
    let broken = Arc::new(BrokenScreen { inner: RecordingScreen::new(SCREEN), breakage: Breakage::PanicsOnAction });
    let model = Arc::new(script(serde_json::json!({"turns": [{"actions": [{"type": "move", "x": 1, "y": 1}]}]})));
    let (input, _rx) = harness.input(task(10, 60, 1.0, 3), broken, model);
    let output = agentd::agent::run_isolated(input.0, input.1).await;
    assert!(
        matches!(&output.ending, Ending::Finished(o) if o.reason == EndReason::Error && o.summary.contains("panicked")),
        "{:?}",
        output.ending
    );
    harness.finish().await;
}

#[tokio::test]
async fn old_screenshots_leave_the_context() {
    let harness = Harness::new();
    let turns: Vec<_> = (0..8).map(|i| serde_json::json!({"actions": [{"type": "move", "x": i, "y": i}]})).collect();
    let model = Observed::new(script(serde_json::json!({ "turns": turns })));
    let (input, _rx) = harness.input(task(8, 60, 1.0, 3), RecordingScreen::new(SCREEN), model.clone());
    let output = run(input.0, input.1).await;
    assert_eq!(output.steps.len(), 8);
    let seen = model.seen();
    let images: Vec<usize> = seen.iter().map(|s| s.images_in_history).collect();
    assert_eq!(images, vec![0, 1, 2, 2, 2, 2, 2, 2], "history images plus the current one never exceed 3");
    harness.finish().await;
}

#[tokio::test]
async fn a_model_that_calls_no_tool_is_told_to() {
    let harness = Harness::new();
    let model = Observed::new(script(serde_json::json!({"turns": [
        {"say": "thinking out loud"},
        {"complete": {"success": true, "summary": "ok"}}
    ]})));
    let (input, _rx) = harness.input(task(5, 60, 1.0, 3), RecordingScreen::new(SCREEN), model.clone());
    let output = run(input.0, input.1).await;
    assert_eq!(outcome(&output), (true, EndReason::Completed));
    assert_eq!(model.seen()[1].notes, vec![NO_TOOL_NOTE.to_string()]);
    harness.finish().await;
}

#[tokio::test]
async fn model_coordinates_are_converted_to_screen_pixels() {
    let harness = Harness::new();
    let screen = RecordingScreen::new(Size::new(1280, 800));
    // The model works on a 640x400 image: every coordinate doubles on the screen.
    let model = Observed::scaled(
        script(serde_json::json!({"turns": [
            {"actions": [{"type": "click", "x": 100, "y": 50}, {"type": "drag", "path": [{"x": 0, "y": 0}, {"x": 639, "y": 399}]}]},
            {"actions": [{"type": "click", "x": 640, "y": 10}]},
            {"complete": {"success": true, "summary": "ok"}}
        ]})),
        Size::new(640, 400),
    );
    let (input, _rx) = harness.input(task(5, 60, 1.0, 3), screen.clone(), model.clone());
    let output = run(input.0, input.1).await;
    let received = screen.received();
    assert_eq!(received[0], Action::Click { x: 201, y: 101, button: Default::default(), keys: vec![] });
    assert_eq!(received[1].points(), vec![Point::new(1, 1), Point::new(1279, 799)]);
    assert_eq!(received.len(), 2);
    // The model saw a 640x400 image and its off-screen error in its own coordinates.
    let seen = model.seen();
    assert_eq!(seen[0].screenshot_size, Size::new(640, 400));
    let (_, message) = &seen[2].last_results[0];
    assert!(message.contains("(640, 10)") && message.contains("640x400"), "{message}");
    // The record stores screen pixels.
    assert_eq!(output.steps[0].actions[0], received[0]);
    assert_eq!(output.steps[0].screenshot.width, 1280);
    harness.finish().await;
}

#[tokio::test]
async fn a_resumed_task_continues_without_replaying_actions() {
    let harness = Harness::new();
    let script_json = serde_json::json!({"turns": [
        {"actions": [{"type": "move", "x": 1, "y": 1}]},
        {"actions": [{"type": "move", "x": 2, "y": 2}]},
        {"actions": [{"type": "move", "x": 3, "y": 3}]},
        {"complete": {"success": true, "summary": "ok"}}
    ]});
    // First attempt: stop it at the boundary after two steps (as a crash after step 1 was journaled).
    let screen = RecordingScreen::new(SCREEN);
    let (input, _rx) = harness.input(task(2, 60, 1.0, 3), screen.clone(), Arc::new(script(script_json.clone())));
    let first = run(input.0, input.1).await;
    assert_eq!(first.steps.len(), 2);
    // Pretend the second step's actions were interrupted: journaled before, never after.
    let mut steps = first.steps.clone();
    steps[1].finished = false;
    steps[1].results.clear();
    steps[1].call_results.clear();

    let model = Observed::new(script(script_json));
    let (mut input, _rx) = harness.input(task(10, 60, 1.0, 3), screen.clone(), model.clone());
    input.0.context.resume = steps;
    input.0.context.attempt = 2;
    let output = run(input.0, input.1).await;
    assert_eq!(outcome(&output), (true, EndReason::Completed));
    // Moves 1 and 2 from the first attempt, then only move 3: nothing replayed.
    assert_eq!(
        screen.received(),
        vec![
            Action::Move { x: 1, y: 1, keys: Vec::new() },
            Action::Move { x: 2, y: 2, keys: Vec::new() },
            Action::Move { x: 3, y: 3, keys: Vec::new() }
        ]
    );
    let seen = model.seen();
    assert_eq!(seen[0].history_len, 2);
    assert_eq!(seen[0].notes, vec![RESUME_NOTE.to_string()]);
    assert!(seen[0].last_results.iter().all(|(ok, m)| !ok && m.contains("may or may not")));
    assert_eq!(output.steps.len(), 4);
    assert_eq!(output.steps[2].screenshot.key, "tasks/t1/2/00002.png");
    assert!(output.steps[1].finished && !output.steps[1].results[0].ok);
    harness.finish().await;
}

#[tokio::test]
async fn a_resumed_task_records_what_became_of_the_actions_in_flight() {
    let harness = Harness::new();
    let script_json = serde_json::json!({"turns": [
        {"actions": [{"type": "move", "x": 1, "y": 1}]},
        {"actions": [{"type": "move", "x": 2, "y": 2}, {"type": "move", "x": 4, "y": 4}]},
        {"complete": {"success": true, "summary": "ok"}}
    ]});
    let screen = RecordingScreen::new(SCREEN);
    let (input, _rx) = harness.input(task(2, 60, 1.0, 3), screen.clone(), Arc::new(script(script_json.clone())));
    let first = run(input.0, input.1).await;
    // The worker died with step 1's actions in flight: journaled before them, never after.
    let mut in_flight = first.steps[1].clone();
    in_flight.finished = false;
    in_flight.results.clear();
    in_flight.call_results.clear();
    harness.journal.record_step(&in_flight).await.expect("journal");
    let mut steps = first.steps.clone();
    steps[1] = in_flight;

    let (mut input, _rx) = harness.input(task(10, 60, 1.0, 3), screen.clone(), Arc::new(script(script_json)));
    input.0.context.resume = steps;
    input.0.context.attempt = 2;
    let output = run(input.0, input.1).await;
    assert_eq!(outcome(&output), (true, EndReason::Completed));
    // The journal (what the status document shows) has a result for each action, saying it is not known.
    let journaled = harness.journal.steps();
    let step = journaled.iter().find(|s| s.index == 1).expect("step 1");
    assert!(step.finished, "{step:?}");
    assert_eq!(step.results.len(), 2, "{step:?}");
    assert!(step.results.iter().all(|r| !r.ok && r.message == agentd::agent::runner::INTERRUPTED_ACTION), "{step:?}");
    harness.finish().await;
}

#[tokio::test]
async fn a_completion_journaled_before_a_crash_ends_the_resumed_task() {
    let harness = Harness::new();
    let script_json = serde_json::json!({"turns": [
        {"actions": [{"type": "move", "x": 1, "y": 1}]},
        {"complete": {"success": true, "summary": "all done"}}
    ]});
    let screen = RecordingScreen::new(SCREEN);
    let (input, _rx) = harness.input(task(10, 60, 1.0, 3), screen.clone(), Arc::new(script(script_json.clone())));
    let first = run(input.0, input.1).await;
    assert_eq!(first.steps.len(), 2);
    // The worker died after journaling the completing step and before the end was recorded.
    let mut steps = first.steps.clone();
    steps[1].finished = false;
    steps[1].call_results.clear();
    let model = Observed::new(script(script_json.clone()));
    let (mut input, _rx) = harness.input(task(10, 60, 1.0, 3), screen.clone(), model.clone());
    input.0.context.resume = steps;
    input.0.context.attempt = 2;
    let output = run(input.0, input.1).await;
    assert_eq!(outcome(&output), (true, EndReason::Completed));
    assert_eq!(output.steps.len(), 2, "no new step");
    assert!(model.seen().is_empty(), "the model is not asked again");
    assert_eq!(screen.received(), vec![Action::Move { x: 1, y: 1, keys: Vec::new() }], "nothing replayed");

    // Behind a call that was interrupted, the completion is not final: the model looks again.
    let script_json = serde_json::json!({"turns": [
        {"actions": [{"type": "move", "x": 1, "y": 1}], "complete": {"success": true, "summary": "early"}},
        {"complete": {"success": false, "summary": "looked again"}}
    ]});
    let screen = RecordingScreen::new(SCREEN);
    let (input, _rx) = harness.input(task(1, 60, 1.0, 3), screen.clone(), Arc::new(script(script_json.clone())));
    let first = run(input.0, input.1).await;
    let mut steps = first.steps.clone();
    steps[0].finished = false;
    steps[0].results.clear();
    steps[0].call_results.clear();
    let (mut input, _rx) = harness.input(task(10, 60, 1.0, 3), screen.clone(), Arc::new(script(script_json)));
    input.0.context.resume = steps;
    input.0.context.attempt = 2;
    let output = run(input.0, input.1).await;
    assert_eq!(outcome(&output), (false, EndReason::Completed));
    harness.finish().await;
}

#[tokio::test]
async fn shutdown_stops_at_a_step_boundary() {
    let harness = Harness::new();
    let turns: Vec<_> = (0..50)
        .map(
            |i| serde_json::json!({"actions": [{"type": "wait", "duration_ms": 20}, {"type": "move", "x": i, "y": i}]}),
        )
        .collect();
    let screen = RecordingScreen::new(SCREEN);
    let (input, _rx) =
        harness.input(task(50, 60, 1.0, 3), screen.clone(), Arc::new(script(serde_json::json!({"turns": turns}))));
    let shutdown = harness.shutdown.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        shutdown.cancel();
    });
    let output = run(input.0, input.1).await;
    assert_eq!(output.ending, Ending::Interrupted);
    assert!(output.steps.iter().all(|s| s.finished && s.results.iter().all(|r| r.ok)), "every started step finished");
    assert_eq!(screen.received().len(), output.steps.len());
    harness.finish().await;
}

/// A journal that refuses writes after the first step, as when another worker took the lease.
struct FencedJournal {
    inner: MemoryJournal,
}

#[async_trait]
impl Journal for FencedJournal {
    async fn record_step(&self, step: &StepRecord) -> Result<(), JournalError> {
        if step.index >= 1 {
            return Err(JournalError::LeaseLost("fencing token 1 is stale".into()));
        }
        self.inner.record_step(step).await
    }
}

#[tokio::test]
async fn a_lost_lease_stops_before_any_further_action() {
    let harness = Harness::new();
    let turns: Vec<_> = (0..5).map(|i| serde_json::json!({"actions": [{"type": "move", "x": i, "y": i}]})).collect();
    let screen = RecordingScreen::new(SCREEN);
    let (mut input, _rx) =
        harness.input(task(5, 60, 1.0, 3), screen.clone(), Arc::new(script(serde_json::json!({"turns": turns}))));
    input.0.context.journal = Arc::new(FencedJournal { inner: MemoryJournal::default() });
    let output = run(input.0, input.1).await;
    assert!(matches!(output.ending, Ending::LeaseLost(_)), "{:?}", output.ending);
    assert_eq!(screen.received(), vec![Action::Move { x: 0, y: 0, keys: Vec::new() }]);
    harness.finish().await;
}

#[tokio::test]
async fn a_turn_that_asks_a_human_parks_the_task_until_approved() {
    let harness = Harness::new();
    let script_json = serde_json::json!({"turns": [
        {"actions": [{"type": "move", "x": 1, "y": 1}]},
        {"say": "About to buy", "ask_human": "confirm the purchase", "actions": [{"type": "click", "x": 5, "y": 5}]},
        {"complete": {"success": true, "summary": "bought"}}
    ]});
    let screen = RecordingScreen::new(SCREEN);
    let (input, rx) = harness.input(task(10, 60, 1.0, 3), screen.clone(), Arc::new(script(script_json.clone())));
    let first = run(input.0, input.1).await;
    assert_eq!(first.ending, Ending::WaitingForHuman("confirm the purchase".into()));
    assert_eq!(
        screen.received(),
        vec![Action::Move { x: 1, y: 1, keys: Vec::new() }],
        "the asking turn's click has not run"
    );
    let waiting = first.steps.last().expect("the waiting step is recorded");
    assert!(!waiting.finished);
    assert_eq!(
        waiting.approval.as_ref().map(|a| (a.reason.as_str(), a.approved)),
        Some(("confirm the purchase", None))
    );
    assert_eq!(harness.journal.steps().last(), Some(waiting));
    assert!(drain(rx).iter().any(|e| matches!(&e.kind, agentd::record::events::EventKind::WaitingForHuman { reason, .. } if reason == "confirm the purchase")));

    // Leased again without an answer: back to waiting, nothing runs.
    let (mut input, _rx) = harness.input(task(10, 60, 1.0, 3), screen.clone(), Arc::new(script(script_json.clone())));
    input.0.context.resume = first.steps.clone();
    let again = run(input.0, input.1).await;
    assert!(matches!(again.ending, Ending::WaitingForHuman(_)));
    assert_eq!(screen.received().len(), 1);

    // Approved (the queue writes the answer into the waiting step): the click runs once, journaled as begun
    // before it runs, then the task goes on to completion.
    let mut approved = first.steps.clone();
    if let Some(approval) = approved.last_mut().and_then(|s| s.approval.as_mut()) {
        approval.approved = Some(true);
    }
    let model = Observed::new(script(script_json.clone()));
    let (mut input, _rx) = harness.input(task(10, 60, 1.0, 3), screen.clone(), model.clone());
    let writes = Arc::new(WritesJournal { screen: screen.clone(), writes: Default::default() });
    input.0.context.journal = writes.clone();
    input.0.context.resume = approved.clone();
    let done = run(input.0, input.1).await;
    assert_eq!(outcome(&done), (true, EndReason::Completed));
    assert_eq!(
        screen.received(),
        vec![
            Action::Move { x: 1, y: 1, keys: Vec::new() },
            Action::Click { x: 5, y: 5, button: Default::default(), keys: vec![] }
        ]
    );
    assert_eq!(done.steps.len(), 3);
    assert_eq!(done.steps[1].approval.as_ref().and_then(|a| a.approved), Some(true));
    assert!(done.steps[1].finished && done.steps[1].results[0].ok);
    let seen = model.seen();
    assert_eq!(seen.len(), 1, "only the turn after the approved one was asked for");
    assert_eq!(seen[0].history_len, 2);
    // (step, begun, finished, actions the screen had received when it was written)
    let step_1: Vec<(bool, bool, usize)> = writes
        .writes()
        .iter()
        .filter(|(step, _)| step.index == 1)
        .map(|(step, received)| (step.approval.as_ref().is_some_and(|a| a.started), step.finished, *received))
        .collect();
    assert_eq!(step_1.first(), Some(&(true, false, 1)), "journaled as begun before the click: {step_1:?}");
    assert_eq!(step_1.last(), Some(&(true, true, 2)), "{step_1:?}");

    // A worker lost while the approved click ran leaves the step begun and unfinished: the next attempt
    // marks it interrupted and goes on; the click is never run again.
    let mut begun = approved;
    if let Some(approval) = begun.last_mut().and_then(|s| s.approval.as_mut()) {
        approval.started = true;
    }
    let (mut input, _rx) = harness.input(task(10, 60, 1.0, 3), screen.clone(), Arc::new(script(script_json)));
    input.0.context.resume = begun;
    let after_loss = run(input.0, input.1).await;
    assert_eq!(outcome(&after_loss), (true, EndReason::Completed));
    assert_eq!(screen.received().len(), 2, "nothing ran again: {:?}", screen.received());
    let interrupted = &after_loss.steps[1];
    assert!(interrupted.finished && !interrupted.results[0].ok, "{interrupted:?}");
    harness.finish().await;
}

/// A journal that keeps every write, with how many actions the screen had received at that moment.
struct WritesJournal {
    screen: Arc<RecordingScreen>,
    writes: std::sync::Mutex<Vec<(StepRecord, usize)>>,
}

impl WritesJournal {
    fn writes(&self) -> Vec<(StepRecord, usize)> {
        self.writes.lock().map(|w| w.clone()).unwrap_or_default()
    }
}

#[async_trait]
impl Journal for WritesJournal {
    async fn record_step(&self, step: &StepRecord) -> Result<(), JournalError> {
        let received = self.screen.received().len();
        self.writes.lock().map_err(|_| JournalError::Unavailable("poisoned".into()))?.push((step.clone(), received));
        Ok(())
    }
}

/// Makes no tools: the structured-output tests declare none.
struct NoMakers;

impl agentd::tools::Makers for NoMakers {
    fn make(
        &self,
        decl: &agentd::task::tools::ToolDecl,
        field: &str,
        _configured: bool,
    ) -> Result<Arc<dyn agentd::tools::Tool>, agentd::tools::ToolboxError> {
        panic!("no tool is declared here ({field}: {})", decl.name.as_str())
    }
}

#[tokio::test]
async fn invalid_outputs_are_counted_across_a_resume() {
    let harness = Harness::new();
    let mut task = task(2, 60, 1.0, 3);
    task.output_schema = Some(
        agentd::task::tools::JsonSchema::new(serde_json::json!({"type": "object", "required": ["n"],
            "properties": {"n": {"type": "integer"}}}))
        .expect("schema"),
    );
    let tools = Arc::new(agentd::tools::Toolbox::for_task(&task, &Default::default(), &NoMakers).expect("toolbox"));
    let bad = serde_json::json!({"complete": {"success": true, "summary": "s", "output": {"n": "one"}}});
    let script_json = serde_json::json!({"turns": [bad.clone(), bad.clone(), bad,
        {"complete": {"success": true, "summary": "s", "output": {"n": 1}}}]});
    // The first attempt gives two invalid outputs and stops at its step limit.
    let screen = RecordingScreen::new(SCREEN);
    let (mut input, _rx) = harness.input(task.clone(), screen.clone(), Arc::new(script(script_json.clone())));
    input.1.tools = tools.clone();
    let first = run(input.0, input.1).await;
    assert_eq!(outcome(&first), (false, EndReason::MaxSteps));
    assert_eq!(first.steps.len(), 2);
    // Resumed, the third invalid output is the last try: the task fails although a fourth turn would be valid.
    task.limits.max_steps = 10;
    let (mut input, _rx) = harness.input(task.clone(), screen.clone(), Arc::new(script(script_json.clone())));
    input.1.tools = tools.clone();
    input.0.context.resume = first.steps.clone();
    input.0.context.attempt = 2;
    let second = run(input.0, input.1).await;
    assert_eq!(outcome(&second), (false, EndReason::Error));
    assert_eq!(second.steps.len(), 3);
    let Ending::Finished(end) = &second.ending else { panic!("{:?}", second.ending) };
    assert!(end.summary.contains("3 tries") && end.summary.contains("/n"), "{}", end.summary);

    // A worker that died after the last refused try ends the resumed task at once, asking the model nothing.
    let model = Observed::new(script(script_json));
    let (mut input, _rx) = harness.input(task, screen, model.clone());
    input.1.tools = tools;
    input.0.context.resume = second.steps.clone();
    input.0.context.attempt = 3;
    let third = run(input.0, input.1).await;
    assert_eq!(outcome(&third), (false, EndReason::Error));
    assert!(model.seen().is_empty(), "the model is not asked again");
    harness.finish().await;
}

/// A model whose first turn calls a `remote` tool and then clicks; asked again, it notes the results it was
/// shown for that turn and completes.
#[derive(Default)]
struct RemoteThenClick {
    shown: std::sync::Mutex<Vec<(String, bool, String)>>,
}

#[async_trait]
impl Model for RemoteThenClick {
    fn describe(&self) -> String {
        "remote-then-click".into()
    }
    fn coordinates(&self, screen: Size) -> agentd::screen::coords::CoordinateMap {
        agentd::screen::coords::CoordinateMap::identity(screen)
    }
    async fn next_turn(
        &self,
        request: agentd::model::ModelRequest<'_>,
        _deltas: agentd::model::DeltaSink<'_>,
    ) -> Result<agentd::model::ModelTurn, agentd::model::ModelError> {
        use agentd::model::{CallKind, ModelTurn, ToolCall};
        let function = |id: &str, name: &str, arguments: serde_json::Value| ToolCall {
            id: id.into(),
            kind: CallKind::Function { name: name.into(), arguments },
        };
        let calls = match request.history.first() {
            None => vec![
                function("r1", "ask", serde_json::json!({"q": "which?"})),
                ToolCall {
                    id: "c1".into(),
                    kind: CallKind::Computer {
                        actions: vec![Action::Click { x: 5, y: 5, button: Default::default(), keys: vec![] }],
                    },
                },
            ],
            Some(first) => {
                if let Ok(mut shown) = self.shown.lock() {
                    shown.extend(first.results.iter().map(|r| (r.call_id.clone(), r.ok, r.message.clone())));
                }
                vec![function("done", "task_completion", serde_json::json!({"success": true, "summary": "clicked"}))]
            }
        };
        Ok(ModelTurn {
            text: String::new(),
            thinking: String::new(),
            calls,
            usage: Default::default(),
            raw: None,
            approval: None,
        })
    }
}

#[tokio::test]
async fn a_remote_call_parks_and_the_resumed_turn_runs_the_calls_after_it_once() {
    let harness = Harness::new();
    let mut resolved = task(10, 60, 1.0, 3);
    let spec = agentd::task::TaskSpec::parse(
        &serde_json::json!({"instructions": "x", "tools": [{"name": "ask", "description": "asks the client",
            "parameters": {"type": "object"}, "kind": "remote"}]})
        .to_string(),
        "test task",
    )
    .expect("task");
    resolved.tools = spec.tools.clone();
    let tools = agentd::backends::toolbox(&resolved, &Default::default(), Default::default(), &Default::default())
        .expect("toolbox");
    let screen = RecordingScreen::new(SCREEN);
    let model = Arc::new(RemoteThenClick::default());
    let run_once = |resume: Vec<StepRecord>| {
        let (mut input, rx) = harness.input(resolved.clone(), screen.clone(), model.clone());
        input.1.tools = tools.clone();
        input.0.context.resume = resume;
        (input, rx)
    };

    let (input, rx) = run_once(Vec::new());
    let parked = run(input.0, input.1).await;
    let Ending::AwaitingTool(calls) = &parked.ending else { panic!("{:?}", parked.ending) };
    assert_eq!(calls.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["r1"]);
    assert!(screen.received().is_empty(), "the click after the remote call waits too");
    let step = parked.steps.last().expect("parked step");
    assert_eq!((step.finished, step.awaiting_tools.as_slice()), (false, ["r1".to_string()].as_slice()));
    assert_eq!(harness.journal.steps().last(), Some(step), "journaled as parked");
    assert!(drain(rx).iter().any(|e| matches!(&e.kind, agentd::record::events::EventKind::AwaitingTool { .. })));

    // Leased again before an answer: back to waiting, nothing runs, nothing is marked interrupted.
    let (input, _rx) = run_once(parked.steps.clone());
    let again = run(input.0, input.1).await;
    assert!(matches!(again.ending, Ending::AwaitingTool(_)), "{:?}", again.ending);
    assert!(screen.received().is_empty());
    assert!(again.steps[0].results.is_empty(), "{:?}", again.steps[0].results);

    // The answer, as the queue stores it.
    let mut answered = parked.steps.clone();
    let details = serde_json::json!({"row": 3});
    answered[0].call_results.push(agentd::record::CallResult {
        call_id: "r1".into(),
        ok: true,
        message: "the second one".into(),
        details: Some(details.clone()),
    });
    answered[0].results.push(agentd::record::ActionResult {
        ok: true,
        message: "the second one".into(),
        tool: Some("ask".into()),
        call_id: Some("r1".into()),
        details: Some(details.clone()),
    });
    let (input, _rx) = run_once(answered);
    let done = run(input.0, input.1).await;
    assert_eq!(outcome(&done), (true, EndReason::Completed));
    assert_eq!(
        screen.received(),
        vec![Action::Click { x: 5, y: 5, button: Default::default(), keys: vec![] }],
        "the click ran once"
    );
    let first = &done.steps[0];
    assert!(first.finished && first.awaiting_tools.is_empty() && !first.interrupted);
    let results: Vec<(Option<&str>, bool)> = first.results.iter().map(|r| (r.tool.as_deref(), r.ok)).collect();
    assert_eq!(results, [(Some("ask"), true), (None, true)], "the envelope, then the click: {:?}", first.results);
    assert_eq!(first.results[0].details, Some(details));
    assert_eq!(first.actions.len(), 1);
    let shown = model.shown.lock().map(|s| s.clone()).unwrap_or_default();
    assert_eq!(
        shown.iter().map(|(id, ok, m)| (id.as_str(), *ok, m.as_str())).collect::<Vec<_>>()[..1],
        [("r1", true, "the second one")],
        "the model's history carries the answer: {shown:?}"
    );
    assert_eq!(shown.get(1).map(|(id, ok, _)| (id.as_str(), *ok)), Some(("c1", true)));
    harness.finish().await;
}

/// A verifier that wants the mock's `login` scene signed in (docs/replay-and-verify.md), with `retries` retries.
async fn signed_in_verifier(retries: u32) -> Arc<agentd::verify::Verifier> {
    let checks: Vec<agentd::task::verify::Check> =
        serde_json::from_value(serde_json::json!([{"kind": "mock_state", "expect": {"screen": "welcome"}}]))
            .expect("checks");
    let files = agentd::input::FileAccess::Local { base_dir: std::env::temp_dir() };
    let verifier = agentd::verify::Verifier::build(&checks, retries, &Default::default(), &files, &Default::default())
        .await
        .expect("build");
    Arc::new(verifier)
}

#[tokio::test]
async fn a_resumed_task_counts_the_verification_rounds_its_earlier_attempt_failed() {
    let login = || -> Arc<dyn ComputerProvider> {
        Arc::new(
            agentd_mock::MockDesktop::new(agentd_mock::Scene::resolve("login", None).expect("scene"), Some(SCREEN))
                .expect("desktop"),
        )
    };
    let done = serde_json::json!({"complete": {"success": true, "summary": "done"}});
    // Attempt 1: a completion refused by its check, then the step limit (standing in for a lost worker).
    let harness = Harness::new();
    let model = Arc::new(script(serde_json::json!({"turns": [done]})));
    let (mut input, _rx) = harness.input(task(1, 60, 10.0, 3), login(), model);
    input.1.verifier = signed_in_verifier(1).await;
    let first = run(input.0, input.1).await;
    assert_eq!(outcome(&first), (false, EndReason::MaxSteps));
    assert_eq!(first.steps.len(), 1);
    assert!(first.steps[0].call_results[0].message.starts_with("verification failed"), "{:?}", first.steps[0]);
    harness.finish().await;

    // Attempt 2 resumes with that step: one retry was allowed and one round already failed, so the next
    // failed round ends the task.
    let harness = Harness::new();
    let model = Arc::new(script(serde_json::json!({"turns": [done, done, done]})));
    let (mut input, _rx) = harness.input(task(10, 60, 10.0, 3), login(), model);
    input.1.verifier = signed_in_verifier(1).await;
    input.0.context.resume = first.steps;
    let second = run(input.0, input.1).await;
    assert_eq!(outcome(&second), (false, EndReason::VerificationFailed));
    assert_eq!(second.steps.len(), 2, "one step more than the resumed one");
    let Ending::Finished(end) = &second.ending else { panic!("{:?}", second.ending) };
    assert!(end.summary.contains("after 2 round(s)"), "{}", end.summary);
    assert_eq!(end.verified, Some(false));
    harness.finish().await;
}

/// A worker that dies after journaling a completion whose checks passed, before the end was recorded: the
/// resumed attempt ends with that round's checks (`verified: true`), not a new round on a desktop that may
/// have moved on since (here: another screen, which a new round would fail).
#[tokio::test]
async fn a_completion_verified_before_a_crash_stays_verified_when_resumed() {
    let desktop = |scene: &str| -> Arc<dyn ComputerProvider> {
        Arc::new(
            agentd_mock::MockDesktop::new(agentd_mock::Scene::resolve(scene, None).expect("scene"), Some(SCREEN))
                .expect("desktop"),
        )
    };
    let on_login = || async {
        let checks: Vec<agentd::task::verify::Check> =
            serde_json::from_value(serde_json::json!([{"kind": "mock_state", "expect": {"screen": "login"}}]))
                .expect("checks");
        let files = agentd::input::FileAccess::Local { base_dir: std::env::temp_dir() };
        Arc::new(
            agentd::verify::Verifier::build(&checks, 0, &Default::default(), &files, &Default::default())
                .await
                .expect("build"),
        )
    };
    let done = serde_json::json!({"complete": {"success": true, "summary": "done"}});
    let harness = Harness::new();
    let (mut input, _rx) =
        harness.input(task(5, 60, 10.0, 3), desktop("login"), Arc::new(script(serde_json::json!({"turns": [done]}))));
    input.1.verifier = on_login().await;
    let first = run(input.0, input.1).await;
    let Ending::Finished(end) = &first.ending else { panic!("{:?}", first.ending) };
    assert_eq!((end.success, end.verified), (true, Some(true)), "{end:?}");
    harness.finish().await;

    let harness = Harness::new();
    let model = Observed::new(script(serde_json::json!({"turns": [done]})));
    let (mut input, _rx) = harness.input(task(5, 60, 10.0, 3), desktop("form"), model.clone());
    input.1.verifier = on_login().await;
    input.0.context.resume = first.steps;
    input.0.context.attempt = 2;
    let second = run(input.0, input.1).await;
    let Ending::Finished(end) = &second.ending else { panic!("{:?}", second.ending) };
    assert_eq!((end.success, end.verified), (true, Some(true)), "the journaled round stands: {end:?}");
    assert!(end.checks.iter().all(|c| c.ok) && !end.checks.is_empty(), "{:?}", end.checks);
    assert!(model.seen().is_empty(), "the model is not asked again");
    harness.finish().await;
}
