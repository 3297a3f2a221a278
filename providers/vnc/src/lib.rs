//! The VNC provider: any machine that serves RFB (QEMU/KVM, cloud VMs, x11vnc, TigerVNC) as a
//! `ComputerProvider`, through this crate's own RFB 3.8 client. Pure Rust over `std::net`: it builds on Linux,
//! macOS and Windows alike (only Linux is tested).
//!
//! - **Screen**: a background reader keeps a local copy of the remote framebuffer current with incremental
//!   updates (Raw, CopyRect, ZRLE; DesktopSize resizes it), so a screenshot is a copy of memory. The server
//!   draws the pointer into the framebuffer (no cursor pseudo-encoding is requested), so the model sees
//!   where the pointer is.
//! - **No frame older than the last action** (docs/task-file.md): after every input action the provider writes a
//!   *fence*, a non-incremental update request for one pixel, and the next screenshot waits until the
//!   update that answers it has been applied (the second update after it at the latest; see `session`).
//!   That is one or two round trips on the first screenshot after an action; screenshots with no input
//!   since are still a copy of memory. The first frame after connecting answers the full request sent on
//!   connecting.
//! - **x11vnc's own copy of the screen**: x11vnc answers from a copy of the X screen that it polls, guided
//!   by X damage events. It destroys its damage object while no client is connected and creates it again
//!   about half a second after a client connected; changes made meanwhile are found only by a sparse check
//!   (every 32nd row, every 2 s): measured 0.2 to 3.5 s for small changes (a text entry, a 40x20 window). No RFB message makes it read the
//!   screen again (its 4 × Alt_L hotkey would also type into the desktop), so its first frames after a
//!   connection can show the screen as it was before, and a client cannot tell. Against Xvnc, QEMU and
//!   other servers that draw into their own framebuffer this does not happen. With x11vnc, keep a client
//!   connected (a viewer, or a desktop pool that holds its connection) while others change the screen.
//! - **Input**: RFB `PointerEvent` (buttons 1–8 and the wheel as buttons 4–7; button 9, "forward", does not
//!   exist in RFB and is refused as unsupported) and `KeyEvent` with X keysyms from the shared table
//!   (`agentd_computer::keys`): the server maps keysyms to its keyboard, Shift and all. A chord that holds
//!   Shift sends the shifted keysym of its other keys (`ctrl+shift+t` is Control, Shift, `T`; `shift+Tab` is
//!   Shift, `ISO_Left_Tab`; digits and punctuation their US-layout symbols), as VNC viewers do
//!   ([`agentd_computer::keys::chord_keys`]); the unshifted keysym would make the server lift Shift.
//! - **Authentication**: None and VNC authentication (DES challenge–response).
//! - **Faults**: a refused connection and a dropped one are [`VncError::Connect`] / [`VncError::Lost`]
//!   (`ProviderError::Unavailable`, retryable); a wrong or missing password is [`VncError::AuthFailed`] /
//!   [`VncError::PasswordRequired`] (`ProviderError::Failed`). After a drop the provider reconnects by
//!   itself; calls made meanwhile wait up to [`VncConfig::reconnect_grace`] for it and then fail with the
//!   reason, so a restarted server lets the task go on and a dead one ends it without hanging.
//!
//! Why not vnc-rs: its connection owns the event loop and exposes decoded rectangles as events, leaving the
//! framebuffer, reconnection and error classification to the caller — most of this crate — while its
//! errors are strings (`General("password check failed!")`) the loop could not act on by kind.

pub mod auth;
pub mod decode;
pub mod error;
pub mod proto;
mod session;

use std::sync::Arc;
use std::time::Duration;

use agentd_computer::keys;
use agentd_computer::provider::{check_action, sleep_for};
use agentd_computer::{Action, ActionReport, ComputerProvider, Frame, Key, MouseButton, Point, ProviderError, Size};
use async_trait::async_trait;
use tokio::sync::oneshot;

pub use error::VncError;
use session::{Outgoing, Shared, Status};

pub use agentd_computer::{MAX_NOTCHES, PIXELS_PER_NOTCH, interpolate, notches};
/// The pause at the press and at every point of a drag path: x11vnc merges pointer events that arrive
/// within one pass of its loop (about 20 ms), and applications merge queued motion; this lets both see each
/// point.
pub const DRAG_DWELL: Duration = Duration::from_millis(40);
/// The pause after each interpolated step of a drag.
pub const DRAG_STEP: Duration = Duration::from_millis(2);

/// Which framebuffer encoding to prefer (both are always offered, with CopyRect).
///
/// ZRLE is the default everywhere: it sends a fraction of the bytes, and even on loopback it measured
/// faster with x11vnc (full 1280x800 frame 66 ms median against 126 ms, p95 69 ms against 2 s) and within
/// a millisecond of Raw with Xvnc (2.7 against 1.8 ms); see `benches/results/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encodings {
    #[default]
    Zrle,
    Raw,
}

/// Where the server is and how to talk to it.
#[derive(Clone)]
pub struct VncConfig {
    /// `host:port`.
    pub address: String,
    /// The VNC password (only its first 8 bytes count in VNC authentication).
    pub password: Option<String>,
    /// Limit for the TCP connection and the handshake.
    pub connect_timeout: Duration,
    /// How long a call waits for a dropped connection to come back before it fails.
    pub reconnect_grace: Duration,
    pub encodings: Encodings,
}

impl std::fmt::Debug for VncConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VncConfig")
            .field("address", &self.address)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("connect_timeout", &self.connect_timeout)
            .field("reconnect_grace", &self.reconnect_grace)
            .field("encodings", &self.encodings)
            .finish()
    }
}

impl VncConfig {
    pub fn new(address: impl Into<String>, password: Option<String>) -> Self {
        Self {
            address: address.into(),
            password,
            connect_timeout: Duration::from_secs(5),
            reconnect_grace: Duration::from_secs(15),
            encodings: Encodings::Zrle,
        }
    }
}

/// The pauses around the first key of a keysym outside ASCII on a connection. Servers (Xvnc,
/// x11vnc -add_keysyms) add such keysyms to their keyboard map on first use; a burst of those changes makes
/// X clients miss some and drop or mistype those characters, and so does a key that arrives right behind
/// its mapping. Each keysym pays this twice once per connection: after a release that announces it (x11vnc
/// maps it then; Xvnc ignores the release of a key not pressed) and after its first key.
pub const NEW_KEYSYM_SETTLE: Duration = Duration::from_millis(100);

const SHIFT_L: u32 = 0xffe1;

/// Input state: where the last event put the pointer and which buttons are down (RFB events carry both),
/// and the keysyms outside ASCII already typed on this connection.
#[derive(Debug, Clone, Default)]
struct Pointer {
    x: u16,
    y: u16,
    mask: u8,
    /// The connection generation this state belongs to (a new connection starts with no button down and
    /// a server that may have forgotten its added keysyms).
    generation: u64,
    typed: std::collections::HashSet<u32>,
    /// Keys a `mouse_down` pressed with its button (by mask bit), released by the matching `mouse_up`
    /// (docs/task-file.md).
    held_with: std::collections::HashMap<u8, Vec<u32>>,
}

/// How long a new shared connection waits before its first full refresh (see `VncProvider::shared`).
pub const NEW_CONNECTION_SETTLE: Duration = Duration::from_millis(700);

/// A remote screen over VNC.
pub struct VncProvider {
    shared: Arc<Shared>,
    config: VncConfig,
    pointer: Arc<tokio::sync::Mutex<Pointer>>,
    name: String,
}

impl std::fmt::Debug for VncProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VncProvider").field("address", &self.config.address).field("name", &self.name).finish()
    }
}

impl VncProvider {
    /// Connects and authenticates, and returns once the first full frame has arrived.
    pub async fn connect(config: VncConfig) -> Result<Self, VncError> {
        let attempt = config.clone();
        let connection = tokio::task::spawn_blocking(move || session::connect(&attempt)).await.map_err(|e| {
            VncError::Connect { address: config.address.clone(), reason: format!("the connect task failed: {e}") }
        })??;
        let name = connection.name().to_string();
        let shared = Shared::new(config.address.clone());
        let supervisor_shared = shared.clone();
        let supervisor_config = config.clone();
        std::thread::Builder::new()
            .name(format!("agentd-vnc {}", config.address))
            .spawn(move || session::supervise(supervisor_shared, supervisor_config, connection))
            .map_err(|e| VncError::Connect {
                address: config.address.clone(),
                reason: format!("cannot start the VNC thread: {e}"),
            })?;
        let provider = Self { shared, pointer: Arc::new(tokio::sync::Mutex::new(Pointer::default())), name, config };
        provider.ready(provider.config.connect_timeout).await?;
        Ok(provider)
    }

    /// The provider for `config`'s server and password, shared by everything in this process that asks for
    /// it: the connection stays open for the daemon's life instead of one per task. Besides saving a
    /// handshake per task, this keeps x11vnc current: it stops tracking the screen while no client is
    /// connected (and for about half a second after one connects), so a change made between two tasks would
    /// otherwise reach the next task seconds late. The daemon runs one task per desktop at a time, so tasks
    /// never share a connection at once. A connection that fails is not kept.
    pub async fn shared(config: VncConfig) -> Result<Arc<Self>, VncError> {
        type Open = std::collections::HashMap<(String, Option<String>), Arc<VncProvider>>;
        static OPEN: std::sync::OnceLock<tokio::sync::Mutex<Open>> = std::sync::OnceLock::new();
        let key = (config.address.clone(), config.password.clone());
        let mut open = OPEN.get_or_init(|| tokio::sync::Mutex::new(Open::new())).lock().await;
        if let Some(provider) = open.get(&key) {
            return Ok(provider.clone());
        }
        let provider = Arc::new(Self::connect(config).await?);
        provider.settle_new_connection().await;
        open.insert(key, provider.clone());
        Ok(provider)
    }

    /// x11vnc does not watch the X screen while no client is connected, nor in about the first half second
    /// of a new connection: its first frames can show the screen as it was before (measured: 1 of 40 first
    /// screenshots over a fresh connection, under load, showed the screen before the last change). So a new
    /// shared connection waits past that window and then asks for the whole screen again; later screenshots
    /// are fenced as usual. Costs [`NEW_CONNECTION_SETTLE`] once per server and process.
    async fn settle_new_connection(&self) {
        tokio::time::sleep(NEW_CONNECTION_SETTLE).await;
        if let Err(e) = self.refresh(self.config.connect_timeout).await {
            tracing::debug!(error = %e, "refreshing a new connection's screen failed; the next screenshot fences");
        }
    }

    /// The desktop name the server announced.
    pub fn desktop_name(&self) -> &str {
        &self.name
    }

    /// How many framebuffer updates carrying pixels have been applied so far (over all connections).
    pub fn updates(&self) -> u64 {
        *self.shared.updates.borrow()
    }

    /// Waits until more than `seen` updates have been applied, at most `timeout`; returns the count.
    pub async fn wait_for_update(&self, seen: u64, timeout: Duration) -> u64 {
        let mut rx = self.shared.updates.subscribe();
        let _ = tokio::time::timeout(timeout, rx.wait_for(|n| *n > seen)).await;
        *rx.borrow()
    }

    /// Asks the server for the whole screen again (a non-incremental update request) and waits, at most
    /// `timeout`, until it has arrived. The framebuffer is kept current without this; it exists to measure
    /// a full frame and to resynchronise after a doubt.
    pub async fn refresh(&self, timeout: Duration) -> Result<(), VncError> {
        self.ready(self.config.reconnect_grace).await?;
        let size = self.size();
        let seen = self.updates();
        let request = proto::update_request(
            false,
            size.width.min(u32::from(u16::MAX)) as u16,
            size.height.min(u32::from(u16::MAX)) as u16,
        );
        self.send(request.to_vec()).await?;
        let mut rx = self.shared.updates.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|n| *n > seen))
            .await
            .map_err(|_| VncError::Lost {
                address: self.config.address.clone(),
                reason: format!("no full update within {timeout:?}"),
            })?
            .map_err(|_| VncError::Closed { address: self.config.address.clone() })?;
        Ok(())
    }

    /// Whether the connection is up right now.
    pub fn is_connected(&self) -> bool {
        *self.shared.status.borrow() == Status::Connected
    }

    /// Waits (at most `grace`) until the connection is up.
    async fn ready(&self, grace: Duration) -> Result<(), VncError> {
        let mut rx = self.shared.status.subscribe();
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let last = {
                let status = rx.borrow_and_update();
                match &*status {
                    Status::Connected => return Ok(()),
                    Status::Failed(e) => return Err(e.clone()),
                    Status::Closed => {
                        return Err(VncError::Closed { address: self.config.address.clone() });
                    }
                    Status::Lost(reason) => reason.clone(),
                    Status::Connecting => "connecting".to_string(),
                }
            };
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => {
                    return Err(VncError::Closed { address: self.config.address.clone() });
                }
                Err(_) => {
                    return Err(VncError::Lost {
                        address: self.config.address.clone(),
                        reason: format!("{last}; still not reconnected after {grace:?}"),
                    });
                }
            }
        }
    }

    /// Sends `bytes` on the current connection and waits until they are written.
    async fn send(&self, bytes: Vec<u8>) -> Result<(), VncError> {
        self.write(bytes, false).await
    }

    /// Sends a fence after input: the next screenshot waits for an update the server sent after it had
    /// read everything before it (see the `session` module docs).
    async fn fence(&self) -> Result<(), VncError> {
        self.write(proto::FENCE_REQUEST.to_vec(), true).await
    }

    /// Waits (at most `timeout`) until the framebuffer holds the answer to the last fence.
    async fn fenced(&self, timeout: Duration) -> Result<(), VncError> {
        let target = self.shared.fence.load(std::sync::atomic::Ordering::SeqCst);
        let mut rx = self.shared.updates.subscribe();
        if *rx.borrow_and_update() >= target {
            return Ok(());
        }
        tokio::time::timeout(timeout, rx.wait_for(|n| *n >= target))
            .await
            .map_err(|_| VncError::Lost {
                address: self.config.address.clone(),
                reason: format!("no screen update answered the request sent after the last action within {timeout:?}"),
            })?
            .map_err(|_| VncError::Closed { address: self.config.address.clone() })?;
        Ok(())
    }

    async fn write(&self, bytes: Vec<u8>, fence: bool) -> Result<(), VncError> {
        let lost = |reason: String| VncError::Lost { address: self.config.address.clone(), reason };
        let (done, written) = oneshot::channel();
        let writer = self
            .shared
            .writer
            .lock()
            .map_err(|_| lost("writer lock poisoned".into()))?
            .clone()
            .ok_or_else(|| lost("not connected".into()))?;
        writer
            .send(Outgoing { bytes, done: Some(done), fence })
            .map_err(|_| lost("the connection closed while sending".into()))?;
        match written.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(reason)) => Err(lost(format!("sending input failed: {reason}"))),
            Err(_) => Err(lost("the connection closed while sending".into())),
        }
    }

    fn generation(&self) -> u64 {
        self.shared.generation.lock().map_or(0, |g| *g)
    }

    /// Performs an input action; the connection is up when this is called.
    async fn input(&self, action: &Action) -> Result<ActionReport, VncError> {
        let mut pointer = self.pointer.lock().await;
        let generation = self.generation();
        if pointer.generation != generation {
            pointer.mask = 0;
            pointer.typed.clear();
            pointer.held_with.clear();
            pointer.generation = generation;
        }
        let mut report = ActionReport::default();
        let at = |p: Point| (p.x.clamp(0, 65535) as u16, p.y.clamp(0, 65535) as u16);
        let mut out = Vec::new();
        // A pointer action's modifiers go down first and up after it; a mouse_down's stay down until its
        // mouse_up (docs/task-file.md).
        let held = match action {
            Action::Keypress { .. } | Action::HoldKey { .. } | Action::MouseUp { .. } => Vec::new(),
            _ => keysyms(action)?,
        };
        for &k in &held {
            out.extend_from_slice(&proto::key_event(true, k));
        }
        // The keys to release once the action is sent.
        let mut held_after = held;
        match action {
            Action::Click { x, y, button, .. } => {
                let bit = button_bit(*button)?;
                (pointer.x, pointer.y) = at(Point::new(*x, *y));
                click(&mut out, &pointer, bit, 1);
            }
            Action::DoubleClick { x, y } | Action::TripleClick { x, y } => {
                let count = if matches!(action, Action::DoubleClick { .. }) { 2 } else { 3 };
                (pointer.x, pointer.y) = at(Point::new(*x, *y));
                click(&mut out, &pointer, 0, count);
            }
            Action::MouseDown { button, .. } => {
                let bit = button_bit(*button)?;
                pointer.mask |= 1 << bit;
                out.extend_from_slice(&proto::pointer_event(pointer.mask, pointer.x, pointer.y));
                pointer.held_with.insert(bit, std::mem::take(&mut held_after));
            }
            Action::MouseUp { button } => {
                let bit = button_bit(*button)?;
                pointer.mask &= !(1 << bit);
                out.extend_from_slice(&proto::pointer_event(pointer.mask, pointer.x, pointer.y));
                held_after = pointer.held_with.remove(&bit).unwrap_or_default();
            }
            Action::Move { x, y, .. } => {
                (pointer.x, pointer.y) = at(Point::new(*x, *y));
                out.extend_from_slice(&proto::pointer_event(pointer.mask, pointer.x, pointer.y));
            }
            Action::Drag { path, button, .. } => {
                let Some((&first, rest)) = path.split_first() else {
                    return Err(VncError::Invalid("drag needs a path".into()));
                };
                let bit = button_bit(*button)?;
                (pointer.x, pointer.y) = at(first);
                out.extend_from_slice(&proto::pointer_event(pointer.mask, pointer.x, pointer.y));
                self.send(std::mem::take(&mut out)).await?;
                pointer.mask |= 1 << bit;
                self.send(proto::pointer_event(pointer.mask, pointer.x, pointer.y).to_vec()).await?;
                tokio::time::sleep(DRAG_DWELL).await;
                let mut from = first;
                for &to in rest {
                    for p in interpolate(from, to) {
                        (pointer.x, pointer.y) = at(p);
                        self.send(proto::pointer_event(pointer.mask, pointer.x, pointer.y).to_vec()).await?;
                        tokio::time::sleep(DRAG_STEP).await;
                    }
                    tokio::time::sleep(DRAG_DWELL).await;
                    from = to;
                }
                pointer.mask &= !(1 << bit);
                out.extend_from_slice(&proto::pointer_event(pointer.mask, pointer.x, pointer.y));
            }
            Action::Scroll { x, y, scroll_x, scroll_y, .. } => {
                (pointer.x, pointer.y) = at(Point::new(*x, *y));
                out.extend_from_slice(&proto::pointer_event(pointer.mask, pointer.x, pointer.y));
                let vertical = notches(*scroll_y);
                let horizontal = notches(*scroll_x);
                // Wheel buttons 4 (up), 5 (down), 6 (left), 7 (right) are mask bits 3..=6.
                click(&mut out, &pointer, if vertical > 0 { 4 } else { 3 }, vertical.unsigned_abs() as usize);
                click(&mut out, &pointer, if horizontal > 0 { 6 } else { 5 }, horizontal.unsigned_abs() as usize);
                report.message = Some(format!(
                    "scrolled {vertical} notch(es) vertically and {horizontal} horizontally ({PIXELS_PER_NOTCH} px per notch)"
                ));
            }
            Action::Type { text } => {
                let mut chars = text.chars().peekable();
                while let Some(c) = chars.next() {
                    if c == '\r' && chars.peek() == Some(&'\n') {
                        continue;
                    }
                    let keysym = Key::from_char(c).keysym;
                    let outside_ascii = (0x7f..0xff00).contains(&keysym) || keysym >= 0x0100_0000;
                    let first_use = outside_ascii && !pointer.typed.contains(&keysym);
                    if first_use {
                        // Announced by a release first: the X server drops the release of a key that is not
                        // down, so it types nothing, but x11vnc adds the keysym to the keymap on it. Apps
                        // then meet the new mapping before the key: Tk translates a key when it reads it,
                        // before it handles the mapping notification read with it, and lost `ü` to that.
                        out.extend_from_slice(&proto::key_event(false, keysym));
                        self.send(std::mem::take(&mut out)).await?;
                        tokio::time::sleep(NEW_KEYSYM_SETTLE).await;
                    }
                    // An upper-case letter outside ASCII goes with Shift held: a server that adds the
                    // keysym to its keymap as a lone symbol (x11vnc -add_keysyms) would otherwise type its
                    // lower case, X deriving the pair from the one symbol.
                    let shift = !c.is_ascii() && c.is_uppercase() && c.to_lowercase().ne(std::iter::once(c));
                    if shift {
                        out.extend_from_slice(&proto::key_event(true, SHIFT_L));
                    }
                    out.extend_from_slice(&proto::key_event(true, keysym));
                    out.extend_from_slice(&proto::key_event(false, keysym));
                    if shift {
                        out.extend_from_slice(&proto::key_event(false, SHIFT_L));
                    }
                    if first_use {
                        pointer.typed.insert(keysym);
                        self.send(std::mem::take(&mut out)).await?;
                        tokio::time::sleep(NEW_KEYSYM_SETTLE).await;
                    }
                }
            }
            Action::Keypress { .. } => {
                let keys = keysyms(action)?;
                for &k in &keys {
                    out.extend_from_slice(&proto::key_event(true, k));
                }
                for &k in keys.iter().rev() {
                    out.extend_from_slice(&proto::key_event(false, k));
                }
            }
            Action::CursorPosition {} => {
                report.cursor = Some(Point::new(i32::from(pointer.x), i32::from(pointer.y)));
            }
            Action::HoldKey { .. }
            | Action::Wait { .. }
            | Action::Screenshot {}
            | Action::Zoom { .. }
            | Action::Navigate { .. }
            | Action::Back {}
            | Action::Forward {}
            | Action::Reload {} => {
                return Err(VncError::Invalid(format!("{} is not sent as input", action.kind())));
            }
        }
        for &k in held_after.iter().rev() {
            out.extend_from_slice(&proto::key_event(false, k));
        }
        if !out.is_empty() {
            self.send(out).await?;
        }
        Ok(report)
    }

    async fn hold_key(&self, action: &Action, duration_ms: u64) -> Result<(), VncError> {
        let keys = keysyms(action)?;
        let mut down = Vec::new();
        for &k in &keys {
            down.extend_from_slice(&proto::key_event(true, k));
        }
        let mut up = Vec::new();
        for &k in keys.iter().rev() {
            up.extend_from_slice(&proto::key_event(false, k));
        }
        self.send(down).await?;
        // Released from a task of its own, so that the keys come up even if this call is abandoned.
        let writer = self.shared.writer.lock().ok().and_then(|w| w.clone());
        let address = self.config.address.clone();
        let release = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(duration_ms)).await;
            let (done, written) = oneshot::channel();
            let sent = writer.is_some_and(|w| w.send(Outgoing { bytes: up, done: Some(done), fence: false }).is_ok());
            if sent && matches!(written.await, Ok(Ok(()))) {
                Ok(())
            } else {
                Err(VncError::Lost { address, reason: "the connection dropped while keys were held".into() })
            }
        });
        release.await.map_err(|e| VncError::Lost {
            address: self.config.address.clone(),
            reason: format!("the key release task failed: {e}"),
        })?
    }

    fn frame(&self) -> Result<Frame, VncError> {
        let fb = self.shared.framebuffer.lock().map_err(|_| VncError::Protocol {
            address: self.config.address.clone(),
            reason: "framebuffer lock poisoned".into(),
        })?;
        Frame::from_rgb(Size::new(fb.width, fb.height), fb.rgb.clone())
            .map_err(|e| VncError::Protocol { address: self.config.address.clone(), reason: e.to_string() })
    }

    fn size(&self) -> Size {
        self.shared.framebuffer.lock().map_or(Size::new(0, 0), |fb| Size::new(fb.width, fb.height))
    }
}

impl Drop for VncProvider {
    fn drop(&mut self) {
        self.shared.close();
    }
}

/// Adds `count` press/release pairs of mask bit `bit` at the pointer's position.
fn click(out: &mut Vec<u8>, pointer: &Pointer, bit: u8, count: usize) {
    for _ in 0..count {
        out.extend_from_slice(&proto::pointer_event(pointer.mask | (1 << bit), pointer.x, pointer.y));
        out.extend_from_slice(&proto::pointer_event(pointer.mask, pointer.x, pointer.y));
    }
}

/// The RFB pointer mask bit of a button (bit n is button n+1).
fn button_bit(button: MouseButton) -> Result<u8, VncError> {
    match button.x11_button() {
        b @ 1..=8 => Ok(b - 1),
        _ => Err(VncError::Invalid(
            "RFB pointer events carry buttons 1 to 8; the forward button (9) cannot be sent over VNC".into(),
        )),
    }
}

/// The keysyms of an action's keys (a chord, a held key, a click's modifiers), in order. With Shift among them
/// the others are sent shifted (`T`, `ISO_Left_Tab`, `!`), as a VNC viewer sends them: servers map a keysym
/// to a key and the modifiers it needs, so an unshifted `t` with Shift held makes x11vnc lift Shift and Xvnc
/// fake Caps Lock, and the application would see the chord without Shift.
fn keysyms(action: &Action) -> Result<Vec<u32>, VncError> {
    let keys = action.keys().map_err(|e| VncError::Invalid(e.to_string()))?;
    Ok(keys::chord_keys(&keys).iter().map(|k| k.keysym).collect())
}

#[async_trait]
impl ComputerProvider for VncProvider {
    fn kind(&self) -> &'static str {
        "vnc"
    }

    async fn screen_size(&self) -> Result<Size, ProviderError> {
        self.ready(self.config.reconnect_grace).await?;
        Ok(self.size())
    }

    async fn screenshot(&self) -> Result<Frame, ProviderError> {
        self.ready(self.config.reconnect_grace).await?;
        self.fenced(self.config.reconnect_grace).await?;
        Ok(self.frame()?)
    }

    async fn perform(&self, action: &Action) -> Result<ActionReport, ProviderError> {
        agentd_computer::provider::refuse_navigation("vnc", action)?;
        if let Some(report) = sleep_for(action).await {
            return Ok(report);
        }
        if matches!(action, Action::Screenshot {} | Action::Zoom { .. }) {
            return Err(ProviderError::Unsupported {
                provider: "vnc",
                action: action.kind(),
                reason: "the agent loop builds it from screenshot()".into(),
            });
        }
        self.ready(self.config.reconnect_grace).await?;
        check_action(action, self.size())?;
        if let Action::Click { button: MouseButton::Forward, .. }
        | Action::Drag { button: MouseButton::Forward, .. }
        | Action::MouseDown { button: MouseButton::Forward, .. }
        | Action::MouseUp { button: MouseButton::Forward } = action
        {
            return Err(ProviderError::Unsupported {
                provider: "vnc",
                action: action.kind(),
                reason: "RFB has no forward mouse button (button 9)".into(),
            });
        }
        let report = if let Action::HoldKey { duration_ms, .. } = action {
            self.hold_key(action, *duration_ms).await?;
            ActionReport::default()
        } else {
            self.input(action).await?
        };
        if action.is_input() {
            self.fence().await?;
        }
        Ok(report)
    }

    async fn health(&self) -> Result<(), ProviderError> {
        if self.is_connected() { Ok(()) } else { self.ready(Duration::ZERO).await.map_err(ProviderError::from) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buttons_map_to_mask_bits() {
        assert_eq!(button_bit(MouseButton::Left).unwrap(), 0);
        assert_eq!(button_bit(MouseButton::Middle).unwrap(), 1);
        assert_eq!(button_bit(MouseButton::Right).unwrap(), 2);
        assert_eq!(button_bit(MouseButton::Back).unwrap(), 7);
        assert!(button_bit(MouseButton::Forward).is_err());
    }

    #[test]
    fn clicks_press_and_release_at_the_pointer() {
        let pointer = Pointer { x: 10, y: 20, mask: 0b100, ..Pointer::default() };
        let mut out = Vec::new();
        click(&mut out, &pointer, 0, 2);
        assert_eq!(out.len(), 4 * 6);
        assert_eq!(&out[..6], &proto::pointer_event(0b101, 10, 20));
        assert_eq!(&out[6..12], &proto::pointer_event(0b100, 10, 20));
    }

    #[test]
    fn scroll_and_drag_helpers() {
        assert_eq!(notches(0), 0);
        assert_eq!(notches(-30), -1);
        assert_eq!(notches(250), 3);
        assert_eq!(notches(i32::MIN), -MAX_NOTCHES);
        let path = interpolate(Point::new(0, 0), Point::new(0, 100));
        assert_eq!(path.last(), Some(&Point::new(0, 100)));
        assert_eq!(path.len(), 5);
    }

    #[test]
    fn the_password_is_not_printed() {
        let config = VncConfig::new("h:1", Some("hunter2".into()));
        assert!(!format!("{config:?}").contains("hunter2"));
    }
}
