//! Starting Chromium: which binary, which flags, where its profile lives, how its DevTools endpoint is
//! learnt, and how it is stopped.
//!
//! The browser is started with `--remote-debugging-port=0` (the kernel picks a free loopback port, so
//! browsers started at once never collide) and prints `DevTools listening on ws://127.0.0.1:PORT/…` on
//! standard error; that line is the endpoint. Standard error is read to its end by a thread of its own (a
//! browser whose pipe filled would stall), its lines logged at debug level. The browser runs in a process
//! group of its own (Unix); when the [`Process`] is dropped the group is killed (the browser and its
//! renderers, GPU and zygote processes), reaped, and then the fresh profile's directory is removed.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::BrowserError;

/// The binaries tried, in order, when no `executable` is configured.
pub const DEFAULT_EXECUTABLES: [&str; 3] = ["chromium", "chromium-browser", "google-chrome"];

/// Where the browser keeps its profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Profile {
    /// A new profile in a private temporary directory, removed when the browser is gone.
    Fresh,
    /// This directory, kept across browsers (cookies, logins, history stay).
    Dir(PathBuf),
}

/// The first of `names` found: a name with a `/` as that path, a bare name on `PATH`.
pub fn find_executable(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in names {
        let direct = Path::new(name);
        if direct.components().count() > 1 {
            if direct.is_file() {
                return Some(direct.to_path_buf());
            }
            continue;
        }
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    None
}

/// The flags every launched browser gets (besides the profile, the viewport and headless mode): no first-run
/// UI, no background traffic of its own (updates, sync, safe-browsing lists, field trials), no QUIC (so a
/// proxy or a firewall sees every connection as TCP), no smooth scrolling (a screenshot right after a wheel
/// event shows where it scrolled to, not a frame of the animation), sRGB colours (the same pixels on every
/// machine), shared memory under `/tmp` (containers have a small `/dev/shm`), and DevTools screenshots taken
/// from a surface of their own (`CDPScreenshotNewSurface`, as Playwright launches Chromium): a capture after
/// an input then takes ~30 ms instead of ~45 ms (`cargo bench -p agentd-browser --bench step`).
pub const FLAGS: &[&str] = &[
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--disable-breakpad",
    "--disable-quic",
    "--disable-smooth-scrolling",
    "--disable-features=Translate,MediaRouter,OptimizationHints,AutofillServerCommunication,DialMediaRouteProvider",
    "--enable-features=CDPScreenshotNewSurface",
    "--disable-dev-shm-usage",
    "--force-color-profile=srgb",
    "--password-store=basic",
    "--use-mock-keychain",
    "--mute-audio",
    "--metrics-recording-only",
];

/// How long a browser with a kept profile gets to write it out before it is killed: 40 ticks of 50 ms.
const CLOSE_GRACE_TICKS: u32 = 40;

/// A running browser started by this process.
pub struct Process {
    child: Option<Child>,
    /// The fresh profile, removed after the browser is gone (`None` for a kept profile).
    profile: Option<tempfile::TempDir>,
    /// Where downloads are written: a private temporary directory, removed with the browser.
    downloads: Option<tempfile::TempDir>,
    /// The DevTools endpoint.
    pub ws_url: String,
}

impl Process {
    pub fn downloads(&self) -> Option<&Path> {
        self.downloads.as_ref().map(tempfile::TempDir::path)
    }

    /// The fresh profile's directory (`None` for a kept profile, which is the configuration's).
    pub fn fresh_profile(&self) -> Option<&Path> {
        self.profile.as_ref().map(tempfile::TempDir::path)
    }

    /// The browser's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

/// What to start.
pub struct Launch<'a> {
    pub executable: &'a Path,
    pub profile: &'a Profile,
    pub headless: bool,
    pub width: u32,
    pub height: u32,
    pub timeout: Duration,
}

/// Starts the browser and waits (at most `timeout`) for its DevTools endpoint.
pub async fn launch(spec: Launch<'_>) -> Result<Process, BrowserError> {
    let (profile_dir, fresh) = match spec.profile {
        Profile::Fresh => {
            let dir = tempfile::Builder::new()
                .prefix("agentd-browser-")
                .tempdir()
                .map_err(|e| BrowserError::Launch(format!("cannot make a profile directory: {e}")))?;
            (dir.path().to_path_buf(), Some(dir))
        }
        Profile::Dir(dir) => {
            std::fs::create_dir_all(dir)
                .map_err(|e| BrowserError::Launch(format!("profile directory {}: {e}", dir.display())))?;
            (dir.clone(), None)
        }
    };
    let downloads = tempfile::Builder::new()
        .prefix("agentd-downloads-")
        .tempdir()
        .map_err(|e| BrowserError::Launch(format!("cannot make a downloads directory: {e}")))?;
    let mut command = Command::new(spec.executable);
    command
        .arg(format!("--user-data-dir={}", profile_dir.display()))
        .arg("--remote-debugging-port=0")
        .arg(format!("--window-size={},{}", spec.width, spec.height))
        .args(FLAGS);
    if spec.headless {
        command.arg("--headless");
    }
    // Chromium's sandbox refuses to start as root: there the browser runs without it (as Playwright does
    // everywhere). An unprivileged daemon keeps the sandbox.
    if is_root() {
        command.arg("--no-sandbox");
    }
    command.arg("about:blank").stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        command.process_group(0);
    }
    let mut child = command
        .spawn()
        .map_err(|e| BrowserError::Launch(format!("cannot start {}: {e}", spec.executable.display())))?;
    let Some(stderr) = child.stderr.take() else {
        kill(&mut child);
        return Err(BrowserError::Launch("no standard error to read the DevTools endpoint from".into()));
    };
    let (found, endpoint) = tokio::sync::oneshot::channel::<Result<String, String>>();
    std::thread::Builder::new()
        .name("agentd-browser-stderr".into())
        .spawn(move || {
            let mut found = Some(found);
            let mut last = Vec::new();
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(url) = line.strip_prefix("DevTools listening on ").map(str::trim)
                    && let Some(found) = found.take()
                {
                    let _ = found.send(Ok(url.to_string()));
                    continue;
                }
                tracing::debug!(target: "agentd_browser::chromium", "{line}");
                if found.is_some() {
                    last.push(line);
                    if last.len() > 8 {
                        last.remove(0);
                    }
                }
            }
            if let Some(found) = found.take() {
                let _ = found.send(Err(last.join("\n")));
            }
        })
        .map_err(|e| BrowserError::Launch(format!("cannot start the thread reading the browser's output: {e}")))?;
    let ws_url = match tokio::time::timeout(spec.timeout, endpoint).await {
        Ok(Ok(Ok(url))) => url,
        Ok(result) => {
            let output = match result {
                Ok(Err(output)) => output,
                _ => String::new(),
            };
            let status = child.try_wait().ok().flatten().map(|s| s.to_string()).unwrap_or_else(|| "running".into());
            kill(&mut child);
            return Err(BrowserError::Launch(format!(
                "{} exited ({status}) before it served DevTools{}",
                spec.executable.display(),
                if output.is_empty() { String::new() } else { format!(": {output}") }
            )));
        }
        Err(_) => {
            kill(&mut child);
            return Err(BrowserError::Launch(format!(
                "{} did not serve DevTools within {:?}",
                spec.executable.display(),
                spec.timeout
            )));
        }
    };
    Ok(Process { child: Some(child), profile: fresh, downloads: Some(downloads), ws_url })
}

#[cfg(unix)]
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(not(unix))]
fn is_root() -> bool {
    false
}

/// Kills the browser's process group (Unix) or the browser, and reaps it.
fn kill(child: &mut Child) {
    #[cfg(unix)]
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: kill has no memory effects; the group is the browser's own (process_group(0) at spawn).
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for Process {
    /// Stops the browser where it is dropped (a detached thread could die with a process that is exiting and
    /// leave the browser running): a browser with a kept profile gets `SIGTERM` and a moment to write it out
    /// (Chromium shuts down cleanly on it), a fresh one is killed at once; then its process group is killed
    /// and reaped, and the fresh profile and the downloads directory are removed.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            #[cfg(unix)]
            if self.profile.is_none()
                && let Ok(pid) = i32::try_from(child.id())
            {
                // SAFETY: kill has no memory effects; the process is our child, not yet reaped.
                unsafe {
                    libc::kill(pid, libc::SIGTERM);
                }
                for _ in 0..CLOSE_GRACE_TICKS {
                    if child.try_wait().ok().flatten().is_some() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            kill(&mut child);
        }
        drop(self.downloads.take());
        if let Some(profile) = self.profile.take() {
            let path = profile.path().to_path_buf();
            if let Err(e) = profile.close() {
                tracing::warn!("cannot remove the browser profile {}: {e}", path.display());
            }
        }
    }
}
