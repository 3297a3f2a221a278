//! `GET /v1/tasks/{id}/events`: the task's events as Server-Sent Events, `id:` = seq, resumable with
//! `Last-Event-ID` (or `?after=N`; either must be a whole number from 0 to 2^63-1, else 400). Stored events are
//! sent first; then the stream waits for new ones (woken when this process stores events, polling the queue
//! as a safety net for events written by other nodes) and ends after the last `task_finished` (a later turn's
//! events, docs/humans.md, follow an earlier turn's). `?follow=false` ends it
//! once the stored events are sent, and so does a stream of a task that has already finished (its
//! `task_finished` was sent before, or is among the stored events).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::stream::{self, Stream};
use serde::Deserialize;

use super::{ApiError, ApiPath, ApiQuery, ApiState};
use crate::record::events::{Event, EventKind};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Checked by [`parse_seq`], like `Last-Event-ID`.
    after: Option<String>,
    follow: Option<bool>,
}

/// An event sequence number as clients send it back: empty (none), or decimal digits up to the largest seq a
/// queue stores (2^63-1).
fn parse_seq(text: &str) -> Result<Option<u64>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{text:?} is not an event id (a whole number from 0)"));
    }
    match text.parse::<u64>() {
        Ok(seq) if seq <= i64::MAX as u64 => Ok(Some(seq)),
        _ => Err(format!("{text:?} is larger than any event id")),
    }
}

const POLL: Duration = Duration::from_millis(500);

pub async fn stream(
    State(state): State<Arc<ApiState>>,
    ApiPath(id): ApiPath<String>,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let last_event_id = match headers.get("last-event-id") {
        Some(value) => value.to_str().map_err(|_| "not text".to_string()).and_then(parse_seq).map_err(|message| {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_header", format!("Last-Event-ID: {message}"))
                .with_field("Last-Event-ID")
        })?,
        None => None,
    };
    let after_query = match query.after.as_deref() {
        Some(after) => parse_seq(after).map_err(|message| {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", format!("query parameter `after`: {message}"))
                .with_field("after")
        })?,
        None => None,
    };
    let after = last_event_id.or(after_query).unwrap_or(0);
    // Fails fast on an unknown task.
    let task = state.queue.get(&id).await?;
    // Once the task has finished, no event is coming that the stored ones do not already end with; and a client
    // resuming after `task_finished` has seen its end (the queue records the state just after that event).
    let mut follow = query.follow.unwrap_or(true) && !task.state.is_terminal();
    if follow && after > 0 {
        // (A later turn's events may follow a `task_finished`, docs/humans.md: then there is more to come.)
        let seen = state.queue.events_after(&id, after - 1, 2).await?;
        if seen.len() == 1 && seen[0].seq == after && matches!(seen[0].kind, EventKind::TaskFinished { .. }) {
            follow = false;
        }
    }

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
                c.done = matches!(event.kind, EventKind::TaskFinished { .. });
                let data = serde_json::to_string(&event).unwrap_or_else(|_| "{}".into());
                let sse = SseEvent::default().id(event.seq.to_string()).event(event.kind.type_name()).data(data);
                return Some((Ok(sse), c));
            }
            if c.done {
                // A message to the finished task (docs/humans.md) continues its events after a `task_finished`: the
                // stream ends at the last one.
                match c.state.queue.events_after(&c.id, c.after, 500).await {
                    Ok(events) if !events.is_empty() => {
                        c.pending.extend(events);
                        continue;
                    }
                    _ => return None,
                }
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

#[cfg(test)]
mod tests {
    use super::parse_seq;

    #[test]
    fn event_ids_are_whole_numbers_up_to_i64_max() {
        assert_eq!(parse_seq(""), Ok(None));
        assert_eq!(parse_seq(" 42 "), Ok(Some(42)));
        assert_eq!(parse_seq("0"), Ok(Some(0)));
        assert_eq!(parse_seq("9223372036854775807"), Ok(Some(i64::MAX as u64)));
        for bad in ["abc", "-1", "+1", "1.5", "9223372036854775808", "99999999999999999999999"] {
            assert!(parse_seq(bad).is_err(), "{bad}");
        }
    }
}
