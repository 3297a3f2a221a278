//! `agentd compile` (docs/replay-and-verify.md): a finished task's trajectory as a scripted model's script with typed
//! texts named
//! as parameters, and that script played again with other values (`model.params`) landing the same state.

use crate::support::{Agentd, repo};

#[test]
fn a_compiled_run_plays_again_with_other_values() {
    let agentd = Agentd::new();
    let recorded = agentd.run(&["run", "config/tasks/mock-form.json", "--json"]);
    assert_eq!(recorded.code, 0, "{}", recorded.stderr);
    let recorded = recorded.json();
    let id = recorded["id"].as_str().expect("the run's id").to_string();

    let compiled = agentd.run(&["compile", &id, "--local", "--param", "email=zoe@example.com"]);
    assert_eq!(compiled.code, 0, "{}", compiled.stderr);
    let script: serde_json::Value = serde_json::from_str(&compiled.stdout).expect("the script is JSON");
    let turns = script["turns"].as_array().expect("turns");
    assert_eq!(turns.len(), recorded["steps"].as_array().map(Vec::len).unwrap_or(0), "one turn per step");
    let typed: Vec<&str> = turns
        .iter()
        .flat_map(|t| t["actions"].as_array().into_iter().flatten())
        .filter(|a| a["type"] == "type")
        .filter_map(|a| a["text"].as_str())
        .collect();
    assert!(typed.contains(&"{{email}}"), "{typed:?}");
    assert!(typed.contains(&"Zoë Martín"), "texts not named stay as typed: {typed:?}");
    assert!(!compiled.stdout.contains("zoe@example.com"), "{}", compiled.stdout);
    for (turn, step) in turns.iter().zip(recorded["steps"].as_array().into_iter().flatten()) {
        assert_eq!(turn["say"].as_str().unwrap_or_default(), step["model_text"].as_str().unwrap_or_default());
    }
    assert_eq!(turns.last().map(|t| t["complete"]["success"].clone()), Some(serde_json::json!(true)));

    // The script, played with another address, fills the same form with it.
    let script_path = agentd.dir.path().join("signup.json");
    std::fs::write(&script_path, &compiled.stdout).expect("write the script");
    let task = serde_json::json!({
        "id": "compiled-form",
        "instructions": "Sign up (compiled)",
        "computer": {"provider": "mock", "scene": "form"},
        "model": {"provider": "scripted", "script": script_path, "params": {"email": "ada@example.com"}},
        "limits": {"max_steps": 15}
    });
    let task_path = agentd.dir.path().join("task.json");
    std::fs::write(&task_path, task.to_string()).expect("write the task");
    let replayed = agentd.run(&["run", task_path.to_str().expect("path"), "--json"]);
    assert_eq!(replayed.code, 0, "{}", replayed.stderr);
    let replayed = replayed.json();
    let mut expected = recorded["computer_state"].clone();
    expected["fields"]["email"] = "ada@example.com".into();
    assert_eq!(replayed["computer_state"], expected);
}

#[test]
fn compile_and_params_refuse_what_does_not_fit() {
    let agentd = Agentd::new();
    let recorded = agentd.run(&["run", "config/tasks/mock-form.json", "--json"]);
    assert_eq!(recorded.code, 0, "{}", recorded.stderr);
    let id = recorded.json()["id"].as_str().expect("the run's id").to_string();

    let never_typed = agentd.run(&["compile", &id, "--local", "--param", "email=nobody@example.com"]);
    assert_eq!(never_typed.code, 2, "{}", never_typed.stderr);
    assert!(never_typed.stderr.contains("--param email=nobody@example.com"), "{}", never_typed.stderr);
    assert!(never_typed.stdout.is_empty());
    let bad_name = agentd.run(&["compile", &id, "--local", "--param", "e mail=zoe@example.com"]);
    assert_eq!(bad_name.code, 2, "{}", bad_name.stderr);
    assert!(bad_name.stderr.contains("NAME=TEXT"), "{}", bad_name.stderr);
    let unknown = agentd.run(&["compile", "no-such-task", "--local"]);
    assert_eq!(unknown.code, 2, "{}", unknown.stderr);
    assert!(unknown.stderr.contains("no-such-task"), "{}", unknown.stderr);

    // A script with {{email}} and no value for it, or a value it never types: exit 2 naming model.params.
    let compiled = agentd.run(&["compile", &id, "--local", "--param", "email=zoe@example.com"]);
    let script_path = agentd.dir.path().join("signup.json");
    std::fs::write(&script_path, &compiled.stdout).expect("write the script");
    for (params, field) in [
        (serde_json::json!({}), "model.params"),
        (serde_json::json!({"email": "a@x", "phone": "1"}), "model.params.phone"),
    ] {
        let task = serde_json::json!({
            "instructions": "Sign up (compiled)",
            "computer": {"provider": "mock", "scene": "form"},
            "model": {"provider": "scripted", "script": script_path, "params": params},
        });
        let run = agentd.run_with_stdin(&["run", "-"], task.to_string().as_bytes());
        assert_eq!(run.code, 2, "{}", run.stderr);
        assert!(run.stderr.contains(field), "{field}: {}", run.stderr);
    }
    assert!(repo().join("config/tasks/mock-form.json").exists());
}
