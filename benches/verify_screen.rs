//! The `screen` verifier check's matcher (docs/replay-and-verify.md) on the mock desktop's real 1280×800 login screen:
//! a reference
//! found anywhere (the coarse-to-fine search), within a region, and a reference that is not there (the
//! search's worst case: every candidate refined). Prints median and p95 in ms; no assertions.
//!
//! ```text
//! cargo bench --bench verify_screen [-- --reps N]
//! ```

use std::time::Instant;

use agentd::verify::screen::{Area, find};
use agentd_computer::{ComputerProvider, Point, Size};

fn main() {
    let reps = std::env::args().skip_while(|a| a != "--reps").nth(1).and_then(|n| n.parse().ok()).unwrap_or(30usize);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let desktop = agentd_mock::MockDesktop::new(
        agentd_mock::Scene::resolve("login", None).expect("scene"),
        Some(Size::new(1280, 800)),
    )
    .expect("desktop");
    let screen = runtime.block_on(desktop.screenshot()).expect("screenshot");
    let cases = [
        ("form 360x120, anywhere", Point::new(460, 330), Size::new(360, 120), None),
        ("button 96x32, anywhere", Point::new(450, 507), Size::new(96, 32), None),
        (
            "form 360x120, in a 500x200 region",
            Point::new(460, 330),
            Size::new(360, 120),
            Some(Area { x: 400, y: 300, width: 500, height: 200 }),
        ),
    ];
    for (name, at, size, region) in cases {
        let reference = screen.crop(at, size);
        report(name, reps, || find(&screen, &reference, region).expect("found").score);
    }
    // Not on the screen: the welcome text's colours inverted.
    let mut inverted = screen.crop(Point::new(460, 330), Size::new(360, 120)).into_rgb();
    inverted.iter_mut().for_each(|p| *p = 255 - *p);
    let absent = agentd_computer::Frame::from_rgb(Size::new(360, 120), inverted).expect("frame");
    report("absent 360x120, anywhere", reps, || find(&screen, &absent, None).expect("searched").score);
}

fn report(name: &str, reps: usize, mut f: impl FnMut() -> f64) {
    let mut times = Vec::with_capacity(reps);
    let mut score = 0.0;
    for _ in 0..reps {
        let started = Instant::now();
        score = f();
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((q * times.len() as f64).ceil() as usize).clamp(1, times.len()) - 1];
    println!("{name:<36} median {:7.2} ms  p95 {:7.2} ms  score {score:.4}", at(0.5), at(0.95));
}
