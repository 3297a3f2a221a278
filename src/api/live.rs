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
//! - `{"type": "acted", "step", "ok", "message"}` after an action of the client's was carried out and
//!   recorded as the person's step `step`.
//!
//! A client sends `{"action": ACTION}` text messages (an action of the task file's, in screen pixels) while a
//! person has taken the desktop over (the task is paused, `waiting.kind = takeover`): while a task is parked so,
//! its viewers here hold its desktop open (`crate::hands`), see it live, and each action is carried out and
//! recorded as a step `"by": "human"`. Refused with an error message otherwise (`not_taken_over`), or when the
//! desktop cannot be opened on this node (`unavailable`).
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
use crate::hands::{HandsError, Hold};
use crate::live::Viewer;
use crate::record::TaskState;
use agentd_computer::Action;

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
    let mut hold: Option<Hold> = None;
    loop {
        // Armed before looking, so that a task starting here between the look and the wait is not missed.
        let registered = live.registrations();
        tokio::pin!(registered);
        registered.as_mut().enable();
        let (state_now, parked) = match state.queue.get(&id).await {
            Ok(record) => (record.state, record.state == TaskState::WaitingForHuman && record.taken_over),
            // Deleted meanwhile (retention, `DELETE`): nothing more to show.
            Err(_) => return close(&mut socket, json!({"type": "ended", "state": null})).await,
        };
        // A desktop a person took over is held open here while they watch it (and so shown live).
        let mut unavailable = None;
        hold = match (parked, &hold) {
            (true, Some(hold)) if !hold.gone().is_cancelled() => Some(hold.clone()),
            (true, _) => match state.hands.hold(&id).await {
                Ok(hold) => Some(hold),
                Err(e) => {
                    tracing::debug!(task = %id, error = %e, "live view: the taken-over desktop cannot be held here");
                    unavailable = Some(e);
                    None
                }
            },
            (false, _) => None,
        };
        let viewer = live.watch(&id, width, fps);
        let showing = viewer.is_some();
        if told != Some((state_now, showing)) {
            send_json(&mut socket, json!({"type": "state", "state": state_now, "live": showing})).await?;
            told = Some((state_now, showing));
        }
        if state_now.is_terminal() && !showing {
            return close(&mut socket, json!({"type": "ended", "state": state_now})).await;
        }
        let input = Input { hands: &state.hands, hold: hold.as_ref(), unavailable: unavailable.as_ref() };
        match viewer {
            Some(viewer) => {
                if show(&mut socket, viewer, &input).await? == Left::Closed {
                    return Ok(());
                }
            }
            None => {
                tokio::select! {
                    _ = tokio::time::timeout(RECHECK, registered) => {}
                    // Events of some task were stored (its end among them): look again.
                    () = state.workers.events_stored.notified() => {}
                    message = socket.recv() => {
                        if !answer(&mut socket, message, &input).await? {
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
async fn show(socket: &mut WebSocket, mut viewer: Viewer, input: &Input<'_>) -> Result<Left, axum::Error> {
    let gone = input.hold.map(|h| h.gone().clone()).unwrap_or_default();
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
            // The person handed the desktop back: look at the task again.
            () = gone.cancelled(), if input.hold.is_some() => return Ok(Left::AttemptEnded),
            message = socket.recv() => {
                if !answer(socket, message, input).await? {
                    return Ok(Left::Closed);
                }
            }
        }
    }
}

/// Where a viewer's actions go: this node's taken-over desktops, and the one this viewer holds (none while
/// nobody has taken the task's desktop over).
struct Input<'a> {
    hands: &'a crate::hands::Hands,
    hold: Option<&'a Hold>,
    /// Why the desktop of a task parked for a person could not be held here.
    unavailable: Option<&'a HandsError>,
}

/// A client's message: an action for the desktop.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ActionMessage {
    action: Value,
}

/// Answers one message of the client's; `false` when the client has gone.
async fn answer(
    socket: &mut WebSocket,
    message: Option<Result<Message, axum::Error>>,
    input: &Input<'_>,
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
    let reply = match serde_json::from_str::<ActionMessage>(text.as_str()) {
        Err(e) => refusal("invalid_message", &format!("expected an object {{\"action\": ACTION}}: {e}")),
        Ok(message) => match serde_json::from_value::<Action>(message.action) {
            Err(e) => refusal("invalid_action", &format!("field `action`: {e}")),
            Ok(action) => match input.hold {
                None => {
                    let why = input.unavailable.unwrap_or(&HandsError::NotTakenOver);
                    refusal(why.code(), &why.to_string())
                }
                Some(hold) => match input.hands.act(hold, action).await {
                    Ok(acted) => json!({"type": "acted", "step": acted.step, "ok": acted.ok, "message": acted.message}),
                    Err(e) => refusal(e.code(), &e.to_string()),
                },
            },
        },
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
