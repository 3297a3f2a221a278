//! The web console (docs/console.md) in a real headless Chromium (`testkit::browser`): login (a wrong token refused),
//! the
//! task list, a task page receiving live steps over SSE, approval (also with edited actions), cancel and a
//! remote tool's answer given in the page, the submit form, CSRF (a cross-site POST and a POST without the
//! session's value refused), keyboard-only navigation, a phone-sized screen, and `agentd console` for a daemon on its Unix socket only.
//! Each page's screenshot is saved under `tests/artifacts/console/` and checked not blank.

use std::io::{BufRead, Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use agentd_testkit::browser::{Browser, Tab, pixel_spread};

use crate::support::{Daemon, http, repo};

pub const TOKEN: &str = "console-token-0123456789abcdef0123";
const WAIT: Duration = Duration::from_secs(30);

/// A daemon with a TCP listener (and the bearer token above); its address.
fn console_daemon() -> (Daemon, tempfile::TempDir, String) {
    daemon_with("")
}

/// [`console_daemon`] with `extra` config sections after its `[worker]` one.
pub fn daemon_with(extra: &str) -> (Daemon, tempfile::TempDir, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).expect("token");
    let daemon = Daemon::start_with_api(
        &format!("listen = \"127.0.0.1:{port}\"\ntoken_file = {:?}\n", token_file.display().to_string()),
        &format!("[worker]\nconcurrency = 2\n{extra}"),
    );
    (daemon, dir, format!("127.0.0.1:{port}"))
}

/// A task of `steps` steps, each saying something and waiting `wait_ms` before moving the pointer.
fn slow_task(id: &str, steps: usize, wait_ms: u64) -> String {
    let turns: Vec<_> = (0..steps)
        .map(|i| {
            serde_json::json!({"say": format!("looking around, step {i}"), "actions": [
                {"type": "wait", "duration_ms": wait_ms}, {"type": "click", "x": 100 + 20 * i, "y": 120}]})
        })
        .chain(std::iter::once(serde_json::json!({"complete": {"success": true, "summary": "walked"}})))
        .collect();
    serde_json::json!({
        "id": id,
        "instructions": "walk the pointer slowly across the screen",
        "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "scripted", "script": {"turns": turns}},
        "limits": {"max_steps": steps + 5}
    })
    .to_string()
}

/// A task that asks a human before typing a name.
fn ask_task(id: &str) -> String {
    serde_json::json!({
        "id": id,
        "instructions": "sign in, with permission",
        "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "scripted", "script": {"turns": [
            {"say": "asking first", "ask_human": "may I type alice's name?", "actions": [
                {"type": "click", "x": 640, "y": 370}, {"type": "type", "text": "alice"}]},
            {"complete": {"success": true, "summary": "typed the name"}}
        ]}}
    })
    .to_string()
}

pub fn submit(daemon: &Daemon, task: &str) -> String {
    let (code, body) = http(&daemon.socket, "POST", "/v1/tasks", Some(task.as_bytes()), &[]).expect("submit");
    // A new task (every test submits ids of its own to a fresh daemon): 201 Created; 200 answers only a
    // repeated submission of an existing task (`api::tasks::submit`, openapi.json).
    assert_eq!(code, 201, "{body}");
    serde_json::from_str::<serde_json::Value>(&body).expect("JSON")["id"].as_str().expect("id").to_string()
}

pub fn wait_state(daemon: &Daemon, id: &str, state: &str) {
    let deadline = std::time::Instant::now() + WAIT;
    while daemon.task(id)["state"] != state {
        assert!(std::time::Instant::now() < deadline, "never {state}: {}", daemon.task(id));
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn artifact(name: &str) -> PathBuf {
    repo().join("tests/artifacts/console").join(name)
}

/// Saves the tab's screenshot as a test artifact and checks it is not blank.
pub async fn save(tab: &Tab, name: &str) {
    let png = tab.screenshot(&artifact(name)).await.expect("screenshot");
    let spread = pixel_spread(&png).expect("decode");
    assert!(spread > 10.0, "{name} looks blank (luma spread {spread:.1})");
}

/// One raw HTTP/1.1 request over TCP; the status, the head (lower case) and the body.
fn raw(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String, String) {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    let mut request =
        format!("{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n", body.len());
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).expect("write");
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (status, head.to_ascii_lowercase(), body.to_string())
}

/// Logs in through the login page as a person would.
pub async fn log_in(tab: &Tab, addr: &str) {
    tab.goto(&format!("http://{addr}/")).await.expect("open");
    tab.wait_for("location.pathname === '/console/login'", WAIT).await.expect("sent to the login page");
    tab.type_into("#token", TOKEN).await.expect("type the token");
    let typed: usize = tab.eval("document.querySelector('#token').value.length").await.expect("typed");
    assert_eq!(typed, TOKEN.len(), "the token field holds what was typed");
    tab.press("Enter", false).await.expect("submit");
    if let Err(e) = tab
        .wait_for("location.pathname === '/console/' && window.agentdConsole && window.agentdConsole.ready", WAIT)
        .await
    {
        let text: String = tab.eval("document.body.innerText").await.unwrap_or_default();
        panic!("the console after login: {e}\npage: {text}");
    }
}

/// Moves the console (already open) to another page, as a link in it would: a change of the URL's fragment,
/// which is no navigation the browser waits for.
async fn open_hash(tab: &Tab, hash: &str) {
    let _: bool = tab.eval(&format!("location.hash = {hash:?}; true")).await.expect("change the page");
}

async fn launch() -> Option<Browser> {
    Browser::launch().await.expect("launch Chromium")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_list_a_live_task_page_cancel_and_submit() {
    let Some(browser) = launch().await else { return };
    let (daemon, _dir, addr) = console_daemon();
    let tab = browser.tab(1280, 800, false).await.expect("tab");

    // A wrong token is refused, on the page and over HTTP.
    tab.goto(&format!("http://{addr}/")).await.expect("open");
    tab.wait_for("location.pathname === '/console/login'", WAIT).await.expect("login page");
    save(&tab, "login.png").await;
    tab.type_into("#token", "not-the-token").await.expect("type");
    tab.press("Enter", false).await.expect("submit");
    tab.wait_for("document.querySelector('.problem').textContent.includes('not this daemon')", WAIT)
        .await
        .expect("a wrong token is refused");
    let (code, head, _) =
        raw(&addr, "POST", "/console/login", &[("content-type", "application/x-www-form-urlencoded")], "token=nope");
    assert_eq!(code, 401);
    assert!(!head.contains("set-cookie"), "{head}");

    // The right one: the session cookie is HttpOnly (the page's script cannot read it).
    tab.type_into("#token", TOKEN).await.expect("type");
    tab.press("Enter", false).await.expect("submit");
    tab.wait_for("location.pathname === '/console/' && window.agentdConsole.ready", WAIT).await.expect("console");
    assert!(!tab.eval::<String>("document.cookie").await.expect("cookie").contains("agentd_session"));

    // The list shows a submitted task.
    let id = submit(&daemon, &slow_task("console-live", 40, 250));
    tab.wait_for(&format!("document.querySelector('tr[data-id=\"{id}\"] .state')"), WAIT).await.expect("listed");
    wait_state(&daemon, &id, "running");
    tab.wait_for(&format!("document.querySelector('tr[data-id=\"{id}\"] .state.running')"), WAIT)
        .await
        .expect("live state in the list");
    save(&tab, "list.png").await;

    // Its page receives live steps: a screenshot newer than the first one shown appears.
    tab.click(&format!("a[data-task=\"{id}\"]")).await.expect("open the task");
    tab.wait_for("document.querySelector('#screen') && document.querySelector('#screen').dataset.step", WAIT)
        .await
        .expect("a screenshot");
    let first: u32 = tab.eval("Number(document.querySelector('#screen').dataset.step)").await.expect("step");
    tab.wait_for(&format!("Number(document.querySelector('#screen').dataset.step) >= {}", first + 2), WAIT)
        .await
        .expect("newer screenshots arrive live");
    if let Err(e) = tab.wait_for("document.querySelectorAll('#overlay circle').length > 0", WAIT).await {
        let viewer: String = tab
            .eval("document.querySelector('.viewer').outerHTML.replace(/src=\"[^\"]*\"/g, 'src=…')")
            .await
            .unwrap_or_default();
        panic!("the click drawn: {e}\nthe viewer: {viewer}");
    }
    tab.wait_for("document.querySelector('#stream').textContent.includes('looking around')", WAIT)
        .await
        .expect("model text streamed");
    tab.wait_for("document.querySelectorAll('#timeline button').length >= 3", WAIT).await.expect("a timeline");
    save(&tab, "task.png").await;

    // Cancel works.
    tab.click("#cancel").await.expect("cancel");
    tab.wait_for("document.querySelector('#task-state').dataset.state === 'cancelled'", WAIT)
        .await
        .expect("cancelled in the page");
    assert_eq!(daemon.task(&id)["state"], "cancelled");

    // The submit form queues a task, which the page then shows.
    tab.goto(&format!("http://{addr}/#/submit")).await.expect("submit page");
    tab.wait_for("document.querySelector('#task-json')", WAIT).await.expect("form");
    save(&tab, "submit.png").await;
    tab.click("#submit-task").await.expect("submit");
    tab.wait_for("location.hash.startsWith('#/tasks/')", WAIT).await.expect("sent to the new task");
    tab.wait_for(
        "document.querySelector('#task-state') && document.querySelector('#task-state').dataset.state === 'succeeded'",
        WAIT,
    )
    .await
    .expect("the submitted task succeeds");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_clicked_in_the_page_resumes_the_waiting_task() {
    let Some(browser) = launch().await else { return };
    let (daemon, _dir, addr) = console_daemon();
    let id = submit(&daemon, &ask_task("console-ask"));
    wait_state(&daemon, &id, "waiting_for_human");
    let tab = browser.tab(1280, 800, false).await.expect("tab");
    log_in(&tab, &addr).await;
    open_hash(&tab, &format!("#/tasks/{id}")).await;
    tab.wait_for("document.querySelector('#approve')", WAIT).await.expect("an approve button");
    assert!(
        tab.eval::<String>("document.querySelector('#waiting-reason').textContent")
            .await
            .expect("reason")
            .contains("alice")
    );
    // The proposed actions are drawn on the screenshot: the click and the typed text.
    tab.wait_for("document.querySelectorAll('#overlay circle').length > 0 && document.querySelector('#overlay').textContent.includes('alice')", WAIT)
        .await
        .expect("the proposed actions drawn");
    save(&tab, "approval.png").await;
    tab.click("#approve").await.expect("approve");
    tab.wait_for("document.querySelector('#task-state').dataset.state === 'succeeded'", WAIT)
        .await
        .expect("the task resumes and succeeds");
    let done = daemon.task(&id);
    assert_eq!(done["steps"][0]["approval"]["approved"], true, "{done}");
    assert_eq!(done["computer_state"]["fields"]["username"], "alice");
    browser.close().await;
}

/// Approve with an edit from the page (docs/humans.md): the proposed actions shown as JSON, edited; text that is not
/// JSON
/// is not sent, an action the daemon refuses is shown with the field it names and changes nothing, and the
/// accepted edit is drawn on the screenshot, then runs instead of the proposed actions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_edited_in_the_page_runs_the_edited_actions() {
    let Some(browser) = launch().await else { return };
    let (daemon, _dir, addr) = console_daemon();
    let id = submit(&daemon, &ask_task("console-edit"));
    wait_state(&daemon, &id, "waiting_for_human");
    let tab = browser.tab(1280, 800, false).await.expect("tab");
    log_in(&tab, &addr).await;
    open_hash(&tab, &format!("#/tasks/{id}")).await;
    tab.wait_for("document.querySelector('#edit-toggle')", WAIT).await.expect("an edit control");
    // The proposed actions are drawn on the screen before any edit.
    tab.wait_for("document.querySelector('#overlay').textContent.includes('alice')", WAIT)
        .await
        .expect("the proposed actions drawn");
    tab.click("#edit-toggle").await.expect("open the editor");
    tab.wait_for("!document.querySelector('#edit-form').hidden", WAIT).await.expect("the editor opens");
    let shown: String = tab.eval("document.querySelector('#edit-actions').value").await.expect("the proposed JSON");
    let shown: serde_json::Value = serde_json::from_str(&shown).expect("the editor holds JSON");
    assert_eq!(shown, daemon.task(&id)["waiting"]["proposed"]["actions"], "the proposed actions, as they would run");

    let clear = "document.querySelector('#edit-actions').value = ''; true";
    let problem = "document.querySelector('#edit-problem').textContent";
    // Not JSON: nothing is sent.
    let _: bool = tab.eval(clear).await.expect("clear");
    tab.type_into("#edit-actions", r#"{"type": "type","#).await.expect("type");
    tab.click("#approve-edited").await.expect("send");
    tab.wait_for(&format!("{problem}.includes('not valid JSON')"), WAIT).await.expect("a JSON error shown");
    // An action the daemon refuses: its message and field are shown, the task still waits, unedited.
    let _: bool = tab.eval(clear).await.expect("clear");
    tab.type_into("#edit-actions", r#"[{"type": "explode"}]"#).await.expect("type");
    tab.click("#approve-edited").await.expect("send");
    tab.wait_for(&format!("{problem}.includes('refused')"), WAIT).await.expect("the refusal shown");
    let refusal: String = tab.eval(problem).await.expect("problem");
    assert!(refusal.contains("actions[0]") && refusal.contains("explode"), "{refusal}");
    assert!(
        tab.eval::<bool>("document.querySelector('#edit-actions').getAttribute('aria-invalid') === 'true'")
            .await
            .expect("eval")
    );
    save(&tab, "approval-edit.png").await;
    let still = daemon.task(&id);
    assert_eq!(still["state"], "waiting_for_human", "{still}");
    assert_eq!(still["steps"][0]["approval"].get("edited"), None, "{still}");

    // A good edit: drawn on the screenshot as it is typed, then approved.
    let edited = serde_json::json!([{"type": "click", "x": 640, "y": 370}, {"type": "type", "text": "bob"}]);
    let _: bool = tab.eval(clear).await.expect("clear");
    tab.type_into("#edit-actions", &edited.to_string()).await.expect("type");
    tab.wait_for("document.querySelector('#overlay').textContent.includes('bob')", WAIT)
        .await
        .expect("the edited actions drawn");
    assert_eq!(tab.eval::<String>(problem).await.expect("problem"), "", "the old error goes once the text changes");
    tab.click("#approve-edited").await.expect("approve the edit");
    tab.wait_for("document.querySelector('#task-state').dataset.state === 'succeeded'", WAIT)
        .await
        .expect("the task resumes and succeeds");
    let done = daemon.task(&id);
    let step = &done["steps"][0];
    assert_eq!(step["approval"]["approved"], true, "{done}");
    assert_eq!(step["approval"]["edited"], edited, "{done}");
    assert_eq!(step["actions"], edited, "the record shows what ran: {done}");
    assert_eq!(done["computer_state"]["fields"]["username"], "bob", "the edited action ran: {done}");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_site_posts_and_posts_without_the_csrf_value_are_refused() {
    let Some(browser) = launch().await else { return };
    let (daemon, _dir, addr) = console_daemon();
    let id = submit(&daemon, &slow_task("console-csrf", 200, 200));
    wait_state(&daemon, &id, "running");
    let cancel = format!("/v1/tasks/{id}/cancel");

    // A session over plain HTTP: its cookie alone does not change anything.
    let form = ("content-type", "application/x-www-form-urlencoded");
    let (code, head, _) = raw(&addr, "POST", "/console/login", &[form], &format!("token={TOKEN}"));
    assert_eq!(code, 303, "{head}");
    let cookie_line = head.lines().find(|l| l.starts_with("set-cookie:")).expect("a cookie");
    for attribute in ["httponly", "samesite=strict", "path=/"] {
        assert!(cookie_line.contains(attribute), "{cookie_line}");
    }
    let session = cookie_line.trim_start_matches("set-cookie:").trim().split(';').next().expect("value").to_string();
    let (code, _, body) = raw(&addr, "POST", &cancel, &[("cookie", &session)], "");
    assert_eq!(code, 403, "no CSRF value: {body}");
    assert!(body.contains("\"csrf\""), "{body}");
    let (code, _, body) = raw(&addr, "GET", "/console/session", &[("cookie", &session)], "");
    assert_eq!(code, 200);
    let csrf =
        serde_json::from_str::<serde_json::Value>(&body).expect("JSON")["csrf"].as_str().expect("csrf").to_string();
    let (code, _, body) = raw(
        &addr,
        "POST",
        &cancel,
        &[("cookie", &session), ("x-agentd-csrf", &csrf), ("sec-fetch-site", "cross-site")],
        "",
    );
    assert_eq!(code, 403, "{body}");
    let (code, _, _) = raw(&addr, "GET", "/v1/tasks", &[("cookie", "agentd_session=forged")], "");
    assert_eq!(code, 401, "a forged session");
    assert_eq!(daemon.task(&id)["state"], "running");

    // In the browser: a page of another service on this machine (same site, another origin) posts a form to
    // the console's API; the browser sends the session cookie, and the daemon refuses the request.
    let attacker = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let attacker_addr = attacker.local_addr().expect("addr");
    let page = format!(
        "<!doctype html><form id=f method=post action=\"http://{addr}{cancel}\"></form>\
         <script>document.getElementById('f').submit()</script>"
    );
    std::thread::spawn(move || {
        for stream in attacker.incoming().flatten().take(4) {
            let mut reader = std::io::BufReader::new(&stream);
            let mut line = String::new();
            while reader.read_line(&mut line).map(|n| n > 2).unwrap_or(false) {
                line.clear();
            }
            let _ = (&stream).write_all(
                format!("HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{page}", page.len())
                    .as_bytes(),
            );
        }
    });
    let tab = browser.tab(1280, 800, false).await.expect("tab");
    log_in(&tab, &addr).await;
    tab.goto(&format!("http://{attacker_addr}/")).await.expect("attacker page");
    tab.wait_for("document.body && document.body.textContent.includes('cross_site')", WAIT)
        .await
        .expect("the cross-site POST is refused with 403");
    assert_eq!(daemon.task(&id)["state"], "running", "the cross-site POST changed nothing");

    // Bearer-authenticated requests (the CLI, scripts) work as before, without any CSRF value.
    // The task runs (40 s of steps): the cancel is requested of its worker, 202 Accepted (200 is for a task
    // cancelled at once, one still queued; `api::tasks::cancel`, openapi.json).
    let (code, _, body) = raw(&addr, "POST", &cancel, &[("authorization", &format!("Bearer {TOKEN}"))], "");
    assert_eq!(code, 202, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(answer["cancel"], "requested", "{body}");
    wait_state(&daemon, &id, "cancelled");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyboard_only_navigation_and_a_phone_screen() {
    let Some(browser) = launch().await else { return };
    let (daemon, _dir, addr) = console_daemon();
    let id = submit(&daemon, &slow_task("console-keys", 200, 200));
    wait_state(&daemon, &id, "running");
    let tab = browser.tab(1280, 800, false).await.expect("tab");
    log_in(&tab, &addr).await;
    tab.wait_for(&format!("document.querySelector('a[data-task=\"{id}\"]')"), WAIT).await.expect("listed");

    // Tab reaches the task's link, with a visible focus ring; Enter opens it.
    let link = format!("a \"{id}\"");
    let mut seen = Vec::new();
    for _ in 0..30 {
        tab.press("Tab", false).await.expect("tab");
        let focused = tab.focused().await.expect("focused");
        seen.push(focused.clone());
        if focused == link {
            break;
        }
    }
    assert_eq!(seen.last(), Some(&link), "Tab order: {seen:?}");
    assert!(seen.iter().any(|f| f == "a#nav-submit"), "the submit page is reachable: {seen:?}");
    let outline: String = tab.eval("getComputedStyle(document.activeElement).outlineStyle").await.expect("outline");
    assert_ne!(outline, "none", "focus is visible");
    tab.press("Enter", false).await.expect("enter");
    tab.wait_for("document.querySelector('#screen') && document.querySelector('#screen').dataset.step", WAIT)
        .await
        .expect("the task page");
    tab.wait_for("Number(document.querySelector('#screen').dataset.step) >= 2", WAIT).await.expect("steps");

    // Arrow keys step back through the timeline.
    let latest: u32 = tab.eval("Number(document.querySelector('#screen').dataset.step)").await.expect("step");
    tab.press("Home", false).await.expect("home");
    tab.wait_for("document.querySelector('#screen').dataset.step === '0'", WAIT).await.expect("first step shown");
    tab.press("ArrowRight", false).await.expect("right");
    tab.wait_for("document.querySelector('#screen').dataset.step === '1'", WAIT).await.expect("next step shown");
    assert!(latest >= 2);

    // Tab reaches Cancel; Enter cancels.
    let mut seen = Vec::new();
    for _ in 0..40 {
        tab.press("Tab", false).await.expect("tab");
        let focused = tab.focused().await.expect("focused");
        seen.push(focused.clone());
        if focused == "button#cancel" {
            break;
        }
    }
    assert_eq!(seen.last().map(String::as_str), Some("button#cancel"), "Tab order: {seen:?}");
    tab.press("Enter", false).await.expect("enter");
    tab.wait_for("document.querySelector('#task-state').dataset.state === 'cancelled'", WAIT)
        .await
        .expect("cancelled by keyboard");

    // A phone-sized screen: nothing wider than the screen, and both pages have content.
    let phone = browser.tab(390, 844, true).await.expect("phone tab");
    phone.goto(&format!("http://{addr}/console/")).await.expect("list");
    phone.wait_for("window.agentdConsole.ready && document.querySelector('tr[data-id]')", WAIT).await.expect("list");
    let fits = "document.documentElement.scrollWidth <= window.innerWidth + 1";
    assert!(phone.eval::<bool>(fits).await.expect("width"), "the list fits a phone's width");
    save(&phone, "list-phone.png").await;
    open_hash(&phone, &format!("#/tasks/{id}")).await;
    phone
        .wait_for("document.querySelector('#screen') && document.querySelector('#screen').dataset.step", WAIT)
        .await
        .expect("task page");
    assert!(phone.eval::<bool>(fits).await.expect("width"), "the task page fits a phone's width");
    save(&phone, "task-phone.png").await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agentd_console_serves_a_socket_only_daemon_through_a_one_time_url() {
    let Some(browser) = launch().await else { return };
    let daemon = Daemon::start("");
    let mut child = daemon
        .agentd
        .command()
        .args(["--socket", daemon.socket.to_str().expect("socket"), "console"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("agentd console");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("the URL");
    let _child = Kill(child);
    let url = line.trim().to_string();
    assert!(url.starts_with("http://127.0.0.1:") && url.contains("/console/open?secret="), "{url}");
    let addr = url.trim_start_matches("http://").split('/').next().expect("addr").to_string();

    // Without the link's cookie nothing is served.
    let (code, _, _) = raw(&addr, "GET", "/v1/tasks", &[], "");
    assert_eq!(code, 401);

    let id = submit(&daemon, &slow_task("console-proxy", 200, 200));
    let tab = browser.tab(1280, 800, false).await.expect("tab");
    tab.goto(&url).await.expect("open the link");
    tab.wait_for("location.pathname === '/console/' && window.agentdConsole && window.agentdConsole.ready", WAIT)
        .await
        .expect("the console through the proxy");
    tab.wait_for(&format!("document.querySelector('a[data-task=\"{id}\"]')"), WAIT).await.expect("listed");
    tab.click(&format!("a[data-task=\"{id}\"]")).await.expect("open the task");
    tab.wait_for("document.querySelector('#screen') && document.querySelector('#screen').dataset.step", WAIT)
        .await
        .expect("a screenshot through the proxy");
    let first: u32 = tab.eval("Number(document.querySelector('#screen').dataset.step)").await.expect("step");
    tab.wait_for(&format!("Number(document.querySelector('#screen').dataset.step) >= {}", first + 2), WAIT)
        .await
        .expect("live steps stream through the proxy");
    tab.wait_for(
        "window.agentdConsole.live.length >= 1 && document.querySelector('#live-state').dataset.live === 'true'",
        WAIT,
    )
    .await
    .expect("the live desktop's WebSocket through the proxy");
    save(&tab, "task-console-command.png").await;

    // The link works once.
    let path = url.trim_start_matches(&format!("http://{addr}"));
    let (code, head, _) = raw(&addr, "GET", path, &[], "");
    assert_eq!(code, 403, "{head}");

    // State changes go through with the page's CSRF value, and not without it.
    let (code, _, _) = raw(&addr, "POST", &format!("/v1/tasks/{id}/cancel"), &[("cookie", "agentd_session=guess")], "");
    assert_eq!(code, 401);
    tab.click("#cancel").await.expect("cancel");
    tab.wait_for("document.querySelector('#task-state').dataset.state === 'cancelled'", WAIT)
        .await
        .expect("cancelled through the proxy");
    assert_eq!(daemon.task(&id)["state"], "cancelled");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_tool_is_answered_from_the_page() {
    let Some(browser) = launch().await else { return };
    let (daemon, _dir, addr) = console_daemon();
    let task = serde_json::json!({
        "id": "console-remote",
        "instructions": "look the order up with the client",
        "computer": {"provider": "mock", "scene": "login"},
        "tools": [{"name": "lookup_order", "description": "Looks an order up in the client's system",
                   "parameters": {"type": "object", "properties": {"order": {"type": "integer"}}, "required": ["order"]},
                   "kind": "remote"}],
        "model": {"provider": "scripted", "script": {"turns": [
            {"say": "asking the client", "calls": [{"name": "lookup_order", "arguments": {"order": 42}}]},
            {"complete": {"success": true, "summary": "looked it up"}}
        ]}}
    });
    let id = submit(&daemon, &task.to_string());
    wait_state(&daemon, &id, "awaiting_tool");
    let tab = browser.tab(1280, 800, false).await.expect("tab");
    log_in(&tab, &addr).await;
    open_hash(&tab, &format!("#/tasks/{id}")).await;
    tab.wait_for("document.querySelector('#tool-output-0')", WAIT).await.expect("the answer form");
    assert!(
        tab.eval::<String>("document.querySelector('#tool-results').textContent")
            .await
            .expect("form")
            .contains("lookup_order")
    );
    tab.type_into("#tool-output-0", "order 42 shipped").await.expect("type the output");
    tab.type_into("#tool-details-0", "{\"carrier\": \"post\"}").await.expect("type the details");
    save(&tab, "tool-results.png").await;
    tab.click("#send-tool-results").await.expect("send");
    tab.wait_for("document.querySelector('#task-state').dataset.state === 'succeeded'", WAIT)
        .await
        .expect("the answered task resumes and succeeds");
    let done = daemon.task(&id);
    let result = &done["steps"][0]["call_results"][0];
    assert_eq!(result["message"], "order 42 shipped", "{done}");
    assert_eq!(result["ok"], true);
    assert_eq!(result["details"]["carrier"], "post");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_models_question_is_answered_from_the_page() {
    let Some(browser) = launch().await else { return };
    let (daemon, _dir, addr) = console_daemon();
    let task = serde_json::json!({
        "id": "console-question",
        "instructions": "sign in as the right alice",
        "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "scripted", "script": {"turns": [
            {"say": "asking", "calls": [{"name": "ask_human", "arguments": {"question": "Which of the two Alice accounts?"}}]},
            {"complete": {"success": true, "summary": "asked"}}
        ]}}
    });
    let id = submit(&daemon, &task.to_string());
    wait_state(&daemon, &id, "waiting_for_human");
    let tab = browser.tab(1280, 800, false).await.expect("tab");
    log_in(&tab, &addr).await;
    open_hash(&tab, &format!("#/tasks/{id}")).await;
    tab.wait_for("document.querySelector('#answer-text')", WAIT).await.expect("the answer form");
    assert!(
        tab.eval::<String>("document.querySelector('#waiting-question').textContent")
            .await
            .expect("question")
            .contains("Which of the two Alice accounts?")
    );
    assert!(!tab.eval::<bool>("!!document.querySelector('#approve')").await.expect("eval"), "no approve button");
    tab.type_into("#answer-text", "the one in accounting").await.expect("type the answer");
    save(&tab, "question.png").await;
    tab.click("#send-answer").await.expect("send");
    tab.wait_for("document.querySelector('#task-state').dataset.state === 'succeeded'", WAIT)
        .await
        .expect("the answered task resumes and succeeds");
    let done = daemon.task(&id);
    assert_eq!(done["steps"][0]["call_results"][0]["message"], "the one in accounting", "{done}");
    browser.close().await;
}

/// Take-over from the page (docs/humans.md): "Take the desktop over" parks a running task after its step; the page
/// then offers the hand-back with a note, which resumes the task with the note in its next step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_takes_the_desktop_over_and_hands_it_back_from_the_page() {
    let Some(browser) = launch().await else { return };
    let (daemon, _dir, addr) = console_daemon();
    // Logged in before the task starts, and 20 s of waits (the stuck-loop guard off: waits change nothing):
    // the take-over lands while it runs even on a slow, loaded machine (it parks at the next step; the rest
    // runs after the hand-back).
    let tab = browser.tab(1280, 800, false).await.expect("tab");
    log_in(&tab, &addr).await;
    let mut turns: Vec<serde_json::Value> =
        (0..40).map(|_| serde_json::json!({"actions": [{"type": "wait", "duration_ms": 500}]})).collect();
    turns.push(serde_json::json!({"complete": {"success": true, "summary": "went on"}}));
    let task = serde_json::json!({
        "id": "console-takeover",
        "instructions": "wait a little, many times",
        "guard": {"no_change_steps": 0, "repeat_actions": 0, "idle_turns": 0},
        "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "scripted", "script": {"turns": turns}}
    });
    let id = submit(&daemon, &task.to_string());
    wait_state(&daemon, &id, "running");
    open_hash(&tab, &format!("#/tasks/{id}")).await;
    tab.wait_for("document.querySelector('#pause')", WAIT).await.expect("the take-over button");
    tab.click("#pause").await.expect("pause");
    tab.wait_for("document.querySelector('#resume-note')", WAIT).await.expect("the hand-back form once parked");
    let parked = daemon.task(&id);
    assert_eq!(parked["state"], "waiting_for_human", "{parked}");
    assert_eq!(parked["waiting"]["kind"], "takeover", "{parked}");
    assert!(!tab.eval::<bool>("!!document.querySelector('#approve')").await.expect("eval"), "no approve button");
    tab.type_into("#resume-note", "closed the cookie banner").await.expect("type the note");
    save(&tab, "takeover.png").await;
    tab.click("#resume").await.expect("hand back");
    if let Err(e) = tab.wait_for("document.querySelector('#task-state').dataset.state === 'succeeded'", WAIT * 3).await
    {
        panic!("the handed-back task resumes and succeeds: {e}\n{}", daemon.task(&id));
    }
    let done = daemon.task(&id);
    let notes: Vec<&serde_json::Value> =
        done["steps"].as_array().into_iter().flatten().filter_map(|s| s.get("handed_back")).collect();
    assert_eq!(notes.len(), 1, "one step after the hand-back carries the note: {done}");
    assert_eq!(notes[0]["note"], "closed the cookie banner", "{done}");
    browser.close().await;
}

/// A task whose stored record cannot be read (changed behind the daemon's back) is a row of the list saying so
/// beside the others, and its page says why; the list still works around it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_cannot_be_read_is_a_row_saying_so_and_the_list_goes_on() {
    let Some(browser) = launch().await else { return };
    let (daemon, _dir, addr) = console_daemon();
    // No worker takes these (their label): they stay queued as submitted.
    for id in ["console-good", "console-broken"] {
        let task = serde_json::json!({"id": id, "instructions": format!("task {id}"), "labels": {"gpu": "yes"}});
        submit(&daemon, &task.to_string());
    }
    daemon.queue_sql("UPDATE tasks SET spec = 'not json' WHERE id = 'console-broken'", "");
    let tab = browser.tab(1280, 800, false).await.expect("tab");
    log_in(&tab, &addr).await;
    let broken = "document.querySelector('tr.unreadable[data-id=\"console-broken\"]')";
    if let Err(e) = tab.wait_for(&format!("{broken} && {broken}.textContent.includes('cannot be read')"), WAIT).await {
        let text: String = tab.eval("document.body.innerText").await.unwrap_or_default();
        panic!("no row for the broken task: {e}\npage: {text}");
    }
    let good = "document.querySelector('tr[data-id=\"console-good\"]')";
    tab.wait_for(&format!("{good} && {good}.textContent.includes('task console-good')"), WAIT)
        .await
        .expect("the other task is listed as ever");
    let said: String = tab.eval(&format!("{broken}.textContent")).await.expect("row text");
    assert!(said.contains("queued") && said.contains("spec"), "{said}");
    save(&tab, "list-unreadable.png").await;
    tab.click("a[data-task=\"console-broken\"]").await.expect("open the broken task");
    tab.wait_for("document.querySelector('.problem') && document.querySelector('.problem').textContent.includes('cannot be read')", WAIT)
        .await
        .expect("its page says why");
    browser.close().await;
}

/// The `retry-after` header of a response head (lower case), in seconds.
fn retry_after(head: &str) -> Option<u64> {
    head.lines().find_map(|l| l.strip_prefix("retry-after:")).and_then(|v| v.trim().parse().ok())
}

/// The login page's problem line, as the page shows it.
fn problem(body: &str) -> &str {
    let start = body.find("<p class=\"problem\" role=\"alert\">").map(|i| i + 32).unwrap_or(0);
    body[start..].split("</p>").next().unwrap_or_default()
}

#[test]
fn wrong_tokens_slow_the_login_down_and_the_right_one_works_after_the_wait() {
    let (_daemon, _dir, addr) = console_daemon();
    let form = ("content-type", "application/x-www-form-urlencoded");
    let login = |token: &str| raw(&addr, "POST", "/console/login", &[form], &format!("token={token}"));
    // A few wrong tokens are only wrong: 401 and the login page.
    for n in 1..=5 {
        let (code, head, body) = login("wrong");
        assert_eq!(code, 401, "wrong token {n}: {head}\n{body}");
        assert!(problem(&body).contains("not this daemon"), "wrong token {n}: {body}");
    }
    // Then each wrong token makes the client wait, longer each time: 429 with Retry-After, said on the page.
    let (code, head, body) = login("wrong");
    assert_eq!(code, 429, "{head}\n{body}");
    let wait = retry_after(&head).unwrap_or_else(|| panic!("no Retry-After: {head}"));
    assert!((1..=300).contains(&wait), "{head}");
    assert!(problem(&body).contains("Too many wrong tokens"), "{body}");
    assert!(problem(&body).contains(&format!("{wait} s")), "the page says how long to wait: {body}");
    // While it waits, even the right token is refused (without being looked at), and no session starts.
    let (code, head, body) = login(TOKEN);
    assert_eq!(code, 429, "{head}\n{body}");
    assert!(!head.contains("set-cookie"), "{head}");
    // After the wait the right token logs in.
    std::thread::sleep(Duration::from_secs(retry_after(&head).unwrap_or(wait)));
    let (code, head, body) = login(TOKEN);
    assert_eq!(code, 303, "the right token after the wait: {head}\n{body}");
    assert!(head.contains("set-cookie: agentd_session="), "{head}");
    // A right token clears the count: the next wrong one is only wrong again.
    let (code, head, _) = login("wrong");
    assert_eq!(code, 401, "{head}");
}

#[test]
fn a_login_past_the_session_limit_is_refused_and_ends_nobodys_session() {
    let (_daemon, _dir, addr) = console_daemon();
    let form = ("content-type", "application/x-www-form-urlencoded");
    let login = || raw(&addr, "POST", "/console/login", &[form], &format!("token={TOKEN}"));
    let cookie = |head: &str| {
        let line = head.lines().find(|l| l.starts_with("set-cookie:")).unwrap_or_else(|| panic!("no cookie: {head}"));
        line.trim_start_matches("set-cookie:").trim().split(';').next().unwrap_or_default().to_string()
    };
    let mut sessions = Vec::new();
    for n in 0..64 {
        let (code, head, body) = login();
        assert_eq!(code, 303, "login {n}: {head}\n{body}");
        sessions.push(cookie(&head));
    }
    // The 65th: every session was used a moment ago, so none is ended for it; the page says why and what to do.
    let (code, head, body) = login();
    assert_eq!(code, 503, "{head}\n{body}");
    assert!(!head.contains("set-cookie"), "{head}");
    assert!(retry_after(&head).is_some(), "{head}");
    let said = problem(&body);
    assert!(said.contains("64 sessions") && said.contains("Log out"), "{body}");
    for (n, session) in sessions.iter().enumerate() {
        let (code, _, body) = raw(&addr, "GET", "/console/session", &[("cookie", session)], "");
        assert_eq!(code, 200, "session {n} ended: {body}");
    }
    // Logging out of one makes room for a new login.
    let (_, _, body) = raw(&addr, "GET", "/console/session", &[("cookie", &sessions[0])], "");
    let csrf =
        serde_json::from_str::<serde_json::Value>(&body).expect("JSON")["csrf"].as_str().expect("csrf").to_string();
    let (code, head, _) = raw(
        &addr,
        "POST",
        "/console/logout",
        &[("cookie", &sessions[0]), ("x-agentd-csrf", &csrf), ("sec-fetch-site", "same-origin")],
        "",
    );
    assert_eq!(code, 303, "{head}");
    let (code, head, body) = login();
    assert_eq!(code, 303, "a login after a logout: {head}\n{body}");
}

/// A browser task's steps name the page each screenshot shows, as text (title and URL) in the step's details.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_tasks_step_names_its_page() {
    let Some(chromium) = crate::browser::chromium() else { return };
    let Some(browser) = launch().await else { return };
    let _load = crate::support::timing_sensitive();
    let site = crate::browser::FormServer::start();
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).expect("token");
    let executable = chromium.display().to_string();
    let daemon = Daemon::start_with_api(
        &format!("listen = \"127.0.0.1:{port}\"\ntoken_file = {:?}\n", token_file.display().to_string()),
        &format!(
            "[outbound]\nallow = [\"127.0.0.1\"]\n[defaults]\ncomputer = {{ provider = \"browser\", executable = {executable:?} }}\n"
        ),
    );
    let addr = format!("127.0.0.1:{port}");
    let form = format!("http://127.0.0.1:{}/", site.port);
    let task = serde_json::json!({
        "id": "console-browser",
        "instructions": "look at the form",
        "computer": {"provider": "browser", "executable": executable, "start_url": form, "width": 1024, "height": 700},
        "model": {"provider": "scripted", "script": {"turns": [
            {"say": "the name field", "actions": [{"type": "click", "x": 200, "y": 38}]},
            {"complete": {"success": true, "summary": "looked"}}
        ]}}
    });
    let id = submit(&daemon, &task.to_string());
    wait_state(&daemon, &id, "succeeded");

    let tab = browser.tab(1280, 800, false).await.expect("tab");
    log_in(&tab, &addr).await;
    open_hash(&tab, &format!("#/tasks/{id}")).await;
    tab.wait_for("document.querySelector('#timeline button[data-index=\"0\"]')", WAIT).await.expect("a timeline");
    tab.click("#timeline button[data-index=\"0\"]").await.expect("step 0");
    let shown = tab
        .wait_for(
            &format!("(document.querySelector('#step-details .page') || {{}}).textContent === 'Page: Sign up {form}'"),
            WAIT,
        )
        .await;
    if let Err(e) = shown {
        let text: String = tab.eval("document.querySelector('#step-details').innerText").await.unwrap_or_default();
        panic!("the step's page: {e}\ndetails: {text}");
    }
    // As text: no link to the task's page.
    let links: usize = tab.eval("document.querySelectorAll('#step-details .page a').length").await.expect("links");
    assert_eq!(links, 0);
    save(&tab, "browser-task.png").await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evaluation_is_shown_with_its_result_and_every_run_linked() {
    let Some(browser) = launch().await else { return };
    let (daemon, dir, addr) = console_daemon();
    // Two tasks, once each: `login` passes, `wrong-screen` completes where its verifier does not accept it.
    let script = repo().join("config/scripts/mock-login.json");
    let suite = serde_json::json!({
        "name": "console suite",
        "tasks": [
            {"path": repo().join("config/suites/mock/login.json")},
            {"id": "wrong-screen", "instructions": "Log in and stay on the welcome screen",
             "computer": {"provider": "mock", "scene": "login"},
             "model": {"provider": "scripted", "script": script},
             "limits": {"max_steps": 10, "verify_retries": 0},
             "verify": [{"kind": "mock_state", "expect": {"screen": "welcome"}}]},
        ],
    });
    let suite_path = dir.path().join("suite.json");
    std::fs::write(&suite_path, suite.to_string()).expect("write suite");
    let run = daemon.cli(&["eval", suite_path.to_str().expect("path"), "--json"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, daemon.log());
    let eval = run.json()["eval"].as_str().expect("eval id").to_string();

    let tab = browser.tab(1280, 800, false).await.expect("tab");
    log_in(&tab, &addr).await;
    open_hash(&tab, "#/evals").await;
    let row = format!("document.querySelector('tr[data-id=\"{eval}\"]')");
    tab.wait_for(&format!("{row} && {row}.textContent.includes('console suite')"), WAIT)
        .await
        .expect("the evaluation is listed with its suite");
    save(&tab, "evals.png").await;
    tab.click(&format!("tr[data-id=\"{eval}\"] a")).await.expect("open the evaluation");
    tab.wait_for("document.querySelector('.eval-model')", WAIT).await.expect("its result");
    let text: String = tab.eval("document.querySelector('main').innerText").await.expect("text");
    for expected in ["Evaluation of console suite", "50.0% of 2 runs (1 passed)", "9.4% – 90.5%", "2 of 2 runs ended"]
    {
        assert!(text.contains(expected), "{expected:?} not in:\n{text}");
    }
    let runs: Vec<(String, String)> = tab
        .eval("[...document.querySelectorAll('.eval-run')].map(r => [r.className, r.querySelector('a').getAttribute('href')])")
        .await
        .expect("runs");
    assert_eq!(
        runs,
        [
            ("eval-run passed".to_string(), format!("#/tasks/{eval}.t1.m1.r1")),
            ("eval-run failed".to_string(), format!("#/tasks/{eval}.t2.m1.r1")),
        ]
    );
    save(&tab, "eval.png").await;
    // A run's link opens its task page.
    tab.click(".eval-run.failed a").await.expect("open the failed run");
    tab.wait_for(
        "document.querySelector('#task-state') && document.querySelector('#task-state').dataset.state === 'failed'",
        WAIT,
    )
    .await
    .expect("the run's own page");
    browser.close().await;
}
