//! The web console (docs/console.md): its assets, embedded in the binary and served at `GET /` and under `/console/`
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
//!
//! Wrong tokens at the login are counted per client ([`LoginThrottle`]: the connection's address, an IPv6
//! client by its /64, the Unix socket as one client): past [`FREE_FAILURES`] the login answers `429` with
//! `Retry-After` and looks at no token until the wait is over, a wait that doubles with each further wrong
//! token up to [`MAX_WAIT`]. A right token clears the count; a login without wrong tokens before it is never
//! slowed. At most [`MAX_SESSIONS`] sessions live at once: at the limit a login ends the session idle longest
//! if it has been idle [`IDLE_RECLAIM`] (and logs that), and is otherwise refused with `503` saying why.

use std::collections::HashMap;
use std::net::IpAddr;
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
/// Most sessions kept at once.
pub const MAX_SESSIONS: usize = 64;
/// At [`MAX_SESSIONS`], a login ends the session idle longest only if no request used it for this long (a
/// console page that is open makes requests every few seconds).
pub const IDLE_RECLAIM: Duration = Duration::from_secs(30 * 60);
/// Wrong tokens a client may send before the login makes it wait.
pub const FREE_FAILURES: u32 = 5;
/// The wait after the first wrong token past [`FREE_FAILURES`]; it doubles with each further one.
pub const FIRST_WAIT: Duration = Duration::from_secs(1);
/// The longest wait.
pub const MAX_WAIT: Duration = Duration::from_secs(300);
/// A client's wrong tokens are forgotten this long after its last one (and its wait is over).
const FORGET_AFTER: Duration = Duration::from_secs(3600);
/// Clients whose wrong tokens are counted apart; past it, the clients not counted share one count.
pub const MAX_CLIENTS: usize = 4096;

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
    /// When a request last came with it.
    used: Instant,
}

/// 32 random bytes from the operating system, as 64 hex digits.
pub fn random_secret() -> Result<String, ApiError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", format!("no randomness for a session: {e}"))
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Why no session was started.
#[derive(Debug, thiserror::Error)]
pub enum MintError {
    #[error("{0}")]
    Random(String),
    /// [`MAX_SESSIONS`] sessions live, every one used within [`IDLE_RECLAIM`]; one may be ended for a new login
    /// in `free_in` (if nobody uses it meanwhile).
    #[error(
        "This console has {MAX_SESSIONS} sessions, the most it keeps, and each was used in the last {} minutes, \
         so none is ended for a new one. Log out of a console you no longer use (its Log out button), or try \
         again in {}, when the one unused longest will have been idle that long. Restarting the daemon ends every \
         session.",
        IDLE_RECLAIM.as_secs() / 60,
        wait_text(*free_in)
    )]
    Full { free_in: Duration },
}

impl IntoResponse for MintError {
    fn into_response(self) -> Response {
        match &self {
            MintError::Random(_) => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", self.to_string()).into_response()
            }
            MintError::Full { free_in } => {
                let mut response =
                    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "too_many_sessions", self.to_string())
                        .into_response();
                response.headers_mut().insert(header::RETRY_AFTER, retry_after(*free_in));
                response
            }
        }
    }
}

/// A wait for people: `40 s`, `12 min`.
fn wait_text(wait: Duration) -> String {
    let secs = seconds(wait);
    if secs < 120 { format!("{secs} s") } else { format!("{} min", secs.div_ceil(60)) }
}

/// Whole seconds, rounded up, at least one.
fn seconds(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

/// A `Retry-After` value: the wait in whole seconds, rounded up.
fn retry_after(wait: Duration) -> HeaderValue {
    HeaderValue::from(seconds(wait))
}

impl Sessions {
    /// Starts a session; returns its id (the cookie's value).
    pub fn mint(&self) -> Result<String, MintError> {
        self.mint_at(Instant::now())
    }

    fn mint_at(&self, now: Instant) -> Result<String, MintError> {
        let random = |e: ApiError| MintError::Random(e.message);
        let session = Session {
            id: random_secret().map_err(random)?,
            csrf: random_secret().map_err(random)?,
            created: now,
            used: now,
        };
        let id = session.id.clone();
        let mut live = self.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        live.retain(|s| now.saturating_duration_since(s.created) < SESSION_LIFETIME);
        if live.len() >= MAX_SESSIONS {
            let idlest = live
                .iter()
                .enumerate()
                .min_by_key(|(_, s)| s.used)
                .map(|(i, s)| (i, now.saturating_duration_since(s.used)));
            match idlest {
                Some((i, idle)) if idle >= IDLE_RECLAIM => {
                    live.remove(i);
                    tracing::warn!(
                        idle_minutes = idle.as_secs() / 60,
                        sessions = MAX_SESSIONS,
                        "console: a login ended the session unused longest (idle {} min) to stay within {MAX_SESSIONS} sessions",
                        idle.as_secs() / 60
                    );
                }
                _ => {
                    // When one could be ended: the first to reach the idle bound or its lifetime's end.
                    let free_in = live
                        .iter()
                        .map(|s| {
                            let idle = IDLE_RECLAIM.saturating_sub(now.saturating_duration_since(s.used));
                            let expires = SESSION_LIFETIME.saturating_sub(now.saturating_duration_since(s.created));
                            idle.min(expires)
                        })
                        .min()
                        .unwrap_or(IDLE_RECLAIM);
                    return Err(MintError::Full { free_in });
                }
            }
        }
        live.push(session);
        Ok(id)
    }

    /// The session whose id the request's cookie carries, if it is live (and it counts as used now). Every
    /// live id is compared in constant time.
    pub fn find(&self, headers: &HeaderMap) -> Option<ConsoleSession> {
        self.find_at(headers, Instant::now())
    }

    fn find_at(&self, headers: &HeaderMap, now: Instant) -> Option<ConsoleSession> {
        let presented = session_cookie(headers)?;
        let mut live = self.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut found = None;
        for session in live.iter_mut() {
            if constant_time_eq(session.id.as_bytes(), presented.as_bytes())
                && now.saturating_duration_since(session.created) < SESSION_LIFETIME
            {
                session.used = now;
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

/// Who a login comes from, as [`LoginThrottle`] counts: an IPv4 address, an IPv6 client by its /64 (one host
/// usually holds all of one), or the Unix socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Client {
    Ip(IpAddr),
    Local,
}

impl Client {
    pub fn of(peer: Option<IpAddr>) -> Self {
        match peer.map(|ip| ip.to_canonical()) {
            Some(IpAddr::V6(v6)) => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                Client::Ip(IpAddr::V6(prefix.into()))
            }
            Some(ip) => Client::Ip(ip),
            None => Client::Local,
        }
    }
}

/// A client's wrong tokens.
#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    /// The last one.
    last: Instant,
    /// No token is looked at before this.
    until: Instant,
}

impl Failures {
    /// Whether this count can be forgotten at `now`.
    fn stale(&self, now: Instant) -> bool {
        now >= self.until && now.saturating_duration_since(self.last) >= FORGET_AFTER
    }
}

/// Wrong console tokens counted per client, and the waits they impose. Its memory is bounded: at most
/// [`MAX_CLIENTS`] clients are counted apart (counts [`FORGET_AFTER`] old are dropped to make room), and
/// the clients beyond them share one count, so a flood of addresses neither grows it nor escapes it.
#[derive(Default)]
pub struct LoginThrottle {
    state: Mutex<Throttled>,
}

#[derive(Default)]
struct Throttled {
    clients: HashMap<Client, Failures>,
    /// The shared count of the clients that found no room.
    overflow: Option<Failures>,
    /// When stale counts were last looked for.
    swept: Option<Instant>,
}

/// How often a full [`LoginThrottle`] looks for counts to forget.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

impl Throttled {
    fn get(&self, client: Client) -> Option<&Failures> {
        self.clients.get(&client).or(self.overflow.as_ref().filter(|_| self.clients.len() >= MAX_CLIENTS))
    }
}

impl LoginThrottle {
    /// How long `client` must still wait before a token of its is looked at; `None`: not at all.
    pub fn wait(&self, client: Client, now: Instant) -> Option<Duration> {
        let state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.get(client).map(|f| f.until.saturating_duration_since(now)).filter(|wait| !wait.is_zero())
    }

    /// Counts a wrong token of `client`; returns the wait it now imposes (`None` within [`FREE_FAILURES`]).
    pub fn failed(&self, client: Client, now: Instant) -> Option<Duration> {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Full: the counts old enough to forget make room (looked for once a minute at most: a flood of new
        // addresses must not cost a sweep each).
        let due = state.swept.is_none_or(|swept| now.saturating_duration_since(swept) >= SWEEP_EVERY);
        if !state.clients.contains_key(&client) && state.clients.len() >= MAX_CLIENTS && due {
            state.swept = Some(now);
            state.clients.retain(|_, f| !f.stale(now));
            if state.overflow.is_some_and(|f| f.stale(now)) {
                state.overflow = None;
            }
        }
        let room = state.clients.contains_key(&client) || state.clients.len() < MAX_CLIENTS;
        let fresh = Failures { count: 0, last: now, until: now };
        let failures = if room {
            let failures = state.clients.entry(client).or_insert(fresh);
            if failures.stale(now) {
                *failures = fresh;
            }
            failures
        } else {
            if state.overflow.is_none() {
                tracing::warn!(
                    clients = MAX_CLIENTS,
                    "console: wrong tokens from more clients than are counted apart; the others share one count"
                );
            }
            state.overflow.get_or_insert(fresh)
        };
        failures.count = failures.count.saturating_add(1);
        failures.last = now;
        let wait = wait_after(failures.count);
        failures.until = now + wait.unwrap_or_default();
        wait
    }

    /// A right token from `client`: its count is forgotten.
    pub fn succeeded(&self, client: Client) {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.clients.remove(&client);
    }

    /// How many clients are counted apart (and whether a shared count is kept).
    #[cfg(test)]
    fn size(&self) -> (usize, bool) {
        let state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        (state.clients.len(), state.overflow.is_some())
    }
}

/// The wait after a client's `count`-th wrong token in a row.
fn wait_after(count: u32) -> Option<Duration> {
    let past = count.checked_sub(FREE_FAILURES).filter(|past| *past > 0)?;
    let factor = 1u32.checked_shl(past - 1).unwrap_or(u32::MAX);
    Some(FIRST_WAIT.saturating_mul(factor).min(MAX_WAIT))
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
/// again with 401 for a wrong one, 403 for a login posted from another site; 429 (with `Retry-After`) while
/// the client's wrong tokens make it wait, 503 when the sessions are full ([`Sessions::mint`]).
async fn login(guard: &TcpGuard, request: Request) -> Response {
    if let Err(e) = check_same_origin(request.headers()) {
        return login_page(StatusCode::FORBIDDEN, &e.message);
    }
    let peer = request.extensions().get::<super::connections::Peer>().and_then(|p| p.0);
    let client = Client::of(peer);
    // While the client waits, its token is not looked at (a guess then would be a free one).
    if let Some(wait) = guard.throttle.wait(client, Instant::now()) {
        return throttled(String::new(), wait);
    }
    let body = http_body_util::Limited::new(request.into_body(), 8192).collect();
    let bytes = match tokio::time::timeout(Duration::from_secs(10), body).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        _ => return login_page(StatusCode::BAD_REQUEST, "the login form did not arrive whole"),
    };
    let token = form_urlencoded::parse(&bytes).find(|(k, _)| k == "token").map(|(_, v)| v.trim().to_string());
    if !guard.token_ok(token.as_deref().unwrap_or_default()) {
        const WRONG: &str = "That is not this daemon's token.";
        return match guard.throttle.failed(client, Instant::now()) {
            Some(wait) => {
                tracing::info!(client = ?client, wait_secs = seconds(wait), "console: wrong tokens, the login waits");
                throttled(format!("{WRONG} "), wait)
            }
            None => login_page(StatusCode::UNAUTHORIZED, WRONG),
        };
    }
    guard.throttle.succeeded(client);
    let id = match guard.sessions.mint() {
        Ok(id) => id,
        Err(e @ MintError::Full { free_in }) => {
            let mut response = login_page(StatusCode::SERVICE_UNAVAILABLE, &e.to_string());
            response.headers_mut().insert(header::RETRY_AFTER, retry_after(free_in));
            return response;
        }
        Err(e) => return e.into_response(),
    };
    let mut response = redirect("/console/");
    if let Ok(value) = HeaderValue::from_str(&set_cookie(&id, guard.secure_cookies)) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// The login page with 429 and `Retry-After`: `before` (what the last token was), then how long to wait.
fn throttled(before: String, wait: Duration) -> Response {
    let message = format!("{before}Too many wrong tokens came from your address: try again in {} s.", seconds(wait));
    let mut response = login_page(StatusCode::TOO_MANY_REQUESTS, &message);
    response.headers_mut().insert(header::RETRY_AFTER, retry_after(wait));
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
    fn wrong_tokens_make_a_client_wait_longer_each_time_up_to_a_bound() {
        let throttle = LoginThrottle::default();
        let start = Instant::now();
        let client = Client::of(Some("192.0.2.7".parse().unwrap()));
        let other = Client::of(Some("192.0.2.8".parse().unwrap()));
        for n in 1..=FREE_FAILURES {
            assert_eq!(throttle.failed(client, start), None, "wrong token {n} is only wrong");
            assert_eq!(throttle.wait(client, start), None);
        }
        let mut now = start;
        let mut waits = Vec::new();
        for _ in 0..14 {
            let wait = throttle.failed(client, now).expect("a wait");
            assert_eq!(throttle.wait(client, now), Some(wait));
            assert_eq!(throttle.wait(other, now), None, "another client is not slowed");
            waits.push(wait.as_secs());
            now += wait;
            assert_eq!(throttle.wait(client, now), None, "the wait is over after it");
        }
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300, 300, 300], "growing, bounded");
        // A right token forgets the count; so does an hour without a wrong one.
        throttle.succeeded(client);
        assert_eq!(throttle.failed(client, now), None);
        for _ in 1..FREE_FAILURES {
            throttle.failed(client, now);
        }
        assert!(throttle.failed(client, now).is_some());
        let later = now + MAX_WAIT + FORGET_AFTER;
        assert_eq!(throttle.wait(client, later), None);
        assert_eq!(throttle.failed(client, later), None, "an hour later, the count starts again");
    }

    #[test]
    fn clients_are_addresses_an_ipv6_prefix_or_the_socket() {
        let ip = |s: &str| Client::of(Some(s.parse().unwrap()));
        assert_eq!(ip("2001:db8:1:2::1"), ip("2001:db8:1:2:ffff::9"), "one /64, one client");
        assert_ne!(ip("2001:db8:1:2::1"), ip("2001:db8:1:3::1"));
        assert_eq!(ip("::ffff:192.0.2.1"), ip("192.0.2.1"), "an IPv4 address however it is written");
        assert_eq!(Client::of(None), Client::Local);
    }

    #[test]
    fn a_flood_of_addresses_neither_grows_the_throttle_nor_escapes_it() {
        let throttle = LoginThrottle::default();
        let now = Instant::now();
        let address = |i: u32| Client::of(Some(IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i))));
        let flood = MAX_CLIENTS as u32 * 3;
        for i in 0..flood {
            throttle.failed(address(i), now);
        }
        assert_eq!(throttle.size(), (MAX_CLIENTS, true), "bounded");
        // The clients counted apart keep their counts; the others share one, which is past its free tries.
        assert_eq!(throttle.failed(address(0), now), None, "a counted client's second wrong token");
        assert!(
            throttle.wait(address(flood + 1), now).is_some(),
            "a new address is not a fresh start: {:?}",
            throttle.size()
        );
        // An hour later the old counts make room again.
        let later = now + FORGET_AFTER + MAX_WAIT;
        assert_eq!(throttle.failed(address(flood + 2), later), None);
        assert_eq!(throttle.size().0, 1);
    }

    #[test]
    fn at_the_session_limit_only_a_session_idle_long_enough_is_ended_for_a_login() {
        let sessions = Sessions::default();
        let start = Instant::now();
        let cookie = |id: &str| with(&[("cookie", &format!("{SESSION_COOKIE}={id}"))]);
        let ids: Vec<String> = (0..MAX_SESSIONS).map(|_| sessions.mint_at(start).unwrap()).collect();
        // Every session used a minute ago: the login is refused, naming the limit and when one frees up.
        let now = start + Duration::from_secs(60);
        for id in &ids[1..] {
            assert!(sessions.find_at(&cookie(id), now).is_some());
        }
        let refused = sessions.mint_at(now).unwrap_err();
        let MintError::Full { free_in } = refused else { panic!("{refused:?}") };
        assert_eq!(free_in, IDLE_RECLAIM - Duration::from_secs(60), "the first session reaches the idle bound then");
        let message = refused.to_string();
        assert!(
            message.contains("64 sessions") && message.contains("Log out") && message.contains("29 min"),
            "{message}"
        );
        assert!(ids.iter().all(|id| sessions.find_at(&cookie(id), now).is_some()), "nobody's session ended");
        // Once one has been idle for the bound, a login ends that one (the least recently used), and only it.
        let later = now + IDLE_RECLAIM;
        for id in &ids[1..] {
            assert!(sessions.find_at(&cookie(id), later).is_some());
        }
        let new = sessions.mint_at(later).expect("a session idle past the bound makes room");
        assert!(sessions.find_at(&cookie(&new), later).is_some());
        let alive: Vec<bool> = ids.iter().map(|id| sessions.find_at(&cookie(id), later).is_some()).collect();
        assert!(!alive[0] && alive[1..].iter().all(|a| *a), "only the session unused longest ended: {alive:?}");
        // Sessions past their lifetime make room too.
        let next_day = start + SESSION_LIFETIME;
        assert!(sessions.mint_at(next_day).is_ok());
    }

    #[test]
    fn cookies_are_http_only_and_strict() {
        assert_eq!(set_cookie("x", false), "agentd_session=x; Path=/; HttpOnly; SameSite=Strict");
        assert!(set_cookie("x", true).ends_with("; Secure"));
        assert!(clear_cookie(false).contains("Max-Age=0"));
    }
}
