//! `POST /v1/tasks/{id}/messages` (docs/humans.md): the user's next message to a finished task queues a new turn of it,
//! with its history. `{"text"}`: not blank, at most as long as a task's instructions may be. A task that is
//! not finished is refused (409), an unknown one is 404, and a refused message changes nothing.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde::Deserialize;

use super::tasks::body_text;
use super::{ApiError, ApiPath, ApiState};
use crate::status::TaskRecord;
use crate::task::Instructions;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MessageBody {
    text: String,
}

/// The message's text, or why it cannot be one (naming `text`).
fn checked(text: &str) -> Result<(), ApiError> {
    let refuse =
        |message: String| ApiError::new(StatusCode::BAD_REQUEST, "invalid_message", message).with_field("text");
    if text.trim().is_empty() {
        return Err(refuse("text: the message must not be empty".into()));
    }
    if text.chars().count() > Instructions::MAX_CHARS {
        return Err(refuse(format!("text: the message is longer than {} characters", Instructions::MAX_CHARS)));
    }
    Ok(())
}

pub async fn send(
    State(state): State<Arc<ApiState>>,
    ApiPath(id): ApiPath<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<TaskRecord>, ApiError> {
    if state.stopping.is_cancelled() {
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting_down", "agentd is shutting down"));
    }
    let text = body_text(body)?;
    let body: MessageBody = crate::task::parse_json(&text, "request body").map_err(|e| {
        let field = e.field().map(str::to_string);
        ApiError { status: StatusCode::BAD_REQUEST, code: "invalid_message", message: e.to_string(), field }
    })?;
    checked(&body.text)?;
    let record = state.queue.add_turn(&id, &body.text).await?;
    state.workers.wake.notify_one();
    state.workers.events_stored.notify_waiters();
    Ok(Json(record))
}

#[cfg(test)]
mod tests {
    use super::checked;

    #[test]
    fn a_message_is_not_blank_and_not_longer_than_instructions() {
        assert!(checked("now export April").is_ok());
        for bad in [String::new(), " \n\t".to_string(), "x".repeat(crate::task::Instructions::MAX_CHARS + 1)] {
            let e = checked(&bad).expect_err("refused");
            assert_eq!((e.status.as_u16(), e.field.as_deref()), (400, Some("text")));
        }
    }
}
