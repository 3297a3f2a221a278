//! Retention (docs/operations.md): deleting finished tasks with their steps, events and artifacts — one task
//! (`DELETE /v1/tasks/{id}`), the tasks a prune finds (`agentd prune`), and the daemon's background job
//! (`[retention] finished_days`).
//!
//! A deletion has two halves. The queue deletes the task's rows in one transaction that checks, under the
//! row's lock, that the task is finished (a task that is queued, running or waiting, or that is requeued
//! meanwhile, is refused and nothing changes), and puts its id on the purge list in the same transaction.
//! Then its leftovers are purged: the artifacts under `tasks/{id}/` in the store (after any the uploader
//! still holds for it have been stored, so none arrives after the purge, spool leftovers included) and its
//! mock desktop's saved state. Only then does the id leave the purge list, so a crash or a store outage
//! between the halves leaves the artifacts listed for the next round ([`Retention::retry_purges`]), never
//! forgotten.
//!
//! The background job runs at start and every `interval_secs`: it retries the purge list, then deletes tasks
//! finished more than `finished_days` ago in batches of `batch`, oldest first, purging each batch's artifacts
//! a few tasks at a time, and yields between batches so the API and the workers keep their turn.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::artifacts::{ArtifactError, ArtifactStore, Removed, Uploader, task_prefix};
use crate::config::{Config, RetentionConfig};
use crate::metrics::Metrics;
use crate::queue::{Queue, QueueError};

/// Purges run this many at a time (each is a list and a delete request on S3).
const PURGE_CONCURRENCY: usize = 8;
/// How long a purge waits for the uploader to store a deleted task's last artifacts.
const UPLOAD_WAIT: Duration = Duration::from_secs(2);
/// A dry run lists at most this many ids (it counts them all).
pub const MAX_LISTED: usize = 1000;
/// Past this many tasks, a dry run sizes artifacts by listing `tasks/` once rather than each task's prefix.
const LIST_ALL_PAST: usize = 50;

/// What deleting one task did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deleted {
    pub id: String,
    /// Artifacts removed from the store.
    pub artifacts: Removed,
    /// The artifacts could not be removed now (the store is down, uploads pending): the task stays on the
    /// purge list and the background job removes them later.
    pub artifacts_pending: bool,
}

/// What a prune did, or with `dry_run`, would do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PruneReport {
    pub dry_run: bool,
    pub older_than_days: u32,
    /// Tasks deleted (or that would be).
    pub tasks: u64,
    /// Their ids, oldest first, at most [`MAX_LISTED`].
    pub ids: Vec<String>,
    /// Artifacts removed (or that would be) and their bytes.
    pub artifacts: Removed,
    /// Deleted tasks whose artifacts could not be removed now (left to the background job).
    pub artifacts_pending: u64,
}

/// Deletes finished tasks and what belongs to them.
pub struct Retention {
    queue: Arc<dyn Queue>,
    store: Arc<dyn ArtifactStore>,
    uploader: Uploader,
    metrics: Arc<Metrics>,
    config: Arc<Config>,
}

impl Retention {
    pub fn new(
        config: Arc<Config>,
        queue: Arc<dyn Queue>,
        store: Arc<dyn ArtifactStore>,
        uploader: Uploader,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self { queue, store, uploader, metrics, config }
    }

    fn settings(&self) -> &RetentionConfig {
        &self.config.retention
    }

    /// Deletes one finished task: [`QueueError::NotFound`] for an unknown (or already deleted) task,
    /// [`QueueError::WrongState`] for one that is not finished, and then nothing changed.
    pub async fn delete(&self, id: &str) -> Result<Deleted, QueueError> {
        self.queue.delete(id).await?;
        self.metrics.deleted_tasks.fetch_add(1, Ordering::Relaxed);
        let (artifacts, artifacts_pending) = match self.purge(id).await {
            Ok(removed) => {
                self.purged(&[id.to_string()]).await;
                (removed, false)
            }
            Err(e) => {
                tracing::warn!(task = id, error = %e, "task deleted; its artifacts are removed later");
                (Removed::default(), true)
            }
        };
        Ok(Deleted { id: id.to_string(), artifacts, artifacts_pending })
    }

    /// Removes a deleted task's leftovers: its artifacts (once the uploader holds none of them) and its mock
    /// desktop's saved state.
    async fn purge(&self, id: &str) -> Result<Removed, ArtifactError> {
        let prefix = task_prefix(id);
        let left = self.uploader.wait_for_prefix(&prefix, UPLOAD_WAIT).await;
        if left > 0 {
            return Err(ArtifactError::Unavailable(format!("{left} artifact(s) of task {id} are not stored yet")));
        }
        let removed = self.store.delete_prefix(&prefix).await?;
        // The prefix was checked by the store: the id is one path segment.
        let mock = self.config.mock_dir(id);
        remove_dir(mock).await;
        self.metrics.deleted_artifacts.fetch_add(removed.objects, Ordering::Relaxed);
        self.metrics.deleted_artifact_bytes.fetch_add(removed.bytes, Ordering::Relaxed);
        Ok(removed)
    }

    async fn purged(&self, ids: &[String]) {
        if let Err(e) = self.queue.purged(ids).await {
            // They stay listed; the next round purges them again, finding nothing.
            tracing::warn!(error = %e, "cannot take purged tasks off the purge list");
        }
    }

    /// Purges many deleted tasks, a few at a time; returns what was removed and how many could not be.
    async fn purge_all(&self, ids: &[String]) -> (Removed, u64) {
        let results: Vec<(String, Result<Removed, ArtifactError>)> = futures_util::stream::iter(ids.iter().cloned())
            .map(|id| async move {
                let result = self.purge(&id).await;
                (id, result)
            })
            .buffer_unordered(PURGE_CONCURRENCY)
            .collect()
            .await;
        let mut removed = Removed::default();
        let mut done = Vec::new();
        let mut failed = 0;
        for (id, result) in results {
            match result {
                Ok(r) => {
                    removed += r;
                    done.push(id);
                }
                Err(e) => {
                    failed += 1;
                    tracing::warn!(task = %id, error = %e, "cannot remove a deleted task's artifacts yet; retried later");
                }
            }
        }
        if !done.is_empty() {
            self.purged(&done).await;
        }
        (removed, failed)
    }

    /// Deletes one batch of tasks finished more than `age` ago: (tasks deleted, their ids, artifacts removed,
    /// purges left pending). Fewer than a batch means nothing more is due.
    async fn prune_batch(&self, age: Duration) -> Result<(Vec<String>, Removed, u64, bool), QueueError> {
        let batch = self.settings().batch.max(1);
        let due = self.queue.finished_before(age, batch).await?;
        let more = due.len() as u32 >= batch;
        if due.is_empty() {
            return Ok((Vec::new(), Removed::default(), 0, false));
        }
        let deleted = self.queue.delete_finished(&due).await?;
        self.metrics.deleted_tasks.fetch_add(deleted.len() as u64, Ordering::Relaxed);
        let (removed, failed) = self.purge_all(&deleted).await;
        Ok((deleted, removed, failed, more))
    }

    /// Deletes every task finished more than `older_than_days` ago, batch by batch, until none is left or
    /// `stop` fires.
    pub async fn prune(&self, older_than_days: u32, stop: &CancellationToken) -> Result<PruneReport, QueueError> {
        let age = days(older_than_days);
        let mut report = PruneReport { older_than_days, ..PruneReport::default() };
        loop {
            let (deleted, removed, failed, more) = self.prune_batch(age).await?;
            report.tasks += deleted.len() as u64;
            let room = MAX_LISTED.saturating_sub(report.ids.len());
            report.ids.extend(deleted.into_iter().take(room));
            report.artifacts += removed;
            report.artifacts_pending += failed;
            if !more || stop.is_cancelled() {
                return Ok(report);
            }
            // Let the API and the workers have the queue between batches.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// What [`Retention::prune`] would delete now: the tasks, and the artifacts they have in the store.
    pub async fn dry_run(&self, older_than_days: u32) -> Result<PruneReport, PruneError> {
        let ids = self.queue.finished_before(days(older_than_days), u32::MAX).await?;
        let mut artifacts = Removed::default();
        if ids.len() > LIST_ALL_PAST {
            let wanted: HashSet<&str> = ids.iter().map(String::as_str).collect();
            let mut by_task: BTreeMap<&str, Removed> = BTreeMap::new();
            let listed = self.store.list("tasks/").await?;
            for (key, size) in &listed {
                let task = key.strip_prefix("tasks/").and_then(|rest| rest.split('/').next()).unwrap_or_default();
                if let Some(task) = wanted.get(task) {
                    let entry = by_task.entry(task).or_default();
                    *entry += Removed { objects: 1, bytes: *size };
                }
            }
            for removed in by_task.into_values() {
                artifacts += removed;
            }
        } else {
            for id in &ids {
                for (_, size) in self.store.list(&task_prefix(id)).await? {
                    artifacts += Removed { objects: 1, bytes: size };
                }
            }
        }
        Ok(PruneReport {
            dry_run: true,
            older_than_days,
            tasks: ids.len() as u64,
            ids: ids.into_iter().take(MAX_LISTED).collect(),
            artifacts,
            artifacts_pending: 0,
        })
    }

    /// Purges the tasks on the purge list (deleted earlier, artifacts not removed yet).
    pub async fn retry_purges(&self) -> Result<(), QueueError> {
        let listed = self.queue.purges(1000).await?;
        if !listed.is_empty() {
            let (removed, failed) = self.purge_all(&listed).await;
            tracing::info!(tasks = listed.len(), artifacts = removed.objects, failed, "retried pending purges");
        }
        Ok(())
    }

    /// The background job: at start and every `interval_secs` until `stop` fires.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let interval = Duration::from_secs(self.settings().interval_secs.max(1));
        loop {
            self.round(&stop).await;
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(interval) => {}
            }
        }
    }

    async fn round(&self, stop: &CancellationToken) {
        if let Err(e) = self.retry_purges().await {
            tracing::warn!(error = %e, "retention: cannot read the purge list");
        }
        let finished_days = self.settings().finished_days;
        if finished_days == 0 {
            return;
        }
        match self.prune(finished_days, stop).await {
            Ok(report) if report.tasks > 0 => tracing::info!(
                tasks = report.tasks,
                artifacts = report.artifacts.objects,
                bytes = report.artifacts.bytes,
                pending = report.artifacts_pending,
                finished_days,
                "retention: deleted finished tasks"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "retention: deleting finished tasks failed; retried next round"),
        }
    }
}

/// Why a dry run could not answer.
#[derive(Debug, thiserror::Error)]
pub enum PruneError {
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error(transparent)]
    Artifacts(#[from] ArtifactError),
}

fn days(n: u32) -> Duration {
    Duration::from_secs(u64::from(n) * 86_400)
}

/// Removes a directory tree if it is there (a mock desktop's saved state); a failure is logged.
async fn remove_dir(dir: PathBuf) {
    match tokio::fs::remove_dir_all(&dir).await {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a deleted task's mock desktop state"),
    }
}
