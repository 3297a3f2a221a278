//! `GET /v1/evals` and `GET /v1/evals/{id}` (docs/eval.md): the evaluations `agentd eval` ran through this
//! daemon, newest first, and one evaluation's result so far, summarised from its runs' records
//! (`crate::eval::stored`) — what the console's evaluation pages show.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::json;

use super::{ApiError, ApiPath, ApiQuery, ApiState};
use crate::eval::stored::{self, StoredEval};
use crate::eval::suite::MAX_RUNS;
use crate::queue::ListFilter;
use crate::status::ListedTask;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    limit: Option<u32>,
}

/// The newest evaluations, each found by its first run.
pub async fn list(
    State(state): State<Arc<ApiState>>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let filter = ListFilter {
        limit: query.limit.unwrap_or(50).min(1000),
        id_suffix: Some(stored::FIRST_RUN.to_string()),
        ..ListFilter::default()
    };
    let firsts = state.queue.list(&filter).await?;
    let evals: Vec<_> = firsts.iter().filter_map(ListedTask::record).filter_map(stored::listing).collect();
    Ok(Json(json!({ "evals": evals })))
}

/// One evaluation's result so far.
pub async fn result(
    State(state): State<Arc<ApiState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<StoredEval>, ApiError> {
    let not_found = || ApiError::new(axum::http::StatusCode::NOT_FOUND, "not_found", format!("no evaluation {id}"));
    let filter = ListFilter {
        limit: u32::try_from(MAX_RUNS).unwrap_or(u32::MAX),
        id_prefix: Some(format!("{id}.t")),
        ..ListFilter::default()
    };
    let records: Vec<_> = state
        .queue
        .list(&filter)
        .await?
        .into_iter()
        .filter_map(|task| match task {
            ListedTask::Record(record) => Some(*record),
            ListedTask::Unreadable(_) => None,
        })
        .collect();
    if records.is_empty() {
        return Err(not_found());
    }
    let ids: Vec<String> = records.iter().map(|r| r.id.clone()).collect();
    let counts = state.queue.step_counts(&ids).await?;
    let runs: Vec<_> = records
        .into_iter()
        .map(|record| {
            let steps = counts.get(&record.id).copied().unwrap_or(0);
            (record, steps)
        })
        .collect();
    stored::summarize(&id, &runs).map(Json).ok_or_else(not_found)
}
