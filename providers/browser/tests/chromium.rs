//! The browser provider against Debian's Chromium (`scripts/setup/40-browser.sh` installs it and sets
//! `AGENTD_TEST_CHROMIUM`) and pages this test serves itself: a recorder page logs every DOM event with its
//! key, code, modifiers, buttons, click count and wheel deltas, and each case compares what the page saw
//! with what the action means. Without Chromium each test says why it skips (a failure under CI).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use agentd_browser::{BrowserConfig, BrowserProvider};
use agentd_computer::{Action, ComputerProvider, Point, Size};
use serde_json::{Value, json};

const RECORDER: &str = include_str!("pages/recorder.html");

/// These tests have timing in their checks: never beside a test that loads the machine.
fn load() -> agentd_testenv::Inside {
    agentd_testenv::on_a_quiet_machine()
}

/// The Chromium to drive, or `None` after saying why the test skips.
fn chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("AGENTD_TEST_CHROMIUM").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let found = agentd_browser::launch::find_executable(&agentd_browser::DEFAULT_EXECUTABLES);
    if found.is_none() {
        agentd_testenv::skip("no Chromium (set AGENTD_TEST_CHROMIUM; scripts/setup/40-browser.sh installs it)");
    }
    found
}

/// Serves `pages` (path, content type, body) on a loopback port until the test ends; anything else is 404.
async fn serve(pages: Vec<(&'static str, &'static str, String)>) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let pages = std::sync::Arc::new(pages);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let pages = pages.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&head);
                let path = text.split_whitespace().nth(1).unwrap_or("/").to_string();
                let found = pages.iter().find(|(p, _, _)| *p == path);
                let reply = match found {
                    Some((_, kind, body)) => format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    ),
                    None => "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_string(),
                };
                let _ = stream.write_all(reply.as_bytes()).await;
            });
        }
    });
    port
}

async fn open(executable: PathBuf, start_url: Option<String>) -> BrowserProvider {
    let config = BrowserConfig { executable: Some(executable), start_url, ..BrowserConfig::default() };
    BrowserProvider::open(config).await.unwrap_or_else(|e| panic!("opening the browser: {e}"))
}

async fn recorder(executable: PathBuf) -> BrowserProvider {
    let port = serve(vec![("/", "text/html; charset=utf-8", RECORDER.to_string())]).await;
    open(executable, Some(format!("http://127.0.0.1:{port}/"))).await
}

async fn perform(browser: &BrowserProvider, action: Value) -> agentd_computer::ActionReport {
    let parsed: Action = serde_json::from_value(action.clone()).unwrap_or_else(|e| panic!("{action}: {e}"));
    browser.perform(&parsed).await.unwrap_or_else(|e| panic!("{action}: {e}"))
}

/// The page's log since the last call, as one line, and cleared.
async fn take_log(browser: &BrowserProvider) -> String {
    let log = browser.evaluate("(() => { const l = window.__log.join(' | '); window.__log = []; return l; })()").await;
    log.unwrap_or_else(|e| panic!("reading the log: {e}")).as_str().unwrap_or_default().to_string()
}

fn p(x: i32, y: i32) -> Value {
    json!({"x": x, "y": y})
}

fn keys(chords: &[&[&str]]) -> Vec<Value> {
    chords.iter().map(|chord| json!({"type": "keypress", "keys": chord})).collect()
}

/// Only the log lines a drag case is about: presses, releases, and motion at the points it names.
fn drag_view(log: &str, via: &[(i32, i32)]) -> String {
    log.split(" | ")
        .filter(|line| {
            !line.starts_with("mv ")
                || via.iter().any(|(x, y)| line.split(' ').nth(2) == Some(format!("{x},{y}").as_str()))
        })
        .filter(|line| !line.starts_with("click ") && !line.starts_with("aux ") && !line.starts_with("ctx "))
        .collect::<Vec<_>>()
        .join(" | ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_clicks_drags_and_wheels_reach_the_page_exactly() {
    let Some(executable) = chromium() else { return };
    let _load = load();
    let browser = recorder(executable).await;
    // Keys go to the entry.
    perform(&browser, json!({"type": "click", "x": 300, "y": 50})).await;
    take_log(&browser).await;

    let key_cases: Vec<(&str, Vec<Value>, &str)> = vec![
        (
            "named keys",
            keys(&[
                &["Escape"],
                &["BackSpace"],
                &["Delete"],
                &["Insert"],
                &["Home"],
                &["End"],
                &["Page_Up"],
                &["pagedown"],
                &["Up"],
                &["Down"],
                &["Left"],
                &["Right"],
                &["F2"],
                &["F12"],
                &["space"],
                &["enter"],
                &["esc"],
            ]),
            "kd Escape Escape - 0 | kd Backspace Backspace - 0 | kd Delete Delete - 0 | kd Insert Insert - 0 | \
             kd Home Home - 0 | kd End End - 0 | kd PageUp PageUp - 0 | kd PageDown PageDown - 0 | \
             kd ArrowUp ArrowUp - 0 | kd ArrowDown ArrowDown - 0 | kd ArrowLeft ArrowLeft - 0 | \
             kd ArrowRight ArrowRight - 0 | kd F2 F2 - 0 | kd F12 F12 - 0 | kd   Space - 0 | kd Enter Enter - 0 | \
             kd Escape Escape - 0",
        ),
        (
            "keypad",
            keys(&[&["KP_Add"], &["KP_Enter"], &["KP_7"]]),
            "kd + NumpadAdd - 3 | kd Enter NumpadEnter - 3 | kd 7 Numpad7 - 3",
        ),
        (
            "chords",
            keys(&[&["ctrl", "a"], &["ctrl", "shift", "1"], &["alt", "f"], &["super", "e"], &["ctrl", "alt", "Right"]]),
            "kd Control ControlLeft C 1 | kd a KeyA C 0 | kd Control ControlLeft C 1 | kd Shift ShiftLeft CS 1 | \
             kd ! Digit1 CS 0 | kd Alt AltLeft A 1 | kd f KeyF A 0 | kd Meta MetaLeft M 1 | kd e KeyE M 0 | \
             kd Control ControlLeft C 1 | kd Alt AltLeft CA 1 | kd ArrowRight ArrowRight CA 0",
        ),
        (
            "shift chords",
            keys(&[&["shift", "t"], &["Shift_R", "F8"], &["shift", "Tab"]]),
            "kd Shift ShiftLeft S 1 | kd T KeyT S 0 | kd Shift ShiftRight S 2 | kd F8 F8 S 0 | \
             kd Shift ShiftLeft S 1 | kd Tab Tab S 0",
        ),
    ];
    let mut failures = Vec::new();
    for (name, actions, expect) in &key_cases {
        for action in actions {
            perform(&browser, action.clone()).await;
        }
        let got = take_log(&browser).await;
        println!("{name}: {got}");
        if got != *expect {
            failures.push(format!("{name}:\n  expected {expect}\n  got      {got}"));
        }
    }

    let pointer_cases: Vec<(&str, Vec<Value>, &str)> = vec![
        (
            "click: left",
            vec![json!({"type": "click", "x": 120, "y": 140})],
            "md 0 1 120,140 1 - | mu 0 0 120,140 1 - | click 0 120,140 1 -",
        ),
        (
            "click: right",
            vec![json!({"type": "click", "x": 130, "y": 150, "button": "right"})],
            "md 2 2 130,150 1 - | ctx 2 130,150 - | mu 2 0 130,150 1 - | aux 2 130,150 1 -",
        ),
        (
            "click: middle",
            vec![json!({"type": "click", "x": 140, "y": 160, "button": "middle"})],
            "md 1 4 140,160 1 - | mu 1 0 140,160 1 - | aux 1 140,160 1 -",
        ),
        (
            "click: back",
            vec![json!({"type": "click", "x": 150, "y": 170, "button": "back"})],
            "md 3 8 150,170 1 - | mu 3 0 150,170 1 - | aux 3 150,170 1 -",
        ),
        (
            "click: forward",
            vec![json!({"type": "click", "x": 160, "y": 180, "button": "forward"})],
            "md 4 16 160,180 1 - | mu 4 0 160,180 1 - | aux 4 160,180 1 -",
        ),
        (
            "click: double",
            vec![json!({"type": "double_click", "x": 300, "y": 200})],
            "md 0 1 300,200 1 - | mu 0 0 300,200 1 - | click 0 300,200 1 - | md 0 1 300,200 2 - | \
             mu 0 0 300,200 2 - | click 0 300,200 2 - | dbl 0 300,200 2 -",
        ),
        (
            "click: triple",
            vec![json!({"type": "triple_click", "x": 400, "y": 220})],
            "md 0 1 400,220 1 - | mu 0 0 400,220 1 - | click 0 400,220 1 - | md 0 1 400,220 2 - | \
             mu 0 0 400,220 2 - | click 0 400,220 2 - | dbl 0 400,220 2 - | md 0 1 400,220 3 - | \
             mu 0 0 400,220 3 - | click 0 400,220 3 -",
        ),
        (
            "click: shift held",
            vec![json!({"type": "click", "x": 170, "y": 190, "keys": ["shift"]})],
            "kd Shift ShiftLeft S 1 | md 0 1 170,190 1 S | mu 0 0 170,190 1 S | click 0 170,190 1 S",
        ),
        (
            "click: ctrl+alt held, right button",
            vec![json!({"type": "click", "x": 180, "y": 200, "button": "right", "keys": ["ctrl", "alt"]})],
            "kd Control ControlLeft C 1 | kd Alt AltLeft CA 1 | md 2 2 180,200 1 CA | ctx 2 180,200 CA | \
             mu 2 0 180,200 1 CA | aux 2 180,200 1 CA",
        ),
        (
            "click: super held, middle button",
            vec![json!({"type": "click", "x": 190, "y": 210, "button": "middle", "keys": ["super"]})],
            "kd Meta MetaLeft M 1 | md 1 4 190,210 1 M | mu 1 0 190,210 1 M | aux 1 190,210 1 M",
        ),
        (
            "scroll: down 300 px",
            vec![json!({"type": "scroll", "x": 800, "y": 250, "scroll_y": 300})],
            "wh 0,300 0 800,250 -",
        ),
        (
            "scroll: up 200 px",
            vec![json!({"type": "scroll", "x": 800, "y": 250, "scroll_y": -200})],
            "wh 0,-200 0 800,250 -",
        ),
        (
            "scroll: right 200 px",
            vec![json!({"type": "scroll", "x": 810, "y": 260, "scroll_x": 200})],
            "wh 200,0 0 810,260 -",
        ),
        (
            "scroll: left 100 and down 37",
            vec![json!({"type": "scroll", "x": 820, "y": 270, "scroll_x": -100, "scroll_y": 37})],
            "wh -100,37 0 820,270 -",
        ),
        (
            "scroll: ctrl held, up 100 px",
            vec![json!({"type": "scroll", "x": 840, "y": 290, "scroll_y": -100, "keys": ["ctrl"]})],
            "kd Control ControlLeft C 1 | wh 0,-100 0 840,290 C",
        ),
        (
            "scroll: shift held, down 200 px",
            vec![json!({"type": "scroll", "x": 850, "y": 300, "scroll_y": 200, "keys": ["shift"]})],
            "kd Shift ShiftLeft S 1 | wh 0,200 0 850,300 S",
        ),
    ];
    for (name, actions, expect) in &pointer_cases {
        for action in actions {
            perform(&browser, action.clone()).await;
        }
        let got = take_log(&browser).await;
        println!("{name}: {got}");
        if got != *expect {
            failures.push(format!("{name}:\n  expected {expect}\n  got      {got}"));
        }
    }

    // Name, actions, the points the drag must pass through, what the page must see.
    type DragCase = (&'static str, Vec<Value>, Vec<(i32, i32)>, &'static str);
    let drag_cases: Vec<DragCase> = vec![
        (
            "drag: left through 2 intermediate points",
            vec![json!({"type": "drag", "path": [p(60, 200), p(150, 220), p(300, 260), p(500, 350)]})],
            vec![(150, 220), (300, 260)],
            "md 0 1 60,200 1 - | mv 1 150,220 - | mv 1 300,260 - | mu 0 0 500,350 1 -",
        ),
        (
            "drag: shift held",
            vec![json!({"type": "drag", "path": [p(60, 300), p(200, 320), p(400, 380)], "keys": ["shift"]})],
            vec![(200, 320)],
            "kd Shift ShiftLeft S 1 | md 0 1 60,300 1 S | mv 1 200,320 S | mu 0 0 400,380 1 S",
        ),
        (
            "drag: right button, ctrl held",
            vec![json!({"type": "drag", "path": [p(300, 200), p(350, 250), p(450, 300)], "button": "right",
                        "keys": ["ctrl"]})],
            vec![(350, 250)],
            "kd Control ControlLeft C 1 | md 2 2 300,200 1 C | mv 2 350,250 C | mu 2 0 450,300 1 C",
        ),
        (
            "drag: mouse_down with ctrl, move with shift, mouse_up",
            vec![
                json!({"type": "move", "x": 250, "y": 300}),
                json!({"type": "mouse_down", "keys": ["ctrl"]}),
                json!({"type": "move", "x": 270, "y": 310, "keys": ["shift"]}),
                json!({"type": "mouse_up"}),
            ],
            vec![(270, 310)],
            "kd Control ControlLeft C 1 | md 0 1 250,300 1 C | kd Shift ShiftLeft CS 1 | mv 1 270,310 CS | \
             mu 0 0 270,310 1 C",
        ),
    ];
    for (name, actions, via, expect) in &drag_cases {
        for action in actions {
            perform(&browser, action.clone()).await;
        }
        let got = drag_view(&take_log(&browser).await, via);
        println!("{name}: {got}");
        if got != *expect {
            failures.push(format!("{name}:\n  expected {expect}\n  got      {got}"));
        }
    }
    assert!(failures.is_empty(), "{} case(s) differ:\n{}", failures.len(), failures.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_of_any_script_arrives_as_typed() {
    let Some(executable) = chromium() else { return };
    let _load = load();
    let browser = recorder(executable).await;
    let long = "The quick brown fox jumps over the lazy dog 0123456789. ".repeat(7);
    let cases = [
        "hello world",
        long.as_str(),
        "~!@#$%^&*()_+{}|:\"<>? `-=[]\\;',./",
        "$(rm -rf /tmp/x) ';\"`echo hi` \\$HOME && a || b > c < d | e %s %n",
        "Grüße aus Köln: naïve café, 10 € — Ça va, señor Ñandú?",
        "中文输入 日本語 한국어",
        "עברית العربية",
        "ok 👍🏽 🎉",
        "👨\u{200d}👩\u{200d}👧",
        "e\u{301} a\u{308} n\u{303}",
        "一二三四五六七八九十百千万上下左右中大小山川日月火水木金土天",
        "line one\nline two\r\nline three",
    ];
    let mut failures = Vec::new();
    for text in cases {
        perform(&browser, json!({"type": "click", "x": 300, "y": 50})).await;
        browser.evaluate("document.getElementById('entry').value = ''").await.unwrap();
        let started = Instant::now();
        perform(&browser, json!({"type": "type", "text": text})).await;
        let took = started.elapsed();
        let value = browser.evaluate("document.getElementById('entry').value").await.unwrap();
        let got = value.as_str().unwrap_or_default().to_string();
        // A textarea keeps line breaks as \n.
        let want = text.replace("\r\n", "\n");
        println!("{:?}: {} characters in {took:?}", text.chars().take(20).collect::<String>(), text.chars().count());
        if got != want {
            failures.push(format!("typed {want:?}, the entry holds {got:?}"));
        }
    }
    // Tab leaves the entry: the page sees the key; letters come as keys with their codes.
    browser.evaluate("document.getElementById('entry').value = ''").await.unwrap();
    take_log(&browser).await;
    perform(&browser, json!({"type": "type", "text": "aB\tc"})).await;
    let log = take_log(&browser).await;
    let expect = "kd a KeyA - 0 | kd B KeyB S 0 | kd Tab Tab - 0 | kd c KeyC - 0";
    if log != expect {
        failures.push(format!("the keys of \"aB\\tc\":\n  expected {expect}\n  got      {log}"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_screenshot_after_a_click_shows_its_effect() {
    let Some(executable) = chromium() else { return };
    let _load = load();
    let browser = recorder(executable).await;
    assert_eq!(browser.screen_size().await.unwrap(), Size::new(1280, 800));
    let swatch = Point::new(1050, 50);
    let colours = [[255, 0, 0], [0, 160, 0], [0, 0, 255]];
    let frame = browser.screenshot().await.unwrap();
    assert_eq!(frame.size(), Size::new(1280, 800));
    assert_eq!(frame.pixel(swatch), Some([0, 0, 255]), "the swatch starts blue");
    let mut steps = Vec::new();
    for i in 0..60 {
        let started = Instant::now();
        perform(&browser, json!({"type": "click", "x": swatch.x, "y": swatch.y})).await;
        let frame = browser.screenshot().await.unwrap();
        steps.push(started.elapsed());
        let want = colours[i % 3];
        assert_eq!(
            frame.pixel(swatch),
            Some(want),
            "click {}: the screenshot after it shows the swatch as it was",
            i + 1
        );
    }
    steps.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "step (click + PNG screenshot, 1280x800): median {:.1} ms, p95 {:.1} ms, max {:.1} ms over {}",
        ms(steps[steps.len() / 2]),
        ms(steps[steps.len() * 95 / 100]),
        ms(steps[steps.len() - 1]),
        steps.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_provider_passes_the_conformance_kit() {
    let Some(executable) = chromium() else { return };
    let _load = load();
    let started = Instant::now();
    let browser = open(executable, None).await;
    println!("browser started in {:?}", started.elapsed());
    let options = agentd_computer::conformance::Options { static_screen: true, ..Default::default() };
    agentd_computer::conformance::run(&browser, &options).await.assert_passed();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_tabs_are_followed_and_dialogs_answered() {
    let Some(executable) = chromium() else { return };
    let _load = load();
    let home = r#"<!doctype html><title>Home</title><body style="margin:0">
        <a id="tab" href="/second" target="_blank" style="position:absolute;left:10px;top:10px;width:200px;height:40px;display:block">new tab</a>
        <button id="alert" onclick="alert('careful')" style="position:absolute;left:10px;top:100px;width:200px;height:40px">alert</button>
        <button id="confirm" onclick="document.title = confirm('sure?') ? 'confirmed' : 'declined'" style="position:absolute;left:10px;top:200px;width:200px;height:40px">confirm</button>
        <button id="prompt" onclick="document.title = 'said ' + prompt('name?', 'alice')" style="position:absolute;left:10px;top:300px;width:200px;height:40px">prompt</button>
        <input id="file" type="file" style="position:absolute;left:10px;top:400px;width:200px;height:40px">
        </body>"#;
    let second = "<!doctype html><title>Second</title><body>second page</body>";
    let port = serve(vec![("/", "text/html", home.to_string()), ("/second", "text/html", second.to_string())]).await;
    let base = format!("http://127.0.0.1:{port}");
    let browser = open(executable, Some(format!("{base}/"))).await;
    let page = browser.page_state().await.unwrap();
    assert_eq!((page.url.as_str(), page.title.as_str(), page.pages), (format!("{base}/").as_str(), "Home", 1));

    let report = perform(&browser, json!({"type": "click", "x": 100, "y": 120})).await;
    let message = report.message.unwrap_or_default();
    assert!(message.contains("alert") && message.contains("careful"), "{message}");

    let report = perform(&browser, json!({"type": "click", "x": 100, "y": 220})).await;
    assert!(report.message.unwrap_or_default().contains("confirm"));
    title_becomes(&browser, "confirmed", "the confirm dialog was accepted").await;

    let report = perform(&browser, json!({"type": "click", "x": 100, "y": 320})).await;
    assert!(report.message.unwrap_or_default().contains("\"alice\""));
    title_becomes(&browser, "said alice", "the prompt was answered").await;

    // The chooser's event may come just after the click returns: its note is then the next one.
    let report = perform(&browser, json!({"type": "click", "x": 100, "y": 420})).await;
    let mut message = report.message.unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !message.contains("upload") && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        message.push_str(&browser.take_notes().join("; "));
    }
    assert!(message.contains("upload"), "the file chooser is refused with a note: {message:?}");

    // The new tab's note goes with the click's own result when the tab is attached before the click returns,
    // else with the next: both are read.
    let clicked = perform(&browser, json!({"type": "click", "x": 100, "y": 30})).await;
    // The new tab is attached while the click returns: wait for it (a signal, bounded).
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    loop {
        let page = browser.page_state().await.unwrap();
        if page.pages == 2 && page.title == "Second" {
            assert_eq!(page.url, format!("{base}/second"));
            break;
        }
        let state = format!("{page:?}");
        if !seen.contains(&state) {
            seen.push(state);
        }
        assert!(Instant::now() < deadline, "no second tab shown within 10 s; saw {seen:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let notes = format!("{}; {}", clicked.message.unwrap_or_default(), browser.take_notes().join("; "));
    assert!(notes.contains("new tab") && notes.contains("/second"), "{notes}");

    // Back and forward in the second tab's own history, then a reload.
    browser.navigate(&format!("{base}/")).await.unwrap();
    assert_eq!(browser.page_state().await.unwrap().title, "Home");
    assert!(browser.history(-1).await.unwrap());
    assert_eq!(browser.page_state().await.unwrap().title, "Second");
    assert!(!browser.history(-1).await.unwrap(), "no entry before the first");
    assert!(browser.history(1).await.unwrap());
    assert_eq!(browser.page_state().await.unwrap().title, "Home");
    browser.reload().await.unwrap();
    assert_eq!(browser.page_state().await.unwrap().title, "Home");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_profile_is_removed_with_the_browser() {
    let Some(executable) = chromium() else { return };
    let _load = load();
    let browser = open(executable, None).await;
    let profile = browser.profile_dir().expect("a launched browser has a profile").to_path_buf();
    let pid = browser.pid().expect("a launched browser has a process");
    assert!(profile.join("Default").exists() || profile.exists(), "{} exists while it runs", profile.display());
    drop(browser);
    assert!(!profile.exists(), "{} is removed with the browser", profile.display());
    let proc = PathBuf::from(format!("/proc/{pid}"));
    assert!(!proc.exists(), "the browser process {pid} is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_is_handed_over_with_its_name_and_content() {
    let Some(executable) = chromium() else { return };
    let _load = load();
    let page = r#"<!doctype html><body style="margin:0">
        <a href="/report" style="position:absolute;left:0;top:0;width:300px;height:100px;display:block">get the report</a>
        </body>"#;
    let port = serve(vec![
        ("/", "text/html", page.to_string()),
        (
            "/report",
            "text/plain\r\ncontent-disposition: attachment; filename=\"report.txt\"",
            "quarterly numbers\n".into(),
        ),
    ])
    .await;
    let browser = open(executable, Some(format!("http://127.0.0.1:{port}/"))).await;
    perform(&browser, json!({"type": "click", "x": 100, "y": 50})).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let downloads = loop {
        let taken = browser.take_downloads().await;
        if !taken.is_empty() {
            break taken;
        }
        assert!(Instant::now() < deadline, "no download finished within 10 s; notes: {:?}", browser.take_notes());
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(downloads.len(), 1, "{downloads:?}");
    assert_eq!(downloads[0].name, "report.txt");
    assert_eq!(downloads[0].size, 18);
    assert_eq!(downloads[0].content.as_deref(), Some(&b"quarterly numbers\n"[..]));
    let notes = browser.take_notes().join("; ");
    assert!(notes.contains("report.txt"), "{notes}");
    assert!(browser.take_downloads().await.is_empty(), "a download is handed over once");
}

/// Under a URL policy (a task submitted over the API): a page at an allowed address opens; a redirect from
/// it to a loopback address the policy does not allow, a frame and a `fetch` to that address, and a
/// `file:` URL are refused, each before anything leaves the browser.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_policy_refuses_redirects_frames_and_fetches_to_the_inside() {
    let Some(executable) = chromium() else { return };
    let _load = load();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // The inside: 127.0.0.2, which counts every request it gets.
    let inside = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
    let inside_port = inside.local_addr().unwrap().port();
    let reached = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let counter = reached.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = inside.accept().await {
            let mut buf = [0u8; 2048];
            let n = stream.read(&mut buf).await.unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]).to_string();
            counter.lock().unwrap().push(head);
            let body = "<title>inside</title>secret";
            let reply = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
            let _ = stream.write_all(reply.as_bytes()).await;
        }
    });
    let inside_url = format!("http://127.0.0.2:{inside_port}/");
    let home = format!(
        r#"<!doctype html><title>Outside</title><body style="margin:0">
        <a href="/jump" style="position:absolute;left:0;top:0;width:300px;height:60px;display:block">jump</a>
        <iframe src="{inside_url}" style="position:absolute;left:0;top:100px;width:300px;height:100px"></iframe>
        </body>"#
    );
    let jump =
        format!("HTTP/1.1 302 Found\r\nlocation: {inside_url}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    // The outside, on 127.0.0.1, which the policy allows (`[outbound] allow = ["127.0.0.1"]`).
    let outside = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = outside.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = outside.accept().await {
            let (home, jump) = (home.clone(), jump.clone());
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let n = stream.read(&mut buf).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]).to_string();
                let reply = if request.starts_with("GET /jump ") {
                    jump
                } else {
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{home}",
                        home.len()
                    )
                };
                let _ = stream.write_all(reply.as_bytes()).await;
            });
        }
    });
    let policy = agentd_browser::UrlPolicy {
        allowed: vec![],
        outbound: agentd_computer::outbound::Outbound::restricted(&["127.0.0.1".to_string()]).unwrap(),
    };
    let config = BrowserConfig {
        executable: Some(executable),
        start_url: Some(format!("http://127.0.0.1:{port}/")),
        url_policy: Some(policy),
        ..BrowserConfig::default()
    };
    let browser = BrowserProvider::open(config).await.unwrap_or_else(|e| panic!("opening the browser: {e}"));
    assert_eq!(browser.page_state().await.unwrap().title, "Outside");

    // A fetch to the inside fails in the page.
    let fetched = browser
        .evaluate(&format!("fetch('{inside_url}').then(() => 'reached', (e) => 'refused: ' + e.message)"))
        .await
        .unwrap();
    assert!(fetched.as_str().unwrap_or_default().starts_with("refused"), "{fetched}");

    // The link redirects to the inside: the redirect is refused (the frame's refusal is noted before).
    let before = browser.take_notes().join("; ");
    assert!(before.contains("127.0.0.2"), "the frame to the inside was refused: {before:?}");
    perform(&browser, json!({"type": "click", "x": 100, "y": 30})).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let notes = loop {
        let notes = browser.take_notes().join("; ");
        if notes.contains("refused") {
            break notes;
        }
        assert!(Instant::now() < deadline, "no refusal noted within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(notes.contains("127.0.0.2") && notes.contains("loopback"), "{notes}");
    assert_ne!(browser.page_state().await.unwrap().title, "inside");

    // Opening the inside, or a file, directly is a tool error.
    for url in [inside_url.as_str(), "file:///etc/passwd"] {
        let refused = browser.perform(&Action::Navigate { url: url.to_string() }).await.unwrap_err();
        assert!(refused.is_tool_error(), "{refused:?}");
    }
    let reached = reached.lock().unwrap().clone();
    assert!(reached.is_empty(), "nothing reached the inside: {reached:#?}");
}

/// Waits for the page's title to become `expected` (`what` it shows): the title is the browser's view of the page
/// (Target.getTargetInfo), which the renderer tells it apart from its answer to an input event, so it may follow
/// the action by moments; ten seconds without it means the action's effect was lost.
async fn title_becomes(browser: &BrowserProvider, expected: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let title = browser.page_state().await.unwrap().title;
        if title == expected {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: the title is still {title:?}, not {expected:?} after 10 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Between tasks ([`BrowserProvider::reset`], what a desktop pool does): the next task gets a browser context
/// with none of the last one's cookies, storage or tabs, on the start page, with input working; the first
/// reset makes its context, each later one takes the context prepared meanwhile (the times are printed: a
/// figure, not a check). A kept profile is left as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_gives_the_next_task_a_clean_browser() {
    let Some(executable) = chromium() else { return };
    let _load = load();
    // The title counts this origin's visits (local storage) and shows its cookie.
    let home = r#"<!doctype html><body style="margin:0">
        <a href="/second" target="_blank" style="position:absolute;left:0;top:0;width:300px;height:60px;display:block">tab</a>
        <button onclick="document.title = 'clicked'" style="position:absolute;left:0;top:100px;width:300px;height:60px">b</button>
        <script>
          const n = (+localStorage.getItem('n') || 0) + 1;
          localStorage.setItem('n', n);
          document.title = 'visit ' + n + ' cookie [' + document.cookie + ']';
          document.cookie = 'seen=yes; max-age=3600';
        </script></body>"#;
    let second = "<!doctype html><title>Second</title><body>second</body>";
    let port = serve(vec![("/", "text/html", home.to_string()), ("/second", "text/html", second.to_string())]).await;
    let start = format!("http://127.0.0.1:{port}/");
    let browser = open(executable.clone(), Some(start.clone())).await;
    assert_eq!(browser.page_state().await.unwrap().title, "visit 1 cookie []");
    browser.reload().await.unwrap();
    assert_eq!(browser.page_state().await.unwrap().title, "visit 2 cookie [seen=yes]", "state lasts within a task");

    let mut figures = Vec::new();
    for round in 0..3 {
        // The task leaves a second tab open and the pointer somewhere.
        perform(&browser, json!({"type": "click", "x": 100, "y": 30})).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while browser.page_state().await.unwrap().pages != 2 {
            assert!(Instant::now() < deadline, "round {round}: no second tab within 10 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // After the first reset, the next task's context is prepared while this one runs.
        let deadline = Instant::now() + Duration::from_secs(30);
        while round > 0 && !browser.prepared() {
            assert!(Instant::now() < deadline, "round {round}: the next context was not prepared within 30 s");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let began = Instant::now();
        assert!(browser.reset().await.unwrap(), "a fresh profile is reset");
        figures.push(began.elapsed());
        let page = browser.page_state().await.unwrap();
        assert_eq!(page.url, start, "round {round}: the start page");
        assert_eq!(page.pages, 1, "round {round}: the last task's tabs are gone");
        assert_eq!(page.title, "visit 1 cookie []", "round {round}: no storage or cookie of the last task");
        assert!(browser.take_notes().is_empty(), "round {round}: no note of the last task carries over");
        let frame = browser.screenshot().await.unwrap();
        assert_eq!(frame.size(), Size::new(1280, 800), "round {round}: the viewport is set in the new context");
        perform(&browser, json!({"type": "click", "x": 100, "y": 130})).await;
        title_becomes(&browser, "clicked", &format!("round {round}: input lands after a reset")).await;
        browser.reload().await.unwrap();
    }
    let ms: Vec<String> = figures.iter().map(|d| format!("{:.1}", d.as_secs_f64() * 1000.0)).collect();
    println!("reset to a fresh context on the start page (first, then prepared): {} ms", ms.join(", "));

    // A kept profile is the tasks' on purpose: nothing is cleared.
    let kept = tempfile::tempdir().unwrap();
    let config = BrowserConfig {
        executable: Some(executable),
        start_url: Some(start.clone()),
        profile: agentd_browser::Profile::Dir(kept.path().to_path_buf()),
        ..BrowserConfig::default()
    };
    let browser = BrowserProvider::open(config).await.unwrap();
    assert!(!browser.reset().await.unwrap(), "a kept profile is not reset");
    browser.reload().await.unwrap();
    assert_eq!(browser.page_state().await.unwrap().title, "visit 2 cookie [seen=yes]");
}
