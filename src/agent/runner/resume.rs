//! Resuming an attempt (docs/operations.md): the steps earlier attempts journaled become the model's history again —
//! the
//! earlier turns of a conversation (docs/humans.md) as history only, with each later turn's message beside its first
//! step — usage, the guard's counts and the recorded summary are restored, steps a dead worker left in flight
//! are marked (their actions never run again), and a step left waiting for a human or for remote tool results
//! is set aside for `waits`. A completion already made, and structured outputs already refused, count as they
//! did.

use super::{Ending, Loop, Stop, error_outcome, out_of_tries, turn_of, verifying};
use crate::model::{CallKind, Exchange, ToolResult};
use crate::record::{ActionResult, Outcome, StepRecord, Turn};
use crate::tools::{CompletionError, Effect, MAX_INVALID_OUTPUTS, Toolbox};

/// The result recorded for an action that was in flight when the worker running it stopped (it is never run
/// again).
pub const INTERRUPTED_ACTION: &str = "not known: the worker stopped before this action finished; it was not run again";

/// Text the model sees when a task continues after its worker died mid-step.
pub const RESUME_NOTE: &str = "Note: this task was interrupted and has been resumed. The last actions you asked \
for may or may not have happened; look at the current screenshot before you continue.";

impl Loop {
    /// Rebuilds the model's history from the steps an earlier attempt recorded. A last step that waits for a
    /// human's approval is kept aside in `pending_approval`; its calls never ran.
    /// Returns the positions in `steps` of the steps an earlier attempt left unfinished (their actions were
    /// in flight), now marked with what is known.
    pub(super) fn restore(&mut self, resume: Vec<StepRecord>) -> Vec<usize> {
        // Steps of earlier turns (docs/humans.md) are history only: what they left waiting or unfinished ended with
        // their turn, and is neither settled, resumed nor journaled again.
        let first_step = self.context.turns.last().map_or(0, |turn| turn.first_step);
        let (earlier, mut resume): (Vec<StepRecord>, Vec<StepRecord>) =
            resume.into_iter().partition(|step| step.index < first_step);
        // A person's steps (a take-over by hand) are no turns of the model's: they are kept in the record, and
        // the model is told what the person did when they hand the desktop back.
        self.resumed.human_steps = resume.iter().filter(|step| !step.by.is_model()).count();
        let after_model = resume.iter().rposition(|step| step.by.is_model()).map_or(0, |i| i + 1);
        self.resumed.human_actions =
            resume[after_model..].iter().flat_map(|step| step.actions.iter().map(|a| a.summary())).collect();
        let earlier_cost: f64 = earlier.iter().map(|step| step.usage.cost_usd).sum();
        self.resumed.turn_base = (earlier.len(), earlier_cost);
        let boundaries = turn_messages(&self.context.turns);
        for step in earlier {
            self.tallies.usage.add(&step.usage);
            if !step.by.is_model() {
                self.steps.push(step);
                continue;
            }
            let notes = boundaries.iter().filter(|(at, _)| *at == step.index).map(|(_, text)| text.clone()).collect();
            self.conversation.exchanges.push(Exchange {
                step: step.index,
                screenshot: None,
                notes,
                page: step.page.clone(),
                turn: turn_of(&step),
                results: history_results(&step),
            });
            let mut step = step;
            if !step.finished {
                step.finished = true;
                let answered = step.results.iter().filter(|r| r.is_action()).count();
                for _ in answered..step.actions.len() {
                    step.results.push(ActionResult::action(false, INTERRUPTED_ACTION));
                }
            }
            self.steps.push(step);
        }
        // The current turn's message: beside its first step's screenshot (the next one, or in the history of
        // a turn resumed after a crash).
        let current: Vec<String> =
            boundaries.iter().filter(|(at, _)| *at == first_step).map(|(_, text)| text.clone()).collect();
        if resume.first().is_some_and(|step| step.index == first_step) {
            self.resumed.turn_notes = current;
        } else {
            self.conversation.notes.extend(current);
        }
        // A step held for a human: still waiting, or approved with none of its calls begun. One whose calls
        // began (`started`) and did not finish was interrupted, like any other step: they never run again.
        if resume.last().is_some_and(|s| {
            !s.finished && s.approval.as_ref().is_some_and(|a| a.approved.is_none() || a.awaits_its_run())
        }) {
            self.resumed.pending_approval = resume.pop();
        }
        // A last step parked for remote tool results is no interrupted step: its calls after the awaited
        // ones never ran, and they run once the answers are in (`settle_pending_tools`).
        if resume.last().is_some_and(|s| !s.finished && !s.awaiting_tools.is_empty()) {
            self.resumed.pending_tools = resume.pop();
        }
        self.resumed.completion = resume.last().and_then(|step| completion_made(step, &self.built.tools));
        if self.resumed.completion.is_some() {
            self.tallies.final_checks = resume.last().and_then(verifying::passed_checks);
        }
        self.tallies.verify_failures = verifying::failed_rounds(&resume);
        let (invalid, problems) = invalid_outputs(&resume, &self.built.tools);
        self.tallies.invalid_outputs = invalid;
        if self.resumed.completion.is_none() && invalid >= MAX_INVALID_OUTPUTS {
            // The last try was refused and the worker died before the end was recorded: end as it would have.
            self.resumed.completion = Some(error_outcome(&out_of_tries(invalid, &problems)));
        }
        let mut interrupted = false;
        for step in resume.iter().filter(|step| step.by.is_model()) {
            self.tallies.usage.add(&step.usage);
            let notes =
                if step.index == first_step { std::mem::take(&mut self.resumed.turn_notes) } else { Vec::new() };
            self.conversation.exchanges.push(Exchange {
                step: step.index,
                screenshot: None,
                notes,
                page: step.page.clone(),
                turn: turn_of(step),
                results: history_results(step),
            });
        }
        // Unfinished steps are kept in the record as they were journaled, marked finished with what is known:
        // each action without a result gets one saying its outcome is not known.
        let mut unfinished = Vec::new();
        let base = self.steps.len();
        let current: Vec<StepRecord> = resume
            .into_iter()
            .enumerate()
            .map(|(position, mut step)| {
                if !step.finished {
                    interrupted = true;
                    unfinished.push(base + position);
                    step.finished = true;
                    let answered = step.results.iter().filter(|r| r.is_action()).count();
                    for _ in answered..step.actions.len() {
                        step.results.push(ActionResult::action(false, INTERRUPTED_ACTION));
                    }
                }
                step
            })
            .collect();
        self.steps.extend(current);
        if let Some(pending) = self.resumed.pending_approval.as_ref().or(self.resumed.pending_tools.as_ref()) {
            self.tallies.usage.add(&pending.usage);
        }
        self.restore_summary();
        // The guard counts as it did in the earlier attempts: each step with the change the next one saw.
        let model_steps: Vec<&StepRecord> = self.steps.iter().filter(|step| step.by.is_model()).collect();
        for pair in model_steps.windows(2) {
            self.guard.observe(pair[0], pair[1].screen_changed);
        }
        if interrupted {
            self.conversation.notes.push(RESUME_NOTE.to_string());
        }
        unfinished
    }

    /// Journals the steps `restore` marked, so the task's record says what became of their actions too.
    pub(super) async fn journal_interrupted(&self, positions: &[usize]) -> Result<(), Ending> {
        for step in positions.iter().filter_map(|&i| self.steps.get(i)) {
            self.journal(step).await.map_err(|Stop::End(end)| end)?;
        }
        Ok(())
    }
}

/// The completion a journaled step made, if its `task_completion` call came after calls that all ran and
/// succeeded: such a completion is final whether or not the worker lived to record the end (the call has no
/// effect on the desktop). Behind an interrupted or failed call it is not: the model looks again.
fn completion_made(step: &StepRecord, tools: &Toolbox) -> Option<Outcome> {
    for call in &step.calls {
        match &call.kind {
            CallKind::Function { name, .. }
                if name == crate::model::TASK_COMPLETION
                    && step.call_results.iter().any(|r| r.call_id == call.id && !r.ok) =>
            {
                // Refused (its checks failed, docs/replay-and-verify.md): the model was told and goes on.
                return None;
            }
            CallKind::Function { name, arguments } if name == crate::model::TASK_COMPLETION => {
                return match tools.completion(arguments) {
                    Ok(Effect::Complete { success, summary, output }) => {
                        Some(Outcome::completed(success, summary, output))
                    }
                    _ => None,
                };
            }
            _ if step.call_results.iter().any(|r| r.call_id == call.id && r.ok) => {}
            _ => return None,
        }
    }
    None
}

/// How many `task_completion` calls of these journaled steps were refused for their structured output, and
/// the last one's problems. The check is deterministic: the same arguments are refused again.
fn invalid_outputs(steps: &[StepRecord], tools: &Toolbox) -> (u32, String) {
    let mut count = 0;
    let mut last = String::new();
    for step in steps {
        for call in &step.calls {
            if let CallKind::Function { name, arguments } = &call.kind
                && name == crate::model::TASK_COMPLETION
                && let Err(CompletionError::Output { problems, .. }) = tools.completion(arguments)
            {
                count += 1;
                last = problems;
            }
        }
    }
    (count, last)
}

/// The model's results of a journaled step's calls, for its history. A step journaled before its actions ran
/// has no results: the actions may or may not have happened, and they are not run again.
fn history_results(step: &StepRecord) -> Vec<ToolResult> {
    step.calls
        .iter()
        .map(|call| match step.call_results.iter().find(|r| r.call_id == call.id) {
            Some(r) => ToolResult { call_id: r.call_id.clone(), ok: r.ok, message: r.message.clone(), image: None },
            None => ToolResult {
                call_id: call.id.clone(),
                ok: false,
                message: "interrupted: this call may or may not have been carried out".into(),
                image: None,
            },
        })
        .collect()
}

/// What the model is told where a later turn of the conversation begins (docs/humans.md), by the step it is shown with:
/// how the turn before ended, then the user's next message.
fn turn_messages(turns: &[Turn]) -> Vec<(u32, String)> {
    turns
        .windows(2)
        .map(|pair| {
            let (before, turn) = (&pair[0], &pair[1]);
            let ended = match &before.outcome {
                Some(outcome) => format!(
                    "Your previous turn ended: {} ({}): {}",
                    outcome.state().as_str(),
                    outcome.reason.as_str(),
                    outcome.summary
                ),
                None => "Your previous turn ended.".to_string(),
            };
            (turn.first_step, format!("{ended}\n\n{TURN_MESSAGE}{}", turn.instructions))
        })
        .collect()
}

/// How the user's next message (docs/humans.md) begins for the model.
pub const TURN_MESSAGE: &str = "The user's next message (a new turn of this task; look at the current screenshot, \
act on it, and call task_completion when it is done): ";
