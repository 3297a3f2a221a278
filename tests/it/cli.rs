//! The command line as people see it: nothing a model, a daemon or a file says reaches the terminal as a
//! control sequence; the event follower's stream handling (characters split across chunks, resuming after
//! the last `id:`); `NO_COLOR`; errors that blame the right thing (socket permissions, environment variables,
//! an unreadable system config); `config check` checking what `serve` checks; no stale socket after a failed
//! start.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;

use crate::support::{Agentd, Daemon, Run};

/// ESC sequences (OSC title, clear screen), BEL, a C1 CSI, DEL, and bidi override/isolate/mark characters.
const HOSTILE: &str = "\u{1b}]0;owned\u{7}\u{1b}[2J\u{9b}31m\u{7f}\u{202e}gnp.exe\u{2066}\u{200f}!";

/// Characters a terminal would act on, other than the newline.
fn raw_controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|&c| {
            (c.is_control() && c != '\n')
                || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        })
        .collect()
}

fn assert_clean(what: &str, run: &Run) {
    for (stream, text) in [("stdout", &run.stdout), ("stderr", &run.stderr)] {
        let raw = raw_controls(text);
        assert!(raw.is_empty(), "{what}: {stream} holds raw control characters {raw:?}:\n{text}");
    }
}

fn hostile_task(dir: &Path) -> std::path::PathBuf {
    let task = serde_json::json!({
        "instructions": "say something nasty",
        "computer": {"provider": "mock", "scene": "blank"},
        "model": {"provider": "scripted", "script": {"turns": [
            {"say": HOSTILE, "actions": [{"type": "move", "x": 5, "y": 5}]},
            {"complete": {"success": false, "summary": HOSTILE}}
        ]}}
    });
    let path = dir.join("hostile.json");
    std::fs::write(&path, task.to_string()).expect("write task");
    path
}

#[test]
fn run_escapes_terminal_controls_from_the_model_and_from_task_files() {
    let agentd = Agentd::new();
    let task = hostile_task(agentd.dir.path());
    let run = agentd.run(&["run", task.to_str().expect("path")]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_clean("run", &run);
    assert!(run.stdout.contains("failed: \\u{1b}]0;owned\\u{7}\\u{1b}[2J\\u{9b}31m"), "{}", run.stdout);
    assert!(run.stderr.contains("\\u{202e}gnp.exe\\u{2066}\\u{200f}!"), "{}", run.stderr);

    // --json is JSON: the summary is there exactly as the model gave it.
    let json = agentd.run(&["run", task.to_str().expect("path"), "--json"]);
    assert_eq!(json.json()["outcome"]["summary"], HOSTILE);

    // A field name in a validation error.
    let bad = agentd.dir.path().join("bad.json");
    let key = serde_json::to_string(&format!("\u{1b}[31m{HOSTILE}")).expect("key");
    std::fs::write(&bad, format!("{{\"instructions\": \"x\", {key}: 1}}")).expect("bad");
    for command in ["run", "submit"] {
        let run = agentd.run(&[command, bad.to_str().expect("path")]);
        assert_eq!(run.code, 2, "{command}: {}", run.stderr);
        assert_clean(command, &run);
        assert!(run.stderr.contains("\\u{1b}[31m"), "{command}: {}", run.stderr);
    }
}

#[test]
fn daemon_commands_escape_terminal_controls() {
    let daemon = Daemon::start("");
    let task = hostile_task(daemon.agentd.dir.path());
    let submit = daemon.cli(&["submit", task.to_str().expect("path"), "--wait"]);
    assert_eq!(submit.code, 1, "{}\n{}", submit.stderr, daemon.log());
    assert_clean("submit --wait", &submit);
    assert!(submit.stderr.contains("✗ failed: \\u{1b}]0;owned"), "{}", submit.stderr);
    let id = submit.stdout.trim().to_string();

    let status = daemon.cli(&["status", &id]);
    assert_clean("status", &status);
    assert!(status.stdout.contains("\\u{9b}31m"), "{}", status.stdout);
    let list = daemon.cli(&["list"]);
    assert_clean("list", &list);
    assert!(list.stdout.contains("\\u{202e}gnp.exe"), "{}", list.stdout);
    let events = daemon.cli(&["events", &id]);
    assert_clean("events", &events);
    assert!(events.stdout.contains("model_delta"), "{}", events.stdout);

    // --json outputs stay JSON, with the text exactly as it was.
    assert_eq!(daemon.cli(&["status", &id, "--json"]).json()["outcome"]["summary"], HOSTILE);
    let events = daemon.cli(&["events", &id, "--json"]);
    let said: Vec<String> = events
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("JSON line"))
        .filter(|e| e["type"] == "model_delta")
        .filter_map(|e| e["text"].as_str().map(str::to_string))
        .collect();
    assert_eq!(said.concat(), HOSTILE, "{}", events.stdout);
}

/// Reads one HTTP request's head from `stream`.
fn read_head(stream: &mut std::os::unix::net::UnixStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).to_lowercase()
}

fn chunk(stream: &mut std::os::unix::net::UnixStream, data: &[u8]) {
    let _ = write!(stream, "{:x}\r\n", data.len());
    let _ = stream.write_all(data);
    let _ = stream.write_all(b"\r\n");
    let _ = stream.flush();
}

#[test]
fn the_event_follower_keeps_split_characters_and_resumes_after_the_last_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("fake.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
    let ts = "2026-11-23T20:00:00Z";
    let started = format!(
        "id: 1\nevent: task_started\ndata: {}\n\n",
        serde_json::json!({"seq": 1, "task_id": "t1", "ts": ts, "type": "task_started", "attempt": 1, "worker": "wörker-日本"})
    );
    // An event this client does not know (a newer daemon's): it cannot print it, but must resume after it.
    let newer =
        format!("id: 2\ndata: {}\n\n", serde_json::json!({"seq": 2, "task_id": "t1", "ts": ts, "type": "newer_kind"}));
    let finished = format!(
        "id: 3\ndata: {}\n\n",
        serde_json::json!({"seq": 3, "task_id": "t1", "ts": ts, "type": "task_finished", "state": "succeeded",
            "outcome": {"success": true, "summary": "done", "reason": "completed"},
            "usage": {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0, "cost_usd": 0.0}})
    );
    let server = std::thread::spawn(move || {
        let mut heads = Vec::new();
        for (n, stream) in listener.incoming().take(2).enumerate() {
            let mut stream = stream.expect("accept");
            heads.push(read_head(&mut stream));
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n");
            if n == 0 {
                // Split inside the three bytes of 日.
                let bytes = started.as_bytes();
                let cut = started.find('日').expect("日") + 1;
                chunk(&mut stream, &bytes[..cut]);
                std::thread::sleep(std::time::Duration::from_millis(200));
                chunk(&mut stream, &bytes[cut..]);
                chunk(&mut stream, newer.as_bytes());
            } else {
                chunk(&mut stream, finished.as_bytes());
            }
            // The stream ends (the daemon went away, say) without a task_finished the first time.
            let _ = stream.write_all(b"0\r\n\r\n");
        }
        heads
    });
    let agentd = Agentd::new();
    let run = agentd.run(&["--socket", socket.to_str().expect("path"), "events", "t1", "--follow"]);
    let heads = server.join().expect("server");
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("worker wörker-日本)"), "{}", run.stdout);
    assert!(!run.stdout.contains('\u{fffd}'), "{}", run.stdout);
    assert!(heads[1].contains("last-event-id: 2\r\n"), "resumed with {}", heads[1]);
}

/// Runs `agentd` with stdout and stderr on a new pseudo-terminal until it prints `until` (then kills it) or
/// exits, and returns what it printed.
fn on_a_terminal(mut cmd: std::process::Command, until: &str) -> String {
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two descriptors into the given integers; the other arguments may be null.
    let rc =
        unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) };
    assert_eq!(rc, 0, "openpty");
    // SAFETY: both descriptors were just opened and are owned by nothing else.
    let (master, slave) = unsafe {
        use std::os::fd::FromRawFd;
        (std::fs::File::from_raw_fd(master), std::os::fd::OwnedFd::from_raw_fd(slave))
    };
    let err = slave.try_clone().expect("dup");
    let mut child =
        cmd.stdin(Stdio::null()).stdout(Stdio::from(slave)).stderr(Stdio::from(err)).spawn().expect("spawn");
    // The command keeps its copies of the terminal's descriptors: drop them, or the reader never ends.
    drop(cmd);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut master = master;
        let mut buf = [0u8; 4096];
        // EIO once the child (the last holder of the terminal) has exited.
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while let Ok(bytes) = rx.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())) {
        out.extend_from_slice(&bytes);
        if String::from_utf8_lossy(&out).contains(until) {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn no_color_turns_log_colours_off() {
    let agentd = Agentd::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("agentd.sock");
    // `serve` logs "agentd ready" at info.
    let command = |no_color: Option<&str>| {
        let mut cmd = agentd.command();
        cmd.args(["--socket", socket.to_str().expect("path"), "serve"]).env("AGENTD_LOG", "info");
        cmd.env_remove("NO_COLOR");
        if let Some(value) = no_color {
            cmd.env("NO_COLOR", value);
        }
        cmd
    };
    let coloured = on_a_terminal(command(None), "agentd ready");
    assert!(coloured.contains("agentd ready"), "{coloured}");
    assert!(coloured.contains('\u{1b}'), "logs on a terminal are coloured without NO_COLOR:\n{coloured}");
    let empty = on_a_terminal(command(Some("")), "agentd ready");
    assert!(empty.contains('\u{1b}'), "an empty NO_COLOR is as if unset:\n{empty}");
    let plain = on_a_terminal(command(Some("1")), "agentd ready");
    assert!(plain.contains("agentd ready"), "{plain}");
    assert!(!plain.contains('\u{1b}'), "NO_COLOR=1:\n{plain:?}");
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        agentd_testenv::skip("needs root to run agentd as another user");
    }
    root
}

/// `nobody`.
const NOBODY: u32 = 65534;

/// Lets `nobody` into a test's private directory.
fn open_to_nobody(dir: &Path) {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

#[test]
fn a_socket_permission_error_says_permission_denied_and_the_path() {
    if !is_root() {
        return;
    }
    let agentd = Agentd::new();
    open_to_nobody(agentd.dir.path());
    let socket = agentd.dir.path().join("root-only.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let mut cmd = agentd.command();
    cmd.args(["--socket", socket.to_str().expect("path"), "list"]).uid(NOBODY).gid(NOBODY);
    let run = Run::from(cmd.output().expect("spawn"));
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(run.stderr.contains("permission denied"), "{}", run.stderr);
    assert!(run.stderr.contains(socket.to_str().expect("path")), "{}", run.stderr);
    assert!(!run.stderr.contains("is `agentd serve` running"), "{}", run.stderr);
}

#[test]
fn environment_variables_are_blamed_for_their_values_and_unknown_ones_are_warnings() {
    let agentd = Agentd::with_config("[worker]\nconcurrency = 2\n");
    let mut cmd = agentd.command();
    cmd.args(["config", "check"]).env("AGENTD_WORKER_CONCURRENCY", "abc");
    let run = Run::from(cmd.output().expect("spawn"));
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.starts_with("agentd: environment variable AGENTD_WORKER_CONCURRENCY: field `worker.concurrency`"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("agentd.toml") && !run.stderr.contains("(line"), "{}", run.stderr);

    // A variable that names a section but no key of it is still refused, naming the variable.
    let mut cmd = agentd.command();
    cmd.args(["config", "check"]).env("AGENTD_WORKER_CONCURENCY", "4");
    let run = Run::from(cmd.output().expect("spawn"));
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.starts_with("agentd: environment variable AGENTD_WORKER_CONCURENCY: "), "{}", run.stderr);

    // One that names no setting at all (a script's own AGENTD_BIN) is somebody else's: a warning naming the
    // closest real one when there is one, and the command runs.
    for (name, closest) in [("AGENTD_BIN", None), ("AGENTD_WORKERS_CONCURRENCY", Some("AGENTD_WORKER_CONCURRENCY"))] {
        let mut cmd = agentd.command();
        cmd.args(["config", "check"]).env(name, "4");
        let run = Run::from(cmd.output().expect("spawn"));
        assert_eq!(run.code, 0, "{name}: {}", run.stderr);
        let warning = format!("agentd: warning: the environment variable {name} is not an agentd setting; ignored");
        assert!(run.stderr.starts_with(&warning), "{}", run.stderr);
        if let Some(closest) = closest {
            assert!(run.stderr.contains(&format!("did you mean {closest}?")), "{}", run.stderr);
        }
    }
}

#[test]
fn every_line_config_check_prints_starts_alike() {
    let agentd = Agentd::with_config("[worker]\nbogus = 1\n[queue]\nmax_attempts = 0\n");
    let run = agentd.run(&["config", "check"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{}", run.stderr);
    assert!(lines.iter().all(|l| l.starts_with("agentd: ") && l.contains("agentd.toml: field `")), "{lines:?}");
    let ok = Agentd::new().run(&["config", "check"]);
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    assert!(ok.stderr.starts_with("agentd: ") && ok.stderr.contains("agentd.toml: ok"), "{}", ok.stderr);
}

fn token_config(dir: &Path, token: &str, mode: u32) -> String {
    let token_file = dir.join("token");
    std::fs::write(&token_file, token).expect("token");
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(mode)).expect("chmod");
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    format!("[api]\nlisten = \"127.0.0.1:{port}\"\ntoken_file = {:?}\n", token_file.display().to_string())
}

#[test]
fn config_check_rejects_the_token_file_serve_rejects_and_warns_when_everyone_may_read_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let agentd = Agentd::with_config(&token_config(dir.path(), "", 0o600));
    let check = agentd.run(&["config", "check"]);
    assert_eq!(check.code, 2, "{}", check.stderr);
    assert!(check.stderr.contains("api.token_file") && check.stderr.contains("at least 16"), "{}", check.stderr);
    let serve = agentd.run(&["--socket", dir.path().join("s.sock").to_str().expect("path"), "serve"]);
    assert_eq!(serve.code, 2, "serve agrees with check: {}", serve.stderr);

    let token = "0123456789abcdef0123456789abcdef";
    let readable = Agentd::with_config(&token_config(dir.path(), token, 0o644));
    let check = readable.run(&["config", "check"]);
    assert_eq!(check.code, 0, "{}", check.stderr);
    assert!(check.stderr.contains("agentd: warning: api.token_file"), "{}", check.stderr);
    assert!(check.stderr.contains("readable by every local user"), "{}", check.stderr);
    assert!(!check.stderr.contains(token), "{}", check.stderr);
    let private = Agentd::with_config(&token_config(dir.path(), token, 0o640));
    let check = private.run(&["config", "check"]);
    assert_eq!(check.code, 0, "{}", check.stderr);
    assert!(!check.stderr.contains("warning"), "{}", check.stderr);
}

#[test]
fn config_check_rejects_a_socket_directory_serve_cannot_use() {
    if !is_root() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    open_to_nobody(dir.path());
    let data = dir.path().join("data");
    let sockets = dir.path().join("sockets");
    for d in [&data, &sockets] {
        std::fs::create_dir(d).expect("mkdir");
        std::os::unix::fs::chown(d, Some(NOBODY), Some(NOBODY)).expect("chown");
    }
    std::fs::set_permissions(&sockets, std::fs::Permissions::from_mode(0o555)).expect("chmod");
    let agentd = Agentd { dir };
    let config = agentd.dir.path().join("agentd.toml");
    let socket = sockets.join("agentd.sock");
    std::fs::write(
        &config,
        format!("data_dir = {:?}\n[api]\nsocket = {:?}\n", data.display().to_string(), socket.display().to_string()),
    )
    .expect("config");
    let as_nobody = |args: &[&str]| {
        let mut cmd = agentd.command();
        cmd.args(args).uid(NOBODY).gid(NOBODY).stdin(Stdio::null());
        Run::from(cmd.output().expect("spawn"))
    };
    let check = as_nobody(&["config", "check"]);
    assert_eq!(check.code, 3, "{}", check.stderr);
    assert!(check.stderr.contains("socket directory") && check.stderr.contains("ermission denied"), "{}", check.stderr);
    let serve = as_nobody(&["serve"]);
    assert_eq!(serve.code, 3, "serve agrees with check: {}", serve.stderr);
}

#[test]
fn a_failed_tcp_bind_leaves_no_socket_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "0123456789abcdef0123456789abcdef").expect("token");
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = taken.local_addr().expect("addr");
    let agentd = Agentd::with_config(&format!(
        "[api]\nlisten = \"{address}\"\ntoken_file = {:?}\n",
        token_file.display().to_string()
    ));
    let socket = dir.path().join("agentd.sock");
    let serve = agentd.run(&["--socket", socket.to_str().expect("path"), "serve"]);
    assert_eq!(serve.code, 3, "{}", serve.stderr);
    assert!(serve.stderr.contains("api.listen"), "{}", serve.stderr);
    assert!(!socket.exists(), "a stale socket file was left at {}", socket.display());
}

#[test]
fn a_system_config_the_service_cannot_read_is_an_error() {
    if !is_root() {
        return;
    }
    let unshare = std::process::Command::new("unshare").args(["--mount", "true"]).status();
    if !unshare.is_ok_and(|s| s.success()) {
        agentd_testenv::skip("cannot make a mount namespace (unshare --mount)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    open_to_nobody(dir.path());
    let data = dir.path().join("data");
    std::fs::create_dir(&data).expect("mkdir");
    std::os::unix::fs::chown(&data, Some(NOBODY), Some(NOBODY)).expect("chown");
    // In a private mount namespace, a fresh /etc holding only /etc/agentd as the old README made it: root's,
    // 0750, so the service's user cannot look inside. `config check` runs as that user.
    let script = format!(
        "mount -t tmpfs tmpfs /etc && mkdir -m 0750 /etc/agentd && echo '[worker]' > /etc/agentd/agentd.toml && \
         exec setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups env -i AGENTD_DATA_DIR={data} \
         XDG_RUNTIME_DIR={data} {bin} config check",
        data = data.display(),
        bin = env!("CARGO_BIN_EXE_agentd"),
    );
    let output = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .stdin(Stdio::null())
        .output()
        .expect("unshare");
    let run = Run::from(output);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("/etc/agentd/agentd.toml") && run.stderr.contains("ermission denied"),
        "{}",
        run.stderr
    );
}
