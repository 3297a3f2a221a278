//! Loading a replay (docs/replay-and-verify.md) when an attempt is assembled: the replayed task's record (given by the
//! caller —
//! the daemon's queue, `agentd run`'s `runs/` directory, an embedder) is checked (it must have succeeded),
//! its steps' screenshots are read once from the artifact store and reduced to their signatures, and the
//! recorded calls (screen pixels, the replay's parameters applied to typed texts) become a
//! [`ReplayModel`](crate::model::replay::ReplayModel).

use std::sync::Arc;

use agentd_computer::Action;

use crate::artifacts::ArtifactStore;
use crate::backends::BuildError;
use crate::model::Model;
use crate::model::replay::{RecordedStep, ReplayModel};
use crate::record::{CallKind, StepRecord, TaskState, ToolCall};
use crate::screen::compare;
use crate::status::TaskRecord;
use crate::task::replay::ReplaySpec;

const FIELD: &str = "replay.of";

/// Checks that `record` may be replayed by a task naming it in `replay.of`.
pub fn check_replayable(spec: &ReplaySpec, record: &TaskRecord) -> Result<(), BuildError> {
    if record.id != spec.of.as_str() {
        return Err(BuildError::invalid(FIELD, format!("the record given is of task {}, not {}", record.id, spec.of)));
    }
    if record.state != TaskState::Succeeded {
        return Err(BuildError::invalid(
            FIELD,
            format!("task {} is {}: only a succeeded task can be replayed", spec.of, record.state.as_str()),
        ));
    }
    if record.steps.is_empty() {
        return Err(BuildError::invalid(FIELD, format!("task {} has no recorded steps", spec.of)));
    }
    Ok(())
}

/// The replaying model for `spec` over `record`, its screenshots read from `store`.
pub async fn replay_model(
    spec: &ReplaySpec,
    record: &TaskRecord,
    store: &dyn ArtifactStore,
    fallback: Option<Arc<dyn Model>>,
) -> Result<Arc<dyn Model>, BuildError> {
    check_replayable(spec, record)?;
    let mut steps = Vec::with_capacity(record.steps.len());
    for step in &record.steps {
        let bytes = store.get(&step.screenshot.key).await.map_err(|e| {
            BuildError::invalid(
                FIELD,
                format!("cannot read the screenshot of step {} of task {}: {e}", step.index, spec.of),
            )
        })?;
        let signature = tokio::task::spawn_blocking(move || {
            crate::screen::image::decode_png(&bytes).map(|frame| compare::signature(&frame))
        })
        .await
        .map_err(|e| BuildError::invalid(FIELD, format!("reading a screenshot panicked: {e}")))?
        .map_err(|e| BuildError::invalid(FIELD, format!("step {} of task {}: {e}", step.index, spec.of)))?;
        let calls = recorded_calls(spec, step)?;
        let summary = summary(&calls);
        steps.push(RecordedStep { screenshot: step.screenshot.clone(), signature, calls, summary });
    }
    Ok(Arc::new(ReplayModel::new(spec.of.to_string(), steps, spec, fallback)))
}

/// A recorded step's calls with their computer actions in screen pixels (the record's `actions`, in the
/// calls' order) and the parameters applied to typed texts.
fn recorded_calls(spec: &ReplaySpec, step: &StepRecord) -> Result<Vec<ToolCall>, BuildError> {
    // A person's step (docs/humans.md) made no call: its actions are played as one computer call.
    if !step.by.is_model() && step.calls.is_empty() {
        let actions = step
            .actions
            .iter()
            .cloned()
            .map(|mut action| {
                if let Action::Type { text } = &mut action {
                    *text = spec.apply_params(text);
                }
                action
            })
            .collect();
        return Ok(vec![ToolCall { id: format!("replay_{}_0", step.index), kind: CallKind::Computer { actions } }]);
    }
    let mut screen_actions = step.actions.iter();
    let mut calls = Vec::with_capacity(step.calls.len());
    for (position, call) in step.calls.iter().enumerate() {
        let kind = match &call.kind {
            CallKind::Computer { actions } => {
                let mut replayed = Vec::with_capacity(actions.len());
                for _ in actions {
                    let mut action = screen_actions.next().cloned().ok_or_else(|| {
                        BuildError::invalid(
                            FIELD,
                            format!("step {} of task {} records fewer actions than its calls", step.index, spec.of),
                        )
                    })?;
                    if let Action::Type { text } = &mut action {
                        *text = spec.apply_params(text);
                    }
                    replayed.push(action);
                }
                CallKind::Computer { actions: replayed }
            }
            CallKind::Function { name, arguments } => {
                CallKind::Function { name: name.clone(), arguments: arguments.clone() }
            }
        };
        calls.push(ToolCall { id: format!("replay_{}_{position}", step.index), kind });
    }
    Ok(calls)
}

fn summary(calls: &[ToolCall]) -> String {
    let parts: Vec<String> = calls
        .iter()
        .flat_map(|call| match &call.kind {
            CallKind::Computer { actions } => actions.iter().map(Action::summary).collect::<Vec<_>>(),
            CallKind::Function { name, .. } => vec![format!("called {name}")],
        })
        .collect();
    if parts.is_empty() { "nothing".into() } else { parts.join(", ") }
}
