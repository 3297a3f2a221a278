//! Real desktops end to end: `agentd run` with the scripted model drives the project's recording Tk app
//! (`tests/apps/recorder.py`) through the local provider and through VNC (x11vnc and TigerVNC Xvnc), and the
//! app's own record proves every click, key, text, scroll and drag landed where and as asked. Then the
//! faults: a VNC server killed mid-task (restarted: the task goes on; not restarted: it fails with the reason
//! in bounded time), a wrong password, nothing listening, the X server killed under a task.
//!
//! Needs the variables `scripts/test` exports (`AGENTD_TEST_DISPLAY`, `AGENTD_TEST_VNC_ADDR`, …); without
//! them each test prints why it skips. Tests that use a shared display hold its lock.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use agentd_local::testing::{self, RecorderApp, VncDesktop, XServer, desktop_env, layout};
use serde_json::{Value, json};

use crate::support::{Agentd, Run};

const WAIT: Duration = Duration::from_secs(15);
/// The environment variable the VNC tasks name in `password_env` (not `AGENTD_*`: the test command clears
/// those).
const PASSWORD_VAR: &str = "DESKTOPS_IT_VNC_PASSWORD";

/// The script every end-to-end task plays: one action per turn, then success.
const TYPED: &str = "Grüße aus Köln: naïve café, 10 € — ok?";

fn script() -> Value {
    let turns = vec![
        json!({"say": "focus the entry", "actions": [{"type": "click", "x": layout::ENTRY.0, "y": layout::ENTRY.1}]}),
        json!({"say": "type", "actions": [{"type": "type", "text": TYPED}]}),
        json!({"say": "select all (Tk: ctrl+slash)", "actions": [{"type": "keypress", "keys": ["ctrl", "slash"]}]}),
        json!({"say": "click the pad", "actions": [
            {"type": "click", "x": 120, "y": 140},
            {"type": "click", "x": 130, "y": 150, "button": "right"},
            {"type": "click", "x": 140, "y": 160, "keys": ["shift"]}
        ]}),
        json!({"say": "scroll", "actions": [{"type": "scroll", "x": 800, "y": 250, "scroll_y": 300}]}),
        json!({"say": "drag", "actions": [{"type": "drag", "path": [{"x": 60, "y": 200}, {"x": 300, "y": 260}, {"x": 500, "y": 350}]}]}),
        crate::desktops::held_keys_turn(),
        json!({"complete": {"success": true, "summary": "all input sent"}}),
    ];
    json!({ "turns": turns })
}

fn write_task(dir: &Path, computer: Value, script: Value) -> std::path::PathBuf {
    let task = json!({
        "instructions": "exercise the recorder app",
        "computer": computer,
        "model": {"provider": "scripted", "script": script},
        "limits": {"max_steps": 40, "timeout_secs": 120}
    });
    let path = dir.join("task.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&task).expect("task json")).expect("write task");
    path
}

fn run_task(agentd: &Agentd, task: &Path, password: Option<&str>) -> Run {
    let mut command = agentd.command();
    command.args(["run", "--json"]).arg(task).stdin(Stdio::null());
    if let Some(password) = password {
        command.env(PASSWORD_VAR, password);
    }
    Run::from(command.output().expect("spawn agentd"))
}

pub(crate) fn spawn_task(agentd: &Agentd, task: &Path) -> Child {
    agentd
        .command()
        .args(["run", "--json"])
        .arg(task)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn agentd")
}

/// Waits for `child` at most `timeout`; kills it and panics if it is still running (a hang). Its output is
/// read while it runs, so a run record larger than a pipe's buffer does not block it.
pub(crate) fn finish(child: Child, timeout: Duration) -> Run {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(timeout) {
        Ok(output) => Run::from(output.expect("output")),
        Err(_) => {
            if let Ok(pid) = libc::pid_t::try_from(pid) {
                // SAFETY: kill(2) on our own child, not reaped yet (the waiting thread still holds it).
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            let stderr = rx.recv().ok().and_then(Result::ok).map(|o| o.stderr).unwrap_or_default();
            panic!("agentd run still running after {timeout:?}:\n{}", String::from_utf8_lossy(&stderr));
        }
    }
}

pub(crate) fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["event"] == kind).collect()
}

/// Checks the recorder's log against [`script`].
fn assert_script_landed(app: &RecorderApp) {
    let events =
        app.wait_until(WAIT, |events| of_kind(events, "release").iter().any(|e| e["x"] == 280 && e["y"] == 320));
    let presses: Vec<(i64, i64, i64, i64)> = of_kind(&events, "press")
        .iter()
        .map(|e| {
            (
                e["button"].as_i64().unwrap_or(-1),
                e["x"].as_i64().unwrap_or(-1),
                e["y"].as_i64().unwrap_or(-1),
                e["state"].as_i64().unwrap_or(-1) & 0xff,
            )
        })
        .collect();
    let (ex, ey) = (layout::ENTRY.0 as i64, layout::ENTRY.1 as i64);
    assert_eq!(
        presses,
        vec![
            (1, ex, ey, 0),
            (1, 120, 140, 0),
            (3, 130, 150, 0),
            (1, 140, 160, 1),
            (5, 800, 250, 0),
            (5, 800, 250, 0),
            (5, 800, 250, 0),
            (1, 60, 200, 0),
            (5, 800, 250, 4),
            (1, 60, 380, 1),
            (3, 300, 380, 0),
            (1, 250, 300, 4),
            (1, 280, 320, 0),
        ],
        "every button press, where, with which modifiers: {events:#?}"
    );
    assert_eq!(
        of_kind(&events, "text").last().and_then(|e| e["value"].as_str()),
        Some(TYPED),
        "the entry holds the typed text"
    );
    let keys = of_kind(&events, "key");
    assert!(
        keys.iter().any(|e| e["keysym"] == "slash" && e["state"].as_i64().unwrap_or(0) & 4 != 0),
        "ctrl+slash arrived with Control held"
    );
    let motions: Vec<(i64, i64)> = of_kind(&events, "motion")
        .iter()
        .map(|e| (e["x"].as_i64().unwrap_or(-1), e["y"].as_i64().unwrap_or(-1)))
        .collect();
    assert!(motions.contains(&(300, 260)), "the drag passed its middle point: {motions:?}");
    crate::desktops::assert_held_keys_landed(&events);
    let release = of_kind(&events, "release").iter().any(|e| e["button"] == 1 && e["x"] == 500 && e["y"] == 350);
    assert!(release, "the drag ended where asked");
}

/// A turn of pointer actions with held modifiers (docs/task-file.md), for the recorder app: ctrl+wheel, a shift-drag, a
/// right-button drag, a mouse_down whose Control stays held through a shift-move until its mouse_up, and a
/// plain click after it all. [`assert_held_keys_landed`] checks what arrived.
pub(crate) fn held_keys_turn() -> Value {
    json!({"say": "held modifiers (docs/task-file.md)", "actions": [
        {"type": "scroll", "x": 800, "y": 250, "scroll_y": 100, "keys": ["ctrl"]},
        {"type": "drag", "path": [{"x": 60, "y": 380}, {"x": 200, "y": 390}], "keys": ["shift"]},
        {"type": "drag", "path": [{"x": 300, "y": 380}, {"x": 400, "y": 390}], "button": "right"},
        {"type": "move", "x": 250, "y": 300},
        {"type": "mouse_down", "keys": ["ctrl"]},
        {"type": "move", "x": 270, "y": 310, "keys": ["shift"]},
        {"type": "mouse_up"},
        {"type": "click", "x": 280, "y": 320}
    ]})
}

/// Checks the releases and motions of the script's "held modifiers" turn (docs/task-file.md): each pointer action's
/// keys
/// were down for all of it and up after it; a mouse_down's keys stayed down until its mouse_up.
pub(crate) fn assert_held_keys_landed(events: &[Value]) {
    let releases: Vec<(i64, i64, i64, i64)> = of_kind(events, "release")
        .iter()
        .map(|e| {
            let n = |f: &str| e[f].as_i64().unwrap_or(-1);
            (n("button"), n("x"), n("y"), n("state") & 0xff)
        })
        .collect();
    for (expected, what) in [
        ((5, 800, 250, 4), "the ctrl+wheel notch with Control held"),
        ((1, 200, 390, 1), "the shift-drag released with Shift still held"),
        ((3, 400, 390, 0), "the right-button drag released where it ended"),
        ((1, 270, 310, 4), "the mouse_up with its mouse_down's Control still held"),
        ((1, 280, 320, 0), "the last click with nothing held any more"),
    ] {
        assert!(releases.contains(&expected), "{what}: {expected:?} not among {releases:?}");
    }
    let motion = |x: i64, y: i64| {
        of_kind(events, "motion")
            .into_iter()
            .find(|e| e["x"] == x && e["y"] == y)
            .map(|e| (e["buttons"].as_i64().unwrap_or(-1), e["state"].as_i64().unwrap_or(-1)))
    };
    assert_eq!(motion(200, 390).map(|m| m.1 & 1), Some(1), "the shift-drag moved with Shift held");
    assert_eq!(motion(400, 390).map(|m| m.0 & 4), Some(4), "the right-button drag moved with button 3 down");
    assert_eq!(
        motion(270, 310).map(|m| (m.0 & 1, m.1 & 5)),
        Some((1, 5)),
        "the move between mouse_down and mouse_up: button 1, Control from the mouse_down, Shift of its own"
    );
}

fn assert_succeeded(run: &Run) -> Value {
    assert_eq!(run.code, 0, "agentd run failed:\nstdout: {}\nstderr: {}", run.stdout, run.stderr);
    let record = run.json();
    assert_eq!(record["state"], "succeeded", "{record:#}");
    // Every step has a screenshot of the real screen size.
    let steps = record["steps"].as_array().cloned().unwrap_or_default();
    assert!(steps.len() >= 6, "{record:#}");
    record
}

#[test]
fn a_task_on_the_local_display_lands_every_input() {
    let Some(env) = testing::own_xvfb(1280, 800) else { return };
    let _load = crate::support::timing_sensitive();
    let agentd = Agentd::new();
    let app = RecorderApp::start(&env.display, &agentd.dir.path().join("rec.log")).expect("recorder");
    let task = write_task(agentd.dir.path(), json!({"provider": "local", "display": env.display}), script());
    let record = assert_succeeded(&run_task(&agentd, &task, None));
    assert_eq!(record["steps"][0]["screenshot"]["width"], 1280, "{record:#}");
    assert_script_landed(&app);
}

/// The portable provider (enigo + xcap, docs/providers.md) on the same display: the same script lands the same way. It
/// drives the session's own desktop, so the task names no display: `agentd` runs with `$DISPLAY` set to it.
#[cfg(feature = "portable")]
#[test]
fn a_task_on_the_portable_provider_lands_every_input() {
    if desktop_env().is_none() {
        return;
    }
    // An Xvfb of its own: enigo refuses an X server without an unused keycode, and the X11 provider's tasks
    // fill the shared display's spare keycodes with the characters they type.
    let x = XServer::xvfb(1280, 800).expect("Xvfb");
    let agentd = Agentd::new();
    let app = RecorderApp::start(&x.display, &agentd.dir.path().join("rec.log")).expect("recorder");
    let task = write_task(agentd.dir.path(), json!({"provider": "portable"}), script());
    let mut command = agentd.command();
    command.args(["run", "--json"]).arg(&task).stdin(Stdio::null()).env("DISPLAY", &x.display);
    let record = assert_succeeded(&Run::from(command.output().expect("spawn agentd")));
    assert_eq!(record["steps"][0]["screenshot"]["width"], 1280, "{record:#}");
    assert_script_landed(&app);
}

/// Without the cargo feature `portable` a portable task is refused as bad input, naming the feature.
#[cfg(not(feature = "portable"))]
#[test]
fn without_the_portable_feature_a_portable_task_is_refused() {
    let agentd = Agentd::new();
    let task = write_task(agentd.dir.path(), json!({"provider": "portable"}), script());
    let run = run_task(&agentd, &task, None);
    assert_eq!(run.code, 2, "stdout: {}\nstderr: {}", run.stdout, run.stderr);
    assert!(run.stderr.contains("`portable` feature"), "{}", run.stderr);
}

/// Replay (docs/replay-and-verify.md) on a real X display: the script recorded on a fresh recorder app, then replayed
/// without a
/// model on another fresh one; the second app's record shows the same input landing the same way.
#[test]
fn a_replay_on_the_local_display_lands_the_same_actions() {
    let Some(env) = testing::own_xvfb(1280, 800) else { return };
    let _load = crate::support::timing_sensitive();
    let agentd = Agentd::new();
    let dir = agentd.dir.path();
    let task = |id: &str, replay: Option<Value>| {
        let mut task = json!({
            "id": id,
            "instructions": "exercise the recorder app",
            "computer": {"provider": "local", "display": env.display},
            "model": {"provider": "scripted", "script": script()},
            "limits": {"max_steps": 40, "timeout_secs": 120}
        });
        if let Some(replay) = replay {
            task["replay"] = replay;
        }
        let path = dir.join(format!("{id}.json"));
        std::fs::write(&path, serde_json::to_vec_pretty(&task).expect("task json")).expect("write task");
        path
    };
    {
        let app = RecorderApp::start(&env.display, &dir.join("recorded.log")).expect("recorder");
        assert_succeeded(&run_task(&agentd, &task("x-recorded", None), None));
        assert_script_landed(&app);
    }
    let app = RecorderApp::start(&env.display, &dir.join("replayed.log")).expect("recorder");
    let record = assert_succeeded(&run_task(&agentd, &task("x-replayed", Some(json!({"of": "x-recorded"}))), None));
    assert_eq!(record["replay"], json!({"of": "x-recorded"}), "the live screens matched the recording: {record:#}");
    assert_eq!(record["usage"]["cost_usd"], 0.0);
    assert_script_landed(&app);
}

fn vnc_task(server: &VncDesktop) {
    let _load = crate::support::timing_sensitive();
    let agentd = Agentd::new();
    let app = RecorderApp::start(&server.display, &agentd.dir.path().join("rec.log")).expect("recorder");
    let mut computer = json!({"provider": "vnc", "address": server.addr});
    if server.password.is_some() {
        computer["password_env"] = PASSWORD_VAR.into();
    }
    let task = write_task(agentd.dir.path(), computer, script());
    let record = assert_succeeded(&run_task(&agentd, &task, server.password.as_deref()));
    assert_eq!(record["steps"][0]["screenshot"]["height"], 800, "{record:#}");
    assert_script_landed(&app);
}

#[test]
fn a_task_through_x11vnc_lands_every_input() {
    if desktop_env().is_none() {
        return;
    }
    vnc_task(&VncDesktop::x11vnc(1280, 800).expect("Xvfb and x11vnc"));
}

#[test]
fn a_task_through_xvnc_with_a_password_lands_every_input() {
    if desktop_env().is_none() {
        return;
    }
    vnc_task(&VncDesktop::xvnc(1280, 800, Some("agentd-pw")).expect("Xvnc with a password"));
}

#[test]
fn a_wrong_vnc_password_is_invalid_input_naming_the_field() {
    if desktop_env().is_none() {
        return;
    }
    let server = VncDesktop::xvnc(640, 480, Some("agentd-pw")).expect("Xvnc with a password");
    let addr = &server.addr;
    let agentd = Agentd::new();
    let task = write_task(
        agentd.dir.path(),
        json!({"provider": "vnc", "address": addr, "password_env": PASSWORD_VAR}),
        json!({"turns": [{"complete": {"success": true}}]}),
    );
    let run = run_task(&agentd, &task, Some("not-the-password"));
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("computer.password_env")
            && run.stderr.contains("VNC authentication")
            && run.stderr.contains("check the password"),
        "{}",
        run.stderr
    );
    // The variable not set at all is the same kind of mistake, said differently.
    let run = run_task(&agentd, &task, None);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains(PASSWORD_VAR) && run.stderr.contains("not set"), "{}", run.stderr);
}

#[test]
fn an_unreachable_vnc_server_is_exit_3() {
    let agentd = Agentd::new();
    let port = testing::free_port().expect("port");
    let task = write_task(
        agentd.dir.path(),
        json!({"provider": "vnc", "address": format!("127.0.0.1:{port}")}),
        json!({"turns": [{"complete": {"success": true}}]}),
    );
    let run = run_task(&agentd, &task, None);
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(run.stderr.contains("cannot connect to the VNC server"), "{}", run.stderr);
    let task = write_task(
        agentd.dir.path(),
        json!({"provider": "vnc", "address": "localhost"}),
        json!({"turns": [{"complete": {"success": true}}]}),
    );
    let run = run_task(&agentd, &task, None);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("computer.address"), "{}", run.stderr);
}

/// A script of `clicks` clicks at x = 10, 20, … with a wait between, so the task outlives a server restart.
fn slow_script(clicks: i32) -> Value {
    let mut turns: Vec<Value> = (1..=clicks)
        .map(|i| {
            json!({"actions": [
                {"type": "click", "x": 10 * i, "y": 10},
                {"type": "wait", "duration_ms": 300}
            ]})
        })
        .collect();
    turns.push(json!({"complete": {"success": true, "summary": "clicked"}}));
    json!({ "turns": turns })
}

/// A private Xvfb with x11vnc on a known port, and the recorder app on it to see the clicks that arrive.
struct VncRig {
    display: XServer,
    port: u16,
    x11vnc: testing::Process,
    app: RecorderApp,
}

impl VncRig {
    fn start(dir: &Path) -> Self {
        let display = XServer::xvfb(1024, 600).expect("Xvfb");
        let port = testing::free_port().expect("port");
        let x11vnc = testing::x11vnc(&display.display, port, None).expect("x11vnc");
        let app = RecorderApp::start(&display.display, &dir.join("rig.log")).expect("recorder");
        Self { display, port, x11vnc, app }
    }

    fn clicked_x(&self) -> Vec<i64> {
        of_kind(&self.app.events(), "press").iter().filter(|e| e["y"] == 10).filter_map(|e| e["x"].as_i64()).collect()
    }

    fn wait_for_clicks(&self, n: usize) {
        let start = Instant::now();
        while self.clicked_x().len() < n && start.elapsed() < WAIT {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(self.clicked_x().len() >= n, "only {:?} clicked", self.clicked_x());
    }
}

#[test]
fn a_vnc_server_restarted_mid_task_lets_the_task_finish() {
    if desktop_env().is_none() {
        return;
    }
    let agentd = Agentd::new();
    let mut rig = VncRig::start(agentd.dir.path());
    let task = write_task(
        agentd.dir.path(),
        json!({"provider": "vnc", "address": format!("127.0.0.1:{}", rig.port)}),
        slow_script(12),
    );
    let child = spawn_task(&agentd, &task);
    rig.wait_for_clicks(2);
    rig.x11vnc.kill();
    std::thread::sleep(Duration::from_millis(800));
    rig.x11vnc = testing::x11vnc(&rig.display.display, rig.port, None).expect("x11vnc again");
    let run = finish(child, Duration::from_secs(60));
    assert_succeeded(&run);
    // Every click arrived once: none lost across the restart, none replayed.
    rig.wait_for_clicks(12);
    let mut xs = rig.clicked_x();
    xs.sort_unstable();
    assert_eq!(xs, (1..=12).map(|i| 10 * i).collect::<Vec<i64>>());
}

#[test]
fn a_vnc_server_gone_for_good_fails_the_task_with_the_reason() {
    if desktop_env().is_none() {
        return;
    }
    let agentd = Agentd::new();
    let mut rig = VncRig::start(agentd.dir.path());
    let task = write_task(
        agentd.dir.path(),
        json!({"provider": "vnc", "address": format!("127.0.0.1:{}", rig.port)}),
        slow_script(12),
    );
    let child = spawn_task(&agentd, &task);
    rig.wait_for_clicks(2);
    rig.x11vnc.kill();
    // The provider waits out its reconnect grace (15 s) and then the loop ends the attempt.
    let run = finish(child, Duration::from_secs(60));
    assert_eq!(run.code, 1, "{}", run.stderr);
    let record = run.json();
    assert_eq!(record["state"], "failed", "{record:#}");
    let summary = record["outcome"]["summary"].as_str().unwrap_or_default();
    assert!(summary.contains("VNC") && summary.contains("lost"), "{summary}");
}

#[test]
fn the_x_server_gone_mid_task_fails_the_task_with_the_reason() {
    if desktop_env().is_none() {
        return;
    }
    let agentd = Agentd::new();
    let mut display = XServer::xvfb(800, 600).expect("Xvfb");
    let app = RecorderApp::start(&display.display, &agentd.dir.path().join("rec.log")).expect("recorder");
    let task = write_task(agentd.dir.path(), json!({"provider": "local", "display": display.display}), slow_script(20));
    let child = spawn_task(&agentd, &task);
    let start = Instant::now();
    while of_kind(&app.events(), "press").len() < 2 && start.elapsed() < WAIT {
        std::thread::sleep(Duration::from_millis(20));
    }
    display.process.kill();
    let run = finish(child, Duration::from_secs(60));
    assert_eq!(run.code, 1, "{}", run.stderr);
    let record = run.json();
    let summary = record["outcome"]["summary"].as_str().unwrap_or_default();
    assert!(summary.contains(&display.display) && summary.contains("went away"), "{summary}");
}

#[test]
fn a_missing_monitor_is_invalid_input() {
    let Some(env) = desktop_env() else { return };
    let agentd = Agentd::new();
    let task = write_task(
        agentd.dir.path(),
        json!({"provider": "local", "display": env.display, "monitor": 9}),
        json!({"turns": [{"complete": {"success": true}}]}),
    );
    let run = run_task(&agentd, &task, None);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("computer.monitor") && run.stderr.contains("monitor 9"), "{}", run.stderr);
}

/// A task that types `letter` six times into the recorder's entry, one key per step.
fn letters_task(dir: &Path, id: &str, computer: &Value, letter: &str) -> std::path::PathBuf {
    let mut turns = vec![
        json!({"actions": [{"type": "click", "x": layout::ENTRY.0, "y": layout::ENTRY.1}]}),
        json!({"actions": [{"type": "keypress", "keys": ["End"]}]}),
    ];
    turns.extend((0..6).map(|_| json!({"actions": [{"type": "type", "text": letter}]})));
    turns.push(json!({"complete": {"success": true, "summary": "typed"}}));
    let task = json!({
        "id": id,
        "instructions": format!("type {letter} six times"),
        "computer": computer,
        "model": {"provider": "scripted", "script": {"turns": turns}},
        "limits": {"max_steps": 20, "timeout_secs": 120}
    });
    let path = dir.join(format!("{id}.json"));
    std::fs::write(&path, task.to_string()).expect("write task");
    path
}

/// Two tasks for one desktop submitted together to a daemon that runs two tasks at once: the second waits
/// in the queue until the first is done, so the app sees `aaaaaabbbbbb` (or `bbbbbbaaaaaa`), never the two
/// interleaved.
fn two_tasks_take_turns_on_one_desktop(computer: Value, display: &str) {
    // The test's VNC server is on loopback: the operator allows it to tasks submitted over the API.
    let daemon = crate::support::Daemon::start("[worker]\nconcurrency = 2\n\n[outbound]\nallow = [\"127.0.0.1\"]");
    let app = RecorderApp::start(display, &daemon.agentd.dir.path().join("rec.log")).expect("recorder");
    let dir = daemon.agentd.dir.path().to_path_buf();
    let a = letters_task(&dir, "turn-a", &computer, "a");
    let b = letters_task(&dir, "turn-b", &computer, "b");
    for task in [&a, &b] {
        let run = daemon.cli(&["submit", task.to_str().expect("path")]);
        assert_eq!(run.code, 0, "{}\n{}", run.stderr, daemon.log());
    }
    for id in ["turn-a", "turn-b"] {
        let doc = daemon.wait_terminal(id, Duration::from_secs(60));
        assert_eq!(doc["state"], "succeeded", "{doc:#}\n{}", daemon.log());
    }
    let events = app.wait_until(WAIT, |events| {
        of_kind(events, "text").last().and_then(|e| e["value"].as_str()).is_some_and(|t| t.len() >= 12)
    });
    let text = of_kind(&events, "text").last().and_then(|e| e["value"].as_str()).unwrap_or_default().to_string();
    assert!(
        text == "aaaaaabbbbbb" || text == "bbbbbbaaaaaa",
        "one task at a time on the desktop, got {text:?}\n{}",
        daemon.log()
    );
}

#[test]
fn two_tasks_for_one_local_display_take_turns() {
    let Some(env) = testing::own_xvfb(1280, 800) else { return };
    let _load = crate::support::timing_sensitive();
    two_tasks_take_turns_on_one_desktop(json!({"provider": "local", "display": env.display}), &env.display);
}

#[test]
fn two_tasks_for_one_vnc_server_take_turns() {
    if desktop_env().is_none() {
        return;
    }
    let _load = crate::support::timing_sensitive();
    let server = VncDesktop::x11vnc(1280, 800).expect("Xvfb and x11vnc");
    two_tasks_take_turns_on_one_desktop(json!({"provider": "vnc", "address": server.addr}), &server.display);
}
