//! The context policy: which screenshots of the history the model still sees.
//!
//! Screenshots beyond the most recent `keep` are dropped from the model's context (their bytes are freed;
//! adapters show a short placeholder in their place); every one of them stays in the task record. Dropping
//! happens in chunks of `chunk` images, as Anthropic's reference loop does, so a prompt-cache prefix stays
//! valid for several turns instead of shifting every turn. With `chunk = 1` exactly `keep` images remain.

use crate::model::Exchange;

/// What adapters put where a dropped screenshot was.
pub const SCREENSHOT_PLACEHOLDER: &str = "[screenshot omitted to save context]";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextPolicy {
    /// Screenshots kept, counting the current one. At least 1.
    pub keep: u32,
    /// Drop in multiples of this many images. At least 1.
    pub chunk: u32,
}

impl ContextPolicy {
    pub fn new(keep: u32, chunk: u32) -> Self {
        Self { keep: keep.max(1), chunk: chunk.max(1) }
    }

    /// Frees the oldest screenshots of `history` so that, with the current screenshot, at most `keep`
    /// (plus less than one chunk) remain. Returns how many were dropped.
    pub fn apply(&self, history: &mut [Exchange]) -> usize {
        let held = history.iter().filter(|e| e.screenshot.is_some()).count() + 1;
        let excess = held.saturating_sub(self.keep as usize);
        let to_drop = excess - excess % self.chunk as usize;
        let mut dropped = 0;
        for exchange in history.iter_mut() {
            if dropped == to_drop {
                break;
            }
            if exchange.screenshot.take().is_some() {
                dropped += 1;
            }
        }
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ModelImage, ModelTurn};
    use agentd_computer::Size;

    fn history(n: u32) -> Vec<Exchange> {
        (0..n)
            .map(|step| Exchange {
                step,
                screenshot: Some(ModelImage::new(Size::new(1, 1), "image/png", vec![0u8].into())),
                notes: vec![],
                turn: ModelTurn::default(),
                results: vec![],
            })
            .collect()
    }

    fn held(h: &[Exchange]) -> Vec<u32> {
        h.iter().filter(|e| e.screenshot.is_some()).map(|e| e.step).collect()
    }

    #[test]
    fn keeps_the_most_recent() {
        let mut h = history(10);
        assert_eq!(ContextPolicy::new(3, 1).apply(&mut h), 8);
        assert_eq!(held(&h), vec![8, 9]);
        // Applying again is a no-op.
        assert_eq!(ContextPolicy::new(3, 1).apply(&mut h), 0);
    }

    #[test]
    fn drops_in_chunks() {
        let policy = ContextPolicy::new(3, 4);
        let mut h = history(5); // 6 images with the current one: 3 too many, less than a chunk.
        assert_eq!(policy.apply(&mut h), 0);
        let mut h = history(6); // 7 images: 4 too many, one chunk.
        assert_eq!(policy.apply(&mut h), 4);
        assert_eq!(held(&h), vec![4, 5]);
    }
}
