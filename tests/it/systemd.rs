//! The systemd unit and the notify protocol: `systemd-analyze verify` and `security` accept the unit, and the
//! real daemon tells a notify socket READY=1 once it serves, feeds WATCHDOG=1 while its workers run, and says
//! STOPPING=1 on SIGTERM.

use std::os::unix::net::UnixDatagram;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::{Agentd, http, repo};

fn analyze_available() -> bool {
    let ok = Command::new("systemd-analyze").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        agentd_testenv::skip("systemd-analyze is not installed");
    }
    ok
}

/// The unit with the binary path pointed at this build (verify checks that ExecStart exists).
fn unit_for_this_build(dir: &std::path::Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(repo().join("systemd/agentd.service")).expect("unit");
    let text = text.replace("/usr/local/bin/agentd", env!("CARGO_BIN_EXE_agentd"));
    let path = dir.join("agentd.service");
    std::fs::write(&path, text).expect("write unit");
    path
}

#[test]
fn the_unit_verifies_and_is_hardened() {
    if !analyze_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let unit = unit_for_this_build(dir.path());
    let verify = Command::new("systemd-analyze").args(["verify", "--man=no"]).arg(&unit).output().expect("verify");
    let complaints = String::from_utf8_lossy(&verify.stderr);
    assert!(verify.status.success() && complaints.trim().is_empty(), "systemd-analyze verify: {complaints}");
    let security =
        Command::new("systemd-analyze").args(["security", "--offline=true"]).arg(&unit).output().expect("security");
    let report = String::from_utf8_lossy(&security.stdout);
    let score: f64 = report
        .lines()
        .find_map(|l| l.split("exposure level for agentd.service: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no exposure score in:\n{report}"));
    eprintln!("systemd-analyze security exposure: {score}");
    assert!(score <= 2.0, "exposure {score} is above 2.0:\n{report}");
    let unit_text = std::fs::read_to_string(&unit).expect("unit");
    for key in ["Type=notify", "WatchdogSec=", "ExecStartPre=", "TimeoutStopSec="] {
        assert!(unit_text.contains(key), "{key} missing");
    }
}

#[test]
fn the_daemon_speaks_the_notify_protocol() {
    let agentd = Agentd::new();
    let notify_path = agentd.dir.path().join("notify.sock");
    let listener = UnixDatagram::bind(&notify_path).expect("bind notify socket");
    listener.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let socket = agentd.dir.path().join("agentd.sock");
    // Killed on every way out of the test, a failed assertion included.
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = KillOnDrop(
        agentd
            .command()
            .args(["--socket", socket.to_str().expect("path"), "serve"])
            .env("NOTIFY_SOCKET", &notify_path)
            .env("WATCHDOG_USEC", "400000")
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn"),
    );
    let mut messages = Vec::new();
    let mut buf = [0u8; 512];
    let deadline = Instant::now() + Duration::from_secs(30);
    while !messages.iter().any(|m: &String| m.contains("WATCHDOG=1")) && Instant::now() < deadline {
        let n = listener.recv(&mut buf).expect("a notification");
        messages.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    assert!(messages[0].starts_with("READY=1"), "{messages:?}");
    // READY is only sent once the API answers.
    assert_eq!(http(&socket, "GET", "/healthz", None, &[]).expect("health").0, 200);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.0.id() as i32, libc::SIGTERM) };
    let mut stopping = false;
    while !stopping && Instant::now() < deadline {
        let n = listener.recv(&mut buf).expect("a notification");
        stopping = String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1");
    }
    assert!(stopping, "no STOPPING=1 after SIGTERM");
    assert_eq!(child.0.wait().expect("exit").code(), Some(0));
}
