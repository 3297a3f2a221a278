//! The real `agentd serve` on a temp dir, driven through the real CLI and the raw HTTP API: submit, wait,
//! status, list, events (SSE, resumable), cancel, approve/reject, idempotent ids, bad input (400/413 and
//! exit 2), the TCP guard (401/403), unreachable daemons (exit 3), and SIGTERM mid-task. Every test that runs a
//! daemon runs on each queue backend.

use std::time::Duration;

use crate::support::{Agentd, Backend, Daemon, fixtures, http, repo};

// Each test twice, named for its queue: `daemon::sqlite::NAME` and `daemon::postgres::NAME`, the latter in a
// schema of its own on the server at `AGENTD_TEST_POSTGRES_URL` (it says it skips when that is not set).
on_both_backends!(
    submit_wait_status_list_and_events,
    ids_are_idempotent_and_conflicts_are_refused,
    a_failed_task_exits_1_and_a_cancelled_one_too,
    a_task_waiting_for_a_human_is_approved_or_rejected,
    a_rejected_task_fails_with_reason_rejected,
    the_malformed_corpus_is_refused_by_the_api_and_the_cli,
    the_tcp_listener_requires_a_token_and_our_host,
    the_socket_is_group_only_and_config_check_reaches_everything,
    sigterm_mid_task_hands_it_back_and_a_restart_finishes_it,
    a_second_signal_exits_at_once,
);

fn ask_task(dir: &std::path::Path) -> std::path::PathBuf {
    let task = serde_json::json!({
        "instructions": "sign in, with permission",
        "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "scripted", "script": {"turns": [
            {"say": "asking first", "ask_human": "may I type alice's name?", "actions": [
                {"type": "click", "x": 640, "y": 370}, {"type": "type", "text": "alice"}]},
            {"complete": {"success": true, "summary": "typed the name"}}
        ]}}
    });
    let path = dir.join("ask.json");
    std::fs::write(&path, task.to_string()).expect("write task");
    path
}

fn slow_task(dir: &std::path::Path, id: &str, steps: usize, wait_ms: u64) -> std::path::PathBuf {
    let turns: Vec<_> = (0..steps)
        .map(|i| serde_json::json!({"actions": [{"type": "wait", "duration_ms": wait_ms}, {"type": "move", "x": 10 + i, "y": 10}]}))
        .chain(std::iter::once(serde_json::json!({"complete": {"success": true, "summary": "walked"}})))
        .collect();
    let task = serde_json::json!({
        "id": id,
        "instructions": "walk the pointer slowly",
        "computer": {"provider": "mock", "scene": "blank"},
        "model": {"provider": "scripted", "script": {"turns": turns}},
        "limits": {"max_steps": steps + 5}
    });
    let path = dir.join(format!("{id}.json"));
    std::fs::write(&path, task.to_string()).expect("write task");
    path
}

fn submit_wait_status_list_and_events(backend: Backend) {
    let daemon = Daemon::start_on(backend, "", "");
    let run = daemon.cli(&["submit", "config/tasks/mock-login.json", "--wait"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, daemon.log());
    let id = run.stdout.trim().to_string();
    assert!(run.stderr.contains("step   2  click(471,434)"), "{}", run.stderr);
    assert!(run.stderr.contains("✓ succeeded: Logged in as alice and opened Reports"), "{}", run.stderr);

    let status = daemon.cli(&["status", &id, "--json"]);
    assert_eq!(status.code, 0, "{}", status.stderr);
    let doc = status.json();
    assert_eq!(doc["state"], "succeeded");
    assert_eq!(doc["attempt"], 1);
    assert_eq!(doc["steps"].as_array().map(Vec::len), Some(4));
    assert_eq!(doc["computer_state"]["screen"], "reports");
    assert_eq!(doc["task"]["model"]["provider"], "scripted");
    assert!(doc["task"]["model"]["script"]["turns"].is_array(), "submit inlines the script file");
    for key in ["created_at", "started_at", "finished_at", "worker", "usage", "outcome"] {
        assert!(!doc[key].is_null(), "status lacks {key}");
    }

    let list = daemon.cli(&["list", "--json", "--state", "succeeded"]);
    assert_eq!(list.code, 0, "{}", list.stderr);
    assert_eq!(list.json()["tasks"][0]["id"], id.as_str());

    let events = daemon.cli(&["events", &id, "--json"]);
    assert_eq!(events.code, 0, "{}", events.stderr);
    let events: Vec<serde_json::Value> =
        events.stdout.lines().map(|l| serde_json::from_str(l).expect("JSON line")).collect();
    let seqs: Vec<u64> = events.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "seq is 1, 2, 3, … with no gaps");
    assert_eq!(events[0]["type"], "task_queued");
    assert_eq!(events[1]["type"], "task_started");
    let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(types.iter().filter(|t| **t == "step_finished").count(), 4);
    assert_eq!(types.iter().filter(|t| **t == "task_finished").count(), 1);
    assert!(events.iter().all(|e| e["task_id"] == id.as_str() && e["ts"].is_string()));

    // SSE resumes after Last-Event-ID.
    let (code, body) =
        http(&daemon.socket, "GET", &format!("/v1/tasks/{id}/events"), None, &[("last-event-id", "5")]).expect("sse");
    assert_eq!(code, 200);
    let first_id = body.lines().find_map(|l| l.strip_prefix("id:")).map(|v| v.trim().to_string());
    assert_eq!(first_id.as_deref(), Some("6"), "{body}");
    assert!(body.contains("event: task_finished"));

    // The screenshot of a step is served by the API.
    let (code, png) =
        http(&daemon.socket, "GET", &format!("/v1/tasks/{id}/steps/1/screenshot"), None, &[]).expect("png");
    assert_eq!(code, 200);
    assert!(png.contains("PNG"));
    let (code, _) =
        http(&daemon.socket, "GET", &format!("/v1/tasks/{id}/steps/99/screenshot"), None, &[]).expect("png");
    assert_eq!(code, 404);
}

fn ids_are_idempotent_and_conflicts_are_refused(backend: Backend) {
    let daemon = Daemon::start_on(backend, "", "");
    let dir = daemon.agentd.dir.path().to_path_buf();
    let task = slow_task(&dir, "same-id", 1, 1);
    let first = daemon.cli(&["submit", task.to_str().expect("path")]);
    let second = daemon.cli(&["submit", task.to_str().expect("path")]);
    assert_eq!((first.code, second.code), (0, 0), "{} {}", first.stderr, second.stderr);
    assert_eq!(first.stdout.trim(), "same-id");
    assert_eq!(second.stdout.trim(), "same-id");
    assert!(second.stderr.contains("already submitted"), "{}", second.stderr);
    let other = slow_task(&dir, "same-id", 2, 1);
    let conflict = daemon.cli(&["submit", other.to_str().expect("path")]);
    assert_eq!(conflict.code, 2, "{}", conflict.stderr);
    assert!(conflict.stderr.contains("different body"), "{}", conflict.stderr);
    let (code, body) =
        http(&daemon.socket, "POST", "/v1/tasks", Some(&std::fs::read(&other).expect("read")), &[]).expect("post");
    assert_eq!(code, 409, "{body}");
    assert!(body.contains("\"code\":\"conflict\""), "{body}");
    let relative =
        serde_json::json!({"instructions": "x", "model": {"provider": "scripted", "script": "scripts/a.json"}});
    let (code, body) =
        http(&daemon.socket, "POST", "/v1/tasks", Some(relative.to_string().as_bytes()), &[]).expect("post");
    assert_eq!(code, 400, "a relative script path is refused by the daemon: {body}");
    assert!(body.contains("\"field\":\"model.script\""), "{body}");
}

fn a_failed_task_exits_1_and_a_cancelled_one_too(backend: Backend) {
    let daemon = Daemon::start_on(backend, "", "");
    let dir = daemon.agentd.dir.path().to_path_buf();
    let failing = dir.join("fail.json");
    std::fs::write(
        &failing,
        r#"{"instructions": "x", "model": {"provider": "scripted", "script": {"turns": [{"complete": {"success": false, "summary": "nope"}}]}}}"#,
    )
    .expect("write");
    let run = daemon.cli(&["submit", failing.to_str().expect("path"), "--wait"]);
    assert_eq!(run.code, 1, "{}", run.stderr);

    let slow = slow_task(&dir, "to-cancel", 200, 50);
    let submitted = daemon.cli(&["submit", slow.to_str().expect("path")]);
    assert_eq!(submitted.code, 0, "{}", submitted.stderr);
    std::thread::sleep(Duration::from_millis(400));
    let cancel = daemon.cli(&["cancel", "to-cancel"]);
    assert_eq!(cancel.code, 0, "{}", cancel.stderr);
    let task = daemon.wait_terminal("to-cancel", Duration::from_secs(20));
    assert_eq!(task["state"], "cancelled", "{task}");
    assert_eq!(task["outcome"]["reason"], "cancelled");
    let steps = task["steps"].as_array().map_or(0, Vec::len);
    assert!(steps > 0 && steps < 200, "stopped part way: {steps} steps");
    let status = daemon.cli(&["status", "to-cancel"]);
    assert_eq!(status.code, 1, "a cancelled task is not a success");
    let again = daemon.cli(&["cancel", "to-cancel"]);
    assert_eq!(again.code, 0, "already finished is not a failure: {}", again.stderr);
    assert!(again.stderr.contains("already finished: cancelled"), "{}", again.stderr);
}

fn a_task_waiting_for_a_human_is_approved_or_rejected(backend: Backend) {
    let daemon = Daemon::start_on(backend, "", "[worker]\nconcurrency = 1\n");
    let dir = daemon.agentd.dir.path().to_path_buf();
    let task = ask_task(&dir);
    let id = daemon.cli(&["submit", task.to_str().expect("path")]).stdout.trim().to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while daemon.task(&id)["state"] != "waiting_for_human" {
        assert!(std::time::Instant::now() < deadline, "never waited: {}", daemon.task(&id));
        std::thread::sleep(Duration::from_millis(50));
    }
    let waiting = daemon.task(&id);
    assert_eq!(waiting["waiting_reason"], "may I type alice's name?");
    // It holds no worker: another task runs meanwhile on the single slot.
    let other = daemon.cli(&["submit", "config/tasks/mock-login.json", "--wait"]);
    assert_eq!(other.code, 0, "{}", other.stderr);

    assert_eq!(daemon.cli(&["approve", &id]).code, 0);
    let done = daemon.wait_terminal(&id, Duration::from_secs(20));
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["computer_state"]["fields"]["username"], "alice");
    assert_eq!(done["attempt"], 1);
    assert_eq!(done["steps"][0]["approval"]["approved"], true);
    assert_eq!(daemon.cli(&["approve", &id]).code, 2, "nothing to approve any more");
}

fn a_rejected_task_fails_with_reason_rejected(backend: Backend) {
    let daemon = Daemon::start_on(backend, "", "");
    let task = ask_task(daemon.agentd.dir.path());
    let id = daemon.cli(&["submit", task.to_str().expect("path")]).stdout.trim().to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while daemon.task(&id)["state"] != "waiting_for_human" {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(50));
    }
    let reject = daemon.cli(&["reject", &id, "--reason", "not today"]);
    assert_eq!(reject.code, 0, "{}", reject.stderr);
    let task = daemon.task(&id);
    assert_eq!(task["state"], "failed");
    assert_eq!(task["outcome"]["reason"], "rejected");
    assert!(task["outcome"]["summary"].as_str().unwrap_or_default().contains("not today"));
    assert_eq!(task["computer_state"], serde_json::Value::Null);
}

fn the_malformed_corpus_is_refused_by_the_api_and_the_cli(backend: Backend) {
    let daemon = Daemon::start_on(backend, "max_body_bytes = 65536", "");
    let expected: std::collections::BTreeMap<String, Vec<String>> = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("bad-tasks/expected.json")).expect("expected.json"),
    )
    .expect("valid");
    let mut failures = Vec::new();
    for (file, wants) in &expected {
        let path = fixtures().join("bad-tasks").join(file);
        let run = daemon.cli(&["submit", path.to_str().expect("path")]);
        if run.code != 2 || !wants.iter().all(|w| run.stderr.contains(w.as_str())) {
            failures.push(format!("CLI {file}: exit {}: {}", run.code, run.stderr.trim()));
        }
        // The raw body straight to the API (cases that need the task file's directory are CLI-only).
        if file.starts_with("script-file") {
            continue;
        }
        let body = std::fs::read(&path).expect("read case");
        let (code, reply) = http(&daemon.socket, "POST", "/v1/tasks", Some(&body), &[]).expect("post");
        let reply: serde_json::Value = serde_json::from_str(&reply).unwrap_or_default();
        let field_ok = wants.iter().filter(|w| w.starts_with('`')).all(|w| {
            let field = w.trim_matches('`');
            reply["error"]["field"].as_str().is_some_and(|f| f.starts_with(field.trim_end_matches('`')))
        });
        if code != 400 || reply["error"]["code"] != "invalid_task" || !field_ok {
            failures.push(format!("API {file}: {code} {reply}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    let huge = format!("{{\"instructions\": \"{}\"}}", "x".repeat(70_000));
    let (code, reply) = http(&daemon.socket, "POST", "/v1/tasks", Some(huge.as_bytes()), &[]).expect("post");
    assert_eq!(code, 413, "{reply}");
    assert!(reply.contains("payload_too_large"), "{reply}");
    let (code, _) = http(&daemon.socket, "GET", "/v1/tasks?state=sleeping", None, &[]).expect("get");
    assert_eq!(code, 400);
    let (code, _) = http(&daemon.socket, "GET", "/v1/nothing", None, &[]).expect("get");
    assert_eq!(code, 404);
    let (code, health) = http(&daemon.socket, "GET", "/healthz", None, &[]).expect("health");
    assert_eq!(code, 200, "still healthy: {health}");
    let list = daemon.cli(&["list", "--json"]);
    assert_eq!(list.json()["tasks"].as_array().map(Vec::len), Some(0), "nothing was queued");
}

fn the_tcp_listener_requires_a_token_and_our_host(backend: Backend) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let dir = tempfile::tempdir().expect("tempdir");
    let token = "0123456789abcdef0123456789abcdef";
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{token}\n")).expect("token");
    let daemon = Daemon::start_on(
        backend,
        &format!("listen = \"127.0.0.1:{port}\"\ntoken_file = {:?}\n", token_file.display().to_string()),
        "",
    );
    let tcp = std::path::PathBuf::from(format!("127.0.0.1:{port}"));
    let host = format!("127.0.0.1:{port}");
    let bearer = format!("Bearer {token}");
    let wrong = format!("Bearer {}X", &token[..token.len() - 1]);
    let (code, _) = http(&tcp, "GET", "/v1/tasks", None, &[("host", &host)]).expect("no token");
    assert_eq!(code, 401);
    let (code, _) = http(&tcp, "GET", "/v1/tasks", None, &[("host", &host), ("authorization", &wrong)]).expect("wrong");
    assert_eq!(code, 401);
    let (code, _) =
        http(&tcp, "GET", "/v1/tasks", None, &[("host", "evil.example"), ("authorization", &bearer)]).expect("host");
    assert_eq!(code, 403);
    let (code, _) = http(&tcp, "GET", &format!("/v1/tasks?token={token}"), None, &[("host", &host)]).expect("query");
    assert_eq!(code, 400);
    let (code, body) =
        http(&tcp, "GET", "/v1/tasks", None, &[("host", &host), ("authorization", &bearer)]).expect("ok");
    assert_eq!(code, 200, "{body}");
    // The CLI over TCP with the token from the environment.
    let mut cmd = daemon.agentd.command();
    let out = cmd
        .args(["--url", &format!("http://127.0.0.1:{port}"), "submit", "config/tasks/mock-login.json", "--wait"])
        .env("AGENTD_TOKEN", token)
        .output()
        .expect("cli");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let log = daemon.log();
    assert!(!log.contains(token), "the token never reaches the log");

    // A TCP listener without a token never starts.
    let bad = Agentd::with_config(&format!("[api]\nlisten = \"127.0.0.1:{port}\"\n"));
    let check = bad.run(&["config", "check"]);
    assert_eq!(check.code, 2, "{}", check.stderr);
    assert!(check.stderr.contains("api.token_file"), "{}", check.stderr);
}

#[test]
fn an_unreachable_daemon_exits_3_and_says_where_it_looked() {
    let agentd = Agentd::new();
    let socket = agentd.dir.path().join("nobody.sock");
    let run = agentd.run(&["--socket", socket.to_str().expect("path"), "status", "x"]);
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(run.stderr.contains(&format!("unix:{}", socket.display())), "{}", run.stderr);
    let run = agentd.run(&["--url", "http://127.0.0.1:9", "list"]);
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(run.stderr.contains("http://127.0.0.1:9"), "{}", run.stderr);
}

fn the_socket_is_group_only_and_config_check_reaches_everything(backend: Backend) {
    use std::os::unix::fs::PermissionsExt;
    // The usual umask, which let every file be world-readable before: the processes this test starts inherit it.
    // SAFETY: only changes this process's file-creation mask.
    unsafe { libc::umask(0o022) };
    let daemon = Daemon::start_on(backend, "", "");
    let mode = std::fs::metadata(&daemon.socket).expect("socket").permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);
    let check = daemon.cli(&["config", "check", "--json"]);
    assert_eq!(check.code, 0, "{}", check.stderr);
    assert_eq!(check.json()["ok"], true);
    let (code, metrics) = http(&daemon.socket, "GET", "/metrics", None, &[]).expect("metrics");
    assert_eq!(code, 200);
    for name in [
        "agentd_tasks{state=\"queued\"}",
        "agentd_step_duration_seconds_bucket",
        "agentd_model_errors_total",
        "agentd_action_errors_total",
    ] {
        assert!(metrics.contains(name), "{name} missing:\n{metrics}");
    }
}

fn sigterm_mid_task_hands_it_back_and_a_restart_finishes_it(backend: Backend) {
    let mut daemon = Daemon::start_on(backend, "", "[worker]\nshutdown_grace_secs = 10\n");
    let dir = daemon.agentd.dir.path().to_path_buf();
    let task = slow_task(&dir, "graceful", 30, 60);
    assert_eq!(daemon.cli(&["submit", task.to_str().expect("path")]).code, 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while daemon.task("graceful")["steps"].as_array().map_or(0, Vec::len) < 3 {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    let started = std::time::Instant::now();
    daemon.signal(libc::SIGTERM);
    let code = daemon.wait();
    assert_eq!(code, Some(0), "{}", daemon.log());
    assert!(started.elapsed() < Duration::from_secs(10), "exited within the grace period");
    assert!(!daemon.socket.exists(), "the socket is removed on exit");
    // Started again, the task finishes, in the same attempt, with every step exactly once.
    daemon.spawn();
    let done = daemon.wait_terminal("graceful", Duration::from_secs(60));
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(done["attempt"], 1, "a graceful hand-back does not use an attempt");
    let moves = done["computer_state"]["actions_received"].as_u64().unwrap_or(0);
    assert_eq!(moves, 60, "30 waits and 30 moves, none twice: {}", done["computer_state"]);
    let _ = repo();
}

fn a_second_signal_exits_at_once(backend: Backend) {
    let mut daemon = Daemon::start_on(backend, "", "[worker]\nshutdown_grace_secs = 60\n");
    let dir = daemon.agentd.dir.path().to_path_buf();
    // One step that waits 30 s: the first SIGTERM lets it run to its end, so only the second can stop it.
    let task = slow_task(&dir, "stubborn", 1, 30_000);
    assert_eq!(daemon.cli(&["submit", task.to_str().expect("path")]).code, 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while daemon.task("stubborn")["state"] != "running" {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    daemon.signal(libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(500));
    assert!(daemon.child.as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_none()), "still finishing the step");
    let second = std::time::Instant::now();
    daemon.signal(libc::SIGTERM);
    let code = daemon.wait();
    assert_eq!(code, Some(130), "{}", daemon.log());
    assert!(second.elapsed() < Duration::from_secs(3), "took {:?} after the second signal", second.elapsed());
}

#[test]
fn an_emptied_queue_database_is_refused_naming_the_file() {
    let agentd = Agentd::new();
    let check = agentd.run(&["config", "check"]);
    assert_eq!(check.code, 0, "{}", check.stderr);
    let db = agentd.data_dir().join("queue.db");
    assert!(db.exists());
    std::fs::File::create(&db).expect("truncate"); // 0 bytes
    for args in [&["config", "check"][..], &["serve"][..]] {
        let run = agentd.run(args);
        assert_eq!(run.code, 3, "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains(&db.display().to_string()) && run.stderr.contains("holds no agentd queue"),
            "{args:?}: {}",
            run.stderr
        );
    }
}

#[test]
fn files_under_data_dir_are_private_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    // The usual umask, which let every file be world-readable before: the processes this test starts inherit it.
    // SAFETY: only changes this process's file-creation mask.
    unsafe { libc::umask(0o022) };
    let daemon = Daemon::start("");
    let run = daemon.cli(&["submit", "config/tasks/mock-login.json", "--wait"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, daemon.log());
    // `agentd run` on the same data dir: its record under runs/.
    let local = daemon.agentd.run(&["run", "config/tasks/mock-login.json"]);
    assert_eq!(local.code, 0, "{}", local.stderr);
    let data = daemon.agentd.data_dir();
    let files = crate::support::files_under(&data);
    for kind in ["queue.db", "queue.db-wal", "/artifacts/tasks/", "/runs/", "/mock/"] {
        assert!(files.iter().any(|f| f.display().to_string().contains(kind)), "no {kind} in {files:#?}");
    }
    let mut open = Vec::new();
    for file in &files {
        let mode = std::fs::metadata(file).expect("stat").permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            open.push(format!("{:o} {}", mode, file.display()));
        }
        let mut dir = file.parent();
        while let Some(d) = dir.filter(|d| d.starts_with(&data)) {
            let mode = std::fs::metadata(d).expect("stat").permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                open.push(format!("{:o} {}/", mode, d.display()));
            }
            dir = d.parent();
        }
    }
    open.sort();
    open.dedup();
    assert!(open.is_empty(), "readable by others (umask {:o}): {open:#?}", current_umask());
}

fn current_umask() -> u32 {
    // SAFETY: umask is set and at once restored; it only changes this process's file-creation mask.
    unsafe {
        let mask = libc::umask(0o022);
        libc::umask(mask);
        mask
    }
}

/// Sends `request` (raw bytes) to the daemon's socket, or to TCP when `tcp` is given, and reads until the
/// server closes the connection. Err when it is still open after `within` (the server never closed it).
fn raw(daemon: &Daemon, tcp: Option<&str>, request: &[u8], within: Duration) -> std::io::Result<String> {
    use std::io::Write;
    let raw = match tcp {
        Some(address) => {
            let mut stream = std::net::TcpStream::connect(address)?;
            stream.write_all(request)?;
            read_until_closed(stream, within, |s, t| s.set_read_timeout(t))?
        }
        None => {
            let mut stream = std::os::unix::net::UnixStream::connect(&daemon.socket)?;
            stream.write_all(request)?;
            read_until_closed(stream, within, |s, t| s.set_read_timeout(t))?
        }
    };
    Ok(String::from_utf8_lossy(&raw).into_owned())
}

/// Reads until end of stream; Err(TimedOut) if that takes longer than `within` in all (a server that keeps
/// sending keep-alives never gets there).
fn read_until_closed<S: std::io::Read>(
    mut stream: S,
    within: Duration,
    set_timeout: impl Fn(&S, Option<Duration>) -> std::io::Result<()>,
) -> std::io::Result<Vec<u8>> {
    let deadline = std::time::Instant::now() + within;
    let mut out = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "still open"));
        }
        set_timeout(&stream, Some(left))?;
        match stream.read(&mut chunk)? {
            0 => return Ok(out),
            n => out.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The status code and the JSON body of a raw response (`Value::Null` when the body is not JSON).
fn response(raw: &str) -> (u16, serde_json::Value) {
    let status = raw.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    (status, serde_json::from_str(body).unwrap_or_default())
}

/// A daemon with a TCP listener too (and `api` lines); the directory of its token file, the address, the token.
fn tcp_daemon(api: &str) -> (Daemon, tempfile::TempDir, String, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let dir = tempfile::tempdir().expect("tempdir");
    let token = "0123456789abcdef0123456789abcdef";
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, token).expect("token");
    let daemon = Daemon::start_with_api(
        &format!("listen = \"127.0.0.1:{port}\"\ntoken_file = {:?}\n{api}", token_file.display().to_string()),
        "",
    );
    (daemon, dir, format!("127.0.0.1:{port}"), token.to_string())
}

#[test]
fn idle_and_slow_connections_are_closed_and_oversized_bodies_refused_at_once() {
    let (daemon, _token_dir, tcp, token) = tcp_daemon("header_timeout_secs = 1\nbody_timeout_secs = 1\n");
    let guard = Duration::from_secs(30);
    for listener in [None, Some(tcp.as_str())] {
        // A connection that never sends a byte, and one that stops in the middle of its request head.
        let idle = raw(&daemon, listener, b"", guard);
        assert!(idle.is_ok(), "{listener:?}: an idle connection stays open: {idle:?}");
        let half_head = raw(&daemon, listener, b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nx-slow: ", guard);
        assert!(half_head.is_ok(), "{listener:?}: a half-sent head stays open: {half_head:?}");
        // A body that stops part way: 408 in the envelope.
        let auth = format!("host: {tcp}\r\nauthorization: Bearer {token}\r\n");
        let half_body = format!("POST /v1/tasks HTTP/1.1\r\n{auth}content-length: 100\r\n\r\n{{\"instr");
        let reply = raw(&daemon, listener, half_body.as_bytes(), guard).expect("a half-sent body is answered");
        let (code, body) = response(&reply);
        assert_eq!((code, &body["error"]["code"]), (408, &serde_json::json!("request_timeout")), "{reply}");
        // A declared length past api.max_body_bytes: 413 at once, without waiting for the body.
        let huge = format!("POST /v1/tasks HTTP/1.1\r\n{auth}content-length: 10000000000\r\n\r\n{{}}");
        let reply = raw(&daemon, listener, huge.as_bytes(), guard).expect("a huge declared body is answered");
        let (code, body) = response(&reply);
        assert_eq!((code, &body["error"]["code"]), (413, &serde_json::json!("payload_too_large")), "{reply}");
        // A keep-alive connection is closed once it idles after its response.
        let keep_alive = format!("GET /healthz HTTP/1.1\r\n{auth}\r\n");
        let reply = raw(&daemon, listener, keep_alive.as_bytes(), guard).expect("an idle keep-alive is closed");
        assert_eq!(response(&reply).0, 200, "{reply}");
    }
    let (code, health) = http(&daemon.socket, "GET", "/healthz", None, &[]).expect("health");
    assert_eq!(code, 200, "{health}");
    // An event stream is not idle: it follows a task that runs for several header timeouts to its end.
    let task = slow_task(daemon.agentd.dir.path(), "long-stream", 10, 300);
    assert_eq!(daemon.cli(&["submit", task.to_str().expect("path")]).code, 0);
    let follow = b"GET /v1/tasks/long-stream/events HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n";
    let stream = raw(&daemon, None, follow, Duration::from_secs(60)).expect("the stream ends with the task");
    assert!(stream.contains("event: task_finished"), "{stream}");
}

#[test]
fn connections_past_the_limit_wait_until_one_closes() {
    use std::io::{Read, Write};
    let daemon = Daemon::start_with_api("max_connections = 2\nheader_timeout_secs = 60\n", "");
    let first = std::os::unix::net::UnixStream::connect(&daemon.socket).expect("first");
    let _second = std::os::unix::net::UnixStream::connect(&daemon.socket).expect("second");
    let mut third = std::os::unix::net::UnixStream::connect(&daemon.socket).expect("third (in the backlog)");
    third.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n").expect("write");
    third.set_read_timeout(Some(Duration::from_secs(1))).expect("timeout");
    let mut byte = [0u8; 1];
    let early = third.read(&mut byte);
    assert!(
        early
            .as_ref()
            .is_err_and(|e| matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)),
        "a third connection is served while two are open: {early:?}"
    );
    drop(first);
    third.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let mut reply = Vec::new();
    third.read_to_end(&mut reply).expect("served once a connection closed");
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
}

#[test]
fn event_streams_of_finished_tasks_end_and_bad_event_ids_are_refused() {
    let daemon = Daemon::start("");
    let run = daemon.cli(&["submit", "config/tasks/mock-login.json", "--wait"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let id = run.stdout.trim().to_string();
    let events = daemon.cli(&["events", &id, "--json"]);
    let last =
        events.stdout.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?["seq"].as_u64()).max();
    let last = last.expect("the task has events");
    let guard = Duration::from_secs(30);
    let get = |path: &str, header: &str| {
        let request = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n{header}\r\n");
        raw(&daemon, None, request.as_bytes(), guard)
    };
    // Resumed after (or past) its last event, the stream of a finished task ends instead of idling forever.
    for (path, header) in [
        (format!("/v1/tasks/{id}/events"), format!("last-event-id: {last}\r\n")),
        (format!("/v1/tasks/{id}/events"), format!("last-event-id: {}\r\n", last + 10)),
        (format!("/v1/tasks/{id}/events?after={last}"), String::new()),
    ] {
        let reply = get(&path, &header).unwrap_or_else(|e| panic!("{path} {header}: the stream never ended: {e}"));
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        assert!(!reply.contains("\nid:"), "nothing is left to send: {reply}");
    }
    let reply = get(&format!("/v1/tasks/{id}/events"), &format!("last-event-id: {}\r\n", last - 1)).expect("ends");
    assert!(reply.contains(&format!("id: {last}")) && reply.contains("event: task_finished"), "{reply}");
    // A malformed id is refused, not taken for "from the start".
    for bad in ["abc", "-1", "9223372036854775808", "1.5"] {
        let reply = get(&format!("/v1/tasks/{id}/events"), &format!("last-event-id: {bad}\r\n")).expect("answered");
        let (code, body) = response(&reply);
        assert_eq!(code, 400, "{bad}: {reply}");
        assert_eq!(body["error"]["code"], "invalid_header", "{reply}");
        assert_eq!(body["error"]["field"], "Last-Event-ID", "{reply}");
        let reply = get(&format!("/v1/tasks/{id}/events?after={bad}"), "").expect("answered");
        let (code, body) = response(&reply);
        assert_eq!((code, &body["error"]["field"]), (400, &serde_json::json!("after")), "{bad}: {reply}");
    }
}

#[test]
fn every_rejection_uses_the_error_envelope_and_deleted_screenshots_are_missing() {
    let daemon = Daemon::start("");
    let run = daemon.cli(&["submit", "config/tasks/mock-login.json", "--wait"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let id = run.stdout.trim().to_string();
    for (method, path, status, code, field) in [
        ("GET", format!("/v1/tasks/{id}/steps/abc/screenshot"), 400, "invalid_path", Some("index")),
        ("GET", format!("/v1/tasks/{id}/steps/99999999999/screenshot"), 400, "invalid_path", Some("index")),
        ("GET", "/v1/tasks/%FF%FE".to_string(), 400, "invalid_path", Some("id")),
        ("GET", "/v1/tasks?limit=abc".to_string(), 400, "invalid_query", Some("limit")),
        ("GET", "/v1/tasks?bogus=1".to_string(), 400, "invalid_query", Some("bogus")),
        ("GET", format!("/v1/tasks/{id}/events?follow=maybe"), 400, "invalid_query", Some("follow")),
        ("DELETE", "/v1/tasks".to_string(), 405, "method_not_allowed", None),
        ("GET", "/v1/nothing".to_string(), 404, "not_found", None),
    ] {
        let (got, body) = http(&daemon.socket, method, &path, None, &[]).expect("request");
        let body: serde_json::Value =
            serde_json::from_str(&body).unwrap_or_else(|_| panic!("{path}: not JSON: {body}"));
        assert_eq!(got, status, "{method} {path}: {body}");
        assert_eq!(body["error"]["code"], code, "{method} {path}: {body}");
        assert!(body["error"]["message"].is_string(), "{body}");
        assert_eq!(body["error"]["field"].as_str(), field, "{method} {path}: {body}");
    }
    // A screenshot that was stored and then removed from the store is missing, not "not stored yet".
    let key = daemon.task(&id)["steps"][1]["screenshot"]["key"].as_str().expect("a key").to_string();
    std::fs::remove_file(daemon.agentd.data_dir().join("artifacts").join(&key)).expect("remove the screenshot");
    let (got, body) =
        http(&daemon.socket, "GET", &format!("/v1/tasks/{id}/steps/1/screenshot"), None, &[]).expect("get");
    assert_eq!(got, 410, "{body}");
    assert!(body.contains("\"code\":\"screenshot_missing\""), "{body}");
}
