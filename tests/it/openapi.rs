//! `GET /v1/openapi.json` against a real daemon: the document names every route of the router with its
//! methods and nothing else (the router answers each documented method, and 405 to every other), it is a valid
//! OpenAPI document (`openapi-spec-validator`, which `scripts/setup/45-openapi.sh` installs), and what the
//! daemon really answers — status documents, lists, errors, events, replies to cancel, approve, reject and
//! tool results, health — has a documented status and content type and fits the documented schema.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Backend, Daemon, http, http_with_head};

/// The HTTP methods an OpenAPI path item may hold.
const OPERATIONS: [&str; 8] = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];

fn document(daemon: &Daemon) -> Value {
    let (status, head, body) = http_with_head(&daemon.socket, "GET", "/v1/openapi.json", None, &[]).expect("get");
    assert_eq!(status, 200, "{body}");
    assert_eq!(content_type(&head), "application/json", "{head}");
    serde_json::from_str(&body).expect("the document is JSON")
}

fn content_type(head: &str) -> String {
    head.lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-type").then(|| value.trim().to_string())
        })
        .unwrap_or_default()
}

/// A JSON pointer token: `~` and `/` escaped.
fn token(text: &str) -> String {
    text.replace('~', "~0").replace('/', "~1")
}

/// The concrete path of a route template, with made-up parameters.
fn concrete(template: &str) -> String {
    template.replace("{id}", "no-such-task").replace("{index}", "0")
}

#[test]
fn the_document_describes_every_route_and_nothing_else() {
    let daemon = Daemon::start("");
    let doc = document(&daemon);
    let embedded: Value = serde_json::from_str(agentd::api::OPENAPI).expect("embedded JSON");
    assert_eq!(doc, embedded, "the daemon serves the embedded document");

    let paths = doc["paths"].as_object().expect("paths");
    let documented: BTreeSet<(String, String)> = paths
        .iter()
        .flat_map(|(path, item)| {
            OPERATIONS.iter().filter(|op| item.get(**op).is_some()).map(|op| (op.to_uppercase(), path.clone()))
        })
        .collect();
    let routed: BTreeSet<(String, String)> =
        agentd::api::routes().into_iter().map(|(method, path)| (method.to_string(), path.to_string())).collect();
    let undocumented: Vec<_> = routed.difference(&documented).collect();
    let unrouted: Vec<_> = documented.difference(&routed).collect();
    assert!(
        undocumented.is_empty() && unrouted.is_empty(),
        "routes not in the document: {undocumented:?}; documented but not routed: {unrouted:?}"
    );

    // The router answers each documented method of each path with a documented status, and every other
    // method with 405: it serves nothing the document does not describe.
    for path in paths.keys() {
        for method in ["GET", "POST", "PUT", "PATCH", "DELETE"] {
            let (status, body) = http(&daemon.socket, method, &concrete(path), None, &[]).expect("request");
            let error: Value = serde_json::from_str(&body).unwrap_or_default();
            if routed.contains(&(method.to_string(), path.clone())) {
                assert!(
                    status != 405 && error["error"]["message"] != "no such endpoint",
                    "{method} {path}: not routed: {status} {body}"
                );
                let documented = format!("/paths/{}/{}/responses/{status}", token(path), method.to_lowercase());
                assert!(
                    doc.pointer(&documented).is_some(),
                    "{method} {path} answered {status}, not documented: {body}"
                );
            } else {
                assert_eq!(status, 405, "{method} {path} is routed but not documented: {body}");
                assert_eq!(error["error"]["code"], "method_not_allowed", "{body}");
            }
        }
    }
    let (status, body) = http(&daemon.socket, "GET", "/v1/no-such-endpoint", None, &[]).expect("request");
    assert_eq!(status, 404, "{body}");
}

/// `api::endpoints()` is the one list of routes: no file of `src/` that uses axum adds a route beside it, so
/// the comparison above sees every route the daemon serves.
#[test]
fn routes_are_added_in_one_place_only() {
    let mut found = Vec::new();
    for file in crate::support::files_under(&crate::support::repo().join("src")) {
        if file.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read source");
        if !text.contains("axum") {
            continue;
        }
        for (number, line) in text.lines().enumerate() {
            let adds = [".route(", ".route_service(", ".nest(", ".nest_service(", ".merge("]
                .iter()
                .any(|call| line.contains(call));
            if adds {
                found.push(format!("{}:{}: {}", file.display(), number + 1, line.trim()));
            }
        }
    }
    assert!(
        found.len() == 1 && found[0].contains("router.route(endpoint.path, endpoint.handler)"),
        "routes must be added through api::endpoints() (and documented in src/api/openapi.json), found:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_document_is_valid_openapi() {
    let Some(validator) = std::env::var_os("AGENTD_TEST_OPENAPI_VALIDATOR") else {
        agentd_testenv::skip(
            "AGENTD_TEST_OPENAPI_VALIDATOR is not set (scripts/setup/45-openapi.sh installs \
             openapi-spec-validator and sets it)",
        );
        return;
    };
    let daemon = Daemon::start("");
    let doc = document(&daemon);
    assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")), "{}", doc["openapi"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let validate = |name: &str, doc: &Value| {
        let file = dir.path().join(name);
        std::fs::write(&file, serde_json::to_vec_pretty(doc).expect("JSON")).expect("write");
        let out = std::process::Command::new(&validator).arg(&file).output().expect("run openapi-spec-validator");
        (
            out.status.success(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        )
    };
    let (ok, said) = validate("openapi.json", &doc);
    assert!(ok, "openapi-spec-validator refuses the document:\n{said}");
    // The validator does check: a response without its required description is refused.
    let mut broken = doc.clone();
    broken["paths"]["/livez"]["get"]["responses"]["200"] = json!({"content": {}});
    let (ok, said) = validate("broken.json", &broken);
    assert!(!ok, "a broken document passed:\n{said}");
}

/// The documented response of `method template` for `status`: checks the status is documented, the content
/// type is one of its, and a JSON body fits its schema (with the document's components for `$ref`s).
fn conforms(doc: &Value, method: &str, template: &str, (status, head, body): &(u16, String, String)) -> Value {
    let pointer = format!("/paths/{}/{}/responses/{status}", token(template), method.to_lowercase());
    let response =
        doc.pointer(&pointer).unwrap_or_else(|| panic!("{method} {template}: {status} is not documented: {body}"));
    let actual = content_type(head);
    let Some(content) = response.get("content").and_then(Value::as_object) else {
        assert!(body.is_empty(), "{method} {template} {status}: no content documented, got {actual}: {body}");
        return Value::Null;
    };
    let media = actual.split(';').next().unwrap_or_default().trim();
    let (_, entry) = content
        .iter()
        .find(|(declared, _)| **declared == actual || declared.split(';').next().unwrap_or_default().trim() == media)
        .unwrap_or_else(|| {
            panic!("{method} {template} {status}: content type {actual} not among {:?}", content.keys())
        });
    if media != "application/json" {
        return Value::Null;
    }
    let instance: Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{method} {template} {status}: {e}: {body}"));
    let mut schema = entry["schema"].clone();
    schema["components"] = doc["components"].clone();
    valid(&schema, &instance, &format!("{method} {template} {status}"));
    instance
}

fn valid(schema: &Value, instance: &Value, what: &str) {
    let validator =
        jsonschema::draft202012::options().should_validate_formats(true).build(schema).expect("schema builds");
    let errors: Vec<String> =
        validator.iter_errors(instance).map(|e| format!("{} at {}", e, e.instance_path())).collect();
    assert!(errors.is_empty(), "{what}: does not fit its schema:\n{}\n{instance:#}", errors.join("\n"));
}

/// A component schema, with the document's components beside it.
fn component(doc: &Value, name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}"), "components": doc["components"]})
}

fn call(daemon: &Daemon, method: &str, path: &str, body: Option<&Value>) -> (u16, String, String) {
    let body = body.map(Value::to_string);
    http_with_head(&daemon.socket, method, path, body.as_deref().map(str::as_bytes), &[]).expect("request")
}

fn wait_state(daemon: &Daemon, id: &str, state: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let task = daemon.task(id);
        if task["state"] == state {
            return task;
        }
        assert!(Instant::now() < deadline, "{id} never reached {state}: {task}\n{}", daemon.log());
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn scripted(id: &str, turns: Value) -> Value {
    json!({
        "id": id,
        "instructions": "sign in",
        "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "scripted", "script": {"turns": turns}},
        "limits": {"max_steps": 10, "timeout_secs": 60},
    })
}

#[test]
fn what_the_daemon_answers_fits_the_document() {
    answers_fit_the_document(Backend::Sqlite);
}

/// The same on PostgreSQL (its records are stored and read back differently), in a schema of its own.
#[test]
fn what_the_daemon_answers_on_postgres_fits_the_document() {
    if let Some(backend) = Backend::postgres() {
        answers_fit_the_document(backend);
    }
}

fn answers_fit_the_document(backend: Backend) {
    let daemon = Daemon::start_on(backend, "", "");
    let doc = document(&daemon);

    // Every task file the repository ships fits the submit body's schema.
    let task_file = component(&doc, "TaskFile");
    for entry in std::fs::read_dir(crate::support::repo().join("config/tasks")).expect("config/tasks").flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "json") {
            let text = std::fs::read_to_string(&path).expect("read");
            valid(&task_file, &serde_json::from_str(&text).expect("JSON"), &path.display().to_string());
        }
    }

    // Submit (201, then 200 for the same task again), the status document, the list, the events.
    let done = scripted(
        "doc-done",
        json!([
            {"say": "signing in", "actions": [{"type": "click", "x": 640, "y": 370}, {"type": "type", "text": "alice"}],
             "usage": {"input_tokens": 1200, "output_tokens": 40, "cache_read_tokens": 0, "cache_write_tokens": 0, "cost_usd": 0.01}},
            {"complete": {"success": true, "summary": "typed"}}
        ]),
    );
    let created = call(&daemon, "POST", "/v1/tasks", Some(&done));
    assert_eq!(created.0, 201, "{}", created.2);
    conforms(&doc, "POST", "/v1/tasks", &created);
    let again = call(&daemon, "POST", "/v1/tasks", Some(&done));
    assert_eq!(again.0, 200, "{}", again.2);
    conforms(&doc, "POST", "/v1/tasks", &again);
    wait_state(&daemon, "doc-done", "succeeded");
    let status = conforms(&doc, "GET", "/v1/tasks/{id}", &call(&daemon, "GET", "/v1/tasks/doc-done", None));
    assert_eq!(status["steps"].as_array().map(Vec::len), Some(2), "{status}");
    assert_eq!(status["outcome"]["reason"], "completed");
    conforms(&doc, "GET", "/v1/tasks", &call(&daemon, "GET", "/v1/tasks?state=succeeded&limit=5", None));
    let events = call(&daemon, "GET", "/v1/tasks/doc-done/events?follow=false", None);
    conforms(&doc, "GET", "/v1/tasks/{id}/events", &events);

    // An evaluation (docs/eval.md) of one verified run, as `agentd eval` submits it: listed, and its result.
    let mut run = scripted("doc-eval.t1.m1.r1", json!([{"complete": {"success": true, "summary": "signed in"}}]));
    run["verify"] = json!([{"kind": "mock_state", "expect": {"screen": "login"}}]);
    run["metadata"] = json!({"eval": {"id": "doc-eval", "suite": "doc", "task": "sign-in", "model": "scripted",
        "repeat": 1, "repeats": 1, "runs": 1}});
    assert_eq!(call(&daemon, "POST", "/v1/tasks", Some(&run)).0, 201);
    wait_state(&daemon, "doc-eval.t1.m1.r1", "succeeded");
    let evals = conforms(&doc, "GET", "/v1/evals", &call(&daemon, "GET", "/v1/evals?limit=10", None));
    assert_eq!(evals["evals"][0]["id"], "doc-eval", "{evals}");
    let result = conforms(&doc, "GET", "/v1/evals/{id}", &call(&daemon, "GET", "/v1/evals/doc-eval", None));
    assert_eq!((result["models"][0]["passed"].as_u64(), result["pending"].as_u64()), (Some(1), Some(0)), "{result}");
    let missing = call(&daemon, "GET", "/v1/evals/no-such-eval", None);
    assert_eq!(missing.0, 404, "{}", missing.2);
    conforms(&doc, "GET", "/v1/evals/{id}", &missing);
    conforms(&doc, "GET", "/v1/evals", &call(&daemon, "GET", "/v1/evals?limit=many", None));
    let event_schema = component(&doc, "Event");
    let data: Vec<Value> = events
        .2
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| serde_json::from_str(data.trim()).expect("event JSON"))
        .collect();
    assert!(data.iter().any(|e| e["type"] == "task_finished"), "{}", events.2);
    for event in &data {
        valid(&event_schema, event, "an event");
    }
    let screenshot = call(&daemon, "GET", "/v1/tasks/doc-done/steps/0/screenshot", None);
    assert_eq!(screenshot.0, 200, "{}", screenshot.2);
    conforms(&doc, "GET", "/v1/tasks/{id}/steps/{index}/screenshot", &screenshot);

    // Refusals: the error envelope, with the documented status.
    conforms(&doc, "GET", "/v1/tasks/{id}", &call(&daemon, "GET", "/v1/tasks/no-such-task", None));
    let refused =
        conforms(&doc, "POST", "/v1/tasks", &call(&daemon, "POST", "/v1/tasks", Some(&json!({"instructions": ""}))));
    assert_eq!(refused["error"]["code"], "invalid_task", "{refused}");
    conforms(&doc, "GET", "/v1/tasks", &call(&daemon, "GET", "/v1/tasks?state=sleeping", None));
    conforms(
        &doc,
        "GET",
        "/v1/tasks/{id}/events",
        &http_with_head(&daemon.socket, "GET", "/v1/tasks/doc-done/events", None, &[("last-event-id", "x")])
            .expect("request"),
    );
    conforms(&doc, "POST", "/v1/tasks/{id}/approve", &call(&daemon, "POST", "/v1/tasks/doc-done/approve", None));

    // A human approves one task and rejects another.
    let ask = |id: &str| {
        scripted(
            id,
            json!([
                {"ask_human": "may I type alice's name?", "actions": [{"type": "type", "text": "alice"}]},
                {"complete": {"success": true, "summary": "typed the name"}}
            ]),
        )
    };
    for (id, verb, body) in
        [("doc-approve", "approve", None), ("doc-reject", "reject", Some(json!({"reason": "not now"})))]
    {
        assert_eq!(call(&daemon, "POST", "/v1/tasks", Some(&ask(id))).0, 201);
        conforms(&doc, "GET", "/v1/tasks/{id}", &call(&daemon, "GET", &format!("/v1/tasks/{id}"), None));
        wait_state(&daemon, id, "waiting_for_human");
        let template = format!("/v1/tasks/{{id}}/{verb}");
        let reply =
            conforms(&doc, "POST", &template, &call(&daemon, "POST", &format!("/v1/tasks/{id}/{verb}"), body.as_ref()));
        assert_eq!(reply["id"], id, "{reply}");
    }
    assert_eq!(wait_state(&daemon, "doc-reject", "failed")["outcome"]["reason"], "rejected");

    // A remote tool call parks the task; the client's answer queues it again.
    let mut remote = scripted(
        "doc-remote",
        json!([
            {"calls": [{"name": "lookup_order", "arguments": {"order": 42}}]},
            {"complete": {"success": true, "summary": "looked up"}}
        ]),
    );
    remote["tools"] = json!([{"name": "lookup_order", "description": "Looks an order up", "kind": "remote",
        "parameters": {"type": "object", "properties": {"order": {"type": "integer"}}, "required": ["order"]}}]);
    assert_eq!(call(&daemon, "POST", "/v1/tasks", Some(&remote)).0, 201);
    let parked = wait_state(&daemon, "doc-remote", "awaiting_tool");
    conforms(&doc, "GET", "/v1/tasks/{id}", &call(&daemon, "GET", "/v1/tasks/doc-remote", None));
    let call_id = parked["pending_tool_calls"][0]["id"].as_str().expect("a pending call").to_string();
    let wrong = json!({"results": [{"id": "nope", "ok": true, "output": "x"}]});
    conforms(
        &doc,
        "POST",
        "/v1/tasks/{id}/tool-results",
        &call(&daemon, "POST", "/v1/tasks/doc-remote/tool-results", Some(&wrong)),
    );
    let answer =
        json!({"results": [{"id": call_id, "ok": true, "output": "order 42 ships tomorrow", "details": {"eta": 1}}]});
    let answered = call(&daemon, "POST", "/v1/tasks/doc-remote/tool-results", Some(&answer));
    assert_eq!(answered.0, 200, "{}", answered.2);
    conforms(&doc, "POST", "/v1/tasks/{id}/tool-results", &answered);
    wait_state(&daemon, "doc-remote", "succeeded");

    // Cancel: a task no worker here may take (its labels) ends at once; a running one is asked to stop.
    let mut unclaimed = scripted("doc-unclaimed", json!([{"complete": {"success": true, "summary": "x"}}]));
    unclaimed["labels"] = json!({"gpu": "yes"});
    assert_eq!(call(&daemon, "POST", "/v1/tasks", Some(&unclaimed)).0, 201);
    let cancelled =
        conforms(&doc, "POST", "/v1/tasks/{id}/cancel", &call(&daemon, "POST", "/v1/tasks/doc-unclaimed/cancel", None));
    assert_eq!(cancelled["state"], "cancelled", "{cancelled}");
    let slow_turns: Vec<Value> = (0..20).map(|_| json!({"actions": [{"type": "wait", "duration_ms": 200}]})).collect();
    let mut slow = scripted("doc-slow", Value::Array(slow_turns));
    slow["limits"] = json!({"max_steps": 30});
    assert_eq!(call(&daemon, "POST", "/v1/tasks", Some(&slow)).0, 201);
    wait_state(&daemon, "doc-slow", "running");
    let requested =
        conforms(&doc, "POST", "/v1/tasks/{id}/cancel", &call(&daemon, "POST", "/v1/tasks/doc-slow/cancel", None));
    assert_eq!(requested["cancel"], "requested", "{requested}");
    wait_state(&daemon, "doc-slow", "cancelled");
    conforms(&doc, "POST", "/v1/tasks/{id}/cancel", &call(&daemon, "POST", "/v1/tasks/doc-slow/cancel", None));

    // Retention (docs/operations.md): prune (a dry run, a bad body), delete a finished task (then 404), refuse a
    // queued one.
    let dry = json!({"dry_run": true, "older_than_days": 0});
    let pruned = conforms(&doc, "POST", "/v1/prune", &call(&daemon, "POST", "/v1/prune", Some(&dry)));
    assert!(pruned["tasks"].as_u64().unwrap_or(0) >= 4, "{pruned}");
    conforms(&doc, "POST", "/v1/prune", &call(&daemon, "POST", "/v1/prune", Some(&json!({"dry_run": 1}))));
    let deleted = conforms(&doc, "DELETE", "/v1/tasks/{id}", &call(&daemon, "DELETE", "/v1/tasks/doc-slow", None));
    assert_eq!(deleted["deleted"], true, "{deleted}");
    conforms(&doc, "DELETE", "/v1/tasks/{id}", &call(&daemon, "DELETE", "/v1/tasks/doc-slow", None));
    let mut queued = scripted("doc-queued", json!([{"complete": {"success": true, "summary": "x"}}]));
    queued["labels"] = json!({"gpu": "yes"});
    assert_eq!(call(&daemon, "POST", "/v1/tasks", Some(&queued)).0, 201);
    let refused = call(&daemon, "DELETE", "/v1/tasks/doc-queued", None);
    assert_eq!(refused.0, 409, "{}", refused.2);
    conforms(&doc, "DELETE", "/v1/tasks/{id}", &refused);
    conforms(&doc, "POST", "/v1/prune", &call(&daemon, "POST", "/v1/prune", Some(&json!({"older_than_days": 0}))));

    // Conversations (docs/humans.md): a message to a finished task (200, its record with the new turn), to one that is
    // not finished (409), to no task (404), and an empty one (400).
    let talk = scripted("doc-talk", json!([{"complete": {"success": true, "summary": "x"}}]));
    assert_eq!(call(&daemon, "POST", "/v1/tasks", Some(&talk)).0, 201);
    wait_state(&daemon, "doc-talk", "succeeded");
    let message = json!({"text": "and then?"});
    let sent = conforms(
        &doc,
        "POST",
        "/v1/tasks/{id}/messages",
        &call(&daemon, "POST", "/v1/tasks/doc-talk/messages", Some(&message)),
    );
    assert_eq!(sent["turns"][1]["first_step"], 1, "{sent}");
    for (path, body) in [
        ("/v1/tasks/doc-queued/messages", &message),
        ("/v1/tasks/no-such-task/messages", &message),
        ("/v1/tasks/doc-queued/messages", &json!({"text": ""})),
    ] {
        conforms(&doc, "POST", "/v1/tasks/{id}/messages", &call(&daemon, "POST", path, Some(body)));
    }

    // A task whose stored record cannot be read: listed in its place, and its status a documented 500.
    let mut broken = scripted("doc-broken", json!([{"complete": {"success": true, "summary": "x"}}]));
    broken["labels"] = json!({"gpu": "yes"});
    assert_eq!(call(&daemon, "POST", "/v1/tasks", Some(&broken)).0, 201);
    daemon.queue_sql(
        "UPDATE tasks SET spec = 'not json' WHERE id = 'doc-broken'",
        "UPDATE agentd_tasks SET spec = 'not json' WHERE id = 'doc-broken'",
    );
    let listed = conforms(&doc, "GET", "/v1/tasks", &call(&daemon, "GET", "/v1/tasks", None));
    assert!(
        listed["tasks"].as_array().into_iter().flatten().any(|t| t["id"] == "doc-broken" && t["error"].is_string()),
        "{listed}"
    );
    let unreadable = conforms(&doc, "GET", "/v1/tasks/{id}", &call(&daemon, "GET", "/v1/tasks/doc-broken", None));
    assert_eq!(unreadable["error"]["code"], "unreadable_task", "{unreadable}");

    // Operations.
    conforms(&doc, "GET", "/healthz", &call(&daemon, "GET", "/healthz", None));
    conforms(&doc, "GET", "/livez", &call(&daemon, "GET", "/livez", None));
    conforms(&doc, "GET", "/metrics", &call(&daemon, "GET", "/metrics", None));
    conforms(&doc, "GET", "/v1/openapi.json", &call(&daemon, "GET", "/v1/openapi.json", None));
}
