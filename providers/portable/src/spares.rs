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
//! Its start-over has a second hazard: the burst of keymap changes (every borrowed keycode emptied, one
//! written again) right before the key makes a busy application miss the last change, so the key comes out
//! as the keycode's old, empty symbol.
//!
//! [`Spares`] mirrors enigo's bookkeeping (which keysyms sit on borrowed keycodes, how many empty keycodes
//! the layout has) and says when the next key would make enigo start over. The worker then starts over
//! itself, apart from any key: it lets the keys already sent be read ([`REUSE_AFTER`] since the last key
//! event, as the X11 provider waits before it reassigns a spare keycode), drops enigo's connection (which
//! empties every keycode it borrowed), gives applications [`SETTLE`] to read those changes, and opens a new
//! one that finds every spare empty: the next key is then mapped alone, as on first use.

use std::collections::HashSet;
use std::time::{Duration, Instant};

/// How long the keys sent before enigo empties its borrowed keycodes are given to be read.
pub const REUSE_AFTER: Duration = Duration::from_millis(150);
/// How long applications are given to read the emptied keycodes before the next key is mapped.
pub const SETTLE: Duration = Duration::from_millis(30);

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

    /// Before a key with `keysym` is sent at `now`: `None` when enigo types it without emptying its
    /// borrowed keycodes, else how long to wait before starting over. Notes the key as sent (after the
    /// start-over: it then holds that keysym alone).
    pub fn before_key(&mut self, keysym: u32, now: Instant) -> Option<Duration> {
        let mut start_over = None;
        if !self.layout.contains(&keysym) && !self.borrowed.contains(&keysym) {
            // With nothing to borrow there is nothing to start over: enigo says it cannot map the key.
            if self.borrowed.len() >= self.capacity && self.capacity > 0 {
                // enigo empties every borrowed keycode before it borrows one again.
                self.borrowed.clear();
                let since = self.last_key.map_or(REUSE_AFTER, |last| now.saturating_duration_since(last));
                start_over = Some(REUSE_AFTER.saturating_sub(since));
            }
            self.borrowed.insert(keysym);
        }
        self.last_key = Some(now + start_over.unwrap_or_default());
        start_over
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
    fn only_the_key_that_makes_enigo_start_over_starts_over() {
        let mut s = spares();
        let t0 = Instant::now();
        // Layout keys and the first three borrowed keysyms go at once; a borrowed one again costs nothing.
        assert_eq!(s.before_key(0x61, t0), None);
        for (i, keysym) in [0xe9, 0x41, 0x20ac, 0xe9].into_iter().enumerate() {
            assert_eq!(s.before_key(keysym, t0 + Duration::from_millis(i as u64)), None, "{keysym:#x}");
        }
        // A fourth distinct one: enigo would empty all three, so the keys sent are given time to be read.
        let now = t0 + Duration::from_millis(10);
        assert_eq!(s.before_key(0xdf, now), Some(REUSE_AFTER - Duration::from_millis(7)));
        // It then holds only that one: two more go at once, the next start-over waits again.
        let later = now + REUSE_AFTER;
        assert_eq!(s.before_key(0xf6, later), None);
        assert_eq!(s.before_key(0xfc, later), None);
        assert_eq!(s.before_key(0xe4, later), Some(REUSE_AFTER));
        // Long after the last key, starting over needs no wait.
        let idle = later + REUSE_AFTER * 3;
        assert_eq!(s.before_key(0x41, idle), None);
        assert_eq!(s.before_key(0x42, idle), None);
        assert_eq!(s.before_key(0xe9, idle + REUSE_AFTER), Some(Duration::ZERO), "full, but idle long enough");
    }

    #[test]
    fn a_layout_without_spares_never_starts_over() {
        // Nothing to borrow: enigo fails to map the key and says so; there is nothing to start over.
        let mut s = Spares::new(9, 1, &[0x61]);
        assert_eq!(s.capacity(), 0);
        assert_eq!(s.before_key(0x61, Instant::now()), None);
        assert_eq!(s.before_key(0xe9, Instant::now()), None);
    }
}
