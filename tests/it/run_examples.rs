//! `agentd run` end to end on the shipped examples: the real binary, the mock desktop, the scripted model,
//! the filesystem artifact store. Checks the result document, the step records, the screenshots (decoded)
//! and the mock desktop's final state.

use std::path::Path;

use agentd::screen::image::decode_png;
use agentd_computer::{Frame, Point};

use crate::support::{Agentd, Run, repo};

fn screenshot(agentd: &Agentd, url: &str) -> Frame {
    let path = url.strip_prefix("file://").unwrap_or_else(|| panic!("not a file URL: {url}"));
    assert!(Path::new(path).starts_with(agentd.data_dir()), "{path} is outside the data dir");
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    decode_png(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn run_example(agentd: &Agentd, task: &str) -> (Run, serde_json::Value) {
    let run = agentd.run(&["run", task, "--json"]);
    let doc = run.json();
    (run, doc)
}

#[test]
fn the_login_example_logs_in_and_records_everything() {
    let agentd = Agentd::new();
    let (run, doc) = run_example(&agentd, "config/tasks/mock-login.json");
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    // Progress on stderr: one line per step, then the outcome and where the screenshots went.
    assert_eq!(run.stderr.lines().filter(|l| l.trim_start().starts_with("step ")).count(), 4, "{}", run.stderr);
    assert!(run.stderr.contains("click(640,370) type(\"alice\")"), "{}", run.stderr);
    assert!(run.stderr.contains("screenshots: file://"), "{}", run.stderr);

    assert_eq!(doc["state"], "succeeded");
    assert_eq!(doc["outcome"]["success"], true);
    assert_eq!(doc["outcome"]["reason"], "completed");
    assert_eq!(doc["outcome"]["summary"], "Logged in as alice and opened Reports");
    assert_eq!(doc["attempt"], 1);
    assert_eq!(doc["task"]["computer"]["scene"], "login");
    for key in ["id", "created_at", "started_at", "finished_at", "worker", "usage"] {
        assert!(!doc[key].is_null(), "missing {key}");
    }
    let state = &doc["computer_state"];
    assert_eq!(state["screen"], "reports");
    assert_eq!(state["fields"]["username"], "alice");
    assert_eq!(state["screens_visited"], serde_json::json!(["login", "welcome", "reports"]));

    let steps = doc["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 4);
    let id = doc["id"].as_str().expect("id");
    let mut frames = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        assert_eq!(step["index"], i);
        for key in ["started_at", "duration_ms", "model_text", "actions", "results", "usage"] {
            assert!(!step[key].is_null(), "step {i} lacks {key}");
        }
        assert_eq!(step["actions"].as_array().map(Vec::len), step["results"].as_array().map(Vec::len));
        assert!(step["results"].as_array().into_iter().flatten().all(|r| r["ok"] == true), "step {i}: {step}");
        let shot = &step["screenshot"];
        assert_eq!((shot["width"].as_u64(), shot["height"].as_u64()), (Some(1280), Some(800)));
        let url = shot["url"].as_str().expect("url");
        assert!(url.ends_with(&format!("tasks/{id}/1/{i:05}.png")), "{url}");
        let frame = screenshot(&agentd, url);
        assert_eq!((frame.width(), frame.height()), (1280, 800));
        assert!(!frame.is_uniform(), "step {i} screenshot is blank");
        frames.push(frame);
    }
    assert_eq!(steps[0]["actions"][0], serde_json::json!({"type": "click", "x": 640, "y": 370}));
    // Every step acted on the screen, so each screenshot differs from the one before.
    for i in 1..frames.len() {
        assert!(frames[i].changed_pixels(&frames[i - 1]) > 100, "step {i} looks like step {}", i - 1);
        assert_eq!(steps[i]["screen_changed"], true);
    }
    // After typing "alice", the username field shows text where it was empty.
    let field = Point::new(560, 370);
    let region = |f: &Frame| f.crop(Point::new(field.x - 100, field.y - 10), agentd_computer::Size::new(200, 20));
    assert!(region(&frames[1]).changed_pixels(&region(&frames[0])) > 20);

    // The record on disk is the same document.
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(agentd.data_dir().join(format!("runs/{id}.json"))).expect("record file"))
            .expect("record JSON");
    assert_eq!(record, doc);
}

#[test]
fn the_form_example_fills_every_kind_of_widget() {
    let agentd = Agentd::new();
    let (run, doc) = run_example(&agentd, "config/tasks/mock-form.json");
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    let state = &doc["computer_state"];
    assert_eq!(state["screen"], "confirmation");
    assert_eq!(state["fields"]["full_name"], "Zoë Martín");
    assert_eq!(state["fields"]["email"], "zoe@example.com");
    assert_eq!(state["selections"]["country"], "Canada");
    assert_eq!(state["selections"]["plan"], "Team");
    assert_eq!(state["sliders"]["seats"], 10);
    assert_eq!(state["checkboxes"]["terms"], true);
    assert!(state["scroll"]["terms_text"].as_u64().unwrap_or(0) > 0, "the terms were scrolled");
    let drag = &doc["steps"][3]["actions"][1];
    assert_eq!(drag["type"], "drag");
    assert_eq!(drag["path"].as_array().map(Vec::len), Some(3));
}

/// The shipped examples name no `id`: each run is a task of its own, and the second run of one keeps the
/// first's record.
#[test]
fn each_run_of_a_shipped_example_is_a_task_of_its_own() {
    let agentd = Agentd::new();
    for entry in std::fs::read_dir(repo().join("config/tasks")).expect("config/tasks").flatten() {
        let text = std::fs::read_to_string(entry.path()).expect("read");
        let task: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        assert!(task.get("id").is_none(), "{}: a shipped example names no id", entry.path().display());
    }
    let (first, one) = run_example(&agentd, "config/tasks/mock-form.json");
    let (second, two) = run_example(&agentd, "config/tasks/mock-form.json");
    assert_eq!((first.code, second.code), (0, 0), "{}\n{}", first.stderr, second.stderr);
    assert_ne!(one["id"], two["id"]);
    for doc in [&one, &two] {
        let path = agentd.data_dir().join(format!("runs/{}.json", doc["id"].as_str().expect("id")));
        let record: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).expect("record")).expect("JSON");
        assert_eq!(&record, doc, "{}", path.display());
    }
}

/// A task file's `id` is an idempotency key for `agentd run` as for `agentd submit`: the same task file again
/// gets the earlier run's result without running; another task file under that id is refused (exit 2, at
/// the `id` field), and the earlier record is left as it was.
#[test]
fn a_run_under_an_id_that_ran_before_is_not_run_again() {
    let agentd = Agentd::new();
    let task = |summary: &str| {
        serde_json::json!({
            "id": "once",
            "instructions": "say done",
            "computer": {"provider": "mock", "scene": "blank"},
            "model": {"provider": "scripted", "script": {"turns": [
                {"actions": [{"type": "move", "x": 5, "y": 5}]},
                {"complete": {"success": true, "summary": summary}}
            ]}}
        })
    };
    let path = agentd.dir.path().join("once.json");
    std::fs::write(&path, serde_json::to_string_pretty(&task("done")).expect("JSON")).expect("write task");
    let file = path.to_str().expect("path");
    let first = agentd.run(&["run", file, "--json"]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let record = agentd.data_dir().join("runs/once.json");
    let written = std::fs::read(&record).expect("the first run's record");

    let again = agentd.run(&["run", file, "--json"]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(again.json(), first.json(), "the earlier run's document");
    assert!(again.stderr.contains("is not run again"), "{}", again.stderr);
    assert!(!again.stderr.lines().any(|l| l.trim_start().starts_with("step ")), "it did not run: {}", again.stderr);
    let plain = agentd.run(&["run", file]);
    assert_eq!((plain.code, plain.stdout.trim()), (0, "succeeded: done (2 steps)"), "{}", plain.stderr);

    std::fs::write(&path, serde_json::to_string_pretty(&task("other")).expect("JSON")).expect("write task");
    let other = agentd.run(&["run", file]);
    assert_eq!(other.code, 2, "{}", other.stderr);
    assert!(other.stderr.contains("once.json: id (line "), "names the field and its line: {}", other.stderr);
    assert!(other.stderr.contains("task once was run before from another task file"), "{}", other.stderr);
    assert_eq!(std::fs::read(&record).expect("record"), written, "the earlier record is kept");
}

#[test]
fn a_task_on_stdin_runs_and_a_failed_task_exits_1() {
    let agentd = Agentd::new();
    let task = serde_json::json!({
        "instructions": "try to log in with a wrong password",
        "computer": {"provider": "mock", "scene": "login", "width": 1024, "height": 768},
        "model": {"provider": "scripted", "script": {"turns": [
            {"actions": [{"type": "click", "x": 512, "y": 354}, {"type": "type", "text": "alice"},
                         {"type": "keypress", "keys": ["Tab"]}, {"type": "type", "text": "wrong"},
                         {"type": "keypress", "keys": ["enter"]}]},
            {"say": "The form says the password is wrong.", "complete": {"success": false, "summary": "wrong password"}}
        ]}}
    });
    let run = agentd.run_with_stdin(&["run", "-", "--json"], task.to_string().as_bytes());
    assert_eq!(run.code, 1, "{}", run.stderr);
    let doc = run.json();
    assert_eq!(doc["state"], "failed");
    assert_eq!(doc["outcome"]["reason"], "completed");
    assert_eq!(doc["computer_state"]["screen"], "login");
    assert_eq!(doc["computer_state"]["labels"]["error"], "Invalid username or password");
    assert_eq!(doc["steps"][0]["screenshot"]["width"], 1024);
}

#[test]
fn limits_end_a_task_with_their_reason_and_exit_1() {
    let agentd = Agentd::new();
    let turns: Vec<_> =
        (0..20).map(|i| serde_json::json!({"actions": [{"type": "move", "x": 10 + i, "y": 10}]})).collect();
    let task = serde_json::json!({
        "instructions": "wander",
        "computer": {"provider": "mock", "scene": "blank"},
        "model": {"provider": "scripted", "script": {"turns": turns}},
        "limits": {"max_steps": 4}
    });
    let path = agentd.dir.path().join("wander.json");
    std::fs::write(&path, task.to_string()).expect("write task");
    let run = agentd.run(&["run", path.to_str().expect("path"), "--json"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let doc = run.json();
    assert_eq!(doc["outcome"]["reason"], "max_steps");
    assert_eq!(doc["steps"].as_array().map(Vec::len), Some(4));
    assert_eq!(doc["computer_state"]["actions_received"], 4);
    assert!(doc["final_screenshot"]["url"].as_str().is_some_and(|u| u.ends_with("00004.png")));
}

#[test]
fn without_json_the_result_is_a_human_line_on_stdout() {
    let agentd = Agentd::new();
    let run = agentd.run(&["run", repo().join("config/tasks/mock-login.json").to_str().expect("path")]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout.trim(), "succeeded: Logged in as alice and opened Reports (4 steps)");
}

/// The library example (`examples/library.rs`): built by `cargo test` with every example, run here as a
/// program. It prints each event as a JSON line and the outcome last; its tool's result is in the stream.
#[test]
fn the_library_example_runs_an_in_process_tool_on_the_mock_desktop() {
    // Test binaries live in target/<profile>/deps; examples in target/<profile>/examples.
    let exe = std::env::current_exe().expect("test binary path");
    let example = exe.parent().and_then(Path::parent).map(|dir| dir.join("examples").join("library"));
    let Some(example) = example.filter(|p| p.is_file()) else {
        agentd_testenv::skip("the library example is not built (`cargo build --examples`; `cargo test` builds it)");
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let output = std::process::Command::new(&example).arg(dir.path()).output().expect("run the example");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{}\nstdout:\n{stdout}\nstderr:\n{stderr}", example.display());
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(types.first(), Some(&"task_started"), "{types:?}");
    assert_eq!(types.last(), Some(&"task_finished"), "{types:?}");
    let finished = events.iter().find(|e| e["type"] == "tool_finished").expect("tool_finished");
    assert_eq!(finished["name"], "lookup_account");
    assert_eq!(finished["ok"], true);
    assert_eq!(finished["output"], "alice is Alice Liddell, account active (roles: admin, reports)");
    assert_eq!(finished["details"], serde_json::json!({"directory_id": 1001}));
    let started = events.iter().find(|e| e["type"] == "tool_started").expect("tool_started");
    assert_eq!(started["arguments"], serde_json::json!({"username": "alice", "with_roles": true}));
    assert!(stdout.contains("outcome: {\"success\":true"), "{stdout}");
    assert_eq!(events.last().map(|e| e["state"].clone()), Some(serde_json::json!("succeeded")));
    // Its screenshots went to the data dir it was given.
    assert!(dir.path().join("artifacts").is_dir(), "{stderr}");
}

/// Ctrl-C during `agentd run` aborts the run through the library's handle: the task ends `cancelled` at its
/// next safe point, its record and result document are written, and the exit code is 1.
#[test]
fn ctrl_c_cancels_agentd_run_at_its_next_safe_point() {
    use std::io::BufRead;
    let agentd = Agentd::new();
    let turns: Vec<_> =
        (0..40).map(|_| serde_json::json!({"actions": [{"type": "wait", "duration_ms": 200}]})).collect();
    let task = serde_json::json!({
        "instructions": "wait a long time",
        "computer": {"provider": "mock", "scene": "blank"},
        "model": {"provider": "scripted", "script": {"turns": turns}}
    });
    let path = agentd.dir.path().join("wait.json");
    std::fs::write(&path, task.to_string()).expect("write task");
    let mut child = agentd
        .command()
        .args(["run", &path.display().to_string(), "--json"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn agentd");
    let mut stderr = std::io::BufReader::new(child.stderr.take().expect("stderr"));
    let mut seen = String::new();
    // The first step line says the run is under way.
    loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).expect("read stderr") == 0 {
            panic!("agentd ended before its first step:\n{seen}");
        }
        seen.push_str(&line);
        if line.trim_start().starts_with("step ") {
            break;
        }
    }
    // SAFETY: kill has no memory preconditions; the pid is our child's, which has not been waited for.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).expect("read stderr");
    let output = child.wait_with_output().expect("wait");
    let stderr = format!("{seen}{rest}");
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&output.stdout).expect("the result document");
    assert_eq!(doc["state"], "cancelled", "{stderr}");
    assert_eq!(doc["outcome"]["reason"], "cancelled");
    let steps = doc["steps"].as_array().map_or(0, Vec::len);
    assert!((1..40).contains(&steps), "{steps} steps");
    assert!(stderr.contains("cancelling the task at its next safe point"), "{stderr}");
}
