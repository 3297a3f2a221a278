//! The computer-server provider: a machine running cua's `computer-server` (cua's Linux, Windows and macOS
//! images, or `python -m computer_server` on any desktop) as a `ComputerProvider`.
//!
//! - **Protocol**: every command is one `POST {url}/cmd` with `{"command": NAME, "params": {…}}`; the server
//!   answers `200` with a streamed body of `data: {JSON}` lines whose last object is the result
//!   (`{"success": true, …}` or `{"success": false, "error": …}`), or an HTTP error with `{"detail": …}`
//!   (`400` unknown command, `401` credentials, `503` not configured). `GET /status` answers
//!   `{"status": "ok", "os_type": …}` and is the health check. The WebSocket endpoint (`/ws`) speaks the same
//!   commands; this provider uses HTTP only (one request per command, no session to keep).
//! - **Credentials**: when configured, every request carries `X-API-Key` and `X-Container-Name`, the
//!   headers the server reads (cua's cloud images check them against the container's name and cua's API;
//!   a local server without `CONTAINER_NAME` ignores them). The key is never logged nor shown in errors.
//! - **Actions** (docs/task-file.md) from the server's commands: `mouse_down`/`mouse_up` at a position for clicks
//!   of the left, right and middle buttons (back and forward do not exist there: unsupported), held
//!   modifiers with `key_down`/`key_up` around the click, triple click as `double_click` then `left_click`
//!   (two round trips, within apps' multi-click interval), drag as a press, a `move_cursor` per point of the
//!   path and a release (the server's own `drag` releases between points), scroll as `move_cursor` and
//!   `scroll` in wheel notches (one per [`PIXELS_PER_NOTCH`]), `type_text`, chords with `hotkey`,
//!   `hold_key` with `key_down`, a pause and `key_up`, `cursor_position` with `get_cursor_position`. Keys are
//!   mapped to the server's names ([`keys`]); a key it has no name for is a tool error.
//! - **Screen**: `screenshot` in PNG, decoded to RGB; the screen size is the last screenshot's (asked with
//!   `get_screen_size` before the first), so a frame is always of the reported size.
//! - **Faults**: a refused connection or a `503` is retried for [`CuaConfig::reconnect_grace`] and then
//!   [`CuaError::Connect`] / [`CuaError::Unavailable`] (`ProviderError::Unavailable`, retryable): a server
//!   that restarts lets the task go on. A request sent whose answer never came is [`CuaError::Lost`]
//!   (retried when the command only observes, e.g. a screenshot; never for input, which may have happened:
//!   once the server answers `/status` again within the grace the action is [`CuaError::Uncertain`], a
//!   tool error that tells the model so and lets the task go on).
//!   Rejected credentials are [`CuaError::Auth`] (`Failed`).
//! - **Guest commands**: [`CuaServerProvider::run_command`] runs a shell command on the machine (for
//!   verifiers and desktop setup), outside the action vocabulary.
//! - **Keyboard focus**: the server's Linux handler types characters with pynput, which sends each one
//!   (`XSendEvent`) to the window X reports as focused; on a display whose focus is `PointerRoot`, the root
//!   window or `None` (a bare Xvfb with no window manager, where clicks do not move the focus) they are
//!   dropped and the server still answers success. Named keys (Return, Tab, modifiers) go through XTest and
//!   reach the window under the pointer, unless the focus is `None`. Before a `type`, `keypress` or
//!   `hold_key` on a Linux server the provider asks the display where the focus is ([`KeyboardFocus`],
//!   through `run_command` with the server's own Python and python-xlib) and refuses keys that would go
//!   nowhere with [`CuaError::NoKeyboardFocus`] (a tool error naming the cause); a server where the question
//!   cannot be asked (not Linux, no python-xlib, no `run_command`) is not asked again and types as before.

pub mod error;
pub mod keys;
mod ws;

use std::time::{Duration, Instant};

use agentd_computer::provider::{check_action, sleep_for};
use agentd_computer::{Action, ActionReport, ComputerProvider, Frame, Key, MouseButton, Point, ProviderError, Size};
use async_trait::async_trait;
use serde_json::{Value, json};

pub use error::CuaError;

pub use agentd_computer::{MAX_NOTCHES, PIXELS_PER_NOTCH, notches};
/// The pause at every point of a drag path, so that applications see each point as motion.
pub const DRAG_DWELL: Duration = Duration::from_millis(20);
/// The pause between retries while the server cannot be reached.
const RETRY_PAUSE: Duration = Duration::from_millis(250);

/// Where the server is and how to authenticate.
#[derive(Clone)]
pub struct CuaConfig {
    /// `http://host:port` (or https), without a path.
    pub url: String,
    /// Sent as `X-API-Key` when set.
    pub api_key: Option<String>,
    /// Sent as `X-Container-Name` when set.
    pub container_name: Option<String>,
    /// Limit for establishing a connection.
    pub connect_timeout: Duration,
    /// Limit for one command's answer (typing a long text takes its time).
    pub request_timeout: Duration,
    /// How long a call keeps trying a server that cannot be reached before it fails.
    pub reconnect_grace: Duration,
    /// How commands travel: `POST /cmd`, the `/ws` WebSocket, or `/cmd` falling back to `/ws` when the
    /// server has no `/cmd` (older servers).
    pub transport: Transport,
    /// Where the server may be: the address connected to must be one this allows (default: anywhere).
    pub outbound: agentd_computer::outbound::Outbound,
}

/// How commands reach the server (`computer.transport`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Transport {
    /// `POST /cmd`; a server that answers it with 404 or 405 is spoken to over `/ws` from then on.
    #[default]
    Auto,
    Http,
    WebSocket,
}

impl std::str::FromStr for Transport {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "http" => Ok(Self::Http),
            "websocket" => Ok(Self::WebSocket),
            other => Err(format!("unknown transport {other:?} (auto, http, websocket)")),
        }
    }
}

impl std::fmt::Debug for CuaConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CuaConfig")
            .field("url", &self.url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("container_name", &self.container_name)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("reconnect_grace", &self.reconnect_grace)
            .field("transport", &self.transport)
            .field("outbound", &self.outbound)
            .finish()
    }
}

impl CuaConfig {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            api_key: None,
            container_name: None,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(120),
            reconnect_grace: Duration::from_secs(15),
            transport: Transport::Auto,
            outbound: agentd_computer::outbound::Outbound::open(),
        }
    }
}

/// `url` checked and without a trailing slash: `http(s)://host[:port]`, no path, query or credentials.
pub fn normalize_url(url: &str) -> Result<String, CuaError> {
    let bad = |why: &str| CuaError::Config(format!("{url:?} is not a computer-server URL: {why}"));
    let lower = url.trim().trim_end_matches('/').to_ascii_lowercase();
    let trimmed = lower.as_str();
    let rest = trimmed
        .strip_prefix("http://")
        .or_else(|| trimmed.strip_prefix("https://"))
        .ok_or_else(|| bad("it must start with http:// or https://"))?;
    if rest.is_empty() {
        return Err(bad("no host"));
    }
    if rest.contains(['/', '?', '#', '@', ' ']) {
        return Err(bad("give only scheme, host and port (e.g. http://10.0.0.5:8000)"));
    }
    Ok(trimmed.to_string())
}

/// What a guest command printed and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOutput {
    pub stdout: String,
    pub stderr: String,
    /// The exit code; `None` when the server did not report one.
    pub return_code: Option<i64>,
}

/// Where an X display's keyboard input goes, as the computer-server's Linux handler sends it: pynput sends a
/// typed character (`XSendEvent`) to the window `XGetInputFocus` names, and a named key (Return, Tab, a
/// modifier) through XTest, which X delivers to the focus or, with focus `PointerRoot` or the root window, to
/// the window under the pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyboardFocus {
    /// A window has the focus: every key goes to it.
    Window,
    /// The focus follows the pointer (`PointerRoot`, X's default with no window manager): characters are
    /// dropped, named keys reach the window under the pointer.
    PointerRoot,
    /// The root window has the focus (a focused window closed): as `PointerRoot`.
    Root,
    /// No focus at all (`None`): no key reaches any window.
    Nothing,
}

impl KeyboardFocus {
    /// Whether keys of this kind (typed characters, or named keys only) reach a window.
    pub fn delivers(self, characters: bool) -> bool {
        match self {
            Self::Window => true,
            Self::PointerRoot | Self::Root => !characters,
            Self::Nothing => false,
        }
    }

    /// Why keys sent to a display with this focus go nowhere, and what the machine needs (the error's text).
    pub fn why_keys_go_nowhere(self, url: &str, characters: bool) -> String {
        let focus = match self {
            Self::Window => "a focused window",
            Self::PointerRoot => "no focused window (its input focus is PointerRoot)",
            Self::Root => "no focused window (its input focus is the root window)",
            Self::Nothing => "no input focus at all (None)",
        };
        let lost = if self == Self::Nothing {
            "no key reaches any window"
        } else if characters {
            "the typed characters would be dropped: the server sends them to the focused window"
        } else {
            "the keys would be dropped"
        };
        format!(
            "the X display of the computer-server at {url} has {focus}, so {lost} (the server would still report \
             success). Without a window manager a click does not give a window the focus: the machine needs a \
             window manager, or the application must take the focus itself"
        )
    }
}

/// What the provider knows of the server's keyboard focus question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FocusProbe {
    /// Ask before keys (a Linux server that has not failed the question).
    Ask,
    /// A window had the focus when last asked, at this moment: keys go without asking again until
    /// [`FOCUS_TRUSTED_FOR`] has passed (asking costs a guest command, 0.1–0.3 s, per keyboard action).
    Window(std::time::Instant),
    /// The question cannot be asked there (not Linux, no python-xlib, no `run_command`): keys go as before.
    Unanswerable,
}

/// How long a focused window, once seen, is trusted without asking again. A focus that goes nowhere is
/// asked about before every keyboard action until a window has it.
const FOCUS_TRUSTED_FOR: Duration = Duration::from_secs(5);

/// The shell command that asks the machine's X display where its keyboard focus is, with the same library
/// and display the server's pynput uses: the server's own interpreter (the first word of its command line;
/// `run_command`'s shell is its child), else `python3`. It prints `agentd-focus: window|pointer-root|root|none`.
const FOCUS_PROBE: &str = r#"for p in "$(tr '\0' '\n' </proc/$PPID/cmdline 2>/dev/null | head -n 1)" python3; do [ -n "$p" ] && "$p" -c 'import Xlib.display
d = Xlib.display.Display()
f = d.get_input_focus().focus
i = getattr(f, "id", f)
print("agentd-focus:", "none" if i == 0 else "pointer-root" if i == 1 else "root" if i == d.screen().root.id else "window")' 2>/dev/null && exit 0; done; exit 3"#;

/// The focus the provider's probe printed on the machine (a line `agentd-focus: window`, `pointer-root`,
/// `root` or `none`), or `None` when it printed no answer.
pub fn parse_focus_probe(stdout: &str) -> Option<KeyboardFocus> {
    let answer = stdout.lines().find_map(|line| line.trim().strip_prefix("agentd-focus:"))?;
    match answer.trim() {
        "window" => Some(KeyboardFocus::Window),
        "pointer-root" => Some(KeyboardFocus::PointerRoot),
        "root" => Some(KeyboardFocus::Root),
        "none" => Some(KeyboardFocus::Nothing),
        _ => None,
    }
}

/// Whether keys named by the server (`keys::server_name`) include a character (pynput sends those to the
/// focused window; named keys go through XTest).
fn has_character(names: &[String]) -> bool {
    names.iter().any(|name| name.chars().count() == 1)
}

/// A machine running cua's computer-server.
pub struct CuaServerProvider {
    config: CuaConfig,
    url: String,
    client: reqwest::Client,
    /// The screen size as last seen (a screenshot or `get_screen_size`).
    size: std::sync::Mutex<Option<Size>>,
    /// Input actions one at a time: a click with modifiers is several commands that must not interleave.
    /// It holds the keys each `mouse_down` pressed with its button, for the matching `mouse_up` (docs/task-file.md).
    input: tokio::sync::Mutex<std::collections::HashMap<&'static str, Vec<String>>>,
    /// The `/ws` transport, used when configured or once `/cmd` turned out missing.
    ws: ws::WsTransport,
    over_ws: std::sync::atomic::AtomicBool,
    /// Whether the keyboard focus is asked before keys.
    focus_probe: std::sync::Mutex<FocusProbe>,
    /// Whether the operator was told (in the log) that keys go nowhere on this machine.
    focus_warned: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for CuaServerProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CuaServerProvider").field("url", &self.url).finish()
    }
}

/// Whether a command only observes (safe to send again when its answer was lost).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Retry {
    Observe,
    Input,
}

impl CuaServerProvider {
    /// Checks the configuration and that the server answers `/status` now (no waiting: a task for a server
    /// that is down fails at once, as for VNC; the reconnect grace is for servers lost mid-task).
    pub async fn connect(config: CuaConfig) -> Result<Self, CuaError> {
        let url = normalize_url(&config.url)?;
        let parsed = reqwest::Url::parse(&url).map_err(|e| CuaError::Config(format!("{url:?}: {e}")))?;
        agentd_computer::outbound::http::check_url(&config.outbound, &parsed).map_err(CuaError::Refused)?;
        let builder =
            reqwest::Client::builder().connect_timeout(config.connect_timeout).timeout(config.request_timeout);
        let client = agentd_computer::outbound::http::apply(builder, &config.outbound, 10)
            .build()
            .map_err(|e| CuaError::Config(format!("cannot build the HTTP client: {e}")))?;
        let ws = ws::WsTransport::new(&url, &config);
        let over_ws = std::sync::atomic::AtomicBool::new(config.transport == Transport::WebSocket);
        let provider = Self {
            config,
            url,
            client,
            size: std::sync::Mutex::new(None),
            input: tokio::sync::Mutex::default(),
            ws,
            over_ws,
            focus_probe: std::sync::Mutex::new(FocusProbe::Unanswerable),
            focus_warned: std::sync::atomic::AtomicBool::new(false),
        };
        let status = provider.status_within(Duration::ZERO).await?;
        if status["os_type"] == "linux"
            && let Ok(mut probe) = provider.focus_probe.lock()
        {
            *probe = FocusProbe::Ask;
        }
        Ok(provider)
    }

    /// The normalised URL of the server.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `GET /status`: the server's own report (`{"status": "ok", "os_type": …}`).
    pub async fn status(&self) -> Result<Value, CuaError> {
        self.status_within(Duration::ZERO).await
    }

    async fn status_within(&self, grace: Duration) -> Result<Value, CuaError> {
        let start = Instant::now();
        loop {
            let result = async {
                let response = self
                    .authorized(self.client.get(format!("{}/status", self.url)))
                    .send()
                    .await
                    .map_err(|e| self.transport("status", e))?;
                let status = response.status();
                let text = response.text().await.map_err(|e| self.transport("status", e))?;
                if !status.is_success() {
                    return Err(self.http_error("status", status, &text));
                }
                // What the server answered is never quoted: a task may name any URL as its computer, and an
                // error message must not become a way to read it.
                let value: Value = serde_json::from_str(&text).map_err(|_| CuaError::Protocol {
                    url: self.url.clone(),
                    command: "status".into(),
                    reason: "the answer is not JSON (is this a computer-server?)".into(),
                })?;
                if value["status"] != "ok" {
                    return Err(CuaError::Unavailable {
                        url: self.url.clone(),
                        detail: "its /status does not say \"ok\"".into(),
                    });
                }
                Ok(value)
            }
            .await;
            match result {
                Err(e) if e.is_retryable() && start.elapsed() < grace => tokio::time::sleep(RETRY_PAUSE).await,
                other => return other,
            }
        }
    }

    /// Runs `command` in the machine's shell (the server's `run_command`) and returns what it printed and its
    /// exit code. A command that exits non-zero is not an error here; the caller reads `return_code`.
    pub async fn run_command(&self, command: &str) -> Result<CommandOutput, CuaError> {
        let reply = self.call("run_command", json!({ "command": command }), Retry::Input).await?;
        let text = |field: &str| reply[field].as_str().unwrap_or_default().to_string();
        Ok(CommandOutput { stdout: text("stdout"), stderr: text("stderr"), return_code: reply["return_code"].as_i64() })
    }

    /// Where the machine's X display sends keys now, asked through `run_command`; `Ok(None)` when the server
    /// cannot answer that (not Linux, no python-xlib, `run_command` refused): it is then not asked again.
    pub async fn keyboard_focus(&self) -> Result<Option<KeyboardFocus>, CuaError> {
        if self.focus_probe.lock().map_or(true, |p| *p == FocusProbe::Unanswerable) {
            return Ok(None);
        }
        let answer = match self.call("run_command", json!({ "command": FOCUS_PROBE }), Retry::Observe).await {
            Ok(reply) => parse_focus_probe(reply["stdout"].as_str().unwrap_or_default()),
            // The server cannot be reached: the keys could not be sent either.
            Err(e) if e.is_retryable() => return Err(e),
            Err(e) => {
                tracing::debug!(url = %self.url, error = %e, "computer-server: cannot ask where the keyboard focus is");
                None
            }
        };
        if let Ok(mut probe) = self.focus_probe.lock() {
            *probe = match answer {
                None => FocusProbe::Unanswerable,
                Some(KeyboardFocus::Window) => FocusProbe::Window(std::time::Instant::now()),
                Some(_) => FocusProbe::Ask,
            };
        }
        Ok(answer)
    }

    /// Refuses keys that the machine's keyboard focus would drop (`characters`: whether they include typed
    /// characters, which need a focused window).
    async fn check_keyboard(&self, characters: bool) -> Result<(), CuaError> {
        if let Ok(FocusProbe::Window(at)) = self.focus_probe.lock().map(|p| *p)
            && at.elapsed() < FOCUS_TRUSTED_FOR
        {
            return Ok(());
        }
        let Some(focus) = self.keyboard_focus().await? else { return Ok(()) };
        if focus.delivers(characters) {
            return Ok(());
        }
        if !self.focus_warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::warn!(url = %self.url, "computer-server: {}", focus.why_keys_go_nowhere(&self.url, characters));
        }
        Err(CuaError::NoKeyboardFocus { url: self.url.clone(), focus, characters })
    }

    /// Sends one command, retrying within the reconnect grace while the server cannot be reached (and, for
    /// commands that only observe, when an answer was lost).
    async fn call(&self, command: &str, params: Value, retry: Retry) -> Result<Value, CuaError> {
        let start = Instant::now();
        let mut warned = false;
        loop {
            match self.call_once(command, &params).await {
                Err(e)
                    if start.elapsed() < self.config.reconnect_grace
                        && (matches!(e, CuaError::Connect { .. } | CuaError::Unavailable { .. })
                            || (retry == Retry::Observe && matches!(e, CuaError::Lost { .. }))) =>
                {
                    if !warned {
                        tracing::warn!(url = %self.url, command, error = %e, "computer-server unreachable; retrying");
                        warned = true;
                    }
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                // An input whose answer was lost may or may not have run: it is never sent again. Once the
                // server answers again the model is told; a server that stays away ends the attempt.
                Err(CuaError::Lost { url, command, reason }) if retry == Retry::Input => {
                    let left = self.config.reconnect_grace.saturating_sub(start.elapsed());
                    return match self.status_within(left).await {
                        Ok(_) => Err(CuaError::Uncertain { url, command, reason }),
                        Err(_) => Err(CuaError::Lost { url, command, reason }),
                    };
                }
                other => return other,
            }
        }
    }

    fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let mut request = request;
        if let Some(key) = &self.config.api_key {
            request = request.header("X-API-Key", key);
        }
        if let Some(name) = &self.config.container_name {
            request = request.header("X-Container-Name", name);
        }
        request
    }

    fn transport(&self, command: &str, e: reqwest::Error) -> CuaError {
        // reqwest's errors name the URL, never headers: nothing secret in them.
        let reason = error_chain(&e);
        if e.is_connect() {
            CuaError::Connect { url: self.url.clone(), reason }
        } else if e.is_timeout() {
            CuaError::Lost {
                url: self.url.clone(),
                command: command.to_string(),
                reason: format!("no answer within {:?}", self.config.request_timeout),
            }
        } else {
            CuaError::Lost { url: self.url.clone(), command: command.to_string(), reason }
        }
    }

    fn http_error(&self, command: &str, status: reqwest::StatusCode, body: &str) -> CuaError {
        // computer-server's own error answers are JSON with a short `detail`; anything else is not quoted (a
        // task may name any URL, and an error message must not become a way to read it).
        let detail = serde_json::from_str::<Value>(body)
            .ok()
            .and_then(|v| v["detail"].as_str().map(|d| d.chars().take(200).collect()))
            .unwrap_or_else(|| format!("HTTP {}", status.as_u16()));
        let url = self.url.clone();
        match status.as_u16() {
            401 | 403 => CuaError::Auth { url, detail },
            404 | 405 if command != "status" => CuaError::NoCmdEndpoint { url, status: status.as_u16() },
            503 => CuaError::Unavailable { url, detail },
            400 if detail.starts_with("Unknown command") => {
                CuaError::UnknownCommand { url, command: command.to_string(), detail }
            }
            _ => CuaError::Protocol { url, command: command.to_string(), reason: format!("HTTP {status}: {detail}") },
        }
    }

    /// Whether commands go over `/ws` (configured, or `/cmd` found missing).
    pub fn uses_websocket(&self) -> bool {
        self.over_ws.load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn call_once(&self, command: &str, params: &Value) -> Result<Value, CuaError> {
        let reply = if self.uses_websocket() {
            self.ws.call(command, params).await?
        } else {
            match self.call_http(command, params).await {
                Err(CuaError::NoCmdEndpoint { .. }) if self.config.transport == Transport::Auto => {
                    tracing::info!(url = %self.url, "computer-server has no /cmd; using its /ws WebSocket");
                    self.over_ws.store(true, std::sync::atomic::Ordering::Relaxed);
                    self.ws.call(command, params).await?
                }
                other => other?,
            }
        };
        if reply["success"] != true {
            let error = reply["error"].as_str().unwrap_or("no reason given").to_string();
            return Err(CuaError::Command { url: self.url.clone(), command: command.to_string(), error });
        }
        Ok(reply)
    }

    /// `POST /cmd`: the reply object, its `success` not yet looked at.
    async fn call_http(&self, command: &str, params: &Value) -> Result<Value, CuaError> {
        let body = json!({ "command": command, "params": params }).to_string();
        let response = self
            .authorized(self.client.post(format!("{}/cmd", self.url)))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| self.transport(command, e))?;
        let status = response.status();
        let text = response.text().await.map_err(|e| self.transport(command, e))?;
        if !status.is_success() {
            return Err(self.http_error(command, status, &text));
        }
        parse_reply(&text).map_err(|reason| CuaError::Protocol {
            url: self.url.clone(),
            command: command.to_string(),
            reason,
        })
    }

    fn cached_size(&self) -> Option<Size> {
        self.size.lock().ok().and_then(|s| *s)
    }

    fn remember_size(&self, size: Size) {
        if let Ok(mut cached) = self.size.lock() {
            *cached = Some(size);
        }
    }

    async fn current_size(&self) -> Result<Size, CuaError> {
        if let Some(size) = self.cached_size() {
            return Ok(size);
        }
        let reply = self.call("get_screen_size", json!({}), Retry::Observe).await?;
        let dimension = |field: &str| reply["size"][field].as_u64().and_then(|v| u32::try_from(v).ok());
        let size = match (dimension("width"), dimension("height")) {
            (Some(width), Some(height)) if width > 0 && height > 0 => Size::new(width, height),
            _ => {
                return Err(CuaError::Protocol {
                    url: self.url.clone(),
                    command: "get_screen_size".into(),
                    reason: format!("no size in {}", reply["size"]),
                });
            }
        };
        self.remember_size(size);
        Ok(size)
    }

    async fn capture(&self) -> Result<Frame, CuaError> {
        let reply = self.call("screenshot", json!({ "format": "png" }), Retry::Observe).await?;
        let protocol =
            |reason: String| CuaError::Protocol { url: self.url.clone(), command: "screenshot".into(), reason };
        let data = reply["image_data"].as_str().ok_or_else(|| protocol("no image_data".into()))?;
        let frame = decode_png_base64(data).map_err(protocol)?;
        self.remember_size(frame.size());
        Ok(frame)
    }

    async fn cmd(&self, command: &str, params: Value) -> Result<(), CuaError> {
        self.call(command, params, Retry::Input).await.map(drop)
    }

    async fn press(&self, button: &str, at: Option<Point>, down: bool) -> Result<(), CuaError> {
        let command = if down { "mouse_down" } else { "mouse_up" };
        let params = match at {
            Some(p) => json!({ "x": p.x, "y": p.y, "button": button }),
            None => json!({ "button": button }),
        };
        self.cmd(command, params).await
    }

    async fn move_to(&self, p: Point) -> Result<(), CuaError> {
        self.cmd("move_cursor", json!({ "x": p.x, "y": p.y })).await
    }

    /// `result` of an input call that presses or releases `button` inside one action; when its answer was
    /// lost and the server is back (`Uncertain`), sends one more release first. A button left held swallows
    /// the next click's press (X drops a press of a button that is down: seen as a lost click after the
    /// server was killed between `mouse_down` and `mouse_up`); releasing a button that is up changes nothing
    /// on X. The result is returned as it is: the model is still told the action's effect is not known.
    async fn unstick(&self, button: &str, result: Result<(), CuaError>) -> Result<(), CuaError> {
        if matches!(result, Err(CuaError::Uncertain { .. }))
            && let Err(e) = self.press(button, None, false).await
        {
            tracing::warn!(url = %self.url, button, error = %e, "could not release the button after a lost answer");
        }
        result
    }

    /// Presses `keys` in order, runs `body`, and releases them in reverse order even when `body` failed.
    async fn holding<F>(&self, keys: &[String], body: F) -> Result<(), CuaError>
    where
        F: std::future::Future<Output = Result<(), CuaError>>,
    {
        let mut pressed = Vec::new();
        let mut result = Ok(());
        for key in keys {
            match self.cmd("key_down", json!({ "key": key })).await {
                Ok(()) => pressed.push(key),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if result.is_ok() {
            result = body.await;
        }
        for key in pressed.into_iter().rev() {
            let released = self.cmd("key_up", json!({ "key": key })).await;
            if result.is_ok() {
                result = released;
            }
        }
        result
    }

    async fn input(&self, action: &Action) -> Result<ActionReport, CuaError> {
        let mut held_with = self.input.lock().await;
        match action {
            Action::Click { x, y, button, keys } => {
                let button = button_name(*button, "click")?;
                let at = Point::new(*x, *y);
                let modifiers = server_keys(keys)?;
                self.holding(&modifiers, async {
                    self.unstick(button, self.press(button, Some(at), true).await).await?;
                    self.unstick(button, self.press(button, Some(at), false).await).await
                })
                .await?;
            }
            Action::DoubleClick { x, y } => {
                self.unstick("left", self.cmd("double_click", json!({ "x": x, "y": y })).await).await?;
            }
            Action::TripleClick { x, y } => {
                // Two round trips, not six press/release calls: apps count clicks within their multi-click
                // interval, which six calls to a slow server outlast (seen with Tk under load).
                self.unstick("left", self.cmd("double_click", json!({ "x": x, "y": y })).await).await?;
                self.unstick("left", self.cmd("left_click", json!({})).await).await?;
            }
            Action::MouseDown { button, keys } => {
                let button = button_name(*button, "mouse_down")?;
                let modifiers = server_keys(keys)?;
                let mut pressed = Vec::new();
                let mut result = Ok(());
                for key in &modifiers {
                    result = self.cmd("key_down", json!({ "key": key })).await;
                    if result.is_err() {
                        break;
                    }
                    pressed.push(key.clone());
                }
                if result.is_ok() {
                    result = self.press(button, None, true).await;
                }
                if result.is_ok() {
                    // Held until the matching mouse_up.
                    held_with.insert(button, pressed);
                } else {
                    for key in pressed.iter().rev() {
                        let _ = self.cmd("key_up", json!({ "key": key })).await;
                    }
                }
                result?;
            }
            Action::MouseUp { button } => {
                let button = button_name(*button, "mouse_up")?;
                let mut result = self.press(button, None, false).await;
                for key in held_with.remove(button).unwrap_or_default().iter().rev() {
                    let released = self.cmd("key_up", json!({ "key": key })).await;
                    if result.is_ok() {
                        result = released;
                    }
                }
                result?;
            }
            Action::Move { x, y, keys } => {
                self.holding(&server_keys(keys)?, self.move_to(Point::new(*x, *y))).await?;
            }
            Action::Drag { path, button, keys } => {
                let Some((&first, rest)) = path.split_first() else {
                    return Err(CuaError::Invalid("drag needs a path of at least 2 points".into()));
                };
                let button = button_name(*button, "drag")?;
                self.holding(&server_keys(keys)?, async {
                    self.move_to(first).await?;
                    self.unstick(button, self.press(button, Some(first), true).await).await?;
                    tokio::time::sleep(DRAG_DWELL).await;
                    let mut result = Ok(());
                    for point in rest {
                        result = self.move_to(*point).await;
                        if result.is_err() {
                            break;
                        }
                        tokio::time::sleep(DRAG_DWELL).await;
                    }
                    let last = rest.last().copied().unwrap_or(first);
                    let released = self.unstick(button, self.press(button, Some(last), false).await).await;
                    result.and(released)
                })
                .await?;
            }
            Action::Scroll { x, y, scroll_x, scroll_y, keys } => {
                self.holding(&server_keys(keys)?, async {
                    self.move_to(Point::new(*x, *y)).await?;
                    // The server's `scroll` is pynput's: positive y scrolls up, positive x right, in notches.
                    let (nx, ny) = (notches(*scroll_x), notches(*scroll_y));
                    if ny != 0 {
                        self.cmd("scroll", json!({ "x": 0, "y": -ny })).await?;
                    }
                    if nx != 0 {
                        self.cmd("scroll", json!({ "x": nx, "y": 0 })).await?;
                    }
                    Ok(())
                })
                .await?;
            }
            Action::Type { text } => {
                if !text.is_empty() {
                    // pynput types Return and Tab as named keys, every other character to the focused window.
                    self.check_keyboard(text.chars().any(|c| !matches!(c, '\n' | '\r' | '\t'))).await?;
                    self.cmd("type_text", json!({ "text": one_return_per_line(text) })).await?;
                }
            }
            Action::Keypress { keys } => {
                let names = server_keys(keys)?;
                self.check_keyboard(has_character(&names)).await?;
                match names.as_slice() {
                    [one] => self.cmd("press_key", json!({ "key": one })).await?,
                    _ => self.cmd("hotkey", json!({ "keys": names })).await?,
                }
            }
            Action::HoldKey { keys, duration_ms } => {
                let names = server_keys(keys)?;
                self.check_keyboard(has_character(&names)).await?;
                self.holding(&names, async {
                    tokio::time::sleep(Duration::from_millis(*duration_ms)).await;
                    Ok(())
                })
                .await?;
            }
            Action::CursorPosition {} => {
                let reply = self.call("get_cursor_position", json!({}), Retry::Observe).await?;
                let coordinate = |field: &str| reply["position"][field].as_f64().map(|v| v.round() as i32);
                let (Some(x), Some(y)) = (coordinate("x"), coordinate("y")) else {
                    return Err(CuaError::Protocol {
                        url: self.url.clone(),
                        command: "get_cursor_position".into(),
                        reason: format!("no position in {}", reply["position"]),
                    });
                };
                return Ok(ActionReport {
                    message: Some(format!("pointer at {x},{y}")),
                    cursor: Some(Point::new(x, y)),
                });
            }
            Action::Wait { .. }
            | Action::Screenshot {}
            | Action::Zoom { .. }
            | Action::Navigate { .. }
            | Action::Back {}
            | Action::Forward {}
            | Action::Reload {} => {
                return Err(CuaError::Unsupported {
                    action: action.kind(),
                    reason: "the agent loop handles it without the provider".into(),
                });
            }
        }
        Ok(ActionReport::default())
    }
}

/// The server's name of a mouse button (its handlers know left, right and middle).
/// `text` with every `\r\n` as one `\n`: the server's pynput types `\r` and `\n` each as Return, so a
/// Windows line end would press Return twice (measured); the other providers type `\r\n` as one Return.
fn one_return_per_line(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains("\r\n") { text.replace("\r\n", "\n").into() } else { text.into() }
}

fn button_name(button: MouseButton, action: &'static str) -> Result<&'static str, CuaError> {
    match button {
        MouseButton::Left => Ok("left"),
        MouseButton::Right => Ok("right"),
        MouseButton::Middle => Ok("middle"),
        other => Err(CuaError::Unsupported {
            action,
            reason: format!("the computer-server has no {} mouse button", other.as_str()),
        }),
    }
}

/// The server's names of `keys`; a key it has no name for is a tool error naming it.
fn server_keys(keys: &[String]) -> Result<Vec<String>, CuaError> {
    keys.iter()
        .map(|name| {
            let key = Key::parse(name).map_err(|e| CuaError::Invalid(e.to_string()))?;
            keys::server_name(key).ok_or_else(|| CuaError::Unsupported {
                action: "keypress",
                reason: format!("the computer-server has no name for the key {name:?}"),
            })
        })
        .collect()
}

/// The result object of a `/cmd` reply: the last `data: {…}` line of the streamed body.
pub fn parse_reply(body: &str) -> Result<Value, String> {
    let line = body
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim)
        .rfind(|line| !line.is_empty())
        .ok_or_else(|| format!("no data line in {:?}", body.chars().take(200).collect::<String>()))?;
    let value: Value = serde_json::from_str(line).map_err(|e| format!("the data line is not JSON: {e}"))?;
    if !value.is_object() {
        return Err(format!("the data line is not an object: {}", line.chars().take(200).collect::<String>()));
    }
    Ok(value)
}

/// A base64 PNG (any colour type and depth) as an RGB frame.
pub fn decode_png_base64(data: &str) -> Result<Frame, String> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| format!("image_data is not base64: {e}"))?;
    let mut decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    let mut reader = decoder.read_info().map_err(|e| format!("image_data is not a PNG: {e}"))?;
    let mut buf = vec![0; reader.output_buffer_size().ok_or("the PNG is too large")?];
    let info = reader.next_frame(&mut buf).map_err(|e| format!("the PNG does not decode: {e}"))?;
    buf.truncate(info.buffer_size());
    let (color, _) = reader.output_color_type();
    let rgb: Vec<u8> = match color {
        png::ColorType::Rgb => buf,
        png::ColorType::Rgba => buf.chunks_exact(4).flat_map(|p| [p[0], p[1], p[2]]).collect(),
        png::ColorType::Grayscale => buf.iter().flat_map(|&g| [g, g, g]).collect(),
        png::ColorType::GrayscaleAlpha => buf.chunks_exact(2).flat_map(|p| [p[0], p[0], p[0]]).collect(),
        png::ColorType::Indexed => return Err("the PNG is still indexed after expansion".into()),
    };
    Frame::from_rgb(Size::new(info.width, info.height), rgb).map_err(|e| e.to_string())
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[async_trait]
impl ComputerProvider for CuaServerProvider {
    fn kind(&self) -> &'static str {
        "computer-server"
    }

    async fn screen_size(&self) -> Result<Size, ProviderError> {
        Ok(self.current_size().await?)
    }

    async fn screenshot(&self) -> Result<Frame, ProviderError> {
        Ok(self.capture().await?)
    }

    async fn perform(&self, action: &Action) -> Result<ActionReport, ProviderError> {
        agentd_computer::provider::refuse_navigation("computer-server", action)?;
        if let Some(report) = sleep_for(action).await {
            return Ok(report);
        }
        check_action(action, self.current_size().await?)?;
        Ok(self.input(action).await?)
    }

    async fn run_command(&self, command: &str) -> Result<agentd_computer::GuestOutput, ProviderError> {
        let output = CuaServerProvider::run_command(self, command).await?;
        Ok(agentd_computer::GuestOutput { stdout: output.stdout, stderr: output.stderr, exit_code: output.return_code })
    }

    async fn health(&self) -> Result<(), ProviderError> {
        self.status().await.map(drop).map_err(ProviderError::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_focus_probe_answer_is_read_and_anything_else_is_no_answer() {
        assert_eq!(parse_focus_probe("agentd-focus: window\n"), Some(KeyboardFocus::Window));
        assert_eq!(parse_focus_probe("noise\nagentd-focus: pointer-root\n"), Some(KeyboardFocus::PointerRoot));
        assert_eq!(parse_focus_probe("agentd-focus: root"), Some(KeyboardFocus::Root));
        assert_eq!(parse_focus_probe("agentd-focus: none\n"), Some(KeyboardFocus::Nothing));
        assert_eq!(parse_focus_probe(""), None);
        assert_eq!(parse_focus_probe("agentd-focus: maybe"), None);
        // Characters need a focused window; named keys need some focus.
        assert!(KeyboardFocus::PointerRoot.delivers(false) && !KeyboardFocus::PointerRoot.delivers(true));
        assert!(!KeyboardFocus::Nothing.delivers(false) && KeyboardFocus::Window.delivers(true));
        assert!(has_character(&["ctrl".into(), "a".into()]) && !has_character(&["ctrl".into(), "enter".into()]));
    }

    #[test]
    fn a_windows_line_end_is_one_return() {
        assert_eq!(one_return_per_line("a\r\nb\nc\rd"), "a\nb\nc\rd");
        assert!(matches!(one_return_per_line("plain"), std::borrow::Cow::Borrowed("plain")));
    }

    #[test]
    fn urls_are_checked_and_normalised() {
        assert_eq!(normalize_url("HTTP://Box.Example:8000/").unwrap(), "http://box.example:8000");
        assert_eq!(normalize_url("https://10.0.0.5:8443").unwrap(), "https://10.0.0.5:8443");
        assert!(normalize_url("10.0.0.5:8000").unwrap_err().to_string().contains("http://"));
        assert!(normalize_url("http://h:1/cmd").is_err());
        assert!(normalize_url("http://user:pw@h:1").is_err());
        assert!(normalize_url("http://").is_err());
    }

    #[test]
    fn replies_are_the_last_data_line() {
        let body = "data: {\"success\": true, \"size\": {\"width\": 3}}\n\n";
        assert_eq!(parse_reply(body).unwrap()["size"]["width"], 3);
        let two = "data: {\"a\": 1}\n\ndata: {\"a\": 2}\n\n";
        assert_eq!(parse_reply(two).unwrap()["a"], 2);
        assert!(parse_reply("{\"detail\": \"x\"}").is_err());
        assert!(parse_reply("data: [1]\n\n").is_err());
        assert!(parse_reply("data: {nope\n\n").is_err());
    }

    #[test]
    fn pngs_of_every_colour_type_decode_to_rgb() {
        use base64::Engine as _;
        fn encode(color: png::ColorType, pixels: &[u8]) -> String {
            let mut out = Vec::new();
            {
                let mut encoder = png::Encoder::new(&mut out, 2, 1);
                encoder.set_color(color);
                encoder.set_depth(png::BitDepth::Eight);
                let mut writer = encoder.write_header().unwrap();
                writer.write_image_data(pixels).unwrap();
            }
            base64::engine::general_purpose::STANDARD.encode(out)
        }
        let rgb = decode_png_base64(&encode(png::ColorType::Rgb, &[1, 2, 3, 4, 5, 6])).unwrap();
        assert_eq!(rgb.as_rgb(), &[1, 2, 3, 4, 5, 6]);
        let rgba = decode_png_base64(&encode(png::ColorType::Rgba, &[1, 2, 3, 255, 4, 5, 6, 0])).unwrap();
        assert_eq!(rgba.as_rgb(), &[1, 2, 3, 4, 5, 6]);
        let gray = decode_png_base64(&encode(png::ColorType::Grayscale, &[7, 9])).unwrap();
        assert_eq!(gray.as_rgb(), &[7, 7, 7, 9, 9, 9]);
        assert!(decode_png_base64("not base64!").is_err());
        assert!(decode_png_base64("aGVsbG8=").is_err());
    }

    #[test]
    fn errors_become_provider_errors_by_kind() {
        let url = "http://h:1".to_string();
        let connect = CuaError::Connect { url: url.clone(), reason: "refused".into() };
        assert!(ProviderError::from(connect).is_retryable());
        let auth = CuaError::Auth { url: url.clone(), detail: "Authentication failed".into() };
        assert!(matches!(ProviderError::from(auth), ProviderError::Failed(_)));
        let unsupported = button_name(MouseButton::Forward, "click").unwrap_err();
        assert!(ProviderError::from(unsupported).is_tool_error());
        assert!(matches!(server_keys(&["nosuchkey".into()]), Err(CuaError::Invalid(m)) if m.contains("nosuchkey")));
    }

    #[test]
    fn the_api_key_is_not_in_debug_output() {
        let mut config = CuaConfig::new("http://h:1");
        config.api_key = Some("sekrit-value".into());
        assert!(!format!("{config:?}").contains("sekrit"));
    }
}
