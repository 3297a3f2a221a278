//! Client commands: `submit`, `status`, `list`, `cancel`, `events`, `approve`, `reject`, `tool-result` — each one request
//! (or an event stream) to the daemon, printed for people on stderr/stdout or as JSON on stdout.

use std::io::Write;
use std::path::Path;

use hyper::Method;
use serde_json::Value;

use super::client::Client;
use super::exit::{CliError, CliResult, Exit};
use super::progress::Printer;
use super::sanitize::sanitize;
use crate::model::scripted::Script;
use crate::record::events::Event;
use crate::status::TaskRecord;
use crate::task::{ComputerSpec, MockSpec, ModelSpec, SceneSource, ScriptSource, ScriptedSpec, TaskSpec};

/// Makes a task file self-contained for a daemon that cannot see it (and that takes file paths only from
/// the directories its operator allows): script and scene files are read here, as the user running the
/// command, and inlined.
pub fn prepare_for_daemon(mut spec: TaskSpec, source: &crate::task::TaskSource) -> Result<TaskSpec, CliError> {
    if let Some(ModelSpec::Scripted(ScriptedSpec { script })) = &mut spec.model
        && let ScriptSource::Path(path) = script
    {
        let loaded = Script::load(&source.resolve(path))
            .map_err(|e| CliError::invalid(anyhow::anyhow!("{}: field `model.script`: {e}", source.name)))?;
        *script = ScriptSource::Inline(loaded);
    }
    if let Some(ComputerSpec::Mock(MockSpec { scene: Some(scene), .. })) = &mut spec.computer
        && let SceneSource::Named(name) = scene
        && agentd_mock::Scene::builtin(name).is_none()
    {
        *scene = SceneSource::Inline(inline_scene_file(name, source)?);
    }
    Ok(spec)
}

/// Reads a scene file a task names (relative to the task file), checks it, and returns it as an object named
/// after the file unless it names itself.
fn inline_scene_file(name: &str, source: &crate::task::TaskSource) -> Result<serde_json::Map<String, Value>, CliError> {
    let invalid =
        |message: String| CliError::invalid(anyhow::anyhow!("{}: field `computer.scene`: {message}", source.name));
    let path = source.resolve(name);
    let text = match crate::input::read_text_blocking(&path) {
        Ok(text) => text,
        Err(crate::input::FileError::Io { source: e, .. }) if e.kind() == std::io::ErrorKind::NotFound => {
            let builtins = agentd_mock::Scene::builtin_names().join(", ");
            return Err(invalid(format!(
                "unknown scene {name:?}: it is not a built-in scene ({builtins}) and {} does not exist",
                path.display()
            )));
        }
        Err(e) => return Err(invalid(e.to_string())),
    };
    agentd_mock::Scene::from_json_str(&text, &path.display().to_string()).map_err(|e| invalid(e.to_string()))?;
    let mut scene: serde_json::Map<String, Value> =
        serde_json::from_str(&text).map_err(|e| invalid(format!("{}: {e}", path.display())))?;
    if let Some(stem) = path.file_stem() {
        scene.entry("name").or_insert_with(|| Value::String(stem.to_string_lossy().into_owned()));
    }
    Ok(scene)
}

fn record_of(value: Value) -> Result<TaskRecord, CliError> {
    serde_json::from_value(value)
        .map_err(|e| CliError::unreachable(anyhow::anyhow!("unexpected reply from agentd: {e}")))
}

fn exit_for(record: &TaskRecord) -> Exit {
    match (&record.outcome, record.state.is_terminal()) {
        (Some(outcome), true) if !outcome.success => Exit::Unsuccessful,
        _ => Exit::Success,
    }
}

fn print_json(value: &impl serde::Serialize) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, value);
    let _ = writeln!(out);
}

pub async fn submit(client: &Client, task: &Path, wait: bool, json: bool) -> CliResult {
    let (spec, source) = TaskSpec::read(task)?;
    let spec = prepare_for_daemon(spec, &source)?;
    let body = serde_json::to_vec(&spec).map_err(|e| CliError::invalid(anyhow::anyhow!("{}: {e}", source.name)))?;
    let (status, reply) = client.call(Method::POST, "/v1/tasks", Some(body)).await?;
    let record = record_of(reply)?;
    let id = record.id.clone();
    if !wait {
        if json {
            print_json(&record);
        } else {
            println!("{}", sanitize(&id));
            if status == hyper::StatusCode::OK {
                eprintln!("agentd: task {} was already submitted ({})", sanitize(&id), record.state.as_str());
            }
        }
        return Ok(Exit::Success);
    }
    eprintln!(
        "agentd: task {} submitted; following its progress (Ctrl-C stops following, not the task)",
        sanitize(&id)
    );
    let mut printer = Printer::default();
    let mut final_state = None;
    client
        .follow_events(&id, 0, true, |event| {
            if let crate::record::events::EventKind::TaskFinished { state, .. } = &event.kind {
                final_state = Some(*state);
            }
            if let Some(line) = printer.line(event) {
                eprintln!("{line}");
            }
        })
        .await?;
    // The queue records the end just after the event that announces it: wait for it to agree.
    let mut record = record_of(client.call(Method::GET, &format!("/v1/tasks/{}", encode(&id)), None).await?.1)?;
    for _ in 0..100 {
        if record.state.is_terminal() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        record = record_of(client.call(Method::GET, &format!("/v1/tasks/{}", encode(&id)), None).await?.1)?;
    }
    if json {
        print_json(&record);
    } else {
        println!("{}", sanitize(&id));
    }
    let succeeded = record.state.is_terminal() && exit_for(&record) == Exit::Success
        || !record.state.is_terminal() && final_state == Some(crate::record::TaskState::Succeeded);
    Ok(if succeeded { Exit::Success } else { Exit::Unsuccessful })
}

pub async fn status(client: &Client, id: &str, json: bool) -> CliResult {
    let (_, reply) = client.call(Method::GET, &format!("/v1/tasks/{}", encode(id)), None).await?;
    let record = record_of(reply.clone())?;
    if json {
        print_json(&reply);
    } else {
        let outcome = record
            .outcome
            .as_ref()
            .map(|o| format!(" ({}): {}", o.reason.as_str(), sanitize(&o.summary)))
            .or_else(|| record.waiting_reason.as_ref().map(|r| format!(": {}", sanitize(r))))
            .unwrap_or_default();
        println!("{}  {}{outcome}", sanitize(&record.id), record.state.as_str());
        println!(
            "  attempt {}  worker {}  steps {}  tokens {}/{}  cost ${:.4}",
            record.attempt,
            sanitize(record.worker.as_deref().unwrap_or("-")),
            record.steps.len(),
            record.usage.input_tokens,
            record.usage.output_tokens,
            record.usage.cost_usd
        );
        if let Some(output) = record.outcome.as_ref().and_then(|o| o.output.as_ref()) {
            println!("  output {}", sanitize(&output.to_string()));
        }
        if !record.pending_tool_calls.is_empty() {
            println!(
                "  pending tool calls (answer with `agentd tool-result {} CALL_ID --output TEXT`):",
                sanitize(&record.id)
            );
            for call in &record.pending_tool_calls {
                println!(
                    "    {}  {}  {}",
                    sanitize(&call.id),
                    sanitize(&call.name),
                    sanitize(&call.arguments.to_string())
                );
            }
        }
    }
    Ok(exit_for(&record))
}

/// One answer given on the command line.
pub struct ToolResultArgs<'a> {
    pub call_id: &'a str,
    pub output: &'a str,
    pub error: bool,
    pub details: Option<&'a str>,
}

/// `tool-result`: answers one pending remote tool call. The API wants one result per pending call at once;
/// with more than one pending, it refuses and its message lists them (exit 2).
pub async fn tool_result(client: &Client, id: &str, answer: &ToolResultArgs<'_>, json: bool) -> CliResult {
    let details = answer
        .details
        .map(|text| {
            serde_json::from_str::<Value>(text)
                .map_err(|e| CliError::invalid(anyhow::anyhow!("--details: not valid JSON: {e}")))
        })
        .transpose()?;
    let mut result = serde_json::json!({"id": answer.call_id, "ok": !answer.error, "output": answer.output});
    if let Some(details) = details {
        result["details"] = details;
    }
    let body = serde_json::json!({ "results": [result] });
    let path = format!("/v1/tasks/{}/tool-results", encode(id));
    let (_, reply) = client.call(Method::POST, &path, Some(body.to_string().into_bytes())).await?;
    if json {
        print_json(&reply);
    } else {
        eprintln!("agentd: task {}: call {} answered; it resumes", sanitize(id), sanitize(answer.call_id));
    }
    Ok(Exit::Success)
}

pub async fn list(client: &Client, state: Option<&str>, limit: Option<u32>, json: bool) -> CliResult {
    let mut path = "/v1/tasks?".to_string();
    if let Some(state) = state {
        path.push_str(&format!("state={}&", encode(state)));
    }
    if let Some(limit) = limit {
        path.push_str(&format!("limit={limit}"));
    }
    let (_, reply) = client.call(Method::GET, path.trim_end_matches(['?', '&']), None).await?;
    if json {
        print_json(&reply);
        return Ok(Exit::Success);
    }
    let tasks: Vec<TaskRecord> = serde_json::from_value(reply["tasks"].clone())
        .map_err(|e| CliError::unreachable(anyhow::anyhow!("unexpected reply from agentd: {e}")))?;
    for task in tasks {
        let summary = task.outcome.as_ref().map(|o| o.summary.as_str()).unwrap_or_default();
        println!(
            "{:<40} {:<18} {}  {}",
            sanitize(&task.id),
            task.state.as_str(),
            task.created_at.date(),
            sanitize(summary)
        );
    }
    Ok(Exit::Success)
}

pub async fn cancel(client: &Client, id: &str, json: bool) -> CliResult {
    let (_, reply) = client.call(Method::POST, &format!("/v1/tasks/{}/cancel", encode(id)), None).await?;
    if json {
        print_json(&reply);
    } else if reply["cancel"] == "requested" {
        eprintln!("agentd: task {} is running; it stops at its next safe point", sanitize(id));
    } else {
        eprintln!("agentd: task {} cancelled", sanitize(id));
    }
    Ok(Exit::Success)
}

pub async fn decide(client: &Client, id: &str, approve: bool, reason: Option<String>, json: bool) -> CliResult {
    let (path, body) = if approve {
        (format!("/v1/tasks/{}/approve", encode(id)), None)
    } else {
        let body = serde_json::json!({ "reason": reason.unwrap_or_default() });
        (format!("/v1/tasks/{}/reject", encode(id)), Some(body.to_string().into_bytes()))
    };
    let (_, reply) = client.call(Method::POST, &path, body).await?;
    if json {
        print_json(&reply);
    } else {
        eprintln!("agentd: task {} {}", sanitize(id), if approve { "approved; it resumes" } else { "rejected" });
    }
    Ok(Exit::Success)
}

pub async fn events(client: &Client, id: &str, follow: bool, json: bool) -> CliResult {
    let mut printer = Printer::default();
    let mut out = std::io::stdout().lock();
    let mut print = |event: &Event| {
        if json {
            let _ = serde_json::to_writer(&mut out, event);
            let _ = writeln!(out);
        } else {
            let line = printer.line(event).unwrap_or_else(|| sanitize(&describe(event)).into_owned());
            let _ = writeln!(out, "{:>5} {} {line}", event.seq, event.kind.type_name());
        }
    };
    client.follow_events(id, 0, follow, &mut print).await?;
    Ok(Exit::Success)
}

fn describe(event: &Event) -> String {
    match serde_json::to_value(&event.kind) {
        Ok(Value::Object(mut fields)) => {
            fields.remove("type");
            Value::Object(fields).to_string()
        }
        _ => String::new(),
    }
}

/// Percent-encodes a path segment or query value.
fn encode(s: &str) -> String {
    let mut out = String::new();
    for byte in s.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}
