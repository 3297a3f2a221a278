//! The portable provider on a real X server (Xvfb): the conformance kit, and clicks, keys, text, scroll, drag
//! and held modifiers (docs/task-file.md) checked by the recording app.
//!
//! Needs `AGENTD_TEST_DISPLAY` (set by `scripts/test`, the sign that Xvfb is there); without it every test
//! prints why it skips. Each test runs on an Xvfb of its own; xcap reads the display from `$DISPLAY`, so the
//! tests point `$DISPLAY` there and take turns ([`DISPLAY_LOCK`]).

use std::time::Duration;

use agentd_computer::conformance::{self, Options};
use agentd_computer::{Action, ComputerProvider, Point, ProviderError, Size};
use agentd_local::testing::{RecorderApp, XServer, desktop_env, layout};
use agentd_portable::{PortableConfig, PortableError, PortableProvider};
use serde_json::{Value, json};

static DISPLAY_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const WAIT: Duration = Duration::from_secs(10);

/// A fresh Xvfb of the test's own (1280x800), with `$DISPLAY` pointing at it; `None` (the test skips) where
/// X is not available. Not the shared test display: enigo refuses an X server without an unused keycode, and
/// the X11 provider's tests fill the shared display's spare keycodes with the characters they type. Callers
/// hold [`DISPLAY_LOCK`] (xcap reads `$DISPLAY`), so one test at a time sets it.
fn display() -> Option<XServer> {
    desktop_env()?;
    let x = XServer::xvfb(1280, 800).expect("Xvfb");
    // SAFETY: tests hold DISPLAY_LOCK around this write and their use of the provider; nothing else in the
    // test process reads `$DISPLAY`.
    unsafe { std::env::set_var("DISPLAY", &x.display) };
    Some(x)
}

async fn open() -> PortableProvider {
    PortableProvider::open(PortableConfig::default()).await.expect("open the test display")
}

async fn act(provider: &PortableProvider, json: Value) {
    let action: Action = serde_json::from_value(json.clone()).expect("action json");
    provider.perform(&action).await.unwrap_or_else(|e| panic!("{json}: {e}"));
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["event"] == kind).collect()
}

fn state(event: &Value) -> i64 {
    event["state"].as_i64().unwrap_or(-1) & 0xff
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_on_xvfb() {
    let _guard = DISPLAY_LOCK.lock().await;
    let Some(_x) = display() else { return };
    let provider = open().await;
    let report = conformance::run(&provider, &Options { static_screen: true, ..Options::default() }).await;
    report.assert_passed();
    assert!(report.passed.len() >= 10, "{:?}", report.passed);
    let size = provider.screen_size().await.expect("size");
    assert_eq!(provider.screenshot().await.expect("capture").size(), size);
    let monitor = provider.monitor().await.expect("monitor");
    assert_eq!(Size::new(monitor.width, monitor.height), size);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clicks_scrolls_drags_and_held_modifiers_land() {
    let _guard = DISPLAY_LOCK.lock().await;
    let Some(x) = display() else { return };
    let display = x.display.clone();
    let dir = tempfile::tempdir().expect("tempdir");
    let app = RecorderApp::start(&display, &dir.path().join("log")).expect("recorder");
    let provider = open().await;

    act(&provider, json!({"type": "click", "x": 100, "y": 150})).await;
    act(&provider, json!({"type": "click", "x": 200, "y": 160, "button": "right"})).await;
    act(&provider, json!({"type": "click", "x": 210, "y": 170, "button": "middle", "keys": ["ctrl", "shift"]})).await;
    act(&provider, json!({"type": "double_click", "x": 300, "y": 200})).await;
    act(&provider, json!({"type": "triple_click", "x": 400, "y": 220})).await;
    act(&provider, json!({"type": "scroll", "x": 700, "y": 200, "scroll_y": 300})).await;
    act(&provider, json!({"type": "scroll", "x": 710, "y": 210, "scroll_y": -100, "keys": ["ctrl"]})).await;
    // A drag with the right button and Shift held through it (docs/task-file.md).
    act(
        &provider,
        json!({"type": "drag", "path": [{"x": 50, "y": 300}, {"x": 150, "y": 320}, {"x": 400, "y": 380}],
               "button": "right", "keys": ["shift"]}),
    )
    .await;
    // mouse_down's keys stay held until its mouse_up, through a move.
    act(&provider, json!({"type": "move", "x": 500, "y": 150})).await;
    act(&provider, json!({"type": "mouse_down", "button": "left", "keys": ["ctrl"]})).await;
    act(&provider, json!({"type": "move", "x": 520, "y": 170})).await;
    act(&provider, json!({"type": "mouse_up"})).await;
    // Then nothing is held any more.
    act(&provider, json!({"type": "click", "x": 110, "y": 350})).await;
    let events = app.wait_until(WAIT, |events| {
        of_kind(events, "release").iter().any(|e| e["button"] == 1 && e["x"] == 110 && e["y"] == 350)
    });

    let presses: Vec<(i64, i64, i64, i64)> = of_kind(&events, "press")
        .iter()
        .map(|e| {
            (e["button"].as_i64().unwrap_or(-1), e["x"].as_i64().unwrap_or(-1), e["y"].as_i64().unwrap_or(-1), state(e))
        })
        .collect();
    let expected = vec![
        (1, 100, 150, 0),
        (3, 200, 160, 0),
        (2, 210, 170, 1 | 4), // Shift and Control held
        (1, 300, 200, 0),
        (1, 300, 200, 0),
        (1, 400, 220, 0),
        (1, 400, 220, 0),
        (1, 400, 220, 0),
        (5, 700, 200, 0),
        (5, 700, 200, 0),
        (5, 700, 200, 0),
        (4, 710, 210, 4), // Control held through the scroll
        (3, 50, 300, 1),  // the drag: right button, Shift held
        (1, 500, 150, 4), // mouse_down with Control
        (1, 110, 350, 0), // released by mouse_up: nothing held
    ];
    assert_eq!(presses, expected, "every press: {events:#?}");
    assert_eq!(of_kind(&events, "double").len(), 2, "the double and the triple click's second: {events:#?}");
    assert_eq!(of_kind(&events, "triple").len(), 1, "{events:#?}");

    // The drag went through the middle point with the right button (the recorder's `buttons` are the state's
    // bits 8..: Button3 is 4) and Shift held, and released at the last point.
    let drag_motion = of_kind(&events, "motion").into_iter().find(|e| e["x"] == 150 && e["y"] == 320);
    let drag_motion = drag_motion.unwrap_or_else(|| panic!("no motion at the path's middle: {events:#?}"));
    let buttons = drag_motion["buttons"].as_i64().unwrap_or(0);
    assert!(buttons & 4 != 0 && state(drag_motion) & 1 != 0, "right button and Shift during the drag: {drag_motion}");
    let drag_release = of_kind(&events, "release").into_iter().find(|e| e["button"] == 3 && e["x"] == 400);
    assert_eq!(drag_release.map(|e| e["y"].clone()), Some(380.into()), "{events:#?}");
    // The mouse_down/move/mouse_up drag: Control held at the move.
    let held_move = of_kind(&events, "motion").into_iter().find(|e| e["x"] == 520 && e["y"] == 170);
    let held_move = held_move.unwrap_or_else(|| panic!("no motion at 520,170: {events:#?}"));
    assert!(held_move["buttons"].as_i64().unwrap_or(0) & 1 != 0, "the left button down: {held_move}");
    assert!(state(held_move) & 4 != 0, "Control held until mouse_up: {held_move}");

    let cursor = provider.perform(&Action::CursorPosition {}).await.expect("cursor").cursor;
    assert_eq!(cursor, Some(Point::new(110, 350)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_and_chords_land_and_screenshots_show_them() {
    let _guard = DISPLAY_LOCK.lock().await;
    let Some(x) = display() else { return };
    let display = x.display.clone();
    let dir = tempfile::tempdir().expect("tempdir");
    let app = RecorderApp::start(&display, &dir.path().join("log")).expect("recorder");
    let provider = open().await;
    let before = provider.screenshot().await.expect("capture");
    act(&provider, json!({"type": "click", "x": layout::ENTRY.0, "y": layout::ENTRY.1})).await;

    let text = "Hello, World! (#42) ~`!@$%^&*()_+{}|:\"<>? café";
    act(&provider, json!({"type": "type", "text": text})).await;
    let events =
        app.wait_until(WAIT, |events| of_kind(events, "text").last().and_then(|e| e["value"].as_str()) == Some(text));
    assert_eq!(of_kind(&events, "text").last().and_then(|e| e["value"].as_str()), Some(text));

    // The entry changed on screen (poll: the app redraws after it records; no timing assertion).
    let start = std::time::Instant::now();
    let mut after = provider.screenshot().await.expect("capture");
    while after.crop(Point::new(10, 25), Size::new(600, 30)) == before.crop(Point::new(10, 25), Size::new(600, 30))
        && start.elapsed() < WAIT
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
        after = provider.screenshot().await.expect("capture");
    }
    assert_ne!(
        before.crop(Point::new(10, 25), Size::new(600, 30)),
        after.crop(Point::new(10, 25), Size::new(600, 30)),
        "the typed text shows in the entry"
    );

    // `\n` is Return and `\t` is Tab (the Tab moves the focus on: last).
    act(&provider, json!({"type": "type", "text": "!\n?\t"})).await;
    let events = app.wait_until(WAIT, |events| of_kind(events, "key").iter().any(|e| e["keysym"] == "Tab"));
    let typed: Vec<&str> = of_kind(&events, "key")
        .iter()
        .filter_map(|e| e["keysym"].as_str())
        .filter(|k| !k.starts_with("Shift"))
        .collect();
    assert!(typed.ends_with(&["exclam", "Return", "question", "Tab"]), "{typed:?}");
    act(&provider, json!({"type": "click", "x": layout::ENTRY.0, "y": layout::ENTRY.1})).await;

    act(&provider, json!({"type": "keypress", "keys": ["ctrl", "slash"]})).await;
    act(&provider, json!({"type": "keypress", "keys": ["BackSpace"]})).await;
    act(&provider, json!({"type": "type", "text": "x"})).await;
    act(&provider, json!({"type": "keypress", "keys": ["shift", "Home"]})).await;
    act(&provider, json!({"type": "hold_key", "keys": ["alt"], "duration_ms": 50})).await;
    let events = app.wait_until(WAIT, |events| of_kind(events, "key_release").iter().any(|e| e["keysym"] == "Alt_L"));
    let keys = of_kind(&events, "key");
    assert!(
        keys.iter().any(|e| e["keysym"] == "slash" && state(e) & 4 != 0),
        "ctrl+slash with Control held: {keys:#?}"
    );
    assert!(keys.iter().any(|e| e["keysym"] == "Home" && state(e) & 1 != 0), "shift+Home with Shift held");
    assert_eq!(
        of_kind(&events, "text").last().and_then(|e| e["value"].as_str()),
        Some("x"),
        "select all then BackSpace cleared the entry before x"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_keys_and_missing_monitors_are_named() {
    let _guard = DISPLAY_LOCK.lock().await;
    let Some(_x) = display() else { return };
    let provider = open().await;
    let err = provider.perform(&Action::Keypress { keys: vec!["nosuchkey".into()] }).await.expect_err("unknown key");
    assert!(err.is_tool_error() && err.to_string().contains("nosuchkey"), "{err:?}");
    let err = provider.perform(&Action::Move { x: 5000, y: 10, keys: Vec::new() }).await.expect_err("off screen");
    assert!(matches!(err, ProviderError::InvalidAction(_)), "{err:?}");
    let missing = PortableProvider::open(PortableConfig { monitor: Some(7) }).await.expect_err("no monitor 7");
    assert!(matches!(missing, PortableError::NoMonitor { index: 7, .. }), "{missing:?}");
    assert!(missing.to_string().contains("monitor 7"), "{missing}");
}
