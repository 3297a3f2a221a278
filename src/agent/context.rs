//! The context policy: which screenshots of the history the model still sees.
//!
//! Screenshots beyond the most recent `keep` are dropped from the model's context (their bytes are freed;
//! adapters show a short placeholder in their place); every one of them stays in the task record. Dropping
//! happens in chunks of `chunk` images, as Anthropic's reference loop does, so a prompt-cache prefix stays
//! valid for several turns instead of shifting every turn. With `chunk = 1` exactly `keep` images remain.
//!
//! Compaction ([`compact`]): when the estimated prompt nears the model's context window (75 %), the oldest
//! half of the exchanges leave the history and a plain-text summary of them (what the model said, the
//! actions, the results) takes their place after the instructions. Whole exchanges go, so every tool call the
//! model still sees keeps its answer. The summary is mechanical (no extra model call), so it costs nothing
//! and cannot fail.

use crate::model::{CallKind, Exchange};

/// What adapters put where a dropped screenshot was.

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

/// Compaction starts when the estimate passes this share of the context window.
pub const COMPACT_AT: f64 = 0.75;

/// A rough prompt-size estimate: 4 characters a token for text, `w·h/750` per image, and a fixed allowance
/// for the system prompt, tool definitions and the current screenshot.
pub fn estimate_tokens(history: &[Exchange], summary: Option<&str>, instructions: &str) -> u64 {
    const FIXED: u64 = 4_000;
    let text = |s: &str| (s.len() as u64).div_ceil(4);
    let mut total = FIXED + text(instructions) + summary.map_or(0, text);
    for exchange in history {
        if let Some(image) = &exchange.screenshot {
            total += (image.size.area() / 750).max(1);
        }
        total += text(&exchange.turn.text) + text(&exchange.turn.thinking);
        total += exchange.turn.raw.as_ref().map_or(0, |raw| text(&raw.to_string()) / 2);
        for result in &exchange.results {
            total += text(&result.message) + 10;
            if let Some(image) = &result.image {
                total += (image.size.area() / 750).max(1);
            }
        }
    }
    total
}

/// Summarises and removes the oldest half of `history` while the estimate is over [`COMPACT_AT`] of
/// `window` (keeping at least the 2 newest exchanges). Returns how many exchanges were compacted.
pub fn compact(history: &mut Vec<Exchange>, summary: &mut Option<String>, window: u64, instructions: &str) -> usize {
    let limit = (window as f64 * COMPACT_AT) as u64;
    let mut compacted = 0;
    while history.len() > 2 && estimate_tokens(history, summary.as_deref(), instructions) > limit {
        let take = (history.len() / 2).max(1).min(history.len() - 2);
        let lines: Vec<String> = history.drain(..take).map(|e| summarize(&e)).collect();
        let text = summary.get_or_insert_with(String::new);
        for line in lines {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&line);
        }
        compacted += take;
    }
    compacted
}

fn clip(text: &str, max: usize) -> String {
    let text = text.trim().replace('\n', " ");
    if text.chars().count() <= max { text } else { format!("{}…", text.chars().take(max).collect::<String>()) }
}

/// One line per exchange: `Step N: said "…"; did …; result …`.
fn summarize(exchange: &Exchange) -> String {
    let mut parts = vec![format!("Step {}", exchange.step + 1)];
    if !exchange.turn.text.trim().is_empty() {
        parts.push(format!("you said \"{}\"", clip(&exchange.turn.text, 200)));
    }
    for call in &exchange.turn.calls {
        let what = match &call.kind {
            CallKind::Computer { actions } => actions.iter().map(|a| a.summary()).collect::<Vec<_>>().join(", "),
            CallKind::Function { name, arguments } => format!("{name}({})", clip(&arguments.to_string(), 100)),
        };
        let result = exchange.results.iter().find(|r| r.call_id == call.id);
        let outcome = match result {
            Some(r) if r.ok => "ok".to_string(),
            Some(r) => format!("failed: {}", clip(&r.message, 120)),
            None => "no result".to_string(),
        };
        parts.push(format!("did {what} ({outcome})"));
    }
    parts.join("; ")
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
    fn compaction_summarises_the_oldest_half_near_the_window() {
        let mut h = history(40);
        for e in &mut h {
            e.turn.text = "x".repeat(4_000);
        }
        let mut summary = None;
        let before = estimate_tokens(&h, None, "task");
        assert!(before > 40_000);
        let n = compact(&mut h, &mut summary, 40_000, "task");
        assert!(n >= 20 && h.len() >= 2, "{n} {}", h.len());
        assert!(estimate_tokens(&h, summary.as_deref(), "task") <= 30_000);
        let summary = summary.unwrap();
        assert!(summary.starts_with("Step 1; you said"), "{summary}");
        assert_eq!(h[0].step as usize, n);
        // Far from the window nothing happens.
        let mut h = history(3);
        assert_eq!(compact(&mut h, &mut None, 1_000_000, "task"), 0);
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
