//! Retention endpoints (docs/operations.md): `DELETE /v1/tasks/{id}` (a finished task, with its steps, events and
//! artifacts) and `POST /v1/prune` (what the retention job would delete now, or with `dry_run` only what
//! it would delete). The work is [`crate::retention::Retention`]'s.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::tasks::body_text;
use super::{ApiError, ApiPath, ApiState};
use crate::retention::{PruneError, PruneReport};

/// Deletes a finished task: 200 with what was removed; 404 for an unknown (or already deleted) task, 409 for
/// one that is not finished (nothing changes).
pub async fn delete(
    State(state): State<Arc<ApiState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let deleted = state.retention.delete(&id).await?;
    state.workers.events_stored.notify_waiters();
    Ok(Json(json!({
        "id": deleted.id,
        "deleted": true,
        "artifacts": deleted.artifacts.objects,
        "bytes": deleted.artifacts.bytes,
        "artifacts_pending": deleted.artifacts_pending,
    })))
}

/// `POST /v1/prune`: `{"dry_run"?: bool, "older_than_days"?: integer}`, or no body.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct PruneBody {
    #[serde(default)]
    dry_run: bool,
    older_than_days: Option<u32>,
}

pub async fn prune(
    State(state): State<Arc<ApiState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let text = body_text(body)?;
    let body: PruneBody = if text.trim().is_empty() {
        PruneBody::default()
    } else {
        crate::task::parse_json(&text, "request body").map_err(|e| {
            let field = e.field().map(str::to_string);
            ApiError { status: StatusCode::BAD_REQUEST, code: "invalid_prune", message: e.to_string(), field }
        })?
    };
    let days = match body.older_than_days {
        Some(days) => days,
        None if state.config.retention.finished_days == 0 => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_prune",
                "older_than_days: retention is off on this daemon (retention.finished_days = 0); say how old a \
                 finished task must be to go",
            )
            .with_field("older_than_days"));
        }
        None => state.config.retention.finished_days,
    };
    let report = if body.dry_run {
        state.retention.dry_run(days).await.map_err(|e| match e {
            PruneError::Queue(e) => ApiError::from(e),
            PruneError::Artifacts(e) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", e.to_string()),
        })?
    } else {
        // Not cut short when the client goes away: a prune that started finishes its batches.
        state.retention.prune(days, &CancellationToken::new()).await?
    };
    Ok(Json(report_json(&report)))
}

fn report_json(report: &PruneReport) -> serde_json::Value {
    json!({
        "dry_run": report.dry_run,
        "older_than_days": report.older_than_days,
        "tasks": report.tasks,
        "ids": report.ids,
        "artifacts": report.artifacts.objects,
        "bytes": report.artifacts.bytes,
        "artifacts_pending": report.artifacts_pending,
    })
}
