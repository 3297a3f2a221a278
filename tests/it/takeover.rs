//! Take-over (docs/humans.md) through the real daemon: `agentd pause` parks a running task after its current step in
//! `waiting_for_human` (`waiting.kind = takeover`, no worker, no lease); a person changes the mock desktop
//! meanwhile (actions appended to its saved log, as if typed on it); `agentd resume --note` continues it, and
//! the model's next request (checked by the Anthropic fake) carries the changed screenshot and the note. A
//! queued task waits before it starts; wrong requests are refused and change nothing. On PostgreSQL also
//! through another fleet node than the one running the task.

use std::path::Path;
use std::time::{Duration, Instant};

use agentd_testkit::fake::{self, FakeServer, Recorded, Vendor};
use serde_json::{Value, json};

use crate::support::{Backend, Daemon, http, postgres_url};

const KEY: &str = "sk-test-0123456789";
const NOTE: &str = "I typed bob into the username field";

on_both_backends!(
    a_paused_task_continues_on_the_changed_desktop_with_the_note,
    a_person_acts_through_the_live_view_and_the_model_is_told_what_they_did,
    a_demonstration_is_recorded_by_hand_compiled_and_replayed_without_a_model,
    a_queued_task_waits_before_it_starts_and_wrong_requests_change_nothing,
);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime")
}

/// An Anthropic model that waits a moment every turn until it is told the note, and then completes.
fn patient_fake(rt: &tokio::runtime::Runtime) -> FakeServer {
    let usage = json!({"input_tokens": 100, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 5});
    rt.block_on(FakeServer::start(
        Vendor::Anthropic { key: KEY.into() },
        Box::new(move |r| {
            let turn =
                r.body["messages"].as_array().map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
            let content = if r.body.to_string().contains(NOTE) {
                vec![json!({"type": "tool_use", "id": format!("toolu_{turn}"), "name": "task_completion",
                            "input": {"success": true, "summary": "the person signed in as bob"}})]
            } else {
                vec![json!({"type": "tool_use", "id": format!("toolu_{turn}"), "name": "computer",
                            "input": {"action": "wait", "duration": 0.2}})]
            };
            fake::anthropic_reply(content, usage.clone(), true)
        }),
    ))
    .expect("fake")
}

fn models_config(url: &str) -> String {
    format!("[models.anthropic]\nbase_url = {url:?}\n")
}

fn task(id: &str, labels: Value) -> Value {
    json!({
        "id": id,
        "instructions": "wait until the person has signed in",
        "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "anthropic", "model": "claude-sonnet-4-5"},
        "labels": labels,
        // Waiting on an unchanged screen is what this model does: no stuck-loop guard.
        "guard": {"no_change_steps": 0, "repeat_actions": 0, "idle_turns": 0},
        "limits": {"max_steps": 200, "timeout_secs": 300}
    })
}

fn post(daemon: &Daemon, path: &str, body: Option<&Value>) -> (u16, Value) {
    let text = body.map(|b| b.to_string());
    let (status, reply) = http(&daemon.socket, "POST", path, text.as_deref().map(str::as_bytes), &[]).expect("request");
    (status, serde_json::from_str(&reply).unwrap_or(Value::Null))
}

fn wait_for(daemon: &Daemon, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let task = daemon.task(id);
        if done(&task) {
            return task;
        }
        assert!(Instant::now() < deadline, "never {what}: {task}\n{}", daemon.log());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The last screenshot in a model request (base64 PNG), wherever the adapter put it.
fn last_image(body: &Value) -> Option<String> {
    fn walk(value: &Value, found: &mut Option<String>) {
        match value {
            Value::Object(map) => {
                if map.get("type").and_then(Value::as_str) == Some("image")
                    && let Some(data) = map.get("source").and_then(|s| s["data"].as_str())
                {
                    *found = Some(data.to_string());
                }
                map.values().for_each(|v| walk(v, found));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, found)),
            _ => {}
        }
    }
    let mut found = None;
    walk(body, &mut found);
    found
}

/// What a person does on the paused desktop: actions appended to the mock desktop's saved log, which the
/// desktop replays when the task's next attempt opens it (`providers/mock` persistence).
fn person_types_bob(mock_dir: &Path) {
    let log = mock_dir.join(agentd_mock::ACTIONS_FILE);
    let mut text = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    for action in [json!({"type": "click", "x": 640, "y": 370}), json!({"type": "type", "text": "bob"})] {
        text.push_str(&action.to_string());
        text.push('\n');
    }
    std::fs::write(&log, text).expect("append to the desktop's log");
}

/// Pauses (through `control`) a task running on `runner`, changes its desktop, resumes it with the note and
/// checks what the model saw.
fn pause_change_resume(runner: &Daemon, control: &Daemon, server: &FakeServer, id: &str) {
    wait_for(runner, id, "running with a step", |t| {
        t["state"] == "running" && t["steps"].as_array().is_some_and(|s| s.len() >= 2)
    });
    let paused = control.cli(&["pause", id, "--json"]);
    assert_eq!(paused.code, 0, "{}", paused.stderr);
    assert_eq!(paused.json()["pause"], "requested", "{}", paused.stdout);
    let parked = wait_for(runner, id, "parked for the person", |t| t["state"] == "waiting_for_human");
    let last = parked["steps"].as_array().expect("steps").last().expect("a step").clone();
    assert_eq!(parked["waiting"], json!({"kind": "takeover", "step": last["index"]}), "{parked}");
    assert_eq!(last["finished"], true, "the step in progress finished before the task parked: {last}");
    assert_eq!(parked["worker"], Value::Null, "no worker holds a taken-over task");
    let requests_before = server.requests().len();

    // While the person has the desktop: the task takes no decision, a second pause is refused.
    assert_eq!(control.cli(&["approve", id]).code, 2);
    assert_eq!(control.cli(&["pause", id]).code, 2);
    let (status, reply) = post(control, &format!("/v1/tasks/{id}/reject"), Some(&json!({"reason": "no"})));
    assert_eq!((status, reply["error"]["code"].as_str()), (409, Some("wrong_state")), "{reply}");
    assert_eq!(runner.task(id)["state"], "waiting_for_human");

    person_types_bob(&runner.agentd.data_dir().join("mock").join(id));
    // The model was not called while the person had the desktop.
    assert_eq!(server.requests().len(), requests_before);
    let resumed = control.cli(&["resume", id, "--note", NOTE, "--json"]);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert_eq!(resumed.json()["state"], "queued");
    assert_eq!(control.cli(&["resume", id]).code, 2, "a task handed back is not taken over any more");

    let done = runner.wait_terminal(id, Duration::from_secs(60));
    assert_eq!(done["state"], "succeeded", "{done}\n{}", runner.log());
    assert!(server.problems().is_empty(), "{:#?}", server.problems());
    let requests: Vec<Recorded> = server.requests();
    let told = requests.iter().position(|r| r.body.to_string().contains(NOTE)).expect("the note reached the model");
    assert_eq!(told, requests_before, "the first call after the hand-back carries the note");
    let image = |i: usize| last_image(&requests[i].body).unwrap_or_else(|| panic!("request {i} has no screenshot"));
    // Waiting changes nothing on screen; the person's typing does, and the next screenshot shows it.
    assert_eq!(image(told - 1), image(told - 2), "the screen was steady before the pause");
    assert_ne!(image(told), image(told - 1), "the model's next screenshot shows what the person did");
    assert_eq!(done["computer_state"]["fields"]["username"], "bob", "{}", done["computer_state"]);
    let steps = done["steps"].as_array().expect("steps");
    let after = &steps[last["index"].as_u64().expect("index") as usize + 1];
    assert_eq!(after["handed_back"], json!({"note": NOTE}), "{after}");
    assert!(steps.iter().filter(|s| !s["handed_back"].is_null()).count() == 1, "one step carries the note");
    assert_eq!(done["waiting"], Value::Null);
}

fn a_paused_task_continues_on_the_changed_desktop_with_the_note(backend: Backend) {
    let rt = runtime();
    let server = patient_fake(&rt);
    let daemon = Daemon::start_on_env(backend, &models_config(&server.url), &[("ANTHROPIC_API_KEY", KEY)]);
    let (status, body) = post(&daemon, "/v1/tasks", Some(&task("taken", json!({}))));
    assert_eq!(status, 201, "{body}");
    pause_change_resume(&daemon, &daemon, &server, "taken");
}

/// A daemon on `backend` with a TCP listener and the console tests' token (the live view's WebSocket is served
/// there), `extra` config and `env`; with its TCP address.
fn tcp_daemon(backend: Backend, extra: &str, env: Vec<(String, String)>) -> (Daemon, tempfile::TempDir, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, crate::console::TOKEN).expect("token");
    let daemon = Daemon::start_on_with_env(
        backend,
        &format!("listen = \"127.0.0.1:{port}\"\ntoken_file = {:?}\n", token_file.display().to_string()),
        "lease_secs = 3\nheartbeat_secs = 1\npoll_ms = 100",
        extra,
        env,
    );
    (daemon, dir, format!("127.0.0.1:{port}"))
}

/// Sends `action` on a live view and returns its answer (`acted` or `error`), past the frames and states
/// between.
fn act(socket: &mut tungstenite::WebSocket<std::net::TcpStream>, action: &Value) -> Value {
    use crate::live::{Received, receive};
    socket.send(tungstenite::Message::text(json!({"action": action}).to_string())).expect("send an action");
    let mut seen = Vec::new();
    loop {
        match receive(socket, &seen) {
            Received::Text(value) if value["type"] == "acted" || value["type"] == "error" => return value,
            Received::Text(value) => seen.push(value.to_string()),
            Received::Frame(..) => {}
            Received::Closed(code) => panic!("closed ({code:?}) before the answer to {action}; seen {seen:?}"),
        }
    }
}

/// A person takes the desktop over through the live view (docs/humans.md "Take-over by hand"): the parked
/// task's desktop streams to the viewer, their click and typing run on it and are recorded as their steps
/// (`"by": "human"`, each with the screen they acted on), what is no action on the desktop is refused; after
/// the hand-back the model's first request says what the person did and shows the desktop they left, and the
/// person's steps do not count as the model's.
fn a_person_acts_through_the_live_view_and_the_model_is_told_what_they_did(backend: Backend) {
    use crate::live::{Received, connect, receive};

    let rt = runtime();
    let server = patient_fake(&rt);
    let env = vec![("ANTHROPIC_API_KEY".into(), KEY.into())];
    let (daemon, _dir, addr) = tcp_daemon(backend, &models_config(&server.url), env);
    let id = "by-hand";
    let (status, body) = post(&daemon, "/v1/tasks", Some(&task(id, json!({}))));
    assert_eq!(status, 201, "{body}");
    wait_for(&daemon, id, "running with a step", |t| {
        t["state"] == "running" && t["steps"].as_array().is_some_and(|s| s.len() >= 2)
    });
    assert_eq!(daemon.cli(&["pause", id]).code, 0);
    let parked = wait_for(&daemon, id, "parked for the person", |t| t["state"] == "waiting_for_human");
    let last = parked["steps"].as_array().and_then(|s| s.last()).and_then(|s| s["index"].as_u64()).expect("a step");
    let requests_before = server.requests().len();

    // The viewer sees the parked desktop live.
    let mut socket = connect(&addr, &format!("/v1/tasks/{id}/live?width=640"));
    let mut seen: Vec<String> = Vec::new();
    let mut frames = 0;
    while frames == 0 {
        match receive(&mut socket, &seen) {
            Received::Frame(header, _) => {
                assert_eq!(header["screen"], json!({"width": 1280, "height": 800}), "{header}");
                frames += 1;
            }
            Received::Text(value) => {
                if value["type"] == "state" {
                    assert_eq!(value, json!({"type": "state", "state": "waiting_for_human", "live": true}));
                }
                seen.push(value.to_string());
            }
            other => panic!("{other:?} before the first frame; seen {seen:?}"),
        }
    }
    // Each action is answered once it ran and was recorded (frames may come between).
    let clicked = act(&mut socket, &json!({"type": "click", "x": 640, "y": 370}));
    assert_eq!(clicked["type"], "acted", "{clicked}");
    assert_eq!((clicked["step"].as_u64(), &clicked["ok"]), (Some(last + 1), &json!(true)), "{clicked}");
    let typed = act(&mut socket, &json!({"type": "type", "text": "bob"}));
    assert_eq!((typed["step"].as_u64(), &typed["ok"]), (Some(last + 2), &json!(true)), "{typed}");
    let refused = act(&mut socket, &json!({"type": "screenshot"}));
    assert_eq!(
        (refused["type"].as_str(), refused["code"].as_str()),
        (Some("error"), Some("invalid_action")),
        "{refused}"
    );
    let off_screen = act(&mut socket, &json!({"type": "click", "x": 5000, "y": 5}));
    assert_eq!(off_screen["code"], "invalid_action", "{off_screen}");
    let unknown = act(&mut socket, &json!({"type": "teleport"}));
    assert_eq!(unknown["code"], "invalid_action", "{unknown}");

    // The person's steps are in the record and the events, each with the screen they acted on.
    let record = daemon.task(id);
    assert_eq!(record["state"], "waiting_for_human", "{record}");
    let steps = record["steps"].as_array().expect("steps");
    assert_eq!(steps.len() as u64, last + 3, "two steps of the person's: {record}");
    for (step, action) in steps[last as usize + 1..]
        .iter()
        .zip([json!({"type": "click", "x": 640, "y": 370}), json!({"type": "type", "text": "bob"})])
    {
        assert_eq!(step["by"], "human", "{step}");
        assert_eq!(step["actions"][0]["type"], action["type"], "{step}");
        assert_eq!(step["results"][0]["ok"], true, "{step}");
        assert_eq!(step["finished"], true, "{step}");
        let key = step["screenshot"]["key"].as_str().expect("a screenshot");
        assert!(daemon.agentd.data_dir().join("artifacts").join(key).is_file(), "{key} stored: {step}");
    }
    assert!(steps[..=last as usize].iter().all(|s| s.get("by").is_none()), "the model's steps carry no `by`");
    let events = daemon.cli(&["events", "--json", id]);
    let started: Vec<Value> = events
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "step_started" && e["by"] == "human")
        .map(|e| e["step"].clone())
        .collect();
    assert_eq!(started, [json!(last + 1), json!(last + 2)], "{}", events.stdout);
    // The model was not called while the person had the desktop.
    assert_eq!(server.requests().len(), requests_before);

    let resumed = daemon.cli(&["resume", id, "--note", NOTE]);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    drop(socket);
    let done = daemon.wait_terminal(id, Duration::from_secs(60));
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(done["computer_state"]["fields"]["username"], "bob", "{}", done["computer_state"]);
    let requests = server.requests();
    let told = &requests[requests_before].body.to_string();
    assert!(told.contains(NOTE), "the first call after the hand-back carries the note: {told}");
    assert!(
        told.contains(r#"While they had it, the person did: click(640,370); type(\"bob\")."#),
        "and what the person did: {told}"
    );
    let after = &done["steps"][last as usize + 3];
    assert_eq!((after.get("by"), &after["handed_back"]), (None, &json!({"note": NOTE})), "{after}");
}

/// A demonstration (docs/humans.md "Demonstrations"): `agentd demonstrate` makes a task that waits for its
/// person from the start (no worker takes it, its label is refused to ordinary tasks); the person signs in
/// through the live view; handing the desktop back finishes it `succeeded`, the screen they left its last step
/// with their summary; `agentd compile` prints it as a script with the typed name as a parameter, and `agentd
/// replay` plays it on a fresh desktop without a model, ending signed in.
fn a_demonstration_is_recorded_by_hand_compiled_and_replayed_without_a_model(backend: Backend) {
    let (daemon, dir, addr) = tcp_daemon(backend, "", Vec::new());
    let computer = dir.path().join("login.json");
    std::fs::write(&computer, r#"{"provider": "mock", "scene": "login"}"#).expect("computer file");
    let started = daemon.cli(&[
        "demonstrate",
        "--computer",
        computer.to_str().expect("path"),
        "--instructions",
        "sign in as bob",
    ]);
    assert_eq!(started.code, 0, "{}", started.stderr);
    let id = started.stdout.trim().to_string();
    assert!(started.stderr.contains(&format!("agentd resume {id}")), "{}", started.stderr);
    let waiting = daemon.task(&id);
    assert_eq!(
        (&waiting["state"], &waiting["waiting"]["kind"]),
        (&json!("waiting_for_human"), &json!("takeover")),
        "{waiting}"
    );
    assert_eq!(waiting["task"]["labels"]["agentd.demonstration"], "true", "{waiting}");
    assert_eq!(waiting["worker"], Value::Null, "no worker took it: {waiting}");

    // What does not fit is refused, naming it: the label on an ordinary task, a computer file that is not JSON.
    let labelled = json!({"instructions": "x", "labels": {"agentd.demonstration": "true"}});
    let (status, reply) = post(&daemon, "/v1/tasks", Some(&labelled));
    assert_eq!((status, reply["error"]["field"].as_str()), (400, Some("labels.agentd.demonstration")), "{reply}");
    let broken = dir.path().join("broken.json");
    std::fs::write(&broken, "{\n  \"provider\": mock\n}").expect("broken file");
    let refused = daemon.cli(&["demonstrate", "--computer", broken.to_str().expect("path")]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(refused.stderr.contains("broken.json: line 2, column"), "{}", refused.stderr);

    // The person signs in on the live desktop.
    let mut socket = crate::live::connect(&addr, &format!("/v1/tasks/{id}/live"));
    for action in [json!({"type": "click", "x": 640, "y": 370}), json!({"type": "type", "text": "bob"})] {
        let answer = act(&mut socket, &action);
        assert_eq!((&answer["type"], &answer["ok"]), (&json!("acted"), &json!(true)), "{answer}");
    }
    drop(socket);

    let finished = daemon.cli(&["resume", &id, "--note", "signed in as bob"]);
    assert_eq!(finished.code, 0, "{}", finished.stderr);
    assert!(finished.stderr.contains("finished"), "{}", finished.stderr);
    let record = daemon.task(&id);
    assert_eq!(record["state"], "succeeded", "{record}");
    assert_eq!(record["outcome"]["summary"], "signed in as bob", "{record}");
    let steps = record["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 3, "two actions and the screen left: {record}");
    assert!(steps.iter().all(|s| s["by"] == "human"), "{record}");
    assert_eq!(steps[2]["actions"], json!([]), "{}", steps[2]);
    assert_eq!(steps[2]["calls"][0]["name"], "task_completion", "{}", steps[2]);
    assert_eq!(daemon.cli(&["resume", &id]).code, 2, "a finished demonstration is not finished twice");

    // As a script: the typed name a parameter, the end its completion.
    let compiled = daemon.cli(&["compile", &id, "--param", "name=bob"]);
    assert_eq!(compiled.code, 0, "{}", compiled.stderr);
    let script = compiled.json();
    let turns = script["turns"].as_array().expect("turns");
    assert_eq!(turns.len(), 3, "{script}");
    assert_eq!(turns[0]["actions"], json!([{"type": "click", "x": 640, "y": 370}]), "{script}");
    assert_eq!(turns[1]["actions"], json!([{"type": "type", "text": "{{name}}"}]), "{script}");
    assert_eq!(turns[2]["complete"]["summary"], "signed in as bob", "{script}");

    // Played again without a model, on a fresh desktop.
    let replay = daemon.cli(&["replay", &id]);
    assert_eq!(replay.code, 0, "{}", replay.stderr);
    let again = replay.stdout.trim().to_string();
    let done = daemon.wait_terminal(&again, Duration::from_secs(60));
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(done["computer_state"]["fields"]["username"], "bob", "{}", done["computer_state"]);
    assert_eq!(done["task"]["labels"].get("agentd.demonstration"), None, "the replay is an ordinary task: {done}");
    assert_eq!(done["usage"]["cost_usd"], 0.0, "{done}");
}

/// A person types a secret's value in bursts (as the console sends typing after each pause), each burst shorter
/// than a piece of the value that redaction would know on its own: the typing that may go on into the value
/// waits for the next burst, the bursts become one step whose text is the placeholder, and no burst's text
/// reaches the record, the events, the answers or the HTML export. An action between bursts of ordinary text
/// records them as they came. (Redaction is the same on both queues: SQLite only.)
#[test]
fn a_secret_a_person_types_in_bursts_never_reaches_the_record_in_pieces() {
    const VALUE: &str = "Zq8Wv3kXp9Lr";
    const BURSTS: [&str; 4] = ["Zq8", "Wv3", "kXp", "9Lr"];
    let rt = runtime();
    let server = patient_fake(&rt);
    let env = vec![("ANTHROPIC_API_KEY".into(), KEY.into()), ("BURST_SECRET_IT".into(), VALUE.into())];
    let extra = format!("{}[worker]\nallowed_env = [\"BURST_SECRET_IT\"]\n", models_config(&server.url));
    let (daemon, dir, addr) = tcp_daemon(Backend::Sqlite, &extra, env);
    let id = "bursts";
    let mut body = task(id, json!({}));
    body["secrets"] = json!({"password": {"env": "BURST_SECRET_IT"}});
    let (status, created) = post(&daemon, "/v1/tasks", Some(&body));
    assert_eq!(status, 201, "{created}");
    wait_for(&daemon, id, "running with a step", |t| {
        t["state"] == "running" && t["steps"].as_array().is_some_and(|s| !s.is_empty())
    });
    assert_eq!(daemon.cli(&["pause", id]).code, 0);
    let parked = wait_for(&daemon, id, "parked for the person", |t| t["state"] == "waiting_for_human");
    let first = parked["steps"].as_array().map(Vec::len).expect("steps") as u64;

    let mut socket = crate::live::connect(&addr, &format!("/v1/tasks/{id}/live?width=640"));
    let clicked = act(&mut socket, &json!({"type": "click", "x": 640, "y": 430}));
    assert_eq!((clicked["step"].as_u64(), &clicked["ok"]), (Some(first), &json!(true)), "{clicked}");
    let mut answers = Vec::new();
    for burst in BURSTS {
        let typed = act(&mut socket, &json!({"type": "type", "text": burst}));
        assert_eq!((typed["type"].as_str(), &typed["ok"]), (Some("acted"), &json!(true)), "{typed}");
        assert_eq!(typed["step"].as_u64(), Some(first + 1), "every burst joins one step: {typed}");
        answers.push(typed.to_string());
    }
    // Ordinary text in bursts with a key between: the steps as they came.
    for action in [
        json!({"type": "type", "text": "ab"}),
        json!({"type": "keypress", "keys": ["Tab"]}),
        json!({"type": "type", "text": "cd"}),
    ] {
        let answer = act(&mut socket, &action);
        assert_eq!(answer["type"], "acted", "{answer}");
        answers.push(answer.to_string());
    }
    drop(socket);
    // The last viewer left: the last typing is recorded too.
    let record = wait_for(&daemon, id, "the person's steps recorded", |t| {
        t["steps"].as_array().is_some_and(|s| s.len() as u64 == first + 5)
    });
    let steps = record["steps"].as_array().expect("steps");
    let actions: Vec<&Value> = steps[first as usize..].iter().map(|s| &s["actions"][0]).collect();
    assert_eq!(
        actions,
        [
            &json!({"type": "click", "x": 640, "y": 430}),
            &json!({"type": "type", "text": "<secret:password>"}),
            &json!({"type": "type", "text": "ab"}),
            &json!({"type": "keypress", "keys": ["Tab"]}),
            &json!({"type": "type", "text": "cd"}),
        ],
        "{record}"
    );
    let events = daemon.cli(&["events", "--json", id]);
    let export = dir.path().join("export.html");
    let exported = daemon.cli(&["export", id, "--html", export.to_str().expect("path")]);
    assert_eq!(exported.code, 0, "{}", exported.stderr);
    let html = std::fs::read_to_string(&export).expect("export");
    for (what, text) in [
        ("the record", record.to_string()),
        ("the events", events.stdout.clone()),
        ("the answers", answers.join("\n")),
        ("the export", html),
        ("the log", daemon.log()),
    ] {
        for burst in BURSTS {
            assert!(!text.contains(burst), "{what} hold the burst {burst:?}: {text}");
        }
    }
}

#[test]
fn a_pause_through_another_fleet_node_parks_the_task_where_it_runs() {
    let Some(url) = postgres_url() else { return };
    let schema = crate::support::PgSchema::create(&url);
    let queue_url = schema.url();
    let rt = runtime();
    let server = patient_fake(&rt);
    let runner = Daemon::start_on_env(
        Backend::Postgres(schema),
        &format!("[worker]\nlabels = {{ node = \"a\" }}\n{}", models_config(&server.url)),
        &[("ANTHROPIC_API_KEY", KEY)],
    );
    let control = Daemon::start_with(
        "",
        &format!("backend = \"postgres\"\nurl = {queue_url:?}\nlease_secs = 3\nheartbeat_secs = 1\npoll_ms = 100"),
        "[worker]\nlabels = { node = \"b\" }\n",
    );
    let (status, body) = post(&control, "/v1/tasks", Some(&task("fleet-taken", json!({"node": "a"}))));
    assert_eq!(status, 201, "{body}");
    pause_change_resume(&runner, &control, &server, "fleet-taken");
}

/// Cancelled through another fleet node, a desktop that a person holds through the live view of the node the
/// task ran on is let go there too, with no further action of theirs, and that viewer is told the task ended.
/// (Handed back, the task's next attempt on the holding node would end the hold by itself; cancelled, or
/// resumed on a third node, nothing else would.)
#[test]
fn a_desktop_cancelled_through_another_node_is_let_go_where_it_is_held() {
    use crate::live::{Received, connect, receive};
    let Some(url) = postgres_url() else { return };
    let schema = crate::support::PgSchema::create(&url);
    let queue_url = schema.url();
    let rt = runtime();
    let server = patient_fake(&rt);
    let env = vec![("ANTHROPIC_API_KEY".into(), KEY.into())];
    let extra = format!("[worker]\nlabels = {{ node = \"a\" }}\n{}", models_config(&server.url));
    let (runner, _dir, addr) = tcp_daemon(Backend::Postgres(schema), &extra, env);
    let control = Daemon::start_with(
        "",
        &format!("backend = \"postgres\"\nurl = {queue_url:?}\nlease_secs = 3\nheartbeat_secs = 1\npoll_ms = 100"),
        "[worker]\nlabels = { node = \"b\" }\n",
    );
    let id = "held-elsewhere";
    let (status, body) = post(&control, "/v1/tasks", Some(&task(id, json!({"node": "a"}))));
    assert_eq!(status, 201, "{body}");
    wait_for(&runner, id, "running with a step", |t| {
        t["state"] == "running" && t["steps"].as_array().is_some_and(|s| !s.is_empty())
    });
    assert_eq!(control.cli(&["pause", id]).code, 0);
    wait_for(&runner, id, "parked for the person", |t| t["state"] == "waiting_for_human");

    let mut socket = connect(&addr, &format!("/v1/tasks/{id}/live?width=640"));
    let clicked = act(&mut socket, &json!({"type": "click", "x": 640, "y": 370}));
    assert_eq!((clicked["type"].as_str(), &clicked["ok"]), (Some("acted"), &json!(true)), "{clicked}");
    let cancelled = control.cli(&["cancel", id]);
    assert_eq!(cancelled.code, 0, "{}", cancelled.stderr);
    // The runner's viewer learns it without sending anything (a read waits at most the live tests' bound).
    let mut seen = Vec::new();
    loop {
        match receive(&mut socket, &seen) {
            Received::Text(value) if value["type"] == "ended" => {
                assert_eq!(value["state"], "cancelled", "{value}; seen {seen:?}");
                break;
            }
            Received::Text(value) => seen.push(value.to_string()),
            Received::Frame(..) => {}
            Received::Closed(code) => panic!("closed ({code:?}) before the end was told; seen {seen:?}"),
        }
    }
    assert_eq!(runner.task(id)["state"], "cancelled");
}

fn a_queued_task_waits_before_it_starts_and_wrong_requests_change_nothing(backend: Backend) {
    let daemon = Daemon::start_on(backend, "", "");
    // No worker has this label: the task stays queued.
    let queued = json!({
        "id": "held", "instructions": "x", "labels": {"gpu": "yes"},
        "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "scripted", "script": {"turns": [{"complete": {"success": true}}]}}
    });
    assert_eq!(post(&daemon, "/v1/tasks", Some(&queued)).0, 201);
    let (status, reply) = post(&daemon, "/v1/tasks/held/pause", None);
    assert_eq!((status, &reply["state"]), (200, &json!("waiting_for_human")), "{reply}");
    let held = daemon.task("held");
    assert_eq!(held["waiting"], json!({"kind": "takeover"}), "{held}");
    assert!(held["steps"].as_array().is_some_and(Vec::is_empty));

    // (path, body, status, error code, field)
    type Case<'a> = (&'a str, Option<Value>, u16, &'a str, Option<&'a str>);
    let table: [Case; 6] = [
        ("/v1/tasks/nobody/pause", None, 404, "not_found", None),
        ("/v1/tasks/nobody/resume", None, 404, "not_found", None),
        ("/v1/tasks/held/pause", None, 409, "wrong_state", None),
        ("/v1/tasks/held/resume", Some(json!({"notes": "typo"})), 400, "invalid_body", Some("notes")),
        ("/v1/tasks/held/resume", Some(json!({"note": 7})), 400, "invalid_body", Some("note")),
        ("/v1/tasks/held/approve", None, 409, "wrong_state", None),
    ];
    for (path, body, status, code, field) in table {
        let (got, reply) = post(&daemon, path, body.as_ref());
        assert_eq!((got, reply["error"]["code"].as_str()), (status, Some(code)), "{path} {body:?}: {reply}");
        assert_eq!(reply["error"]["field"].as_str(), field, "{path} {body:?}: {reply}");
        assert_eq!(daemon.task("held")["waiting"], json!({"kind": "takeover"}), "{path}: nothing changed");
    }
    let cli = daemon.cli(&["resume", "nobody"]);
    assert_eq!(cli.code, 2, "{}", cli.stderr);

    // Handed back, it is queued again (and, unclaimable, stays so); it is no longer taken over.
    let (status, reply) = post(&daemon, "/v1/tasks/held/resume", Some(&json!({})));
    assert_eq!((status, &reply["state"]), (200, &json!("queued")), "{reply}");
    let back = daemon.task("held");
    assert_eq!((&back["state"], &back["waiting"]), (&json!("queued"), &Value::Null), "{back}");
    let (status, reply) = post(&daemon, "/v1/tasks/held/resume", None);
    assert_eq!((status, reply["error"]["code"].as_str()), (409, Some("wrong_state")), "{reply}");

    // A finished task cannot be paused; a paused one can be cancelled.
    assert_eq!(post(&daemon, "/v1/tasks/held/pause", None).0, 200);
    assert_eq!(daemon.cli(&["cancel", "held"]).code, 0);
    assert_eq!(daemon.task("held")["state"], "cancelled");
    let (status, reply) = post(&daemon, "/v1/tasks/held/pause", None);
    assert_eq!((status, reply["error"]["code"].as_str()), (409, Some("wrong_state")), "{reply}");
    let cli = daemon.cli(&["pause", "held"]);
    assert_eq!(cli.code, 2, "{}", cli.stderr);
}
