//! The loop's side of the history budget (`agent::context`): before each model call, old screenshots leave
//! the context and, when a budget asks, the oldest exchanges leave the history for a summary — mechanical, or
//! written by the model in one extra call to the same adapter (its usage is the step's too). What happened
//! goes into the step's record as a [`HistoryNote`]; a resumed attempt starts from the last summary recorded.

use super::Loop;
use crate::agent::context::{self, Budget, ContextPolicy, SUMMARY_REQUEST};
use crate::model::{Delta, Exchange, ModelImage, ModelRequest, Usage};
use crate::record::{Compaction, CompactionNote, HistoryNote};

/// A summary written by the model, or why there is none.
type Written = Result<(String, Usage), (String, Usage)>;

impl Loop {
    /// The budget of this task with this model.
    fn budget(&self) -> Budget {
        let history = &self.task.history;
        Budget {
            keep_steps: history.keep_steps,
            max_tokens: history.max_tokens,
            window: self.built.model.context_window(),
        }
    }

    /// Keeps the history within its budget before step `step`'s model call (`screenshot` is that step's).
    /// Returns what was done, for the step's record; the usage of a summary call is in `self.tallies.usage` already.
    pub(super) async fn keep_budget(&mut self, step: u32, screenshot: &ModelImage) -> Option<HistoryNote> {
        let mut screenshots_dropped = self.conversation.policy.apply(&mut self.conversation.exchanges) as u32;
        let instructions = &self.task.instructions;
        // A call that drops a chunk of screenshots rewrites the cached prompt from the oldest of them on: a
        // compaction due within the chunk happens on it too (see `Budget::plan_ahead`).
        let ahead = if screenshots_dropped > 0 { self.conversation.policy.chunk as usize - 1 } else { 0 };
        let compacted = match self.budget().plan_ahead(
            &self.conversation.exchanges,
            self.conversation.summary.as_deref(),
            instructions,
            ahead,
        ) {
            None => None,
            Some(plan) => {
                let old: Vec<Exchange> = self.conversation.exchanges.drain(..plan.take).collect();
                // The compaction rewrites the whole cached prompt after the instructions: the screenshots
                // beyond `keep` go with it, not in a chunk of their own later.
                screenshots_dropped +=
                    ContextPolicy::new(self.conversation.policy.keep, 1).apply(&mut self.conversation.exchanges) as u32;
                let through = self.conversation.exchanges.first().map_or(step, |e| e.step);
                let wanted = self.task.history.compaction;
                let (summary, by, usage, fallback) = match wanted {
                    Compaction::Mechanical => (
                        context::mechanical(self.conversation.summary.as_deref(), &old),
                        Compaction::Mechanical,
                        None,
                        None,
                    ),
                    Compaction::Model => match self.written_summary(step, &old, screenshot).await {
                        Ok((text, usage)) => (context::bounded(&text), Compaction::Model, Some(usage), None),
                        Err((why, usage)) => (
                            context::mechanical(self.conversation.summary.as_deref(), &old),
                            Compaction::Mechanical,
                            Some(usage).filter(|u| *u != Usage::default()),
                            Some(why),
                        ),
                    },
                };
                if let Some(usage) = &usage {
                    self.tallies.usage.add(usage);
                }
                self.conversation.summary = Some(summary.clone());
                let tokens_after = context::estimate_tokens(&self.conversation.exchanges, Some(&summary), instructions);
                tracing::info!(step, steps = old.len(), by = by.as_str(), reason = ?plan.reason, "history compacted");
                Some(CompactionNote {
                    steps: old.len() as u32,
                    through,
                    reason: plan.reason,
                    by,
                    tokens_before: plan.tokens_before,
                    tokens_after,
                    summary,
                    usage,
                    fallback,
                })
            }
        };
        (screenshots_dropped > 0 || compacted.is_some()).then_some(HistoryNote { screenshots_dropped, compacted })
    }

    /// Asks the model for a summary of `old` (after the earlier summary), with the current screenshot and no
    /// deltas streamed. A failed call, a cancel or the time limit, or a reply without text is an `Err` with
    /// what the call used.
    async fn written_summary(&self, step: u32, old: &[Exchange], screenshot: &ModelImage) -> Written {
        let notes = [SUMMARY_REQUEST.to_string()];
        let request = ModelRequest {
            instructions: &self.task.instructions,
            history: old,
            screenshot,
            notes: &notes,
            tools: &self.conversation.specs,
            screen: self.screen.size,
            // As the turns it summarises were asked: the navigation functions they may call stay declared.
            browser: self.built.computer.navigates(),
            page: None,
            step,
            summary: self.conversation.summary.as_deref(),
        };
        let ignore = |_: Delta<'_>| {};
        let result = tokio::select! {
            result = self.built.model.next_turn(request, &ignore) => result,
            () = self.context.cancel.cancelled() => return Err(("cancelled".into(), Usage::default())),
            () = tokio::time::sleep_until(self.deadline.into()) => {
                return Err(("the time limit was reached".into(), Usage::default()));
            }
        };
        match result {
            Ok(turn) if !turn.text.trim().is_empty() => Ok((turn.text, turn.usage)),
            Ok(turn) => Err(("the model's summary call gave no text".into(), turn.usage)),
            Err(e) => Err((format!("the model's summary call failed: {e}"), Usage::default())),
        }
    }

    /// A resumed attempt's history as the last recorded compaction left it: the summary, and only the
    /// exchanges from its `through` step on.
    pub(super) fn restore_summary(&mut self) {
        let pending = self.resumed.pending_approval.iter().chain(&self.resumed.pending_tools);
        let last = pending
            .chain(self.steps.iter().rev())
            .find_map(|s| s.history.as_ref().and_then(|h| h.compacted.as_ref()))
            .map(|c| (c.summary.clone(), c.through));
        if let Some((summary, through)) = last {
            self.conversation.summary = Some(summary);
            self.conversation.exchanges.retain(|e| e.step >= through);
        }
    }
}
