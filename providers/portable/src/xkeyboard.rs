//! The keyboard of the X display, for typing on X11 without enigo's borrowed keycodes.
//!
//! XTest sends keycodes, so enigo's X backend types a key whose keysym is not in the first column of the
//! keyboard mapping (`é`, `€`, but also `G`, `:` and `^`: it looks at the first column only) by writing the
//! keysym onto an empty keycode and pressing it; when every empty keycode is taken it empties them all at
//! once. An application translates a key event into a character when it *reads* the event, with the mapping
//! of that moment, so a keycode emptied while it still has unread events for it types nothing: the lost `^`
//! the fidelity suite saw on a loaded machine, however long the pause before the emptying.
//!
//! On X11 this provider therefore places keys itself, as the X11 provider does and with the same
//! [`Keymap`]: a keysym of the layout is its keycode, with Shift for the second column (so ASCII never
//! borrows a keycode on a US layout); a keysym the layout lacks is written onto a spare keycode, least
//! recently used first, left there for the next time, and reassigned only once applications have drawn and
//! gone quiet since its last use ([`QuietWait`], over DAMAGE on this connection). enigo then sends the
//! keycodes as they are (`Keyboard::raw`), so it never remaps anything. The spares taken are emptied again
//! when the provider goes away.

use std::time::{Duration, Instant};

use agentd_computer::keymap::{Drawing, KeyPlace, Keymap, QuietWait, REMAP_SETTLE};
use x11rb::connection::{Connection, RequestConnection as _};
use x11rb::protocol::Event;
use x11rb::protocol::damage::{self, ConnectionExt as _};
use x11rb::protocol::xproto::{self, ConnectionExt as _};
use x11rb::rust_connection::RustConnection;

use crate::error::PortableError;

const SHIFT_L: u32 = 0xffe1;

/// This provider's connection to the X display, for the keyboard mapping and the damage it watches.
pub(crate) struct XKeyboard {
    conn: RustConnection,
    keymap: Keymap,
    damage: Option<damage::Damage>,
    damage_count: u64,
    last_damage: Option<Instant>,
}

fn x_error(e: impl std::fmt::Display) -> PortableError {
    PortableError::Input(format!("the X keyboard mapping: {e}"))
}

impl XKeyboard {
    /// The keyboard of the X display in `DISPLAY`; `None` without one (Wayland without XWayland): enigo
    /// then types as it does on other platforms.
    pub(crate) fn open() -> Option<Self> {
        let (conn, screen) = x11rb::connect(None).ok()?;
        match Self::with(conn, screen) {
            Ok(keyboard) => Some(keyboard),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the X keyboard mapping: enigo places the keys");
                None
            }
        }
    }

    fn with(conn: RustConnection, screen: usize) -> Result<Self, PortableError> {
        let root = conn.setup().roots.get(screen).map(|s| s.root).ok_or_else(|| x_error("no screen"))?;
        let keymap = load_keymap(&conn)?;
        let mut damage = None;
        if conn.extension_information(damage::X11_EXTENSION_NAME).map_err(x_error)?.is_some() {
            conn.damage_query_version(1, 1).map_err(x_error)?.reply().map_err(x_error)?;
            let id = conn.generate_id().map_err(x_error)?;
            conn.damage_create(id, root, damage::ReportLevel::NON_EMPTY).map_err(x_error)?.check().map_err(x_error)?;
            damage = Some(id);
        }
        Ok(Self { conn, keymap, damage, damage_count: 0, last_damage: None })
    }

    /// Reads the events that have arrived: drawing, and keyboard mapping changes made by others.
    fn pump(&mut self) -> Result<(), PortableError> {
        let mut damaged = false;
        let mut stale = false;
        while let Some(event) = self.conn.poll_for_event().map_err(x_error)? {
            match event {
                Event::DamageNotify(_) => damaged = true,
                Event::MappingNotify(e) if e.request == xproto::Mapping::KEYBOARD => {
                    stale |= !(e.count == 1 && self.keymap.used_spares().contains(&e.first_keycode));
                }
                _ => {}
            }
        }
        if damaged && let Some(damage) = self.damage {
            self.damage_count += 1;
            self.last_damage = Some(Instant::now());
            // Empty the damage region so that the next drawing notifies again.
            self.conn.damage_subtract(damage, x11rb::NONE, x11rb::NONE).map_err(x_error)?;
        }
        if stale {
            let setup = self.conn.setup();
            let (min, max) = (setup.min_keycode, setup.max_keycode);
            let reply = self
                .conn
                .get_keyboard_mapping(min, max.saturating_sub(min).saturating_add(1))
                .map_err(x_error)?
                .reply()
                .map_err(x_error)?;
            self.keymap.refresh(min, reply.keysyms_per_keycode, reply.keysyms);
        }
        Ok(())
    }

    /// Waits until the server has processed every request sent so far, then reads the events it sent.
    fn finish(&mut self) -> Result<(), PortableError> {
        self.conn.get_input_focus().map_err(x_error)?.reply().map_err(x_error)?;
        self.pump()
    }

    fn drawing(&self) -> Option<Drawing> {
        self.damage.map(|_| Drawing { count: self.damage_count, last: self.last_damage })
    }

    /// How many keysyms from the start of `keysyms` can be typed in one run (see [`Keymap::fitting_run`]).
    pub(crate) fn fitting_run(&mut self, keysyms: &[u32]) -> Result<usize, PortableError> {
        self.pump()?;
        Ok(self.keymap.fitting_run(keysyms))
    }

    /// Where each of `keysyms` is typed from, writing the ones the layout lacks onto spare keycodes (and
    /// waiting, when a spare must be reassigned, until applications have probably read its last use). The
    /// server has processed every change when this returns, so key events sent after it on any connection
    /// meet the new mapping.
    pub(crate) fn place(&mut self, keysyms: &[u32]) -> Result<Vec<KeyPlace>, PortableError> {
        self.finish()?;
        let too_many = |spares| {
            PortableError::Invalid(format!(
                "more different characters missing from the keyboard layout at once than the X server has spare keycodes ({spares})"
            ))
        };
        // The wait comes before the plan that is sent: events read while waiting may change the keymap.
        let mut waits = 0;
        let remaps = loop {
            let (remaps, safe_at) = self.keymap.plan(keysyms).map_err(too_many)?;
            match safe_at {
                Some(at) if waits < 3 => {
                    let wait = QuietWait::new(Instant::now(), at, self.drawing());
                    while !wait.done(Instant::now(), self.drawing()) {
                        std::thread::sleep(Duration::from_millis(10));
                        self.finish()?;
                    }
                    waits += 1;
                }
                _ => break remaps,
            }
        };
        let per = self.keymap.per_keycode();
        for &remap in &remaps {
            let symbols = vec![remap.keysym; usize::from(per)];
            self.conn.change_keyboard_mapping(1, remap.keycode, per, &symbols).map_err(x_error)?;
            self.keymap.assign(remap, Instant::now());
            // One change at a time: a burst of mapping changes makes clients (Xlib's XKB map cache) miss all
            // but the first.
            self.finish()?;
        }
        if !remaps.is_empty() {
            std::thread::sleep(REMAP_SETTLE);
        }
        keysyms
            .iter()
            .map(|&keysym| {
                self.keymap.find(keysym).ok_or_else(|| PortableError::Unsupported {
                    action: "type",
                    reason: format!("keysym {keysym:#x} could not be mapped"),
                })
            })
            .collect()
    }

    /// The keycode of Shift.
    pub(crate) fn shift(&mut self) -> Result<u8, PortableError> {
        Ok(self.place(&[SHIFT_L])?[0].keycode)
    }

    /// Notes that `keycode` was just pressed (a spare in use is not reassigned for a while).
    pub(crate) fn touch(&mut self, keycode: u8) {
        self.keymap.touch(keycode, Instant::now());
    }
}

impl Drop for XKeyboard {
    /// Empties the spares this provider wrote, for other tools and for after agentd.
    fn drop(&mut self) {
        if self.keymap.used_spares().is_empty() {
            return;
        }
        // The last keys typed may not have been read yet: the same wait as before a reassignment.
        let wait = QuietWait::new(Instant::now(), Instant::now(), self.drawing());
        while !wait.done(Instant::now(), self.drawing()) {
            std::thread::sleep(Duration::from_millis(10));
            if self.finish().is_err() {
                return;
            }
        }
        let per = self.keymap.per_keycode();
        let empty = vec![0u32; usize::from(per)];
        for keycode in self.keymap.used_spares() {
            if self.conn.change_keyboard_mapping(1, keycode, per, &empty).is_err() {
                return;
            }
        }
        let _ = self.conn.flush();
    }
}

fn load_keymap(conn: &RustConnection) -> Result<Keymap, PortableError> {
    let setup = conn.setup();
    let (min, max) = (setup.min_keycode, setup.max_keycode);
    let reply = conn
        .get_keyboard_mapping(min, max.saturating_sub(min).saturating_add(1))
        .map_err(x_error)?
        .reply()
        .map_err(x_error)?;
    Ok(Keymap::new(min, reply.keysyms_per_keycode, reply.keysyms))
}
