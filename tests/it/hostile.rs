//! Hostile tasks through the real daemon API: files that are devices, FIFOs, too large, outside the allowed
//! directories or secret; environment variables and endpoints the operator did not allow; limits past what
//! a clock holds. Each is refused at submission with a 400 naming the field, and the API stays responsive.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Daemon, http};

/// POSTs a task and returns (status, body as JSON). Fails (instead of hanging) if the daemon does not answer.
fn submit(daemon: &Daemon, task: &Value) -> (u16, Value) {
    let socket = daemon.socket.clone();
    let body = task.to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(http(&socket, "POST", "/v1/tasks", Some(body.as_bytes()), &[]));
    });
    let (code, body) = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("the daemon did not answer a submission of {task}"))
        .expect("request");
    (code, serde_json::from_str(&body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}")))
}

/// Asserts a 400 naming `field`; returns the message.
fn refused(daemon: &Daemon, task: &Value, field: &str) -> String {
    let (code, body) = submit(daemon, task);
    assert_eq!(code, 400, "{task}\n{body}");
    assert_eq!(body["error"]["field"], field, "{task}\n{body}");
    body["error"]["message"].as_str().unwrap_or_default().to_string()
}

fn healthy(daemon: &Daemon) {
    let (code, body) = http(&daemon.socket, "GET", "/healthz", None, &[]).expect("healthz");
    assert_eq!(code, 200, "{body}");
}

fn scene_task(scene: &Path) -> Value {
    json!({
        "instructions": "x",
        "computer": {"provider": "mock", "scene": scene},
        "model": {"provider": "scripted", "script": {"turns": [{"complete": {"success": true, "summary": "ok"}}]}},
    })
}

fn script_task(script: &Path) -> Value {
    json!({"instructions": "x", "model": {"provider": "scripted", "script": script}})
}

fn mkfifo(path: &Path) {
    let c_path = std::ffi::CString::new(path.to_str().expect("utf-8 path")).expect("no NUL");
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
}

#[test]
fn devices_fifos_and_huge_files_are_refused_and_the_api_stays_responsive() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let allowed = scratch.path().join("allowed");
    std::fs::create_dir_all(&allowed).expect("mkdir");
    let daemon =
        Daemon::start_with_api(&format!("allowed_paths = [{:?}, \"/dev\"]", allowed.display().to_string()), "");

    // Before: /dev/zero grew the daemon's memory without bound.
    let message = refused(&daemon, &scene_task(Path::new("/dev/zero")), "computer.scene");
    assert!(message.contains("not a regular file"), "{message}");
    let message = refused(&daemon, &script_task(Path::new("/dev/zero")), "model.script");
    assert!(message.contains("not a regular file"), "{message}");

    // Before: opening a FIFO blocked a runtime thread until someone wrote to it, and the API froze.
    let fifo = allowed.join("scene.fifo");
    mkfifo(&fifo);
    let message = refused(&daemon, &scene_task(&fifo), "computer.scene");
    assert!(message.contains("FIFO"), "{message}");
    let message = refused(&daemon, &script_task(&fifo), "model.script");
    assert!(message.contains("FIFO"), "{message}");
    healthy(&daemon);

    let big = allowed.join("big.json");
    std::fs::write(&big, vec![b' '; 5 * 1024 * 1024]).expect("write");
    let message = refused(&daemon, &scene_task(&big), "computer.scene");
    assert!(message.contains("larger than 4194304 bytes"), "{message}");
    let message = refused(&daemon, &scene_task(&allowed), "computer.scene");
    assert!(message.contains("directory"), "{message}");
    healthy(&daemon);

    // A scene file in an allowed directory runs.
    let scene = allowed.join("one.json");
    std::fs::write(&scene, r#"{"screens": [{"id": "only"}]}"#).expect("write");
    let (code, body) = submit(&daemon, &scene_task(&scene));
    assert_eq!(code, 201, "{body}");
    let id = body["id"].as_str().expect("id").to_string();
    let done = daemon.wait_terminal(&id, Duration::from_secs(60));
    assert_eq!(done["state"], "succeeded", "{done:#}");
}

#[test]
fn files_outside_the_allowed_directories_are_refused_and_contents_never_quoted() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let allowed = scratch.path().join("allowed");
    let secret_dir = scratch.path().join("secret");
    std::fs::create_dir_all(&allowed).expect("mkdir");
    std::fs::create_dir_all(&secret_dir).expect("mkdir");
    let secret = secret_dir.join("key.json");
    std::fs::write(&secret, r#"{"screens": "AKIA-SECRET-ONE"}"#).expect("write");
    std::os::unix::fs::symlink(&secret, allowed.join("link.json")).expect("symlink");
    let daemon = Daemon::start_with_api(&format!("allowed_paths = [{:?}]", allowed.display().to_string()), "");

    // Outside: refused, and an existing file gets the same answer as a missing one (no existence oracle).
    let existing = refused(&daemon, &scene_task(&secret), "computer.scene");
    let missing_path = secret_dir.join("nothing.json");
    let missing = refused(&daemon, &scene_task(&missing_path), "computer.scene");
    assert!(existing.contains("api.allowed_paths") && !existing.contains("AKIA"), "{existing}");
    assert_eq!(
        existing.replace(secret.to_str().expect("utf-8"), "P"),
        missing.replace(missing_path.to_str().expect("utf-8"), "P")
    );
    let climbing = allowed.join("../secret/key.json");
    let message = refused(&daemon, &scene_task(&climbing), "computer.scene");
    assert!(message.contains("api.allowed_paths"), "{message}");
    let message = refused(&daemon, &script_task(&secret), "model.script");
    assert!(message.contains("api.allowed_paths") && !message.contains("AKIA"), "{message}");
    // A symbolic link out of an allowed directory is not followed.
    let message = refused(&daemon, &scene_task(&allowed.join("link.json")), "computer.scene");
    assert!(message.contains("symbolic link") && !message.contains("AKIA"), "{message}");

    // Inside, a file that is not a scene or a script: the error says where, never what.
    let bad_scene = allowed.join("bad-scene.json");
    std::fs::write(&bad_scene, r#"{"screens": "AKIA-SECRET-TWO"}"#).expect("write");
    let message = refused(&daemon, &scene_task(&bad_scene), "computer.scene");
    assert!(message.contains("screens") && message.contains(":1:"), "{message}");
    assert!(!message.contains("AKIA"), "{message}");
    let bad_script = allowed.join("bad-script.json");
    std::fs::write(&bad_script, r#"{"turns": [{"say": "AKIA-SECRET-THREE", "AKIA-SECRET-FOUR": 1}]}"#).expect("write");
    let message = refused(&daemon, &script_task(&bad_script), "model.script");
    assert!(message.contains("unknown field") && !message.contains("AKIA"), "{message}");
    let bad_script_type = allowed.join("bad-type.json");
    std::fs::write(&bad_script_type, r#"{"turns": "AKIA-SECRET-FIVE"}"#).expect("write");
    let message = refused(&daemon, &script_task(&bad_script_type), "model.script");
    assert!(message.contains("invalid type") && !message.contains("AKIA"), "{message}");
    healthy(&daemon);
}

#[test]
fn env_names_base_urls_files_and_limits_are_what_the_operator_allows() {
    // The tasks name loopback addresses as stand-ins (they are parked, nothing connects): allowed.
    let daemon = Daemon::start(
        "[worker]\nallowed_env = [\"AGENTD_TEST_VNC_PW\"]\n\
         [models.openai-compatible]\nallowed_base_urls = [\"http://127.0.0.1:9/v1\"]\n\
         [outbound]\nallow = [\"127.0.0.1\"]\n",
    );
    // Tasks that pass are parked on a label no worker has: only the submission is under test.
    let parked = |mut task: Value| {
        task["labels"] = json!({"parked": "yes"});
        task
    };
    let vnc = |env: &str| {
        parked(
            json!({"instructions": "x", "computer": {"provider": "vnc", "address": "127.0.0.1:1", "password_env": env}}),
        )
    };
    let message = refused(&daemon, &vnc("ANTHROPIC_API_KEY"), "computer.password_env");
    assert!(message.contains("worker.allowed_env"), "{message}");
    let (code, body) = submit(&daemon, &vnc("AGENTD_TEST_VNC_PW"));
    assert_eq!(code, 201, "{body}");
    let cua = |env: &str| {
        parked(json!({"instructions": "x", "computer":
            {"provider": "computer-server", "url": "http://127.0.0.1:1", "api_key_env": env}}))
    };
    let message = refused(&daemon, &cua("ANTHROPIC_API_KEY"), "computer.api_key_env");
    assert!(message.contains("worker.allowed_env"), "{message}");
    let (code, body) = submit(&daemon, &cua("AGENTD_TEST_VNC_PW"));
    assert_eq!(code, 201, "{body}");

    let compatible = |url: &str| {
        parked(json!({"instructions": "x", "model": {"provider": "openai-compatible", "model": "m", "base_url": url}}))
    };
    let message = refused(&daemon, &compatible("http://attacker.example/v1"), "model.base_url");
    assert!(message.contains("allowed_base_urls"), "{message}");
    for url in ["http://127.0.0.1:9/v1", "http://127.0.0.1:8000/v1/"] {
        let (code, body) = submit(&daemon, &compatible(url));
        assert_eq!(code, 201, "{url}: {body}");
    }

    // No allowed_paths: no file paths at all from the API.
    let scratch = tempfile::tempdir().expect("tempdir");
    let scene = scratch.path().join("one.json");
    std::fs::write(&scene, r#"{"screens": [{"id": "only"}]}"#).expect("write");
    refused(&daemon, &scene_task(&scene), "computer.scene");
    // `agentd submit` reads the scene file as its user and sends the scene itself.
    let task = scratch.path().join("task.json");
    let mut with_file = parked(scene_task(Path::new("one.json")));
    with_file["id"] = json!("scene-from-a-file");
    std::fs::write(&task, with_file.to_string()).expect("write");
    let run = daemon.cli(&["submit", task.to_str().expect("path")]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let sent = daemon.task("scene-from-a-file");
    assert_eq!(sent["task"]["computer"]["scene"]["name"], "one", "{sent:#}");
    assert_eq!(sent["task"]["computer"]["scene"]["screens"][0]["id"], "only", "{sent:#}");

    // Before: a timeout of 2^63-1 s panicked the task (`overflow when adding duration to instant`).
    let limits = |limits: Value| json!({"instructions": "x", "limits": limits});
    let message = refused(&daemon, &limits(json!({"timeout_secs": i64::MAX})), "limits.timeout_secs");
    assert!(message.contains("at most 2592000"), "{message}");
    refused(&daemon, &limits(json!({"max_steps": u32::MAX})), "limits.max_steps");

    // The CLI says the same with exit 2.
    let task = daemon.agentd.dir.path().join("vnc.json");
    std::fs::write(&task, vnc("HOME").to_string()).expect("write");
    let run = daemon.cli(&["submit", task.to_str().expect("path")]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("computer.password_env"), "{}", run.stderr);
    healthy(&daemon);
}

#[test]
fn the_worker_checks_again_what_its_own_config_allows() {
    // A task accepted by a node whose config allowed more (here: the same daemon before a config change)
    // is refused by the worker that runs it, naming the setting, instead of reaching the file or variable.
    let scratch = tempfile::tempdir().expect("tempdir");
    let allowed = scratch.path().join("allowed");
    std::fs::create_dir_all(&allowed).expect("mkdir");
    let scene = allowed.join("one.json");
    std::fs::write(&scene, r#"{"screens": [{"id": "only"}]}"#).expect("write");
    let allow_paths = format!("allowed_paths = [{:?}]", allowed.display().to_string());
    let allow_env = "allowed_env = [\"AGENTD_TEST_VNC_PW\"]";
    let mut daemon = Daemon::start_with_api(
        &allow_paths,
        &format!("[worker]\n{allow_env}\n\n[outbound]\nallow = [\"127.0.0.1\"]\n"),
    );

    let parked = json!({"parked": "yes"});
    let mut vnc = json!({"id": "vnc-env", "instructions": "x",
        "computer": {"provider": "vnc", "address": "127.0.0.1:1", "password_env": "AGENTD_TEST_VNC_PW"}});
    vnc["labels"] = parked.clone();
    let mut file = scene_task(&scene);
    file["id"] = json!("scene-file");
    file["labels"] = parked.clone();
    let tool = json!({"id": "tool-env", "instructions": "x", "labels": parked, "tools": [
        {"name": "lookup", "description": "d", "parameters": {"type": "object"}, "kind": "http",
         "url": "http://127.0.0.1:9/x", "headers_env": {"X-Key": "AGENTD_TEST_VNC_PW"}}]});
    for task in [&vnc, &file, &tool] {
        let (code, body) = submit(&daemon, task);
        assert_eq!(code, 201, "{body}");
    }

    daemon.kill();
    let config_path = daemon.agentd.dir.path().join("agentd.toml");
    let config = std::fs::read_to_string(&config_path).expect("config");
    let config = config.replace(&allow_paths, "").replace(allow_env, "labels = { parked = \"yes\" }");
    std::fs::write(&config_path, config).expect("write config");
    daemon.spawn();
    for (id, setting) in
        [("vnc-env", "worker.allowed_env"), ("scene-file", "api.allowed_paths"), ("tool-env", "worker.allowed_env")]
    {
        let task = daemon.wait_terminal(id, Duration::from_secs(60));
        assert_eq!(task["state"], "failed", "{task:#}");
        let summary = task["outcome"]["summary"].as_str().unwrap_or_default();
        assert!(summary.contains(setting), "{id}: {summary}");
    }
}
