//! Secrets (§15) end to end through the real binary: a task on the mock desktop types a secret by its
//! placeholder; the desktop receives the value (only the right value signs in), and the value appears in no
//! file under the data dir, no event, no log line and nothing the CLI prints.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Agentd, Backend, Daemon, Run, files_under, http, repo};

/// The secret: in no scene, task or config file the data dir holds.
const VALUE: &str = "Tr0ub4dor-3-Xq9kZ";

/// A login scene whose sign-in succeeds only with [`VALUE`] (the built-in one with its password replaced and
/// its note on screen emptied), written to `dir`.
fn scene_file(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(repo().join("providers/mock/scenes/login.json")).expect("login scene");
    assert!(text.contains("alice's password: hunter2"), "the built-in login scene changed");
    let text = text.replace("alice's password: hunter2", "Ask your admin.").replace("hunter2", VALUE);
    let path = dir.join("secret-login.json");
    std::fs::write(&path, text).expect("write scene");
    path
}

/// The task: click the username field, type alice, click the password field, type the placeholder, press
/// Enter; then complete. `secret` is the task's `secrets.password`.
fn task(scene: &Path, secret: Value) -> Value {
    let text = std::fs::read_to_string(scene).expect("scene");
    let desktop = agentd_mock::MockDesktop::new(
        agentd_mock::Scene::from_json_str(&text, "secret-login").expect("scene parses"),
        None,
    )
    .expect("desktop");
    let user = desktop.widget_center("username").expect("username field");
    let pass = desktop.widget_center("password").expect("password field");
    json!({
        "instructions": "Sign in as alice with the password",
        "computer": {"provider": "mock", "scene": scene.display().to_string()},
        "model": {"provider": "scripted", "script": {"turns": [
            {"say": "signing in", "actions": [
                {"type": "click", "x": user.x, "y": user.y},
                {"type": "type", "text": "alice"},
                {"type": "click", "x": pass.x, "y": pass.y},
                {"type": "type", "text": "<secret:password>"},
                {"type": "keypress", "keys": ["Return"]}
            ]},
            {"complete": {"success": true, "summary": "signed in"}}
        ]}},
        "limits": {"max_steps": 5},
        "secrets": {"password": secret}
    })
}

/// Every file under `dir` that holds [`VALUE`].
fn files_holding_value(dir: &Path) -> Vec<PathBuf> {
    let files = files_under(dir);
    assert!(!files.is_empty(), "nothing under {}", dir.display());
    files
        .into_iter()
        .filter(|f| std::fs::read(f).is_ok_and(|bytes| bytes.windows(VALUE.len()).any(|w| w == VALUE.as_bytes())))
        .collect()
}

fn run_task(agentd: &Agentd, dir: &Path, task: &Value, env: &[(&str, &str)]) -> Run {
    let path = dir.join("task.json");
    std::fs::write(&path, serde_json::to_vec_pretty(task).expect("task JSON")).expect("write task");
    let mut command = agentd.command();
    command.args(["run", "--json"]).arg(&path).env("AGENTD_LOG", "debug").stdin(Stdio::null());
    for (k, v) in env {
        command.env(k, v);
    }
    Run::from(command.output().expect("spawn agentd run"))
}

/// Whether the mock desktop reached the screen only the right password leads to.
fn signed_in(result: &Value) -> bool {
    let state = &result["computer_state"];
    state["screens_visited"].as_array().is_some_and(|s| s.iter().any(|v| v == "welcome"))
}

#[test]
fn agentd_run_types_a_secret_from_the_environment_and_shows_it_nowhere() {
    let agentd = Agentd::new();
    let scene = scene_file(agentd.dir.path());
    let var = "PORTAL_PASSWORD_IT_RUN";
    let run = run_task(&agentd, agentd.dir.path(), &task(&scene, json!({"env": var})), &[(var, VALUE)]);
    assert_eq!(run.code, 0, "stdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
    let result = run.json();
    // The desktop received the value: only it signs in (the control below shows a wrong one does not).
    assert!(signed_in(&result), "{result:#}");
    assert_eq!(result["computer_state"]["labels"]["greeting"], "Welcome, alice");
    // What is recorded and reported shows the placeholder.
    assert_eq!(result["computer_state"]["fields"]["password"], "<secret:password>");
    let typed: Vec<&Value> = result["steps"][0]["actions"]
        .as_array()
        .expect("actions")
        .iter()
        .filter(|a| a["type"] == "type")
        .map(|a| &a["text"])
        .collect();
    assert_eq!(typed, [&json!("alice"), &json!("<secret:password>")]);
    assert!(!run.stdout.contains(VALUE) && !run.stderr.contains(VALUE), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(files_holding_value(&agentd.data_dir()), Vec::<PathBuf>::new());

    // Control: with another value in the variable the same task does not sign in.
    let wrong = run_task(&agentd, agentd.dir.path(), &task(&scene, json!({"env": var})), &[(var, "not-it")]);
    let result = wrong.json();
    assert!(!signed_in(&result), "{result:#}");
    assert_eq!(result["computer_state"]["labels"]["error"], "Invalid username or password");

    // A variable that is not set is invalid input naming the secret.
    let unset = run_task(&agentd, agentd.dir.path(), &task(&scene, json!({"env": "PORTAL_PASSWORD_IT_UNSET"})), &[]);
    assert_eq!(unset.code, 2, "{}", unset.stderr);
    assert!(unset.stderr.contains("secrets.password.env") && unset.stderr.contains("PORTAL_PASSWORD_IT_UNSET"));
}

#[test]
fn a_secret_from_a_file_loses_one_trailing_newline_and_an_empty_one_is_refused() {
    let agentd = Agentd::new();
    let scene = scene_file(agentd.dir.path());
    let file = agentd.dir.path().join("password.txt");
    std::fs::write(&file, format!("{VALUE}\n")).expect("write secret");
    let run = run_task(&agentd, agentd.dir.path(), &task(&scene, json!({"file": file.display().to_string()})), &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(signed_in(&run.json()), "{}", run.stdout);
    assert!(!run.stdout.contains(VALUE) && !run.stderr.contains(VALUE));
    assert_eq!(files_holding_value(&agentd.data_dir()), Vec::<PathBuf>::new());

    std::fs::write(&file, "\n").expect("write secret");
    let empty = run_task(&agentd, agentd.dir.path(), &task(&scene, json!({"file": file.display().to_string()})), &[]);
    assert_eq!(empty.code, 2, "{}", empty.stderr);
    assert!(empty.stderr.contains("secrets.password") && empty.stderr.contains("empty"), "{}", empty.stderr);
}

#[test]
fn the_daemon_types_a_secret_and_keeps_it_out_of_its_data_dir_events_and_logs() {
    daemon_keeps_the_secret(Backend::Sqlite);
}

/// On PostgreSQL the records live in the database; what it holds is searched as the API serves it (the
/// status document with every step and `computer_state`, the event log), beside the data dir and the log.
#[test]
fn on_postgres_the_daemon_keeps_the_secret_out_of_its_database() {
    if let Some(backend) = Backend::postgres() {
        daemon_keeps_the_secret(backend);
    }
}

fn daemon_keeps_the_secret(backend: Backend) {
    let _heavy = crate::support::heavy();
    let var = "PORTAL_PASSWORD_IT_DAEMON";
    let scenes = tempfile::tempdir().expect("tempdir");
    let scene = scene_file(scenes.path());
    let mut daemon = Daemon::start_on(
        backend,
        &format!("allowed_paths = [{:?}]", scenes.path().display().to_string()),
        &format!("[worker]\nallowed_env = [{var:?}]\n"),
    );
    daemon.kill();
    daemon.env.push((var.into(), VALUE.into()));
    daemon.env.push(("AGENTD_LOG".into(), "debug".into()));
    daemon.spawn();

    // A task from the API may name only the variables the config allows.
    let refused = task(&scene, json!({"env": "HOME"}));
    let (status, body) =
        http(&daemon.socket, "POST", "/v1/tasks", Some(refused.to_string().as_bytes()), &[]).expect("submit");
    assert_eq!(status, 400, "{body}");
    let error: Value = serde_json::from_str(&body).expect("error JSON");
    assert_eq!(error["error"]["field"], "secrets.password.env", "{body}");
    // And only files under `[api] allowed_paths` (the path is checked at submission; only the worker reads it).
    let refused = task(&scene, json!({"file": "/etc/hostname"}));
    let (status, body) =
        http(&daemon.socket, "POST", "/v1/tasks", Some(refused.to_string().as_bytes()), &[]).expect("submit");
    assert_eq!(status, 400, "{body}");
    let error: Value = serde_json::from_str(&body).expect("error JSON");
    assert_eq!(error["error"]["field"], "secrets.password.file", "{body}");

    // Submitted over the API with the scene's path (`agentd submit` would inline the scene file, and this
    // scene holds the value to check the password): the daemon reads the file itself.
    let body = task(&scene, json!({"env": var})).to_string();
    let (status, reply) = http(&daemon.socket, "POST", "/v1/tasks", Some(body.as_bytes()), &[]).expect("submit");
    assert_eq!(status, 201, "{reply}");
    let id = serde_json::from_str::<Value>(&reply).expect("JSON")["id"].as_str().expect("task id").to_string();
    let record = daemon.wait_terminal(&id, Duration::from_secs(30));
    assert_eq!(record["state"], "succeeded", "{record:#}");
    assert!(signed_in(&record), "{record:#}");
    assert_eq!(record["computer_state"]["fields"]["password"], "<secret:password>");

    let follow = daemon.cli(&["events", "--follow", &id]);
    let events = daemon.cli(&["--json", "events", &id]);
    assert_eq!(events.code, 0, "{}", events.stderr);
    assert!(events.stdout.contains("\"<secret:password>\""), "{}", events.stdout);
    let status = daemon.cli(&["--json", "status", &id]);
    for (what, text) in [
        ("events stdout", &follow.stdout),
        ("events stderr", &follow.stderr),
        ("events", &events.stdout),
        ("status", &status.stdout),
        ("daemon log", &daemon.log()),
    ] {
        assert!(!text.contains(VALUE), "{what} shows the secret:\n{text}");
    }
    // The daemon's log is not empty (debug): the check above had something to look at.
    assert!(daemon.log().lines().count() > 5, "{}", daemon.log());
    daemon.kill();
    let data = daemon.agentd.data_dir();
    // The mock desktop's saved state is among the files, with the placeholder.
    let saved = files_under(&data).into_iter().filter(|f| f.ends_with(agentd_mock::ACTIONS_FILE)).collect::<Vec<_>>();
    assert_eq!(saved.len(), 1, "{:?}", files_under(&data));
    assert!(std::fs::read_to_string(&saved[0]).unwrap_or_default().contains("<secret:password>"));
    assert_eq!(files_holding_value(&data), Vec::<PathBuf>::new());
}
