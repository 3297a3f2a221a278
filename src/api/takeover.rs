//! Take-over endpoints (docs/humans.md): `POST /v1/tasks/{id}/pause` parks a task for a person (a queued one at once, a
//! running one after its current step, on whichever node runs it) and `POST /v1/tasks/{id}/resume
//! {"note"?}` hands the desktop back.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::json;

use super::tasks::body_text;
use super::{ApiError, ApiPath, ApiState};
use crate::hands::HandsError;
use crate::queue::Paused;

pub async fn pause(
    State(state): State<Arc<ApiState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    match state.queue.pause(&id).await? {
        Paused::Now => {
            state.workers.events_stored.notify_waiters();
            Ok((StatusCode::OK, Json(json!({"id": id, "state": "waiting_for_human"}))))
        }
        Paused::Requested => {
            // When this process runs the task, tell it now rather than at the next heartbeat.
            state.workers.pause_local(&id);
            Ok((StatusCode::ACCEPTED, Json(json!({"id": id, "state": "running", "pause": "requested"}))))
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ResumeBody {
    #[serde(default)]
    note: Option<String>,
}

/// The longest note a person may hand the model.
const MAX_NOTE_CHARS: usize = 4000;

pub async fn resume(
    State(state): State<Arc<ApiState>>,
    ApiPath(id): ApiPath<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let text = body_text(body)?;
    let body: ResumeBody = if text.trim().is_empty() {
        ResumeBody::default()
    } else {
        crate::task::parse_json(&text, "request body").map_err(|e| {
            let field = e.field().map(str::to_string);
            ApiError { status: StatusCode::BAD_REQUEST, code: "invalid_body", message: e.to_string(), field }
        })?
    };
    if body.note.as_ref().is_some_and(|n| n.chars().count() > MAX_NOTE_CHARS) {
        let message = format!("note: at most {MAX_NOTE_CHARS} characters");
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", message).with_field("note"));
    }
    let note = body.note.filter(|n| !n.trim().is_empty());
    // A demonstration is finished by handing its desktop back: the screen left is its last step, which ends it.
    let record = state.queue.get(&id).await?;
    if super::demonstrations::is_demonstration(&record.task) {
        let summary = note.unwrap_or_else(|| super::demonstrations::default_summary(record.steps.len()));
        let finished = state.hands.finish(&id, &summary).await.map_err(|e| hands_error(&id, record.state, e))?;
        state.workers.events_stored.notify_waiters();
        return Ok(Json(json!({"id": id, "state": "succeeded", "finished": true, "step": finished.step})));
    }
    // The desktop a person held here through the live view is let go first: the task's next attempt finds it
    // free, with the person's last action finished.
    state.hands.let_go(&id).await;
    state.queue.resume(&id, note.as_deref()).await?;
    state.workers.wake.notify_one();
    state.workers.events_stored.notify_waiters();
    Ok(Json(json!({"id": id, "state": "queued", "resumed": true})))
}

/// The API's answer to what a person's hands could not do.
fn hands_error(id: &str, state: crate::record::TaskState, e: HandsError) -> ApiError {
    match e {
        HandsError::NotTakenOver => ApiError::from(crate::queue::QueueError::WrongState {
            id: id.to_string(),
            state: state.as_str(),
            message: "only a demonstration waiting for its person can be finished".into(),
        }),
        HandsError::Unavailable(message) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message),
        HandsError::Invalid(message) => ApiError::new(StatusCode::BAD_REQUEST, "invalid_action", message),
        HandsError::Queue(e) => e.into(),
    }
}
