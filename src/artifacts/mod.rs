//! Artifact storage (docs/operations.md): where step screenshots go, under deterministic keys.
//!
//! [`ArtifactStore`] is the IO boundary (a directory, an S3 bucket); [`Uploader`] runs beside the agent loop
//! so a slow or failing store never stalls a step, and spools to local disk what it could not store yet.

pub mod fs;
#[cfg(feature = "s3")]
pub mod s3;
pub mod uploader;

use async_trait::async_trait;
use thiserror::Error;

pub use fs::FsStore;
pub use uploader::Uploader;

/// `tasks/{task_id}/{attempt}/{step:05}.{ext}` — a re-upload of the same step overwrites, never duplicates.
pub fn artifact_key(task_id: &str, attempt: u32, step: u32, extension: &str) -> String {
    format!("{}{step:05}.{extension}", attempt_prefix(task_id, attempt))
}

/// `tasks/{task_id}/{attempt}/{step:05}-proposed.png` — a step's screenshot with the actions an approval rule
/// held drawn on it (docs/humans.md).
pub fn proposed_key(task_id: &str, attempt: u32, step: u32) -> String {
    format!("{}{step:05}-proposed.png", attempt_prefix(task_id, attempt))
}

/// `tasks/{task_id}/{attempt}/verify-{round}-{check}.png` — the crop a `screen` verifier check
/// (docs/replay-and-verify.md) saved in
/// one round (`check` counts from 0 in the task's `verify`).
pub fn verify_crop_key(task_id: &str, attempt: u32, round: u32, check: usize) -> String {
    format!("{}verify-{round}-{check}.png", attempt_prefix(task_id, attempt))
}

/// `tasks/{task_id}/{attempt}/downloads/{name}` — a file the computer downloaded (a browser's download),
/// `name` made safe for any store: letters, digits, `.`, `-`, `_` kept, anything else `_`, no leading dot, at
/// most 120 characters (`download` when nothing is left).
pub fn download_key(task_id: &str, attempt: u32, name: &str) -> String {
    format!("{}downloads/{}", attempt_prefix(task_id, attempt), safe_file_name(name))
}

/// A downloaded file's name as it is stored (see [`download_key`]).
pub fn safe_file_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') { c } else { '_' })
        .take(120)
        .collect();
    let cleaned = cleaned.trim_start_matches('.').to_string();
    if cleaned.is_empty() { "download".to_string() } else { cleaned }
}

/// The key prefix of every artifact of a task, all attempts (`tasks/{task_id}/`).
pub fn task_prefix(task_id: &str) -> String {
    format!("tasks/{task_id}/")
}

/// The key prefix of one attempt's artifacts (`tasks/{task_id}/{attempt}/`).
pub fn attempt_prefix(task_id: &str, attempt: u32) -> String {
    format!("{}{attempt}/", task_prefix(task_id))
}

/// The content type for an artifact key, from its extension.
pub fn content_type(key: &str) -> &'static str {
    match key.rsplit('.').next() {
        Some("png") => "image/png",
        Some("webp") => "image/webp",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("json") => "application/json",
        _ => "application/octet-stream",
    }
}

#[derive(Debug, Error)]
pub enum ArtifactError {
    #[error("artifact {0} not found")]
    NotFound(String),
    #[error("invalid artifact key {0:?}")]
    InvalidKey(String),
    /// The store cannot be reached now; the upload will be retried.
    #[error("artifact store unavailable: {0}")]
    Unavailable(String),
    #[error("artifact store error: {0}")]
    Failed(String),
}

impl ArtifactError {
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}

/// Somewhere artifacts can be stored and read back.
#[async_trait]
pub trait ArtifactStore: Send + Sync {
    /// For logs and `config check` (`fs:/var/lib/agentd/artifacts`, `s3://bucket/prefix`).
    fn describe(&self) -> String;

    /// Stores `bytes` under `key`, replacing what was there.
    async fn put(&self, key: &str, bytes: &[u8], content_type: &str) -> Result<(), ArtifactError>;

    async fn get(&self, key: &str) -> Result<Vec<u8>, ArtifactError>;

    /// The artifact's stable URL (`file://…`, `s3://bucket/prefix/key`): what step records and events keep.
    /// Never signed, never expiring.
    fn url(&self, key: &str) -> String;

    /// A URL a client can open to fetch the artifact now (a presigned HTTPS URL for S3). Status documents
    /// carry these; they are never stored.
    async fn shareable_url(&self, key: &str) -> Result<String, ArtifactError> {
        Ok(self.url(key))
    }

    async fn health(&self) -> Result<(), ArtifactError>;

    /// Every artifact whose key starts with `prefix` (`tasks/{id}/`, or `tasks/` for all), with its size in
    /// bytes, in no particular order.
    async fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>, ArtifactError>;

    /// Deletes every artifact whose key starts with `prefix` (retention, docs/operations.md); nothing there is no
    /// error.
    async fn delete_prefix(&self, prefix: &str) -> Result<Removed, ArtifactError>;

    /// Whether the store is this machine's disk: then a `put` is as durable and as quick as spooling, and the
    /// uploader writes to it directly.
    fn is_local(&self) -> bool {
        false
    }
}

/// What deleting artifacts removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Removed {
    pub objects: u64,
    pub bytes: u64,
}

impl std::ops::AddAssign for Removed {
    fn add_assign(&mut self, other: Self) {
        self.objects += other.objects;
        self.bytes += other.bytes;
    }
}

/// Rejects a key prefix that is not a run of whole key segments ending in `/` (`tasks/abc/`).
pub fn check_prefix(prefix: &str) -> Result<(), ArtifactError> {
    match prefix.strip_suffix('/') {
        Some(segments) => check_key(segments),
        None => Err(ArtifactError::InvalidKey(prefix.to_string())),
    }
}

/// Rejects keys that could escape a directory or confuse a store.
pub fn check_key(key: &str) -> Result<(), ArtifactError> {
    let bad = key.is_empty()
        || key.starts_with('/')
        || key.contains('\\')
        || key.split('/').any(|part| part.is_empty() || part == "." || part == "..");
    if bad { Err(ArtifactError::InvalidKey(key.to_string())) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_deterministic_and_checked() {
        assert_eq!(artifact_key("abc", 2, 7, "png"), "tasks/abc/2/00007.png");
        assert!(check_key("tasks/abc/2/00007.png").is_ok());
        for bad in ["", "/etc/passwd", "tasks/../x", "tasks//x", "a\\b", "./x"] {
            assert!(check_key(bad).is_err(), "{bad}");
        }
        assert_eq!(download_key("abc", 1, "report.pdf"), "tasks/abc/1/downloads/report.pdf");
        assert_eq!(download_key("abc", 1, "../../etc/passwd"), "tasks/abc/1/downloads/_.._etc_passwd");
        assert_eq!(download_key("abc", 1, ".."), "tasks/abc/1/downloads/download");
        assert_eq!(download_key("abc", 1, "Bericht März 2026.xlsx"), "tasks/abc/1/downloads/Bericht_M_rz_2026.xlsx");
        for name in ["", ".", "/", "a/../b", "x\\y", "\u{0}"] {
            assert!(check_key(&download_key("abc", 1, name)).is_ok(), "{name:?}");
        }
        assert_eq!(content_type("x/00001.png"), "image/png");
        assert!(check_prefix(&task_prefix("abc")).is_ok());
        assert!(check_prefix("tasks/").is_ok());
        for bad in ["", "/", "tasks", "tasks/../", "/tasks/", "tasks//"] {
            assert!(check_prefix(bad).is_err(), "{bad}");
        }
    }
}
