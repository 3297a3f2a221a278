//! Test fixtures for real desktops (feature `test-support`): X and VNC servers started on free displays and
//! ports and stopped when dropped, the project's recording test application, and the environment variables
//! `scripts/setup/20-desktops.sh` exports.
//!
//! Tests that need a desktop call [`desktop_env`] (or [`own_xvfb`]) first: without the variable they skip
//! through [`agentd_testenv::skip`] — a loud pass on a machine without X, a failure under CI (which runs the
//! setup script, so a missing desktop means the setup broke). A test that types or clicks starts X and VNC
//! servers of its own, so that nothing one test leaves on a display reaches another.

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use agentd_testenv::{Held, skip};

/// What the setup script exports.
#[derive(Debug, Clone)]
pub struct DesktopEnv {
    /// An Xvfb display (`AGENTD_TEST_DISPLAY`): X, its tools and the VNC servers are installed. Tests that
    /// only read a screen may use it; tests that type or click start servers of their own ([`own_xvfb`],
    /// [`VncDesktop`]).
    pub display: String,
}

/// The desktop variables, or `None` after printing why the calling test skips.
pub fn desktop_env() -> Option<DesktopEnv> {
    let Some(display) = std::env::var("AGENTD_TEST_DISPLAY").ok().filter(|v| !v.is_empty()) else {
        agentd_testenv::skip(
            "AGENTD_TEST_DISPLAY is not set (scripts/test installs X and the VNC servers and sets it)",
        );
        return None;
    };
    Some(DesktopEnv { display })
}

/// `Some(value)`, or `None` after [`agentd_testenv::skip`] because `name` is not set.
#[track_caller]
pub fn skip_unless(value: Option<String>, name: &str) -> Option<String> {
    if value.is_none() {
        agentd_testenv::skip(format_args!("{name} is not set (scripts/setup/20-desktops.sh sets it)"));
    }
    value
}

/// An Xvfb of the calling test's own (`width` x `height`), or `None` after [`desktop_env`] said why the test
/// skips. Tests that type or click start one of these instead of sharing the setup script's display: the
/// keyboard mapping a test leaves behind (borrowed spare keycodes) and its windows would reach the next test.
pub fn own_xvfb(width: u32, height: u32) -> Option<XServer> {
    desktop_env()?;
    Some(XServer::xvfb(width, height).unwrap_or_else(|e| panic!("cannot start Xvfb: {e}")))
}

/// A child process stopped (and reaped) when dropped.
#[derive(Debug)]
pub struct Process {
    child: Child,
    name: String,
}

impl Process {
    pub fn spawn(name: &str, command: &mut Command) -> std::io::Result<Self> {
        let child = command.spawn().map_err(|e| std::io::Error::new(e.kind(), format!("cannot start {name}: {e}")))?;
        Ok(Self { child, name: name.to_string() })
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills the process now (SIGKILL) and reaps it, and removes the System V shared memory segments it
    /// created (x11vnc's MIT-SHM images; they outlive a killed x11vnc and fill the system's table).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        remove_shared_memory_of(self.child.id());
    }

    fn stdout_line(&mut self, timeout: Duration) -> std::io::Result<String> {
        let stdout = self
            .child
            .stdout
            .take()
            .ok_or_else(|| std::io::Error::other(format!("{}: stdout not captured", self.name)))?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        rx.recv_timeout(timeout).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("{} printed nothing within {timeout:?}", self.name),
            )
        })
    }
}

impl Drop for Process {
    /// Asks the process to stop (SIGTERM) and kills it after 2 s. x11vnc killed outright leaves its MIT-SHM
    /// segments behind, and enough test runs fill the system's table (`shmget: No space left on device`:
    /// no x11vnc starts any more); on SIGTERM it removes them.
    fn drop(&mut self) {
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: kill(2) on our own child's pid, which is not reaped yet (so not reused).
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(2) {
                if !matches!(self.child.try_wait(), Ok(None)) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        self.kill();
    }
}

/// Removes (IPC_RMID: freed once detached) the shared memory segments process `pid` created, as listed by
/// `ipcs -m -p` (columns: shmid, owner, creator pid, last pid). Best effort.
fn remove_shared_memory_of(pid: u32) {
    let Ok(listing) = Command::new("ipcs").args(["-m", "-p"]).stderr(Stdio::null()).output() else {
        return;
    };
    let pid = pid.to_string();
    for line in String::from_utf8_lossy(&listing.stdout).lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if let [id, _, creator, ..] = fields.as_slice()
            && *creator == pid
            && id.parse::<u64>().is_ok()
        {
            let _ = Command::new("ipcrm").args(["-m", id]).stderr(Stdio::null()).status();
        }
    }
}

/// An X server of our own (Xvfb or Xvnc) on a display it chose itself (`-displayfd`).
#[derive(Debug)]
pub struct XServer {
    pub display: String,
    pub process: Process,
}

fn start_x(name: &str, mut command: Command) -> std::io::Result<XServer> {
    command
        .args(["-displayfd", "1", "-noreset", "-nolisten", "tcp"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut process = Process::spawn(name, &mut command)?;
    let line = process.stdout_line(Duration::from_secs(20))?;
    let number: u32 =
        line.trim().parse().map_err(|_| std::io::Error::other(format!("{name} reported display {line:?}")))?;
    let display = format!(":{number}");
    wait_for(Duration::from_secs(10), || {
        Path::new(&format!("/tmp/.X11-unix/X{number}")).exists() && x11rb::connect(Some(&display)).is_ok()
    })
    .map_err(|_| std::io::Error::other(format!("{name} {display} does not accept connections")))?;
    Ok(XServer { display, process })
}

impl XServer {
    /// Starts `Xvfb` with one screen of `width` x `height` at 24 bits.
    pub fn xvfb(width: u32, height: u32) -> std::io::Result<Self> {
        let mut command = Command::new("Xvfb");
        command.args(["-screen", "0", &format!("{width}x{height}x24")]);
        start_x("Xvfb", command)
    }

    /// Starts TigerVNC's `Xvnc` serving RFB on `port` (localhost only), with VNC authentication when
    /// `password_file` (a `vncpasswd`-format file) is given.
    pub fn xvnc(width: u32, height: u32, port: u16, password_file: Option<&Path>) -> std::io::Result<Self> {
        let mut command = Command::new("Xvnc");
        command.args([
            "-geometry",
            &format!("{width}x{height}"),
            "-depth",
            "24",
            "-rfbport",
            &port.to_string(),
            "-localhost",
            "-AlwaysShared",
        ]);
        match password_file {
            Some(file) => command.args(["-SecurityTypes", "VncAuth", "-PasswordFile"]).arg(file),
            None => command.args(["-SecurityTypes", "None"]),
        };
        let server = start_x("Xvnc", command)?;
        wait_for_port(port)?;
        Ok(server)
    }
}

/// x11vnc serving `display` on `port` (localhost only), with a `vncpasswd`-format password file or none.
pub fn x11vnc(display: &str, port: u16, password_file: Option<&Path>) -> std::io::Result<Process> {
    start_x11vnc(display, port, password_file, None)
}

/// x11vnc as [`x11vnc`], writing its log to `log` (for [`wait_for_x11vnc_damage`]).
pub fn x11vnc_logged(display: &str, port: u16, log: &Path) -> std::io::Result<Process> {
    start_x11vnc(display, port, None, Some(log))
}

/// Waits until the x11vnc logging to `log` has created its X damage object, which it does some time after
/// its first client connected (it has none while no client is): from then on it sees changes to the
/// screen as they are drawn. Before, it finds them only by a sparse check every 2 s. The error shows the log.
pub fn wait_for_x11vnc_damage(log: &Path, bound: Duration) -> std::io::Result<()> {
    let read = || std::fs::read_to_string(log).unwrap_or_default();
    // The last word on its damage object is that it exists ("created   xdamage object: 0x…", or "destroyed").
    let has_damage =
        || read().lines().rev().find(|l| l.contains("xdamage object:")).is_some_and(|l| l.contains("created"));
    wait_for(bound, has_damage).map_err(|_| {
        std::io::Error::other(format!("x11vnc created no damage object within {bound:?}; its log:\n{}", read()))
    })
}

fn start_x11vnc(
    display: &str,
    port: u16,
    password_file: Option<&Path>,
    log: Option<&Path>,
) -> std::io::Result<Process> {
    let mut command = Command::new("x11vnc");
    command.args([
        "-display",
        display,
        "-rfbport",
        &port.to_string(),
        "-localhost",
        "-forever",
        "-shared",
        "-noxrecord",
        "-add_keysyms",
    ]);
    match log {
        Some(log) => command.arg("-o").arg(log),
        None => command.arg("-quiet"),
    };
    match password_file {
        Some(file) => command.arg("-rfbauth").arg(file),
        None => command.arg("-nopw"),
    };
    // More x11vnc options, for measuring how its own pacing (-defer, -wait) shapes update latency.
    if let Ok(extra) = std::env::var("AGENTD_X11VNC_ARGS") {
        command.args(extra.split_whitespace());
    }
    command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    let process = Process::spawn("x11vnc", &mut command)?;
    wait_for_port(port)?;
    Ok(process)
}

/// A VNC desktop of the calling test's own: an X server served over RFB on a free port, stopped when
/// dropped. Tests that type through a VNC server start one of these rather than share one: both servers
/// write characters outside their keyboard layout onto spare keycodes and keep them (Xvnc never frees them:
/// 19 spares, then later characters are dropped; x11vnc empties them every 5 minutes), so on a server shared
/// by a whole test run what one test typed changes what the next one types.
#[derive(Debug)]
pub struct VncDesktop {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// The X display the server serves (where the recorder app goes).
    pub display: String,
    /// The plain VNC password, when the server asks for one.
    pub password: Option<String>,
    /// Whether the server passes the horizontal wheel (RFB buttons 6 and 7) on. Debian 12's x11vnc 0.9.16
    /// handles 5 buttons only (7 came with LibVNC/x11vnc#116 in 2019, 8 with #212): it drops them.
    pub horizontal_wheel: bool,
    // Dropped in this order: the VNC server before its X server.
    _vnc: Option<Process>,
    _x: XServer,
    /// A directory of this desktop's own (the password file, x11vnc's log), removed when it is dropped.
    password_dir: Option<PathBuf>,
}

impl VncDesktop {
    /// Xvfb (`width` x `height`) served by x11vnc, no password.
    pub fn x11vnc(width: u32, height: u32) -> std::io::Result<Self> {
        let x = XServer::xvfb(width, height)?;
        let port = free_port()?;
        let dir = std::env::temp_dir().join(format!("agentd-vnc-{}-{}", std::process::id(), unique()));
        std::fs::create_dir_all(&dir)?;
        let vnc = x11vnc_logged(&x.display, port, &dir.join("x11vnc.log"))?;
        Ok(Self {
            addr: format!("127.0.0.1:{port}"),
            display: x.display.clone(),
            password: None,
            horizontal_wheel: false,
            _vnc: Some(vnc),
            _x: x,
            password_dir: Some(dir),
        })
    }

    /// Waits until the server sees changes to the screen as they are drawn, after a client connected: at
    /// once for Xvnc (it draws into its own framebuffer), for x11vnc once it watches X damage (see
    /// [`wait_for_x11vnc_damage`]).
    pub fn wait_until_watching(&self, bound: Duration) -> std::io::Result<()> {
        match (&self._vnc, &self.password_dir) {
            (Some(_), Some(dir)) if dir.join("x11vnc.log").exists() => {
                wait_for_x11vnc_damage(&dir.join("x11vnc.log"), bound)
            }
            _ => Ok(()),
        }
    }

    /// TigerVNC's Xvnc (`width` x `height`), with VNC authentication when `password` is given.
    pub fn xvnc(width: u32, height: u32, password: Option<&str>) -> std::io::Result<Self> {
        let password_dir = match password {
            Some(_) => {
                let dir = std::env::temp_dir().join(format!("agentd-vnc-{}-{}", std::process::id(), unique()));
                std::fs::create_dir_all(&dir)?;
                Some(dir)
            }
            None => None,
        };
        let started = (|| {
            let file = match (password, &password_dir) {
                (Some(password), Some(dir)) => {
                    let file = dir.join("passwd");
                    store_vnc_password(password, &file)?;
                    Some(file)
                }
                _ => None,
            };
            let port = free_port()?;
            let x = XServer::xvnc(width, height, port, file.as_deref())?;
            Ok::<_, std::io::Error>((port, x))
        })();
        let (port, x) = match started {
            Ok(started) => started,
            Err(e) => {
                if let Some(dir) = &password_dir {
                    let _ = std::fs::remove_dir_all(dir);
                }
                return Err(e);
            }
        };
        Ok(Self {
            addr: format!("127.0.0.1:{port}"),
            display: x.display.clone(),
            password: password.map(str::to_string),
            horizontal_wheel: true,
            _vnc: None,
            _x: x,
            password_dir,
        })
    }
}

impl Drop for VncDesktop {
    fn drop(&mut self) {
        if let Some(dir) = &self.password_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A number no other call of this process returned.
fn unique() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Writes `password` in the obfuscated `vncpasswd` format both x11vnc and Xvnc read.
pub fn store_vnc_password(password: &str, file: &Path) -> std::io::Result<()> {
    let status = Command::new("x11vnc")
        .arg("-storepasswd")
        .arg(password)
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if status.success() { Ok(()) } else { Err(std::io::Error::other("x11vnc -storepasswd failed")) }
}

/// A TCP port nobody listens on right now.
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn wait_for(timeout: Duration, mut ready: impl FnMut() -> bool) -> Result<(), ()> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if ready() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(())
}

/// Waits (up to 20 s) until something accepts TCP connections on `port`.
pub fn wait_for_port(port: u16) -> std::io::Result<()> {
    wait_for_port_within(port, Duration::from_secs(20))
}

/// Waits up to `timeout` until something accepts TCP connections on `port`: for servers slow to start,
/// such as a Python server importing a large package on a loaded machine.
pub fn wait_for_port_within(port: u16, timeout: Duration) -> std::io::Result<()> {
    wait_for(timeout, || TcpStream::connect(("127.0.0.1", port)).is_ok())
        .map_err(|_| std::io::Error::other(format!("nothing listens on port {port} after {timeout:?}")))
}

/// Starts `command` with its output in `log` and waits until it accepts TCP connections on `port`. The wait
/// ends early, with what the server printed, when the process exits before it listens; `bound` only limits a
/// server that neither listens nor exits (a hung start-up).
pub fn spawn_listening(
    name: &str,
    command: &mut Command,
    port: u16,
    log: &Path,
    bound: Duration,
) -> std::io::Result<Process> {
    let out = std::fs::File::create(log)?;
    command.stdin(Stdio::null()).stdout(out.try_clone()?).stderr(out);
    let mut process = Process::spawn(name, command)?;
    let start = Instant::now();
    loop {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(process);
        }
        let printed = || std::fs::read_to_string(log).unwrap_or_default();
        if !process.running() {
            return Err(std::io::Error::other(format!(
                "{name} exited before listening on port {port}; it printed:\n{}",
                printed()
            )));
        }
        if start.elapsed() > bound {
            return Err(std::io::Error::other(format!(
                "{name} is running but did not listen on port {port} within {bound:?}; it printed:\n{}",
                printed()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The project's recording test application (`tests/apps/recorder.py`), running on a display.
#[derive(Debug)]
pub struct RecorderApp {
    pub log: PathBuf,
    pub process: Process,
}

/// Where the recorder's widgets are, in screen pixels (its window is placed at the top-left corner).
pub mod layout {
    /// The text entry: click here to focus it.
    pub const ENTRY: (i32, i32) = (300, 40);
    /// The click pad: clicks here are recorded with their position and button.
    pub const PAD: (i32, i32, i32, i32) = (20, 100, 620, 400);
    /// The scroll pad: wheel events here are recorded.
    pub const SCROLL: (i32, i32, i32, i32) = (640, 100, 940, 400);
}

impl RecorderApp {
    pub fn script() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/apps/recorder.py")
    }

    /// Starts the app on `display`, writing its record to `log`, and waits until its window is up.
    pub fn start(display: &str, log: &Path) -> std::io::Result<Self> {
        let mut command = Command::new("/usr/bin/python3");
        command
            .arg(Self::script())
            .arg(log)
            .env("DISPLAY", display)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let process = Process::spawn("recorder.py", &mut command)?;
        let mut app = Self { log: log.to_path_buf(), process };
        wait_for(Duration::from_secs(20), || app.events().iter().any(|e| e["event"] == "ready"))
            .map_err(|_| std::io::Error::other("the recorder app did not start"))?;
        if !app.process.running() {
            return Err(std::io::Error::other("the recorder app exited"));
        }
        Ok(app)
    }

    /// Every event recorded so far (one JSON object per line).
    pub fn events(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// Waits until `predicate` holds for the recorded events (the app handles input asynchronously).
    pub fn wait_until(
        &self,
        timeout: Duration,
        predicate: impl Fn(&[serde_json::Value]) -> bool,
    ) -> Vec<serde_json::Value> {
        let start = Instant::now();
        loop {
            let events = self.events();
            if predicate(&events) || start.elapsed() > timeout {
                return events;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}
