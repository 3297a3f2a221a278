//! Replay (docs/replay-and-verify.md) through the real binary: a recording made with a vendor fake replays on a fresh
//! mock
//! desktop to the same state without a model call; parameters and secret placeholders; a changed scene stops
//! the replay at the step where the screen first differs (a human decides), or hands the task to the model
//! from there; what cannot be replayed is refused naming `replay.of`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use agentd_testkit::fake::{self, FakeServer, Vendor};
use serde_json::{Value, json};

use crate::support::{Agentd, Daemon, fixtures, http};

const KEY: &str = "sk-test-0123456789";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime")
}

fn usage() -> Value {
    json!({"input_tokens": 1000, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 50})
}

/// An Anthropic fake that fills in the form, turn by turn.
fn form_fake(rt: &tokio::runtime::Runtime) -> FakeServer {
    let turns: Vec<Vec<Value>> = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("replay/anthropic-form.json")).expect("anthropic-form.json"),
    )
    .expect("turns");
    rt.block_on(FakeServer::start(Vendor::Anthropic { key: KEY.into() }, fake::anthropic_turns(turns, usage())))
        .expect("fake")
}

fn anthropic_daemon(url: &str) -> Daemon {
    Daemon::start_with_env(&format!("[models.anthropic]\nbase_url = {url:?}\n"), &[("ANTHROPIC_API_KEY", KEY)])
}

fn write(dir: &Path, name: &str, value: &Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec_pretty(value).expect("json")).expect("write");
    path
}

fn form_task(id: &str, scene: &str, model: Value) -> Value {
    json!({
        "id": id,
        "instructions": "Create an account for Zoë Martín (zoe@example.com, Acme GmbH) in Canada on the Team plan with 10 seats, after reading and accepting the terms",
        "computer": {"provider": "mock", "scene": scene},
        "model": model,
        "limits": {"max_steps": 15, "timeout_secs": 120}
    })
}

fn moved_scene() -> String {
    fixtures().join("replay/form-moved.json").display().to_string()
}

fn wait_for_state(daemon: &Daemon, id: &str, state: &str) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let task = daemon.task(id);
        if task["state"] == state {
            return task;
        }
        assert!(std::time::Instant::now() < deadline, "never {state}: {task}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn replayed_marks(record: &Value) -> Vec<Value> {
    record["steps"].as_array().expect("steps").iter().map(|s| s["raw"]["agentd_replay"]["step"].clone()).collect()
}

#[test]
fn a_replay_of_the_form_reaches_the_same_state_without_a_model_call() {
    let rt = runtime();
    let server = form_fake(&rt);
    let daemon = anthropic_daemon(&server.url);
    let dir = daemon.agentd.dir.path().to_path_buf();
    let task = write(
        &dir,
        "form.json",
        &form_task("form-rec", "form", json!({"provider": "anthropic", "model": "claude-sonnet-4-5"})),
    );
    let recorded = daemon.cli(&["submit", task.to_str().expect("path"), "--wait", "--json"]);
    assert_eq!(recorded.code, 0, "{}", recorded.stderr);
    let original = recorded.json();
    assert!(server.problems().is_empty(), "{:#?}", server.problems());
    let calls = server.requests().len();
    assert_eq!(calls, 7);
    assert!(original["usage"]["cost_usd"].as_f64().expect("cost") > 0.0);

    let replay = daemon.cli(&["replay", "form-rec", "--wait", "--json"]);
    assert_eq!(replay.code, 0, "{}\n{}", replay.stderr, replay.stdout);
    let replayed = replay.json();
    assert_eq!(replayed["state"], "succeeded", "{replayed}");
    assert_eq!(replayed["computer_state"], original["computer_state"]);
    assert_eq!(replayed["computer_state"]["sliders"]["seats"], 10);
    assert_eq!(server.requests().len(), calls, "the replay called the model");
    assert_eq!(replayed["usage"]["cost_usd"], 0.0);
    assert_eq!(replayed["usage"]["input_tokens"], 0);
    assert_eq!(replayed["replay"], json!({"of": "form-rec"}));
    assert_eq!(replayed["task"]["replay"]["of"], "form-rec");
    assert_eq!(replayed_marks(&replayed), (0..7).map(|i| json!(i)).collect::<Vec<_>>());
    assert_eq!(replayed["outcome"]["summary"], original["outcome"]["summary"]);
    // Every step ran the recorded actions.
    for (a, b) in original["steps"].as_array().unwrap().iter().zip(replayed["steps"].as_array().unwrap()) {
        assert_eq!(a["actions"], b["actions"]);
    }

    // Only a succeeded task with a record can be replayed; the refusal names `replay.of`.
    let missing = json!({"instructions": "x", "replay": {"of": "no-such-task"}}).to_string();
    let (status, body) = http(&daemon.socket, "POST", "/v1/tasks", Some(missing.as_bytes()), &[]).expect("post");
    assert_eq!(status, 400, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["error"]["field"], "replay.of", "{body}");
    let failing = write(
        &dir,
        "failing.json",
        &json!({"id": "fails", "instructions": "x", "model": {"provider": "scripted",
        "script": {"turns": [{"complete": {"success": false, "summary": "no"}}]}}}),
    );
    assert_eq!(daemon.cli(&["submit", failing.to_str().unwrap(), "--wait"]).code, 1);
    let refused = daemon.cli(&["replay", "fails"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(refused.stderr.contains("replay.of") && refused.stderr.contains("failed"), "{}", refused.stderr);
}

fn run_local(agentd: &Agentd, path: &Path, env: &[(&str, &str)]) -> (Option<i32>, Value, String) {
    let mut command = agentd.command();
    command.args(["run", path.to_str().expect("path"), "--json"]);
    for (k, v) in env {
        command.env(k, v);
    }
    let output = command.output().expect("run");
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let record = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (output.status.code(), record, String::from_utf8_lossy(&output.stderr).to_string())
}

#[test]
fn a_local_replay_types_its_parameters() {
    let agentd = Agentd::new();
    let dir = agentd.dir.path();
    let script = json!({"turns": [
        {"actions": [
            {"type": "click", "x": 428, "y": 269}, {"type": "type", "text": "Zoë Martín"},
            {"type": "keypress", "keys": ["Tab"]}, {"type": "type", "text": "mail: zoe@example.com"},
            {"type": "keypress", "keys": ["Tab"]}, {"type": "type", "text": "Acme GmbH"}]},
        {"complete": {"success": true, "summary": "filled in"}}
    ]});
    let original = form_task("typed", "form", json!({"provider": "scripted", "script": script}));
    let (code, _, stderr) = run_local(&agentd, &write(dir, "typed.json", &original), &[]);
    assert_eq!(code, Some(0), "{stderr}");

    let mut replay = original.clone();
    replay["id"] = json!("typed-again");
    replay["replay"] = json!({"of": "typed", "params": {"zoe@example.com": "ada@example.com", "Acme GmbH": "Globex"}});
    let (code, record, stderr) = run_local(&agentd, &write(dir, "typed-again.json", &replay), &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let fields = &record["computer_state"]["fields"];
    assert_eq!(fields["email"], "mail: ada@example.com", "{record}");
    assert_eq!(fields["company"], "Globex");
    assert_eq!(fields["full_name"], "Zoë Martín");
    assert_eq!(record["usage"]["cost_usd"], 0.0);
    // The params' changed text is no divergence.
    assert_eq!(record["replay"], json!({"of": "typed"}));
}

#[test]
fn a_replay_types_secrets_through_their_placeholders() {
    let agentd = Agentd::new();
    let dir = agentd.dir.path();
    let desktop =
        agentd_mock::MockDesktop::new(agentd_mock::Scene::builtin("login").expect("login"), None).expect("desktop");
    let user = desktop.widget_center("username").expect("username");
    let pass = desktop.widget_center("password").expect("password");
    let task = |id: &str| {
        json!({
            "id": id,
            "instructions": "Sign in as alice",
            "computer": {"provider": "mock", "scene": "login"},
            "model": {"provider": "scripted", "script": {"turns": [
                {"actions": [
                    {"type": "click", "x": user.x, "y": user.y}, {"type": "type", "text": "alice"},
                    {"type": "click", "x": pass.x, "y": pass.y}, {"type": "type", "text": "<secret:pw>"},
                    {"type": "keypress", "keys": ["Return"]}]},
                {"complete": {"success": true, "summary": "signed in"}}
            ]}},
            "secrets": {"pw": {"env": "LOGIN_PW"}}
        })
    };
    let signed_in = |record: &Value| {
        record["computer_state"]["screens_visited"].as_array().is_some_and(|s| s.iter().any(|v| v == "welcome"))
    };
    let (code, record, stderr) =
        run_local(&agentd, &write(dir, "login.json", &task("login-rec")), &[("LOGIN_PW", "hunter2")]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(signed_in(&record));
    assert_eq!(record["steps"][0]["actions"][3]["text"], "<secret:pw>");

    let mut replay = task("login-again");
    replay["replay"] = json!({"of": "login-rec"});
    let path = write(dir, "login-again.json", &replay);
    // The replay types the value its own secrets give: the right one signs in.
    let (code, record, stderr) = run_local(&agentd, &path, &[("LOGIN_PW", "hunter2")]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(signed_in(&record), "{record}");
    assert_eq!(record["steps"][0]["actions"][3]["text"], "<secret:pw>");
    assert!(!record.to_string().contains("hunter2"), "the secret reached the record");
    // A wrong one does not, and the next screen no longer matches the recording.
    let mut replay = task("login-wrong");
    replay["replay"] = json!({"of": "login-rec"});
    let path = write(dir, "login-wrong.json", &replay);
    let (code, record, _) = run_local(&agentd, &path, &[("LOGIN_PW", "hunter3")]);
    assert_eq!(code, Some(1));
    assert!(!signed_in(&record), "{record}");
    assert_eq!(record["replay"]["diverged_at"], 1, "{record}");
}

#[test]
fn a_replay_on_a_changed_scene_stops_at_the_step_that_differs_until_a_human_decides() {
    let daemon = Daemon::start("");
    let dir = daemon.agentd.dir.path().to_path_buf();
    let recorded = daemon.cli(&["submit", "config/tasks/mock-form.json", "--wait"]);
    assert_eq!(recorded.code, 0, "{}", recorded.stderr);
    let of = recorded.stdout.trim().to_string();
    let moved = write(&dir, "moved.json", &form_task("unused", &moved_scene(), json!({"provider": "anthropic"})));

    let submitted = daemon.cli(&["replay", &of, "--task", moved.to_str().unwrap()]);
    assert_eq!(submitted.code, 0, "{}", submitted.stderr);
    let id = submitted.stdout.trim().to_string();
    let waiting = wait_for_state(&daemon, &id, "waiting_for_human");
    // The confirmation screen (step 6) is the first that differs: its "Edit details" button moved.
    assert_eq!(waiting["replay"], json!({"of": of, "diverged_at": 6}), "{waiting}");
    assert!(waiting["waiting_reason"].as_str().unwrap().starts_with("replay diverged at step 6"), "{waiting}");
    let details = &waiting["steps"][6]["approval"]["details"]["agentd_replay"];
    assert_eq!(details["recorded_screenshot"]["key"], format!("tasks/{of}/1/00006.png"), "{details}");
    assert!(details["score"].as_f64().unwrap() < 0.99, "{details}");
    assert!(details["differs"]["width"].as_u64().unwrap() > 0);
    assert_eq!(replayed_marks(&waiting).len(), 7);

    assert_eq!(daemon.cli(&["approve", &id]).code, 0);
    let done = daemon.wait_terminal(&id, Duration::from_secs(30));
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["computer_state"]["screen"], "confirmation");
    assert_eq!(done["replay"]["diverged_at"], 6);
    assert!(done["replay"].get("handed_over").is_none());

    // Rejected, the replay ends there.
    let again = daemon.cli(&["replay", &of, "--task", moved.to_str().unwrap()]);
    let id = again.stdout.trim().to_string();
    wait_for_state(&daemon, &id, "waiting_for_human");
    assert_eq!(daemon.cli(&["reject", &id]).code, 0);
    let done = daemon.wait_terminal(&id, Duration::from_secs(30));
    assert_eq!((done["state"].as_str(), done["outcome"]["reason"].as_str()), (Some("failed"), Some("rejected")));
}

#[test]
fn with_a_fallback_the_model_takes_over_where_the_replay_diverged() {
    let rt = runtime();
    let done = vec![
        json!({"type": "text", "text": "The account exists; the confirmation only looks different."}),
        json!({"type": "tool_use", "id": "toolu_1", "name": "task_completion", "input": {"success": true, "summary": "checked by the model"}}),
    ];
    let server = rt
        .block_on(FakeServer::start(Vendor::Anthropic { key: KEY.into() }, fake::anthropic_turns(vec![done], usage())))
        .expect("fake");
    let daemon = anthropic_daemon(&server.url);
    let dir = daemon.agentd.dir.path().to_path_buf();
    let recorded = daemon.cli(&["submit", "config/tasks/mock-form.json", "--wait"]);
    assert_eq!(recorded.code, 0, "{}", recorded.stderr);
    let of = recorded.stdout.trim().to_string();
    let moved = write(
        &dir,
        "moved.json",
        &form_task("unused", &moved_scene(), json!({"provider": "scripted", "script": {"turns": [{"say": "unused"}]}})),
    );
    let replay = daemon.cli(&[
        "replay",
        &of,
        "--task",
        moved.to_str().unwrap(),
        "--fallback",
        "anthropic:claude-sonnet-4-5",
        "--wait",
        "--json",
    ]);
    assert_eq!(replay.code, 0, "{}\n{}", replay.stderr, replay.stdout);
    let record = replay.json();
    assert_eq!(record["replay"], json!({"of": of, "diverged_at": 6, "handed_over": 6}), "{record}");
    assert_eq!(record["outcome"]["summary"], "checked by the model");
    assert_eq!(record["task"]["replay"]["on_divergence"], "model");
    assert!(record["steps"][6]["raw"].get("agentd_replay").is_none());
    // One model call, on a fresh context: no synthetic history, told what was replayed.
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert!(server.problems().is_empty(), "{:#?}", server.problems());
    let body = &requests[0].body;
    assert_eq!(body["messages"].as_array().unwrap().len(), 1, "{body}");
    assert!(body.to_string().contains("were replayed without a model"), "{body}");
    assert!(record["usage"]["input_tokens"].as_u64().unwrap() > 0);
}

/// A message to a finished replay (docs/humans.md on docs/replay-and-verify.md): with a fallback model
/// (`on_divergence: "model"`) the new turn
/// is that model's, told the whole recording was replayed, with the message; a `stop` replay has no model to
/// answer, and the message is refused naming the field, with nothing changed.
#[test]
fn a_message_to_a_finished_replay_goes_to_its_model_and_is_refused_without_one() {
    let rt = runtime();
    let answer = vec![
        json!({"type": "text", "text": "The account is for Zoë; nothing else to do."}),
        json!({"type": "tool_use", "id": "toolu_1", "name": "task_completion", "input": {"success": true, "summary": "answered by the model"}}),
    ];
    let server = rt
        .block_on(FakeServer::start(
            Vendor::Anthropic { key: KEY.into() },
            fake::anthropic_turns(vec![answer], usage()),
        ))
        .expect("fake");
    let daemon = anthropic_daemon(&server.url);
    let recorded = daemon.cli(&["submit", "config/tasks/mock-form.json", "--wait"]);
    assert_eq!(recorded.code, 0, "{}", recorded.stderr);
    let of = recorded.stdout.trim().to_string();

    // Without a model: refused (409 through the API, exit 2 from `agentd send`), the task as it was.
    let stop = daemon.cli(&["replay", &of, "--wait", "--json"]);
    assert_eq!(stop.code, 0, "{}", stop.stderr);
    let stop = stop.json();
    let id = stop["id"].as_str().expect("id");
    let (status, body) =
        http(&daemon.socket, "POST", &format!("/v1/tasks/{id}/messages"), Some(br#"{"text": "and then?"}"#), &[])
            .expect("post");
    let body: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!((status, &body["error"]["code"]), (409, &json!("wrong_state")), "{body}");
    let sent = daemon.cli(&["send", id, "and then?"]);
    assert_eq!(sent.code, 2, "{}", sent.stderr);
    for needed in ["replay.on_divergence", "no model", "--fallback"] {
        assert!(sent.stderr.contains(needed), "{needed}: {}", sent.stderr);
    }
    let after = daemon.task(id);
    assert_eq!((&after["state"], &after["turns"], &after["steps"]), (&stop["state"], &stop["turns"], &stop["steps"]));
    assert_eq!(server.requests().len(), 0);

    // With a model: the replay itself calls none; the message's turn is the model's.
    let replay = daemon.cli(&["replay", &of, "--fallback", "anthropic:claude-sonnet-4-5", "--wait", "--json"]);
    assert_eq!(replay.code, 0, "{}", replay.stderr);
    let replayed = replay.json();
    let id = replayed["id"].as_str().expect("id");
    let steps = replayed["steps"].as_array().expect("steps").len();
    assert_eq!(server.requests().len(), 0, "the replay matched the recording: no model call");
    let next = daemon.cli(&["send", id, "Who is the account for?", "--wait", "--json"]);
    assert_eq!(next.code, 0, "{}\n{}", next.stderr, next.stdout);
    let record = daemon.task(id);
    assert_eq!(record["state"], "succeeded", "{record}");
    let turns = record["turns"].as_array().expect("turns");
    assert_eq!(turns.len(), 2, "{record}");
    assert_eq!(turns[1]["first_step"], steps, "{record}");
    assert_eq!(turns[1]["outcome"]["summary"], "answered by the model", "{record}");
    assert_eq!(turns[0]["outcome"]["summary"], replayed["outcome"]["summary"]);
    assert_eq!(record["replay"], json!({"of": of, "handed_over": steps}), "{record}");
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert!(server.problems().is_empty(), "{:#?}", server.problems());
    let body = requests[0].body.to_string();
    assert!(body.contains("the whole recording") && body.contains("Who is the account for?"), "{body}");
    assert!(!body.contains("no longer matched"), "{body}");
}
