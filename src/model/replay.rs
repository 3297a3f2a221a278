//! Replay (docs/replay-and-verify.md): a [`Model`] that answers each turn with a succeeded task's recorded calls
//! instead of asking
//! a model, after comparing the live screen with the step's recorded screenshot (`screen::compare`).
//!
//! It is fed the recording already loaded ([`RecordedStep`]s: the calls in screen pixels, the recorded
//! screenshot reduced to its signature); loading it from a record and an artifact store is the library's
//! (`library::replay`), so this layer never sees storage. Like the scripted model it keeps no state: it
//! plays recorded step N at step N, and reads from the history which turns it replayed (their `raw` holds
//! [`REPLAY_MARK`]).
//!
//! On divergence (the screens agree on fewer grid cells than `min_score`):
//! - `stop`: the turn carries the recorded calls with an [`ApprovalRequest`], so the loop parks the task in
//!   `waiting_for_human` (approve runs the recorded actions, reject ends the task);
//! - `model`: the fallback model answers from that step on, with a fresh context (only the exchanges it made
//!   itself, a summary of the replayed steps), so vendor adapters never see a synthetic history. It also
//!   answers past the recording's end: a completion refused after the last step, and the later turns of a
//!   conversation with the finished replay (docs/humans.md).
//!
//! Replayed turns cost nothing and make no network call.

use std::sync::Arc;

use agentd_computer::{Action, Size};
use async_trait::async_trait;
use serde_json::json;

use super::{ApprovalRequest, CallKind, DeltaSink, Model, ModelError, ModelRequest, ModelTurn, ToolCall, Usage};
use crate::record::{REPLAY_MARK, ScreenshotRef};
use crate::screen::CoordinateMap;
use crate::screen::compare::{self, Region, Signature};
use crate::task::replay::{OnDivergence, ReplaySpec};

/// One recorded step as the replay plays it.
#[derive(Debug, Clone)]
pub struct RecordedStep {
    /// The recorded step's screenshot (where a human reviewing a divergence finds it).
    pub screenshot: ScreenshotRef,
    /// Its signature, for the comparison.
    pub signature: Signature,
    /// The recorded calls, computer actions in screen pixels, the replay's parameters applied.
    pub calls: Vec<ToolCall>,
    /// What they did, for the fallback model's summary.
    pub summary: String,
}

/// The replaying model.
pub struct ReplayModel {
    of: String,
    steps: Vec<RecordedStep>,
    masks: Vec<Region>,
    min_score: f64,
    tolerance: u8,
    on_divergence: OnDivergence,
    /// The task's model, for `on_divergence: "model"`.
    fallback: Option<Arc<dyn Model>>,
}

/// How a live screen compared with its recording, as the replay reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct StepMatch {
    pub score: f64,
    pub region: Option<Region>,
}

impl ReplayModel {
    /// A replay of `of`'s `steps`; `fallback` is the model that takes over on divergence with `"model"`.
    pub fn new(of: String, steps: Vec<RecordedStep>, spec: &ReplaySpec, fallback: Option<Arc<dyn Model>>) -> Self {
        Self {
            of,
            steps,
            masks: spec.masks.clone(),
            min_score: spec.min_score(),
            tolerance: spec.tolerance(),
            on_divergence: spec.on_divergence,
            fallback,
        }
    }

    /// Compares a live screenshot (PNG) with recorded step `step`'s (what each replayed turn does first).
    pub fn compare(&self, step: usize, png: &[u8]) -> Result<StepMatch, ModelError> {
        let recorded = self.steps.get(step).ok_or_else(|| self.past_the_end(step))?;
        match_step(&recorded.signature, png, &self.masks, self.tolerance)
            .map_err(|e| ModelError::Script(format!("replay: cannot compare the live screenshot: {e}")))
    }

    fn past_the_end(&self, step: usize) -> ModelError {
        ModelError::Script(format!(
            "replay: the recording of task {} has {} steps and the task needs step {} (its completion was refused)",
            self.of,
            self.steps.len(),
            step + 1
        ))
    }

    /// The recorded calls of `step` in the model's coordinate space (the loop converts them back).
    fn calls(&self, step: usize, screen: Size) -> Vec<ToolCall> {
        let map = self.coordinates(screen);
        let mut calls = self.steps[step].calls.clone();
        if !map.is_identity() {
            for call in &mut calls {
                if let CallKind::Computer { actions } = &mut call.kind {
                    for action in actions.iter_mut() {
                        action.map_points(|p| map.to_model(p));
                        if let Action::Scroll { scroll_x, scroll_y, .. } = action {
                            let (sw, mw) = (i64::from(map.screen().width.max(1)), i64::from(map.model().width));
                            let (sh, mh) = (i64::from(map.screen().height.max(1)), i64::from(map.model().height));
                            *scroll_x = (i64::from(*scroll_x) * mw / sw) as i32;
                            *scroll_y = (i64::from(*scroll_y) * mh / sh) as i32;
                        }
                    }
                }
            }
        }
        calls
    }

    /// The fallback model's turn, on a context of its own: the exchanges from `from` on (its own) and a
    /// summary of what was replayed before.
    async fn hand_over(
        &self,
        request: ModelRequest<'_>,
        from: usize,
        deltas: DeltaSink<'_>,
    ) -> Result<ModelTurn, ModelError> {
        let Some(fallback) = &self.fallback else {
            return Err(ModelError::Config("replay: no model to hand over to".into()));
        };
        let replayed: Vec<String> =
            self.steps.iter().take(from).enumerate().map(|(i, s)| format!("step {i}: {}", s.summary)).collect();
        let mut summary = if from >= self.steps.len() {
            // The whole recording played (and completed): a later turn of the conversation (docs/humans.md), or a
            // completion refused after the last recorded step.
            format!(
                "Steps 0 to {} of this task were replayed without a model from the recording of task {} ({}), \
                 the whole recording. You continue the task from here.",
                from.saturating_sub(1),
                self.of,
                replayed.join("; ")
            )
        } else if replayed.is_empty() {
            format!(
                "This task replays the recorded actions of task {}, but the screen differed from the recording \
                 at its first step, so you do the task from here.",
                self.of
            )
        } else {
            format!(
                "Steps 0 to {} of this task were replayed without a model from the recording of task {} ({}). \
                 At step {from} the screen no longer matched the recording, so you continue the task from here.",
                from - 1,
                self.of,
                replayed.join("; ")
            )
        };
        if let Some(earlier) = request.summary {
            summary = format!("{earlier}\n\n{summary}");
        }
        let history = request.history.get(from..).unwrap_or_default();
        fallback.next_turn(ModelRequest { history, summary: Some(&summary), ..request }, deltas).await
    }
}

/// Decodes a live screenshot and compares it with a recorded signature.
pub fn match_step(recorded: &Signature, png: &[u8], masks: &[Region], tolerance: u8) -> Result<StepMatch, String> {
    let live = crate::screen::image::decode_png(png).map_err(|e| e.to_string())?;
    let compared = compare::compare(recorded, &compare::signature(&live), masks, tolerance);
    Ok(StepMatch { score: compared.score, region: compared.region })
}

/// Whether a turn of the history is one the replay played.
fn replayed(turn: &ModelTurn) -> bool {
    turn.raw.as_ref().and_then(|raw| raw.get(REPLAY_MARK)).is_some()
}

#[async_trait]
impl Model for ReplayModel {
    fn describe(&self) -> String {
        match &self.fallback {
            Some(fallback) => {
                format!("replay of {} ({} steps), then {}", self.of, self.steps.len(), fallback.describe())
            }
            None => format!("replay of {} ({} steps)", self.of, self.steps.len()),
        }
    }

    fn model_id(&self) -> Option<&str> {
        self.fallback.as_ref().and_then(|f| f.model_id())
    }

    /// Identity (the replay compares and acts in screen pixels) unless a model may take over: then that
    /// model's space, so it sees what it always sees.
    fn coordinates(&self, screen: Size) -> CoordinateMap {
        match &self.fallback {
            Some(fallback) => fallback.coordinates(screen),
            None => CoordinateMap::identity(screen),
        }
    }

    fn context_chunk(&self) -> u32 {
        self.fallback.as_ref().map_or(1, |f| f.context_chunk())
    }

    async fn next_turn(&self, request: ModelRequest<'_>, deltas: DeltaSink<'_>) -> Result<ModelTurn, ModelError> {
        let played = request.history.iter().take_while(|e| replayed(&e.turn)).count();
        if played < request.history.len() {
            // The model took over at `played`: it goes on.
            return self.hand_over(request, played, deltas).await;
        }
        let step = request.history.len();
        if step >= self.steps.len() {
            return match self.on_divergence {
                OnDivergence::Model if self.fallback.is_some() => self.hand_over(request, step, deltas).await,
                _ => Err(self.past_the_end(step)),
            };
        }
        let png = request.screenshot.bytes.clone();
        let recorded = self.steps[step].signature.clone();
        let (masks, tolerance) = (self.masks.clone(), self.tolerance);
        // Pixel work stays off the async runtime.
        let matched = tokio::task::spawn_blocking(move || match_step(&recorded, &png, &masks, tolerance))
            .await
            .map_err(|e| ModelError::Script(format!("replay: comparison panicked: {e}")))?
            .map_err(|e| ModelError::Script(format!("replay: cannot compare the live screenshot: {e}")))?;
        let diverged = matched.score < self.min_score;
        if diverged && self.on_divergence == OnDivergence::Model && self.fallback.is_some() {
            tracing::info!(step, score = matched.score, "replay diverged; the model takes over");
            return self.hand_over(request, step, deltas).await;
        }
        let percent = |score: f64| format!("{:.1}%", score * 100.0);
        let mut mark = json!({ "step": step, "score": (matched.score * 10_000.0).round() / 10_000.0 });
        let approval = diverged.then(|| {
            mark["diverged"] = json!(true);
            let recorded = &self.steps[step].screenshot;
            let mut reason = format!(
                "replay diverged at step {step}: the screen matches the recording of task {} at {} (needs {})",
                self.of,
                percent(matched.score),
                percent(self.min_score)
            );
            if let Some(r) = matched.region {
                reason.push_str(&format!(", differing within {}x{} at ({}, {})", r.width, r.height, r.x, r.y));
            }
            ApprovalRequest {
                reason,
                details: json!({ REPLAY_MARK: {
                    "of": self.of,
                    "step": step,
                    "score": mark["score"],
                    "min_score": self.min_score,
                    "recorded_screenshot": { "key": recorded.key, "url": recorded.url },
                    "differs": matched.region,
                }}),
            }
        });
        Ok(ModelTurn {
            text: format!("Replaying step {step} of task {} (screen match {}).", self.of, percent(matched.score)),
            thinking: String::new(),
            calls: self.calls(step, request.screen),
            usage: Usage::default(),
            raw: Some(json!({ REPLAY_MARK: mark })),
            approval,
        })
    }
}
