//! What agentd's tests may expect of the machine they run on.
//!
//! - [`skip`]: the one switch for tests that need something outside the test (a PostgreSQL server, an S3
//!   store, an X display, Chromium, cua's computer-server…). Outside CI such a test says loudly that it
//!   skips and passes; with [`REQUIRE_ALL`] set (`scripts/test` sets it under CI) it fails instead, so a
//!   service that did not start can never turn into a green run that tested nothing.
//! - [`lock`]: named locks that hold across test processes as well as threads (advisory file locks), for
//!   resources several tests share — an X display, the machine's load. The test runner may run every test
//!   in a process of its own, so an in-process mutex would not keep two of them apart.

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
}
