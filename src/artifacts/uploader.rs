//! The uploader: stores artifacts beside the agent loop, and never loses one.
//!
//! [`Uploader::submit`] never waits on the store. A job goes into a bounded queue that one background task
//! drains; when the queue is full, or when the store fails with a retryable error, the artifact is written
//! to a local spool directory instead (mirroring its key) and retried from there with exponential backoff,
//! also after a restart. Only a store error that can never succeed (an invalid key) drops an artifact, and
//! that is logged. [`Uploader::flush`] waits until everything submitted is stored.
//!
//! While the store is failing (from a retryable failure until the next successful upload), new artifacts go
//! straight to the spool instead of waiting in memory behind uploads that would fail too: an outage costs
//! one failed attempt, not one per artifact, and a crash during it loses nothing that was submitted.
//!
//! The spool has a bound (`artifacts.spool_max_bytes`). Past it nothing is dropped — running tasks keep
//! spooling — but [`Uploader::spool_full`] turns true, and the daemon's claim loop takes no new task until the
//! store has caught up.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::fs::write_atomically;
use super::{ArtifactError, ArtifactStore, check_key, content_type};

/// Called once an artifact is stored, with its URL.
pub type OnStored = Box<dyn FnOnce(&str) + Send>;

struct Job {
    key: String,
    bytes: Arc<[u8]>,
    on_stored: Option<OnStored>,
}

struct Shared {
    store: Arc<dyn ArtifactStore>,
    spool_dir: PathBuf,
    /// Artifacts submitted and not yet stored (queued, in flight or spooled).
    pending: AtomicU64,
    spooled_bytes: AtomicU64,
    /// Set by a retryable store failure, cleared by the next successful upload: while set, artifacts are
    /// spooled without trying the store (the spool retrier probes it).
    store_failing: AtomicBool,
    /// `artifacts.spool_max_bytes`: at or past it, [`Uploader::spool_full`] is true.
    spool_max_bytes: u64,
    upload_errors: AtomicU64,
    /// Wakes `flush` waiters when `pending` drops, and the spool retrier when something was spooled.
    changed: Notify,
    spool_added: Notify,
    /// Callbacks of spooled artifacts, run when the spool copy is stored.
    waiting: Mutex<HashMap<String, OnStored>>,
    tracker: TaskTracker,
}

/// A handle to the background uploader. Cheap to clone.
#[derive(Clone)]
pub struct Uploader {
    tx: mpsc::Sender<Job>,
    shared: Arc<Shared>,
}

/// Uploader figures for `/metrics` and health.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UploaderStats {
    pub pending: u64,
    pub spooled_bytes: u64,
    pub upload_errors: u64,
    /// The spool reached its bound: no new tasks are taken.
    pub spool_full: bool,
}

impl Uploader {
    /// Starts the uploader's tasks on `tracker`; they stop when `cancel` fires (after which spooled files stay
    /// on disk for the next start). `spool_max_bytes` is the bound of [`Uploader::spool_full`].
    pub fn start(
        store: Arc<dyn ArtifactStore>,
        spool_dir: PathBuf,
        queue_capacity: usize,
        spool_max_bytes: u64,
        tracker: &TaskTracker,
        cancel: CancellationToken,
    ) -> Self {
        let (tx, rx) = mpsc::channel(queue_capacity.max(1));
        let shared = Arc::new(Shared {
            store,
            spool_dir,
            pending: AtomicU64::new(0),
            spooled_bytes: AtomicU64::new(0),
            store_failing: AtomicBool::new(false),
            spool_max_bytes,
            upload_errors: AtomicU64::new(0),
            changed: Notify::new(),
            spool_added: Notify::new(),
            waiting: Mutex::new(HashMap::new()),
            tracker: tracker.clone(),
        });
        // Leftovers of an earlier run count as pending.
        let (count, bytes) = spool_inventory(&shared.spool_dir);
        shared.pending.fetch_add(count, Ordering::SeqCst);
        shared.spooled_bytes.fetch_add(bytes, Ordering::SeqCst);
        tracker.spawn(drain_queue(shared.clone(), rx, cancel.clone()));
        tracker.spawn(retry_spool(shared.clone(), cancel));
        Self { tx, shared }
    }

    /// Hands an artifact over; returns at once.
    pub fn submit(&self, key: String, bytes: Arc<[u8]>, on_stored: Option<OnStored>) {
        self.shared.pending.fetch_add(1, Ordering::SeqCst);
        if self.shared.store_failing.load(Ordering::SeqCst) {
            return spool(&self.shared, Job { key, bytes, on_stored });
        }
        match self.tx.try_send(Job { key, bytes, on_stored }) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(job) | mpsc::error::TrySendError::Closed(job)) => {
                spool(&self.shared, job);
            }
        }
    }

    /// Waits until every submitted artifact is stored, or `timeout` passes. Returns how many are still pending.
    pub async fn flush(&self, timeout: Duration) -> u64 {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.shared.changed.notified();
            let pending = self.shared.pending.load(Ordering::SeqCst);
            if pending == 0 {
                return 0;
            }
            self.shared.spool_added.notify_one();
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.shared.pending.load(Ordering::SeqCst);
            }
        }
    }

    pub fn stats(&self) -> UploaderStats {
        UploaderStats {
            pending: self.shared.pending.load(Ordering::SeqCst),
            spooled_bytes: self.shared.spooled_bytes.load(Ordering::SeqCst),
            upload_errors: self.shared.upload_errors.load(Ordering::SeqCst),
            spool_full: self.spool_full(),
        }
    }

    /// Whether the spool holds `spool_max_bytes` or more (a bound of 0 means: anything spooled). Nothing is
    /// dropped past the bound; the daemon stops taking new tasks until this is false again.
    pub fn spool_full(&self) -> bool {
        self.shared.spooled_bytes.load(Ordering::SeqCst) >= self.shared.spool_max_bytes.max(1)
    }

    pub fn store(&self) -> &Arc<dyn ArtifactStore> {
        &self.shared.store
    }
}

fn done(shared: &Shared, key: &str, on_stored: Option<OnStored>) {
    if shared.store_failing.swap(false, Ordering::SeqCst) {
        tracing::info!(store = %shared.store.describe(), "artifact store reachable again; uploading the spool");
    }
    if let Some(callback) = on_stored {
        callback(&shared.store.url(key));
    }
    shared.pending.fetch_sub(1, Ordering::SeqCst);
    shared.changed.notify_waiters();
}

fn dropped(shared: &Shared, key: &str, error: &ArtifactError) {
    tracing::error!(key, %error, "artifact dropped: the store can never accept it");
    shared.pending.fetch_sub(1, Ordering::SeqCst);
    shared.changed.notify_waiters();
}

/// Writes a job to the spool. If even that fails (disk full), keeps retrying the store from memory: the
/// artifact is never silently lost.
fn spool(shared: &Arc<Shared>, job: Job) {
    if let Err(e) = check_key(&job.key) {
        dropped(shared, &job.key, &e);
        return;
    }
    let path = shared.spool_dir.join(&job.key);
    // Register the callback before the file exists, so the retrier cannot store it and miss the callback.
    let Job { key, bytes, on_stored } = job;
    if let Some(callback) = on_stored
        && let Ok(mut waiting) = shared.waiting.lock()
    {
        waiting.insert(key.clone(), callback);
    }
    match write_atomically(&path, &bytes) {
        Ok(()) => {
            shared.spooled_bytes.fetch_add(bytes.len() as u64, Ordering::SeqCst);
            shared.spool_added.notify_one();
        }
        Err(e) => {
            tracing::error!(%key, error = %e, "cannot spool artifact; keeping it in memory");
            let on_stored = shared.waiting.lock().ok().and_then(|mut w| w.remove(&key));
            let shared_for_task = shared.clone();
            shared.tracker.spawn(async move {
                let shared = shared_for_task;
                let mut delay = Duration::from_millis(500);
                loop {
                    match shared.store.put(&key, &bytes, content_type(&key)).await {
                        Ok(()) => return done(&shared, &key, on_stored),
                        Err(e) if !e.is_retryable() => return dropped(&shared, &key, &e),
                        Err(_) => {
                            tokio::time::sleep(delay).await;
                            delay = (delay * 2).min(Duration::from_secs(30));
                        }
                    }
                }
            });
        }
    }
}

async fn drain_queue(shared: Arc<Shared>, mut rx: mpsc::Receiver<Job>, cancel: CancellationToken) {
    loop {
        let job = tokio::select! {
            job = rx.recv() => match job { Some(job) => job, None => return },
            () = cancel.cancelled() => {
                // Whatever is still queued goes to the spool, to be stored by the next start.
                rx.close();
                while let Ok(job) = rx.try_recv() {
                    spool(&shared, job);
                }
                return;
            }
        };
        if shared.store_failing.load(Ordering::SeqCst) {
            // The store is down: keep the artifact on disk at once; the spool retrier probes the store.
            spool(&shared, job);
            continue;
        }
        match shared.store.put(&job.key, &job.bytes, content_type(&job.key)).await {
            Ok(()) => done(&shared, &job.key, job.on_stored),
            Err(e) if e.is_retryable() => {
                shared.upload_errors.fetch_add(1, Ordering::SeqCst);
                if !shared.store_failing.swap(true, Ordering::SeqCst) {
                    tracing::warn!(key = %job.key, error = %e, "upload failed; spooling artifacts until the store is back");
                }
                spool(&shared, job);
            }
            Err(e) => {
                shared.upload_errors.fetch_add(1, Ordering::SeqCst);
                dropped(&shared, &job.key, &e);
            }
        }
    }
}

async fn retry_spool(shared: Arc<Shared>, cancel: CancellationToken) {
    let mut delay = Duration::from_millis(200);
    loop {
        let files = {
            let dir = shared.spool_dir.clone();
            tokio::task::spawn_blocking(move || spooled_files(&dir)).await.unwrap_or_default()
        };
        let mut failed = false;
        for (key, path) in files {
            if cancel.is_cancelled() {
                return;
            }
            let Ok(bytes) = tokio::fs::read(&path).await else {
                continue;
            };
            match shared.store.put(&key, &bytes, content_type(&key)).await {
                Ok(()) => {
                    let _ = tokio::fs::remove_file(&path).await;
                    shared.spooled_bytes.fetch_sub(bytes.len() as u64, Ordering::SeqCst);
                    let callback = shared.waiting.lock().ok().and_then(|mut w| w.remove(&key));
                    done(&shared, &key, callback);
                }
                Err(e) if e.is_retryable() => {
                    shared.upload_errors.fetch_add(1, Ordering::SeqCst);
                    shared.store_failing.store(true, Ordering::SeqCst);
                    tracing::debug!(%key, error = %e, "spooled upload failed; will retry");
                    failed = true;
                    break;
                }
                Err(e) => {
                    let _ = tokio::fs::remove_file(&path).await;
                    shared.spooled_bytes.fetch_sub(bytes.len() as u64, Ordering::SeqCst);
                    dropped(&shared, &key, &e);
                }
            }
        }
        // While the store is down, probe it with one spooled artifact at growing intervals (at most 10 s apart,
        // so uploads resume soon after it is back).
        let wait = if failed {
            delay = (delay * 2).min(Duration::from_secs(10));
            delay
        } else {
            delay = Duration::from_millis(200);
            Duration::from_secs(60)
        };
        tokio::select! {
            () = cancel.cancelled() => return,
            () = shared.spool_added.notified(), if !failed => {}
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// Every spooled file as (key, path), oldest keys first. Temporary files of interrupted writes are skipped.
fn spooled_files(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(rel) = path.strip_prefix(dir)
                && let Some(key) = rel.to_str()
                && !key.contains(".tmp")
            {
                out.push((key.to_string(), path.clone()));
            }
        }
    }
    out.sort();
    out
}

fn spool_inventory(dir: &Path) -> (u64, u64) {
    let files = spooled_files(dir);
    let bytes = files.iter().filter_map(|(_, p)| std::fs::metadata(p).ok()).map(|m| m.len()).sum();
    (files.len() as u64, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::FsStore;
    use async_trait::async_trait;
    use std::sync::atomic::AtomicBool;

    /// A store that is down until told otherwise.
    struct Flaky {
        inner: FsStore,
        down: AtomicBool,
        puts: AtomicU64,
    }

    impl Flaky {
        fn new(root: PathBuf, down: bool) -> Self {
            Self { inner: FsStore::new(root), down: AtomicBool::new(down), puts: AtomicU64::new(0) }
        }
    }

    #[async_trait]
    impl ArtifactStore for Flaky {
        fn describe(&self) -> String {
            "flaky".into()
        }
        async fn put(&self, key: &str, bytes: &[u8], ct: &str) -> Result<(), ArtifactError> {
            self.puts.fetch_add(1, Ordering::SeqCst);
            if self.down.load(Ordering::SeqCst) {
                return Err(ArtifactError::Unavailable("down".into()));
            }
            self.inner.put(key, bytes, ct).await
        }
        async fn get(&self, key: &str) -> Result<Vec<u8>, ArtifactError> {
            self.inner.get(key).await
        }
        fn url(&self, key: &str) -> String {
            self.inner.url(key)
        }
        async fn health(&self) -> Result<(), ArtifactError> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn outage_spools_then_everything_arrives() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Flaky::new(dir.path().join("store"), true));
        let tracker = TaskTracker::new();
        let cancel = CancellationToken::new();
        let uploader = Uploader::start(store.clone(), dir.path().join("spool"), 2, u64::MAX, &tracker, cancel.clone());
        let stored = Arc::new(AtomicU64::new(0));
        for i in 0..10u32 {
            let stored = stored.clone();
            uploader.submit(
                format!("tasks/t/1/{i:05}.png"),
                vec![i as u8; 100].into(),
                Some(Box::new(move |_| {
                    stored.fetch_add(1, Ordering::SeqCst);
                })),
            );
        }
        assert_eq!(uploader.flush(Duration::from_millis(300)).await, 10);
        assert!(uploader.stats().spooled_bytes > 0);
        store.down.store(false, Ordering::SeqCst);
        assert_eq!(uploader.flush(Duration::from_secs(10)).await, 0);
        assert_eq!(stored.load(Ordering::SeqCst), 10);
        for i in 0..10u32 {
            assert_eq!(store.get(&format!("tasks/t/1/{i:05}.png")).await.unwrap(), vec![i as u8; 100]);
        }
        assert_eq!(uploader.stats().spooled_bytes, 0);
        cancel.cancel();
        tracker.close();
        tracker.wait().await;
    }

    #[tokio::test]
    async fn spool_bound_flips_spool_full_and_drops_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Flaky::new(dir.path().join("store"), true));
        let tracker = TaskTracker::new();
        let cancel = CancellationToken::new();
        // A queue of 1: everything after the first job goes straight to the spool. Bound: 3 artifacts' worth.
        let uploader = Uploader::start(store.clone(), dir.path().join("spool"), 1, 300, &tracker, cancel.clone());
        assert!(!uploader.spool_full());
        for i in 0..2u32 {
            uploader.submit(format!("tasks/t/1/{i:05}.png"), vec![i as u8; 100].into(), None);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(uploader.stats().spooled_bytes < 300 && !uploader.spool_full(), "{:?}", uploader.stats());
        // Past the bound, submissions are still accepted and spooled: nothing is dropped.
        for i in 2..10u32 {
            uploader.submit(format!("tasks/t/1/{i:05}.png"), vec![i as u8; 100].into(), None);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let stats = uploader.stats();
        assert!(uploader.spool_full() && stats.spool_full, "{stats:?}");
        assert_eq!(stats.spooled_bytes, 1000, "every artifact is spooled, none dropped: {stats:?}");
        assert_eq!(stats.pending, 10);
        store.down.store(false, Ordering::SeqCst);
        assert_eq!(uploader.flush(Duration::from_secs(10)).await, 0);
        assert!(!uploader.spool_full());
        for i in 0..10u32 {
            assert_eq!(store.get(&format!("tasks/t/1/{i:05}.png")).await.unwrap(), vec![i as u8; 100]);
        }
        cancel.cancel();
    }

    #[tokio::test]
    async fn an_outage_costs_one_failed_attempt_not_one_per_artifact() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Flaky::new(dir.path().join("store"), true));
        let tracker = TaskTracker::new();
        let cancel = CancellationToken::new();
        let uploader = Uploader::start(store.clone(), dir.path().join("spool"), 64, u64::MAX, &tracker, cancel.clone());
        uploader.submit("tasks/t/1/00000.png".into(), vec![0u8; 100].into(), None);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while uploader.stats().spooled_bytes == 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let puts_before = store.puts.load(Ordering::SeqCst);
        // The store is known to be failing: the next artifacts are on disk when `submit` returns.
        for i in 1..=20u32 {
            uploader.submit(format!("tasks/t/1/{i:05}.png"), vec![i as u8; 100].into(), None);
        }
        assert_eq!(uploader.stats().spooled_bytes, 2100);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let probes = store.puts.load(Ordering::SeqCst) - puts_before;
        assert!(probes <= 2, "only the spool retrier probes the store, not every artifact ({probes} puts)");
        store.down.store(false, Ordering::SeqCst);
        assert_eq!(uploader.flush(Duration::from_secs(15)).await, 0);
        for i in 0..=20u32 {
            assert_eq!(store.get(&format!("tasks/t/1/{i:05}.png")).await.unwrap(), vec![i as u8; 100]);
        }
        cancel.cancel();
    }

    #[tokio::test]
    async fn a_zero_bound_means_anything_spooled_is_full() {
        let dir = tempfile::tempdir().unwrap();
        write_atomically(&dir.path().join("spool/tasks/t/1/00000.png"), b"x").unwrap();
        let store = Arc::new(Flaky::new(dir.path().join("store"), true));
        let tracker = TaskTracker::new();
        let cancel = CancellationToken::new();
        let uploader = Uploader::start(store.clone(), dir.path().join("spool"), 1, 0, &tracker, cancel.clone());
        assert!(uploader.spool_full(), "leftovers of an earlier run count against the bound");
        store.down.store(false, Ordering::SeqCst);
        assert_eq!(uploader.flush(Duration::from_secs(10)).await, 0);
        assert!(!uploader.spool_full());
        cancel.cancel();
    }

    #[tokio::test]
    async fn spool_left_by_a_crash_is_uploaded_on_start() {
        let dir = tempfile::tempdir().unwrap();
        write_atomically(&dir.path().join("spool/tasks/t/1/00003.png"), b"left").unwrap();
        let store = Arc::new(FsStore::new(dir.path().join("store")));
        let tracker = TaskTracker::new();
        let cancel = CancellationToken::new();
        let uploader = Uploader::start(store.clone(), dir.path().join("spool"), 4, u64::MAX, &tracker, cancel.clone());
        assert_eq!(uploader.flush(Duration::from_secs(10)).await, 0);
        assert_eq!(store.get("tasks/t/1/00003.png").await.unwrap(), b"left");
        cancel.cancel();
    }
}
