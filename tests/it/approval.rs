//! Approval policies (docs/humans.md) through the real daemon: rules in the config (`[[approval]]`) and in the task
//! hold
//! a matching turn before any of its calls runs (`waiting.kind = approval`, the proposed actions drawn on a
//! stored copy of the screenshot); `approve`, `approve --action` (an edited action runs instead), `reject
//! --reason` (the model is told, checked by the Anthropic fake, and the task goes on); a turn no rule matches
//! runs straight through; malformed rules and edit bodies are refused naming the field.

use std::time::{Duration, Instant};

use agentd_testkit::fake::{self, FakeServer, Vendor};
use serde_json::{Value, json};

use crate::support::{Agentd, Backend, Daemon, files_under, http};

const KEY: &str = "sk-test-0123456789";

on_both_backends!(
    rules_hold_matching_turns_and_an_edit_runs_instead,
    a_rejected_hold_tells_the_model_and_goes_on,
    answers_racing_a_cancel_are_what_the_record_says
);

fn post(daemon: &Daemon, path: &str, body: Option<&Value>) -> (u16, Value) {
    let text = body.map(|b| b.to_string());
    let (status, reply) = http(&daemon.socket, "POST", path, text.as_deref().map(str::as_bytes), &[]).expect("request");
    (status, serde_json::from_str(&reply).unwrap_or(Value::Null))
}

fn wait_waiting(daemon: &Daemon, id: &str, step: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let task = daemon.task(id);
        if task["state"] == "waiting_for_human" && task["waiting"]["step"] == step {
            return task;
        }
        assert!(!task["state"].as_str().is_some_and(|s| ["succeeded", "failed", "cancelled"].contains(&s)), "{task}");
        assert!(Instant::now() < deadline, "never held at step {step}: {task}\n{}", daemon.log());
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn rules_hold_matching_turns_and_an_edit_runs_instead(backend: Backend) {
    // The config holds typing; the task adds its completion.
    let daemon = Daemon::start_on(backend, "", "[[approval]]\naction = \"type\"\nreason = \"typing needs a look\"\n");
    let task = json!({
        "id": "held",
        "instructions": "sign in",
        "computer": {"provider": "mock", "scene": "login"},
        "approval": [{"task_completion": true}, {"keys": "ctrl+alt+delete"}],
        "model": {"provider": "scripted", "script": {"turns": [
            {"say": "click the name field", "actions": [{"type": "click", "x": 640, "y": 370}]},
            {"say": "type the name", "actions": [{"type": "type", "text": "alice"}]},
            {"complete": {"success": true, "summary": "signed in"}}
        ]}}
    });
    assert_eq!(post(&daemon, "/v1/tasks", Some(&task)).0, 201);

    // Step 0 (a click) matched no rule and ran; step 1 types: the config's rule holds it before it runs.
    let held = wait_waiting(&daemon, "held", 1);
    let waiting = &held["waiting"];
    assert_eq!(waiting["kind"], "approval", "{held}");
    assert_eq!(waiting["reason"], "typing needs a look");
    assert_eq!(waiting["proposed"]["actions"], json!([{"type": "type", "text": "alice"}]));
    assert_eq!(held["steps"][0]["approval"], Value::Null, "the click ran straight through");
    assert_eq!(held["steps"][0]["results"][0]["ok"], true);
    assert_eq!(held["steps"][1]["approval"]["rule"], 0, "the config's rule comes first");
    // The proposed actions drawn on a copy of the screenshot, stored beside it.
    let annotated = &waiting["proposed"]["annotated"];
    let key = annotated["key"].as_str().expect("annotated key").to_string();
    assert!(key.ends_with("/00001-proposed.png"), "{key}");
    assert!(annotated["url"].as_str().is_some_and(|u| !u.is_empty()), "{annotated}");
    assert_eq!(
        (&annotated["width"], &annotated["height"]),
        (&held["steps"][1]["screenshot"]["width"], &held["steps"][1]["screenshot"]["height"])
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let stored = loop {
        let files = files_under(&daemon.agentd.data_dir());
        if let Some(path) = files.iter().find(|p| p.to_string_lossy().ends_with(&key)) {
            break path.clone();
        }
        assert!(Instant::now() < deadline, "the annotated screenshot was never stored: {files:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let shot = files_under(&daemon.agentd.data_dir())
        .into_iter()
        .find(|p| p.to_string_lossy().ends_with(held["steps"][1]["screenshot"]["key"].as_str().expect("key")))
        .expect("the step's screenshot");
    assert_ne!(std::fs::read(&stored).expect("annotated"), std::fs::read(&shot).expect("screenshot"), "marks drawn");
    assert_eq!(held["computer_state"], Value::Null);

    // Malformed edits are refused and change nothing.
    // (body, status, code, field)
    let table: [(Value, u16, &str, &str); 4] = [
        (json!({"actions": [{"type": "explode"}]}), 400, "invalid_body", "actions[0]"),
        (json!({"actions": []}), 400, "invalid_body", "actions"),
        (json!({"action": [{"type": "wait", "duration_ms": 1}]}), 400, "invalid_body", "action"),
        (json!({"actions": {"type": "wait"}}), 400, "invalid_body", "actions"),
    ];
    for (body, status, code, field) in table {
        let (got, reply) = post(&daemon, "/v1/tasks/held/approve", Some(&body));
        assert_eq!((got, reply["error"]["code"].as_str()), (status, Some(code)), "{body}: {reply}");
        assert!(reply["error"]["field"].as_str().is_some_and(|f| f.starts_with(field)), "{body}: {reply}");
        assert_eq!(daemon.task("held")["waiting"]["step"], 1, "{body}: nothing changed");
    }
    let bad = daemon.cli(&["approve", "held", "--action", "not json"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);

    // Approved with an edit: "bob" is typed instead of "alice", and the record says so.
    let edit = daemon.cli(&["approve", "held", "--action", r#"{"type": "type", "text": "bob"}"#, "--json"]);
    assert_eq!(edit.code, 0, "{}", edit.stderr);
    assert_eq!(edit.json()["edited"], true);

    // The completion is held by the task's rule; plain approval lets it through.
    let held = wait_waiting(&daemon, "held", 2);
    assert_eq!(held["waiting"]["proposed"]["calls"][0]["name"], "task_completion", "{held}");
    assert_eq!(held["steps"][2]["approval"]["rule"], 1, "the task's first rule, after the config's");
    assert_eq!(daemon.cli(&["approve", "held"]).code, 0);
    let done = daemon.wait_terminal("held", Duration::from_secs(60));
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(
        done["computer_state"]["fields"]["username"], "bob",
        "the edited action ran: {}",
        done["computer_state"]
    );
    let step = &done["steps"][1];
    assert_eq!(step["approval"]["approved"], true);
    assert_eq!(step["approval"]["edited"], json!([{"type": "type", "text": "bob"}]));
    assert_eq!(step["actions"], json!([{"type": "type", "text": "bob"}]), "the record shows what ran");
    assert_eq!(step["calls"][0]["actions"], json!([{"type": "type", "text": "alice"}]), "and what the model asked");
    assert_eq!(done["steps"][2]["approval"]["approved"], true);
    // Nothing waits any more: an edit or a decision is refused.
    let (status, reply) =
        post(&daemon, "/v1/tasks/held/approve", Some(&json!({"actions": [{"type": "wait", "duration_ms": 1}]})));
    assert_eq!((status, reply["error"]["code"].as_str()), (409, Some("wrong_state")), "{reply}");
}

/// The Anthropic fake presses ctrl+alt+Delete until it reads the human's reason, then completes.
fn a_rejected_hold_tells_the_model_and_goes_on(backend: Backend) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    let usage = json!({"input_tokens": 100, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 5});
    let server = rt
        .block_on(FakeServer::start(
            Vendor::Anthropic { key: KEY.into() },
            Box::new(move |r| {
                let turn =
                    r.body["messages"].as_array().map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
                let content = if r.body.to_string().contains("never on this machine") {
                    vec![json!({"type": "tool_use", "id": format!("toolu_{turn}"), "name": "task_completion",
                                "input": {"success": true, "summary": "did not restart"}})]
                } else {
                    vec![json!({"type": "tool_use", "id": format!("toolu_{turn}"), "name": "computer",
                                "input": {"action": "key", "text": "ctrl+alt+Delete"}})]
                };
                fake::anthropic_reply(content, usage.clone(), true)
            }),
        ))
        .expect("fake");
    let daemon = Daemon::start_on_env(
        backend,
        &format!("[models.anthropic]\nbase_url = {:?}\n", server.url),
        &[("ANTHROPIC_API_KEY", KEY)],
    );
    let task = json!({
        "id": "restart",
        "instructions": "restart the machine",
        "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "anthropic", "model": "claude-sonnet-4-5"},
        "approval": [{"keys": "Control+Alt+delete", "reason": "restarting needs a person"}]
    });
    assert_eq!(post(&daemon, "/v1/tasks", Some(&task)).0, 201);
    let held = wait_waiting(&daemon, "restart", 0);
    assert_eq!(held["waiting"]["reason"], "restarting needs a person");
    let keys = &held["waiting"]["proposed"]["actions"][0];
    assert_eq!(keys["type"], "keypress", "{keys}");
    let calls_before = server.requests().len();

    let reject = daemon.cli(&["reject", "restart", "--reason", "never on this machine", "--json"]);
    assert_eq!(reject.code, 0, "{}", reject.stderr);
    assert_eq!(reject.json()["state"], "queued", "a rule's rejection lets the task go on");
    let done = daemon.wait_terminal("restart", Duration::from_secs(60));
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert!(server.problems().is_empty(), "{:#?}", server.problems());
    let requests = server.requests();
    assert_eq!(requests.len(), calls_before + 1);
    let told = requests[calls_before].body.to_string();
    assert!(told.contains("rejected by a human: never on this machine"), "{told}");
    let step = &done["steps"][0];
    assert_eq!(step["approval"]["approved"], false);
    assert_eq!(step["approval"]["rejected"], "never on this machine");
    assert_eq!(step["results"][0]["ok"], false);
    assert_eq!(done["computer_state"]["actions_received"], 0, "the keys never reached the desktop");
}

#[test]
fn malformed_rules_in_the_config_and_through_the_api_name_the_field() {
    let agentd = Agentd::with_config(
        "[[approval]]\nkeys = \"ctrl+nosuchkey\"\n\n[[approval]]\ntool = \"x\"\naction = \"type\"\n",
    );
    let check = agentd.run(&["config", "check"]);
    assert_eq!(check.code, 2, "{}", check.stderr);
    assert!(check.stderr.contains("approval"), "{}", check.stderr);
    assert!(check.stderr.contains("nosuchkey"), "{}", check.stderr);

    let daemon = Daemon::start("");
    // (rules, the field named)
    let table = [
        (json!([{"keys": "ctrl+nosuchkey"}]), "approval[0].keys"),
        (json!([{"action": "click"}, {"action": "explode"}]), "approval[1].action"),
        (json!([{"tool": "a", "action": "type"}]), "approval[0]"),
        (json!({"action": "type"}), "approval"),
    ];
    for (rules, field) in table {
        let task = json!({"instructions": "x", "approval": rules});
        let (status, reply) = post(&daemon, "/v1/tasks", Some(&task));
        assert_eq!((status, reply["error"]["code"].as_str()), (400, Some("invalid_task")), "{rules}: {reply}");
        assert_eq!(reply["error"]["field"].as_str(), Some(field), "{rules}: {reply}");
    }
    let (_, list) = crate::support::http(&daemon.socket, "GET", "/v1/tasks", None, &[]).expect("list");
    assert!(!list.contains("\"x\""), "nothing was queued: {list}");
}

/// Approvals (and rejections) sent at the same moment as a cancel, over the API, on tasks a rule holds: what
/// each request was answered is what the finished record says. An approval answered 200 is in the step, and
/// when the cancel answered `cancelled` (the task was still queued) none of the approved actions ran; an
/// approval refused with 409 came after the cancel, and the step holds no answer.
fn answers_racing_a_cancel_are_what_the_record_says(backend: Backend) {
    const TASKS: usize = 8;
    let daemon = Daemon::start_on(backend, "", "[[approval]]\naction = \"type\"\nreason = \"typing needs a look\"\n");
    let ids: Vec<String> = (0..TASKS).map(|i| format!("race-{i}")).collect();
    for id in &ids {
        let task = json!({
            "id": id,
            "instructions": "type a name",
            "computer": {"provider": "mock", "scene": "login"},
            "model": {"provider": "scripted", "script": {"turns": [
                {"actions": [{"type": "click", "x": 640, "y": 370}, {"type": "type", "text": "alice"}]},
                {"complete": {"success": true, "summary": "typed"}}
            ]}}
        });
        assert_eq!(post(&daemon, "/v1/tasks", Some(&task)).0, 201);
    }
    let mut seen = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        wait_waiting(&daemon, id, 0);
        // Every third a rejection (a rule's hold: the model is told and the task goes on), else an approval.
        let verb = if i % 3 == 2 { "reject" } else { "approve" };
        let start = std::sync::Arc::new(std::sync::Barrier::new(2));
        let socket = daemon.socket.clone();
        let (gate, path) = (start.clone(), format!("/v1/tasks/{id}/{verb}"));
        let decision = std::thread::spawn(move || {
            gate.wait();
            http(&socket, "POST", &path, None, &[]).expect("decision")
        });
        let socket = daemon.socket.clone();
        let (gate, path) = (start, format!("/v1/tasks/{id}/cancel"));
        let cancel = std::thread::spawn(move || {
            gate.wait();
            http(&socket, "POST", &path, None, &[]).expect("cancel")
        });
        let (decided, decision) = decision.join().expect("decision thread");
        let (cancelled, cancel) = cancel.join().expect("cancel thread");
        let decision: Value = serde_json::from_str(&decision).unwrap_or(Value::Null);
        let cancel: Value = serde_json::from_str(&cancel).unwrap_or(Value::Null);
        let done = daemon.wait_terminal(id, Duration::from_secs(60));
        let step = &done["steps"][0];
        let said = format!("{id}: {verb} {decided} {decision}, cancel {cancelled} {cancel}; record: {done}");
        assert!(["succeeded", "cancelled"].contains(&done["state"].as_str().unwrap_or_default()), "{said}");
        match (verb, decided) {
            ("approve", 200) => {
                assert_eq!(decision["state"], "queued", "{said}");
                assert_eq!(step["approval"]["approved"], true, "answered 200, so the step says approved: {said}");
            }
            ("reject", 200) => {
                assert_eq!(decision["state"], "queued", "a rule's hold goes on: {said}");
                assert_eq!(step["approval"]["approved"], false, "{said}");
                assert_eq!(step["results"][0]["ok"], false, "{said}");
            }
            (_, 409) => {
                assert_eq!(decision["error"]["code"], "wrong_state", "{said}");
                assert_eq!(
                    (cancelled, done["state"].as_str()),
                    (200, Some("cancelled")),
                    "the cancel came first: {said}"
                );
                assert_eq!(step["approval"]["approved"], Value::Null, "refused, so the step holds no answer: {said}");
            }
            _ => panic!("unexpected answer: {said}"),
        }
        match cancelled {
            // It was waiting or queued: it ended there, and no action of the held step ran (an approved step
            // has no result, a rejected one only the refusals).
            200 => {
                assert_eq!(
                    (cancel["state"].as_str(), done["state"].as_str()),
                    (Some("cancelled"), Some("cancelled")),
                    "{said}"
                );
                let results = step["results"].as_array().cloned().unwrap_or_default();
                assert!(results.iter().all(|r| r["ok"] == false), "nothing of the step ran: {said}");
                assert_eq!(step["approval"]["started"], Value::Null, "{said}");
            }
            // A worker had it: it stops at its next safe point (or had finished before it looked).
            202 => assert_eq!(cancel["cancel"], "requested", "{said}"),
            // It had finished already (the decision let it run to the end).
            409 => assert_eq!(done["state"], "succeeded", "{said}"),
            other => panic!("cancel answered {other}: {said}"),
        }
        seen.push((verb, decided, cancelled));
    }
    eprintln!("(verb, decision, cancel) per task: {seen:?}");
}
