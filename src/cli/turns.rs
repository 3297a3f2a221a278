//! Conversations (docs/humans.md) on the command line: `send` (the user's next message to a finished task: a new turn,
//! followed with `--wait`), `export ID --conversation` (a task file that continues the conversation in a
//! new task), and the turns as `agentd status` shows them to people (`turn_lines`).

use std::io::Write;

use serde_json::json;

use super::client::{Client, Method};
use super::exit::{CliError, CliResult, Exit};
use super::remote::{encode, follow_to_end, print_json, record_of};
use super::report::{Source, load_record};
use super::sanitize::sanitize;
use super::term::truncate;
use crate::status::TaskRecord;

/// The longest part of a turn's message `agentd status` prints (the record holds it whole).
const MESSAGE_CHARS: usize = 120;

/// The turns of a conversation (docs/humans.md) as `agentd status` prints them, one line each for the outcome and the
/// steps, then the message: every turn, the earlier ones with their own outcome, the current one with the
/// task's state while it has none. Nothing for a task never sent a message (its one turn is the task).
pub fn turn_lines(record: &TaskRecord) -> Vec<String> {
    if record.turns.len() < 2 {
        return Vec::new();
    }
    let mut lines = vec![format!("  turns {}", record.turns.len())];
    for turn in &record.turns {
        let outcome = match &turn.outcome {
            Some(o) => format!("{} ({}): {}", o.state().as_str(), o.reason.as_str(), sanitize(&o.summary)),
            // An earlier turn always has one; the current one not until it ends.
            None if record.turns.last().is_some_and(|last| last.index == turn.index) => record.state.as_str().into(),
            None => "no outcome recorded".into(),
        };
        let steps = match turn.last_step {
            Some(last) if last == turn.first_step => format!("step {last}"),
            Some(last) => format!("steps {}–{last}", turn.first_step),
            None => "no steps".to_string(),
        };
        lines.push(format!("    turn {}  {outcome}  {steps}", turn.index));
        lines.push(format!("      {}", sanitize(&truncate(&turn.instructions, MESSAGE_CHARS))));
    }
    lines
}

/// `send ID TEXT [--wait]`: queues the new turn; prints the task id (`--json`: its record). With `--wait`,
/// follows the new turn's events (not the earlier turns') and exits with its outcome.
pub async fn send(client: &Client, id: &str, text: &str, wait: bool, json: bool) -> CliResult {
    let body = json!({ "text": text }).to_string().into_bytes();
    let (_, reply) = client.call(Method::POST, &format!("/v1/tasks/{}/messages", encode(id)), Some(body)).await?;
    let record = record_of(reply)?;
    let turn = record.turns.last().map_or(0, |t| t.index);
    if !wait {
        if json {
            print_json(&record);
        } else {
            println!("{}", sanitize(id));
            eprintln!("agentd: task {}: turn {turn} queued", sanitize(id));
        }
        return Ok(Exit::Success);
    }
    eprintln!(
        "agentd: task {}: turn {turn} queued; following its progress (Ctrl-C stops following, not the task)",
        sanitize(id)
    );
    follow_to_end(client, id, Some(turn), json).await
}

/// `export ID --conversation [--message TEXT]`: prints the task file that continues the task's conversation
/// in a new task (`TaskRecord::continuation`), ready for `agentd submit`.
pub async fn export_conversation(source: Source<'_>, id: &str, message: Option<&str>) -> CliResult {
    if let Some(text) = message
        && text.trim().is_empty()
    {
        return Err(CliError::invalid(anyhow::anyhow!("--message: the message must not be empty")));
    }
    let record = load_record(&source, id).await?;
    let spec = record.continuation(message);
    let text = serde_json::to_string_pretty(&spec)
        .map_err(|e| CliError::failed(anyhow::anyhow!("task {id}: writing the conversation: {e}")))?;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    Ok(Exit::Success)
}

#[cfg(test)]
mod tests {
    use super::turn_lines;
    use crate::status::TaskRecord;

    /// A running task in its second turn (steps 0–2 in the first), a message with a control character.
    fn record(turns: serde_json::Value) -> TaskRecord {
        let step = |i: u32| {
            serde_json::json!({"index": i, "started_at": "2026-01-01T00:00:01Z", "duration_ms": 5,
                "screenshot": {"url": "file:///x", "width": 1280, "height": 800, "key": "k"},
                "model_text": "", "actions": [], "results": [],
                "usage": {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0, "cost_usd": 0.0},
                "calls": [], "call_results": [], "finished": true})
        };
        let mut record: TaskRecord = serde_json::from_value(serde_json::json!({
            "version": 1, "id": "t", "state": "running", "created_at": "2026-01-01T00:00:00Z",
            "started_at": null, "finished_at": null, "attempt": 1, "worker": null, "task": {"instructions": "log in"},
            "outcome": null,
            "usage": {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0, "cost_usd": 0.0},
            "steps": (0..4).map(step).collect::<Vec<_>>(),
            "turns": turns
        }))
        .expect("record");
        record.derive_turns();
        record
    }

    #[test]
    fn every_turn_with_its_outcome_steps_and_message_the_current_one_with_the_state() {
        let two = record(serde_json::json!([
            {"index": 0, "instructions": "log in", "first_step": 0, "last_step": 2,
             "outcome": {"success": false, "summary": "no password", "reason": "error"}},
            {"index": 1, "instructions": "the password is on the note\u{1b}[2J", "first_step": 3}
        ]));
        assert_eq!(
            turn_lines(&two),
            [
                "  turns 2",
                "    turn 0  failed (error): no password  steps 0–2",
                "      log in",
                "    turn 1  running  step 3",
                "      the password is on the note\\u{1b}[2J",
            ]
        );
        // A task never sent a message shows no turns: its one turn is the task.
        assert!(turn_lines(&record(serde_json::json!([]))).is_empty());
    }
}
