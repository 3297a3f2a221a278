//! `agentd eval SUITE` (docs/eval.md): every run of a suite (`crate::eval::suite`) as an ordinary task, through
//! the daemon (submitted under its planned id, followed to its end) or, with `--local`, in this process as
//! `agentd run` runs a task (its record in `data_dir/runs/ID.json`); at most `concurrency` at once, started in
//! the plan's order (repeats far apart). Then the result (`crate::eval::summary`): a table on stdout, or the
//! JSON document with `--json`; `--html FILE` writes the page with every run that did not pass linked to its
//! trajectory report (written beside it, in `FILE`'s stem + `-runs/`); `--baseline FILE` compares with an
//! earlier `--json` result and exits 1 on a regression.
//!
//! Continuing (`--continue ID`) plans the same runs under the same ids: through the daemon a run already
//! submitted is not submitted again (a task id is an idempotency key) — a finished one is read, one still
//! going is followed; in this process a run with a finished record is read, and one that was interrupted
//! (cancelled) runs again. Ctrl-C stops the evaluation: runs in this process are cancelled at their next safe
//! point and recorded; runs in the daemon go on, and continuing picks them up.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::StreamExt;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use super::client::{Client, Method, StatusCode};
use super::exit::{CliError, CliResult, Exit};
use super::remote::{prepare_for_daemon, record_after_its_end, record_of};
use super::report::{Source, write_html_report};
use super::sanitize::sanitize;
use crate::artifacts::ArtifactStore;
use crate::config::Config;
use crate::eval::summary::{Baseline, RunOutcome, table};
use crate::eval::{EvalResult, PlannedRun, Suite, Verdict, html, suite};
use crate::library::Agent;
use crate::private::write_atomically;
use crate::status::TaskRecord;

/// What `agentd eval` was asked.
pub struct EvalArgs<'a> {
    pub suite: &'a Path,
    pub local: bool,
    /// `--continue ID`: the evaluation to continue.
    pub resume: Option<&'a str>,
    pub html: Option<&'a Path>,
    pub baseline: Option<&'a Path>,
    /// Over the suite's own `concurrency`.
    pub concurrency: Option<u32>,
}

/// Where the runs run.
enum Runner {
    Local(Box<Local>),
    Daemon(Client),
}

/// Runs in this process, as `agentd run` runs a task.
struct Local {
    config: Config,
    store: Arc<dyn ArtifactStore>,
    worker: String,
}

pub async fn eval(config: &Config, daemon: Option<Client>, args: EvalArgs<'_>, json: bool) -> CliResult {
    let suite = Suite::read(args.suite)?;
    // A baseline that cannot be read is found before anything runs.
    let baseline = args.baseline.map(read_baseline).transpose()?;
    let eval_id = suite::eval_id(args.resume).map_err(|e| invalid(format!("--continue: {e}")))?;
    let concurrency = match args.concurrency {
        Some(n) if (1..=suite::MAX_CONCURRENCY).contains(&n) => n,
        Some(n) => return Err(invalid(format!("--concurrency {n}: give 1-{}", suite::MAX_CONCURRENCY))),
        None => suite.concurrency,
    };
    let mut plan = suite.plan(&eval_id);
    let runner = match daemon {
        Some(client) => {
            // Self-contained task files, as `agentd submit` sends them: a file a task names that cannot be
            // read is refused before anything is submitted.
            for run in &mut plan {
                let source = &suite.tasks[run.task].source;
                run.spec = prepare_for_daemon(run.spec.clone(), source)?;
            }
            Runner::Daemon(client)
        }
        None => {
            let store = crate::backends::artifact_store(config).await.map_err(|e| match e {
                crate::backends::BuildError::Invalid { .. } => CliError::invalid(e),
                crate::backends::BuildError::Unreachable(_) => CliError::unreachable(e),
            })?;
            let worker = format!("eval@{}", crate::config::host_name());
            Runner::Local(Box::new(Local { config: config.clone(), store, worker }))
        }
    };
    let total = plan.len();
    let (place, local_flag) =
        if matches!(runner, Runner::Local(_)) { ("in this process", " --local") } else { ("through the daemon", "") };
    eprintln!(
        "agentd: evaluation {}: suite {}: {total} runs ({} task(s) × {} model(s) × {}), {concurrency} at once, {}",
        sanitize(&eval_id),
        sanitize(&suite.name),
        suite.tasks.len(),
        suite.models.len().max(1),
        suite.repeat,
        place
    );
    eprintln!(
        "agentd: if it is interrupted: agentd eval {} --continue {}{}",
        sanitize(&args.suite.display().to_string()),
        sanitize(&eval_id),
        local_flag
    );

    let stop = CancellationToken::new();
    // The daemon gone for longer than a restart (the event follower waits ~15 s): the evaluation stops, its
    // runs go on there, and continuing picks them up.
    let lost: std::sync::Mutex<Option<CliError>> = std::sync::Mutex::new(None);
    let lost_slot = &lost;
    let done = AtomicUsize::new(0);
    let runner = &runner;
    let suite_ref = &suite;
    let runs = futures_util::stream::iter(plan)
        .map(|run| {
            let stop = stop.clone();
            async move {
                if stop.is_cancelled() {
                    return None;
                }
                let task = &suite_ref.tasks[run.task].name;
                match runner {
                    Runner::Local(local) => local.run(&run, &suite_ref.tasks[run.task], task, &stop).await,
                    Runner::Daemon(client) => match daemon_run(client, &run, task, &stop).await {
                        Ok(outcome) => outcome,
                        Err(e) => {
                            stop.cancel();
                            lost_slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get_or_insert(e);
                            None
                        }
                    },
                }
            }
        })
        .buffer_unordered(concurrency as usize)
        .filter_map(|outcome| async move { outcome })
        .inspect(|outcome| {
            let n = done.fetch_add(1, Ordering::Relaxed) + 1;
            let detail = match outcome.verdict {
                Verdict::Passed => format!("{} steps, {:.1} s", outcome.steps, outcome.seconds.unwrap_or_default()),
                _ => format!("{}: {}", outcome.reason, outcome.summary),
            };
            eprintln!(
                "agentd: [{n}/{total}] {} × {} repeat {}: {} ({})",
                sanitize(&outcome.task),
                sanitize(&outcome.model),
                outcome.repeat,
                outcome.verdict.as_str(),
                sanitize(&detail)
            );
        })
        .collect::<Vec<RunOutcome>>();
    let interrupts = watch_interrupts(stop.clone());
    let outcomes = runs.await;
    interrupts.abort();
    let lost = lost.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(error) = lost {
        eprintln!(
            "agentd: evaluation {0} stopped after {1} of {total} runs: the daemon could not be reached; its runs go on \
             there: continue it with: agentd eval {2} --continue {0}",
            sanitize(&eval_id),
            outcomes.len(),
            sanitize(&args.suite.display().to_string()),
        );
        return Err(error);
    }
    if stop.is_cancelled() {
        eprintln!(
            "agentd: evaluation {0} interrupted after {1} of {total} runs; continue it with: agentd eval {2} --continue \
             {0}{3}",
            sanitize(&eval_id),
            outcomes.iter().filter(|o| o.verdict != Verdict::Interrupted).count(),
            sanitize(&args.suite.display().to_string()),
            local_flag
        );
        return Ok(Exit::Interrupted);
    }

    let tasks: Vec<String> = suite.tasks.iter().map(|t| t.name.clone()).collect();
    let result = EvalResult::summarize(&suite.name, &eval_id, suite.repeat, &suite.model_names(), &tasks, &outcomes);
    if let Some(path) = args.html {
        let source = match runner {
            Runner::Local(local) => Source::Local(&local.config),
            Runner::Daemon(client) => Source::Daemon(client),
        };
        write_html(&result, path, &source).await?;
    }
    if json {
        super::remote::print_json(&result);
    } else {
        print!("{}", super::sanitize::sanitize_lines(&table(&result)));
    }
    let Some(baseline) = baseline else {
        return Ok(Exit::Success);
    };
    let comparison = baseline.compare(&result);
    for line in &comparison.lines {
        eprintln!("agentd: baseline: {}", sanitize(line));
    }
    Ok(if comparison.regressions.is_empty() { Exit::Success } else { Exit::Unsuccessful })
}

fn invalid(message: String) -> CliError {
    CliError::invalid(anyhow::anyhow!(message))
}

fn read_baseline(path: &Path) -> Result<Baseline, CliError> {
    let name = path.display().to_string();
    let text = crate::input::read_text_blocking(path)
        .map_err(|e| invalid(format!("--baseline {name}: cannot read: {}", e.into_io())))?;
    crate::input::parse_json::<Baseline>(&text, &name).map_err(|e| invalid(format!("--baseline {e}")))
}

impl Local {
    /// Runs `run` here, or reads its record when an earlier part of this evaluation finished it.
    async fn run(
        &self,
        run: &PlannedRun,
        task: &suite::SuiteTask,
        name: &str,
        stop: &CancellationToken,
    ) -> Option<RunOutcome> {
        let id = run.id.as_str();
        let record_path = super::run::record_path(&self.config, id);
        if let Some(record) = finished_record(&record_path) {
            return Some(RunOutcome::from_record(name, &run.model, run.repeat, &record));
        }
        let agent = Agent::builder()
            .task(run.spec.clone())
            .task_id(run.id.clone())
            .config(self.config.clone())
            .base_dir(task.source.base_dir.clone())
            .data_dir(self.config.data_dir.clone())
            .artifact_store(self.store.clone())
            .spool_dir(self.config.spool_dir())
            .worker(self.worker.clone())
            .build()
            .await;
        let agent = match agent {
            Ok(agent) => agent,
            // The computer or the model could not be built: the run could not start.
            Err(e) => return Some(RunOutcome::unavailable(name, &run.model, run.repeat, id, e.to_string())),
        };
        let created_at = OffsetDateTime::now_utc();
        let mut running = agent.run();
        let abort = running.abort_handle();
        let cancelled = stop.clone();
        let watcher = tokio::spawn(async move {
            cancelled.cancelled().await;
            abort.abort();
        });
        while running.next().await.is_some() {}
        let report = running.finish().await;
        watcher.abort();
        let record = report.record(run.spec.clone(), created_at, self.worker.clone());
        match serde_json::to_vec_pretty(&record) {
            Ok(document) => {
                if let Err(e) = write_atomically(&record_path, &document) {
                    eprintln!("agentd: warning: {}", sanitize(&format!("cannot write {}: {e}", record_path.display())));
                }
            }
            Err(e) => eprintln!("agentd: warning: cannot serialize the record of {}: {e}", sanitize(id)),
        }
        Some(RunOutcome::from_record(name, &run.model, run.repeat, &record))
    }
}

/// The record at `path` when it is of a run that ended other than by being cancelled (an interrupted run
/// runs again).
fn finished_record(path: &Path) -> Option<TaskRecord> {
    let text = std::fs::read(path).ok()?;
    let record: TaskRecord = serde_json::from_slice(&text).ok()?;
    let ended = record.state.is_terminal() && record.state != crate::record::TaskState::Cancelled;
    ended.then_some(record)
}

/// Submits `run` to the daemon (an earlier submission under its id is the same task, not a new one) and
/// follows it to its end; `None` when the evaluation stopped first (the run goes on in the daemon); an error
/// when the daemon cannot be reached (not the run's failure: the evaluation stops).
async fn daemon_run(
    client: &Client,
    run: &PlannedRun,
    name: &str,
    stop: &CancellationToken,
) -> Result<Option<RunOutcome>, CliError> {
    let id = run.id.as_str();
    let unavailable = |message: String| Ok(Some(RunOutcome::unavailable(name, &run.model, run.repeat, id, message)));
    let body = match serde_json::to_vec(&run.spec) {
        Ok(body) => body,
        Err(e) => return unavailable(format!("cannot serialize the task: {e}")),
    };
    let submitted = tokio::select! {
        submitted = client.call(Method::POST, "/v1/tasks", Some(body)) => submitted,
        () = stop.cancelled() => return Ok(None),
    };
    let record = match submitted {
        Ok((status, reply)) if status == StatusCode::OK || status == StatusCode::CREATED => match record_of(reply) {
            Ok(record) => record,
            Err(e) => return unavailable(e.to_string()),
        },
        Ok((status, reply)) => return unavailable(format!("the daemon refused the task ({status}): {reply}")),
        Err(e) if e.exit == Exit::Unreachable => return Err(e),
        Err(e) => return unavailable(e.to_string()),
    };
    let record = if record.state.is_terminal() {
        record
    } else {
        tokio::select! {
            ended = wait_for_end(client, id) => match ended {
                Ok(record) => record,
                Err(e) if e.exit == Exit::Unreachable => return Err(e),
                Err(e) => return unavailable(e.to_string()),
            },
            () = stop.cancelled() => return Ok(None),
        }
    };
    Ok(Some(RunOutcome::from_record(name, &run.model, run.repeat, &record)))
}

/// Follows task `id`'s events until it ends, then reads its record.
async fn wait_for_end(client: &Client, id: &str) -> Result<TaskRecord, CliError> {
    client.follow_events(id, 0, true, |_| {}).await?;
    let record = record_after_its_end(client, id).await?;
    if !record.state.is_terminal() {
        return Err(CliError::unreachable(anyhow::anyhow!(
            "task {id}: its events ended but the daemon does not say it ended"
        )));
    }
    Ok(record)
}

/// Ctrl-C or SIGTERM: stop the evaluation (a second one exits at once). The signals are taken over before
/// this returns, so none sent after it ends the process the default way.
fn watch_interrupts(stop: CancellationToken) -> tokio::task::JoinHandle<()> {
    #[cfg(unix)]
    let signals = {
        use tokio::signal::unix::{SignalKind, signal};
        signal(SignalKind::interrupt()).and_then(|int| Ok((int, signal(SignalKind::terminate())?)))
    };
    tokio::spawn(async move {
        #[cfg(unix)]
        let Ok((mut int, mut term)) = signals else {
            return;
        };
        for round in 0..2 {
            #[cfg(unix)]
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            #[cfg(not(unix))]
            if tokio::signal::ctrl_c().await.is_err() {
                return;
            }
            if round == 0 {
                eprintln!(
                    "agentd: stopping the evaluation (runs here end at their next safe point; again to quit at once)"
                );
                stop.cancel();
            } else {
                crate::exit::Exit::Interrupted.now();
            }
        }
    })
}

/// Writes the HTML page to `path`, and the trajectory report of every run that did not pass (and has a
/// record) into `{stem}-runs/ID.html` beside it, linked from the page.
async fn write_html(result: &EvalResult, path: &Path, source: &Source<'_>) -> Result<(), CliError> {
    let stem = path.file_stem().map_or_else(|| "eval".to_string(), |s| s.to_string_lossy().into_owned());
    let dir_name = format!("{stem}-runs");
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from(&dir_name), |p| p.join(&dir_name));
    let mut linked = std::collections::BTreeSet::new();
    for failure in result.models.iter().flat_map(|m| &m.tasks).flat_map(|t| &t.failures) {
        if failure.reason == "unavailable" {
            continue;
        }
        if linked.is_empty() {
            crate::private::create_private_dir_all(&dir)
                .map_err(|e| CliError::failed(anyhow::anyhow!("cannot create {}: {e}", dir.display())))?;
        }
        let report = dir.join(format!("{}.html", failure.task_id));
        match write_html_report(source, &failure.task_id, &report).await {
            Ok(()) => {
                linked.insert(failure.task_id.clone());
            }
            Err(e) => eprintln!(
                "agentd: warning: no report for run {}: {}",
                sanitize(&failure.task_id),
                sanitize(&e.to_string())
            ),
        }
    }
    let page = html::page(result, &|id| linked.contains(id).then(|| format!("{dir_name}/{id}.html")));
    write_atomically(path, page.as_bytes())
        .map_err(|e| CliError::failed(anyhow::anyhow!("cannot write {}: {e}", path.display())))
}
