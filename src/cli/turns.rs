//! Conversations (§19) on the command line: `send` (the user's next message to a finished task: a new turn,
//! followed with `--wait`) and `export ID --conversation` (a task file that continues the conversation in a
//! new task).

use std::io::Write;

use serde_json::json;

use super::client::{Client, Method};
use super::exit::{CliError, CliResult, Exit};
use super::progress::Progress;
use super::remote::{encode, record_of};
use super::report::{Source, load_record};
use super::sanitize::sanitize;
use crate::record::TaskState;
use crate::record::events::EventKind;

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
    let progress = Progress::on_stderr();
    // The stream holds every turn's events: this turn's begin after its `turn_queued`.
    let mut ours = false;
    let mut final_state = None;
    let follow = client.follow_events(id, 0, true, |event| {
        if let EventKind::TurnQueued { turn: queued } = &event.kind {
            ours = *queued == turn;
        }
        if !ours {
            return;
        }
        if let EventKind::TaskFinished { state, .. } = &event.kind {
            final_state = Some(*state);
        }
        progress.event(event);
    });
    let followed = tokio::select! {
        followed = follow => followed,
        _ = tokio::signal::ctrl_c() => {
            progress.finish();
            eprintln!("agentd: stopped following; task {} goes on", sanitize(id));
            return Ok(Exit::Interrupted);
        }
    };
    progress.finish();
    followed?;
    // The queue records the end just after the event that announces it: wait for it to agree.
    let path = format!("/v1/tasks/{}", encode(id));
    let mut record = record_of(client.call(Method::GET, &path, None).await?.1)?;
    for _ in 0..100 {
        if record.state.is_terminal() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        record = record_of(client.call(Method::GET, &path, None).await?.1)?;
    }
    if json {
        print_json(&record);
    } else {
        println!("{}", sanitize(id));
    }
    let succeeded = if record.state.is_terminal() {
        record.state == TaskState::Succeeded
    } else {
        final_state == Some(TaskState::Succeeded)
    };
    Ok(if succeeded { Exit::Success } else { Exit::Unsuccessful })
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

fn print_json(value: &impl serde::Serialize) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, value);
    let _ = writeln!(out);
}
