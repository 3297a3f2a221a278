//! `remote` tools (docs/tools.md) through the real binary and daemon: a scripted model on the mock desktop calls tools
//! the task declares as `remote`; the task parks in `awaiting_tool` with its pending calls, the test answers
//! through the API (`POST /v1/tasks/{id}/tool-results`) and the CLI (`agentd tool-result`), and the task
//! continues its turn and finishes with the envelopes (and their details) in the step record. Also across a
//! daemon restart while the task waits, and on PostgreSQL across two nodes.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Backend, Daemon, PgSchema, http, postgres_url};

on_both_backends!(
    a_remote_call_parks_the_task_and_answers_resume_it,
    a_task_awaiting_tools_survives_a_restart_and_is_cancelled_at_once,
);

/// Turn 0 types a name, then calls two remote tools; turn 1 calls one and completes in the same turn.
fn remote_task(id: &str) -> Value {
    let object = |property: &str, kind: &str| json!({"type": "object", "properties": {property: {"type": kind}}, "required": [property]});
    json!({
        "id": id,
        "instructions": "sign in, checking with the client",
        "computer": {"provider": "mock", "scene": "login"},
        "tools": [
            {"name": "lookup_order", "description": "Looks an order up in the client's system",
             "parameters": object("order", "integer"), "kind": "remote"},
            {"name": "confirm_with_client", "description": "Asks the client to confirm",
             "parameters": object("text", "string"), "kind": "remote"}
        ],
        "model": {"provider": "scripted", "script": {"turns": [
            {"say": "typing, then asking", "actions": [
                {"type": "click", "x": 640, "y": 370}, {"type": "type", "text": "alice"}],
             "calls": [{"name": "lookup_order", "arguments": {"order": 42}},
                       {"name": "confirm_with_client", "arguments": {"text": "ship it?"}}]},
            {"calls": [{"name": "confirm_with_client", "arguments": {"text": "done?"}}],
             "complete": {"success": true, "summary": "signed in"}}
        ]}}
    })
}

fn submit(daemon: &Daemon, task: &Value) {
    let (status, body) =
        http(&daemon.socket, "POST", "/v1/tasks", Some(task.to_string().as_bytes()), &[]).expect("submit request");
    assert_eq!(status, 201, "{body}");
}

/// Waits until the task parks on exactly `calls` pending calls; returns its status document.
fn wait_awaiting(daemon: &Daemon, id: &str, calls: usize) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let task = daemon.task(id);
        if task["state"] == "awaiting_tool" && task["pending_tool_calls"].as_array().map_or(0, Vec::len) == calls {
            return task;
        }
        assert!(Instant::now() < deadline, "never awaited {calls} call(s): {task}\n{}", daemon.log());
        std::thread::sleep(Duration::from_millis(30));
    }
}

fn post_results(daemon: &Daemon, id: &str, body: &str) -> (u16, Value) {
    let path = format!("/v1/tasks/{id}/tool-results");
    let (status, text) = http(&daemon.socket, "POST", &path, Some(body.as_bytes()), &[]).expect("tool-results request");
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

fn pending_ids(task: &Value) -> Vec<String> {
    task["pending_tool_calls"]
        .as_array()
        .map(|calls| calls.iter().map(|c| c["id"].as_str().unwrap_or_default().to_string()).collect())
        .unwrap_or_default()
}

/// The answers of the first parked step: lookup_order with details, confirm_with_client plain.
fn first_answers(ids: &[String]) -> String {
    json!({"results": [
        {"id": ids[1], "ok": true, "output": "the client says yes"},
        {"id": ids[0], "ok": true, "output": "order 42: shipped", "details": {"order_id": 42, "carrier": "DHL"}}
    ]})
    .to_string()
}

fn a_remote_call_parks_the_task_and_answers_resume_it(backend: Backend) {
    let daemon = Daemon::start_on(backend, "", "[worker]\nconcurrency = 1\n");
    let id = "remote-e2e";
    let (status, early) = post_results(&daemon, id, r#"{"results": []}"#);
    assert_eq!((status, &early["error"]["code"]), (404, &json!("not_found")), "{early}");
    submit(&daemon, &remote_task(id));
    let waiting = wait_awaiting(&daemon, id, 2);
    assert_eq!(waiting["worker"], Value::Null, "no worker holds it");
    let calls = &waiting["pending_tool_calls"];
    assert_eq!((&calls[0]["name"], &calls[0]["arguments"]), (&json!("lookup_order"), &json!({"order": 42})));
    assert_eq!(
        (&calls[1]["name"], &calls[1]["arguments"]),
        (&json!("confirm_with_client"), &json!({"text": "ship it?"}))
    );
    let ids = pending_ids(&waiting);
    // The typing before the calls happened once, before the task parked.
    assert_eq!(waiting["steps"][0]["results"][1]["ok"], true, "{waiting}");

    // `status` shows the pending calls; the CLI cannot answer one of two, and says which are pending.
    let status = daemon.cli(&["status", id]);
    assert!(status.stdout.contains("awaiting_tool") && status.stdout.contains(&ids[0]), "{}", status.stdout);
    let one = daemon.cli(&["tool-result", id, &ids[0], "--output", "x"]);
    assert_eq!(one.code, 2, "{}", one.stderr);
    assert!(
        one.stderr.contains(&ids[0]) && one.stderr.contains(&ids[1]) && one.stderr.contains("missing"),
        "{}",
        one.stderr
    );

    // Bad requests: (body, status, field)
    let missing = json!({"results": [{"id": ids[0], "ok": true, "output": "x"}]}).to_string();
    let unknown =
        json!({"results": [{"id": ids[0], "ok": true, "output": "x"}, {"id": "nope", "ok": true, "output": "x"}]})
            .to_string();
    let twice =
        json!({"results": [{"id": ids[1], "ok": true, "output": "x"}, {"id": ids[1], "ok": true, "output": "y"}]})
            .to_string();
    let no_ok = json!({"results": [{"id": ids[0], "output": "x"}]}).to_string();
    let extra = json!({"results": [{"id": ids[0], "ok": true, "output": "x", "colour": 1}]}).to_string();
    let table = [
        (missing.as_str(), 400, "results"),
        (unknown.as_str(), 400, "results[1].id"),
        (twice.as_str(), 400, "results[1].id"),
        (no_ok.as_str(), 400, "results[0].ok"),
        (extra.as_str(), 400, "results[0].colour"),
        ("{", 400, ""),
    ];
    for (body, code, field) in table {
        let (status, reply) = post_results(&daemon, id, body);
        assert_eq!(status, code, "{body}: {reply}");
        if !field.is_empty() {
            assert_eq!(reply["error"]["field"], field, "{body}: {reply}");
        }
    }
    assert_eq!(daemon.task(id)["state"], "awaiting_tool", "refused requests change nothing");

    let (status, reply) = post_results(&daemon, id, &first_answers(&ids));
    assert_eq!(status, 200, "{reply}");
    let (status, again) = post_results(&daemon, id, &first_answers(&ids));
    assert_eq!(status, 409, "a second answer: {again}");
    let message = again["error"]["message"].as_str().unwrap_or_default();
    assert!(["queued", "running", "awaiting_tool"].iter().any(|s| message.contains(s)), "names the state: {message}");

    // Turn 1 parks on one call: the CLI answers it, with details.
    let second = wait_awaiting(&daemon, id, 1);
    let last = pending_ids(&second).remove(0);
    assert!(!ids.contains(&last));
    let bad = daemon.cli(&["tool-result", id, &last, "--output", "yes", "--details", "{not json"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("--details"), "{}", bad.stderr);
    let answered = daemon.cli(&["tool-result", id, &last, "--output", "confirmed", "--details", r#"{"by": "carol"}"#]);
    assert_eq!(answered.code, 0, "{}", answered.stderr);

    let done = daemon.wait_terminal(id, Duration::from_secs(30));
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!((&done["attempt"], &done["outcome"]["summary"]), (&json!(1), &json!("signed in")));
    assert_eq!(done["computer_state"]["fields"]["username"], "alice", "typed once: {}", done["computer_state"]);
    assert!(done.get("pending_tool_calls").is_none(), "{done}");
    let steps = done["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 2, "{done}");
    let first = &steps[0];
    assert_eq!((&first["finished"], first.get("awaiting_tools")), (&json!(true), None), "{first}");
    let results = first["results"].as_array().expect("results");
    let envelope = |name: &str| results.iter().find(|r| r["tool"] == name).cloned().unwrap_or(Value::Null);
    assert_eq!(envelope("lookup_order")["details"], json!({"order_id": 42, "carrier": "DHL"}), "{first}");
    assert_eq!(envelope("lookup_order")["message"], "order 42: shipped");
    assert_eq!(envelope("lookup_order")["call_id"], json!(ids[0]));
    assert_eq!(envelope("confirm_with_client")["message"], "the client says yes");
    assert_eq!(results.len(), 4, "two actions and two envelopes, in the model's order: {first}");
    assert_eq!(results[2]["tool"], "lookup_order");
    let second = &steps[1];
    assert_eq!(second["results"][0]["details"], json!({"by": "carol"}), "{second}");
    assert_eq!(second["call_results"][0]["message"], "confirmed");

    // The events tell the story: parked twice, each answer a tool_finished with its details.
    let events = daemon.cli(&["events", id, "--json"]);
    let kinds: Vec<Value> = events.stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let awaiting = kinds.iter().filter(|e| e["type"] == "awaiting_tool").count();
    assert_eq!(awaiting, 2, "{}", events.stdout);
    let lookup =
        kinds.iter().find(|e| e["type"] == "tool_finished" && e["name"] == "lookup_order").expect("tool_finished");
    assert_eq!(lookup["details"]["carrier"], "DHL");
    assert_eq!(kinds.iter().filter(|e| e["type"] == "task_started").count(), 3, "one attempt, started three times");
}

fn a_task_awaiting_tools_survives_a_restart_and_is_cancelled_at_once(backend: Backend) {
    let mut daemon = Daemon::start_on(backend, "", "");
    submit(&daemon, &remote_task("remote-restart"));
    submit(&daemon, &remote_task("remote-cancel"));
    let ids = pending_ids(&wait_awaiting(&daemon, "remote-restart", 2));
    wait_awaiting(&daemon, "remote-cancel", 2);
    daemon.kill();
    daemon.spawn();
    let waiting = wait_awaiting(&daemon, "remote-restart", 2);
    assert_eq!(pending_ids(&waiting), ids, "the same calls wait after the restart");

    let cancel = daemon.cli(&["cancel", "remote-cancel"]);
    assert_eq!(cancel.code, 0, "{}", cancel.stderr);
    assert_eq!(daemon.task("remote-cancel")["state"], "cancelled", "cancelled at once, no worker involved");
    let (status, late) = post_results(&daemon, "remote-cancel", &first_answers(&ids));
    assert_eq!(status, 409, "{late}");

    let (status, reply) = post_results(&daemon, "remote-restart", &first_answers(&ids));
    assert_eq!(status, 200, "{reply}");
    let last = pending_ids(&wait_awaiting(&daemon, "remote-restart", 1)).remove(0);
    daemon.kill();
    daemon.spawn();
    let answered = daemon.cli(&["tool-result", "remote-restart", &last, "--output", "yes", "--error"]);
    assert_eq!(answered.code, 0, "{}", answered.stderr);
    let done = daemon.wait_terminal("remote-restart", Duration::from_secs(30));
    // The last answer failed, so the completion after it in that turn did not run: the model is asked again
    // and the script has no turn left.
    assert_eq!(done["steps"][1]["results"][0]["ok"], false, "{done}");
    assert_eq!(
        done["steps"][1]["call_results"][1]["message"],
        "not run: an earlier call in this turn failed or the task stopped"
    );
    assert_eq!(done["computer_state"]["fields"]["username"], "alice", "typed once across restarts");
}

/// Two nodes on one PostgreSQL queue: the task parks on one node, the answer arrives through the other, and
/// whichever node claims it continues the turn.
#[test]
fn on_two_postgres_nodes_one_parks_and_the_answer_arrives_through_the_other() {
    let Some(url) = postgres_url() else {
        agentd_testenv::skip("AGENTD_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = PgSchema::create(&url);
    let queue = format!(
        "backend = \"postgres\"\nurl = {:?}\nlease_secs = 3\nheartbeat_secs = 1\npoll_ms = 5000\n",
        schema.url()
    );
    let first = Daemon::start_with("", &queue, "");
    submit(&first, &remote_task("remote-fleet"));
    let waiting = wait_awaiting(&first, "remote-fleet", 2);
    let ids = pending_ids(&waiting);
    let second = Daemon::start_with("", &queue, "");
    assert_eq!(pending_ids(&second.task("remote-fleet")), ids, "every node sees the pending calls");
    let started = Instant::now();
    let (status, reply) = post_results(&second, "remote-fleet", &first_answers(&ids));
    assert_eq!(status, 200, "{reply}");
    let last = pending_ids(&wait_awaiting(&first, "remote-fleet", 1)).remove(0);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "resumed by a wake-up, not by the 5 s poll: {:?}",
        started.elapsed()
    );
    let answered = first.cli(&["tool-result", "remote-fleet", &last, "--output", "yes"]);
    assert_eq!(answered.code, 0, "{}", answered.stderr);
    let done = second.wait_terminal("remote-fleet", Duration::from_secs(30));
    assert_eq!(done["state"], "succeeded", "{done}\n{}\n{}", first.log(), second.log());
    assert_eq!(done["steps"][0]["results"][2]["details"]["carrier"], "DHL");
    drop(first);
    drop(second);
    drop(schema);
}

/// A `remote` call nobody answers within its `timeout_secs` fails with a result saying so, and the task goes
/// on (here: the model reads the failure and completes). The rescuer's round (every half lease: the test
/// daemon's lease is 3 s) ends the wait.
#[test]
fn an_unanswered_remote_call_fails_after_its_timeout_and_the_task_goes_on() {
    let daemon = Daemon::start("");
    let task = json!({
        "id": "patient",
        "instructions": "ask the client",
        "computer": {"provider": "mock", "scene": "blank"},
        "tools": [{"name": "ask_client", "description": "d", "parameters": {"type": "object"}, "kind": "remote",
                   "timeout_secs": 1}],
        "model": {"provider": "scripted", "script": {"turns": [
            {"calls": [{"name": "ask_client", "arguments": {}}]},
            {"complete": {"success": true, "summary": "went on without the client"}}
        ]}}
    });
    submit(&daemon, &task);
    wait_awaiting(&daemon, "patient", 1);
    let done = daemon.wait_terminal("patient", Duration::from_secs(60));
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    let result = &done["steps"][0]["call_results"][0];
    assert_eq!(result["ok"], false, "{result}");
    assert!(result["message"].as_str().unwrap_or("").contains("no answer from the API client within 1 s"), "{result}");
}
