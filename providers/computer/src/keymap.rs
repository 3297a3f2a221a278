//! An X server's keyboard mapping as an XTest provider sees it: which keycode (and whether Shift) types a
//! keysym, and the spare keycodes it borrows for keysyms the layout lacks. Shared by the X11 provider and
//! the portable provider on X11, which own the connection this state describes.
//!
//! XTest injects keycodes, not keysyms, so every key name (already an X keysym, from the shared table in
//! `agentd_computer::keys`) is looked up here. A keysym in the first column of a keycode is typed by that
//! keycode alone, one in the second column with Shift. A keysym the layout does not have (`é`, `€`, `日` on
//! a US layout) is written onto a *spare* keycode — one the layout leaves empty — with
//! `ChangeKeyboardMapping`, as xdotool does.
//!
//! The hazard of remapping: a client translates a keycode to a keysym when it *reads* the key event, using
//! the mapping of that moment, so reassigning a keycode while a client still has unread events for it
//! types the wrong character. The spares are therefore used least-recently-used first, a typing run maps all
//! the keysyms it needs before its first key event, and a spare is only reassigned once it has been idle for
//! [`REUSE_AFTER`] and applications have drawn and gone quiet since ([`QuietWait`]: the caller waits when
//! it must). Mappings are left in place afterwards, so repeated characters cost nothing.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a spare keycode must have been idle before it may be given another keysym.
pub const REUSE_AFTER: Duration = Duration::from_millis(150);
/// How long the screen must stay unchanged before a spare keycode is reassigned mid-text.
pub const QUIET: Duration = Duration::from_millis(80);
/// The pause after borrowing spare keycodes, before the keys that use them. Tk translates a key event into
/// a character when it *reads* the event from the connection, but handles the mapping notification read in
/// the same batch only afterwards, when it dispatches its queue: a key that arrives right behind its
/// mapping is translated with the keycode's old symbol (nothing, on an empty spare). The pause lets the app
/// read and handle the notification before the key arrives; no X request tells when it has.
pub const REMAP_SETTLE: Duration = Duration::from_millis(50);
/// How long to wait for an application that draws nothing in answer to typing.
pub const NO_ECHO_WAIT: Duration = Duration::from_millis(300);
/// The longest wait for that quiet (a screen that never stops changing: a video, a clock).
pub const QUIET_MAX: Duration = Duration::from_secs(3);

const NO_SYMBOL: u32 = 0;

/// Where a keysym is: the keycode, and whether Shift must be held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyPlace {
    pub keycode: u8,
    pub shift: bool,
}

#[derive(Debug, Clone)]
struct Spare {
    keycode: u8,
    keysym: u32,
    last_used: Option<Instant>,
}

/// A copy of the server's keyboard mapping plus the spare keycodes this provider owns.
#[derive(Debug, Clone)]
pub struct Keymap {
    min_keycode: u8,
    per_keycode: usize,
    /// `per_keycode` keysyms for every keycode from `min_keycode` up.
    keysyms: Vec<u32>,
    /// Where each keysym of the layout (not of the spares) is, first column preferred.
    index: HashMap<u32, KeyPlace>,
    spares: Vec<Spare>,
}

/// A keysym to write onto a spare keycode before typing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remap {
    pub keycode: u8,
    pub keysym: u32,
}

impl Keymap {
    /// Builds the map from a `GetKeyboardMapping` reply covering `min_keycode` onwards. Keycodes with no
    /// symbol at all become this provider's spares, and so do keycodes holding one character keysym in
    /// every column that has one (what a borrowed spare looks like after the server's XKB conversion: left
    /// behind by an agentd that did not exit cleanly). Layout keys never look like that: a character key
    /// has a different shifted symbol, and keys with one symbol everywhere (BackSpace, F1) are not
    /// characters.
    pub fn new(min_keycode: u8, per_keycode: u8, keysyms: Vec<u32>) -> Self {
        let per_keycode = usize::from(per_keycode.max(1));
        let spares = keysyms
            .chunks(per_keycode)
            .enumerate()
            .filter_map(|(i, syms)| {
                let keycode = u8::try_from(usize::from(min_keycode) + i).ok()?;
                let first = syms.first().copied().unwrap_or(NO_SYMBOL);
                let empty = syms.iter().all(|&s| s == NO_SYMBOL);
                let is_char = matches!(first, 0xa0..=0xff | 0x0100_0000..=0x0110_ffff);
                let borrowed =
                    is_char && syms.get(1) == Some(&first) && syms.iter().all(|&s| s == first || s == NO_SYMBOL);
                (empty || borrowed).then_some(Spare { keycode, keysym: first, last_used: None })
            })
            .collect();
        let mut map = Self { min_keycode, per_keycode, keysyms, index: HashMap::new(), spares };
        map.reindex();
        map
    }

    fn reindex(&mut self) {
        self.index.clear();
        for column in 0..2.min(self.per_keycode) {
            for (i, syms) in self.keysyms.chunks(self.per_keycode).enumerate() {
                let Ok(keycode) = u8::try_from(usize::from(self.min_keycode) + i) else {
                    break;
                };
                let keysym = column_keysym(syms, column);
                if keysym == NO_SYMBOL || self.spares.iter().any(|s| s.keycode == keycode) {
                    continue;
                }
                self.index.entry(keysym).or_insert(KeyPlace { keycode, shift: column == 1 });
            }
        }
    }

    /// Replaces the layout after a `MappingNotify` (someone changed the keyboard), keeping the spares this
    /// provider owns. What a spare holds is taken from the server: a keycode we own that holds one character
    /// keysym in every column (what a borrowed spare looks like) or nothing keeps being ours with what it
    /// holds now — the server's word is the truth, whoever wrote it, so a key is never pressed for a
    /// character its keycode no longer holds; one that holds anything else was taken over by another client
    /// (a layout change): it is given up.
    pub fn refresh(&mut self, min_keycode: u8, per_keycode: u8, keysyms: Vec<u32>) {
        let fresh = Keymap::new(min_keycode, per_keycode, keysyms);
        let owned: Vec<u8> = self.spares.iter().map(|s| s.keycode).collect();
        self.min_keycode = fresh.min_keycode;
        self.per_keycode = fresh.per_keycode;
        self.keysyms = fresh.keysyms;
        let held = |keycode: u8| fresh.spares.iter().find(|s| s.keycode == keycode).map(|s| s.keysym);
        self.spares.retain_mut(|spare| match held(spare.keycode) {
            Some(keysym) => {
                if keysym != spare.keysym {
                    spare.keysym = keysym;
                    spare.last_used = None;
                }
                true
            }
            None => false,
        });
        for spare in fresh.spares {
            if !owned.contains(&spare.keycode) {
                self.spares.push(spare);
            }
        }
        self.reindex();
    }

    pub fn per_keycode(&self) -> u8 {
        self.per_keycode as u8
    }

    pub fn spare_count(&self) -> usize {
        self.spares.len()
    }

    /// Where `keysym` is typed from, if the layout or a spare already has it.
    pub fn find(&self, keysym: u32) -> Option<KeyPlace> {
        if let Some(spare) = self.spares.iter().find(|s| s.keysym == keysym) {
            return Some(KeyPlace { keycode: spare.keycode, shift: false });
        }
        self.index.get(&keysym).copied()
    }

    /// Whether the layout itself (not a borrowed spare) has `keysym`. A run of text may hold at most as many
    /// distinct keysyms the layout lacks as there are spares.
    pub fn in_layout(&self, keysym: u32) -> bool {
        self.index.contains_key(&keysym)
    }

    /// How many keysyms from the start of `keysyms` fit in one typing run: the longest run whose keysyms
    /// outside the layout (on a spare already or not) fit in the spares at once. 0 when the first keysym is
    /// outside the layout and there is no spare.
    pub fn fitting_run(&self, keysyms: &[u32]) -> usize {
        let mut on_spares: Vec<u32> = Vec::new();
        for (i, &keysym) in keysyms.iter().enumerate() {
            if !self.in_layout(keysym) && !on_spares.contains(&keysym) {
                if on_spares.len() == self.spares.len() {
                    return i;
                }
                on_spares.push(keysym);
            }
        }
        keysyms.len()
    }

    /// Chooses spares for every keysym of `needed` the layout lacks, least recently used first, never one
    /// that holds a keysym of `needed`. Returns the remaps to send (in order; nothing is changed here: each
    /// is [`assign`](Self::assign)ed as it is sent) and the moment the oldest reassigned spare becomes safe
    /// to reuse (`None`: already safe), or `Err(n)` when `needed` lacks more keysyms than there are spares
    /// (`n` spares exist).
    pub fn plan(&self, needed: &[u32]) -> Result<(Vec<Remap>, Option<Instant>), usize> {
        let mut missing: Vec<u32> = Vec::new();
        for &keysym in needed {
            if self.find(keysym).is_none() && !missing.contains(&keysym) {
                missing.push(keysym);
            }
        }
        let mut free: Vec<&Spare> = self.spares.iter().filter(|s| !needed.contains(&s.keysym)).collect();
        if missing.len() > free.len() {
            return Err(self.spares.len());
        }
        // Least recently used first; never used (None) before any use.
        free.sort_by_key(|s| s.last_used);
        let mut remaps = Vec::with_capacity(missing.len());
        let mut safe_at: Option<Instant> = None;
        for (keysym, spare) in missing.into_iter().zip(free) {
            if let Some(used) = spare.last_used {
                let at = used + REUSE_AFTER;
                safe_at = Some(safe_at.map_or(at, |s: Instant| s.max(at)));
            }
            remaps.push(Remap { keycode: spare.keycode, keysym });
        }
        let now = Instant::now();
        Ok((remaps, safe_at.filter(|at| *at > now)))
    }

    /// Records that `remap` was sent to the server: its spare holds its keysym from now on.
    pub fn assign(&mut self, remap: Remap, now: Instant) {
        if let Some(spare) = self.spares.iter_mut().find(|s| s.keycode == remap.keycode) {
            spare.keysym = remap.keysym;
            spare.last_used = Some(now);
        }
    }

    /// Records that `keycode` was just pressed (spares only; other keycodes are not tracked).
    pub fn touch(&mut self, keycode: u8, now: Instant) {
        if let Some(spare) = self.spares.iter_mut().find(|s| s.keycode == keycode) {
            spare.last_used = Some(now);
        }
    }

    /// Spares holding a keysym not pressed for `idle` (or never pressed since `idle` ago): the keymap can
    /// be given back its empty keycodes, for other tools (xdotool, enigo need one) and for after agentd.
    pub fn idle_spares(&self, now: Instant, idle: Duration) -> Vec<u8> {
        self.spares
            .iter()
            .filter(|s| s.keysym != NO_SYMBOL)
            .filter(|s| s.last_used.is_none_or(|at| now.saturating_duration_since(at) >= idle))
            .map(|s| s.keycode)
            .collect()
    }

    /// Records that `keycode` holds nothing again.
    pub fn clear(&mut self, keycode: u8) {
        if let Some(spare) = self.spares.iter_mut().find(|s| s.keycode == keycode) {
            spare.keysym = NO_SYMBOL;
            spare.last_used = None;
        }
    }

    /// The spares currently holding a keysym, to clear when the provider goes away.
    pub fn used_spares(&self) -> Vec<u8> {
        self.spares.iter().filter(|s| s.keysym != NO_SYMBOL).map(|s| s.keycode).collect()
    }
}

/// Waiting, before a spare keycode applications may still have to translate is reassigned, until they have
/// probably read the input sent so far: until `earliest`, then until something was drawn since the wait
/// began and the screen has been quiet for [`QUIET`] (an application draws once it has handled its queued
/// events). An application that draws nothing in answer (a password field, no echo) is waited for
/// [`NO_ECHO_WAIT`]; a screen that never stops changing (a video) at most [`QUIET_MAX`]. Without the DAMAGE
/// extension only `earliest` and [`NO_ECHO_WAIT`] are waited for. The caller polls [`done`](Self::done)
/// after each round trip to the server.
#[derive(Debug, Clone, Copy)]
pub struct QuietWait {
    start: Instant,
    earliest: Instant,
    /// Drawings reported when the wait began.
    seen: u64,
}

/// What the server has reported of drawing: how many damage notifications so far, and when the last came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drawing {
    pub count: u64,
    pub last: Option<Instant>,
}

impl QuietWait {
    pub fn new(now: Instant, earliest: Instant, drawing: Option<Drawing>) -> Self {
        Self { start: now, earliest, seen: drawing.map_or(0, |d| d.count) }
    }

    /// Whether the wait is over at `now`, given what the server reported so far (`None`: no DAMAGE).
    pub fn done(&self, now: Instant, drawing: Option<Drawing>) -> bool {
        let waited = now.saturating_duration_since(self.start);
        if waited >= QUIET_MAX {
            return true;
        }
        if now < self.earliest {
            return false;
        }
        match drawing {
            Some(d) if d.count > self.seen => d.last.is_none_or(|at| now.saturating_duration_since(at) >= QUIET),
            _ => waited >= NO_ECHO_WAIT,
        }
    }
}

/// The keysym of `column` (0 or 1), applying the core protocol's rule that a lone lower-case letter
/// implies its upper case in the second column.
fn column_keysym(syms: &[u32], column: usize) -> u32 {
    let first = syms.first().copied().unwrap_or(NO_SYMBOL);
    let second = syms.get(1).copied().unwrap_or(NO_SYMBOL);
    match column {
        0 => first,
        _ if second != NO_SYMBOL => second,
        _ => upper_case(first).unwrap_or(NO_SYMBOL),
    }
}

/// The upper-case keysym of a lower-case Latin-1 letter keysym.
fn upper_case(keysym: u32) -> Option<u32> {
    match keysym {
        0x61..=0x7a => Some(keysym - 0x20),
        0xe0..=0xfe if keysym != 0xf7 => Some(keysym - 0x20),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plans `needed` and assigns every remap, as the session does once it has sent them.
    fn apply(map: &mut Keymap, needed: &[u32]) -> Result<(Vec<Remap>, Option<Instant>), usize> {
        let (remaps, wait) = map.plan(needed)?;
        for &remap in &remaps {
            map.assign(remap, Instant::now());
        }
        Ok((remaps, wait))
    }

    /// keycodes 10..=14: a/A, 1/!, (spare), Shift_L, (spare)
    fn sample() -> Keymap {
        Keymap::new(10, 2, vec![0x61, 0x41, 0x31, 0x21, 0, 0, 0xffe1, 0, 0, 0])
    }

    #[test]
    fn columns_choose_shift() {
        let map = sample();
        assert_eq!(map.find(0x61), Some(KeyPlace { keycode: 10, shift: false }));
        assert_eq!(map.find(0x41), Some(KeyPlace { keycode: 10, shift: true }));
        assert_eq!(map.find(0x21), Some(KeyPlace { keycode: 11, shift: true }));
        assert_eq!(map.find(0xffe1), Some(KeyPlace { keycode: 13, shift: false }));
        assert_eq!(map.find(0xe9), None);
        assert_eq!(map.spare_count(), 2);
    }

    #[test]
    fn idle_spares_are_given_back() {
        let mut map = sample();
        apply(&mut map, &[0xe9, 0xea]).unwrap();
        let now = Instant::now();
        assert!(map.idle_spares(now, Duration::from_secs(5)).is_empty());
        map.touch(12, now - Duration::from_secs(10));
        assert_eq!(map.idle_spares(now, Duration::from_secs(5)), vec![12]);
        map.clear(12);
        assert_eq!(map.find(0xe9), None);
        assert_eq!(map.used_spares(), vec![14]);
    }

    #[test]
    fn spares_left_behind_are_reclaimed() {
        // keycode 8: a normal key; 9: é in every column (a borrowed spare of an earlier run); 10: empty;
        // 11: BackSpace everywhere (a layout key, not a character).
        let map = Keymap::new(8, 3, vec![0x61, 0x41, 0x61, 0xe9, 0xe9, 0, 0, 0, 0, 0xff08, 0xff08, 0xff08]);
        assert_eq!(map.spare_count(), 2);
        assert_eq!(map.find(0xe9), Some(KeyPlace { keycode: 9, shift: false }));
        assert_eq!(map.used_spares(), vec![9]);
    }

    #[test]
    fn a_run_holds_as_many_keysyms_outside_the_layout_as_there_are_spares() {
        let mut map = sample();
        // a é a ê ë: é and ê fit in the two spares, ë does not.
        assert_eq!(map.fitting_run(&[0x61, 0xe9, 0x61, 0xea, 0xe9, 0xeb]), 5);
        assert_eq!(map.fitting_run(&[0x61, 0x41, 0x21]), 3);
        assert_eq!(map.fitting_run(&[]), 0);
        apply(&mut map, &[0xe9]).unwrap();
        assert_eq!(map.fitting_run(&[0xe9, 0xea, 0xeb]), 2, "a keysym on a spare counts against the run");
        let bare = Keymap::new(8, 1, vec![0x61]);
        assert_eq!(bare.fitting_run(&[0xe9]), 0);
    }

    #[test]
    fn a_quiet_wait_ends_when_the_screen_drew_and_went_quiet() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let drawn = |count, at: Instant| Some(Drawing { count, last: Some(at) });
        let wait = QuietWait::new(t0, t0 + ms(100), drawn(3, t0));
        // Not before `earliest`, even after drawing.
        assert!(!wait.done(t0 + ms(99), drawn(4, t0 + ms(10))));
        // Drew since the start: quiet for QUIET after the last drawing.
        assert!(!wait.done(t0 + ms(150), drawn(4, t0 + ms(100))));
        assert!(wait.done(t0 + ms(180), drawn(4, t0 + ms(100))));
        // Nothing drawn since the start: the no-echo wait.
        assert!(!wait.done(t0 + ms(200), drawn(3, t0)));
        assert!(wait.done(t0 + NO_ECHO_WAIT, drawn(3, t0)));
        // Without DAMAGE: the no-echo wait after `earliest`.
        let blind = QuietWait::new(t0, t0, None);
        assert!(!blind.done(t0 + ms(299), None));
        assert!(blind.done(t0 + NO_ECHO_WAIT, None));
        // A screen that never goes quiet: at most QUIET_MAX.
        let busy = QuietWait::new(t0, t0, drawn(0, t0));
        let now = t0 + QUIET_MAX;
        assert!(busy.done(now, drawn(999, now)));
    }

    #[test]
    fn lone_lower_case_implies_upper() {
        let map = Keymap::new(8, 2, vec![0x62, 0]);
        assert_eq!(map.find(0x42), Some(KeyPlace { keycode: 8, shift: true }));
    }

    #[test]
    fn missing_keysyms_take_spares_and_stay() {
        let mut map = sample();
        let (remaps, wait) = apply(&mut map, &[0x61, 0xe9]).unwrap();
        assert_eq!(remaps, vec![Remap { keycode: 12, keysym: 0xe9 }]);
        assert_eq!(wait, None);
        assert_eq!(map.find(0xe9), Some(KeyPlace { keycode: 12, shift: false }));
        // Asking again needs nothing.
        assert_eq!(apply(&mut map, &[0xe9]).unwrap().0, vec![]);
        assert_eq!(map.used_spares(), vec![12]);
    }

    #[test]
    fn least_recently_used_spare_is_reassigned_and_waits() {
        let mut map = sample();
        let (first, _) = apply(&mut map, &[0xe9, 0x20ac]).unwrap();
        assert_eq!(first.len(), 2);
        let now = Instant::now();
        map.touch(12, now);
        map.touch(14, now - Duration::from_secs(1));
        // A third keysym evicts the spare used longest ago (14), which is already safe.
        let (remaps, wait) = apply(&mut map, &[0x1000041]).unwrap();
        assert_eq!(remaps, vec![Remap { keycode: 14, keysym: 0x1000041 }]);
        assert_eq!(wait, None);
        map.touch(14, Instant::now());
        map.touch(12, Instant::now());
        // Now both spares were used just now: a fourth keysym must wait.
        let (_, wait) = apply(&mut map, &[0x1000042]).unwrap();
        assert!(wait.is_some());
    }

    #[test]
    fn spares_in_use_count_against_a_run() {
        let mut map = sample();
        apply(&mut map, &[0xe9]).unwrap();
        assert!(!map.in_layout(0xe9) && map.in_layout(0x61));
        // é is on a spare; with it, two new keysyms do not fit in two spares.
        assert_eq!(apply(&mut map, &[0xe9, 0xea, 0xeb]), Err(2));
        assert!(apply(&mut map, &[0xe9, 0xea]).is_ok());
    }

    #[test]
    fn too_many_missing_keysyms_is_reported() {
        let mut map = sample();
        assert_eq!(apply(&mut map, &[0xe9, 0xea, 0xeb]), Err(2));
        // A keysym of the same run is never evicted to make room for another.
        let mut map = sample();
        apply(&mut map, &[0xe9, 0xea]).unwrap();
        assert_eq!(apply(&mut map, &[0xe9, 0xea, 0xeb]), Err(2));
    }

    #[test]
    fn refresh_keeps_owned_spares() {
        let mut map = sample();
        apply(&mut map, &[0xe9]).unwrap();
        // The server now reports keycode 12 holding é (our own remap) and keycode 14 taken by someone else.
        map.refresh(10, 2, vec![0x61, 0x41, 0x31, 0x21, 0xe9, 0xe9, 0xffe1, 0, 0x63, 0]);
        assert_eq!(map.find(0xe9), Some(KeyPlace { keycode: 12, shift: false }));
        assert_eq!(map.spare_count(), 1);
        assert_eq!(map.find(0x63), Some(KeyPlace { keycode: 14, shift: false }));
    }

    /// A keymap read while a plan waits (before its remaps are sent) shows the spares' old keysyms: the
    /// plan starts from it, and a later read shows each remap as sent. (A plan that changed the spares
    /// before sending lost them to such a read on a fresh Xvfb: "keysym 0xe6 could not be mapped".)
    #[test]
    fn a_keymap_read_between_plan_and_send_loses_nothing() {
        let mut map = sample();
        apply(&mut map, &[0xe8, 0xea]).unwrap();
        // The server as it is: both spares hold what they were given.
        let server = |a: u32, b: u32| vec![0x61, 0x41, 0x31, 0x21, a, a, 0xffe1, 0, b, b];
        let (remaps, _) = map.plan(&[0xe6]).unwrap();
        assert_eq!(remaps.len(), 1);
        map.refresh(10, 2, server(0xe8, 0xea));
        assert_eq!(map.spare_count(), 2, "nothing was taken over");
        let (remaps, _) = map.plan(&[0xe6]).unwrap();
        let remap = remaps[0];
        map.assign(remap, Instant::now());
        let (a, b) = if remap.keycode == 12 { (0xe6, 0xea) } else { (0xe8, 0xe6) };
        map.refresh(10, 2, server(a, b));
        assert_eq!(map.find(0xe6), Some(KeyPlace { keycode: remap.keycode, shift: false }));
    }

    /// Another client writing a borrowed-looking keysym onto a spare we hold: the spare now holds that one.
    #[test]
    fn a_spare_rewritten_by_another_client_holds_what_the_server_says() {
        let mut map = sample();
        apply(&mut map, &[0xe9]).unwrap();
        let at = map.find(0xe9).map(|p| p.keycode);
        assert_eq!(at, Some(12));
        map.refresh(10, 2, vec![0x61, 0x41, 0x31, 0x21, 0xf1, 0xf1, 0xffe1, 0, 0, 0]);
        assert_eq!(map.find(0xe9), None, "é is no longer there");
        assert_eq!(map.find(0xf1), Some(KeyPlace { keycode: 12, shift: false }));
        assert_eq!(map.spare_count(), 2);
    }
}
