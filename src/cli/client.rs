//! The HTTP client the CLI uses to reach the daemon: reqwest over the Unix socket (default), or over TCP
//! (`http://`, or `https://` checked against the system's roots or only the CA file `$AGENTD_CA_FILE`) with a
//! bearer token; plain requests, and an event follower that reads Server-Sent Events with the project's one
//! parser ([`crate::sse`]) and resumes with `Last-Event-ID`. Windows has no Unix socket: there the default is
//! the configured TCP listener (`api.listen`), and a `--socket` fails every request saying so.

use std::path::PathBuf;
use std::time::Duration;

pub use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::exit::{CliError, Exit};
use crate::config::Config;
use crate::record::events::Event;
use crate::sse::SseParser;

/// The environment variable naming a PEM file of the certificate authorities to trust for `https://` URLs
/// (instead of the system's roots).
pub const CA_FILE_VAR: &str = "AGENTD_CA_FILE";

/// How long connecting (and, for `https://`, the TLS handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Pooled connections are dropped before the daemon's keep-alive limit (`api.header_timeout_secs`, 10 s)
/// closes them, so a request never races a closing connection.
const POOL_IDLE: Duration = Duration::from_secs(5);

/// Where the daemon is.
#[derive(Debug, Clone)]
pub enum Endpoint {
    Unix(PathBuf),
    /// `http://host:port`, and the token to send.
    Tcp {
        authority: String,
        token: Option<String>,
    },
    /// `https://host:port`, the token to send, and the CA file to trust instead of the system's roots.
    Https {
        authority: String,
        token: Option<String>,
        ca_file: Option<PathBuf>,
    },
}

impl Endpoint {
    /// `--socket`, else `--url`, else `$AGENTD_SOCKET`, else `$AGENTD_URL`, else the configured socket.
    /// `--url` takes `http://host:port` or `https://host:port`; the token comes from `$AGENTD_TOKEN`, else
    /// the configured `api.token_file`.
    pub fn locate(socket: Option<PathBuf>, url: Option<String>, config: &Config) -> Result<Self, CliError> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        if let Some(socket) = socket {
            return Ok(Self::Unix(socket));
        }
        let url = url.or_else(|| if env("AGENTD_SOCKET").is_none() { env("AGENTD_URL") } else { None });
        if let Some(url) = url {
            let token = || {
                env("AGENTD_TOKEN").or_else(|| {
                    config
                        .api
                        .token_file
                        .as_ref()
                        .and_then(|f| std::fs::read_to_string(f).ok())
                        .map(|t| t.trim().to_string())
                })
            };
            let authority = |rest: &str| -> Result<String, CliError> {
                let authority = rest.trim_end_matches('/');
                if authority.is_empty() || authority.contains(['/', '?', '#', '@']) {
                    return Err(CliError::invalid(anyhow::anyhow!(
                        "--url {url:?}: expected http://host:port or https://host:port (no path)"
                    )));
                }
                Ok(authority.to_string())
            };
            if let Some(rest) = url.strip_prefix("http://") {
                return Ok(Self::Tcp { authority: authority(rest)?, token: token() });
            }
            if let Some(rest) = url.strip_prefix("https://") {
                let ca_file = env(CA_FILE_VAR).map(PathBuf::from);
                return Ok(Self::Https { authority: authority(rest)?, token: token(), ca_file });
            }
            return Err(CliError::invalid(anyhow::anyhow!(
                "--url {url:?}: only http://host:port and https://host:port URLs are supported"
            )));
        }
        if let Some(socket) = env("AGENTD_SOCKET") {
            return Ok(Self::Unix(PathBuf::from(socket)));
        }
        #[cfg(not(unix))]
        if let Some(listen) = &config.api.listen {
            // The daemon's own TCP listener; an unspecified address (0.0.0.0) is reached on loopback.
            let authority = match listen.parse::<std::net::SocketAddr>() {
                Ok(addr) if addr.ip().is_unspecified() => format!("127.0.0.1:{}", addr.port()),
                _ => listen.clone(),
            };
            let token = env("AGENTD_TOKEN").or_else(|| {
                let file = config.api.token_file.as_ref()?;
                std::fs::read_to_string(file).ok().map(|t| t.trim().to_string())
            });
            return Ok(if config.api.tls_cert.is_some() {
                Self::Https { authority, token, ca_file: env(CA_FILE_VAR).map(PathBuf::from) }
            } else {
                Self::Tcp { authority, token }
            });
        }
        Ok(Self::Unix(config.socket_path()))
    }

    pub fn describe(&self) -> String {
        match self {
            Self::Unix(path) => format!("unix:{}", path.display()),
            Self::Tcp { authority, .. } => format!("http://{authority}"),
            Self::Https { authority, .. } => format!("https://{authority}"),
        }
    }

    /// The URL of `path` (which starts with `/` and may hold a query) on this endpoint.
    fn url(&self, path: &str) -> String {
        match self {
            // Any host will do on the socket: the daemon checks `Host` on TCP only.
            Self::Unix(_) => format!("http://localhost{path}"),
            Self::Tcp { authority, .. } => format!("http://{authority}{path}"),
            Self::Https { authority, .. } => format!("https://{authority}{path}"),
        }
    }

    fn token(&self) -> Option<&str> {
        match self {
            Self::Unix(_) => None,
            Self::Tcp { token, .. } | Self::Https { token, .. } => token.as_deref(),
        }
    }
}

/// A client of one daemon. Connections are kept and reused between requests.
pub struct Client {
    endpoint: Endpoint,
    /// The HTTP client, or why it could not be built (a CA file that cannot be read): every request then
    /// fails with that, exit 2.
    http: Result<reqwest::Client, String>,
}

impl Client {
    pub fn new(endpoint: Endpoint) -> Self {
        let http = build(&endpoint);
        Self { endpoint, http }
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    fn unreachable(&self, why: impl std::fmt::Display) -> CliError {
        CliError::unreachable(anyhow::anyhow!(
            "cannot reach agentd at {}: {why} (is `agentd serve` running? choose the daemon with --socket, --url, \
             $AGENTD_SOCKET or $AGENTD_URL)",
            self.endpoint.describe()
        ))
    }

    /// What a failed request says: a socket that exists but may not be opened is not a daemon that is down
    /// (say so, with the path); a certificate that does not check out names the CA file to use.
    fn transport_error(&self, e: &reqwest::Error) -> CliError {
        if let Endpoint::Unix(path) = &self.endpoint
            && io_kind(e) == Some(std::io::ErrorKind::PermissionDenied)
        {
            return CliError::unreachable(anyhow::anyhow!(
                "cannot reach agentd at {}: permission denied (the socket and its directory must let you in: \
                 run as the daemon's user or root, or join the socket's group)",
                path.display()
            ));
        }
        let cause = root_cause(e);
        if let Endpoint::Https { ca_file, .. } = &self.endpoint
            && is_certificate_error(e)
        {
            let hint = match ca_file {
                Some(file) => format!("it does not chain to the CA in {CA_FILE_VAR}={}", file.display()),
                None => format!("set {CA_FILE_VAR} to the PEM file of the CA that signed the daemon's certificate"),
            };
            return CliError::unreachable(anyhow::anyhow!(
                "cannot reach agentd at {}: its certificate was refused: {cause} ({hint})",
                self.endpoint.describe()
            ));
        }
        if matches!(self.endpoint, Endpoint::Https { .. }) && speaks_no_tls(e) {
            return CliError::unreachable(anyhow::anyhow!(
                "cannot reach agentd at {}: it does not answer in TLS — is its listener plain HTTP? (then use an \
                 http:// URL; a daemon speaks HTTPS when its config sets api.tls_cert and api.tls_key)",
                self.endpoint.describe()
            ));
        }
        if e.is_timeout() {
            return self.unreachable("timed out");
        }
        self.unreachable(cause)
    }

    /// Sends a request and returns the response as it is, whatever its status. `last_event_id` is sent as
    /// `Last-Event-ID`.
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        last_event_id: Option<u64>,
    ) -> Result<reqwest::Response, CliError> {
        let http = self.http.as_ref().map_err(|e| CliError::invalid(anyhow::anyhow!("{e}")))?;
        let mut request = http.request(method, self.endpoint.url(path));
        if let Some(token) = self.endpoint.token() {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.header(reqwest::header::CONTENT_TYPE, "application/json").body(body);
        }
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id.to_string());
        }
        request.send().await.map_err(|e| self.transport_error(&e))
    }

    /// Sends a request; returns the status and the JSON body (`null` when it is not JSON), whatever the
    /// status: for callers that treat some refusals as answers. See [`api_error`] for the rest.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Value), CliError> {
        let response = self.raw(method, path, body, None).await?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| self.transport_error(&e))?;
        Ok((status, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
    }

    /// Sends a request; returns the status and the JSON body, or the API's error mapped to an exit code.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Value), CliError> {
        let (status, value) = self.request(method, path, body).await?;
        if status.is_success() {
            return Ok((status, value));
        }
        Err(api_error(status, &value))
    }

    /// Sends a GET and returns the HTTP status and the body's bytes as they came (a screenshot, or the API's
    /// error document for the caller to read).
    pub async fn get_bytes(&self, path: &str) -> Result<(u16, Vec<u8>), CliError> {
        let response = self.raw(Method::GET, path, None, None).await?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await.map_err(|e| self.transport_error(&e))?;
        Ok((status, bytes.to_vec()))
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
            let path = format!("/v1/tasks/{}/events?follow={follow}", super::remote::encode(task_id));
            let mut response = match self.raw(Method::GET, &path, None, Some(after)).await {
                Ok(response) => response,
                // The daemon restarting: wait for it, then resume.
                Err(e) if e.exit == Exit::Unreachable && failures < 30 && after > 0 => {
                    failures += 1;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let status = response.status();
            if !status.is_success() {
                let bytes = response.bytes().await.map_err(|e| self.transport_error(&e))?;
                return Err(api_error(status, &serde_json::from_slice(&bytes).unwrap_or(Value::Null)));
            }
            let mut parser = SseParser::default();
            let mut events = Vec::new();
            let mut finished = false;
            while let Ok(Some(chunk)) = response.chunk().await {
                if parser.push(&chunk, &mut events).is_err() {
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

/// The reqwest client for an endpoint: HTTP/1.1, no proxies (the daemon is reached directly, as before), a
/// connect timeout and no overall one (event streams last as long as their task).
fn build(endpoint: &Endpoint) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .pool_idle_timeout(POOL_IDLE)
        .no_proxy()
        .user_agent(concat!("agentd/", env!("CARGO_PKG_VERSION")));
    match endpoint {
        #[cfg(unix)]
        Endpoint::Unix(path) => builder = builder.unix_socket(path.clone()),
        #[cfg(not(unix))]
        Endpoint::Unix(path) => {
            return Err(format!(
                "unix:{}: this platform has no Unix socket; reach the daemon's TCP listener with --url or $AGENTD_URL",
                path.display()
            ));
        }
        Endpoint::Https { ca_file: Some(file), .. } => {
            let pem = crate::input::files::read_bytes_blocking(file)
                .map_err(|e| format!("{CA_FILE_VAR}={}: {e}", file.display()))?;
            let certificates = reqwest::Certificate::from_pem_bundle(&pem)
                .ok()
                .filter(|certificates| !certificates.is_empty())
                .ok_or_else(|| format!("{CA_FILE_VAR}={}: no PEM certificate in the file", file.display()))?;
            builder = builder.tls_certs_only(certificates);
        }
        Endpoint::Tcp { .. } | Endpoint::Https { ca_file: None, .. } => {}
    }
    builder.build().map_err(|e| format!("cannot build the HTTP client: {}", root_cause(&e)))
}

/// The innermost error of a chain: what actually went wrong (reqwest's outer layers only say that a request
/// failed).
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut current = e;
    while let Some(source) = current.source() {
        current = source;
    }
    current.to_string()
}

/// The kind of the I/O error under a reqwest error, if there is one.
fn io_kind(e: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    let mut current = Some(e);
    while let Some(error) = current {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        current = error.source();
    }
    None
}

/// Whether the TLS handshake failed because the server answered something that is not TLS (a plain HTTP
/// listener answers a ClientHello with an HTTP error).
fn speaks_no_tls(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(e);
    while let Some(error) = current {
        let text = error.to_string();
        if text.contains("InvalidContentType") || text.contains("corrupt message") {
            return true;
        }
        current = error.source();
    }
    false
}

/// Whether a TLS handshake failed on the server's certificate.
fn is_certificate_error(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(e);
    while let Some(error) = current {
        let text = error.to_string().to_ascii_lowercase();
        if text.contains("certificate") || text.contains("unknownissuer") {
            return true;
        }
        current = error.source();
    }
    false
}

/// Maps an API error response to the exit-code table: 4xx input problems are 2, refusals and server
/// trouble are 3.
pub fn api_error(status: StatusCode, body: &Value) -> CliError {
    let message = body["error"]["message"].as_str().map(str::to_string).unwrap_or_else(|| format!("HTTP {status}"));
    // A refused token is the caller's to fix: say where the client took it from.
    let message = if status == StatusCode::UNAUTHORIZED {
        format!(
            "{message} (the daemon refused this client's token: it comes from $AGENTD_TOKEN, else the file that \
             api.token_file names in this client's config; it must match the daemon's api.token_file)"
        )
    } else {
        message
    };
    let error = anyhow::anyhow!("{message}");
    let exit = match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Exit::Unreachable,
        s if s.is_client_error() => Exit::InvalidInput,
        _ => Exit::Unreachable,
    };
    CliError { exit, error }
}
