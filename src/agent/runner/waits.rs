//! Steps that waited for someone, continued (docs/tools.md, docs/humans.md): the step held for a human's approval runs
//! its calls
//! once approved (an edited approval runs the human's actions instead, and the model is told what ran); the
//! step parked for the API client's remote tool results runs the calls after them once answered; either
//! finishes as a resumed step. And the take-over's two ends in the loop: the pause at a step boundary, and
//! the hand-back's note on the next step.

use std::time::{Duration, Instant};

use agentd_computer::Action;

use super::{Ending, Executed, Loop, Stop, provider_end, turn_of};
use crate::model::{CallKind, Exchange, ModelTurn, ToolResult};
use crate::record::events::EventKind;
use crate::record::{HandBack, Outcome, StepRecord, TAKEOVER_REASON};

impl Loop {
    /// Runs the calls of the step that waited for a human, now that the step records the approval (the
    /// queue writes a human's answer into the step it answers). They never ran before, so this is not a
    /// replay; the step is journaled as begun before they run, so a worker lost while they run leaves it
    /// interrupted, never run twice.
    pub(super) async fn settle_pending_approval(&mut self) -> Result<Option<Outcome>, Stop> {
        let Some(mut record) = self.resumed.pending_approval.take() else {
            return Ok(None);
        };
        let reason = record.approval.as_ref().map(|a| a.reason.clone()).unwrap_or_default();
        let Some(approval) = record.approval.as_mut().filter(|a| a.awaits_its_run()) else {
            // Still no answer (a lease taken before one came): go back to waiting.
            self.steps.push(record);
            return Err(Stop::End(Ending::WaitingForHuman(reason)));
        };
        approval.started = true;
        self.journal(&record).await?;
        let started = Instant::now();
        let turn = turn_of(&record);
        let edited = record.approval.as_ref().and_then(|a| a.edited.clone());
        let Some(edited) = edited else {
            let executed = self.run_calls(record.index, &turn).await;
            let notes = vec![format!("A human approved: {reason}")];
            return self.finish_resumed_step(record, turn, executed, started, notes).await;
        };
        // Approved with an edit (docs/humans.md): the human's actions (screen pixels) run instead of the model's — all
        // in the turn's first computer call, the others empty — and the model is told what ran.
        let mut run = turn.clone();
        let mut first = true;
        for call in &mut run.calls {
            if let CallKind::Computer { actions } = &mut call.kind {
                *actions = if std::mem::take(&mut first) {
                    edited.iter().map(|a| self.screen.coords.action_to_model(a)).collect()
                } else {
                    Vec::new()
                };
            }
        }
        let executed = self.run_calls(record.index, &run).await;
        let ran = edited.iter().map(Action::summary).collect::<Vec<_>>().join("; ");
        let notes =
            vec![format!("A human approved ({reason}) with changes: instead of your actions, these ran: {ran}")];
        self.finish_resumed_step(record, turn, executed, started, notes).await
    }

    /// Continues the turn of the step that parked for the API client's `remote` tool results, now that they
    /// are in the step: the calls after the awaited ones run in the model's order (they never ran before, so
    /// this is no replay), the step finishes normally, and the model's history carries every result. Still
    /// unanswered (a lease taken before the answers came): back to awaiting them.
    pub(super) async fn settle_pending_tools(&mut self) -> Result<Option<Outcome>, Stop> {
        let Some(mut record) = self.resumed.pending_tools.take() else {
            return Ok(None);
        };
        let still = record.pending_tool_calls();
        if !still.is_empty() {
            let index = record.index;
            self.steps.push(record);
            return Err(self.parked(index, still));
        }
        // The step's duration counts its running parts, not the wait.
        let started =
            Instant::now().checked_sub(Duration::from_millis(record.duration_ms)).unwrap_or_else(Instant::now);
        let turn = turn_of(&record);
        let resume_at = turn
            .calls
            .iter()
            .rposition(|call| record.awaiting_tools.contains(&call.id))
            .map_or(turn.calls.len(), |position| position + 1);
        let mut done =
            Executed { actions: record.actions.clone(), action_results: record.results.clone(), ..Executed::default() };
        for result in &record.call_results {
            done.tool_results.push(ToolResult {
                call_id: result.call_id.clone(),
                ok: result.ok,
                message: result.message.clone(),
                image: None,
            });
            if let Some(details) = &result.details {
                done.details.insert(result.call_id.clone(), details.clone());
            }
        }
        let failed = done.tool_results.iter().any(|r| !r.ok);
        let rest = &turn.calls[resume_at..];
        let planned = self.screen_actions(rest);
        // Journaled before the rest runs, as every step is: no longer awaiting, with the actions about to
        // run, so a worker lost now leaves an interrupted step, never one whose actions run twice.
        record.awaiting_tools.clear();
        record.actions.extend(planned.iter().cloned());
        self.journal(&record).await?;
        let before = if !failed && planned.iter().any(Action::is_input) {
            Some(self.built.computer.screenshot().await.map_err(|e| Stop::End(provider_end(&e)))?)
        } else {
            None
        };
        let executed = self.run_calls_from(record.index, &turn, resume_at, done, failed).await;
        if !executed.awaiting.is_empty() {
            record.duration_ms = started.elapsed().as_millis() as u64;
            return Err(self.park_for_tools(record, &executed).await);
        }
        if executed.stop.is_none()
            && let Some(before) = &before
        {
            self.settle_after(&mut record, &executed, before).await?;
        }
        self.finish_resumed_step(record, turn, executed, started, Vec::new()).await
    }

    /// Ends a step an earlier attempt began (its screenshot is not shown again): journals it as finished,
    /// adds it to the model's history with `notes`, and says how the loop goes on.
    async fn finish_resumed_step(
        &mut self,
        mut record: StepRecord,
        turn: ModelTurn,
        mut executed: Executed,
        started: Instant,
        notes: Vec<String>,
    ) -> Result<Option<Outcome>, Stop> {
        self.complete_step(&mut record, &mut executed, started).await?;
        let mut notes = notes;
        if record.index == self.context.turns.last().map_or(0, |turn| turn.first_step) {
            notes.splice(0..0, std::mem::take(&mut self.resumed.turn_notes));
        }
        let mut turn = turn;
        self.built.tools.secrets().redact_turn(&mut turn);
        self.conversation.exchanges.push(Exchange {
            step: record.index,
            screenshot: None,
            notes,
            page: record.page.clone(),
            turn,
            results: executed.tool_results,
        });
        self.steps.push(record);
        if let Some(end) = executed.stop {
            return Err(Stop::End(end));
        }
        Ok(executed.completion)
    }

    /// A take-over (docs/humans.md) asked for: the loop stops at this step boundary, saying it waits for the person.
    pub(super) fn pause_requested(&self) -> Option<Ending> {
        if !self.context.pause.is_cancelled() {
            return None;
        }
        self.context.events.emit(EventKind::WaitingForHuman {
            reason: TAKEOVER_REASON.to_string(),
            question: None,
            call_id: None,
        });
        Some(Ending::Paused)
    }

    /// The first step after a take-over: the model hears a person had the desktop (the note goes with this
    /// step's screenshot), and the step's record keeps the hand-back returned here.
    pub(super) fn take_hand_back(&mut self) -> Option<HandBack> {
        let handed_back = self.context.handed_back.take();
        if let Some(handed_back) = &handed_back {
            self.conversation.notes.push(handed_back.model_note());
            let done = std::mem::take(&mut self.resumed.human_actions);
            if let Some(note) = crate::record::HandBack::actions_note(&done) {
                self.conversation.notes.push(note);
            }
        }
        handed_back
    }
}
