//! The stuck-loop guard (docs/task-file.md) end to end through `agentd run`: the mock desktop's real pixels decide what
//! changed, the scripted model loops the way real models do, and the record says what the guard saw.

use crate::support::Agentd;

/// Runs a scripted task on the login scene and returns the exit code, the result document and stderr.
fn run(
    agentd: &Agentd,
    name: &str,
    turns: Vec<serde_json::Value>,
    guard: serde_json::Value,
) -> (i32, serde_json::Value, String) {
    let task = serde_json::json!({
        "instructions": "sign in",
        "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "scripted", "script": {"turns": turns}},
        "limits": {"max_steps": 40},
        "guard": guard,
    });
    let path = agentd.dir.path().join(format!("{name}.json"));
    std::fs::write(&path, task.to_string()).expect("write task");
    let run = agentd.run(&["run", path.to_str().expect("path"), "--json"]);
    let doc = run.json();
    (run.code, doc, run.stderr)
}

fn finish() -> serde_json::Value {
    serde_json::json!({"complete": {"success": true, "summary": "done"}})
}

/// The steps whose model call carried a guard warning: (index, check).
fn warnings(doc: &serde_json::Value) -> Vec<(u64, String)> {
    doc["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter(|s| !s["guard"].is_null())
        .map(|s| (s["index"].as_u64().unwrap_or(999), s["guard"]["check"].as_str().unwrap_or("?").to_string()))
        .collect()
}

#[test]
fn clicking_the_same_empty_spot_again_and_again_ends_stuck() {
    let agentd = Agentd::new();
    // An empty corner of the window: clicking there changes nothing (after the first click takes the focus).
    let turns: Vec<_> = (0..30)
        .map(|_| serde_json::json!({"actions": [{"type": "click", "x": 1200, "y": 760}]}))
        .chain(std::iter::once(finish()))
        .collect();
    let (code, doc, stderr) = run(&agentd, "repeat", turns, serde_json::json!({}));
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(doc["outcome"]["reason"], "stuck", "{}", doc["outcome"]);
    let summary = doc["outcome"]["summary"].as_str().unwrap_or_default();
    assert!(summary.contains("click(1200,760)") && summary.contains("again after a warning"), "{summary}");
    // Warned at the threshold (3) — and once more when the steps without change reached theirs (5) — and
    // stopped when the repeats reached it again: well before the step limit.
    let warned = warnings(&doc);
    assert_eq!(warned.first().map(|w| w.1.as_str()), Some("repeat_actions"), "{warned:?}");
    assert!(warned.len() <= 2, "{warned:?}");
    let steps = doc["steps"].as_array().map(Vec::len).unwrap_or(0);
    assert!((6..=8).contains(&steps), "stopped after {steps} steps");
    assert!(stderr.contains("stuck-loop guard: repeat_actions reached 3"), "{stderr}");
}

#[test]
fn different_actions_that_change_nothing_end_stuck_by_the_no_change_count() {
    let agentd = Agentd::new();
    // Keys nothing on the sign-in window answers to (and nothing has the focus): the screen stays the same.
    let keys = ["F5", "F6", "F7", "Escape"];
    let turns: Vec<_> = (0..30)
        .map(|i| serde_json::json!({"actions": [{"type": "keypress", "keys": [keys[i % keys.len()]]}]}))
        .chain(std::iter::once(finish()))
        .collect();
    let (code, doc, stderr) = run(&agentd, "nochange", turns, serde_json::json!({"no_change_steps": 4}));
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(doc["outcome"]["reason"], "stuck");
    assert_eq!(warnings(&doc).iter().map(|w| w.1.as_str()).collect::<Vec<_>>(), ["no_change_steps"]);
    let steps = doc["steps"].as_array().map(Vec::len).unwrap_or(0);
    assert!((8..=10).contains(&steps), "stopped after {steps} steps");
}

#[test]
fn turns_without_any_call_end_stuck_by_the_idle_count() {
    let agentd = Agentd::new();
    let turns: Vec<_> = (0..30)
        .map(|_| serde_json::json!({"say": "Let me think about it."}))
        .chain(std::iter::once(finish()))
        .collect();
    let (code, doc, stderr) = run(&agentd, "idle", turns, serde_json::json!({"idle_turns": 2}));
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(doc["outcome"]["reason"], "stuck");
    assert!(doc["outcome"]["summary"].as_str().unwrap_or_default().contains("called neither"));
    assert_eq!(doc["steps"].as_array().map(Vec::len), Some(4));
}

#[test]
fn a_slow_but_progressing_run_is_left_alone() {
    let agentd = Agentd::new();
    // Typing one letter per step into the first field (Tab gives it the focus), with waits for a "slow page"
    // between: every letter changes the screen, the waits do not.
    let turns: Vec<_> = std::iter::once(serde_json::json!({"actions": [{"type": "keypress", "keys": ["Tab"]}]}))
        .chain((0..24).map(|i| {
            if i % 3 == 2 {
                serde_json::json!({"actions": [{"type": "type", "text": "a"}]})
            } else {
                serde_json::json!({"actions": [{"type": "wait", "duration_ms": 10}]})
            }
        }))
        .chain(std::iter::once(finish()))
        .collect();
    let (code, doc, stderr) = run(&agentd, "slow", turns, serde_json::json!({}));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(doc["outcome"]["reason"], "completed");
    assert!(warnings(&doc).is_empty(), "{:?}", warnings(&doc));
    assert_eq!(doc["computer_state"]["fields"]["username"], "aaaaaaaa");
}

#[test]
fn the_guard_can_be_turned_off() {
    let agentd = Agentd::new();
    let turns: Vec<_> = (0..12)
        .map(|_| serde_json::json!({"actions": [{"type": "click", "x": 1200, "y": 760}]}))
        .chain(std::iter::once(finish()))
        .collect();
    let off = serde_json::json!({"no_change_steps": 0, "repeat_actions": 0, "idle_turns": 0});
    let (code, doc, stderr) = run(&agentd, "off", turns, off);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(doc["steps"].as_array().map(Vec::len), Some(13));
}
