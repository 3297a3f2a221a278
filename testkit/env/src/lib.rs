//! What agentd's tests may expect of the machine they run on.
//!
//! - [`skip`]: the one switch for tests that need something outside the test (a PostgreSQL server, an S3
//!   store, an X display, Chromium, cua's computer-server…). Outside CI such a test says loudly that it
//!   skips and passes; with [`REQUIRE_ALL`] set (`scripts/test` sets it under CI) it fails instead, so a
//!   service that did not start can never turn into a green run that tested nothing.
//! - [`lock`]: named locks that hold across test processes as well as threads (advisory file locks), for
//!   resources several tests share — an X display. The test runner may run every test in a process of its
//!   own, so an in-process mutex would not keep two of them apart.
//! - [`room`]: a room two kinds of tests take turns in, as many of one kind at once as come, never the two
//!   kinds together — the machine's load: tests that load it beside each other, tests that need it quiet
//!   beside each other, never one beside the other.

use std::fmt::Display;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;

/// When this variable is set (to anything but empty or `0`), a test that cannot run fails instead of
/// skipping.
pub const REQUIRE_ALL: &str = "AGENTD_TEST_REQUIRE_ALL";

/// When this variable names a file, every skip appends one line to it (test, reason), so a script that runs
/// the suite can list the skips at the end where a person sees them.
pub const SKIP_LOG: &str = "AGENTD_TEST_SKIP_LOG";

/// Whether this run requires every test to run ([`REQUIRE_ALL`]).
pub fn required() -> bool {
    std::env::var(REQUIRE_ALL).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The calling test cannot run: `reason` says what is missing and how to get it. Fails the test when the run
/// requires every test ([`REQUIRE_ALL`]); otherwise prints `SKIPPED: …` and logs it ([`SKIP_LOG`]), and
/// the caller returns.
#[track_caller]
pub fn skip(reason: impl Display) {
    let test = std::thread::current().name().unwrap_or("?").to_string();
    if required() {
        panic!(
            "{test} cannot run: {reason} ({REQUIRE_ALL} is set: in this run a missing service is a failure, not a skip)"
        );
    }
    eprintln!("SKIPPED {test}: {reason}");
    if let Some(path) = std::env::var_os(SKIP_LOG).filter(|p| !p.is_empty())
        && let Ok(mut file) = OpenOptions::new().create(true).append(true).open(path)
    {
        let _ = writeln!(file, "{test}: {reason}");
    }
}

/// `Some(value)`, or `None` after [`skip`] (`name` is the environment variable that would have given it).
#[track_caller]
pub fn var_or_skip(name: &str, how: &str) -> Option<String> {
    let value = std::env::var(name).ok().filter(|v| !v.is_empty());
    if value.is_none() {
        skip(format_args!("{name} is not set ({how})"));
    }
    value
}

/// A held [`lock`]; released when dropped.
#[derive(Debug)]
pub struct Held {
    _file: File,
}

/// How a [`lock`] is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Alone: no other holder, shared or exclusive.
    Exclusive,
    /// Beside other shared holders, never beside an exclusive one.
    Shared,
}

/// Waits for the lock called `name` (a file under the temporary directory: the same for every test process
/// of the machine) and holds it until the returned guard is dropped. Locks of one process exclude each other
/// too (each call opens the file anew).
pub fn lock(name: &str, mode: Mode) -> Held {
    let dir = std::env::temp_dir().join("agentd-test-locks");
    let _ = std::fs::create_dir_all(&dir);
    let safe: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
    let path: PathBuf = dir.join(format!("{safe}.lock"));
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("cannot open the test lock {}: {e}", path.display()));
    let locked = match mode {
        Mode::Exclusive => file.lock(),
        Mode::Shared => file.lock_shared(),
    };
    locked.unwrap_or_else(|e| panic!("cannot take the test lock {}: {e}", path.display()));
    Held { _file: file }
}

/// Which side of a [`room`] a test is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    A,
    B,
}

/// Held while inside a [`room`]; leaves it when dropped.
#[derive(Debug)]
pub struct Inside {
    _side: Held,
}

/// Enters the room called `name` on `side`: waits until no holder of the other side is inside, and keeps them
/// out until this is dropped; holders of the same side come and go freely.
///
/// Three file locks make it: one per side, held shared by everyone inside on that side, and a gate. To enter,
/// a test takes the gate, joins its side (shared), waits for the other side to empty (an exclusive lock of the
/// other side's file, released at once), and leaves the gate. Whoever waits at the gate for the other side to
/// empty holds everyone else back, so that side can only empty, and the two sides take turns: no deadlock
/// and no side kept out for ever. A test that dies leaves the room with its process (the kernel drops its
/// locks). A test enters once: entering again from inside could wait for ever at the gate, behind a holder of
/// the other side who waits for this one to leave.
pub fn room(name: &str, side: Side) -> Inside {
    let (own, other) = match side {
        Side::A => ("a", "b"),
        Side::B => ("b", "a"),
    };
    let gate = lock(&format!("{name}-gate"), Mode::Exclusive);
    let inside = lock(&format!("{name}-{own}"), Mode::Shared);
    drop(lock(&format!("{name}-{other}"), Mode::Exclusive));
    drop(gate);
    Inside { _side: inside }
}

/// The machine's load, as a [`room`]: tests that load the machine (several daemons, kill loops) on one side,
/// tests whose checks are sensitive to timing (real desktops, browsers and the apps in them) on the other.
pub const MACHINE_LOAD: &str = "machine-load";

/// Enters [`MACHINE_LOAD`] on the loading side: the calling test loads the machine.
pub fn loading_the_machine() -> Inside {
    room(MACHINE_LOAD, Side::A)
}

/// Enters [`MACHINE_LOAD`] on the quiet side: the calling test's checks depend on timing.
pub fn on_a_quiet_machine() -> Inside {
    room(MACHINE_LOAD, Side::B)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn an_exclusive_lock_keeps_every_other_holder_out() {
        let name = format!("self-test-{}", std::process::id());
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let (name, inside, most) = (name.clone(), inside.clone(), most.clone());
                std::thread::spawn(move || {
                    let mode = if i % 2 == 0 { Mode::Exclusive } else { Mode::Shared };
                    let _held = lock(&name, mode);
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    if mode == Mode::Exclusive {
                        assert_eq!(now, 1, "an exclusive holder found {} inside", now - 1);
                    }
                    std::thread::sleep(Duration::from_millis(30));
                    inside.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        for t in threads {
            t.join().expect("a lock holder panicked");
        }
        assert!(most.load(Ordering::SeqCst) <= 2, "more than two shared holders were counted inside");
    }

    #[test]
    fn a_room_never_holds_both_sides() {
        let name = format!("room-self-test-{}", std::process::id());
        // Holders of each side inside now.
        let inside = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let (name, inside) = (name.clone(), inside.clone());
                std::thread::spawn(move || {
                    let (side, own, other) = if i % 2 == 0 { (Side::A, 0, 1) } else { (Side::B, 1, 0) };
                    for _ in 0..3 {
                        let _inside = room(&name, side);
                        inside[own].fetch_add(1, Ordering::SeqCst);
                        let others = inside[other].load(Ordering::SeqCst);
                        assert_eq!(others, 0, "side {side:?} entered with {others} of the other side inside");
                        std::thread::sleep(Duration::from_millis(20));
                        inside[own].fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("a room holder panicked");
        }
    }

    #[test]
    fn holders_of_one_side_are_inside_together() {
        let name = format!("room-together-test-{}", std::process::id());
        let inside = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let (name, inside) = (name.clone(), inside.clone());
                std::thread::spawn(move || {
                    let _inside = room(&name, Side::B);
                    inside.fetch_add(1, Ordering::SeqCst);
                    // Each stays until all three are in: a room that let one in at a time would never get there.
                    let deadline = std::time::Instant::now() + Duration::from_secs(10);
                    while inside.load(Ordering::SeqCst) < 3 {
                        let seen = inside.load(Ordering::SeqCst);
                        assert!(std::time::Instant::now() < deadline, "only {seen} of 3 got in together");
                        std::thread::sleep(Duration::from_millis(5));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("a room holder panicked");
        }
    }
}
