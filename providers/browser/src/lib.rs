//! The browser provider: a Chromium-family browser driven over the Chrome DevTools Protocol (CDP) as a
//! `ComputerProvider`. The screen is the page's viewport; every action lands as DevTools input events at
//! viewport pixels.
//!
//! - **Which browser**: [`BrowserConfig::executable`], else the first of `chromium`, `chromium-browser`,
//!   `google-chrome` on `PATH`, started headless (by default) with a fresh profile in a private temporary
//!   directory that is removed when the provider is dropped ([`launch`]); or an already running browser at
//!   [`BrowserConfig::cdp_url`] (`http://HOST:9222`, asked for its endpoint at `/json/version`, or the
//!   `ws://…` endpoint itself), where the task gets a browser context of its own (a fresh, cookie-less
//!   profile in memory) that the browser disposes of when the connection closes.
//! - **Client**: a small client of our own over the async-tungstenite WebSocket already in the build
//!   ([`cdp`]), with `serde_json` values for the few dozen methods and events used, rather than chromiumoxide.
//!   chromiumoxide brings ~5 MB of generated protocol types into every build (the console's test harness
//!   uses this client too, for that reason), and its handler owns the pages: it attaches, follows and waits
//!   for targets its own way, where this provider must decide exactly what happens before a new tab runs
//!   (its viewport and interceptions are set while it is paused: `Target.setAutoAttach` with
//!   `waitForDebuggerOnStart`), answer dialogs the moment they open, and tell a crashed browser
//!   (`Unavailable`) from a refused action (a tool error). The cost: parameter names are not checked by a
//!   compiler; the tests drive every method against Debian's Chromium.
//! - **Pages**: every page target of the browser (of the task's context, when attached) is attached in flat
//!   session mode, paused until its viewport (`Emulation.setDeviceMetricsOverride`: width×height at scale 1)
//!   and file-chooser interception are set. A page opened later (a link with `target=_blank`, `window.open`,
//!   a popup) becomes the page shown: the next action's result says so, with its URL. A page that closes
//!   hands the screen back to the most recent one left.
//! - **Dialogs**: `alert`, `confirm` and `beforeunload` are accepted, `prompt` is accepted with its default
//!   text, as they open; the next action's result says which dialog was answered, with its message.
//! - **File choosers** are not opened: the next action's result says the page asked for a file and that
//!   this computer has none to give.
//! - **Downloads**: a launched browser writes them to a private temporary directory (removed with it); each
//!   finished one is handed to the loop once ([`ComputerProvider::take_downloads`]), which stores it with
//!   the step; files over [`MAX_DOWNLOAD_BYTES`] are handed over by name and size only. An attached browser
//!   refuses downloads (its files would land on its own machine).
//! - **Navigation**: `navigate {url}`, `back`, `forward` and `reload` act on the page shown and wait for it to
//!   load (at most [`BrowserConfig::load_timeout`]; a page still loading then is shown as it is); their result
//!   names the page now shown. Every step records the page shown ([`ComputerProvider::page`]).
//! - **What may be opened** ([`policy`]): under a [`UrlPolicy`] (tasks submitted over the API) every request
//!   of every page, frame and worker is paused (`Fetch.requestPaused`) and goes on only when its URL passes
//!   the policy; a refused page load is told to the model.
//! - **Input**: the mouse with `Input.dispatchMouseEvent` (any of the five buttons, click counts for double
//!   and triple clicks, held buttons on motion, wheel deltas in pixels exactly as the action gives them),
//!   keys with `Input.dispatchKeyEvent` (DOM `key`, `code` of the US layout, Windows virtual key code,
//!   modifiers bit field, location, keypad; [`keys`]). Modifiers named by a pointer action are pressed as
//!   keys before it and released after it, and carried in every event's `modifiers`. Text: every character
//!   of the US layout as its key (keydown with text, keyup; Shift in the modifiers for shifted ones), `\n`
//!   (and `\r\n`) as Enter, `\t` as Tab, and every run of other characters (accents, CJK, emoji, ZWJ
//!   sequences, right-to-left text, combining marks) with `Input.insertText`, as an input method does: the
//!   page sees `beforeinput`/`input` for them, not key events.
//! - **Screenshots**: `Page.captureScreenshot` (PNG, `optimizeForSpeed`) of the shown page's viewport,
//!   decoded to RGB off the async runtime. Input calls return once the renderer has handled the event, so a
//!   screenshot taken after an action shows what its handlers did.
//! - **Between tasks** ([`BrowserProvider::reset`], what a desktop pool calls): the browser stays up and the
//!   next task gets a new browser context, prepared while the last task ran, with one page on `start_url`;
//!   the last one's context (pages, cookies, storage, cache) is disposed of and its downloads deleted, so a
//!   task starts on a pool browser in milliseconds. A kept profile is not reset.
//! - **Faults**: a browser that exits or crashes closes the DevTools socket; every call then fails as
//!   `Unavailable` (the attempt ends and the daemon may retry it on a new browser).

/// How long one screenshot may go unanswered before it is asked again, and how long a page's renderer swap may
/// keep refusing captures before the screenshot fails (see the provider's `screenshot`).
const CAPTURE_FIRST_TRY: Duration = Duration::from_secs(5);
const CAPTURE_SWAP_BOUND: Duration = Duration::from_secs(30);

pub mod cdp;
pub mod keys;
pub mod launch;
pub mod policy;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use agentd_computer::provider::{check_action, sleep_for};
use agentd_computer::{
    Action, ActionReport, ComputerProvider, Download, Frame, Key, MouseButton, PageInfo, Point, ProviderError, Size,
    interpolate,
};
use async_trait::async_trait;
use serde_json::{Value, json};

use crate::cdp::{CdpError, Connection, Event};
use crate::keys::{KeyDef, SHIFT, key_def, us_key};
pub use crate::launch::{DEFAULT_EXECUTABLES, Profile};
pub use crate::policy::UrlPolicy;

/// The largest download kept (its content stored with the step); a larger one is recorded by name and size.
pub const MAX_DOWNLOAD_BYTES: u64 = 50 << 20;

/// The viewport when none is configured.
pub const DEFAULT_SIZE: Size = Size::new(1280, 800);
/// The smallest and largest viewport accepted.
pub const MIN_SIZE: Size = Size::new(200, 150);
pub const MAX_SIZE: Size = Size::new(7680, 4320);

/// What browser to use and how.
#[derive(Debug, Clone)]
pub struct BrowserConfig {
    /// The browser binary; `None`: the first of [`DEFAULT_EXECUTABLES`] on `PATH`.
    pub executable: Option<PathBuf>,
    /// Attach to this running browser instead of starting one (`http://HOST:PORT` or `ws://…`).
    pub cdp_url: Option<String>,
    /// The viewport in CSS pixels (at scale 1: screen pixels).
    pub size: Size,
    /// Where the first page goes; `about:blank` when `None`.
    pub start_url: Option<String>,
    pub profile: Profile,
    pub headless: bool,
    /// How long a started browser may take to serve DevTools.
    pub launch_timeout: Duration,
    /// How long one DevTools call may take.
    pub command_timeout: Duration,
    /// How long a navigation (`start_url`, `navigate`, `back`, …) waits for the page to load; a page still
    /// loading after it is shown as it is.
    pub load_timeout: Duration,
    /// Which URLs the browser may load (tasks submitted over the API); `None`: any.
    pub url_policy: Option<UrlPolicy>,
}

impl Default for BrowserConfig {
    fn default() -> Self {
        Self {
            executable: None,
            cdp_url: None,
            size: DEFAULT_SIZE,
            start_url: None,
            profile: Profile::Fresh,
            headless: true,
            launch_timeout: Duration::from_secs(30),
            command_timeout: Duration::from_secs(30),
            load_timeout: Duration::from_secs(30),
            url_policy: None,
        }
    }
}

/// Why the browser could not be opened or used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrowserError {
    /// No browser binary was found.
    #[error("no browser found: {} (install Chromium, or set computer.executable)", not_found(.tried))]
    NoExecutable { tried: Vec<String> },
    /// The browser could not be started, or did not serve DevTools.
    #[error("cannot start the browser: {0}")]
    Launch(String),
    /// The running browser at `cdp_url` could not be reached or did not say where its DevTools endpoint is.
    #[error("cannot attach to the browser at {url}: {reason}")]
    Attach { url: String, reason: String },
    /// The configuration cannot work (a viewport out of bounds, a URL of the wrong kind).
    #[error("{0}")]
    Config(String),
    /// A DevTools call failed.
    #[error(transparent)]
    Cdp(#[from] CdpError),
    /// A page could not be opened.
    #[error("cannot open {url}: {reason}")]
    Navigation { url: String, reason: String },
    /// Script evaluation threw.
    #[error("the page's script failed: {0}")]
    Script(String),
    /// `back` or `forward` with no page to go to.
    #[error("the page shown has no page to go {0} to in its history")]
    NoHistory(&'static str),
    /// A screenshot could not be taken or read.
    #[error("{0}")]
    Capture(String),
}

impl From<BrowserError> for ProviderError {
    fn from(e: BrowserError) -> Self {
        match e {
            BrowserError::Cdp(CdpError::Closed(_) | CdpError::Connect { .. }) => {
                ProviderError::Unavailable(e.to_string())
            }
            BrowserError::Navigation { .. } | BrowserError::Script(_) | BrowserError::NoHistory(_) => {
                ProviderError::InvalidAction(e.to_string())
            }
            BrowserError::Cdp(CdpError::Timeout { .. }) => ProviderError::Uncertain(e.to_string()),
            BrowserError::Launch(_) | BrowserError::Attach { .. } => ProviderError::Unavailable(e.to_string()),
            e => ProviderError::Failed(e.to_string()),
        }
    }
}

fn not_found(tried: &[String]) -> String {
    match tried {
        [one] => format!("{one} is not a file on PATH or at that path"),
        all => format!("none of {} is on PATH", all.join(", ")),
    }
}

/// The page shown and where it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageState {
    pub url: String,
    pub title: String,
    /// How many pages (tabs, popups) are open.
    pub pages: usize,
}

#[derive(Debug, Clone)]
struct Page {
    target: String,
    session: String,
    url: String,
}

#[derive(Debug, Default)]
struct Pages {
    list: Vec<Page>,
    /// The session of the page shown.
    active: Option<String>,
    /// Set once the first page is there: pages attached later are new tabs and popups.
    ready: bool,
    /// What happened since the last action that the model should read with its next result.
    notes: Vec<String>,
    /// The URL the last `window.open` or `target=_blank` asked for (a new page's own URL is empty at first).
    opening: Option<String>,
}

/// The pointer and what the actions hold down.
#[derive(Debug, Default)]
struct InputState {
    pointer: Option<Point>,
    /// Buttons held (DevTools bits: left 1, right 2, middle 4, back 8, forward 16).
    buttons: u8,
    /// Keys held by `mouse_down` until its `mouse_up`.
    held: Vec<KeyDef>,
}

struct Inner {
    conn: Connection,
    size: Size,
    /// The task's own browser context (attached, or after a [`BrowserProvider::reset`]); `None`: the launched
    /// browser's default one.
    context: Mutex<Option<String>>,
    /// Where each task's first page goes (`start_url`), and how long it may take to appear.
    start_url: Option<String>,
    launch_timeout: Duration,
    /// The next task's context, made ready while this one runs (after the first reset).
    spare: Mutex<Option<Spare>>,
    /// Set by a reset that took the prepared context: the next one is prepared after the first screenshot.
    spare_wanted: std::sync::atomic::AtomicBool,
    pages: Mutex<Pages>,
    changed: tokio::sync::Notify,
    input: tokio::sync::Mutex<InputState>,
    load_timeout: Duration,
    /// Where a launched browser writes downloads (`None` when attached: downloads are refused there).
    downloads_dir: Option<PathBuf>,
    downloads: Mutex<Downloads>,
    policy: Option<UrlPolicy>,
}

/// A browser context prepared for the next task: its first page attached, set up and on the start page.
#[derive(Debug)]
struct Spare {
    context: String,
    page: Option<Page>,
    /// Set once its page has loaded the start page; a reset then takes it as it is.
    ready: bool,
}

/// Downloads begun (by id, with the name the page gave) and finished (name, file).
#[derive(Debug, Default)]
struct Downloads {
    begun: std::collections::HashMap<String, String>,
    finished: Vec<(String, PathBuf)>,
}

/// A browser computer.
pub struct BrowserProvider {
    inner: Arc<Inner>,
    events: tokio::task::JoinHandle<()>,
    /// The browser this provider started (`None` when attached); stopped when dropped.
    process: Option<launch::Process>,
    /// Whether [`BrowserProvider::reset`] clears anything: not for a kept profile, which tasks share on purpose.
    resettable: bool,
}

impl Drop for BrowserProvider {
    fn drop(&mut self) {
        self.events.abort();
        if self.process.is_none() {
            // Attached: the task's context goes (it is also disposed of when the socket closes).
            let spare = self.inner.spare.lock().ok().and_then(|mut s| s.take()).map(|s| s.context);
            for context in self.inner.context().into_iter().chain(spare) {
                self.inner.conn.send(None, "Target.disposeBrowserContext", json!({"browserContextId": context}));
            }
        }
    }
}

impl std::fmt::Debug for BrowserProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrowserProvider").field("size", &self.inner.size).finish()
    }
}

impl BrowserProvider {
    /// Starts (or attaches to) the browser, opens its first page at the viewport size and loads `start_url`.
    pub async fn open(config: BrowserConfig) -> Result<Self, BrowserError> {
        let size = config.size;
        if size.width < MIN_SIZE.width
            || size.height < MIN_SIZE.height
            || size.width > MAX_SIZE.width
            || size.height > MAX_SIZE.height
        {
            return Err(BrowserError::Config(format!(
                "a viewport of {size} is outside {MIN_SIZE} to {MAX_SIZE} pixels"
            )));
        }
        let (process, ws_url) = match &config.cdp_url {
            Some(url) => (None, devtools_endpoint(url, config.launch_timeout).await?),
            None => {
                let executable = match &config.executable {
                    Some(path) => {
                        let name = path.to_string_lossy().to_string();
                        launch::find_executable(&[name.as_str()])
                            .ok_or_else(|| BrowserError::NoExecutable { tried: vec![name.clone()] })?
                    }
                    None => {
                        launch::find_executable(&DEFAULT_EXECUTABLES).ok_or_else(|| BrowserError::NoExecutable {
                            tried: DEFAULT_EXECUTABLES.iter().map(|s| s.to_string()).collect(),
                        })?
                    }
                };
                let process = launch::launch(launch::Launch {
                    executable: &executable,
                    profile: &config.profile,
                    headless: config.headless,
                    width: size.width,
                    height: size.height,
                    timeout: config.launch_timeout,
                })
                .await?;
                let url = process.ws_url.clone();
                (Some(process), url)
            }
        };
        let (conn, events) = Connection::open(&ws_url, config.command_timeout).await?;
        let context = match &process {
            Some(_) => None,
            None => Some(create_context(&conn).await?),
        };
        let inner = Arc::new(Inner {
            conn,
            size,
            context: Mutex::new(context),
            start_url: config.start_url.clone(),
            launch_timeout: config.launch_timeout,
            spare: Mutex::new(None),
            spare_wanted: std::sync::atomic::AtomicBool::new(false),
            pages: Mutex::new(Pages::default()),
            changed: tokio::sync::Notify::new(),
            input: tokio::sync::Mutex::new(InputState::default()),
            load_timeout: config.load_timeout,
            downloads_dir: process.as_ref().and_then(launch::Process::downloads).map(std::path::Path::to_path_buf),
            downloads: Mutex::new(Downloads::default()),
            policy: config.url_policy.clone(),
        });
        let events = tokio::spawn(handle_events(Arc::downgrade(&inner), events));
        let resettable = process.is_none() || matches!(config.profile, Profile::Fresh);
        let provider = Self { inner, events, process, resettable };
        provider.start().await?;
        Ok(provider)
    }

    async fn start(&self) -> Result<(), BrowserError> {
        let inner = &self.inner;
        let conn = &inner.conn;
        conn.call(None, "Target.setDiscoverTargets", json!({"discover": true})).await?;
        // Pages; and, under a URL policy, the workers whose requests leave the browser on their own.
        let mut filter = vec![json!({"type": "page", "exclude": false})];
        if inner.policy.is_some() {
            filter.push(json!({"type": "service_worker", "exclude": false}));
            filter.push(json!({"type": "shared_worker", "exclude": false}));
        }
        conn.call(
            None,
            "Target.setAutoAttach",
            json!({"autoAttach": true, "waitForDebuggerOnStart": true, "flatten": true, "filter": filter}),
        )
        .await?;
        self.first_page().await
    }

    /// Sets the context's downloads, opens its first page (unless it is the launched browser's default context,
    /// whose page is there already), waits for it to be attached and goes to `start_url`.
    async fn first_page(&self) -> Result<(), BrowserError> {
        let inner = &self.inner;
        let conn = &inner.conn;
        let context = inner.context();
        inner.set_downloads(context.as_deref()).await?;
        if let Some(context) = &context {
            conn.call(None, "Target.createTarget", json!({"url": "about:blank", "browserContextId": context})).await?;
        }
        // The first page: the launched browser's own, or the one just made in the task's context.
        let first = async {
            loop {
                let notified = inner.changed.notified();
                if inner.pages.lock().map(|p| p.active.is_some()).unwrap_or(false) {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(inner.launch_timeout, first).await.map_err(|_| {
            BrowserError::Launch(format!("the browser showed no page within {:?}", inner.launch_timeout))
        })?;
        if let Ok(mut pages) = inner.pages.lock() {
            pages.ready = true;
        }
        if let Some(url) = &inner.start_url {
            self.navigate(url).await?;
        }
        Ok(())
    }

    /// Starts the next task afresh in the same browser: a new browser context (no cookies, storage, cache,
    /// history or service workers of the one before) with one page at the viewport size on `start_url`; the
    /// previous context and its pages are disposed of, with its downloads. The context is prepared ahead:
    /// each reset takes the one made ready while the last task ran (a swap of a few milliseconds) and starts
    /// preparing the next once the task's first screenshot is taken (a renderer starting beside that capture
    /// would slow it several times over); only the first reset of a browser, or one that comes before the
    /// spare is ready, waits for a context to be made (a new renderer and a page load: a few hundred
    /// milliseconds on two cores). A browser with a kept profile (`Profile::Dir`) is left as it is (`false`):
    /// its tasks share it on purpose.
    pub async fn reset(&self) -> Result<bool, BrowserError> {
        if !self.resettable {
            return Ok(false);
        }
        let inner = &self.inner;
        // No action runs while the context changes under it.
        let mut input = inner.input.lock().await;
        let spare = inner.take_spare().await;
        let old = match &spare {
            Some(spare) => inner.context.lock().map_err(|_| poisoned())?.replace(spare.context.clone()),
            None => {
                let fresh = create_context(&inner.conn).await?;
                inner.context.lock().map_err(|_| poisoned())?.replace(fresh)
            }
        };
        // What the last task left: its pages (their detach events find nothing to hand the screen to), its
        // notes, pointer, held keys and buttons, and downloads.
        let left = {
            let mut pages = inner.pages.lock().map_err(|_| poisoned())?;
            let mut fresh = Pages::default();
            if let Some(page) = spare.and_then(|s| s.page) {
                fresh.active = Some(page.session.clone());
                fresh.list.push(page);
                fresh.ready = true;
            }
            std::mem::replace(&mut *pages, fresh).list
        };
        *input = InputState::default();
        let finished = std::mem::take(&mut *inner.downloads.lock().map_err(|_| poisoned())?).finished;
        for (_, file) in finished {
            let _ = std::fs::remove_file(file);
        }
        let swapped = inner.active().ok();
        match swapped {
            // The next context is prepared once this task has its first screenshot: a new renderer starting
            // beside that capture would slow it several times over on two cores.
            Some(session) => {
                inner.conn.send(Some(&session), "Page.bringToFront", json!({}));
                inner.spare_wanted.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            // Nothing was prepared (a browser's first reset, when the pool starts): prepare the next now.
            None => {
                self.first_page().await?;
                tokio::spawn(Inner::prepare_spare(self.inner.clone()));
            }
        }
        drop(input);
        match old {
            Some(old) => {
                inner.conn.call(None, "Target.disposeBrowserContext", json!({"browserContextId": old})).await?;
            }
            // The launched browser's default context cannot be disposed of: its pages are closed (the new
            // context's page is open first, so the browser always has one).
            None => {
                for page in left {
                    inner.conn.call(None, "Target.closeTarget", json!({"targetId": page.target})).await?;
                }
            }
        }
        Ok(true)
    }

    /// Whether the next [`BrowserProvider::reset`] takes a context prepared ahead (a swap), rather than
    /// waiting for one to be made.
    pub fn prepared(&self) -> bool {
        self.inner.spare.lock().is_ok_and(|s| s.as_ref().is_some_and(|s| s.ready))
    }

    /// The page shown: its URL and title, and how many pages are open.
    pub async fn page_state(&self) -> Result<PageState, BrowserError> {
        self.inner.page_state().await
    }

    /// Opens `url` in the page shown and waits (at most the load timeout) for it to load.
    pub async fn navigate(&self, url: &str) -> Result<(), BrowserError> {
        self.inner.navigate(url).await
    }

    /// Goes `delta` entries through the shown page's history (-1 back, 1 forward); `false` when there is no
    /// such entry.
    pub async fn history(&self, delta: i64) -> Result<bool, BrowserError> {
        self.inner.history(delta).await
    }

    /// Reloads the page shown.
    pub async fn reload(&self) -> Result<(), BrowserError> {
        self.inner.reload().await
    }

    /// The value of a JavaScript expression in the page shown (awaited when it is a promise), as JSON.
    pub async fn evaluate(&self, expression: &str) -> Result<Value, BrowserError> {
        let session = self.inner.active()?;
        self.inner.evaluate(&session, expression, self.inner.conn.timeout).await
    }

    /// The fresh profile of a launched browser, removed when the provider is dropped.
    pub fn profile_dir(&self) -> Option<&std::path::Path> {
        self.process.as_ref().and_then(launch::Process::fresh_profile)
    }

    /// The launched browser's process id.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().and_then(launch::Process::pid)
    }

    /// Where downloads of a launched browser are written.
    pub fn downloads_dir(&self) -> Option<&std::path::Path> {
        self.process.as_ref().and_then(launch::Process::downloads)
    }

    /// Takes what happened since the last call (new tabs, dialogs, refused file choosers), as sentences.
    pub fn take_notes(&self) -> Vec<String> {
        self.inner.pages.lock().map(|mut p| std::mem::take(&mut p.notes)).unwrap_or_default()
    }
}

fn poisoned() -> BrowserError {
    BrowserError::Cdp(CdpError::Closed("the page table is poisoned".into()))
}

/// A new browser context (a fresh, cookie-less profile in memory), disposed of by the browser when the
/// DevTools connection closes; its id.
async fn create_context(conn: &Connection) -> Result<String, BrowserError> {
    let created = conn.call(None, "Target.createBrowserContext", json!({"disposeOnDetach": true})).await?;
    Ok(str_field(&created, "browserContextId").to_string())
}

fn str_field<'a>(value: &'a Value, field: &str) -> &'a str {
    value.get(field).and_then(Value::as_str).unwrap_or_default()
}

/// The DevTools WebSocket of a running browser: `ws://…` as given, or asked of `http://HOST:PORT` at
/// `/json/version` (its `webSocketDebuggerUrl`).
async fn devtools_endpoint(url: &str, timeout: Duration) -> Result<String, BrowserError> {
    if url.starts_with("ws://") {
        return Ok(url.to_string());
    }
    let attach_error = |reason: String| BrowserError::Attach { url: url.to_string(), reason };
    let Some(rest) = url.strip_prefix("http://") else {
        return Err(BrowserError::Config(format!(
            "cdp_url {url:?} must be http://HOST:PORT or a ws:// DevTools endpoint"
        )));
    };
    let authority = rest.split('/').next().unwrap_or_default().to_string();
    let (host, port) = cdp::ws_endpoint(&format!("ws://{authority}/")).map_err(attach_error)?;
    let exchange = async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect((host.as_str(), port)).await.map_err(|e| e.to_string())?;
        let request = format!("GET /json/version HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        stream.take(1 << 20).read_to_end(&mut answer).await.map_err(|e| e.to_string())?;
        Ok::<_, String>(answer)
    };
    let answer = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| attach_error(format!("no answer within {timeout:?}")))?
        .map_err(attach_error)?;
    let text = String::from_utf8_lossy(&answer);
    let body = text.split_once("\r\n\r\n").map(|(_, body)| body).unwrap_or_default();
    let version: Value =
        serde_json::from_str(body.trim()).map_err(|_| attach_error("/json/version did not answer with JSON".into()))?;
    version
        .get("webSocketDebuggerUrl")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| attach_error("/json/version has no webSocketDebuggerUrl".into()))
}

impl Inner {
    /// The spare context, once its page is on the start page (waiting, at most the launch timeout, for one
    /// being prepared); `None` when there is none or it failed.
    async fn take_spare(&self) -> Option<Spare> {
        let deadline = tokio::time::Instant::now() + self.launch_timeout;
        loop {
            let notified = self.changed.notified();
            {
                let mut spare = self.spare.lock().ok()?;
                match spare.as_ref() {
                    None => return None,
                    Some(s) if s.ready => return spare.take(),
                    Some(_) => {}
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let stale = self.spare.lock().ok()?.take()?;
                self.conn.send(None, "Target.disposeBrowserContext", json!({"browserContextId": stale.context}));
                return None;
            }
        }
    }

    /// Makes the next task's context ready: a new browser context, its downloads set, one page attached and
    /// set up, on the start page. A failure leaves no spare (the next reset makes its context itself).
    async fn prepare_spare(self: Arc<Self>) {
        let prepared = async {
            let context = create_context(&self.conn).await?;
            if let Ok(mut spare) = self.spare.lock() {
                *spare = Some(Spare { context: context.clone(), page: None, ready: false });
            }
            self.set_downloads(Some(&context)).await?;
            self.conn
                .call(None, "Target.createTarget", json!({"url": "about:blank", "browserContextId": context}))
                .await?;
            let attached = async {
                loop {
                    let notified = self.changed.notified();
                    let session =
                        self.spare.lock().ok().and_then(|s| s.as_ref()?.page.as_ref().map(|p| p.session.clone()));
                    if let Some(session) = session {
                        return session;
                    }
                    notified.await;
                }
            };
            let session = tokio::time::timeout(self.launch_timeout, attached)
                .await
                .map_err(|_| BrowserError::Launch("the spare context showed no page".into()))?;
            if let Some(url) = &self.start_url {
                self.load(&session, url, false).await?;
            }
            Ok::<_, BrowserError>(())
        };
        let outcome = prepared.await;
        if let Ok(mut spare) = self.spare.lock() {
            match outcome {
                Ok(()) => {
                    if let Some(spare) = spare.as_mut() {
                        spare.ready = true;
                    }
                }
                Err(e) => {
                    tracing::debug!("browser: preparing the next task's context: {e}");
                    if let Some(failed) = spare.take() {
                        self.conn.send(
                            None,
                            "Target.disposeBrowserContext",
                            json!({"browserContextId": failed.context}),
                        );
                    }
                }
            }
        }
        self.changed.notify_waiters();
    }

    /// A page of the spare context is set up and kept for the next task; `false` for any other page.
    async fn adopt_spare_page(&self, session: &str, info: &Value, waiting: bool) -> bool {
        let ours = self.spare.lock().ok().is_some_and(|s| {
            s.as_ref().is_some_and(|s| s.context == str_field(info, "browserContextId") && s.page.is_none())
        });
        if !ours {
            return false;
        }
        if let Err(e) = self.set_up_page(session, waiting).await {
            tracing::debug!("browser: setting up the spare page: {e}");
        }
        let page = Page {
            target: str_field(info, "targetId").to_string(),
            session: session.to_string(),
            url: str_field(info, "url").to_string(),
        };
        if let Ok(mut spare) = self.spare.lock()
            && let Some(spare) = spare.as_mut()
        {
            spare.page = Some(page);
        }
        self.changed.notify_waiters();
        true
    }

    /// Downloads of `context` (`None`: the default one): into the launched browser's directory, else refused.
    async fn set_downloads(&self, context: Option<&str>) -> Result<(), BrowserError> {
        let mut downloads = json!({"behavior": "deny"});
        if let Some(dir) = &self.downloads_dir {
            downloads =
                json!({"behavior": "allowAndName", "downloadPath": dir.display().to_string(), "eventsEnabled": true});
        }
        if let Some(context) = context {
            downloads["browserContextId"] = json!(context);
        }
        self.conn.call(None, "Browser.setDownloadBehavior", downloads).await?;
        Ok(())
    }

    /// The task's browser context (`None`: the launched browser's default one).
    fn context(&self) -> Option<String> {
        self.context.lock().ok().and_then(|c| c.clone())
    }

    async fn page_state(&self) -> Result<PageState, BrowserError> {
        let (target, count) = {
            let pages = self.pages.lock().map_err(|_| poisoned())?;
            let active = pages.active.as_ref().and_then(|s| pages.list.iter().find(|p| &p.session == s));
            (active.map(|p| p.target.clone()), pages.list.len())
        };
        let Some(target) = target else {
            return Err(BrowserError::Cdp(CdpError::Closed("no page is open".into())));
        };
        let info = self.conn.call(None, "Target.getTargetInfo", json!({"targetId": target})).await?;
        let info = &info["targetInfo"];
        Ok(PageState {
            url: str_field(info, "url").to_string(),
            title: str_field(info, "title").to_string(),
            pages: count,
        })
    }

    async fn navigate(&self, url: &str) -> Result<(), BrowserError> {
        let session = self.active()?;
        self.load(&session, url, true).await
    }

    /// Opens `url` in the page of `session` and waits for it to load; `note`: a page still loading at the
    /// load timeout is told to the model (not for a spare context's page, which no task shows yet).
    async fn load(&self, session: &str, url: &str, note: bool) -> Result<(), BrowserError> {
        if let Some(policy) = &self.policy {
            policy.check(url).await.map_err(|reason| BrowserError::Navigation { url: url.to_string(), reason })?;
        }
        let before = self.time_origin(session).await;
        let answer = self.conn.call(Some(session), "Page.navigate", json!({"url": url})).await?;
        if let Some(error) = answer.get("errorText").and_then(Value::as_str).filter(|e| !e.is_empty()) {
            return Err(BrowserError::Navigation { url: url.to_string(), reason: error.to_string() });
        }
        // A new document has a loader of its own; a move within the document (a fragment) keeps it.
        let left = if answer.get("loaderId").is_some() { before } else { None };
        if note {
            self.loaded_or_noted(session, left).await;
        } else {
            self.wait_loaded(session, left).await;
        }
        Ok(())
    }

    async fn history(&self, delta: i64) -> Result<bool, BrowserError> {
        let session = self.active()?;
        let history = self.conn.call(Some(&session), "Page.getNavigationHistory", json!({})).await?;
        let current = history["currentIndex"].as_i64().unwrap_or(0);
        let target = current + delta;
        let entry = history["entries"].as_array().and_then(|e| usize::try_from(target).ok().and_then(|i| e.get(i)));
        let Some(entry) = entry else {
            return Ok(false);
        };
        let id = entry["id"].as_i64().unwrap_or(0);
        self.conn.call(Some(&session), "Page.navigateToHistoryEntry", json!({"entryId": id})).await?;
        // The history's index moves when the entry's document commits.
        let deadline = tokio::time::Instant::now() + self.load_timeout;
        while tokio::time::Instant::now() < deadline {
            let now = self.conn.call(Some(&session), "Page.getNavigationHistory", json!({})).await?;
            if now["currentIndex"].as_i64() == Some(target) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.loaded_or_noted(&session, None).await;
        Ok(true)
    }

    async fn reload(&self) -> Result<(), BrowserError> {
        let session = self.active()?;
        let before = self.time_origin(&session).await;
        self.conn.call(Some(&session), "Page.reload", json!({})).await?;
        self.loaded_or_noted(&session, before).await;
        Ok(())
    }

    /// [`Inner::wait_loaded`], telling the model when the page had not finished loading.
    async fn loaded_or_noted(&self, session: &str, left: Option<f64>) {
        if !self.wait_loaded(session, left).await {
            self.note("the page had not finished loading when this screenshot was taken".into());
        }
    }

    /// When the document of `session` began (`performance.timeOrigin`): a new document has another.
    async fn time_origin(&self, session: &str) -> Option<f64> {
        self.evaluate(session, "performance.timeOrigin", Duration::from_secs(2)).await.ok()?.as_f64()
    }

    fn active(&self) -> Result<String, BrowserError> {
        let pages = self.pages.lock().map_err(|_| poisoned())?;
        pages.active.clone().ok_or_else(|| BrowserError::Cdp(CdpError::Closed("no page is open".into())))
    }

    fn note(&self, note: String) {
        tracing::debug!("browser: {note}");
        if let Ok(mut pages) = self.pages.lock() {
            pages.notes.push(note);
        }
    }

    async fn evaluate(&self, session: &str, expression: &str, timeout: Duration) -> Result<Value, BrowserError> {
        let answer = self
            .conn
            .call_within(
                Some(session),
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
                timeout,
            )
            .await?;
        if let Some(details) = answer.get("exceptionDetails") {
            let text = details["exception"]["description"].as_str().or_else(|| details["text"].as_str());
            return Err(BrowserError::Script(text.unwrap_or("an exception").to_string()));
        }
        Ok(answer["result"].get("value").cloned().unwrap_or(Value::Null))
    }

    /// Waits until the page of `session` has loaded (`document.readyState` is `complete`) — a document other
    /// than the one that began at `left`, when given — at most the load timeout. A page still loading then,
    /// or one whose script does not answer (a dialog open, a busy loop), is left as it is: the screenshot
    /// shows it.
    /// Waits (at most the load timeout) for the page of `session` to finish loading a document other than
    /// the one whose time origin was `left`; `false` when it had not by then.
    async fn wait_loaded(&self, session: &str, left: Option<f64>) -> bool {
        let deadline = tokio::time::Instant::now() + self.load_timeout;
        while tokio::time::Instant::now() < deadline {
            let state =
                self.evaluate(session, "[performance.timeOrigin, document.readyState]", Duration::from_secs(2)).await;
            match state {
                Ok(state) if state[1] == "complete" && (left.is_none() || state[0].as_f64() != left) => return true,
                Err(BrowserError::Cdp(CdpError::Closed(_))) => return true,
                _ => tokio::time::sleep(Duration::from_millis(25)).await,
            }
        }
        false
    }

    /// Sets a newly attached page up before it runs: events, viewport, file chooser interception, focus, and
    /// under a URL policy the interception of its requests and of the frames and workers it starts. A target
    /// paused until then (`waiting`) answers only once it runs: the calls are queued first, then it is let
    /// go, then their answers are awaited (a session takes its messages in order).
    async fn set_up_page(&self, session: &str, waiting: bool) -> Result<(), CdpError> {
        let s = Some(session);
        let metrics =
            json!({"width": self.size.width, "height": self.size.height, "deviceScaleFactor": 1, "mobile": false});
        let mut calls = vec![
            self.conn.begin(s, "Page.enable", json!({})),
            self.conn.begin(s, "Emulation.setDeviceMetricsOverride", metrics),
            self.conn.begin(s, "Page.setInterceptFileChooserDialog", json!({"enabled": true})),
            // Every page behaves as the focused one (keys reach it, `document.hasFocus()`), whichever is shown.
            self.conn.begin(s, "Emulation.setFocusEmulationEnabled", json!({"enabled": true})),
        ];
        calls.extend(self.intercept(session));
        self.finish_set_up(session, waiting, calls).await
    }

    /// Under a URL policy: every request of the target of `session` is paused for the policy, and the
    /// frames of other sites and workers it starts are attached (paused until they are set up the same way).
    /// Returns the calls queued.
    fn intercept(&self, session: &str) -> Vec<cdp::Call> {
        if self.policy.is_none() {
            return Vec::new();
        }
        let s = Some(session);
        vec![
            self.conn.begin(s, "Fetch.enable", json!({"patterns": [{"urlPattern": "*", "requestStage": "Request"}]})),
            self.conn.begin(
                s,
                "Target.setAutoAttach",
                json!({"autoAttach": true, "waitForDebuggerOnStart": true, "flatten": true}),
            ),
        ]
    }

    /// Lets a paused target run once its set-up calls are queued, then waits for their answers.
    async fn finish_set_up(&self, session: &str, waiting: bool, calls: Vec<cdp::Call>) -> Result<(), CdpError> {
        if waiting {
            self.conn.send(Some(session), "Runtime.runIfWaitingForDebugger", json!({}));
        }
        let mut first_error = None;
        for call in calls {
            if let Err(e) = self.conn.finish(call, self.conn.timeout).await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// A paused request: let it go on when the policy allows its URL, else fail it (and tell the model when it
    /// was a page being opened).
    async fn judge_request(&self, session: String, params: Value) {
        let Some(policy) = &self.policy else { return };
        let id = str_field(&params, "requestId").to_string();
        let url = str_field(&params["request"], "url").to_string();
        match policy.check(&url).await {
            Ok(()) => self.conn.send(Some(&session), "Fetch.continueRequest", json!({"requestId": id})),
            Err(why) => {
                tracing::info!(%url, reason = %why, "browser: a request refused by the URL policy");
                self.conn.send(
                    Some(&session),
                    "Fetch.failRequest",
                    json!({"requestId": id, "errorReason": "BlockedByClient"}),
                );
                if str_field(&params, "resourceType") == "Document" {
                    self.note(format!("the browser was refused {url}: {why}"));
                }
            }
        }
    }

    async fn on_event(self: &Arc<Self>, event: Event) {
        let params = &event.params;
        tracing::trace!(method = %event.method, session = ?event.session, %params, "browser: DevTools event");
        match event.method.as_str() {
            "Fetch.requestPaused" => {
                let Some(session) = event.session.clone() else { return };
                // Judged beside the other events: a slow name lookup holds up no dialog.
                let (inner, params) = (self.clone(), event.params.clone());
                tokio::spawn(async move { inner.judge_request(session, params).await });
            }
            "Target.attachedToTarget" => {
                let session = str_field(params, "sessionId").to_string();
                let info = &params["targetInfo"];
                let waiting = params["waitingForDebugger"].as_bool().unwrap_or(false);
                let context_id = str_field(info, "browserContextId");
                if str_field(info, "type") == "page" && self.adopt_spare_page(&session, info, waiting).await {
                    return;
                }
                let in_context = match self.context() {
                    Some(context) => context_id == context,
                    None => true,
                };
                if str_field(info, "type") != "page" && self.policy.is_some() && in_context {
                    // A frame of another site or a worker, under a URL policy: its requests are judged too.
                    let calls = self.intercept(&session);
                    if let Err(e) = self.finish_set_up(&session, waiting, calls).await {
                        tracing::debug!("browser: intercepting a {} target: {e}", str_field(info, "type"));
                    }
                    return;
                }
                let ours = str_field(info, "type") == "page" && in_context;
                if !ours {
                    if waiting {
                        self.conn.send(Some(&session), "Runtime.runIfWaitingForDebugger", json!({}));
                    }
                    self.conn.send(None, "Target.detachFromTarget", json!({"sessionId": session}));
                    return;
                }
                if let Err(e) = self.set_up_page(&session, waiting).await {
                    tracing::debug!("browser: setting up a new page: {e}");
                }
                let page = Page {
                    target: str_field(info, "targetId").to_string(),
                    session: session.clone(),
                    url: str_field(info, "url").to_string(),
                };
                if let Ok(mut pages) = self.pages.lock() {
                    if pages.ready {
                        let from = if info.get("openerId").is_some() { "the page opened" } else { "a new page opened" };
                        let opening = pages.opening.take();
                        let url = match (page.url.as_str(), opening) {
                            ("" | "about:blank", Some(asked)) => asked,
                            ("", None) => "about:blank".to_string(),
                            (url, _) => url.to_string(),
                        };
                        pages.notes.push(format!("{from} a new tab ({url}); it is now the page shown"));
                        self.conn.send(Some(&session), "Page.bringToFront", json!({}));
                        pages.active = Some(session);
                    } else if pages.active.is_none() {
                        pages.active = Some(session);
                    }
                    pages.list.push(page);
                }
                self.changed.notify_waiters();
            }
            "Target.detachedFromTarget" => {
                let session = str_field(params, "sessionId");
                if let Ok(mut pages) = self.pages.lock() {
                    let before = pages.list.len();
                    pages.list.retain(|p| p.session != session);
                    if pages.list.len() != before && pages.active.as_deref() == Some(session) {
                        pages.active = pages.list.last().map(|p| p.session.clone());
                        if let Some(shown) = &pages.active {
                            self.conn.send(Some(shown), "Page.bringToFront", json!({}));
                        }
                        let note = match pages.list.last() {
                            Some(p) => format!("the tab shown closed; now showing the tab at {}", p.url),
                            None => {
                                // A browser computer always shows a page: a new blank one.
                                let mut blank = json!({"url": "about:blank"});
                                if let Some(context) = self.context() {
                                    blank["browserContextId"] = json!(context);
                                }
                                self.conn.send(None, "Target.createTarget", blank);
                                "the last tab closed; a new blank tab is shown".to_string()
                            }
                        };
                        pages.notes.push(note);
                    }
                }
                self.changed.notify_waiters();
            }
            "Target.targetInfoChanged" => {
                let info = &params["targetInfo"];
                let target = str_field(info, "targetId");
                if let Ok(mut pages) = self.pages.lock()
                    && let Some(page) = pages.list.iter_mut().find(|p| p.target == target)
                {
                    page.url = str_field(info, "url").to_string();
                }
            }
            "Target.targetCrashed" => {
                let target = str_field(params, "targetId");
                let shown = self.pages.lock().ok().and_then(|p| {
                    p.active
                        .as_ref()
                        .and_then(|s| p.list.iter().find(|page| &page.session == s))
                        .map(|page| page.target == target)
                });
                if shown == Some(true) {
                    self.note(
                        "the page shown crashed (its renderer process died); reload it or open another page".into(),
                    );
                }
            }
            "Page.javascriptDialogOpening" => {
                let Some(session) = event.session.as_deref() else { return };
                let kind = str_field(params, "type");
                let message = str_field(params, "message");
                let mut answer = json!({"accept": true});
                let mut note = format!("the page showed a {kind} dialog ({message:?}); it was accepted");
                if kind == "prompt" {
                    let default = str_field(params, "defaultPrompt");
                    answer["promptText"] = json!(default);
                    note = format!("the page showed a prompt dialog ({message:?}); it was answered with {default:?}");
                }
                // Noted first: the action that opened the dialog returns as soon as it is answered.
                self.note(note);
                if let Err(e) = self.conn.call(Some(session), "Page.handleJavaScriptDialog", answer).await {
                    tracing::debug!("browser: answering a dialog: {e}");
                }
            }
            "Page.windowOpen" => {
                if let Ok(mut pages) = self.pages.lock() {
                    pages.opening = Some(str_field(params, "url").to_string());
                }
            }
            "Page.fileChooserOpened" => {
                let mode = if str_field(params, "mode") == "selectMultiple" { "files" } else { "a file" };
                self.note(format!(
                    "the page asked for {mode} to upload; this computer has no files to give, and no file chooser \
                     was opened"
                ));
            }
            "Browser.downloadWillBegin" => {
                let name = str_field(params, "suggestedFilename").to_string();
                if let Ok(mut downloads) = self.downloads.lock() {
                    downloads.begun.insert(str_field(params, "guid").to_string(), name);
                }
            }
            "Browser.downloadProgress" => {
                let guid = str_field(params, "guid");
                let state = str_field(params, "state");
                if state != "completed" && state != "canceled" {
                    return;
                }
                let Some(name) = self.downloads.lock().ok().and_then(|mut d| d.begun.remove(guid)) else { return };
                if state == "canceled" {
                    self.note(format!("the download {name:?} was cancelled"));
                    return;
                }
                let bytes = params["totalBytes"].as_f64().unwrap_or(0.0) as u64;
                // Noted first: whoever sees the file finished sees the note too.
                self.note(format!("the download {name:?} finished ({bytes} bytes); it is stored with this step"));
                if let Some(dir) = &self.downloads_dir
                    && let Ok(mut downloads) = self.downloads.lock()
                {
                    downloads.finished.push((name, dir.join(guid)));
                }
            }
            _ => {}
        }
    }
}

async fn handle_events(inner: Weak<Inner>, mut events: tokio::sync::mpsc::UnboundedReceiver<Event>) {
    while let Some(event) = events.recv().await {
        let Some(inner) = inner.upgrade() else { return };
        inner.on_event(event).await;
        drop(inner);
    }
}

/// DevTools' name and bit of a mouse button.
fn button(b: MouseButton) -> (&'static str, u8) {
    match b {
        MouseButton::Left => ("left", 1),
        MouseButton::Right => ("right", 2),
        MouseButton::Middle => ("middle", 4),
        MouseButton::Back => ("back", 8),
        MouseButton::Forward => ("forward", 16),
    }
}

fn modifiers_of(keys: &[KeyDef]) -> u8 {
    keys.iter().fold(0, |m, k| m | k.modifier)
}

/// The key definitions of an action's keys, as a keyboard sends them (Shift shifts the others).
fn key_defs(names: &[String]) -> Result<Vec<KeyDef>, ProviderError> {
    let keys: Vec<Key> = names
        .iter()
        .map(|n| Key::parse(n).map_err(|e| ProviderError::InvalidAction(e.to_string())))
        .collect::<Result<_, _>>()?;
    Ok(agentd_computer::keys::chord_keys(&keys).into_iter().map(key_def).collect())
}

impl Inner {
    /// One mouse event: `kind` at `at`, for `pressed` (the button pressed or released, with the click
    /// count), with `buttons` down after it and `modifiers` held.
    async fn mouse(
        &self,
        session: &str,
        kind: &str,
        at: Point,
        pressed: Option<(MouseButton, u32)>,
        buttons: u8,
        modifiers: u8,
    ) -> Result<(), BrowserError> {
        let mut params = json!({"type": kind, "x": at.x, "y": at.y, "modifiers": modifiers, "buttons": buttons,
                                "pointerType": "mouse"});
        if let Some((b, clicks)) = pressed {
            params["button"] = json!(button(b).0);
            params["clickCount"] = json!(clicks);
        }
        self.conn.call(Some(session), "Input.dispatchMouseEvent", params).await?;
        Ok(())
    }

    async fn wheel(&self, session: &str, at: Point, dx: i32, dy: i32, modifiers: u8) -> Result<(), BrowserError> {
        let params = json!({"type": "mouseWheel", "x": at.x, "y": at.y, "deltaX": dx, "deltaY": dy,
                            "modifiers": modifiers, "pointerType": "mouse"});
        self.conn.call(Some(session), "Input.dispatchMouseEvent", params).await?;
        Ok(())
    }

    /// A key goes down; `modifiers` are those held with it (its own bit included). It types its text only
    /// when no modifier but Shift is held.
    async fn key_down(&self, session: &str, key: &KeyDef, modifiers: u8) -> Result<(), BrowserError> {
        let text = key.text.as_deref().filter(|_| modifiers & !SHIFT == 0);
        let mut params = json!({
            "type": if text.is_some() { "keyDown" } else { "rawKeyDown" },
            "modifiers": modifiers,
            "key": key.key,
            "code": key.code,
            "windowsVirtualKeyCode": key.vk,
            "nativeVirtualKeyCode": key.vk,
            "location": key.cdp_location(),
            "isKeypad": key.is_keypad(),
        });
        if let Some(text) = text {
            params["text"] = json!(text);
            params["unmodifiedText"] = json!(text);
        }
        self.conn.call(Some(session), "Input.dispatchKeyEvent", params).await?;
        Ok(())
    }

    async fn key_up(&self, session: &str, key: &KeyDef, modifiers: u8) -> Result<(), BrowserError> {
        let params = json!({
            "type": "keyUp",
            "modifiers": modifiers,
            "key": key.key,
            "code": key.code,
            "windowsVirtualKeyCode": key.vk,
            "nativeVirtualKeyCode": key.vk,
            "location": key.cdp_location(),
            "isKeypad": key.is_keypad(),
        });
        self.conn.call(Some(session), "Input.dispatchKeyEvent", params).await?;
        Ok(())
    }

    /// Presses `keys` in order on top of `base` modifiers; returns the modifiers then held.
    async fn press_all(&self, session: &str, keys: &[KeyDef], base: u8) -> Result<u8, BrowserError> {
        let mut modifiers = base;
        for key in keys {
            modifiers |= key.modifier;
            self.key_down(session, key, modifiers).await?;
        }
        Ok(modifiers)
    }

    /// Releases `keys` in reverse order, down to `base` modifiers.
    async fn release_all(&self, session: &str, keys: &[KeyDef], base: u8) -> Result<(), BrowserError> {
        for (i, key) in keys.iter().enumerate().rev() {
            let still = base | modifiers_of(&keys[..i]);
            self.key_up(session, key, still).await?;
        }
        Ok(())
    }

    /// One character of the US layout as its key.
    async fn type_char(&self, session: &str, c: char, base: u8) -> Result<(), BrowserError> {
        let (code, shift, vk) = us_key(c).unwrap_or(("", false, 0));
        let key = KeyDef { key: c.to_string(), code, vk, text: Some(c.to_string()), ..key_def(Key::from_char(c)) };
        let modifiers = base | if shift { SHIFT } else { 0 };
        self.key_down(session, &key, modifiers).await?;
        self.key_up(session, &key, modifiers).await
    }

    async fn insert_text(&self, session: &str, text: &str) -> Result<(), BrowserError> {
        if !text.is_empty() {
            self.conn.call(Some(session), "Input.insertText", json!({"text": text})).await?;
        }
        Ok(())
    }

    async fn type_text(&self, session: &str, text: &str, base: u8) -> Result<(), BrowserError> {
        let enter = key_def(agentd_computer::keys::RETURN);
        let tab = key_def(agentd_computer::keys::TAB);
        let mut run = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\r' | '\n' => {
                    if c == '\r' && chars.peek() == Some(&'\n') {
                        chars.next();
                    }
                    self.insert_text(session, &std::mem::take(&mut run)).await?;
                    self.key_down(session, &enter, base).await?;
                    self.key_up(session, &enter, base).await?;
                }
                '\t' => {
                    self.insert_text(session, &std::mem::take(&mut run)).await?;
                    self.key_down(session, &tab, base).await?;
                    self.key_up(session, &tab, base).await?;
                }
                c if us_key(c).is_some() => {
                    self.insert_text(session, &std::mem::take(&mut run)).await?;
                    self.type_char(session, c, base).await?;
                }
                c => run.push(c),
            }
        }
        self.insert_text(session, &run).await
    }

    async fn screenshot(&self) -> Result<Frame, BrowserError> {
        let params = json!({"format": "png", "optimizeForSpeed": true});
        // While the page swaps renderers (a refused or failed navigation commits Chromium's error page in another
        // process) a capture can go unanswered, or be refused as "Not attached to an active page" or, taken from
        // a surface of its own (`launch::FLAGS`), as "Unable to capture screenshot" while the new renderer has no
        // frame yet: it is asked again until the swap is over, within a bound no healthy capture comes near
        // (they take tens of ms).
        let deadline = tokio::time::Instant::now() + CAPTURE_SWAP_BOUND;
        let answer = loop {
            let session = self.active()?;
            let result = self
                .conn
                .call_within(Some(&session), "Page.captureScreenshot", params.clone(), CAPTURE_FIRST_TRY)
                .await;
            let swapping = match &result {
                Err(CdpError::Timeout { .. }) => true,
                Err(CdpError::Protocol { message, .. }) => {
                    message.contains("Not attached to an active page")
                        || message.contains("Unable to capture screenshot")
                }
                _ => false,
            };
            if !swapping || tokio::time::Instant::now() >= deadline {
                break result?;
            }
            tracing::debug!("a screenshot came during a page's renderer swap; asking again");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let data = answer.get("data").and_then(Value::as_str).unwrap_or_default().to_string();
        let size = self.size;
        tokio::task::spawn_blocking(move || decode_png(&data, size))
            .await
            .map_err(|e| BrowserError::Capture(format!("decoding the screenshot: {e}")))?
    }

    async fn perform(&self, action: &Action) -> Result<ActionReport, BrowserError> {
        let session = self.active()?;
        let s = session.as_str();
        let mut input = self.input.lock().await;
        let held = modifiers_of(&input.held);
        let mut report = ActionReport::default();
        match action {
            Action::Click { x, y, button: b, keys } => {
                let keys = key_defs(keys).map_err(|e| BrowserError::Config(e.to_string()))?;
                let at = Point::new(*x, *y);
                let modifiers = self.press_all(s, &keys, held).await?;
                self.mouse(s, "mouseMoved", at, None, input.buttons, modifiers).await?;
                let bit = button(*b).1;
                self.mouse(s, "mousePressed", at, Some((*b, 1)), input.buttons | bit, modifiers).await?;
                self.mouse(s, "mouseReleased", at, Some((*b, 1)), input.buttons, modifiers).await?;
                self.release_all(s, &keys, held).await?;
                input.pointer = Some(at);
            }
            Action::DoubleClick { x, y } | Action::TripleClick { x, y } => {
                let at = Point::new(*x, *y);
                let count = if matches!(action, Action::DoubleClick { .. }) { 2 } else { 3 };
                self.mouse(s, "mouseMoved", at, None, input.buttons, held).await?;
                for clicks in 1..=count {
                    self.mouse(s, "mousePressed", at, Some((MouseButton::Left, clicks)), input.buttons | 1, held)
                        .await?;
                    self.mouse(s, "mouseReleased", at, Some((MouseButton::Left, clicks)), input.buttons, held).await?;
                }
                input.pointer = Some(at);
            }
            Action::MouseDown { button: b, keys } => {
                let keys = key_defs(keys).map_err(|e| BrowserError::Config(e.to_string()))?;
                let at = input.pointer.unwrap_or(Point::new(0, 0));
                let modifiers = self.press_all(s, &keys, held).await?;
                input.held.extend(keys);
                input.buttons |= button(*b).1;
                self.mouse(s, "mousePressed", at, Some((*b, 1)), input.buttons, modifiers).await?;
            }
            Action::MouseUp { button: b } => {
                let at = input.pointer.unwrap_or(Point::new(0, 0));
                input.buttons &= !button(*b).1;
                self.mouse(s, "mouseReleased", at, Some((*b, 1)), input.buttons, held).await?;
                let keys = std::mem::take(&mut input.held);
                self.release_all(s, &keys, 0).await?;
            }
            Action::Move { x, y, keys } => {
                let keys = key_defs(keys).map_err(|e| BrowserError::Config(e.to_string()))?;
                let to = Point::new(*x, *y);
                let modifiers = self.press_all(s, &keys, held).await?;
                // With a button held the pointer passes through the points between (a drag by hand).
                let path = match input.pointer {
                    Some(from) if input.buttons != 0 => interpolate(from, to),
                    _ => vec![to],
                };
                for p in path {
                    self.mouse(s, "mouseMoved", p, None, input.buttons, modifiers).await?;
                }
                self.release_all(s, &keys, held).await?;
                input.pointer = Some(to);
            }
            Action::Drag { path, button: b, keys } => {
                let keys = key_defs(keys).map_err(|e| BrowserError::Config(e.to_string()))?;
                let (Some(first), Some(last)) = (path.first().copied(), path.last().copied()) else {
                    return Err(BrowserError::Config("drag needs a path of at least 2 points".into()));
                };
                let modifiers = self.press_all(s, &keys, held).await?;
                let bit = button(*b).1;
                self.mouse(s, "mouseMoved", first, None, input.buttons, modifiers).await?;
                self.mouse(s, "mousePressed", first, Some((*b, 1)), input.buttons | bit, modifiers).await?;
                let mut from = first;
                for &to in &path[1..] {
                    for p in interpolate(from, to) {
                        self.mouse(s, "mouseMoved", p, None, input.buttons | bit, modifiers).await?;
                    }
                    from = to;
                }
                self.mouse(s, "mouseReleased", last, Some((*b, 1)), input.buttons, modifiers).await?;
                self.release_all(s, &keys, held).await?;
                input.pointer = Some(last);
            }
            Action::Scroll { x, y, scroll_x, scroll_y, keys } => {
                let keys = key_defs(keys).map_err(|e| BrowserError::Config(e.to_string()))?;
                let at = Point::new(*x, *y);
                let modifiers = self.press_all(s, &keys, held).await?;
                self.mouse(s, "mouseMoved", at, None, input.buttons, modifiers).await?;
                self.wheel(s, at, *scroll_x, *scroll_y, modifiers).await?;
                self.release_all(s, &keys, held).await?;
                input.pointer = Some(at);
            }
            Action::Type { text } => self.type_text(s, text, held).await?,
            Action::Keypress { keys } => {
                let keys = key_defs(keys).map_err(|e| BrowserError::Config(e.to_string()))?;
                self.press_all(s, &keys, held).await?;
                self.release_all(s, &keys, held).await?;
            }
            Action::HoldKey { keys, duration_ms } => {
                let keys = key_defs(keys).map_err(|e| BrowserError::Config(e.to_string()))?;
                self.press_all(s, &keys, held).await?;
                tokio::time::sleep(Duration::from_millis(*duration_ms)).await;
                self.release_all(s, &keys, held).await?;
            }
            Action::CursorPosition {} => {
                let at = input.pointer.unwrap_or(Point::new(0, 0));
                report.cursor = Some(at);
                report.message = Some(format!("pointer at {},{}", at.x, at.y));
            }
            Action::Navigate { url } => self.navigate(url).await?,
            Action::Back {} | Action::Forward {} => {
                let (delta, way) = if matches!(action, Action::Back {}) { (-1, "back") } else { (1, "forward") };
                if !self.history(delta).await? {
                    return Err(BrowserError::NoHistory(way));
                }
            }
            Action::Reload {} => self.reload().await?,
            Action::Wait { .. } | Action::Screenshot {} | Action::Zoom { .. } => {}
        }
        if action.is_navigation()
            && let Ok(page) = self.page_state().await
        {
            report.message = Some(format!("now showing {} ({:?})", page.url, page.title));
        }
        Ok(report)
    }
}

/// A PNG to an RGB frame of exactly `size`: a capture of another size (a page that resized its window) is
/// cropped or padded with white.
fn decode_png(data: &str, size: Size) -> Result<Frame, BrowserError> {
    use base64::Engine as _;
    let bad = |why: String| BrowserError::Capture(format!("the browser's screenshot {why}"));
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| bad(format!("is not base64: {e}")))?;
    let mut decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    let mut reader = decoder.read_info().map_err(|e| bad(format!("is not a PNG: {e}")))?;
    let mut buf = vec![0; reader.output_buffer_size().ok_or_else(|| bad("is too large".into()))?];
    let info = reader.next_frame(&mut buf).map_err(|e| bad(format!("does not decode: {e}")))?;
    buf.truncate(info.buffer_size());
    let channels = match reader.output_color_type().0 {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        other => return Err(bad(format!("has colour type {other:?}"))),
    };
    let (w, h) = (info.width as usize, info.height as usize);
    let (tw, th) = (size.width as usize, size.height as usize);
    let mut rgb = if (w, h) == (tw, th) && channels == 3 { Vec::new() } else { vec![255u8; tw * th * 3] };
    if rgb.is_empty() {
        rgb = buf;
    } else {
        for y in 0..h.min(th) {
            for x in 0..w.min(tw) {
                let src = (y * w + x) * channels;
                let dst = (y * tw + x) * 3;
                rgb[dst..dst + 3].copy_from_slice(&buf[src..src + 3]);
            }
        }
    }
    Frame::from_rgb(size, rgb).map_err(|e| bad(e.to_string()))
}

#[async_trait]
impl ComputerProvider for BrowserProvider {
    fn kind(&self) -> &'static str {
        "browser"
    }

    async fn screen_size(&self) -> Result<Size, ProviderError> {
        if self.inner.conn.is_closed() {
            return Err(BrowserError::Cdp(CdpError::Closed(String::new())).into());
        }
        Ok(self.inner.size)
    }

    async fn screenshot(&self) -> Result<Frame, ProviderError> {
        let frame = self.inner.screenshot().await.map_err(|e| match e {
            // A page that does not paint is not a question for the model.
            BrowserError::Cdp(CdpError::Timeout { .. }) => ProviderError::Failed(e.to_string()),
            e => e.into(),
        })?;
        if self.inner.spare_wanted.swap(false, std::sync::atomic::Ordering::Relaxed) {
            tokio::spawn(Inner::prepare_spare(self.inner.clone()));
        }
        Ok(frame)
    }

    async fn perform(&self, action: &Action) -> Result<ActionReport, ProviderError> {
        check_action(action, self.inner.size)?;
        // What happened meanwhile (a tab opened, a dialog answered) goes with the result, a wait's too.
        let mut report = match sleep_for(action).await {
            Some(report) => report,
            None => self.inner.perform(action).await.map_err(|e| match e {
                BrowserError::Config(message) => ProviderError::InvalidAction(message),
                e => e.into(),
            })?,
        };
        let notes = self.take_notes();
        if !notes.is_empty() {
            let mut message = report.message.take().unwrap_or_default();
            for note in notes {
                if !message.is_empty() {
                    message.push_str("; ");
                }
                message.push_str(&note);
            }
            report.message = Some(message);
        }
        Ok(report)
    }

    async fn take_downloads(&self) -> Vec<Download> {
        let finished = self.inner.downloads.lock().map(|mut d| std::mem::take(&mut d.finished)).unwrap_or_default();
        let mut taken = Vec::with_capacity(finished.len());
        for (name, path) in finished {
            let size = tokio::fs::metadata(&path).await.map(|m| m.len()).unwrap_or(0);
            let content = if size <= MAX_DOWNLOAD_BYTES { tokio::fs::read(&path).await.ok() } else { None };
            let _ = tokio::fs::remove_file(&path).await;
            taken.push(Download { name, size, content });
        }
        taken
    }

    fn navigates(&self) -> bool {
        true
    }

    async fn reset(&self) -> Result<bool, ProviderError> {
        Ok(BrowserProvider::reset(self).await?)
    }

    async fn page(&self) -> Option<PageInfo> {
        self.page_state().await.ok().map(|p| PageInfo { url: p.url, title: p.title })
    }

    async fn health(&self) -> Result<(), ProviderError> {
        self.inner
            .conn
            .call(None, "Browser.getVersion", json!({}))
            .await
            .map(drop)
            .map_err(|e| BrowserError::Cdp(e).into())
    }
}
