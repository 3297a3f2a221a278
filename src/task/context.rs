//! `context` (docs/task-file.md): what the model sees of the history — screenshots kept, steps kept verbatim,
//! the token budget, who writes the summary — and `HistoryBudget`, the resolved form.

use serde::{Deserialize, Serialize};

use super::{Bounded, Compaction, Positive};

/// docs/task-file.md `context`: what the model sees of the history — its budget by images, by steps and by estimated
/// tokens, and who writes the summary of the steps that leave it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContextSpec {
    /// How many of the most recent screenshots stay in the model's context (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_screenshots: Option<Positive<u32>>,
    /// At most this many earlier steps stay verbatim in the model's context; older ones are compacted into
    /// the summary (half of them at a time, so a prompt cache stays valid between compactions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_steps: Option<Bounded<u32, 2, 10_000>>,
    /// The estimated prompt (text at 4 characters a token, images by area) stays under this many tokens:
    /// older steps are compacted when it would not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<Bounded<u64, 8_000, 10_000_000>>,
    /// Who writes the summary of compacted steps: `mechanical` (default) or `model` (one extra call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<Compaction>,
}

/// The history budget of a resolved task, beside `keep_screenshots` (the model's context window, from its
/// config, is the last bound).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HistoryBudget {
    /// `context.keep_steps`.
    pub keep_steps: Option<u32>,
    /// `context.max_tokens`.
    pub max_tokens: Option<u64>,
    pub compaction: Compaction,
}

impl ContextSpec {
    pub(super) fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}
