//! Declared tools through the real binary (docs/tools.md): a scripted model on the mock desktop calls an `http` tool
//! (a local test server checks its arguments and the header taken from the worker's environment) and a
//! `command` tool from config; the step records keep the envelopes with their details, and invalid
//! arguments come back to the model as a tool error without ending the task. Bad declarations are refused
//! over the API with a 400 naming the field, and by `agentd submit` with exit 2.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Agentd, Daemon, http};

const KEY_VAR: &str = "TOOLS_TEST_ORDERS_KEY";
const KEY: &str = "k-3f9a-not-a-real-key";

/// What the test server received: (path, x-api-key header, body).
type Seen = Arc<Mutex<Vec<(String, Option<String>, Value)>>>;

/// A local HTTP server for `http` tools: `POST /lookup` answers an envelope when the key header is right and
/// the body is `{"number": string}` (401 or 422 otherwise); `/plain` answers text; anything else 503.
fn tool_server() -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let seen: Seen = Arc::default();
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            let path = request_line.split(' ').nth(1).unwrap_or_default().to_string();
            let (mut length, mut key, mut content_type) = (0usize, None, None);
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some((name, value)) = line.trim_end().split_once(':') {
                    let value = value.trim().to_string();
                    match name.to_ascii_lowercase().as_str() {
                        "content-length" => length = value.parse().unwrap_or(0),
                        "x-api-key" => key = Some(value),
                        "content-type" => content_type = Some(value),
                        _ => {}
                    }
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            log.lock().expect("log").push((path.clone(), key.clone(), body.clone()));
            let (status, reply) = match path.as_str() {
                "/lookup" if key.as_deref() != Some(KEY) => ("401 Unauthorized", "bad key".to_string()),
                "/lookup" if content_type.as_deref() != Some("application/json") => {
                    ("415 Unsupported Media Type", "send JSON".to_string())
                }
                "/lookup" => match body["number"].as_str() {
                    Some(number) => (
                        "200 OK",
                        json!({"ok": true, "output": format!("order {number}: shipped"),
                               "details": {"carrier": "DHL", "parcels": 2}})
                        .to_string(),
                    ),
                    None => ("422 Unprocessable Entity", "number must be a string".to_string()),
                },
                "/plain" => ("200 OK", "pong\n".to_string()),
                _ => ("503 Service Unavailable", "down for maintenance".to_string()),
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{reply}",
                reply.len()
            );
        }
    });
    (base, seen)
}

/// A `command` tool's program: reads the arguments, says it is working (a streamed line), answers an
/// envelope whose details hold the arguments and the directory it ran in; `{"fail": true}` exits 4.
fn notify_script(dir: &Path) -> String {
    let script = dir.join("notify.sh");
    std::fs::write(
        &script,
        "read -r args\n\
         echo \"notifying\"\n\
         case \"$args\" in *'\"fail\":true'*) echo 'channel closed' >&2; exit 4;; esac\n\
         printf '{\"ok\": true, \"output\": \"sent\", \"details\": {\"args\": %s, \"cwd\": \"%s\"}}\\n' \"$args\" \"$(pwd)\"\n",
    )
    .expect("write script");
    format!(
        "[tools.notify]\n\
         description = \"Sends a message.\"\n\
         parameters = {{ type = \"object\", properties = {{ text = {{ type = \"string\" }}, fail = {{ type = \"boolean\" }} }}, required = [\"text\"] }}\n\
         kind = \"command\"\n\
         command = [\"/bin/sh\", {:?}]\n\
         cwd = {:?}\n\
         timeout_secs = 10\n",
        script.display().to_string(),
        dir.display().to_string()
    )
}

/// The task: an `http` tool declared in the task, the config's `notify`; the script calls them, then calls
/// `lookup_order` with a number instead of a string, then an `http` tool whose server is down, then finishes.
fn task(base: &str, id: &str) -> Value {
    let parameters = json!({"type": "object", "properties": {"number": {"type": "string"}}, "required": ["number"],
                            "additionalProperties": false});
    json!({
        "id": id,
        "instructions": "Look order A-7 up and tell the team.",
        "computer": {"provider": "mock", "scene": "blank"},
        "model": {"provider": "scripted", "script": {"turns": [
            {"say": "looking it up", "calls": [
                {"name": "lookup_order", "arguments": {"number": "A-7"}},
                {"name": "notify", "arguments": {"text": "order A-7 shipped"}}
            ]},
            {"calls": [{"name": "lookup_order", "arguments": {"number": 7}}]},
            {"calls": [{"name": "status_page", "arguments": {}}]},
            {"calls": [{"name": "notify", "arguments": {"text": "x", "fail": true}}]},
            {"complete": {"success": true, "summary": "order A-7 shipped; team told"}}
        ]}},
        "tools": [
            {"name": "lookup_order", "description": "Looks an order up.", "parameters": parameters, "kind": "http",
             "url": format!("{base}/lookup"), "headers_env": {"X-Api-Key": KEY_VAR}, "timeout_secs": 5},
            {"name": "status_page", "description": "Reads the status page.", "parameters": {"type": "object"},
             "kind": "http", "url": format!("{base}/down")},
            {"use": "notify"}
        ]
    })
}

/// Checks the record of a run of [`task`] (the docs/events.md document: `run --json` or `status --json`).
fn check_record(record: &Value, seen: &Seen, dir: &Path) {
    assert_eq!(record["state"], "succeeded", "{record:#}");
    let steps = record["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 5, "{record:#}");

    // Step 0: both tools ran; their envelopes and details are in `results`, the model read the outputs.
    let results = steps[0]["results"].as_array().expect("results");
    let lookup = results.iter().find(|r| r["tool"] == "lookup_order").expect("lookup result");
    assert_eq!(lookup["ok"], true, "{lookup}");
    assert_eq!(lookup["message"], "order A-7: shipped");
    assert_eq!(lookup["details"], json!({"carrier": "DHL", "parcels": 2}));
    assert!(lookup["call_id"].is_string(), "{lookup}");
    let notify = results.iter().find(|r| r["tool"] == "notify").expect("notify result");
    assert_eq!(notify["ok"], true, "{notify}");
    assert_eq!(notify["message"], "sent");
    assert_eq!(notify["details"]["args"], json!({"text": "order A-7 shipped"}));
    let cwd = std::fs::canonicalize(dir).expect("canonical dir");
    assert_eq!(notify["details"]["cwd"], cwd.display().to_string(), "{notify}");
    let call_results = steps[0]["call_results"].as_array().expect("call_results");
    assert!(call_results.iter().any(|r| r["ok"] == true && r["message"] == "order A-7: shipped"), "{call_results:?}");

    // Step 1: invalid arguments are a tool error the model reads; nothing was sent.
    let result = &steps[1]["results"][0];
    assert_eq!((result["tool"].as_str(), result["ok"].as_bool()), (Some("lookup_order"), Some(false)), "{result}");
    let message = result["message"].as_str().unwrap_or_default();
    assert!(message.contains("invalid arguments for lookup_order") && message.contains("/number"), "{message}");
    assert_eq!(steps[1]["call_results"][0]["ok"], false);
    assert_eq!(steps[1]["call_results"][0]["message"], message);

    // Step 2: a server answering 503 is a failed call naming the tool and the status, with the status kept.
    let result = &steps[2]["results"][0];
    let message = result["message"].as_str().unwrap_or_default();
    assert_eq!(result["ok"], false, "{result}");
    assert!(message.contains("tool status_page") && message.contains("503"), "{message}");
    assert_eq!(result["details"], json!({"status": 503}));

    // Step 3: a program exiting non-zero is a failed call with its stderr's tail.
    let result = &steps[3]["results"][0];
    let message = result["message"].as_str().unwrap_or_default();
    assert_eq!(result["ok"], false, "{result}");
    assert!(message.contains("tool notify") && message.contains("status 4") && message.contains("channel closed"));

    // The server saw one lookup (the invalid call never left agentd), with the key from the environment.
    let seen = seen.lock().expect("seen");
    let lookups: Vec<_> = seen.iter().filter(|(path, _, _)| path == "/lookup").collect();
    assert_eq!(lookups.len(), 1, "{seen:?}");
    assert_eq!(lookups[0].1.as_deref(), Some(KEY));
    assert_eq!(lookups[0].2, json!({"number": "A-7"}));
    // The key's value is nowhere in the record.
    assert!(!record.to_string().contains(KEY));
}

#[test]
fn agentd_run_calls_http_and_command_tools_and_records_their_envelopes() {
    let (base, seen) = tool_server();
    let scratch = tempfile::tempdir().expect("tempdir");
    let agentd = Agentd::with_config(&notify_script(scratch.path()));
    let task_path = scratch.path().join("task.json");
    std::fs::write(&task_path, task(&base, "tools-run").to_string()).expect("write task");
    let output = agentd
        .command()
        .args(["run", "--json", task_path.to_str().expect("path")])
        .env(KEY_VAR, KEY)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let record: Value = serde_json::from_slice(&output.stdout).expect("run --json");
    check_record(&record, &seen, scratch.path());
    assert!(!stderr.contains(KEY), "{stderr}");

    // Without the variable on the worker, `agentd run` refuses the task before it starts, naming the field.
    let run = agentd.run(&["run", task_path.to_str().expect("path")]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("`tools[0].headers_env.X-Api-Key`") && run.stderr.contains(KEY_VAR), "{}", run.stderr);
}

#[test]
fn the_daemon_runs_declared_tools_and_streams_command_output() {
    let (base, seen) = tool_server();
    let scratch = tempfile::tempdir().expect("tempdir");
    // The tool server is on loopback: the operator allows it to tasks submitted over the API.
    let config = format!(
        "[worker]\nallowed_env = [\"{KEY_VAR}\"]\n\n[outbound]\nallow = [\"127.0.0.1\"]\n{}",
        notify_script(scratch.path())
    );
    let daemon = Daemon::start_with_env(&config, &[(KEY_VAR, KEY)]);
    let body = task(&base, "tools-daemon").to_string();
    let (code, reply) = http(&daemon.socket, "POST", "/v1/tasks", Some(body.as_bytes()), &[]).expect("submit");
    assert_eq!(code, 201, "{reply}");
    let record = daemon.wait_terminal("tools-daemon", Duration::from_secs(60));
    check_record(&record, &seen, scratch.path());
    let status = daemon.cli(&["status", "--json", "tools-daemon"]);
    assert_eq!(status.code, 0, "{}", status.stderr);
    check_record(&status.json(), &seen, scratch.path());

    // The tool's lifecycle is in the events: started, the streamed line, finished with the details.
    let events = daemon.cli(&["events", "--json", "tools-daemon"]);
    assert_eq!(events.code, 0, "{}", events.stderr);
    let events: Vec<Value> = events.stdout.lines().map(|l| serde_json::from_str(l).expect("event")).collect();
    let of = |kind: &str| events.iter().filter(|e| e["type"] == kind).cloned().collect::<Vec<_>>();
    assert!(of("tool_output").iter().any(|e| e["text"] == "notifying"), "{events:#?}");
    let finished = of("tool_finished");
    assert!(finished.iter().any(|e| e["name"] == "lookup_order" && e["details"]["carrier"] == "DHL"), "{finished:#?}");
    assert!(!daemon.log().contains(KEY) && !serde_json::to_string(&events).expect("json").contains(KEY));
}

#[test]
fn bad_tool_declarations_are_refused_over_the_api_naming_the_field() {
    let daemon = Daemon::start(
        "[worker]\nallowed_env = [\"ALLOWED_KEY\"]\n[tools.notify]\ndescription = \"d\"\nparameters = { type = \"object\" }\nkind = \"command\"\ncommand = [\"true\"]\n",
    );
    let submit = |task: &Value| {
        let (code, body) =
            http(&daemon.socket, "POST", "/v1/tasks", Some(task.to_string().as_bytes()), &[]).expect("submit");
        (code, serde_json::from_str::<Value>(&body).unwrap_or(Value::Null))
    };
    // The malformed corpus's tool cases, as API bodies.
    let corpus = crate::support::fixtures().join("bad-tasks");
    let cases = [
        ("tools-duplicate-name.json", "tools[1].name"),
        ("tools-reserved-name.json", "tools[0].name"),
        ("tools-command-in-task.json", "tools[0].kind"),
        ("tools-invalid-schema.json", "tools[0].parameters"),
        ("tools-parameters-not-object.json", "tools[0].parameters"),
        ("tools-unknown-use.json", "tools[0].use"),
        ("tools-bad-url-scheme.json", "tools[0].url"),
        ("tools-bad-url.json", "tools[0].url"),
        ("tools-bad-header-name.json", "tools[0].headers_env"),
        ("tools-unknown-kind.json", "tools[0].kind"),
        ("tools-timeout-huge.json", "tools[0].timeout_secs"),
        ("output-schema-invalid.json", "output_schema"),
    ];
    for (file, field) in cases {
        let task: Value =
            serde_json::from_str(&std::fs::read_to_string(corpus.join(file)).expect("fixture")).expect("fixture JSON");
        let (code, body) = submit(&task);
        assert_eq!(code, 400, "{file}: {body}");
        assert_eq!(body["error"]["field"], field, "{file}: {body}");
        // `agentd submit` says the same with exit 2.
        let run = daemon.cli(&["submit", corpus.join(file).to_str().expect("path")]);
        assert_eq!(run.code, 2, "{file}: {}", run.stderr);
        assert!(run.stderr.contains(field), "{file}: {}", run.stderr);
    }

    // A header's variable must be one the operator allows API tasks to name.
    let http_tool = |var: &str| {
        json!({"instructions": "x", "labels": {"parked": "yes"}, "tools": [
            {"use": "notify"},
            {"name": "lookup", "description": "d", "parameters": {"type": "object"}, "kind": "http",
             "url": "https://orders.example/lookup", "headers_env": {"Authorization": var}}]})
    };
    let (code, body) = submit(&http_tool("ANTHROPIC_API_KEY"));
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["error"]["field"], "tools[1].headers_env.Authorization", "{body}");
    assert!(body["error"]["message"].as_str().unwrap_or_default().contains("worker.allowed_env"), "{body}");
    // Allowed variable, any http(s) URL, a config `command` tool named with `use`: accepted.
    let (code, body) = submit(&http_tool("ALLOWED_KEY"));
    assert_eq!(code, 201, "{body}");
}
