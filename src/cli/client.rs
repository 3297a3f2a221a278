//! The HTTP client the CLI uses to reach the daemon: over the Unix socket (default) or TCP with a bearer
//! token; plain requests and a Server-Sent Events reader that resumes with `Last-Event-ID`.

use std::path::PathBuf;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;

use super::exit::{CliError, Exit};
use crate::config::Config;
use crate::record::events::Event;
use crate::sse::SseParser;

/// Where the daemon is.
#[derive(Debug, Clone)]
pub enum Endpoint {
    Unix(PathBuf),
    /// `host:port`, and the token to send.
    Tcp {
        authority: String,
        token: Option<String>,
    },
}

impl Endpoint {
    /// `--socket`, else `--url`, else `$AGENTD_SOCKET`, else `$AGENTD_URL`, else the configured socket.
    pub fn locate(socket: Option<PathBuf>, url: Option<String>, config: &Config) -> Result<Self, CliError> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        if let Some(socket) = socket {
            return Ok(Self::Unix(socket));
        }
        let url = url.or_else(|| if env("AGENTD_SOCKET").is_none() { env("AGENTD_URL") } else { None });
        if let Some(url) = url {
            let authority = url
                .strip_prefix("http://")
                .ok_or_else(|| {
                    CliError::invalid(anyhow::anyhow!("--url {url:?}: only http://host:port URLs are supported"))
                })?
                .trim_end_matches('/')
                .to_string();
            let token = env("AGENTD_TOKEN").or_else(|| {
                config
                    .api
                    .token_file
                    .as_ref()
                    .and_then(|f| std::fs::read_to_string(f).ok())
                    .map(|t| t.trim().to_string())
            });
            return Ok(Self::Tcp { authority, token });
        }
        if let Some(socket) = env("AGENTD_SOCKET") {
            return Ok(Self::Unix(PathBuf::from(socket)));
        }
        Ok(Self::Unix(config.socket_path()))
    }

    pub fn describe(&self) -> String {
        match self {
            Self::Unix(path) => format!("unix:{}", path.display()),
            Self::Tcp { authority, .. } => format!("http://{authority}"),
        }
    }
}

/// A client of one daemon.
pub struct Client {
    endpoint: Endpoint,
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

impl Client {
    pub fn new(endpoint: Endpoint) -> Self {
        Self { endpoint }
    }

    fn unreachable(&self, why: impl std::fmt::Display) -> CliError {
        CliError::unreachable(anyhow::anyhow!(
            "cannot reach agentd at {}: {why} (is `agentd serve` running? choose the daemon with --socket, --url, \
             $AGENTD_SOCKET or $AGENTD_URL)",
            self.endpoint.describe()
        ))
    }

    /// A socket that exists but may not be opened is not a daemon that is down: say so, with the path.
    fn unix_error(&self, path: &std::path::Path, e: std::io::Error) -> CliError {
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            return CliError::unreachable(anyhow::anyhow!(
                "cannot reach agentd at {}: permission denied (the socket and its directory must let you in: \
                 run as the daemon's user or root, or join the socket's group)",
                path.display()
            ));
        }
        self.unreachable(e)
    }

    async fn connect(&self) -> Result<Sender, CliError> {
        let connect = async {
            match &self.endpoint {
                Endpoint::Unix(path) => {
                    let stream = tokio::net::UnixStream::connect(path).await.map_err(|e| self.unix_error(path, e))?;
                    handshake(TokioIo::new(stream)).await.map_err(|e| self.unreachable(e))
                }
                Endpoint::Tcp { authority, .. } => {
                    let stream = tokio::net::TcpStream::connect(authority).await.map_err(|e| self.unreachable(e))?;
                    handshake(TokioIo::new(stream)).await.map_err(|e| self.unreachable(e))
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(10), connect).await.map_err(|_| self.unreachable("timed out"))?
    }

    fn request_for(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        last_event_id: Option<u64>,
    ) -> Request<Full<Bytes>> {
        let host = match &self.endpoint {
            Endpoint::Unix(_) => "localhost".to_string(),
            Endpoint::Tcp { authority, .. } => authority.clone(),
        };
        let mut builder = Request::builder().method(method).uri(path).header("host", host);
        if let Endpoint::Tcp { token: Some(token), .. } = &self.endpoint {
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        if body.is_some() {
            builder = builder.header("content-type", "application/json");
        }
        if let Some(id) = last_event_id {
            builder = builder.header("last-event-id", id.to_string());
        }
        builder
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .unwrap_or_else(|_| Request::new(Full::new(Bytes::new())))
    }

    /// Sends a request; returns the status and the JSON body, or the API's error mapped to an exit code.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Value), CliError> {
        let mut sender = self.connect().await?;
        let response =
            sender.send_request(self.request_for(method, path, body, None)).await.map_err(|e| self.unreachable(e))?;
        let status = response.status();
        let bytes = response.into_body().collect().await.map_err(|e| self.unreachable(e))?.to_bytes();
        let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if status.is_success() {
            return Ok((status, value));
        }
        Err(api_error(status, &value))
    }

    /// Follows a task's events from `after`, calling `on_event` for each, until `task_finished` (or, without
    /// `follow`, until the stored events are exhausted). Reconnects with `Last-Event-ID` if the stream drops.
    pub async fn follow_events(
        &self,
        task_id: &str,
        mut after: u64,
        follow: bool,
        mut on_event: impl FnMut(&Event),
    ) -> Result<(), CliError> {
        let mut failures = 0;
        loop {
            let path = format!("/v1/tasks/{task_id}/events?follow={follow}");
            let mut sender = match self.connect().await {
                Ok(sender) => sender,
                Err(e) if failures < 30 && after > 0 => {
                    failures += 1;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    let _ = e;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let response = sender
                .send_request(self.request_for(Method::GET, &path, None, Some(after)))
                .await
                .map_err(|e| self.unreachable(e))?;
            let status = response.status();
            if !status.is_success() {
                let bytes = response.into_body().collect().await.map_err(|e| self.unreachable(e))?.to_bytes();
                return Err(api_error(status, &serde_json::from_slice(&bytes).unwrap_or(Value::Null)));
            }
            let mut body = response.into_body();
            let mut parser = SseParser::default();
            let mut events = Vec::new();
            let mut finished = false;
            while let Some(frame) = body.frame().await {
                let Ok(frame) = frame else { break };
                let Some(data) = frame.data_ref() else { continue };
                if parser.push(data, &mut events).is_err() {
                    break;
                }
                for sse in events.drain(..) {
                    // Resume after the last event ID the daemon sent, even for an event this client cannot
                    // read (a newer daemon's event type).
                    let parsed = serde_json::from_str::<Event>(&sse.data);
                    match sse.id.as_deref().and_then(|id| id.trim().parse::<u64>().ok()) {
                        Some(id) => after = id,
                        None => {
                            if let Ok(event) = &parsed {
                                after = event.seq;
                            }
                        }
                    }
                    if let Ok(event) = parsed {
                        finished |= matches!(event.kind, crate::record::events::EventKind::TaskFinished { .. });
                        on_event(&event);
                    }
                }
            }
            if finished || !follow {
                return Ok(());
            }
            // The stream ended early (the daemon restarted?): resume where it stopped.
            failures += 1;
            if failures > 30 {
                return Err(self.unreachable("the event stream keeps dropping"));
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

async fn handshake<T>(io: T) -> Result<Sender, hyper::Error>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(io).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// Maps an API error response to the exit-code table: 4xx input problems are 2, refusals and server
/// trouble are 3.
fn api_error(status: StatusCode, body: &Value) -> CliError {
    let message = body["error"]["message"].as_str().map(str::to_string).unwrap_or_else(|| format!("HTTP {status}"));
    let error = anyhow::anyhow!("{message}");
    let exit = match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Exit::Unreachable,
        s if s.is_client_error() => Exit::InvalidInput,
        _ => Exit::Unreachable,
    };
    CliError { exit, error }
}
