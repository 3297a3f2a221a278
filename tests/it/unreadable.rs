//! A task whose stored record cannot be decoded (its row changed by hand, or written by a broken version) on
//! both queue backends: the listing (`GET /v1/tasks`, `agentd list`, `--json`) shows every other task as ever
//! and the broken one in its place, with its id, its state when that column reads, and why it cannot be read;
//! its status (`GET /v1/tasks/{id}`, `agentd status`) is a 500 naming the task and the column or step. A
//! worker that claims such a task ends it `failed` saying why, and goes on with the tasks behind it.

use serde_json::Value;

use crate::support::{Backend, Daemon, http};

on_both_backends!(
    one_unreadable_task_is_listed_in_its_place_and_the_others_as_ever,
    a_queued_task_that_cannot_be_read_fails_and_the_tasks_behind_it_run
);

/// `tasks` tables of the two backends.
fn corrupt(daemon: &Daemon, sqlite: &str) {
    let postgres = sqlite.replace("UPDATE tasks", "UPDATE agentd_tasks").replace("INTO steps", "INTO agentd_steps");
    daemon.queue_sql(sqlite, &postgres);
}

fn get(daemon: &Daemon, path: &str) -> (u16, Value) {
    let (status, body) = http(&daemon.socket, "GET", path, None, &[]).expect("request");
    (status, serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}")))
}

fn one_unreadable_task_is_listed_in_its_place_and_the_others_as_ever(backend: Backend) {
    let daemon = Daemon::start_on(backend, "", "");
    // Tasks no worker here takes (their label): they stay queued, as submitted. Oldest first.
    let ids = ["good-1", "bad-spec", "bad-state", "bad-step"];
    for id in ids {
        let task = serde_json::json!({"id": id, "instructions": format!("task {id}"), "labels": {"gpu": "yes"}});
        let (status, body) =
            http(&daemon.socket, "POST", "/v1/tasks", Some(task.to_string().as_bytes()), &[]).expect("submit");
        assert_eq!(status, 201, "{body}");
    }
    // Behind the daemon's back: a task file that is not JSON, a state no version knows, a step that is not JSON.
    corrupt(&daemon, "UPDATE tasks SET spec = '{\"instructions\": ' WHERE id = 'bad-spec'");
    corrupt(&daemon, "UPDATE tasks SET state = 'sleeping' WHERE id = 'bad-state'");
    corrupt(&daemon, "INSERT INTO steps (task_id, idx, record) VALUES ('bad-step', 0, 'not a step')");

    // The listing: every task, newest first, the broken one in its place.
    let (status, list) = get(&daemon, "/v1/tasks");
    assert_eq!(status, 200, "{list}");
    let tasks = list["tasks"].as_array().cloned().unwrap_or_default();
    let listed: Vec<&str> = tasks.iter().filter_map(|t| t["id"].as_str()).collect();
    assert_eq!(listed, ["bad-step", "bad-state", "bad-spec", "good-1"], "{list}");
    let by_id = |id: &str| tasks.iter().find(|t| t["id"] == id).cloned().unwrap_or(Value::Null);
    for good in ["good-1", "bad-step"] {
        let task = by_id(good);
        assert_eq!((task["state"].as_str(), task.get("error")), (Some("queued"), None), "{task}");
        assert_eq!(task["task"]["instructions"], format!("task {good}"), "{task}");
    }
    assert_eq!(by_id("bad-step")["step_count"], 1, "a step row is counted, not read, by the listing");
    let spec = by_id("bad-spec");
    assert_eq!(spec["state"], "queued", "the state reads: {spec}");
    assert!(spec["created_at"].as_str().is_some_and(|t| t.ends_with('Z')), "{spec}");
    let error = spec["error"].as_str().unwrap_or_default();
    assert!(error.contains("cannot be read") && error.contains("spec"), "names the column: {spec}");
    assert_eq!(spec.as_object().map(|o| o.len()), Some(4), "id, state, created_at, error: {spec}");
    let state = by_id("bad-state");
    assert!(state.get("state").is_none(), "a state that does not read is left out: {state}");
    assert!(state["error"].as_str().is_some_and(|e| e.contains("state") && e.contains("sleeping")), "{state}");

    // Filtered by state: the broken task whose state reads is there.
    let (_, queued) = get(&daemon, "/v1/tasks?state=queued");
    let queued: Vec<&str> = queued["tasks"].as_array().into_iter().flatten().filter_map(|t| t["id"].as_str()).collect();
    assert_eq!(queued, ["bad-step", "bad-spec", "good-1"]);

    // Its status: 500, naming the task and what cannot be read; so for a step that cannot be read.
    for (id, what) in [("bad-spec", "spec"), ("bad-step", "steps[0]")] {
        let (status, reply) = get(&daemon, &format!("/v1/tasks/{id}"));
        assert_eq!((status, reply["error"]["code"].as_str()), (500, Some("unreadable_task")), "{id}: {reply}");
        let message = reply["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(&format!("task {id} cannot be read: {what}")), "{id}: {message}");
    }
    let (status, good) = get(&daemon, "/v1/tasks/good-1");
    assert_eq!((status, good["state"].as_str()), (200, Some("queued")), "{good}");

    // The CLI: a row for each task, the broken ones saying why; `--json` is the API's document.
    let list = daemon.cli(&["list"]);
    assert_eq!(list.code, 0, "{}", list.stderr);
    let rows: Vec<&str> = list.stdout.lines().skip(1).collect();
    assert_eq!(rows.len(), 4, "{}", list.stdout);
    let row = |id: &str| rows.iter().find(|r| r.starts_with(id)).copied().unwrap_or_default();
    assert!(row("bad-spec").contains("queued") && row("bad-spec").contains("cannot be read"), "{}", list.stdout);
    assert!(row("bad-state").contains(" ? ") && row("bad-state").contains("sleeping"), "{}", list.stdout);
    assert!(row("good-1").contains("queued") && !row("good-1").contains("cannot be read"), "{}", list.stdout);
    let json = daemon.cli(&["list", "--json"]);
    assert_eq!(json.code, 0, "{}", json.stderr);
    assert_eq!(json.json()["tasks"].as_array().map(Vec::len), Some(4), "{}", json.stdout);
    let status = daemon.cli(&["status", "bad-spec"]);
    assert_ne!(status.code, 0, "{}", status.stdout);
    assert!(status.stderr.contains("task bad-spec cannot be read: spec"), "{}", status.stderr);
}

fn a_queued_task_that_cannot_be_read_fails_and_the_tasks_behind_it_run(backend: Backend) {
    let daemon = Daemon::start_on(backend, "", "");
    // Queued where no worker takes it, broken, then made claimable: the oldest task a worker finds.
    let broken = serde_json::json!({"id": "broken", "instructions": "never runs", "labels": {"gpu": "yes"}});
    let (status, body) =
        http(&daemon.socket, "POST", "/v1/tasks", Some(broken.to_string().as_bytes()), &[]).expect("submit");
    assert_eq!(status, 201, "{body}");
    corrupt(&daemon, "UPDATE tasks SET spec = 'not json', labels = '{}' WHERE id = 'broken'");
    let good = serde_json::json!({
        "id": "behind", "instructions": "runs",
        "computer": {"provider": "mock", "scene": "blank"},
        "model": {"provider": "scripted", "script": {"turns": [{"complete": {"success": true, "summary": "ran"}}]}}
    });
    let (status, body) =
        http(&daemon.socket, "POST", "/v1/tasks", Some(good.to_string().as_bytes()), &[]).expect("submit");
    assert_eq!(status, 201, "{body}");

    let done = daemon.wait_terminal("behind", std::time::Duration::from_secs(30));
    assert_eq!(done["state"], "succeeded", "the task behind the broken one ran: {done}\n{}", daemon.log());
    let (_, list) = get(&daemon, "/v1/tasks");
    let entry = list["tasks"].as_array().into_iter().flatten().find(|t| t["id"] == "broken").cloned();
    let entry = entry.unwrap_or_else(|| panic!("{list}"));
    assert_eq!(entry["state"], "failed", "it ended where the claim took it: {entry}");
    assert!(entry["error"].as_str().is_some_and(|e| e.contains("spec")), "{entry}");
    // The daemon says so in its log; and, finished, the task can be deleted.
    let log = daemon.log();
    assert!(log.contains("a queued task cannot be read: it failed without running") && log.contains("broken"), "{log}");
    let deleted = daemon.cli(&["delete", "broken"]);
    assert_eq!(deleted.code, 0, "{}", deleted.stderr);
    assert_eq!(get(&daemon, "/v1/tasks/broken").0, 404);
}
