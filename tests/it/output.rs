//! Structured output (docs/task-file.md) through the real binary: a task with an `output_schema` whose scripted model
//! completes with a valid `output`, with an invalid one and then a valid retry, with only invalid ones (the
//! tries run out: `failed`, reason `error`, the summary naming the schema problem), and with `success: false`
//! and no output. The output shows in `agentd run --json`, the record under `data_dir/runs`, the one-line
//! summary, and, through the daemon on both queue backends, in `GET /v1/tasks/{id}`, `agentd status --json`
//! and the `task_finished` event.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Agentd, Backend, Daemon, Run, http};

fn schema() -> Value {
    json!({"type": "object", "properties": {"order": {"type": "string", "pattern": "^[0-9]{6}$"},
        "total": {"type": "number"}}, "required": ["order", "total"], "additionalProperties": false})
}

fn complete(success: bool, output: Option<Value>) -> Value {
    let mut complete = json!({"success": success, "summary": if success { "found it" } else { "no order" }});
    if let Some(output) = output {
        complete["output"] = output;
    }
    json!({"complete": complete})
}

fn task(id: &str, turns: Vec<Value>) -> Value {
    json!({
        "id": id,
        "instructions": "Read the order number and the total from the screen.",
        "computer": {"provider": "mock", "scene": "blank"},
        "model": {"provider": "scripted", "script": {"turns": turns}},
        "output_schema": schema(),
        "limits": {"max_steps": 10},
    })
}

fn run(agentd: &Agentd, task: &Value, json: bool) -> Run {
    let path = agentd.dir.path().join(format!("{}.json", task["id"].as_str().unwrap_or("task")));
    std::fs::write(&path, task.to_string()).expect("write task");
    let mut args = vec!["run", path.to_str().expect("utf-8 path")];
    if json {
        args.push("--json");
    }
    agentd.run(&args)
}

fn stored(agentd: &Agentd, id: &str) -> Value {
    let text = std::fs::read_to_string(agentd.data_dir().join("runs").join(format!("{id}.json"))).expect("record");
    serde_json::from_str(&text).expect("record JSON")
}

#[test]
fn a_valid_output_is_the_result_in_run_json_and_the_record() {
    let agentd = Agentd::new();
    let output = json!({"order": "004512", "total": 99.5});
    let run = run(&agentd, &task("valid", vec![complete(true, Some(output.clone()))]), true);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let doc = run.json();
    assert_eq!(doc["state"], "succeeded", "{doc:#}");
    assert_eq!(doc["outcome"]["output"], output, "{doc:#}");
    assert_eq!(doc["outcome"]["reason"], "completed");
    assert_eq!(stored(&agentd, "valid")["outcome"]["output"], output);

    // Without --json, the summary line is followed by the output.
    let again = self::run(&agentd, &task("valid-text", vec![complete(true, Some(output.clone()))]), false);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(again.stdout.contains(&format!("output: {output}")), "{}", again.stdout);
}

#[test]
fn an_invalid_output_goes_back_to_the_model_and_a_valid_retry_ends_the_task() {
    let agentd = Agentd::new();
    let valid = json!({"order": "004512", "total": 99.5});
    let turns = vec![
        complete(true, Some(json!({"order": "4512", "total": "99.50"}))),
        complete(true, None),
        complete(true, Some(valid.clone())),
    ];
    let run = run(&agentd, &task("retry", turns), true);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let doc = run.json();
    assert_eq!(doc["state"], "succeeded", "{doc:#}");
    assert_eq!(doc["outcome"]["output"], valid);
    let steps = doc["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 3, "{doc:#}");
    // What the model read after each refused completion: the schema's problems, where they are, the tries left.
    let first = &steps[0]["call_results"][0];
    assert_eq!(first["ok"], false, "{first}");
    let message = first["message"].as_str().unwrap_or_default();
    for want in ["output schema", "/order", "/total", "2 tries left"] {
        assert!(message.contains(want), "lacks {want:?}: {message}");
    }
    let second = steps[1]["call_results"][0]["message"].as_str().unwrap_or_default();
    assert!(second.contains("`output` is required") && second.contains("1 try left"), "{second}");
    assert_eq!(steps[2]["call_results"][0]["ok"], true);
}

#[test]
fn only_invalid_outputs_end_the_task_failed_with_reason_error_naming_the_problem() {
    let agentd = Agentd::new();
    let bad = || complete(true, Some(json!({"order": "004512", "total": 99.5, "currency": "EUR"})));
    // A fourth turn that would succeed is never asked for.
    let turns = vec![bad(), bad(), bad(), complete(true, Some(json!({"order": "004512", "total": 1})))];
    let run = run(&agentd, &task("exhausted", turns), true);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let doc = run.json();
    assert_eq!(doc["state"], "failed", "{doc:#}");
    assert_eq!(doc["outcome"]["reason"], "error", "{doc:#}");
    assert!(doc["outcome"].get("output").is_none(), "{doc:#}");
    let summary = doc["outcome"]["summary"].as_str().unwrap_or_default();
    for want in ["output_schema", "3 tries", "currency"] {
        assert!(summary.contains(want), "lacks {want:?}: {summary}");
    }
    assert_eq!(doc["steps"].as_array().map(Vec::len), Some(3), "{doc:#}");
    let last = doc["steps"][2]["call_results"][0]["message"].as_str().unwrap_or_default();
    assert!(last.contains("no tries left"), "{last}");
    assert_eq!(stored(&agentd, "exhausted")["outcome"]["reason"], "error");
}

#[test]
fn a_failed_task_owes_no_output() {
    let agentd = Agentd::new();
    let run = run(&agentd, &task("gave-up", vec![complete(false, None)]), true);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let doc = run.json();
    assert_eq!(doc["state"], "failed", "{doc:#}");
    assert_eq!(doc["outcome"]["reason"], "completed", "{doc:#}");
    assert_eq!(doc["outcome"]["summary"], "no order");
    assert!(doc["outcome"].get("output").is_none(), "{doc:#}");
    assert_eq!(doc["steps"][0]["call_results"][0]["ok"], true, "{doc:#}");
}

#[test]
fn a_task_without_output_schema_may_not_give_an_output() {
    let agentd = Agentd::new();
    let mut task = task("no-schema", vec![complete(true, Some(json!({"x": 1}))), complete(true, None)]);
    task.as_object_mut().expect("object").remove("output_schema");
    let run = run(&agentd, &task, true);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let doc = run.json();
    assert!(doc["outcome"].get("output").is_none(), "{doc:#}");
    let refused = doc["steps"][0]["call_results"][0]["message"].as_str().unwrap_or_default();
    assert!(refused.contains("asks for no `output`"), "{refused}");
}

/// Each test twice, named for its queue (the PostgreSQL one says it skips without `AGENTD_TEST_POSTGRES_URL`).
mod sqlite {
    #[test]
    fn the_output_is_served_by_the_api_status_and_the_finished_event() {
        super::served(crate::support::Backend::Sqlite);
    }
}

mod postgres {
    #[test]
    fn the_output_is_served_by_the_api_status_and_the_finished_event() {
        if let Some(backend) = crate::support::Backend::postgres() {
            super::served(backend);
        }
    }
}

fn served(backend: Backend) {
    let daemon = Daemon::start_on(backend, "", "");
    let output = json!({"order": "000042", "total": 12});
    let turns = vec![complete(true, Some(json!({"order": "42", "total": 12}))), complete(true, Some(output.clone()))];
    let body = task("served", turns).to_string();
    let (code, reply) = http(&daemon.socket, "POST", "/v1/tasks", Some(body.as_bytes()), &[]).expect("submit");
    assert_eq!(code, 201, "{reply}");
    let doc = daemon.wait_terminal("served", Duration::from_secs(60));
    assert_eq!(doc["state"], "succeeded", "{doc:#}\n{}", daemon.log());
    assert_eq!(doc["outcome"]["output"], output, "GET /v1/tasks/ID: {doc:#}");
    assert_eq!(doc["steps"][0]["call_results"][0]["ok"], false, "{doc:#}");

    let status = daemon.cli(&["status", "served", "--json"]);
    assert_eq!(status.code, 0, "{}", status.stderr);
    assert_eq!(status.json()["outcome"]["output"], output);
    let text = daemon.cli(&["status", "served"]);
    assert!(text.stdout.contains(&format!("output {output}")), "{}", text.stdout);

    let events = daemon.cli(&["events", "served", "--json"]);
    assert_eq!(events.code, 0, "{}", events.stderr);
    let finished: Vec<Value> = events
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "task_finished")
        .collect();
    assert_eq!(finished.len(), 1, "{}", events.stdout);
    assert_eq!(finished[0]["outcome"]["output"], output, "{}", finished[0]);
}
