//! The desktop pool (docs/providers.md): the `[[desktops]]` of config as the workers of one daemon hold them — each
//! desktop's computer, opened once when the daemon starts and kept across tasks (a VNC connection keeps its
//! framebuffer current, and a new one waits out x11vnc's blind first half second), its state (starting, free, busy with a
//! task, failed), and the lifecycle commands around its tasks: `setup` at start, `reset` before each task
//! that did not run on it last, `teardown` at stop.
//!
//! Before a task that did not run on it last, the pool also has the computer clear what it keeps itself
//! ([`ComputerProvider::reset`]: a browser's context), and a computer found dead then (a crashed browser, a
//! dropped connection) is opened anew — a task never starts on a computer the last one broke. The attempt the
//! crash interrupted has ended as unavailable already, and the queue resumes it.
//!
//! The pool decides nothing about which task runs where: it offers its free desktops to the claim
//! ([`Pool::offers`]); the queue picks a task and one of them (`queue::desktop`), and the worker takes it
//! ([`Pool::take`]), prepares it ([`Pool::prepare`]: the resets, and the computer the attempt gets), and gives
//! it back when the attempt ends. A desktop whose setup, reset or computer (opened anew) fails is out of the
//! pool until the daemon restarts, with the
//! command's output kept for `/healthz`, the metrics and the task's record.
//!
//! A `{guest = "…"}` command runs inside the desktop through its computer's `run_command` (cua computer-server
//! machines; a provider without guest commands fails it), with its output in the same log; a guest `setup`
//! runs after the computer is opened.
//!
//! Commands run as the daemon's user with `AGENTD_DESKTOP` (and, for `reset`, `AGENTD_TASK_ID`) set, in a
//! process group of their own that is killed at `timeout_secs`; the command's own exit ends it (background
//! processes it started, such as an X server, live on). Their output goes to
//! `data_dir/desktops/NAME.COMMAND.log`, of which the last [`OUTPUT_TAIL`] bytes are kept in failures.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentd_computer::ComputerProvider;
use serde::Serialize;

use crate::backends::{self, ComputerContext};
use crate::config::{Config, DesktopConfig, HookCommand};
use crate::queue::desktop::{self, DesktopScope, PoolOffer};

/// How much of a failed command's output a failure keeps.
pub const OUTPUT_TAIL: usize = 4096;

/// One daemon's desktops.
pub struct Pool {
    desktops: Vec<Desktop>,
    log_dir: PathBuf,
    /// The daemon's config, kept by [`Pool::start`] to open a dead computer anew.
    config: std::sync::OnceLock<Config>,
}

struct Desktop {
    config: DesktopConfig,
    /// Its key, qualified for this worker (what the queue records as `desktop_held`).
    key: String,
    inner: Mutex<Inner>,
}

struct Inner {
    state: State,
    computer: Option<Arc<dyn ComputerProvider>>,
    /// The task that ran on it last: a task resumed on the desktop it left is not reset under itself.
    last_task: Option<String>,
    resets: u64,
}

#[derive(Debug, Clone, PartialEq)]
enum State {
    Starting,
    Free,
    Busy(String),
    Failed(Failure),
}

/// Why a desktop left the pool: which command (`setup`, `reset`, or `computer` when its computer could not
/// be opened), how it ended, and the tail of its output.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failure {
    pub desktop: String,
    pub command: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    pub reason: String,
    pub output: String,
    /// RFC 3339.
    pub at: String,
}

/// A desktop as `/healthz` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DesktopStatus {
    pub name: String,
    pub labels: Vec<String>,
    /// `starting`, `free`, `busy` or `failed`.
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    pub resets: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
}

/// What [`Pool::prepare`] did before the task, and the computer the task runs on.
#[derive(Clone)]
pub struct Prepared {
    /// Whether the desktop was reset — its `reset` command, its computer's own state, or its computer opened
    /// anew (a task resumed on the desktop it ran on last is not reset).
    pub reset: bool,
    pub duration: Duration,
    pub computer: Arc<dyn ComputerProvider>,
}

impl Pool {
    /// The configured desktops, all `starting`; [`Pool::start`] sets them up.
    pub fn new(config: &Config, scope: &DesktopScope) -> Arc<Self> {
        let desktops = config
            .desktops
            .iter()
            .map(|d| {
                let template = desktop::template(&d.computer)
                    .unwrap_or_else(|| format!("{}/desktop:{}", desktop::HOST, d.name.as_str()));
                Desktop {
                    key: scope.qualify(Some(&template)).unwrap_or(template),
                    config: d.clone(),
                    inner: Mutex::new(Inner { state: State::Starting, computer: None, last_task: None, resets: 0 }),
                }
            })
            .collect();
        Arc::new(Self { desktops, log_dir: config.data_dir.join("desktops"), config: std::sync::OnceLock::new() })
    }

    pub fn is_empty(&self) -> bool {
        self.desktops.is_empty()
    }

    /// Runs every desktop's `setup` (side by side) and opens its computer; a desktop whose setup or computer
    /// fails leaves the pool. `files` is what a mock desktop's scene may name.
    pub async fn start(&self, config: &Config) {
        let _ = self.config.set(config.clone());
        let starts = self.desktops.iter().map(|d| {
            async move {
                // A setup on the daemon's machine may start what the computer connects to: it runs first. A
                // guest setup runs through the computer: that is opened first.
                let guest_setup = matches!(d.config.setup, Some(HookCommand::Guest(_)));
                if let Some(setup) = d.config.setup.as_ref().filter(|_| !guest_setup)
                    && let Err(failure) = self.run(d, "setup", setup, None).await
                {
                    tracing::error!(desktop = %d.config.name, reason = %failure.reason, "desktop setup failed; it is out of the pool");
                    d.set(State::Failed(failure));
                    return;
                }
                if let Err(failure) = open_computer(d, config).await {
                    tracing::error!(desktop = %d.config.name, reason = %failure.reason, "desktop's computer cannot be opened; it is out of the pool");
                    d.set(State::Failed(failure));
                    return;
                }
                if let Some(setup) = d.config.setup.as_ref().filter(|_| guest_setup)
                    && let Err(failure) = self.run(d, "setup", setup, None).await
                {
                    tracing::error!(desktop = %d.config.name, reason = %failure.reason, "desktop setup failed; it is out of the pool");
                    d.set(State::Failed(failure));
                    return;
                }
                d.set(State::Free);
                tracing::info!(desktop = %d.config.name, "desktop ready");
            }
        });
        futures_util::future::join_all(starts).await;
    }

    /// The free desktops, for the claim.
    pub fn offers(&self) -> Vec<PoolOffer> {
        self.desktops
            .iter()
            .filter(|d| d.inner.lock().is_ok_and(|i| i.state == State::Free))
            .map(|d| PoolOffer {
                name: d.config.name.as_str().to_string(),
                labels: d.config.labels.iter().map(|l| l.as_str().to_string()).collect(),
                key: d.key.clone(),
            })
            .collect()
    }

    /// Marks the desktop `name` busy with `task_id`; `false` when it is not free (the claim raced a failure).
    pub fn take(&self, name: &str, task_id: &str) -> bool {
        let Some(d) = self.desktops.iter().find(|d| d.config.name.as_str() == name) else { return false };
        let Ok(mut inner) = d.inner.lock() else { return false };
        if inner.state != State::Free || inner.computer.is_none() {
            return false;
        }
        inner.state = State::Busy(task_id.to_string());
        true
    }

    /// Readies the desktop `name` (taken for `task_id`) and returns its computer: unless the task ran on it
    /// last, the computer's own state is cleared ([`ComputerProvider::reset`]) and the `reset` command runs;
    /// a computer found dead (reset or health check failing) is opened anew. A failure takes the desktop out
    /// of the pool and is returned.
    pub async fn prepare(&self, name: &str, task_id: &str) -> Result<Prepared, Failure> {
        let Some(d) = self.desktops.iter().find(|d| d.config.name.as_str() == name) else {
            return Err(Failure {
                desktop: name.to_string(),
                command: "computer".into(),
                exit_code: None,
                reason: "no such desktop in this daemon's pool".into(),
                output: String::new(),
                at: now(),
            });
        };
        let started = Instant::now();
        let fail = |failure: Failure| {
            tracing::error!(desktop = %name, reason = %failure.reason, "desktop cannot be readied; it is out of the pool");
            d.set(State::Failed(failure.clone()));
            failure
        };
        let same = d.inner.lock().is_ok_and(|i| i.last_task.as_deref() == Some(task_id));
        let computer = d.computer().ok_or_else(|| {
            fail(failure(d, "computer", None, "the desktop's computer is not open".into(), String::new()))
        })?;
        // A resumed task's browser keeps its pages; any other task gets the computer's own state cleared.
        let checked = if same { computer.health().await.map(|()| false) } else { computer.reset().await };
        let mut reset = match checked {
            Ok(cleared) => cleared,
            Err(e) => {
                tracing::warn!(desktop = %name, error = %e, "the desktop's computer is gone; opening it anew");
                let config = self.config.get().ok_or_else(|| {
                    fail(failure(d, "computer", None, format!("{e}; the pool has not started"), String::new()))
                })?;
                open_computer(d, config).await.map_err(fail)?;
                true
            }
        };
        if let Some(command) = d.config.reset.as_ref().filter(|_| !same) {
            self.run(d, "reset", command, Some(task_id)).await.map_err(fail)?;
            if let Some(computer) = d.computer() {
                settle(computer.as_ref()).await;
            }
            reset = true;
        }
        if reset && let Ok(mut inner) = d.inner.lock() {
            inner.resets += 1;
        }
        let computer = d.computer().ok_or_else(|| {
            fail(failure(d, "computer", None, "the desktop's computer is not open".into(), String::new()))
        })?;
        Ok(Prepared { reset, duration: started.elapsed(), computer })
    }

    /// The attempt of `task_id` on the desktop ended: it is free again (unless it failed meanwhile).
    pub fn give_back(&self, name: &str, task_id: &str) {
        if let Some(d) = self.desktops.iter().find(|d| d.config.name.as_str() == name)
            && let Ok(mut inner) = d.inner.lock()
        {
            inner.last_task = Some(task_id.to_string());
            if inner.state == State::Busy(task_id.to_string()) {
                inner.state = State::Free;
            }
        }
    }

    /// Runs every desktop's `teardown` (side by side), when the daemon stops.
    pub async fn teardown(&self) {
        let stops = self.desktops.iter().filter_map(|d| {
            let teardown = d.config.teardown.as_ref()?;
            Some(async move {
                if let Err(failure) = self.run(d, "teardown", teardown, None).await {
                    tracing::warn!(desktop = %d.config.name, reason = %failure.reason, "desktop teardown failed");
                }
            })
        });
        futures_util::future::join_all(stops).await;
    }

    /// Every desktop's state, for `/healthz`.
    pub fn status(&self) -> Vec<DesktopStatus> {
        self.desktops
            .iter()
            .map(|d| {
                let inner = d.inner.lock().ok();
                let state = inner.as_ref().map_or(State::Starting, |i| i.state.clone());
                DesktopStatus {
                    name: d.config.name.as_str().to_string(),
                    labels: d.config.labels.iter().map(|l| l.as_str().to_string()).collect(),
                    state: match state {
                        State::Starting => "starting",
                        State::Free => "free",
                        State::Busy(_) => "busy",
                        State::Failed(_) => "failed",
                    },
                    task_id: match &state {
                        State::Busy(task) => Some(task.clone()),
                        _ => None,
                    },
                    resets: inner.as_ref().map_or(0, |i| i.resets),
                    failure: match state {
                        State::Failed(failure) => Some(failure),
                        _ => None,
                    },
                }
            })
            .collect()
    }

    /// Runs one of a desktop's commands to its end or its timeout, its output in its log file.
    async fn run(&self, d: &Desktop, what: &str, command: &HookCommand, task_id: Option<&str>) -> Result<(), Failure> {
        let fail = |exit_code, reason: String, output: String| failure(d, what, exit_code, reason, output);
        crate::private::create_private_dir_all(&self.log_dir)
            .map_err(|e| fail(None, format!("cannot create {}: {e}", self.log_dir.display()), String::new()))?;
        let log_path = self.log_dir.join(format!("{}.{what}.log", d.config.name.as_str()));
        let timeout = Duration::from_secs(d.config.timeout_secs);
        let Some(argv) = command.argv() else {
            let HookCommand::Guest(guest) = command else {
                return Err(fail(None, "the command is empty".into(), String::new()));
            };
            return self.run_in_guest(d, what, &guest.guest, &log_path, timeout).await;
        };
        let Some((program, args)) = argv.split_first() else {
            return Err(fail(None, "the command is empty".into(), String::new()));
        };
        let log = std::fs::File::create(&log_path)
            .map_err(|e| fail(None, format!("cannot write {}: {e}", log_path.display()), String::new()))?;
        let log_err = log.try_clone().map_err(|e| fail(None, format!("cannot write its log: {e}"), String::new()))?;
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args).stdin(std::process::Stdio::null()).stdout(log).stderr(log_err);
        cmd.env("AGENTD_DESKTOP", d.config.name.as_str());
        if let Some(task_id) = task_id {
            cmd.env("AGENTD_TASK_ID", task_id);
        }
        #[cfg(unix)]
        cmd.process_group(0);
        let mut child = cmd.spawn().map_err(|e| fail(None, format!("cannot start {program}: {e}"), String::new()))?;
        let ended = tokio::time::timeout(timeout, child.wait()).await;
        let output = || tail(&log_path);
        match ended {
            Ok(Ok(status)) if status.success() => Ok(()),
            Ok(Ok(status)) => {
                Err(fail(status.code(), format!("{what} {}", crate::tools::command::exit_how(status)), output()))
            }
            Ok(Err(e)) => Err(fail(None, format!("cannot wait for {program}: {e}"), output())),
            Err(_) => {
                kill_group(&child);
                let _ = child.kill().await;
                Err(fail(
                    None,
                    format!("{what} did not finish within {} s and was killed", timeout.as_secs()),
                    output(),
                ))
            }
        }
    }
}

impl Pool {
    /// Runs a `{guest = …}` command through the desktop's computer; its stdout and stderr go to the log.
    async fn run_in_guest(
        &self,
        d: &Desktop,
        what: &str,
        command: &str,
        log_path: &std::path::Path,
        timeout: Duration,
    ) -> Result<(), Failure> {
        let fail = |exit_code, reason: String, output: String| failure(d, what, exit_code, reason, output);
        let Some(computer) = d.inner.lock().ok().and_then(|i| i.computer.clone()) else {
            return Err(fail(None, "the desktop's computer is not open".into(), String::new()));
        };
        let output = match tokio::time::timeout(timeout, computer.run_command(command)).await {
            Ok(Ok(output)) => output,
            Ok(Err(e)) => return Err(fail(None, format!("cannot run {what} in the guest: {e}"), String::new())),
            Err(_) => {
                return Err(fail(
                    None,
                    format!("{what} did not finish in the guest within {} s", timeout.as_secs()),
                    String::new(),
                ));
            }
        };
        let printed = format!("{}{}", output.stdout, output.stderr);
        if let Err(e) = std::fs::write(log_path, printed.as_bytes()) {
            tracing::warn!(path = %log_path.display(), error = %e, "cannot write the desktop command's log");
        }
        match output.exit_code {
            Some(0) => Ok(()),
            Some(code) => Err(fail(
                i32::try_from(code).ok(),
                format!("{what} exited with status {code} in the guest"),
                tail(log_path),
            )),
            None => Err(fail(None, format!("{what}: the guest reported no exit code"), tail(log_path))),
        }
    }
}

/// Opens the desktop's computer (again) as the pool holds it. A pool desktop is the operator's: it may be
/// anywhere. What a pool browser opens is the daemon's tasks' to ask: they came over the API.
async fn open_computer(d: &Desktop, config: &Config) -> Result<(), Failure> {
    let files = config.file_access();
    let secrets = crate::tools::secrets::Secrets::none();
    let open = agentd_computer::outbound::Outbound::open();
    let api = config.api_outbound();
    let pages = Some((config.browser.allowed_urls.as_slice(), &api));
    let context = ComputerContext { files: &files, persist_dir: None, secrets: &secrets, outbound: &open, pages };
    let computer = backends::computer(&d.config.computer, &context)
        .await
        .map_err(|e| failure(d, "computer", None, e.to_string(), String::new()))?;
    // Started ahead: a browser prepares its first task's context now, as it will each next one while a
    // task runs, so no task waits for one.
    computer
        .reset()
        .await
        .map_err(|e| failure(d, "computer", None, format!("readying it for tasks: {e}"), String::new()))?;
    if let Ok(mut inner) = d.inner.lock() {
        inner.computer = Some(computer);
    }
    Ok(())
}

impl Desktop {
    fn computer(&self) -> Option<Arc<dyn ComputerProvider>> {
        self.inner.lock().ok().and_then(|i| i.computer.clone())
    }

    fn set(&self, state: State) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.state = state;
        }
    }
}

fn failure(d: &Desktop, command: &str, exit_code: Option<i32>, reason: String, output: String) -> Failure {
    Failure {
        desktop: d.config.name.as_str().to_string(),
        command: command.to_string(),
        exit_code,
        reason,
        output,
        at: now(),
    }
}

/// Now, RFC 3339.
fn now() -> String {
    time::OffsetDateTime::now_utc().format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
}

/// Waits until the desktop's screen has not changed for [`QUIET`] (at most [`SETTLE_MAX`]) after a reset
/// changed it behind the computer's back: a VNC server's copy of the screen (x11vnc polls the X screen) can
/// lag the change by tens of milliseconds, and the task's first screenshot must show the reset screen.
async fn settle(computer: &dyn ComputerProvider) {
    let started = Instant::now();
    let mut last: Option<agentd_computer::Frame> = None;
    let mut quiet_since = Instant::now();
    while started.elapsed() < SETTLE_MAX {
        let Ok(frame) = computer.screenshot().await else { return };
        if last.as_ref().is_none_or(|last| last.size() != frame.size() || last.changed_pixels(&frame) > 0) {
            quiet_since = Instant::now();
            last = Some(frame);
        } else if quiet_since.elapsed() >= QUIET {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How long a screen must stay unchanged after a reset before the task starts.
const QUIET: Duration = Duration::from_millis(300);
/// The longest the pool waits for a screen to settle after a reset.
const SETTLE_MAX: Duration = Duration::from_secs(5);

/// The last [`OUTPUT_TAIL`] bytes of a log, as text.
fn tail(path: &std::path::Path) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    let start = bytes.len().saturating_sub(OUTPUT_TAIL);
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

/// Kills the process group a timed-out command leads (what it started with it goes too).
fn kill_group(child: &tokio::process::Child) {
    if let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) {
        crate::tools::command::kill_process_group(pid);
    }
}
