//! The HTTP API (product contract §10), served on a Unix socket (mode 0660) and optionally on TCP.
//!
//! One error type, [`ApiError`], renders every failure as `{"error": {"code", "message", "field"?}}`. TCP
//! requests pass [`guard`] first: a `Host` header that is not this daemon's is refused (403, DNS-rebinding
//! protection), a token in the query string is refused (400), and the bearer token is compared in constant
//! time (401). The Unix socket relies on its file permissions. Bodies are limited to `api.max_body_bytes`
//! (413 past it).

mod events;
mod handle;
mod tasks;

pub use handle::WorkerHandle;

use std::path::Path;
use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use tokio::net::{TcpListener, UnixListener};
use tokio_util::sync::CancellationToken;

use crate::artifacts::{ArtifactStore, Uploader};
use crate::config::Config;
use crate::metrics::Metrics;
use crate::queue::{Queue, QueueError};

/// What every handler can reach.
pub struct ApiState {
    pub config: Arc<Config>,
    pub queue: Arc<dyn Queue>,
    pub store: Arc<dyn ArtifactStore>,
    pub uploader: Uploader,
    pub metrics: Arc<Metrics>,
    /// What the API may do to this process's workers.
    pub workers: WorkerHandle,
    /// Fired at shutdown: new tasks are refused with 503.
    pub stopping: CancellationToken,
}

/// An API failure, rendered as `{"error": {"code", "message", "field"?}}` with its status.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub field: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), field: None }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(field) = self.field {
            error["field"] = json!(field);
        }
        (self.status, axum::Json(json!({ "error": error }))).into_response()
    }
}

impl From<crate::backends::BuildError> for ApiError {
    /// A submitted task that cannot be built here: 400 naming the field, or 503 when a backend is out of reach.
    fn from(e: crate::backends::BuildError) -> Self {
        let (status, code) = match e {
            crate::backends::BuildError::Invalid { .. } => (StatusCode::BAD_REQUEST, "invalid_task"),
            crate::backends::BuildError::Unreachable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        };
        Self { status, code, message: format!("request body: {e}"), field: e.field().map(str::to_string) }
    }
}

impl From<QueueError> for ApiError {
    fn from(e: QueueError) -> Self {
        match e {
            QueueError::NotFound(_) => Self::new(StatusCode::NOT_FOUND, "not_found", e.to_string()),
            QueueError::Conflict(_) => Self::new(StatusCode::CONFLICT, "conflict", e.to_string()),
            QueueError::WrongState { .. } => Self::new(StatusCode::CONFLICT, "wrong_state", e.to_string()),
            QueueError::Unavailable(_) => Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", e.to_string()),
            QueueError::LeaseLost(_) | QueueError::Corrupt(_) => {
                Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
            }
        }
    }
}

fn router(state: Arc<ApiState>) -> Router {
    let limit = state.config.api.max_body_bytes;
    Router::new()
        .route("/v1/tasks", post(tasks::submit).get(tasks::list))
        .route("/v1/tasks/{id}", get(tasks::status))
        .route("/v1/tasks/{id}/cancel", post(tasks::cancel))
        .route("/v1/tasks/{id}/approve", post(tasks::approve))
        .route("/v1/tasks/{id}/reject", post(tasks::reject))
        .route("/v1/tasks/{id}/events", get(events::stream))
        .route("/v1/tasks/{id}/steps/{index}/screenshot", get(tasks::screenshot))
        .route("/healthz", get(tasks::health))
        .route("/metrics", get(tasks::metrics))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint") })
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(state.clone(), count_requests))
        .with_state(state)
}

async fn count_requests(State(state): State<Arc<ApiState>>, request: Request, next: Next) -> Response {
    state.metrics.api_requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    next.run(request).await
}

/// Checks of every TCP request: the Host is ours, the token is in the Authorization header and right.
async fn guard(State(guard): State<Arc<TcpGuard>>, request: Request, next: Next) -> Response {
    if let Err(e) = guard.check(request.headers(), request.uri().query()) {
        return e.into_response();
    }
    next.run(request).await
}

/// What TCP requests are checked against.
pub struct TcpGuard {
    token: String,
    hosts: Vec<String>,
}

impl TcpGuard {
    pub fn new(token: String, listen: &str, extra_hosts: &[String]) -> Self {
        let port = listen.rsplit(':').next().unwrap_or_default();
        let mut hosts = Vec::new();
        for host in ["localhost", "127.0.0.1", "[::1]"].iter().map(|h| h.to_string()).chain(extra_hosts.iter().cloned())
        {
            hosts.push(format!("{host}:{port}"));
            hosts.push(host);
        }
        hosts.push(listen.to_string());
        Self { token, hosts }
    }

    pub fn check(&self, headers: &HeaderMap, query: Option<&str>) -> Result<(), ApiError> {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default().to_ascii_lowercase();
        if !self.hosts.iter().any(|allowed| allowed.eq_ignore_ascii_case(&host)) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden_host",
                format!("Host {host:?} is not served here"),
            ));
        }
        if query.is_some_and(|q| q.split('&').any(|kv| kv.starts_with("token=") || kv.starts_with("access_token="))) {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "token_in_query",
                "send the token in the Authorization header, not the URL",
            ));
        }
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.strip_prefix("Bearer "))
            .unwrap_or_default();
        if !constant_time_eq(presented.as_bytes(), self.token.as_bytes()) {
            return Err(ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "missing or wrong bearer token"));
        }
        Ok(())
    }
}

/// Compares two byte strings in time that depends only on their lengths, not their contents.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

/// A bound listener, ready to serve.
pub enum Server {
    Unix(UnixListener),
    Tcp(TcpListener, Arc<TcpGuard>),
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BindError(String);

/// Binds the TCP listener when configured, then the Unix socket (mode 0660): TCP first, so a TCP address that
/// cannot be bound leaves no socket file behind.
pub async fn bind(state: &ApiState) -> Result<Vec<Server>, BindError> {
    let config = &state.config;
    let mut servers = Vec::new();
    if let Some(listen) = &config.api.listen {
        let token_file = config.api.token_file.as_ref().ok_or_else(|| {
            BindError("api.listen needs api.token_file: a TCP listener never runs without a token".into())
        })?;
        let token = crate::config::read_token_file(token_file).map_err(BindError)?;
        let listener = TcpListener::bind(listen).await.map_err(|e| BindError(format!("api.listen {listen}: {e}")))?;
        let local = listener.local_addr().map(|a| a.to_string()).unwrap_or_else(|_| listen.clone());
        let guard = TcpGuard::new(token, &local, &config.api.allowed_hosts);
        servers.push(Server::Tcp(listener, Arc::new(guard)));
    }
    servers.insert(0, Server::Unix(bind_unix(&config.socket_path()).await?));
    Ok(servers)
}

async fn bind_unix(path: &Path) -> Result<UnixListener, BindError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| BindError(format!("socket directory {}: {e}", parent.display())))?;
    }
    if path.exists() {
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            return Err(BindError(format!("another agentd is already listening on {}", path.display())));
        }
        std::fs::remove_file(path).map_err(|e| BindError(format!("stale socket {}: {e}", path.display())))?;
    }
    let listener = UnixListener::bind(path).map_err(|e| BindError(format!("socket {}: {e}", path.display())))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
        .map_err(|e| BindError(format!("socket {}: {e}", path.display())))?;
    Ok(listener)
}

impl Server {
    /// Serves until `stop` fires.
    pub async fn run(self, state: Arc<ApiState>, stop: CancellationToken) {
        let app = router(state);
        let shutdown = async move { stop.cancelled().await };
        let result = match self {
            Server::Unix(listener) => axum::serve(listener, app).with_graceful_shutdown(shutdown).await,
            Server::Tcp(listener, guard) => {
                let app = app.layer(middleware::from_fn_with_state(guard, self::guard));
                axum::serve(listener, app).with_graceful_shutdown(shutdown).await
            }
        };
        if let Err(e) = result {
            tracing::error!(error = %e, "API server failed");
        }
    }

    pub fn local_addr(&self) -> Option<String> {
        match self {
            Server::Unix(_) => None,
            Server::Tcp(listener, _) => listener.local_addr().ok().map(|a| a.to_string()),
        }
    }
}

pub fn remove_socket(config: &Config) {
    let _ = std::fs::remove_file(config.socket_path());
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(host: &str, auth: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_str(host).unwrap());
        if let Some(auth) = auth {
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(auth).unwrap());
        }
        h
    }

    #[test]
    fn the_guard_checks_host_token_and_query() {
        let guard = TcpGuard::new("s3cret-token-0123456789".into(), "127.0.0.1:8787", &["agentd.internal".into()]);
        let good = "Bearer s3cret-token-0123456789";
        assert!(guard.check(&headers("127.0.0.1:8787", Some(good)), None).is_ok());
        assert!(guard.check(&headers("localhost:8787", Some(good)), None).is_ok());
        assert!(guard.check(&headers("agentd.internal:8787", Some(good)), None).is_ok());
        assert_eq!(
            guard.check(&headers("evil.example:8787", Some(good)), None).unwrap_err().status,
            StatusCode::FORBIDDEN
        );
        assert_eq!(guard.check(&headers("127.0.0.1:8787", None), None).unwrap_err().status, StatusCode::UNAUTHORIZED);
        let wrong_last = "Bearer s3cret-token-012345678X";
        assert_eq!(
            guard.check(&headers("127.0.0.1:8787", Some(wrong_last)), None).unwrap_err().status,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            guard.check(&headers("127.0.0.1:8787", Some(good)), Some("token=abc")).unwrap_err().status,
            StatusCode::BAD_REQUEST
        );
    }

    #[test]
    fn constant_time_compare() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
