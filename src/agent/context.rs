//! The history budget: what of the history the model still sees.
//!
//! Images ([`ContextPolicy`]): screenshots beyond the most recent `keep` are dropped from the model's context
//! (their bytes are freed; adapters show a short placeholder in their place); every one of them stays in the
//! task record. Dropping happens in chunks of `chunk` images, as Anthropic's reference loop does, so a
//! prompt-cache prefix stays valid for several turns instead of shifting every turn. With `chunk = 1` exactly
//! `keep` images remain; with `keep = 1` there is no chunk (see [`ContextPolicy::new`]).
//!
//! Steps and tokens ([`Budget`]): when the history holds more than `keep_steps` exchanges, or the estimated
//! prompt ([`estimate_tokens`]) passes `max_tokens` or [`COMPACT_AT`] of the model's context window, the
//! oldest exchanges leave the history ([`Budget::plan`] says how many: half of the kept steps at a time, so
//! the prompt changes in chunks, not every turn) and a plain-text summary of them takes their place after the
//! instructions. Whole exchanges go, so every tool call the model still sees keeps its answer. The summary is
//! [`mechanical`] (one line per step: what the model said, the actions, the results — no model call, so it
//! costs nothing and cannot fail) or written by the model in one extra call (the loop makes it, with
//! [`SUMMARY_REQUEST`]); either way it is bounded by [`SUMMARY_MAX_CHARS`], so a long task's prompt stays
//! flat.
//!
//! Both kinds of change rewrite the prompt cache from where they change the prompt on, so they are made
//! together: a compaction due within the next image chunk comes forward to the call that drops the chunk
//! ([`Budget::plan_ahead`]), and a compaction drops the screenshots beyond `keep` at once.

use crate::model::{CallKind, Exchange};
use crate::record::CompactionReason;

/// What adapters put where a dropped screenshot was.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextPolicy {
    /// Screenshots kept, counting the current one. At least 1.
    pub keep: u32,
    /// Drop in multiples of this many images. At least 1.
    pub chunk: u32,
}

impl ContextPolicy {
    /// With `keep` 1 there is no chunk: the one screenshot kept is the current one, new in every request, so
    /// a drop never rewrites a cached screenshot (only the short placeholder text after the prompt cache's
    /// last hit), and holding older ones until a chunk is full would only add to the prompt.
    pub fn new(keep: u32, chunk: u32) -> Self {
        let keep = keep.max(1);
        Self { keep, chunk: if keep == 1 { 1 } else { chunk.max(1) } }
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

/// The longest summary the model is shown: older lines of a mechanical summary give way to newer ones, a
/// model-written summary is cut.
pub const SUMMARY_MAX_CHARS: usize = 2_400;

/// What the model is asked, after the exchanges to compact, for a model-written summary.
pub const SUMMARY_REQUEST: &str = "Context compaction: do not act and do not call any tool in this reply. The steps above are about to leave your context. Write a concise summary of them (and of the earlier summary, if there is one) for yourself: what was done, what was found (names, values, states of the screen), and what remains to be done. At most 150 words, plain text only.";

/// The first line of a mechanical summary whose oldest lines gave way.
const OMITTED: &str = "(older steps omitted)";

/// The history budget beside the images: steps kept verbatim, estimated tokens, the model's window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Budget {
    /// At most this many exchanges stay; beyond it the oldest leave, down to half of it.
    pub keep_steps: Option<u32>,
    /// The estimated prompt stays under this.
    pub max_tokens: Option<u64>,
    /// The model's context window: the estimate stays under [`COMPACT_AT`] of it.
    pub window: Option<u64>,
}

/// What a compaction is to do: how many of the oldest exchanges leave, and which budget asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub take: usize,
    pub reason: CompactionReason,
    /// The estimated prompt before.
    pub tokens_before: u64,
}

impl Budget {
    /// The token limit and which budget sets it (the lower of `max_tokens` and the window's share).
    fn token_limit(&self) -> Option<(u64, CompactionReason)> {
        let window = self.window.map(|w| ((w as f64 * COMPACT_AT) as u64, CompactionReason::Window));
        let tokens = self.max_tokens.map(|t| (t, CompactionReason::Tokens));
        match (tokens, window) {
            (Some(t), Some(w)) => Some(if w.0 < t.0 { w } else { t }),
            (t, w) => t.or(w),
        }
    }

    /// How many of the oldest exchanges must leave `history` for the next request to keep the budget, or
    /// `None` when it keeps it as it is: beyond `keep_steps`, down to half of it; over the token limit, down
    /// to 90 % of it. At least one exchange (two for the token limit) always stays.
    pub fn plan(&self, history: &[Exchange], summary: Option<&str>, instructions: &str) -> Option<Plan> {
        self.plan_ahead(history, summary, instructions, 0)
    }

    /// [`Budget::plan`], brought forward by up to `ahead` steps: a compaction that the next `ahead` steps
    /// would need (the step budget passed, or the token limit at the history's mean growth a step) happens
    /// now. The loop passes the image chunk less one on a call that drops a chunk of screenshots, so a
    /// compaction rides on the prompt-cache rewrite the drop causes anyway instead of causing one of its own
    /// a step or two later; 0 otherwise. Never later than [`Budget::plan`]: what it compacts, `plan` would
    /// compact by then. `ahead` counts at most half of `keep_steps`, so a compaction is not followed by
    /// another at once.
    pub fn plan_ahead(
        &self,
        history: &[Exchange],
        summary: Option<&str>,
        instructions: &str,
        ahead: usize,
    ) -> Option<Plan> {
        let len = history.len();
        let tokens_before = estimate_tokens(history, summary, instructions);
        let mut take = 0;
        let mut reason = None;
        if let Some(keep) = self.keep_steps.map(|k| k.max(1) as usize)
            && len + ahead.min(keep / 2) > keep
        {
            take = len.saturating_sub((keep / 2).max(1));
            reason = Some(CompactionReason::Steps);
        }
        if let Some((limit, why)) = self.token_limit() {
            let summary_chars = summary.map_or(0, str::len);
            // The summary grows by about a line a compacted step, and never past its bound.
            let after = |take: usize| {
                let grown = (summary_chars + take * 160).min(SUMMARY_MAX_CHARS.max(summary_chars));
                estimate_tokens(&history[take..], None, instructions) + (grown as u64).div_ceil(4)
            };
            let floor = 2.min(len);
            // What the history adds a step on average, `ahead` times over.
            let fixed = estimate_tokens(&[], summary, instructions);
            let early = ((tokens_before.saturating_sub(fixed) / len.max(1) as u64) * ahead as u64).min(limit / 10);
            if take < len - floor && after(take) > limit.saturating_sub(early) {
                reason = Some(why);
                // Down to 90 % of the limit: the prompt stays near the budget, and changes only every few steps.
                let target = limit - limit / 10;
                while take < len - floor && after(take) > target {
                    take = (take + ((len - take) / 2).max(1)).min(len - floor);
                }
            }
        }
        reason.filter(|_| take > 0).map(|reason| Plan { take, reason, tokens_before })
    }
}

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

/// The summary after `old` leaves the history: the earlier one with a line per exchange of `old` appended,
/// its oldest lines giving way beyond [`SUMMARY_MAX_CHARS`].
pub fn mechanical(summary: Option<&str>, old: &[Exchange]) -> String {
    let mut lines: Vec<String> =
        summary.into_iter().flat_map(str::lines).filter(|l| *l != OMITTED).map(str::to_string).collect();
    let mut omitted = summary.is_some_and(|s| s.starts_with(OMITTED));
    lines.extend(old.iter().map(summarize));
    let mut chars: usize = lines.iter().map(|l| l.len() + 1).sum();
    while lines.len() > 1 && chars > SUMMARY_MAX_CHARS - OMITTED.len() - 1 {
        chars -= lines.remove(0).len() + 1;
        omitted = true;
    }
    if omitted {
        lines.insert(0, OMITTED.to_string());
    }
    lines.join("\n")
}

/// A model-written summary, bounded like a mechanical one.
pub fn bounded(text: &str) -> String {
    let text = text.trim();
    if text.len() <= SUMMARY_MAX_CHARS {
        return text.to_string();
    }
    let mut end = SUMMARY_MAX_CHARS - 3;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
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
                page: None,
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

    /// Runs the plan with the mechanical summary, as the loop does.
    fn compact(h: &mut Vec<Exchange>, summary: &mut Option<String>, budget: Budget) -> Option<Plan> {
        let plan = budget.plan(h, summary.as_deref(), "task")?;
        let old: Vec<Exchange> = h.drain(..plan.take).collect();
        *summary = Some(mechanical(summary.as_deref(), &old));
        Some(plan)
    }

    fn window(w: u64) -> Budget {
        Budget { window: Some(w), ..Budget::default() }
    }

    #[test]
    fn compaction_summarises_the_oldest_near_the_window() {
        let mut h = history(40);
        for e in &mut h {
            e.turn.text = "x".repeat(4_000);
        }
        let mut summary = None;
        let before = estimate_tokens(&h, None, "task");
        assert!(before > 40_000);
        let plan = compact(&mut h, &mut summary, window(40_000)).unwrap();
        assert_eq!(plan.reason, CompactionReason::Window);
        assert!(plan.take >= 20 && h.len() >= 2, "{plan:?} {}", h.len());
        assert!(estimate_tokens(&h, summary.as_deref(), "task") <= 30_000);
        let summary = summary.unwrap();
        // 4,000-character steps: the summary keeps the newest lines within its bound.
        assert!(summary.starts_with(OMITTED), "{summary}");
        assert!(summary.lines().last().unwrap().starts_with(&format!("Step {}; you said", plan.take)), "{summary}");
        assert_eq!(h[0].step as usize, plan.take);
        // Far from the window nothing happens.
        let mut h = history(3);
        assert_eq!(compact(&mut h, &mut None, window(1_000_000)), None);
    }

    #[test]
    fn the_step_budget_compacts_down_to_half_of_it() {
        let budget = Budget { keep_steps: Some(8), ..Budget::default() };
        let mut h = history(8);
        assert_eq!(budget.plan(&h, None, "task"), None, "8 steps keep a budget of 8");
        h = history(9);
        let mut summary = None;
        let plan = compact(&mut h, &mut summary, budget).unwrap();
        assert_eq!((plan.take, plan.reason), (5, CompactionReason::Steps));
        assert_eq!(h.iter().map(|e| e.step).collect::<Vec<_>>(), vec![5, 6, 7, 8]);
        assert_eq!(summary.as_deref().map(|s| s.lines().count()), Some(5));
        // The next 4 steps fit again: the prompt's prefix stays the same for them.
        h.extend(history(13).into_iter().skip(9));
        assert_eq!(budget.plan(&h, summary.as_deref(), "task"), None);
    }

    #[test]
    fn the_token_budget_keeps_the_estimate_under_it() {
        let mut h = history(30);
        for e in &mut h {
            e.turn.text = "y".repeat(2_000); // 500 tokens a step
        }
        let budget = Budget { max_tokens: Some(10_000), window: Some(1_000_000), ..Budget::default() };
        let mut summary = None;
        let plan = compact(&mut h, &mut summary, budget).unwrap();
        assert_eq!(plan.reason, CompactionReason::Tokens);
        assert!(plan.tokens_before > 10_000);
        assert!(estimate_tokens(&h, summary.as_deref(), "task") <= 10_000, "{}", h.len());
        assert!(h.len() >= 2);
        // The lower limit decides: a small window beats a large token budget.
        let budget = Budget { max_tokens: Some(1_000_000), window: Some(12_000), ..Budget::default() };
        let mut h = history(30);
        for e in &mut h {
            e.turn.text = "y".repeat(2_000);
        }
        assert_eq!(budget.plan(&h, None, "task").map(|p| p.reason), Some(CompactionReason::Window));
    }

    #[test]
    fn a_mechanical_summary_stays_bounded() {
        let mut summary: Option<String> = None;
        for chunk in 0..50u32 {
            let mut old = history(10);
            for e in &mut old {
                e.step += chunk * 10;
                e.turn.text = format!("working on item {}", e.step);
            }
            summary = Some(mechanical(summary.as_deref(), &old));
        }
        let summary = summary.unwrap();
        assert!(summary.len() <= SUMMARY_MAX_CHARS, "{}", summary.len());
        assert!(summary.starts_with(OMITTED), "{summary}");
        assert_eq!(summary.matches(OMITTED).count(), 1);
        assert!(summary.ends_with("you said \"working on item 499\""), "{summary}");
        // A model's summary is cut at the same bound.
        assert!(bounded(&"é".repeat(SUMMARY_MAX_CHARS)).len() <= SUMMARY_MAX_CHARS);
        assert_eq!(bounded("  short  "), "short");
    }

    #[test]
    fn a_step_compaction_due_within_the_chunk_comes_forward() {
        let budget = Budget { keep_steps: Some(10), ..Budget::default() };
        let h = history(9);
        assert_eq!(budget.plan(&h, None, "task"), None);
        assert_eq!(budget.plan_ahead(&h, None, "task", 1), None, "10 steps keep a budget of 10");
        let plan = budget.plan_ahead(&h, None, "task", 2).unwrap();
        assert_eq!((plan.take, plan.reason), (4, CompactionReason::Steps), "down to half, as when it is due");
        // Past the budget it compacts whatever `ahead` says, as `plan` does.
        let h = history(11);
        assert_eq!(budget.plan_ahead(&h, None, "task", 0), budget.plan(&h, None, "task"));
        assert_eq!(budget.plan_ahead(&h, None, "task", 2).map(|p| p.take), Some(6));
        // `ahead` counts at most half the budget: right after a compaction (5 kept) nothing more goes.
        assert_eq!(budget.plan_ahead(&history(5), None, "task", 50), None);
        assert_eq!(budget.plan_ahead(&history(6), None, "task", 50).map(|p| p.take), Some(1));
    }

    #[test]
    fn a_token_compaction_due_within_the_chunk_comes_forward() {
        let mut h = history(20);
        for e in &mut h {
            e.turn.text = "y".repeat(400); // 100 tokens a step, and the 1-pixel image
        }
        let used = estimate_tokens(&h, None, "task");
        let budget = Budget { max_tokens: Some(used + 150), ..Budget::default() };
        assert_eq!(budget.plan(&h, None, "task"), None);
        assert_eq!(budget.plan_ahead(&h, None, "task", 1), None, "one more step fits");
        let plan = budget.plan_ahead(&h, None, "task", 2).unwrap();
        assert_eq!(plan.reason, CompactionReason::Tokens);
        assert!(estimate_tokens(&h[plan.take..], None, "task") <= used + 150 - (used + 150) / 10);
    }

    /// Runs `steps` model calls the way the loop keeps its budget (`runner::history`): the screenshot policy,
    /// the plan brought forward on a call that drops a chunk, and the screenshots beyond `keep` dropped with a
    /// compaction. Returns, per call, whether the images were dropped and whether the history was compacted.
    fn simulate(policy: ContextPolicy, budget: Budget, steps: u32) -> Vec<(bool, bool)> {
        let (mut h, mut summary, mut calls) = (Vec::new(), None, Vec::new());
        for step in 0..steps {
            let dropped = policy.apply(&mut h) > 0;
            let ahead = if dropped { policy.chunk as usize - 1 } else { 0 };
            let plan = budget.plan_ahead(&h, summary.as_deref(), "task", ahead);
            if let Some(plan) = plan {
                let old: Vec<Exchange> = h.drain(..plan.take).collect();
                summary = Some(mechanical(summary.as_deref(), &old));
                ContextPolicy::new(policy.keep, 1).apply(&mut h);
                assert!(h.iter().filter(|e| e.screenshot.is_some()).count() < policy.keep as usize);
            }
            assert!(h.len() <= budget.keep_steps.unwrap_or(u32::MAX) as usize, "step {step}: {}", h.len());
            calls.push((dropped, plan.is_some()));
            h.extend(history(step + 1).into_iter().skip(step as usize));
        }
        calls
    }

    #[test]
    fn compactions_ride_on_the_chunked_image_drops() {
        let budget = Budget { keep_steps: Some(10), ..Budget::default() };
        let calls = simulate(ContextPolicy::new(3, 3), budget, 100);
        let compactions = calls.iter().filter(|c| c.1).count();
        assert!(compactions >= 100 / 10, "{compactions}");
        // After the first, every compaction is on a call that drops a chunk of screenshots anyway: the cached
        // prompt is rewritten once for both, and no call rewrites it for one alone right after the other.
        let first = calls.iter().position(|c| c.1).unwrap();
        assert!(calls[first + 1..].iter().filter(|c| c.1).all(|c| c.0), "{calls:?}");
        let rewrites = calls.iter().filter(|c| c.0 || c.1).count();
        // Chunks of 3 over a 5-step cycle would rewrite on 3/5 + 1/5 of the calls; aligned, about 1/3.
        assert!(rewrites <= 100 / 3 + 2, "{rewrites} rewrites: {calls:?}");
        // With a chunk of 1 nothing comes forward: compactions every 5 steps past the first 10, as `plan`.
        let calls = simulate(ContextPolicy::new(3, 1), budget, 30);
        let at: Vec<usize> = calls.iter().enumerate().filter(|(_, c)| c.1).map(|(i, _)| i).collect();
        assert_eq!(at, vec![11, 17, 23, 29]);
    }

    #[test]
    fn one_kept_screenshot_has_no_chunk() {
        let policy = ContextPolicy::new(1, 3);
        assert_eq!(policy.chunk, 1);
        let mut h = history(2);
        assert_eq!(policy.apply(&mut h), 2, "only the current screenshot stays");
        assert_eq!(held(&h), Vec::<u32>::new());
        assert_eq!(ContextPolicy::new(2, 3).chunk, 3);
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
