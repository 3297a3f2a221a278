//! Conversations (§19) on the command line: `send` (the user's next message to a finished task: a new turn,
//! followed with `--wait`) and `export ID --conversation` (a task file that continues the conversation in a
//! new task).

use std::io::Write;

use serde_json::json;

use super::client::{Client, Method};
use super::exit::{CliError, CliResult, Exit};
use super::remote::{encode, follow_to_end, print_json, record_of};
use super::report::{Source, load_record};
use super::sanitize::sanitize;

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
