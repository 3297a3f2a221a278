//! `agentd console` (docs/console.md): the web console of a daemon that listens only on its Unix socket, opened on a
//! loopback TCP port.
//!
//! The command binds `127.0.0.1` (port `--port`, else one the kernel picks), prints a one-time URL carrying a
//! random secret (256 bits), and serves until interrupted. The first visit of that URL exchanges the secret —
//! once: it is forgotten as soon as it is used — for a session cookie (`HttpOnly; SameSite=Strict`), and
//! redirects to the console. Every other request needs that cookie, a `Host` of this loopback address
//! (DNS-rebinding protection), and, when it changes state, the session's `X-Agentd-CSRF` value from the same
//! origin ([`crate::api::console::check_csrf`]); it is then passed to the daemon's socket as it came, minus its
//! cookies, and the answer is streamed back (SSE included; a WebSocket of the console's own pages — the live
//! view — passed on both ways). Against a daemon reached over TCP (`--url`) there
//! is nothing to open: the command prints the daemon's own console URL, where one logs in with the token.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;

use super::client::Endpoint;
use super::exit::{CliError, CliResult, Exit};
use crate::api::console::{Sessions, changes_state, check_csrf, clear_cookie, random_secret, set_cookie};
use crate::api::constant_time_eq;

/// Where `/console/open` sends a browser after the secret was exchanged.
const OPEN_PATH: &str = "/console/open";

struct Proxy {
    socket: PathBuf,
    /// The one-time secret, until it is used.
    secret: Mutex<Option<String>>,
    sessions: Sessions,
    /// `127.0.0.1:PORT` and `localhost:PORT`: the Hosts this proxy answers.
    hosts: [String; 2],
}

/// Runs `agentd console`.
pub async fn console(endpoint: Endpoint, port: u16, open: bool, json: bool) -> CliResult {
    let https = matches!(endpoint, Endpoint::Https { .. });
    let socket = match endpoint {
        Endpoint::Unix(socket) => socket,
        Endpoint::Tcp { authority, .. } | Endpoint::Https { authority, .. } => {
            let url = format!("{}://{authority}/", if https { "https" } else { "http" });
            print_url(&url, json, "the daemon serves its console itself: log in there with its API token");
            return Ok(Exit::Success);
        }
    };
    if let Err(e) = connect(&socket).await {
        return Err(CliError::unreachable(anyhow::anyhow!(
            "cannot reach agentd at unix:{}: {e} (is `agentd serve` running? choose the daemon with --socket)",
            socket.display()
        )));
    }
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|e| CliError::invalid(anyhow::anyhow!("--port {port}: cannot listen on 127.0.0.1:{port}: {e}")))?;
    let port = listener.local_addr().map_err(|e| CliError::unreachable(anyhow::anyhow!("{e}")))?.port();
    let secret = random_secret().map_err(|e| CliError::unreachable(anyhow::anyhow!(e.message)))?;
    let url = format!("http://127.0.0.1:{port}{OPEN_PATH}?secret={secret}");
    let proxy = Arc::new(Proxy {
        socket: socket.clone(),
        secret: Mutex::new(Some(secret)),
        sessions: Sessions::default(),
        hosts: [format!("127.0.0.1:{port}"), format!("localhost:{port}")],
    });
    print_url(
        &url,
        json,
        &format!("the console of unix:{} (the link works once; Ctrl-C stops serving it)", socket.display()),
    );
    if open {
        // Best effort: the URL is printed either way.
        if let Err(e) = std::process::Command::new(OPENER)
            .arg(&url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
        {
            super::print_stderr(&format!("cannot open a browser ({OPENER}: {e}); open the URL above"));
        }
    }
    let app = axum::Router::new().fallback(handle).with_state(proxy);
    let stop = async {
        #[cfg(unix)]
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        #[cfg(unix)]
        let terminated = async {
            match term.as_mut() {
                Some(t) => {
                    t.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        // Windows has no SIGTERM: Ctrl-C only.
        #[cfg(not(unix))]
        let terminated = std::future::pending::<()>();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminated => {}
        }
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await
        .map_err(|e| CliError::unreachable(anyhow::anyhow!("serving the console: {e}")))?;
    Ok(Exit::Success)
}

fn print_url(url: &str, json: bool, note: &str) {
    use std::io::Write;
    if json {
        println!("{}", serde_json::json!({ "url": url }));
    } else {
        println!("{url}");
        super::print_stderr(note);
    }
    let _ = std::io::stdout().flush();
}

fn text(status: StatusCode, message: &str) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], format!("{message}\n")).into_response()
}

async fn handle(State(proxy): State<Arc<Proxy>>, request: Request) -> Response {
    let host = request.headers().get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
    if !proxy.hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) {
        return text(StatusCode::FORBIDDEN, &format!("Host {host:?} is not served here"));
    }
    let path = request.uri().path().to_string();
    if path == OPEN_PATH && request.method() == Method::GET {
        return exchange(&proxy, request.uri().query().unwrap_or_default());
    }
    let Some(session) = proxy.sessions.find(request.headers()) else {
        return text(
            StatusCode::UNAUTHORIZED,
            "Not logged in: open the link `agentd console` printed (each link works once), or run it again.",
        );
    };
    if changes_state(request.method())
        && let Err(e) = check_csrf(request.headers(), &session)
    {
        return e.into_response();
    }
    match (request.method().clone(), path.as_str()) {
        (Method::GET, "/console/session") => {
            axum::Json(serde_json::json!({"auth": "cookie", "csrf": session.csrf})).into_response()
        }
        (Method::POST, "/console/logout") => {
            proxy.sessions.end(request.headers());
            let mut response = text(StatusCode::OK, "Logged out. Run `agentd console` again for a new link.");
            if let Ok(value) = HeaderValue::from_str(&clear_cookie(false)) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            response
        }
        _ => forward(&proxy, request).await,
    }
}

/// `GET /console/open?secret=…`: the secret, once, for a session cookie.
fn exchange(proxy: &Proxy, query: &str) -> Response {
    let presented = form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == "secret").map(|(_, v)| v.into_owned());
    let accepted = {
        let mut secret = proxy.secret.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let matches = match (secret.as_deref(), presented.as_deref()) {
            (Some(expected), Some(given)) => constant_time_eq(expected.as_bytes(), given.as_bytes()),
            _ => false,
        };
        if matches {
            *secret = None;
        }
        matches
    };
    if !accepted {
        return text(
            StatusCode::FORBIDDEN,
            "This console link was used already or is wrong: run `agentd console` again for a new one.",
        );
    }
    let id = match proxy.sessions.mint() {
        Ok(id) => id,
        Err(e) => return e.into_response(),
    };
    let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/console/")]).into_response();
    if let Ok(value) = HeaderValue::from_str(&set_cookie(&id, false)) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// The program that opens a URL in the desktop's browser.
const OPENER: &str = if cfg!(target_os = "macos") {
    "open"
} else if cfg!(windows) {
    "explorer"
} else {
    "xdg-open"
};

/// A connection to the daemon's Unix socket.
#[cfg(unix)]
async fn connect(socket: &std::path::Path) -> std::io::Result<tokio::net::UnixStream> {
    tokio::net::UnixStream::connect(socket).await
}

/// Without Unix sockets (Windows) the daemon listens on TCP only and serves its console there itself.
#[cfg(not(unix))]
async fn connect(_socket: &std::path::Path) -> std::io::Result<tokio::net::TcpStream> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "this platform has no Unix socket; the daemon serves its console on its TCP listener (--url)",
    ))
}

/// Whether `request` asks to become a WebSocket (the live view).
fn is_upgrade(request: &Request) -> bool {
    request
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// Passes the request to the daemon's socket and streams its answer back. A WebSocket (the live view) from the
/// console's own pages is passed on whole: once the daemon switched protocols, the bytes flow both ways until
/// either side closes.
async fn forward(proxy: &Proxy, mut request: Request) -> Response {
    let upgrade = is_upgrade(&request);
    if upgrade && let Err(e) = crate::api::console::check_same_origin(request.headers()) {
        return e.into_response();
    }
    let browser_side = upgrade.then(|| hyper::upgrade::on(&mut request));
    let unreachable = |e: &dyn std::fmt::Display| {
        text(StatusCode::BAD_GATEWAY, &format!("cannot reach agentd at unix:{}: {e}", proxy.socket.display()))
    };
    let stream = match connect(&proxy.socket).await {
        Ok(stream) => stream,
        Err(e) => return unreachable(&e),
    };
    let (mut sender, connection) = match hyper::client::conn::http1::handshake::<_, Body>(TokioIo::new(stream)).await {
        Ok(pair) => pair,
        Err(e) => return unreachable(&e),
    };
    tokio::spawn(async move {
        if let Err(e) = connection.with_upgrades().await {
            tracing::debug!(error = %e, "console proxy: connection to the daemon ended");
        }
    });
    let (mut parts, body) = request.into_parts();
    for name in [header::COOKIE, header::HOST, header::ORIGIN] {
        parts.headers.remove(name);
    }
    if !upgrade {
        parts.headers.remove(header::CONNECTION);
    }
    parts.headers.insert(header::HOST, HeaderValue::from_static("localhost"));
    let path = parts.uri.path_and_query().map(|p| p.as_str().to_string()).unwrap_or_else(|| "/".into());
    parts.uri = match path.parse() {
        Ok(uri) => uri,
        Err(e) => return text(StatusCode::BAD_REQUEST, &format!("request path: {e}")),
    };
    let mut response = match sender.send_request(Request::from_parts(parts, body)).await {
        Ok(response) => response,
        Err(e) => return unreachable(&e),
    };
    if let Some(browser_side) = browser_side
        && response.status() == StatusCode::SWITCHING_PROTOCOLS
    {
        let daemon_side = hyper::upgrade::on(&mut response);
        tokio::spawn(async move {
            let (browser, daemon) = match tokio::try_join!(browser_side, daemon_side) {
                Ok(both) => both,
                Err(e) => {
                    tracing::debug!(error = %e, "console proxy: a WebSocket did not open");
                    return;
                }
            };
            let (mut browser, mut daemon) = (TokioIo::new(browser), TokioIo::new(daemon));
            if let Err(e) = tokio::io::copy_bidirectional(&mut browser, &mut daemon).await {
                tracing::debug!(error = %e, "console proxy: a WebSocket ended");
            }
        });
    }
    response.map(Body::new)
}
