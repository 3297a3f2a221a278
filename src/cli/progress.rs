//! Human-readable live progress on stderr: one line per step with its actions and time, then the outcome.

use std::io::Write;

use futures_util::{Stream, StreamExt};

use super::sanitize::sanitize;
use crate::record::TaskState;
use crate::record::events::{Event, EventKind};

/// Prints events as they arrive until the stream ends.
pub async fn print(mut events: impl Stream<Item = Event> + Unpin, mut out: impl Write) {
    let mut printer = Printer::default();
    while let Some(event) = events.next().await {
        if let Some(line) = printer.line(&event) {
            let _ = writeln!(out, "{line}");
        }
    }
}

/// Turns events into progress lines; keeps what a step line needs until the step ends. Every text from the
/// event (ids, worker names, actions, messages, summaries) is [`sanitize`]d: lines are safe to print.
#[derive(Default)]
pub struct Printer {
    actions: Vec<String>,
    failures: Vec<String>,
}

impl Printer {
    pub fn line(&mut self, event: &Event) -> Option<String> {
        match &event.kind {
            EventKind::TaskQueued {} => Some(format!("task {} queued", sanitize(&event.task_id))),
            EventKind::TaskStarted { attempt, worker } => Some(format!(
                "task {} started (attempt {attempt}, worker {})",
                sanitize(&event.task_id),
                sanitize(worker)
            )),
            EventKind::StepStarted { .. } => {
                self.actions.clear();
                self.failures.clear();
                None
            }
            EventKind::ActionStarted { action, .. } => {
                self.actions.push(sanitize(&action.summary()).into_owned());
                None
            }
            EventKind::ActionFinished { ok: false, message, .. } => {
                self.failures.push(sanitize(message).into_owned());
                None
            }
            EventKind::StepFinished { step, duration_ms, usage } => {
                let actions = if self.actions.is_empty() { "(no actions)".to_string() } else { self.actions.join(" ") };
                let mut line = format!("step {step:>3}  {actions}  {duration_ms} ms");
                if usage.input_tokens + usage.output_tokens > 0 {
                    line.push_str(&format!("  {}→{} tok", usage.input_tokens, usage.output_tokens));
                }
                for failure in &self.failures {
                    line.push_str(&format!("\n           ✗ {failure}"));
                }
                Some(line)
            }
            EventKind::WaitingForHuman { reason } => Some(format!("waiting for a human: {}", sanitize(reason))),
            EventKind::TaskFinished { state, outcome, usage } => {
                let mark = if *state == TaskState::Succeeded { "✓" } else { "✗" };
                Some(format!(
                    "{mark} {}: {} ({}; {} input / {} output tokens, ${:.4})",
                    state.as_str(),
                    sanitize(&outcome.summary),
                    outcome.reason.as_str(),
                    usage.input_tokens,
                    usage.output_tokens,
                    usage.cost_usd
                ))
            }
            EventKind::ToolFinished { name, ok, output, .. } => Some(format!(
                "           {} tool {}: {}",
                if *ok { "·" } else { "✗" },
                sanitize(name),
                sanitize(&first_line(output))
            )),
            EventKind::AwaitingTool { calls, .. } => Some(format!(
                "awaiting remote tool results: {}",
                calls
                    .iter()
                    .map(|c| format!("{} ({})", sanitize(&c.name), sanitize(&c.id)))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            EventKind::Error { message, .. } => Some(format!("error: {}", sanitize(message))),
            EventKind::ModelDelta { .. }
            | EventKind::ActionFinished { .. }
            | EventKind::ScreenshotSaved { .. }
            | EventKind::MessageStart { .. }
            | EventKind::MessageEnd { .. }
            | EventKind::TextStart { .. }
            | EventKind::TextEnd { .. }
            | EventKind::ThinkingStart { .. }
            | EventKind::ThinkingEnd { .. }
            | EventKind::ToolCallStart { .. }
            | EventKind::ToolCallDelta { .. }
            | EventKind::ToolCallEnd { .. }
            | EventKind::ToolStarted { .. }
            | EventKind::ToolOutput { .. } => None,
        }
    }
}

/// The first line of a tool's output, at most 120 characters, for one progress line.
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    let mut short: String = line.chars().take(120).collect();
    if short.len() < line.len() || text.lines().nth(1).is_some() {
        short.push('…');
    }
    short
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::events::DeltaKind;

    #[test]
    fn the_model_stream_prints_nothing() {
        let mut printer = Printer::default();
        let kinds = [
            EventKind::MessageStart { step: 0 },
            EventKind::ThinkingStart { step: 0 },
            EventKind::ModelDelta { step: 0, kind: DeltaKind::Thinking, text: "hm".into() },
            EventKind::ThinkingEnd { step: 0, text: "hm".into() },
            EventKind::TextStart { step: 0 },
            EventKind::ModelDelta { step: 0, kind: DeltaKind::Text, text: "Hello".into() },
            EventKind::TextEnd { step: 0, text: "Hello".into() },
            EventKind::ToolCallStart { step: 0, call_id: "c".into(), name: "computer".into() },
            EventKind::ToolCallDelta { step: 0, call_id: "c".into(), delta: "{".into() },
            EventKind::ToolCallEnd {
                step: 0,
                call_id: "c".into(),
                name: "computer".into(),
                arguments: serde_json::json!({}),
            },
            EventKind::MessageEnd { step: 0, interrupted: true },
        ];
        for (seq, kind) in kinds.into_iter().enumerate() {
            let event = Event { seq: seq as u64 + 1, task_id: "t".into(), ts: time::OffsetDateTime::UNIX_EPOCH, kind };
            assert_eq!(printer.line(&event), None, "{event:?}");
        }
    }
}
