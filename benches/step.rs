//! Per-step overhead of the agent loop on the mock desktop with the scripted model: screenshot, scale,
//! encode, store, journal, events and the action itself — everything but model latency (the scripted model
//! answers at once). Prints median and p95 per resolution, encoded bytes per screenshot, the cost of each
//! stage alone, and the peak memory of a 200-step task. Then the cost of declaring three custom tools (docs/tools.md):
//! the same task with three in-process tools declared (never called) against none, in alternating rounds,
//! and the time each vendor adapter spends building a request body with and without them.
//!
//! `cargo bench --bench step` (add `-- --steps N` to change the task length).

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentd::agent::events::EventSink;
use agentd::agent::journal::MemoryJournal;
use agentd::agent::{Attempt, Built, RunContext, run};
use agentd::artifacts::{FsStore, Uploader};
use agentd::model::anthropic::AnthropicModel;
use agentd::model::compatible::CompatibleModel;
use agentd::model::gemini::GeminiModel;
use agentd::model::openai::OpenAiModel;
use agentd::model::scripted::{Script, ScriptedModel};
use agentd::model::{DeltaSink, Model, ModelError, ModelImage, ModelRequest, ModelTurn, Shared, ToolSpec};
use agentd::record::events::EventKind;
use agentd::screen::coords::{CoordinateMap, fit_within};
use agentd::screen::image;
use agentd::task::{ComputerSpec, Limits, MockSpec, ModelOptions, ModelSpec, ResolvedTask, ScriptSource, ScriptedSpec};
use agentd::tools::{Tool, ToolContext, ToolOutcome, Toolbox};
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

/// An in-process tool that is declared but never called, with a schema of a realistic size.
struct Declared(&'static str);

#[async_trait]
impl Tool for Declared {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.0.to_string(),
            description: format!("Looks up {} records in the back office by number or customer name.", self.0),
            parameters: serde_json::json!({"type": "object", "properties": {
                "number": {"type": "string", "pattern": "^[0-9]{6}$", "description": "The record number"},
                "customer": {"type": "string", "description": "The customer's name"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50}},
                "required": ["number"], "additionalProperties": false}),
        }
    }

    async fn call(&self, _: serde_json::Value, _: ToolContext<'_>) -> ToolOutcome {
        ToolOutcome::ok("never called")
    }
}

fn three_tools() -> Toolbox {
    ["lookup_order", "lookup_invoice", "lookup_customer"]
        .into_iter()
        .try_fold(Toolbox::empty(), |toolbox, name| toolbox.with_tool(Arc::new(Declared(name))))
        .expect("three tools")
}

async fn whole_task(size: Size, scale_to: Option<Size>, steps: u32) -> Figures {
    whole_task_with(size, scale_to, steps, Toolbox::empty()).await
}

async fn whole_task_with(size: Size, scale_to: Option<Size>, steps: u32, tools: Toolbox) -> Figures {
    let scene = Scene::resolve("form", None).expect("form scene");
    let desktop = Arc::new(MockDesktop::new(scene, Some(size)).expect("desktop"));
    let model = Arc::new(Scaled { inner: ScriptedModel::new(script(steps, &desktop)), max: scale_to });
    let dir = tempfile::tempdir().expect("tempdir");
    let tracker = TaskTracker::new();
    let background = CancellationToken::new();
    let store = Arc::new(FsStore::new(dir.path().join("artifacts")));
    let uploader = Uploader::start(store, dir.path().join("spool"), 64, u64::MAX, &tracker, background.clone());
    let (events, mut rx) = EventSink::channel("bench", 1);
    let input = (
        Attempt {
            task: ResolvedTask {
                instructions: "benchmark".into(),
                computer: ComputerSpec::Mock(MockSpec::default()),
                model: ModelSpec::Scripted(ScriptedSpec {
                    script: ScriptSource::Path("bench".into()),
                    params: Default::default(),
                }),
                limits: Limits { max_steps: steps, timeout_secs: 3600, max_cost_usd: 1.0 },
                keep_screenshots: 3,
                history: Default::default(),
                tools: Vec::new(),
                output_schema: None,
                secrets: Default::default(),
                // The benchmark's steps repeat on purpose: the stuck-loop guard is off.
                guard: agentd::task::guard::Guard {
                    no_change_steps: 0,
                    repeat_actions: 0,
                    idle_turns: 0,
                    wait_steps: 0,
                },
                verify: Vec::new(),
                verify_retries: 2,
                ask_human: false,
                approval: Vec::new(),
            },
            settle: Default::default(),
            context: RunContext {
                task_id: "bench".into(),
                attempt: 1,
                uploader: uploader.clone(),
                journal: Arc::new(MemoryJournal::default()),
                events,
                cancel: CancellationToken::new(),
                shutdown: CancellationToken::new(),
                resume: Vec::new(),
                elapsed_before: Duration::ZERO,
                turns: Vec::new(),
                pause: Default::default(),
                handed_back: None,
            },
        },
        Built {
            computer: desktop as Arc<dyn ComputerProvider>,
            model,
            tools: Arc::new(tools),
            verifier: Default::default(),
        },
    );
    let collector = tokio::spawn(async move {
        let mut starts = Vec::new();
        let mut bytes = Vec::new();
        let mut rss_mid = 0;
        while let Some(event) = rx.recv().await {
            match event.kind {
                EventKind::StepStarted { step, .. } => {
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
    let output = run(input.0, input.1).await;
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

/// The loop with three declared tools against none: alternating rounds of the same task, every step pooled.
fn declared_tools(runtime: &tokio::runtime::Runtime, steps: u32) {
    let size = Size::new(1280, 800);
    let rounds = 5;
    let (mut none, mut three) = (Vec::new(), Vec::new());
    for round in 0..rounds * 2 {
        // Alternate which goes first, so drift (thermal, other load) falls on both.
        let with_tools = (round % 2 == 0) == (round / 2 % 2 == 0);
        let toolbox = if with_tools { three_tools() } else { Toolbox::empty() };
        let figures = runtime.block_on(whole_task_with(size, None, steps, toolbox));
        if with_tools { three.extend(figures.step_ms) } else { none.extend(figures.step_ms) }
    }
    none.sort_by(f64::total_cmp);
    three.sort_by(f64::total_cmp);
    let (m0, m3) = (percentile(&none, 50.0), percentile(&three, 50.0));
    println!(
        "custom tools, 1280x800, {rounds} rounds of {steps} steps each: step median {m0:.3} ms with none, {m3:.3} ms with \
         three declared ({:+.2} %); p95 {:.3} / {:.3} ms",
        (m3 / m0 - 1.0) * 100.0,
        percentile(&none, 95.0),
        percentile(&three, 95.0)
    );
}

/// Microseconds to build one request body, with the tools of `toolbox`, for each vendor adapter.
fn request_bodies() {
    let toml = "[models.openai-compatible]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"qwen2.5-vl\"\n";
    let config = agentd::config::parse(toml, "bench.toml", &[]).expect("config");
    let shared = Shared::with_env(&config, Arc::new(|_: &str| Some("sk-bench".to_string())));
    let options = |model: &str| ModelOptions { model: Some(model.into()), max_tokens: Some(1024), temperature: None };
    let frame = agentd_computer::Frame::from_rgb(Size::new(64, 40), vec![90; 64 * 40 * 3]).expect("frame");
    let screenshot = ModelImage::new(Size::new(64, 40), "image/png", image::encode_png(&frame).expect("png").into());
    let time = |body: &BodyFn, tools: &[ToolSpec]| {
        let runs = 2000;
        let started = Instant::now();
        for _ in 0..runs {
            std::hint::black_box(body(tools).to_string());
        }
        started.elapsed().as_secs_f64() * 1e6 / f64::from(runs)
    };
    let none = Toolbox::empty().specs();
    let three = three_tools().specs();
    let screenshot = &screenshot;
    let anthropic =
        AnthropicModel::new(shared.settings("anthropic", &options("claude-sonnet-4-5"), None, None).expect("settings"))
            .expect("anthropic");
    let openai = OpenAiModel::new(shared.settings("openai", &options("computer-use-preview"), None, None).expect("s"))
        .expect("openai");
    let gemini = GeminiModel::new(
        shared.settings("gemini", &options("gemini-2.5-computer-use-preview-10-2025"), None, None).expect("s"),
    )
    .expect("gemini");
    let compatible =
        CompatibleModel::new(shared.settings("openai-compatible", &ModelOptions::default(), None, None).expect("s"))
            .expect("compatible");
    let adapters: [(&str, Box<BodyFn>); 4] = [
        ("anthropic", Box::new(|t: &[ToolSpec]| anthropic.body(&first_request(t, screenshot)))),
        ("openai", Box::new(|t: &[ToolSpec]| openai.body(&first_request(t, screenshot)))),
        ("gemini", Box::new(|t: &[ToolSpec]| gemini.body(&first_request(t, screenshot)))),
        ("compatible", Box::new(|t: &[ToolSpec]| compatible.body(&first_request(t, screenshot)))),
    ];
    for (name, body) in &adapters {
        let (a, b) = (time(body.as_ref(), &none), time(body.as_ref(), &three));
        println!(
            "  request body ({name:>10}, first step, small screenshot): {a:.1} µs with none, {b:.1} µs with three (+{:.1} µs)",
            b - a
        );
    }
}

/// Builds one request body with these tools.
type BodyFn<'a> = dyn Fn(&[ToolSpec]) -> serde_json::Value + 'a;

/// A task's first request: no history, this screenshot, these tools.
fn first_request<'a>(tools: &'a [ToolSpec], screenshot: &'a ModelImage) -> ModelRequest<'a> {
    ModelRequest {
        instructions: "Read the order number from the screen, then look it up.",
        history: &[],
        screenshot,
        notes: &[],
        tools,
        screen: Size::new(1280, 800),
        browser: false,
        page: None,
        step: 0,
        summary: None,
    }
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
    declared_tools(&runtime, steps);
    request_bodies();
}
