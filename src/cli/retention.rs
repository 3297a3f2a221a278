//! `agentd delete ID` and `agentd prune [--dry-run] [--older-than DAYS]` (docs/operations.md): one request each to the
//! daemon,
//! which does the deleting (`DELETE /v1/tasks/{id}`, `POST /v1/prune`).

use serde_json::{Value, json};

use super::client::{Client, Method};
use super::exit::{CliResult, Exit};
use super::remote::encode;
use super::sanitize::sanitize;

/// The daemon's answer, one line on stdout (as the other client commands print theirs).
fn print_json(value: &Value) {
    println!("{value}");
}

/// Deletes a finished task. A task that is not finished, or unknown, is refused by the daemon (exit 2).
pub async fn delete(client: &Client, id: &str, json: bool) -> CliResult {
    let (_, reply) = client.call(Method::DELETE, &format!("/v1/tasks/{}", encode(id)), None).await?;
    if json {
        print_json(&reply);
        return Ok(Exit::Success);
    }
    let artifacts = reply["artifacts"].as_u64().unwrap_or(0);
    let bytes = reply["bytes"].as_u64().unwrap_or(0);
    eprintln!(
        "agentd: task {} deleted with its steps, events and {artifacts} artifact(s) ({})",
        sanitize(id),
        human_bytes(bytes)
    );
    if reply["artifacts_pending"] == true {
        eprintln!("agentd: its artifacts could not be removed now; the daemon removes them later");
    }
    Ok(Exit::Success)
}

/// Deletes (or with `dry_run` lists) the finished tasks older than `older_than` days, or than the daemon's
/// `[retention] finished_days`.
pub async fn prune(client: &Client, dry_run: bool, older_than: Option<u32>, json: bool) -> CliResult {
    let mut body = json!({"dry_run": dry_run});
    if let Some(days) = older_than {
        body["older_than_days"] = json!(days);
    }
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    let (_, reply) = client.call(Method::POST, "/v1/prune", Some(bytes)).await?;
    if json {
        print_json(&reply);
        return Ok(Exit::Success);
    }
    let tasks = reply["tasks"].as_u64().unwrap_or(0);
    let days = reply["older_than_days"].as_u64().unwrap_or(0);
    let artifacts = reply["artifacts"].as_u64().unwrap_or(0);
    let size = human_bytes(reply["bytes"].as_u64().unwrap_or(0));
    let age = if days == 0 { "finished".to_string() } else { format!("finished more than {days} day(s) ago") };
    if dry_run {
        for id in reply["ids"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            println!("{}", sanitize(id));
        }
        let listed = reply["ids"].as_array().map_or(0, Vec::len) as u64;
        let more = if listed < tasks { format!(" ({listed} listed)") } else { String::new() };
        eprintln!("agentd: would delete {tasks} task(s) {age}{more}, with {artifacts} artifact(s) ({size})");
    } else {
        eprintln!("agentd: deleted {tasks} task(s) {age}, with {artifacts} artifact(s) ({size})");
        let pending = reply["artifacts_pending"].as_u64().unwrap_or(0);
        if pending > 0 {
            eprintln!(
                "agentd: the artifacts of {pending} of them could not be removed now; the daemon removes them later"
            );
        }
    }
    Ok(Exit::Success)
}

fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}
