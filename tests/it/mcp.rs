//! `agentd mcp` (and the daemon's `/mcp`) driven by the official MCP Python SDK's real client
//! (`tests/mcp/client.py`, the SDK installed by `scripts/setup/50-mcp.sh`): initialize, the tools and their
//! annotations, run_task on the mock desktop with a scripted model (a progress notification per step, the
//! outcome, the last screenshot as an image, structured output), a bad task, cancellation, and the other tools;
//! and `agentd mcp --computer` (`tests/mcp/computer_client.py`): the computer tools, the session recorded.

use std::process::{Command, Stdio};

use crate::support::{Agentd, Daemon, repo};

/// The Python with the MCP SDK, or `None` after a skip (a failure under CI).
pub(crate) fn python() -> Option<String> {
    agentd_testenv::var_or_skip(
        "AGENTD_TEST_MCP_PYTHON",
        "scripts/setup/50-mcp.sh installs the MCP Python SDK into a virtualenv and sets it to that python",
    )
}

/// Runs the task tools' client script with `args`; panics with what it saw and printed unless every check
/// passed.
fn client(python: &str, args: &[&str]) -> serde_json::Value {
    run_client(python, "tests/mcp/client.py", args)
}

/// Runs a client script of `tests/mcp/` with `args`: what it saw, or a panic with what it saw and printed
/// unless every check passed.
fn run_client(python: &str, script: &str, args: &[&str]) -> serde_json::Value {
    let script = repo().join(script);
    let child = Command::new(python)
        .arg(&script)
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the MCP client");
    let pid = child.id();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(child.wait_with_output());
    });
    // The scenario's own waits are bounded (60 s each); this bound is only for a hung interpreter.
    let output = match receiver.recv_timeout(std::time::Duration::from_secs(300)) {
        Ok(output) => output,
        Err(_) => {
            // SAFETY: a signal to our own child process, not yet reaped (its waiter has not returned).
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            receiver.recv().expect("the client's waiter")
        }
    }
    .expect("the client's output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let last = stdout.lines().last().unwrap_or_default();
    let report: serde_json::Value = serde_json::from_str(last).unwrap_or_else(|e| {
        panic!("the client printed no report ({e}); exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}", output.status)
    });
    assert!(
        output.status.success() && report["failures"].as_array().is_some_and(Vec::is_empty),
        "checks failed: {:#}\nseen: {:#}\nstderr:\n{stderr}",
        report["failures"],
        report["seen"]
    );
    report["seen"].clone()
}

#[test]
fn the_python_sdk_runs_tasks_through_agentd_mcp_local() {
    let Some(python) = python() else { return };
    let _load = crate::support::timing_sensitive();
    let agentd = Agentd::new();
    let config = agentd.dir.path().join("agentd.toml");
    let bin = env!("CARGO_BIN_EXE_agentd");
    let seen = client(&python, &["stdio", "--", bin, "--config", config.to_str().expect("utf-8"), "mcp", "--local"]);
    assert_eq!(seen["run_progress"].as_array().map(Vec::len), Some(4), "{seen:#}");
    // The same task through `agentd run` (process start included), for the overhead of run_task.
    let task = serde_json::json!({
        "instructions": "Log in as alice and open Reports",
        "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "scripted", "script": "config/scripts/mock-login.json"},
        "limits": {"max_steps": 10, "timeout_secs": 120},
    });
    let file = agentd.dir.path().join("login.json");
    std::fs::write(
        &file,
        task.to_string().replace("config/scripts", &repo().join("config/scripts").display().to_string()),
    )
    .expect("task file");
    let started = std::time::Instant::now();
    let direct = agentd.run(&["run", file.to_str().expect("utf-8")]);
    assert_eq!(direct.code, 0, "{}", direct.stderr);
    eprintln!(
        "login task (4 steps): run_task over MCP {} s (the call), agentd run {:.3} s (the process)",
        seen["run_task_seconds"],
        started.elapsed().as_secs_f64()
    );
    // The run is recorded as `agentd run` records it: `agentd show ID --local` reads it.
    let shown = agentd.run(&["show", "mcp-login-local", "--local", "--json"]);
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    assert_eq!(shown.json()["state"], "succeeded", "{}", shown.stdout);
}

/// A client script's arguments that start `agentd mcp` against `daemon`: `-- AGENTD mcp --socket SOCKET`.
fn mcp_on(daemon: &Daemon) -> Vec<String> {
    let config = daemon.agentd.dir.path().join("agentd.toml");
    let socket = daemon.socket.display().to_string();
    ["--", env!("CARGO_BIN_EXE_agentd"), "--config", &config.display().to_string(), "mcp", "--socket", &socket]
        .map(str::to_string)
        .to_vec()
}

#[test]
fn the_python_sdk_runs_tasks_through_agentd_mcp_on_the_daemon() {
    let Some(python) = python() else { return };
    let _load = crate::support::timing_sensitive();
    let daemon = Daemon::start("");
    let mut args = vec!["stdio".to_string()];
    args.extend(mcp_on(&daemon));
    let seen = client(&python, &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(seen["run_progress"].as_array().map(Vec::len), Some(4), "{seen:#}");
    // What the MCP client ran is the daemon's task like any other.
    let task = daemon.task("mcp-login-daemon");
    assert_eq!(task["steps"][0]["actions"][0]["type"], "click", "{task:#}");
    assert_eq!(daemon.task("mcp-cancel-daemon")["state"], "cancelled");
}

/// Elicitation: a task of the daemon that asks the model's question and then holds actions for approval is
/// answered inline by the person at a client that declared the capability (`tests/mcp/elicit_client.py`);
/// the answers reach the task as `answer` and `approve` would send them, and it finishes.
#[test]
fn a_question_and_an_approval_are_answered_through_elicitation() {
    let Some(python) = python() else { return };
    let _load = crate::support::timing_sensitive();
    let daemon = Daemon::start("");
    let args = mcp_on(&daemon);
    let seen = run_client(&python, "tests/mcp/elicit_client.py", &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(seen["elicitations"][0]["fields"], serde_json::json!(["answer"]), "{seen:#}");
    assert_eq!(seen["elicitations"][1]["fields"], serde_json::json!(["approve"]), "{seen:#}");
    let task = daemon.task("mcp-elicit");
    assert_eq!(task["state"], "succeeded", "{task:#}");
    let asked = task["steps"][0]["call_results"].to_string();
    assert!(asked.contains("blue"), "the answer is the question's result: {asked}");
    assert_eq!(task["steps"][1]["actions"][0]["type"], "type", "{task:#}");
    assert_eq!(task["steps"][1]["approval"]["approved"], true, "{:#}", task["steps"][1]);
}

/// The status code of one raw HTTP/1.1 request to `address` (the status line only is read).
fn status_of(address: &str, request: &str) -> u16 {
    use std::io::{BufRead, Write};
    let mut stream = std::net::TcpStream::connect(address).expect("connect to the daemon");
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30))).expect("timeout");
    stream.write_all(request.as_bytes()).expect("send the request");
    let mut line = String::new();
    std::io::BufReader::new(stream).read_line(&mut line).expect("read the status line");
    line.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or_else(|| panic!("no status in {line:?}"))
}

/// The token of the daemons [`tcp_daemon`] starts.
const TOKEN: &str = "mcp-token-0123456789abcdef0123456789";

/// A daemon listening on TCP (a free port of 127.0.0.1) with the token [`TOKEN`], `extra` sections in its
/// config and `env` in its environment; its address, and the directory of its token file (kept as long as it).
fn tcp_daemon(extra: &str, env: &[(&str, &str)]) -> (Daemon, String, tempfile::TempDir) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).expect("token");
    let daemon = Daemon::start_on_with_env(
        crate::support::Backend::Sqlite,
        &format!("listen = \"127.0.0.1:{port}\"\ntoken_file = {:?}\n", token_file.display().to_string()),
        "lease_secs = 3\nheartbeat_secs = 1\npoll_ms = 100",
        extra,
        env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    );
    (daemon, format!("127.0.0.1:{port}"), dir)
}

#[test]
fn the_python_sdk_runs_tasks_over_streamable_http_and_mcp_refuses_a_wrong_token_and_a_foreign_origin() {
    let Some(python) = python() else { return };
    let _load = crate::support::timing_sensitive();
    let (daemon, address, _token_dir) = tcp_daemon("", &[]);
    let token = TOKEN;
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let request = |auth: &str, origin: Option<&str>| {
        let origin = origin.map(|o| format!("origin: {o}\r\n")).unwrap_or_default();
        format!(
            "POST /mcp HTTP/1.1\r\nhost: {address}\r\n{auth}{origin}content-type: application/json\r\n\
             accept: application/json, text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{initialize}",
            initialize.len()
        )
    };
    let good = format!("authorization: Bearer {token}\r\n");
    assert_eq!(status_of(&address, &request("authorization: Bearer wrong-token\r\n", None)), 401);
    assert_eq!(status_of(&address, &request("", None)), 401);
    assert_eq!(status_of(&address, &request(&good, Some("http://evil.example"))), 403);
    let foreign_host = request(&good, None).replace(&format!("host: {address}"), "host: evil.example");
    assert_eq!(status_of(&address, &foreign_host), 403);
    assert_eq!(status_of(&address, &request(&good, Some(&format!("http://{address}")))), 200);
    assert_eq!(status_of(&address, &request(&good, None)), 200);
    let seen = client(&python, &["http", &format!("http://{address}/mcp"), token]);
    assert_eq!(seen["run_progress"].as_array().map(Vec::len), Some(4), "{seen:#}");
    assert_eq!(daemon.task("mcp-cancel-http")["state"], "cancelled");
}

/// A computer leased over Streamable HTTP (`lease_computer` on the daemon's `/mcp`): the session holds the
/// pool desktop — a second session's lease and a plain `POST /v1/sessions` of it are refused while it does —
/// types a secret by its placeholder, and is recorded as a task of the daemon (listed, `source: mcp`, every
/// call a step) that completes when the client releases it, the secret's value nowhere in its record.
#[test]
fn a_computer_leased_over_http_is_one_sessions_and_recorded_as_a_daemon_task() {
    let Some(python) = python() else { return };
    let _load = crate::support::timing_sensitive();
    // The login scene's password: the desktop signs alice in only when the value reached it.
    let password = "hunter2";
    let (daemon, address, _token_dir) = tcp_daemon(
        "[worker]\nallowed_env = [\"AGENTD_TEST_PORTAL_PASSWORD\"]\n\n[[desktops]]\nname = \"lab-1\"\n\
         computer = { provider = \"mock\", scene = \"login\" }\n",
        &[("AGENTD_TEST_PORTAL_PASSWORD", password)],
    );
    let url = format!("http://{address}/mcp");
    let seen = run_client(&python, "tests/mcp/lease_client.py", &[&url, TOKEN, "lab-1"]);
    let id = seen["task_id"].as_str().unwrap_or_else(|| panic!("no task id: {seen:#}")).to_string();

    let task = daemon.wait_terminal(&id, std::time::Duration::from_secs(60));
    assert_eq!(task["state"], "succeeded", "{task:#}");
    assert_eq!(task["task"]["metadata"]["source"], "mcp", "{:#}", task["task"]);
    assert_eq!(task["task"]["instructions"], "log in as alice");
    let actions: Vec<String> = task["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["actions"].as_array().and_then(|a| a.first()).and_then(|a| a["type"].as_str()))
        .map(str::to_string)
        .collect();
    // The first screenshot, 12 clicks on the unchanged background (no guard stops a session), the login.
    let expected: Vec<&str> = std::iter::once("screenshot")
        .chain(std::iter::repeat_n("click", 12))
        .chain(["click", "type", "keypress", "type", "keypress", "click"])
        .collect();
    assert_eq!(actions, expected, "{task:#}");
    let typed = &task["steps"][16]["actions"][0]["text"];
    assert_eq!(typed, "<secret:password>", "the record keeps the placeholder");
    let listed = daemon.cli(&["list", "--json"]);
    assert!(listed.stdout.contains(&id), "the session is listed: {}", listed.stdout);
    let everything = format!("{task}{}{}", daemon.queue_dump(), daemon.log());
    assert!(!everything.contains(password), "the secret's value reached the record, the queue or the log");
    // The mock desktop signed alice in (the secret reached it as its value) and keeps the placeholder.
    let state = &task["computer_state"];
    assert!(state["screens_visited"].as_array().is_some_and(|s| s.iter().any(|v| v == "welcome")), "{state:#}");
    assert_eq!(state["fields"]["password"], "<secret:password>", "{state:#}");
}

/// `/v1/sessions` without an MCP client: an action is the session task's next step and answers with the
/// screenshot after it; what the endpoints cannot do is refused with its own status and code — a desktop not in
/// the pool, two computers at once, a body that is no action, a session this daemon does not hold — and a
/// session whose task was cancelled is gone with it.
#[test]
fn the_sessions_api_acts_and_refuses_what_it_cannot_do() {
    use crate::support::http;
    let daemon =
        Daemon::start("[[desktops]]\nname = \"lab-1\"\ncomputer = { provider = \"mock\", scene = \"login\" }\n");
    let call = |method: &str, path: &str, body: serde_json::Value| -> (u16, serde_json::Value) {
        let body = body.to_string();
        let (status, reply) = http(&daemon.socket, method, path, Some(body.as_bytes()), &[]).expect("request");
        (status, serde_json::from_str(&reply).unwrap_or_else(|e| panic!("{e}: {reply}")))
    };
    let (status, refused) = call("POST", "/v1/sessions", serde_json::json!({"desktop": "no-such-desktop"}));
    assert_eq!((status, &refused["error"]["code"]), (400, &serde_json::json!("invalid_session")), "{refused}");
    assert_eq!(refused["error"]["field"], "desktop");
    let (status, refused) =
        call("POST", "/v1/sessions", serde_json::json!({"desktop": "lab-1", "computer": {"provider": "mock"}}));
    assert_eq!((status, &refused["error"]["code"]), (400, &serde_json::json!("invalid_session")), "{refused}");

    // A task of its own may not take a session's label (it would run with no model).
    let (status, refused) = call(
        "POST",
        "/v1/tasks",
        serde_json::json!({"instructions": "x", "labels": {"agentd.session": "any"}, "computer": {"provider": "mock"}}),
    );
    assert_eq!((status, &refused["error"]["field"]), (400, &serde_json::json!("labels.agentd.session")), "{refused}");

    let (status, opened) = call("POST", "/v1/sessions", serde_json::json!({"desktop": "lab-1"}));
    assert_eq!(status, 201, "{opened}");
    let id = opened["task_id"].as_str().expect("task id").to_string();
    let actions = format!("/v1/sessions/{id}/actions");
    let (status, step) = call("POST", &actions, serde_json::json!({"action": {"type": "click", "x": 640, "y": 370}}));
    assert_eq!(status, 200, "{step}");
    assert_eq!((step["ok"].as_bool(), step["screen"].as_str()), (Some(true), Some("1280x800")), "{step}");
    use base64::Engine as _;
    let png = base64::engine::general_purpose::STANDARD
        .decode(step["image"]["data"].as_str().unwrap_or_default())
        .expect("base64");
    assert_eq!((&png[..4], step["image"]["media_type"].as_str()), (&b"\x89PNG"[..], Some("image/png")));
    let (status, refused) = call("POST", &actions, serde_json::json!({"action": {"type": "click", "x": 1}}));
    assert_eq!((status, &refused["error"]["code"]), (400, &serde_json::json!("invalid_action")), "{refused}");
    let (status, refused) =
        call("POST", "/v1/sessions/no-such-session/actions", serde_json::json!({"action": {"type": "screenshot"}}));
    assert_eq!((status, &refused["error"]["code"]), (404, &serde_json::json!("not_found")), "{refused}");

    // Cancelled from elsewhere: the session ends with its task.
    let cancelled = daemon.cli(&["cancel", &id]);
    assert_eq!(cancelled.code, 0, "{}", cancelled.stderr);
    let task = daemon.wait_terminal(&id, std::time::Duration::from_secs(30));
    assert_eq!(task["state"], "cancelled", "{task:#}");
    assert_eq!(task["steps"][0]["actions"][0]["type"], "click", "{task:#}");
    // The worker ends the session right after it records the task's end: an action in between is
    // `session_ended`, one after it `not_found`.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut before = Vec::new();
    let ended = loop {
        let (status, ended) = call("POST", &actions, serde_json::json!({"action": {"type": "screenshot"}}));
        if status == 404 || std::time::Instant::now() > deadline {
            break ended;
        }
        assert_eq!(ended["error"]["code"], "session_ended", "{status}: {ended}");
        before.push(status);
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(ended["error"]["code"], "not_found", "{ended} (before it: {before:?})");
}

/// The record of computer session `id`: written once its client exited and the task completed (waited for,
/// bounded: only a fault takes 30 s).
fn session_record(agentd: &Agentd, id: &str) -> serde_json::Value {
    let path = agentd.data_dir().join("runs").join(format!("{id}.json"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !path.exists() {
        assert!(std::time::Instant::now() < deadline, "no record at {} within 30 s", path.display());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let text = std::fs::read_to_string(&path).expect("the record");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// `agentd mcp --computer FILE`: the client logs in on the mock desktop with the computer tools, each
/// returning the screenshot after it; the session is recorded as a task — every call a step, `source: mcp`
/// — that `show`, `export` and `compile` read like any task `agentd run` ran.
#[test]
fn the_python_sdk_operates_a_computer_through_agentd_mcp_computer() {
    let Some(python) = python() else { return };
    let _load = crate::support::timing_sensitive();
    let agentd = Agentd::new();
    let config = agentd.dir.path().join("agentd.toml");
    let computer = agentd.dir.path().join("login-desktop.json");
    std::fs::write(&computer, r#"{"provider": "mock", "scene": "login"}"#).expect("computer file");
    let bin = env!("CARGO_BIN_EXE_agentd");
    let args = [
        "--",
        bin,
        "--config",
        config.to_str().expect("utf-8"),
        "mcp",
        "--local",
        "--computer",
        computer.to_str().expect("utf-8"),
        "--instructions",
        "log in as alice",
    ];
    let seen = run_client(&python, "tests/mcp/computer_client.py", &args);
    let id = seen["task_id"].as_str().unwrap_or_else(|| panic!("no task id: {seen:#}")).to_string();

    let record = session_record(&agentd, &id);
    let shown = agentd.run(&["show", &id, "--local", "--json"]);
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    assert_eq!(shown.json()["state"], "succeeded", "{}", shown.stdout);
    assert_eq!(record["state"], "succeeded", "{record:#}");
    assert_eq!(record["task"]["metadata"]["source"], "mcp", "{:#}", record["task"]);
    assert_eq!(record["task"]["instructions"], "log in as alice");
    let steps = record["steps"].as_array().cloned().unwrap_or_default();
    // 8 calls reached the computer (the one with bad arguments did not), then the completion's step.
    let actions: Vec<String> = steps
        .iter()
        .filter_map(|s| s["actions"].as_array().and_then(|a| a.first()).and_then(|a| a["type"].as_str()))
        .map(str::to_string)
        .collect();
    assert_eq!(
        actions,
        ["screenshot", "click", "type", "keypress", "type", "keypress", "click", "click"],
        "{record:#}"
    );
    // The typed texts become parameters of the compiled script, as for any task.
    let compiled = agentd.run(&["compile", &id, "--local", "--param", "user=alice"]);
    assert_eq!(compiled.code, 0, "{}", compiled.stderr);
    assert!(compiled.stdout.contains("{{user}}"), "{}", compiled.stdout);
    let exported =
        agentd.run(&["export", &id, "--local", "--html", agentd.dir.path().join("s.html").to_str().expect("utf-8")]);
    assert_eq!(exported.code, 0, "{}", exported.stderr);
    // What the client did by hand runs again without it: the compiled script as a task's model.
    let script = agentd.run(&["compile", &id, "--local"]);
    assert_eq!(script.code, 0, "{}", script.stderr);
    let script: serde_json::Value =
        serde_json::from_str(&script.stdout).unwrap_or_else(|e| panic!("{e}: {}", script.stdout));
    let replay = serde_json::json!({
        "id": "replayed-session",
        "instructions": "log in as alice",
        "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "scripted", "script": script},
        "limits": {"max_steps": 20, "timeout_secs": 60},
    });
    let file = agentd.dir.path().join("replay.json");
    std::fs::write(&file, replay.to_string()).expect("replay task");
    let replayed = agentd.run(&["run", file.to_str().expect("utf-8")]);
    assert_eq!(replayed.code, 0, "{}", replayed.stderr);
    let again = agentd.data_dir().join("runs/replayed-session.json");
    let again: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&again).expect("the replay's record")).expect("JSON");
    assert_eq!(again["state"], "succeeded", "{again:#}");
    assert!(record["computer_state"].is_object(), "the mock desktop reports its state: {record:#}");
    assert_eq!(again["computer_state"], record["computer_state"], "the replay ends where the session did");

    // A desktop nobody configured is refused before the session starts, naming it.
    let refused = agentd.run(&["mcp", "--local", "--computer", "no-such-desktop"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(refused.stderr.contains("no-such-desktop"), "{}", refused.stderr);
}

/// `agentd mcp --computer` on a real X server (Xvfb, the local provider): the screenshot shows the screen as
/// the X server has it (its root painted by `xsetroot`), and the pointer lands where `click` said, as the X
/// server itself reports it (asked afresh, through a connection of the test's own).
#[test]
fn the_computer_tools_drive_an_xvfb_display() {
    let Some(python) = python() else { return };
    for (program, package) in [("xsetroot", "x11-xserver-utils"), ("Xvfb", "xvfb")] {
        if Command::new(program).arg("-help").output().is_err() {
            agentd_testenv::skip(format!("{program} ({package}) is not installed"));
            return;
        }
    }
    let _load = crate::support::timing_sensitive();
    let x = agentd_local::testing::XServer::xvfb(640, 480).unwrap_or_else(|e| panic!("Xvfb did not start: {e}"));
    let painted = Command::new("xsetroot").args(["-display", &x.display, "-solid", "#123456"]).status();
    assert!(painted.is_ok_and(|s| s.success()), "xsetroot");
    let agentd = Agentd::new();
    let computer = agentd.dir.path().join("x.json");
    std::fs::write(&computer, serde_json::json!({"provider": "local", "display": x.display}).to_string())
        .expect("computer file");
    let config = agentd.dir.path().join("agentd.toml");
    let steps = serde_json::json!([
        {"tool": "screenshot"},
        {"tool": "move", "arguments": {"x": 100, "y": 200}},
        {"tool": "click", "arguments": {"x": 321, "y": 123}},
    ])
    .to_string();
    let args = [
        steps.as_str(),
        "--",
        env!("CARGO_BIN_EXE_agentd"),
        "--config",
        config.to_str().expect("utf-8"),
        "mcp",
        "--local",
        "--computer",
        computer.to_str().expect("utf-8"),
    ];
    let seen = run_client(&python, "tests/mcp/computer_steps.py", &args);
    let results = seen["results"].as_array().cloned().unwrap_or_default();
    assert_eq!(results.len(), 3, "{seen:#}");
    assert!(results.iter().all(|r| r["error"] == false), "{seen:#}");
    use base64::Engine as _;
    let png = base64::engine::general_purpose::STANDARD
        .decode(results[0]["image"].as_str().unwrap_or_default())
        .unwrap_or_else(|e| panic!("the screenshot is not base64: {e}"));
    let frame = agentd::screen::image::decode_png(&png).unwrap_or_else(|e| panic!("not a PNG: {e}"));
    assert_eq!(frame.size(), agentd_computer::Size::new(640, 480));
    assert_eq!(frame.pixel(agentd_computer::Point::new(5, 5)), Some([0x12, 0x34, 0x56]), "the X server's screen");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let pointer = runtime.block_on(async {
        use agentd_computer::ComputerProvider as _;
        let config = agentd_local::LocalConfig::new(Some(x.display.clone()));
        let local = agentd_local::LocalProvider::open(config).await.unwrap_or_else(|e| panic!("{}: {e}", x.display));
        local.perform(&agentd_computer::Action::CursorPosition {}).await.map(|r| r.cursor)
    });
    assert_eq!(pointer.ok().flatten(), Some(agentd_computer::Point::new(321, 123)), "the pointer after the click");
    // The session is recorded: each call a step.
    let record = session_record(&agentd, seen["task_id"].as_str().unwrap_or_default());
    let actions: Vec<&str> =
        record["steps"].as_array().into_iter().flatten().filter_map(|s| s["actions"][0]["type"].as_str()).collect();
    assert_eq!(actions, ["screenshot", "move", "click"], "{record:#}");
}
