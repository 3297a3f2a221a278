//! One X connection and everything done on it: geometry and monitors, capture, XTest input, the keymap,
//! and the events that keep them current. Blocking by design; it lives on the provider's worker thread.
//!
//! [`Session`] owns the connection for the provider's life and reopens it after the server went away (a
//! restarted Xvfb on the same display is picked up by the next call). [`X`] is one open connection:
//! - capture is `ShmGetImage` into a shared segment (or `GetImage`), cropped to the chosen monitor, converted
//!   to RGB; with the DAMAGE extension the last frame is reused while nothing was drawn since;
//! - input is XTest `FakeInput` on the same connection, so a capture after an action sees the action's
//!   effect on the server in order, with no second connection;
//! - after every action a round trip (`GetInputFocus`) flushes the requests and collects any X error they
//!   caused, so a rejected request is an error of the action that sent it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use agentd_computer::{Frame, Key, Point, Size};
use x11rb::connection::{Connection, RequestConnection};
use x11rb::errors::{ConnectionError, ReplyError, ReplyOrIdError};
use x11rb::protocol::Event;
use x11rb::protocol::damage::{self, ConnectionExt as _};
use x11rb::protocol::randr::{self, ConnectionExt as _};
use x11rb::protocol::shm::ConnectionExt as _;
use x11rb::protocol::xfixes::ConnectionExt as _;
use x11rb::protocol::xproto::{self, ConnectionExt as _, ImageFormat, ImageOrder};
use x11rb::protocol::xtest::{self, ConnectionExt as _};
use x11rb::rust_connection::RustConnection;

use crate::capture::ShmSegment;
use crate::error::LocalError;
use crate::pixels::PixelLayout;
use crate::{CaptureMethod, LocalConfig, MonitorInfo};
use agentd_computer::keymap::{Drawing, KeyPlace, Keymap, QuietWait, REMAP_SETTLE};

const SHIFT_L: u32 = 0xffe1;
/// How long a borrowed keycode keeps its keysym after its last use before it is emptied again.
pub const SPARE_IDLE: Duration = Duration::from_secs(5);

/// Why an operation on the connection failed, before it is told to the caller.
#[derive(Debug)]
pub(crate) enum XErr {
    /// The connection is broken: the server is gone.
    Connection(String),
    /// The server answered with an X error.
    Protocol(String),
    Local(LocalError),
}

impl From<ConnectionError> for XErr {
    fn from(e: ConnectionError) -> Self {
        XErr::Connection(e.to_string())
    }
}

impl From<ReplyError> for XErr {
    fn from(e: ReplyError) -> Self {
        match e {
            ReplyError::ConnectionError(e) => e.into(),
            ReplyError::X11Error(e) => {
                XErr::Protocol(format!("{:?} (request {}.{})", e.error_kind, e.major_opcode, e.minor_opcode))
            }
        }
    }
}

impl From<ReplyOrIdError> for XErr {
    fn from(e: ReplyOrIdError) -> Self {
        match e {
            ReplyOrIdError::ConnectionError(e) => e.into(),
            ReplyOrIdError::X11Error(e) => ReplyError::X11Error(e).into(),
            ReplyOrIdError::IdsExhausted => XErr::Protocol("X resource ids exhausted".into()),
        }
    }
}

impl From<LocalError> for XErr {
    fn from(e: LocalError) -> Self {
        XErr::Local(e)
    }
}

/// A rectangle of the root window (the chosen monitor).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Region {
    x: i16,
    y: i16,
    width: u16,
    height: u16,
}

/// The provider's connection for its whole life, reopened when the server went away.
pub(crate) struct Session {
    config: LocalConfig,
    display: String,
    x: Option<X>,
}

impl Session {
    pub fn new(config: LocalConfig, display: String) -> Self {
        Self { config, display, x: None }
    }

    /// Opens the connection now (used at start so that a wrong display fails the build, not step 1).
    pub fn open(&mut self) -> Result<(), LocalError> {
        self.run(|_| Ok(()))
    }

    /// Runs `f` on an open connection, opening it first if needed. A broken connection is dropped so that
    /// the next call opens a new one.
    pub fn run<T>(&mut self, f: impl FnOnce(&mut X) -> Result<T, XErr>) -> Result<T, LocalError> {
        if self.x.is_none() {
            self.x = Some(X::connect(&self.config, &self.display)?);
        }
        let Some(x) = self.x.as_mut() else {
            return Err(LocalError::WorkerStopped);
        };
        let result = x.pump().and_then(|()| f(x));
        match result {
            Ok(value) => Ok(value),
            Err(XErr::Connection(reason)) => {
                tracing::warn!(display = %self.display, %reason, "X connection lost");
                self.x = None;
                Err(LocalError::Gone { display: self.display.clone(), reason })
            }
            Err(XErr::Protocol(reason)) => Err(LocalError::Request(reason)),
            Err(XErr::Local(e)) => Err(e),
        }
    }

    /// Work done while no job comes: borrowed keycodes idle for [`SPARE_IDLE`] are emptied again.
    pub fn housekeeping(&mut self) {
        if self.x.is_some() {
            let _ = self.run(|x| x.release_idle_spares(SPARE_IDLE));
        }
    }

    /// Forgets the connection (after a panic left it in an unknown state).
    pub fn reset(&mut self) {
        self.x = None;
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(x) = self.x.take() {
            x.close();
        }
    }
}

/// One open X connection.
pub(crate) struct X {
    conn: RustConnection,
    display: String,
    monitor_index: Option<usize>,
    root: xproto::Window,
    root_size: Size,
    region: Region,
    monitor: MonitorInfo,
    layout: PixelLayout,
    method: CaptureMethod,
    shm: Option<ShmSegment>,
    has_randr_monitors: bool,
    /// The DAMAGE object on the root window, when the server has the extension.
    damage: Option<damage::Damage>,
    /// Hand out the last frame again while nothing was drawn (needs `damage`).
    reuse: bool,
    /// Something was drawn since the last capture (always true without DAMAGE).
    dirty: bool,
    /// When the last damage notification arrived: how long the screen has been quiet.
    last_damage: Option<Instant>,
    /// How many damage notifications have arrived (to see whether anything was drawn since a moment).
    damage_count: u64,
    last_frame: Option<Frame>,
    keymap: Keymap,
    geometry_stale: bool,
    keymap_stale: bool,
    /// An X error caused by a request sent without waiting for its outcome (XTest input).
    pending_error: Option<String>,
    buttons_down: BTreeSet<u8>,
    keys_down: Vec<u8>,
    /// Keys a `mouse_down` pressed with its button, released by the matching `mouse_up` (docs/task-file.md).
    pub held_with: BTreeMap<u8, Vec<u8>>,
}

impl X {
    fn connect(config: &LocalConfig, display: &str) -> Result<Self, LocalError> {
        let connect_error = |reason: String| LocalError::Connect { display: display.to_string(), reason };
        let (conn, screen_num) = x11rb::connect(Some(display)).map_err(|e| connect_error(e.to_string()))?;
        Self::setup(conn, screen_num, config, display).map_err(|e| match e {
            XErr::Connection(reason) | XErr::Protocol(reason) => connect_error(reason),
            XErr::Local(e) => e,
        })
    }

    fn setup(conn: RustConnection, screen_num: usize, config: &LocalConfig, display: &str) -> Result<Self, XErr> {
        let missing = |extension| XErr::Local(LocalError::MissingExtension { display: display.to_string(), extension });
        if conn.extension_information(xtest::X11_EXTENSION_NAME)?.is_none() {
            return Err(missing("XTEST"));
        }
        conn.xtest_get_version(2, 2)?.reply()?;

        let setup = conn.setup();
        let Some(screen) = setup.roots.get(screen_num) else {
            return Err(XErr::Protocol(format!("screen {screen_num} does not exist")));
        };
        let root = screen.root;
        let layout = pixel_layout(setup, screen)?;
        let (min_keycode, max_keycode) = (setup.min_keycode, setup.max_keycode);

        let has_randr = conn.extension_information(randr::X11_EXTENSION_NAME)?.is_some();
        let mut has_randr_monitors = false;
        if has_randr {
            let version = conn.randr_query_version(1, 5)?.reply()?;
            has_randr_monitors = (version.major_version, version.minor_version) >= (1, 5);
            conn.randr_select_input(
                root,
                randr::NotifyMask::SCREEN_CHANGE | randr::NotifyMask::CRTC_CHANGE | randr::NotifyMask::OUTPUT_CHANGE,
            )?;
        }
        conn.change_window_attributes(
            root,
            &xproto::ChangeWindowAttributesAux::new().event_mask(xproto::EventMask::STRUCTURE_NOTIFY),
        )?;

        let mut damage = None;
        if conn.extension_information(damage::X11_EXTENSION_NAME)?.is_some() {
            // DAMAGE requires the XFIXES version negotiation before use.
            conn.xfixes_query_version(5, 0)?.reply()?;
            conn.damage_query_version(1, 1)?.reply()?;
            let id = conn.generate_id()?;
            conn.damage_create(id, root, damage::ReportLevel::NON_EMPTY)?.check()?;
            damage = Some(id);
        }

        let keymap = load_keymap(&conn, min_keycode, max_keycode)?;
        let placeholder =
            MonitorInfo { index: 0, name: String::new(), x: 0, y: 0, width: 0, height: 0, primary: false };
        let mut x = X {
            conn,
            display: display.to_string(),
            monitor_index: config.monitor,
            root,
            root_size: Size::new(0, 0),
            region: Region { x: 0, y: 0, width: 0, height: 0 },
            monitor: placeholder,
            layout,
            method: config.capture,
            shm: None,
            has_randr_monitors,
            damage,
            reuse: config.reuse_unchanged,
            dirty: true,
            last_damage: None,
            damage_count: 0,
            last_frame: None,
            keymap,
            geometry_stale: false,
            keymap_stale: false,
            pending_error: None,
            buttons_down: BTreeSet::new(),
            held_with: BTreeMap::new(),
            keys_down: Vec::new(),
        };
        x.load_geometry()?;
        tracing::debug!(
            display = %x.display,
            size = %x.size(),
            monitor = %x.monitor.name,
            capture = ?x.capture_method(),
            spare_keycodes = x.keymap.spare_count(),
            "X connection open"
        );
        Ok(x)
    }

    /// Releases what this connection holds on the server: pressed buttons and keys, borrowed keycodes, the
    /// shared segment.
    fn close(mut self) {
        let _ = self.release_all();
        let per = self.keymap.per_keycode();
        for keycode in self.keymap.used_spares() {
            let empty = vec![0u32; usize::from(per)];
            let _ = self.conn.change_keyboard_mapping(1, keycode, per, &empty);
        }
        if let Some(shm) = self.shm.take() {
            shm.detach(&self.conn);
        }
        let _ = self.conn.flush();
    }

    /// The size of the chosen monitor: the space every coordinate is in.
    pub fn size(&self) -> Size {
        Size::new(u32::from(self.region.width), u32::from(self.region.height))
    }

    pub fn monitor(&self) -> MonitorInfo {
        self.monitor.clone()
    }

    /// Every monitor RandR reports (one spanning the screen without RandR 1.5).
    pub fn monitors(&self) -> Result<Vec<MonitorInfo>, XErr> {
        if !self.has_randr_monitors {
            return Ok(vec![MonitorInfo {
                index: 0,
                name: "screen".into(),
                x: 0,
                y: 0,
                width: self.root_size.width,
                height: self.root_size.height,
                primary: true,
            }]);
        }
        let reply = self.conn.randr_get_monitors(self.root, true)?.reply()?;
        let mut monitors = Vec::new();
        for (index, m) in reply.monitors.iter().enumerate() {
            let name = match self.conn.get_atom_name(m.name)?.reply() {
                Ok(reply) => String::from_utf8_lossy(&reply.name).into_owned(),
                Err(_) => format!("monitor-{index}"),
            };
            monitors.push(MonitorInfo {
                index,
                name,
                x: i32::from(m.x),
                y: i32::from(m.y),
                width: u32::from(m.width),
                height: u32::from(m.height),
                primary: m.primary,
            });
        }
        Ok(monitors)
    }

    /// The capture path in use (`Shm` or `GetImage`).
    pub fn capture_method(&self) -> CaptureMethod {
        match (self.method, &self.shm) {
            (CaptureMethod::Auto | CaptureMethod::Shm, Some(_)) => CaptureMethod::Shm,
            (CaptureMethod::Auto | CaptureMethod::Shm, None) => CaptureMethod::GetImage,
            (other, _) => other,
        }
    }

    /// Reads the root size and the chosen monitor, and sizes the shared segment for them.
    fn load_geometry(&mut self) -> Result<(), XErr> {
        let geometry = self.conn.get_geometry(self.root)?.reply()?;
        self.root_size = Size::new(u32::from(geometry.width), u32::from(geometry.height));
        let whole = MonitorInfo {
            index: 0,
            name: "screen".into(),
            x: 0,
            y: 0,
            width: self.root_size.width,
            height: self.root_size.height,
            primary: true,
        };
        let monitor = match self.monitor_index {
            None => whole,
            Some(index) => {
                let monitors = self.monitors()?;
                match monitors.get(index) {
                    Some(m) => m.clone(),
                    None => {
                        return Err(XErr::Local(LocalError::NoSuchMonitor {
                            display: self.display.clone(),
                            index,
                            count: monitors.len(),
                            names: monitors
                                .iter()
                                .map(|m| format!("{}={} {}x{}+{}+{}", m.index, m.name, m.width, m.height, m.x, m.y))
                                .collect::<Vec<_>>()
                                .join(", "),
                        }));
                    }
                }
            }
        };
        // Clip to the root window: capture outside it is an X error.
        let x0 = monitor.x.clamp(0, self.root_size.width as i32);
        let y0 = monitor.y.clamp(0, self.root_size.height as i32);
        let x1 = (monitor.x + monitor.width as i32).clamp(x0, self.root_size.width as i32);
        let y1 = (monitor.y + monitor.height as i32).clamp(y0, self.root_size.height as i32);
        self.region = Region { x: x0 as i16, y: y0 as i16, width: (x1 - x0) as u16, height: (y1 - y0) as u16 };
        self.monitor = monitor;
        self.last_frame = None;
        self.dirty = true;

        let needed = self.layout.stride(usize::from(self.region.width)) * usize::from(self.region.height);
        let fits = self.shm.as_ref().is_some_and(|s| s.size() >= needed);
        if matches!(self.method, CaptureMethod::Auto | CaptureMethod::Shm) && !fits && needed > 0 {
            if let Some(old) = self.shm.take() {
                old.detach(&self.conn);
            }
            self.shm = ShmSegment::attach(&self.conn, needed)?;
            if self.shm.is_none() && self.method == CaptureMethod::Shm {
                return Err(XErr::Local(LocalError::MissingExtension {
                    display: self.display.clone(),
                    extension: "MIT-SHM 1.2 (ShmAttachFd)",
                }));
            }
        }
        Ok(())
    }

    /// Reads every event that has arrived and applies it: damage, geometry and keymap changes, errors.
    pub fn pump(&mut self) -> Result<(), XErr> {
        let mut damaged = false;
        while let Some(event) = self.conn.poll_for_event()? {
            match event {
                Event::DamageNotify(_) => damaged = true,
                Event::RandrScreenChangeNotify(_) | Event::RandrNotify(_) => self.geometry_stale = true,
                Event::ConfigureNotify(e)
                    if e.window == self.root
                        && (u32::from(e.width) != self.root_size.width
                            || u32::from(e.height) != self.root_size.height) =>
                {
                    self.geometry_stale = true;
                }
                Event::MappingNotify(e) if e.request == xproto::Mapping::KEYBOARD => {
                    let ours = e.count == 1 && self.keymap.used_spares().contains(&e.first_keycode);
                    if !ours {
                        self.keymap_stale = true;
                    }
                }
                Event::Error(e) => {
                    self.pending_error =
                        Some(format!("{:?} (request {}.{})", e.error_kind, e.major_opcode, e.minor_opcode));
                }
                _ => {}
            }
        }
        if damaged && let Some(damage) = self.damage {
            self.dirty = true;
            self.last_damage = Some(Instant::now());
            self.damage_count += 1;
            // Empty the damage region so that the next drawing notifies again (`dirty` keeps the news for
            // the next capture).
            self.conn.damage_subtract(damage, x11rb::NONE, x11rb::NONE)?;
        }
        if self.geometry_stale {
            self.geometry_stale = false;
            self.load_geometry()?;
        }
        if self.keymap_stale {
            self.keymap_stale = false;
            let setup = self.conn.setup();
            let (min, max) = (setup.min_keycode, setup.max_keycode);
            let reply = self.conn.get_keyboard_mapping(min, max - min + 1)?.reply()?;
            self.keymap.refresh(min, reply.keysyms_per_keycode, reply.keysyms);
        }
        Ok(())
    }

    /// Waits until the server has processed every request sent so far, then applies the events that came
    /// with it; an X error caused by one of those requests becomes this call's error.
    pub fn finish(&mut self) -> Result<(), XErr> {
        self.conn.get_input_focus()?.reply()?;
        self.pump()?;
        match self.pending_error.take() {
            Some(error) => Err(XErr::Protocol(error)),
            None => Ok(()),
        }
    }

    // ---- capture ----------------------------------------------------------------------------------------

    /// A capture of the chosen monitor. With DAMAGE, the previous frame when nothing was drawn since.
    pub fn capture(&mut self) -> Result<Frame, XErr> {
        let reuse = self.reuse && self.damage.is_some();
        if reuse {
            // The round trip makes sure every damage event generated before now has been read.
            self.finish()?;
            if !self.dirty
                && let Some(frame) = &self.last_frame
            {
                return Ok(frame.clone());
            }
        }
        if let Some(damage) = self.damage {
            // Anything drawn after this request is processed raises a new notification.
            self.conn.damage_subtract(damage, x11rb::NONE, x11rb::NONE)?;
        }
        let Region { x, y, width, height } = self.region;
        let (w, h) = (usize::from(width), usize::from(height));
        let stride = self.layout.stride(w);
        let mut rgb = self.last_frame.take().map(Frame::into_rgb).unwrap_or_default();
        match (&self.shm, self.method) {
            (Some(shm), CaptureMethod::Auto | CaptureMethod::Shm) => {
                self.conn
                    .shm_get_image(self.root, x, y, width, height, !0, u8::from(ImageFormat::Z_PIXMAP), shm.seg, 0)?
                    .reply()?;
                self.layout.to_rgb(shm.bytes(stride * h), stride, w, h, &mut rgb)?;
            }
            _ => {
                let reply = self.conn.get_image(ImageFormat::Z_PIXMAP, self.root, x, y, width, height, !0)?.reply()?;
                self.layout.to_rgb(&reply.data, stride, w, h, &mut rgb)?;
            }
        }
        let frame =
            Frame::from_rgb(self.size(), rgb).map_err(|e| XErr::Local(LocalError::PixelFormat(e.to_string())))?;
        self.dirty = self.damage.is_none();
        if reuse {
            self.last_frame = Some(frame.clone());
        }
        Ok(frame)
    }

    // ---- pointer ----------------------------------------------------------------------------------------

    fn to_root(&self, p: Point) -> (i16, i16) {
        let x = (i32::from(self.region.x) + p.x).clamp(i16::MIN.into(), i16::MAX.into());
        let y = (i32::from(self.region.y) + p.y).clamp(i16::MIN.into(), i16::MAX.into());
        (x as i16, y as i16)
    }

    pub fn motion(&mut self, p: Point) -> Result<(), XErr> {
        let (x, y) = self.to_root(p);
        self.conn.xtest_fake_input(xproto::MOTION_NOTIFY_EVENT, 0, 0, self.root, x, y, 0)?;
        Ok(())
    }

    pub fn button(&mut self, button: u8, press: bool) -> Result<(), XErr> {
        let kind = if press { xproto::BUTTON_PRESS_EVENT } else { xproto::BUTTON_RELEASE_EVENT };
        self.conn.xtest_fake_input(kind, button, 0, x11rb::NONE, 0, 0, 0)?;
        if press {
            self.buttons_down.insert(button);
        } else {
            self.buttons_down.remove(&button);
        }
        Ok(())
    }

    pub fn cursor(&self) -> Result<Point, XErr> {
        let reply = self.conn.query_pointer(self.root)?.reply()?;
        Ok(Point::new(
            i32::from(reply.root_x) - i32::from(self.region.x),
            i32::from(reply.root_y) - i32::from(self.region.y),
        ))
    }

    // ---- keys -------------------------------------------------------------------------------------------

    pub fn key(&mut self, keycode: u8, press: bool) -> Result<(), XErr> {
        let kind = if press { xproto::KEY_PRESS_EVENT } else { xproto::KEY_RELEASE_EVENT };
        self.conn.xtest_fake_input(kind, keycode, 0, x11rb::NONE, 0, 0, 0)?;
        if press {
            self.keys_down.push(keycode);
        } else if let Some(i) = self.keys_down.iter().rposition(|&k| k == keycode) {
            self.keys_down.remove(i);
        }
        self.keymap.touch(keycode, Instant::now());
        Ok(())
    }

    /// Where each of `keysyms` is typed from, borrowing spare keycodes for the ones the layout lacks (and
    /// waiting, when a spare must be reassigned, until clients have had time to read its last use).
    pub fn place_keys(&mut self, keysyms: &[u32]) -> Result<Vec<KeyPlace>, XErr> {
        let too_many = |spares| {
            XErr::Local(LocalError::Invalid(format!(
                "more different characters missing from the keyboard layout at once than the X server has spare keycodes ({spares})"
            )))
        };
        // The wait comes before the plan that is sent: events read while waiting may change the keymap
        // (another client, or the server's own notifications), and the plan must start from what it is then.
        let mut waits = 0;
        let remaps = loop {
            let (remaps, safe_at) = self.keymap.plan(keysyms).map_err(too_many)?;
            match safe_at {
                Some(at) if waits < 3 => {
                    self.wait_until_quiet(at)?;
                    waits += 1;
                }
                _ => break remaps,
            }
        };
        let per = self.keymap.per_keycode();
        for &remap in &remaps {
            let keysyms = vec![remap.keysym; usize::from(per)];
            self.conn.change_keyboard_mapping(1, remap.keycode, per, &keysyms)?;
            // Assigned as sent: a keymap read after this request (the server answers in order) shows it.
            self.keymap.assign(remap, Instant::now());
            // One change at a time: a burst of keymap changes makes clients (Xlib's XKB map cache, seen with
            // Tk) miss all but the first, and later keys come out as the keycodes' old symbols.
            self.finish()?;
        }
        if !remaps.is_empty() {
            // Give clients a moment to read the mapping notifications before keys that need them arrive;
            // without it a busy client occasionally translated a new key with the keycode's old symbol.
            std::thread::sleep(REMAP_SETTLE);
        }
        keysyms
            .iter()
            .map(|&keysym| {
                self.keymap
                    .find(keysym)
                    .ok_or_else(|| XErr::Protocol(format!("keysym {keysym:#x} could not be mapped")))
            })
            .collect()
    }

    /// Waits until applications have probably read the input sent so far, before a spare keycode they may
    /// still have to translate is reassigned (see [`QuietWait`]).
    pub fn wait_until_quiet(&mut self, earliest: Instant) -> Result<(), XErr> {
        let wait = QuietWait::new(Instant::now(), earliest, self.drawing());
        loop {
            self.finish()?;
            if wait.done(Instant::now(), self.drawing()) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// What the server has reported of drawing, with DAMAGE.
    fn drawing(&self) -> Option<Drawing> {
        self.damage.map(|_| Drawing { count: self.damage_count, last: self.last_damage })
    }

    /// Lets applications see the pointer at its current position before the next event (motion
    /// compression would otherwise merge a path into its end point).
    pub fn dwell(&mut self, pause: Duration) -> Result<(), XErr> {
        self.finish()?;
        std::thread::sleep(pause);
        Ok(())
    }

    /// Empties the borrowed keycodes not used for `idle`.
    pub fn release_idle_spares(&mut self, idle: Duration) -> Result<(), XErr> {
        let idle_spares = self.keymap.idle_spares(Instant::now(), idle);
        if idle_spares.is_empty() {
            return Ok(());
        }
        let per = self.keymap.per_keycode();
        let empty = vec![0u32; usize::from(per)];
        for keycode in idle_spares {
            self.conn.change_keyboard_mapping(1, keycode, per, &empty)?;
            self.keymap.clear(keycode);
            self.finish()?;
        }
        Ok(())
    }

    /// The keycode of Shift (for characters in the second column of a keycode).
    fn shift_keycode(&mut self) -> Result<u8, XErr> {
        Ok(self.place_keys(&[SHIFT_L])?[0].keycode)
    }

    /// Presses `keys` in order (adding Shift before a key that needs it, unless the chord holds Shift).
    /// Returns the keycodes pressed, to release in reverse.
    pub fn press_chord(&mut self, keys: &[Key]) -> Result<Vec<u8>, XErr> {
        let keysyms: Vec<u32> = keys.iter().map(|k| k.keysym).collect();
        let places = self.place_keys(&keysyms)?;
        let holds_shift = keys.iter().any(|k| matches!(k.keysym, 0xffe1 | 0xffe2));
        let shift = self.shift_keycode()?;
        let mut pressed = Vec::new();
        for (key, place) in keys.iter().zip(places) {
            if place.shift && !holds_shift && !key.is_modifier() && !pressed.contains(&shift) {
                self.key(shift, true)?;
                pressed.push(shift);
            }
            self.key(place.keycode, true)?;
            pressed.push(place.keycode);
        }
        Ok(pressed)
    }

    pub fn release(&mut self, keycodes: &[u8]) -> Result<(), XErr> {
        for &keycode in keycodes.iter().rev() {
            self.key(keycode, false)?;
        }
        Ok(())
    }

    /// Types `text`: every character as its keysym, Shift where the layout wants it, spares for the rest.
    pub fn type_text(&mut self, text: &str) -> Result<(), XErr> {
        let mut keysyms = Vec::with_capacity(text.len());
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '\r' && chars.peek() == Some(&'\n') {
                continue;
            }
            keysyms.push(Key::from_char(c).keysym);
        }
        let shift = self.shift_keycode()?;
        let mut start = 0;
        while start < keysyms.len() {
            let end = start + self.keymap.fitting_run(&keysyms[start..]);
            if end == start {
                return Err(XErr::Local(LocalError::Invalid(format!(
                    "cannot type {:?}: the keyboard layout lacks it and the X server has no spare keycode",
                    char::from_u32(keysyms[start]).unwrap_or('?')
                ))));
            }
            let places = self.place_keys(&keysyms[start..end])?;
            for place in places {
                if place.shift {
                    self.key(shift, true)?;
                }
                self.key(place.keycode, true)?;
                self.key(place.keycode, false)?;
                if place.shift {
                    self.key(shift, false)?;
                }
            }
            self.conn.flush()?;
            start = end;
        }
        Ok(())
    }

    /// Releases every button and key this connection pressed and has not released.
    pub fn release_all(&mut self) -> Result<(), XErr> {
        self.held_with.clear();
        let keys = std::mem::take(&mut self.keys_down);
        for keycode in keys.into_iter().rev() {
            self.key(keycode, false)?;
        }
        let buttons: Vec<u8> = self.buttons_down.iter().copied().collect();
        for button in buttons {
            self.button(button, false)?;
        }
        self.conn.flush()?;
        Ok(())
    }

    #[cfg(feature = "xcap")]
    pub fn region_origin(&self) -> (i32, i32) {
        (i32::from(self.region.x), i32::from(self.region.y))
    }
}

fn load_keymap(conn: &RustConnection, min: u8, max: u8) -> Result<Keymap, XErr> {
    let reply = conn.get_keyboard_mapping(min, max - min + 1)?.reply()?;
    Ok(Keymap::new(min, reply.keysyms_per_keycode, reply.keysyms))
}

/// The layout of the root window's pixels, from the connection setup.
fn pixel_layout(setup: &xproto::Setup, screen: &xproto::Screen) -> Result<PixelLayout, XErr> {
    let depth = screen.root_depth;
    let visual = screen
        .allowed_depths
        .iter()
        .flat_map(|d| d.visuals.iter())
        .find(|v| v.visual_id == screen.root_visual)
        .ok_or_else(|| XErr::Local(LocalError::PixelFormat("root visual not found".into())))?;
    if visual.class != xproto::VisualClass::TRUE_COLOR && visual.class != xproto::VisualClass::DIRECT_COLOR {
        return Err(XErr::Local(LocalError::PixelFormat(format!(
            "root visual class {:?} (only TrueColor is decoded)",
            visual.class
        ))));
    }
    let format = setup
        .pixmap_formats
        .iter()
        .find(|f| f.depth == depth)
        .ok_or_else(|| XErr::Local(LocalError::PixelFormat(format!("no pixmap format for depth {depth}"))))?;
    Ok(PixelLayout::new(
        format.bits_per_pixel,
        setup.image_byte_order == ImageOrder::MSB_FIRST,
        visual.red_mask,
        visual.green_mask,
        visual.blue_mask,
    )?)
}
