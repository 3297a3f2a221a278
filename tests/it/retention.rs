//! Retention (docs/operations.md) through the real daemon, on SQLite and on PostgreSQL: `DELETE /v1/tasks/{id}` and
//! `agentd delete` (finished tasks only: a running, waiting or unknown task is a 4xx naming the problem, exit
//! 2, and nothing changes), `agentd prune [--dry-run] [--older-than DAYS]`, and the background job deleting
//! tasks finished more than `finished_days` ago in batches — never one that is not finished.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Backend, Daemon, http};

fn scripted(id: &str, turns: Value) -> Value {
    json!({
        "id": id,
        "instructions": "sign in",
        "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "scripted", "script": {"turns": turns}},
        "limits": {"max_steps": 40, "timeout_secs": 120},
    })
}

fn submit(daemon: &Daemon, task: &Value) {
    let (status, body) =
        http(&daemon.socket, "POST", "/v1/tasks", Some(task.to_string().as_bytes()), &[]).expect("submit");
    assert_eq!(status, 201, "{body}");
}

fn done(daemon: &Daemon, id: &str) {
    submit(
        daemon,
        &scripted(
            id,
            json!([
                {"actions": [{"type": "click", "x": 640, "y": 370}]},
                {"complete": {"success": true, "summary": "done"}}
            ]),
        ),
    );
}

/// A task that keeps running for a while (until cancelled).
fn slow(daemon: &Daemon, id: &str) {
    let turns: Vec<Value> = (0..30).map(|_| json!({"actions": [{"type": "wait", "duration_ms": 300}]})).collect();
    submit(daemon, &scripted(id, Value::Array(turns)));
}

fn waiting(daemon: &Daemon, id: &str) {
    submit(
        daemon,
        &scripted(
            id,
            json!([
                {"ask_human": "may I?", "actions": [{"type": "type", "text": "alice"}]},
                {"complete": {"success": true, "summary": "typed"}}
            ]),
        ),
    );
}

fn wait_state(daemon: &Daemon, id: &str, state: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let task = daemon.task(id);
        if task["state"] == state {
            return task;
        }
        assert!(Instant::now() < deadline, "{id} never reached {state}: {task}\n{}", daemon.log());
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn status_code(daemon: &Daemon, id: &str) -> u16 {
    http(&daemon.socket, "GET", &format!("/v1/tasks/{id}"), None, &[]).expect("status").0
}

fn artifacts_of(daemon: &Daemon, id: &str) -> usize {
    crate::support::files_under(&daemon.agentd.data_dir().join("artifacts").join("tasks").join(id)).len()
}

fn metric(daemon: &Daemon, name: &str) -> u64 {
    let (_, text) = http(&daemon.socket, "GET", "/metrics", None, &[]).expect("metrics");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} missing:\n{text}"))
}

fn error_of(body: &str) -> Value {
    let value: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {body}"));
    value["error"].clone()
}

#[test]
fn sqlite_delete_and_prune_through_the_api_and_the_cli() {
    delete_and_prune(Backend::Sqlite);
}

#[test]
fn postgres_delete_and_prune_through_the_api_and_the_cli() {
    let Some(backend) = Backend::postgres() else { return };
    delete_and_prune(backend);
}

fn delete_and_prune(backend: Backend) {
    let daemon = Daemon::start_on(backend, "", "[worker]\nconcurrency = 4\n");
    done(&daemon, "ret-done-1");
    done(&daemon, "ret-done-2");
    slow(&daemon, "ret-running");
    waiting(&daemon, "ret-waiting");
    wait_state(&daemon, "ret-done-1", "succeeded");
    wait_state(&daemon, "ret-done-2", "succeeded");
    wait_state(&daemon, "ret-waiting", "waiting_for_human");
    wait_state(&daemon, "ret-running", "running");
    assert!(artifacts_of(&daemon, "ret-done-1") >= 2, "screenshots stored");
    let waiting_steps = daemon.task("ret-waiting")["steps"].as_array().map_or(0, Vec::len);

    // Refusals: 4xx naming the problem, exit 2, nothing changed.
    for (id, state) in [("ret-running", "running"), ("ret-waiting", "waiting_for_human")] {
        let (status, body) = http(&daemon.socket, "DELETE", &format!("/v1/tasks/{id}"), None, &[]).expect("delete");
        assert_eq!(status, 409, "{body}");
        let error = error_of(&body);
        assert_eq!(error["code"], "wrong_state", "{body}");
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.contains(id) && message.contains(state) && message.contains("only a finished task"), "{body}");
        let run = daemon.cli(&["delete", id]);
        assert_eq!(run.code, 2, "{}", run.stderr);
        assert!(run.stderr.contains("only a finished task") && run.stderr.contains(state), "{}", run.stderr);
        assert_eq!(daemon.task(id)["state"], state, "untouched");
        assert!(artifacts_of(&daemon, id) >= 1, "{id}: screenshots kept");
    }
    assert_eq!(daemon.task("ret-waiting")["steps"].as_array().map_or(0, Vec::len), waiting_steps);
    let (status, body) = http(&daemon.socket, "DELETE", "/v1/tasks/ret-unknown", None, &[]).expect("delete");
    assert_eq!(status, 404, "{body}");
    assert_eq!(error_of(&body)["code"], "not_found");
    let run = daemon.cli(&["delete", "ret-unknown"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("ret-unknown not found"), "{}", run.stderr);

    // A finished task goes with its steps, events and screenshots.
    let run = daemon.cli(&["delete", "ret-done-1"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, daemon.log());
    assert!(run.stderr.contains("task ret-done-1 deleted"), "{}", run.stderr);
    assert_eq!(status_code(&daemon, "ret-done-1"), 404);
    assert_eq!(artifacts_of(&daemon, "ret-done-1"), 0, "screenshots deleted");
    let (status, body) =
        http(&daemon.socket, "GET", "/v1/tasks/ret-done-1/events", None, &[("last-event-id", "3")]).expect("events");
    assert_eq!(status, 404, "an event follower reconnecting gets 404: {body}");
    let run = daemon.cli(&["delete", "ret-done-1"]);
    assert_eq!(run.code, 2, "a second delete: {}", run.stderr);
    assert!(run.stderr.contains("not found"), "{}", run.stderr);
    let (status, _) = http(&daemon.socket, "DELETE", "/v1/tasks/ret-done-1", None, &[]).expect("delete");
    assert_eq!(status, 404);

    // Prune: the daemon's finished_days (30) finds nothing; --older-than 0 finds every finished task.
    let run = daemon.cli(&["prune", "--dry-run", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json()["tasks"], 0, "{}", run.stdout);
    assert_eq!(run.json()["older_than_days"], 30, "{}", run.stdout);
    let run = daemon.cli(&["prune", "--dry-run", "--older-than", "0", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let dry = run.json();
    assert_eq!(dry["tasks"], 1, "{dry}");
    assert_eq!(dry["ids"], json!(["ret-done-2"]), "{dry}");
    assert_eq!(dry["artifacts"].as_u64(), Some(artifacts_of(&daemon, "ret-done-2") as u64), "{dry}");
    assert!(dry["bytes"].as_u64().unwrap_or(0) > 1000, "{dry}");
    assert_eq!(daemon.task("ret-done-2")["state"], "succeeded", "a dry run deletes nothing");
    let run = daemon.cli(&["prune", "--dry-run", "--older-than", "0"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout.trim(), "ret-done-2");
    assert!(run.stderr.contains("would delete 1 task(s)"), "{}", run.stderr);
    let run = daemon.cli(&["prune", "--older-than", "0"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("deleted 1 task(s)"), "{}", run.stderr);
    assert_eq!(status_code(&daemon, "ret-done-2"), 404);
    assert_eq!(artifacts_of(&daemon, "ret-done-2"), 0);
    assert_eq!(daemon.task("ret-running")["state"], "running", "prune never touches a running task");
    assert_eq!(daemon.task("ret-waiting")["state"], "waiting_for_human");

    // Malformed prune bodies: 400 naming the field, exit 2 from the CLI.
    for (body, field) in [
        (json!({"older_than_days": -1}), "older_than_days"),
        (json!({"dry_run": "yes"}), "dry_run"),
        (json!({"older_than": 3}), "older_than"),
    ] {
        let (status, reply) =
            http(&daemon.socket, "POST", "/v1/prune", Some(body.to_string().as_bytes()), &[]).expect("prune");
        assert_eq!(status, 400, "{body}: {reply}");
        let error = error_of(&reply);
        assert_eq!(error["code"], "invalid_prune", "{reply}");
        assert!(error["message"].as_str().unwrap_or_default().contains(field), "{reply}");
    }
    let run = daemon.cli(&["prune", "--older-than", "soon"]);
    assert_eq!(run.code, 2, "{}", run.stderr);

    assert_eq!(metric(&daemon, "agentd_retention_deleted_tasks_total"), 2);
    assert!(metric(&daemon, "agentd_retention_deleted_artifacts_total") >= 4);
    assert_eq!(daemon.cli(&["cancel", "ret-running"]).code, 0);
    assert_eq!(daemon.cli(&["reject", "ret-waiting"]).code, 0);
}

#[test]
fn sqlite_the_daemon_deletes_old_finished_tasks_in_the_background() {
    background_job(Backend::Sqlite);
}

#[test]
fn postgres_the_daemon_deletes_old_finished_tasks_in_the_background() {
    let Some(backend) = Backend::postgres() else { return };
    background_job(backend);
}

fn background_job(backend: Backend) {
    let daemon = Daemon::start_on(
        backend,
        "",
        "[worker]\nconcurrency = 4\n[retention]\nfinished_days = 1\ninterval_secs = 1\nbatch = 2\n",
    );
    let old: Vec<String> = (0..5).map(|i| format!("bg-old-{i}")).collect();
    for id in old.iter().map(String::as_str).chain(["bg-new"]) {
        done(&daemon, id);
    }
    slow(&daemon, "bg-running");
    for id in old.iter().map(String::as_str).chain(["bg-new"]) {
        wait_state(&daemon, id, "succeeded");
    }
    wait_state(&daemon, "bg-running", "running");
    let running_steps = |daemon: &Daemon| daemon.task("bg-running")["steps"].as_array().map_or(0, Vec::len);
    let before = running_steps(&daemon);
    // Five tasks finished two days ago; and a running task with a finished time that old (which a running
    // task never has): only its state may decide, and it says no.
    let ids = old.iter().map(|id| format!("'{id}'")).collect::<Vec<_>>().join(", ");
    daemon.queue_sql(
        &format!("UPDATE tasks SET finished_ms = finished_ms - 2 * 86400000 WHERE id IN ({ids})"),
        &format!("UPDATE agentd_tasks SET finished_at = finished_at - interval '2 days' WHERE id IN ({ids})"),
    );
    daemon.queue_sql(
        "UPDATE tasks SET finished_ms = 0 WHERE id = 'bg-running'",
        "UPDATE agentd_tasks SET finished_at = '1970-01-02' WHERE id = 'bg-running'",
    );
    // A task leaves the queue first and its screenshots right after (in the same round): wait for both.
    let deadline = Instant::now() + Duration::from_secs(30);
    while old.iter().any(|id| status_code(&daemon, id) != 404 || artifacts_of(&daemon, id) != 0) {
        let left: Vec<_> = old.iter().map(|id| (id, status_code(&daemon, id), artifacts_of(&daemon, id))).collect();
        assert!(Instant::now() < deadline, "the old tasks were not all deleted: {left:?}\n{}", daemon.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(daemon.task("bg-new")["state"], "succeeded", "a task finished now stays");
    assert!(artifacts_of(&daemon, "bg-new") >= 2);
    assert_eq!(daemon.task("bg-running")["state"], "running", "a running task is never deleted");
    assert!(running_steps(&daemon) >= before, "its steps are all there");
    assert!(artifacts_of(&daemon, "bg-running") >= 1);
    assert_eq!(metric(&daemon, "agentd_retention_deleted_tasks_total"), 5);
    assert!(daemon.log().contains("retention: deleted finished tasks"), "{}", daemon.log());
    assert_eq!(daemon.cli(&["cancel", "bg-running"]).code, 0);
}
