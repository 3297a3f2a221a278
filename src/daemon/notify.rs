//! The systemd notification protocol (`sd_notify(3)`): READY, STOPPING, WATCHDOG and STATUS messages as
//! datagrams to `$NOTIFY_SOCKET`. A no-op when the daemon does not run under systemd, and on every platform
//! but Linux (systemd is Linux's; the abstract socket names it may use are too).

#[cfg(target_os = "linux")]
use std::os::unix::net::UnixDatagram;
use std::time::Duration;

/// Off Linux there is no systemd to tell.
#[cfg(not(target_os = "linux"))]
pub fn notify(_state: &str) {}

/// Sends `state` (e.g. `"READY=1"`) to systemd, if it is listening. Errors are ignored: notification is a
/// courtesy to the service manager, never a reason to fail.
#[cfg(target_os = "linux")]
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let Ok(socket) = UnixDatagram::unbound() else { return };
    let bytes = path.as_encoded_bytes();
    let result = if let Some(abstract_name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(abstract_name)
            .and_then(|addr| socket.send_to_addr(state.as_bytes(), &addr))
    } else {
        socket.send_to(state.as_bytes(), std::path::Path::new(&path))
    };
    if let Err(e) = result {
        tracing::debug!(error = %e, "sd_notify failed");
    }
}

/// Off Linux there is no systemd watchdog to feed.
#[cfg(not(target_os = "linux"))]
pub fn watchdog_interval() -> Option<Duration> {
    None
}

/// The watchdog interval systemd asked for (`$WATCHDOG_USEC`, for this process per `$WATCHDOG_PID`).
#[cfg(target_os = "linux")]
pub fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID")
        && !pid.is_empty()
        && pid.parse::<u32>().ok() != Some(std::process::id())
    {
        return None;
    }
    (usec > 0).then(|| Duration::from_micros(usec))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn notifications_reach_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        // SAFETY: this test is the only code in its process reading or writing NOTIFY_SOCKET.
        unsafe { std::env::set_var("NOTIFY_SOCKET", &path) };
        notify("READY=1");
        unsafe { std::env::remove_var("NOTIFY_SOCKET") };
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
    }
}
