//! The live view (docs/console.md "The live desktop", docs/humans.md "Take-over by hand"): how fast a person's
//! hands are through it, what a watched desktop costs on the wire, and whether watching slows the agent.
//!
//! A daemon runs in this process (TCP listener, token; mock desktop, scripted model), and WebSocket viewers
//! (tungstenite, on threads of their own) watch `GET /v1/tasks/{id}/live`:
//! 1. **Input → frame**: a paused task on the login form; one viewer focuses the user name field, then sends
//!    `--clicks N` actions, a letter typed and erased by turns (each a visible change), and times, per action,
//!    its `acted` answer (it ran and its step was recorded) and the first frame captured after it was sent.
//! 2. **Frames on the wire**: a running task that types a character every 100 ms; one viewer 1280 wide for
//!    `--seconds S`: frames a second, bytes a frame and a second — at `live_fps` 10 and 30.
//! 3. **The agent with viewers**: `--steps N` steps (a click, a typed character) run with no viewer and with
//!    three at `live_fps` 30; the mean and median step `duration_ms` of its record (settling included).
//!
//! `cargo bench --bench live` (add `-- --clicks N --seconds S --steps N`).

#[path = "support/mod.rs"]
mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use support::{arg, percentile};
use tungstenite::client::IntoClientRequest;
use tungstenite::{Message, WebSocket};

const TOKEN: &str = "bench-live-token-0123456789abcdef01";

/// A daemon of this process, stopped when dropped.
struct Daemon {
    addr: String,
    stop: tokio_util::sync::CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn start(live_fps: u32) -> Daemon {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).expect("token");
    let text = format!(
        "data_dir = {:?}\n[api]\nsocket = {:?}\nlisten = \"127.0.0.1:{port}\"\ntoken_file = {:?}\n\
         [worker]\nconcurrency = 2\n[console]\nlive_fps = {live_fps}\n",
        dir.path().join("data").display().to_string(),
        dir.path().join("agentd.sock").display().to_string(),
        token_file.display().to_string()
    );
    let config: agentd::config::Config = agentd::config::parse(&text, "bench", &[]).expect("config");
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
        let _ = runtime.block_on(agentd::daemon::serve_until(config, async move { stopped.cancelled().await }));
    });
    let addr = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while http(&addr, "GET", "/livez", None).is_none() {
        assert!(Instant::now() < deadline, "the daemon never answered on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
    Daemon { addr, stop, thread: Some(thread), _dir: dir }
}

/// One request with the token; the status and the JSON body (`None` when the daemon does not answer yet).
fn http(addr: &str, method: &str, path: &str, body: Option<&Value>) -> Option<(u16, Value)> {
    let mut stream = TcpStream::connect(addr).ok()?;
    let body = body.map(Value::to_string).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {TOKEN}\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let status = answer.split(' ').nth(1)?.parse().ok()?;
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
    Some((status, serde_json::from_str(body).unwrap_or(Value::Null)))
}

fn submit(daemon: &Daemon, task: &Value) {
    let (status, reply) = http(&daemon.addr, "POST", "/v1/tasks", Some(task)).expect("submit");
    assert_eq!(status, 201, "{reply}");
}

fn wait_state(daemon: &Daemon, id: &str, state: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, record) = http(&daemon.addr, "GET", &format!("/v1/tasks/{id}"), None).expect("status");
        if record["state"] == state {
            return record;
        }
        assert!(Instant::now() < deadline, "{id} never {state}: {}", record["state"]);
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn viewer(daemon: &Daemon, id: &str, width: u32) -> WebSocket<TcpStream> {
    let mut request =
        format!("ws://{}/v1/tasks/{id}/live?width={width}", daemon.addr).into_client_request().expect("request");
    request.headers_mut().insert("authorization", format!("Bearer {TOKEN}").parse().expect("header"));
    let stream = TcpStream::connect(&daemon.addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    tungstenite::client(request, stream).expect("the WebSocket handshake").0
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// The first measure: a person's keys through the live view, to their answers and to the frames after them.
fn input_to_frame(clicks: usize) {
    let daemon = start(30);
    let waits: Vec<Value> = (0..200).map(|_| json!({"actions": [{"type": "wait", "duration_ms": 50}]})).collect();
    submit(
        &daemon,
        &json!({
            "id": "hands", "instructions": "wait", "computer": {"provider": "mock", "scene": "login"},
            "guard": {"no_change_steps": 0, "repeat_actions": 0, "idle_turns": 0, "wait_steps": 0},
            "model": {"provider": "scripted", "script": {"turns": waits}}, "limits": {"max_steps": 300}
        }),
    );
    wait_state(&daemon, "hands", "running");
    http(&daemon.addr, "POST", "/v1/tasks/hands/pause", None).expect("pause");
    wait_state(&daemon, "hands", "waiting_for_human");
    let mut socket = viewer(&daemon, "hands", 1280);
    let (mut to_acted, mut to_frame) = (Vec::new(), Vec::new());
    // The user name field first (not timed), then a letter typed and erased by turns: each changes the screen.
    let focus = json!({"action": {"type": "click", "x": 640, "y": 370}}).to_string();
    socket.send(Message::text(focus)).expect("send");
    // The focusing click's answer: the steps timed come after it.
    let mut first_step = loop {
        if let Message::Text(text) = socket.read().expect("read") {
            let value: Value = serde_json::from_str(text.as_str()).expect("JSON");
            if value["type"] == "acted" {
                break value["step"].as_u64().unwrap_or(0);
            }
        }
    };
    for i in 0..clicks {
        let sent = Instant::now();
        let sent_ms = now_ms();
        let action = if i % 2 == 0 {
            json!({"action": {"type": "type", "text": "x"}})
        } else {
            json!({"action": {"type": "keypress", "keys": ["BackSpace"]}})
        }
        .to_string();
        socket.send(Message::text(action)).expect("send");
        let (mut acted, mut framed) = (None, None);
        while acted.is_none() || framed.is_none() {
            match socket.read().expect("read") {
                Message::Text(text) => {
                    let value: Value = serde_json::from_str(text.as_str()).expect("JSON");
                    match value["type"].as_str() {
                        Some("acted") if value["step"].as_u64().is_some_and(|s| s > first_step) => {
                            acted = Some(sent.elapsed());
                        }
                        Some("error") => panic!("refused: {value}"),
                        Some("frame") if value["captured_at_ms"].as_u64().unwrap_or(0) >= sent_ms => {
                            framed.get_or_insert(sent.elapsed());
                        }
                        _ => {}
                    }
                }
                Message::Close(_) => panic!("closed"),
                _ => {}
            }
        }
        first_step += 1;
        to_acted.push(acted.map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0));
        to_frame.push(framed.map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0));
    }
    http(&daemon.addr, "POST", "/v1/tasks/hands/cancel", None).expect("cancel");
    to_acted.sort_by(f64::total_cmp);
    to_frame.sort_by(f64::total_cmp);
    println!(
        "input → acted ({clicks} keys typed by hand, each recorded as a step): p50 {:.1} ms, p99 {:.1} ms; input → first frame \
         after it (live_fps 30): p50 {:.1} ms, p99 {:.1} ms",
        percentile(&to_acted, 50.0),
        percentile(&to_acted, 99.0),
        percentile(&to_frame, 50.0),
        percentile(&to_frame, 99.0)
    );
}

/// A task that types a character every 100 ms for `seconds` (and then a little longer).
fn typing_task(id: &str, seconds: usize) -> Value {
    let mut turns = vec![json!({"actions": [{"type": "click", "x": 640, "y": 370}]})];
    turns.extend((0..seconds * 10 + 20).map(|i| {
        let letter = char::from(b'a' + (i % 26) as u8).to_string();
        json!({"actions": [{"type": "type", "text": letter}, {"type": "wait", "duration_ms": 100}]})
    }));
    json!({
        "id": id, "instructions": "type", "computer": {"provider": "mock", "scene": "login"},
        "guard": {"no_change_steps": 0, "repeat_actions": 0, "idle_turns": 0, "wait_steps": 0},
        "model": {"provider": "scripted", "script": {"turns": turns}},
        "limits": {"max_steps": seconds * 10 + 50}
    })
}

/// The second measure: what one viewer receives while the screen changes ten times a second.
fn frames_on_the_wire(fps: u32, seconds: usize) {
    let daemon = start(fps);
    submit(&daemon, &typing_task("wire", seconds));
    wait_state(&daemon, "wire", "running");
    let mut socket = viewer(&daemon, "wire", 1280);
    let started = Instant::now();
    let (mut frames, mut bytes) = (0u64, 0u64);
    while started.elapsed() < Duration::from_secs(seconds as u64) {
        if let Message::Binary(jpeg) = socket.read().expect("read") {
            frames += 1;
            bytes += jpeg.len() as u64;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    http(&daemon.addr, "POST", "/v1/tasks/wire/cancel", None).expect("cancel");
    println!(
        "frames on the wire (live_fps {fps}, 1280x800 typing 10 characters/s, one viewer {seconds} s): {:.1} frames/s, \
         {:.1} KB/frame, {:.0} KB/s",
        frames as f64 / elapsed,
        bytes as f64 / frames.max(1) as f64 / 1000.0,
        bytes as f64 / elapsed / 1000.0
    );
}

/// The third measure: the agent's steps with `viewers` viewers, the mean and median `duration_ms` of its
/// steps after the first (a 1 s wait, while the viewers connect).
fn steps_with_viewers(steps: usize, viewers: usize) -> (f64, f64) {
    let daemon = start(30);
    let mut turns = vec![json!({"actions": [{"type": "wait", "duration_ms": 1000}]})];
    turns.extend((0..steps).map(|i| {
        let letter = char::from(b'a' + (i % 26) as u8).to_string();
        json!({"actions": [{"type": "click", "x": 640, "y": 370}, {"type": "type", "text": letter}]})
    }));
    turns.push(json!({"complete": {"success": true, "summary": "typed"}}));
    let id = format!("steps-{viewers}");
    submit(
        &daemon,
        &json!({
            "id": id, "instructions": "type", "computer": {"provider": "mock", "scene": "login"},
            "guard": {"no_change_steps": 0, "repeat_actions": 0, "idle_turns": 0, "wait_steps": 0},
            "model": {"provider": "scripted", "script": {"turns": turns}}, "limits": {"max_steps": steps + 5}
        }),
    );
    wait_state(&daemon, &id, "running");
    let watching: Vec<_> = (0..viewers)
        .map(|_| {
            let mut socket = viewer(&daemon, &id, 1280);
            std::thread::spawn(move || while socket.read().is_ok() {})
        })
        .collect();
    let record = wait_state(&daemon, &id, "succeeded");
    let mut durations: Vec<f64> = record["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .skip(1)
        .filter(|s| s["actions"].as_array().is_some_and(|a| !a.is_empty()))
        .filter_map(|s| s["duration_ms"].as_f64())
        .collect();
    let mean = durations.iter().sum::<f64>() / durations.len().max(1) as f64;
    durations.sort_by(f64::total_cmp);
    drop(daemon);
    for thread in watching {
        let _ = thread.join();
    }
    (mean, percentile(&durations, 50.0))
}

fn main() {
    let clicks = arg("--clicks", 100);
    let seconds = arg("--seconds", 10);
    let steps = arg("--steps", 100);
    input_to_frame(clicks);
    for fps in [10, 30] {
        frames_on_the_wire(fps, seconds);
    }
    let (alone, alone_median) = steps_with_viewers(steps, 0);
    let (watched, watched_median) = steps_with_viewers(steps, 3);
    println!(
        "the agent's steps ({steps} steps of a click and a typed character, with settling): no viewer mean \
         {alone:.1} ms, median {alone_median:.0} ms; three viewers at live_fps 30 mean {watched:.1} ms, median \
         {watched_median:.0} ms"
    );
}
