//! The task tools over the daemon's HTTP API: each tool is the request the matching CLI command makes, and
//! `run_task` follows the task's event stream as `agentd submit --wait` does.

use std::time::Duration;

use rmcp::model::CallToolResult;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{
    Call, StepProgress, TaskTool, elicit, encode, json_result, mime_of, optional_text, run_result, task_of, text_arg,
};
use crate::record::TaskState;
use crate::record::events::{Event, EventKind};
use crate::status::TaskRecord;
use crate::task::TaskSpec;

/// The daemon's API as the MCP server reaches it: the CLI's client (Unix socket or TCP, with its token) for
/// `agentd mcp`, the daemon's own router for `/mcp`. The boundary to another process (or to the API's own
/// handlers): what it answers is the API's, status and JSON body.
#[async_trait::async_trait]
pub trait DaemonApi: Send + Sync {
    /// One request: the HTTP status and the JSON body (`null` when the body is not JSON). `Err` when the
    /// daemon cannot be reached, in words for the client.
    async fn request(&self, method: &str, path: &str, body: Option<Value>) -> Result<(u16, Value), String>;

    /// A GET whose answer is bytes (a screenshot): the status and the body.
    async fn get_bytes(&self, path: &str) -> Result<(u16, Vec<u8>), String>;

    /// Sends the task's events, from the first, on `events` until `task_finished` (or until the receiver is
    /// dropped).
    async fn follow(&self, task_id: &str, events: mpsc::UnboundedSender<Event>) -> Result<(), String>;

    /// Makes a task file self-contained for the daemon (script and scene files named by relative paths are
    /// read here and inlined, as `agentd submit` does); `Err` names the field at fault.
    fn prepare(&self, spec: TaskSpec) -> Result<TaskSpec, String>;
}

/// A call's answer: `Ok` with the body when the API accepted it, else its error message.
pub(super) async fn call_api(
    api: &dyn DaemonApi,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Result<Value, String> {
    let (status, reply) = api.request(method, path, body).await?;
    if (200..300).contains(&status) {
        return Ok(reply);
    }
    let message = reply["error"]["message"].as_str().map_or_else(|| format!("HTTP {status}"), str::to_string);
    Err(match status {
        401 => format!("{message} (the daemon refused the token: it comes from $AGENTD_TOKEN or api.token_file)"),
        _ => message,
    })
}

fn record_of(value: Value) -> Result<TaskRecord, String> {
    serde_json::from_value(value).map_err(|e| format!("unexpected reply from agentd: {e}"))
}

fn task_path(id: &str, rest: &str) -> String {
    format!("/v1/tasks/{}{rest}", encode(id))
}

pub(super) async fn call(
    api: &dyn DaemonApi,
    tool: TaskTool,
    args: serde_json::Map<String, Value>,
    call: &Call,
) -> Result<CallToolResult, String> {
    match tool {
        TaskTool::RunTask => run_task(api, args, call).await,
        TaskTool::SubmitTask => {
            let record = submit(api, args).await?;
            Ok(json_result(&json!({"id": record.id, "state": record.state})))
        }
        TaskTool::GetTask => {
            let id = text_arg(&args, "id")?;
            Ok(json_result(&call_api(api, "GET", &task_path(&id, ""), None).await?))
        }
        TaskTool::ListTasks => {
            let mut path = "/v1/tasks?".to_string();
            if let Some(state) = optional_text(&args, "state")? {
                path.push_str(&format!("state={}&", encode(&state)));
            }
            let limit = match args.get("limit") {
                None | Some(Value::Null) => 20,
                Some(limit) => limit.as_u64().filter(|n| (1..=1000).contains(n)).ok_or("`limit` must be 1–1000")?,
            };
            path.push_str(&format!("limit={limit}"));
            let reply = call_api(api, "GET", &path, None).await?;
            let tasks: Vec<Value> =
                reply["tasks"].as_array().map(|tasks| tasks.iter().map(listed).collect()).unwrap_or_default();
            Ok(json_result(&json!({ "tasks": tasks })))
        }
        TaskTool::Answer => {
            let id = text_arg(&args, "id")?;
            let text = text_arg(&args, "text")?;
            let reply = call_api(api, "POST", &task_path(&id, "/answer"), Some(json!({ "text": text }))).await?;
            Ok(json_result(&reply))
        }
        TaskTool::Approve => {
            let id = text_arg(&args, "id")?;
            Ok(json_result(&call_api(api, "POST", &task_path(&id, "/approve"), None).await?))
        }
        TaskTool::Reject => {
            let id = text_arg(&args, "id")?;
            let reason = optional_text(&args, "reason")?.unwrap_or_default();
            let reply = call_api(api, "POST", &task_path(&id, "/reject"), Some(json!({ "reason": reason }))).await?;
            Ok(json_result(&reply))
        }
        TaskTool::Cancel => {
            let id = text_arg(&args, "id")?;
            cancel(api, &id).await.map(|reply| json_result(&reply))
        }
        TaskTool::SendMessage => {
            let id = text_arg(&args, "id")?;
            let text = text_arg(&args, "text")?;
            let reply = call_api(api, "POST", &task_path(&id, "/messages"), Some(json!({ "text": text }))).await?;
            let record = record_of(reply)?;
            let turn = record.turns.last().map_or(0, |t| t.index);
            Ok(json_result(&json!({"id": record.id, "state": record.state, "turn": turn})))
        }
        // The server holds the session's lease (`TaskServer::computer_call`).
        TaskTool::LeaseComputer | TaskTool::ReleaseComputer => Err(format!("{} is the server's own", tool.name())),
    }
}

/// A listed task, short: what a client needs to pick one (`get_task` gives the rest).
fn listed(task: &Value) -> Value {
    let mut out = json!({
        "id": task["id"],
        "state": task["state"],
        "created_at": task["created_at"],
        "steps": task["step_count"],
        "instructions": task["task"]["instructions"],
    });
    if let Some(outcome) = task.get("outcome").filter(|o| !o.is_null()) {
        out["outcome"] =
            json!({"success": outcome["success"], "summary": outcome["summary"], "reason": outcome["reason"]});
    }
    if let Some(error) = task.get("error") {
        out["error"] = error.clone();
    }
    out
}

async fn submit(api: &dyn DaemonApi, args: serde_json::Map<String, Value>) -> Result<TaskRecord, String> {
    let spec = api.prepare(task_of(args)?)?;
    let body = serde_json::to_value(&spec).map_err(|e| format!("the task: {e}"))?;
    record_of(call_api(api, "POST", "/v1/tasks", Some(body)).await?)
}

/// `cancel`: a task that already finished is not an error (as `agentd cancel`).
async fn cancel(api: &dyn DaemonApi, id: &str) -> Result<Value, String> {
    let (status, reply) = api.request("POST", &task_path(id, "/cancel"), None).await?;
    if status == 409 && reply["error"]["code"] == "wrong_state" {
        let record = record_of(call_api(api, "GET", &task_path(id, ""), None).await?)?;
        if record.state.is_terminal() {
            return Ok(json!({"id": record.id, "state": record.state, "cancel": "already_finished"}));
        }
    }
    if (200..300).contains(&status) {
        return Ok(reply);
    }
    Err(reply["error"]["message"].as_str().map_or_else(|| format!("HTTP {status}"), str::to_string))
}

/// `run_task`: submit, follow the events (progress per step) to `task_finished`, then the record and its last
/// screenshot. A cancelled request cancels the task.
async fn run_task(
    api: &dyn DaemonApi,
    args: serde_json::Map<String, Value>,
    call: &Call,
) -> Result<CallToolResult, String> {
    let record = submit(api, args).await?;
    let id = record.id.clone();
    let (sender, mut events) = mpsc::unbounded_channel();
    let follow = api.follow(&id, sender);
    tokio::pin!(follow);
    let mut progress = StepProgress::default();
    let mut followed = false;
    // The person at the client, asked about each wait of the task (elicitation).
    let mut asking = futures_util::stream::FuturesUnordered::new();
    loop {
        tokio::select! {
            () = call.cancelled.cancelled() => {
                let cancelled = cancel(api, &id).await;
                return Err(match cancelled {
                    Ok(_) => format!("the request was cancelled; task {id} is cancelled"),
                    Err(e) => format!("the request was cancelled; cancelling task {id} failed: {e}"),
                });
            }
            Some(said) = futures_util::StreamExt::next(&mut asking), if !asking.is_empty() => tell(api, &id, said).await,
            event = events.recv() => match event {
                Some(event) => {
                    if matches!(event.kind, EventKind::WaitingForHuman { .. }) {
                        // The queue parks the task just after the event that announces the wait (its step's
                        // screenshot is stored first): an answer sent before then would be refused as too
                        // early, so the client is told once the task is waiting.
                        agreed(api, &id, |state| state == TaskState::WaitingForHuman || state.is_terminal()).await?;
                    }
                    if let EventKind::WaitingForHuman { reason, question, .. } = &event.kind
                        && elicit::can_ask(&call.peer)
                    {
                        let (peer, task, reason, question) =
                            (call.peer.clone(), id.clone(), reason.clone(), question.clone());
                        asking.push(async move { elicit::ask(&peer, &task, &reason, question.as_deref()).await });
                    }
                    let finished = matches!(event.kind, EventKind::TaskFinished { .. });
                    progress.event(&event, call).await;
                    if finished {
                        break;
                    }
                }
                // The follower ended (and dropped its sender) without `task_finished`.
                None => break,
            },
            result = &mut follow, if !followed => {
                followed = true;
                result?;
            }
        }
    }
    // The queue records the end just after the event that announces it: wait for it to agree.
    let record = agreed(api, &id, |state| state.is_terminal()).await?;
    let screenshot = last_screenshot(api, &record).await;
    Ok(run_result(&record, screenshot))
}

/// The task's record once its state is one `wanted` takes — the queue writes a state just after the event
/// that announces it — or, after 5 s without it, the record as it is.
async fn agreed(api: &dyn DaemonApi, id: &str, wanted: impl Fn(TaskState) -> bool) -> Result<TaskRecord, String> {
    let mut record = record_of(call_api(api, "GET", &task_path(id, ""), None).await?)?;
    for _ in 0..100 {
        if wanted(record.state) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        record = record_of(call_api(api, "GET", &task_path(id, ""), None).await?)?;
    }
    Ok(record)
}

/// Sends the task what the person at the client said (an answer, an approval, a rejection); one that was
/// answered meanwhile elsewhere refuses it, which is only logged.
async fn tell(api: &dyn DaemonApi, id: &str, said: elicit::Said) {
    let (path, body) = match said {
        elicit::Said::Answer(text) => ("/answer", Some(json!({ "text": text }))),
        elicit::Said::Approve => ("/approve", None),
        elicit::Said::Reject => ("/reject", Some(json!({ "reason": "rejected by the person at the MCP client" }))),
        elicit::Said::Nothing => return,
    };
    if let Err(e) = call_api(api, "POST", &task_path(id, path), body).await {
        tracing::info!(task_id = %id, error = %e, "the task did not take what the person at the MCP client said");
    }
}

/// The task's last screenshot: the screen after its last step, else the last step's.
async fn last_screenshot(api: &dyn DaemonApi, record: &TaskRecord) -> Option<(Vec<u8>, &'static str)> {
    let (index, key) = match (&record.final_screenshot, record.steps.last()) {
        (Some(last), _) => (record.steps.len() as u32, last.key.clone()),
        (None, Some(step)) => (step.index, step.screenshot.key.clone()),
        (None, None) => return None,
    };
    let path = format!("/v1/tasks/{}/steps/{index}/screenshot", encode(&record.id));
    match api.get_bytes(&path).await {
        Ok((200, bytes)) => Some((bytes, mime_of(&key))),
        _ => None,
    }
}
