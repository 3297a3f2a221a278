//! `[queue]` and `[worker]`: where tasks wait (SQLite or PostgreSQL, leases, heartbeats, attempts) and the
//! workers that run them (concurrency, labels, shutdown, the environment API tasks may name).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum QueueBackend {
    #[default]
    Sqlite,
    Postgres,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct QueueConfig {
    pub backend: QueueBackend,
    /// SQLite database file (default `data_dir/queue.db`).
    pub path: Option<PathBuf>,
    /// PostgreSQL URL (`postgres://user@host/db`), for `backend = "postgres"`.
    pub url: Option<String>,
    /// How long a lease lasts without a heartbeat.
    pub lease_secs: u64,
    /// How often a worker renews its leases.
    pub heartbeat_secs: u64,
    /// Attempts a task gets before it fails for good (a crash or a retryable error uses one).
    pub max_attempts: u32,
    /// How often an idle worker polls for tasks (a safety net beside wake-ups).
    pub poll_ms: u64,
    /// PostgreSQL: hold a `LISTEN` connection for wake-ups and cancellations from other nodes (turn off
    /// behind a transaction-pooling PgBouncer, where LISTEN does not work; workers then poll).
    pub listen: bool,
    /// PostgreSQL: connections in this process's pool.
    pub max_connections: u32,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            backend: QueueBackend::Sqlite,
            path: None,
            url: None,
            lease_secs: 30,
            heartbeat_secs: 10,
            max_attempts: 3,
            poll_ms: 1000,
            listen: true,
            max_connections: 10,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerConfig {
    /// Tasks run at once.
    pub concurrency: u32,
    /// This worker's labels; a task runs here only if its labels are a subset.
    pub labels: BTreeMap<String, String>,
    /// The worker's name in records (default: the host name and process id).
    pub name: Option<String>,
    /// How long a graceful shutdown waits for running steps before cancelling them.
    pub shutdown_grace_secs: u64,
    /// Where mock desktops keep their state between restarts (default `data_dir/mock`). Nodes of a fleet
    /// that should resume each other's mock tasks share it, as a real VM outlives the worker driving it.
    pub mock_state_dir: Option<PathBuf>,
    /// Environment variables of this worker that tasks submitted over the API may name (a VNC computer's
    /// `password_env`, a computer-server's `api_key_env`), besides those `[defaults]` names. Empty by default: such tasks name none.
    pub allowed_env: Vec<String>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            concurrency: 2,
            labels: BTreeMap::new(),
            name: None,
            shutdown_grace_secs: 30,
            mock_state_dir: None,
            allowed_env: Vec::new(),
        }
    }
}
