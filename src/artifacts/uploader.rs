//! The uploader: stores artifacts beside the agent loop, and never loses one — not to a store outage, and
//! not to a crash.
//!
//! [`Uploader::submit`] first writes the artifact to a local spool directory (mirroring its key; a write to
//! the page cache, not a wait on the store), so that once it returns the artifact survives a SIGKILL of the
//! process: the next start uploads what the spool holds. Then it hands the bytes to one background task
//! that stores them and removes the spool copy. When the in-memory queue is full, or the store fails with a
//! retryable error, the spool copy is what gets stored, by a retrier with backoff. Only a store error that
//! can never succeed (an invalid key) drops an artifact, and that is logged. [`Uploader::flush`] waits until
//! everything submitted is stored; [`Uploader::wait_for_prefix`] until one task's artifacts are. A store on
//! the local disk (`fs`) is written directly instead: it is as durable as the spool would be.
//!
//! While the store is failing (from a retryable failure until the next successful upload), new artifacts
//! stay in the spool instead of queueing in memory behind uploads that would fail too: an outage costs one
//! failed attempt, not one per artifact.
//!
//! The spool has a bound (`artifacts.spool_max_bytes`) on the bytes not yet stored. Past it nothing is
//! dropped — running tasks keep spooling — but [`Uploader::spool_full`] turns true, and the daemon's claim
//! loop takes no new task until the store has caught up.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{ArtifactError, ArtifactStore, check_key, content_type};
use crate::private::write_atomically;

/// Called once an artifact is stored, with its URL.
pub type OnStored = Box<dyn FnOnce(&str) + Send>;

struct Job {
    key: String,
    bytes: Arc<[u8]>,
    /// Whether a spool copy exists (to remove once stored). False only when the spool could not be written.
    spooled: bool,
    /// The `upload` span, a child of the span that submitted the artifact (a step's), until it is stored.
    span: tracing::Span,
}

struct Shared {
    store: Arc<dyn ArtifactStore>,
    spool_dir: PathBuf,
    /// Keys submitted and not yet stored (queued, in flight or only in the spool).
    pending: Mutex<HashSet<String>>,
    /// Keys whose bytes are queued in memory or being uploaded from memory: the spool retrier leaves their
    /// spool copies alone.
    in_memory: Mutex<HashSet<String>>,
    /// Bytes in the spool (written ahead, not yet stored).
    spooled_bytes: AtomicU64,
    /// Set by a retryable store failure, cleared by the next successful upload: while set, artifacts are
    /// only spooled (the spool retrier probes the store).
    store_failing: AtomicBool,
    /// `artifacts.spool_max_bytes`: at or past it, [`Uploader::spool_full`] is true.
    spool_max_bytes: u64,
    upload_errors: AtomicU64,
    /// Wakes `flush` waiters when something was stored, and the spool retrier when something is left to it.
    changed: Notify,
    spool_added: Notify,
    /// Callbacks waiting for their artifact to be stored.
    callbacks: Mutex<HashMap<String, OnStored>>,
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

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
        // Leftovers of an earlier run (a crash, an outage at shutdown) are pending until stored.
        let leftovers = spooled_files(&spool_dir);
        let bytes = leftovers.iter().filter_map(|(_, p)| std::fs::metadata(p).ok()).map(|m| m.len()).sum();
        let shared = Arc::new(Shared {
            store,
            spool_dir,
            pending: Mutex::new(leftovers.into_iter().map(|(key, _)| key).collect()),
            in_memory: Mutex::new(HashSet::new()),
            spooled_bytes: AtomicU64::new(bytes),
            store_failing: AtomicBool::new(false),
            spool_max_bytes,
            upload_errors: AtomicU64::new(0),
            changed: Notify::new(),
            spool_added: Notify::new(),
            callbacks: Mutex::new(HashMap::new()),
            tracker: tracker.clone(),
        });
        tracker.spawn(drain_queue(shared.clone(), rx, cancel.clone()));
        tracker.spawn(retry_spool(shared.clone(), cancel));
        Self { tx, shared }
    }

    /// Hands an artifact over. Returns once it is written to the local spool (so a crash cannot lose it);
    /// never waits on the store. `on_stored` runs with the artifact's URL once the store has it.
    pub async fn submit(&self, key: String, bytes: Arc<[u8]>, on_stored: Option<OnStored>) {
        let shared = &self.shared;
        if let Err(e) = check_key(&key) {
            tracing::error!(%key, error = %e, "artifact dropped: the store can never accept it");
            return;
        }
        lock(&shared.pending).insert(key.clone());
        let span = tracing::info_span!(
            "upload",
            artifact.key = %key,
            artifact.bytes = bytes.len() as i64,
            store = %shared.store.describe(),
            otel.status_code = tracing::field::Empty,
        );
        if let Some(callback) = on_stored {
            lock(&shared.callbacks).insert(key.clone(), callback);
        }
        if shared.store.is_local() && !shared.store_failing.load(Ordering::SeqCst) {
            // A store on this machine's disk is as durable as the spool and as quick to write: store the
            // artifact now, with no spool copy. Only if that fails does it take the spool's way.
            let put = shared.store.put(&key, &bytes, content_type(&key));
            match tracing::Instrument::instrument(put, span.clone()).await {
                Ok(()) => return stored(shared, &key, None).await,
                Err(e) if !e.is_retryable() => return dropped(shared, &key, &e, None).await,
                Err(e) => {
                    shared.upload_errors.fetch_add(1, Ordering::SeqCst);
                    shared.store_failing.store(true, Ordering::SeqCst);
                    tracing::warn!(%key, error = %e, "storing an artifact failed; spooling until the store is back");
                }
            }
        }
        // Claimed for the in-memory path before the spool file exists, so the retrier never uploads it too.
        let failing = shared.store_failing.load(Ordering::SeqCst);
        if !failing {
            lock(&shared.in_memory).insert(key.clone());
        }
        let path = shared.spool_dir.join(&key);
        let to_write = bytes.clone();
        let written = tokio::task::spawn_blocking(move || write_atomically(&path, &to_write))
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))
            .and_then(|r| r);
        let spooled = match written {
            Ok(()) => {
                shared.spooled_bytes.fetch_add(bytes.len() as u64, Ordering::SeqCst);
                true
            }
            Err(e) => {
                tracing::error!(%key, error = %e, "cannot spool artifact; keeping it in memory until stored");
                false
            }
        };
        if failing {
            return self.leave_to_retrier(Job { key, bytes, spooled, span });
        }
        if let Err(mpsc::error::TrySendError::Full(job) | mpsc::error::TrySendError::Closed(job)) =
            self.tx.try_send(Job { key, bytes, spooled, span })
        {
            lock(&shared.in_memory).remove(&job.key);
            self.leave_to_retrier(job);
        }
    }

    fn leave_to_retrier(&self, job: Job) {
        if job.spooled {
            self.shared.spool_added.notify_one();
        } else {
            retry_from_memory(&self.shared, job);
        }
    }

    /// Waits until every submitted artifact is stored, or `timeout` passes. Returns how many are still pending.
    pub async fn flush(&self, timeout: Duration) -> u64 {
        self.wait_until(timeout, |pending| pending.len()).await as u64
    }

    /// Waits until no artifact whose key starts with `prefix` (one task's: `tasks/{id}/`) is pending, or
    /// `timeout` passes. Returns how many are still pending.
    pub async fn wait_for_prefix(&self, prefix: &str, timeout: Duration) -> usize {
        self.wait_until(timeout, |pending| pending.iter().filter(|k| k.starts_with(prefix)).count()).await
    }

    async fn wait_until(&self, timeout: Duration, count: impl Fn(&HashSet<String>) -> usize) -> usize {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.shared.changed.notified();
            let left = count(&lock(&self.shared.pending));
            if left == 0 {
                return 0;
            }
            self.shared.spool_added.notify_one();
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return count(&lock(&self.shared.pending));
            }
        }
    }

    /// Whether the store failed at its last attempt (artifacts are only being spooled).
    pub fn store_failing(&self) -> bool {
        self.shared.store_failing.load(Ordering::SeqCst)
    }

    pub fn stats(&self) -> UploaderStats {
        UploaderStats {
            pending: lock(&self.shared.pending).len() as u64,
            spooled_bytes: self.shared.spooled_bytes.load(Ordering::SeqCst),
            upload_errors: self.shared.upload_errors.load(Ordering::SeqCst),
            spool_full: self.spool_full(),
        }
    }

    /// Whether the spool holds `spool_max_bytes` or more not yet stored (a bound of 0 means: anything).
    /// Nothing is dropped past the bound; the daemon stops taking new tasks until this is false again.
    pub fn spool_full(&self) -> bool {
        self.shared.spooled_bytes.load(Ordering::SeqCst) >= self.shared.spool_max_bytes.max(1)
    }

    pub fn store(&self) -> &Arc<dyn ArtifactStore> {
        &self.shared.store
    }
}

/// The artifact is stored: remove its spool copy, run its callback, wake waiters.
async fn stored(shared: &Shared, key: &str, spool_copy: Option<(&Path, u64)>) {
    if let Some((path, len)) = spool_copy {
        let _ = tokio::fs::remove_file(path).await;
        shared.spooled_bytes.fetch_sub(len, Ordering::SeqCst);
    }
    if shared.store_failing.swap(false, Ordering::SeqCst) {
        tracing::info!(store = %shared.store.describe(), "artifact store reachable again; uploading the spool");
    }
    let callback = lock(&shared.callbacks).remove(key);
    if let Some(callback) = callback {
        callback(&shared.store.url(key));
    }
    lock(&shared.pending).remove(key);
    shared.changed.notify_waiters();
}

async fn dropped(shared: &Shared, key: &str, error: &ArtifactError, spool_copy: Option<(&Path, u64)>) {
    tracing::error!(key, %error, "artifact dropped: the store can never accept it");
    if let Some((path, len)) = spool_copy {
        let _ = tokio::fs::remove_file(path).await;
        shared.spooled_bytes.fetch_sub(len, Ordering::SeqCst);
    }
    lock(&shared.callbacks).remove(key);
    lock(&shared.pending).remove(key);
    shared.changed.notify_waiters();
}

/// The last resort when even the spool cannot be written (disk full): keep retrying the store from memory,
/// so the artifact is never silently lost.
fn retry_from_memory(shared: &Arc<Shared>, job: Job) {
    let shared_for_task = shared.clone();
    shared.tracker.spawn(async move {
        let shared = shared_for_task;
        let mut delay = Duration::from_millis(500);
        loop {
            match shared.store.put(&job.key, &job.bytes, content_type(&job.key)).await {
                Ok(()) => return stored(&shared, &job.key, None).await,
                Err(e) if !e.is_retryable() => return dropped(&shared, &job.key, &e, None).await,
                Err(_) => {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(30));
                }
            }
        }
    });
}

async fn drain_queue(shared: Arc<Shared>, mut rx: mpsc::Receiver<Job>, cancel: CancellationToken) {
    loop {
        let job = tokio::select! {
            job = rx.recv() => match job { Some(job) => job, None => return },
            () = cancel.cancelled() => {
                // Whatever is still queued is in the spool already (or, if the disk failed, lost with the
                // process, which is stopping): the next start stores it.
                rx.close();
                return;
            }
        };
        let path = shared.spool_dir.join(&job.key);
        let spool_copy = job.spooled.then_some((path.as_path(), job.bytes.len() as u64));
        if shared.store_failing.load(Ordering::SeqCst) {
            // The store is down: leave the artifact to the spool retrier, which probes the store.
            lock(&shared.in_memory).remove(&job.key);
            hand_back(&shared, job);
            continue;
        }
        let put = shared.store.put(&job.key, &job.bytes, content_type(&job.key));
        let result = tracing::Instrument::instrument(put, job.span.clone()).await;
        if result.is_err() {
            job.span.record("otel.status_code", "ERROR");
        }
        match result {
            Ok(()) => {
                stored(&shared, &job.key, spool_copy).await;
                lock(&shared.in_memory).remove(&job.key);
            }
            Err(e) if e.is_retryable() => {
                shared.upload_errors.fetch_add(1, Ordering::SeqCst);
                if !shared.store_failing.swap(true, Ordering::SeqCst) {
                    tracing::warn!(key = %job.key, error = %e, "upload failed; spooling artifacts until the store is back");
                }
                lock(&shared.in_memory).remove(&job.key);
                hand_back(&shared, job);
            }
            Err(e) => {
                shared.upload_errors.fetch_add(1, Ordering::SeqCst);
                dropped(&shared, &job.key, &e, spool_copy).await;
                lock(&shared.in_memory).remove(&job.key);
            }
        }
    }
}

/// An artifact the in-memory path gives up on goes to the spool retrier (or, without a spool copy, to a
/// retry from memory).
fn hand_back(shared: &Arc<Shared>, job: Job) {
    if job.spooled {
        shared.spool_added.notify_one();
    } else {
        retry_from_memory(shared, job);
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
            if lock(&shared.in_memory).contains(&key) {
                continue;
            }
            let Ok(bytes) = tokio::fs::read(&path).await else {
                continue;
            };
            let spool_copy = Some((path.as_path(), bytes.len() as u64));
            match shared.store.put(&key, &bytes, content_type(&key)).await {
                Ok(()) => stored(&shared, &key, spool_copy).await,
                Err(e) if e.is_retryable() => {
                    shared.upload_errors.fetch_add(1, Ordering::SeqCst);
                    shared.store_failing.store(true, Ordering::SeqCst);
                    tracing::debug!(%key, error = %e, "spooled upload failed; will retry");
                    failed = true;
                    break;
                }
                Err(e) => dropped(&shared, &key, &e, spool_copy).await,
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
        async fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>, ArtifactError> {
            self.inner.list(prefix).await
        }
        async fn delete_prefix(&self, prefix: &str) -> Result<super::super::Removed, ArtifactError> {
            self.inner.delete_prefix(prefix).await
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
            uploader
                .submit(
                    format!("tasks/t/1/{i:05}.png"),
                    vec![i as u8; 100].into(),
                    Some(Box::new(move |_| {
                        stored.fetch_add(1, Ordering::SeqCst);
                    })),
                )
                .await;
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
            uploader.submit(format!("tasks/t/1/{i:05}.png"), vec![i as u8; 100].into(), None).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(uploader.stats().spooled_bytes < 300 && !uploader.spool_full(), "{:?}", uploader.stats());
        // Past the bound, submissions are still accepted and spooled: nothing is dropped.
        for i in 2..10u32 {
            uploader.submit(format!("tasks/t/1/{i:05}.png"), vec![i as u8; 100].into(), None).await;
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
        uploader.submit("tasks/t/1/00000.png".into(), vec![0u8; 100].into(), None).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while uploader.stats().spooled_bytes == 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let puts_before = store.puts.load(Ordering::SeqCst);
        // The store is known to be failing: the next artifacts are on disk when `submit` returns.
        for i in 1..=20u32 {
            uploader.submit(format!("tasks/t/1/{i:05}.png"), vec![i as u8; 100].into(), None).await;
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
    async fn a_submitted_artifact_survives_the_process_dying_before_the_upload() {
        let dir = tempfile::tempdir().unwrap();
        // A store that never answers: the upload is in flight forever, as at a SIGKILL.
        struct Hangs;
        #[async_trait]
        impl ArtifactStore for Hangs {
            fn describe(&self) -> String {
                "hangs".into()
            }
            async fn put(&self, _: &str, _: &[u8], _: &str) -> Result<(), ArtifactError> {
                std::future::pending().await
            }
            async fn get(&self, key: &str) -> Result<Vec<u8>, ArtifactError> {
                Err(ArtifactError::NotFound(key.into()))
            }
            fn url(&self, key: &str) -> String {
                key.into()
            }
            async fn health(&self) -> Result<(), ArtifactError> {
                Ok(())
            }
            async fn list(&self, _: &str) -> Result<Vec<(String, u64)>, ArtifactError> {
                std::future::pending().await
            }
            async fn delete_prefix(&self, _: &str) -> Result<super::super::Removed, ArtifactError> {
                std::future::pending().await
            }
        }
        let tracker = TaskTracker::new();
        let cancel = CancellationToken::new();
        let uploader =
            Uploader::start(Arc::new(Hangs), dir.path().join("spool"), 8, u64::MAX, &tracker, cancel.clone());
        uploader.submit("tasks/t/1/00007.png".into(), b"seven".to_vec().into(), None).await;
        // The process "dies" here: nothing more runs. A new start with a working store finds the artifact.
        drop(uploader);
        let store = Arc::new(FsStore::new(dir.path().join("store")));
        let tracker = TaskTracker::new();
        let uploader =
            Uploader::start(store.clone(), dir.path().join("spool"), 8, u64::MAX, &tracker, cancel.child_token());
        assert_eq!(uploader.stats().pending, 1);
        assert_eq!(uploader.flush(Duration::from_secs(10)).await, 0);
        assert_eq!(store.get("tasks/t/1/00007.png").await.unwrap(), b"seven");
        cancel.cancel();
    }

    #[tokio::test]
    async fn waiting_for_one_tasks_artifacts_ignores_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Flaky::new(dir.path().join("store"), false));
        let tracker = TaskTracker::new();
        let cancel = CancellationToken::new();
        let uploader = Uploader::start(store.clone(), dir.path().join("spool"), 8, u64::MAX, &tracker, cancel.clone());
        uploader.submit("tasks/a/1/00000.png".into(), b"a".to_vec().into(), None).await;
        assert_eq!(uploader.wait_for_prefix("tasks/a/", Duration::from_secs(10)).await, 0);
        store.down.store(true, Ordering::SeqCst);
        uploader.submit("tasks/b/1/00000.png".into(), b"b".to_vec().into(), None).await;
        uploader.submit("tasks/a/1/00001.png".into(), b"a".to_vec().into(), None).await;
        assert_eq!(uploader.wait_for_prefix("tasks/b/", Duration::from_millis(200)).await, 1);
        assert_eq!(uploader.stats().pending, 2);
        store.down.store(false, Ordering::SeqCst);
        assert_eq!(uploader.wait_for_prefix("tasks/a/", Duration::from_secs(20)).await, 0);
        assert_eq!(uploader.flush(Duration::from_secs(20)).await, 0);
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
