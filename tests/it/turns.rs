//! Conversations (docs/humans.md) through the real binary and daemon, on SQLite and PostgreSQL: a task continued twice
//! with `agentd send` (the model's requests, checked by the Anthropic fake, hold the earlier turns and each new
//! message; the record's `turns`, step numbering, screenshot keys and event numbers continue), exported with
//! `agentd export ID --conversation` and submitted again as a new task whose model sees that history; and the
//! messages and conversations that are refused, with nothing changed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use agentd_testkit::fake::{self, FakeServer, Vendor};
use serde_json::{Value, json};

use crate::support::{Backend, Daemon, http};

const KEY: &str = "sk-test-0123456789";

on_both_backends!(a_task_continued_twice_keeps_its_history_and_exports_it, messages_that_do_not_fit_change_nothing);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime")
}

fn usage() -> Value {
    json!({"input_tokens": 1000, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 50})
}

fn click(id: &str, x: u32, y: u32) -> Value {
    json!({"type": "tool_use", "id": id, "name": "computer", "input": {"action": "left_click", "coordinate": [x, y]}})
}

fn complete(id: &str, summary: &str) -> Value {
    json!({"type": "tool_use", "id": id, "name": "task_completion", "input": {"success": true, "summary": summary}})
}

/// Turn N of the fake answers the N-th model call of a history: a click, then a completion, per turn.
fn fake(rt: &tokio::runtime::Runtime) -> FakeServer {
    let turns = vec![
        vec![json!({"type": "text", "text": "Clicking the name field."}), click("toolu_01", 100, 100)],
        vec![complete("toolu_02", "first turn done")],
        vec![json!({"type": "text", "text": "Now the second thing."}), click("toolu_03", 200, 150)],
        vec![complete("toolu_04", "second turn done")],
        vec![complete("toolu_05", "third turn done")],
    ];
    rt.block_on(FakeServer::start(Vendor::Anthropic { key: KEY.into() }, fake::anthropic_turns(turns, usage())))
        .expect("fake")
}

fn daemon(backend: Backend, url: &str) -> Daemon {
    Daemon::start_on_with_env(
        backend,
        "",
        "lease_secs = 3\nheartbeat_secs = 1\npoll_ms = 100",
        &format!("[models.anthropic]\nbase_url = {url:?}\n"),
        vec![("ANTHROPIC_API_KEY".into(), KEY.into())],
    )
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path
}

/// Every request body's messages as one text (what the model was sent, in order).
fn sent(request: &fake::Recorded) -> String {
    request.body["messages"].to_string()
}

fn a_task_continued_twice_keeps_its_history_and_exports_it(backend: Backend) {
    let rt = runtime();
    let server = fake(&rt);
    let daemon = daemon(backend, &server.url);
    let dir = daemon.agentd.dir.path().to_path_buf();
    let task = json!({
        "id": "talk",
        "instructions": "log in as alice",
        "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "anthropic", "model": "claude-sonnet-4-5"},
        "limits": {"max_steps": 2}
    });
    let file = write(&dir, "talk.json", &task.to_string());
    let first = daemon.cli(&["submit", file.to_str().expect("path"), "--wait", "--json"]);
    assert_eq!(first.code, 0, "{}\n{}", first.stderr, daemon.log());
    let record = first.json();
    assert_eq!(record["turns"].as_array().map(Vec::len), Some(1), "{record}");
    assert_eq!(record["turns"][0]["instructions"], "log in as alice");
    assert_eq!((&record["turns"][0]["first_step"], &record["turns"][0]["last_step"]), (&json!(0), &json!(1)));

    // Second turn, followed: two more steps, numbered after the first turn's; `max_steps` counts per turn.
    let second = daemon.cli(&["send", "talk", "now open Reports", "--wait", "--json"]);
    assert_eq!(second.code, 0, "{}\n{}", second.stderr, daemon.log());
    assert!(second.stderr.contains("turn 1 queued"), "{}", second.stderr);
    assert!(!second.stderr.contains("first turn done"), "the earlier turn's progress is not shown: {}", second.stderr);
    let record = second.json();
    assert_eq!(record["state"], "succeeded", "{record}");
    assert_eq!(record["outcome"]["summary"], "second turn done");
    // Third turn, not followed.
    let third = daemon.cli(&["send", "talk", "and sign out", "--json"]);
    assert_eq!(third.code, 0, "{}", third.stderr);
    // The answer is the record as the message left it; a worker woken by it may already run the turn.
    let state = third.json()["state"].clone();
    assert!(state == "queued" || state == "running", "{state}");
    let record = daemon.wait_terminal("talk", Duration::from_secs(30));
    assert_eq!(record["state"], "succeeded", "{record}\n{}", daemon.log());
    assert_eq!(record["outcome"]["summary"], "third turn done");

    let turns = record["turns"].as_array().expect("turns");
    let shape: Vec<(Value, Value, Value, Value, Value)> = turns
        .iter()
        .map(|t| {
            (
                t["index"].clone(),
                t["instructions"].clone(),
                t["first_step"].clone(),
                t["last_step"].clone(),
                t["outcome"]["summary"].clone(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            (json!(0), json!("log in as alice"), json!(0), json!(1), json!("first turn done")),
            (json!(1), json!("now open Reports"), json!(2), json!(3), json!("second turn done")),
            (json!(2), json!("and sign out"), json!(4), json!(4), json!("third turn done")),
        ]
    );
    for turn in turns {
        assert!(turn["started_at"].is_string() && turn["finished_at"].is_string(), "{turn}");
        assert_eq!(turn["outcome"]["success"], true);
    }
    let steps = record["steps"].as_array().expect("steps");
    assert_eq!(
        steps.iter().map(|s| s["index"].clone()).collect::<Vec<_>>(),
        (0..5).map(|i| json!(i)).collect::<Vec<_>>()
    );
    let keys: Vec<String> = steps.iter().map(|s| s["screenshot"]["key"].as_str().expect("key").to_string()).collect();
    for (i, key) in keys.iter().enumerate() {
        assert!(key.starts_with("tasks/talk/") && key.ends_with(&format!("/{i:05}.png")), "{key}");
    }
    assert_eq!(keys.iter().collect::<std::collections::BTreeSet<_>>().len(), keys.len(), "{keys:?}");
    // Usage is the whole conversation's: five model calls.
    assert_eq!(record["usage"]["input_tokens"], 5000);

    // `agentd status` shows people every turn: its outcome, its steps and its message, oldest first.
    let status = daemon.cli(&["status", "talk"]);
    assert_eq!(status.code, 0, "{}", status.stderr);
    let lines: Vec<&str> = status.stdout.lines().collect();
    let at = |text: &str| lines.iter().position(|l| l.contains(text)).unwrap_or_else(|| panic!("{text}: {lines:#?}"));
    assert!(lines[0].contains("succeeded (completed): third turn done"), "{lines:#?}");
    assert!(lines[at("turns 3")].starts_with("  turns 3"), "{lines:#?}");
    let expected = [
        ("turn 0  succeeded (completed): first turn done  steps 0–1", "log in as alice"),
        ("turn 1  succeeded (completed): second turn done  steps 2–3", "now open Reports"),
        ("turn 2  succeeded (completed): third turn done  step 4", "and sign out"),
    ];
    let mut previous = at("turns 3");
    for (head, message) in expected {
        let line = at(head);
        assert!(line > previous, "{head} after the turn before it: {lines:#?}");
        assert_eq!(lines[line + 1].trim(), message, "{lines:#?}");
        previous = line;
    }

    // Events keep counting: one stream, three turns.
    let events = daemon.cli(&["events", "talk", "--json"]);
    assert_eq!(events.code, 0, "{}", events.stderr);
    let events: Vec<Value> = events.stdout.lines().map(|l| serde_json::from_str(l).expect("JSON line")).collect();
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().expect("seq")).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    let count = |kind: &str| events.iter().filter(|e| e["type"] == kind).count();
    assert_eq!((count("task_queued"), count("turn_queued"), count("task_finished")), (1, 2, 3));
    let queued: Vec<Value> = events.iter().filter(|e| e["type"] == "turn_queued").map(|e| e["turn"].clone()).collect();
    assert_eq!(queued, [json!(1), json!(2)]);

    // What the model was sent: each later call holds the earlier turns and the new messages, in order.
    assert!(server.problems().is_empty(), "{:#?}", server.problems());
    let requests = server.requests();
    assert_eq!(requests.len(), 5);
    let turn1 = sent(&requests[2]);
    for expected in ["log in as alice", "toolu_01", "toolu_02", "first turn done", "now open Reports"] {
        assert!(turn1.contains(expected), "{expected}: {turn1}");
    }
    assert!(turn1.contains("Your previous turn ended: succeeded (completed): first turn done"), "{turn1}");
    assert!(!turn1.contains("and sign out"), "{turn1}");
    let turn2 = sent(&requests[4]);
    let at = |text: &str| turn2.find(text).unwrap_or_else(|| panic!("{text}: {turn2}"));
    assert!(at("now open Reports") < at("toolu_03") && at("toolu_04") < at("and sign out"), "{turn2}");
    assert!(turn2.contains("second turn done"), "{turn2}");
    // The new turn begins on a fresh screenshot: the last user message ends with an image.
    let last = requests[4].body["messages"].as_array().and_then(|m| m.last()).cloned().expect("messages");
    assert_eq!(last["role"], "user");
    assert!(last.to_string().contains("\"image\""), "{last}");

    // Exported, the conversation is a task file; submitted, a new task's model reads the three turns first.
    let export = daemon.cli(&["export", "talk", "--conversation", "--message", "what did you do so far?"]);
    assert_eq!(export.code, 0, "{}", export.stderr);
    let exported = export.json();
    assert_eq!(exported["instructions"], "what did you do so far?");
    assert_eq!(exported["id"], Value::Null);
    assert_eq!(exported["conversation"]["from"], "talk");
    let exported_turns = exported["conversation"]["turns"].as_array().expect("turns");
    assert_eq!(exported_turns.len(), 3);
    assert_eq!(exported_turns[1]["instructions"], "now open Reports");
    assert_eq!(exported_turns[1]["steps"][0]["text"], "Now the second thing.");
    assert_eq!(exported_turns[1]["steps"][0]["actions"][0]["type"], "click");
    assert_eq!(exported_turns[2]["outcome"]["summary"], "third turn done");
    let imported = write(&dir, "continued.json", &export.stdout);
    let run = daemon.cli(&["submit", imported.to_str().expect("path"), "--wait", "--json"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, daemon.log());
    let new = run.json();
    assert_ne!(new["id"], "talk");
    assert_eq!(new["task"]["conversation"]["turns"].as_array().map(Vec::len), Some(3));
    assert_eq!(new["turns"][0]["instructions"], "what did you do so far?");
    let requests = server.requests();
    assert_eq!(requests.len(), 7);
    let system_and_first = format!("{}{}", requests[5].body["system"], sent(&requests[5]));
    let at = |text: &str| system_and_first.find(text).unwrap_or_else(|| panic!("{text}: {system_and_first}"));
    assert!(
        at("Turn 1: the user asked: log in as alice") < at("Turn 2: the user asked: now open Reports")
            && at("Turn 3: the user asked: and sign out") < at("what did you do so far?"),
        "{system_and_first}"
    );
    assert!(system_and_first.contains("second turn done"), "{system_and_first}");

    // A file whose conversation is not one is refused, naming the field and line (exit 2); nothing is queued.
    let before = daemon.cli(&["list", "--json"]).json()["tasks"].as_array().map(Vec::len);
    let bad = write(
        &dir,
        "bad.json",
        "{\n  \"instructions\": \"x\",\n  \"conversation\": {\"turns\": [\n    {\"instructions\": \"a\", \"said\": \"b\"}\n  ]}\n}\n",
    );
    let refused = daemon.cli(&["submit", bad.to_str().expect("path")]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(refused.stderr.contains("conversation.turns") && refused.stderr.contains("said"), "{}", refused.stderr);
    assert!(refused.stderr.contains("line 4"), "{}", refused.stderr);
    assert_eq!(daemon.cli(&["list", "--json"]).json()["tasks"].as_array().map(Vec::len), before);
}

fn post_message(daemon: &Daemon, id: &str, body: &str) -> (u16, Value) {
    let path = format!("/v1/tasks/{id}/messages");
    let (status, text) = http(&daemon.socket, "POST", &path, Some(body.as_bytes()), &[]).expect("messages request");
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

fn messages_that_do_not_fit_change_nothing(backend: Backend) {
    let daemon = Daemon::start_on(backend, "", "[worker]\nconcurrency = 1\n");
    let (status, body) = post_message(&daemon, "nobody", r#"{"text": "hello"}"#);
    assert_eq!((status, &body["error"]["code"]), (404, &json!("not_found")), "{body}");
    let unknown = daemon.cli(&["send", "nobody", "hello"]);
    assert_eq!(unknown.code, 2, "{}", unknown.stderr);

    // A running task takes no message (409), and keeps running as it was.
    let slow = json!({
        "id": "slow",
        "instructions": "wait a while",
        "model": {"provider": "scripted", "script": {"turns": [
            {"actions": [{"type": "wait", "duration_ms": 4000}]},
            {"complete": {"success": true, "summary": "waited"}}
        ]}}
    });
    let (status, body) =
        http(&daemon.socket, "POST", "/v1/tasks", Some(slow.to_string().as_bytes()), &[]).expect("submit");
    assert_eq!(status, 201, "{body}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while daemon.task("slow")["state"] != "running" {
        assert!(std::time::Instant::now() < deadline, "never ran: {}", daemon.task("slow"));
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, body) = post_message(&daemon, "slow", r#"{"text": "and then?"}"#);
    assert_eq!((status, &body["error"]["code"]), (409, &json!("wrong_state")), "{body}");
    let busy = daemon.cli(&["send", "slow", "and then?"]);
    assert_eq!(busy.code, 2, "{}", busy.stderr);
    assert!(busy.stderr.contains("finished"), "{}", busy.stderr);
    let done = daemon.wait_terminal("slow", Duration::from_secs(30));
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["turns"].as_array().map(Vec::len), Some(1), "{done}");

    // Malformed messages to the finished task: 400 naming `text`, and the task stays as it was.
    let long = format!(r#"{{"text": "{}"}}"#, "x".repeat(100_001));
    for (body, field) in [
        (r#"{"text": ""}"#, Some("text")),
        (r#"{"text": "   "}"#, Some("text")),
        (long.as_str(), Some("text")),
        (r#"{}"#, None),
        (r#"{"text": "x", "urgent": true}"#, None),
        ("not json", None),
    ] {
        let (status, reply) = post_message(&daemon, "slow", body);
        assert_eq!(status, 400, "{}: {reply}", &body[..body.len().min(40)]);
        if let Some(field) = field {
            assert_eq!(reply["error"]["field"], field, "{reply}");
        }
        assert!(
            reply["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("text") || m.contains("JSON") || m.contains("expected")),
            "{reply}"
        );
    }
    let empty = daemon.cli(&["send", "slow", ""]);
    assert_eq!(empty.code, 2, "{}", empty.stderr);
    let after = daemon.task("slow");
    assert_eq!(after["state"], "succeeded");
    assert_eq!(after["turns"], done["turns"]);
    assert_eq!(after["outcome"], done["outcome"]);
    let events = daemon.cli(&["events", "slow", "--json"]);
    assert!(!events.stdout.contains("turn_queued"), "{}", events.stdout);
}

/// What one model call was shown: the notes with the current screenshot, and each history exchange's notes.
type Shown = (Vec<String>, Vec<Vec<String>>);

/// Records, per model call, the notes shown with the current screenshot and those of each history exchange.
struct Notes<M> {
    inner: M,
    calls: std::sync::Mutex<Vec<Shown>>,
}

#[async_trait::async_trait]
impl<M: agentd::model::Model> agentd::model::Model for Notes<M> {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn coordinates(&self, screen: agentd_computer::Size) -> agentd::screen::CoordinateMap {
        self.inner.coordinates(screen)
    }
    async fn next_turn(
        &self,
        request: agentd::model::ModelRequest<'_>,
        deltas: agentd::model::DeltaSink<'_>,
    ) -> Result<agentd::model::ModelTurn, agentd::model::ModelError> {
        let history = request.history.iter().map(|e| e.notes.clone()).collect();
        if let Ok(mut calls) = self.calls.lock() {
            calls.push((request.notes.to_vec(), history));
        }
        self.inner.next_turn(request, deltas).await
    }
}

/// The loop itself (docs/humans.md): a later turn sees the earlier one's steps as history and its message with its
/// first
/// screenshot, counts `max_steps` from its own first step, and — resumed after its worker died — keeps that
/// message with the step it was shown with.
#[tokio::test]
async fn the_loop_tells_a_later_turn_its_message_and_counts_its_limits_afresh() {
    use std::sync::Arc;

    use agentd::agent::events::EventSink;
    use agentd::agent::journal::MemoryJournal;
    use agentd::agent::{Attempt, Built, Ending, RunContext, run};
    use agentd::artifacts::{FsStore, Uploader};
    use agentd::model::scripted::{Script, ScriptedModel};
    use agentd::record::{EndReason, Outcome, StepRecord, Turn};
    use agentd::task::{ComputerSpec, Limits, MockSpec, ModelSpec, ResolvedTask, ScriptSource, ScriptedSpec};
    use agentd_computer::Size;

    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(FsStore::new(dir.path().join("artifacts")));
    let tracker = tokio_util::task::TaskTracker::new();
    let background = tokio_util::sync::CancellationToken::new();
    let uploader = Uploader::start(store, dir.path().join("spool"), 16, u64::MAX, &tracker, background.clone());
    let script = json!({"turns": [
        {"say": "turn 0 acts", "actions": [{"type": "click", "x": 10, "y": 20}]},
        {"complete": {"success": true, "summary": "first done"}},
        {"say": "turn 1 acts", "actions": [{"type": "click", "x": 30, "y": 40}]},
        {"complete": {"success": true, "summary": "second done"}}
    ]});
    let model = Arc::new(Notes {
        inner: ScriptedModel::new(Script::parse(&script.to_string(), "script").expect("script")),
        calls: Default::default(),
    });
    let input = |resume: Vec<StepRecord>, turns: Vec<Turn>| {
        let (events, _rx) = EventSink::channel("t1", 1);
        (
            Attempt {
                task: ResolvedTask {
                    instructions: "log in".into(),
                    computer: ComputerSpec::Mock(MockSpec::default()),
                    model: ModelSpec::Scripted(ScriptedSpec {
                        script: ScriptSource::Path("unused".into()),
                        params: Default::default(),
                    }),
                    limits: Limits { max_steps: 2, timeout_secs: 60, max_cost_usd: 1.0 },
                    keep_screenshots: 3,
                    tools: Vec::new(),
                    output_schema: None,
                    secrets: Default::default(),
                    guard: Default::default(),
                    verify: Vec::new(),
                    verify_retries: 2,
                    ask_human: false,
                    approval: Vec::new(),
                    history: Default::default(),
                },
                settle: Default::default(),
                context: RunContext {
                    task_id: "t1".into(),
                    attempt: 1,
                    uploader: uploader.clone(),
                    journal: Arc::new(MemoryJournal::default()),
                    events,
                    cancel: Default::default(),
                    shutdown: Default::default(),
                    resume,
                    elapsed_before: Duration::ZERO,
                    turns,
                    pause: Default::default(),
                    handed_back: None,
                },
            },
            Built {
                computer: crate::doubles::RecordingScreen::new(Size::new(640, 400)),
                model: model.clone(),
                tools: Arc::new(agentd::tools::Toolbox::empty()),
                verifier: Default::default(),
            },
        )
    };
    let first = {
        let (attempt, built) = input(Vec::new(), Vec::new());
        run(attempt, built).await
    };
    let first_outcome = match &first.ending {
        Ending::Finished(outcome) => outcome.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(first.steps.len(), 2);
    let turns = vec![
        Turn {
            index: 0,
            instructions: "log in".into(),
            started_at: None,
            finished_at: None,
            outcome: Some(first_outcome),
            first_step: 0,
            last_step: Some(1),
        },
        Turn {
            index: 1,
            instructions: "now open Reports".into(),
            started_at: None,
            finished_at: None,
            outcome: None,
            first_step: 2,
            last_step: None,
        },
    ];
    // Two more steps under `max_steps: 2`: the limit counts this turn's steps only.
    let second = {
        let (attempt, built) = input(first.steps.clone(), turns.clone());
        run(attempt, built).await
    };
    assert_eq!(second.ending, Ending::Finished(Outcome::completed(true, "second done".into(), None)));
    assert_eq!(second.steps.iter().map(|s| s.index).collect::<Vec<_>>(), [0, 1, 2, 3]);
    let calls = model.calls.lock().expect("calls").clone();
    assert_eq!(calls.len(), 4);
    let (notes, history) = &calls[2];
    assert_eq!(history.len(), 2, "the earlier turn's steps are history");
    assert!(history.iter().all(Vec::is_empty), "{history:?}");
    let told = notes.join("\n");
    assert!(told.contains("Your previous turn ended: succeeded (completed): first done"), "{told}");
    assert!(told.contains(agentd::agent::runner::TURN_MESSAGE) && told.ends_with("now open Reports"), "{told}");
    assert!(!told.contains("interrupted"), "a new turn is no resumed attempt: {told}");
    assert!(calls[3].0.is_empty(), "the message is shown once: {:?}", calls[3].0);
    assert_eq!(calls[3].1[2].join("\n"), told, "then it stays with its step in the history");

    // The worker died after step 2: the next attempt keeps the message with step 2 and is not told again.
    let resumed = {
        let (attempt, built) = input(second.steps[..3].to_vec(), turns);
        run(attempt, built).await
    };
    assert!(
        matches!(resumed.ending, Ending::Finished(Outcome { reason: EndReason::Completed, .. })),
        "{:?}",
        resumed.ending
    );
    let calls = model.calls.lock().expect("calls").clone();
    let (notes, history) = calls.last().expect("a call");
    assert_eq!(history.len(), 3);
    assert_eq!(history[2].join("\n"), told, "{history:?}");
    assert!(!notes.iter().any(|n| n.contains("now open Reports")), "{notes:?}");
    assert_eq!(uploader.flush(Duration::from_secs(10)).await, 0);
    background.cancel();
    tracker.close();
    tracker.wait().await;
}

/// The documented conversation example, its commands exactly as written (the `sh` block after the marker in the
/// Conversations section of docs/humans.md), against a daemon, from the repository's directory: the shipped task
/// exports March, the follow-up message April, and `agentd status` shows both turns.
#[test]
fn the_documented_conversation_example_runs_as_written() {
    const MARKER: &str = "<!-- tests/it/turns.rs runs this block as written -->";
    let page = std::fs::read_to_string(crate::support::repo().join("docs/humans.md")).expect("docs/humans.md");
    let after = page.split_once(MARKER).map(|(_, after)| after).expect("the marker in docs/humans.md");
    let block = after
        .trim_start()
        .strip_prefix("```sh\n")
        .and_then(|rest| rest.split_once("\n```"))
        .map(|(block, _)| block)
        .expect("a ```sh block right after the marker");
    assert!(block.contains("agentd send"), "{block}");

    let daemon = Daemon::start("");
    let binary = Path::new(env!("CARGO_BIN_EXE_agentd")).parent().expect("the binary's directory").to_path_buf();
    let path = std::env::join_paths(
        std::iter::once(binary).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .expect("PATH");
    let mut shell = std::process::Command::new("sh");
    shell.args(["-eu", "-c", &format!("{block}\necho \"id=$id\"")]);
    for (name, _) in std::env::vars() {
        if name.starts_with("AGENTD_") {
            shell.env_remove(name);
        }
    }
    let output = shell
        .env("PATH", path)
        .env("AGENTD_CONFIG", daemon.agentd.dir.path().join("agentd.toml"))
        .env("AGENTD_SOCKET", &daemon.socket)
        .current_dir(crate::support::repo())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run sh");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    let said = format!("block:\n{block}\nstdout:\n{stdout}\nstderr:\n{stderr}\ndaemon:\n{}", daemon.log());
    assert!(output.status.success(), "{said}");
    let id = stdout.lines().find_map(|l| l.strip_prefix("id=")).expect("the id");
    let task = daemon.task(id);
    assert_eq!(task["state"], "succeeded", "{said}");
    assert_eq!(task["computer_state"]["labels"]["report_status"], "Exported the April report", "{said}");
    let turns: Vec<(&str, Value, Value)> = task["turns"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            (t["outcome"]["summary"].as_str().unwrap_or_default(), t["first_step"].clone(), t["last_step"].clone())
        })
        .collect();
    assert_eq!(
        turns,
        [("Exported the March report", json!(0), json!(4)), ("Exported the April report", json!(5), json!(6))],
        "{said}"
    );
    assert!(stdout.contains("turn 1") && stdout.contains("now export April too"), "status shows both turns: {said}");
}
