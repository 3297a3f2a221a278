//! The filesystem artifact store: one file per key under a root directory, written atomically.

use std::path::{Path, PathBuf};

use async_trait::async_trait;

use super::{ArtifactError, ArtifactStore, Removed, check_key, check_prefix};

pub struct FsStore {
    root: PathBuf,
}

impl FsStore {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file a key is stored in.
    pub fn path_of(&self, key: &str) -> Result<PathBuf, ArtifactError> {
        check_key(key)?;
        Ok(self.root.join(key))
    }
}

fn io_error(key: &str, e: std::io::Error) -> ArtifactError {
    match e.kind() {
        std::io::ErrorKind::NotFound => ArtifactError::NotFound(key.to_string()),
        // A full disk or a permission problem may be fixed by an operator: keep the data and retry.
        _ => ArtifactError::Unavailable(format!("{key}: {e}")),
    }
}

#[async_trait]
impl ArtifactStore for FsStore {
    fn describe(&self) -> String {
        format!("fs:{}", self.root.display())
    }

    async fn put(&self, key: &str, bytes: &[u8], _content_type: &str) -> Result<(), ArtifactError> {
        let path = self.path_of(key)?;
        let bytes = bytes.to_vec();
        let key_owned = key.to_string();
        tokio::task::spawn_blocking(move || write_atomically(&path, &bytes))
            .await
            .map_err(|e| ArtifactError::Failed(e.to_string()))?
            .map_err(|e| io_error(&key_owned, e))
    }

    async fn get(&self, key: &str) -> Result<Vec<u8>, ArtifactError> {
        let path = self.path_of(key)?;
        tokio::fs::read(&path).await.map_err(|e| io_error(key, e))
    }

    fn is_local(&self) -> bool {
        true
    }

    fn url(&self, key: &str) -> String {
        let path = self.root.join(key);
        let absolute = std::path::absolute(&path).unwrap_or(path);
        format!("file://{}", absolute.display())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>, ArtifactError> {
        check_prefix(prefix)?;
        let root = self.root.clone();
        let dir = self.root.join(prefix);
        tokio::task::spawn_blocking(move || walk(&root, &dir))
            .await
            .map_err(|e| ArtifactError::Failed(e.to_string()))?
            .map_err(|e| io_error(prefix, e))
    }

    /// Removes the prefix's directory (listed first, for the count and the bytes).
    async fn delete_prefix(&self, prefix: &str) -> Result<Removed, ArtifactError> {
        check_prefix(prefix)?;
        let root = self.root.clone();
        let dir = self.root.join(prefix);
        tokio::task::spawn_blocking(move || {
            let files = walk(&root, &dir)?;
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            Ok(Removed { objects: files.len() as u64, bytes: files.iter().map(|(_, size)| size).sum() })
        })
        .await
        .map_err(|e| ArtifactError::Failed(e.to_string()))?
        .map_err(|e| io_error(prefix, e))
    }

    /// Writes and removes a probe file under a name of its own (concurrent probes never touch each other's).
    async fn health(&self) -> Result<(), ArtifactError> {
        let root = self.root.clone();
        tokio::task::spawn_blocking(move || {
            create_private_dir_all(&root)?;
            let probe = root.join(format!(".health.{}.{:016x}", std::process::id(), fastrand::u64(..)));
            let written = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&probe)
                .and_then(|mut file| std::io::Write::write_all(&mut file, b"ok"));
            let removed = std::fs::remove_file(&probe);
            written.and(removed)
        })
        .await
        .map_err(|e| ArtifactError::Failed(e.to_string()))?
        .map_err(|e| ArtifactError::Unavailable(format!("{}: {e}", self.root.display())))
    }
}

use crate::private::{create_private_dir_all, write_atomically};

/// The files under `dir` (none when it does not exist) as keys relative to `root`, with their sizes. Symbolic
/// links are listed, never followed.
fn walk(root: &Path, dir: &Path) -> std::io::Result<Vec<(String, u64)>> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_dir() {
                pending.push(entry.path());
            } else if let Ok(relative) = entry.path().strip_prefix(root) {
                files.push((relative.to_string_lossy().into_owned(), meta.len()));
            }
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn put_get_overwrite_and_reject_bad_keys() {
        let dir = tempfile::tempdir().unwrap();
        let store = FsStore::new(dir.path());
        store.health().await.unwrap();
        store.put("tasks/t/1/00000.png", b"one", "image/png").await.unwrap();
        store.put("tasks/t/1/00000.png", b"two", "image/png").await.unwrap();
        assert_eq!(store.get("tasks/t/1/00000.png").await.unwrap(), b"two");
        assert!(matches!(store.get("tasks/t/1/00001.png").await, Err(ArtifactError::NotFound(_))));
        assert!(matches!(store.put("../x", b"", "").await, Err(ArtifactError::InvalidKey(_))));
        assert!(store.url("tasks/t/1/00000.png").starts_with("file:///"));
    }

    #[tokio::test]
    async fn deleting_a_prefix_removes_that_task_only() {
        let dir = tempfile::tempdir().unwrap();
        let store = FsStore::new(dir.path());
        store.put("tasks/a/1/00000.png", b"12345", "image/png").await.unwrap();
        store.put("tasks/a/2/00000.png", b"123", "image/png").await.unwrap();
        store.put("tasks/ab/1/00000.png", b"1", "image/png").await.unwrap();
        let mut listed = store.list("tasks/a/").await.unwrap();
        listed.sort();
        assert_eq!(listed, vec![("tasks/a/1/00000.png".to_string(), 5), ("tasks/a/2/00000.png".to_string(), 3)]);
        assert_eq!(store.list("tasks/").await.unwrap().len(), 3);
        assert_eq!(store.delete_prefix("tasks/a/").await.unwrap(), Removed { objects: 2, bytes: 8 });
        assert_eq!(store.delete_prefix("tasks/a/").await.unwrap(), Removed::default(), "a second time: nothing");
        assert!(store.list("tasks/a/").await.unwrap().is_empty());
        assert_eq!(store.get("tasks/ab/1/00000.png").await.unwrap(), b"1", "a task whose id extends it stays");
        assert!(matches!(store.delete_prefix("tasks/../").await, Err(ArtifactError::InvalidKey(_))));
        assert!(matches!(store.delete_prefix("tasks/a").await, Err(ArtifactError::InvalidKey(_))));
    }

    /// Probes at once (a load balancer and a monitor) must not fail one another, and leave nothing behind.
    #[tokio::test(flavor = "multi_thread", worker_threads = 8)]
    async fn concurrent_health_probes_all_pass() {
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(FsStore::new(dir.path().join("artifacts")));
        let probes = (0..2000).map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.health().await })
        });
        let results = futures_util::future::join_all(probes).await;
        let failed: Vec<String> = results.into_iter().filter_map(|r| r.unwrap().err()).map(|e| e.to_string()).collect();
        assert!(failed.is_empty(), "{} of 2000 probes failed, e.g. {:?}", failed.len(), failed.first());
        assert_eq!(std::fs::read_dir(dir.path().join("artifacts")).unwrap().count(), 0, "no probe file is left");
    }
}
