//! Client commands: `submit`, `status`, `list`, `cancel`, `events`, `approve`, `reject`, `tool-result` — each one request
//! (or an event stream) to the daemon, printed for people on stderr/stdout or as JSON on stdout.

use std::io::Write;
use std::path::Path;

use serde_json::Value;

use super::client::{Client, Method, StatusCode};
use super::exit::{CliError, CliResult, Exit};
use super::progress::{Printer, Progress};
use super::sanitize::sanitize;
use super::term::{self, Style};
use crate::model::scripted::Script;
use crate::record::events::Event;
use crate::status::{TaskRecord, UnreadableTask};
use crate::task::{ComputerSpec, MockSpec, ModelSpec, SceneSource, ScriptSource, ScriptedSpec, TaskSpec};

/// Makes a task file self-contained for a daemon that cannot see it (and that takes file paths only from
/// the directories its operator allows): script and scene files are read here, as the user running the
/// command, and inlined.
pub fn prepare_for_daemon(mut spec: TaskSpec, source: &crate::task::TaskSource) -> Result<TaskSpec, CliError> {
    if let Some(ModelSpec::Scripted(ScriptedSpec { script, .. })) = &mut spec.model
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

pub(super) fn record_of(value: Value) -> Result<TaskRecord, CliError> {
    serde_json::from_value(value)
        .map_err(|e| CliError::unreachable(anyhow::anyhow!("unexpected reply from agentd: {e}")))
}

fn exit_for(record: &TaskRecord) -> Exit {
    match (&record.outcome, record.state.is_terminal()) {
        (Some(outcome), true) if !outcome.success => Exit::Unsuccessful,
        _ => Exit::Success,
    }
}

pub(super) fn print_json(value: &impl serde::Serialize) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, value);
    let _ = writeln!(out);
}

pub async fn submit(client: &Client, task: &Path, wait: bool, json: bool) -> CliResult {
    let (spec, source) = TaskSpec::read(task)?;
    let spec = prepare_for_daemon(spec, &source)?;
    submit_spec(client, &spec, &source.name, wait, json).await
}

/// What `agentd replay` was asked (docs/replay-and-verify.md).
pub struct ReplayArgs<'a> {
    pub id: &'a str,
    pub task: Option<&'a Path>,
    pub params: &'a [String],
    pub fallback: Option<&'a str>,
    pub wait: bool,
}

/// `agentd replay ID`: submits a task that replays the succeeded task ID's recorded actions — ID's own task
/// file (or `--task FILE`) with `replay: {of: ID, params}`; `--fallback PROVIDER[:MODEL]` makes that model the
/// task's and hands over to it on divergence.
pub async fn replay(client: &Client, args: ReplayArgs<'_>, json: bool) -> CliResult {
    use crate::task::replay::{OnDivergence, ParamName, ReplaySpec};
    let invalid = |message: String| CliError::invalid(anyhow::anyhow!(message));
    let of = crate::task::TaskId::parse(args.id).map_err(invalid)?;
    let (mut spec, name) = match args.task {
        Some(path) => {
            let (spec, source) = TaskSpec::read(path)?;
            (prepare_for_daemon(spec, &source)?, source.name)
        }
        None => {
            let (_, reply) = client.call(Method::GET, &format!("/v1/tasks/{}", encode(of.as_str())), None).await?;
            let mut spec = record_of(reply)?.task;
            // A demonstration's label keeps workers off it; its replay is an ordinary task.
            spec.labels.retain(|key, _| key.as_str() != crate::api::demonstrations::DEMONSTRATION_LABEL);
            (spec, format!("the task file of {of}"))
        }
    };
    let mut replay = spec.replay.take().unwrap_or(ReplaySpec {
        of: of.clone(),
        params: Default::default(),
        on_divergence: OnDivergence::Stop,
        masks: Vec::new(),
        min_score: None,
        tolerance: None,
    });
    replay.of = of;
    for param in args.params {
        let (name, value) = param
            .split_once('=')
            .ok_or_else(|| invalid(format!("--param {param:?}: write it as NAME=VALUE (NAME: the recorded text)")))?;
        let name = ParamName::parse(name).map_err(|e| invalid(format!("--param {param:?}: {e}")))?;
        replay.params.insert(name, value.to_string());
    }
    if let Some(fallback) = args.fallback {
        let (provider, model) = match fallback.split_once(':') {
            Some((provider, model)) => (provider, Some(model)),
            None => (fallback, None),
        };
        let mut value = serde_json::json!({ "provider": provider });
        if let Some(model) = model {
            value["model"] = model.into();
        }
        let model: ModelSpec = serde_json::from_value(value).map_err(|e| {
            invalid(format!("--fallback {fallback:?}: {e} (PROVIDER[:MODEL], e.g. anthropic:claude-sonnet-4-5)"))
        })?;
        if matches!(model, ModelSpec::Scripted(_)) {
            return Err(invalid(format!(
                "--fallback {fallback:?}: name a vendor model (anthropic, openai, gemini, openai-compatible)"
            )));
        }
        spec.model = Some(model);
        replay.on_divergence = OnDivergence::Model;
    }
    spec.id = None;
    spec.replay = Some(replay);
    submit_spec(client, &spec, &name, args.wait, json).await
}

/// Submits a task file's contents; with `wait`, follows it and exits with its outcome.
async fn submit_spec(client: &Client, spec: &TaskSpec, name: &str, wait: bool, json: bool) -> CliResult {
    let body = serde_json::to_vec(spec).map_err(|e| CliError::invalid(anyhow::anyhow!("{name}: {e}")))?;
    let (status, reply) = client.call(Method::POST, "/v1/tasks", Some(body)).await?;
    let record = record_of(reply)?;
    let id = record.id.clone();
    if !wait {
        if json {
            print_json(&record);
        } else {
            println!("{}", sanitize(&id));
            if status == StatusCode::OK {
                eprintln!("agentd: task {} was already submitted ({})", sanitize(&id), record.state.as_str());
            }
        }
        return Ok(Exit::Success);
    }
    eprintln!(
        "agentd: task {} submitted; following its progress (Ctrl-C stops following, not the task)",
        sanitize(&id)
    );
    follow_to_end(client, &id, None, json).await
}

/// Follows a task's events until it ends (from the `turn_queued` of `turn` on, for a later turn of a
/// conversation, docs/humans.md: the earlier turns' events are skipped), prints its id (`--json`: its record) and exits
/// with its outcome.
pub(super) async fn follow_to_end(client: &Client, id: &str, turn: Option<u32>, json: bool) -> CliResult {
    let id = id.to_string();
    let progress = Progress::on_stderr();
    let mut final_state = None;
    let mut ours = turn.is_none();
    let follow = client.follow_events(&id, 0, true, |event| {
        use crate::record::events::EventKind;
        if let (EventKind::TurnQueued { turn: queued }, Some(turn)) = (&event.kind, turn) {
            ours = *queued == turn;
        }
        if !ours {
            return;
        }
        if let EventKind::TaskFinished { state, .. } = &event.kind {
            final_state = Some(*state);
        }
        progress.event(event);
    });
    let followed = tokio::select! {
        followed = follow => followed,
        _ = tokio::signal::ctrl_c() => {
            progress.finish();
            eprintln!(
                "agentd: stopped following; task {0} goes on (`agentd status {0}`, `agentd cancel {0}`)",
                sanitize(&id)
            );
            return Ok(Exit::Interrupted);
        }
    };
    progress.finish();
    followed?;
    let record = record_after_its_end(client, &id).await?;
    if json {
        print_json(&record);
    } else {
        println!("{}", sanitize(&id));
    }
    let succeeded = record.state.is_terminal() && exit_for(&record) == Exit::Success
        || !record.state.is_terminal() && final_state == Some(crate::record::TaskState::Succeeded);
    Ok(if succeeded { Exit::Success } else { Exit::Unsuccessful })
}

/// Task `id`'s record once its `task_finished` event was seen: the queue records the end just after the event
/// that announces it, so the record is read again (every 50 ms, at most 100 times) until it agrees; the last
/// one read if it never does.
pub(super) async fn record_after_its_end(client: &Client, id: &str) -> Result<TaskRecord, CliError> {
    let path = format!("/v1/tasks/{}", encode(id));
    let mut record = record_of(client.call(Method::GET, &path, None).await?.1)?;
    for _ in 0..100 {
        if record.state.is_terminal() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        record = record_of(client.call(Method::GET, &path, None).await?.1)?;
    }
    Ok(record)
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
        for line in super::turns::turn_lines(&record) {
            println!("{line}");
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

/// `answer ID TEXT`: the text becomes the result of the task's pending `ask_human` call (docs/humans.md).
pub async fn answer(client: &Client, id: &str, text: &str, json: bool) -> CliResult {
    let body = serde_json::json!({ "text": text });
    let path = format!("/v1/tasks/{}/answer", encode(id));
    let (_, reply) = client.call(Method::POST, &path, Some(body.to_string().into_bytes())).await?;
    if json {
        print_json(&reply);
    } else {
        eprintln!("agentd: task {}: answered; it resumes", sanitize(id));
    }
    Ok(Exit::Success)
}

/// How often `list --watch` asks again.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// `list`: a table with headers (ID, STATE, AGE, STEPS, COST, SUMMARY), newest first; `--json` the API's
/// document. `--watch` asks again every 2 s until Ctrl-C (exit 0): on a terminal the table is redrawn in
/// place, elsewhere printed again after a blank line (JSON: one document per line).
pub async fn list(client: &Client, state: Option<&str>, limit: Option<u32>, watch: bool, json: bool) -> CliResult {
    let mut path = "/v1/tasks?".to_string();
    if let Some(state) = state {
        path.push_str(&format!("state={}&", encode(state)));
    }
    if let Some(limit) = limit {
        path.push_str(&format!("limit={limit}"));
    }
    let path = path.trim_end_matches(['?', '&']).to_string();
    let fetch = || async {
        let (_, reply) = client.call(Method::GET, &path, None).await?;
        let tasks = listed(&reply)?;
        Ok::<_, CliError>((reply, tasks))
    };
    if !watch {
        let (reply, tasks) = fetch().await?;
        if json {
            print_json(&reply);
        } else if tasks.is_empty() {
            eprintln!("agentd: no tasks");
        } else {
            let style = Style::for_stream(&std::io::stdout());
            print!("{}", table(&tasks, time::OffsetDateTime::now_utc(), style, None));
        }
        return Ok(Exit::Success);
    }
    let stdout = std::io::stdout();
    let live = !json && term::live(&stdout);
    let style = Style::for_stream(&stdout);
    // The first answer decides whether the daemon is there at all (exit 3 if not); later failures are shown
    // and asked again.
    let mut answer: Result<_, CliError> = Ok(fetch().await?);
    let mut first = true;
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        let now = time::OffsetDateTime::now_utc();
        let mut out = String::new();
        match &answer {
            Ok((reply, _)) if json => out.push_str(&format!("{reply}\n")),
            Ok((_, tasks)) if live => {
                let width = term::width(1);
                let heading = format!("every {}s: agentd list  ", WATCH_EVERY.as_secs());
                let clock = now
                    .format(time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC"))
                    .unwrap_or_default();
                out.push_str(&style.dim(&format!("{heading}{clock}  (Ctrl-C to stop)")));
                out.push_str("\n\n");
                if tasks.is_empty() {
                    out.push_str("no tasks\n");
                } else {
                    out.push_str(&table(tasks, now, style, Some(width)));
                }
            }
            Ok((_, tasks)) => {
                if !first {
                    out.push('\n');
                }
                if tasks.is_empty() {
                    out.push_str("no tasks\n");
                } else {
                    out.push_str(&table(tasks, now, style, None));
                }
            }
            Err(e) => {
                if !live && !first {
                    out.push('\n');
                }
                let message = format!("agentd: {}", sanitize(&e.to_string()));
                out.push_str(&format!("{}\n", style.red(&message)));
            }
        }
        if live {
            // Each row erased to its end and everything below the table erased: no flicker, no leftovers.
            let rows: String = out.lines().map(|l| format!("{l}{}\n", term::ERASE_TO_EOL)).collect();
            let clear = if first { term::CLEAR_SCREEN } else { "" };
            out = format!("{clear}{}{}{rows}{}{}", term::HOME, term::WRAP_OFF, term::ERASE_BELOW, term::WRAP_ON);
        }
        {
            let mut stdout = stdout.lock();
            let _ = stdout.write_all(out.as_bytes());
            let _ = stdout.flush();
        }
        first = false;
        tokio::select! {
            _ = &mut interrupted => return Ok(Exit::Success),
            () = tokio::time::sleep(WATCH_EVERY) => {}
        }
        answer = tokio::select! {
            _ = &mut interrupted => return Ok(Exit::Success),
            answer = fetch() => answer,
        };
    }
}

/// A task as `list` shows it.
enum Listed {
    Task {
        record: Box<TaskRecord>,
        /// What the daemon counted (`step_count`), else the steps in the record.
        steps: u64,
    },
    /// A task whose stored record the daemon cannot read: a row saying so, in its place.
    Unreadable(UnreadableTask),
}

fn listed(reply: &Value) -> Result<Vec<Listed>, CliError> {
    let unexpected = |e: serde_json::Error| CliError::unreachable(anyhow::anyhow!("unexpected reply from agentd: {e}"));
    let items = reply["tasks"].as_array().cloned().unwrap_or_default();
    items
        .into_iter()
        .map(|item| {
            if item.get("error").is_some() {
                return Ok(Listed::Unreadable(serde_json::from_value(item).map_err(unexpected)?));
            }
            let count = item["step_count"].as_u64();
            let record: TaskRecord = serde_json::from_value(item).map_err(unexpected)?;
            Ok(Listed::Task { steps: count.unwrap_or(record.steps.len() as u64), record: Box::new(record) })
        })
        .collect()
}

/// The task table: a header row, then one row per task. Cells are made safe to print; with a `width` (a
/// terminal) the summary is cut so a row fits on one line.
fn table(tasks: &[Listed], now: time::OffsetDateTime, style: Style, width: Option<usize>) -> String {
    const HEADERS: [&str; 6] = ["ID", "STATE", "AGE", "STEPS", "COST", "SUMMARY"];
    let rows: Vec<[String; 6]> = tasks
        .iter()
        .map(|listed| match listed {
            Listed::Task { record: task, steps } => {
                let summary = task
                    .outcome
                    .as_ref()
                    .map(|o| o.summary.clone())
                    .or_else(|| task.waiting_reason.clone())
                    .unwrap_or_default();
                [
                    sanitize(&task.id).into_owned(),
                    task.state.as_str().to_string(),
                    term::age((now - task.created_at).whole_seconds()),
                    steps.to_string(),
                    format!("${:.4}", task.usage.cost_usd),
                    sanitize(&summary).into_owned(),
                ]
            }
            // What can be read, and why the rest cannot (`agentd status ID` says the same).
            Listed::Unreadable(task) => [
                sanitize(&task.id).into_owned(),
                task.state.map_or("?", |state| state.as_str()).to_string(),
                term::age((now - task.created_at).whole_seconds()),
                "-".to_string(),
                "-".to_string(),
                sanitize(&task.error).into_owned(),
            ],
        })
        .collect();
    let mut widths = HEADERS.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    // Columns: left-aligned text, right-aligned numbers (STEPS, COST), two spaces apart; SUMMARY last and
    // unpadded.
    let line = |cells: [String; 6], paint: &dyn Fn(usize, String) -> String| {
        let mut out = String::new();
        for (i, cell) in cells.into_iter().enumerate() {
            let pad = widths[i].saturating_sub(cell.chars().count());
            let padded = match i {
                3 | 4 => format!("{}{cell}", " ".repeat(pad)),
                5 => cell,
                _ => format!("{cell}{}", " ".repeat(pad)),
            };
            if i > 0 {
                out.push_str("  ");
            }
            out.push_str(&paint(i, padded));
        }
        out.trim_end().to_string()
    };
    let summary_room = width.map(|w| w.saturating_sub(widths[..5].iter().sum::<usize>() + 2 * 5 + 1));
    let mut out = line(HEADERS.map(str::to_string), &|_, cell| style.bold(&cell));
    out.push('\n');
    for (mut row, task) in rows.into_iter().zip(tasks) {
        if let Some(room) = summary_room {
            row[5] = term::truncate(&row[5], room.max(1));
        }
        let (state, unreadable) = match task {
            Listed::Task { record, .. } => (Some(record.state), false),
            Listed::Unreadable(task) => (task.state, true),
        };
        let paint = |i: usize, cell: String| match (i, state) {
            (5, _) if unreadable => style.red(&cell),
            (1, Some(crate::record::TaskState::Succeeded)) => style.green(&cell),
            (1, Some(crate::record::TaskState::Failed | crate::record::TaskState::Cancelled)) => style.red(&cell),
            (1, Some(crate::record::TaskState::Running)) => style.cyan(&cell),
            (1, _) => style.yellow(&cell),
            _ => cell,
        };
        out.push_str(&line(row, &paint));
        out.push('\n');
    }
    out
}

/// `cancel`: a queued or waiting task ends now, a running one at its next safe point. A task that has
/// already finished is not an error (exit 0, "already finished: STATE"): a script that cancels what may
/// have ended meanwhile does not fail. An unknown task is exit 2, as everywhere.
pub async fn cancel(client: &Client, id: &str, json: bool) -> CliResult {
    let (status, reply) = client.request(Method::POST, &format!("/v1/tasks/{}/cancel", encode(id)), None).await?;
    if status == StatusCode::CONFLICT && reply["error"]["code"] == "wrong_state" {
        let record = record_of(client.call(Method::GET, &format!("/v1/tasks/{}", encode(id)), None).await?.1)?;
        if record.state.is_terminal() {
            if json {
                print_json(&serde_json::json!({"id": record.id, "state": record.state, "cancel": "already_finished"}));
            } else {
                eprintln!(
                    "agentd: task {} already finished: {}; nothing to cancel",
                    sanitize(id),
                    record.state.as_str()
                );
            }
            return Ok(Exit::Success);
        }
    }
    if !status.is_success() {
        return Err(super::client::api_error(status, &reply));
    }
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

pub async fn events(client: &Client, id: &str, follow: bool, types: &[String], json: bool) -> CliResult {
    if let Some(unknown) = types.iter().find(|t| !crate::record::events::EventKind::TYPE_NAMES.contains(&t.as_str())) {
        return Err(CliError::invalid(anyhow::anyhow!(
            "--type {unknown:?} is not an event type; the types are {}",
            crate::record::events::EventKind::TYPE_NAMES.join(", ")
        )));
    }
    let mut printer = Printer::default();
    let mut out = std::io::stdout().lock();
    let mut print = |event: &Event| {
        if !types.is_empty() && !types.iter().any(|t| t == event.kind.type_name()) {
            return;
        }
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

/// An event the printer has no sentence for, as `key=value` pairs (text values as they are, shortened; other
/// values as compact JSON), so a terminal reads one kind of line; `--json` gives the events whole.
fn describe(event: &Event) -> String {
    let Ok(Value::Object(fields)) = serde_json::to_value(&event.kind) else { return String::new() };
    let mut pairs = Vec::new();
    for (key, value) in fields.into_iter().filter(|(key, _)| key != "type") {
        flatten(&key, value, &mut pairs);
    }
    pairs.join(" ")
}

/// `key=value` pairs of a value: objects by dotted keys, arrays of scalars joined with commas, other arrays
/// by their length, text shortened to 120 characters.
fn flatten(key: &str, value: Value, out: &mut Vec<String>) {
    let text = match value {
        Value::Object(fields) => {
            for (sub, value) in fields {
                flatten(&format!("{key}.{sub}"), value, out);
            }
            return;
        }
        Value::Array(items) if items.iter().all(|i| !i.is_object() && !i.is_array()) => items
            .into_iter()
            .map(|i| match i {
                Value::String(text) => text,
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(","),
        Value::Array(items) => format!("[{} items]", items.len()),
        Value::String(text) => text,
        other => other.to_string(),
    };
    let shown: String = text.chars().take(120).collect();
    let more = if shown.len() < text.len() { "…" } else { "" };
    out.push(format!("{key}={shown}{more}"));
}

/// Percent-encodes a path segment or query value.
pub fn encode(s: &str) -> String {
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
