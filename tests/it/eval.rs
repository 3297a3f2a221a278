//! `agentd eval` (docs/eval.md): a suite whose runs pass, fail verification and fail for infrastructure
//! reasons, in this process and through the daemon on SQLite and PostgreSQL, with the exact counts and the
//! interval; the baseline gate; an interrupted evaluation continued; the HTML page in Chromium; bad suites;
//! and the project's own suite against its baseline (CI's gate on the agent loop).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{Agentd, Backend, Daemon, repo};

/// A port nothing listens on: bound, then let go.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    port
}

/// The model config under which the `no-model` task's model is unreachable at once (no retries).
fn unreachable_model() -> String {
    format!("[models.openai-compatible]\nbase_url = \"http://127.0.0.1:{}/v1\"\nmax_retries = 0\n", closed_port())
}

/// A suite of three tasks, repeated twice: `login` passes (the project's suite's own task file), `wrong-screen`
/// completes on a screen its verifier does not accept (verification fails), `no-model` meets a model nobody
/// serves (an infrastructure failure).
fn three_kinds(dir: &Path) -> PathBuf {
    let login = repo().join("config/suites/mock/login.json");
    let script = repo().join("config/scripts/mock-login.json");
    let suite = format!(
        r#"name = "three kinds"
repeat = 2
concurrency = 2

[[tasks]]
path = {login:?}

[[tasks]]
id = "wrong-screen"
instructions = "Log in as alice and stay on the welcome screen"
computer = {{ provider = "mock", scene = "login" }}
model = {{ provider = "scripted", script = {script:?} }}
limits = {{ max_steps = 10, verify_retries = 0 }}
verify = [{{ kind = "mock_state", expect = {{ screen = "welcome" }} }}]

[[tasks]]
id = "no-model"
instructions = "Log in as alice and open Reports"
computer = {{ provider = "mock", scene = "login" }}
model = {{ provider = "openai-compatible", model = "nobody-serves-this" }}
limits = {{ max_steps = 5 }}
verify = [{{ kind = "mock_state", expect = {{ screen = "reports" }} }}]
"#
    );
    let path = dir.join("three-kinds.toml");
    std::fs::write(&path, suite).expect("write suite");
    path
}

/// The exact result of [`three_kinds`], wherever it ran.
fn check_three_kinds(result: &Value, stderr: &str) {
    let context = format!("{result:#}\nstderr:\n{stderr}");
    assert_eq!(result["suite"], "three kinds", "{context}");
    assert_eq!(result["repeat"], 2, "{context}");
    let models = result["models"].as_array().expect("models");
    assert_eq!(models.len(), 1, "{context}");
    let model = &models[0];
    assert_eq!(model["name"], "(task's own model)", "{context}");
    let counts: Vec<u64> = ["runs", "passed", "failed", "infrastructure_failures", "interrupted"]
        .iter()
        .map(|k| model[k].as_u64().unwrap_or(u64::MAX))
        .collect();
    assert_eq!(counts, [4, 2, 2, 2, 0], "runs, passed, failed, infrastructure, interrupted:\n{context}");
    assert_eq!(model["pass_rate"], 0.5, "{context}");
    // Wilson's 95 % interval of 2 in 4: (0.5 + z²/8 ± z·√(1/16 + z²/64)) / (1 + z²/4) = 0.15 and 0.85.
    assert_eq!(model["interval"], serde_json::json!([0.15, 0.85]), "{context}");
    // pass^2: login passed both repeats, wrong-screen neither; no-model has no result and is not counted.
    assert_eq!(model["pass_all_k"], 0.5, "{context}");
    let eval = result["eval"].as_str().expect("eval id");
    let tasks = model["tasks"].as_array().expect("tasks");
    let names: Vec<&str> = tasks.iter().map(|t| t["name"].as_str().unwrap_or("")).collect();
    assert_eq!(names, ["login", "wrong-screen", "no-model"], "{context}");
    for (task, (runs, passed, infra)) in tasks.iter().zip([(2, 2, 0), (2, 0, 0), (0, 0, 2)]) {
        assert_eq!(
            (task["runs"].as_u64(), task["passed"].as_u64(), task["infrastructure_failures"].as_u64()),
            (Some(runs), Some(passed), Some(infra)),
            "{}: {context}",
            task["name"]
        );
        let ids = task["task_ids"].as_array().expect("task_ids");
        assert_eq!(ids.len(), 2, "{context}");
        assert!(ids.iter().all(|id| id.as_str().is_some_and(|id| id.starts_with(eval))), "{context}");
    }
    let reasons = |i: usize| -> Vec<String> {
        tasks[i]["failures"].as_array().map_or_else(Vec::new, |f| {
            f.iter()
                .map(|f| format!("{}/{}", f["verdict"].as_str().unwrap_or(""), f["reason"].as_str().unwrap_or("")))
                .collect()
        })
    };
    assert_eq!(reasons(0), Vec::<String>::new(), "{context}");
    assert_eq!(reasons(1), ["failed/verification_failed"; 2], "{context}");
    assert_eq!(reasons(2), ["infrastructure/error"; 2], "{context}");
}

#[test]
fn a_suite_run_here_counts_passes_model_failures_and_infrastructure_failures_apart() {
    let agentd = Agentd::with_config(&unreachable_model());
    let suite = three_kinds(agentd.dir.path());
    let run = agentd.run(&["eval", suite.to_str().expect("path"), "--local", "--json"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    check_three_kinds(&result, &run.stderr);
    // Every run is an ordinary task: its record says which evaluation, suite, task, model and repeat it was.
    let id = result["models"][0]["tasks"][1]["task_ids"][1].as_str().expect("id");
    let record: Value = serde_json::from_slice(
        &std::fs::read(agentd.data_dir().join("runs").join(format!("{id}.json"))).expect("the run's record"),
    )
    .expect("record JSON");
    assert_eq!(
        record["task"]["metadata"]["eval"],
        serde_json::json!({"id": result["eval"], "suite": "three kinds", "task": "wrong-screen",
            "model": "(task's own model)", "repeat": 2, "repeats": 2, "runs": 6}),
    );
    // The table for people says the same.
    let table = agentd.run(&["eval", suite.to_str().expect("path"), "--local"]);
    assert_eq!(table.code, 0, "{}", table.stderr);
    assert!(table.stdout.contains("pass rate 50.0% of 4 runs, 95% interval [15.0%, 85.0%]"), "{}", table.stdout);
    assert!(table.stdout.contains("not counted: 2 infrastructure failure(s), 0 interrupted"), "{}", table.stdout);
}

fn through_the_daemon(backend: Backend) {
    let daemon = Daemon::start_on_with_env(
        backend,
        "",
        "lease_secs = 3\nheartbeat_secs = 1\npoll_ms = 100\nmax_attempts = 1",
        &unreachable_model(),
        Vec::new(),
    );
    let suite = three_kinds(daemon.agentd.dir.path());
    let run = daemon.cli(&["eval", suite.to_str().expect("path"), "--json"]);
    assert_eq!(run.code, 0, "{}\n{}\n{}", run.stdout, run.stderr, daemon.log());
    let result = run.json();
    check_three_kinds(&result, &run.stderr);
    // The daemon has every run as a task of its own, named by the evaluation.
    let id = result["models"][0]["tasks"][0]["task_ids"][0].as_str().expect("id");
    let task = daemon.task(id);
    assert_eq!(task["state"], "succeeded", "{task:#}");
    assert_eq!(task["task"]["metadata"]["eval"]["task"], "login", "{task:#}");
    // The same evaluation continued runs nothing again: every run is found finished under its id.
    let eval = result["eval"].as_str().expect("eval");
    let again = daemon.cli(&["eval", suite.to_str().expect("path"), "--continue", eval, "--json"]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(again.json()["models"], result["models"], "{}", again.stderr);
    let list = daemon.cli(&["list", "--limit", "100", "--json"]);
    assert_eq!(list.json()["tasks"].as_array().map(Vec::len), Some(6), "{}", list.stdout);
}

#[test]
fn a_suite_through_the_daemon_on_sqlite_counts_exactly() {
    through_the_daemon(Backend::Sqlite);
}

#[test]
fn a_suite_through_the_daemon_on_postgresql_counts_exactly() {
    let Some(backend) = Backend::postgres() else { return };
    through_the_daemon(backend);
}

#[test]
fn a_baseline_passes_a_result_within_its_interval_and_fails_one_below_it() {
    let agentd = Agentd::with_config(&unreachable_model());
    let suite = three_kinds(agentd.dir.path());
    let suite = suite.to_str().expect("path");
    let first = agentd.run(&["eval", suite, "--local", "--json"]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let baseline = agentd.dir.path().join("baseline.json");
    std::fs::write(&baseline, &first.stdout).expect("write baseline");
    let same = agentd.run(&["eval", suite, "--local", "--baseline", baseline.to_str().expect("path")]);
    assert_eq!(same.code, 0, "{}", same.stderr);
    assert!(
        same.stderr.contains("baseline: (task's own model): 50.0% (baseline 50.0% [15.0%, 85.0%]): ok"),
        "{}",
        same.stderr
    );

    // A baseline whose interval starts above 50 %: this result is a regression, exit 1.
    let mut higher: Value = serde_json::from_str(&first.stdout).expect("json");
    higher["models"][0]["pass_rate"] = 0.9.into();
    higher["models"][0]["interval"] = serde_json::json!([0.6, 1.0]);
    std::fs::write(&baseline, higher.to_string()).expect("write baseline");
    let worse = agentd.run(&["eval", suite, "--local", "--json", "--baseline", baseline.to_str().expect("path")]);
    assert_eq!(worse.code, 1, "{}", worse.stderr);
    assert!(worse.stderr.contains("50.0% is below the baseline's interval [60.0%, 100.0%]"), "{}", worse.stderr);
    // The result is still printed whole.
    assert_eq!(worse.json()["models"][0]["passed"], 2);

    // A baseline that is not a result: exit 2 before anything runs, naming the file.
    std::fs::write(&baseline, "{\"models\": 3}").expect("write baseline");
    let bad = agentd.run(&["eval", suite, "--local", "--baseline", baseline.to_str().expect("path")]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("baseline.json: field `models`"), "{}", bad.stderr);
    assert!(!bad.stderr.contains("[1/6]"), "nothing ran: {}", bad.stderr);
}

#[test]
fn an_interrupted_evaluation_continues_without_running_finished_runs_again() {
    let agentd = Agentd::new();
    let dir = agentd.dir.path();
    // `quick` ends at once; `slow` waits half a second a turn for 6 turns: Ctrl-C comes while it runs.
    let slow_script = serde_json::json!({"turns": (0..6)
        .map(|_| serde_json::json!({"actions": [{"type": "wait", "duration_ms": 500}]}))
        .chain([serde_json::json!({"complete": {"success": true, "summary": "waited"}})])
        .collect::<Vec<_>>()});
    let quick_script = serde_json::json!({"turns": [{"complete": {"success": true, "summary": "done"}}]});
    let task = |name: &str, script: &Value| {
        serde_json::json!({
            "id": name,
            "instructions": format!("the {name} task"),
            "computer": {"provider": "mock", "scene": "login"},
            "model": {"provider": "scripted", "script": script},
            "limits": {"max_steps": 30},
            "verify": [{"kind": "mock_state", "expect": {"screen": "login"}}],
        })
    };
    let suite = serde_json::json!({
        "name": "interrupted",
        "repeat": 2,
        "concurrency": 1,
        "tasks": [task("quick", &quick_script), task("slow", &slow_script)],
    });
    let suite_path = dir.join("suite.json");
    std::fs::write(&suite_path, suite.to_string()).expect("write suite");
    let suite_arg = suite_path.to_str().expect("path");

    let mut child = agentd
        .command()
        .args(["eval", suite_arg, "--local"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn agentd eval");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut seen = Vec::new();
    // The first run (quick, repeat 1) finished; the second (slow) is running or about to start.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let line = lines.next().and_then(Result::ok);
        let Some(line) = line else { panic!("agentd eval ended before its first run finished:\n{}", seen.join("\n")) };
        seen.push(line.clone());
        if line.contains("[1/4]") {
            break;
        }
        assert!(Instant::now() < deadline, "no run finished within 60 s:\n{}", seen.join("\n"));
    }
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().expect("wait agentd eval");
    seen.extend(rest);
    let stderr = seen.join("\n");
    assert_eq!(status.code(), Some(130), "{stderr}");
    let eval = seen
        .iter()
        .find_map(|l| l.split("agentd: evaluation ").nth(1).and_then(|r| r.split(':').next()))
        .expect("the evaluation's id")
        .to_string();
    assert!(stderr.contains(&format!("--continue {eval} --local")), "{stderr}");
    let runs = agentd.data_dir().join("runs");
    let quick_1 = runs.join(format!("{eval}.t1.m1.r1.json"));
    let before = std::fs::read(&quick_1).expect("the finished run's record");
    // The run that was going is recorded cancelled, or never started.
    if let Ok(text) = std::fs::read(runs.join(format!("{eval}.t2.m1.r1.json"))) {
        let record: Value = serde_json::from_slice(&text).expect("record");
        assert_eq!(record["state"], "cancelled", "{record:#}");
    }

    let continued = agentd.run(&["eval", suite_arg, "--local", "--continue", &eval, "--json"]);
    assert_eq!(continued.code, 0, "{}", continued.stderr);
    let result = continued.json();
    assert_eq!(result["eval"], eval.as_str());
    let model = &result["models"][0];
    assert_eq!((model["runs"].as_u64(), model["passed"].as_u64()), (Some(4), Some(4)), "{result:#}");
    // The finished run was read, not run again: its record is as it was, and it was not reported as run.
    assert_eq!(std::fs::read(&quick_1).expect("record"), before, "the finished run ran again");
    let slow_runs = continued.stderr.matches("slow × (task's own model)").count();
    assert_eq!(slow_runs, 2, "{}", continued.stderr);
}

#[tokio::test]
async fn the_html_result_opens_in_chromium_with_every_failure_linked_to_its_report() {
    let Some(browser) = agentd_testkit::browser::Browser::launch().await.expect("launch Chromium") else { return };
    let agentd = Agentd::with_config(&unreachable_model());
    let suite = three_kinds(agentd.dir.path());
    let html = agentd.dir.path().join("out").join("result.html");
    std::fs::create_dir_all(html.parent().expect("dir")).expect("mkdir");
    let run = agentd.run(&["eval", suite.to_str().expect("path"), "--local", "--html", html.to_str().expect("path")]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let tab = browser.tab(1280, 800, false).await.expect("tab");
    let url = format!("file://{}", html.display());
    tab.goto(&url).await.expect("open the result");
    let title: String = tab.eval("document.title").await.expect("title");
    assert_eq!(title, "agentd eval three kinds");
    let text: String = tab.eval("document.body.innerText").await.expect("text");
    assert!(text.contains("50.0% of 4 runs (2 passed)"), "{text}");
    assert!(text.contains("15.0% – 85.0%"), "{text}");
    let rows: Vec<Vec<String>> = tab
        .eval("[...document.querySelectorAll('tr.task')].map(r => [...r.cells].slice(0, 4).map(c => c.innerText))")
        .await
        .expect("rows");
    assert_eq!(
        rows,
        [["login", "2", "2", "0"], ["wrong-screen", "0", "2", "0"], ["no-model", "0", "0", "2"]]
            .map(|r| r.map(String::from).to_vec())
            .to_vec()
    );
    // Every run that did not pass links to its trajectory report, which opens.
    let links: Vec<String> =
        tab.eval("[...document.querySelectorAll('.failure a')].map(a => a.href)").await.expect("links");
    assert_eq!(links.len(), 4, "{links:?}\n{text}");
    for link in &links {
        tab.goto(link).await.expect("open a run's report");
        let title: String = tab.eval("document.title").await.expect("title");
        assert!(title.starts_with("agentd task "), "{link}: {title}");
    }
    browser.close().await;
}

#[test]
fn a_suite_with_a_task_without_a_verifier_is_refused_naming_the_field_and_line() {
    let agentd = Agentd::new();
    let dir = agentd.dir.path();
    let toml = dir.join("suite.toml");
    // A path relative to the suite, to a task file without `verify`.
    std::fs::copy(repo().join("config/tasks/mock-login.json"), dir.join("config-login.json")).expect("copy");
    std::fs::write(&toml, "name = \"s\"\n\n[[tasks]]\npath = \"config-login.json\"\n").expect("write");
    let run = agentd.run(&["eval", toml.to_str().expect("path"), "--local"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("suite.toml: field `tasks[0]`: task \"config-login\" has no verifier")
            && run.stderr.contains("(line 3, column 1)"),
        "{}",
        run.stderr
    );

    let json = dir.join("suite.json");
    std::fs::write(&json, "{\n  \"name\": \"s\",\n  \"repeat\": 0,\n  \"tasks\": []\n}\n").expect("write");
    let run = agentd.run(&["eval", json.to_str().expect("path"), "--local"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("suite.json: field `repeat`: repeat is 1-100")
            && run.stderr.contains("(line 3, column 13)"),
        "{}",
        run.stderr
    );

    std::fs::write(
        &json,
        "{\"name\": \"s\", \"tasks\": [{\"instructions\": \"x\", \"verify\": [{\"kind\": \"nope\"}]}]}",
    )
    .expect("write");
    let run = agentd.run(&["eval", json.to_str().expect("path"), "--local"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("suite.json: field `tasks[0].verify"), "{}", run.stderr);
}

#[test]
fn the_projects_own_suite_passes_its_baseline() {
    let agentd = Agentd::new();
    let run = agentd.run(&[
        "eval",
        "config/suites/mock.toml",
        "--local",
        "--json",
        "--baseline",
        "config/suites/mock-baseline.json",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let model = &run.json()["models"][0];
    assert_eq!(model["passed"], model["runs"], "{model:#}");
    assert_eq!(model["infrastructure_failures"], 0, "{model:#}");
}

#[test]
fn an_evaluation_through_the_daemon_survives_the_daemon_killed_and_restarted() {
    let mut daemon = Daemon::start_on_with_env(
        Backend::Sqlite,
        "",
        "lease_secs = 3\nheartbeat_secs = 1\npoll_ms = 100\nmax_attempts = 3",
        "",
        Vec::new(),
    );
    let dir = daemon.agentd.dir.path().to_path_buf();
    let slow = serde_json::json!({"turns": (0..6)
        .map(|_| serde_json::json!({"actions": [{"type": "wait", "duration_ms": 500}]}))
        .chain([serde_json::json!({"complete": {"success": true, "summary": "waited"}})])
        .collect::<Vec<_>>()});
    let suite = serde_json::json!({
        "name": "restarted",
        "repeat": 2,
        "concurrency": 2,
        "tasks": [{
            "id": "slow",
            "instructions": "wait",
            "computer": {"provider": "mock", "scene": "login"},
            "model": {"provider": "scripted", "script": slow},
            "limits": {"max_steps": 20},
            "verify": [{"kind": "mock_state", "expect": {"screen": "login"}}],
        }],
    });
    let suite_path = dir.join("suite.json");
    std::fs::write(&suite_path, suite.to_string()).expect("write suite");
    let child = daemon
        .agentd
        .command()
        .args([
            "--socket",
            daemon.socket.to_str().expect("socket"),
            "eval",
            suite_path.to_str().expect("path"),
            "--json",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn agentd eval");
    // Both runs are running (the daemon has their first steps): the daemon is killed, and started again.
    let deadline = Instant::now() + Duration::from_secs(60);
    let running = |daemon: &Daemon| {
        let list = daemon.cli(&["list", "--state", "running", "--json"]);
        list.json()["tasks"].as_array().map_or(0, Vec::len)
    };
    while running(&daemon) < 2 {
        assert!(Instant::now() < deadline, "the runs did not start:\n{}", daemon.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    daemon.kill();
    daemon.spawn();
    let output = child.wait_with_output().expect("wait agentd eval");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}\n{}", daemon.log());
    let result: Value = serde_json::from_str(&stdout).expect("result JSON");
    let model = &result["models"][0];
    assert_eq!((model["runs"].as_u64(), model["passed"].as_u64()), (Some(2), Some(2)), "{result:#}\n{stderr}");
    // The runs the killed daemon held were taken up again by the new one (a second attempt), not resubmitted.
    for id in model["tasks"][0]["task_ids"].as_array().expect("ids") {
        let task = daemon.task(id.as_str().expect("id"));
        assert_eq!((task["state"].as_str(), task["attempt"].as_u64()), (Some("succeeded"), Some(2)), "{task:#}");
    }
}
