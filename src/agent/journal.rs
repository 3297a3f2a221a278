//! The step journal boundary: where the loop records each step before its actions run and after.
//!
//! A task resumed after a crash starts from what the journal holds; a write the journal refuses because the
//! worker lost its lease (the fencing token no longer matches) stops the loop before it acts again.

use std::sync::Mutex;

use async_trait::async_trait;
use thiserror::Error;

use crate::record::StepRecord;

#[derive(Debug, Error)]
pub enum JournalError {
    /// This worker no longer holds the task; it must stop acting at once.
    #[error("lease lost: {0}")]
    LeaseLost(String),
    #[error("journal unavailable: {0}")]
    Unavailable(String),
}

#[async_trait]
pub trait Journal: Send + Sync {
    /// Records `step` (a second call for the same index replaces the first).
    async fn record_step(&self, step: &StepRecord) -> Result<(), JournalError>;
}

/// A journal kept in memory (for `agentd run` and embedding): nothing survives the process.
#[derive(Default)]
pub struct MemoryJournal {
    steps: Mutex<Vec<StepRecord>>,
}

impl MemoryJournal {
    pub fn steps(&self) -> Vec<StepRecord> {
        self.steps.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

#[async_trait]
impl Journal for MemoryJournal {
    async fn record_step(&self, step: &StepRecord) -> Result<(), JournalError> {
        let mut steps = self.steps.lock().map_err(|_| JournalError::Unavailable("poisoned".into()))?;
        match steps.iter_mut().find(|s| s.index == step.index) {
            Some(existing) => *existing = step.clone(),
            None => steps.push(step.clone()),
        }
        Ok(())
    }
}
