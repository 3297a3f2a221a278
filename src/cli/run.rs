//! `agentd run TASK.json`: one task in the foreground, no daemon.
//!
//! Builds the task's agent with the library's builder (`crate::library`: relative script and scene paths
//! resolve against the task file's directory), runs it with live progress on stderr from the run's event
//! stream (the run waits for every screenshot to be stored, up to a minute), writes the task record to
//! `data_dir/runs/{id}.json`, and prints the result on stdout: the docs/events.md
//! document with `--json`, a short summary otherwise. Ctrl-C cancels the task at the next safe point; a
//! second Ctrl-C exits at once. On a terminal the model's questions and the approvals a step waits for are
//! asked there (`ask`); elsewhere such a run ends there.

use std::path::Path;

use anyhow::Context;
use time::OffsetDateTime;

use futures_util::StreamExt;

use super::exit::{CliError, CliResult, Exit};
use super::progress::Progress;
use super::sanitize::sanitize;
use crate::backends::{self, BuildError};
use crate::config::Config;
use crate::library::{AbortHandle, Agent};
use crate::private::write_atomically;
use crate::status::TaskRecord;
use crate::task::{TaskId, TaskSpec};

pub async fn run(config: &Config, task_path: &Path, json: bool) -> CliResult {
    let (spec, source) = TaskSpec::read(task_path)?;
    let task_id = spec.id.clone().unwrap_or_else(TaskId::generate);
    let build_error = |e: BuildError| {
        // Found after parsing (a scene or script file that does not exist): point at the field in the file.
        let position = e
            .field()
            .and_then(|field| crate::task::locate_field(&source.text, field))
            .filter(|_| !e.to_string().contains("(line "))
            .map(|(line, column)| format!(" (line {line}, column {column})"))
            .unwrap_or_default();
        let error = anyhow::anyhow!("{}: {e}{position}", source.name);
        match e {
            BuildError::Invalid { .. } => CliError::invalid(error),
            BuildError::Unreachable(_) => CliError::unreachable(error),
        }
    };
    let store = backends::artifact_store(config).await.map_err(build_error)?;
    let worker = format!("run@{}", crate::config::host_name());
    let created_at = OffsetDateTime::now_utc();
    // The library's agent, as any embedder builds it: input the task file states wrongly is refused before
    // the task starts (exit 2 naming the field).
    let mut builder = Agent::builder();
    // On a terminal, a question or an approval is asked there and the run goes on (docs/humans.md).
    let human = super::ask::TerminalHuman::if_interactive().map(std::sync::Arc::new);
    if let Some(human) = &human {
        builder = builder.human(human.clone());
    }
    if let Some(replay) = &spec.replay {
        builder = builder.replay_recording(local_record(config, replay.of.as_str()).map_err(build_error)?);
    }
    let agent = builder
        .task(spec.clone())
        .task_id(task_id.clone())
        .config(config.clone())
        .base_dir(source.base_dir.clone())
        .data_dir(config.data_dir.clone())
        .artifact_store(store.clone())
        .spool_dir(config.spool_dir())
        .worker(worker.clone())
        .build()
        .await
        .map_err(build_error)?;
    // A task file's `id` is an idempotency key, as for `agentd submit`: checked as the daemon checks a
    // submission, after the task was found runnable here. The same task file again gets the earlier run's
    // result without running again; another task file under that id is refused.
    if let Some(id) = &spec.id
        && let Some(earlier) = earlier_run(config, id.as_str(), &spec, &source)?
    {
        return Ok(show_earlier(config, earlier, json));
    }
    eprintln!(
        "agentd: task {}: {} on {} with {}",
        sanitize(task_id.as_str()),
        sanitize(&source.name),
        sanitize(&describe_computer(&agent.task().computer)),
        sanitize(&agent.model().describe())
    );
    let mut run = agent.run();
    let progress = Progress::on_stderr();
    if let Some(human) = &human {
        human.attach(progress.clone());
    }
    let signals = watch_interrupts(run.abort_handle(), progress.clone());
    while let Some(event) = run.next().await {
        progress.event(&event);
    }
    progress.finish();
    let report = run.finish().await;
    signals.abort();
    let outcome = report.outcome.clone();
    let pending = report.pending_uploads;
    let state = outcome.state();

    let record = report.record(spec, created_at, worker);
    let document =
        serde_json::to_vec_pretty(&record).context("serializing the task record").map_err(CliError::failed)?;
    let record_path = record_path(config, task_id.as_str());
    if let Err(e) = write_atomically(&record_path, &document) {
        eprintln!("agentd: warning: {}", sanitize(&format!("cannot write {}: {e}", record_path.display())));
    }
    let screenshots = store.url(crate::artifacts::attempt_prefix(task_id.as_str(), 1).trim_end_matches('/'));
    if pending > 0 {
        eprintln!(
            "agentd: {pending} screenshot(s) not stored yet; they stay in {} and upload on the next start",
            sanitize(&config.spool_dir().display().to_string())
        );
    }
    eprintln!(
        "agentd: screenshots: {}/  record: {}",
        sanitize(&screenshots),
        sanitize(&record_path.display().to_string())
    );
    if json {
        println!("{}", String::from_utf8_lossy(&document));
    } else {
        println!("{}: {} ({} steps)", state.as_str(), sanitize(&outcome.summary), record.steps.len());
        if let Some(output) = &outcome.output {
            println!("output: {}", sanitize(&output.to_string()));
        }
    }
    Ok(if outcome.success { Exit::Success } else { Exit::Unsuccessful })
}

/// Where `agentd run` (and `agentd eval --local`) keeps the record of task `id`: `data_dir/runs/ID.json`.
pub(super) fn record_path(config: &Config, id: &str) -> std::path::PathBuf {
    config.data_dir.join("runs").join(format!("{id}.json"))
}

/// The record of an earlier run of task `id` when the task file is the same (`spec`); `None` when no task of
/// that id was run here. Another task file under that id, or a record that cannot be read, is refused (exit 2,
/// naming the file's `id` and the record).
fn earlier_run(
    config: &Config,
    id: &str,
    spec: &TaskSpec,
    source: &crate::task::TaskSource,
) -> Result<Option<TaskRecord>, CliError> {
    let path = record_path(config, id);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(id_refused(
                source,
                format!("cannot read the record of an earlier run {}: {e}", path.display()),
            ));
        }
    };
    let record: TaskRecord = serde_json::from_str(&text).map_err(|e| {
        id_refused(
            source,
            format!("the record of an earlier run of task {id}, {}, cannot be read: {e}", path.display()),
        )
    })?;
    let same = serde_json::to_value(&record.task).ok() == serde_json::to_value(spec).ok();
    if !same {
        return Err(id_refused(
            source,
            format!(
                "task {id} was run before from another task file (its record: {}); an id names one task: change \
                 the id, or leave it out to have one generated for each run",
                path.display()
            ),
        ));
    }
    Ok(Some(record))
}

/// An input error at the task file's `id` field.
fn id_refused(source: &crate::task::TaskSource, message: String) -> CliError {
    let position = crate::task::locate_field(&source.text, "id")
        .map(|(line, column)| format!(" (line {line}, column {column})"))
        .unwrap_or_default();
    CliError::invalid(anyhow::anyhow!("{}: id{position}: {message}", source.name))
}

/// What `agentd run` prints for a task file run before under the same id: that run's result, as if it had just
/// run (stdout and the exit code), and on stderr that it did not run again.
fn show_earlier(config: &Config, record: TaskRecord, json: bool) -> Exit {
    eprintln!(
        "agentd: task {} was run before from this task file (record: {}); its result is shown, and it is not run \
         again (the task file's id makes runs idempotent: leave it out to run the task anew)",
        sanitize(&record.id),
        sanitize(&record_path(config, &record.id).display().to_string())
    );
    let Some(outcome) = record.outcome.clone() else {
        eprintln!("agentd: the earlier run has no outcome ({})", record.state.as_str());
        return Exit::Unsuccessful;
    };
    if json {
        match serde_json::to_string_pretty(&record) {
            Ok(text) => println!("{text}"),
            Err(e) => eprintln!("agentd: {}", sanitize(&e.to_string())),
        }
    } else {
        println!("{}: {} ({} steps)", record.state.as_str(), sanitize(&outcome.summary), record.steps.len());
        if let Some(output) = &outcome.output {
            println!("output: {}", sanitize(&output.to_string()));
        }
    }
    if outcome.success { Exit::Success } else { Exit::Unsuccessful }
}

/// The record a local replay (docs/replay-and-verify.md) replays: `agentd run` writes each task's to
/// `data_dir/runs/{id}.json`.
fn local_record(config: &Config, id: &str) -> Result<TaskRecord, BuildError> {
    let path = config.data_dir.join("runs").join(format!("{id}.json"));
    let text = std::fs::read_to_string(&path)
        .map_err(|e| BuildError::invalid("replay.of", format!("no record of task {id} at {}: {e}", path.display())))?;
    serde_json::from_str(&text)
        .map_err(|e| BuildError::invalid("replay.of", format!("the record {} cannot be read: {e}", path.display())))
}

fn describe_computer(spec: &crate::task::ComputerSpec) -> String {
    match spec {
        crate::task::ComputerSpec::Mock(mock) => {
            format!("mock({})", mock.scene.as_ref().map_or_else(|| "blank".to_string(), |s| s.describe()))
        }
        crate::task::ComputerSpec::Local(local) => {
            format!("local({})", local.display.as_deref().unwrap_or("$DISPLAY"))
        }
        crate::task::ComputerSpec::Vnc(vnc) => format!("vnc({})", vnc.address),
        crate::task::ComputerSpec::ComputerServer(cua) => format!("computer-server({})", cua.url),
        crate::task::ComputerSpec::Portable(portable) => match portable.monitor {
            Some(monitor) => format!("portable(monitor {monitor})"),
            None => "portable".to_string(),
        },
        crate::task::ComputerSpec::Browser(browser) => match (&browser.cdp_url, &browser.start_url) {
            (Some(url), _) => format!("browser({url})"),
            (None, Some(start)) => format!("browser({start})"),
            (None, None) => "browser".to_string(),
        },
        crate::task::ComputerSpec::Desktop(request) => request.describe(),
    }
}

/// First Ctrl-C or SIGTERM (Windows: Ctrl-C): cancel the task at its next safe point. Second: exit at once.
fn watch_interrupts(cancel: AbortHandle, progress: Progress) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        #[cfg(unix)]
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(_) => return,
        };
        for round in 0..2 {
            #[cfg(unix)]
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            // Windows has no SIGTERM: Ctrl-C only.
            #[cfg(not(unix))]
            if tokio::signal::ctrl_c().await.is_err() {
                return;
            }
            if round == 0 {
                progress.note("agentd: cancelling the task at its next safe point (again to quit at once)");
                cancel.abort();
            } else {
                progress.finish();
                eprintln!("agentd: quitting");
                crate::exit::Exit::Interrupted.now();
            }
        }
    })
}
