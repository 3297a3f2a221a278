//! `export` and `show` (§22): a task's trajectory — its status document and screenshots, from the daemon's API
//! or, with `--local`, from what `agentd run` wrote (`data_dir/runs/ID.json` and the configured artifact
//! store) — written as a report file (`crate::report`: HTML, GIF, WebP) or printed as a step table.

use std::io::Write;
use std::path::{Path, PathBuf};

use hyper::Method;

use super::client::Client;
use super::exit::{CliError, CliResult, Exit};
use super::print_stderr;
use super::remote::{encode, record_of};
use super::sanitize::sanitize;
use crate::config::Config;
use crate::report::{StepView, Trajectory, anim, draw, duration, html};
use crate::status::TaskRecord;

/// Where a task's record and screenshots come from.
pub enum Source<'a> {
    Daemon(&'a Client),
    /// `agentd run`'s result on this machine.
    Local(&'a Config),
}

/// The files `export` writes.
pub struct ExportArgs<'a> {
    pub html: Option<&'a Path>,
    pub gif: Option<&'a Path>,
    pub webp: Option<&'a Path>,
}

/// `export ID --html FILE | --gif FILE | --webp FILE` (any of them, at once).
pub async fn export(source: Source<'_>, id: &str, files: &ExportArgs<'_>, json: bool) -> CliResult {
    if files.html.is_none() && files.gif.is_none() && files.webp.is_none() {
        return Err(CliError::invalid(anyhow::anyhow!(
            "export needs at least one of --html FILE, --gif FILE, --webp FILE"
        )));
    }
    let record = load_record(&source, id).await?;
    let trajectory = load_screenshots(&source, record).await?;
    let mut written = Vec::new();
    // Rendering is CPU work (decoding, scaling, quantising): off the runtime's threads.
    let trajectory = std::sync::Arc::new(trajectory);
    let jobs: [(Option<&Path>, &str); 3] = [(files.html, "html"), (files.gif, "gif"), (files.webp, "webp")];
    for (path, kind) in jobs {
        let Some(path) = path else { continue };
        let shared = trajectory.clone();
        let kind_owned = kind.to_string();
        let bytes = tokio::task::spawn_blocking(move || match kind_owned.as_str() {
            "html" => Ok(html::render(&shared).into_bytes()),
            "gif" => anim::gif(&shared, &anim::AnimOptions::default()),
            _ => anim::webp(&shared, &anim::AnimOptions::default()),
        })
        .await
        .map_err(|e| CliError::failed(anyhow::anyhow!("rendering the {kind} report: {e}")))?
        .map_err(|e| CliError::unreachable(anyhow::anyhow!("task {id}: {kind} report: {e}")))?;
        write_file(path, &bytes)?;
        written.push((kind, path.to_path_buf(), bytes.len()));
    }
    if json {
        let files: Vec<_> = written
            .iter()
            .map(|(kind, path, bytes)| serde_json::json!({"format": kind, "path": path, "bytes": bytes}))
            .collect();
        println!("{}", serde_json::json!({"id": id, "steps": trajectory.record.steps.len(), "files": files}));
    } else {
        for (kind, path, bytes) in &written {
            print_stderr(&format!("wrote {} ({kind}, {bytes} bytes)", path.display()));
        }
    }
    Ok(Exit::Success)
}

/// `show ID`: one row per step (step, time, took, actions, result or error, tokens, cost), then the outcome.
pub async fn show(source: Source<'_>, id: &str, json: bool) -> CliResult {
    let record = load_record(&source, id).await?;
    if json {
        let steps: Vec<_> = record
            .steps
            .iter()
            .map(|step| {
                let view = StepView::of(step);
                serde_json::json!({
                    "step": step.index,
                    "started_at": step.started_at.format(&time::format_description::well_known::Rfc3339).ok(),
                    "duration_ms": step.duration_ms,
                    "actions": step.actions.iter().map(|a| a.summary()).collect::<Vec<_>>(),
                    "tools": view.tools.iter().map(|t| t.name).collect::<Vec<_>>(),
                    "errors": view.errors(),
                    "said": step_words(step).into_iter().map(|(who, text)| serde_json::json!({"by": who, "text": text})).collect::<Vec<_>>(),
                    "usage": step.usage,
                })
            })
            .collect();
        let doc = serde_json::json!({"id": record.id, "state": record.state, "outcome": record.outcome,
                                     "usage": record.usage, "steps": steps});
        println!("{doc}");
        return Ok(Exit::Success);
    }
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{}", table(&record));
    Ok(exit_for(&record))
}

fn exit_for(record: &TaskRecord) -> Exit {
    match &record.outcome {
        Some(outcome) if record.state.is_terminal() && !outcome.success => Exit::Unsuccessful,
        _ => Exit::Success,
    }
}

/// The step table and the outcome, every text from the task sanitized for a terminal.
pub fn table(record: &TaskRecord) -> String {
    const ACTIONS: usize = 44;
    const RESULT: usize = 36;
    let mut out = String::new();
    out.push_str(&format!(
        "task {}  {}\n  {}\n",
        sanitize(&record.id),
        record.state.as_str(),
        sanitize(&draw::shorten(record.task.instructions.as_str(), 110))
    ));
    out.push_str(&format!(
        "{:>5}  {:<8}  {:>9}  {:<ACTIONS$}  {:<RESULT$}  {:>13}  {:>8}\n",
        "step", "time", "took", "actions", "result", "tokens in→out", "cost"
    ));
    let time_format = time::macros::format_description!("[hour]:[minute]:[second]");
    for step in &record.steps {
        let view = StepView::of(step);
        let mut actions: Vec<String> = step.actions.iter().map(|a| a.summary()).collect();
        actions.extend(view.tools.iter().map(|t| format!("tool:{}", t.name)));
        let actions = if actions.is_empty() { "-".to_string() } else { actions.join(" ") };
        let errors = view.errors();
        let result = if let Some(first) = errors.first() {
            let more = if errors.len() > 1 { format!(" (+{})", errors.len() - 1) } else { String::new() };
            format!("✗ {first}{more}")
        } else if step.interrupted {
            "interrupted".to_string()
        } else if !step.finished {
            if step.approval.as_ref().is_some_and(|a| a.approved.is_none()) {
                "waiting for a human".to_string()
            } else if !step.awaiting_tools.is_empty() {
                "awaiting tools".to_string()
            } else {
                "running".to_string()
            }
        } else {
            "ok".to_string()
        };
        let time = step.started_at.to_offset(time::UtcOffset::UTC).format(&time_format).unwrap_or_default();
        out.push_str(&format!(
            "{:>5}  {:<8}  {:>9}  {:<ACTIONS$}  {:<RESULT$}  {:>13}  {:>8}\n",
            step.index,
            time,
            duration(step.duration_ms),
            sanitize(&draw::shorten(&actions, ACTIONS)),
            sanitize(&draw::shorten(&result, RESULT)),
            format!("{}→{}", step.usage.input_tokens, step.usage.output_tokens),
            format!("${:.4}", step.usage.cost_usd)
        ));
        for (who, text) in step_words(step) {
            out.push_str(&format!("{:>7}{who}: {}\n", "", sanitize(&draw::shorten(&text, 140))));
        }
    }
    match &record.outcome {
        Some(outcome) => {
            let mark = if outcome.success { "✓" } else { "✗" };
            out.push_str(&format!(
                "{mark} {} ({}): {}\n",
                record.state.as_str(),
                outcome.reason.as_str(),
                sanitize(&outcome.summary)
            ));
            if let Some(output) = &outcome.output {
                out.push_str(&format!("  output {}\n", sanitize(&output.to_string())));
            }
        }
        None => out.push_str(&format!("{} (no outcome yet)\n", record.state.as_str())),
    }
    let took = match (record.started_at, record.finished_at) {
        (Some(start), Some(end)) => {
            format!(" in {}", duration(u64::try_from((end - start).whole_milliseconds()).unwrap_or(0)))
        }
        _ => String::new(),
    };
    out.push_str(&format!(
        "  {} steps{took}; {} input / {} output tokens; ${:.4}\n",
        record.steps.len(),
        record.usage.input_tokens,
        record.usage.output_tokens,
        record.usage.cost_usd
    ));
    out
}

/// What was said at a step besides its actions: the model's text, and what a person answered (an approval
/// or rejection, the answer to an `ask_human` question, the note of a hand-back), in that order.
fn step_words(step: &crate::record::StepRecord) -> Vec<(&'static str, String)> {
    let mut words = Vec::new();
    if !step.model_text.trim().is_empty() {
        words.push(("model", step.model_text.trim().to_string()));
    }
    if let Some(approval) = &step.approval {
        match (approval.approved, &approval.rejected) {
            (Some(true), _) => words.push(("human", "approved".to_string())),
            (Some(false), Some(reason)) => words.push(("human", format!("rejected: {reason}"))),
            (Some(false), None) => words.push(("human", "rejected".to_string())),
            (None, _) => {}
        }
    }
    for call in &step.calls {
        if let crate::record::CallKind::Function { name, .. } = &call.kind
            && name == crate::tools::ASK_HUMAN
            && let Some(result) = step.call_results.iter().find(|r| r.call_id == call.id)
        {
            words.push(("human", format!("answered: {}", result.message)));
        }
    }
    if let Some(handed_back) = &step.handed_back {
        let note = handed_back.note.as_deref().unwrap_or("(no note)");
        words.push(("human", format!("handed the desktop back: {note}")));
    }
    words
}

pub(super) async fn load_record(source: &Source<'_>, id: &str) -> Result<TaskRecord, CliError> {
    match source {
        Source::Daemon(client) => {
            let (_, reply) = client.call(Method::GET, &format!("/v1/tasks/{}", encode(id)), None).await?;
            record_of(reply)
        }
        Source::Local(config) => {
            let path = local_record_path(config, id)?;
            let text = std::fs::read(&path).map_err(|e| {
                CliError::invalid(anyhow::anyhow!(
                    "{}: {e} (--local reads what `agentd run` wrote for task {id})",
                    path.display()
                ))
            })?;
            serde_json::from_slice(&text)
                .map_err(|e| CliError::invalid(anyhow::anyhow!("{}: not a task record: {e}", path.display())))
        }
    }
}

/// A daemon that does not know task `id` when `agentd run` wrote a record of it here: the error says to read
/// that one with `--local`.
pub(super) fn hint_local(result: CliResult, config: &Config, id: &str) -> CliResult {
    match result {
        Err(mut e) if local_record_path(config, id).is_ok_and(|path| path.is_file()) => {
            e.error = e
                .error
                .context(format!("the daemon has no task {id}, but `agentd run` ran one here: read it with `--local`"));
            Err(e)
        }
        other => other,
    }
}

/// `data_dir/runs/ID.json`, for an id that names a file there and nothing else.
fn local_record_path(config: &Config, id: &str) -> Result<PathBuf, CliError> {
    if id.is_empty() || id.starts_with('.') || id.contains(['/', '\\', '\0']) {
        return Err(CliError::invalid(anyhow::anyhow!("task id {:?} cannot name a file under runs/", id)));
    }
    Ok(config.data_dir.join("runs").join(format!("{id}.json")))
}

/// Fetches every step's screenshot and the final one. A screenshot the store no longer has (or has not yet)
/// is left out with a warning: the report says it is missing.
async fn load_screenshots(source: &Source<'_>, record: TaskRecord) -> Result<Trajectory, CliError> {
    let store = match source {
        Source::Local(config) => Some(crate::backends::artifact_store(config).await.map_err(CliError::invalid)?),
        Source::Daemon(_) => None,
    };
    let fetch = |index: u32, key: String| {
        let store = store.clone();
        let id = record.id.clone();
        async move {
            match (source, store) {
                (Source::Daemon(client), _) => {
                    let path = format!("/v1/tasks/{}/steps/{index}/screenshot", encode(&id));
                    let (status, bytes) = client.get_bytes(&path).await?;
                    match status {
                        200..300 => Ok(Some(bytes)),
                        404 | 410 => {
                            let why = serde_json::from_slice::<serde_json::Value>(&bytes)
                                .ok()
                                .and_then(|v| v["error"]["message"].as_str().map(str::to_string));
                            print_stderr(&format!(
                                "warning: {}",
                                why.unwrap_or_else(|| format!("the screenshot of step {index} is missing"))
                            ));
                            Ok(None)
                        }
                        other => Err(CliError::unreachable(anyhow::anyhow!(
                            "the screenshot of step {index}: HTTP {other}: {}",
                            String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
                        ))),
                    }
                }
                (Source::Local(_), Some(store)) => match store.get(&key).await {
                    Ok(bytes) => Ok(Some(bytes)),
                    Err(e) => {
                        print_stderr(&format!("warning: the screenshot of step {index} ({key}): {e}"));
                        Ok(None)
                    }
                },
                (Source::Local(_), None) => Ok(None),
            }
        }
    };
    let mut screenshots = Vec::with_capacity(record.steps.len());
    for step in &record.steps {
        screenshots.push(fetch(step.index, step.screenshot.key.clone()).await?);
    }
    let final_screenshot = match &record.final_screenshot {
        Some(shot) => fetch(record.steps.len() as u32, shot.key.clone()).await?,
        None => None,
    };
    Ok(Trajectory { record, screenshots, final_screenshot })
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    std::fs::write(path, bytes).map_err(|e| CliError::invalid(anyhow::anyhow!("cannot write {}: {e}", path.display())))
}
