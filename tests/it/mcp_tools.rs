//! MCP servers as a task's tools: the official MCP Python SDK's server (`tests/mcp/server.py`, the SDK installed
//! by `scripts/setup/50-mcp.sh`) on stdio and over Streamable HTTP, its tools called by a scripted model
//! through `agentd run` and a daemon: text, structured content, an image, a tool error, a secret's value
//! reaching the server only, a flood cut to size, a call that hangs (timed out), a server that crashes (later
//! calls are tool errors), the process group gone when the task ends, and what a task submitted over the API
//! may start.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::mcp::python;
use crate::support::{Agentd, Daemon, Run, repo};

fn server_script() -> String {
    repo().join("tests/mcp/server.py").display().to_string()
}

fn write_task(dir: &Path, tools: Value, turns: Value) -> std::path::PathBuf {
    write_task_with(dir, tools, turns, false)
}

/// The task; with `secret`, the secret `card` from `AGENTD_TEST_MCP_SECRET`.
fn write_task_with(dir: &Path, tools: Value, turns: Value, secret: bool) -> std::path::PathBuf {
    let mut task = json!({
        "instructions": "look the order up",
        "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "scripted", "script": {"turns": turns}},
        "tools": tools,
        "limits": {"max_steps": 20, "timeout_secs": 120}
    });
    if secret {
        task["secrets"] = json!({"card": {"env": "AGENTD_TEST_MCP_SECRET"}});
    }
    let path = dir.join("task.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&task).expect("json")).expect("write task");
    path
}

fn run(agentd: &Agentd, task: &Path) -> Run {
    Run::from(
        agentd
            .command()
            .args(["run", "--json"])
            .arg(task)
            .env("AGENTD_TEST_MCP_SECRET", "4111-1111-1111-1111")
            .stdin(std::process::Stdio::null())
            .output()
            .expect("agentd"),
    )
}

/// Each step's first call result: (ok, message).
fn results(record: &Value) -> Vec<(bool, String)> {
    record["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["call_results"].get(0))
        .map(|r| (r["ok"].as_bool().unwrap_or(false), r["message"].as_str().unwrap_or_default().to_string()))
        .collect()
}

/// Whether a process whose command line holds `marker` is still running.
fn running(marker: &str) -> bool {
    std::fs::read_dir("/proc").into_iter().flatten().flatten().any(|entry| {
        std::fs::read(entry.path().join("cmdline")).is_ok_and(|cmdline| {
            String::from_utf8_lossy(&cmdline).contains(marker) && !String::from_utf8_lossy(&cmdline).contains("agentd")
        })
    })
}

#[test]
fn a_stdio_servers_tools_are_called_and_the_server_stops_with_the_task() {
    let Some(python) = python() else { return };
    let agentd = Agentd::new();
    let marker = format!("mcp-marker-{}", std::process::id());
    let tools = json!([{"kind": "mcp", "name": "shop", "command": [python, server_script(), "stdio", marker],
                        "env": ["AGENTD_TEST_MCP_SECRET"], "timeout_secs": 3}]);
    let turns = json!([
        {"say": "look it up", "calls": [{"name": "shop__lookup", "arguments": {"order": "A-7"}}]},
        {"calls": [{"name": "shop__swatch", "arguments": {"width": 3, "height": 2}}]},
        {"calls": [{"name": "shop__secret_echo", "arguments": {"value": "<secret:card>"}}]},
        {"calls": [{"name": "shop__fail", "arguments": {}}]},
        {"calls": [{"name": "shop__flood", "arguments": {}}]},
        {"calls": [{"name": "shop__hang", "arguments": {}}]},
        {"calls": [{"name": "shop__crash", "arguments": {}}]},
        {"calls": [{"name": "shop__lookup", "arguments": {"order": "A-8"}}]},
        {"complete": {"success": true, "summary": "looked"}}
    ]);
    let task = write_task_with(agentd.dir.path(), tools, turns, true);
    let started = Instant::now();
    let ran = run(&agentd, &task);
    assert_eq!(ran.code, 0, "stdout: {}\nstderr: {}", ran.stdout, ran.stderr);
    let record = ran.json();
    assert_eq!(record["state"], "succeeded", "{record:#}");
    let seen = results(&record);
    let short: Vec<(bool, String)> = seen.iter().map(|(ok, m)| (*ok, m.chars().take(120).collect())).collect();
    assert_eq!(seen.len(), 9, "eight tool calls and the completion: {short:#?}");
    assert!(seen[0].0 && seen[0].1.contains("shipped") && seen[0].1.contains("42.5"), "lookup: {:?}", seen[0]);
    assert_eq!(
        record["steps"][0]["call_results"][0]["details"]["structured_content"]["state"], "shipped",
        "structured content kept in the record: {:#}",
        record["steps"][0]
    );
    assert!(seen[1].0, "the image result: {:?}", seen[1]);
    assert_eq!(seen[2], (true, "match".to_string()), "the server got the secret's value");
    assert!(!seen[3].0 && seen[3].1.contains("order book is closed"), "a tool error: {:?}", seen[3]);
    assert!(
        seen[4].0 && seen[4].1.len() < 70 * 1024 && seen[4].1.contains("(cut:"),
        "the flood: {} bytes",
        seen[4].1.len()
    );
    assert!(!seen[5].0 && seen[5].1.contains("did not answer within 3 s"), "the hang: {:?}", seen[5]);
    assert!(!seen[6].0 && seen[6].1.contains("the MCP server shop stopped"), "the crash: {:?}", seen[6]);
    assert!(!seen[7].0 && seen[7].1.contains("the MCP server shop stopped"), "after the crash: {:?}", seen[7]);
    let text = record.to_string();
    assert!(!text.contains("4111-1111-1111-1111"), "the secret's value is in the record");
    // The server's process group ended with the task (a bounded look: the kill is sent before `run` exits).
    let deadline = Instant::now() + Duration::from_secs(10);
    while running(&marker) {
        assert!(Instant::now() < deadline, "the MCP server outlived its task (run took {:?})", started.elapsed());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_streamable_http_servers_tools_are_offered_and_called() {
    let Some(python) = python() else { return };
    let agentd = Agentd::new();
    let port_file = agentd.dir.path().join("port");
    let mut server = std::process::Command::new(&python)
        .args([server_script().as_str(), "http"])
        .arg(&port_file)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the MCP server");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let port: u16 = loop {
        if let Some(port) = std::fs::read_to_string(&port_file).ok().and_then(|p| p.trim().parse().ok())
            && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        {
            break port;
        }
        if let Ok(Some(status)) = server.try_wait() {
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(server.stderr.as_mut().expect("stderr"), &mut err);
            panic!("the MCP server exited ({status}): {err}");
        }
        assert!(Instant::now() < deadline, "the MCP server never listened");
        std::thread::sleep(Duration::from_millis(50));
    };
    let _server = Kill(server);
    let tools = json!([{"kind": "mcp", "name": "shop", "url": format!("http://127.0.0.1:{port}/mcp")}]);
    let turns = json!([
        {"calls": [{"name": "shop__lookup", "arguments": {"order": "B-1"}}]},
        {"calls": [{"name": "shop__fail", "arguments": {}}]},
        {"complete": {"success": true, "summary": "looked"}}
    ]);
    let task = write_task(agentd.dir.path(), tools, turns);
    let ran = run(&agentd, &task);
    assert_eq!(ran.code, 0, "stdout: {}\nstderr: {}", ran.stdout, ran.stderr);
    let seen = results(&ran.json());
    assert!(seen[0].0 && seen[0].1.contains("B-1") && seen[0].1.contains("shipped"), "{seen:?}");
    assert!(!seen[1].0 && seen[1].1.contains("order book is closed"), "{seen:?}");
}

#[test]
fn a_server_that_cannot_start_is_bad_input_naming_the_field() {
    let agentd = Agentd::new();
    let tools = json!([{"kind": "mcp", "name": "shop", "command": ["/nonexistent/mcp-server"]}]);
    let task = write_task(agentd.dir.path(), tools, json!([{"complete": {"success": true, "summary": "never"}}]));
    let ran = run(&agentd, &task);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("tools[0].command") && ran.stderr.contains("/nonexistent/mcp-server"),
        "{}",
        ran.stderr
    );
}

/// A task submitted over the API may start only the programs `[tools] allowed_mcp_commands` lists.
#[test]
fn an_api_task_may_start_only_allowed_mcp_servers() {
    let Some(python) = python() else { return };
    let daemon = Daemon::start(&format!("[tools]\nallowed_mcp_commands = [{python:?}]\n"));
    let allowed = write_task(
        daemon.agentd.dir.path(),
        json!([{"kind": "mcp", "name": "shop", "command": [python, server_script(), "stdio"]}]),
        json!([{"calls": [{"name": "shop__lookup", "arguments": {"order": "C-3"}}]},
               {"complete": {"success": true, "summary": "looked"}}]),
    );
    let submit = daemon.cli(&["submit", allowed.to_str().expect("path"), "--wait"]);
    assert_eq!(submit.code, 0, "{}\n{}", submit.stderr, daemon.log());
    let record = daemon.cli(&["status", submit.stdout.trim(), "--json"]).json();
    assert!(results(&record)[0].1.contains("C-3"), "{record:#}");

    let other = write_task(
        daemon.agentd.dir.path(),
        json!([{"kind": "mcp", "name": "sh", "command": ["/bin/sh", "-c", "echo"]}]),
        json!([{"complete": {"success": true, "summary": "never"}}]),
    );
    let refused = daemon.cli(&["submit", other.to_str().expect("path")]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("tools[0].command") && refused.stderr.contains("allowed_mcp_commands"),
        "{}",
        refused.stderr
    );
}
