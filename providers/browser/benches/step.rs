//! The browser computer's step beside its peer: a click and a PNG screenshot of the viewport (1280x800) on a
//! simple local page, as the agent loop does it every step — median and p95 over 100 steps after 5 warm-up
//! ones, with the click and the screenshot apart — and how long a browser takes from launch to its first
//! screenshot, and the memory (RSS) of its processes; and how long a pool browser takes to start the next task
//! (`reset`: a fresh browser context on the start page) once its prepared context is ready, to its first
//! screenshot. `benches/playwright_step.py` measures the OpenAI sample's Playwright computer the same way;
//! `benches/side_by_side.sh` runs both in one go.
//!
//! Then how many browsers this machine runs at once with tasks stepping: 1, 2, 4, 8, … launched browsers (up to
//! `$AGENTD_BENCH_BROWSERS_MAX`, default 16), each stepping as above (40 steps), all at the same time — the
//! steps per second together, each step's median and p95, and the memory of all of them. It stops early once
//! a step's p95 passes 2 s (the machine is saturated: a model's turn would wait on the computer).
//!
//! `cargo bench -p agentd-browser --bench step` (Chromium from `$AGENTD_TEST_CHROMIUM` or `PATH`).

use std::time::{Duration, Instant};

use agentd_browser::{BrowserConfig, BrowserProvider};
use agentd_computer::{Action, ComputerProvider, MouseButton};

const PAGE: &str = r#"<!doctype html><title>bench</title><body style="margin:0;font:16px sans-serif">
<p style="position:absolute;left:20px;top:20px">A simple page: a heading, some text and a button.</p>
<button id="b" style="position:absolute;left:600px;top:300px;width:120px;height:40px">Press</button>
<div id="s" style="position:absolute;left:1000px;top:20px;width:100px;height:60px;background:#00f"></div>
<script>let n=0;document.getElementById('b').onclick=()=>{document.getElementById('s').style.background=['#f00','#0a0','#00f'][n++%3]};</script>
</body>"#;

async fn serve() -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("address").port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf).await;
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{PAGE}",
                    PAGE.len()
                );
                let _ = stream.write_all(reply.as_bytes()).await;
            });
        }
    });
    port
}

fn percentile(sorted: &[Duration], p: usize) -> f64 {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

/// The resident memory of every process in the browser's process group, in MiB.
fn group_rss_mib(pgid: u32) -> f64 {
    let mut kib = 0u64;
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0.0 };
    for entry in entries.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { continue };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(2).and_then(|g| g.parse::<u32>().ok()) != Some(pgid) {
            continue;
        }
        let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
        if let Some(line) = status.lines().find(|l| l.starts_with("VmRSS:")) {
            kib += line.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    kib as f64 / 1024.0
}

#[tokio::main]
async fn main() {
    let executable = std::env::var_os("AGENTD_TEST_CHROMIUM")
        .map(std::path::PathBuf::from)
        .or_else(|| agentd_browser::launch::find_executable(&agentd_browser::DEFAULT_EXECUTABLES))
        .expect("no Chromium: set AGENTD_TEST_CHROMIUM");
    let port = serve().await;
    let url = format!("http://127.0.0.1:{port}/");
    let config = || BrowserConfig {
        executable: Some(executable.clone()),
        start_url: Some(url.clone()),
        ..BrowserConfig::default()
    };

    let mut starts = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let browser = BrowserProvider::open(config()).await.expect("browser");
        browser.screenshot().await.expect("screenshot");
        starts.push(started.elapsed());
    }
    starts.sort();

    let browser = BrowserProvider::open(config()).await.expect("browser");
    let click = Action::Click { x: 660, y: 320, button: MouseButton::Left, keys: vec![] };
    let (mut steps, mut clicks, mut captures) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..105 {
        let started = Instant::now();
        browser.perform(&click).await.expect("click");
        let clicked = started.elapsed();
        browser.screenshot().await.expect("screenshot");
        let step = started.elapsed();
        if i >= 5 {
            steps.push(step);
            clicks.push(clicked);
            captures.push(step - clicked);
        }
    }
    steps.sort();
    clicks.sort();
    captures.sort();
    let rss = browser.pid().map(group_rss_mib).unwrap_or(0.0);

    // A pool browser between tasks: the first reset makes a context, each later one takes the context
    // prepared while the last task ran (waited for here, as a task's own run time gives it).
    let (mut resets, mut firsts) = (Vec::new(), Vec::new());
    for i in 0..21 {
        let deadline = Instant::now() + Duration::from_secs(30);
        while i > 0 && !browser.prepared() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let started = Instant::now();
        assert!(browser.reset().await.expect("reset"), "a fresh profile resets");
        let reset = started.elapsed();
        browser.screenshot().await.expect("screenshot");
        if i > 0 {
            resets.push(reset);
            firsts.push(started.elapsed());
        }
    }
    resets.sort();
    firsts.sort();
    println!(
        "agentd-browser: next task on a pool browser: reset median {:.1} ms, p95 {:.1} ms; reset + first screenshot \
         median {:.1} ms, p95 {:.1} ms over {}",
        percentile(&resets, 50),
        percentile(&resets, 95),
        percentile(&firsts, 50),
        percentile(&firsts, 95),
        resets.len()
    );
    println!(
        "agentd-browser: step (click + PNG screenshot, 1280x800) median {:.1} ms, p95 {:.1} ms over {} (click \
         median {:.1} ms, screenshot median {:.1} ms); launch to first screenshot median {:.0} ms (min {:.0}, max \
         {:.0}) over {}; browser RSS {rss:.0} MiB",
        percentile(&steps, 50),
        percentile(&steps, 95),
        steps.len(),
        percentile(&clicks, 50),
        percentile(&captures, 50),
        percentile(&starts, 50),
        percentile(&starts, 0),
        percentile(&starts, 100),
        starts.len()
    );
    drop(browser);

    let max: usize = std::env::var("AGENTD_BENCH_BROWSERS_MAX").ok().and_then(|v| v.parse().ok()).unwrap_or(16);
    let mut count = 1;
    while count <= max {
        let mut browsers = Vec::new();
        for _ in 0..count {
            let browser = BrowserProvider::open(config()).await.expect("browser");
            browser.screenshot().await.expect("screenshot");
            browsers.push(std::sync::Arc::new(browser));
        }
        let started = Instant::now();
        let runs: Vec<_> = browsers
            .iter()
            .map(|browser| {
                let (browser, click) = (browser.clone(), click.clone());
                tokio::spawn(async move {
                    let mut steps = Vec::new();
                    for _ in 0..40 {
                        let step = Instant::now();
                        browser.perform(&click).await.expect("click");
                        browser.screenshot().await.expect("screenshot");
                        steps.push(step.elapsed());
                    }
                    steps
                })
            })
            .collect();
        let mut all: Vec<Duration> = Vec::new();
        for run in runs {
            all.extend(run.await.expect("a browser's steps"));
        }
        let wall = started.elapsed();
        all.sort();
        let rss: f64 = browsers.iter().filter_map(|b| b.pid()).map(group_rss_mib).sum();
        let p95 = percentile(&all, 95);
        println!(
            "agentd-browser: {count} browsers stepping at once: {:.1} steps/s together, step median {:.0} ms, p95 \
             {p95:.0} ms; RSS {rss:.0} MiB ({:.0} MiB each)",
            all.len() as f64 / wall.as_secs_f64(),
            percentile(&all, 50),
            rss / count as f64
        );
        drop(browsers);
        if p95 > 2000.0 {
            break;
        }
        count *= 2;
    }
}
