//! The filesystem artifact store: one file per key under a root directory, written atomically.

use std::path::{Path, PathBuf};

use async_trait::async_trait;

use super::{ArtifactError, ArtifactStore, check_key};

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
