//! `agentd serve`: the daemon. Opens the queue and the artifact store, starts the workers, the heartbeat,
//! the rescuer, the retention job (docs/operations.md) and the HTTP API (Unix socket, optionally TCP), tells systemd
//! when it is ready, feeds the
//! watchdog while the claim loop is alive, and shuts down in two phases.
//!
//! Shutdown (first SIGTERM/SIGINT): stop claiming and accepting tasks (`STOPPING=1`), let running tasks
//! reach the end of their step and hand them back to the queue without counting an attempt, flush artifacts,
//! exit. After `worker.shutdown_grace_secs`, whatever still runs is abandoned (its lease expires and another
//! start resumes it). A second signal exits at once.
//!
//! SIGHUP reloads the TCP listener's TLS certificate and key (`api.tls_cert`, `api.tls_key`); a reload that
//! fails keeps the certificate in use and logs why. Without TLS, SIGHUP is logged and changes nothing.
//!
//! Platforms: all of this on Linux. On macOS the same without systemd (notifications are a no-op). On
//! Windows the API listens on TCP only (`serve` refuses to start without `api.listen`), Ctrl-C is the one
//! shutdown signal and there is no SIGHUP reload.

pub mod notify;
pub mod questions;
pub mod tool_waits;
pub mod worker;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use thiserror::Error;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api::{self, ApiState};
use crate::artifacts::{ArtifactError, Uploader};
use crate::config::{Config, QueueBackend};
use crate::metrics::Metrics;
use crate::queue::Queue;
use crate::queue::postgres::{PostgresQueue, PostgresSettings};
use crate::queue::sqlite::SqliteQueue;
use crate::queue::{QueueSignal, SignalHandler};
use crate::retention::Retention;
use worker::Workers;

#[derive(Debug, Error)]
pub enum DaemonError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Unreachable(String),
}

/// What `serve` needs of the machine before it starts, checked by `serve` and by `config check` alike: the
/// TCP listener's token file (readable, a token of at least 16 characters) and a socket directory this user
/// may create the socket in. Returns warnings that do not stop the daemon (a token file every local user can
/// read).
pub fn preflight(config: &Config) -> Result<Vec<String>, DaemonError> {
    let mut warnings = Vec::new();
    if config.api.listen.is_some() {
        let token_file = config.api.token_file.as_ref().ok_or_else(|| {
            DaemonError::Invalid("api.listen needs api.token_file: a TCP listener never runs without a token".into())
        })?;
        crate::config::read_token_file(token_file).map_err(DaemonError::Invalid)?;
        warnings.extend(crate::config::world_readable_warning("api.token_file", token_file));
    }
    if let (Some(cert), Some(key)) = (&config.api.tls_cert, &config.api.tls_key) {
        api::tls::TlsCertificate::load(cert, key).map_err(DaemonError::Invalid)?;
        warnings.extend(crate::config::world_readable_warning("api.tls_key", key));
    }
    #[cfg(not(unix))]
    if config.api.listen.is_none() {
        return Err(DaemonError::Invalid(NO_UNIX_SOCKET.into()));
    }
    #[cfg(unix)]
    let socket = config.socket_path();
    #[cfg(unix)]
    if let Some(dir) = socket.parent() {
        // The directory, or the nearest ancestor that exists (serve creates the rest), must let us in and write.
        let existing = dir.ancestors().find(|d| d.exists()).unwrap_or(dir);
        if let Err(e) = writable_dir(existing) {
            return Err(DaemonError::Unreachable(format!(
                "socket directory {}: {e}{}",
                dir.display(),
                if existing == dir { String::new() } else { format!(" (at {})", existing.display()) }
            )));
        }
    }
    Ok(warnings)
}

/// Why `serve` does not start on a platform without Unix sockets (Windows) when no TCP listener is configured.
#[cfg(not(unix))]
const NO_UNIX_SOCKET: &str =
    "this platform has no Unix socket: the API listens on TCP only; set api.listen and api.token_file";

/// Whether this process may create entries in `dir` (write and search permission, not a read-only mount).
#[cfg(unix)]
fn writable_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "path holds a NUL byte"))?;
    // SAFETY: `path` is a valid NUL-terminated string for the duration of the call.
    if unsafe { libc::access(path.as_ptr(), libc::W_OK | libc::X_OK) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Opens the queue the config names.
pub async fn open_queue(config: &Config) -> Result<Arc<dyn Queue>, DaemonError> {
    match config.queue.backend {
        QueueBackend::Sqlite => {
            let path = config.queue_path();
            let queue = SqliteQueue::open(&path)
                .await
                .map_err(|e| DaemonError::Unreachable(format!("queue {}: {e}", path.display())))?;
            Ok(Arc::new(queue))
        }
        QueueBackend::Postgres => {
            let url = config.queue.url.as_deref().unwrap_or_default();
            let settings =
                PostgresSettings { max_connections: config.queue.max_connections, listen: config.queue.listen };
            let queue =
                PostgresQueue::open(url, settings).await.map_err(|e| DaemonError::Unreachable(e.to_string()))?;
            Ok(Arc::new(queue))
        }
    }
}

/// Runs the daemon until SIGTERM or SIGINT (a second one exits at once).
pub async fn serve(config: Config) -> Result<(), DaemonError> {
    serve_until(config, wait_for_signal()).await
}

/// Runs the daemon until `stop` completes, then shuts down gracefully (used by `serve` and by benchmarks
/// that embed the daemon).
pub async fn serve_until(config: Config, stop: impl std::future::Future<Output = ()>) -> Result<(), DaemonError> {
    let config = Arc::new(config);
    for warning in preflight(&config)? {
        tracing::warn!("{warning}");
    }
    crate::private::create_private_dir_all(&config.data_dir)
        .map_err(|e| DaemonError::Unreachable(format!("data_dir {}: {e}", config.data_dir.display())))?;
    let queue = open_queue(&config).await?;
    let store = crate::backends::artifact_store(&config).await.map_err(|e| DaemonError::Invalid(e.to_string()))?;
    match store.health().await {
        Ok(()) => {}
        // A store that is down now may be back soon: start anyway, spool screenshots meanwhile (past the
        // spool's bound, workers stop taking tasks), and let /healthz say so. Anything else is fatal.
        Err(e @ ArtifactError::Unavailable(_)) => {
            tracing::warn!(store = store.describe(), error = %e, "artifact store unreachable; starting anyway, spooling");
        }
        Err(e) => return Err(DaemonError::Unreachable(format!("artifact store {}: {e}", store.describe()))),
    }

    let tracker = TaskTracker::new();
    let background = CancellationToken::new();
    let uploader = Uploader::start(
        store.clone(),
        config.spool_dir(),
        256,
        config.artifacts.spool_max_bytes,
        &tracker,
        background.clone(),
    );
    let metrics = Arc::new(Metrics::default());
    let workers = Workers::new(config.clone(), queue.clone(), uploader.clone(), metrics.clone());

    let stop_claiming = CancellationToken::new();
    let shutdown_tasks = CancellationToken::new();
    let retention =
        Arc::new(Retention::new(config.clone(), queue.clone(), store.clone(), uploader.clone(), metrics.clone()));
    let hands = Arc::new(crate::hands::Hands::new(
        config.clone(),
        queue.clone(),
        store.clone(),
        workers.handle.live.clone(),
        workers.pool.clone(),
        workers.handle.events_stored.clone(),
    ));
    let state = Arc::new(ApiState {
        config: config.clone(),
        queue: queue.clone(),
        store,
        hands,
        uploader: uploader.clone(),
        metrics,
        workers: workers.handle.clone(),
        stopping: stop_claiming.clone(),
        retention: retention.clone(),
        pool: workers.pool.clone(),
        mcp: api::mcp::McpEndpoint::default(),
    });
    let servers = api::bind(&state).await.map_err(|e| DaemonError::Unreachable(e.to_string()))?;
    let api_stop = CancellationToken::new();
    let certificates: Vec<_> = servers.iter().filter_map(api::Server::tls).collect();
    tracker.spawn(reload_on_hangup(certificates, background.clone()));
    for server in servers {
        let stop = api_stop.clone();
        tracker.spawn(server.run(state.clone(), stop));
    }

    // The desktop pool (docs/providers.md) sets its desktops up beside the rest: the claim loop offers each once it is
    // ready.
    let pool_started = tracker.spawn({
        let (pool, config) = (workers.pool.clone(), config.clone());
        async move { pool.start(&config).await }
    });
    let runners = TaskTracker::new();
    tracker.spawn(workers.clone().claim_loop(runners.clone(), stop_claiming.clone(), shutdown_tasks.clone()));
    tracker.spawn(workers.clone().heartbeat_loop(background.clone()));
    tracker.spawn(workers.clone().rescue_loop(background.clone()));
    tracker.spawn(retention.run(background.clone()));
    tracker.spawn({
        let queue = queue.clone();
        let on_signal = signal_handler(&workers);
        let stop = background.clone();
        async move { queue.listen(on_signal, stop).await }
    });
    notify::notify(&format!("READY=1\nSTATUS=serving on {}", config.socket_path().display()));
    // Only after READY=1: systemd expects the first watchdog ping from a service that is up.
    if let Some(interval) = notify::watchdog_interval() {
        tracker.spawn(feed_watchdog(workers.clone(), interval, background.clone()));
    }
    tracing::info!(socket = %config.socket_path().display(), queue = queue.describe(), worker = %workers.identity.name, "agentd ready");
    // One line whatever the log filter, so a person who started it sees that it serves, and where (with
    // JSON logs, every line stays a JSON object: the `agentd ready` event says it).
    let tcp = match &config.api.listen {
        Some(listen) => {
            let scheme = if config.api.tls_cert.is_some() { "https" } else { "http" };
            format!(" and {scheme}://{listen}")
        }
        None => String::new(),
    };
    if config.log.format == crate::config::LogFormat::Text {
        eprintln!(
            "agentd: ready: serving on {}{tcp}; queue {}; {} worker(s) as {}",
            config.socket_path().display(),
            queue.describe(),
            config.worker.concurrency,
            workers.identity.name
        );
    }

    stop.await;
    tracing::info!("shutting down: no new tasks; running tasks finish their step");
    notify::notify("STOPPING=1\nSTATUS=finishing running steps");
    stop_claiming.cancel();
    shutdown_tasks.cancel();
    runners.close();
    let grace = Duration::from_secs(config.worker.shutdown_grace_secs);
    tokio::select! {
        () = runners.wait() => {}
        () = tokio::time::sleep(grace) => {
            tracing::warn!(running = workers.running(), "grace period over; abandoning running tasks (their leases will expire)");
        }
        () = wait_for_signal() => {
            tracing::warn!("second signal: exiting now");
            crate::exit::Exit::Interrupted.now();
        }
    }
    if !workers.pool.is_empty() {
        let _ = pool_started.await;
        workers.pool.teardown().await;
    }
    let pending = uploader.flush(Duration::from_secs(10)).await;
    if pending > 0 {
        tracing::warn!(pending, "artifacts left in the spool; they upload on the next start");
    }
    api_stop.cancel();
    background.cancel();
    tracker.close();
    let _ = tokio::time::timeout(Duration::from_secs(5), tracker.wait()).await;
    api::remove_socket(&config);
    tracing::info!("agentd stopped");
    Ok(())
}

/// A listed task the daemon's rounds (question and tool timeouts) look at: its record, or `None`, logged, for
/// one whose stored row cannot be read: the round leaves it and goes on with the others.
fn readable(task: crate::status::ListedTask) -> Option<Box<crate::status::TaskRecord>> {
    match task {
        crate::status::ListedTask::Record(record) => Some(record),
        crate::status::ListedTask::Unreadable(task) => {
            tracing::debug!(task = %task.id, error = %task.error, "skipping a task that cannot be read");
            None
        }
    }
}

/// What other nodes sharing the queue tell this one: new work wakes the claim loop, a cancellation stops the
/// task here at its next safe point (the heartbeat would carry it too, within one interval).
fn signal_handler(workers: &Arc<Workers>) -> SignalHandler {
    let workers = workers.clone();
    Arc::new(move |signal| match signal {
        QueueSignal::Work => workers.handle.wake.notify_one(),
        QueueSignal::Cancel(task_id) => workers.cancel_local(&task_id),
        QueueSignal::Pause(task_id) => workers.handle.pause_local(&task_id),
    })
}

/// Pings the systemd watchdog at half its interval, but only while the claim loop keeps going round: a
/// wedged worker must not be hidden by a timer that keeps ticking.
async fn feed_watchdog(workers: Arc<Workers>, interval: Duration, stop: CancellationToken) {
    let every = interval / 2;
    let stale_after_ms = (interval.as_millis() / 2).max(1) as i64 + workers.config.queue.poll_ms as i64;
    loop {
        let age = crate::queue::now_ms() - workers.handle.claim_loop_alive_ms.load(Ordering::Relaxed);
        if age <= stale_after_ms {
            notify::notify("WATCHDOG=1");
        } else {
            tracing::error!(age_ms = age, "claim loop is not making progress; not feeding the watchdog");
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
    }
}

/// Reloads the TLS certificates on every SIGHUP until `stop` fires. Windows has no SIGHUP: there the
/// certificates are read at start only.
#[cfg(not(unix))]
async fn reload_on_hangup(_certificates: Vec<Arc<api::tls::TlsCertificate>>, _stop: CancellationToken) {}

/// Reloads the TLS certificates on every SIGHUP until `stop` fires.
#[cfg(unix)]
async fn reload_on_hangup(certificates: Vec<Arc<api::tls::TlsCertificate>>, stop: CancellationToken) {
    let mut hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(hangup) => hangup,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP; TLS certificates are not reloaded");
            return;
        }
    };
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            received = hangup.recv() => if received.is_none() { return },
        }
        if certificates.is_empty() {
            tracing::info!("SIGHUP: nothing to reload (no TLS certificate)");
        }
        for certificate in &certificates {
            match certificate.reload() {
                Ok(()) => tracing::info!("SIGHUP: TLS certificate reloaded; new connections use it"),
                Err(e) => tracing::error!(error = %e, "SIGHUP: TLS certificate not reloaded; keeping the one in use"),
            }
        }
    }
}

/// The first SIGTERM or SIGINT (Ctrl-C); on Windows, Ctrl-C (or Ctrl-Break) only.
#[cfg(not(unix))]
async fn wait_for_signal() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await
    }
}

#[cfg(unix)]
async fn wait_for_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
