//! Per-step overhead of the agent loop on the mock desktop with the scripted model: screenshot, scale,
//! encode, store, journal, events and the action itself — everything but model latency (the scripted model
//! answers at once). Prints median and p95 per resolution, encoded bytes per screenshot, the cost of each
//! stage alone, and the peak memory of a 200-step task.
//!
//! `cargo bench --bench step` (add `-- --steps N` to change the task length).

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentd::agent::events::EventSink;
use agentd::agent::journal::MemoryJournal;
use agentd::agent::{LoopInput, run};
use agentd::artifacts::{FsStore, Uploader};
use agentd::model::scripted::{Script, ScriptedModel};
use agentd::model::{DeltaSink, Model, ModelError, ModelRequest, ModelTurn};
use agentd::record::events::EventKind;
use agentd::screen::coords::{CoordinateMap, fit_within};
use agentd::screen::image;
use agentd::task::{ComputerSpec, Limits, MockSpec, ModelSpec, ResolvedTask, ScriptSource, ScriptedSpec};
use agentd_computer::{ComputerProvider, Size};
use agentd_mock::{MockDesktop, Scene};
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The scripted model, shown a screenshot scaled to fit `max` (as the Anthropic adapter does at 1080p).
struct Scaled {
    inner: ScriptedModel,
    max: Option<Size>,
}

#[async_trait]
impl Model for Scaled {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn coordinates(&self, screen: Size) -> CoordinateMap {
        match self.max {
            Some(max) => CoordinateMap::scaled(screen, fit_within(screen, max)),
            None => CoordinateMap::identity(screen),
        }
    }
    async fn next_turn(&self, request: ModelRequest<'_>, deltas: DeltaSink<'_>) -> Result<ModelTurn, ModelError> {
        self.inner.next_turn(request, deltas).await
    }
}

/// A script that types into the form's fields and toggles things, so most steps change the screen.
fn script(steps: u32, desktop: &MockDesktop) -> Script {
    let field = desktop.widget_center("full_name").or_else(|| desktop.widget_center("name"));
    let (x, y) = field.map_or((100, 100), |p| (p.x, p.y));
    let turns: Vec<serde_json::Value> = (0..steps)
        .map(|i| match i % 4 {
            0 => serde_json::json!({"actions": [{"type": "click", "x": x, "y": y}]}),
            1 => serde_json::json!({"actions": [{"type": "type", "text": format!("step {i} ")}]}),
            2 => serde_json::json!({"actions": [{"type": "keypress", "keys": ["ctrl", "a"]}]}),
            _ => serde_json::json!({"actions": [{"type": "keypress", "keys": ["BackSpace"]}]}),
        })
        .collect();
    let json = serde_json::json!({ "turns": turns });
    Script::parse(&json.to_string(), "bench").expect("bench script")
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn current_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

struct Figures {
    step_ms: Vec<f64>,
    bytes: Vec<u64>,
    rss_mid_kib: u64,
    rss_end_kib: u64,
}

async fn whole_task(size: Size, scale_to: Option<Size>, steps: u32) -> Figures {
    let scene = Scene::resolve("form", None).expect("form scene");
    let desktop = Arc::new(MockDesktop::new(scene, Some(size)).expect("desktop"));
    let model = Arc::new(Scaled { inner: ScriptedModel::new(script(steps, &desktop)), max: scale_to });
    let dir = tempfile::tempdir().expect("tempdir");
    let tracker = TaskTracker::new();
    let background = CancellationToken::new();
    let store = Arc::new(FsStore::new(dir.path().join("artifacts")));
    let uploader = Uploader::start(store, dir.path().join("spool"), 64, u64::MAX, &tracker, background.clone());
    let (events, mut rx) = EventSink::channel("bench", 1);
    let input = LoopInput {
        task_id: "bench".into(),
        attempt: 1,
        task: ResolvedTask {
            instructions: "benchmark".into(),
            computer: ComputerSpec::Mock(MockSpec::default()),
            model: ModelSpec::Scripted(ScriptedSpec { script: ScriptSource::Path("bench".into()) }),
            limits: Limits { max_steps: steps, timeout_secs: 3600, max_cost_usd: 1.0 },
            keep_screenshots: 3,
            tools: Vec::new(),
            output_schema: None,
            secrets: Default::default(),
        },
        computer: desktop as Arc<dyn ComputerProvider>,
        model,
        tools: Arc::new(agentd::tools::Toolbox::empty()),
        uploader: uploader.clone(),
        journal: Arc::new(MemoryJournal::default()),
        events,
        cancel: CancellationToken::new(),
        shutdown: CancellationToken::new(),
        resume: Vec::new(),
        elapsed_before: Duration::ZERO,
        approved: false,
        settle: Default::default(),
    };
    let collector = tokio::spawn(async move {
        let mut starts = Vec::new();
        let mut bytes = Vec::new();
        let mut rss_mid = 0;
        while let Some(event) = rx.recv().await {
            match event.kind {
                EventKind::StepStarted { step } => {
                    starts.push(event.ts);
                    if step == steps / 4 {
                        rss_mid = current_rss_kib();
                    }
                }
                EventKind::ScreenshotSaved { bytes: b, .. } => bytes.push(b),
                _ => {}
            }
        }
        (starts, bytes, rss_mid)
    });
    let output = run(input).await;
    let end_ts = time::OffsetDateTime::now_utc();
    uploader.flush(Duration::from_secs(60)).await;
    let rss_end = current_rss_kib();
    drop(output);
    background.cancel();
    tracker.close();
    tracker.wait().await;
    let (mut starts, bytes, rss_mid) = collector.await.expect("collector");
    starts.push(end_ts);
    // Skip the first two steps (warm-up: glyph caches, allocator).
    let mut step_ms: Vec<f64> = starts.windows(2).skip(2).map(|w| (w[1] - w[0]).as_seconds_f64() * 1000.0).collect();
    step_ms.sort_by(f64::total_cmp);
    Figures { step_ms, bytes, rss_mid_kib: rss_mid, rss_end_kib: rss_end }
}

async fn stages(size: Size, scale_to: Option<Size>) {
    let scene = Scene::resolve("form", None).expect("form scene");
    let desktop = MockDesktop::new(scene, Some(size)).expect("desktop");
    let target = scale_to.map_or(size, |max| fit_within(size, max));
    let mut capture = Vec::new();
    let mut prepare = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        let frame = desktop.screenshot().await.expect("screenshot");
        capture.push(t.elapsed().as_secs_f64() * 1000.0);
        let t = Instant::now();
        let prepared = image::prepare(&frame, target).expect("prepare");
        prepare.push(t.elapsed().as_secs_f64() * 1000.0);
        std::hint::black_box(prepared);
    }
    capture.sort_by(f64::total_cmp);
    prepare.sort_by(f64::total_cmp);
    println!(
        "  stages: capture (unchanged screen) median {:.2} ms; scale+encode to {target} median {:.2} ms, p95 {:.2} ms",
        percentile(&capture, 50.0),
        percentile(&prepare, 50.0),
        percentile(&prepare, 95.0)
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let steps = args
        .iter()
        .position(|a| a == "--steps")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(200u32);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    println!(
        "agentd step overhead: mock desktop (form scene) + scripted model, {steps} steps, {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let cases = [
        ("1280x800", Size::new(1280, 800), None),
        ("1920x1080", Size::new(1920, 1080), None),
        ("1920x1080 → 1366x768", Size::new(1920, 1080), Some(Size::new(1366, 768))),
    ];
    for (name, size, scale_to) in cases {
        let figures = runtime.block_on(whole_task(size, scale_to, steps));
        let mean_bytes = figures.bytes.iter().sum::<u64>() as f64 / figures.bytes.len().max(1) as f64;
        println!(
            "{name:>22}: step median {:.2} ms, p95 {:.2} ms, max {:.2} ms; PNG {:.0} bytes/screenshot (n={})",
            percentile(&figures.step_ms, 50.0),
            percentile(&figures.step_ms, 95.0),
            figures.step_ms.last().copied().unwrap_or(f64::NAN),
            mean_bytes,
            figures.bytes.len(),
        );
        println!(
            "  memory: RSS {} KiB at step {}, {} KiB at the end ({} steps)",
            figures.rss_mid_kib,
            steps / 4,
            figures.rss_end_kib,
            steps
        );
        runtime.block_on(stages(size, scale_to));
    }
    println!("peak RSS of the whole benchmark: {} KiB", peak_rss_kib());
}
