//! `[artifacts]` and `[retention]`: where screenshots and other artifacts are stored (a directory or S3) with
//! the local spool's bound, and how long finished tasks are kept (docs/operations.md).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ArtifactsBackend {
    #[default]
    Fs,
    S3,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ArtifactsConfig {
    pub backend: ArtifactsBackend,
    /// For `fs`: the directory (default `data_dir/artifacts`).
    pub dir: Option<PathBuf>,
    pub bucket: Option<String>,
    pub prefix: String,
    pub region: Option<String>,
    /// An S3-compatible endpoint URL (MinIO, Ceph, moto).
    pub endpoint: Option<String>,
    pub force_path_style: bool,
    /// `when_supported` (default) or `when_required`, for stores that reject the newer default checksums.
    pub checksum: String,
    /// Lifetime of presigned URLs in status documents.
    pub presign_secs: u64,
    /// Largest spool of not-yet-uploaded artifacts; past it the worker stops taking new tasks.
    pub spool_max_bytes: u64,
}

impl Default for ArtifactsConfig {
    fn default() -> Self {
        Self {
            backend: ArtifactsBackend::Fs,
            dir: None,
            bucket: None,
            prefix: String::new(),
            region: None,
            endpoint: None,
            force_path_style: false,
            checksum: "when_supported".into(),
            presign_secs: 3600,
            spool_max_bytes: 512 * 1024 * 1024,
        }
    }
}

/// `[retention]` (docs/operations.md): finished tasks older than `finished_days` are deleted with their steps, events
/// and
/// artifacts by the daemon in the background, `batch` tasks at a time, every `interval_secs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Days a finished task (succeeded, failed, cancelled) is kept after it finished; 0 keeps them forever.
    pub finished_days: u32,
    /// Seconds between two rounds of the background job (it also runs once at start).
    pub interval_secs: u64,
    /// Tasks deleted per batch; the job yields between batches.
    pub batch: u32,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self { finished_days: 30, interval_secs: 300, batch: 100 }
    }
}
