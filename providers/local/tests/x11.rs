//! The local provider on real X servers: the conformance kit on the test display, input checked by the
//! recording app, long and non-ASCII typing, monitors, frame reuse, and the X server going away.
//!
//! Needs `AGENTD_TEST_DISPLAY` (set by `scripts/test`: X is there); without it every test skips (fails under
//! CI). Every test starts an Xvfb of its own.

use std::process::Command;
use std::time::{Duration, Instant};

use agentd_computer::conformance::{self, Options};
use agentd_computer::{Action, ComputerProvider, MouseButton, Point, ProviderError, Size};
use agentd_local::testing::{RecorderApp, XServer, desktop_env, layout, own_xvfb};
use agentd_local::{CaptureMethod, LocalConfig, LocalProvider};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(10);

fn config(display: &str) -> LocalConfig {
    LocalConfig::new(Some(display.to_string()))
}

async fn act(provider: &LocalProvider, json: Value) {
    let action: Action = serde_json::from_value(json.clone()).expect("action json");
    provider.perform(&action).await.unwrap_or_else(|e| panic!("{json}: {e}"));
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["event"] == kind).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_on_xvfb() {
    let Some(env) = own_xvfb(1280, 800) else { return };
    let provider = LocalProvider::open(config(&env.display)).await.expect("open the test display");
    let report = conformance::run(&provider, &Options { static_screen: true, ..Options::default() }).await;
    report.assert_passed();
    assert!(report.passed.len() >= 10, "{:?}", report.passed);
    assert_eq!(provider.capture_method().await.expect("method"), CaptureMethod::Shm);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_image_capture_matches_shared_memory() {
    let Some(env) = own_xvfb(1280, 800) else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let _app = RecorderApp::start(&env.display, &dir.path().join("log")).expect("recorder");
    let shm = LocalProvider::open(config(&env.display)).await.expect("open");
    let plain = LocalProvider::open(LocalConfig {
        capture: CaptureMethod::GetImage,
        reuse_unchanged: false,
        ..config(&env.display)
    })
    .await
    .expect("open");
    assert_eq!(plain.capture_method().await.expect("method"), CaptureMethod::GetImage);
    let a = shm.screenshot().await.expect("shm capture");
    let b = plain.screenshot().await.expect("GetImage capture");
    assert_eq!(a.size(), b.size());
    assert_eq!(a.changed_pixels(&b), 0, "the two capture paths disagree");
    assert!(!a.is_uniform(), "the recorder window should be visible");
    // The entry's white field is at its known place: the frame is not shifted or mirrored.
    assert_eq!(a.pixel(Point::new(layout::ENTRY.0, 50)), Some([255, 255, 255]));
    assert_eq!(a.pixel(Point::new(700, 300)), Some([0xee, 0xee, 0xff]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_lands_where_and_as_asked() {
    let Some(env) = own_xvfb(1280, 800) else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let app = RecorderApp::start(&env.display, &dir.path().join("log")).expect("recorder");
    let provider = LocalProvider::open(config(&env.display)).await.expect("open");

    act(&provider, serde_json::json!({"type": "click", "x": 100, "y": 150})).await;
    act(&provider, serde_json::json!({"type": "click", "x": 200, "y": 160, "button": "right"})).await;
    act(
        &provider,
        serde_json::json!({"type": "click", "x": 210, "y": 170, "button": "middle", "keys": ["ctrl", "shift"]}),
    )
    .await;
    act(&provider, serde_json::json!({"type": "double_click", "x": 300, "y": 200})).await;
    act(&provider, serde_json::json!({"type": "scroll", "x": 700, "y": 200, "scroll_y": 300})).await;
    act(&provider, serde_json::json!({"type": "scroll", "x": 710, "y": 210, "scroll_y": -100, "scroll_x": -100})).await;
    act(
        &provider,
        serde_json::json!({"type": "drag", "path": [{"x": 50, "y": 300}, {"x": 150, "y": 320}, {"x": 400, "y": 380}]}),
    )
    .await;
    act(&provider, serde_json::json!({"type": "move", "x": 500, "y": 150})).await;
    act(&provider, serde_json::json!({"type": "mouse_down", "button": "left"})).await;
    act(&provider, serde_json::json!({"type": "move", "x": 520, "y": 170})).await;
    act(&provider, serde_json::json!({"type": "mouse_up"})).await;
    let events =
        app.wait_until(WAIT, |events| of_kind(events, "release").iter().filter(|e| e["button"] == 1).count() >= 5);

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
    let expected = vec![
        (1, 100, 150, 0),
        (3, 200, 160, 0),
        (2, 210, 170, 1 | 4), // Shift and Control held
        (1, 300, 200, 0),
        (1, 300, 200, 0),
        (5, 700, 200, 0),
        (5, 700, 200, 0),
        (5, 700, 200, 0),
        (4, 710, 210, 0),
        (4, 710, 210, 1), // X button 6 (left): Tk reports it as Shift+4
        (1, 50, 300, 0),
        (1, 500, 150, 0),
    ];
    assert_eq!(presses, expected, "every press: {events:#?}");
    assert_eq!(of_kind(&events, "double").len(), 1, "{events:#?}");

    // The drag: pressed at the first point, moved through the second, released at the last.
    let drag_release = of_kind(&events, "release")
        .into_iter()
        .find(|e| e["button"] == 1 && e["x"] == 400)
        .unwrap_or_else(|| panic!("no release at the drag's end: {events:#?}"));
    assert_eq!(drag_release["y"], 380);
    let motions: Vec<(i64, i64)> = of_kind(&events, "motion")
        .iter()
        .map(|e| (e["x"].as_i64().unwrap_or(-1), e["y"].as_i64().unwrap_or(-1)))
        .collect();
    assert!(motions.contains(&(150, 320)), "the path's middle point: {motions:?}");
    assert!(motions.len() >= 5, "a continuous path: {motions:?}");
    // mouse_down + move + mouse_up is a drag too.
    assert!(motions.contains(&(520, 170)), "{motions:?}");
    let last_release = of_kind(&events, "release").last().map(|e| (e["x"].clone(), e["y"].clone()));
    assert_eq!(last_release, Some((520.into(), 170.into())));

    let cursor = provider.perform(&Action::CursorPosition {}).await.expect("cursor").cursor;
    assert_eq!(cursor, Some(Point::new(520, 170)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_keeps_every_character_and_chords_carry_modifiers() {
    let Some(env) = own_xvfb(1280, 800) else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let app = RecorderApp::start(&env.display, &dir.path().join("log")).expect("recorder");
    let provider = LocalProvider::open(config(&env.display)).await.expect("open");
    act(&provider, serde_json::json!({"type": "click", "x": layout::ENTRY.0, "y": layout::ENTRY.1})).await;

    // More distinct characters missing from a US layout than the server has spare keycodes, mixed with
    // ASCII, upper case and shifted punctuation, repeated so that spares get reused mid-text.
    let accents = "éèêëàâäîïôöùûüçÉÈÀÇœæßñÑøØåÅ€£¥©®°±µ¶\u{a7}¿¡«»";
    let cjk = "日本語のテキスト";
    let mut text = String::new();
    for round in 0..6 {
        text.push_str(&format!("Round {round}: The quick brown fox (#{round}) jumps! "));
        text.push_str(accents);
        text.push(' ');
        text.push_str(cjk);
        text.push_str(" ~`!@$%^&*()_+{}|:\"<>? ");
    }
    let started = Instant::now();
    act(&provider, serde_json::json!({"type": "type", "text": text})).await;
    let typing = started.elapsed();
    let events = app.wait_until(WAIT, |events| {
        of_kind(events, "text").last().and_then(|e| e["value"].as_str()) == Some(text.as_str())
    });
    let last = of_kind(&events, "text").last().and_then(|e| e["value"].as_str()).map(str::to_owned);
    assert_eq!(last.as_deref(), Some(text.as_str()), "typed {} chars in {typing:?}", text.chars().count());
    eprintln!("typed {} characters in {typing:?}", text.chars().count());

    // Chords: ctrl+a (Tk: to the line start), ctrl+slash (Tk: select all); the key record shows Control held.
    act(&provider, serde_json::json!({"type": "keypress", "keys": ["ctrl", "a"]})).await;
    act(&provider, serde_json::json!({"type": "keypress", "keys": ["ctrl", "slash"]})).await;
    act(&provider, serde_json::json!({"type": "keypress", "keys": ["BackSpace"]})).await;
    act(&provider, serde_json::json!({"type": "type", "text": "x"})).await;
    act(&provider, serde_json::json!({"type": "keypress", "keys": ["shift", "Home"]})).await;
    act(&provider, serde_json::json!({"type": "hold_key", "keys": ["alt"], "duration_ms": 50})).await;
    let events = app.wait_until(WAIT, |events| of_kind(events, "key_release").iter().any(|e| e["keysym"] == "Alt_L"));
    let keys = of_kind(&events, "key");
    assert!(
        keys.iter().any(|e| e["keysym"] == "a" && e["state"].as_i64().unwrap_or(0) & 4 != 0),
        "ctrl+a with Control held: {keys:#?}"
    );
    assert!(
        keys.iter().any(|e| e["keysym"] == "Home" && e["state"].as_i64().unwrap_or(0) & 1 != 0),
        "shift+Home with Shift held"
    );
    assert_eq!(
        of_kind(&events, "text").last().and_then(|e| e["value"].as_str()),
        Some("x"),
        "select all then BackSpace cleared the entry before x"
    );
    // The hold released Alt: its release was recorded after its press.
    assert!(of_kind(&events, "key_release").iter().any(|e| e["keysym"] == "Alt_L"), "alt released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unchanged_screen_reuses_the_frame_and_changes_are_seen() {
    let Some(env) = own_xvfb(1280, 800) else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let app = RecorderApp::start(&env.display, &dir.path().join("log")).expect("recorder");
    let provider = LocalProvider::open(config(&env.display)).await.expect("open");
    let before = provider.screenshot().await.expect("capture");
    let again = provider.screenshot().await.expect("capture");
    assert_eq!(before, again);
    act(&provider, serde_json::json!({"type": "click", "x": layout::ENTRY.0, "y": layout::ENTRY.1})).await;
    act(&provider, serde_json::json!({"type": "type", "text": "WWWWWWWW"})).await;
    app.wait_until(WAIT, |events| of_kind(events, "text").last().and_then(|e| e["value"].as_str()) == Some("WWWWWWWW"));
    // The app redraws after recording; poll until the change shows (bounded, no timing assertion).
    let start = Instant::now();
    let mut after = provider.screenshot().await.expect("capture");
    while after == before && start.elapsed() < WAIT {
        tokio::time::sleep(Duration::from_millis(20)).await;
        after = provider.screenshot().await.expect("capture");
    }
    let changed = before.changed_pixels(&after);
    assert!(changed > 50, "typing into the entry changed {changed} pixels");
    let crop_before = before.crop(Point::new(10, 25), Size::new(600, 30));
    let crop_after = after.crop(Point::new(10, 25), Size::new(600, 30));
    assert_ne!(crop_before, crop_after, "the change is inside the entry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monitor_is_its_own_coordinate_space() {
    if desktop_env().is_none() {
        return;
    }
    let server = XServer::xvfb(1280, 800).expect("Xvfb");
    for (name, geometry) in [("left", "640/169x800/212+0+0"), ("right", "640/169x800/212+640+0")] {
        let status = Command::new("xrandr")
            .args(["--display", &server.display, "--setmonitor", name, geometry, "none"])
            .status()
            .expect("xrandr");
        assert!(status.success(), "xrandr --setmonitor {name}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let app = RecorderApp::start(&server.display, &dir.path().join("log")).expect("recorder");
    let whole = LocalProvider::open(config(&server.display)).await.expect("open whole screen");
    let right =
        LocalProvider::open(LocalConfig { monitor: Some(1), ..config(&server.display) }).await.expect("open monitor 1");
    let monitors = right.monitors().await.expect("monitors");
    assert!(monitors.len() >= 2, "{monitors:?}");
    let monitor = right.monitor().await.expect("monitor");
    assert_eq!((monitor.name.as_str(), monitor.x, monitor.width), ("right", 640, 640));
    assert_eq!(right.screen_size().await.expect("size"), Size::new(640, 800));
    assert_eq!(whole.screen_size().await.expect("size"), Size::new(1280, 800));

    // The right monitor's frame is the right half of the screen.
    let full = whole.screenshot().await.expect("capture");
    let half = right.screenshot().await.expect("capture");
    assert_eq!(half, full.crop(Point::new(640, 0), Size::new(640, 800)));

    // (60, 150) on the right monitor is (700, 150) on the screen: the scroll pad.
    act(&right, serde_json::json!({"type": "click", "x": 60, "y": 150})).await;
    let events = app.wait_until(WAIT, |events| !of_kind(events, "release").is_empty());
    let press = of_kind(&events, "press").first().map(|e| (e["x"].clone(), e["y"].clone(), e["where"].clone()));
    assert_eq!(press, Some((700.into(), 150.into(), "scroll".into())));
    let cursor = right.perform(&Action::CursorPosition {}).await.expect("cursor").cursor;
    assert_eq!(cursor, Some(Point::new(60, 150)));
    // Off the monitor is off the screen, even though the X screen is wider.
    let err = right.perform(&Action::Move { x: 700, y: 10, keys: Vec::new() }).await.expect_err("off the monitor");
    assert!(matches!(err, ProviderError::InvalidAction(_)), "{err:?}");

    let missing = LocalProvider::open(LocalConfig { monitor: Some(7), ..config(&server.display) })
        .await
        .expect_err("monitor 7 does not exist");
    assert!(missing.to_string().contains("monitor 7"), "{missing}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_server_gone_is_unavailable_and_a_restart_is_picked_up() {
    if desktop_env().is_none() {
        return;
    }
    let mut server = XServer::xvfb(640, 480).expect("Xvfb");
    let display = server.display.clone();
    let provider = LocalProvider::open(config(&display)).await.expect("open");
    provider.screenshot().await.expect("capture while up");
    provider
        .perform(&Action::Click { x: 5, y: 5, button: MouseButton::Left, keys: vec![] })
        .await
        .expect("click while up");
    server.process.kill();
    // Wait for the socket to go, then every call fails fast with Unavailable.
    let start = Instant::now();
    let err = loop {
        match provider.screenshot().await {
            Err(e) => break e,
            Ok(_) if start.elapsed() < WAIT => tokio::time::sleep(Duration::from_millis(20)).await,
            Ok(_) => panic!("captures still succeed after the X server was killed"),
        }
    };
    assert!(matches!(err, ProviderError::Unavailable(_)), "{err:?}");
    assert!(err.to_string().contains(&display), "{err}");
    let err = provider.perform(&Action::Move { x: 1, y: 1, keys: Vec::new() }).await.expect_err("no server");
    assert!(err.is_retryable(), "{err:?}");
    assert!(start.elapsed() < WAIT, "failing took {:?}", start.elapsed());

    // A new server on the same display: the provider reconnects by itself.
    let number = display.trim_start_matches(':').to_string();
    let _ = std::fs::remove_file(format!("/tmp/.X{number}-lock"));
    let mut command = Command::new("Xvfb");
    command
        .args([display.as_str(), "-screen", "0", "800x600x24", "-noreset", "-nolisten", "tcp"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let _restarted = agentd_local::testing::Process::spawn("Xvfb", &mut command).expect("restart Xvfb");
    let start = Instant::now();
    let size = loop {
        match provider.screen_size().await {
            Ok(size) => break size,
            Err(_) if start.elapsed() < WAIT => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => panic!("no reconnect to the restarted server: {e}"),
        }
    };
    assert_eq!(size, Size::new(800, 600));
    assert_eq!(provider.screenshot().await.expect("capture").size(), size);
}

#[tokio::test]
async fn a_display_without_a_server_is_unavailable() {
    let err = LocalProvider::open(config(":987")).await.expect_err("nothing on :987");
    let provider_error = ProviderError::from(err.clone());
    assert!(provider_error.is_retryable(), "{provider_error:?}");
    assert!(err.to_string().contains(":987"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn borrowed_keycodes_are_emptied_once_idle() {
    if desktop_env().is_none() {
        return;
    }
    let server = XServer::xvfb(640, 480).expect("Xvfb");
    let keymap = || {
        let out = Command::new("xmodmap").args(["-display", &server.display, "-pke"]).output().expect("xmodmap");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(!keymap().contains("eacute"));
    let provider = LocalProvider::open(config(&server.display)).await.expect("open");
    act(&provider, serde_json::json!({"type": "type", "text": "é"})).await;
    assert!(keymap().contains("eacute"), "é is on a borrowed keycode while in use");
    // Emptied again after SPARE_IDLE (5 s) without a call: other tools (xdotool, enigo) need empty keycodes.
    let start = Instant::now();
    while keymap().contains("eacute") && start.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(!keymap().contains("eacute"), "é still mapped after {:?}", start.elapsed());
    // And borrowed again when needed.
    act(&provider, serde_json::json!({"type": "type", "text": "é"})).await;
    assert!(keymap().contains("eacute"));
}
