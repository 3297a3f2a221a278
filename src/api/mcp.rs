//! `/mcp`: the task tools of `crate::mcp` over MCP's Streamable HTTP transport (rmcp's service, stateful
//! sessions), on the Unix socket and on TCP behind the same guard as every endpoint there (Host, bearer
//! token: a wrong token is 401).
//!
//! The tools act through the API's own router, called in-process ([`RouterApi`]): each tool is the request
//! the CLI would make, with the same checks and errors, and `run_task` follows the task's event stream. A
//! request with an `Origin` header is served only when that origin is this server's own (its host and port
//! are the request's `Host`): a page of another site (DNS rebinding, a browser tab on localhost) is refused
//! with 403. Requests without `Origin` (programs, not browsers) pass.

use std::sync::{Arc, OnceLock, Weak};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::Value;
use tokio::sync::mpsc;

use super::{ApiError, ApiState};
use crate::mcp::{Backend, DaemonApi, TaskServer};
use crate::record::events::{Event, EventKind};
use crate::sse::SseParser;
use crate::task::TaskSpec;

/// The path of the MCP endpoint.
pub const PATH: &str = "/mcp";

/// The API's router as the MCP tools reach it: requests made in-process, answered by the same handlers (a
/// router made for each request from the state, which the `/mcp` service it belongs to does not keep alive).
struct RouterApi {
    state: Weak<ApiState>,
}

impl RouterApi {
    async fn send(&self, method: &str, path: &str, body: Option<Value>) -> Result<Response, String> {
        let state = self.state.upgrade().ok_or("the daemon is stopping")?;
        let body = match body {
            Some(body) => Body::from(body.to_string()),
            None => Body::empty(),
        };
        let request = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, "localhost")
            .header(header::CONTENT_TYPE, "application/json")
            .body(body)
            .map_err(|e| format!("{method} {path}: {e}"))?;
        let mut router: Router = super::router(state);
        // The router is always ready and never fails (its error type is `Infallible`).
        let Ok(()) = std::future::poll_fn(|cx| tower_service::Service::<Request>::poll_ready(&mut router, cx)).await;
        let Ok(response) = tower_service::Service::call(&mut router, request).await;
        Ok(response)
    }
}

#[async_trait::async_trait]
impl DaemonApi for RouterApi {
    async fn request(&self, method: &str, path: &str, body: Option<Value>) -> Result<(u16, Value), String> {
        let response = self.send(method, path, body).await?;
        let status = response.status().as_u16();
        let bytes = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok((status, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
    }

    async fn get_bytes(&self, path: &str) -> Result<(u16, Vec<u8>), String> {
        let response = self.send("GET", path, None).await?;
        let status = response.status().as_u16();
        let bytes = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok((status, bytes.to_vec()))
    }

    async fn follow(&self, task_id: &str, events: mpsc::UnboundedSender<Event>) -> Result<(), String> {
        let path = format!("/v1/tasks/{}/events?follow=true", crate::mcp::encode(task_id));
        let response = self.send("GET", &path, None).await?;
        if !response.status().is_success() {
            let status = response.status();
            let bytes = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
            let reply: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            return Err(reply["error"]["message"].as_str().map_or_else(|| format!("HTTP {status}"), str::to_string));
        }
        let mut body = response.into_body();
        let mut parser = SseParser::default();
        let mut parsed = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| e.to_string())?;
            let Some(data) = frame.data_ref() else { continue };
            if parser.push(data, &mut parsed).is_err() {
                return Err("the event stream is not Server-Sent Events".into());
            }
            for sse in parsed.drain(..) {
                let Ok(event) = serde_json::from_str::<Event>(&sse.data) else { continue };
                let finished = matches!(event.kind, EventKind::TaskFinished { .. });
                if events.send(event).is_err() || finished {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// A task from an MCP client over HTTP names files as any API client does: checked by the API.
    fn prepare(&self, spec: TaskSpec) -> Result<TaskSpec, String> {
        Ok(spec)
    }
}

/// `/mcp`'s service: rmcp's Streamable HTTP transport, one [`TaskServer`] per session over the API, made at
/// the first request. Its sessions end when the daemon stops (`ApiState::stopping`). Host checks are the TCP
/// guard's (rmcp's own, loopback names only, is off); the Origin check is [`same_origin`].
#[derive(Default)]
pub struct McpEndpoint {
    service: OnceLock<StreamableHttpService<TaskServer, LocalSessionManager>>,
}

impl McpEndpoint {
    fn service(&self, state: &Arc<ApiState>) -> StreamableHttpService<TaskServer, LocalSessionManager> {
        self.service
            .get_or_init(|| {
                let backend = Backend::Daemon(Arc::new(RouterApi { state: Arc::downgrade(state) }));
                let config = StreamableHttpServerConfig::default()
                    .disable_allowed_hosts()
                    .disable_allowed_origins()
                    .with_cancellation_token(state.stopping.child_token());
                StreamableHttpService::new(
                    move || Ok(TaskServer::new(backend.clone())),
                    Arc::new(LocalSessionManager::default()),
                    config,
                )
            })
            .clone()
    }
}

/// `POST`, `GET` and `DELETE /mcp`: a request of MCP's Streamable HTTP transport, once its `Origin` passed.
pub async fn handle(State(state): State<Arc<ApiState>>, request: Request) -> Response {
    if let Err(e) = same_origin(request.headers()) {
        return e.into_response();
    }
    let delete = request.method() == axum::http::Method::DELETE;
    let mut service = state.mcp.service(&state);
    let Ok(response) = tower_service::Service::call(&mut service, request).await;
    let mut response = response.map(Body::new);
    // A session ended by its client: rmcp answers 202, which the official Python SDK reports as a failed
    // termination (it takes 200 and 204); the specification names no status, so the one every client reads
    // as done.
    if delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::OK;
    }
    response
}

/// `Ok` without an `Origin`, or with one whose authority is the request's `Host`.
fn same_origin(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(origin) = headers.get(header::ORIGIN) else { return Ok(()) };
    let origin = origin.to_str().unwrap_or_default().to_ascii_lowercase();
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default().to_ascii_lowercase();
    let authority = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
    match authority {
        Some(authority) if !host.is_empty() && authority.trim_end_matches('/') == host => Ok(()),
        _ => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden_origin",
            format!("Origin {origin:?} is not this server's: MCP is served to this server's own pages and to programs"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(host: &str, origin: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_str(host).unwrap());
        if let Some(origin) = origin {
            h.insert(header::ORIGIN, HeaderValue::from_str(origin).unwrap());
        }
        h
    }

    #[test]
    fn only_the_servers_own_origin_passes() {
        assert!(same_origin(&headers("127.0.0.1:7070", None)).is_ok());
        assert!(same_origin(&headers("127.0.0.1:7070", Some("http://127.0.0.1:7070"))).is_ok());
        assert!(same_origin(&headers("agentd.internal:7070", Some("https://agentd.internal:7070"))).is_ok());
        for foreign in ["http://evil.example", "http://127.0.0.1:9999", "null", "http://127.0.0.1:7070.evil.example"] {
            let refused = same_origin(&headers("127.0.0.1:7070", Some(foreign))).unwrap_err();
            assert_eq!(refused.status, StatusCode::FORBIDDEN, "{foreign}");
        }
    }
}
