//! The loop's side of verifiers (docs/replay-and-verify.md): a round of checks when the model calls `task_completion`
//! with
//! success (a failed round is the call's error, with the failed checks' messages, until the retries run
//! out: then the task ends `verification_failed`), and the round at the end that fills `outcome.verified`
//! and `outcome.checks`.
//!
//! A refused completion is journaled like any call result (its message starts with [`REFUSED`]), so a task
//! resumed after a crash counts the rounds its earlier attempts failed ([`failed_rounds`]).

use serde_json::json;

use super::{Ending, Executed, Loop};
use crate::model::{CallKind, TASK_COMPLETION};
use crate::record::{CheckResult, EndReason, EventKind, Outcome, StepRecord};
use crate::verify::{Subject, failures};

/// How a `task_completion` refused by its checks begins.
pub const REFUSED: &str = "verification failed";

/// The key of a passing round's checks in the details of the completion's journaled result.
pub const PASSED_CHECKS: &str = "verified_checks";

fn is_completion(call: &crate::model::ToolCall) -> bool {
    matches!(&call.kind, CallKind::Function { name, .. } if name == TASK_COMPLETION)
}

/// The checks of the round that passed a journaled step's completion, if it had one ([`PASSED_CHECKS`]).
pub(super) fn passed_checks(step: &StepRecord) -> Option<Vec<CheckResult>> {
    let call = step.calls.iter().find(|c| is_completion(c))?;
    let result = step.call_results.iter().find(|r| r.call_id == call.id && r.ok)?;
    let checks = result.details.as_ref()?.get(PASSED_CHECKS)?;
    serde_json::from_value(checks.clone()).ok()
}

/// How many rounds the journaled steps' completions failed (their `task_completion` results refused with
/// [`REFUSED`]).
pub(super) fn failed_rounds(steps: &[StepRecord]) -> u32 {
    steps
        .iter()
        .flat_map(|step| {
            step.calls
                .iter()
                .filter(|c| matches!(&c.kind, CallKind::Function { name, .. } if name == TASK_COMPLETION))
                .filter(move |c| {
                    step.call_results.iter().any(|r| r.call_id == c.id && !r.ok && r.message.starts_with(REFUSED))
                })
        })
        .count() as u32
}

impl Loop {
    /// Runs a round for a successful completion in `executed`: passing, the completion stands and the round is
    /// the final one; failing, the completion becomes the call's error (or, out of retries, the end).
    pub(super) async fn verify_completion(&mut self, record: &StepRecord, executed: &mut Executed) {
        if self.built.verifier.is_empty() || executed.stop.is_some() {
            return;
        }
        let Some(completion) = executed.completion.clone().filter(|c| c.success) else {
            return;
        };
        let results = self.verify_round(Some(&completion)).await;
        if results.iter().all(|r| r.ok) {
            // Journaled with the completion's result: a worker that dies before the end is recorded leaves
            // a resumed attempt the round that passed, not a new one on a desktop that may have moved on.
            if let Some(call) = record.calls.iter().find(|c| is_completion(c)) {
                let checks = serde_json::to_value(&results).unwrap_or_default();
                executed.details.insert(call.id.clone(), json!({ PASSED_CHECKS: checks }));
            }
            self.tallies.final_checks = Some(results);
            return;
        }
        self.tallies.verify_failures += 1;
        let failed = failures(&results);
        let retries = self.built.verifier.retries();
        let left = (retries + 1).saturating_sub(self.tallies.verify_failures);
        let message = if left == 0 {
            executed.completion = None;
            let summary = format!(
                "verification failed after {} round(s) (limits.verify_retries is {retries}): {failed}",
                self.tallies.verify_failures
            );
            executed.stop = Some(Ending::Finished(Outcome {
                output: completion.output.clone(),
                ..Outcome::new(false, summary, EndReason::VerificationFailed)
            }));
            self.tallies.final_checks = Some(results);
            format!("{REFUSED}: {failed} (no retries left: the task ends failed)")
        } else {
            executed.completion = None;
            format!(
                "{REFUSED}: {failed}. The task is not done yet: fix it and call task_completion again ({left} \
                 retr{} left)",
                if left == 1 { "y" } else { "ies" }
            )
        };
        let completion_call =
            record.calls.iter().find(|c| matches!(&c.kind, CallKind::Function { name, .. } if name == TASK_COMPLETION));
        if let Some(call) = completion_call
            && let Some(result) = executed.tool_results.iter_mut().find(|r| r.call_id == call.id)
        {
            result.ok = false;
            result.message = message;
        }
    }

    /// One round of the task's checks on the computer as it is now.
    pub(super) async fn verify_round(&mut self, completion: Option<&Outcome>) -> Vec<CheckResult> {
        self.tallies.verify_rounds += 1;
        let round = self.tallies.verify_rounds;
        let secrets = self.built.tools.secrets().clone();
        let mut state = self.built.computer.state().await;
        let mut steps = self.steps.clone();
        if !secrets.is_empty() {
            if let Some(state) = &mut state {
                secrets.redact_json(state);
            }
            steps.iter_mut().for_each(|s| secrets.redact_step(s));
        }
        let record = json!({
            "id": self.context.task_id,
            "attempt": self.context.attempt,
            "instructions": self.task.instructions,
            "completion": completion.map(|c| json!({"success": c.success, "summary": c.summary, "output": c.output})),
            "steps": steps,
            "computer_state": state,
        });
        // Checks at the end of a cancelled task still run to their own time limits.
        let cancel = tokio_util::sync::CancellationToken::new();
        let subject = Subject {
            computer: self.built.computer.as_ref(),
            output: completion.and_then(|c| c.output.as_ref()),
            record,
            uploader: &self.context.uploader,
            task_id: &self.context.task_id,
            attempt: self.context.attempt,
            round,
            cancel: &cancel,
        };
        let mut results = self.built.verifier.round(&subject).await;
        if !secrets.is_empty() {
            for result in &mut results {
                result.message = secrets.redact(&result.message).into_owned();
                if let Some(evidence) = &mut result.evidence {
                    secrets.redact_json(evidence);
                }
            }
        }
        let ok = results.iter().all(|r| r.ok);
        tracing::info!(round, ok, "verifier checks ran");
        self.context.events.emit(EventKind::VerifyFinished { round, ok, checks: results.clone() });
        results
    }

    /// The checks at the end (docs/replay-and-verify.md), into the outcome: the completion's round when it ended the
    /// task, else a
    /// new round when the task is over and the computer was reached (not for a cancelled task).
    pub(super) async fn verify_at_end(&mut self, end: &mut Ending) {
        let Ending::Finished(outcome) = end else {
            return;
        };
        if self.built.verifier.is_empty() {
            return;
        }
        let results = match self.tallies.final_checks.take() {
            Some(results) => results,
            None if outcome.reason != EndReason::Cancelled && self.screen.size.width > 0 => {
                let completion = (outcome.reason == EndReason::Completed).then(|| outcome.clone());
                self.verify_round(completion.as_ref()).await
            }
            None => return,
        };
        outcome.verified = Some(results.iter().all(|r| r.ok));
        outcome.checks = results;
    }
}
