//! Desktop pools (docs/providers.md) through the real daemon: three Xvfb desktops of its `[[desktops]]`, each reset
//! before
//! every task by a command that paints the screen in a colour of that task's own, so the first screenshot of
//! each task shows whether it started on a desktop reset for it; a desktop whose reset fails leaves the pool
//! (shown in `/healthz` and the metrics) and its task runs on another, the failure kept in its record.

use std::collections::BTreeMap;
use std::time::Duration;

use agentd::screen::image::decode_png;
use agentd_local::testing::XServer;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::support::{Backend, Daemon, http};

/// The colour the reset paints for task `pool-NN`: the two digits read as hex, in red and blue.
fn colour_of(task: &str) -> [u8; 3] {
    let n = u8::from_str_radix(task.trim_start_matches("pool-"), 16).unwrap_or_else(|e| panic!("{task}: {e}"));
    [n, 0x40, n]
}

/// A reset that paints the root window in the task's colour (and says which task it reset for).
fn painting_reset(display: &str) -> String {
    format!(
        "n=${{AGENTD_TASK_ID#pool-}}; echo \"reset {display} for $AGENTD_TASK_ID\"; \
         xsetroot -display {display} -solid \"#${{n}}40${{n}}\""
    )
}

fn pool_config(displays: &[&str], failing: Option<usize>) -> String {
    let mut config = String::from("[worker]\nconcurrency = 3\n");
    for (i, display) in displays.iter().enumerate() {
        let name = format!("d{}", i + 1);
        let labels = if i % 2 == 0 { "[\"odd\"]" } else { "[]" };
        let reset = if failing == Some(i) {
            "echo 'cannot reset: the display is gone' >&2; exit 3".to_string()
        } else {
            painting_reset(display)
        };
        config.push_str(&format!(
            "\n[[desktops]]\nname = {name:?}\ncomputer = {{ provider = \"local\", display = {display:?} }}\n\
             labels = {labels}\nreset = {reset:?}\ntimeout_secs = 30\n"
        ));
    }
    config
}

/// A task that takes a screenshot and completes; `computer` as given (none: any desktop of the pool).
fn submit(daemon: &Daemon, id: &str, computer: Option<Value>) {
    let mut task = json!({
        "id": id,
        "instructions": "look at the screen",
        "model": {"provider": "scripted", "script": {"turns": [
            {"actions": [{"type": "wait", "duration_ms": 300}]},
            {"complete": {"success": true, "summary": "looked"}}
        ]}},
        "limits": {"max_steps": 5, "timeout_secs": 60}
    });
    if let Some(computer) = computer {
        task["computer"] = computer;
    }
    let path = daemon.agentd.dir.path().join(format!("{id}.json"));
    std::fs::write(&path, task.to_string()).expect("write task");
    let run = daemon.cli(&["submit", path.to_str().expect("path")]);
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, daemon.log());
}

fn first_screen_colour(daemon: &Daemon, doc: &Value) -> [u8; 3] {
    let url = doc["steps"][0]["screenshot"]["url"].as_str().unwrap_or_else(|| panic!("no screenshot: {doc:#}"));
    let path = url.strip_prefix("file://").unwrap_or_else(|| panic!("not a file URL: {url}"));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let bytes = loop {
        match std::fs::read(path) {
            Ok(bytes) => break bytes,
            Err(e) if std::time::Instant::now() > deadline => panic!("{path}: {e}\n{}", daemon.log()),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    let frame = decode_png(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
    frame.pixel(agentd_computer::Point::new(5, 5)).unwrap_or_else(|| panic!("{path}: no pixel at 5,5"))
}

fn time_of(doc: &Value, field: &str) -> OffsetDateTime {
    let text = doc[field].as_str().unwrap_or_else(|| panic!("no {field}: {doc:#}"));
    OffsetDateTime::parse(text, &Rfc3339).unwrap_or_else(|e| panic!("{field} {text}: {e}"))
}

fn desktops(daemon: &Daemon) -> Vec<Value> {
    let (status, body) = http(&daemon.socket, "GET", "/healthz", None, &[]).expect("healthz");
    let health: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{status} {body}: {e}"));
    health["desktops"].as_array().cloned().unwrap_or_default()
}

/// The task's `desktop_leased` events.
fn leased(daemon: &Daemon, id: &str) -> Vec<Value> {
    let events = daemon.cli(&["events", id, "--json"]);
    events
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "desktop_leased")
        .collect()
}

fn xservers() -> Option<Vec<XServer>> {
    for (program, package) in [("xsetroot", "x11-xserver-utils"), ("Xvfb", "xvfb")] {
        if std::process::Command::new(program).arg("-help").output().is_err() {
            agentd_testenv::skip(format!("{program} ({package}) is not installed"));
            return None;
        }
    }
    match (0..3).map(|_| XServer::xvfb(640, 480)).collect::<Result<Vec<_>, _>>() {
        Ok(servers) => Some(servers),
        Err(e) => panic!("Xvfb is installed but did not start: {e}"),
    }
}

/// Twelve tasks on a pool of three Xvfb desktops, three at a time: every one succeeds, starts on a desktop
/// reset for it (its first screenshot has its own colour), never shares a desktop with another task at the
/// same time; one names its desktop and one a label, and each gets what it asked for.
fn twelve_tasks_on_three_desktops(backend: Backend) {
    let Some(servers) = xservers() else { return };
    let displays: Vec<&str> = servers.iter().map(|x| x.display.as_str()).collect();
    let daemon = Daemon::start_on(backend, "", &pool_config(&displays, None));

    // A desktop nobody configured is refused at submission, naming the field.
    let bad = daemon.agentd.dir.path().join("bad.json");
    std::fs::write(&bad, json!({"instructions": "x", "computer": {"desktop": "nope"}}).to_string()).expect("write");
    let refused = daemon.cli(&["submit", bad.to_str().expect("path")]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(refused.stderr.contains("computer.desktop") && refused.stderr.contains("d1, d2, d3"), "{}", refused.stderr);

    let ids: Vec<String> = (1..=12).map(|i| format!("pool-{i:02}")).collect();
    for id in &ids {
        let computer = match id.as_str() {
            "pool-11" => Some(json!({"desktop": "d2"})),
            "pool-12" => Some(json!({"labels": ["odd"]})),
            _ => None,
        };
        submit(&daemon, id, computer);
    }
    let mut by_desktop: BTreeMap<String, Vec<(OffsetDateTime, OffsetDateTime, String)>> = BTreeMap::new();
    for id in &ids {
        let doc = daemon.wait_terminal(id, Duration::from_secs(120));
        assert_eq!(doc["state"], "succeeded", "{doc:#}\n{}", daemon.log());
        let desktop = doc["desktop"].as_str().unwrap_or_else(|| panic!("no desktop in {doc:#}")).to_string();
        assert!(doc.get("desktop_failure").is_none(), "{doc:#}");
        assert_eq!(first_screen_colour(&daemon, &doc), colour_of(id), "{id} on {desktop} did not start reset for it");
        let leased = leased(&daemon, id);
        assert_eq!(leased.len(), 1, "{leased:?}");
        assert_eq!(leased[0]["desktop"], desktop.as_str());
        assert_eq!(leased[0]["reset"], true);
        by_desktop.entry(desktop).or_default().push((
            time_of(&doc, "started_at"),
            time_of(&doc, "finished_at"),
            id.clone(),
        ));
    }
    assert!(by_desktop.get("d2").is_some_and(|runs| runs.iter().any(|(_, _, id)| id == "pool-11")), "{by_desktop:?}");
    let odd =
        |id: &str| ["d1", "d3"].iter().any(|d| by_desktop.get(*d).is_some_and(|r| r.iter().any(|(_, _, i)| i == id)));
    assert!(odd("pool-12"), "pool-12 asked for a desktop labelled odd: {by_desktop:?}");
    assert!(by_desktop.len() >= 2, "the pool's desktops share the work: {by_desktop:?}");
    for (desktop, runs) in &mut by_desktop {
        runs.sort();
        for pair in runs.windows(2) {
            assert!(pair[0].1 <= pair[1].0, "two tasks at once on {desktop}: {pair:?}");
        }
    }
    let status = desktops(&daemon);
    assert_eq!(status.len(), 3, "{status:?}");
    let resets: u64 = status.iter().map(|d| d["resets"].as_u64().unwrap_or(0)).sum();
    assert_eq!(resets, 12, "one reset per task: {status:?}");
    assert!(status.iter().all(|d| d["state"] == "free"), "{status:?}");
}

/// A desktop whose reset fails leaves the pool — `/healthz` and the metrics say so, with the command's
/// output — and the task it was given runs on another desktop, the failure kept in its record.
fn a_failing_reset_takes_the_desktop_out(backend: Backend) {
    let Some(servers) = xservers() else { return };
    let displays: Vec<&str> = servers.iter().map(|x| x.display.as_str()).collect();
    let daemon = Daemon::start_on(backend, "", &pool_config(&displays, Some(1)));
    let ids: Vec<String> = (1..=6).map(|i| format!("pool-{i:02}")).collect();
    for id in &ids {
        submit(&daemon, id, None);
    }
    let mut failures = Vec::new();
    for id in &ids {
        let doc = daemon.wait_terminal(id, Duration::from_secs(120));
        assert_eq!(doc["state"], "succeeded", "{doc:#}\n{}", daemon.log());
        assert_ne!(doc["desktop"], "d2", "{doc:#}");
        assert_eq!(first_screen_colour(&daemon, &doc), colour_of(id));
        if let Some(failure) = doc.get("desktop_failure") {
            failures.push(failure.clone());
        }
    }
    assert_eq!(failures.len(), 1, "exactly one task was given d2 before it failed: {failures:?}");
    let failure = &failures[0];
    assert_eq!(failure["desktop"], "d2");
    assert_eq!(failure["command"], "reset");
    assert_eq!(failure["exit_code"], 3);
    assert!(failure["output"].as_str().is_some_and(|o| o.contains("the display is gone")), "{failure:#}");

    let status = desktops(&daemon);
    let d2 = status.iter().find(|d| d["name"] == "d2").unwrap_or_else(|| panic!("{status:?}"));
    assert_eq!(d2["state"], "failed", "{status:?}");
    assert!(d2["failure"]["output"].as_str().is_some_and(|o| o.contains("the display is gone")), "{d2:#}");
    let (code, _) = http(&daemon.socket, "GET", "/healthz", None, &[]).expect("healthz");
    assert_eq!(code, 200, "two desktops are still in the pool");
    let (_, metrics) = http(&daemon.socket, "GET", "/metrics", None, &[]).expect("metrics");
    assert!(metrics.contains("agentd_desktop_up{desktop=\"d2\"} 0"), "{metrics}");
    assert!(metrics.contains("agentd_desktop_up{desktop=\"d1\"} 1"), "{metrics}");
    assert!(metrics.contains("agentd_desktops{state=\"failed\"} 1"), "{metrics}");
}

on_both_backends!(twelve_tasks_on_three_desktops, a_failing_reset_takes_the_desktop_out);

/// A pool desktop served by x11vnc (issue: x11vnc's first frames after a connection can be older than the
/// screen): the pool opens its connection when the daemon starts and keeps it, so every task — the first
/// one too — starts on the screen its reset painted.
#[test]
fn tasks_on_an_x11vnc_desktop_of_the_pool_see_their_reset_screen() {
    let Some(mut servers) = xservers() else { return };
    let x = servers.remove(0);
    let port = agentd_local::testing::free_port().expect("a free port");
    let _x11vnc = agentd_local::testing::x11vnc(&x.display, port, None)
        .unwrap_or_else(|e| panic!("x11vnc is installed but did not start: {e}"));
    let config = format!(
        "[worker]\nconcurrency = 2\n\n[[desktops]]\nname = \"vnc-1\"\ncomputer = {{ provider = \"vnc\", address = \
         \"127.0.0.1:{port}\" }}\nreset = {:?}\ntimeout_secs = 30\n",
        painting_reset(&x.display)
    );
    let daemon = Daemon::start(&config);
    let ids: Vec<String> = (1..=4).map(|i| format!("pool-{i:02}")).collect();
    for id in &ids {
        submit(&daemon, id, None);
    }
    for id in &ids {
        let doc = daemon.wait_terminal(id, Duration::from_secs(120));
        assert_eq!(doc["state"], "succeeded", "{doc:#}\n{}", daemon.log());
        assert_eq!(doc["desktop"], "vnc-1");
        assert_eq!(first_screen_colour(&daemon, &doc), colour_of(id), "{id}: a stale first frame\n{}", daemon.log());
    }
}

/// The lifecycle around the daemon: a desktop whose `setup` starts its own X server in the background (it
/// outlives the command) serves tasks, and its `teardown` stops it when the daemon stops; a desktop whose
/// `setup` fails is out of the pool from the start, with the command's output in `/healthz`.
#[test]
fn setup_starts_a_desktop_and_teardown_stops_it() {
    if std::process::Command::new("Xvfb").arg("-help").output().is_err() {
        agentd_testenv::skip("Xvfb is not installed");
        return;
    }
    // A display number nobody uses: no socket and no lock file for it.
    let Some(number) = (180..400).find(|n| {
        !std::path::Path::new(&format!("/tmp/.X11-unix/X{n}")).exists()
            && !std::path::Path::new(&format!("/tmp/.X{n}-lock")).exists()
    }) else {
        agentd_testenv::skip("no free X display number");
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("xvfb.pid");
    let torn_down = dir.path().join("torn-down");
    let setup = format!(
        "Xvfb :{number} -screen 0 640x480x24 -nolisten tcp >/dev/null 2>&1 & echo $! > {pid}; \
         for i in $(seq 1 50); do [ -e /tmp/.X11-unix/X{number} ] && exit 0; sleep 0.1; done; \
         echo 'Xvfb did not start' >&2; exit 1",
        pid = pid_file.display()
    );
    let teardown = format!(
        "kill $(cat {pid}); echo $AGENTD_DESKTOP > {done}",
        pid = pid_file.display(),
        done = torn_down.display()
    );
    let config = format!(
        "[worker]\nconcurrency = 2\n\n[[desktops]]\nname = \"own\"\ncomputer = {{ provider = \"local\", display = \":{number}\" }}\n\
         setup = {setup:?}\nreset = {reset:?}\nteardown = {teardown:?}\n\n\
         [[desktops]]\nname = \"broken\"\ncomputer = {{ provider = \"local\", display = \":{number}\" }}\n\
         setup = [\"sh\", \"-c\", \"echo 'no GPU here' >&2; exit 4\"]\n",
        reset = painting_reset(&format!(":{number}")),
    );
    let mut daemon = Daemon::start(&config);
    for id in ["pool-01", "pool-02"] {
        submit(&daemon, id, Some(json!({"desktop": "own"})));
    }
    for id in ["pool-01", "pool-02"] {
        let doc = daemon.wait_terminal(id, Duration::from_secs(60));
        assert_eq!(doc["state"], "succeeded", "{doc:#}\n{}", daemon.log());
        assert_eq!(first_screen_colour(&daemon, &doc), colour_of(id));
    }
    let status = desktops(&daemon);
    let broken = status.iter().find(|d| d["name"] == "broken").unwrap_or_else(|| panic!("{status:?}"));
    assert_eq!(broken["state"], "failed");
    assert_eq!(broken["failure"]["command"], "setup");
    assert_eq!(broken["failure"]["exit_code"], 4);
    assert!(broken["failure"]["output"].as_str().is_some_and(|o| o.contains("no GPU here")), "{broken:#}");
    let pid: i32 = std::fs::read_to_string(&pid_file).expect("pid").trim().parse().expect("a pid");
    // SAFETY: signal 0 only checks that the process exists.
    assert_eq!(unsafe { libc::kill(pid, 0) }, 0, "the X server setup started outlives the setup command");

    daemon.signal(libc::SIGTERM);
    assert_eq!(daemon.wait(), Some(0), "{}", daemon.log());
    assert_eq!(std::fs::read_to_string(&torn_down).expect("teardown ran").trim(), "own");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    // SAFETY: as above.
    while unsafe { libc::kill(pid, 0) } == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_ne!(unsafe { libc::kill(pid, 0) }, 0, "teardown stopped the X server");
}

/// A desktop of the pool on cua's computer-server whose `reset` runs in the guest (`{guest = …}`, through the
/// server's `run_command`): every task starts on the screen it painted; a guest reset that fails takes the
/// desktop out with the guest's output.
#[test]
fn a_guest_reset_runs_through_the_computer_server() {
    let Some(python) = std::env::var("AGENTD_TEST_CUA_PYTHON").ok().filter(|v| !v.is_empty()) else {
        agentd_testenv::skip("AGENTD_TEST_CUA_PYTHON not set (scripts/test installs cua-computer-server and sets it)");
        return;
    };
    let Some(mut servers) = xservers() else { return };
    let (good, bad) = (servers.remove(0), servers.remove(0));
    let good_port = agentd_local::testing::free_port().expect("a free port");
    let bad_port = agentd_local::testing::free_port().expect("a free port");
    let _good_server = crate::cua::start_server(&python, &good.display, good_port);
    let _bad_server = crate::cua::start_server(&python, &bad.display, bad_port);
    let config = format!(
        "[worker]\nconcurrency = 1\n\n\
         [[desktops]]\nname = \"cua-bad\"\ncomputer = {{ provider = \"computer-server\", url = \"http://127.0.0.1:{bad_port}\" }}\n\
         reset = {{ guest = \"echo 'guest says no' >&2; exit 5\" }}\ntimeout_secs = 30\n\n\
         [[desktops]]\nname = \"cua-1\"\ncomputer = {{ provider = \"computer-server\", url = \"http://127.0.0.1:{good_port}\" }}\n\
         reset = {{ guest = \"xsetroot -solid '#124012'\" }}\ntimeout_secs = 30\n"
    );
    let daemon = Daemon::start(&config);
    for id in ["pool-12", "pool-13"] {
        submit(&daemon, id, None);
    }
    for id in ["pool-12", "pool-13"] {
        let doc = daemon.wait_terminal(id, Duration::from_secs(120));
        assert_eq!(doc["state"], "succeeded", "{doc:#}\n{}", daemon.log());
        assert_eq!(doc["desktop"], "cua-1");
        assert_eq!(first_screen_colour(&daemon, &doc), [0x12, 0x40, 0x12], "{id}: not the guest reset's screen");
    }
    let status = desktops(&daemon);
    let bad = status.iter().find(|d| d["name"] == "cua-bad").unwrap_or_else(|| panic!("{status:?}"));
    assert_eq!(bad["state"], "failed", "{status:?}");
    assert_eq!(bad["failure"]["exit_code"], 5, "{bad:#}");
    assert!(bad["failure"]["output"].as_str().is_some_and(|o| o.contains("guest says no")), "{bad:#}");
    let good = status.iter().find(|d| d["name"] == "cua-1").unwrap_or_else(|| panic!("{status:?}"));
    assert_eq!(good["resets"], 2, "{good:#}");
}

/// A browser of the pool (docs/providers.md): started once with the daemon and kept; every task starts in a
/// fresh browser context on the configured start page, whatever the task before left open; a browser that
/// dies between tasks is started anew for the next one, which succeeds.
#[test]
fn a_pool_browser_starts_each_task_afresh_and_comes_back_after_a_crash() {
    let Some(chromium) = crate::browser::chromium() else { return };
    let _load = crate::support::timing_sensitive();
    let site = crate::browser::FormServer::start();
    let start = format!("http://127.0.0.1:{}/", site.port);
    let dir = tempfile::tempdir().expect("tempdir");
    // The browser through a wrapper that notes each start's process id (the browser is that process).
    let pids = dir.path().join("pids");
    let wrapper = dir.path().join("chromium");
    std::fs::write(
        &wrapper,
        format!("#!/bin/sh\necho $$ >> '{}'\nexec '{}' \"$@\"\n", pids.display(), chromium.display()),
    )
    .expect("write the wrapper");
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let config = format!(
        "[outbound]\nallow = [\"127.0.0.1\"]\n\n[[desktops]]\nname = \"web-1\"\ncomputer = {{ provider = \"browser\", \
         executable = {:?}, start_url = {start:?} }}\ntimeout_secs = 30\n",
        wrapper.display().to_string()
    );
    let daemon = Daemon::start(&config);
    let started = |expected: usize| {
        let text = std::fs::read_to_string(&pids).unwrap_or_default();
        let list: Vec<i32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        assert_eq!(list.len(), expected, "browser starts: {list:?}\n{}", daemon.log());
        list
    };
    let run = |id: &str, turns: Value| {
        let task = json!({
            "id": id,
            "instructions": "browse",
            "model": {"provider": "scripted", "script": {"turns": turns}},
            "limits": {"max_steps": 5, "timeout_secs": 60}
        });
        let path = daemon.agentd.dir.path().join(format!("{id}.json"));
        std::fs::write(&path, task.to_string()).expect("write task");
        let run = daemon.cli(&["submit", path.to_str().expect("path")]);
        assert_eq!(run.code, 0, "{}\n{}", run.stderr, daemon.log());
        let doc = daemon.wait_terminal(id, Duration::from_secs(120));
        assert_eq!(doc["state"], "succeeded", "{doc:#}\n{}", daemon.log());
        assert_eq!(doc["desktop"], "web-1");
        assert_eq!(doc["steps"][0]["page"]["url"], start.as_str(), "{id} starts on the start page: {doc:#}");
        let leased = leased(&daemon, id);
        assert_eq!(leased.len(), 1, "{leased:?}");
        assert_eq!(leased[0]["reset"], true, "{id}: {leased:?}");
        doc
    };
    let elsewhere = format!("{start}elsewhere");
    let wander = json!([
        {"actions": [{"type": "navigate", "url": elsewhere}]},
        {"complete": {"success": true, "summary": "wandered off"}}
    ]);
    let doc = run("web-01", wander.clone());
    assert_eq!(doc["steps"][1]["page"]["url"], elsewhere.as_str(), "{doc:#}");
    run("web-02", wander);
    let first = started(1);

    // The browser dies between tasks: the next task gets a new one.
    // SAFETY: kill(2) with a process id this test's wrapper wrote; no memory is touched.
    assert_eq!(unsafe { libc::kill(first[0], libc::SIGKILL) }, 0, "kill the browser {}", first[0]);
    run("web-03", json!([{"complete": {"success": true, "summary": "looked"}}]));
    started(2);
    let status = desktops(&daemon);
    assert_eq!(status.len(), 1, "{status:?}");
    assert_eq!(status[0]["state"], "free", "{status:?}");
    assert_eq!(status[0]["resets"], 3, "one reset per task: {status:?}");
}
