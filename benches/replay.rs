//! Record → replay (docs/replay-and-verify.md): the form example (mock desktop scene `form`) recorded with the
//! Anthropic fake
//! (the real wire format, `--latency-ms` per call, default 1500: a realistic think time) and replayed on a
//! fresh mock desktop without a model. Prints both runs side by side — wall time, model calls, cost, whether
//! the final `computer_state` is the same — and the comparison's cost per step (decode the live PNG, reduce it
//! to its grid, compare with the recorded signature), over `--rounds` repetitions (default 50).
//!
//! `cargo bench --bench replay` (add `-- --latency-ms 1500 --rounds 50`).

#[path = "support/mod.rs"]
mod support;

use support::{arg, percentile};

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentd::artifacts::{ArtifactStore, FsStore};
use agentd::config::Config;
use agentd::library::Agent;
use agentd::model::Shared;
use agentd::model::replay::match_step;
use agentd::record::RECORD_VERSION;
use agentd::screen::compare::{self, DEFAULT_TOLERANCE};
use agentd::status::TaskRecord;
use agentd::task::{TaskId, TaskSpec};
use agentd_testkit::fake::{self, FakeServer, Vendor};
use serde_json::{Value, json};
use time::OffsetDateTime;

const KEY: &str = "sk-bench";

fn form_task(id: &str, replay: Option<Value>) -> TaskSpec {
    let mut task = json!({
        "id": id,
        "instructions": "Create an account for Zoë Martín (zoe@example.com, Acme GmbH) in Canada on the Team plan with 10 seats, after reading and accepting the terms",
        "computer": {"provider": "mock", "scene": "form"},
        "model": {"provider": "anthropic", "model": "claude-sonnet-4-5"},
        "limits": {"max_steps": 15, "timeout_secs": 300}
    });
    if let Some(replay) = replay {
        task["replay"] = replay;
    }
    TaskSpec::parse(&task.to_string(), "bench").expect("task")
}

#[tokio::main]
async fn main() {
    let latency = Duration::from_millis(arg("--latency-ms", 1500) as u64);
    let rounds = arg("--rounds", 50);
    let turns: Vec<Vec<Value>> = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/replay/anthropic-form.json"))
            .expect("anthropic-form.json"),
    )
    .expect("turns");
    let usage = json!({"input_tokens": 2500, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 120});
    let server = FakeServer::start_with_latency(
        Vendor::Anthropic { key: KEY.into() },
        fake::anthropic_turns(turns, usage),
        latency,
    )
    .await
    .expect("fake");
    let dir = tempfile::tempdir().expect("tempdir");
    let text = format!(
        "data_dir = {:?}\n[models.anthropic]\nbase_url = {:?}\n",
        dir.path().join("data").display().to_string(),
        server.url
    );
    let config: Config = agentd::config::parse(&text, "bench", &[]).expect("config");
    let models = Arc::new(Shared::with_env(
        &config,
        Arc::new(|name: &str| (name == "ANTHROPIC_API_KEY").then(|| KEY.to_string())),
    ));
    let store: Arc<dyn ArtifactStore> = Arc::new(FsStore::new(dir.path().join("data/artifacts")));

    // The recording.
    let started = Instant::now();
    let agent = Agent::builder()
        .task(form_task("form-rec", None))
        .task_id(TaskId::parse("form-rec").expect("id"))
        .config(config.clone())
        .shared_models(models.clone())
        .data_dir(dir.path().join("data"))
        .artifact_store(store.clone())
        .build()
        .await
        .expect("agent");
    let recorded = agent.run().finish().await;
    let record_time = started.elapsed();
    assert!(recorded.outcome.success, "{:?}", recorded.outcome);
    let record_calls = server.requests().len();
    let record = TaskRecord {
        version: RECORD_VERSION,
        id: "form-rec".into(),
        state: recorded.outcome.state(),
        created_at: OffsetDateTime::now_utc(),
        started_at: None,
        finished_at: None,
        attempt: 1,
        worker: None,
        task: form_task("form-rec", None),
        outcome: Some(recorded.outcome.clone()),
        usage: recorded.usage,
        steps: recorded.steps.clone(),
        final_screenshot: recorded.final_screenshot.clone(),
        computer_state: recorded.computer_state.clone(),
        waiting_reason: None,
        pending_tool_calls: Vec::new(),
        replay: None,
        waiting: None,
        turns: Vec::new(),
        taken_over: false,
        desktop: None,
        desktop_failure: None,
    };

    // The replay, on a fresh desktop.
    let started = Instant::now();
    let agent = Agent::builder()
        .task(form_task("form-replay", Some(json!({"of": "form-rec"}))))
        .task_id(TaskId::parse("form-replay").expect("id"))
        .config(config.clone())
        .shared_models(models.clone())
        .replay_recording(record.clone())
        .data_dir(dir.path().join("data"))
        .artifact_store(store.clone())
        .build()
        .await
        .expect("replay agent");
    let replayed = agent.run().finish().await;
    let replay_time = started.elapsed();
    assert!(replayed.outcome.success, "{:?}", replayed.outcome);
    let replay_calls = server.requests().len() - record_calls;
    let same = replayed.computer_state == recorded.computer_state;

    // The comparison per step: decode the live screenshot, reduce it, compare.
    let mut pngs = Vec::new();
    for step in &record.steps {
        pngs.push(store.get(&step.screenshot.key).await.expect("screenshot"));
    }
    let signatures: Vec<_> =
        pngs.iter().map(|png| compare::signature(&agentd::screen::image::decode_png(png).expect("png"))).collect();
    let mut per_step = Vec::new();
    let mut grid_only = Vec::new();
    for _ in 0..rounds {
        for (png, signature) in pngs.iter().zip(&signatures) {
            let t = Instant::now();
            let matched = match_step(signature, png, &[], DEFAULT_TOLERANCE).expect("compare");
            per_step.push(t.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(matched.score, 1.0);
            let frame = agentd::screen::image::decode_png(png).expect("png");
            let t = Instant::now();
            let live = compare::signature(&frame);
            let _ = compare::compare(signature, &live, &[], DEFAULT_TOLERANCE);
            grid_only.push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    per_step.sort_by(f64::total_cmp);
    grid_only.sort_by(f64::total_cmp);

    println!(
        "replay of the form ({} steps, Anthropic fake at {} ms per call)",
        record.steps.len(),
        latency.as_millis()
    );
    println!("{:<10} {:>10} {:>12} {:>10}", "run", "wall (s)", "model calls", "cost ($)");
    println!(
        "{:<10} {:>10.2} {:>12} {:>10.4}",
        "recorded",
        record_time.as_secs_f64(),
        record_calls,
        recorded.usage.cost_usd
    );
    println!(
        "{:<10} {:>10.2} {:>12} {:>10.4}",
        "replayed",
        replay_time.as_secs_f64(),
        replay_calls,
        replayed.usage.cost_usd
    );
    println!(
        "speed-up: {:.1}x; same final computer_state: {same}",
        record_time.as_secs_f64() / replay_time.as_secs_f64()
    );
    println!(
        "comparison per step (1280x800): decode + grid + compare p50 {:.2} ms, p99 {:.2} ms; grid + compare alone p50 {:.2} ms ({} samples)",
        percentile(&per_step, 50.0),
        percentile(&per_step, 99.0),
        percentile(&grid_only, 50.0),
        per_step.len()
    );
}
