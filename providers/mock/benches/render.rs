//! Render timings of the mock desktop: a full re-render, an unchanged screenshot (a copy of the cached frame),
//! and an action followed by a screenshot. Prints median and p95; asserts nothing.
//!
//! `cargo bench -p agentd-mock --bench render`

use std::time::{Duration, Instant};

use agentd_computer::{Action, Size};
use agentd_mock::{MockDesktop, Scene};

fn stats(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let median = samples[samples.len() / 2];
    let p95 = samples[samples.len() * 95 / 100];
    println!("{name:<48} median {:>8.3} ms   p95 {:>8.3} ms", ms(median), ms(p95));
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn time(iterations: usize, mut f: impl FnMut()) -> Vec<Duration> {
    for _ in 0..10 {
        f();
    }
    (0..iterations)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect()
}

fn main() {
    let start = Instant::now();
    let scene = Scene::builtin("form");
    println!("parse + validate the form scene: {:.2} ms", ms(start.elapsed()));
    if let Some(scene) = &scene
        && let Ok(desktop) = MockDesktop::new(scene.clone(), None)
    {
        let start = Instant::now();
        drop(desktop.frame());
        println!("first frame of the process (parses the fonts, fills the glyph cache): {:.1} ms", ms(start.elapsed()));
    }
    for (name, size) in
        [("form", Size::new(1280, 800)), ("login", Size::new(1280, 800)), ("form", Size::new(1920, 1080))]
    {
        let scene = match (name, &scene) {
            ("form", Some(form)) => form.clone(),
            _ => match Scene::builtin(name) {
                Some(scene) => scene,
                None => return,
            },
        };
        let desktop = match MockDesktop::new(scene, Some(size)) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("{e}");
                return;
            }
        };
        stats(&format!("{name} {size}: full render"), time(300, || drop(desktop.render_uncached())));
        stats(&format!("{name} {size}: screenshot, unchanged"), time(300, || drop(desktop.frame())));
        let mut x = 0;
        stats(
            &format!("{name} {size}: move + screenshot"),
            time(300, || {
                x = (x + 7) % 600;
                let _ = desktop.apply(&Action::Move { x: 300 + x, y: 300, keys: Vec::new() });
                drop(desktop.frame());
            }),
        );
    }
}
