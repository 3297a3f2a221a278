//! The live view (docs/console.md): `GET /v1/tasks/{id}/live` as a WebSocket client sees it, and the console's
//! task page showing it in headless Chromium — frames of the screen while a step runs (before its screenshot
//! is stored), sized for the viewer, none while the screen is still, the end of the task told; refusals of
//! what the socket does not take.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::client::IntoClientRequest;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::{Message, WebSocket};

use crate::console::{TOKEN, submit, wait_state};
use crate::support::{Daemon, http};

const WAIT: Duration = Duration::from_secs(30);

/// The console tests' daemon (TCP, their token), sending up to 20 frames a second.
fn live_daemon() -> (Daemon, tempfile::TempDir, String) {
    crate::console::daemon_with("[console]\nlive_fps = 20\n")
}

/// A task whose first step signs half in (click, type) and then waits 30 s in 500 ms pieces (a cancel ends
/// it within one piece); its screenshot is stored only after the waits.
fn typing_then_waiting(id: &str) -> String {
    let mut actions = vec![json!({"type": "click", "x": 640, "y": 370}), json!({"type": "type", "text": "alice"})];
    actions.extend((0..60).map(|_| json!({"type": "wait", "duration_ms": 500})));
    json!({
        "id": id,
        "instructions": "type a name, then wait",
        "guard": {"no_change_steps": 0, "repeat_actions": 0, "idle_turns": 0, "wait_steps": 0},
        "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "scripted", "script": {"turns": [
            {"say": "typing", "actions": actions},
            {"complete": {"success": true, "summary": "typed and waited"}}
        ]}}
    })
    .to_string()
}

/// The task is still in its first step, the one that types and then waits: the only screenshot stored is the
/// one taken before it acted (a step's screenshot is what the model looks at), so the frames seen so far came
/// from the live view, not from stored steps.
fn assert_only_the_first_step_running(daemon: &Daemon, id: &str) {
    let record = daemon.task(id);
    let steps: Vec<(Value, Value)> =
        record["steps"].as_array().into_iter().flatten().map(|s| (s["index"].clone(), s["finished"].clone())).collect();
    assert_eq!(steps, [(json!(0), json!(false))], "(index, finished) of the stored steps, state {}", record["state"]);
}

pub fn connect(addr: &str, path: &str) -> WebSocket<TcpStream> {
    let mut request = format!("ws://{addr}{path}").into_client_request().expect("request");
    request.headers_mut().insert("authorization", format!("Bearer {TOKEN}").parse().expect("header"));
    let stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(WAIT)).expect("timeout");
    let (socket, response) = tungstenite::client(request, stream).expect("the WebSocket handshake");
    assert_eq!(response.status(), 101);
    socket
}

/// What the server sent, one message at a time: a JSON text message, or a frame (its header and its JPEG).
#[derive(Debug)]
pub enum Received {
    Text(Value),
    Frame(Value, Vec<u8>),
    Closed(Option<CloseCode>),
}

pub fn receive(socket: &mut WebSocket<TcpStream>, seen: &[String]) -> Received {
    loop {
        let message = socket.read().unwrap_or_else(|e| panic!("reading the live view: {e}; seen so far: {seen:?}"));
        match message {
            Message::Text(text) => {
                let value: Value = serde_json::from_str(text.as_str()).expect("JSON text messages");
                if value["type"] != "frame" {
                    return Received::Text(value);
                }
                match socket.read().unwrap_or_else(|e| panic!("the frame after its header {value}: {e}")) {
                    Message::Binary(jpeg) => return Received::Frame(value, jpeg.to_vec()),
                    other => panic!("a frame header not followed by its JPEG: {value} then {other:?}"),
                }
            }
            Message::Close(frame) => return Received::Closed(frame.map(|f| f.code)),
            Message::Binary(_) => panic!("a binary message without its header; seen: {seen:?}"),
            _ => {}
        }
    }
}

#[test]
fn a_running_tasks_screen_streams_before_its_step_is_stored_and_the_end_is_told() {
    let (daemon, _dir, addr) = live_daemon();
    let id = submit(&daemon, &typing_then_waiting("live-ws"));
    wait_state(&daemon, &id, "running");
    let mut socket = connect(&addr, &format!("/v1/tasks/{id}/live?width=640"));
    let mut seen: Vec<String> = Vec::new();
    let hello = match receive(&mut socket, &seen) {
        Received::Text(v) => v,
        other => panic!("first a hello, not {other:?}"),
    };
    assert_eq!(hello, json!({"type": "hello", "task": id, "live_fps": 20}));

    // A frame while the first step acts (its typing done or not; a changed screen making a new frame is the
    // unit tests' `live::tests`).
    let mut frames = Vec::new();
    // The task is `running` in the queue a moment before its attempt shows its computer here: a viewer that
    // looks in between is told `"live": false` first, and `"live": true` once frames come.
    let mut last_state = Value::Null;
    let deadline = Instant::now() + WAIT;
    while frames.is_empty() {
        assert!(Instant::now() < deadline, "no frame in {WAIT:?}: {seen:?}");
        match receive(&mut socket, &seen) {
            Received::Frame(header, jpeg) => {
                assert_eq!(last_state, json!({"type": "state", "state": "running", "live": true}), "{seen:?}");
                seen.push(header.to_string());
                assert_eq!(&jpeg[..3], &[0xFF, 0xD8, 0xFF], "a JPEG: {header}");
                assert_eq!(header["bytes"], jpeg.len(), "{header}");
                assert_eq!(header["width"], 640, "sized for the viewer: {header}");
                assert_eq!(header["height"], 400, "{header}");
                assert_eq!(header["screen"], json!({"width": 1280, "height": 800}), "{header}");
                frames.push(header);
            }
            Received::Text(value) => {
                seen.push(value.to_string());
                if value["type"] == "state" {
                    assert_eq!(value["state"], "running", "{seen:?}");
                    last_state = value;
                }
            }
            other => panic!("{other:?} while the task runs; seen {seen:?}"),
        }
    }
    assert_only_the_first_step_running(&daemon, &id);

    // What the socket does not take is answered, and the frames go on.
    socket.send(Message::text(r#"{"action": {"type": "click", "x": 5, "y": 5}}"#)).expect("send an action");
    socket.send(Message::text("not json")).expect("send text");
    let mut refusals = Vec::new();
    while refusals.len() < 2 {
        match receive(&mut socket, &seen) {
            Received::Text(value) if value["type"] == "error" => refusals.push(value["code"].clone()),
            Received::Frame(header, _) => frames.push(header),
            other => panic!("{other:?} instead of the refusals; seen {seen:?}"),
        }
    }
    assert_eq!(refusals, [json!("not_taken_over"), json!("invalid_message")]);
    // (A person's actions on a desktop they took over: `takeover::a_person_acts_through_the_live_view…`.)

    // The task ends (cancelled in the middle of its waits): the socket says so and closes.
    let (code, body) = http(&daemon.socket, "POST", &format!("/v1/tasks/{id}/cancel"), None, &[]).expect("cancel");
    assert!(code == 200 || code == 202, "{code} {body}");
    let mut ended = None;
    loop {
        match receive(&mut socket, &seen) {
            Received::Frame(header, _) => frames.push(header),
            Received::Text(value) if value["type"] == "ended" => ended = Some(value),
            Received::Text(value) => seen.push(value.to_string()),
            Received::Closed(code) => {
                assert_eq!(code, Some(CloseCode::Normal), "closed normally; seen {seen:?}");
                break;
            }
        }
    }
    assert_eq!(ended, Some(json!({"type": "ended", "state": "cancelled"})), "seen {seen:?}");
    // The screen changed a few times (focus, text, the cancel's final capture); a screen that stays still for
    // seconds at 20 frames a second would have sent hundreds without the change test.
    assert!(frames.len() <= 8, "{} frames for a screen that changed a few times: {frames:?}", frames.len());
    let seqs: Vec<u64> = frames.iter().filter_map(|f| f["seq"].as_u64()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "frames in order: {seqs:?}");
}

#[test]
fn the_live_view_refuses_what_is_not_a_websocket_or_a_task() {
    let (daemon, _dir, addr) = live_daemon();
    let id = submit(&daemon, &typing_then_waiting("live-refusals"));
    let get = |path: &str, headers: &[(&str, &str)]| {
        let mut stream = TcpStream::connect(&addr).expect("connect");
        let mut request = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\n");
        if !headers.iter().any(|(k, _)| *k == "connection") {
            request.push_str("connection: close\r\n");
        }
        for (k, v) in headers {
            request.push_str(&format!("{k}: {v}\r\n"));
        }
        request.push_str("\r\n");
        std::io::Write::write_all(&mut stream, request.as_bytes()).expect("write");
        stream.set_read_timeout(Some(WAIT)).expect("timeout");
        // The head, then the body its content-length gives (a 101 has none, and its connection stays open).
        let mut bytes = Vec::new();
        let mut byte = [0u8; 1];
        while !bytes.ends_with(b"\r\n\r\n") {
            match std::io::Read::read(&mut stream, &mut byte) {
                Ok(1) => bytes.push(byte[0]),
                other => panic!("the answer to {path} ended early ({other:?}): {:?}", String::from_utf8_lossy(&bytes)),
            }
        }
        let head = String::from_utf8_lossy(&bytes).to_ascii_lowercase();
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .and_then(|n| n.trim().parse::<usize>().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; length];
        std::io::Read::read_exact(&mut stream, &mut body).expect("the body");
        format!("{}{}", String::from_utf8_lossy(&bytes), String::from_utf8_lossy(&body))
    };
    let bearer = format!("Bearer {TOKEN}");
    let plain = get(&format!("/v1/tasks/{id}/live"), &[("authorization", &bearer)]);
    assert!(plain.starts_with("HTTP/1.1 400"), "{plain}");
    assert!(plain.contains("not_a_websocket"), "{plain}");
    let upgrade: &[(&str, &str)] = &[
        ("authorization", &bearer),
        ("upgrade", "websocket"),
        ("connection", "upgrade"),
        ("sec-websocket-version", "13"),
        ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];
    let unknown = get("/v1/tasks/no-such-task/live", upgrade);
    assert!(unknown.starts_with("HTTP/1.1 404"), "{unknown}");
    let zero = get(&format!("/v1/tasks/{id}/live?width=0"), upgrade);
    assert!(zero.starts_with("HTTP/1.1 400") && zero.contains("\"width\""), "{zero}");
    let no_token = get(&format!("/v1/tasks/{id}/live"), &upgrade[1..]);
    assert!(no_token.starts_with("HTTP/1.1 401"), "{no_token}");
    let ok = get(&format!("/v1/tasks/{id}/live"), upgrade);
    assert!(ok.starts_with("HTTP/1.1 101"), "{ok}");
    http(&daemon.socket, "POST", &format!("/v1/tasks/{id}/cancel"), None, &[]).expect("cancel");
}

/// The console's task page shows the live desktop while the task runs, with its state and frame rate, and
/// goes back to the step screenshots when the task has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_page_shows_the_live_desktop_while_the_task_runs() {
    let Some(browser) = agentd_testkit::browser::Browser::launch().await.expect("launch Chromium") else { return };
    let (daemon, _dir, addr) = live_daemon();
    let tab = browser.tab(1280, 900, false).await.expect("tab");
    crate::console::log_in(&tab, &addr).await;
    let id = submit(&daemon, &typing_then_waiting("live-console"));
    wait_state(&daemon, &id, "running");
    let _: bool = tab.eval(&format!("location.hash = '#/tasks/{id}'; true")).await.expect("open the task page");
    let shown = "window.agentdConsole.live.filter((f) => f.task === TASK).length >= 1 \
                 && document.querySelector('#live-state').dataset.live === 'true' \
                 && document.querySelector('#live-screen') && document.querySelector('#live-screen').isConnected";
    if let Err(e) = tab.wait_for(&shown.replace("TASK", &format!("{id:?}")), WAIT).await {
        let text: String = tab.eval("document.body.innerText").await.unwrap_or_default();
        panic!("the live desktop on the task page: {e}\npage: {text}\ntask: {}", daemon.task(&id));
    }
    assert_only_the_first_step_running(&daemon, &id);
    let label: String = tab.eval("document.querySelector('#live-state').textContent").await.expect("label");
    assert!(label.starts_with("● live ·") && label.ends_with("fps"), "{label:?}");
    let natural: u32 = tab.eval("document.querySelector('#live-screen').naturalWidth").await.expect("width");
    assert!(natural > 0 && natural <= 1280, "a decoded frame no wider than the screen: {natural}");
    crate::console::save(&tab, "live.png").await;
    http(&daemon.socket, "POST", &format!("/v1/tasks/{id}/cancel"), None, &[]).expect("cancel");
    let ended = "document.querySelector('#task-state').dataset.state === 'cancelled' \
                 && document.querySelector('#live-state').dataset.live === 'false' \
                 && !document.querySelector('#live-screen')";
    if let Err(e) = tab.wait_for(ended, WAIT).await {
        let text: String = tab.eval("document.body.innerText").await.unwrap_or_default();
        panic!("after the task ended, the page leaves the live view: {e}\npage: {text}");
    }
    browser.close().await;
}

/// On the task page's live desktop (taking input): a real click on the screen point (640, 370) — the login
/// form's user name field — and "bob" typed, both answered `acted`.
async fn sign_in_by_hand(tab: &agentd_testkit::browser::Tab, daemon: &Daemon, id: &str) {
    let (x, y): (f64, f64) = tab
        .eval(
            "(() => { const b = document.querySelector('#live-screen').getBoundingClientRect(); \
             return [b.left + b.width * 640 / 1280, b.top + b.height * 370 / 800]; })()",
        )
        .await
        .expect("the live image's box");
    tab.click_at(x, y).await.expect("click the live desktop");
    tab.type_keys("bob").await.expect("type on the live desktop");
    let acted = "window.agentdConsole.acted.filter((m) => m.type === 'acted').length >= 2";
    if let Err(e) = tab.wait_for(acted, WAIT).await {
        let answers: Value = tab.eval("window.agentdConsole.acted").await.unwrap_or_default();
        panic!("the click and the typing carried out: {e}\nanswers: {answers}\ntask: {}", daemon.task(id));
    }
}

/// A person who took the desktop over uses it on the task page (docs/humans.md "Take-over by hand"): the live
/// desktop takes their hands (a real click and typing in Chromium), the click lands on the screen point under
/// the pointer, and both are recorded as their steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_uses_the_taken_over_desktop_on_the_task_page() {
    let Some(browser) = agentd_testkit::browser::Browser::launch().await.expect("launch Chromium") else { return };
    let (daemon, _dir, addr) = live_daemon();
    // A model that waits, step after step, until it is stopped.
    let turns: Vec<Value> = (0..400).map(|_| json!({"actions": [{"type": "wait", "duration_ms": 100}]})).collect();
    let task = json!({
        "id": "by-hand-console", "instructions": "wait",
        "guard": {"no_change_steps": 0, "repeat_actions": 0, "idle_turns": 0, "wait_steps": 0},
        "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "scripted", "script": {"turns": turns}},
        "limits": {"max_steps": 400}
    });
    let id = submit(&daemon, &task.to_string());
    wait_state(&daemon, &id, "running");
    let (code, body) = http(&daemon.socket, "POST", &format!("/v1/tasks/{id}/pause"), None, &[]).expect("pause");
    assert!(code == 200 || code == 202, "{code} {body}");
    wait_state(&daemon, &id, "waiting_for_human");
    let before = daemon.task(&id)["steps"].as_array().map_or(0, Vec::len);

    let tab = browser.tab(1280, 900, false).await.expect("tab");
    crate::console::log_in(&tab, &addr).await;
    let _: bool = tab.eval(&format!("location.hash = '#/tasks/{id}'; true")).await.expect("open the task page");
    let ready = "document.querySelector('#live-screen') && document.querySelector('#live-screen').isConnected \
                 && document.querySelector('#live-screen').dataset.hands === 'on' \
                 && document.querySelector('#live-screen').naturalWidth > 0";
    if let Err(e) = tab.wait_for(ready, WAIT).await {
        let text: String = tab.eval("document.body.innerText").await.unwrap_or_default();
        panic!("the taken-over desktop, live and taking input: {e}\npage: {text}\ntask: {}", daemon.task(&id));
    }
    sign_in_by_hand(&tab, &daemon, &id).await;
    let record = daemon.task(&id);
    let mine: Vec<Value> = record["steps"].as_array().expect("steps")[before..].to_vec();
    assert_eq!(mine.len(), 2, "{mine:#?}");
    assert!(mine.iter().all(|s| s["by"] == "human" && s["results"][0]["ok"] == true), "{mine:#?}");
    let click = &mine[0]["actions"][0];
    assert_eq!(click["type"], "click", "{click}");
    let (cx, cy) = (click["x"].as_i64().unwrap_or(-1), click["y"].as_i64().unwrap_or(-1));
    assert!((cx - 640).abs() <= 2 && (cy - 370).abs() <= 2, "the click landed under the pointer: {click}");
    assert_eq!(mine[1]["actions"][0], json!({"type": "type", "text": "bob"}));
    let mine_shown = "document.querySelector('#step-details h2').textContent.endsWith('by a person')";
    if let Err(e) = tab.wait_for(mine_shown, WAIT).await {
        let text: String = tab.eval("document.querySelector('#step-details').innerText").await.unwrap_or_default();
        panic!("the latest step shown as the person's: {e}\ndetails: {text}");
    }
    http(&daemon.socket, "POST", &format!("/v1/tasks/{id}/cancel"), None, &[]).expect("cancel");
    browser.close().await;
}

/// A demonstration recorded on the console (docs/humans.md "Demonstrations"): "Record a demonstration" on
/// the Submit page opens the new task's page with its desktop live and taking input; a click and typing there
/// are its steps, and "Finish the demonstration" ends it `succeeded` with the screen left as its last step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demonstration_is_recorded_on_the_console() {
    let Some(browser) = agentd_testkit::browser::Browser::launch().await.expect("launch Chromium") else { return };
    let (daemon, dir, addr) = live_daemon();
    let tab = browser.tab(1280, 900, false).await.expect("tab");
    crate::console::log_in(&tab, &addr).await;
    let _: bool = tab.eval("location.hash = '#/submit'; true").await.expect("open the submit page");
    tab.wait_for("!!document.querySelector('#record-demonstration')", WAIT).await.expect("the demonstration form");
    tab.type_into("#demo-instructions", "sign in as bob").await.expect("instructions");
    tab.click("#record-demonstration").await.expect("record a demonstration");
    let ready = "location.hash.startsWith('#/tasks/') && document.querySelector('#live-screen') \
                 && document.querySelector('#live-screen').isConnected \
                 && document.querySelector('#live-screen').dataset.hands === 'on' \
                 && document.querySelector('#live-screen').naturalWidth > 0 \
                 && !!document.querySelector('#resume')";
    if let Err(e) = tab.wait_for(ready, WAIT).await {
        let text: String = tab.eval("document.body.innerText").await.unwrap_or_default();
        panic!("the demonstration's page, its desktop live and taking input: {e}\npage: {text}");
    }
    let id: String = tab.eval("decodeURIComponent(location.hash.slice('#/tasks/'.length))").await.expect("the id");
    let finish: String = tab.eval("document.querySelector('#resume').textContent").await.expect("the button");
    assert_eq!(finish, "Finish the demonstration");
    // The summary is written first; the steps done on the desktop after it leave it (and its button) as they
    // were: the form is not rebuilt for each step a person adds.
    tab.type_into("#resume-note", "bob signed in").await.expect("the summary");
    sign_in_by_hand(&tab, &daemon, &id).await;
    let both_shown = "document.querySelector('#step-details h2') \
                      && document.querySelector('#step-details h2').textContent.startsWith('Step 1 ')";
    tab.wait_for(both_shown, WAIT).await.expect("the person's second step on the page");
    let note: String = tab.eval("document.querySelector('#resume-note').value").await.expect("the note");
    assert_eq!(note, "bob signed in", "the summary written before the steps is kept");
    tab.click("#resume").await.expect("finish the demonstration");
    let done =
        "document.querySelector('#task-state') && document.querySelector('#task-state').dataset.state === 'succeeded'";
    if let Err(e) = tab.wait_for(done, WAIT).await {
        let text: String = tab.eval("document.body.innerText").await.unwrap_or_default();
        panic!("the finished demonstration on its page: {e}\npage: {text}\ntask: {}", daemon.task(&id));
    }
    let record = daemon.task(&id);
    assert_eq!(record["task"]["instructions"], "sign in as bob", "{record}");
    let steps = record["steps"].as_array().expect("steps");
    let actions: Vec<&Value> = steps.iter().map(|s| &s["actions"]).collect();
    assert_eq!(steps.len(), 3, "{record}");
    assert!(steps.iter().all(|s| s["by"] == "human"), "{record}");
    assert_eq!(actions[1], &json!([{"type": "type", "text": "bob"}]), "{actions:?}");
    assert_eq!(record["outcome"]["success"], true, "{record}");
    assert!(record["outcome"]["summary"].as_str().is_some_and(|s| s.contains("bob signed in")), "{record}");
    // Its report says whose steps they were, and shows their screenshots.
    let report = dir.path().join("demonstration.html");
    let exported = daemon.cli(&["export", &id, "--html", report.to_str().expect("path")]);
    assert_eq!(exported.code, 0, "{}", exported.stderr);
    tab.goto(&format!("file://{}", report.display())).await.expect("open the report");
    let shown = "document.querySelectorAll('article.step[data-by=\"human\"]').length === 3 \
                 && [...document.querySelectorAll('article.step img')].every((i) => i.complete && i.naturalWidth > 0)";
    if let Err(e) = tab.wait_for(shown, WAIT).await {
        let text: String = tab.eval("document.body.innerText").await.unwrap_or_default();
        panic!("the report's three steps by a person, their screenshots loaded: {e}\n{text:.3000}");
    }
    let heading: String = tab.eval("document.querySelector('#step-1 h2').textContent").await.expect("heading");
    assert_eq!(heading, "Step 1 — by a person");
    // Compiled, and replayed to the same end without a model.
    let compiled = daemon.cli(&["compile", &id, "--param", "name=bob"]);
    assert_eq!(compiled.code, 0, "{}", compiled.stderr);
    assert_eq!(compiled.json()["turns"][1]["actions"], json!([{"type": "type", "text": "{{name}}"}]));
    let replay = daemon.cli(&["replay", &id]);
    assert_eq!(replay.code, 0, "{}", replay.stderr);
    let again = daemon.wait_terminal(replay.stdout.trim(), Duration::from_secs(60));
    assert_eq!(again["state"], "succeeded", "{again}");
    assert_eq!(again["computer_state"]["fields"]["username"], "bob", "{}", again["computer_state"]);
    browser.close().await;
}

/// The live view of a task on a real X server (a private Xvfb, the local provider, the project's recording Tk
/// app on it), in the console: frames of the X desktop arrive while the task's first step — a click, typing,
/// then waits — has not been stored yet, with the X server's screen size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_page_shows_a_task_on_xvfb_live() {
    use agentd_local::testing::{RecorderApp, XServer, desktop_env, layout};
    if desktop_env().is_none() {
        return;
    }
    let Some(browser) = agentd_testkit::browser::Browser::launch().await.expect("launch Chromium") else { return };
    let x = XServer::xvfb(1024, 600).expect("Xvfb");
    let (daemon, dir, addr) = live_daemon();
    let _app = RecorderApp::start(&x.display, &dir.path().join("recorder.log")).expect("the recorder app");
    let mut actions = vec![
        json!({"type": "click", "x": layout::ENTRY.0, "y": layout::ENTRY.1}),
        json!({"type": "type", "text": "live on X"}),
    ];
    actions.extend((0..60).map(|_| json!({"type": "wait", "duration_ms": 500})));
    let task = json!({
        "id": "live-xvfb", "instructions": "type, then wait",
        "guard": {"no_change_steps": 0, "repeat_actions": 0, "idle_turns": 0, "wait_steps": 0},
        "computer": {"provider": "local", "display": x.display},
        "model": {"provider": "scripted", "script": {"turns": [
            {"say": "typing", "actions": actions},
            {"complete": {"success": true, "summary": "typed and waited"}}
        ]}}
    });
    let id = submit(&daemon, &task.to_string());
    wait_state(&daemon, &id, "running");
    let tab = browser.tab(1280, 900, false).await.expect("tab");
    crate::console::log_in(&tab, &addr).await;
    let _: bool = tab.eval(&format!("location.hash = '#/tasks/{id}'; true")).await.expect("open the task page");
    let shown = "window.agentdConsole.live.filter((f) => f.task === 'live-xvfb').length >= 1 \
                 && document.querySelector('#live-state').dataset.live === 'true'";
    if let Err(e) = tab.wait_for(shown, WAIT).await {
        let text: String = tab.eval("document.body.innerText").await.unwrap_or_default();
        panic!("the X desktop live on the task page: {e}\npage: {text}\ntask: {}", daemon.task(&id));
    }
    assert_only_the_first_step_running(&daemon, &id);
    let frame: Value = tab.eval("window.agentdConsole.live.find((f) => f.task === 'live-xvfb')").await.expect("frame");
    let (width, height) = (frame["width"].as_u64().unwrap_or(0), frame["height"].as_u64().unwrap_or(0));
    let off = (height * 1024).abs_diff(width * 600);
    assert!(width > 0 && width <= 1024 && off <= 1024, "the X screen's shape (1024x600), within a pixel: {frame}");
    http(&daemon.socket, "POST", &format!("/v1/tasks/{id}/cancel"), None, &[]).expect("cancel");
    browser.close().await;
}
