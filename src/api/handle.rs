//! [`WorkerHandle`]: what the API may do to this process's workers, and nothing more — wake the claim loop,
//! tell SSE followers that events were stored, cancel or pause a task running here, count running tasks, and read
//! how long ago the claim loop last went round. The workers own the other end (`daemon::worker`); the API
//! never sees their fields.

use std::collections::HashMap;
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Cheap to clone; every clone is the same handle.
#[derive(Clone, Default)]
pub struct WorkerHandle {
    /// Wakes the claim loop (a task was submitted, approved or a slot freed).
    pub wake: Arc<Notify>,
    /// Fires when events of a task were stored (SSE followers wait on it).
    pub events_stored: Arc<Notify>,
    /// Milliseconds since the epoch when the claim loop last went round (the watchdog and `/healthz` read it).
    pub claim_loop_alive_ms: Arc<AtomicI64>,
    /// The cancel and pause tokens of each task running in this process.
    running: Arc<Mutex<HashMap<String, Running>>>,
    /// The computer sessions of this node's API (`/v1/sessions`): the workers run their tasks with the models
    /// held here.
    pub sessions: Arc<super::sessions::Sessions>,
    /// The screens of the tasks running here, for their live viewers (`GET /v1/tasks/{id}/live`): the workers'
    /// attempts register their computers in it.
    pub live: Arc<crate::live::LiveScreens>,
    /// This node's worker name.
    node: Arc<str>,
}

/// What stops a task running here: its cancel token, and its pause token (a take-over, docs/humans.md: park it after
/// its
/// current step).
#[derive(Clone, Default)]
pub struct Running {
    pub cancel: CancellationToken,
    pub pause: CancellationToken,
}

impl WorkerHandle {
    pub fn new(now_ms: i64, node: &str) -> Self {
        Self { claim_loop_alive_ms: Arc::new(AtomicI64::new(now_ms)), node: node.into(), ..Self::default() }
    }

    /// This node's worker name (what a computer session's task is labelled with, so that it runs here).
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Cancels a task this process is running now (the queue already records the request).
    pub fn cancel_local(&self, task_id: &str) {
        if let Ok(running) = self.running.lock()
            && let Some(task) = running.get(task_id)
        {
            task.cancel.cancel();
        }
    }

    /// Asks a task this process is running now to park after its current step (the queue already records
    /// the request).
    pub fn pause_local(&self, task_id: &str) {
        if let Ok(running) = self.running.lock()
            && let Some(task) = running.get(task_id)
        {
            task.pause.cancel();
        }
    }

    /// How many tasks this process runs now.
    pub fn running(&self) -> usize {
        self.running.lock().map(|r| r.len()).unwrap_or(0)
    }

    /// A task started running here; its `cancel` stops it at its next safe point, its `pause` after its step.
    pub fn started(&self, task_id: &str, tokens: Running) {
        if let Ok(mut running) = self.running.lock() {
            running.insert(task_id.to_string(), tokens);
        }
    }

    /// A task stopped running here.
    pub fn stopped(&self, task_id: &str) {
        if let Ok(mut running) = self.running.lock() {
            running.remove(task_id);
        }
    }
}
