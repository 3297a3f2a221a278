//! The portable provider: the desktop agentd runs on, on macOS, Windows, Wayland and X11, through two
//! cross-platform crates — [enigo](https://docs.rs/enigo) for input and [xcap](https://docs.rs/xcap) for
//! capture. The X11 provider (`agentd-local`) is faster and more faithful on X; this one is for the
//! desktops it cannot reach.
//!
//! - **Backends**: enigo with only its x11rb backend on Linux (pure Rust over the X protocol: no libxdo to
//!   install or link, and XTest input that X applications cannot tell from the local provider's); its
//!   `wayland` (wlroots virtual pointer/keyboard) and `libei` (portal) backends are not built: with more than
//!   one backend enigo sends every event through each connection it opens, so under XWayland a click would
//!   land twice. On Wayland sessions input therefore reaches XWayland applications; capture goes through
//!   xcap's Wayland path (portal + PipeWire, or wlroots screencopy). macOS (Quartz events, accessibility
//!   permission needed) and Windows (`SendInput`) have one backend each.
//! - **Thread**: enigo is not `Send` on every platform, so one thread of its own (the `worker` module) owns it and the
//!   xcap monitor handles, and runs every input and capture in the order they were asked: a screenshot
//!   asked after an action is taken after the action's input was delivered (enigo's X backend waits for the
//!   server to process every event). Several tasks may call at once; input actions are taken one at a time
//!   (a click with modifiers must not interleave with another action), and the pauses inside an action
//!   (`hold_key`'s duration) are awaited off that thread, so screenshots go on meanwhile.
//! - **Actions** (docs/task-file.md) from enigo's primitives: clicks of the five buttons as press/release at
//!   the point, double and triple click as two and three press/release pairs (the platform counts them),
//!   held modifiers (`keys` of click/move/drag/scroll) pressed around the action and released in reverse
//!   order even when it failed, `mouse_down`'s keys held until the matching `mouse_up`, drag with any button
//!   through every point of the path, scroll in wheel notches (one per [`PIXELS_PER_NOTCH`]), `type` with
//!   enigo's text entry on macOS and Windows and key by key on X11 (keys placed as the X11 provider places
//!   them, sent as raw keycodes: the `xkeyboard` module says why), chords pressed in order and released in reverse. Key names map as in [`keys`].
//! - **Screen**: one monitor (the primary, or `monitor` N of xcap's list) is the screen: its size is
//!   `screen_size`, coordinates are relative to its top-left corner, and a capture is converted to an RGB
//!   frame of exactly that size (a HiDPI capture larger than the monitor's logical size is sampled down).
//! - **Faults**: no input connection or a failed capture is `Unavailable` (retryable); the input connection
//!   is opened again on the next call.

pub mod error;
pub mod keys;
mod worker;
#[cfg(target_os = "linux")]
mod xkeyboard;

use std::sync::Arc;
use std::time::Duration;

use agentd_computer::provider::{check_action, sleep_for};
use agentd_computer::{Action, ActionReport, ComputerProvider, Frame, MouseButton, Point, ProviderError, Size};
use async_trait::async_trait;

pub use agentd_computer::MonitorInfo;
pub use error::PortableError;

use worker::{Step, Worker};

pub use agentd_computer::{MAX_NOTCHES, PIXELS_PER_NOTCH, notches};
/// The pause at every point of a drag path, so that applications see each point as motion.
pub const DRAG_DWELL: Duration = Duration::from_millis(20);

/// Which monitor of the session is the screen.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct PortableConfig {
    /// An index into the session's monitors as xcap lists them; `None`: the primary monitor.
    pub monitor: Option<usize>,
}

/// The desktop of the session agentd runs in.
pub struct PortableProvider {
    worker: Worker,
    /// Input actions one at a time (a composed action is several steps that must not interleave).
    input: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for PortableProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortableProvider").finish_non_exhaustive()
    }
}

impl PortableProvider {
    /// Starts the input thread, opens the input connection and checks that the monitor exists.
    pub async fn open(config: PortableConfig) -> Result<Self, PortableError> {
        let worker = Worker::start(config.monitor)?;
        worker.call(|desk| desk.open()).await?;
        Ok(Self { worker, input: tokio::sync::Mutex::new(()) })
    }

    /// One provider per configuration for the life of the process, shared by every task that asks for it:
    /// the held keys and buttons of `mouse_down` are the session's, and one input thread serves them all.
    pub async fn shared(config: PortableConfig) -> Result<Arc<Self>, PortableError> {
        static OPEN: agentd_computer::Shared<PortableConfig, PortableProvider> = agentd_computer::Shared::new();
        OPEN.get_or_open(config, Self::open).await
    }

    /// The monitor that is the screen.
    pub async fn monitor(&self) -> Result<MonitorInfo, PortableError> {
        self.worker.call(|desk| desk.monitor_info()).await
    }

    /// Every monitor of the session, in the order `monitor` indexes them.
    pub async fn monitors(&self) -> Result<Vec<MonitorInfo>, PortableError> {
        self.worker.call(|desk| desk.monitors()).await
    }

    async fn steps(&self, steps: Vec<Step>) -> Result<(), PortableError> {
        self.worker.call(move |desk| desk.run(steps)).await
    }

    async fn input(&self, action: &Action) -> Result<ActionReport, PortableError> {
        let _one_at_a_time = self.input.lock().await;
        match action {
            Action::Click { x, y, button, keys } => {
                let at = Point::new(*x, *y);
                let keys = keys::enigo_keys(keys)?;
                self.steps(worker::holding(keys, vec![Step::Move(at), Step::Click(*button, 1)])).await?;
            }
            Action::DoubleClick { x, y } => {
                self.steps(vec![Step::Move(Point::new(*x, *y)), Step::Click(MouseButton::Left, 2)]).await?;
            }
            Action::TripleClick { x, y } => {
                self.steps(vec![Step::Move(Point::new(*x, *y)), Step::Click(MouseButton::Left, 3)]).await?;
            }
            Action::MouseDown { button, keys } => {
                let keys = keys::enigo_keys(keys)?;
                let button = *button;
                self.worker.call(move |desk| desk.mouse_down(button, keys)).await?;
            }
            Action::MouseUp { button } => {
                let button = *button;
                self.worker.call(move |desk| desk.mouse_up(button)).await?;
            }
            Action::Move { x, y, keys } => {
                let keys = keys::enigo_keys(keys)?;
                self.steps(worker::holding(keys, vec![Step::Move(Point::new(*x, *y))])).await?;
            }
            Action::Drag { path, button, keys } => {
                let Some((&first, rest)) = path.split_first() else {
                    return Err(PortableError::Invalid("drag needs a path of at least 2 points".into()));
                };
                let keys = keys::enigo_keys(keys)?;
                let mut body = vec![Step::Move(first), Step::Button(*button, true), Step::Pause(DRAG_DWELL)];
                for point in rest {
                    body.extend([Step::Move(*point), Step::Pause(DRAG_DWELL)]);
                }
                body.push(Step::Button(*button, false));
                self.steps(worker::holding(keys, body)).await?;
            }
            Action::Scroll { x, y, scroll_x, scroll_y, keys } => {
                let keys = keys::enigo_keys(keys)?;
                let body = vec![
                    Step::Move(Point::new(*x, *y)),
                    Step::Scroll { vertical: true, notches: notches(*scroll_y) },
                    Step::Scroll { vertical: false, notches: notches(*scroll_x) },
                ];
                self.steps(worker::holding(keys, body)).await?;
            }
            Action::Type { text } => {
                if !text.is_empty() {
                    self.steps(vec![Step::Text(text.clone())]).await?;
                }
            }
            Action::Keypress { keys } => {
                let keys = keys::enigo_keys(keys)?;
                self.steps(worker::holding(keys, Vec::new())).await?;
            }
            Action::HoldKey { keys, duration_ms } => {
                let keys = keys::enigo_keys(keys)?;
                let pressed = keys.clone();
                self.worker.call(move |desk| desk.press_keys(pressed)).await?;
                tokio::time::sleep(Duration::from_millis(*duration_ms)).await;
                self.worker.call(move |desk| desk.release_keys(keys)).await?;
            }
            Action::CursorPosition {} => {
                let at = self.worker.call(|desk| desk.cursor()).await?;
                return Ok(ActionReport { message: Some(format!("pointer at {},{}", at.x, at.y)), cursor: Some(at) });
            }
            Action::Wait { .. }
            | Action::Screenshot {}
            | Action::Zoom { .. }
            | Action::Navigate { .. }
            | Action::Back {}
            | Action::Forward {}
            | Action::Reload {} => {
                return Err(PortableError::Unsupported {
                    action: action.kind(),
                    reason: "the agent loop handles it without the provider".into(),
                });
            }
        }
        Ok(ActionReport::default())
    }
}

#[async_trait]
impl ComputerProvider for PortableProvider {
    fn kind(&self) -> &'static str {
        "portable"
    }

    async fn screen_size(&self) -> Result<Size, ProviderError> {
        Ok(self.worker.call(|desk| desk.monitor_info()).await.map(|m| Size::new(m.width, m.height))?)
    }

    async fn screenshot(&self) -> Result<Frame, ProviderError> {
        Ok(self.worker.call(|desk| desk.capture()).await?)
    }

    async fn perform(&self, action: &Action) -> Result<ActionReport, ProviderError> {
        agentd_computer::provider::refuse_navigation("portable", action)?;
        if let Some(report) = sleep_for(action).await {
            return Ok(report);
        }
        check_action(action, self.screen_size().await?)?;
        Ok(self.input(action).await?)
    }

    /// Lists the monitors now (the screen size is otherwise the last one seen) and opens the input
    /// connection if it was dropped.
    async fn health(&self) -> Result<(), ProviderError> {
        Ok(self.worker.call(|desk| desk.open()).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_become_provider_errors_by_kind() {
        assert!(ProviderError::from(PortableError::Connect("no display".into())).is_retryable());
        assert!(ProviderError::from(PortableError::Capture("gone".into())).is_retryable());
        let unsupported = PortableError::Unsupported { action: "click", reason: "no such button".into() };
        assert!(ProviderError::from(unsupported).is_tool_error());
        assert!(ProviderError::from(PortableError::Invalid("bad key".into())).is_tool_error());
        let missing = ProviderError::from(PortableError::NoMonitor { index: 3, count: 1 });
        assert!(matches!(missing, ProviderError::Failed(m) if m.contains("monitor 3")));
    }
}
