//! The systemd notification protocol (`sd_notify(3)`): READY, STOPPING, WATCHDOG and STATUS messages as
//! datagrams to `$NOTIFY_SOCKET`. A no-op when the daemon does not run under systemd.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

/// Sends `state` (e.g. `"READY=1"`) to systemd, if it is listening. Errors are ignored: notification is a
/// courtesy to the service manager, never a reason to fail.
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

/// The watchdog interval systemd asked for (`$WATCHDOG_USEC`, for this process per `$WATCHDOG_PID`).
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

#[cfg(test)]
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
