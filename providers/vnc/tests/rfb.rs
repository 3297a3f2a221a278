//! The VNC provider against real servers: x11vnc on Xvfb (no password) and TigerVNC's Xvnc (VNC
//! authentication) — the conformance kit, input checked by the recording app, frames checked against the
//! X server's own pixels, desktop resize — and the faults: wrong and missing passwords, nothing listening,
//! and the server killed and restarted under a live provider.
//!
//! Needs the variables `scripts/test` exports (`AGENTD_TEST_VNC_ADDR`, `AGENTD_TEST_XVNC_ADDR`, …); without
//! them each test prints why it skips. Fault tests start servers of their own.

use std::process::Command;
use std::time::{Duration, Instant};

use agentd_computer::conformance::{self, Options};
use agentd_computer::{Action, ComputerProvider, Point, ProviderError, Size};
use agentd_local::testing::{self, RecorderApp, VncDesktop, XServer, desktop_env, layout};
use agentd_local::{LocalConfig, LocalProvider};
use agentd_vnc::{VncConfig, VncError, VncProvider};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(10);

/// A VNC server of the calling test's own ([`VncDesktop`]): typing through a server shared by the whole run
/// would depend on what earlier tests typed (both servers keep the spare keycodes they borrowed).
type Server = VncDesktop;

fn x11vnc_server() -> Option<Server> {
    desktop_env()?;
    Some(VncDesktop::x11vnc(1280, 800).expect("Xvfb and x11vnc"))
}

fn xvnc_server() -> Option<Server> {
    desktop_env()?;
    Some(VncDesktop::xvnc(1280, 800, Some("agentd-pw")).expect("Xvnc with a password"))
}

async fn connect(server: &Server) -> VncProvider {
    VncProvider::connect(VncConfig::new(&server.addr, server.password.clone()))
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", server.addr))
}

async fn act(provider: &VncProvider, json: Value) {
    let action: Action = serde_json::from_value(json.clone()).expect("action json");
    provider.perform(&action).await.unwrap_or_else(|e| panic!("{json}: {e}"));
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["event"] == kind).collect()
}

async fn conformance_on(server: &Server) {
    let provider = connect(server).await;
    let report = conformance::run(&provider, &Options::default()).await;
    report.assert_passed();
    assert!(report.passed.len() >= 10, "{:?}", report.passed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_on_x11vnc() {
    let Some(server) = x11vnc_server() else {
        return;
    };
    conformance_on(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_on_xvnc_with_a_password() {
    let Some(server) = xvnc_server() else { return };
    conformance_on(&server).await;
}

/// Clicks, buttons with modifiers, scrolls both ways, a drag, typing with non-ASCII text and chords: the
/// recording app on the server's display sees each where and as asked.
async fn input_lands(server: &Server) {
    let _typing = typing();
    let dir = tempfile::tempdir().expect("tempdir");
    let app = RecorderApp::start(&server.display, &dir.path().join("log")).expect("recorder");
    let provider = connect(server).await;
    act(&provider, serde_json::json!({"type": "click", "x": 100, "y": 150})).await;
    act(&provider, serde_json::json!({"type": "click", "x": 200, "y": 160, "button": "right", "keys": ["shift"]}))
        .await;
    act(&provider, serde_json::json!({"type": "scroll", "x": 700, "y": 200, "scroll_y": 200})).await;
    act(&provider, serde_json::json!({"type": "scroll", "x": 710, "y": 210, "scroll_y": -100, "scroll_x": -100})).await;
    act(
        &provider,
        serde_json::json!({"type": "drag", "path": [{"x": 50, "y": 300}, {"x": 150, "y": 320}, {"x": 400, "y": 380}]}),
    )
    .await;
    act(&provider, serde_json::json!({"type": "click", "x": layout::ENTRY.0, "y": layout::ENTRY.1})).await;
    let text = "Grüße, naïve café — 10 € (ok?) ÅØÆ ñ";
    act(&provider, serde_json::json!({"type": "type", "text": text})).await;
    act(&provider, serde_json::json!({"type": "keypress", "keys": ["ctrl", "slash"]})).await;
    let events = app.wait_until(WAIT, |events| {
        of_kind(events, "text").last().and_then(|e| e["value"].as_str()) == Some(text)
            && of_kind(events, "key").iter().any(|e| e["keysym"] == "slash")
    });
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
    let mut expected = vec![
        (1, 100, 150, 0),
        (3, 200, 160, 1),
        (5, 700, 200, 0),
        (5, 700, 200, 0),
        (4, 710, 210, 0),
        (4, 710, 210, 1), // X button 6 (left): Tk reports it as Shift+4
        (1, 50, 300, 0),
        (1, layout::ENTRY.0 as i64, layout::ENTRY.1 as i64, 0),
    ];
    if !server.horizontal_wheel {
        expected.remove(5);
    }
    assert_eq!(presses, expected, "every press: {events:#?}");
    let motions: Vec<(i64, i64)> = of_kind(&events, "motion")
        .iter()
        .map(|e| (e["x"].as_i64().unwrap_or(-1), e["y"].as_i64().unwrap_or(-1)))
        .collect();
    assert!(motions.contains(&(150, 320)), "the drag's middle point: {motions:?}");
    let released = of_kind(&events, "release").iter().any(|e| e["button"] == 1 && e["x"] == 400 && e["y"] == 380);
    assert!(released, "released at the drag's end: {events:#?}");
    assert_eq!(of_kind(&events, "text").last().and_then(|e| e["value"].as_str()), Some(text), "the typed text");
    let keys = of_kind(&events, "key");
    assert!(
        keys.iter().any(|e| e["keysym"] == "slash" && e["state"].as_i64().unwrap_or(0) & 4 != 0),
        "ctrl+slash with Control held: {keys:#?}"
    );
    let cursor = provider.perform(&Action::CursorPosition {}).await.expect("cursor").cursor;
    assert_eq!(cursor, Some(Point::new(layout::ENTRY.0, layout::ENTRY.1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_lands_through_x11vnc() {
    let Some(server) = x11vnc_server() else {
        return;
    };
    input_lands(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_lands_through_xvnc() {
    let Some(server) = xvnc_server() else { return };
    input_lands(&server).await;
}

/// Chords that hold Shift arrive with Shift held and the shifted key, as from a keyboard: ctrl+shift+t is
/// `T` with Shift and Control, ctrl+alt+shift+r is `R` with Shift, Control and Alt, shift+Tab is
/// `ISO_Left_Tab` (back-tab) with Shift. (Sent as the unshifted keysym, x11vnc lifts Shift to type `t` and Xvnc
/// fakes Caps Lock.)
async fn shift_chords_land(server: &Server) {
    let _typing = typing();
    let dir = tempfile::tempdir().expect("tempdir");
    let app = RecorderApp::start(&server.display, &dir.path().join("log")).expect("recorder");
    let provider = connect(server).await;
    act(&provider, serde_json::json!({"type": "click", "x": layout::ENTRY.0, "y": layout::ENTRY.1})).await;
    for chord in
        [vec!["ctrl", "shift", "t"], vec!["ctrl", "alt", "shift", "r"], vec!["shift", "Tab"], vec!["shift", "1"]]
    {
        act(&provider, serde_json::json!({"type": "keypress", "keys": chord})).await;
    }
    let is_modifier = |e: &&Value| {
        let name = e["keysym"].as_str().unwrap_or_default();
        ["Shift", "Control", "Alt", "Meta", "Caps_Lock", "ISO_Level3"].iter().any(|m| name.starts_with(m))
    };
    let chords = |events: &[Value]| -> Vec<(String, i64)> {
        of_kind(events, "key")
            .into_iter()
            .filter(|e| !is_modifier(e))
            .map(|e| (e["keysym"].as_str().unwrap_or_default().to_string(), e["state"].as_i64().unwrap_or(-1) & 0x0f))
            .collect()
    };
    let events = app.wait_until(WAIT, |events| chords(events).len() >= 4);
    // State bits: 1 Shift, 2 Lock, 4 Control, 8 Mod1 (Alt).
    assert_eq!(
        chords(&events),
        vec![("T".to_string(), 5), ("R".to_string(), 13), ("ISO_Left_Tab".to_string(), 1), ("exclam".to_string(), 1)],
        "the chords as the app saw them: {events:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shift_chords_keep_shift_through_x11vnc() {
    let Some(server) = x11vnc_server() else {
        return;
    };
    shift_chords_land(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shift_chords_keep_shift_through_xvnc() {
    let Some(server) = xvnc_server() else { return };
    shift_chords_land(&server).await;
}

/// The VNC frame shows exactly the X server's pixels (read with the local provider from the same display),
/// away from the pointer the VNC server draws in.
async fn frames_match_the_display(server: &Server) {
    let dir = tempfile::tempdir().expect("tempdir");
    let _app = RecorderApp::start(&server.display, &dir.path().join("log")).expect("recorder");
    let provider = connect(server).await;
    let local = LocalProvider::open(LocalConfig::new(Some(server.display.clone())))
        .await
        .expect("local provider on the same display");
    act(&provider, serde_json::json!({"type": "move", "x": 1200, "y": 700})).await;
    let region = (Point::new(0, 0), Size::new(960, 420));
    // Both captures are repeated until they agree: the app redraws (focus ring, caret) on its own time.
    let start = Instant::now();
    let (mut frame, mut truth);
    loop {
        truth = local.screenshot().await.expect("local capture");
        frame = provider.screenshot().await.expect("vnc capture");
        if frame.crop(region.0, region.1) == truth.crop(region.0, region.1) || start.elapsed() > WAIT {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(frame.size(), truth.size());
    let changed = frame.crop(region.0, region.1).changed_pixels(&truth.crop(region.0, region.1));
    assert_eq!(changed, 0, "pixels differing between the VNC frame and the display");
    // Unchanged screen: the screenshot is the local copy, no update arrives for it.
    let before = provider.updates();
    let again = provider.screenshot().await.expect("vnc capture");
    assert_eq!(again.crop(region.0, region.1), frame.crop(region.0, region.1));
    assert!(provider.updates() >= before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_match_the_display_through_x11vnc() {
    let Some(server) = x11vnc_server() else {
        return;
    };
    frames_match_the_display(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_match_the_display_through_xvnc() {
    let Some(server) = xvnc_server() else { return };
    frames_match_the_display(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_desktop_resize_reaches_the_provider() {
    let Some(server) = xvnc_server() else { return };
    let provider = connect(&server).await;
    let original = provider.screen_size().await.expect("size");
    let xrandr = |size: &str| {
        let status = Command::new("xrandr").args(["--display", &server.display, "-s", size]).status().expect("xrandr");
        assert!(status.success(), "xrandr -s {size}");
    };
    xrandr("1024x768");
    let start = Instant::now();
    while provider.screen_size().await.expect("size") != Size::new(1024, 768) && start.elapsed() < WAIT {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let resized = provider.screen_size().await.expect("size");
    let frame = provider.screenshot().await.expect("capture");
    xrandr(&format!("{}x{}", original.width, original.height));
    assert_eq!(resized, Size::new(1024, 768));
    assert_eq!(frame.size(), resized);
    // Coordinates follow the new size: the old width is now off the screen.
    let start = Instant::now();
    while provider.screen_size().await.expect("size") != original && start.elapsed() < WAIT {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(provider.screen_size().await.expect("size"), original);
}

/// A password file for a server of our own.
fn password_file(dir: &std::path::Path, password: &str) -> std::path::PathBuf {
    let file = dir.join("passwd");
    testing::store_vnc_password(password, &file).expect("vncpasswd file");
    file
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_and_missing_passwords_are_clear_failures() {
    if desktop_env().is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let file = password_file(dir.path(), "right-pw");
    let port = testing::free_port().expect("port");
    let _server = XServer::xvnc(640, 480, port, Some(&file)).expect("Xvnc");
    let addr = format!("127.0.0.1:{port}");

    let err = VncProvider::connect(VncConfig::new(&addr, Some("wrong-pw".into()))).await.expect_err("a wrong password");
    assert!(matches!(err, VncError::AuthFailed { .. }), "{err:?}");
    let provider_error = ProviderError::from(err.clone());
    assert!(!provider_error.is_retryable() && !provider_error.is_tool_error(), "{provider_error:?}");
    assert!(err.to_string().contains("authentication") && err.to_string().contains(&addr), "{err}");

    let err = VncProvider::connect(VncConfig::new(&addr, None)).await.expect_err("no password");
    assert!(matches!(err, VncError::PasswordRequired { .. }), "{err:?}");
    assert!(err.to_string().contains("password_env"), "{err}");

    // The right one works (only the first 8 bytes count, as in every VNC server).
    let provider =
        VncProvider::connect(VncConfig::new(&addr, Some("right-pw".into()))).await.expect("the right password");
    assert_eq!(provider.screen_size().await.expect("size"), Size::new(640, 480));
}

#[tokio::test]
async fn nothing_listening_is_unavailable() {
    let port = testing::free_port().expect("port");
    let start = Instant::now();
    let err =
        VncProvider::connect(VncConfig::new(format!("127.0.0.1:{port}"), None)).await.expect_err("nothing listens");
    assert!(matches!(err, VncError::Connect { .. }), "{err:?}");
    assert!(ProviderError::from(err).is_retryable());
    assert!(start.elapsed() < WAIT);
    let err = VncProvider::connect(VncConfig::new("no-such-host.invalid:5900", None)).await.expect_err("no such host");
    assert!(matches!(err, VncError::Connect { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_fails_calls_in_bounded_time_and_a_restarted_one_is_picked_up() {
    if desktop_env().is_none() {
        return;
    }
    let display = XServer::xvfb(800, 600).expect("Xvfb");
    let port = testing::free_port().expect("port");
    let mut vnc = testing::x11vnc(&display.display, port, None).expect("x11vnc");
    let mut config = VncConfig::new(format!("127.0.0.1:{port}"), None);
    config.reconnect_grace = Duration::from_secs(2);
    let provider = VncProvider::connect(config).await.expect("connect");
    act(&provider, serde_json::json!({"type": "move", "x": 10, "y": 10})).await;

    vnc.kill();
    let start = Instant::now();
    // The reader sees the drop at once; calls then wait out the grace and fail with the reason.
    let err = loop {
        match provider.screenshot().await {
            Err(e) => break e,
            Ok(_) if start.elapsed() < WAIT => tokio::time::sleep(Duration::from_millis(20)).await,
            Ok(_) => panic!("captures still succeed after the server was killed"),
        }
    };
    assert!(matches!(err, ProviderError::Unavailable(_)), "{err:?}");
    assert!(err.to_string().contains("lost"), "{err}");
    let err = provider.perform(&Action::Move { x: 1, y: 1, keys: Vec::new() }).await.expect_err("no server");
    assert!(err.is_retryable(), "{err:?}");
    assert!(start.elapsed() < WAIT, "failing took {:?}", start.elapsed());
    assert!(provider.health().await.is_err());

    // Restarted on the same port: the provider reconnects by itself and input flows again.
    let _vnc = testing::x11vnc(&display.display, port, None).expect("x11vnc again");
    let start = Instant::now();
    while !provider.is_connected() && start.elapsed() < WAIT {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(provider.is_connected(), "no reconnect within {WAIT:?}");
    provider.health().await.expect("healthy again");
    assert_eq!(provider.screenshot().await.expect("capture").size(), Size::new(800, 600));
    act(&provider, serde_json::json!({"type": "click", "x": 30, "y": 40})).await;
    let cursor = provider.perform(&Action::CursorPosition {}).await.expect("cursor").cursor;
    assert_eq!(cursor, Some(Point::new(30, 40)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_inside_the_grace_is_invisible_to_callers() {
    if desktop_env().is_none() {
        return;
    }
    let display = XServer::xvfb(640, 480).expect("Xvfb");
    let port = testing::free_port().expect("port");
    let mut vnc = testing::x11vnc(&display.display, port, None).expect("x11vnc");
    let provider = VncProvider::connect(VncConfig::new(format!("127.0.0.1:{port}"), None)).await.expect("connect");
    vnc.kill();
    let restart = tokio::task::spawn_blocking({
        let display = display.display.clone();
        move || {
            std::thread::sleep(Duration::from_millis(500));
            testing::x11vnc(&display, port, None)
        }
    });
    // Called while the server is down: waits for the reconnect instead of failing.
    let frame = provider.screenshot().await.expect("capture across the restart");
    assert_eq!(frame.size(), Size::new(640, 480));
    let _vnc = restart.await.expect("join").expect("x11vnc again");
    act(&provider, serde_json::json!({"type": "type", "text": "still here"})).await;
}

/// The root window's colour set with `xsetroot` (which returns once the X server has drawn it).
fn paint_root(display: &str, rgb: (u8, u8, u8)) {
    let colour = format!("#{:02x}{:02x}{:02x}", rgb.0, rgb.1, rgb.2);
    let status = Command::new("xsetroot").args(["-display", display, "-solid", &colour]).status().expect("xsetroot");
    assert!(status.success(), "xsetroot -solid {colour}");
}

fn pixel(frame: &agentd_computer::Frame, x: u32, y: u32) -> (u8, u8, u8) {
    let [r, g, b] = frame.pixel(Point::new(x as i32, y as i32)).expect("a pixel on the screen");
    (r, g, b)
}

/// The fence tests repaint the whole screen as fast as they can; beside them x11vnc's added keysyms (Å, Ø
/// typed with Shift) came out in lower case now and then in the typing tests of this file. They take
/// this lock exclusively and the typing tests shared, so the two never overlap.
const REPAINTS: &str = "vnc-repaints";

fn alone() -> agentd_testenv::Held {
    agentd_testenv::lock(REPAINTS, agentd_testenv::Mode::Exclusive)
}

fn typing() -> agentd_testenv::Held {
    agentd_testenv::lock(REPAINTS, agentd_testenv::Mode::Shared)
}

/// How long a change x11vnc sees drawn may take to reach a connected client: far above what it takes
/// (milliseconds), so only a connection that stopped asking for updates exceeds it.
const CHANGE_REACHES_A_CLIENT: Duration = Duration::from_secs(10);

const COLOURS: [(u8, u8, u8); 4] = [(200, 30, 30), (30, 160, 40), (40, 50, 210), (220, 200, 20)];

/// A screenshot taken right after an action shows what the screen showed before the action: the screen is
/// repainted, an action is performed, and the first screenshot after it must have the new colour (a pixel
/// of the root window, away from the pointer). Repeated, since an update may or may not have arrived by
/// chance.
async fn no_screenshot_older_than_the_last_action(server: &Server) {
    let provider = connect(server).await;
    let size = provider.screen_size().await.expect("size");
    let (x, y) = (size.width - 5, size.height - 5);
    server.wait_until_watching(Duration::from_secs(30)).expect("the server watching the screen");
    let mut stale = Vec::new();
    for (i, &colour) in COLOURS.iter().cycle().take(12).enumerate() {
        paint_root(&server.display, colour);
        act(&provider, serde_json::json!({"type": "move", "x": 10 + i, "y": 10})).await;
        let seen = pixel(&provider.screenshot().await.expect("capture"), x, y);
        if seen != colour {
            stale.push((i, seen, colour));
        }
    }
    assert!(stale.is_empty(), "screenshots older than the action before them (round, seen, painted): {stale:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_screenshot_older_than_the_last_action_through_x11vnc() {
    if desktop_env().is_none() {
        return;
    }
    let _alone = alone();
    let server = VncDesktop::x11vnc(640, 480).expect("Xvfb and x11vnc");
    no_screenshot_older_than_the_last_action(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_screenshot_older_than_the_last_action_through_xvnc() {
    if desktop_env().is_none() {
        return;
    }
    let _alone = alone();
    let server = VncDesktop::xvnc(640, 480, None).expect("Xvnc");
    no_screenshot_older_than_the_last_action(&server).await;
}

/// Between two tasks no action runs and, with a connection per task, no client is connected: x11vnc then
/// stops tracking the screen, and a change made meanwhile reached the next task's first screenshot seconds
/// late (21 of 88 short tasks). The daemon keeps one connection per server (`VncProvider::shared`), so the
/// next task's first screenshot shows a change made while no task ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_connection_keeps_x11vnc_current_between_tasks() {
    if desktop_env().is_none() {
        return;
    }
    let _alone = alone();
    let display = XServer::xvfb(640, 480).expect("Xvfb");
    let port = testing::free_port().expect("port");
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("x11vnc.log");
    let _vnc = testing::x11vnc_logged(&display.display, port, &log).expect("x11vnc");
    let config = VncConfig::new(format!("127.0.0.1:{port}"), None);
    let first = VncProvider::shared(config.clone()).await.expect("connect");
    let size = first.screen_size().await.expect("size");
    let (x, y) = (size.width - 5, size.height - 5);
    // Until x11vnc watches X damage (some time after its first client connected) it finds changes only by
    // a sparse check every 2 s, whoever asks: see the agentd_vnc docs.
    testing::wait_for_x11vnc_damage(&log, Duration::from_secs(30)).expect("x11vnc watching damage");
    let mut stale = Vec::new();
    for (i, &colour) in COLOURS.iter().cycle().take(8).enumerate() {
        // The last task has ended; the screen changes while none runs; then the next task starts. Its
        // screenshots send no request (no input came first): the connection's standing request for updates
        // alone must bring the change, which x11vnc sends as soon as it sees it drawn.
        paint_root(&display.display, colour);
        let next = VncProvider::shared(config.clone()).await.expect("the shared connection");
        assert!(std::sync::Arc::ptr_eq(&first, &next), "a second connection was opened");
        let start = std::time::Instant::now();
        let mut seen = pixel(&next.screenshot().await.expect("capture"), x, y);
        while seen != colour && start.elapsed() < CHANGE_REACHES_A_CLIENT {
            tokio::time::sleep(Duration::from_millis(20)).await;
            seen = pixel(&next.screenshot().await.expect("capture"), x, y);
        }
        if seen != colour {
            stale.push((i, seen, colour));
        }
    }
    assert!(
        stale.is_empty(),
        "changes that never reached the shared connection within {CHANGE_REACHES_A_CLIENT:?} (round, seen, painted): {stale:?}"
    );
}
