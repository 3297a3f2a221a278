//! The daemon under load: 500 tasks (10 steps each, mock desktop, scripted model) submitted through the HTTP
//! API on the Unix socket, at worker concurrency 1 and 8. Prints submit→start latency (p50, p99, from the
//! events' server timestamps), tasks and steps per second, and the peak memory of the process (which embeds
//! the daemon).
//!
//! `cargo bench --bench daemon` (add `-- --tasks N --steps N` to change the load).

#[path = "support/mod.rs"]
mod support;

use support::{arg, percentile};

use std::time::{Duration, Instant};

use agentd::cli::client::{Client, Endpoint};
use agentd::config::Config;
use hyper::Method;

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

async fn load(concurrency: u32, tasks: usize, steps: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("agentd.sock");
    let text = format!(
        "data_dir = {:?}\n[api]\nsocket = {:?}\n[worker]\nconcurrency = {concurrency}\n[queue]\npoll_ms = 1000\n",
        dir.path().join("data").display().to_string(),
        socket.display().to_string()
    );
    let config: Config = agentd::config::parse(&text, "bench", &[]).expect("config");
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    let daemon = tokio::spawn(agentd::daemon::serve_until(config.clone(), async move { stopped.cancelled().await }));
    let client = Client::new(Endpoint::Unix(socket.clone()));
    for _ in 0..200 {
        if client.call(Method::GET, "/healthz", None).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    let turns: Vec<serde_json::Value> = (0..steps)
        .map(|i| serde_json::json!({"actions": [{"type": "move", "x": 10 + i, "y": 10}]}))
        .chain(std::iter::once(serde_json::json!({"complete": {"success": true, "summary": "ok"}})))
        .collect();
    let started = Instant::now();
    let mut ids = Vec::with_capacity(tasks);
    for i in 0..tasks {
        let body = serde_json::json!({
            "id": format!("bench-{concurrency}-{i}"),
            "instructions": "benchmark",
            "computer": {"provider": "mock", "scene": "blank"},
            "model": {"provider": "scripted", "script": {"turns": turns}},
        });
        let (_, reply) =
            client.call(Method::POST, "/v1/tasks", Some(body.to_string().into_bytes())).await.expect("submit");
        ids.push(reply["id"].as_str().unwrap_or_default().to_string());
    }
    let submitted = started.elapsed();

    let mut latencies = Vec::with_capacity(tasks);
    let mut total_steps = 0usize;
    let mut last_finish = started;
    for id in &ids {
        loop {
            let (_, task) = client.call(Method::GET, &format!("/v1/tasks/{id}"), None).await.expect("status");
            if ["succeeded", "failed", "cancelled"].contains(&task["state"].as_str().unwrap_or("")) {
                assert_eq!(task["state"], "succeeded", "{task}");
                total_steps += task["steps"].as_array().map_or(0, Vec::len);
                last_finish = Instant::now();
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (_, events) = client.call(Method::GET, &format!("/v1/tasks/{id}"), None).await.expect("status");
        let _ = events;
    }
    let elapsed = last_finish.duration_since(started).as_secs_f64();
    // Submit→start from the events' own timestamps (both written by the daemon's clock).
    for id in &ids {
        let mut queued = None;
        let mut start = None;
        client
            .follow_events(id, 0, false, |event| match event.kind {
                agentd::record::events::EventKind::TaskQueued {} => queued = Some(event.ts),
                agentd::record::events::EventKind::TaskStarted { .. } if start.is_none() => start = Some(event.ts),
                _ => {}
            })
            .await
            .expect("events");
        if let (Some(q), Some(s)) = (queued, start) {
            latencies.push((s - q).as_seconds_f64() * 1000.0);
        }
    }
    latencies.sort_by(f64::total_cmp);
    // With a queue deeper than the workers, waiting for a free worker dominates; the first `concurrency`
    // tasks show the latency of an idle daemon.
    let mut idle: Vec<f64> = latencies.iter().take(concurrency as usize).copied().collect();
    idle.sort_by(f64::total_cmp);
    println!(
        "concurrency {concurrency}: {tasks} tasks x {steps} steps in {elapsed:.2} s (submitting took {:.2} s): \
         {:.1} tasks/s, {:.0} steps/s; submit→start p50 {:.1} ms, p99 {:.1} ms (idle workers: p50 {:.1} ms)",
        submitted.as_secs_f64(),
        tasks as f64 / elapsed,
        total_steps as f64 / elapsed,
        percentile(&latencies, 50.0),
        percentile(&latencies, 99.0),
        percentile(&idle, 50.0),
    );
    stop.cancel();
    let _ = daemon.await;
}

/// Submit→start latency when the daemon is idle: one task at a time, each waited for.
async fn idle_latency(samples: usize) {
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
    let mut latencies = Vec::new();
    for i in 0..samples {
        let body = serde_json::json!({
            "id": format!("idle-{i}"),
            "instructions": "latency",
            "model": {"provider": "scripted", "script": {"turns": [{"complete": {"success": true, "summary": "ok"}}]}},
        });
        let (_, reply) =
            client.call(Method::POST, "/v1/tasks", Some(body.to_string().into_bytes())).await.expect("submit");
        let id = reply["id"].as_str().unwrap_or_default().to_string();
        let mut queued = None;
        let mut start = None;
        client
            .follow_events(&id, 0, true, |event| match event.kind {
                agentd::record::events::EventKind::TaskQueued {} => queued = Some(event.ts),
                agentd::record::events::EventKind::TaskStarted { .. } => start = Some(event.ts),
                _ => {}
            })
            .await
            .expect("events");
        if let (Some(q), Some(s)) = (queued, start) {
            latencies.push((s - q).as_seconds_f64() * 1000.0);
        }
    }
    latencies.sort_by(f64::total_cmp);
    println!(
        "idle daemon: submit→start p50 {:.2} ms, p99 {:.2} ms over {} tasks",
        percentile(&latencies, 50.0),
        percentile(&latencies, 99.0),
        latencies.len()
    );
    stop.cancel();
    let _ = daemon.await;
}

fn main() {
    let tasks = arg("--tasks", 500);
    let steps = arg("--steps", 10);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    println!("agentd daemon benchmark: SQLite queue, fs artifacts, mock desktop (blank, 1280x800), scripted model");
    runtime.block_on(idle_latency(100));
    for concurrency in [1, 8] {
        runtime.block_on(load(concurrency, tasks, steps));
    }
    println!("peak RSS of the process (daemon embedded): {:.1} MiB", peak_rss_mib());
}
