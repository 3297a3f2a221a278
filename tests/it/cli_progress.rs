//! The CLI as people watch it: the live progress view of `run` and `submit --wait` captured through a
//! pseudo-terminal (the step, what it is doing, the model's streamed text, the cost; `NO_COLOR`), plain
//! lines off a terminal; `list` with headers and `--watch` (redrawn on a terminal, printed again elsewhere);
//! `cancel` of a finished task; the client over `https://` with a CA file.

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{Agentd, Daemon, Run};

/// A task on the mock desktop whose scripted model talks (two lines, then one more), waits 1.5 s (long
/// enough for the status line to be drawn while the action runs) and reports a cost.
fn chatty_task(dir: &Path) -> PathBuf {
    let task = serde_json::json!({
        "instructions": "wait for the screen, then finish",
        "computer": {"provider": "mock", "scene": "blank"},
        "model": {"provider": "scripted", "script": {"turns": [
            {"say": "Looking at the screen.\nI will wait for it to settle",
             "actions": [{"type": "wait", "duration_ms": 1500}],
             "usage": {"input_tokens": 1000, "output_tokens": 20, "cost_usd": 0.0123}},
            {"say": "All done here.", "complete": {"success": true, "summary": "waited for the screen"}}
        ]}}
    });
    let path = dir.join("chatty.json");
    std::fs::write(&path, task.to_string()).expect("write task");
    path
}

/// Runs `cmd` with stdin, stdout and stderr on a new pseudo-terminal of 100 columns until what it printed
/// satisfies `until` (then interrupts it with SIGINT, as Ctrl-C would) or it exits; returns its exit code
/// and everything it printed.
fn on_a_terminal(mut cmd: Command, until: impl Fn(&str) -> bool) -> (Option<i32>, String) {
    let (mut master, mut slave) = (0, 0);
    let size = libc::winsize { ws_row: 40, ws_col: 100, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: openpty writes two descriptors into the given integers and reads the window size; the name
    // and termios arguments may be null.
    let rc = unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), &size) };
    assert_eq!(rc, 0, "openpty");
    // SAFETY: both descriptors were just opened and are owned by nothing else.
    let (master, slave) = unsafe {
        use std::os::fd::FromRawFd;
        (std::fs::File::from_raw_fd(master), std::os::fd::OwnedFd::from_raw_fd(slave))
    };
    let out = slave.try_clone().expect("dup");
    let err = slave.try_clone().expect("dup");
    cmd.env("TERM", "xterm-256color");
    let mut child =
        cmd.stdin(Stdio::from(slave)).stdout(Stdio::from(out)).stderr(Stdio::from(err)).spawn().expect("spawn");
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
    let mut printed = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut interrupted = false;
    while let Ok(bytes) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        printed.extend_from_slice(&bytes);
        if until(&String::from_utf8_lossy(&printed)) {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            interrupted = true;
            break;
        }
    }
    let code = if interrupted {
        // What it prints while it stops, then its exit.
        while let Ok(bytes) = rx.recv_timeout(Duration::from_secs(10)) {
            printed.extend_from_slice(&bytes);
        }
        child.wait().ok().and_then(|s| s.code())
    } else {
        let _ = child.kill();
        child.wait().ok().and_then(|s| s.code())
    };
    (code, String::from_utf8_lossy(&printed).into_owned())
}

/// SGR sequences (`ESC [ … m`): colours and text attributes.
fn colour_codes(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (i, _) in text.match_indices("\u{1b}[") {
        let rest = &text[i + 2..];
        let end = rest.find(|c: char| !(c.is_ascii_digit() || c == ';')).unwrap_or(rest.len());
        if rest[end..].starts_with('m') {
            found.push(format!("ESC[{}m", &rest[..end]));
        }
    }
    found
}

fn run_command(agentd: &Agentd, task: &Path, no_color: Option<&str>) -> Command {
    let mut cmd = agentd.command();
    cmd.args(["run", task.to_str().expect("path")]);
    cmd.env_remove("NO_COLOR");
    if let Some(value) = no_color {
        cmd.env("NO_COLOR", value);
    }
    cmd
}

#[test]
fn run_on_a_terminal_shows_the_step_what_it_does_the_model_text_and_the_cost() {
    let agentd = Agentd::new();
    let task = chatty_task(agentd.dir.path());
    let (code, screen) = on_a_terminal(run_command(&agentd, &task, None), |_| false);
    assert_eq!(code, Some(0), "{screen}");
    // The model's text, line by line as it streamed, stays on the screen.
    assert!(screen.contains("│ \u{1b}[0mLooking at the screen.\r\n"), "{screen:?}");
    assert!(screen.contains("I will wait for it to settle"), "{screen:?}");
    assert!(screen.contains("All done here."), "{screen:?}");
    // The status line, redrawn in place: the step, what it is doing, the elapsed time; the cost so far
    // once the step has reported it.
    assert!(screen.contains("\u{1b}[2K"), "the status line is erased and drawn again: {screen:?}");
    assert!(screen.contains("step 0\u{1b}[0m\u{1b}[2m · running wait(1500ms) · "), "{screen:?}");
    assert!(screen.contains("· $0.0123 · 1000→20 tok"), "{screen:?}");
    // The lines that stay: each step, and the outcome in colour.
    assert!(screen.contains("\u{1b}[1mstep   0\u{1b}[0m  wait(1500ms)  "), "{screen:?}");
    assert!(screen.contains("\u{1b}[32m✓ succeeded: waited for the screen"), "{screen:?}");
    // The result on stdout (the same terminal here) after the view is gone.
    assert!(screen.contains("succeeded: waited for the screen (2 steps)"), "{screen:?}");
    // Auto-wrap is turned back on whenever it was turned off.
    assert_eq!(screen.matches("\u{1b}[?7l").count(), screen.matches("\u{1b}[?7h").count(), "{screen:?}");
}

#[test]
fn no_color_keeps_the_live_view_without_a_colour_code() {
    let agentd = Agentd::new();
    let task = chatty_task(agentd.dir.path());
    let (code, screen) = on_a_terminal(run_command(&agentd, &task, Some("1")), |_| false);
    assert_eq!(code, Some(0), "{screen}");
    assert!(colour_codes(&screen).is_empty(), "NO_COLOR=1 but colour codes {:?}:\n{screen:?}", colour_codes(&screen));
    assert!(screen.contains("\u{1b}[2K"), "still a live view: {screen:?}");
    assert!(screen.contains("│ Looking at the screen.\r\n"), "{screen:?}");
    assert!(screen.contains("step 0 · running wait(1500ms) · "), "{screen:?}");
    assert!(screen.contains("✓ succeeded: waited for the screen"), "{screen:?}");
    // An empty NO_COLOR is as if it were not set.
    let (code, screen) = on_a_terminal(run_command(&agentd, &task, Some("")), |_| false);
    assert_eq!(code, Some(0), "{screen}");
    assert!(!colour_codes(&screen).is_empty(), "{screen:?}");
}

#[test]
fn off_a_terminal_progress_is_plain_lines() {
    let agentd = Agentd::new();
    let task = chatty_task(agentd.dir.path());
    let run = Run::from(run_command(&agentd, &task, None).stdin(Stdio::null()).output().expect("run"));
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!run.stderr.contains('\u{1b}') && !run.stdout.contains('\u{1b}'), "{:?}", run.stderr);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert!(
        lines.iter().any(|l| l.starts_with("step   0  wait(1500ms)  ") && l.ends_with("1000→20 tok")),
        "{lines:#?}"
    );
    assert!(lines.iter().any(|l| l.starts_with("step   1  (no actions)  ")), "{lines:#?}");
    assert!(lines.iter().any(|l| l.starts_with("✓ succeeded: waited for the screen")), "{lines:#?}");
    assert!(!run.stderr.contains("Looking at the screen"), "the model's text is the live view's: {lines:#?}");
    assert_eq!(run.stdout, "succeeded: waited for the screen (2 steps)\n");
}

#[test]
fn submit_wait_on_a_terminal_follows_the_daemon_live() {
    let daemon = Daemon::start("");
    let task = chatty_task(daemon.agentd.dir.path());
    let mut cmd = daemon.agentd.command();
    cmd.args(["--socket", daemon.socket.to_str().expect("socket"), "submit", task.to_str().expect("path"), "--wait"]);
    cmd.env_remove("NO_COLOR");
    let (code, screen) = on_a_terminal(cmd, |_| false);
    assert_eq!(code, Some(0), "{screen}\n{}", daemon.log());
    assert!(screen.contains("Looking at the screen.\r\n"), "{screen:?}");
    assert!(screen.contains(" · running wait(1500ms) · "), "{screen:?}");
    assert!(screen.contains("\u{1b}[1mstep   0\u{1b}[0m  wait(1500ms)  "), "{screen:?}");
    assert!(screen.contains("✓ succeeded: waited for the screen"), "{screen:?}");
}

#[test]
fn submit_wait_stops_following_on_ctrl_c_and_the_task_goes_on() {
    let daemon = Daemon::start("");
    let task = serde_json::json!({
        "id": "long-one",
        "instructions": "wait long",
        "computer": {"provider": "mock", "scene": "blank"},
        "model": {"provider": "scripted", "script": {"turns": [
            {"actions": [{"type": "wait", "duration_ms": 4000}]},
            {"complete": {"success": true, "summary": "done"}}
        ]}}
    });
    let path = daemon.agentd.dir.path().join("long.json");
    std::fs::write(&path, task.to_string()).expect("task");
    let mut cmd = daemon.agentd.command();
    cmd.args(["--socket", daemon.socket.to_str().expect("socket"), "submit", path.to_str().expect("path"), "--wait"]);
    let (code, screen) = on_a_terminal(cmd, |screen| screen.contains("running wait(4000ms)"));
    assert_eq!(code, Some(130), "{screen}");
    assert!(screen.contains("stopped following; task long-one goes on"), "{screen:?}");
    let task = daemon.wait_terminal("long-one", Duration::from_secs(30));
    assert_eq!(task["state"], "succeeded", "{task}");
}

/// A daemon with one finished task (two steps, $0.0123), and its id.
fn daemon_with_a_finished_task() -> (Daemon, String) {
    let daemon = Daemon::start("");
    let task = chatty_task(daemon.agentd.dir.path());
    let submit = daemon.cli(&["submit", task.to_str().expect("path"), "--wait"]);
    assert_eq!(submit.code, 0, "{}\n{}", submit.stderr, daemon.log());
    let id = submit.stdout.trim().to_string();
    (daemon, id)
}

#[test]
fn list_has_headers_age_steps_and_cost() {
    let (daemon, id) = daemon_with_a_finished_task();
    let list = daemon.cli(&["list"]);
    assert_eq!(list.code, 0, "{}", list.stderr);
    let lines: Vec<&str> = list.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", list.stdout);
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(header, ["ID", "STATE", "AGE", "STEPS", "COST", "SUMMARY"], "{}", list.stdout);
    let cells: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(cells[0], id, "{cells:?}");
    assert_eq!(cells[1], "succeeded");
    let age = cells[2].strip_suffix('s').expect("an age in seconds");
    assert!(age.parse::<u32>().is_ok_and(|s| s < 120), "{}", cells[2]);
    assert_eq!(cells[3], "2", "steps");
    assert_eq!(cells[4], "$0.0123", "cost");
    assert!(lines[1].ends_with("  waited for the screen"), "{}", lines[1]);
    // The columns line up under their headers.
    assert_eq!(lines[0].find("STATE"), lines[1].find("succeeded"), "{}", list.stdout);
    // The API says how many steps each task has; --json is its document.
    let json = daemon.cli(&["list", "--json"]).json();
    assert_eq!(json["tasks"][0]["step_count"], 2, "{json}");
    // Nothing to list: no table, and a word on stderr.
    let none = daemon.cli(&["list", "--state", "failed"]);
    assert_eq!((none.code, none.stdout.as_str()), (0, ""), "{}", none.stderr);
    assert!(none.stderr.contains("no tasks"), "{}", none.stderr);
}

#[test]
fn list_watch_prints_again_off_a_terminal_and_redraws_on_one_until_ctrl_c() {
    let (daemon, id) = daemon_with_a_finished_task();
    let mut child = daemon
        .agentd
        .command()
        .args(["--socket", daemon.socket.to_str().expect("socket"), "list", "--watch"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = std::io::BufReader::new(stdout).lines();
    let started = Instant::now();
    let mut headers = 0;
    let mut rows = 0;
    let mut blank = 0;
    while headers < 2 {
        let line = lines.next().expect("a line before the stream ends").expect("read");
        if line.starts_with("ID  ") {
            headers += 1;
        } else if line.starts_with(&id) {
            rows += 1;
        } else if line.is_empty() {
            blank += 1;
        }
    }
    assert!(started.elapsed() >= Duration::from_millis(1500), "the second table comes about 2 s after the first");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(0), "Ctrl-C ends watching normally");
    assert_eq!((rows, blank), (1, 1), "one row per table, a blank line between tables");

    // On a terminal: the screen is cleared once, then each render starts at the top left again, every row
    // erased to its end.
    let mut cmd = daemon.agentd.command();
    cmd.args(["--socket", daemon.socket.to_str().expect("socket"), "list", "--watch"]);
    let (code, screen) = on_a_terminal(cmd, |screen| screen.matches("every 2s: agentd list").count() >= 2);
    assert_eq!(code, Some(0), "{screen:?}");
    assert_eq!(screen.matches("\u{1b}[2J").count(), 1, "{screen:?}");
    let renders: Vec<&str> = screen.split("\u{1b}[H").skip(1).collect();
    assert!(renders.len() >= 2, "{screen:?}");
    for render in &renders[..2] {
        assert!(render.contains("\u{1b}[1mID"), "bold headers: {render:?}");
        assert!(render.contains(&format!("{id}  \u{1b}[32msucceeded\u{1b}[0m")), "{render:?}");
        assert!(render.contains("\u{1b}[K\r\n"), "{render:?}");
    }
}

#[test]
fn cancel_of_a_finished_task_exits_0_and_says_so_and_an_unknown_task_is_2() {
    let (daemon, id) = daemon_with_a_finished_task();
    let cancel = daemon.cli(&["cancel", &id]);
    assert_eq!(cancel.code, 0, "{}", cancel.stderr);
    assert!(cancel.stderr.contains(&format!("task {id} already finished: succeeded")), "{}", cancel.stderr);
    let json = daemon.cli(&["cancel", &id, "--json"]);
    assert_eq!(json.code, 0, "{}", json.stderr);
    assert_eq!(json.json(), serde_json::json!({"id": id, "state": "succeeded", "cancel": "already_finished"}));
    assert_eq!(daemon.task(&id)["state"], "succeeded", "nothing changed");
    let unknown = daemon.cli(&["cancel", "no-such-task"]);
    assert_eq!(unknown.code, 2, "{}", unknown.stderr);
    assert!(unknown.stderr.contains("not found"), "{}", unknown.stderr);
}

/// `openssl` with `args` in `dir`; panics with its output when it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").args(args).current_dir(dir).output().expect("openssl");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn the_client_reaches_an_https_url_checking_the_certificate_against_agentd_ca_file() {
    if Command::new("openssl").arg("version").output().is_err() {
        agentd_testenv::skip("openssl is not installed (scripts/setup/41-cli-openssl.sh installs it)");
        return;
    }
    // A CA, and a server certificate for 127.0.0.1 that it signed.
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let key = ["-newkey", "rsa:2048", "-nodes"];
    openssl(
        d,
        &[
            &["req", "-x509"][..],
            &key,
            &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=agentd test CA"],
        ]
        .concat(),
    );
    openssl(
        d,
        &[&["req"][..], &key, &["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"]].concat(),
    );
    std::fs::write(
        d.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .expect("ext");
    openssl(
        d,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
    );
    // `openssl s_server -WWW` serves files under its directory over TLS: /v1/tasks is an empty task list.
    let www = d.join("www");
    std::fs::create_dir_all(www.join("v1")).expect("www");
    std::fs::write(www.join("v1/tasks"), "{\"tasks\":[]}").expect("tasks");
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let mut server = Command::new("openssl")
        .args(["s_server", "-quiet", "-WWW", "-accept", &format!("127.0.0.1:{port}")])
        .args([
            "-cert",
            d.join("server.pem").to_str().expect("path"),
            "-key",
            d.join("server.key").to_str().expect("path"),
        ])
        .current_dir(&www)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("s_server");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "s_server did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    let agentd = Agentd::new();
    let url = format!("https://127.0.0.1:{port}");
    let list = |ca: Option<&Path>| {
        let mut cmd = agentd.command();
        cmd.args(["--url", &url, "list", "--json"]).env("AGENTD_TOKEN", "0123456789abcdef");
        if let Some(ca) = ca {
            cmd.env("AGENTD_CA_FILE", ca);
        }
        Run::from(cmd.stdin(Stdio::null()).output().expect("agentd"))
    };
    let trusted = list(Some(&d.join("ca.pem")));
    assert_eq!(trusted.code, 0, "{}", trusted.stderr);
    assert_eq!(trusted.json(), serde_json::json!({"tasks": []}));
    // The system's roots do not know this CA: refused, with what to do.
    let untrusted = list(None);
    assert_eq!(untrusted.code, 3, "{}", untrusted.stderr);
    assert!(
        untrusted.stderr.contains("certificate") && untrusted.stderr.contains("AGENTD_CA_FILE"),
        "{}",
        untrusted.stderr
    );
    assert_eq!(untrusted.stderr.lines().count(), 1, "one message, no log line: {}", untrusted.stderr);
    // A CA file that is not there, or holds no certificate: invalid input naming the variable.
    for bad in [d.join("missing.pem"), d.join("ext.cnf")] {
        let run = list(Some(&bad));
        assert_eq!(run.code, 2, "{}", run.stderr);
        assert!(run.stderr.contains(&format!("AGENTD_CA_FILE={}", bad.display())), "{}", run.stderr);
    }
    let _ = server.kill();
    let _ = server.wait();
}

#[test]
fn a_url_that_is_not_http_or_https_is_invalid_input() {
    let agentd = Agentd::new();
    for url in ["ftp://127.0.0.1:1", "http://127.0.0.1:1/path"] {
        let run = agentd.run(&["--url", url, "list"]);
        assert_eq!(run.code, 2, "{url}: {}", run.stderr);
        assert!(run.stderr.contains(url), "{}", run.stderr);
    }
}

/// `--url https://…` pointed at a plain HTTP listener: the message says the server does not speak TLS and
/// what to use, not the TLS library's internals.
#[test]
fn an_https_url_at_a_plain_http_listener_says_so() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(4) {
            let Ok(mut stream) = stream else { continue };
            let mut buffer = [0u8; 1024];
            let _ = stream.read(&mut buffer);
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
    });
    let agentd = Agentd::new();
    let run = agentd.run(&["--url", &format!("https://127.0.0.1:{port}"), "list"]);
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(run.stderr.contains("does not answer in TLS") && run.stderr.contains("http://"), "{}", run.stderr);
}
