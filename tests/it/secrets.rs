//! Secrets (docs/security.md) end to end through the real binary: a task on the mock desktop types a secret by its
//! placeholder; the desktop receives the value (only the right value signs in), and the value appears in no
//! file under the data dir, no event, no log line and nothing the CLI prints.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Agentd, Backend, Daemon, Run, files_under, http, repo};

/// The secret: in no scene, task or config file the data dir holds.
const VALUE: &str = "Tr0ub4dor-3-Xq9kZ";

/// A login scene whose sign-in succeeds only with [`VALUE`] (the built-in one with its password replaced and
/// its note on screen emptied), written to `dir`.
fn scene_file(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(repo().join("providers/mock/scenes/login.json")).expect("login scene");
    assert!(text.contains("alice's password: hunter2"), "the built-in login scene changed");
    let text = text.replace("alice's password: hunter2", "Ask your admin.").replace("hunter2", VALUE);
    let path = dir.join("secret-login.json");
    std::fs::write(&path, text).expect("write scene");
    path
}

/// The task: click the username field, type alice, click the password field, type the placeholder, press
/// Enter; then complete. `secret` is the task's `secrets.password`.
fn task(scene: &Path, secret: Value) -> Value {
    let text = std::fs::read_to_string(scene).expect("scene");
    let desktop = agentd_mock::MockDesktop::new(
        agentd_mock::Scene::from_json_str(&text, "secret-login").expect("scene parses"),
        None,
    )
    .expect("desktop");
    let user = desktop.widget_center("username").expect("username field");
    let pass = desktop.widget_center("password").expect("password field");
    json!({
        "instructions": "Sign in as alice with the password",
        "computer": {"provider": "mock", "scene": scene.display().to_string()},
        "model": {"provider": "scripted", "script": {"turns": [
            {"say": "signing in", "actions": [
                {"type": "click", "x": user.x, "y": user.y},
                {"type": "type", "text": "alice"},
                {"type": "click", "x": pass.x, "y": pass.y},
                {"type": "type", "text": "<secret:password>"},
                {"type": "keypress", "keys": ["Return"]}
            ]},
            {"complete": {"success": true, "summary": "signed in"}}
        ]}},
        "limits": {"max_steps": 5},
        "secrets": {"password": secret}
    })
}

/// Every file under `dir` that holds [`VALUE`].
fn files_holding_value(dir: &Path) -> Vec<PathBuf> {
    let files = files_under(dir);
    assert!(!files.is_empty(), "nothing under {}", dir.display());
    files
        .into_iter()
        .filter(|f| std::fs::read(f).is_ok_and(|bytes| bytes.windows(VALUE.len()).any(|w| w == VALUE.as_bytes())))
        .collect()
}

fn run_task(agentd: &Agentd, dir: &Path, task: &Value, env: &[(&str, &str)]) -> Run {
    let path = dir.join("task.json");
    std::fs::write(&path, serde_json::to_vec_pretty(task).expect("task JSON")).expect("write task");
    let mut command = agentd.command();
    command.args(["run", "--json"]).arg(&path).env("AGENTD_LOG", "debug").stdin(Stdio::null());
    for (k, v) in env {
        command.env(k, v);
    }
    Run::from(command.output().expect("spawn agentd run"))
}

/// Whether the mock desktop reached the screen only the right password leads to.
fn signed_in(result: &Value) -> bool {
    let state = &result["computer_state"];
    state["screens_visited"].as_array().is_some_and(|s| s.iter().any(|v| v == "welcome"))
}

#[test]
fn agentd_run_types_a_secret_from_the_environment_and_shows_it_nowhere() {
    let agentd = Agentd::new();
    let scene = scene_file(agentd.dir.path());
    let var = "PORTAL_PASSWORD_IT_RUN";
    let run = run_task(&agentd, agentd.dir.path(), &task(&scene, json!({"env": var})), &[(var, VALUE)]);
    assert_eq!(run.code, 0, "stdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
    let result = run.json();
    // The desktop received the value: only it signs in (the control below shows a wrong one does not).
    assert!(signed_in(&result), "{result:#}");
    assert_eq!(result["computer_state"]["labels"]["greeting"], "Welcome, alice");
    // What is recorded and reported shows the placeholder.
    assert_eq!(result["computer_state"]["fields"]["password"], "<secret:password>");
    let typed: Vec<&Value> = result["steps"][0]["actions"]
        .as_array()
        .expect("actions")
        .iter()
        .filter(|a| a["type"] == "type")
        .map(|a| &a["text"])
        .collect();
    assert_eq!(typed, [&json!("alice"), &json!("<secret:password>")]);
    assert!(!run.stdout.contains(VALUE) && !run.stderr.contains(VALUE), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(files_holding_value(&agentd.data_dir()), Vec::<PathBuf>::new());

    // Control: with another value in the variable the same task does not sign in.
    let wrong = run_task(&agentd, agentd.dir.path(), &task(&scene, json!({"env": var})), &[(var, "not-it")]);
    let result = wrong.json();
    assert!(!signed_in(&result), "{result:#}");
    assert_eq!(result["computer_state"]["labels"]["error"], "Invalid username or password");

    // A variable that is not set is invalid input naming the secret.
    let unset = run_task(&agentd, agentd.dir.path(), &task(&scene, json!({"env": "PORTAL_PASSWORD_IT_UNSET"})), &[]);
    assert_eq!(unset.code, 2, "{}", unset.stderr);
    assert!(unset.stderr.contains("secrets.password.env") && unset.stderr.contains("PORTAL_PASSWORD_IT_UNSET"));
}

#[test]
fn a_secret_from_a_file_loses_one_trailing_newline_and_an_empty_one_is_refused() {
    let agentd = Agentd::new();
    let scene = scene_file(agentd.dir.path());
    let file = agentd.dir.path().join("password.txt");
    std::fs::write(&file, format!("{VALUE}\n")).expect("write secret");
    let run = run_task(&agentd, agentd.dir.path(), &task(&scene, json!({"file": file.display().to_string()})), &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(signed_in(&run.json()), "{}", run.stdout);
    assert!(!run.stdout.contains(VALUE) && !run.stderr.contains(VALUE));
    assert_eq!(files_holding_value(&agentd.data_dir()), Vec::<PathBuf>::new());

    std::fs::write(&file, "\n").expect("write secret");
    let empty = run_task(&agentd, agentd.dir.path(), &task(&scene, json!({"file": file.display().to_string()})), &[]);
    assert_eq!(empty.code, 2, "{}", empty.stderr);
    assert!(empty.stderr.contains("secrets.password") && empty.stderr.contains("empty"), "{}", empty.stderr);
}

#[test]
fn the_daemon_types_a_secret_and_keeps_it_out_of_its_data_dir_events_and_logs() {
    daemon_keeps_the_secret(Backend::Sqlite);
}

/// On PostgreSQL the records live in the database; what it holds is searched as the API serves it (the
/// status document with every step and `computer_state`, the event log), beside the data dir and the log.
#[test]
fn on_postgres_the_daemon_keeps_the_secret_out_of_its_database() {
    if let Some(backend) = Backend::postgres() {
        daemon_keeps_the_secret(backend);
    }
}

fn daemon_keeps_the_secret(backend: Backend) {
    let _heavy = crate::support::heavy();
    let var = "PORTAL_PASSWORD_IT_DAEMON";
    let scenes = tempfile::tempdir().expect("tempdir");
    let scene = scene_file(scenes.path());
    let mut daemon = Daemon::start_on(
        backend,
        &format!("allowed_paths = [{:?}]", scenes.path().display().to_string()),
        &format!("[worker]\nallowed_env = [{var:?}]\n"),
    );
    daemon.kill();
    daemon.env.push((var.into(), VALUE.into()));
    daemon.env.push(("AGENTD_LOG".into(), "debug".into()));
    daemon.spawn();

    // A task from the API may name only the variables the config allows.
    let refused = task(&scene, json!({"env": "HOME"}));
    let (status, body) =
        http(&daemon.socket, "POST", "/v1/tasks", Some(refused.to_string().as_bytes()), &[]).expect("submit");
    assert_eq!(status, 400, "{body}");
    let error: Value = serde_json::from_str(&body).expect("error JSON");
    assert_eq!(error["error"]["field"], "secrets.password.env", "{body}");
    // And only files under `[api] allowed_paths` (the path is checked at submission; only the worker reads it).
    let refused = task(&scene, json!({"file": "/etc/hostname"}));
    let (status, body) =
        http(&daemon.socket, "POST", "/v1/tasks", Some(refused.to_string().as_bytes()), &[]).expect("submit");
    assert_eq!(status, 400, "{body}");
    let error: Value = serde_json::from_str(&body).expect("error JSON");
    assert_eq!(error["error"]["field"], "secrets.password.file", "{body}");

    // Submitted over the API with the scene's path (`agentd submit` would inline the scene file, and this
    // scene holds the value to check the password): the daemon reads the file itself.
    let body = task(&scene, json!({"env": var})).to_string();
    let (status, reply) = http(&daemon.socket, "POST", "/v1/tasks", Some(body.as_bytes()), &[]).expect("submit");
    assert_eq!(status, 201, "{reply}");
    let id = serde_json::from_str::<Value>(&reply).expect("JSON")["id"].as_str().expect("task id").to_string();
    let record = daemon.wait_terminal(&id, Duration::from_secs(30));
    assert_eq!(record["state"], "succeeded", "{record:#}");
    assert!(signed_in(&record), "{record:#}");
    assert_eq!(record["computer_state"]["fields"]["password"], "<secret:password>");

    let follow = daemon.cli(&["events", "--follow", &id]);
    let events = daemon.cli(&["--json", "events", &id]);
    assert_eq!(events.code, 0, "{}", events.stderr);
    assert!(events.stdout.contains("\"<secret:password>\""), "{}", events.stdout);
    let status = daemon.cli(&["--json", "status", &id]);
    for (what, text) in [
        ("events stdout", &follow.stdout),
        ("events stderr", &follow.stderr),
        ("events", &events.stdout),
        ("status", &status.stdout),
        ("daemon log", &daemon.log()),
    ] {
        assert!(!text.contains(VALUE), "{what} shows the secret:\n{text}");
    }
    // The daemon's log is not empty (debug): the check above had something to look at.
    assert!(daemon.log().lines().count() > 5, "{}", daemon.log());
    daemon.kill();
    let data = daemon.agentd.data_dir();
    // The mock desktop's saved state is among the files, with the placeholder.
    let saved = files_under(&data).into_iter().filter(|f| f.ends_with(agentd_mock::ACTIONS_FILE)).collect::<Vec<_>>();
    assert_eq!(saved.len(), 1, "{:?}", files_under(&data));
    assert!(std::fs::read_to_string(&saved[0]).unwrap_or_default().contains("<secret:password>"));
    assert_eq!(files_holding_value(&data), Vec::<PathBuf>::new());
}

// ---------------------------------------------------------------------------------------------------------
// The sweep: one task that puts the secret everywhere it can go, then every surface searched for it.

/// The shortest piece of [`VALUE`] the product takes for the secret: ¾ of it, at least 8 bytes.
const FRAGMENT: usize = (VALUE.len() * 3).div_ceil(4);

/// Every piece of [`VALUE`] of [`FRAGMENT`] bytes or more that `text` holds (the whole value among them).
fn leaks(text: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    for len in (FRAGMENT..=VALUE.len()).rev() {
        for start in 0..=VALUE.len() - len {
            let piece = &VALUE.as_bytes()[start..start + len];
            if text.windows(len).any(|w| w == piece)
                && !found.iter().any(|f: &String| f.contains(&VALUE[start..start + len]))
            {
                found.push(VALUE[start..start + len].to_string());
            }
        }
    }
    found
}

/// Where each leak was found: `(surface, pieces, the text around the first)`.
#[derive(Default)]
struct Sweep {
    searched: Vec<String>,
    leaks: Vec<(String, Vec<String>, String)>,
}

impl Sweep {
    fn search(&mut self, surface: impl Into<String>, text: &[u8]) {
        let surface = surface.into();
        let found = leaks(text);
        if let Some(first) = found.first() {
            let at = text.windows(first.len()).position(|w| w == first.as_bytes()).unwrap_or(0);
            let around =
                String::from_utf8_lossy(&text[at.saturating_sub(160)..(at + first.len() + 160).min(text.len())]);
            self.leaks.push((surface.clone(), found, around.into_owned()));
        }
        self.searched.push(surface);
    }

    fn assert_clean(&self) {
        let report: Vec<String> =
            self.leaks.iter().map(|(s, pieces, around)| format!("{s}: {pieces:?}\n    …{around}…")).collect();
        assert!(report.is_empty(), "the secret surfaced in {} places:\n{}", report.len(), report.join("\n"));
    }
}

const SWEEP_VAR: &str = "PORTAL_PASSWORD_IT_SWEEP";

/// An `http` tool's server that echoes what it received: `/echo` as an envelope whose output and details
/// hold the body, `/fail` as a 500 whose text is the body.
fn echo_server() -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let Ok(clone) = stream.try_clone() else { continue };
            let mut reader = BufReader::new(clone);
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some((name, value)) = line.trim_end().split_once(':')
                    && name.eq_ignore_ascii_case("content-length")
                {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let body = String::from_utf8_lossy(&body).into_owned();
            let (status, reply) = if request_line.contains(" /fail ") {
                ("500 Internal Server Error", format!("refused: {body}"))
            } else {
                let details: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                (
                    "200 OK",
                    json!({"ok": true, "output": format!("you sent {body}"), "details": {"got": details}}).to_string(),
                )
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{reply}",
                reply.len()
            );
        }
    });
    base
}

/// The daemon's config for the sweep: the vendor fake as Anthropic's endpoint, the echo server allowed, two
/// command tools that echo their arguments (on stdout; on stderr, failing), a verifier that prints the value
/// it reads from its environment, and `extra`.
fn sweep_config(model_url: &str, extra: &str) -> String {
    format!(
        "[worker]\nallowed_env = [{SWEEP_VAR:?}]\n\
         [outbound]\nallow = [\"127.0.0.1\"]\n\
         [models.anthropic]\nbase_url = {model_url:?}\nstream = true\n\
         [tools.shout]\ndescription = \"Says it back.\"\nparameters = {{ type = \"object\" }}\nkind = \"command\"\n\
         command = [\"/bin/sh\", \"-c\", \"read -r a; echo \\\"heard $a\\\"\"]\n\
         [tools.grumble]\ndescription = \"Complains.\"\nparameters = {{ type = \"object\" }}\nkind = \"command\"\n\
         command = [\"/bin/sh\", \"-c\", \"read -r a; echo \\\"cannot take $a\\\" >&2; exit 3\"]\n\
         [verifiers.peek]\ncommand = [\"/bin/sh\", \"-c\", \"cat >/dev/null; echo \\\"saw ${SWEEP_VAR}\\\"; echo \\\"and ${SWEEP_VAR}\\\" >&2\"]\n\
         env = [{SWEEP_VAR:?}]\n\
         {extra}"
    )
}

/// The vendor fake's script, by the turn a request asks for: (0) text with the value in the middle (the fake
/// streams a text in two halves, so the value is split across two deltas), the computer signing in with the
/// placeholder as the password; (1) the `http` tool and both command tools with the placeholder in their
/// arguments, and `shout` with the value itself written out (streamed in two halves too); (2) `grumble`,
/// which fails echoing its arguments on stderr; (3) completion with a fragment of the value in its summary
/// (verified by `peek`).
fn sweep_model() -> agentd_testkit::fake::Responder {
    let login = agentd_mock::MockDesktop::new(agentd_mock::Scene::resolve("login", None).expect("scene"), None)
        .expect("desktop");
    let user = login.widget_center("username").expect("username field");
    let pass = login.widget_center("password").expect("password field");
    let usage = json!({"input_tokens": 100, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                       "output_tokens": 10});
    let computer = |id: &str, input: Value| json!({"type": "tool_use", "id": id, "name": "computer", "input": input});
    let call = |id: &str, name: &str, input: Value| json!({"type": "tool_use", "id": id, "name": name, "input": input});
    Box::new(move |r| {
        let content = match crate::models::turns_in(r) {
            0 => vec![
                json!({"type": "text", "text": format!("The note on screen says {VALUE} - so typing it now.")}),
                computer("c1", json!({"action": "left_click", "coordinate": [user.x, user.y]})),
                computer("c2", json!({"action": "type", "text": "alice"})),
                computer("c3", json!({"action": "left_click", "coordinate": [pass.x, pass.y]})),
                // No Return: the field keeps what was typed, so `computer_state` holds the value (redacted).
                computer("c4", json!({"action": "type", "text": "<secret:password>"})),
            ],
            // A failed call skips the rest of its turn: each failing one comes last.
            1 => vec![
                call("t1", "lookup", json!({"token": "<secret:password>"})),
                call("t2", "shout", json!({"text": "<secret:password>"})),
                call("t3", "shout", json!({"text": VALUE})),
                call("t4", "lookup_fail", json!({"token": "<secret:password>"})),
            ],
            2 => vec![call("t5", "grumble", json!({"text": "<secret:password>"}))],
            _ => vec![call(
                "done",
                "task_completion",
                json!({"success": true, "summary": format!("signed in with {}", &VALUE[..FRAGMENT])}),
            )],
        };
        agentd_testkit::fake::anthropic_reply(content, usage.clone(), true)
    })
}

fn sweep_task(echo: &str) -> Value {
    let parameters = json!({"type": "object", "properties": {"token": {"type": "string"}}, "required": ["token"]});
    json!({
        "instructions": "Sign in as alice with the password, then check the token",
        "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "anthropic", "model": "claude-sonnet-4-5"},
        "tools": [
            {"name": "lookup", "description": "Looks the token up.", "parameters": parameters, "kind": "http",
             "url": format!("{echo}/echo")},
            {"name": "lookup_fail", "description": "Fails.", "parameters": parameters, "kind": "http",
             "url": format!("{echo}/fail")},
            {"use": "shout"},
            {"use": "grumble"}
        ],
        "verify": [{"kind": "command", "use": "peek"}],
        "limits": {"max_steps": 6},
        "secrets": {"password": {"env": SWEEP_VAR}}
    })
}

/// Runs the sweep's task on a daemon over `backend` (with `log_format`, and S3 artifacts and an OTLP
/// receiver when `full`), and searches every surface.
fn sweep(backend: Backend, log_format: &str, full: bool) {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let fake = runtime
        .block_on(agentd_testkit::fake::FakeServer::start(
            agentd_testkit::fake::Vendor::Anthropic { key: crate::models::KEY.into() },
            sweep_model(),
        ))
        .expect("vendor fake");
    let echo = echo_server();
    let receiver = full.then(crate::telemetry::Receiver::start);
    // S3 artifacts need the s3 feature (the library without default features builds this test too).
    #[cfg(feature = "s3")]
    let s3 = full
        .then(|| crate::s3::moto("secrets sweep"))
        .flatten()
        .map(|endpoint| (runtime.block_on(crate::s3::fresh_store(&endpoint, "secrets", "runs")), endpoint));
    let mut extra = String::new();
    if let Some(receiver) = &receiver {
        extra.push_str(&format!("[otel]\nendpoint = {:?}\nservice_name = \"agentd-secrets\"\n", receiver.endpoint));
    }
    #[cfg(feature = "s3")]
    if let Some((store, endpoint)) = &s3 {
        extra.push_str(&crate::s3::artifacts_section(endpoint, store.bucket()));
    }
    let env = vec![
        (SWEEP_VAR.to_string(), VALUE.to_string()),
        ("ANTHROPIC_API_KEY".to_string(), crate::models::KEY.to_string()),
        ("AGENTD_LOG".to_string(), "debug,hyper=info,h2=info,sqlx=info,aws=info".to_string()),
        ("AGENTD_LOG_FORMAT".to_string(), log_format.to_string()),
    ];
    let mut daemon = Daemon::start_on_with_env(
        backend,
        "",
        "lease_secs = 3\nheartbeat_secs = 1\npoll_ms = 100",
        &sweep_config(&fake.url, &extra),
        env,
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let task_file = dir.path().join("task.json");
    std::fs::write(&task_file, sweep_task(&echo).to_string()).expect("write task");
    let mut sweep = Sweep::default();

    let submit = daemon.cli(&["submit", task_file.to_str().expect("path"), "--wait"]);
    let id = submit.stdout.lines().next().unwrap_or_default().trim().to_string();
    let record = daemon.task(&id);
    assert_eq!(record["state"], "succeeded", "{}\n{record:#}\n{}", submit.stderr, daemon.log());
    // The task did what the sweep needs: the desktop got the value (the field shows the placeholder), every
    // tool ran with it, the verifier printed it, the model streamed it.
    assert_eq!(record["computer_state"]["fields"]["password"], "<secret:password>", "{record:#}");
    let mut results = record["steps"][1]["call_results"].as_array().cloned().unwrap_or_default();
    results.extend(record["steps"][2]["call_results"].as_array().cloned().unwrap_or_default());
    assert_eq!(results.len(), 5, "{record:#}");
    assert!(
        results[0]["message"].as_str().unwrap_or_default().contains("you sent {\"token\":\"<secret:password>\"}"),
        "{results:#?}"
    );
    assert_eq!(record["outcome"]["verified"], true, "{}", record["outcome"]);
    // Each route carried the value and brought it back redacted: the model's streamed text, the echoes of
    // the http tool (answer and error body) and of both programs (stdout, stderr), the value the model wrote
    // into a call, the verifier's output, the fragment in the summary.
    let says = |v: &Value, text: &str| v.as_str().unwrap_or_default().contains(text);
    assert!(says(&record["steps"][0]["model_text"], "says <secret:password> - so"), "{record:#}");
    for (i, echoed) in [
        "<secret:password>",
        "heard {\"text\":\"<secret:password>\"}",
        "heard {\"text\":\"<secret:password>\"}",
        "refused: {\"token\":\"<secret:password>\"}",
        "cannot take {\"text\":\"<secret:password>\"}",
    ]
    .iter()
    .enumerate()
    {
        assert!(says(&results[i]["message"], echoed), "result {i} lacks {echoed}: {results:#?}");
    }
    assert!(says(&record["outcome"]["checks"][0]["message"], "saw <secret:password>"), "{}", record["outcome"]);
    assert!(says(&record["outcome"]["summary"], "signed in with <secret:password>"), "{}", record["outcome"]);
    assert!(fake.problems().is_empty(), "{:#?}", fake.problems());
    sweep.search("agentd submit --wait (stdout)", submit.stdout.as_bytes());
    sweep.search("agentd submit --wait (stderr)", submit.stderr.as_bytes());

    // What the model saw: every request the vendor received.
    for r in fake.requests() {
        sweep.search(format!("vendor request {} {}", r.index, r.path), r.body.to_string().as_bytes());
    }
    // The API, the CLI.
    sweep.search("GET /v1/tasks/ID", record.to_string().as_bytes());
    for (what, args) in [
        ("agentd events", vec!["events", &id]),
        ("agentd events --json", vec!["--json", "events", &id]),
        ("agentd events --follow", vec!["events", "--follow", &id]),
        ("agentd show", vec!["show", &id]),
        ("agentd show --json", vec!["show", &id, "--json"]),
        ("agentd status", vec!["status", &id]),
        ("agentd status --json", vec!["--json", "status", &id]),
        ("agentd compile", vec!["compile", &id]),
    ] {
        let run = daemon.cli(&args);
        assert_eq!(run.code, 0, "{what}: {}", run.stderr);
        assert!(!run.stdout.is_empty(), "{what} printed nothing");
        sweep.search(format!("{what} (stdout)"), run.stdout.as_bytes());
        sweep.search(format!("{what} (stderr)"), run.stderr.as_bytes());
    }
    // Exports: the HTML (text, and the images it embeds decoded), the animations.
    let (html, gif, webp) = (dir.path().join("r.html"), dir.path().join("r.gif"), dir.path().join("r.webp"));
    let export = daemon.cli(&[
        "export",
        &id,
        "--html",
        html.to_str().expect("path"),
        "--gif",
        gif.to_str().expect("path"),
        "--webp",
        webp.to_str().expect("path"),
    ]);
    assert_eq!(export.code, 0, "{}", export.stderr);
    for file in [&html, &gif, &webp] {
        let bytes = std::fs::read(file).expect("export");
        sweep.search(format!("export {}", file.display()), &bytes);
    }
    let page = std::fs::read_to_string(&html).expect("html");
    assert!(
        page.contains("&lt;secret:password&gt;") || page.contains("<secret:password>"),
        "the report shows the placeholder"
    );
    for (i, data) in page.split("base64,").skip(1).enumerate() {
        use base64::Engine as _;
        let end =
            data.find(|c: char| !(c.is_ascii_alphanumeric() || c == '+' || c == '/' || c == '=')).unwrap_or(data.len());
        if let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(&data[..end]) {
            sweep.search(format!("export HTML, embedded data {i}"), &bytes);
        }
    }

    // Stored: the queue's tables read directly, and every file under the data dir.
    let dump = daemon.queue_dump();
    assert!(dump.contains("<secret:password>"), "the dump holds the records:\n{dump}");
    sweep.search("queue tables", dump.as_bytes());
    #[cfg(feature = "s3")]
    if let Some((store, _)) = &s3 {
        let objects = runtime.block_on(async {
            let listed = store.client().list_objects_v2().bucket(store.bucket()).send().await.expect("list the bucket");
            let mut objects = Vec::new();
            for object in listed.contents() {
                let key = object.key().unwrap_or_default().to_string();
                let body = store.client().get_object().bucket(store.bucket()).key(&key).send().await.expect("get");
                objects.push((key, body.body.collect().await.expect("body").into_bytes().to_vec()));
            }
            objects
        });
        assert!(!objects.is_empty(), "nothing in the bucket");
        for (key, bytes) in objects {
            sweep.search(format!("S3 object {key}"), &bytes);
        }
    }
    if let Some(receiver) = &receiver {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while receiver.spans().iter().all(|s| s.name != "task") && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let spans = receiver.spans();
        assert!(spans.iter().any(|s| s.name == "task"), "no task span exported: {spans:#?}");
        sweep.search("OTLP spans", format!("{spans:?}").as_bytes());
    }
    daemon.kill();
    let log = daemon.log();
    assert!(log.lines().count() > 5, "{log}");
    sweep.search(format!("daemon log ({log_format})"), log.as_bytes());
    for file in files_under(&daemon.agentd.data_dir()) {
        if let Ok(bytes) = std::fs::read(&file) {
            sweep.search(format!("data dir {}", file.display()), &bytes);
        }
    }
    eprintln!("searched {} surfaces:\n  {}", sweep.searched.len(), sweep.searched.join("\n  "));
    sweep.assert_clean();
}

/// The sweep's search finds what it is looking for: the value, and a fragment of ¾ of it, not less.
#[test]
fn the_sweep_finds_the_value_and_its_long_fragments_only() {
    assert_eq!(FRAGMENT, 13);
    assert_eq!(leaks(format!("x {VALUE} y").as_bytes()), [VALUE]);
    assert_eq!(leaks(&VALUE.as_bytes()[2..2 + FRAGMENT]), [&VALUE[2..2 + FRAGMENT]]);
    assert!(leaks(&VALUE.as_bytes()[..FRAGMENT - 1]).is_empty());
    assert!(leaks(b"<secret:password>").is_empty());
}

/// Embedded queue, JSON logs, S3 artifacts (moto), an OTLP receiver.
#[test]
fn a_secret_surfaces_nowhere_a_daemon_task_leaves_a_trace_on_sqlite() {
    let _heavy = crate::support::heavy();
    sweep(Backend::Sqlite, "json", true);
}

/// PostgreSQL's tables read directly, text logs.
#[test]
fn a_secret_surfaces_nowhere_a_daemon_task_leaves_a_trace_on_postgres() {
    let Some(backend) = Backend::postgres() else { return };
    let _heavy = crate::support::heavy();
    sweep(backend, "text", false);
}
