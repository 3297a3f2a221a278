//! Trajectory reports (docs/reports.md): a task run by a real daemon on the mock desktop with the scripted model, then
//! `agentd export --html` opened in headless Chromium (every step's screenshot loads, actions drawn, nothing
//! from the task runs as markup), `--gif` and `--webp` decoded frame by frame, and `agentd show`'s table.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Agentd, Daemon};

/// `[tools.note]`: a command tool that answers with an envelope carrying `details`.
const NOTE_TOOL: &str = "[tools.note]\n\
    description = \"Takes a note.\"\n\
    parameters = { type = \"object\", properties = { text = { type = \"string\" } }, required = [\"text\"] }\n\
    kind = \"command\"\n\
    command = [\"/bin/sh\", \"-c\", \"read -r a; printf '{\\\"ok\\\": true, \\\"output\\\": \\\"noted\\\", \\\"details\\\": {\\\"args\\\": %s}}' \\\"$a\\\"\"]\n\
    timeout_secs = 10\n";

/// Five steps: click and type, keys, a note (good) with a scroll and a drag, a note with bad arguments
/// (a tool error), a click; then completion.
fn task(dir: &Path, instructions: &str, say: &str, summary: &str) -> PathBuf {
    let task = json!({
        "instructions": instructions,
        "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "scripted", "script": {"turns": [
            {"say": say, "actions": [{"type": "click", "x": 640, "y": 370}, {"type": "type", "text": say}]},
            {"say": "password", "actions": [{"type": "keypress", "keys": ["Tab"]}, {"type": "type", "text": "hunter2"},
                                          {"type": "keypress", "keys": ["Return"]}]},
            {"say": "noting", "calls": [{"name": "note", "arguments": {"text": "signed in"}}],
             "actions": [{"type": "scroll", "x": 640, "y": 400, "scroll_y": 300},
                         {"type": "drag", "path": [{"x": 100, "y": 100}, {"x": 300, "y": 200}, {"x": 500, "y": 220}]}]},
            {"calls": [{"name": "note", "arguments": {"text": 7}}]},
            {"actions": [{"type": "click", "x": 471, "y": 434}]},
            {"complete": {"success": true, "summary": summary}}
        ]}},
        "tools": [{"use": "note"}],
        "limits": {"max_steps": 10, "timeout_secs": 120}
    });
    let path = dir.join("task.json");
    std::fs::write(&path, task.to_string()).expect("write task");
    path
}

fn submit(daemon: &Daemon, task: &Path) -> (String, Value) {
    let run = daemon.cli(&["submit", task.to_str().expect("path"), "--wait"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, daemon.log());
    let id = run.stdout.trim().to_string();
    let status = daemon.cli(&["status", &id, "--json"]);
    assert_eq!(status.code, 0, "{}", status.stderr);
    (id, status.json())
}

/// The Chromium binary CI installs (`scripts/setup/41-chromium.sh`), or `chromium` on the PATH.
fn chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("AGENTD_TEST_CHROMIUM").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("chromium"))
        .find(|p| p.is_file());
    if found.is_none() {
        agentd_testenv::skip("no chromium (./scripts/test installs it through scripts/setup/41-chromium.sh)");
    }
    found
}

/// Runs headless Chromium on `file` with `args` (a private profile), at most 120 s; returns stdout.
fn run_chromium(chromium: &Path, profile: &Path, args: &[&str], file: &Path) -> String {
    let mut child = Command::new(chromium)
        .args(["--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--disable-extensions"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", file.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn chromium");
    let mut stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
        text
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match child.try_wait().expect("wait chromium") {
            Some(_) => break,
            None if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("chromium did not finish in 120 s");
            }
            None => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    reader.join().expect("reader")
}

/// The report with a check script added: the test's copy may run inline script (the shipped file may not),
/// nothing else of its policy changes. On load it writes what the page shows into `<pre id="check">`.
fn with_check_script(html: &str) -> String {
    const CHECK: &str = r#"<script>window.addEventListener('load', () => {
  const imgs = [...document.querySelectorAll('img.step-shot')];
  const pre = document.createElement('pre');
  pre.id = 'check';
  pre.textContent = JSON.stringify({
    images: imgs.length,
    loaded: imgs.filter(i => i.complete && i.naturalWidth > 0).length,
    widths: imgs.map(i => i.naturalWidth),
    steps: document.querySelectorAll('article.step[data-step]').length,
    drawn: [...document.querySelectorAll('figure.shot svg')].map(s => s.childElementCount),
    scripts: document.querySelectorAll('script').length,
    pwned: document.body.dataset.pwned || null,
    instructions: (document.querySelector('pre.instructions') || {}).textContent,
  });
  document.body.appendChild(pre);
});</script>"#;
    let relaxed = html.replacen("default-src 'none';", "default-src 'none'; script-src 'unsafe-inline';", 1);
    assert_ne!(relaxed, html, "the report carries its Content-Security-Policy");
    relaxed.replacen("</body>", &format!("{CHECK}</body>"), 1)
}

/// Opens the report (with the check script) in Chromium and returns what the script saw.
fn check_in_chromium(chromium: &Path, dir: &Path, html: &str) -> Value {
    let file = dir.join("checked.html");
    std::fs::write(&file, with_check_script(html)).expect("write");
    let dom = run_chromium(chromium, &dir.join("profile"), &["--virtual-time-budget=10000", "--dump-dom"], &file);
    const OPEN: &str = "<pre id=\"check\">";
    let start = dom.find(OPEN).unwrap_or_else(|| panic!("the check script did not run:\n{dom:.2000}"));
    let end = dom[start..].find("</pre>").expect("end of check") + start;
    let text = dom[start + OPEN.len()..end].replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn export(daemon: &Daemon, id: &str, dir: &Path) -> (String, Vec<u8>, Vec<u8>, Value) {
    let (html, gif, webp) = (dir.join("report.html"), dir.join("run.gif"), dir.join("run.webp"));
    let run = daemon.cli(&[
        "export",
        id,
        "--html",
        html.to_str().expect("path"),
        "--gif",
        gif.to_str().expect("path"),
        "--webp",
        webp.to_str().expect("path"),
        "--json",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, daemon.log());
    let html = std::fs::read_to_string(html).expect("html written");
    (html, std::fs::read(gif).expect("gif written"), std::fs::read(webp).expect("webp written"), run.json())
}

/// The frames of a GIF: their count and sizes (each frame decoded in full).
fn gif_frames(bytes: &[u8]) -> (u16, u16, Vec<(u16, u16, u16)>) {
    let mut options = gif::DecodeOptions::new();
    options.set_color_output(gif::ColorOutput::RGBA);
    let mut decoder = options.read_info(std::io::Cursor::new(bytes)).expect("a GIF");
    let (width, height) = (decoder.width(), decoder.height());
    let mut frames = Vec::new();
    while let Some(frame) = decoder.read_next_frame().expect("a frame") {
        assert_eq!(frame.buffer.len(), usize::from(frame.width) * usize::from(frame.height) * 4);
        frames.push((frame.width, frame.height, frame.delay));
    }
    (width, height, frames)
}

#[test]
fn export_renders_every_step_in_chromium_and_animates_the_run() {
    let daemon = Daemon::start(NOTE_TOOL);
    let dir = tempfile::tempdir().expect("tempdir");
    let (id, status) = submit(&daemon, &task(dir.path(), "Log in as alice and open Reports", "alice", "done"));
    let steps = status["steps"].as_array().expect("steps").len();
    assert_eq!(steps, 6, "{status}");
    let screen =
        (status["steps"][0]["screenshot"]["width"].as_u64(), status["steps"][0]["screenshot"]["height"].as_u64());
    let (Some(screen_w), Some(screen_h)) = screen else { panic!("{status}") };

    // `show`: one row per step, in order, the failed tool call's error in its row, then the outcome.
    let show = daemon.cli(&["show", &id]);
    assert_eq!(show.code, 0, "{}", show.stderr);
    let is_row = |line: &&str| {
        let words: Vec<&str> = line.split_whitespace().collect();
        words.len() > 2 && words[0].parse::<u32>().is_ok() && words[1].len() == 8 && words[1].matches(':').count() == 2
    };
    let rows: Vec<&str> = show.stdout.lines().filter(is_row).collect();
    assert_eq!(rows.len(), steps, "{}", show.stdout);
    for (i, row) in rows.iter().enumerate() {
        assert!(row.trim_start().starts_with(&format!("{i} ")), "{}", show.stdout);
    }
    assert!(rows[0].contains("click(640,370)") && rows[0].contains(" ok "), "{}", show.stdout);
    assert!(rows[2].contains("scroll(640,400,0,300)"), "{}", show.stdout);
    assert!(rows[3].contains("✗ note:"), "{}", show.stdout);
    assert!(show.stdout.contains("✓ succeeded (completed): done"), "{}", show.stdout);
    let show_json = daemon.cli(&["show", &id, "--json"]);
    let show_json = show_json.json();
    assert_eq!(show_json["steps"].as_array().map(Vec::len), Some(steps));
    assert_eq!(show_json["steps"][2]["tools"], json!(["note"]), "{show_json}");

    let (html, gif, webp, written) = export(&daemon, &id, dir.path());
    eprintln!("export of {steps} steps: {written}");
    // The last step only completes the task: no action, so no screen after it.
    let frames = steps + usize::from(status["final_screenshot"].is_object());

    // The HTML is one file: every screenshot inside it, nothing fetched, no script.
    assert_eq!(html.matches("<img class=\"step-shot\" src=\"data:image/png;base64,").count(), frames);
    for external in ["src=\"http", "href=\"http", "url(", "<link", "<script", "@import"] {
        assert!(!html.contains(external), "the report refers to something outside it: {external}");
    }
    assert!(html.contains("id=\"verifiers\""), "a place for verifiers");
    assert!(
        html.contains("{\n  &quot;args&quot;: {\n    &quot;text&quot;: &quot;signed in&quot;"),
        "tool details are shown"
    );

    if let Some(chromium) = chromium() {
        let seen = check_in_chromium(&chromium, dir.path(), &html);
        assert_eq!(seen["images"], frames, "{seen}");
        assert_eq!(seen["loaded"], frames, "every screenshot decoded in the browser: {seen}");
        assert!(seen["widths"].as_array().is_some_and(|w| w.iter().all(|w| w.as_u64() == Some(screen_w))), "{seen}");
        assert_eq!(seen["steps"], steps, "{seen}");
        let drawn: Vec<u64> = seen["drawn"].as_array().expect("drawn").iter().filter_map(Value::as_u64).collect();
        assert!(drawn[0] > 0 && drawn[2] > 0 && drawn[4] > 0, "the actions are drawn over the screenshots: {seen}");
        assert_eq!(drawn[3], 0, "a step with no action draws nothing: {seen}");

        // The shipped file itself, as a person opens it: it renders, and is not blank.
        let file = dir.path().join("report.html");
        let shot = dir.path().join("report.png");
        let arg = format!("--screenshot={}", shot.display());
        run_chromium(&chromium, &dir.path().join("profile"), &["--window-size=1280,2400", &arg], &file);
        let png = std::fs::read(&shot).expect("chromium wrote a screenshot");
        let decoder = png::Decoder::new(std::io::Cursor::new(png));
        let mut reader = decoder.read_info().expect("png");
        let mut buf = vec![0; reader.output_buffer_size().expect("size")];
        let info = reader.next_frame(&mut buf).expect("frame");
        let channels = info.color_type.samples();
        let colours: std::collections::HashSet<&[u8]> = buf[..info.buffer_size()].chunks(channels).collect();
        assert!(colours.len() > 200, "the rendered report looks blank: {} colours", colours.len());
    }

    // The GIF: one frame per step and the final screen, at most 800 px wide, the screen's aspect kept.
    let (width, height, gif_frames) = gif_frames(&gif);
    assert_eq!(gif_frames.len(), frames);
    assert!(width <= 800 && u64::from(width) <= screen_w, "{width}");
    let band = agentd::report::anim::caption_band(u32::from(width));
    let image_h = u32::from(height) - band;
    assert_eq!(u64::from(image_h), (screen_h as f64 * f64::from(width) / screen_w as f64).round() as u64);
    assert!(gif_frames.iter().all(|(w, h, _)| (*w, *h) == (width, height)));
    assert_eq!(gif_frames.last().map(|f| f.2), Some(300), "the last frame stays 3 s");

    // The WebP: animated, the same frames, every one decodes.
    let mut decoder = image_webp::WebPDecoder::new(std::io::Cursor::new(&webp)).expect("a WebP");
    assert!(decoder.is_animated());
    assert_eq!(decoder.num_frames() as usize, frames);
    assert_eq!(decoder.dimensions(), (u32::from(width), u32::from(height)));
    let mut buf = vec![0; decoder.output_buffer_size().expect("size")];
    for _ in 0..frames {
        decoder.read_frame(&mut buf).expect("a frame decodes");
    }
    assert!(buf.iter().any(|b| *b != buf[0]), "the last frame is not blank");
}

#[test]
fn nothing_from_the_task_runs_as_markup_or_reaches_the_terminal_raw() {
    let daemon = Daemon::start(NOTE_TOOL);
    let dir = tempfile::tempdir().expect("tempdir");
    let hostile = "<script>document.body.dataset.pwned='script'</script>\
                   <img src=x onerror=\"document.body.dataset.pwned='img'\"><b>bold</b>";
    let summary = format!("{hostile} \u{1b}[2J\u{1b}]0;title\u{7}");
    let (id, _) = submit(&daemon, &task(dir.path(), hostile, hostile, &summary));
    let (html, _, _, _) = export(&daemon, &id, dir.path());
    assert!(!html.contains("<script"), "no script element comes from the task");
    assert!(html.contains("&lt;script&gt;document.body.dataset.pwned=&#39;script&#39;&lt;/script&gt;"));
    assert!(html.contains("&lt;img src=x onerror=&quot;"));

    if let Some(chromium) = chromium() {
        // Even with inline script allowed (the check's copy), nothing of the task runs: it is text.
        let seen = check_in_chromium(&chromium, dir.path(), &html);
        assert_eq!(seen["pwned"], Value::Null, "{seen}");
        assert_eq!(seen["scripts"], 1, "only the check script: {seen}");
        assert_eq!(seen["instructions"], hostile, "the instructions read as the task wrote them: {seen}");
    }

    let show = daemon.cli(&["show", &id]);
    assert_eq!(show.code, 0, "{}", show.stderr);
    assert!(!show.stdout.contains('\u{1b}') && !show.stdout.contains('\u{7}'), "{:?}", show.stdout);
    assert!(show.stdout.contains("\\u{1b}[2J"), "{}", show.stdout);
}

#[test]
fn an_agentd_run_result_is_exported_and_shown_without_a_daemon() {
    let agentd = Agentd::new();
    let run = agentd.run(&["run", "config/tasks/mock-login.json", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let id = run.json()["id"].as_str().expect("id").to_string();
    let show = agentd.run(&["show", "--local", &id]);
    assert_eq!(show.code, 0, "{}", show.stderr);
    assert!(show.stdout.contains("✓ succeeded (completed): Logged in as alice and opened Reports"), "{}", show.stdout);
    let gif = agentd.dir.path().join("run.gif");
    let export = agentd.run(&["export", "--local", &id, "--gif", gif.to_str().expect("path")]);
    assert_eq!(export.code, 0, "{}", export.stderr);
    let (_, _, frames) = gif_frames(&std::fs::read(&gif).expect("gif"));
    let record: Value =
        serde_json::from_slice(&std::fs::read(agentd.data_dir().join(format!("runs/{id}.json"))).expect("record"))
            .expect("JSON");
    let steps = record["steps"].as_array().map_or(0, Vec::len);
    assert_eq!(steps, 4);
    assert_eq!(frames.len(), steps + usize::from(record["final_screenshot"].is_object()));

    // Bad requests: no format, an id that is not a file name, a task that does not exist.
    let none = agentd.run(&["export", "--local", &id]);
    assert_eq!(none.code, 2, "{}", none.stderr);
    assert!(none.stderr.contains("--html FILE, --gif FILE, --webp FILE"), "{}", none.stderr);
    let sneaky = agentd.run(&["show", "--local", "../etc/passwd"]);
    assert_eq!(sneaky.code, 2, "{}", sneaky.stderr);
    let missing = agentd.run(&["show", "--local", "no-such-task"]);
    assert_eq!(missing.code, 2, "{}", missing.stderr);
    assert!(missing.stderr.contains("no-such-task.json"), "{}", missing.stderr);
}

/// The peak resident memory (KiB) of `agentd export --local ID --gif FILE`: the kernel's `ru_maxrss` of that
/// one child, from `wait4`, so no other process of the test run counts.
#[cfg(target_os = "linux")]
#[allow(clippy::zombie_processes)] // waited for with wait4, which std's Child does not know of
fn export_peak_kib(agentd: &Agentd, id: &str, gif: &Path) -> u64 {
    let stderr = agentd.dir.path().join(format!("export-{id}.stderr"));
    let child = agentd
        .command()
        .args(["export", "--local", id, "--gif", gif.to_str().expect("path")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).expect("stderr file"))
        .spawn()
        .expect("spawn agentd");
    let pid = libc::pid_t::try_from(child.id()).expect("pid");
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value to be overwritten; `pid` is our own child, not yet waited for
    // (`child` is never waited on through std after this).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "wait4: {}", std::io::Error::last_os_error());
    let log = std::fs::read_to_string(&stderr).unwrap_or_default();
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "export of {id} failed ({status}): {log}");
    u64::try_from(usage.ru_maxrss).expect("maxrss")
}

/// `agentd export` holds one step's screenshot and frame at a time, whatever the number of steps: the peak
/// memory of exporting 16 steps is that of exporting 2, give or take less than 16 MiB (every step's
/// screenshot and frame held at once, as they once were, is about 2.4 MB per step of the mock's 1280x800
/// screen: 34 MB more).
#[cfg(target_os = "linux")]
#[test]
fn exporting_many_steps_takes_no_more_memory_than_a_few() {
    let agentd = Agentd::new();
    let run = agentd.run(&["run", "config/tasks/mock-login.json", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let id = run.json()["id"].as_str().expect("id").to_string();
    let runs = agentd.data_dir().join("runs");
    let record: Value =
        serde_json::from_slice(&std::fs::read(runs.join(format!("{id}.json"))).expect("record")).expect("JSON");
    let steps = record["steps"].as_array().expect("steps").clone();
    // The run's steps over and over (their screenshots are in the store already), numbered anew.
    let with_steps = |name: &str, count: usize| {
        let mut copy = record.clone();
        copy["id"] = json!(name);
        copy["steps"] = (0..count)
            .map(|i| {
                let mut step = steps[i % steps.len()].clone();
                step["index"] = json!(i);
                step
            })
            .collect();
        std::fs::write(runs.join(format!("{name}.json")), copy.to_string()).expect("write record");
    };
    with_steps("few", 2);
    with_steps("many", 16);
    let few = export_peak_kib(&agentd, "few", &agentd.dir.path().join("few.gif"));
    let many = export_peak_kib(&agentd, "many", &agentd.dir.path().join("many.gif"));
    let (_, _, frames) = gif_frames(&std::fs::read(agentd.dir.path().join("many.gif")).expect("gif"));
    assert_eq!(frames.len(), 16 + usize::from(record["final_screenshot"].is_object()));
    eprintln!("peak memory of export: 2 steps {few} KiB, 16 steps {many} KiB");
    assert!(
        many < few + 16 * 1024,
        "exporting 16 steps took {many} KiB at its peak, 2 steps {few} KiB: memory grows with the steps"
    );
}
