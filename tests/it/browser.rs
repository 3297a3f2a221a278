//! The browser computer end to end: `agentd run` with the scripted model drives Debian's Chromium
//! (`scripts/setup/40-browser.sh` installs it and exports `AGENTD_TEST_CHROMIUM`) on a form this test serves
//! itself, and the server's own record of the submitted form proves the clicks and the typing landed.
//! Without Chromium each test says why it skips (a failure under CI).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Agentd, Run};

/// The Chromium to drive, or `None` after saying why the test skips.
pub(crate) fn chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("AGENTD_TEST_CHROMIUM").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let default = PathBuf::from("/usr/bin/chromium");
    if default.exists() {
        return Some(default);
    }
    agentd_testenv::skip("no Chromium (set AGENTD_TEST_CHROMIUM; scripts/setup/40-browser.sh installs it)");
    None
}

const FORM: &str = r#"<!doctype html>
<html><head><meta charset="utf-8"><title>Sign up</title>
<style>
  body { margin: 0; font: 18px sans-serif; }
  input[type=text] { position: absolute; left: 20px; width: 400px; height: 36px; font-size: 18px; }
  #name { top: 20px; } #email { top: 80px; }
  #agree { position: absolute; left: 20px; top: 140px; width: 24px; height: 24px; margin: 0; }
  #send { position: absolute; left: 20px; top: 200px; width: 200px; height: 40px; }
</style></head>
<body>
<form method="post" action="/submit">
  <input type="text" id="name" name="name">
  <input type="text" id="email" name="email">
  <input type="checkbox" id="agree" name="agree">
  <button id="send" type="submit">Send</button>
</form>
</body></html>"#;

const THANKS: &str = "<!doctype html><title>Thanks</title><body><h1>Thank you</h1></body>";

/// A web server on a loopback port: `GET /` is the form, `POST /submit` is recorded (its body) and thanked.
pub(crate) struct FormServer {
    pub(crate) port: u16,
    submitted: Arc<Mutex<Vec<String>>>,
}

impl FormServer {
    pub(crate) fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("address").port();
        let submitted = Arc::new(Mutex::new(Vec::new()));
        let record = submitted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let record = record.clone();
                std::thread::spawn(move || {
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                    let mut data = Vec::new();
                    let mut buf = [0u8; 4096];
                    let (head, body) = loop {
                        match stream.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => data.extend_from_slice(&buf[..n]),
                        }
                        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&data[..end]).to_string();
                            let length = head
                                .lines()
                                .find_map(|l| {
                                    l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string())
                                })
                                .and_then(|v| v.parse::<usize>().ok())
                                .unwrap_or(0);
                            while data.len() < end + 4 + length {
                                match stream.read(&mut buf) {
                                    Ok(0) | Err(_) => return,
                                    Ok(n) => data.extend_from_slice(&buf[..n]),
                                }
                            }
                            break (head, String::from_utf8_lossy(&data[end + 4..end + 4 + length]).to_string());
                        }
                    };
                    let page = if head.starts_with("POST /submit ") {
                        record.lock().expect("record").push(body);
                        THANKS
                    } else if head.starts_with("GET / ") {
                        FORM
                    } else {
                        ""
                    };
                    let status = if page.is_empty() { "404 Not Found" } else { "200 OK" };
                    let reply = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\n\
                         connection: close\r\n\r\n{page}",
                        page.len()
                    );
                    let _ = stream.write_all(reply.as_bytes());
                });
            }
        });
        Self { port, submitted }
    }

    /// The bodies of the forms submitted, once one is there (at most `timeout`).
    pub(crate) fn wait_submitted(&self, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let seen = self.submitted.lock().expect("record").clone();
            if !seen.is_empty() || Instant::now() > deadline {
                return seen;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn write_task(dir: &Path, computer: Value, script: Value) -> PathBuf {
    let task = json!({
        "instructions": "fill in the sign-up form and send it",
        "computer": computer,
        "model": {"provider": "scripted", "script": script},
        "limits": {"max_steps": 20, "timeout_secs": 120}
    });
    let path = dir.join("task.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&task).expect("task json")).expect("write task");
    path
}

#[test]
fn a_form_is_filled_and_submitted_in_the_browser() {
    let Some(chromium) = chromium() else { return };
    let _load = crate::support::timing_sensitive();
    let server = FormServer::start();
    let agentd = Agentd::new();
    let script = json!({"turns": [
        {"say": "the name", "actions": [{"type": "click", "x": 200, "y": 38}, {"type": "type", "text": "Ada Lovelace"}]},
        {"say": "the e-mail", "actions": [{"type": "click", "x": 200, "y": 98}, {"type": "type", "text": "ada@example.org"}]},
        {"say": "agree", "actions": [{"type": "click", "x": 32, "y": 152}]},
        {"say": "send", "actions": [{"type": "click", "x": 120, "y": 220}]},
        {"complete": {"success": true, "summary": "sent"}}
    ]});
    let computer = json!({
        "provider": "browser",
        "executable": chromium,
        "start_url": format!("http://127.0.0.1:{}/", server.port),
        "width": 1024,
        "height": 700
    });
    let task = write_task(agentd.dir.path(), computer, script);
    let started = Instant::now();
    let run = Run::from(
        agentd
            .command()
            .args(["run", "--json"])
            .arg(&task)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("agentd"),
    );
    assert_eq!(run.code, 0, "agentd run failed:\nstdout: {}\nstderr: {}", run.stdout, run.stderr);
    let record = run.json();
    assert_eq!(record["state"], "succeeded", "{record:#}");
    assert_eq!(record["steps"][0]["screenshot"]["width"], 1024, "{record:#}");
    assert_eq!(record["steps"][0]["screenshot"]["height"], 700, "{record:#}");
    assert_eq!(record["steps"][0]["page"]["title"], "Sign up", "each step records the page shown: {record:#}");
    let submitted = server.wait_submitted(Duration::from_secs(10));
    assert_eq!(
        submitted,
        vec!["name=Ada+Lovelace&email=ada%40example.org&agree=on".to_string()],
        "the server received the form as filled in (run took {:?}):\n{}",
        started.elapsed(),
        run.stderr
    );
}

#[test]
fn a_browser_that_cannot_be_found_is_bad_input_naming_the_field() {
    let agentd = Agentd::new();
    let script = json!({"turns": [{"complete": {"success": true, "summary": "never"}}]});
    let computer = json!({"provider": "browser", "executable": "/nonexistent/chromium"});
    let task = write_task(agentd.dir.path(), computer, script);
    let run = agentd.run(&["run", task.to_str().expect("path")]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("/nonexistent/chromium") && run.stderr.contains("computer.executable"),
        "{}",
        run.stderr
    );
}

/// A site on `ip` that answers each request with the reply its path maps to (raw HTTP responses), 404
/// otherwise, and records every path asked for.
struct Site {
    port: u16,
    asked: Arc<Mutex<Vec<String>>>,
}

impl Site {
    fn start(ip: &str, routes: Vec<(String, String)>) -> Self {
        let listener = TcpListener::bind((ip, 0)).expect("bind");
        let port = listener.local_addr().expect("address").port();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let record = asked.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                let mut buf = [0u8; 4096];
                let n = stream.read(&mut buf).unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).to_string();
                let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
                record.lock().expect("record").push(path.clone());
                let reply = routes.iter().find(|(p, _)| *p == path).map(|(_, r)| r.clone()).unwrap_or_else(|| {
                    "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_string()
                });
                let _ = stream.write_all(reply.as_bytes());
            }
        });
        Self { port, asked }
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().expect("record").clone()
    }
}

fn html(body: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// A task submitted over the API opens a page its daemon allows (`[outbound] allow = ["127.0.0.1"]`); the page
/// redirects to another loopback address, which nothing allows: the browser never reaches it, and the task
/// goes on. The browser binary is the one `[defaults]` names: an API task may name no other.
#[test]
fn a_redirect_to_the_inside_is_refused_for_an_api_task() {
    let Some(chromium) = chromium() else { return };
    let _load = crate::support::timing_sensitive();
    let inside = Site::start("127.0.0.2", vec![("/".into(), html("<title>inside</title>secret"))]);
    let jump = format!(
        "HTTP/1.1 302 Found\r\nlocation: http://127.0.0.2:{}/\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        inside.port
    );
    let home = html(
        r#"<!doctype html><title>Outside</title><body style="margin:0">
        <a href="/jump" style="position:absolute;left:0;top:0;width:300px;height:60px;display:block">jump</a></body>"#,
    );
    let outside = Site::start("127.0.0.1", vec![("/".into(), home), ("/jump".into(), jump)]);
    let executable = chromium.display().to_string();
    let daemon = crate::support::Daemon::start(&format!(
        "[outbound]\nallow = [\"127.0.0.1\"]\n[defaults]\ncomputer = {{ provider = \"browser\", executable = {executable:?} }}\n"
    ));
    let script = json!({"turns": [
        {"say": "jump", "actions": [{"type": "click", "x": 100, "y": 30}]},
        {"complete": {"success": true, "summary": "done"}}
    ]});
    let computer = json!({
        "provider": "browser",
        "executable": executable,
        "start_url": format!("http://127.0.0.1:{}/", outside.port),
    });
    let task = write_task(daemon.agentd.dir.path(), computer, script);
    let submit = daemon.cli(&["submit", task.to_str().expect("path"), "--wait"]);
    assert_eq!(submit.code, 0, "{}\n{}", submit.stderr, daemon.log());
    let id = submit.stdout.trim().to_string();
    let record = daemon.cli(&["status", &id, "--json"]).json();
    assert_eq!(record["steps"][0]["page"]["title"], "Outside", "each step records the page: {record:#}");
    // The click reached the outside's redirect; nothing reached the inside.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !outside.asked().iter().any(|p| p == "/jump") {
        assert!(Instant::now() < deadline, "the link was never followed: {:?}", outside.asked());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(inside.asked().is_empty(), "the inside was reached: {:?}", inside.asked());

    // A browser binary other than the configured one is refused at submission.
    let other = write_task(
        daemon.agentd.dir.path(),
        json!({"provider": "browser", "executable": "/bin/sh"}),
        json!({"turns": [{"complete": {"success": true, "summary": "never"}}]}),
    );
    let refused = daemon.cli(&["submit", other.to_str().expect("path")]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(refused.stderr.contains("computer.executable"), "{}", refused.stderr);
}
