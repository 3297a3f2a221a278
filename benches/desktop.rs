//! Step cost on a real desktop: the local X11 provider and the VNC provider (x11vnc on the same display),
//! measured on whatever X display it is given — meant to run inside `run_baselines.sh` through `EXTRA_CMD`
//! so that its figures sit beside the peers' on the same desktop:
//!
//! ```text
//! cargo bench --bench desktop --no-run        # build once
//! EXTRA_CMD='cd /path/to/agentd && cargo bench -q --bench desktop -- --display $DISPLAY' \
//!     /work/shared/bench/anchors/run_baselines.sh
//! ```
//!
//! A *step* is what the agent loop does per action, minus the model: the action, a capture, and scale +
//! encode (`agentd::screen::image::prepare`: the full-resolution PNG artifact, plus a scaled PNG for the model
//! when the screen is larger than 1366x768, as for the Anthropic API at 1080p). Prints median and p95 in ms
//! (nearest rank) for every figure, and the pieces alone; no assertions. Options: `--display :N` (default
//! `$DISPLAY`), `--reps N` (default 30), `--no-vnc`, `--xvnc` (also a TigerVNC Xvnc of the same size).

#[path = "support/mod.rs"]
mod support;

use support::percentile;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentd::screen::coords::fit_within;
use agentd::screen::image;
use agentd_computer::{Action, ComputerProvider, Frame, MouseButton, Size};
use agentd_local::testing::{self, XServer};
use agentd_local::{CaptureMethod, LocalConfig, LocalProvider};
use agentd_vnc::{Encodings, VncConfig, VncProvider};

struct Stats {
    name: String,
    ms: Vec<f64>,
    note: String,
}

impl Stats {
    fn print(&mut self) {
        self.ms.sort_by(f64::total_cmp);
        println!(
            "| {} | {:.2} | {:.2} | {} |",
            self.name,
            percentile(&self.ms, 50.0),
            percentile(&self.ms, 95.0),
            self.note
        );
    }
}

async fn measure<F, Fut>(name: &str, reps: usize, note: &str, mut f: F) -> Stats
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for i in 0..2 {
        f(i).await;
    }
    let mut ms = Vec::with_capacity(reps);
    for i in 0..reps {
        let start = Instant::now();
        f(i + 2).await;
        ms.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    let mut stats = Stats { name: name.to_string(), ms, note: note.to_string() };
    stats.print();
    stats
}

/// The model's image size the way the Anthropic adapter picks it: the screen, fitted into 1366x768 when
/// larger (1920x1080 → 1366x768; 1280x800 stays).
fn model_size(screen: Size) -> Size {
    if screen.width > 1366 || screen.height > 800 { fit_within(screen, Size::new(1366, 768)) } else { screen }
}

fn prepare(frame: &Frame, to: Size) -> usize {
    let prepared = image::prepare(frame, to).expect("prepare");
    prepared.artifact.bytes.len() + prepared.model.bytes.len()
}

/// Two points inside the baseline desktop's "typesink" xterm (its input is discarded), alternated so the
/// pointer moves (xeyes follows it) and the screen changes every step.
fn click_at(size: Size, i: usize) -> Action {
    let (w, h) = (size.width as i32, size.height as i32);
    let (x, y) = if i.is_multiple_of(2) { (w / 2 + 100, h - 200) } else { (w / 2 + 160, h - 170) };
    Action::Click { x: x.clamp(0, w - 1), y: y.clamp(0, h - 1), button: MouseButton::Left, keys: vec![] }
}

async fn bench_local(display: &str, reps: usize) {
    let fresh =
        LocalProvider::open(LocalConfig { reuse_unchanged: false, ..LocalConfig::new(Some(display.to_string())) })
            .await
            .expect("local provider");
    let size = fresh.screen_size().await.expect("size");
    let target = model_size(size);
    println!("\n### agentd local provider on {display} ({size}; model image {target})\n");
    println!("| measurement | median ms | p95 ms | note |\n|---|---|---|---|");
    let method = fresh.capture_method().await.expect("method");
    measure(
        "L1. capture, MIT-SHM, screen changed (no reuse)",
        reps,
        &format!("{method:?} into RGB on the persistent connection"),
        |_| {
            let p = &fresh;
            async move {
                std::hint::black_box(p.screenshot().await.expect("capture"));
            }
        },
    )
    .await;
    let reuse = LocalProvider::open(LocalConfig::new(Some(display.to_string()))).await.expect("local provider");
    measure("L2. capture, screen unchanged (DAMAGE reuse)", reps, "round trip + copy of the last frame", |_| {
        let p = &reuse;
        async move {
            std::hint::black_box(p.screenshot().await.expect("capture"));
        }
    })
    .await;
    let get_image = LocalProvider::open(LocalConfig {
        capture: CaptureMethod::GetImage,
        reuse_unchanged: false,
        ..LocalConfig::new(Some(display.to_string()))
    })
    .await
    .expect("local provider");
    measure("L3. capture, GetImage over the socket (no shm)", reps, "the fallback path, same connection", |_| {
        let p = &get_image;
        async move {
            std::hint::black_box(p.screenshot().await.expect("capture"));
        }
    })
    .await;
    #[cfg(feature = "xcap")]
    {
        let xcap = LocalProvider::open(LocalConfig {
            capture: CaptureMethod::Xcap,
            reuse_unchanged: false,
            ..LocalConfig::new(Some(display.to_string()))
        })
        .await
        .expect("local provider (xcap)");
        measure("L3x. capture, xcap 0.9 (new connection + GetImage)", reps, "the crate the contract names", |_| {
            let p = &xcap;
            async move {
                std::hint::black_box(p.screenshot().await.expect("capture"));
            }
        })
        .await;
    }
    measure("L4. click (XTest move + press + release + sync)", reps, "", |i| {
        let p = &fresh;
        async move {
            p.perform(&click_at(size, i)).await.expect("click");
        }
    })
    .await;
    let typed = Action::Type { text: "hello world 12345678".into() };
    measure("L5. type 20 chars (XTest, no delay)", reps, "into the typesink xterm", |_| {
        let p = &fresh;
        let typed = &typed;
        async move {
            p.perform(typed).await.expect("type");
        }
    })
    .await;
    let frame = fresh.screenshot().await.expect("capture");
    let mut bytes = 0;
    measure("L6. scale + encode (image::prepare, PNG)", reps, &format!("to {target}"), |_| {
        let frame = frame.clone();
        bytes = prepare(&frame, target);
        async {}
    })
    .await;
    println!("|   (PNG bytes per step: {bytes}) | | | |");
    let mut step = measure(
        "**L7. step: click + capture + scale + encode**",
        reps,
        "capture without reuse; prepare on the blocking pool",
        |i| {
            let p = &fresh;
            async move {
                p.perform(&click_at(size, i)).await.expect("click");
                let frame = p.screenshot().await.expect("capture");
                tokio::task::spawn_blocking(move || prepare(&frame, target)).await.expect("prepare");
            }
        },
    )
    .await;
    let floor = if size.width >= 1900 { 31.0 } else { 8.7 };
    let docker = if size.width >= 1900 { 299.8 } else { 223.6 };
    let anthropic = if size.width >= 1900 { 2408.2 } else { 2209.7 };
    step.ms.sort_by(f64::total_cmp);
    let median = percentile(&step.ms, 50.0);
    println!(
        "\nL7 median {median:.2} ms = {:.2}x the S3 floor ({floor} ms), 1/{:.1} of the OpenAI Docker step S2 ({docker} ms), 1/{:.0} of the Anthropic step S1 ({anthropic} ms) (reference figures of baselines.md; compare with this run's rows above)",
        median / floor,
        docker / median,
        anthropic / median
    );
}

async fn bench_vnc(label: &str, address: &str, password: Option<String>, reps: usize) {
    for encodings in [Encodings::Raw, Encodings::Zrle] {
        let mut config = VncConfig::new(address, password.clone());
        config.encodings = encodings;
        let start = Instant::now();
        let provider = match VncProvider::connect(config).await {
            Ok(p) => Arc::new(p),
            Err(e) => {
                println!("\n{label}: cannot connect: {e}");
                return;
            }
        };
        let connect_ms = start.elapsed().as_secs_f64() * 1000.0;
        let size = provider.screen_size().await.expect("size");
        let target = model_size(size);
        println!(
            "\n### agentd VNC provider, {label}, {encodings:?} ({size}; connect + first full frame {connect_ms:.1} ms)\n"
        );
        println!("| measurement | median ms | p95 ms | note |\n|---|---|---|---|");
        measure("V1. screenshot, screen unchanged", reps, "copy of the local framebuffer, no round trip", |_| {
            let p = provider.clone();
            async move {
                std::hint::black_box(p.screenshot().await.expect("capture"));
            }
        })
        .await;
        measure("V2. full frame (non-incremental request → frame applied)", reps, "", |_| {
            let p = provider.clone();
            async move {
                p.refresh(Duration::from_secs(5)).await.expect("full frame");
            }
        })
        .await;
        measure("V3. click (PointerEvents written)", reps, "", |i| {
            let p = provider.clone();
            async move {
                p.perform(&click_at(size, i)).await.expect("click");
            }
        })
        .await;
        measure(
            "**V4. step: click + next update + screenshot + scale + encode**",
            reps,
            "waits (≤200 ms) for the server to send the click's change; 200 ms when the click changes nothing",
            |i| {
                let p = provider.clone();
                async move {
                    let seen = p.updates();
                    p.perform(&click_at(size, i)).await.expect("click");
                    p.wait_for_update(seen, Duration::from_millis(200)).await;
                    let frame = p.screenshot().await.expect("capture");
                    tokio::task::spawn_blocking(move || prepare(&frame, target)).await.expect("prepare");
                }
            },
        )
        .await;
        measure(
            "V6. click + screenshot (the screenshot waits for the answer to the click's fence)",
            reps,
            "minus V3 = what the fence costs",
            |i| {
                let p = provider.clone();
                async move {
                    p.perform(&click_at(size, i)).await.expect("click");
                    std::hint::black_box(p.screenshot().await.expect("capture"));
                }
            },
        )
        .await;
        measure(
            "V5. step without waiting: click + screenshot + scale + encode",
            reps,
            "no settling; the screenshot waits for the click's fence, the click's effect may come later",
            |i| {
                let p = provider.clone();
                async move {
                    p.perform(&click_at(size, i)).await.expect("click");
                    let frame = p.screenshot().await.expect("capture");
                    tokio::task::spawn_blocking(move || prepare(&frame, target)).await.expect("prepare");
                }
            },
        )
        .await;
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let display = value("--display").or_else(|| std::env::var("DISPLAY").ok()).expect("--display :N or $DISPLAY");
    let reps: usize = value("--reps").and_then(|v| v.parse().ok()).unwrap_or(30);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    println!(
        "agentd desktop step benchmark: display {display}, {reps} reps (+2 warm-up), {} cores, release={}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        !cfg!(debug_assertions)
    );
    runtime.block_on(bench_local(&display, reps));
    if !args.iter().any(|a| a == "--no-vnc") {
        let port = testing::free_port().expect("port");
        match testing::x11vnc(&display, port, None) {
            Ok(_x11vnc) => {
                runtime.block_on(bench_vnc(&format!("x11vnc on {display}"), &format!("127.0.0.1:{port}"), None, reps));
            }
            Err(e) => println!("\nx11vnc: not run ({e})"),
        }
    }
    if args.iter().any(|a| a == "--xvnc") {
        let size = runtime
            .block_on(async {
                LocalProvider::open(LocalConfig::new(Some(display.clone())))
                    .await
                    .expect("local provider")
                    .screen_size()
                    .await
            })
            .expect("size");
        let port = testing::free_port().expect("port");
        match XServer::xvnc(size.width, size.height, port, None) {
            Ok(_xvnc) => {
                runtime.block_on(bench_vnc("TigerVNC Xvnc (empty desktop)", &format!("127.0.0.1:{port}"), None, reps))
            }
            Err(e) => println!("\nXvnc: not run ({e})"),
        }
    }
}
