//! `GET /v1/tasks/{id}/live` (docs/api.md, docs/console.md): a WebSocket that shows a task's screen as it
//! changes, for the console's live view and any client.
//!
//! The server sends text messages (JSON objects with a `type`) and binary messages (JPEG frames):
//! - `{"type": "hello", "task", "live_fps"}` first;
//! - `{"type": "state", "state", "live"}` whenever the task's state or whether it shows its screen here
//!   changes (`live` is true while the task runs on this node and frames come);
//! - `{"type": "frame", "seq", "width", "height", "screen": {"width", "height"}, "captured_at_ms", "bytes"}`
//!   right before each frame's binary message (the frame's size and the screen's, for mapping points);
//! - `{"type": "error", "code", "message"}` for a message of the client's that is refused;
//! - `{"type": "ended", "state"}` when the task has finished; then the server closes the socket (1000).
//!
//! A client sends `{"action": ACTION}` text messages for a person who has taken the desktop over. Input
//! through the live view is not carried out by this version: an action is answered with an error naming why
//! (`not_taken_over` while nobody has the desktop, `not_supported` while a person has it).
//!
//! A console session (cookie) may open it only from the console's own origin (the same check as its
//! state-changing requests); a bearer token may open it from anywhere.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};

use super::console::{ConsoleSession, check_same_origin};
use super::{ApiError, ApiPath, ApiQuery, ApiState};
use crate::live::Viewer;
use crate::record::TaskState;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct LiveQuery {
    /// The widest frame this viewer wants, in pixels (the screen's width when larger; default 1280).
    width: Option<u32>,
}

/// The width of a viewer that names none.
const DEFAULT_WIDTH: u32 = 1280;

/// How often a viewer of a task that does not run here looks at its state again (it also wakes at once when
/// any task starts here, and when events are stored).
const RECHECK: Duration = Duration::from_secs(2);

/// The WebSocket upgrade, or the API's error when the request is not one.
pub struct Upgrade(WebSocketUpgrade);

impl<S: Send + Sync> FromRequestParts<S> for Upgrade {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        WebSocketUpgrade::from_request_parts(parts, state).await.map(Upgrade).map_err(|e| {
            ApiError::new(StatusCode::BAD_REQUEST, "not_a_websocket", format!("{e}: open this URL as a WebSocket"))
        })
    }
}

pub async fn stream(
    State(state): State<Arc<ApiState>>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<LiveQuery>,
    headers: HeaderMap,
    session: Option<axum::Extension<ConsoleSession>>,
    Upgrade(upgrade): Upgrade,
) -> Result<Response, ApiError> {
    if session.is_some() {
        check_same_origin(&headers)?;
    }
    let width = match query.width {
        Some(0) => {
            return Err(ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", "query parameter `width`: at least 1")
                .with_field("width"));
        }
        Some(width) => width,
        None => DEFAULT_WIDTH,
    };
    // Fails fast on an unknown task.
    state.queue.get(&id).await?;
    Ok(upgrade.on_upgrade(move |socket| async move {
        if let Err(e) = serve(socket, state, id, width).await {
            tracing::debug!(error = %e, "live view: the viewer left");
        }
    }))
}

type Sent = Result<(), axum::Error>;

async fn send_json(socket: &mut WebSocket, message: Value) -> Sent {
    socket.send(Message::Text(message.to_string().into())).await
}

/// What the viewer of a task sees until it has finished.
async fn serve(mut socket: WebSocket, state: Arc<ApiState>, id: String, width: u32) -> Sent {
    let fps = state.config.console.live_fps;
    let live = state.workers.live.clone();
    send_json(&mut socket, json!({"type": "hello", "task": id, "live_fps": fps})).await?;
    let mut told: Option<(TaskState, bool)> = None;
    loop {
        // Armed before looking, so that a task starting here between the look and the wait is not missed.
        let registered = live.registrations();
        tokio::pin!(registered);
        registered.as_mut().enable();
        let viewer = live.watch(&id, width, fps);
        let state_now = match state.queue.get(&id).await {
            Ok(record) => record.state,
            // Deleted meanwhile (retention, `DELETE`): nothing more to show.
            Err(_) => return close(&mut socket, json!({"type": "ended", "state": null})).await,
        };
        let showing = viewer.is_some();
        if told != Some((state_now, showing)) {
            send_json(&mut socket, json!({"type": "state", "state": state_now, "live": showing})).await?;
            told = Some((state_now, showing));
        }
        if state_now.is_terminal() && !showing {
            return close(&mut socket, json!({"type": "ended", "state": state_now})).await;
        }
        match viewer {
            Some(viewer) => {
                if show(&mut socket, viewer, state_now).await? == Left::Closed {
                    return Ok(());
                }
            }
            None => {
                tokio::select! {
                    _ = tokio::time::timeout(RECHECK, registered) => {}
                    // Events of some task were stored (its end among them): look again.
                    () = state.workers.events_stored.notified() => {}
                    message = socket.recv() => {
                        if !answer(&mut socket, message, state_now).await? {
                            return Ok(());
                        }
                    }
                }
            }
        }
    }
}

#[derive(PartialEq)]
enum Left {
    /// The attempt ended: look at the task again.
    AttemptEnded,
    /// The viewer closed the socket.
    Closed,
}

/// Sends the attempt's frames, newest first, until it ends or the viewer leaves.
async fn show(socket: &mut WebSocket, mut viewer: Viewer, state: TaskState) -> Result<Left, axum::Error> {
    let mut sent = 0;
    loop {
        let frame = viewer.frames.borrow_and_update().clone();
        // (A client's message wakes this loop too: a frame already sent is not sent again.)
        if let Some(frame) = frame.filter(|f| f.seq != sent) {
            sent = frame.seq;
            let captured_at_ms =
                frame.captured_at.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
            let header = json!({
                "type": "frame",
                "seq": frame.seq,
                "width": frame.size.width,
                "height": frame.size.height,
                "screen": {"width": frame.screen.width, "height": frame.screen.height},
                "captured_at_ms": captured_at_ms,
                "bytes": frame.jpeg.len(),
            });
            send_json(socket, header).await?;
            socket.send(Message::Binary(frame.jpeg.clone().into())).await?;
        }
        tokio::select! {
            changed = viewer.frames.changed() => {
                if changed.is_err() {
                    return Ok(Left::AttemptEnded);
                }
            }
            () = viewer.ended.cancelled() => return Ok(Left::AttemptEnded),
            message = socket.recv() => {
                if !answer(socket, message, state).await? {
                    return Ok(Left::Closed);
                }
            }
        }
    }
}

/// Answers one message of the client's; `false` when the client has gone.
async fn answer(
    socket: &mut WebSocket,
    message: Option<Result<Message, axum::Error>>,
    state: TaskState,
) -> Result<bool, axum::Error> {
    let text = match message {
        None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return Ok(false),
        Some(Ok(Message::Text(text))) => text,
        Some(Ok(Message::Binary(_))) => {
            send_json(socket, refusal("invalid_message", "send text messages: {\"action\": ACTION}")).await?;
            return Ok(true);
        }
        // Pings are answered by the socket itself.
        Some(Ok(_)) => return Ok(true),
    };
    let parsed: Result<Value, _> = serde_json::from_str(text.as_str());
    let reply = match parsed {
        Ok(Value::Object(object)) if object.contains_key("action") => {
            if state == TaskState::WaitingForHuman {
                refusal(
                    "not_supported",
                    "input through the live view is not carried out by this version of agentd: use the desktop \
                     itself (VNC, or at the machine), then resume the task",
                )
            } else {
                refusal("not_taken_over", "nobody has taken this desktop over: pause the task first (agentd pause ID)")
            }
        }
        Ok(_) => refusal("invalid_message", "expected an object {\"action\": ACTION}"),
        Err(e) => refusal("invalid_message", &format!("not JSON: {e}")),
    };
    send_json(socket, reply).await?;
    Ok(true)
}

fn refusal(code: &str, message: &str) -> Value {
    json!({"type": "error", "code": code, "message": message})
}

async fn close(socket: &mut WebSocket, last: Value) -> Sent {
    send_json(socket, last).await?;
    socket
        .send(Message::Close(Some(CloseFrame { code: close_code::NORMAL, reason: "the task has finished".into() })))
        .await
}
