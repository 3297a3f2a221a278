//! `POST /v1/demonstrations` (docs/humans.md "Demonstrations"): a task whose steps are all a person's.
//!
//! A demonstration is a task of the queue like any other (listed, shown in the console, exported, compiled
//! and replayed like any), made parked for a person from the start: it carries the label
//! [`DEMONSTRATION_LABEL`], which no worker has, so no model ever runs it; its model is a one-turn script that
//! would fail saying so.
//! The person acts through its live view (`api::live`, `crate::hands`), and finishing it — handing the
//! desktop back (`POST /v1/tasks/{id}/resume`, the console's Finish) — records the screen they left as its last
//! step, whose `task_completion` ends it `succeeded` with their note as the summary.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::tasks::{body_text, invalid_task, submit_spec};
use super::{ApiError, ApiState};
use crate::queue::Submitted;
use crate::status::TaskRecord;
use crate::task::TaskSpec;

/// The label of a demonstration's task (valued `"true"`): no worker has it, so none claims the task.
pub const DEMONSTRATION_LABEL: &str = "agentd.demonstration";

/// What a demonstration's task is asked when the request says nothing.
const DEMONSTRATION_INSTRUCTIONS: &str = "A person's demonstration.";

/// Whether `spec` is a demonstration's task (it carries [`DEMONSTRATION_LABEL`]).
pub fn is_demonstration(spec: &TaskSpec) -> bool {
    spec.labels.keys().any(|key| key.as_str() == DEMONSTRATION_LABEL)
}

/// A demonstration's summary when the person gives none.
pub fn default_summary(steps: usize) -> String {
    format!("a person's demonstration of {steps} steps")
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DemonstrationBody {
    /// The computer, as a task file names it (a pool desktop as `{"desktop": NAME}`).
    computer: Value,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    id: Option<String>,
}

pub async fn create(
    State(state): State<Arc<ApiState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<TaskRecord>), ApiError> {
    let text = body_text(body)?;
    let body: DemonstrationBody = crate::task::parse_json(&text, "request body").map_err(|e| {
        let field = e.field().map(str::to_string);
        ApiError { status: StatusCode::BAD_REQUEST, code: "invalid_body", message: e.to_string(), field }
    })?;
    let mut task = json!({
        "instructions": body.instructions.unwrap_or_else(|| DEMONSTRATION_INSTRUCTIONS.to_string()),
        "computer": body.computer,
        // Never run (no worker takes the task); were it run, it would fail saying why.
        "model": {"provider": "scripted", "script": {"turns": [
            {"complete": {"success": false, "summary": "a demonstration is done by a person, not by a model"}}
        ]}},
        "labels": {DEMONSTRATION_LABEL: "true"},
    });
    if let Some(id) = body.id {
        task["id"] = Value::String(id);
    }
    let spec = TaskSpec::parse(&task.to_string(), "request body").map_err(invalid_task)?;
    let record = match submit_spec(&state, spec).await? {
        Submitted::Created(record) => record,
        Submitted::Existing(record) => return Ok((StatusCode::OK, Json(record))),
    };
    // Parked for the person at once: it is queued, and no worker claims it meanwhile (none has its label).
    state.queue.pause(&record.id).await?;
    state.workers.events_stored.notify_waiters();
    Ok((StatusCode::CREATED, Json(state.queue.get(&record.id).await?)))
}
