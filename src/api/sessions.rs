//! `/v1/sessions`: a computer leased to an API client that looks and decides itself — an MCP client's
//! `lease_computer`, `agentd mcp --computer` — one action at a time, each answered with the screenshot after
//! it.
//!
//! A session is a task of the queue like any other (`"source": "mcp"` in its metadata, listed, shown in the
//! console, exported and compiled like any), whose model is the client: [`Sessions`] holds, per live session,
//! the [`ComputerServer`] the action requests go through and the model ([`crate::mcp::computer::ClientModel`])
//! that hands them to the task's loop. The task carries the label [`SESSION_LABEL`] with this node's name, which
//! only this node's workers have, so the worker that runs it is one that holds its model. A session's task
//! without a live session here (its client ended it, the daemon restarted) gets a model whose client is gone: the
//! task completes at its next step. A session's task that finishes otherwise (cancelled, a limit) ends the
//! session ([`Sessions::end`], called by the worker).
//!
//! One session per desktop, as tasks: a pool desktop that a task or another session holds is refused (409
//! `desktop_leased`); any other computer waits its turn in the queue as a task would.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::tasks::body_text;
use super::{ApiError, ApiPath, ApiState};
use crate::mcp::computer::{ClientModel, ComputerServer};
use crate::model::Model;
use crate::task::{TaskId, TaskSpec};

/// The label a session's task carries, valued with the name of the node whose client it is.
pub const SESSION_LABEL: &str = "agentd.session";

/// Whether `spec` is a computer session's task (it carries [`SESSION_LABEL`]).
pub fn is_session(spec: &TaskSpec) -> bool {
    spec.labels.keys().any(|key| key.as_str() == SESSION_LABEL)
}

/// What a session's task is asked when the client says nothing.
const SESSION_INSTRUCTIONS: &str = "An API client operates this computer, one action at a time.";

/// The live sessions of this node.
#[derive(Default)]
pub struct Sessions {
    live: Mutex<HashMap<String, Live>>,
}

struct Live {
    server: ComputerServer,
    model: Arc<ClientModel>,
    /// The pool desktop it asked for.
    desktop: Option<String>,
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Live>> {
        // Every change is one insert or remove: a panic while it was held left the map whole.
        self.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The model of the session task `task_id`: its client's, or (no live session here) one whose client is
    /// gone.
    pub fn model(&self, task_id: &str) -> Arc<dyn Model> {
        if let Some(live) = self.lock().get(task_id) {
            return live.model.clone();
        }
        let (server, model) = ComputerServer::new(task_id.to_string());
        drop(server);
        model
    }

    fn server(&self, task_id: &str) -> Option<ComputerServer> {
        self.lock().get(task_id).map(|live| live.server.clone())
    }

    /// Ends the session `task_id` (its client released it, or its task finished: an action on its way is then
    /// answered `session_ended`); `false` when there was none.
    pub fn end(&self, task_id: &str) -> bool {
        self.lock().remove(task_id).is_some()
    }
}

/// `POST /v1/sessions`' body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OpenBody {
    /// A desktop of this daemon's pool, by name.
    desktop: Option<String>,
    /// A task file's computer object.
    computer: Option<Value>,
    instructions: Option<String>,
    secrets: Option<Value>,
    metadata: Option<serde_json::Map<String, Value>>,
}

/// `POST /v1/sessions`: a session's task submitted, its model kept here. 201 `{"task_id", "desktop"?}`.
pub async fn open(
    State(state): State<Arc<ApiState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let text = body_text(body)?;
    let body: OpenBody = serde_json::from_str(&text)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_session", format!("request body: {e}")))?;
    let computer = match (&body.desktop, body.computer) {
        (Some(_), Some(_)) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_session",
                "give `desktop` or `computer`, not both",
            )
            .with_field("computer"));
        }
        (Some(name), None) => Some(json!({ "desktop": name })),
        (None, computer) => computer,
    };
    let instructions = body.instructions.as_deref().filter(|i| !i.trim().is_empty()).unwrap_or(SESSION_INSTRUCTIONS);
    let mut task = crate::mcp::computer::session_task(instructions);
    if let Some(metadata) = body.metadata {
        for (key, value) in metadata {
            task["metadata"][key] = value;
        }
    }
    // The client is the model; the task names one no credential is needed for, which the worker replaces
    // with the client (see `Sessions::model`).
    task["model"] = json!({"provider": "scripted", "script": {"turns": [{
        "say": "The client of this computer session is gone.",
        "complete": {"success": true, "summary": "the computer session's client is gone"},
    }]}});
    task["labels"] = json!({ SESSION_LABEL: state.workers.node() });
    if let Some(computer) = computer {
        task["computer"] = computer;
    }
    if let Some(secrets) = body.secrets {
        task["secrets"] = secrets;
    }
    let mut spec = TaskSpec::parse(&task.to_string(), "request body").map_err(super::tasks::invalid_task)?;
    let task_id = TaskId::generate();
    spec.id = Some(task_id.clone());
    let task_id = task_id.to_string();
    let (server, model) = ComputerServer::new(task_id.clone());
    {
        // Checked and registered under one lock: two sessions asking for one desktop at once get one of it.
        let mut live = state.workers.sessions.lock();
        if let Some(name) = &body.desktop {
            desktop_free(&state, &live, name)?;
        }
        live.insert(task_id.clone(), Live { server, model, desktop: body.desktop.clone() });
    }
    match super::tasks::submit_spec(&state, spec).await {
        Ok(_) => {
            tracing::info!(%task_id, desktop = ?body.desktop, "computer session opened");
            let mut reply = json!({ "task_id": task_id });
            if let Some(name) = body.desktop {
                reply["desktop"] = json!(name);
            }
            Ok((StatusCode::CREATED, Json(reply)))
        }
        Err(e) => {
            state.workers.sessions.end(&task_id);
            Err(e)
        }
    }
}

/// Whether the pool desktop `name` may be leased: this daemon's, not failed, held by no task and no live
/// session.
fn desktop_free(state: &ApiState, live: &HashMap<String, Live>, name: &str) -> Result<(), ApiError> {
    let leased = |by: &str| {
        ApiError::new(StatusCode::CONFLICT, "desktop_leased", format!("desktop {name} is leased by {by}"))
            .with_field("desktop")
    };
    if let Some((id, _)) = live.iter().find(|(_, l)| l.desktop.as_deref() == Some(name)) {
        return Err(leased(&format!("the computer session {id}")));
    }
    let Some(desktop) = state.pool.status().into_iter().find(|d| d.name == name) else {
        let message = format!("no desktop named {name} in this daemon's pool ([[desktops]])");
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "invalid_session", message).with_field("desktop"));
    };
    match desktop.state {
        // A desktop still starting is leased once it is ready: the session's task waits for it in the queue.
        "free" | "starting" => Ok(()),
        "busy" => Err(leased(&format!("task {}", desktop.task_id.unwrap_or_default()))),
        other => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "desktop_unavailable",
            format!("desktop {name} is {other}"),
        )
        .with_field("desktop")),
    }
}

/// `POST /v1/sessions/{id}/actions`' body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ActBody {
    action: Value,
}

/// `POST /v1/sessions/{id}/actions`: one action, carried out as the session task's next step; 200 with its
/// result and the screenshot after it (`{"step", "ok", "screen", "message"?, "page"?, "image": {"media_type",
/// "data"}}`). Waits while the task waits for a worker.
pub async fn act(
    State(state): State<Arc<ApiState>>,
    ApiPath(id): ApiPath<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let text = body_text(body)?;
    let body: ActBody = serde_json::from_str(&text)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_action", format!("request body: {e}")))?;
    let action: agentd_computer::Action = serde_json::from_value(body.action).map_err(|e| {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_action", format!("action: {e}")).with_field("action")
    })?;
    let Some(server) = state.workers.sessions.server(&id) else {
        return Err(no_session(&id));
    };
    match server.act(action).await {
        Ok(result) => Ok(Json(result.to_json())),
        Err(message) => {
            // The task ended (cancelled, a limit, a failure): so has its session.
            state.workers.sessions.end(&id);
            Err(ApiError::new(StatusCode::CONFLICT, "session_ended", message))
        }
    }
}

/// `DELETE /v1/sessions/{id}`: the session ends; its task completes after the step it is on. 202.
pub async fn close(
    State(state): State<Arc<ApiState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    if !state.workers.sessions.end(&id) {
        return Err(no_session(&id));
    }
    tracing::info!(task_id = %id, "computer session ended by its client");
    Ok((StatusCode::ACCEPTED, Json(json!({ "task_id": id, "ended": true }))))
}

fn no_session(id: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no live computer session {id} on this daemon"))
}
