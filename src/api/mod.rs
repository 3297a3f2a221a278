//! The HTTP API (docs/http-api.md), served on a Unix socket (mode 0660) and optionally on TCP — on TCP
//! only where there are no Unix sockets (Windows).
//!
//! One error type, [`ApiError`], renders every failure as `{"error": {"code", "message", "field"?}}` —
//! also bad path parameters and query strings ([`ApiPath`], [`ApiQuery`]), unknown endpoints and methods.
//! TCP requests pass [`guard`] first: a `Host` header that is not this daemon's is refused (403,
//! DNS-rebinding protection), a token in the query string is refused (400), and the bearer token is compared
//! in constant time (401) — or, for the web console in a browser, a session cookie minted at its login, with
//! CSRF checks on requests that change state ([`console`]). The Unix socket relies on its file permissions. Then [`read_body`] reads the body
//! whole: at most `api.max_body_bytes` (413 past it, at once when the declared `Content-Length` is larger),
//! within `api.body_timeout_secs` (408). Connection limits and timeouts are in [`connections`]; TLS on the
//! TCP listener (`api.tls_cert`, `api.tls_key`, reloaded on SIGHUP) in [`tls`].
//!
//! The routes are listed once, in [`endpoints`]; the OpenAPI document served at `/v1/openapi.json`
//! ([`OPENAPI`], `openapi.json` beside this file, written by hand) describes exactly those. `GET /livez` passes
//! the TCP guard unchecked; every request is counted by method, route template and status ([`count_requests`]).

mod connections;
pub mod console;
pub mod demonstrations;
pub mod evals;
mod events;
mod handle;
mod live;
pub mod mcp;
mod messages;
mod retention;
pub mod sessions;
mod takeover;
mod tasks;
pub mod tls;

pub use handle::{Running, WorkerHandle};

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{DefaultBodyLimit, FromRequestParts, MatchedPath, Request, State};
use axum::handler::Handler;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use http_body_util::BodyExt;
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::net::TcpListener;
#[cfg(unix)]
use tokio::net::UnixListener;
use tokio::sync::Semaphore;
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
    /// Deletes finished tasks (docs/operations.md).
    pub retention: Arc<crate::retention::Retention>,
    /// The desktops people took over and act on through the live view (docs/humans.md).
    pub hands: Arc<crate::hands::Hands>,
    /// The desktop pool (docs/providers.md), for `/healthz` and the metrics.
    pub pool: Arc<crate::pool::Pool>,
    /// `/mcp`: its sessions, made at the first request.
    pub mcp: mcp::McpEndpoint,
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

    pub fn with_field(self, field: impl Into<String>) -> Self {
        Self { field: Some(field.into()), ..self }
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
            QueueError::Invalid { field, message } => {
                Self::new(StatusCode::BAD_REQUEST, "invalid_tool_results", format!("{field}: {message}"))
                    .with_field(field)
            }
            // One task's stored record cannot be decoded: a fault of the server's data, named, not a request's.
            QueueError::Unreadable { .. } => {
                Self::new(StatusCode::INTERNAL_SERVER_ERROR, "unreadable_task", e.to_string())
            }
            QueueError::LeaseLost(_) | QueueError::Corrupt(_) => {
                Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
            }
        }
    }
}

/// A path parameter extractor whose rejections are [`ApiError`]s: `invalid_path`, naming the parameter.
pub struct ApiPath<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Self(value)),
            Err(rejection) => Err(path_error(rejection)),
        }
    }
}

fn path_error(rejection: PathRejection) -> ApiError {
    use axum::extract::path::ErrorKind;
    let status = rejection.status();
    let message = rejection.body_text();
    let PathRejection::FailedToDeserializePathParams(e) = &rejection else {
        return ApiError::new(status, "internal", message);
    };
    let field = match e.kind() {
        ErrorKind::ParseErrorAtKey { key, .. }
        | ErrorKind::InvalidUtf8InPathParam { key }
        | ErrorKind::DeserializeError { key, .. } => Some(key.clone()),
        _ => None,
    };
    let code = if status.is_server_error() { "internal" } else { "invalid_path" };
    ApiError { status, code, message, field }
}

/// A query string extractor whose rejections are [`ApiError`]s: `invalid_query`, naming the parameter.
pub struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        parse_query(parts.uri.query().unwrap_or_default()).map(Self)
    }
}

fn parse_query<T: DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    let deserializer = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let message = e.inner().to_string();
        let field = crate::input::field_from(&e.path().to_string(), &message);
        // An unknown or missing parameter is named in the message already.
        let named = message.starts_with("unknown field") || message.starts_with("missing field");
        let shown = match &field {
            Some(field) if !named => format!("query parameter `{field}`: {message}"),
            _ => format!("query string: {message}"),
        };
        ApiError { field, ..ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", shown) }
    })
}

/// One endpoint: a method, a path template and its handler.
struct Endpoint {
    method: Method,
    path: &'static str,
    handler: MethodRouter<Arc<ApiState>>,
}

fn get_at<H: Handler<T, Arc<ApiState>>, T: 'static>(path: &'static str, handler: H) -> Endpoint {
    Endpoint { method: Method::GET, path, handler: get(handler) }
}

fn delete_at<H: Handler<T, Arc<ApiState>>, T: 'static>(path: &'static str, handler: H) -> Endpoint {
    Endpoint { method: Method::DELETE, path, handler: axum::routing::delete(handler) }
}

fn post_at<H: Handler<T, Arc<ApiState>>, T: 'static>(path: &'static str, handler: H) -> Endpoint {
    Endpoint { method: Method::POST, path, handler: post(handler) }
}

/// Every endpoint of the API, the one list of them: [`router`] serves these and nothing else, and
/// `/v1/openapi.json` ([`OPENAPI`]) must describe exactly these (`tests/it/openapi.rs` checks both ways).
/// GET, POST and DELETE are used (a GET route answers HEAD too).
fn endpoints() -> Vec<Endpoint> {
    vec![
        post_at("/v1/tasks", tasks::submit),
        get_at("/v1/tasks", tasks::list),
        get_at("/v1/tasks/{id}", tasks::status),
        delete_at("/v1/tasks/{id}", retention::delete),
        post_at("/v1/prune", retention::prune),
        get_at("/v1/evals", evals::list),
        get_at("/v1/evals/{id}", evals::result),
        post_at("/v1/tasks/{id}/cancel", tasks::cancel),
        post_at("/v1/tasks/{id}/approve", tasks::approve),
        post_at("/v1/tasks/{id}/reject", tasks::reject),
        post_at("/v1/tasks/{id}/tool-results", tasks::tool_results),
        post_at("/v1/tasks/{id}/messages", messages::send),
        post_at("/v1/tasks/{id}/answer", tasks::answer),
        post_at("/v1/tasks/{id}/pause", takeover::pause),
        post_at("/v1/tasks/{id}/resume", takeover::resume),
        post_at("/v1/demonstrations", demonstrations::create),
        post_at("/v1/sessions", sessions::open),
        post_at("/v1/sessions/{id}/actions", sessions::act),
        delete_at("/v1/sessions/{id}", sessions::close),
        post_at(mcp::PATH, mcp::handle),
        get_at(mcp::PATH, mcp::handle),
        delete_at(mcp::PATH, mcp::handle),
        get_at("/v1/tasks/{id}/events", events::stream),
        get_at("/v1/tasks/{id}/live", live::stream),
        get_at("/v1/tasks/{id}/steps/{index}/screenshot", tasks::screenshot),
        get_at("/v1/openapi.json", openapi),
        get_at(LIVEZ, tasks::live),
        get_at("/healthz", tasks::health),
        get_at("/metrics", tasks::metrics),
    ]
    .into_iter()
    .chain(console::endpoints())
    .collect()
}

/// The method and path template of every endpoint the router serves.
pub fn routes() -> Vec<(Method, &'static str)> {
    endpoints().into_iter().map(|e| (e.method, e.path)).collect()
}

/// The liveness endpoint: answered on TCP without the token or the Host check (see [`guard`]).
pub const LIVEZ: &str = "/livez";

/// The OpenAPI 3.1 document of this API, served at `GET /v1/openapi.json`.
pub const OPENAPI: &str = include_str!("openapi.json");

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

fn router(state: Arc<ApiState>) -> Router {
    layered(endpoint_routes(), state)
}

/// The endpoints' routes, not yet given their state.
fn endpoint_routes() -> Router<Arc<ApiState>> {
    let mut router = Router::new();
    for endpoint in endpoints() {
        // Two methods on one path merge into one route.
        router = router.route(endpoint.path, endpoint.handler);
    }
    router
}

/// The routes with the API's fallbacks, body reading and request counting, given the state.
fn layered(router: Router<Arc<ApiState>>, state: Arc<ApiState>) -> Router {
    let limit = state.config.api.max_body_bytes;
    router
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this endpoint does not take that method",
            )
        })
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(state.clone(), read_body))
        .layer(middleware::from_fn_with_state(state.clone(), count_requests))
        .with_state(state)
}

/// Reads the request body whole before any handler sees the request: refused at once (413) when the declared
/// `Content-Length` is past `api.max_body_bytes`, 413 as soon as more than that arrives, 408 when the body is
/// not complete within `api.body_timeout_secs`. These responses close the connection: the rest of the body is
/// never read.
async fn read_body(State(state): State<Arc<ApiState>>, request: Request, next: Next) -> Response {
    let limit = state.config.api.max_body_bytes;
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("the request body is larger than {limit} bytes (api.max_body_bytes)"),
        )
    };
    let declared = request.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return closing(too_large());
    }
    let (parts, body) = request.into_parts();
    let timeout = Duration::from_secs(state.config.api.body_timeout_secs);
    let bytes = match tokio::time::timeout(timeout, http_body_util::Limited::new(body, limit).collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => return closing(too_large()),
        Ok(Err(e)) => {
            return closing(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_body",
                format!("reading the request body: {e}"),
            ));
        }
        Err(_) => {
            return closing(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                format!("the request body did not arrive within {} s (api.body_timeout_secs)", timeout.as_secs()),
            ));
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}

/// The error's response, telling the client (and hyper) that the connection closes after it.
fn closing(error: ApiError) -> Response {
    let mut response = error.into_response();
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Counts each request by method, matched route template (`unmatched` when no route matched: never the raw
/// path, which would make a series per task id) and status.
async fn count_requests(State(state): State<Arc<ApiState>>, request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let route = request.extensions().get::<MatchedPath>().map_or("unmatched", MatchedPath::as_str).to_string();
    let response = next.run(request).await;
    state.metrics.api_request(method.as_str(), &route, response.status().as_u16());
    response
}

/// Checks of every TCP request: the Host is ours, no token in the query string, and either the bearer token in
/// the Authorization header or a console session's cookie (with its CSRF checks: [`console`]). `GET /livez`
/// passes unchecked: a liveness probe sends no token and names the address it dialled, and the answer says
/// nothing but that the process is up.
async fn guard(State(guard): State<Arc<TcpGuard>>, request: Request, next: Next) -> Response {
    if request.uri().path() == LIVEZ {
        return next.run(request).await;
    }
    if let Err(e) = guard.check_host_and_query(request.headers(), request.uri().query()) {
        return e.into_response();
    }
    console::authenticate(&guard, request, next).await
}

/// What TCP requests are checked against.
pub struct TcpGuard {
    token: String,
    hosts: Vec<String>,
    /// The web console's sessions (cookies minted at login).
    sessions: console::Sessions,
    /// Wrong tokens at the console's login, per client.
    throttle: console::LoginThrottle,
    /// Whether session cookies are marked `Secure` (the listener serves TLS).
    secure_cookies: bool,
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
        Self {
            token,
            hosts,
            sessions: console::Sessions::default(),
            throttle: console::LoginThrottle::default(),
            secure_cookies: false,
        }
    }

    /// Marks the console's session cookies `Secure`: for a listener that serves TLS.
    pub fn with_secure_cookies(self, secure: bool) -> Self {
        Self { secure_cookies: secure, ..self }
    }

    /// The Host, query and bearer checks together (a request without a console session).
    pub fn check(&self, headers: &HeaderMap, query: Option<&str>) -> Result<(), ApiError> {
        self.check_host_and_query(headers, query)?;
        if !self.bearer_ok(headers) {
            return Err(ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "missing or wrong bearer token"));
        }
        Ok(())
    }

    /// Whether the Authorization header carries the right bearer token (compared in constant time).
    pub fn bearer_ok(&self, headers: &HeaderMap) -> bool {
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.strip_prefix("Bearer "))
            .unwrap_or_default();
        self.token_ok(presented)
    }

    /// Whether `presented` is the token (compared in constant time).
    pub fn token_ok(&self, presented: &str) -> bool {
        constant_time_eq(presented.as_bytes(), self.token.as_bytes())
    }

    /// The Host is one of ours (DNS-rebinding protection, 403) and the query string carries no token (400).
    pub fn check_host_and_query(&self, headers: &HeaderMap, query: Option<&str>) -> Result<(), ApiError> {
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
pub struct Server {
    listener: Bound,
    /// `api.max_connections` slots of its own (each listener has its own, so TCP clients never take the
    /// Unix socket's), and their number.
    connections: (Arc<Semaphore>, usize),
}

enum Bound {
    #[cfg(unix)]
    Unix(UnixListener),
    Tcp(TcpListener, Arc<TcpGuard>, Option<(Arc<tls::TlsCertificate>, tokio_rustls::TlsAcceptor)>),
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BindError(String);

/// Binds the TCP listener when configured, then the Unix socket (mode 0660): TCP first, so a TCP address that
/// cannot be bound leaves no socket file behind. Without Unix sockets (Windows), the TCP listener alone, which
/// must then be configured.
pub async fn bind(state: &ApiState) -> Result<Vec<Server>, BindError> {
    let config = &state.config;
    let slots = config.api.max_connections.max(1);
    let connections = || (Arc::new(Semaphore::new(slots)), slots);
    let mut servers = Vec::new();
    if let Some(listen) = &config.api.listen {
        let token_file = config.api.token_file.as_ref().ok_or_else(|| {
            BindError("api.listen needs api.token_file: a TCP listener never runs without a token".into())
        })?;
        let token = crate::config::read_token_file(token_file).map_err(BindError)?;
        let tls = match (&config.api.tls_cert, &config.api.tls_key) {
            (Some(cert), Some(key)) => {
                let certificate = tls::TlsCertificate::load(cert, key).map_err(BindError)?;
                let acceptor = certificate.acceptor().map_err(BindError)?;
                Some((certificate, acceptor))
            }
            _ => None,
        };
        let listener = TcpListener::bind(listen).await.map_err(|e| BindError(format!("api.listen {listen}: {e}")))?;
        let local = listener.local_addr().map(|a| a.to_string()).unwrap_or_else(|_| listen.clone());
        // Console session cookies are `Secure` when the listener speaks TLS.
        let guard = TcpGuard::new(token, &local, &config.api.allowed_hosts).with_secure_cookies(tls.is_some());
        servers.push(Server { listener: Bound::Tcp(listener, Arc::new(guard), tls), connections: connections() });
    }
    // The socket last, so a TCP listener that cannot be bound leaves no socket file behind.
    #[cfg(unix)]
    {
        let unix = bind_unix(&config.socket_path()).await?;
        servers.insert(0, Server { listener: Bound::Unix(unix), connections: connections() });
    }
    #[cfg(not(unix))]
    if servers.is_empty() {
        return Err(BindError(
            "this platform has no Unix socket: the API listens on TCP only; set api.listen and api.token_file".into(),
        ));
    }
    Ok(servers)
}

#[cfg(unix)]
async fn bind_unix(path: &std::path::Path) -> Result<UnixListener, BindError> {
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
        let timeouts = connections::Timeouts {
            header: Duration::from_secs(state.config.api.header_timeout_secs),
            write: Duration::from_secs(state.config.api.write_timeout_secs),
        };
        let app = router(state);
        match self.listener {
            #[cfg(unix)]
            Bound::Unix(listener) => {
                connections::serve(listener, app, timeouts, self.connections, None, stop).await;
            }
            Bound::Tcp(listener, guard, tls) => {
                let app = app.layer(middleware::from_fn_with_state(guard, self::guard));
                let acceptor = tls.map(|(_, acceptor)| acceptor);
                connections::serve(listener, app, timeouts, self.connections, acceptor, stop).await;
            }
        }
    }

    pub fn local_addr(&self) -> Option<String> {
        match &self.listener {
            #[cfg(unix)]
            Bound::Unix(_) => None,
            Bound::Tcp(listener, ..) => listener.local_addr().ok().map(|a| a.to_string()),
        }
    }

    /// The TLS certificate of a TCP listener that has one (to reload on SIGHUP).
    pub fn tls(&self) -> Option<Arc<tls::TlsCertificate>> {
        match &self.listener {
            Bound::Tcp(_, _, tls) => tls.as_ref().map(|(certificate, _)| certificate.clone()),
            #[cfg(unix)]
            Bound::Unix(_) => None,
        }
    }
}

/// Removes the Unix socket file at shutdown (nothing to remove where there is none).
pub fn remove_socket(config: &Config) {
    #[cfg(unix)]
    let _ = std::fs::remove_file(config.socket_path());
    #[cfg(not(unix))]
    let _ = config;
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
