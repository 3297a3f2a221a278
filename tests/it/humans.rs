//! Asking a human (docs/humans.md) through the real binary and daemon: a scripted model on the mock desktop calls
//! `ask_human`; the task waits in `waiting_for_human` holding no worker, its record says
//! `waiting: {kind: "question", …}`, and the answer (API or CLI) becomes the call's result and the task goes
//! on. Also across a daemon restart, across two PostgreSQL nodes, when nobody answers in time (both ways),
//! with malformed answers, and in `agentd run` on a pseudo-terminal. What each vendor's model sees (the tool
//! declared, the answer as the tool's result) is checked on the vendor fakes.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Agentd, Backend, Daemon, PgSchema, http, postgres_url};

on_both_backends!(
    a_question_waits_without_a_worker_and_the_answer_resumes_it,
    a_question_is_answered_after_a_restart,
    an_unanswered_question_times_out_as_the_task_says,
);

const QUESTION: &str = "Which of the two Alice accounts?";

/// Turn 0 types a name, then asks; turn 1 completes. `limits` goes into the task as it is.
fn asking_task(id: &str, limits: Value) -> Value {
    json!({
        "id": id,
        "instructions": "sign in as alice",
        "computer": {"provider": "mock", "scene": "login"},
        "limits": limits,
        "model": {"provider": "scripted", "script": {"turns": [
            {"say": "typing, then asking", "actions": [
                {"type": "click", "x": 640, "y": 370}, {"type": "type", "text": "alice"}],
             "calls": [{"name": "ask_human", "arguments": {"question": QUESTION}}]},
            {"complete": {"success": true, "summary": "signed in"}}
        ]}}
    })
}

fn submit(daemon: &Daemon, task: &Value) {
    let (status, body) =
        http(&daemon.socket, "POST", "/v1/tasks", Some(task.to_string().as_bytes()), &[]).expect("submit request");
    assert_eq!(status, 201, "{body}");
}

/// Waits until the task waits for the answer to a question; returns its status document.
fn wait_question(daemon: &Daemon, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let task = daemon.task(id);
        if task["state"] == "waiting_for_human" && task["waiting"]["kind"] == "question" {
            return task;
        }
        assert!(Instant::now() < deadline, "never asked: {task}\n{}", daemon.log());
        std::thread::sleep(Duration::from_millis(30));
    }
}

fn post_answer(daemon: &Daemon, id: &str, body: &str) -> (u16, Value) {
    let path = format!("/v1/tasks/{id}/answer");
    let (status, text) = http(&daemon.socket, "POST", &path, Some(body.as_bytes()), &[]).expect("answer request");
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

fn events(daemon: &Daemon, id: &str) -> Vec<Value> {
    let out = daemon.cli(&["events", id, "--json"]);
    out.stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// What the finished task's first step says of the question: its `ask_human` result.
fn answer_in(done: &Value) -> (Value, Value) {
    let results = done["steps"][0]["results"].as_array().cloned().unwrap_or_default();
    let answer = results.iter().find(|r| r["tool"] == "ask_human").cloned().unwrap_or(Value::Null);
    (answer["ok"].clone(), answer["message"].clone())
}

fn a_question_waits_without_a_worker_and_the_answer_resumes_it(backend: Backend) {
    let daemon = Daemon::start_on(backend, "", "[worker]\nconcurrency = 1\n");
    let id = "ask-e2e";
    let (status, early) = post_answer(&daemon, id, r#"{"text": "x"}"#);
    assert_eq!((status, &early["error"]["code"]), (404, &json!("not_found")), "{early}");
    submit(&daemon, &asking_task(id, json!({})));
    let waiting = wait_question(&daemon, id);
    assert_eq!(waiting["worker"], Value::Null, "no worker holds it: {waiting}");
    let call_id = waiting["waiting"]["call_id"].as_str().expect("call_id").to_string();
    assert_eq!(
        waiting["waiting"],
        json!({"kind": "question", "step": 0, "call_id": call_id, "question": QUESTION}),
        "{waiting}"
    );
    assert_eq!(waiting["waiting_reason"], QUESTION);
    assert!(waiting.get("pending_tool_calls").is_none(), "a question is no remote call: {waiting}");
    assert_eq!(waiting["steps"][0]["results"][1]["ok"], true, "typed before asking: {waiting}");
    let said = events(&daemon, id);
    let asked = said.iter().find(|e| e["type"] == "waiting_for_human").expect("waiting_for_human event");
    assert_eq!((&asked["question"], &asked["call_id"]), (&json!(QUESTION), &json!(call_id)), "{asked}");
    let status = daemon.cli(&["status", id]);
    assert!(status.stdout.contains(QUESTION), "status shows the question: {}", status.stdout);

    // Bad bodies name the field, and change nothing.
    let table = [
        (r#"{}"#, "text"),
        (r#"{"text": 5}"#, "text"),
        (r#"{"text": "  "}"#, "text"),
        (r#"{"text": "a", "colour": 1}"#, "colour"),
        ("{", ""),
    ];
    for (body, field) in table {
        let (status, reply) = post_answer(&daemon, id, body);
        assert_eq!(status, 400, "{body}: {reply}");
        assert_eq!(reply["error"]["code"], "invalid_answer", "{body}: {reply}");
        if !field.is_empty() {
            assert_eq!(reply["error"]["field"], field, "{body}: {reply}");
        }
    }
    // A question is not an approval: approve is refused (the task waits for an answer, not a yes).
    let approve = daemon.cli(&["approve", id]);
    assert_eq!(approve.code, 2, "{}", approve.stderr);
    assert!(approve.stderr.contains("agentd answer"), "{}", approve.stderr);
    assert_eq!(daemon.task(id)["state"], "waiting_for_human", "refused requests change nothing");

    let (status, reply) = post_answer(&daemon, id, r#"{"text": "the one in accounting"}"#);
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply, json!({"id": id, "state": "queued", "answered": true}));
    let (status, again) = post_answer(&daemon, id, r#"{"text": "the other one"}"#);
    assert_eq!(status, 409, "a second answer: {again}");
    assert_eq!(again["error"]["code"], "wrong_state", "{again}");
    let second = daemon.cli(&["answer", id, "the other one"]);
    assert_eq!(second.code, 2, "{}", second.stderr);

    let done = daemon.wait_terminal(id, Duration::from_secs(30));
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!((&done["attempt"], &done["outcome"]["summary"]), (&json!(1), &json!("signed in")));
    assert_eq!(answer_in(&done), (json!(true), json!("the one in accounting")), "{done}");
    let model_reads =
        done["steps"][0]["call_results"].as_array().and_then(|r| r.iter().find(|r| r["call_id"] == json!(call_id)));
    assert_eq!(model_reads.map(|r| &r["message"]), Some(&json!("the one in accounting")), "the model's result: {done}");
    assert_eq!(done["computer_state"]["fields"]["username"], "alice", "typed once: {}", done["computer_state"]);
    assert!(done.get("waiting").is_none(), "{done}");
    let said = events(&daemon, id);
    let finished = said
        .iter()
        .find(|e| e["type"] == "tool_finished" && e["name"] == "ask_human")
        .expect("tool_finished for the answer");
    assert_eq!((&finished["call_id"], &finished["output"]), (&json!(call_id), &json!("the one in accounting")));

    // Answers to tasks that wait for no question: finished, and waiting for an approval.
    let (status, late) = post_answer(&daemon, id, r#"{"text": "late"}"#);
    assert_eq!(status, 409, "{late}");
    let approval = json!({
        "id": "ask-approval", "instructions": "buy",
        "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "scripted", "script": {"turns": [
            {"ask_human": "may I type alice's name?", "actions": [{"type": "type", "text": "alice"}]},
            {"complete": {"success": true, "summary": "typed"}}
        ]}}
    });
    submit(&daemon, &approval);
    let deadline = Instant::now() + Duration::from_secs(30);
    while daemon.task("ask-approval")["waiting"]["kind"] != "approval" {
        assert!(Instant::now() < deadline, "never waited for approval\n{}", daemon.log());
        std::thread::sleep(Duration::from_millis(30));
    }
    let (status, refused) = post_answer(&daemon, "ask-approval", r#"{"text": "yes"}"#);
    assert_eq!(status, 409, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap_or_default().contains("approv"), "{refused}");
    let cli = daemon.cli(&["answer", "ask-approval", "yes"]);
    assert_eq!(cli.code, 2, "{}", cli.stderr);
    assert_eq!(daemon.task("ask-approval")["waiting"]["kind"], "approval", "nothing changed");
}

fn a_question_is_answered_after_a_restart(backend: Backend) {
    let mut daemon = Daemon::start_on(backend, "", "");
    let id = "ask-restart";
    submit(&daemon, &asking_task(id, json!({})));
    let before = wait_question(&daemon, id);
    daemon.kill();
    daemon.spawn();
    let after = wait_question(&daemon, id);
    assert_eq!(after["waiting"], before["waiting"], "the same question waits after the restart");
    let answered = daemon.cli(&["answer", id, "the one in accounting"]);
    assert_eq!(answered.code, 0, "{}", answered.stderr);
    let done = daemon.wait_terminal(id, Duration::from_secs(30));
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(answer_in(&done), (json!(true), json!("the one in accounting")));
    assert_eq!(done["computer_state"]["fields"]["username"], "alice", "typed once across the restart");
}

/// `[defaults.limits]` gives 1 s; one task goes on with "no answer", one fails (the default), one waits
/// longer (its own limit), and one survives a restart before its time is up and still times out.
fn an_unanswered_question_times_out_as_the_task_says(backend: Backend) {
    let config = "[defaults]\nlimits = { human_timeout_secs = 1 }\n";
    let mut daemon = Daemon::start_on(backend, "", config);
    submit(&daemon, &asking_task("ask-continue", json!({"on_human_timeout": "continue"})));
    submit(&daemon, &asking_task("ask-fail", json!({})));
    submit(&daemon, &asking_task("ask-long", json!({"human_timeout_secs": 3600})));
    wait_question(&daemon, "ask-long");
    let going_on = daemon.wait_terminal("ask-continue", Duration::from_secs(30));
    assert_eq!(going_on["state"], "succeeded", "{going_on}\n{}", daemon.log());
    assert_eq!(answer_in(&going_on), (json!(true), json!("no answer")), "{going_on}");
    let failed = daemon.wait_terminal("ask-fail", Duration::from_secs(30));
    assert_eq!((&failed["state"], &failed["outcome"]["reason"]), (&json!("failed"), &json!("timeout")), "{failed}");
    let summary = failed["outcome"]["summary"].as_str().unwrap_or_default();
    assert!(summary.contains("within 1 s") && summary.contains(QUESTION), "{summary}");
    assert_eq!(daemon.task("ask-long")["state"], "waiting_for_human", "its own, longer limit holds");
    let (status, late) = post_answer(&daemon, "ask-fail", r#"{"text": "too late"}"#);
    assert_eq!(status, 409, "{late}");

    // The wait is measured from when the step parked, whatever the daemon did since.
    daemon.kill();
    submit_offline_after_restart(&mut daemon);
    let restarted = daemon.wait_terminal("ask-after-restart", Duration::from_secs(30));
    assert_eq!(answer_in(&restarted), (json!(true), json!("no answer")), "{restarted}");
    let answered = daemon.cli(&["answer", "ask-long", "in time"]);
    assert_eq!(answered.code, 0, "{}", answered.stderr);
    assert_eq!(daemon.wait_terminal("ask-long", Duration::from_secs(30))["state"], "succeeded");
}

/// Starts the daemon again, submits a task that parks, kills the daemon before the sweep can time it out
/// (its limit is 2 s), and starts it once more: the new process times it out.
fn submit_offline_after_restart(daemon: &mut Daemon) {
    daemon.spawn();
    submit(daemon, &asking_task("ask-after-restart", json!({"human_timeout_secs": 2, "on_human_timeout": "continue"})));
    wait_question(daemon, "ask-after-restart");
    daemon.kill();
    daemon.spawn();
}

/// Two nodes on one PostgreSQL queue: the question is asked on one, answered through the other; a second
/// task's question times out once although both nodes sweep.
#[test]
fn on_two_postgres_nodes_a_question_is_answered_through_either_and_timed_out_once() {
    let Some(url) = postgres_url() else {
        agentd_testenv::skip("AGENTD_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = PgSchema::create(&url);
    let queue = format!(
        "backend = \"postgres\"\nurl = {:?}\nlease_secs = 2\nheartbeat_secs = 1\npoll_ms = 5000\n",
        schema.url()
    );
    let first = Daemon::start_with("", &queue, "");
    submit(&first, &asking_task("ask-fleet", json!({})));
    let waiting = wait_question(&first, "ask-fleet");
    let second = Daemon::start_with("", &queue, "");
    assert_eq!(second.task("ask-fleet")["waiting"], waiting["waiting"], "every node sees the question");
    let answered = second.cli(&["answer", "ask-fleet", "the one in accounting"]);
    assert_eq!(answered.code, 0, "{}", answered.stderr);
    let done = first.wait_terminal("ask-fleet", Duration::from_secs(30));
    assert_eq!(done["state"], "succeeded", "{done}\n{}\n{}", first.log(), second.log());
    assert_eq!(answer_in(&done), (json!(true), json!("the one in accounting")));

    let limits = json!({"human_timeout_secs": 1, "on_human_timeout": "continue"});
    submit(&second, &asking_task("ask-fleet-timeout", limits));
    let done = first.wait_terminal("ask-fleet-timeout", Duration::from_secs(30));
    assert_eq!(done["state"], "succeeded", "{done}\n{}\n{}", first.log(), second.log());
    // Let both nodes sweep a few more rounds: still one answer.
    std::thread::sleep(Duration::from_secs(3));
    let said = events(&first, "ask-fleet-timeout");
    let answers = said.iter().filter(|e| e["type"] == "tool_finished" && e["name"] == "ask_human").count();
    assert_eq!(answers, 1, "timed out exactly once: {said:?}");
    let results = first.task("ask-fleet-timeout")["steps"][0]["results"].as_array().cloned().unwrap_or_default();
    assert_eq!(results.iter().filter(|r| r["tool"] == "ask_human").count(), 1, "{results:?}");
    drop(first);
    drop(second);
    drop(schema);
}

/// `"ask_human": false`: the task file's choice reaches the model's request (checked on the tools the loop
/// declares: the same list every adapter sends, see `wire`).
#[test]
fn ask_human_false_is_not_declared_and_a_call_to_it_is_an_unknown_tool() {
    let agentd = Agentd::new();
    let dir = agentd.dir.path();
    let task = |ask: Option<bool>| {
        let mut task = json!({
            "instructions": "sign in as alice",
            "computer": {"provider": "mock", "scene": "login"},
            "model": {"provider": "scripted", "script": {"turns": [
                {"calls": [{"name": "ask_human", "arguments": {"question": QUESTION}}]},
                {"complete": {"success": true, "summary": "done"}}
            ]}}
        });
        if let Some(ask) = ask {
            task["ask_human"] = json!(ask);
        }
        task
    };
    let path = dir.join("off.json");
    std::fs::write(&path, task(Some(false)).to_string()).expect("write task");
    let run = agentd.run(&["run", "--json", path.to_str().expect("path")]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let record = run.json();
    let result = &record["steps"][0]["call_results"][0];
    assert_eq!(result["ok"], false, "{record}");
    assert!(result["message"].as_str().unwrap_or_default().contains("unknown tool \"ask_human\""), "{result}");
    // On (the default) and off a terminal: the run ends where the question is, as a waiting task always did.
    let path = dir.join("on.json");
    std::fs::write(&path, task(None).to_string()).expect("write task");
    let run = agentd.run(&["run", "--json", path.to_str().expect("path")]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let record = run.json();
    assert_eq!(record["outcome"]["reason"], "rejected", "{record}");
    assert!(record["outcome"]["summary"].as_str().unwrap_or_default().contains(QUESTION), "{record}");
}

/// Runs `agentd run TASK` on a new pseudo-terminal (stdin, stdout and stderr), answering each prompt that
/// appears with the next of `replies`; returns the exit code and everything printed. `libc::openpty`, as
/// `cli_progress` does: no new dependency, and the child gets a real terminal on all three streams.
fn run_on_a_terminal(agentd: &Agentd, task: &std::path::Path, replies: &[(&str, &str)]) -> (Option<i32>, String) {
    let (mut master, mut slave) = (0, 0);
    let size = libc::winsize { ws_row: 40, ws_col: 120, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: openpty writes two descriptors into the given integers and reads the window size; the name
    // and termios arguments may be null.
    let rc = unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), &size) };
    assert_eq!(rc, 0, "openpty");
    // SAFETY: both descriptors were just opened and are owned by nothing else.
    let (master, slave) = unsafe {
        use std::os::fd::FromRawFd;
        (std::fs::File::from_raw_fd(master), std::os::fd::OwnedFd::from_raw_fd(slave))
    };
    let mut writer = master.try_clone().expect("dup");
    let (out, err) = (slave.try_clone().expect("dup"), slave.try_clone().expect("dup"));
    let mut cmd: Command = agentd.command();
    cmd.args(["run", task.to_str().expect("path")]).env("TERM", "xterm-256color").env_remove("NO_COLOR");
    let mut child =
        cmd.stdin(Stdio::from(slave)).stdout(Stdio::from(out)).stderr(Stdio::from(err)).spawn().expect("spawn");
    drop(cmd);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut master = master;
        let mut buf = [0u8; 4096];
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut printed = Vec::new();
    let mut replies = replies.iter();
    let mut next = replies.next();
    let mut answered_at = 0;
    let deadline = Instant::now() + Duration::from_secs(90);
    while let Ok(bytes) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        printed.extend_from_slice(&bytes);
        if let Some((prompt, reply)) = next {
            let text = String::from_utf8_lossy(&printed[answered_at..]).into_owned();
            if text.contains(prompt) {
                writer.write_all(format!("{reply}\r").as_bytes()).expect("type the reply");
                answered_at = printed.len();
                next = replies.next();
            }
        }
    }
    let code = match child.try_wait() {
        Ok(Some(status)) => status.code(),
        _ => {
            let _ = child.kill();
            child.wait().ok().and_then(|s| s.code())
        }
    };
    (code, String::from_utf8_lossy(&printed).into_owned())
}

#[test]
fn agentd_run_on_a_terminal_asks_the_question_and_the_approval_there() {
    let agentd = Agentd::new();
    let path = agentd.dir.path().join("terminal.json");
    let task = json!({
        "id": "ask-terminal",
        "instructions": "sign in as alice",
        "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "scripted", "script": {"turns": [
            {"say": "asking", "calls": [{"name": "ask_human", "arguments": {"question": QUESTION}}]},
            {"ask_human": "may I type alice's name?",
             "actions": [{"type": "click", "x": 640, "y": 370}, {"type": "type", "text": "alice"}]},
            {"complete": {"success": true, "summary": "signed in"}}
        ]}}
    });
    std::fs::write(&path, task.to_string()).expect("write task");
    let replies = [("answer> ", ""), ("answer (not empty)> ", "the one in accounting"), ("[y/n]> ", "y")];
    let (code, screen) = run_on_a_terminal(&agentd, &path, &replies);
    assert_eq!(code, Some(0), "{screen}");
    assert!(screen.contains(QUESTION) && screen.contains("may I type alice's name?"), "{screen}");
    let record: Value = serde_json::from_str(
        &std::fs::read_to_string(agentd.data_dir().join("runs/ask-terminal.json")).expect("run record"),
    )
    .expect("record JSON");
    assert_eq!(record["state"], "succeeded", "{record}");
    assert_eq!(answer_in(&record), (json!(true), json!("the one in accounting")), "{record}");
    assert_eq!(record["steps"][1]["approval"]["approved"], true, "{record}");
    assert_eq!(record["computer_state"]["fields"]["username"], "alice", "{record}");

    // "n" to the approval: the run ends rejected, the action never ran. (In a data dir of its own: the same
    // task file run again where it ran would only show the earlier result, the id being an idempotency key.)
    let agentd = Agentd::new();
    let path = agentd.dir.path().join("terminal.json");
    std::fs::write(&path, task.to_string()).expect("write task");
    let (code, screen) = run_on_a_terminal(&agentd, &path, &[("answer> ", "that one"), ("[y/n]> ", "n")]);
    assert_eq!(code, Some(1), "{screen}");
    let record: Value = serde_json::from_str(
        &std::fs::read_to_string(agentd.data_dir().join("runs/ask-terminal.json")).expect("run record"),
    )
    .expect("record JSON");
    assert_eq!(record["outcome"]["reason"], "rejected", "{record}");
    assert_ne!(record["computer_state"]["fields"]["username"], "alice", "{record}");
}

/// What each vendor's model sees: `ask_human` declared in the vendor's form, and the answer as the result of
/// its call in the next request.
mod wire {
    use std::sync::Arc;

    use agentd::agent::{AttemptOutput, Ending};
    use agentd::backends;
    use agentd::model::Model;
    use agentd::record::StepRecord;
    use agentd::task::{ModelSpec, TaskSpec};
    use agentd_computer::Size;
    use agentd_testkit::fake::{self, FakeServer, Recorded, Vendor};
    use serde_json::{Value, json};

    use super::QUESTION;
    use crate::models::{KEY, login_desktop, one_attempt, shared_for, spec, turns_in};

    const ANSWER: &str = "the one in accounting";

    /// The task's toolbox as a worker builds it (`ask_human` on unless `off`).
    fn tools(off: bool) -> Arc<agentd::tools::Toolbox> {
        let mut task = json!({"instructions": "sign in"});
        if off {
            task["ask_human"] = json!(false);
        }
        let spec = TaskSpec::parse(&task.to_string(), "t.json").expect("task");
        let resolved = spec.resolve(&Default::default(), &Default::default());
        backends::toolbox(&resolved, &Default::default(), Default::default(), &Default::default()).expect("toolbox")
    }

    async fn attempt(
        model_spec: &ModelSpec,
        model: Arc<dyn Model>,
        tools: Arc<agentd::tools::Toolbox>,
        resume: Vec<StepRecord>,
    ) -> AttemptOutput {
        let task = crate::models::task(model_spec.clone(), 5, 3);
        one_attempt(task, login_desktop(Size::new(1280, 800)), model, tools, resume).await
    }

    /// Parks on the question, is answered as the queue answers it, resumes and completes; returns the
    /// requests the fake saw.
    async fn ask_and_answer(server: &FakeServer, provider: &str, extra: &str) -> Vec<Recorded> {
        let model_spec = spec(json!({"provider": provider}));
        let shared = shared_for(provider, &server.url, extra);
        let build = || backends::model(&model_spec, &shared, None).expect("model");
        let parked = attempt(&model_spec, build(), tools(false), Vec::new()).await;
        assert!(matches!(&parked.ending, Ending::WaitingForHuman(reason) if reason == QUESTION), "{:?}", parked.ending);
        let mut steps = parked.steps;
        let (call_id, question) = steps.last().and_then(StepRecord::pending_question).expect("a pending question");
        assert_eq!(question, QUESTION);
        if let Some(last) = steps.last_mut() {
            last.answer_question(&call_id, true, ANSWER);
        }
        let done = attempt(&model_spec, build(), tools(false), steps).await;
        assert!(matches!(&done.ending, Ending::Finished(o) if o.success), "{:?}", done.ending);
        assert!(server.problems().is_empty(), "wire problems: {:#?}", server.problems());
        let requests = server.requests();
        assert_eq!(requests.len(), 2, "one request per turn");
        requests
    }

    fn names(tools: &Value, key: &str) -> Vec<String> {
        tools
            .as_array()
            .map_or_else(Vec::new, |t| t.iter().filter_map(|t| t[key].as_str().map(str::to_string)).collect())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn anthropic_declares_ask_human_and_gets_the_answer_as_a_tool_result() {
        let server = FakeServer::start(
            Vendor::Anthropic { key: KEY.into() },
            Box::new(|r| {
                let content = match turns_in(r) {
                    0 => vec![json!({"type": "tool_use", "id": "toolu_q", "name": "ask_human",
                        "input": {"question": QUESTION}})],
                    _ => vec![json!({"type": "tool_use", "id": "toolu_c", "name": "task_completion",
                        "input": {"success": true, "summary": "ok"}})],
                };
                fake::anthropic_reply(content, json!({"input_tokens": 10, "output_tokens": 5}), true)
            }),
        )
        .await
        .expect("fake");
        let requests = ask_and_answer(&server, "anthropic", "").await;
        let tools = &requests[0].body["tools"];
        let declared = tools.as_array().and_then(|t| t.iter().find(|t| t["name"] == "ask_human")).expect("declared");
        assert_eq!(declared["input_schema"]["required"], json!(["question"]), "{declared}");
        assert!(declared["description"].as_str().is_some_and(|d| !d.is_empty()));
        let messages = requests[1].body["messages"].as_array().expect("messages");
        let result = messages
            .iter()
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .find(|c| c["type"] == "tool_result" && c["tool_use_id"] == "toolu_q")
            .expect("the answer as a tool_result");
        assert_eq!(result["content"][0], json!({"type": "text", "text": ANSWER}), "{result}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn openai_declares_ask_human_and_gets_the_answer_as_a_function_call_output() {
        let server = FakeServer::start(
            Vendor::OpenAi { key: KEY.into() },
            Box::new(|r| {
                let output = match turns_in(r) {
                    0 => vec![json!({"type": "function_call", "id": "fc_q", "call_id": "call_q", "name": "ask_human",
                        "arguments": json!({"question": QUESTION}).to_string(), "status": "completed"})],
                    _ => vec![json!({"type": "function_call", "id": "fc_c", "call_id": "call_c",
                        "name": "task_completion", "arguments": "{\"success\": true, \"summary\": \"ok\"}"})],
                };
                fake::openai_reply(output, json!({"input_tokens": 10, "output_tokens": 5}), true)
            }),
        )
        .await
        .expect("fake");
        let requests = ask_and_answer(&server, "openai", "").await;
        assert!(names(&requests[0].body["tools"], "name").contains(&"ask_human".to_string()), "{}", requests[0].body);
        let input = requests[1].body["input"].as_array().expect("input");
        let output = input
            .iter()
            .find(|i| i["type"] == "function_call_output" && i["call_id"] == "call_q")
            .expect("the answer as a function_call_output");
        assert!(output["output"].to_string().contains(ANSWER), "{output}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn gemini_declares_ask_human_and_gets_the_answer_as_a_function_response() {
        let server = FakeServer::start(
            Vendor::Gemini { key: KEY.into() },
            Box::new(|r| {
                let part = match turns_in(r) {
                    0 => json!({"functionCall": {"name": "ask_human", "args": {"question": QUESTION}}}),
                    _ => {
                        json!({"functionCall": {"name": "task_completion", "args": {"success": true, "summary": "ok"}}})
                    }
                };
                fake::gemini_reply(vec![part], json!({"promptTokenCount": 10, "candidatesTokenCount": 5}), true)
            }),
        )
        .await
        .expect("fake");
        let requests = ask_and_answer(&server, "gemini", "").await;
        let declarations: Vec<String> = requests[0].body["tools"]
            .as_array()
            .map(|tools| tools.iter().flat_map(|t| names(&t["functionDeclarations"], "name")).collect::<Vec<String>>())
            .unwrap_or_default();
        assert!(declarations.contains(&"ask_human".to_string()), "{}", requests[0].body["tools"]);
        let response = requests[1].body["contents"]
            .as_array()
            .expect("contents")
            .iter()
            .flat_map(|c| c["parts"].as_array().cloned().unwrap_or_default())
            .find(|p| p["functionResponse"]["name"] == "ask_human")
            .expect("the answer as a functionResponse");
        assert!(response.to_string().contains(ANSWER), "{response}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn compatible_declares_ask_human_and_gets_the_answer_as_a_tool_message() {
        let server = FakeServer::start(
            Vendor::Compatible { key: Some(KEY.into()) },
            Box::new(|r| {
                let usage = json!({"prompt_tokens": 10, "completion_tokens": 5});
                match turns_in(r) {
                    0 => fake::compatible_reply("", &[("call_q", "ask_human", json!({"question": QUESTION}))], usage),
                    _ => fake::compatible_reply(
                        "",
                        &[("call_c", "task_completion", json!({"success": true, "summary": "ok"}))],
                        usage,
                    ),
                }
            }),
        )
        .await
        .expect("fake");
        let requests =
            ask_and_answer(&server, "openai-compatible", "model = \"qwen2.5-vl\"\napi_key_env = \"LOCAL_KEY\"").await;
        let functions: Vec<String> = requests[0].body["tools"]
            .as_array()
            .map(|t| t.iter().filter_map(|t| t["function"]["name"].as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        assert!(functions.contains(&"ask_human".to_string()), "{}", requests[0].body["tools"]);
        let message = requests[1].body["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == "call_q")
            .cloned()
            .expect("the answer as a tool message");
        assert!(message["content"].to_string().contains(ANSWER), "{message}");
    }

    /// `"ask_human": false` in the task file: the vendor's request declares no such tool.
    #[tokio::test(flavor = "current_thread")]
    async fn a_task_that_turns_it_off_declares_no_ask_human() {
        let server = FakeServer::start(
            Vendor::Anthropic { key: KEY.into() },
            Box::new(|_| {
                let content = vec![json!({"type": "tool_use", "id": "toolu_c", "name": "task_completion",
                    "input": {"success": true, "summary": "ok"}})];
                fake::anthropic_reply(content, json!({"input_tokens": 10, "output_tokens": 5}), true)
            }),
        )
        .await
        .expect("fake");
        let model_spec = spec(json!({"provider": "anthropic"}));
        let shared = shared_for("anthropic", &server.url, "");
        for (off, declared) in [(true, false), (false, true)] {
            let model = backends::model(&model_spec, &shared, None).expect("model");
            let done = attempt(&model_spec, model, tools(off), Vec::new()).await;
            assert!(matches!(&done.ending, Ending::Finished(o) if o.success), "{:?}", done.ending);
            let requests = server.requests();
            let last = requests.last().expect("a request");
            let names = names(&last.body["tools"], "name");
            assert_eq!(names.contains(&"ask_human".to_string()), declared, "off: {off}: {names:?}");
        }
    }
}
