//! Context cost of a 50-step task through the Anthropic adapter, with `keep_screenshots` 3 versus unlimited:
//! input tokens per call by step, and the prompt-cache hit ratio, as a fake Anthropic server counts them
//! (`agentd_testkit::fake::CacheSim`: text at 4 characters a token, images at w·h/750, Anthropic's prefix cache with
//! breakpoints and a 20-block lookback). The agent loop, the context policy and the adapter are the real
//! ones; the desktop is the mock (1280×800, so each screenshot costs 1365 tokens).
//!
//! `cargo bench --bench context_cost` prints the table and fails if, with 3 screenshots kept and chunk 1, the
//! input per call grows by more than the text of the new turns after step 3.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentd::agent::journal::MemoryJournal;
use agentd::agent::{LoopEnd, LoopInput, run};
use agentd::artifacts::{FsStore, Uploader};
use agentd::model::{Shared, Usage};
use agentd::task::{ComputerSpec, Limits, MockSpec, ModelSpec, ResolvedTask};
use agentd_computer::Size;
use agentd_mock::{MockDesktop, Scene};
use agentd_testkit::fake::{self, CacheSim, FakeServer, Vendor};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

const STEPS: usize = 50;

struct Run {
    label: String,
    /// Per call: (input, cache read, cache write) tokens, and screenshots in the request.
    calls: Vec<(u64, u64, u64, usize)>,
    /// Largest request body, in bytes.
    largest: usize,
    cost: f64,
}

fn images(body: &Value) -> usize {
    body.to_string().matches("\"type\":\"image\"").count()
}

async fn run_one(keep: u32, chunk: u32) -> Run {
    let sim = Arc::new(Mutex::new(CacheSim::default()));
    let calls = Arc::new(Mutex::new(Vec::new()));
    let largest = Arc::new(Mutex::new(0usize));
    let (sim2, calls2, largest2) = (sim.clone(), calls.clone(), largest.clone());
    let server = FakeServer::start(
        Vendor::Anthropic { key: "sk-bench".into() },
        Box::new(move |r| {
            let usage = sim2.lock().unwrap().usage(&r.body);
            let total = usage["input_tokens"].as_u64().unwrap_or(0)
                + usage["cache_read_input_tokens"].as_u64().unwrap_or(0)
                + usage["cache_creation_input_tokens"].as_u64().unwrap_or(0);
            largest2.lock().map(|mut l| *l = (*l).max(r.bytes)).ok();
            calls2.lock().unwrap().push((
                total,
                usage["cache_read_input_tokens"].as_u64().unwrap_or(0),
                usage["cache_creation_input_tokens"].as_u64().unwrap_or(0),
                images(&r.body),
            ));
            let step = r.body["messages"].as_array().map_or(0, |m| m.len() / 2);
            let content = if step + 1 < STEPS {
                vec![
                    json!({"type": "text", "text": format!("Step {}: I move the pointer to look at the form.", step + 1)}),
                    json!({"type": "tool_use", "id": format!("toolu_{step}"), "name": "computer",
                        "input": {"action": "mouse_move", "coordinate": [100 + (step % 7) as i32 * 50, 300]}}),
                ]
            } else {
                vec![json!({"type": "tool_use", "id": "toolu_done", "name": "task_completion",
                    "input": {"success": true, "summary": "looked around"}})]
            };
            fake::anthropic_reply(content, usage, true)
        }),
    )
    .await
    .expect("fake server");
    let toml = format!("[models.anthropic]\nbase_url = {:?}\nscreenshot_chunk = {chunk}\n", server.url);
    let config = agentd::config::parse(&toml, "bench.toml", &[]).expect("config");
    let shared = Shared::with_env(&config, Arc::new(|_: &str| Some("sk-bench".to_string())));
    let spec: ModelSpec =
        serde_json::from_value(json!({"provider": "anthropic", "model": "claude-sonnet-4-5"})).expect("spec");
    let model = agentd::backends::model(&spec, &shared, None).expect("model");
    let desktop = Arc::new(
        MockDesktop::new(Scene::resolve("form", None).expect("scene"), Some(Size::new(1280, 800))).expect("desktop"),
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let tracker = TaskTracker::new();
    let background = CancellationToken::new();
    let uploader = Uploader::start(
        Arc::new(FsStore::new(dir.path().join("a"))),
        dir.path().join("s"),
        64,
        u64::MAX,
        &tracker,
        background.clone(),
    );
    let (events, _rx) = agentd::agent::events::EventSink::channel("bench", 1);
    let output = run(LoopInput {
        task_id: "bench".into(),
        attempt: 1,
        task: ResolvedTask {
            instructions: "Look at the form for a while, then finish.".into(),
            computer: ComputerSpec::Mock(MockSpec::default()),
            model: spec,
            limits: Limits { max_steps: STEPS as u32 + 1, timeout_secs: 3600, max_cost_usd: 1000.0 },
            keep_screenshots: keep,
            history: Default::default(),
            tools: Vec::new(),
            output_schema: None,
            secrets: Default::default(),
            // The benchmark's steps repeat on purpose: the stuck-loop guard is off.
            guard: agentd::task::guard::Guard { no_change_steps: 0, repeat_actions: 0, idle_turns: 0 },
            verify: Vec::new(),
            verify_retries: 2,
        },
        computer: desktop,
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
        verifier: Default::default(),
    })
    .await;
    uploader.flush(Duration::from_secs(30)).await;
    background.cancel();
    tracker.close();
    tracker.wait().await;
    assert!(matches!(&output.end, LoopEnd::Finished(o) if o.success), "{:?}", output.end);
    let mut total = Usage::default();
    for step in &output.steps {
        total.add(&step.usage);
    }
    let label = if keep >= 1000 { "unlimited".to_string() } else { format!("keep {keep}, chunk {chunk}") };
    let calls = calls.lock().unwrap().clone();
    let largest = *largest.lock().unwrap();
    Run { label, calls, cost: total.cost_usd, largest }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let runs = runtime.block_on(async { vec![run_one(1000, 3).await, run_one(3, 1).await, run_one(3, 3).await] });
    println!("context cost of a {STEPS}-step task (anthropic adapter, 1280x800 screenshots = 1365 tokens each)\n");
    print!("{:>5}", "step");
    for r in &runs {
        print!(" | {:>30}", format!("{} (in/read/write, imgs)", r.label));
    }
    println!();
    for step in [1usize, 2, 3, 4, 5, 6, 10, 15, 20, 25, 30, 35, 40, 45, 50] {
        print!("{step:>5}");
        for r in &runs {
            let (input, read, write, imgs) = r.calls[step - 1];
            print!(" | {:>30}", format!("{input}/{read}/{write}, {imgs}"));
        }
        println!();
    }
    println!();
    let mut summary = BTreeMap::new();
    for r in &runs {
        let input: u64 = r.calls.iter().map(|c| c.0).sum();
        let read: u64 = r.calls.iter().map(|c| c.1).sum();
        let write: u64 = r.calls.iter().map(|c| c.2).sum();
        println!(
            "{:>18}: input tokens {input:>8}, cache reads {read:>8} ({:.0} % hit ratio), cache writes {write:>7}, \
             cost ${:.3} at Sonnet 4.5 prices, largest request {:.1} MB",
            r.label,
            100.0 * read as f64 / input as f64,
            r.cost,
            r.largest as f64 / 1e6
        );
        summary.insert(r.label.clone(), input);
    }
    // With 3 screenshots kept (chunk 1), the images per call stay at 3 from step 3 on, and the input per call
    // grows only by the text of the turns (far below one screenshot per step).
    let kept = &runs[1].calls;
    assert!(
        kept[2..].iter().all(|c| c.3 == 3),
        "screenshots per call: {:?}",
        kept.iter().map(|c| c.3).collect::<Vec<_>>()
    );
    let growth_per_step = (kept[STEPS - 1].0 - kept[2].0) as f64 / (STEPS - 3) as f64;
    println!(
        "\nkeep 3, chunk 1: input per call grows {growth_per_step:.0} tokens a step after step 3 (text only); unlimited grows by a screenshot a step"
    );
    assert!(growth_per_step < 200.0, "input per call grows {growth_per_step} tokens a step");
}
