//! `GET /v1/tasks/{id}/events`: the task's events as Server-Sent Events, `id:` = seq, resumable with
//! `Last-Event-ID` (or `?after=N`). Stored events are sent first; then the stream waits for new ones (woken
//! when this process stores events, polling the queue as a safety net for events written by other nodes)
//! and ends after `task_finished`. `?follow=false` ends it once the stored events are sent.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::stream::{self, Stream};
use serde::Deserialize;

use super::{ApiError, ApiState};
use crate::record::events::{Event, EventKind};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    after: Option<u64>,
    follow: Option<bool>,
}

const POLL: Duration = Duration::from_millis(500);

pub async fn stream(
    State(state): State<Arc<ApiState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let Query(query) =
        query.map_err(|e| ApiError::new(axum::http::StatusCode::BAD_REQUEST, "invalid_query", e.body_text()))?;
    // Fail fast on an unknown task.
    state.queue.get(&id).await?;
    let last_event_id = headers.get("last-event-id").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok());
    let after = last_event_id.or(query.after).unwrap_or(0);
    let follow = query.follow.unwrap_or(true);

    struct Cursor {
        state: Arc<ApiState>,
        id: String,
        after: u64,
        pending: std::collections::VecDeque<Event>,
        done: bool,
        follow: bool,
    }
    let cursor = Cursor { state, id, after, pending: Default::default(), done: false, follow };
    let events = stream::unfold(cursor, |mut c| async move {
        loop {
            if let Some(event) = c.pending.pop_front() {
                c.after = event.seq;
                if matches!(event.kind, EventKind::TaskFinished { .. }) {
                    c.done = true;
                }
                let data = serde_json::to_string(&event).unwrap_or_else(|_| "{}".into());
                let sse = SseEvent::default().id(event.seq.to_string()).event(event.kind.type_name()).data(data);
                return Some((Ok(sse), c));
            }
            if c.done {
                return None;
            }
            let notified = c.state.workers.events_stored.notified();
            match c.state.queue.events_after(&c.id, c.after, 500).await {
                Ok(events) if !events.is_empty() => {
                    c.pending.extend(events);
                    continue;
                }
                Ok(_) if !c.follow => return None,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(task_id = %c.id, error = %e, "event stream: reading events failed");
                }
            }
            let _ = tokio::time::timeout(POLL, notified).await;
        }
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}
