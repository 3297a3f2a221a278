//! The validated names a task file gives: `TaskId` (a client-chosen id, safe in keys and file names) and
//! `LabelKey` (the keys of `labels`).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

/// A client-chosen task id: 1–128 characters of `[A-Za-z0-9._-]`, not starting with `.` (ids become parts of
/// artifact keys and file names, so nothing that could climb out of a directory is accepted).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct TaskId(String);

impl TaskId {
    pub fn parse(s: &str) -> Result<Self, String> {
        let ok_chars = s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if s.is_empty() || s.len() > 128 || !ok_chars || s.starts_with('.') {
            return Err(format!(
                "invalid task id {s:?}: use 1-128 characters of A-Z a-z 0-9 . _ - (not starting with '.')"
            ));
        }
        Ok(Self(s.to_string()))
    }

    /// A fresh id for a task submitted without one (time-ordered UUIDv7).
    pub fn generate() -> Self {
        Self(uuid::Uuid::now_v7().to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for TaskId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        TaskId::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A label key: 1–63 characters of `[A-Za-z0-9._/-]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct LabelKey(String);

impl LabelKey {
    pub fn parse(s: &str) -> Result<Self, String> {
        let ok_chars = s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'));
        if s.is_empty() || s.len() > 63 || !ok_chars {
            return Err(format!("invalid label key {s:?}: use 1-63 characters of A-Z a-z 0-9 . _ - /"));
        }
        Ok(Self(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for LabelKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        LabelKey::parse(&s).map_err(serde::de::Error::custom)
    }
}
