//! `/metrics`, `/livez` and `/healthz` of a real daemon: the exposition passes `promtool check metrics`
//! (Debian's `prometheus` package, which `scripts/setup/45-openapi.sh` installs), carries the build, the
//! process metrics, tokens and cost by provider and model, outcomes by state and reason and API requests by
//! route template and status, with counts that match what the test did; `/livez` answers on TCP without a
//! token or a known `Host`, and `/healthz` says 503 with its reason while the daemon stops.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Daemon, http};

/// The samples of an exposition: `name{labels}` → value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

fn scrape(daemon: &Daemon) -> (String, BTreeMap<String, f64>) {
    let (status, text) = http(&daemon.socket, "GET", "/metrics", None, &[]).expect("metrics");
    assert_eq!(status, 200, "{text}");
    let samples = samples(&text);
    (text, samples)
}

fn submit(daemon: &Daemon, task: &Value) -> u16 {
    http(&daemon.socket, "POST", "/v1/tasks", Some(task.to_string().as_bytes()), &[]).expect("submit").0
}

fn wait_state(daemon: &Daemon, id: &str, state: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while daemon.task(id)["state"] != state {
        assert!(Instant::now() < deadline, "{id} never reached {state}: {}\n{}", daemon.task(id), daemon.log());
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn promtool_check(text: &str) {
    let Some(promtool) = std::env::var_os("AGENTD_TEST_PROMTOOL") else {
        agentd_testenv::skip("AGENTD_TEST_PROMTOOL is not set (scripts/setup/45-openapi.sh installs it)");
        return;
    };
    use std::io::Write;
    let mut child = std::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run promtool");
    child.stdin.take().expect("stdin").write_all(text.as_bytes()).expect("write");
    let out = child.wait_with_output().expect("promtool");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "promtool check metrics:\n{said}\n{text}");
}

#[test]
fn metrics_count_what_happened_and_pass_promtool() {
    let daemon = Daemon::start("");
    let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs_f64();
    let usage = |input: u64, cost: f64| json!({"input_tokens": input, "output_tokens": 10, "cache_read_tokens": 5, "cache_write_tokens": 1, "cost_usd": cost});
    // Two steps with usage, then success.
    let done = json!({
        "id": "m-done", "instructions": "x", "computer": {"provider": "mock", "scene": "blank"},
        "model": {"provider": "scripted", "script": {"turns": [
            {"actions": [{"type": "move", "x": 5, "y": 5}], "usage": usage(1000, 0.25)},
            {"actions": [{"type": "move", "x": 6, "y": 6}], "usage": usage(500, 0.125)},
            {"complete": {"success": true, "summary": "moved"}}
        ]}}
    });
    // Out of steps.
    let long = json!({
        "id": "m-long", "instructions": "x", "computer": {"provider": "mock", "scene": "blank"},
        "model": {"provider": "scripted", "script": {"turns": [
            {"actions": [{"type": "move", "x": 5, "y": 5}]}, {"actions": [{"type": "move", "x": 6, "y": 6}]},
            {"complete": {"success": true, "summary": "late"}}
        ]}},
        "limits": {"max_steps": 1}
    });
    // Labels no worker here has: queued until cancelled through the API.
    let unclaimed = json!({
        "id": "m-unclaimed", "instructions": "x", "labels": {"gpu": "yes"},
        "computer": {"provider": "mock", "scene": "blank"},
        "model": {"provider": "scripted", "script": {"turns": [{"complete": {"success": true, "summary": "x"}}]}}
    });
    for task in [&done, &long, &unclaimed] {
        assert_eq!(submit(&daemon, task), 201);
    }
    wait_state(&daemon, "m-done", "succeeded");
    wait_state(&daemon, "m-long", "failed");
    assert_eq!(http(&daemon.socket, "POST", "/v1/tasks/m-unclaimed/cancel", None, &[]).expect("cancel").0, 200);
    assert_eq!(http(&daemon.socket, "GET", "/v1/no-such-endpoint", None, &[]).expect("get").0, 404);
    assert_eq!(http(&daemon.socket, "GET", "/v1/tasks/no-such-task", None, &[]).expect("get").0, 404);

    let (text, samples) = scrape(&daemon);
    let get = |series: &str| samples.get(series).copied().unwrap_or_else(|| panic!("{series} missing:\n{text}"));
    assert!(samples.keys().any(|s| s.starts_with("agentd_build_info{version=\"") && samples[s] == 1.0), "{text}");
    assert!(text.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION"))), "{text}");

    // Tokens and cost of the model calls, by provider and model.
    let model = "provider=\"scripted\",model=\"script\"";
    assert_eq!(get(&format!("agentd_model_tokens_total{{{model},kind=\"input\"}}")), 1500.0);
    assert_eq!(get(&format!("agentd_model_tokens_total{{{model},kind=\"cache_read\"}}")), 10.0);
    assert_eq!(get(&format!("agentd_model_cost_usd_total{{{model}}}")), 0.375);

    // Outcomes by state and reason: by the workers, and by the API's cancel.
    let finished = |state: &str, reason: &str| {
        get(&format!("agentd_tasks_finished_total{{state=\"{state}\",reason=\"{reason}\"}}"))
    };
    assert_eq!(finished("succeeded", "completed"), 1.0);
    assert_eq!(finished("failed", "max_steps"), 1.0);
    assert_eq!(finished("cancelled", "cancelled"), 1.0);
    assert_eq!(finished("failed", "rejected"), 0.0, "every outcome is there from the start");
    assert_eq!(get("agentd_tasks_started_total"), 2.0);

    // API requests by route template, never by raw path.
    assert_eq!(get("agentd_api_requests_total{method=\"POST\",route=\"/v1/tasks\",status=\"201\"}"), 3.0);
    assert_eq!(get("agentd_api_requests_total{method=\"POST\",route=\"/v1/tasks/{id}/cancel\",status=\"200\"}"), 1.0);
    assert_eq!(get("agentd_api_requests_total{method=\"GET\",route=\"/v1/tasks/{id}\",status=\"404\"}"), 1.0);
    assert!(get("agentd_api_requests_total{method=\"GET\",route=\"/v1/tasks/{id}\",status=\"200\"}") >= 2.0);
    assert!(get("agentd_api_requests_total{method=\"GET\",route=\"unmatched\",status=\"404\"}") >= 1.0);
    assert!(!text.contains("route=\"/v1/tasks/m-"), "a raw path became a label:\n{text}");

    // Process metrics, read from /proc.
    if cfg!(target_os = "linux") {
        let start = get("process_start_time_seconds");
        assert!(start <= started + 1.0 && start > started - 120.0, "started at {start}, test at {started}");
        assert!(get("process_resident_memory_bytes") > 1_000_000.0);
        assert!(get("process_virtual_memory_bytes") >= get("process_resident_memory_bytes"));
        assert!(get("process_open_fds") >= 3.0 && get("process_open_fds") <= get("process_max_fds"));
        assert!(get("process_cpu_seconds_total") > 0.0);
    }
    // The names that were there before are still there.
    for name in [
        "agentd_tasks{state=\"queued\"}",
        "agentd_queue_depth",
        "agentd_lease_losses_total",
        "agentd_step_duration_seconds_count",
    ] {
        get(name);
    }
    promtool_check(&text);
}

#[test]
fn livez_needs_no_token_and_healthz_is_readiness() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let dir = tempfile::tempdir().expect("tempdir");
    let token = "0123456789abcdef0123456789abcdef";
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{token}\n")).expect("token");
    // A `command` tool that says it started, then holds its step until the test releases it: the daemon
    // stays in its stopping state for as long as the test needs, whatever the machine's speed.
    let started = dir.path().join("started");
    let release = dir.path().join("release");
    let hold = format!(
        "[worker]\nshutdown_grace_secs = 60\n\n[tools.hold]\ndescription = \"Holds the step.\"\n\
         parameters = {{ type = \"object\" }}\nkind = \"command\"\ntimeout_secs = 60\n\
         command = [\"/bin/sh\", \"-c\", {:?}]\n",
        format!(
            "read -r _; touch '{}'; while [ ! -e '{}' ]; do sleep 0.02; done; echo '{{\"ok\": true}}'",
            started.display(),
            release.display()
        )
    );
    let mut daemon = Daemon::start_with_api(
        &format!("listen = \"127.0.0.1:{port}\"\ntoken_file = {:?}\n", token_file.display().to_string()),
        &hold,
    );
    let tcp = std::path::PathBuf::from(format!("127.0.0.1:{port}"));
    let host = format!("127.0.0.1:{port}");
    let bearer = format!("Bearer {token}");

    // A liveness probe sends no token and names the address it dialled (a pod IP, say).
    for headers in [vec![("host", host.as_str())], vec![("host", "10.1.2.3:8787")]] {
        let (status, body) = http(&tcp, "GET", "/livez", None, &headers).expect("livez");
        assert_eq!((status, body.as_str()), (200, r#"{"status":"ok"}"#));
    }
    // Everything else still needs the token and our Host, /healthz included.
    assert_eq!(http(&tcp, "GET", "/healthz", None, &[("host", &host)]).expect("healthz").0, 401);
    assert_eq!(http(&tcp, "GET", "/metrics", None, &[("host", &host)]).expect("metrics").0, 401);
    assert_eq!(http(&tcp, "GET", "/livez/x", None, &[("host", &host)]).expect("livez/x").0, 401);
    let (status, body) =
        http(&tcp, "GET", "/healthz", None, &[("host", &host), ("authorization", &bearer)]).expect("ok");
    assert_eq!(status, 200, "{body}");
    let health: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(health["reasons"], json!([]), "{health}");

    // While it stops (a running task finishing its step), the daemon is alive but not ready.
    let held = json!({
        "id": "m-held", "instructions": "x", "computer": {"provider": "mock", "scene": "blank"},
        "tools": [{"use": "hold"}],
        "model": {"provider": "scripted", "script": {"turns": [
            {"calls": [{"name": "hold", "arguments": {}}]},
            {"complete": {"success": true, "summary": "held"}}
        ]}}
    });
    assert_eq!(submit(&daemon, &held), 201);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !started.exists() {
        assert!(Instant::now() < deadline, "the hold tool never started; log:\n{}", daemon.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    daemon.signal(libc::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(10);
    let (status, body) = loop {
        let (status, body) = http(&daemon.socket, "GET", "/healthz", None, &[]).expect("healthz while stopping");
        if status != 200 || Instant::now() > deadline {
            break (status, body);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status, 503, "{body}");
    let health: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(health["stopping"], true, "{health}");
    assert!(
        health["reasons"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r.as_str().is_some_and(|r| r.starts_with("stopping")))),
        "{health}"
    );
    assert_eq!(http(&daemon.socket, "GET", "/livez", None, &[]).expect("livez while stopping").0, 200);
    std::fs::write(&release, "").expect("release the hold");
    assert_eq!(daemon.wait(), Some(0), "{}", daemon.log());
}
