//! The daemon client's commands of docs/humans.md beside approve/reject: `agentd pause ID`, `agentd resume ID [--note
//! TEXT]` (take-over), and `agentd approve ID --action JSON` (approve with an edited action).

use super::client::{Client, Method};
use super::exit::{CliError, CliResult, Exit};
use super::remote::encode;
use super::sanitize::sanitize;

fn print_json(value: &serde_json::Value) {
    println!("{value}");
}

/// Asks the daemon to park the task for a person: at once when queued, after its current step when running.
pub async fn pause(client: &Client, id: &str, json: bool) -> CliResult {
    let (_, reply) = client.call(Method::POST, &format!("/v1/tasks/{}/pause", encode(id)), None).await?;
    if json {
        print_json(&reply);
    } else if reply["pause"] == "requested" {
        eprintln!(
            "agentd: task {} is running; it waits for you after its current step (agentd status shows when)",
            sanitize(id)
        );
    } else {
        eprintln!("agentd: task {} waits; the desktop is yours until agentd resume", sanitize(id));
    }
    Ok(Exit::Success)
}

/// Hands the desktop back: the task is queued again, the note goes to the model with its next screenshot.
pub async fn resume(client: &Client, id: &str, note: Option<&str>, json: bool) -> CliResult {
    let body = match note {
        Some(note) => serde_json::json!({ "note": note }),
        None => serde_json::json!({}),
    };
    let path = format!("/v1/tasks/{}/resume", encode(id));
    let (_, reply) = client.call(Method::POST, &path, Some(body.to_string().into_bytes())).await?;
    if json {
        print_json(&reply);
    } else if reply["finished"] == true {
        eprintln!("agentd: demonstration {} finished (succeeded)", sanitize(id));
    } else {
        eprintln!("agentd: task {} resumes", sanitize(id));
    }
    Ok(Exit::Success)
}

/// Starts a demonstration on `computer` (a JSON file, or a pool desktop's name) and prints where to do it:
/// the task's page on the daemon's console (stdout), or how to open it.
pub async fn demonstrate(client: &Client, computer: &str, instructions: Option<&str>, json: bool) -> CliResult {
    let path = std::path::Path::new(computer);
    let computer = if path.is_file() {
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::invalid(anyhow::anyhow!("--computer {}: {e}", path.display())))?;
        serde_json::from_str::<serde_json::Value>(&text).map_err(|e| {
            CliError::invalid(anyhow::anyhow!(
                "--computer {}: line {}, column {}: {e}",
                path.display(),
                e.line(),
                e.column()
            ))
        })?
    } else if computer.ends_with(".json") || computer.contains(std::path::MAIN_SEPARATOR) {
        return Err(CliError::invalid(anyhow::anyhow!("--computer {computer}: no such file")));
    } else {
        serde_json::json!({ "desktop": computer })
    };
    let mut body = serde_json::json!({ "computer": computer });
    if let Some(instructions) = instructions {
        body["instructions"] = serde_json::Value::String(instructions.to_string());
    }
    let (_, reply) = client.call(Method::POST, "/v1/demonstrations", Some(body.to_string().into_bytes())).await?;
    let id = reply["id"].as_str().unwrap_or_default().to_string();
    if json {
        print_json(&reply);
        return Ok(Exit::Success);
    }
    let page = format!("#/tasks/{}", encode(&id));
    match client.endpoint() {
        super::client::Endpoint::Unix(_) => {
            println!("{}", sanitize(&id));
            eprintln!(
                "agentd: demonstration {} waits for you: open the console (agentd console), go to {page}, act on the live \
                 desktop, then agentd resume {} to finish",
                sanitize(&id),
                sanitize(&id)
            );
        }
        endpoint => {
            println!("{}/{page}", endpoint.describe());
            eprintln!(
                "agentd: demonstration {} waits for you at that page: act on the live desktop, then Finish (or agentd \
                 resume {})",
                sanitize(&id),
                sanitize(&id)
            );
        }
    }
    Ok(Exit::Success)
}

/// Approves the waiting step with `action` (one action or an array, screen pixels) run instead of its
/// computer actions.
pub async fn approve_edited(client: &Client, id: &str, action: &str, json: bool) -> CliResult {
    let value: serde_json::Value =
        serde_json::from_str(action).map_err(|e| CliError::invalid(anyhow::anyhow!("--action: not JSON: {e}")))?;
    let actions = match value {
        serde_json::Value::Array(items) => items,
        one @ serde_json::Value::Object(_) => vec![one],
        _ => return Err(CliError::invalid(anyhow::anyhow!("--action: an action object or an array of them"))),
    };
    let body = serde_json::json!({ "actions": actions });
    let path = format!("/v1/tasks/{}/approve", encode(id));
    let (_, reply) = client.call(Method::POST, &path, Some(body.to_string().into_bytes())).await?;
    if json {
        print_json(&reply);
    } else {
        eprintln!("agentd: task {} approved with your actions; it resumes", sanitize(id));
    }
    Ok(Exit::Success)
}
