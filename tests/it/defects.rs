//! Regressions of the defects a red team and a new user found (see `docs/security.md` for the outbound
//! policy): what a task submitted over the API names must stay outside the machine's inside, a cancel
//! requested together with a take-over wins, and a running task's usage shows while it runs.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use agentd_testkit::fake::{self, FakeServer, Vendor};
use serde_json::{Value, json};

use crate::support::{Agentd, Daemon, http};

const INTERNAL: &str = "INTERNAL-S3CRET-42";
const KEY: &str = "sk-test-0123456789";

/// An internal service on loopback: every request is answered 200 with [`INTERNAL`] in a JSON body.
fn internal_service() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut buffer = [0u8; 4096];
                let _ = stream.read(&mut buffer);
                let body = format!("{{\"ok\": true, \"output\": \"{INTERNAL}\", \"status\": \"{INTERNAL}\"}}");
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    port
}

fn submit(daemon: &Daemon, task: &Value) -> (u16, Value) {
    let body = task.to_string();
    let (status, reply) = http(&daemon.socket, "POST", "/v1/tasks", Some(body.as_bytes()), &[]).expect("submit");
    (status, serde_json::from_str(&reply).unwrap_or(Value::Null))
}

fn tool_task(url: &str) -> Value {
    json!({
        "instructions": "look the order up",
        "computer": {"provider": "mock", "scene": "blank"},
        "model": {"provider": "scripted", "script": {"turns": [
            {"calls": [{"name": "lookup", "arguments": {}}]},
            {"complete": {"success": true, "summary": "done"}}
        ]}},
        "tools": [{"name": "lookup", "description": "d", "parameters": {"type": "object"}, "kind": "http", "url": url}]
    })
}

/// Every spelling of loopback, the metadata address, and each kind of destination a task names is refused
/// at submission with 400 naming the field — the body of the internal service reaches nothing.
#[test]
fn an_api_task_naming_an_internal_address_is_refused_in_every_spelling() {
    let port = internal_service();
    let daemon = Daemon::start("");
    let urls = [
        format!("http://127.0.0.1:{port}/secret"),
        format!("http://localhost:{port}/secret"),
        format!("http://[::ffff:127.0.0.1]:{port}/secret"),
        format!("http://2130706433:{port}/secret"),
        format!("http://[::1]:{port}/secret"),
        "http://169.254.169.254/latest/meta-data/".to_string(),
        "http://10.0.0.7/".to_string(),
    ];
    for url in &urls {
        let (status, reply) = submit(&daemon, &tool_task(url));
        assert_eq!(status, 400, "{url}: {reply}");
        let text = reply.to_string();
        assert!(text.contains("tools[0].url"), "{url}: {text}");
        assert!(text.contains("[outbound] allow"), "{url}: {text}");
        assert!(!text.contains(INTERNAL), "{url}: {text}");
    }
    let mut verified = tool_task("http://example.invalid/");
    verified["tools"] = json!([]);
    verified["verify"] = json!([{"kind": "http", "url": format!("http://127.0.0.1:{port}/health")}]);
    let (status, reply) = submit(&daemon, &verified);
    assert_eq!(status, 400, "{reply}");
    assert!(reply.to_string().contains("verify[0].url"), "{reply}");

    let computers = [
        (json!({"provider": "computer-server", "url": format!("http://127.0.0.1:{port}")}), "computer.url"),
        (json!({"provider": "vnc", "address": format!("127.0.0.1:{port}")}), "computer.address"),
    ];
    for (computer, field) in computers {
        let mut task = tool_task("http://example.invalid/");
        task["tools"] = json!([]);
        task["computer"] = computer.clone();
        let (status, reply) = submit(&daemon, &task);
        assert_eq!(status, 400, "{computer}: {reply}");
        let text = reply.to_string();
        assert!(text.contains(field), "{computer}: {text}");
        assert!(!text.contains(INTERNAL), "{computer}: {text}");
    }
}

/// What the operator allows is reachable: with `[outbound] allow = ["127.0.0.1"]` the same API task's tool
/// reads the service; and a task run with `agentd run` (the operator's own) reaches loopback anyway.
#[test]
fn the_operator_allows_the_inside_and_local_runs_reach_it() {
    let port = internal_service();
    let url = format!("http://127.0.0.1:{port}/secret");
    let daemon = Daemon::start("[outbound]\nallow = [\"127.0.0.1\"]\n");
    let (status, reply) = submit(&daemon, &tool_task(&url));
    assert_eq!(status, 201, "{reply}");
    let id = reply["id"].as_str().expect("id").to_string();
    let done = daemon.wait_terminal(&id, Duration::from_secs(60));
    assert_eq!(done["state"], "succeeded", "{done}");
    let record = daemon.task(&id).to_string();
    assert!(record.contains(INTERNAL), "the allowed service's answer is the tool's result: {record}");

    let agentd = Agentd::new();
    let task = agentd.dir.path().join("task.json");
    std::fs::write(&task, tool_task(&url).to_string()).expect("task");
    let run = agentd.run(&["run", task.to_str().expect("path"), "--json"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime")
}

/// An Anthropic model that waits on the screen every turn and never completes, spending 100 input tokens a
/// turn.
fn waiting_fake(rt: &tokio::runtime::Runtime) -> FakeServer {
    let usage = json!({"input_tokens": 100, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 5});
    rt.block_on(FakeServer::start(
        Vendor::Anthropic { key: KEY.into() },
        Box::new(move |r| {
            let turn =
                r.body["messages"].as_array().map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
            let content = vec![json!({"type": "tool_use", "id": format!("toolu_{turn}"), "name": "computer",
                                      "input": {"action": "wait", "duration": 0.2}})];
            fake::anthropic_reply(content, usage.clone(), true)
        }),
    ))
    .expect("fake")
}

fn waiting_task(id: &str) -> Value {
    json!({
        "id": id,
        "instructions": "wait",
        "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "anthropic", "model": "claude-sonnet-4-5"},
        "guard": {"no_change_steps": 0, "repeat_actions": 0, "idle_turns": 0},
        "limits": {"max_steps": 500, "timeout_secs": 300}
    })
}

fn wait_until(daemon: &Daemon, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
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

/// A running task's tokens and cost are those of the steps stored so far, while it runs; and a cancel asked
/// for together with a take-over ends the task cancelled, never parked.
#[test]
fn a_running_task_shows_its_usage_and_a_cancel_beside_a_pause_wins() {
    let rt = runtime();
    let model = waiting_fake(&rt);
    let daemon = Daemon::start_with_env(
        &format!("[models.anthropic]\nbase_url = {:?}\n", model.url),
        &[("ANTHROPIC_API_KEY", KEY)],
    );
    for round in 0..3 {
        let id = format!("usage-{round}");
        let (status, reply) = submit(&daemon, &waiting_task(&id));
        assert_eq!(status, 201, "{reply}");
        let running = wait_until(&daemon, &id, "shows usage while running", |t| {
            t["state"] == "running" && t["usage"]["input_tokens"].as_u64().unwrap_or(0) >= 200
        });
        assert!(running["usage"]["cost_usd"].as_f64().unwrap_or(0.0) > 0.0, "{running}");
        let (pause, _) = http(&daemon.socket, "POST", &format!("/v1/tasks/{id}/pause"), None, &[]).expect("pause");
        let (cancel, _) = http(&daemon.socket, "POST", &format!("/v1/tasks/{id}/cancel"), None, &[]).expect("cancel");
        assert_eq!((pause, cancel), (202, 202), "round {round}");
        let done = daemon.wait_terminal(&id, Duration::from_secs(60));
        assert_eq!(done["state"], "cancelled", "round {round}: {done}\n{}", daemon.log());
    }
}

/// A file under `[api] allowed_paths` is not thereby a secret an API task may take and send somewhere: only
/// `[api] allowed_secret_paths` names those.
#[test]
fn an_api_task_takes_secrets_only_from_files_the_operator_meant_as_secrets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("token");
    std::fs::write(&file, "tok-123456\n").expect("write");
    let mut task = tool_task("http://example.invalid/");
    task["tools"] = json!([]);
    task["secrets"] = json!({"token": {"file": file.to_str().expect("path")}});

    let daemon = Daemon::start_with_api(&format!("allowed_paths = [{:?}]\n", dir.path()), "");
    let (status, reply) = submit(&daemon, &task);
    assert_eq!(status, 400, "{reply}");
    let text = reply.to_string();
    assert!(text.contains("secrets.token.file") && text.contains("allowed_secret_paths"), "{text}");
    assert!(!text.contains("tok-123456"), "{text}");
    drop(daemon);

    let daemon = Daemon::start_with_api(&format!("allowed_secret_paths = [{:?}]\n", dir.path()), "");
    let (status, reply) = submit(&daemon, &task);
    assert_eq!(status, 201, "{reply}");
}

/// `agentd events --type` keeps the types asked for; every line is one kind of text (no raw JSON among the
/// sentences); an unknown type is invalid input naming the types there are.
#[test]
fn events_filter_by_type_and_print_no_raw_json() {
    let daemon = Daemon::start("");
    let submitted = daemon.cli(&["submit", "config/tasks/mock-login.json", "--wait", "--json"]);
    assert_eq!(submitted.code, 0, "{}\n{}", submitted.stdout, submitted.stderr);
    let id = submitted.json()["id"].as_str().expect("id").to_string();
    let finished = daemon.cli(&["events", &id, "--type", "step_finished,task_finished"]);
    assert_eq!(finished.code, 0, "{}", finished.stderr);
    let lines: Vec<&str> = finished.stdout.lines().collect();
    assert!(lines.len() >= 2, "{}", finished.stdout);
    assert!(
        lines.iter().all(|l| l.contains(" step_finished ") || l.contains(" task_finished ")),
        "{}",
        finished.stdout
    );
    let all = daemon.cli(&["events", &id]);
    assert!(!all.stdout.lines().any(|l| l.contains("{\"")), "raw JSON among the lines:\n{}", all.stdout);
    let unknown = daemon.cli(&["events", &id, "--type", "nope"]);
    assert_eq!(unknown.code, 2, "{}", unknown.stderr);
    assert!(unknown.stderr.contains("step_finished"), "{}", unknown.stderr);
}

/// `agentd show` gives what the model said at each step; for a task `agentd run` ran, `show ID` without
/// `--local` says to use it.
#[test]
fn show_gives_the_models_words_and_points_a_local_run_to_local() {
    let agentd = Agentd::new();
    let run = agentd.run(&["run", "config/tasks/mock-login.json", "--json"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let id = run.json()["id"].as_str().expect("id").to_string();
    let shown = agentd.run(&["show", &id, "--local"]);
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    assert!(shown.stdout.lines().any(|l| l.trim_start().starts_with("model: ")), "{}", shown.stdout);
    let daemon_side = agentd.run(&["show", &id]);
    assert_ne!(daemon_side.code, 0, "{}", daemon_side.stdout);
    assert!(daemon_side.stderr.contains("--local"), "{}", daemon_side.stderr);
}
