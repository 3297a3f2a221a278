//! Verifiers (docs/replay-and-verify.md) end to end through `agentd run`: the mock desktop's login scene, a scripted
//! model, and each
//! kind of check passing and failing (the `screen` check against the mock's real pixels, a reference cropped
//! from a real screenshot of the scene; the `http` check against a server started here; `command` checks
//! from `[verifiers]`). A completion whose checks fail goes back to the model, which fixes its work; one
//! that keeps failing ends `verification_failed` with the evidence; a task without checks says `null`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use agentd_computer::{Point, Size};
use serde_json::{Value, json};

use crate::support::{Agentd, files_under};

fn sign_in() -> Vec<Value> {
    vec![
        json!({"actions": [{"type": "click", "x": 640, "y": 370}, {"type": "type", "text": "alice"}]}),
        json!({"actions": [{"type": "keypress", "keys": ["Tab"]}, {"type": "type", "text": "hunter2"},
                           {"type": "keypress", "keys": ["Return"]}]}),
    ]
}

fn complete() -> Value {
    json!({"complete": {"success": true, "summary": "signed in"}})
}

fn task(id: &str, turns: Vec<Value>, verify: Value) -> Value {
    json!({
        "id": id,
        "instructions": "Sign in as alice.",
        "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "scripted", "script": {"turns": turns}},
        "limits": {"max_steps": 12},
        "verify": verify,
    })
}

/// Runs `task` with `agentd run --json`: the exit code and the result document.
fn run(agentd: &Agentd, task: &Value) -> (i32, Value, String) {
    let path = agentd.dir.path().join(format!("{}.json", task["id"].as_str().unwrap_or("task")));
    std::fs::write(&path, task.to_string()).expect("write task");
    let run = agentd.run(&["run", path.to_str().expect("utf-8 path"), "--json"]);
    let doc = if run.code == 2 { Value::Null } else { run.json() };
    (run.code, doc, run.stderr)
}

fn checks(doc: &Value) -> Vec<Value> {
    doc["outcome"]["checks"].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_task_without_checks_says_null() {
    let agentd = Agentd::new();
    let mut turns = sign_in();
    turns.push(complete());
    let mut t = task("none", turns, json!([]));
    t.as_object_mut().expect("object").remove("verify");
    let (code, doc, stderr) = run(&agentd, &t);
    assert_eq!(code, 0, "{stderr}");
    assert!(doc["outcome"].get("verified").is_some_and(Value::is_null), "{}", doc["outcome"]);
    assert!(doc["outcome"].get("checks").is_none(), "{}", doc["outcome"]);
}

#[test]
fn mock_state_passes_when_signed_in_and_fails_with_what_differs() {
    let agentd = Agentd::new();
    let verify = json!([{"kind": "mock_state", "expect": {"screen": "welcome"}}]);
    let mut turns = sign_in();
    turns.push(complete());
    let (code, doc, stderr) = run(&agentd, &task("state-ok", turns, verify.clone()));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(doc["state"], "succeeded", "{}", doc["outcome"]);
    assert_eq!(doc["outcome"]["verified"], true);
    assert_eq!(checks(&doc), vec![json!({"kind": "mock_state", "ok": true, "message": "computer_state matches"})]);

    // Completing without signing in, with no retries: the task fails `verification_failed`.
    let mut t = task("state-bad", vec![complete()], verify);
    t["limits"]["verify_retries"] = json!(0);
    let (code, doc, stderr) = run(&agentd, &t);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(doc["state"], "failed");
    assert_eq!(doc["outcome"]["reason"], "verification_failed", "{}", doc["outcome"]);
    assert_eq!(doc["outcome"]["verified"], false);
    let check = &checks(&doc)[0];
    assert_eq!(check["ok"], false);
    let message = check["message"].as_str().unwrap_or_default();
    assert!(message.contains("/screen: expected \"welcome\", found \"login\""), "{message}");
    assert_eq!(check["evidence"]["differences"][0], "/screen: expected \"welcome\", found \"login\"");
}

#[test]
fn a_failed_check_goes_back_to_the_model_which_fixes_its_work() {
    let agentd = Agentd::new();
    let verify = json!([{"kind": "mock_state", "expect": {"screen": "welcome"}}]);
    // The model completes too early, reads why, signs in and completes again.
    let mut turns = vec![complete()];
    turns.extend(sign_in());
    turns.push(complete());
    let (code, doc, stderr) = run(&agentd, &task("retry", turns, verify));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(doc["state"], "succeeded", "{}", doc["outcome"]);
    assert_eq!(doc["outcome"]["reason"], "completed");
    assert_eq!(doc["outcome"]["verified"], true);
    let steps = doc["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 4, "{doc:#}");
    let refused = &steps[0]["call_results"][0];
    assert_eq!(refused["ok"], false, "{refused}");
    let message = refused["message"].as_str().unwrap_or_default();
    for want in ["verification failed", "mock_state", "/screen", "2 retries left"] {
        assert!(message.contains(want), "lacks {want:?}: {message}");
    }
    assert_eq!(steps[3]["call_results"][0]["ok"], true);
}

#[test]
fn checks_that_keep_failing_end_verification_failed_with_the_evidence() {
    let agentd = Agentd::new();
    let verify = json!([
        {"kind": "mock_state", "expect": {"screen": "welcome"}},
        {"kind": "output", "expect": {"/user": "alice"}},
    ]);
    // Three completions (the first try and the default two retries); a fourth is never asked for.
    let turns = vec![complete(), complete(), complete(), complete()];
    let (code, doc, stderr) = run(&agentd, &task("exhausted", turns, verify));
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(doc["outcome"]["reason"], "verification_failed", "{}", doc["outcome"]);
    assert_eq!(doc["outcome"]["success"], false);
    assert_eq!(doc["outcome"]["verified"], false);
    assert_eq!(doc["steps"].as_array().map(Vec::len), Some(3), "{doc:#}");
    let summary = doc["outcome"]["summary"].as_str().unwrap_or_default();
    assert!(summary.contains("after 3 round(s)") && summary.contains("/screen"), "{summary}");
    let found = checks(&doc);
    assert_eq!(found.len(), 2);
    assert_eq!(found[0]["kind"], "mock_state");
    assert!(found[0]["evidence"]["differences"].is_array(), "{found:?}");
    assert_eq!(found[1]["kind"], "output");
    assert!(found[1]["message"].as_str().unwrap_or_default().contains("no `output`"), "{found:?}");
    let last = doc["steps"][2]["call_results"][0]["message"].as_str().unwrap_or_default();
    assert!(last.contains("no retries left"), "{last}");
    let second = doc["steps"][1]["call_results"][0]["message"].as_str().unwrap_or_default();
    assert!(second.contains("1 retry left"), "{second}");
}

/// The first screenshot of a run (`tasks/{id}/…/00000.png`) as a frame.
fn first_screenshot(agentd: &Agentd, id: &str) -> agentd_computer::Frame {
    let dir = agentd.data_dir().join("artifacts").join("tasks").join(id);
    let mut shots: Vec<PathBuf> =
        files_under(&dir).into_iter().filter(|p| p.extension().is_some_and(|e| e == "png")).collect();
    shots.sort();
    let path = shots.iter().find(|p| p.ends_with("00000.png")).expect("first screenshot");
    agentd::screen::image::decode_png(&std::fs::read(path).expect("read")).expect("decode")
}

fn save_png(frame: &agentd_computer::Frame, path: &Path) {
    std::fs::write(path, agentd::screen::image::encode_png(frame).expect("encode")).expect("write png");
}

#[test]
fn the_screen_check_finds_a_crop_of_the_real_scene_and_saves_its_evidence() {
    let agentd = Agentd::new();
    // A real screenshot of the login scene, with nothing done yet.
    let (code, _, stderr) = run(&agentd, &task("shoot", vec![complete()], json!([])));
    assert_eq!(code, 0, "{stderr}");
    let screen = first_screenshot(&agentd, "shoot");
    assert_eq!(screen.size(), Size::new(1280, 800));
    // The sign-in form's middle.
    let at = Point::new(460, 330);
    let reference = screen.crop(at, Size::new(360, 120));
    save_png(&reference, &agentd.dir.path().join("form.png"));

    // Found anywhere (the task does not move anything), and within a region around it.
    let verify = json!([
        {"kind": "screen", "image": "form.png"},
        {"kind": "screen", "image": "form.png", "region": {"x": 400, "y": 300, "width": 500, "height": 200}, "min_score": 0.99},
    ]);
    let (code, doc, stderr) = run(&agentd, &task("screen-ok", vec![complete()], verify));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(doc["outcome"]["verified"], true, "{}", doc["outcome"]);
    for check in checks(&doc) {
        assert_eq!(check["ok"], true, "{check}");
        assert_eq!(check["evidence"]["region"], json!({"x": 460, "y": 330, "width": 360, "height": 120}));
        assert_eq!(check["evidence"]["score"], 1.0);
        let key = check["evidence"]["crop"]["key"].as_str().expect("crop key");
        assert!(key.starts_with("tasks/screen-ok/") && key.ends_with(".png"), "{key}");
        let crop = agentd.data_dir().join("artifacts").join(key);
        let saved = agentd::screen::image::decode_png(&std::fs::read(&crop).expect("the crop is saved")).expect("png");
        assert_eq!(saved.as_rgb(), reference.as_rgb());
    }

    // After signing in, the form is gone: the best match scores low and the check fails, with its evidence.
    let mut turns = sign_in();
    turns.push(complete());
    let mut t = task("screen-bad", turns, json!([{"kind": "screen", "image": "form.png"}]));
    t["limits"]["verify_retries"] = json!(0);
    let (code, doc, stderr) = run(&agentd, &t);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(doc["outcome"]["reason"], "verification_failed", "{}", doc["outcome"]);
    let check = &checks(&doc)[0];
    assert_eq!(check["ok"], false);
    let score = check["evidence"]["score"].as_f64().expect("score");
    assert!(score < 0.95, "{check}");
    assert!(check["message"].as_str().unwrap_or_default().contains("not found on the screen"), "{check}");
    let key = check["evidence"]["crop"]["key"].as_str().expect("crop key");
    assert!(agentd.data_dir().join("artifacts").join(key).is_file(), "{key}");
}

/// A tiny HTTP server for the test: `/order` answers 200 with JSON, anything else 404. Serves `count`
/// requests, then stops.
fn serve(count: usize) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    std::thread::spawn(move || {
        for stream in listener.incoming().take(count) {
            let Ok(mut stream) = stream else { continue };
            let mut buffer = [0u8; 4096];
            let n = stream.read(&mut buffer).unwrap_or(0);
            let request = String::from_utf8_lossy(&buffer[..n]);
            let (status, body) = if request.starts_with("GET /order ") {
                ("200 OK", r#"{"order": {"id": "004512", "status": "saved"}}"#)
            } else {
                ("404 Not Found", r#"{"error": "no such thing"}"#)
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://{address}")
}

#[test]
fn the_http_check_asks_a_real_server() {
    let agentd = Agentd::new();
    let base = serve(4);
    let verify = json!([
        {"kind": "http", "url": format!("{base}/order"), "expect_json": {"/order/status": "saved"}},
        {"kind": "http", "url": format!("{base}/nothing"), "expect_status": 404},
    ]);
    let (code, doc, stderr) = run(&agentd, &task("http-ok", vec![complete()], verify));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(doc["outcome"]["verified"], true, "{}", doc["outcome"]);
    assert_eq!(checks(&doc)[0]["evidence"]["status"], 200);

    let verify = json!([
        {"kind": "http", "url": format!("{base}/order"), "expect_json": {"/order/status": "shipped"}},
        {"kind": "http", "url": format!("{base}/nothing")},
    ]);
    let mut t = task("http-bad", vec![complete()], verify);
    t["limits"]["verify_retries"] = json!(0);
    let (code, doc, stderr) = run(&agentd, &t);
    assert_eq!(code, 1, "{stderr}");
    let found = checks(&doc);
    assert!(found.iter().all(|c| c["ok"] == false), "{found:?}");
    let first = found[0]["message"].as_str().unwrap_or_default();
    // What the server answered is not quoted: a verifier is no way to read a URL.
    assert!(first.contains("/order/status: expected \"shipped\", found another value"), "{first}");
    assert!(!first.contains("saved"), "{first}");
    let second = found[1]["message"].as_str().unwrap_or_default();
    assert!(second.contains("answered 404, expected a 2xx status"), "{second}");
}

#[test]
fn the_output_check_reads_the_completion_output() {
    let agentd = Agentd::new();
    let schema = json!({"type": "object", "properties": {"user": {"type": "string"}}, "required": ["user"]});
    let done = |user: &str| json!({"complete": {"success": true, "summary": "ok", "output": {"user": user}}});
    let verify = json!([{"kind": "output", "expect": {"/user": "alice"}}]);
    let mut t = task("output-ok", vec![done("alice")], verify.clone());
    t["output_schema"] = schema.clone();
    let (code, doc, stderr) = run(&agentd, &t);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(doc["outcome"]["verified"], true, "{}", doc["outcome"]);

    let mut t = task("output-bad", vec![done("bob"), done("bob"), done("bob")], verify);
    t["output_schema"] = schema;
    let (code, doc, stderr) = run(&agentd, &t);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(doc["outcome"]["reason"], "verification_failed");
    // The output the model gave stays in the record.
    assert_eq!(doc["outcome"]["output"], json!({"user": "bob"}));
    let message = checks(&doc)[0]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("/user: expected \"alice\", found \"bob\""), "{message}");
}

#[test]
fn command_checks_run_config_programs_with_the_record_on_stdin() {
    let agentd = Agentd::with_config(
        "[verifiers.signed_in]\ncommand = [\"sh\", \"-c\", \"grep -q '\\\"screen\\\":\\\"welcome\\\"' && echo welcome seen\"]\n\
         [verifiers.never]\ncommand = [\"sh\", \"-c\", \"cat >/dev/null; echo 'the order is missing' >&2; exit 3\"]\n\
         timeout_secs = 5\n",
    );
    let mut turns = sign_in();
    turns.push(complete());
    let (code, doc, stderr) =
        run(&agentd, &task("command-ok", turns, json!([{"kind": "command", "use": "signed_in"}])));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(doc["outcome"]["verified"], true, "{}", doc["outcome"]);
    assert_eq!(checks(&doc)[0]["message"], "verifier signed_in passed: welcome seen");

    // Without signing in, the record's computer_state says `login`: grep fails; the other program fails too.
    let verify = json!([{"kind": "command", "use": "signed_in"}, {"kind": "command", "use": "never"}]);
    let mut t = task("command-bad", vec![complete()], verify);
    t["limits"]["verify_retries"] = json!(0);
    let (code, doc, stderr) = run(&agentd, &t);
    assert_eq!(code, 1, "{stderr}");
    let found = checks(&doc);
    assert_eq!(found[0]["ok"], false, "{found:?}");
    assert_eq!(found[1]["message"], "verifier never exited with status 3: the order is missing");
    assert_eq!(found[1]["evidence"]["exit_code"], 3);
}

#[test]
fn checks_run_at_the_end_of_a_task_that_did_not_complete() {
    let agentd = Agentd::new();
    // The model signs in and runs out of steps before completing: the record still says whether it got there.
    let mut t = task("steps", sign_in(), json!([{"kind": "mock_state", "expect": {"screen": "welcome"}}]));
    t["limits"]["max_steps"] = json!(2);
    let (code, doc, stderr) = run(&agentd, &t);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(doc["outcome"]["reason"], "max_steps", "{}", doc["outcome"]);
    assert_eq!(doc["outcome"]["verified"], true);
}

#[test]
fn a_check_naming_an_unknown_verifier_or_a_missing_image_is_refused_naming_the_field() {
    let agentd = Agentd::new();
    let (code, _, stderr) =
        run(&agentd, &task("unknown", vec![complete()], json!([{"kind": "command", "use": "nope"}])));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("verify[0].use") && stderr.contains("nope"), "{stderr}");
    let verify = json!([{"kind": "output", "expect": {}}, {"kind": "screen", "image": "missing.png"}]);
    let (code, _, stderr) = run(&agentd, &task("missing", vec![complete()], verify));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("verify[1].image"), "{stderr}");
}

#[test]
fn through_the_daemon_checks_are_refused_at_submit_or_verified_into_the_record_and_the_report() {
    let daemon =
        crate::support::Daemon::start("[verifiers.signed_in]\ncommand = [\"sh\", \"-c\", \"grep -q welcome\"]\n");
    let submit = |task: &Value| {
        let (code, body) =
            crate::support::http(&daemon.socket, "POST", "/v1/tasks", Some(task.to_string().as_bytes()), &[])
                .expect("submit");
        (code, serde_json::from_str::<Value>(&body).unwrap_or(Value::Null))
    };
    // An unknown verifier, a malformed check: refused with the field named.
    let (code, body) = submit(&json!({"instructions": "x", "verify": [{"kind": "command", "use": "nope"}]}));
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["error"]["field"], "verify[0].use", "{body}");
    let (code, body) = submit(
        &json!({"instructions": "x", "verify": [{"kind": "output", "expect": {}}, {"kind": "screen", "image": "/x.png", "min_score": 2}]}),
    );
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["error"]["field"], "verify[1].min_score", "{body}");

    // A task that signs in, checked two ways.
    let mut turns = sign_in();
    turns.push(complete());
    let mut t = task(
        "daemon-verified",
        turns,
        json!([
            {"kind": "mock_state", "expect": {"screen": "welcome", "fields": {"username": "alice"}}},
            {"kind": "command", "use": "signed_in"},
        ]),
    );
    t.as_object_mut().expect("object").remove("id");
    let (code, body) = submit(&t);
    assert_eq!(code, 201, "{body}");
    let id = body["id"].as_str().expect("id").to_string();
    let done = daemon.wait_terminal(&id, std::time::Duration::from_secs(60));
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["outcome"]["verified"], true, "{}", done["outcome"]);
    assert_eq!(done["outcome"]["checks"].as_array().map(Vec::len), Some(2));
    // The round is an event too.
    let events = daemon.cli(&["events", &id, "--json"]);
    assert!(events.stdout.contains("\"verify_finished\""), "{}", events.stdout);

    // Counted by kind and result.
    let (code, metrics) = crate::support::http(&daemon.socket, "GET", "/metrics", None, &[]).expect("metrics");
    assert_eq!(code, 200);
    for line in [
        "agentd_verifications_total{kind=\"mock_state\",ok=\"true\"} 1",
        "agentd_verifications_total{kind=\"command\",ok=\"true\"} 1",
        "agentd_verifications_total{kind=\"screen\",ok=\"false\"} 0",
    ] {
        assert!(metrics.contains(line), "lacks {line}: {metrics}");
    }

    // The HTML report lists the checks.
    let dir = tempfile::tempdir().expect("tempdir");
    let html = dir.path().join("report.html");
    let run = daemon.cli(&["export", &id, "--html", html.to_str().expect("path")]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let html = std::fs::read_to_string(html).expect("html");
    assert!(html.contains("data-verifiers=\"passed\""), "{html}");
    assert_eq!(html.matches("<li class=\"check ok\"").count(), 2, "{html}");
}

#[test]
fn a_guest_command_on_a_computer_that_runs_none_fails_saying_so() {
    let agentd = Agentd::new();
    let verify = json!([{"kind": "guest_command", "command": "true"}]);
    let mut t = task("guest-on-mock", vec![complete(), complete(), complete()], verify);
    t["limits"]["verify_retries"] = json!(0);
    let (code, doc, stderr) = run(&agentd, &t);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(doc["outcome"]["reason"], "verification_failed");
    let message = checks(&doc)[0]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("does not run commands in its guest"), "{message}");

    let empty = task("guest-empty", vec![complete()], json!([{"kind": "guest_command", "command": " "}]));
    let (code, _, stderr) = run(&agentd, &empty);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("verify[0]") && stderr.contains("command"), "{stderr}");
}
