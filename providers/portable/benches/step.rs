//! Step cost of the portable provider beside the X11 provider, on Xvfb: a *step* here is one click and the
//! screenshot after it (what the agent loop asks of a computer per action, minus settle, encoding and the
//! model), at 1280x800 and 1920x1080. Each size runs on an Xvfb of its own, started here. Prints median and
//! p95 in ms (nearest rank) per provider and size, plus capture alone; no assertions.
//!
//! ```text
//! cargo bench -p agentd-portable --bench step             # release (bench profile)
//! cargo bench -p agentd-portable --bench step -- --reps 50
//! ```
//!
//! xcap reads `$DISPLAY`, so the benchmark points it at each server in turn (one thread runs everything).

use std::time::Instant;

use agentd_computer::{Action, ComputerProvider, MouseButton};
use agentd_local::testing::XServer;
use agentd_local::{LocalConfig, LocalProvider};
use agentd_portable::{PortableConfig, PortableProvider};

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

async fn measure<F, Fut>(name: &str, reps: usize, mut f: F)
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
    ms.sort_by(f64::total_cmp);
    println!("| {name} | {:.2} | {:.2} |", percentile(&ms, 50.0), percentile(&ms, 95.0));
}

fn click(i: usize) -> Action {
    // A different spot each time, so every step moves the pointer.
    let x = 100 + (i % 50) as i32 * 7;
    Action::Click { x, y: 300, button: MouseButton::Left, keys: Vec::new() }
}

async fn step(provider: &dyn ComputerProvider, i: usize) {
    provider.perform(&click(i)).await.expect("click");
    provider.screenshot().await.expect("capture");
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let reps = args
        .iter()
        .position(|a| a == "--reps")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(30);
    if std::process::Command::new("Xvfb").arg("-help").output().is_err() {
        eprintln!("skipped: Xvfb is not installed");
        return;
    }
    println!("| figure (reps {reps}) | median ms | p95 ms |");
    println!("|---|---|---|");
    for (width, height) in [(1280, 800), (1920, 1080)] {
        let server = XServer::xvfb(width, height).expect("Xvfb");
        // SAFETY: this benchmark runs on one thread, and the previous size's providers are dropped.
        unsafe { std::env::set_var("DISPLAY", &server.display) };
        let portable = PortableProvider::open(PortableConfig::default()).await.expect("portable provider");
        let local = LocalProvider::open(LocalConfig::new(Some(server.display.clone()))).await.expect("local provider");
        let size = format!("{width}x{height}");
        measure(&format!("portable step (click + screenshot) {size}"), reps, |i| step(&portable, i)).await;
        measure(&format!("local step (click + screenshot) {size}"), reps, |i| step(&local, i)).await;
        measure(&format!("portable screenshot {size}"), reps, |_| async {
            portable.screenshot().await.expect("capture");
        })
        .await;
        measure(&format!("local screenshot {size}"), reps, |_| async {
            local.screenshot().await.expect("capture");
        })
        .await;
        let (p, l) = (&portable, &local);
        measure(&format!("portable click {size}"), reps, move |i| async move {
            p.perform(&click(i)).await.expect("click");
        })
        .await;
        measure(&format!("local click {size}"), reps, move |i| async move {
            l.perform(&click(i)).await.expect("click");
        })
        .await;
    }
}
