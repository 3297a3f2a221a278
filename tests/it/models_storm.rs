//! The retry storm: 8 tasks at once share one Anthropic limiter while the fake server answers 30 % of first
//! attempts with 529 (no `retry-after`, as recorded), then every request with 429 `retry-after: 5` for 30 s.
//! No task may fail, and in the 429 phase the process as a whole must send no faster than `retry-after`
//! allows: one request per 5 s after the requests already in flight when the storm began. Measured with the
//! fake server's own clock, on tokio's paused clock (virtual time: the test takes no 30 s).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentd::agent::Ending;
use agentd::backends;
use agentd_computer::Size;
use agentd_mock::{MockDesktop, Scene};
use agentd_testkit::fake::{self, FakeServer, Reply, Vendor};
use serde_json::json;
use tokio::time::Instant;

use crate::models::{shared_for, spec, task, turns_in};

const TASKS: usize = 8;
const STEPS: usize = 12;
const PHASE_429: (Duration, Duration) = (Duration::from_secs(10), Duration::from_secs(40));
const RETRY_AFTER: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_storm_is_not_multiplied_by_the_number_of_tasks() {
    let start = Instant::now();
    let log: Arc<Mutex<Vec<(Instant, u16)>>> = Arc::new(Mutex::new(Vec::new()));
    // Distinct request bodies in order of arrival, and how often each came: the n-th distinct body fails its
    // first attempt with 529 when n % 10 is 0, 3 or 6 — 30 % of first attempts, deterministically.
    let attempts: Mutex<HashMap<u64, (usize, u32)>> = Mutex::new(HashMap::new());
    let record = log.clone();
    let server = FakeServer::start(
        Vendor::Anthropic { key: crate::models::KEY.into() },
        Box::new(move |r| {
            let now = r.at - start;
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            r.body.to_string().hash(&mut hasher);
            let hash = hasher.finish();
            let (nth, attempt) = {
                let mut attempts = attempts.lock().unwrap();
                let distinct = attempts.len();
                let entry = attempts.entry(hash).or_insert((distinct, 0));
                entry.1 += 1;
                *entry
            };
            let (status, reply) = if now >= PHASE_429.0 && now < PHASE_429.1 {
                (429, Reply::error_with(429, &[("retry-after", "5")],
                    json!({"type": "error", "error": {"type": "rate_limit_error", "message": "Number of requests has exceeded your rate limit"}})))
            } else if now < PHASE_429.0 && attempt == 1 && matches!(nth % 10, 0 | 3 | 6) {
                (529, Reply::error_with(529, &[("x-should-retry", "true")],
                    json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})))
            } else {
                let content = if turns_in(r) + 1 < STEPS {
                    vec![json!({"type": "tool_use", "id": format!("toolu_{}", r.index), "name": "computer",
                        "input": {"action": "wait", "duration": 2}})]
                } else {
                    vec![json!({"type": "tool_use", "id": format!("toolu_{}", r.index), "name": "task_completion",
                        "input": {"success": true, "summary": "waited"}})]
                };
                (200, fake::anthropic_reply(content, json!({"input_tokens": 100, "output_tokens": 10}), true))
            };
            record.lock().unwrap().push((r.at, status));
            reply
        }),
    )
    .await
    .unwrap();
    // One Shared for the whole "process": every task's model draws from the same limiter.
    let shared = shared_for("anthropic", &server.url, "");
    let model_spec = spec(json!({"provider": "anthropic", "model": "claude-haiku-4-5"}));
    let runs = (0..TASKS).map(|i| {
        let model = backends::model(&model_spec, &shared, None).unwrap();
        let desktop =
            Arc::new(MockDesktop::new(Scene::resolve("blank", None).unwrap(), Some(Size::new(640, 400))).unwrap());
        let mut task = task(model_spec.clone(), STEPS as u32 + 5, 3);
        task.instructions = format!("storm task {i}");
        // Every turn waits on a blank screen: the stuck-loop guard would rightly end it.
        task.guard.no_change_steps = 0;
        crate::models::run_task(task, model, desktop)
    });
    let outputs = futures_util::future::join_all(runs).await;
    assert!(server.problems().is_empty(), "{:#?}", server.problems());
    for (i, (output, _)) in outputs.iter().enumerate() {
        assert!(matches!(&output.ending, Ending::Finished(o) if o.success), "task {i}: {:?}", output.ending);
        assert_eq!(output.steps.len(), STEPS, "task {i}");
    }

    let log = log.lock().unwrap().clone();
    let overloaded = log.iter().filter(|(_, s)| *s == 529).count();
    let first_phase = log.iter().filter(|(at, _)| *at - start < PHASE_429.0).count();
    // 30 % of first attempts: 3 in 13 requests once the retries are counted.
    assert!(overloaded * 5 >= first_phase && overloaded * 3 <= first_phase, "{overloaded} of {first_phase} were 529");

    let throttled: Vec<Instant> = log.iter().filter(|(_, s)| *s == 429).map(|(at, _)| *at).collect();
    let first = throttled[0];
    let burst = throttled.iter().filter(|at| **at == first).count();
    let after: Vec<Instant> = throttled.iter().copied().filter(|at| *at > first).collect();
    let window = start + PHASE_429.1 - first;
    let allowed = window.as_secs_f64() / RETRY_AFTER.as_secs_f64();
    println!(
        "storm: {} requests; 529: {overloaded}; 429 phase: {burst} in flight at its start, then {} over {:.0} s \
         (retry-after allows {allowed:.1})",
        log.len(),
        after.len(),
        window.as_secs_f64()
    );
    assert!(burst <= TASKS);
    assert!(after.len() as f64 <= 1.2 * allowed.ceil(), "{} requests where {allowed:.1} are allowed", after.len());
    // Each request after the first wave came no sooner than retry-after after the one before.
    let mut previous = first;
    for at in &after {
        assert!(*at - previous >= RETRY_AFTER, "{:?} after the previous 429", *at - previous);
        previous = *at;
    }
    // The first request after the storm is the probe: one request, then the others follow.
    let resumed = log.iter().filter(|(at, s)| *s == 200 && *at - start >= PHASE_429.1).count();
    assert!(resumed >= TASKS, "every task finished after the storm");
}
