//! The web console (§22): its assets, embedded in the binary and served at `GET /` and under `/console/`
//! (never under `/v1/`), and how a browser authenticates on the TCP listener.
//!
//! The console is plain HTML, CSS and JavaScript (`src/api/console/`): no build step, nothing fetched at run
//! time. It speaks only the public API (`/v1/*`) and one console endpoint, `GET /console/session`, which tells
//! the page the CSRF value of its session.
//!
//! On the Unix socket, as for every request there, the socket's permissions are the access control. On TCP a
//! browser cannot send the bearer header from an `<img>` or an `EventSource`, so the login page exchanges the
//! token for a session: `POST /console/login` with the right token (compared in constant time) mints a random
//! session id (256 bits, never the token itself) and a random CSRF value, kept in memory only — a restart logs
//! everyone out — and sets the cookie `agentd_session` (`HttpOnly; SameSite=Strict; Path=/`, `Secure` when
//! the listener serves TLS). A request that carries no valid bearer header is then accepted with a live
//! session cookie; when it changes state (any method but GET, HEAD, OPTIONS) it must also carry the session's
//! CSRF value in `X-Agentd-CSRF`, and a `Sec-Fetch-Site` or `Origin` header, when present, must say it comes
//! from this origin: a cross-site POST is refused with 403. Bearer-authenticated requests (the CLI, scripts)
//! are not touched by any of this. `agentd console` (the CLI's loopback proxy for a Unix-socket-only daemon)
//! keeps its sessions with the same [`Sessions`] and [`check_csrf`].

use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use http_body_util::BodyExt;

use super::{ApiError, Endpoint, TcpGuard, constant_time_eq, get_at};

/// The cookie that carries a console session id.
pub const SESSION_COOKIE: &str = "agentd_session";
/// The header that carries the session's CSRF value on state-changing requests.
pub const CSRF_HEADER: &str = "x-agentd-csrf";
/// How long a session lives after login, however active.
const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// Most sessions kept at once; logging in past it ends the oldest.
const MAX_SESSIONS: usize = 64;

const INDEX_HTML: &str = include_str!("console/index.html");
const LOGIN_HTML: &str = include_str!("console/login.html");
const APP_JS: &str = include_str!("console/app.js");
const APP_CSS: &str = include_str!("console/app.css");

/// The console's endpoints, part of the API's one list ([`super::endpoints`]; both listeners). Authentication
/// is the TCP guard's; the login and logout POSTs are answered by the guard itself ([`authenticate`]).
pub(super) fn endpoints() -> Vec<Endpoint> {
    vec![
        get_at("/", || async { page(INDEX_HTML, StatusCode::OK) }),
        get_at("/console", || async { redirect("/console/") }),
        get_at("/console/", || async { page(INDEX_HTML, StatusCode::OK) }),
        get_at("/console/login", || async { login_page(StatusCode::OK, "") }),
        get_at("/console/app.js", || async { asset(APP_JS, "text/javascript; charset=utf-8") }),
        get_at("/console/app.css", || async { asset(APP_CSS, "text/css; charset=utf-8") }),
        get_at("/console/session", session_info),
    ]
}

/// What `GET /console/session` tells the page: how it is authenticated and the CSRF value to send.
async fn session_info(session: Option<axum::Extension<ConsoleSession>>) -> Response {
    let body = match session {
        Some(axum::Extension(session)) => serde_json::json!({"auth": "cookie", "csrf": session.csrf}),
        None => serde_json::json!({"auth": "trusted", "csrf": ""}),
    };
    let mut response = axum::Json(body).into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The session a request was authenticated by (an extension the TCP guard adds).
#[derive(Clone, Debug)]
pub struct ConsoleSession {
    pub csrf: String,
}

/// The headers every console page carries: nothing but our own scripts, styles and images; never framed.
fn secure_headers(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

fn page(html: &'static str, status: StatusCode) -> Response {
    let mut response = (status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response();
    secure_headers(response.headers_mut());
    response
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = ([(header::CONTENT_TYPE, content_type)], body).into_response();
    secure_headers(response.headers_mut());
    response
}

/// The login page, with `problem` (plain text, escaped here) shown above the form.
fn login_page(status: StatusCode, problem: &str) -> Response {
    let escaped = problem.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    let html = LOGIN_HTML.replace("<!--problem-->", &escaped);
    let mut response = (status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response();
    secure_headers(response.headers_mut());
    response
}

fn redirect(to: &'static str) -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response()
}

/// Live console sessions: random ids with their CSRF values, in memory only.
#[derive(Default)]
pub struct Sessions {
    live: Mutex<Vec<Session>>,
}

struct Session {
    id: String,
    csrf: String,
    created: Instant,
}

/// 32 random bytes from the operating system, as 64 hex digits.
pub fn random_secret() -> Result<String, ApiError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", format!("no randomness for a session: {e}"))
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl Sessions {
    /// Starts a session; returns its id (the cookie's value).
    pub fn mint(&self) -> Result<String, ApiError> {
        let session = Session { id: random_secret()?, csrf: random_secret()?, created: Instant::now() };
        let id = session.id.clone();
        let mut live = self.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        live.retain(|s| s.created.elapsed() < SESSION_LIFETIME);
        if live.len() >= MAX_SESSIONS {
            live.remove(0);
        }
        live.push(session);
        Ok(id)
    }

    /// The session whose id the request's cookie carries, if it is live. Every live id is compared in
    /// constant time.
    pub fn find(&self, headers: &HeaderMap) -> Option<ConsoleSession> {
        let presented = session_cookie(headers)?;
        let live = self.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut found = None;
        for session in live.iter() {
            if constant_time_eq(session.id.as_bytes(), presented.as_bytes())
                && session.created.elapsed() < SESSION_LIFETIME
            {
                found = Some(ConsoleSession { csrf: session.csrf.clone() });
            }
        }
        found
    }

    /// Ends the session the request's cookie carries.
    pub fn end(&self, headers: &HeaderMap) {
        if let Some(presented) = session_cookie(headers) {
            let mut live = self.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            live.retain(|s| !constant_time_eq(s.id.as_bytes(), presented.as_bytes()));
        }
    }
}

/// The value of the `agentd_session` cookie, if the request has one.
fn session_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.trim().to_string())
}

/// The `Set-Cookie` value that starts session `id` (`Secure` when the listener serves TLS).
pub fn set_cookie(id: &str, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{SESSION_COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict{secure}")
}

/// The `Set-Cookie` value that ends a session in the browser.
pub fn clear_cookie(secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}")
}

/// Whether `method` may change state (and so needs the CSRF checks when a cookie authenticated it).
pub fn changes_state(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Refuses (403) a request that a browser says comes from another site: `Sec-Fetch-Site` other than
/// `same-origin` or `none`, or an `Origin` whose host is not the request's `Host` (`null` only beside a
/// `Sec-Fetch-Site` that passed).
pub fn check_same_origin(headers: &HeaderMap) -> Result<(), ApiError> {
    let cross = |what: String| ApiError::new(StatusCode::FORBIDDEN, "cross_site", what);
    let site = headers.get("sec-fetch-site").map(|site| site.to_str().unwrap_or_default());
    if let Some(site) = site
        && !matches!(site, "same-origin" | "none")
    {
        return Err(cross(format!("a {site} request may not change anything here (Sec-Fetch-Site)")));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or_default();
        // A browser sends `Origin: null` under some referrer policies; it said where the request came from in
        // `Sec-Fetch-Site` then.
        if origin == "null" && site.is_some() {
            return Ok(());
        }
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
        let origin_host = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
        if origin_host.is_none_or(|o| !o.eq_ignore_ascii_case(host)) {
            return Err(cross(format!("Origin {origin:?} is not this console's")));
        }
    }
    Ok(())
}

/// The checks of a state-changing request authenticated by a session cookie: same origin, and the session's
/// CSRF value in `X-Agentd-CSRF` (compared in constant time).
pub fn check_csrf(headers: &HeaderMap, session: &ConsoleSession) -> Result<(), ApiError> {
    check_same_origin(headers)?;
    let presented = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if !constant_time_eq(presented.as_bytes(), session.csrf.as_bytes()) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "csrf",
            "a request authenticated by the console's cookie must carry its X-Agentd-CSRF value",
        ));
    }
    Ok(())
}

/// Whether the request is a browser asking for a console page (sent to the login page when not logged in).
fn wants_console_page(request: &Request) -> bool {
    request.method() == Method::GET && matches!(request.uri().path(), "/" | "/console" | "/console/")
}

/// Paths served on TCP without authentication: the login page and its stylesheet.
fn is_public(request: &Request) -> bool {
    let path = request.uri().path();
    (request.method() == Method::GET && matches!(path, "/console/login" | "/console/app.css"))
        || (request.method() == Method::POST && path == "/console/login")
}

/// The authentication of a TCP request (after the Host and query checks): a right bearer token, or a live
/// console session (with the CSRF checks when the request changes state). Also serves `POST /console/login`
/// and `POST /console/logout`, which need the token and the sessions only the guard holds.
pub(super) async fn authenticate(guard: &TcpGuard, mut request: Request, next: Next) -> Response {
    if guard.bearer_ok(request.headers()) {
        return next.run(request).await;
    }
    let path = request.uri().path().to_string();
    if request.method() == Method::POST && path == "/console/login" {
        return login(guard, request).await;
    }
    if is_public(&request) {
        return next.run(request).await;
    }
    let Some(session) = guard.sessions.find(request.headers()) else {
        if wants_console_page(&request) {
            return redirect("/console/login");
        }
        return ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "missing or wrong bearer token")
            .into_response();
    };
    if changes_state(request.method())
        && let Err(e) = check_csrf(request.headers(), &session)
    {
        return e.into_response();
    }
    if request.method() == Method::POST && path == "/console/logout" {
        guard.sessions.end(request.headers());
        let mut response = redirect("/console/login");
        if let Ok(value) = HeaderValue::from_str(&clear_cookie(guard.secure_cookies)) {
            response.headers_mut().insert(header::SET_COOKIE, value);
        }
        return response;
    }
    request.extensions_mut().insert(session);
    next.run(request).await
}

/// `POST /console/login` (a form with `token`): a session and its cookie for the right token, the login page
/// again with 401 for a wrong one, 403 for a login posted from another site.
async fn login(guard: &TcpGuard, request: Request) -> Response {
    if let Err(e) = check_same_origin(request.headers()) {
        return login_page(StatusCode::FORBIDDEN, &e.message);
    }
    let body = http_body_util::Limited::new(request.into_body(), 8192).collect();
    let bytes = match tokio::time::timeout(Duration::from_secs(10), body).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        _ => return login_page(StatusCode::BAD_REQUEST, "the login form did not arrive whole"),
    };
    let token = form_urlencoded::parse(&bytes).find(|(k, _)| k == "token").map(|(_, v)| v.trim().to_string());
    if !guard.token_ok(token.as_deref().unwrap_or_default()) {
        return login_page(StatusCode::UNAUTHORIZED, "That is not this daemon's token.");
    }
    let id = match guard.sessions.mint() {
        Ok(id) => id,
        Err(e) => return e.into_response(),
    };
    let mut response = redirect("/console/");
    if let Ok(value) = HeaderValue::from_str(&set_cookie(&id, guard.secure_cookies)) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (k, v) in pairs {
            headers.append(*k, HeaderValue::from_str(v).unwrap());
        }
        headers
    }

    #[test]
    fn sessions_are_found_by_their_cookie_and_end() {
        let sessions = Sessions::default();
        let id = sessions.mint().unwrap();
        assert_eq!(id.len(), 64);
        let cookie = format!("theme=dark; {SESSION_COOKIE}={id}");
        let found = sessions.find(&with(&[("cookie", &cookie)])).expect("live session");
        assert_eq!(found.csrf.len(), 64);
        assert_ne!(found.csrf, id);
        // The same id with its first character changed (to one it is not: ids are random hex) is no session.
        let other = if id.starts_with('0') { '1' } else { '0' };
        assert!(sessions.find(&with(&[("cookie", &format!("{SESSION_COOKIE}={other}{}", &id[1..]))])).is_none());
        assert!(sessions.find(&with(&[("cookie", "other=1")])).is_none());
        sessions.end(&with(&[("cookie", &cookie)]));
        assert!(sessions.find(&with(&[("cookie", &cookie)])).is_none());
    }

    #[test]
    fn state_changes_need_the_csrf_value_and_the_same_origin() {
        let session = ConsoleSession { csrf: "abc".into() };
        let host = ("host", "127.0.0.1:8787");
        assert!(check_csrf(&with(&[host, (CSRF_HEADER, "abc"), ("sec-fetch-site", "same-origin")]), &session).is_ok());
        assert!(
            check_csrf(&with(&[host, (CSRF_HEADER, "abc"), ("origin", "http://127.0.0.1:8787")]), &session).is_ok()
        );
        let refused = [
            with(&[host]),
            with(&[host, (CSRF_HEADER, "abd")]),
            with(&[host, (CSRF_HEADER, "abc"), ("sec-fetch-site", "cross-site")]),
            with(&[host, (CSRF_HEADER, "abc"), ("sec-fetch-site", "same-site")]),
            with(&[host, (CSRF_HEADER, "abc"), ("origin", "http://evil.example")]),
            with(&[host, (CSRF_HEADER, "abc"), ("origin", "null")]),
        ];
        for headers in refused {
            assert_eq!(check_csrf(&headers, &session).unwrap_err().status, StatusCode::FORBIDDEN, "{headers:?}");
        }
        assert!(!changes_state(&Method::GET));
        assert!(changes_state(&Method::POST));
        assert!(changes_state(&Method::DELETE));
    }

    #[test]
    fn cookies_are_http_only_and_strict() {
        assert_eq!(set_cookie("x", false), "agentd_session=x; Path=/; HttpOnly; SameSite=Strict");
        assert!(set_cookie("x", true).ends_with("; Secure"));
        assert!(clear_cookie(false).contains("Max-Age=0"));
    }
}
