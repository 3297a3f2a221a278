//! Task endpoints: submit, list, status, cancel, approve, reject, remote tool results, answers to the
//! model's questions, screenshots; and `/livez`, `/healthz`, `/metrics`.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::{ApiError, ApiPath, ApiQuery, ApiState};
use crate::artifacts::ArtifactError;
use crate::backends;
use crate::queue::{Cancelled, Decision, HumanAnswer, ListFilter, NewTask, Submitted, ToolAnswer};
use crate::record::events::EventKind;
use crate::record::{EndReason, ScreenshotRef, TaskState};
use crate::status::{ListedTask, TaskRecord};
use crate::task::{TaskFileError, TaskId, TaskSpec};

pub(super) fn body_text(body: Result<Bytes, BytesRejection>) -> Result<String, ApiError> {
    let bytes = body.map_err(|rejection| {
        let status = rejection.status();
        let code = if status == StatusCode::PAYLOAD_TOO_LARGE { "payload_too_large" } else { "invalid_body" };
        ApiError::new(status, code, rejection.body_text())
    })?;
    String::from_utf8(bytes.to_vec())
        .map_err(|_| ApiError::new(StatusCode::BAD_REQUEST, "invalid_task", "request body: not valid UTF-8"))
}

pub(super) fn invalid_task(e: TaskFileError) -> ApiError {
    let field = e.field().map(str::to_string);
    ApiError { status: StatusCode::BAD_REQUEST, code: "invalid_task", message: e.to_string(), field }
}

pub async fn submit(
    State(state): State<Arc<ApiState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<TaskRecord>), ApiError> {
    let text = body_text(body)?;
    let spec = TaskSpec::parse(&text, "request body").map_err(invalid_task)?;
    // The label of computer sessions routes a task to the node that holds its client; a task that named it
    // would run with no model (`api::sessions`).
    if super::sessions::is_session(&spec) {
        let session = super::sessions::SESSION_LABEL;
        let message = format!("request body: field `labels.{session}`: reserved for computer sessions (/v1/sessions)");
        return Err(
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_task", message).with_field(format!("labels.{session}"))
        );
    }
    // A demonstration's label keeps every worker off its task (`api::demonstrations`).
    if super::demonstrations::is_demonstration(&spec) {
        let label = super::demonstrations::DEMONSTRATION_LABEL;
        let message = format!("request body: field `labels.{label}`: reserved for demonstrations (/v1/demonstrations)");
        return Err(
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_task", message).with_field(format!("labels.{label}"))
        );
    }
    Ok(match submit_spec(&state, spec).await? {
        Submitted::Created(record) => (StatusCode::CREATED, Json(record)),
        Submitted::Existing(record) => (StatusCode::OK, Json(record)),
    })
}

/// A task file, checked as one submitted over the API, queued; the claim loop woken.
pub(super) async fn submit_spec(state: &ApiState, mut spec: TaskSpec) -> Result<Submitted, ApiError> {
    if state.stopping.is_cancelled() {
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting_down", "agentd is shutting down"));
    }
    let resolved = spec.resolve(&state.config.defaults, &state.config.guard);
    backends::check(&resolved, &state.config).await.map_err(ApiError::from)?;
    if let Some(replay) = &spec.replay {
        // Only a succeeded task with a record can be replayed (docs/replay-and-verify.md).
        let record = match state.queue.get(replay.of.as_str()).await {
            Ok(record) => record,
            Err(crate::queue::QueueError::NotFound(_)) => {
                let message = format!("replay.of: no record of task {} to replay", replay.of);
                return Err(ApiError::new(StatusCode::BAD_REQUEST, "invalid_task", message).with_field("replay.of"));
            }
            Err(e) => return Err(e.into()),
        };
        crate::library::check_replayable(replay, &record).map_err(ApiError::from)?;
    }
    if spec.id.is_none() {
        spec.id = Some(TaskId::generate());
    }
    let submitted = state.queue.submit(NewTask { spec, max_attempts: state.config.queue.max_attempts }).await?;
    state.workers.wake.notify_one();
    Ok(submitted)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    state: Option<String>,
    limit: Option<u32>,
}

pub async fn list(
    State(state): State<Arc<ApiState>>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let filter_state = query.state.as_deref().map(TaskState::from_str).transpose().map_err(|e| ApiError {
        field: Some("state".into()),
        ..ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", e)
    })?;
    let tasks = state
        .queue
        .list(&ListFilter { state: filter_state, limit: query.limit.unwrap_or(100), ..ListFilter::default() })
        .await?;
    // The list leaves the steps out (they can be long); each task says how many it has in `step_count`. A task
    // whose stored row cannot be read is listed in its place as `{id, state?, created_at, error}`.
    let ids: Vec<String> = tasks.iter().filter_map(ListedTask::record).map(|task| task.id.clone()).collect();
    let counts = state.queue.step_counts(&ids).await?;
    let tasks: Vec<serde_json::Value> = tasks
        .iter()
        .map(|task| match task {
            ListedTask::Record(record) => {
                let mut value = serde_json::to_value(record).unwrap_or_default();
                if let Some(fields) = value.as_object_mut() {
                    fields.insert("step_count".into(), counts.get(&record.id).copied().unwrap_or(0).into());
                }
                value
            }
            ListedTask::Unreadable(unreadable) => serde_json::to_value(unreadable).unwrap_or_default(),
        })
        .collect();
    Ok(Json(json!({ "tasks": tasks })))
}

pub async fn status(
    State(state): State<Arc<ApiState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<TaskRecord>, ApiError> {
    let mut record = state.queue.get(&id).await?;
    share_screenshots(state.store.as_ref(), &mut record).await;
    Ok(Json(record))
}

/// Replaces the stored screenshot URLs (stable and unsigned, `s3://…`) with ones a client can open now
/// (presigned for S3: local HMAC work, no request). If presigning fails, the stored URLs stay, and the rest
/// of the document is not held up trying again.
async fn share_screenshots(store: &dyn crate::artifacts::ArtifactStore, record: &mut TaskRecord) {
    let screenshots = record.steps.iter_mut().map(|step| &mut step.screenshot).chain(record.final_screenshot.as_mut());
    for screenshot in screenshots {
        match store.shareable_url(&screenshot.key).await {
            Ok(url) => screenshot.url = url,
            Err(e) => {
                tracing::debug!(error = %e, "cannot presign screenshot URLs; the status shows the stored ones");
                break;
            }
        }
    }
}

pub async fn cancel(
    State(state): State<Arc<ApiState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    match state.queue.cancel(&id).await? {
        Cancelled::Now => {
            state.hands.let_go(&id).await;
            state.metrics.task_finished(TaskState::Cancelled, EndReason::Cancelled);
            state.workers.events_stored.notify_waiters();
            Ok((StatusCode::OK, Json(json!({"id": id, "state": "cancelled"}))))
        }
        Cancelled::Requested => {
            // When this process runs the task, stop it now rather than at the next heartbeat.
            state.workers.cancel_local(&id);
            Ok((StatusCode::ACCEPTED, Json(json!({"id": id, "state": "running", "cancel": "requested"}))))
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RejectBody {
    #[serde(default)]
    reason: String,
}

/// `POST /v1/tasks/{id}/approve`: empty, `{}`, or `{"actions": [ACTION, …]}` — the actions (screen pixels)
/// to run instead of the waiting step's computer actions (docs/humans.md).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ApproveBody {
    #[serde(default)]
    actions: Option<Vec<agentd_computer::Action>>,
}

fn invalid_body(e: TaskFileError) -> ApiError {
    ApiError { code: "invalid_body", ..invalid_task(e) }
}

pub async fn approve(
    State(state): State<Arc<ApiState>>,
    ApiPath(id): ApiPath<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let text = body_text(body)?;
    let body: ApproveBody = if text.trim().is_empty() {
        ApproveBody::default()
    } else {
        crate::task::parse_json(&text, "request body").map_err(invalid_body)?
    };
    // A question waits for an answer, not a yes: approving it would only park it again (reject still ends it).
    if let Some(crate::record::Waiting::Question { .. }) = state.queue.get(&id).await?.waiting {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "wrong_state",
            format!(
                "task {id} is waiting_for_human: it waits for the answer to its question (agentd answer), not an approval"
            ),
        ));
    }
    let edited = body.actions.is_some();
    let decision = match body.actions {
        Some(actions) => Decision::ApproveEdited { actions },
        None => Decision::Approve,
    };
    // Decided under the row's lock with the answer written into the waiting step: a 200 here is an approval
    // the record keeps, whatever comes next (a cancel right after it ends the task before the calls run).
    let now = state.queue.decide(&id, &decision).await.map_err(|e| match e {
        crate::queue::QueueError::Invalid { field, message } => {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", format!("{field}: {message}")).with_field(field)
        }
        other => other.into(),
    })?;
    state.workers.wake.notify_one();
    Ok(Json(json!({"id": id, "state": now.as_str(), "approved": true, "edited": edited})))
}

pub async fn reject(
    State(state): State<Arc<ApiState>>,
    ApiPath(id): ApiPath<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let text = body_text(body)?;
    let body: RejectBody = if text.trim().is_empty() {
        RejectBody::default()
    } else {
        crate::task::parse_json(&text, "request body").map_err(invalid_task)?
    };
    // An approval rule's hold goes on (the model is told why); anything else ends the task. The answer is the
    // state the decision left the task in, not one read afterwards (a cancel may have come in between).
    let now = state.queue.decide(&id, &Decision::Reject { reason: body.reason }).await?;
    state.workers.events_stored.notify_waiters();
    if now != TaskState::Failed {
        state.workers.wake.notify_one();
        return Ok(Json(json!({"id": id, "state": "queued", "reason": "rejected"})));
    }
    state.metrics.task_finished(TaskState::Failed, EndReason::Rejected);
    Ok(Json(json!({"id": id, "state": "failed", "reason": "rejected"})))
}

/// `POST /v1/tasks/{id}/tool-results`: `{"results": [{"id", "ok", "output", "details"?}]}` (docs/tools.md).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolResultsBody {
    results: Vec<ToolResultBody>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolResultBody {
    id: String,
    ok: bool,
    output: String,
    #[serde(default)]
    details: Option<serde_json::Value>,
}

/// Answers every pending `remote` tool call of a task in `awaiting_tool` at once, and queues it again.
/// The queue checks the answers against the pending calls in the same transaction that stores them, so two
/// clients answering at once cannot both succeed: the second finds the task `queued` (or further) and gets
/// 409.
pub async fn tool_results(
    State(state): State<Arc<ApiState>>,
    ApiPath(id): ApiPath<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let text = body_text(body)?;
    let body: ToolResultsBody = crate::task::parse_json(&text, "request body")
        .map_err(|e| ApiError { code: "invalid_tool_results", ..invalid_task(e) })?;
    let answers: Vec<ToolAnswer> = body
        .results
        .into_iter()
        .map(|r| ToolAnswer { id: r.id, ok: r.ok, output: r.output, details: r.details.filter(|d| !d.is_null()) })
        .collect();
    state.queue.answer_tools(&id, &answers).await?;
    state.workers.wake.notify_one();
    state.workers.events_stored.notify_waiters();
    let answered: Vec<&str> = answers.iter().map(|a| a.id.as_str()).collect();
    Ok(Json(json!({"id": id, "state": "queued", "answered": answered})))
}

/// `POST /v1/tasks/{id}/answer`: `{"text"}`, a person's answer to the model's `ask_human` question (docs/humans.md).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerBody {
    text: String,
}

/// The text becomes the `ask_human` call's result and the task is queued again. The queue decides under the
/// row's lock, so of two answers at once one wins and the other gets 409, as does an answer to a task that
/// waits for an approval or for nothing.
pub async fn answer(
    State(state): State<Arc<ApiState>>,
    ApiPath(id): ApiPath<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let text = body_text(body)?;
    let body: AnswerBody = crate::task::parse_json(&text, "request body")
        .map_err(|e| ApiError { code: "invalid_answer", ..invalid_task(e) })?;
    if body.text.trim().is_empty() {
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "invalid_answer", "text: the answer must not be blank")
            .with_field("text".to_string()));
    }
    state.queue.answer_question(&id, &HumanAnswer::Text(body.text)).await?;
    state.workers.wake.notify_one();
    state.workers.events_stored.notify_waiters();
    Ok(Json(json!({"id": id, "state": "queued", "answered": true})))
}

#[derive(Deserialize)]
pub struct StepPath {
    id: String,
    index: u32,
}

pub async fn screenshot(
    State(state): State<Arc<ApiState>>,
    ApiPath(StepPath { id, index }): ApiPath<StepPath>,
) -> Result<Response, ApiError> {
    let record = state.queue.get(&id).await?;
    let reference = match record.steps.iter().find(|s| s.index == index) {
        Some(step) => step.screenshot.clone(),
        None => match record.final_screenshot.filter(|_| index as usize == record.steps.len()) {
            Some(reference) => reference,
            // The step in progress: its screenshot is stored before the model has answered and the step is
            // journaled (the console shows it at once).
            None => saved_screenshot(&state, &id, index).await?.ok_or_else(|| {
                ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("task {id} has no step {index}"))
            })?,
        },
    };
    let bytes = match state.store.get(&reference.key).await {
        Ok(bytes) => bytes,
        Err(ArtifactError::NotFound(_)) if was_stored(&state, &id, &reference.key).await? => {
            return Err(ApiError::new(
                StatusCode::GONE,
                "screenshot_missing",
                format!("the screenshot of step {index} was stored but is no longer in the artifact store"),
            ));
        }
        Err(ArtifactError::NotFound(_)) => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "not_stored_yet",
                format!("the screenshot of step {index} is not stored yet"),
            ));
        }
        Err(other) => return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", other.to_string())),
    };
    Ok(([(header::CONTENT_TYPE, crate::artifacts::content_type(&reference.key))], bytes).into_response())
}

/// The latest screenshot the events say was stored for step `index` of task `id` (a step not journaled yet).
async fn saved_screenshot(state: &ApiState, id: &str, index: u32) -> Result<Option<ScreenshotRef>, ApiError> {
    let mut after = 0;
    let mut found = None;
    loop {
        let events = state.queue.events_after(id, after, 500).await?;
        let Some(last) = events.last() else { return Ok(found) };
        after = last.seq;
        for event in events {
            if let EventKind::ScreenshotSaved { step, key, url, width, height, .. } = event.kind
                && step == index
            {
                found = Some(ScreenshotRef { url, width, height, key });
            }
        }
    }
}

/// Whether the store once had the artifact `key` of task `id`: its `screenshot_saved` event is written only
/// after the store took it (whichever node uploaded it).
async fn was_stored(state: &ApiState, id: &str, key: &str) -> Result<bool, ApiError> {
    let mut after = 0;
    loop {
        let events = state.queue.events_after(id, after, 500).await?;
        let Some(last) = events.last() else { return Ok(false) };
        after = last.seq;
        if events.iter().any(|e| matches!(&e.kind, EventKind::ScreenshotSaved { key: saved, .. } if saved == key)) {
            return Ok(true);
        }
    }
}

/// `GET /livez`: the process is up and its runtime answers. Nothing else is checked and nothing is said,
/// so it needs no token, also on TCP (the guard lets it through).
pub async fn live() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /healthz`, readiness: 200 when the queue is reachable, the artifact store healthy, the claim loop
/// going round and the daemon not stopping; else 503, with each failing check in `reasons`.
pub async fn health(State(state): State<Arc<ApiState>>) -> (StatusCode, Json<serde_json::Value>) {
    let queue = state.queue.health().await.map_err(|e| e.to_string());
    let artifacts = state.store.health().await.map_err(|e| e.to_string());
    let stopping = state.stopping.is_cancelled();
    let claim_age_ms = crate::queue::now_ms() - state.workers.claim_loop_alive_ms.load(Ordering::Relaxed);
    // A stopping daemon's claim loop has ended on purpose: that is said once, as `stopping`.
    let workers_alive = stopping || claim_age_ms < 30_000 + state.config.queue.poll_ms as i64;
    let uploads = state.uploader.stats();
    let mut reasons = Vec::new();
    if let Err(e) = &queue {
        reasons.push(format!("queue: {e}"));
    }
    if let Err(e) = &artifacts {
        reasons.push(format!("artifacts: {e}"));
    }
    let workers = format!("claim loop silent for {claim_age_ms} ms");
    if !workers_alive {
        reasons.push(format!("workers: {workers}"));
    }
    if stopping {
        reasons.push("stopping: agentd is shutting down".to_string());
    }
    // A desktop out of the pool is shown; the daemon is unready only when every desktop failed.
    let desktops = state.pool.status();
    if !desktops.is_empty() && desktops.iter().all(|d| d.state == "failed") {
        reasons.push("desktops: every desktop of the pool failed".to_string());
    }
    let ok = reasons.is_empty();
    let describe = |r: &Result<(), String>| match r {
        Ok(()) => json!("ok"),
        Err(e) => json!(e),
    };
    let body = json!({
        "status": if ok { "ok" } else { "unhealthy" },
        "reasons": reasons,
        "queue": describe(&queue),
        "artifacts": describe(&artifacts),
        "workers": if workers_alive { json!("ok") } else { json!(workers) },
        "running": state.workers.running(),
        "uploads_pending": uploads.pending,
        "spool_bytes": uploads.spooled_bytes,
        "spool_full": uploads.spool_full,
        "stopping": stopping,
    });
    let mut body = body;
    if !desktops.is_empty() {
        body["desktops"] = json!(desktops);
    }
    (if ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE }, Json(body))
}

pub async fn metrics(State(state): State<Arc<ApiState>>) -> Result<Response, ApiError> {
    let counts = state.queue.counts().await?;
    let process = crate::metrics::ProcessStats::read();
    let mut text = state.metrics.render(&counts, state.workers.running(), state.uploader.stats(), &process);
    text.push_str(&crate::metrics::render_desktops(
        &state.pool.status().iter().map(|d| (d.name.as_str(), d.state, d.resets)).collect::<Vec<_>>(),
    ));
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response())
}
