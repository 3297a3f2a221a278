//! A small client of the Chrome DevTools Protocol over one WebSocket, in flat session mode: every command is
//! `{"id", "method", "params", "sessionId"?}`, every answer `{"id", "result" | "error"}`, every event
//! `{"method", "params", "sessionId"?}`. One reader task routes answers to their callers and events to one
//! channel; one writer task sends what callers queue. When the socket closes (the browser exited or crashed)
//! every call in flight and every later call fails with [`CdpError::Closed`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_tungstenite::tungstenite::Message;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

/// Why a DevTools call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CdpError {
    /// The connection to the browser is gone (it exited, crashed or closed the socket).
    #[error("the connection to the browser is closed{}", because(.0))]
    Closed(String),
    /// The browser answered the call with an error.
    #[error("{method}: {message} (DevTools error {code})")]
    Protocol { method: String, code: i64, message: String },
    /// No answer came within the call's bound.
    #[error("{method}: no answer from the browser within {timeout:?}")]
    Timeout { method: String, timeout: Duration },
    /// The WebSocket could not be opened.
    #[error("cannot connect to the browser's DevTools endpoint {url}: {reason}")]
    Connect { url: String, reason: String },
}

fn because(reason: &str) -> String {
    if reason.is_empty() { String::new() } else { format!(": {reason}") }
}

/// One event the browser sent.
#[derive(Debug, Clone)]
pub struct Event {
    pub method: String,
    pub params: Value,
    pub session: Option<String>,
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, CdpError>>>>>;

/// A call queued with [`Connection::begin`], its answer still to come.
pub struct Call {
    id: u64,
    method: String,
    answer: oneshot::Receiver<Result<Value, CdpError>>,
}

/// The connection. Cheap to share behind an `Arc`; dropping it ends both tasks and closes the socket.
pub struct Connection {
    outgoing: mpsc::UnboundedSender<String>,
    pending: Pending,
    next_id: AtomicU64,
    closed: Arc<AtomicBool>,
    reader: tokio::task::JoinHandle<()>,
    /// How long a call waits for its answer.
    pub timeout: Duration,
}

impl Drop for Connection {
    fn drop(&mut self) {
        // The writer ends when its channel closes (after sending what was queued); the reader is told here.
        self.reader.abort();
    }
}

impl Connection {
    /// Opens the WebSocket at `url` (`ws://host:port/devtools/browser/…`) and returns the connection and the
    /// channel its events arrive on.
    pub async fn open(url: &str, timeout: Duration) -> Result<(Self, mpsc::UnboundedReceiver<Event>), CdpError> {
        let connect_error = |reason: String| CdpError::Connect { url: url.to_string(), reason };
        let (host, port) = ws_endpoint(url).map_err(connect_error)?;
        let tcp = tokio::time::timeout(timeout, tokio::net::TcpStream::connect((host.as_str(), port)))
            .await
            .map_err(|_| connect_error(format!("no connection within {timeout:?}")))?
            .map_err(|e| connect_error(e.to_string()))?;
        let _ = tcp.set_nodelay(true);
        let config = async_tungstenite::tungstenite::protocol::WebSocketConfig::default()
            // A screenshot of a large viewport is several MiB of base64.
            .max_message_size(Some(256 << 20))
            .max_frame_size(Some(256 << 20));
        let (socket, _) =
            tokio::time::timeout(timeout, async_tungstenite::tokio::client_async_with_config(url, tcp, Some(config)))
                .await
                .map_err(|_| connect_error(format!("no WebSocket handshake within {timeout:?}")))?
                .map_err(|e| connect_error(e.to_string()))?;
        let (mut sink, mut stream) = socket.split();
        let (outgoing, mut queue) = mpsc::unbounded_channel::<String>();
        let (events_tx, events) = mpsc::unbounded_channel();
        let pending: Pending = Arc::default();
        let closed = Arc::new(AtomicBool::new(false));

        tokio::spawn(async move {
            while let Some(text) = queue.recv().await {
                if sink.send(Message::text(text)).await.is_err() {
                    return;
                }
            }
            let _ = sink.close(None).await;
        });

        let (reader_pending, reader_closed) = (pending.clone(), closed.clone());
        let reader = tokio::spawn(async move {
            let reason = loop {
                let text = match stream.next().await {
                    None => break String::new(),
                    Some(Err(e)) => break e.to_string(),
                    Some(Ok(Message::Text(text))) => text,
                    Some(Ok(Message::Close(_))) => break String::new(),
                    Some(Ok(_)) => continue,
                };
                let Ok(mut message) = serde_json::from_str::<Value>(text.as_str()) else {
                    tracing::debug!("DevTools sent a message that is not JSON");
                    continue;
                };
                if let Some(id) = message.get("id").and_then(Value::as_u64) {
                    let waiter = reader_pending.lock().ok().and_then(|mut p| p.remove(&id));
                    if let Some(waiter) = waiter {
                        let answer = if let Some(error) = message.get("error") {
                            Err(CdpError::Protocol {
                                method: String::new(),
                                code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                                message: error.get("message").and_then(Value::as_str).unwrap_or("").to_string(),
                            })
                        } else {
                            Ok(message.get_mut("result").map(Value::take).unwrap_or(Value::Null))
                        };
                        let _ = waiter.send(answer);
                    }
                } else if let Some(method) = message.get("method").and_then(Value::as_str) {
                    let event = Event {
                        method: method.to_string(),
                        params: message.get_mut("params").map(Value::take).unwrap_or(Value::Null),
                        session: message.get("sessionId").and_then(Value::as_str).map(str::to_string),
                    };
                    let _ = events_tx.send(event);
                }
            };
            reader_closed.store(true, Ordering::SeqCst);
            let waiters: Vec<_> = reader_pending.lock().map(|mut p| p.drain().collect()).unwrap_or_default();
            for (_, waiter) in waiters {
                let _ = waiter.send(Err(CdpError::Closed(reason.clone())));
            }
        });

        Ok((Self { outgoing, pending, next_id: AtomicU64::new(1), closed, reader, timeout }, events))
    }

    /// Whether the socket is gone.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst) || self.outgoing.is_closed()
    }

    /// Calls `method` (on the page session `session`, or the browser) and waits for its result.
    pub async fn call(&self, session: Option<&str>, method: &str, params: Value) -> Result<Value, CdpError> {
        self.call_within(session, method, params, self.timeout).await
    }

    /// As [`Connection::call`], with its own bound.
    pub async fn call_within(
        &self,
        session: Option<&str>,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, CdpError> {
        let call = self.begin(session, method, params);
        self.finish(call, timeout).await
    }

    /// Queues `method` now (calls begun one after another reach the browser in that order) and returns
    /// what [`Connection::finish`] waits on: for a target paused until it is set up, whose answers come only
    /// once it runs.
    pub fn begin(&self, session: Option<&str>, method: &str, params: Value) -> Call {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        let call = Call { id, method: method.to_string(), answer: rx };
        if self.is_closed() {
            return call;
        }
        if let Ok(mut pending) = self.pending.lock() {
            pending.insert(id, tx);
        }
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = Value::String(session.to_string());
        }
        if self.outgoing.send(message.to_string()).is_err() {
            self.forget(id);
        }
        call
    }

    /// Waits (at most `timeout`) for the answer to a call [`Connection::begin`] queued.
    pub async fn finish(&self, call: Call, timeout: Duration) -> Result<Value, CdpError> {
        let Call { id, method, answer } = call;
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(Ok(result))) => Ok(result),
            Ok(Ok(Err(CdpError::Protocol { code, message, .. }))) => Err(CdpError::Protocol { method, code, message }),
            Ok(Ok(Err(e))) => Err(e),
            Ok(Err(_)) => Err(CdpError::Closed(String::new())),
            Err(_) => {
                self.forget(id);
                Err(CdpError::Timeout { method, timeout })
            }
        }
    }

    /// Sends `method` without waiting for its answer (for what must go out while nothing can wait: a drop).
    pub fn send(&self, session: Option<&str>, method: &str, params: Value) {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = Value::String(session.to_string());
        }
        let _ = self.outgoing.send(message.to_string());
    }

    fn forget(&self, id: u64) {
        if let Ok(mut pending) = self.pending.lock() {
            pending.remove(&id);
        }
    }
}

/// Host and port of a `ws://host:port/…` URL.
pub fn ws_endpoint(url: &str) -> Result<(String, u16), String> {
    let rest = url
        .strip_prefix("ws://")
        .ok_or_else(|| format!("{url:?} is not a ws:// URL (a DevTools endpoint is spoken to without TLS)"))?;
    let authority = rest.split('/').next().unwrap_or_default();
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && (!host.contains(':') || host.ends_with(']')) => {
            (host, port.parse::<u16>().map_err(|_| format!("{url:?} has no valid port"))?)
        }
        _ => (authority, 80),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("{url:?} has no host"));
    }
    Ok((host.to_string(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_of_devtools_urls() {
        assert_eq!(ws_endpoint("ws://127.0.0.1:9222/devtools/browser/x").unwrap(), ("127.0.0.1".into(), 9222));
        assert_eq!(ws_endpoint("ws://[::1]:9222/devtools/browser/x").unwrap(), ("::1".into(), 9222));
        assert_eq!(ws_endpoint("ws://box/devtools").unwrap(), ("box".into(), 80));
        assert!(ws_endpoint("wss://box:9222/").is_err());
        assert!(ws_endpoint("ws:///x").is_err());
        assert!(ws_endpoint("ws://box:port/x").is_err());
    }
}
