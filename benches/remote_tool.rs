//! A `remote` tool round trip (docs/tools.md) on the SQLite queue: the task parks in `awaiting_tool`, the client
//! answers
//! through `POST /v1/tasks/{id}/tool-results`, a worker claims it again, runs one step (mock desktop, scripted
//! model) whose turn calls the remote tool again, and it parks again. One task of `--rounds` such turns on an
//! embedded daemon, a client polling its status every millisecond over the Unix socket.
//!
//! Prints p50 and p99 of: answer sent → parked again (the whole round trip a client sees), and, from the
//! events' server timestamps, answer stored (`tool_finished`) → resumed (`task_started`) and resumed → parked
//! (`awaiting_tool`).
//!
//! `cargo bench --bench remote_tool` (add `-- --rounds N`).

#[path = "support/mod.rs"]
mod support;

use support::{arg, percentile};

use std::time::{Duration, Instant};

use agentd::cli::client::{Client, Endpoint};
use agentd::config::Config;
use agentd::record::events::EventKind;
use hyper::Method;
use serde_json::{Value, json};

async fn status(client: &Client, id: &str) -> Value {
    client.call(Method::GET, &format!("/v1/tasks/{id}"), None).await.expect("status").1
}

/// Polls until the task waits on a call other than `previous`; returns that call's id (None: it finished).
async fn parked(client: &Client, id: &str, previous: Option<&str>) -> Option<String> {
    loop {
        let task = status(client, id).await;
        if task["state"] == "awaiting_tool" {
            let call = task["pending_tool_calls"][0]["id"].as_str().unwrap_or_default().to_string();
            if Some(call.as_str()) != previous {
                return Some(call);
            }
        }
        if ["succeeded", "failed", "cancelled"].contains(&task["state"].as_str().unwrap_or_default()) {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn round_trips(rounds: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("agentd.sock");
    let text = format!(
        "data_dir = {:?}\n[api]\nsocket = {:?}\n[worker]\nconcurrency = 2\n[queue]\npoll_ms = 1000\n",
        dir.path().join("data").display().to_string(),
        socket.display().to_string()
    );
    let config: Config = agentd::config::parse(&text, "bench", &[]).expect("config");
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    let daemon = tokio::spawn(agentd::daemon::serve_until(config, async move { stopped.cancelled().await }));
    let client = Client::new(Endpoint::Unix(socket));
    for _ in 0..200 {
        if client.call(Method::GET, "/healthz", None).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let turns: Vec<Value> = (0..rounds)
        .map(|i| json!({"calls": [{"name": "ping", "arguments": {"round": i}}]}))
        .chain(std::iter::once(json!({"complete": {"success": true, "summary": "ok"}})))
        .collect();
    let task = json!({
        "id": "remote-bench",
        "instructions": "ping the client",
        "computer": {"provider": "mock", "scene": "blank"},
        "tools": [{"name": "ping", "description": "asks the client", "parameters": {"type": "object"}, "kind": "remote"}],
        "model": {"provider": "scripted", "script": {"turns": turns}},
        "limits": {"max_steps": rounds + 5, "timeout_secs": 3600},
    });
    client.call(Method::POST, "/v1/tasks", Some(task.to_string().into_bytes())).await.expect("submit");
    let mut call = parked(&client, "remote-bench", None).await;
    let mut seen = Vec::with_capacity(rounds);
    while let Some(id) = call {
        let body = json!({"results": [{"id": id, "ok": true, "output": "pong"}]});
        let sent = Instant::now();
        let path = "/v1/tasks/remote-bench/tool-results";
        client.call(Method::POST, path, Some(body.to_string().into_bytes())).await.expect("answer");
        call = parked(&client, "remote-bench", Some(&id)).await;
        if call.is_some() {
            seen.push(sent.elapsed().as_secs_f64() * 1000.0);
        }
    }
    let done = status(&client, "remote-bench").await;
    assert_eq!(done["state"], "succeeded", "{done}");

    // From the server's own timestamps.
    let (mut resume, mut to_park) = (Vec::new(), Vec::new());
    let (mut answered, mut started) = (None, None);
    client
        .follow_events("remote-bench", 0, false, |event| match &event.kind {
            EventKind::ToolFinished { .. } => answered = Some(event.ts),
            EventKind::TaskStarted { .. } => {
                if let Some(a) = answered.take() {
                    resume.push((event.ts - a).as_seconds_f64() * 1000.0);
                    started = Some(event.ts);
                }
            }
            EventKind::AwaitingTool { .. } => {
                if let Some(s) = started.take() {
                    to_park.push((event.ts - s).as_seconds_f64() * 1000.0);
                }
            }
            _ => {}
        })
        .await
        .expect("events");
    for samples in [&mut seen, &mut resume, &mut to_park] {
        samples.sort_by(f64::total_cmp);
    }
    println!(
        "{} round trips: answer sent → parked again p50 {:.2} ms, p99 {:.2} ms (client polls every 1 ms); \
         answer stored → resumed p50 {:.2} ms, p99 {:.2} ms; resumed → parked p50 {:.2} ms, p99 {:.2} ms",
        seen.len(),
        percentile(&seen, 50.0),
        percentile(&seen, 99.0),
        percentile(&resume, 50.0),
        percentile(&resume, 99.0),
        percentile(&to_park, 50.0),
        percentile(&to_park, 99.0),
    );
    stop.cancel();
    let _ = daemon.await;
}

fn main() {
    let rounds = arg("--rounds", 300);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    println!("agentd remote tool benchmark: SQLite queue, fs artifacts, mock desktop (blank), scripted model");
    runtime.block_on(round_trips(rounds));
}
