//! The web console's live view: how long after a step's screenshot is recorded it shows in the browser.
//!
//! Runs a daemon in this process with a TCP listener, logs headless Chromium (testkit's harness) into the
//! console, opens the page of a running task (mock desktop, scripted model, `--steps N` steps each waiting
//! `--wait-ms M` before a click), and pairs each `screenshot_saved` event (its server timestamp: the store has
//! the screenshot) with the moment the page had that screenshot loaded and on screen (the console's probe,
//! `window.agentdConsole.shown`). The path measured is the whole one: event stored → SSE → the page → the
//! screenshot fetched from `GET /v1/tasks/{id}/steps/{n}/screenshot` → decoded and shown. Prints p50, p99 and
//! the maximum (the first screenshot, saved while the page opens, is not counted). Needs Chromium (`$AGENTD_TEST_CHROMIUM` or /usr/bin/chromium).
//!
//! `cargo bench --bench console_latency` (add `-- --steps N --wait-ms M`).

#[path = "support/mod.rs"]
mod support;

use support::{arg, percentile};

use std::time::Duration;

use agentd::config::Config;
use agentd_testkit::browser::Browser;

const TOKEN: &str = "bench-console-token-0123456789abcdef";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let steps = arg("--steps", 60);
    let wait_ms = arg("--wait-ms", 250);
    let Some(browser) = Browser::launch().await.expect("Chromium") else { return };

    let dir = tempfile::tempdir().expect("tempdir");
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).expect("token");
    let text = format!(
        "data_dir = {:?}\n[api]\nsocket = {:?}\nlisten = \"127.0.0.1:{port}\"\ntoken_file = {:?}\n",
        dir.path().join("data").display().to_string(),
        dir.path().join("agentd.sock").display().to_string(),
        token_file.display().to_string()
    );
    let config: Config = agentd::config::parse(&text, "bench", &[]).expect("config");
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    let daemon = tokio::spawn(agentd::daemon::serve_until(config, async move { stopped.cancelled().await }));
    let addr = format!("127.0.0.1:{port}");

    let tab = browser.tab(1280, 800, false).await.expect("tab");
    let wait = Duration::from_secs(30);
    let mut opened = false;
    for _ in 0..200 {
        if tab.goto(&format!("http://{addr}/console/login")).await.is_ok()
            && tab.wait_for("document.querySelector('#token')", Duration::from_secs(1)).await.is_ok()
        {
            opened = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(opened, "the daemon's console never answered");
    tab.type_into("#token", TOKEN).await.expect("token");
    tab.press("Enter", false).await.expect("log in");
    tab.wait_for("location.pathname === '/console/' && window.agentdConsole.ready", wait).await.expect("console");

    // Submitted through the console's form (with the page's session); the page then opens the task's page at
    // once, before its first step.
    let turns: Vec<serde_json::Value> = (0..steps)
        .map(|i| serde_json::json!({"actions": [{"type": "wait", "duration_ms": wait_ms}, {"type": "click", "x": 20 + (i % 60) * 20, "y": 300}]}))
        .chain(std::iter::once(serde_json::json!({"complete": {"success": true, "summary": "ok"}})))
        .collect();
    let task = serde_json::json!({
        "id": "console-latency",
        "instructions": "benchmark the live view",
        "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "scripted", "script": {"turns": turns}},
        "limits": {"max_steps": steps + 5}
    });
    tab.goto(&format!("http://{addr}/#/submit")).await.expect("submit page");
    tab.wait_for("document.querySelector('#task-json')", wait).await.expect("form");
    let set = format!(
        "document.querySelector('#task-json').value = {}; true",
        serde_json::to_string(&task.to_string()).expect("JSON")
    );
    let _: bool = tab.eval(&set).await.expect("fill the form");
    tab.click("#submit-task").await.expect("submit");
    tab.wait_for("location.hash === '#/tasks/console-latency'", wait).await.expect("task page");
    tab.wait_for(
        "document.querySelector('#task-state') && document.querySelector('#task-state').dataset.state === 'succeeded'",
        Duration::from_secs(60 + (steps as u64 * (wait_ms as u64 + 500)) / 1000),
    )
    .await
    .expect("the task finishes");

    let shown: Vec<(u32, i64)> = tab
        .eval::<Vec<serde_json::Value>>("window.agentdConsole.shown")
        .await
        .expect("probe")
        .iter()
        .filter_map(|s| Some((s["step"].as_u64()? as u32, s["at"].as_i64()?)))
        .collect();
    let events: String =
        tab.eval("fetch('/v1/tasks/console-latency/events?follow=false').then(r => r.text())").await.expect("events");
    let mut latencies = Vec::new();
    for data in events.lines().filter_map(|l| l.strip_prefix("data:")) {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(data.trim()) else { continue };
        if event["type"] != "screenshot_saved" {
            continue;
        }
        let step = event["step"].as_u64().unwrap_or_default() as u32;
        if step == 0 {
            // Saved while the page was still opening: not a live update.
            continue;
        }
        let ts = time::OffsetDateTime::parse(
            event["ts"].as_str().unwrap_or_default(),
            &time::format_description::well_known::Rfc3339,
        )
        .expect("ts");
        let saved_ms = (ts.unix_timestamp_nanos() / 1_000_000) as i64;
        // The first time the page showed that step's screenshot after it was saved.
        if let Some((_, at)) = shown.iter().find(|(s, at)| *s == step && *at >= saved_ms - 5) {
            latencies.push((at - saved_ms) as f64);
        }
    }
    stop.cancel();
    let _ = daemon.await;
    browser.close().await;

    latencies.sort_by(f64::total_cmp);
    println!(
        "console live view: {} of {} screenshots seen; screenshot saved → shown in the browser: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        latencies.len(),
        steps,
        percentile(&latencies, 50.0),
        percentile(&latencies, 99.0),
        latencies.last().copied().unwrap_or(f64::NAN)
    );
}
