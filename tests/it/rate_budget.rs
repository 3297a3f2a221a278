//! The model vendors' per-minute budgets shared by a fleet (docs/models.md, Rate limits): three nodes on one
//! PostgreSQL against a model stand-in that counts what it is sent. Together the nodes stay within one
//! request budget; a 429 with `retry-after` answered to one node pauses every node's calls.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agentd_testkit::fake::{self, FakeServer, Recorded, Reply, Vendor};
use serde_json::json;

use crate::support::{Daemon, PgSchema, http, postgres_url};

/// A model that never finishes: every answer moves the pointer and asks for the next turn.
fn moving(n: usize) -> Reply {
    let usage = json!({"prompt_tokens": 900, "completion_tokens": 20});
    fake::compatible_reply("moving", &[(&format!("c{n}"), "move", json!({"x": 10 + n % 500, "y": 20}))], usage)
}

/// Three nodes on `schema`, each with two workers and `models` as its `[models.openai-compatible]` lines.
fn three_nodes(schema: &PgSchema, server: &FakeServer, models: &str) -> Vec<Daemon> {
    let queue =
        format!("backend = \"postgres\"\nurl = {:?}\nlease_secs = 3\nheartbeat_secs = 1\npoll_ms = 100", schema.url());
    let extra = format!(
        "[worker]\nconcurrency = 2\n[models.openai-compatible]\nbase_url = \"{}/v1\"\nmodel = \"fake\"\nmax_retries = 0\n{models}\n",
        server.url
    );
    (0..3).map(|_| Daemon::start_with("", &queue, &extra)).collect()
}

/// Submits six never-ending tasks through the nodes in turn.
fn submit_six(nodes: &[Daemon]) -> Vec<String> {
    (0..6)
        .map(|i| {
            let id = format!("budget-{i}");
            let task = json!({"id": id, "instructions": "look around", "computer": {"provider": "mock", "scene": "login"},
                "model": {"provider": "openai-compatible"}, "limits": {"max_steps": 1000, "timeout_secs": 300}});
            let (status, body) = http(&nodes[i % 3].socket, "POST", "/v1/tasks", Some(task.to_string().as_bytes()), &[])
                .expect("submit");
            assert_eq!(status, 201, "{body}");
            id
        })
        .collect()
}

/// A model stand-in answering request n with `answer(n)`, three nodes on `schema` with `models` (see
/// [`three_nodes`]), and six never-ending tasks submitted to them.
async fn fleet(
    schema: &PgSchema,
    models: &str,
    answer: impl Fn(usize) -> Reply + Send + 'static,
) -> (FakeServer, Vec<Daemon>, Vec<String>) {
    let turn = Arc::new(AtomicUsize::new(0));
    let server = FakeServer::start(
        Vendor::Compatible { key: None },
        Box::new(move |_: &Recorded| answer(turn.fetch_add(1, Ordering::SeqCst))),
    )
    .await
    .expect("start the stand-in");
    let nodes = tokio::task::block_in_place(|| three_nodes(schema, &server, models));
    let ids = tokio::task::block_in_place(|| submit_six(&nodes));
    (server, nodes, ids)
}

/// Waits (at most 60 s) until the stand-in has been sent `n` requests; what it was sent.
async fn requests_at_least(server: &FakeServer, n: usize, nodes: &[Daemon]) -> Vec<Recorded> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let requests = server.requests();
        if requests.len() >= n {
            return requests;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {n} requests in 60 s; a node's log:\n{}",
            requests.len(),
            nodes[0].log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The workers that have run the tasks, by the tasks' records.
fn workers(nodes: &[Daemon], ids: &[String]) -> std::collections::BTreeSet<String> {
    ids.iter()
        .filter_map(|id| {
            nodes[0].task(id)["worker"].as_str().map(|w| w.split(':').next_back().unwrap_or(w).to_string())
        })
        .collect()
}

fn cancel_all(nodes: &[Daemon], ids: &[String]) {
    for id in ids {
        let _ = http(&nodes[0].socket, "POST", &format!("/v1/tasks/{id}/cancel"), None, &[]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_stay_within_one_request_budget() {
    let _heavy = crate::support::heavy();
    let Some(postgres) = postgres_url() else { return };
    let schema = PgSchema::create(&postgres);
    // 12 a minute: 12 at once, then one every 5 s — for the fleet, not for each node.
    let (server, nodes, ids) = fleet(&schema, "requests_per_minute = 12", moving).await;
    let burst = requests_at_least(&server, 12, &nodes).await;
    let first = burst[0].at;
    // Eight seconds after the first request, the fleet may have sent the burst and at most two more (at 5 s
    // and 10 s after the burst was spent); each node on a budget of its own would have sent 12 at once.
    tokio::time::sleep_until(first + Duration::from_secs(8)).await;
    let sent: Vec<Duration> = server.requests().iter().map(|r| r.at - first).collect();
    let within: Vec<&Duration> = sent.iter().filter(|at| **at < Duration::from_secs(8)).collect();
    assert!((12..=14).contains(&within.len()), "{} requests in the first 8 s: {sent:?}", within.len());
    let running = tokio::task::block_in_place(|| workers(&nodes, &ids));
    assert!(running.len() >= 2, "the tasks ran on {running:?}: the budget was not put to a fleet");
    tokio::task::block_in_place(|| cancel_all(&nodes, &ids));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_with_retry_after_on_one_node_pauses_every_node() {
    let _heavy = crate::support::heavy();
    let Some(postgres) = postgres_url() else { return };
    let schema = PgSchema::create(&postgres);
    // The 30th request is answered 429 "retry after 2 s"; every other one moves the pointer. No per-minute
    // limits: only the vendor's wait is shared.
    let answer = |n: usize| {
        if n == 29 {
            Reply::error_with(
                429,
                &[("retry-after", "2")],
                json!({"error": {"message": "slow down", "type": "rate_limit"}}),
            )
        } else {
            moving(n)
        }
    };
    let (server, nodes, ids) = fleet(&schema, "", answer).await;
    let requests = requests_at_least(&server, 30, &nodes).await;
    let throttled = requests[29].at;
    tokio::time::sleep_until(throttled + Duration::from_secs(3)).await;
    let after: Vec<Duration> = server.requests().iter().skip(30).map(|r| r.at - throttled).collect();
    // Requests already admitted when the 429 was answered may still arrive at once; after those, none until
    // the 2 s have passed, from any node; then they go on.
    let during: Vec<&Duration> =
        after.iter().filter(|at| **at > Duration::from_millis(300) && **at < Duration::from_millis(1900)).collect();
    assert!(during.is_empty(), "requests during the pause: {after:?}");
    assert!(after.iter().any(|at| *at >= Duration::from_millis(1900)), "nothing after the pause: {after:?}");
    let running = tokio::task::block_in_place(|| workers(&nodes, &ids));
    assert!(running.len() >= 2, "the tasks ran on {running:?}: the pause was not put to a fleet");
    tokio::task::block_in_place(|| cancel_all(&nodes, &ids));
}
