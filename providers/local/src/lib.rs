//! The local desktop provider: the X11 display agentd runs on (a VM's desktop, or Xvfb). Linux only (the
//! capture segment is a `memfd`); agentd depends on it only on Linux, and uses `agentd-portable` elsewhere.
//!
//! [`LocalProvider`] implements `ComputerProvider` over **one X connection held for the provider's life**,
//! owned by a dedicated worker thread (`agentd-x11 :N`); the async methods hand it jobs and await the
//! answers, so no X call ever blocks the async runtime. On that connection:
//! - **capture** is MIT-SHM `ShmGetImage` into a shared `memfd` segment, converted once to packed RGB
//!   (`GetImage` over the socket when shared memory is not possible; xcap behind the `xcap` cargo feature
//!   for comparison). With the DAMAGE extension the previous frame is handed out again while nothing was
//!   drawn, so polling an unchanged screen costs one round trip and a copy;
//! - **input** is XTest `FakeInput`: key names come from the shared keysym table
//!   (`agentd_computer::keys`), become keycodes through the server's own keyboard mapping, and keysyms the
//!   layout lacks are written onto spare keycodes (see [`keymap`]), emptied again after 5 s unused;
//! - **monitors**: `monitor = N` picks the N-th RandR monitor (as `xrandr --listmonitors` lists them); every
//!   coordinate is then relative to that monitor's top-left corner and the screen size is the monitor's.
//!   Without it the whole X screen is used.
//! - **HiDPI**: on X11 capture and input share one pixel space (device pixels; desktop scaling is done by
//!   applications drawing bigger), so there is no factor to apply here: a frame pixel is an input pixel.
//!   Conversions to a model's image size happen in the agent loop's coordinate map.
//!
//! The server going away (Xvfb killed) makes the current call fail with `ProviderError::Unavailable`; the
//! next call reconnects, so a restarted server on the same display is picked up.

pub mod capture;
pub mod error;
pub mod pixels;
mod session;
#[cfg(feature = "test-support")]
pub mod testing;
#[cfg(feature = "xcap")]
mod xcap_capture;

use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use agentd_computer::provider::{check_action, sleep_for};
use agentd_computer::{Action, ActionReport, ComputerProvider, Frame, Key, Point, ProviderError, Size};
use async_trait::async_trait;
use tokio::sync::oneshot;

pub use agentd_computer::keymap;
pub use error::LocalError;
use session::{Session, X, XErr};

pub use agentd_computer::{MAX_NOTCHES, MonitorInfo, PIXELS_PER_NOTCH, interpolate, notches};
/// The pause at the press and at every point of a drag path, so that applications (which merge queued
/// motion events) see each point the model named.
pub const DRAG_DWELL: Duration = Duration::from_millis(10);
/// The pause after each interpolated step between two points of a drag path.
pub const DRAG_STEP: Duration = Duration::from_millis(2);
/// How long a call may wait for the X server before the provider calls it unavailable.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// How screenshots are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CaptureMethod {
    /// Shared memory when the server allows it, else `GetImage`.
    #[default]
    Auto,
    /// Shared memory only (fails to open without MIT-SHM 1.2).
    Shm,
    /// `GetImage`: pixels copied through the X socket.
    GetImage,
    /// The xcap crate (a new X connection and `GetImage` per capture). Only with the `xcap` feature.
    Xcap,
}

/// Which display and monitor, and how to capture.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct LocalConfig {
    /// The X display (`:0`, `:99`); `None` uses `$DISPLAY`.
    pub display: Option<String>,
    /// The RandR monitor to use, by index; `None` uses the whole X screen.
    pub monitor: Option<usize>,
    pub capture: CaptureMethod,
    /// Hand out the previous frame while DAMAGE reports nothing drawn (on by default; off for benchmarks
    /// that measure the capture itself).
    pub reuse_unchanged: bool,
}

impl LocalConfig {
    /// The defaults for `display`: shared memory, frame reuse on, whole screen.
    pub fn new(display: Option<String>) -> Self {
        Self { display, monitor: None, capture: CaptureMethod::Auto, reuse_unchanged: true }
    }
}

type Job = Box<dyn FnOnce(&mut Session) + Send>;

/// The worker thread's mailbox.
struct Worker {
    display: String,
    jobs: Mutex<mpsc::Sender<Job>>,
}

impl Worker {
    /// Runs `f` on the worker thread's connection and waits (without blocking the runtime) for its result.
    async fn call<T: Send + 'static>(
        &self,
        timeout: Duration,
        f: impl FnOnce(&mut X) -> Result<T, XErr> + Send + 'static,
    ) -> Result<T, LocalError> {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |session: &mut Session| {
            let _ = tx.send(session.run(f));
        });
        self.jobs.lock().map_err(|_| LocalError::WorkerStopped)?.send(job).map_err(|_| LocalError::WorkerStopped)?;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(LocalError::WorkerStopped),
            Err(_) => Err(LocalError::Timeout { display: self.display.clone(), seconds: timeout.as_secs() }),
        }
    }
}

/// The local X11 desktop as a `ComputerProvider`.
pub struct LocalProvider {
    worker: Arc<Worker>,
    config: LocalConfig,
    #[cfg(feature = "xcap")]
    xcap: Option<Arc<xcap_capture::XcapCapture>>,
}

impl std::fmt::Debug for LocalProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalProvider").field("display", &self.worker.display).field("config", &self.config).finish()
    }
}

impl LocalProvider {
    /// Connects to the display and starts the worker thread that owns the connection.
    pub async fn open(config: LocalConfig) -> Result<Self, LocalError> {
        let display = match &config.display {
            Some(display) => display.clone(),
            None => std::env::var("DISPLAY").map_err(|_| LocalError::Connect {
                display: "(none)".into(),
                reason: "no display given and $DISPLAY is not set".into(),
            })?,
        };
        #[cfg(not(feature = "xcap"))]
        if config.capture == CaptureMethod::Xcap {
            return Err(LocalError::Invalid(
                "capture with xcap needs agentd-local built with the `xcap` feature".into(),
            ));
        }
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = oneshot::channel();
        let mut session = Session::new(config.clone(), display.clone());
        std::thread::Builder::new()
            .name(format!("agentd-x11 {display}"))
            .spawn(move || {
                let opened = session.open();
                let ok = opened.is_ok();
                let _ = ready_tx.send(opened);
                if !ok {
                    return;
                }
                loop {
                    let job = match inbox.recv_timeout(Duration::from_secs(1)) {
                        Ok(job) => job,
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            session.housekeeping();
                            continue;
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    };
                    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&mut session))).is_err() {
                        tracing::error!("X worker job panicked; reconnecting on the next call");
                        session.reset();
                    }
                }
            })
            .map_err(|e| LocalError::Connect {
                display: display.clone(),
                reason: format!("cannot start the X worker thread: {e}"),
            })?;
        match tokio::time::timeout(CALL_TIMEOUT, ready_rx).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => return Err(e),
            Ok(Err(_)) => return Err(LocalError::WorkerStopped),
            Err(_) => {
                return Err(LocalError::Timeout { display, seconds: CALL_TIMEOUT.as_secs() });
            }
        }
        #[cfg(feature = "xcap")]
        let xcap = if config.capture == CaptureMethod::Xcap {
            Some(Arc::new(xcap_capture::XcapCapture::new(&display)?))
        } else {
            None
        };
        Ok(Self {
            worker: Arc::new(Worker { display, jobs: Mutex::new(jobs) }),
            config,
            #[cfg(feature = "xcap")]
            xcap,
        })
    }

    /// The provider for `config`, shared by everything in this process that asks for the same display and
    /// monitor: the connection stays open for the daemon's life instead of one per task.
    pub async fn shared(config: LocalConfig) -> Result<Arc<Self>, LocalError> {
        static OPEN: agentd_computer::Shared<LocalConfig, LocalProvider> = agentd_computer::Shared::new();
        OPEN.get_or_open(config, Self::open).await
    }

    /// The display this provider operates.
    pub fn display(&self) -> &str {
        &self.worker.display
    }

    /// The monitor in use (the whole screen when none was chosen).
    pub async fn monitor(&self) -> Result<MonitorInfo, LocalError> {
        self.worker.call(CALL_TIMEOUT, |x| Ok(x.monitor())).await
    }

    /// Every monitor of the screen, as RandR lists them.
    pub async fn monitors(&self) -> Result<Vec<MonitorInfo>, LocalError> {
        self.worker.call(CALL_TIMEOUT, |x| x.monitors()).await
    }

    /// The capture path actually in use.
    pub async fn capture_method(&self) -> Result<CaptureMethod, LocalError> {
        if self.config.capture == CaptureMethod::Xcap {
            return Ok(CaptureMethod::Xcap);
        }
        self.worker.call(CALL_TIMEOUT, |x| Ok(x.capture_method())).await
    }

    async fn act(&self, action: Action) -> Result<ActionReport, LocalError> {
        let timeout = CALL_TIMEOUT + type_time(&action);
        self.worker.call(timeout, move |x| perform_on(x, &action)).await
    }
}

/// Extra time an action may take beyond [`CALL_TIMEOUT`]: spare keycodes reassigned in long texts, the
/// pauses along a drag path.
fn type_time(action: &Action) -> Duration {
    match action {
        Action::Type { text } => Duration::from_millis(20 * text.chars().count() as u64),
        Action::Drag { path, .. } => (DRAG_DWELL + DRAG_STEP * 50) * path.len() as u32,
        _ => Duration::ZERO,
    }
}

fn invalid(e: ProviderError) -> XErr {
    XErr::Local(LocalError::Invalid(e.to_string()))
}

fn parse_keys(action: &Action) -> Result<Vec<Key>, XErr> {
    action.keys().map_err(|e| XErr::Local(LocalError::Invalid(e.to_string())))
}

fn click(x: &mut X, button: u8, count: usize) -> Result<(), XErr> {
    for _ in 0..count {
        x.button(button, true)?;
        x.button(button, false)?;
    }
    Ok(())
}

/// Performs one input action on the connection (the worker thread's side of `perform`). A pointer action's
/// `keys` are pressed first and released after it, even when it failed (docs/task-file.md); those of a `mouse_down`
/// stay
/// down until the matching `mouse_up`.
fn perform_on(x: &mut X, action: &Action) -> Result<ActionReport, XErr> {
    check_action(action, x.size()).map_err(invalid)?;
    let modifiers = parse_keys(action)?;
    let held = match action {
        Action::Keypress { .. } | Action::HoldKey { .. } => Vec::new(),
        _ => x.press_chord(&modifiers)?,
    };
    let done = pointer_or_key(x, action);
    match action {
        Action::MouseDown { button, .. } if done.is_ok() => {
            x.held_with.insert(button.x11_button(), held);
        }
        _ => x.release(&held)?,
    }
    let report = done?;
    if let Action::MouseUp { button } = action
        && let Some(held) = x.held_with.remove(&button.x11_button())
    {
        x.release(&held)?;
    }
    x.finish()?;
    Ok(report)
}

fn pointer_or_key(x: &mut X, action: &Action) -> Result<ActionReport, XErr> {
    let mut report = ActionReport::default();
    match action {
        Action::Click { x: px, y: py, button, .. } => {
            x.motion(Point::new(*px, *py))?;
            click(x, button.x11_button(), 1)?;
        }
        Action::DoubleClick { x: px, y: py } => {
            x.motion(Point::new(*px, *py))?;
            click(x, 1, 2)?;
        }
        Action::TripleClick { x: px, y: py } => {
            x.motion(Point::new(*px, *py))?;
            click(x, 1, 3)?;
        }
        Action::MouseDown { button, .. } => x.button(button.x11_button(), true)?,
        Action::MouseUp { button } => x.button(button.x11_button(), false)?,
        Action::Move { x: px, y: py, .. } => x.motion(Point::new(*px, *py))?,
        Action::Drag { path, button, .. } => {
            let Some((&first, rest)) = path.split_first() else {
                return Err(XErr::Local(LocalError::Invalid("drag needs a path".into())));
            };
            x.motion(first)?;
            x.button(button.x11_button(), true)?;
            x.dwell(DRAG_DWELL)?;
            let mut at = first;
            for &next in rest {
                for p in interpolate(at, next) {
                    x.motion(p)?;
                    x.dwell(DRAG_STEP)?;
                }
                x.dwell(DRAG_DWELL)?;
                at = next;
            }
            x.button(button.x11_button(), false)?;
        }
        Action::Scroll { x: px, y: py, scroll_x, scroll_y, .. } => {
            x.motion(Point::new(*px, *py))?;
            let vertical = notches(*scroll_y);
            let horizontal = notches(*scroll_x);
            // X buttons: 4 up, 5 down, 6 left, 7 right.
            click(x, if vertical > 0 { 5 } else { 4 }, vertical.unsigned_abs() as usize)?;
            click(x, if horizontal > 0 { 7 } else { 6 }, horizontal.unsigned_abs() as usize)?;
            report.message = Some(format!(
                "scrolled {} notch(es) vertically and {} horizontally ({PIXELS_PER_NOTCH} px per notch)",
                vertical, horizontal
            ));
        }
        Action::Type { text } => x.type_text(text)?,
        Action::Keypress { .. } => {
            let keys = parse_keys(action)?;
            let held = x.press_chord(&keys)?;
            x.release(&held)?;
        }
        Action::CursorPosition {} => {
            let p = x.cursor()?;
            report.cursor = Some(p);
        }
        Action::HoldKey { .. }
        | Action::Wait { .. }
        | Action::Screenshot {}
        | Action::Zoom { .. }
        | Action::Navigate { .. }
        | Action::Back {}
        | Action::Forward {}
        | Action::Reload {} => {
            return Err(XErr::Local(LocalError::Invalid(format!(
                "{} is not performed on the X connection",
                action.kind()
            ))));
        }
    }
    Ok(report)
}

#[async_trait]
impl ComputerProvider for LocalProvider {
    fn kind(&self) -> &'static str {
        "local"
    }

    async fn screen_size(&self) -> Result<Size, ProviderError> {
        Ok(self.worker.call(CALL_TIMEOUT, |x| Ok(x.size())).await?)
    }

    async fn screenshot(&self) -> Result<Frame, ProviderError> {
        #[cfg(feature = "xcap")]
        if let Some(xcap) = &self.xcap {
            let (origin, size) = self.worker.call(CALL_TIMEOUT, |x| Ok((x.region_origin(), x.size()))).await?;
            let xcap = xcap.clone();
            return tokio::task::spawn_blocking(move || xcap.capture(origin, size))
                .await
                .map_err(|e| ProviderError::Failed(format!("xcap capture panicked: {e}")))?
                .map_err(ProviderError::from);
        }
        Ok(self.worker.call(CALL_TIMEOUT, |x| x.capture()).await?)
    }

    async fn perform(&self, action: &Action) -> Result<ActionReport, ProviderError> {
        agentd_computer::provider::refuse_navigation("local", action)?;
        if let Some(report) = sleep_for(action).await {
            return Ok(report);
        }
        match action {
            Action::Screenshot {} | Action::Zoom { .. } => Err(ProviderError::Unsupported {
                provider: "local",
                action: action.kind(),
                reason: "the agent loop builds it from screenshot()".into(),
            }),
            Action::HoldKey { duration_ms, .. } => {
                let keys = action.keys().map_err(|e| ProviderError::InvalidAction(e.to_string()))?;
                let checked = action.clone();
                let held = self
                    .worker
                    .call(CALL_TIMEOUT, move |x| {
                        check_action(&checked, x.size()).map_err(invalid)?;
                        let held = x.press_chord(&keys)?;
                        x.finish()?;
                        Ok(held)
                    })
                    .await?;
                // Released by a task of its own, so that the keys come up even if this call is abandoned.
                let worker = self.worker.clone();
                let duration = Duration::from_millis(*duration_ms);
                let release = tokio::spawn(async move {
                    tokio::time::sleep(duration).await;
                    worker
                        .call(CALL_TIMEOUT, move |x| {
                            x.release(&held)?;
                            x.finish()
                        })
                        .await
                });
                match release.await {
                    Ok(result) => result?,
                    Err(e) => {
                        return Err(ProviderError::Failed(format!("key release task failed: {e}")));
                    }
                }
                Ok(ActionReport::default())
            }
            other => Ok(self.act(other.clone()).await?),
        }
    }
}

impl Drop for LocalProvider {
    fn drop(&mut self) {
        // Let go of anything still pressed; the worker thread ends when its mailbox closes.
        if let Ok(jobs) = self.worker.jobs.lock() {
            let _ = jobs.send(Box::new(|session: &mut Session| {
                let _ = session.run(|x| x.release_all());
            }));
        }
    }
}
