//! Where things live when the config does not say: the data directory, the API's socket, the queue database,
//! artifacts, spool and mock desktops under `data_dir`; and the machine's host name for worker names.

use std::path::PathBuf;

use super::Config;

/// Whether this process runs as root (never on Windows, which has no such user id).
#[cfg(not(unix))]
fn is_root() -> bool {
    false
}

#[cfg(unix)]
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// This machine's host name (for worker names): `%COMPUTERNAME%` on Windows.
#[cfg(not(unix))]
pub fn host_name() -> String {
    std::env::var("COMPUTERNAME").ok().filter(|name| !name.is_empty()).unwrap_or_else(|| "localhost".into())
}

/// This machine's host name (for worker names).
#[cfg(unix)]
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        if let Ok(name) = std::str::from_utf8(&buf[..end])
            && !name.is_empty()
        {
            return name.to_string();
        }
    }
    "localhost".into()
}

pub(super) fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// `$STATE_DIRECTORY` (systemd), else `/var/lib/agentd` as root, else `$XDG_DATA_HOME/agentd`, else
/// `~/.local/share/agentd`, else `./agentd-data`.
pub fn default_data_dir() -> PathBuf {
    if let Some(dir) = env_path("STATE_DIRECTORY") {
        // systemd may list several, colon-separated; the first is ours.
        let first = dir.to_string_lossy().split(':').next().unwrap_or_default().to_string();
        return PathBuf::from(first);
    }
    if is_root() {
        return PathBuf::from("/var/lib/agentd");
    }
    if let Some(dir) = env_path("XDG_DATA_HOME") {
        return dir.join("agentd");
    }
    if let Some(home) = env_path("HOME") {
        return home.join(".local/share/agentd");
    }
    PathBuf::from("agentd-data")
}

impl Config {
    pub fn socket_path(&self) -> PathBuf {
        if let Some(socket) = &self.api.socket {
            return socket.clone();
        }
        if let Some(dir) = env_path("RUNTIME_DIRECTORY") {
            let first = dir.to_string_lossy().split(':').next().unwrap_or_default().to_string();
            return PathBuf::from(first).join("agentd.sock");
        }
        if is_root() {
            return PathBuf::from("/run/agentd/agentd.sock");
        }
        if let Some(dir) = env_path("XDG_RUNTIME_DIR") {
            return dir.join("agentd/agentd.sock");
        }
        self.data_dir.join("agentd.sock")
    }

    pub fn queue_path(&self) -> PathBuf {
        self.queue.path.clone().unwrap_or_else(|| self.data_dir.join("queue.db"))
    }

    pub fn artifacts_dir(&self) -> PathBuf {
        self.artifacts.dir.clone().unwrap_or_else(|| self.data_dir.join("artifacts"))
    }

    pub fn spool_dir(&self) -> PathBuf {
        self.data_dir.join("spool")
    }

    /// Where a mock desktop keeps its state for a task, so it survives a daemon restart like a real VM does.
    pub fn mock_dir(&self, task_id: &str) -> PathBuf {
        self.worker.mock_state_dir.clone().unwrap_or_else(|| self.data_dir.join("mock")).join(task_id)
    }
}
