//! Pacing for enigo's borrowed keycodes on X11.
//!
//! XTest sends keycodes, so enigo's X backend types a key whose keysym is not in the first column of the
//! keyboard mapping (`é`, `€`, but also `G`, `:` and `?`: it looks at the first column only) by writing the
//! keysym onto a keycode the layout leaves empty, then pressing that keycode. It keeps what it wrote; when
//! every empty keycode is taken it empties them all at once and starts over. That is the hazard: an
//! application translates a key event into a character when it *reads* the event, with the mapping of that
//! moment, so a keycode emptied while the application still has unread events for it types nothing — the
//! lost character the fidelity suite saw on a loaded machine.
//!
//! [`Spares`] mirrors enigo's bookkeeping (which keysyms sit on borrowed keycodes, how many empty keycodes
//! the layout has) and says when the next key would make enigo start over; the worker then lets the keys
//! already sent be read first: it waits until [`REUSE_AFTER`] has passed since the last key event, as the
//! X11 provider does before it reassigns a spare keycode.

use std::collections::HashSet;
use std::time::{Duration, Instant};

/// How long the keys sent before enigo empties its borrowed keycodes are given to be read.
pub const REUSE_AFTER: Duration = Duration::from_millis(150);

/// What enigo's X backend holds on the keycodes it borrowed, as far as this provider can tell.
#[derive(Debug, Clone)]
pub struct Spares {
    /// The keysyms enigo finds without borrowing: the first column of the mapping.
    layout: HashSet<u32>,
    /// How many keycodes enigo may borrow before it starts over.
    capacity: usize,
    /// The keysyms it holds on borrowed keycodes now.
    borrowed: HashSet<u32>,
    last_key: Option<Instant>,
}

impl Spares {
    /// From a keyboard mapping (`GetKeyboardMapping` from `min_keycode` on, `per_keycode` keysyms each),
    /// with enigo's rules: the first column is the layout, and a keycode with no symbol at all (never 8) is
    /// one it may borrow.
    pub fn new(min_keycode: u8, per_keycode: u8, keysyms: &[u32]) -> Self {
        let per = usize::from(per_keycode.max(1));
        let mut layout = HashSet::new();
        let mut capacity = 0;
        for (i, syms) in keysyms.chunks(per).enumerate() {
            let keycode = usize::from(min_keycode) + i;
            if syms.iter().all(|&s| s == 0) {
                if keycode != 8 {
                    capacity += 1;
                }
                continue;
            }
            if let Some(&first) = syms.first().filter(|&&s| s != 0) {
                layout.insert(first);
            }
        }
        Self { layout, capacity, borrowed: HashSet::new(), last_key: None }
    }

    /// Before a key with `keysym` is sent at `now`: how long to wait first (zero unless enigo is about to
    /// empty its borrowed keycodes). Notes the key as sent.
    pub fn before_key(&mut self, keysym: u32, now: Instant) -> Duration {
        let mut wait = Duration::ZERO;
        if !self.layout.contains(&keysym) && !self.borrowed.contains(&keysym) {
            if self.borrowed.len() >= self.capacity {
                // enigo empties every borrowed keycode before it borrows one again.
                self.borrowed.clear();
                if let Some(last) = self.last_key {
                    wait = REUSE_AFTER.saturating_sub(now.saturating_duration_since(last));
                }
            }
            self.borrowed.insert(keysym);
        }
        self.last_key = Some(now + wait);
        wait
    }

    /// How many keycodes enigo may borrow.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

/// The mapping of the X display in `DISPLAY`, when there is one (not on Wayland without XWayland, macOS or
/// Windows): `None` leaves typing unpaced.
#[cfg(target_os = "linux")]
pub fn of_display() -> Option<Spares> {
    use x11rb::connection::Connection;
    use x11rb::protocol::xproto::ConnectionExt;

    let (conn, _) = x11rb::connect(None).ok()?;
    let setup = conn.setup();
    let (min, max) = (setup.min_keycode, setup.max_keycode);
    let reply = conn.get_keyboard_mapping(min, max.saturating_sub(min).saturating_add(1)).ok()?.reply().ok()?;
    Some(Spares::new(min, reply.keysyms_per_keycode, &reply.keysyms))
}

#[cfg(not(target_os = "linux"))]
pub fn of_display() -> Option<Spares> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keycodes 8..=13: 8 empty (never borrowed), 9 `a A`, 10 empty, 11 `b B`, 12 and 13 empty.
    fn spares() -> Spares {
        let a = 0x61;
        let b = 0x62;
        Spares::new(8, 2, &[0, 0, a, 0x41, 0, 0, b, 0x42, 0, 0, 0, 0])
    }

    #[test]
    fn the_layout_is_the_first_column_and_empty_keycodes_but_8_are_spare() {
        let s = spares();
        assert_eq!(s.capacity(), 3);
        assert!(s.layout.contains(&0x61) && s.layout.contains(&0x62));
        assert!(!s.layout.contains(&0x41), "enigo does not look past the first column: A is borrowed");
    }

    #[test]
    fn only_the_key_that_makes_enigo_start_over_waits() {
        let mut s = spares();
        let t0 = Instant::now();
        // Layout keys and the first three borrowed keysyms go at once; a borrowed one again costs nothing.
        assert_eq!(s.before_key(0x61, t0), Duration::ZERO);
        for (i, keysym) in [0xe9, 0x41, 0x20ac, 0xe9].into_iter().enumerate() {
            assert_eq!(s.before_key(keysym, t0 + Duration::from_millis(i as u64)), Duration::ZERO, "{keysym:#x}");
        }
        // A fourth distinct one: enigo empties all three first, so the keys sent are given time to be read.
        let now = t0 + Duration::from_millis(10);
        assert_eq!(s.before_key(0xdf, now), REUSE_AFTER - Duration::from_millis(7));
        // It then holds only that one: two more go at once, the next start-over waits again.
        let later = now + REUSE_AFTER;
        assert_eq!(s.before_key(0xf6, later), Duration::ZERO);
        assert_eq!(s.before_key(0xfc, later), Duration::ZERO);
        assert_eq!(s.before_key(0xe4, later), REUSE_AFTER);
        // Long after the last key, starting over needs no wait.
        let idle = later + REUSE_AFTER * 3;
        assert_eq!(s.before_key(0x41, idle), Duration::ZERO);
        assert_eq!(s.before_key(0x42, idle), Duration::ZERO);
        assert_eq!(s.before_key(0xe9, idle + REUSE_AFTER), Duration::ZERO, "full, but idle long enough");
    }
}
