//! The computer-server provider against the real `cua-computer-server` from PyPI, running on an Xvfb display
//! of each test's own: the conformance kit, input checked by the recording app, guest commands, the
//! server killed and restarted under a live provider, and the credentials the server asks for.
//!
//! Needs `AGENTD_TEST_CUA_PYTHON` (the virtualenv `scripts/setup/35-cua.sh` makes) and Xvfb; without them
//! each test prints why it skips.

use std::process::Command;
use std::time::{Duration, Instant};

use agentd_computer::conformance::{self, Options};
use agentd_computer::{Action, ComputerProvider, Point, ProviderError};
use agentd_cuaserver::{CuaConfig, CuaError, CuaServerProvider};
use agentd_local::testing::{self, Process, RecorderApp, XServer, layout};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);
/// How long a started computer-server may take to listen.
const SERVER_START: Duration = Duration::from_secs(120);

fn python() -> Option<String> {
    let python = std::env::var("AGENTD_TEST_CUA_PYTHON").ok().filter(|v| !v.is_empty());
    if python.is_none() {
        agentd_local::testing::skip(
            "AGENTD_TEST_CUA_PYTHON not set (scripts/test installs cua-computer-server and sets it)",
        );
    }
    python
}

/// `python -m computer_server` on `display` and `port`, in local mode (no `CONTAINER_NAME`: no cloud
/// authentication) unless `container_name` is given.
fn start_server(python: &str, display: &str, port: u16, container_name: Option<&str>) -> Process {
    let mut command = Command::new(python);
    command
        .args(["-m", "computer_server", "--host", "127.0.0.1", "--port", &port.to_string(), "--log-level", "warning"])
        .env("DISPLAY", display)
        .env_remove("CONTAINER_NAME")
        .env_remove("UNAVAILABLE_WITHOUT_CONTAINER_NAME");
    if let Some(name) = container_name {
        command.env("CONTAINER_NAME", name);
    }
    // The server imports a large Python package before it listens: 2–5 s here, 20 s and more seen on a
    // slow machine under the whole suite's load. The wait ends as soon as it listens, or exits.
    let log = std::env::temp_dir().join(format!("agentd-test-computer-server-{port}.log"));
    testing::spawn_listening("computer_server", &mut command, port, &log, SERVER_START)
        .unwrap_or_else(|e| panic!("computer_server on {display}: {e}"))
}

struct Machine {
    x: XServer,
    python: String,
    port: u16,
    server: Process,
}

impl Machine {
    fn start() -> Option<Self> {
        let python = python()?;
        let x = XServer::xvfb(1280, 800).expect("Xvfb");
        let port = testing::free_port().expect("port");
        let server = start_server(&python, &x.display, port, None);
        Some(Self { x, python, port, server })
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    async fn connect(&self) -> CuaServerProvider {
        CuaServerProvider::connect(CuaConfig::new(self.url())).await.expect("connect to computer_server")
    }
}

async fn act(provider: &CuaServerProvider, json: Value) {
    let action: Action = serde_json::from_value(json.clone()).expect("action json");
    provider.perform(&action).await.unwrap_or_else(|e| panic!("{json}: {e}"));
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["event"] == kind).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_against_the_real_server() {
    let Some(machine) = Machine::start() else { return };
    let provider = machine.connect().await;
    let report = conformance::run(&provider, &Options { static_screen: true, ..Options::default() }).await;
    report.assert_passed();
    assert!(report.passed.len() >= 10, "{:?}", report.passed);
    assert_eq!(provider.status().await.expect("status")["status"], "ok");
}

/// Clicks with buttons and held modifiers, double and triple clicks, scrolls, a drag along a path, typing
/// and chords: the recording app sees each where and as asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_lands_in_the_recording_app() {
    let Some(machine) = Machine::start() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let app = RecorderApp::start(&machine.x.display, &dir.path().join("log")).expect("recorder");
    let provider = machine.connect().await;
    act(&provider, json!({"type": "click", "x": 100, "y": 150})).await;
    act(&provider, json!({"type": "click", "x": 200, "y": 160, "button": "right", "keys": ["shift"]})).await;
    act(&provider, json!({"type": "click", "x": 210, "y": 170, "button": "middle", "keys": ["ctrl"]})).await;
    act(&provider, json!({"type": "scroll", "x": 700, "y": 200, "scroll_y": 200})).await;
    act(&provider, json!({"type": "scroll", "x": 710, "y": 210, "scroll_y": -100})).await;
    act(&provider, json!({"type": "drag", "path": [{"x": 50, "y": 300}, {"x": 150, "y": 320}, {"x": 400, "y": 380}]}))
        .await;
    act(&provider, json!({"type": "triple_click", "x": 300, "y": 250})).await;
    act(&provider, json!({"type": "click", "x": layout::ENTRY.0, "y": layout::ENTRY.1})).await;
    let text = "Hello, agentd (ok?) 42";
    act(&provider, json!({"type": "type", "text": text})).await;
    act(&provider, json!({"type": "keypress", "keys": ["ctrl", "slash"]})).await;
    act(&provider, json!({"type": "hold_key", "keys": ["shift"], "duration_ms": 50})).await;
    let events = app.wait_until(WAIT, |events| {
        of_kind(events, "text").last().and_then(|e| e["value"].as_str()) == Some(text)
            && of_kind(events, "key").iter().any(|e| e["keysym"] == "slash")
            && of_kind(events, "key_release").iter().any(|e| e["keysym"] == "Shift_L")
    });
    let presses: Vec<(i64, i64, i64, i64)> = of_kind(&events, "press")
        .iter()
        .map(|e| {
            let n = |f: &str| e[f].as_i64().unwrap_or(-1);
            (n("button"), n("x"), n("y"), n("state") & 0xff)
        })
        .collect();
    let expected = vec![
        (1, 100, 150, 0),
        (3, 200, 160, 1),
        (2, 210, 170, 4),
        (5, 700, 200, 0),
        (5, 700, 200, 0),
        (4, 710, 210, 0),
        (1, 50, 300, 0),
        (1, 300, 250, 0),
        (1, 300, 250, 0),
        (1, 300, 250, 0),
        (1, layout::ENTRY.0 as i64, layout::ENTRY.1 as i64, 0),
    ];
    assert_eq!(presses, expected, "every press: {events:#?}");
    assert!(!of_kind(&events, "triple").is_empty(), "the app saw a triple click: {events:#?}");
    let motions: Vec<(i64, i64)> = of_kind(&events, "motion")
        .iter()
        .map(|e| (e["x"].as_i64().unwrap_or(-1), e["y"].as_i64().unwrap_or(-1)))
        .collect();
    assert!(motions.contains(&(150, 320)), "the drag's middle point: {motions:?}");
    let released = of_kind(&events, "release").iter().any(|e| e["button"] == 1 && e["x"] == 400 && e["y"] == 380);
    assert!(released, "released at the drag's end: {events:#?}");
    let keys = of_kind(&events, "key");
    assert!(
        keys.iter().any(|e| e["keysym"] == "slash" && e["state"].as_i64().unwrap_or(0) & 4 != 0),
        "ctrl+slash with Control held: {keys:#?}"
    );
    let cursor = provider.perform(&Action::CursorPosition {}).await.expect("cursor").cursor;
    assert_eq!(cursor, Some(Point::new(layout::ENTRY.0, layout::ENTRY.1)));
    // What the server cannot do is a tool error, and the connection is still fine after it.
    let forward = serde_json::from_value(json!({"type": "click", "x": 5, "y": 5, "button": "forward"})).unwrap();
    assert!(matches!(provider.perform(&forward).await, Err(ProviderError::Unsupported { .. })));
    let kp = serde_json::from_value(json!({"type": "keypress", "keys": ["KP_Enter"]})).unwrap();
    let err = provider.perform(&kp).await.unwrap_err();
    assert!(err.is_tool_error() && err.to_string().contains("KP_Enter"), "{err}");
    provider.health().await.expect("healthy after refused actions");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_commands_report_output_and_exit_code() {
    let Some(machine) = Machine::start() else { return };
    let provider = machine.connect().await;
    let out = provider.run_command("echo out; echo err >&2; exit 3").await.expect("run_command");
    assert_eq!(out.stdout, "out\n");
    assert_eq!(out.stderr, "err\n");
    assert_eq!(out.return_code, Some(3));
    let display = provider.run_command("echo $DISPLAY").await.expect("run_command");
    assert_eq!(display.stdout.trim(), machine.x.display);
}

/// The server killed under a live provider: a call made while it is down waits for it to come back and
/// then succeeds; with the server gone for good, calls fail with the reason, retryable, within the grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_is_waited_for_and_then_reported() {
    let Some(mut machine) = Machine::start() else { return };
    let mut config = CuaConfig::new(machine.url());
    config.reconnect_grace = SERVER_START;
    let provider = CuaServerProvider::connect(config).await.expect("connect");
    let first = provider.screenshot().await.expect("screenshot");
    machine.server.kill();
    let (python, display, port) = (machine.python.clone(), machine.x.display.clone(), machine.port);
    let restart = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        start_server(&python, &display, port, None)
    });
    let start = Instant::now();
    act(&provider, json!({"type": "click", "x": 10, "y": 10})).await;
    assert!(start.elapsed() >= Duration::from_millis(900), "the click waited for the restart");
    let again = provider.screenshot().await.expect("screenshot after the restart");
    assert_eq!(again.size(), first.size());
    machine.server = restart.join().expect("restart thread");

    // Gone for good: a provider whose grace is short (the one above waits as long as a slow machine takes
    // to start the server) fails its call with the reason, retryable, once its grace is over.
    let mut short = CuaConfig::new(machine.url());
    short.reconnect_grace = Duration::from_millis(1500);
    let brief = CuaServerProvider::connect(short.clone()).await.expect("connect");
    machine.server.kill();
    let start = Instant::now();
    let err = match CuaServerProvider::connect(short).await {
        Ok(_) => panic!("connected to a dead server"),
        Err(e) => e,
    };
    assert!(matches!(err, CuaError::Connect { .. }), "{err:?}");
    assert!(start.elapsed() < Duration::from_secs(10));
    let err = brief.perform(&Action::Move { x: 1, y: 1, keys: Vec::new() }).await.unwrap_err();
    assert!(err.is_retryable() && err.to_string().contains(&machine.url()), "{err}");
    assert!(start.elapsed() < SERVER_START, "the call waited past its own grace: {:?}", start.elapsed());
}

/// A server in cloud mode (`CONTAINER_NAME` set) refuses commands without credentials: a clear, final error
/// that names the setting, not a retry loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_credentials_are_a_final_error() {
    let Some(python) = python() else { return };
    let x = XServer::xvfb(640, 480).expect("Xvfb");
    let port = testing::free_port().expect("port");
    let _server = start_server(&python, &x.display, port, Some("agentd-test-box"));
    let provider =
        CuaServerProvider::connect(CuaConfig::new(format!("http://127.0.0.1:{port}"))).await.expect("status is open");
    let err = provider.screenshot().await.unwrap_err();
    assert!(matches!(err, ProviderError::Failed(_)), "{err:?}");
    assert!(err.to_string().contains("api_key_env"), "{err}");
}

/// A stand-in computer-server speaking just enough of its protocol: `GET /status`, `get_screen_size`, and
/// success for every other command, except where `cut_off(command, times_sent_before)` says to die while
/// answering: it sends its streaming headers (as computer-server does before it runs the command) and
/// closes. Returns its URL, the commands it was sent in order (all but `get_screen_size`), and its task.
async fn stand_in_server(
    cut_off: fn(&str, usize) -> bool,
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>, tokio::task::JoinHandle<()>) {
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let commands: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = commands.clone();
    let server = tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&request).to_lowercase();
                let length = text
                    .lines()
                    .find_map(|line| line.strip_prefix("content-length:").and_then(|v| v.trim().parse::<usize>().ok()))
                    .unwrap_or(0);
                let head_len = request.windows(4).position(|w| w == b"\r\n\r\n").map_or(0, |p| p + 4);
                while request.len() < head_len + length {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let reply = |content_type: &str, body: &str| {
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                };
                let reply = if request.starts_with(b"GET /status") {
                    reply("application/json", r#"{"status": "ok", "os_type": "linux"}"#)
                } else {
                    let body: Value = serde_json::from_slice(&request[head_len..]).unwrap_or_default();
                    let command = body["command"].as_str().unwrap_or_default().to_string();
                    if command == "get_screen_size" {
                        reply(
                            "text/plain",
                            "data: {\"success\": true, \"size\": {\"width\": 640, \"height\": 480}}\n\n",
                        )
                    } else {
                        let before = {
                            let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                            let before = seen.iter().filter(|c| **c == command).count();
                            seen.push(command.clone());
                            before
                        };
                        if cut_off(&command, before) {
                            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n"
                                .to_string()
                        } else {
                            reply("text/plain", "data: {\"success\": true}\n\n")
                        }
                    }
                };
                let _ = socket.write_all(reply.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    (url, commands, server)
}

/// A server that dies while answering an input command: with the server back, the provider says it does
/// not know whether the action happened (a tool error; the action is not sent again); with it gone for
/// good, the attempt ends as for any lost server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_whose_answer_is_cut_off_is_uncertain_and_never_resent() {
    let (url, commands, server) = stand_in_server(|command, _| command == "move_cursor").await;
    let mut config = CuaConfig::new(url.clone());
    config.reconnect_grace = Duration::from_secs(5);
    let provider = CuaServerProvider::connect(config).await.expect("connect");
    let err = provider.perform(&Action::Move { x: 5, y: 5, keys: Vec::new() }).await.unwrap_err();
    assert!(matches!(err, ProviderError::Uncertain(_)), "{err:?}");
    assert!(err.is_tool_error() && !err.is_retryable(), "{err:?}");
    assert!(err.to_string().contains("move_cursor") && err.to_string().contains("not known"), "{err}");
    assert_eq!(*commands.lock().expect("commands"), ["move_cursor"], "the command was sent once, not again");

    server.abort();
    let _ = server.await;
    // Nothing listens now: the next input cannot even connect, and ends as unavailable once the grace
    // (5 s) is over.
    let err = provider.perform(&Action::Move { x: 6, y: 6, keys: Vec::new() }).await.unwrap_err();
    assert!(err.is_retryable() && err.to_string().contains(&url), "{err}");
}

/// A click whose `mouse_up` answer is cut off (the server killed between press and release, then back):
/// the model is told its effect is not known, and the button is released again so it is not left held on
/// the machine, where it would swallow the next click's press (X drops a press of a button that is down: a
/// real server restarted mid-task lost the click after, which the model had been told landed). The same
/// for a drag's release. The press itself is never sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_cut_off_is_sent_again_so_no_button_stays_held() {
    let (url, commands, _server) = stand_in_server(|command, before| command == "mouse_up" && before % 2 == 0).await;
    let mut config = CuaConfig::new(url);
    config.reconnect_grace = Duration::from_secs(5);
    let provider = CuaServerProvider::connect(config).await.expect("connect");
    let click = Action::Click { x: 20, y: 10, button: agentd_computer::MouseButton::Left, keys: Vec::new() };
    let err = provider.perform(&click).await.unwrap_err();
    assert!(matches!(err, ProviderError::Uncertain(_)) && err.to_string().contains("mouse_up"), "{err:?}");
    assert_eq!(*commands.lock().expect("commands"), ["mouse_down", "mouse_up", "mouse_up"]);
    provider.perform(&Action::Move { x: 1, y: 1, keys: Vec::new() }).await.expect("the server answers again");

    commands.lock().expect("commands").clear();
    let drag = Action::Drag {
        path: vec![Point::new(5, 5), Point::new(50, 50)],
        button: agentd_computer::MouseButton::Left,
        keys: Vec::new(),
    };
    let err = provider.perform(&drag).await.unwrap_err();
    assert!(matches!(err, ProviderError::Uncertain(_)), "{err:?}");
    assert_eq!(
        *commands.lock().expect("commands"),
        ["move_cursor", "mouse_down", "move_cursor", "mouse_up", "mouse_up"],
        "pressed once, released again after the lost answer"
    );
}

/// The `/ws` transport against the real server: the conformance kit over the WebSocket, input landing in
/// the recording app, and a restart of the server in between (the WebSocket is made again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_websocket_transport_carries_every_command() {
    let Some(mut machine) = Machine::start() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let app = RecorderApp::start(&machine.x.display, &dir.path().join("log")).expect("recorder");
    let config = CuaConfig { transport: agentd_cuaserver::Transport::WebSocket, ..CuaConfig::new(machine.url()) };
    let provider = CuaServerProvider::connect(config).await.expect("connect");
    assert!(provider.uses_websocket());
    let report = conformance::run(&provider, &Options { static_screen: true, ..Options::default() }).await;
    report.assert_passed();
    act(&provider, json!({"type": "click", "x": 100, "y": 150, "keys": ["ctrl"]})).await;
    machine.server.kill();
    let (python, display, port) = (machine.python.clone(), machine.x.display.clone(), machine.port);
    machine.server =
        tokio::task::spawn_blocking(move || start_server(&python, &display, port, None)).await.expect("restart");
    act(&provider, json!({"type": "drag", "path": [{"x": 60, "y": 300}, {"x": 200, "y": 320}], "button": "right"}))
        .await;
    let events = app.wait_until(WAIT, |events| of_kind(events, "release").iter().any(|e| e["button"] == 3));
    let presses: Vec<(i64, i64, i64, i64)> = of_kind(&events, "press")
        .iter()
        .map(|e| {
            let n = |f: &str| e[f].as_i64().unwrap_or(-1);
            (n("button"), n("x"), n("y"), n("state") & 0xff)
        })
        .collect();
    assert!(presses.contains(&(1, 100, 150, 4)), "ctrl-click over the WebSocket: {presses:?}");
    assert!(presses.contains(&(3, 60, 300, 0)), "right-button drag after the restart: {presses:?}");
}

/// A server without `POST /cmd` (404) is spoken to over `/ws` from then on (`auto`); with `http` it is an
/// error that names the setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_cmd_is_tried_over_the_websocket() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let server = tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let reply = if request.starts_with(b"GET /status") {
                    let body = r#"{"status": "ok"}"#;
                    format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len())
                } else {
                    let body = r#"{"detail": "Not Found"}"#;
                    format!(
                        "HTTP/1.1 404 Not Found\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                };
                let _ = socket.write_all(reply.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    let provider = CuaServerProvider::connect(CuaConfig::new(url.clone())).await.expect("connect");
    let err = provider.perform(&Action::Move { x: 1, y: 1, keys: Vec::new() }).await.unwrap_err();
    assert!(provider.uses_websocket(), "switched to /ws after the 404");
    assert!(err.to_string().contains("/ws") && err.to_string().contains("404"), "{err}");
    let http = CuaConfig { transport: agentd_cuaserver::Transport::Http, ..CuaConfig::new(url) };
    let provider = CuaServerProvider::connect(http).await.expect("connect");
    let err = provider.perform(&Action::Move { x: 1, y: 1, keys: Vec::new() }).await.unwrap_err();
    assert!(!provider.uses_websocket());
    assert!(err.to_string().contains("computer.transport"), "{err}");
    server.abort();
}

/// Sets the input focus of `display` with python-xlib (in the server's virtualenv: pynput needs it):
/// `pointer-root`, `none`, or `recorder` (the recording app's window).
fn set_focus(python: &str, display: &str, to: &str) {
    let script = r#"import sys, Xlib.display, Xlib.X as X
d = Xlib.display.Display()
def find(w):
    if w.get_wm_name() == "agentd recorder":
        return w
    for c in w.query_tree().children:
        found = find(c)
        if found:
            return found
to = sys.argv[1]
target = X.PointerRoot if to == "pointer-root" else X.NONE if to == "none" else find(d.screen().root)
d.set_input_focus(target, X.RevertToParent, X.CurrentTime)
d.sync()"#;
    let out = Command::new(python).args(["-c", script, to]).env("DISPLAY", display).output().expect("python");
    assert!(out.status.success(), "setting the focus to {to}: {}", String::from_utf8_lossy(&out.stderr));
}

/// What the provider now refuses, and why: cua's computer-server types characters with pynput, which sends
/// them to the window X names as focused. On a bare Xvfb with no window manager the focus is PointerRoot and
/// clicks do not move it: the server answers success and the characters land nowhere (the control below,
/// straight to the server), while named keys (XTest) reach the window under the pointer. The provider asks
/// the display first: it refuses keys that would be dropped with the reason (a tool error), lets named keys
/// through, and types again once a window has the focus.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_that_no_focused_window_would_receive_are_refused_with_the_reason() {
    let Some(machine) = Machine::start() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let app = RecorderApp::start(&machine.x.display, &dir.path().join("log")).expect("recorder");
    let provider = machine.connect().await;
    // The recording app takes the focus itself (as most test fixtures must on a bare X server).
    assert_eq!(provider.keyboard_focus().await.expect("focus"), Some(agentd_cuaserver::KeyboardFocus::Window));

    set_focus(&machine.python, &machine.x.display, "pointer-root");
    assert_eq!(provider.keyboard_focus().await.expect("focus"), Some(agentd_cuaserver::KeyboardFocus::PointerRoot));
    act(&provider, json!({"type": "click", "x": layout::ENTRY.0, "y": layout::ENTRY.1})).await;
    // The control: the server itself answers success to typing that lands nowhere, then a named key, which
    // goes through XTest, lands; the app saw it and no character before it.
    let raw = reqwest::Client::new()
        .post(format!("{}/cmd", machine.url()))
        .header("content-type", "application/json")
        .body(json!({"command": "type_text", "params": {"text": "lost"}}).to_string())
        .send()
        .await
        .expect("type_text")
        .text()
        .await
        .expect("answer");
    assert!(raw.contains("\"success\": true"), "{raw}");
    act(&provider, json!({"type": "keypress", "keys": ["Return"]})).await;
    let events = app.wait_until(WAIT, |events| of_kind(events, "key").iter().any(|e| e["keysym"] == "Return"));
    let keys: Vec<&Value> = of_kind(&events, "key").into_iter().map(|e| &e["keysym"]).collect();
    assert_eq!(keys, [&json!("Return")], "only the named key landed: {events:#?}");

    for action in [
        json!({"type": "type", "text": "hello"}),
        json!({"type": "keypress", "keys": ["ctrl", "a"]}),
        json!({"type": "hold_key", "keys": ["a"], "duration_ms": 10}),
    ] {
        let parsed: Action = serde_json::from_value(action.clone()).expect("action");
        let err = provider.perform(&parsed).await.expect_err("refused");
        assert!(matches!(err, ProviderError::NotDelivered(_)) && err.is_tool_error(), "{action}: {err:?}");
        let message = err.to_string();
        assert!(
            message.contains("nothing was sent")
                && message.contains("PointerRoot")
                && message.contains("window manager")
                && message.contains(&machine.url()),
            "{message}"
        );
    }

    // No focus at all: not even a named key would land.
    set_focus(&machine.python, &machine.x.display, "none");
    let err = provider.perform(&Action::Keypress { keys: vec!["Return".into()] }).await.expect_err("refused");
    assert!(err.to_string().contains("no input focus at all"), "{err}");

    // A window given the focus (what a window manager does on a click): typing is sent, and lands.
    set_focus(&machine.python, &machine.x.display, "recorder");
    act(&provider, json!({"type": "type", "text": "landed"})).await;
    let events = app
        .wait_until(WAIT, |events| of_kind(events, "text").last().and_then(|e| e["value"].as_str()) == Some("landed"));
    assert!(
        !of_kind(&events, "text").iter().any(|e| e["value"].as_str().unwrap_or_default().contains("lost")),
        "{events:#?}"
    );
}

/// A server that cannot say where its focus is (the stand-in answers `run_command` with no output, as a
/// machine without python-xlib would): keys are sent as before, and the question is asked once only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_tell_its_focus_types_as_before_and_is_asked_once() {
    let (url, commands, _server) = stand_in_server(|_, _| false).await;
    let provider = CuaServerProvider::connect(CuaConfig::new(url)).await.expect("connect");
    act(&provider, json!({"type": "type", "text": "one"})).await;
    act(&provider, json!({"type": "keypress", "keys": ["ctrl", "a"]})).await;
    assert_eq!(*commands.lock().expect("commands"), ["run_command", "type_text", "hotkey"]);
}
