//! The malformed task corpus (`tests/fixtures/bad-tasks`): every file makes `agentd run` exit 2 with one
//! message that names the file and the problem, leaves no record behind, and never panics.

use std::collections::BTreeMap;

use crate::support::{Agentd, files_under, fixtures};

fn corpus() -> BTreeMap<String, Vec<String>> {
    let text = std::fs::read_to_string(fixtures().join("bad-tasks/expected.json")).expect("expected.json");
    serde_json::from_str(&text).expect("expected.json is valid")
}

#[test]
fn every_malformed_task_exits_2_naming_the_problem() {
    let cases = corpus();
    assert!(cases.len() >= 30, "the corpus has {} cases", cases.len());
    let agentd = Agentd::new();
    let mut failures = Vec::new();
    for (file, expected) in &cases {
        let path = fixtures().join("bad-tasks").join(file);
        let run = agentd.run(&["run", path.to_str().expect("utf-8 path")]);
        let mut problems = Vec::new();
        if run.code != 2 {
            problems.push(format!("exit {} (want 2)", run.code));
        }
        if !run.stderr.contains(file.as_str()) {
            problems.push("message does not name the file".to_string());
        }
        for want in expected {
            if !run.stderr.contains(want.as_str()) {
                problems.push(format!("message lacks {want:?}"));
            }
        }
        // Every problem has a place in the file.
        if !(run.stderr.contains("(line ") && run.stderr.contains(", column ")) {
            problems.push("message gives no line and column".into());
        }
        if run.stderr.contains("field `?`") {
            problems.push("message names no real field".into());
        }
        if run.stderr.contains("panicked") {
            problems.push("panicked".into());
        }
        if !run.stdout.is_empty() {
            problems.push("printed on stdout".into());
        }
        if !problems.is_empty() {
            failures.push(format!("{file}: {}\n    stderr: {}", problems.join("; "), run.stderr.trim()));
        }
    }
    assert!(failures.is_empty(), "{} case(s) failed:\n{}", failures.len(), failures.join("\n"));
    // Nothing was recorded for any of them.
    assert!(files_under(&agentd.data_dir().join("runs")).is_empty());
    assert!(files_under(&agentd.data_dir().join("artifacts")).is_empty());
}

#[test]
fn malformed_task_on_stdin_names_stdin() {
    let agentd = Agentd::new();
    let run = agentd.run_with_stdin(&["run", "-"], b"{\"instructions\": \"x\",\n \"limits\": {\"max_steps\": 0}}");
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("<stdin>") && run.stderr.contains("`limits.max_steps`") && run.stderr.contains("line 2"),
        "{}",
        run.stderr
    );
}

#[test]
fn missing_task_file_and_bad_config_exit_2() {
    let agentd = Agentd::new();
    let run = agentd.run(&["run", "no/such/task.json"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("no/such/task.json") && run.stderr.contains("cannot read"), "{}", run.stderr);

    let bad = Agentd::with_config("[worker]\nconcurrency = \"lots\"\nsurprise = 1\n");
    let run = bad.run(&["run", "config/tasks/mock-login.json"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("`worker.concurrency`") && run.stderr.contains("`worker.surprise`"), "{}", run.stderr);
}

#[test]
fn bad_arguments_exit_2() {
    let agentd = Agentd::new();
    assert_eq!(agentd.run(&["run"]).code, 2);
    assert_eq!(agentd.run(&["frobnicate"]).code, 2);
    assert_eq!(agentd.run(&["--help"]).code, 0);
}
