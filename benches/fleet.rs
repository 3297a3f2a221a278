//! Fleet mode under load: 1, 2 and 3 real worker nodes (`agentd serve`) sharing one PostgreSQL queue, with
//! wake-ups by LISTEN/NOTIFY and by polling alone (`queue.listen = false`, `poll_ms` 1000, the default).
//! Tasks are submitted through one more node that cannot run them (they carry a label only the worker
//! nodes have), as when clients talk to any node of a fleet: a worker learns of a task from the queue, not
//! from its own API. For each setting it prints:
//! - submit→start latency with idle workers (tasks submitted one at a time, each waited for), p50 and p99;
//! - tasks and steps per second for a burst of tasks (5 steps each, mock desktop 640x480, scripted model),
//!   and submit→start p50/p99 within the burst (which includes waiting for a free worker).
//!
//! Latencies come from the status documents (`started_at - created_at`, both from the database clock).
//!
//! Needs PostgreSQL: `AGENTD_BENCH_POSTGRES_URL`, else `AGENTD_TEST_POSTGRES_URL`. Artifacts go to each
//! node's filesystem store, so the figures are the queue's and the daemon's, not S3's. Each run uses a fresh
//! schema. `cargo bench --bench fleet -- --tasks 300 --idle 40 --concurrency 4`.

#[path = "support/mod.rs"]
mod support;

use support::{arg, percentile};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agentd::cli::client::{Client, Endpoint};
use hyper::Method;

struct Node {
    child: Child,
    socket: PathBuf,
}

impl Drop for Node {
    fn drop(&mut self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

fn start_node(dir: &Path, index: usize, url: &str, concurrency: usize, listen: bool, labels: &str) -> Node {
    let home = dir.join(format!("node-{index}"));
    std::fs::create_dir_all(&home).expect("node dir");
    let socket = home.join("agentd.sock");
    let poll_ms = 1000;
    let config = format!(
        "data_dir = {:?}\n[api]\nsocket = {:?}\n[queue]\nbackend = \"postgres\"\nurl = {url:?}\nlisten = {listen}\n\
         poll_ms = {poll_ms}\n[worker]\nconcurrency = {concurrency}\nlabels = {labels}\n",
        home.join("data").display().to_string(),
        socket.display().to_string(),
    );
    std::fs::write(home.join("agentd.toml"), config).expect("config");
    let log = std::fs::File::create(home.join("serve.log")).expect("log");
    let child = Command::new(env!("CARGO_BIN_EXE_agentd"))
        .arg("--config")
        .arg(home.join("agentd.toml"))
        .arg("serve")
        .env("AGENTD_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn agentd serve");
    Node { child, socket }
}

async fn wait_healthy(client: &Client) {
    for _ in 0..400 {
        if let Ok((200, _)) = client.call(Method::GET, "/healthz", None).await.map(|(s, b)| (s.as_u16(), b)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("a node did not become healthy");
}

fn task(id: &str, steps: usize) -> Vec<u8> {
    let turns: Vec<serde_json::Value> = (0..steps)
        .map(|i| serde_json::json!({"actions": [{"type": "move", "x": 10 + i, "y": 10}]}))
        .chain(std::iter::once(serde_json::json!({"complete": {"success": true, "summary": "ok"}})))
        .collect();
    serde_json::json!({
        "id": id,
        "instructions": "benchmark",
        "computer": {"provider": "mock", "scene": "blank", "width": 640, "height": 480},
        "model": {"provider": "scripted", "script": {"turns": turns}},
        "labels": {"pool": "bench"},
    })
    .to_string()
    .into_bytes()
}

fn latency_ms(task: &serde_json::Value) -> Option<f64> {
    let parse = |field: &str| {
        task[field]
            .as_str()
            .and_then(|t| time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok())
    };
    Some((parse("started_at")? - parse("created_at")?).as_seconds_f64() * 1000.0)
}

async fn wait_done(client: &Client, id: &str) -> serde_json::Value {
    loop {
        let (_, task) = client.call(Method::GET, &format!("/v1/tasks/{id}"), None).await.expect("status");
        if ["succeeded", "failed", "cancelled"].contains(&task["state"].as_str().unwrap_or("")) {
            assert_eq!(task["state"], "succeeded", "{task}");
            return task;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn run(url: &str, nodes: usize, listen: bool, tasks: usize, idle: usize, concurrency: usize, steps: usize) {
    let schema = format!("agentd_bench_{}", uuid::Uuid::now_v7().simple());
    let admin = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(url).await.expect("connect");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&admin).await.expect("schema");
    let separator = if url.contains('?') { '&' } else { '?' };
    let node_url = format!("{url}{separator}options[search_path]={schema}");
    let dir = tempfile::tempdir().expect("tempdir");
    let workers = "{ pool = \"bench\" }";
    let fleet: Vec<Node> =
        (0..nodes).map(|i| start_node(dir.path(), i, &node_url, concurrency, listen, workers)).collect();
    let front_listens = std::env::var("FRONT_LISTEN").map_or(listen, |v| v == "1");
    let front_node = start_node(dir.path(), nodes, &node_url, 1, front_listens, "{}");
    let front = Client::new(Endpoint::Unix(front_node.socket.clone()));
    for node in fleet.iter().chain(std::iter::once(&front_node)) {
        wait_healthy(&Client::new(Endpoint::Unix(node.socket.clone()))).await;
    }
    // Let every node finish starting (its listener connected, its claim loop idle).
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Idle latency: one task at a time.
    let mut idle_latencies = Vec::new();
    for i in 0..idle {
        let id = format!("idle-{i}");
        front.call(Method::POST, "/v1/tasks", Some(task(&id, 1))).await.expect("submit");
        let done = wait_done(&front, &id).await;
        idle_latencies.extend(latency_ms(&done));
    }
    idle_latencies.sort_by(f64::total_cmp);

    // Throughput: a burst, submitted round-robin to the nodes.
    let started = Instant::now();
    let ids: Vec<String> = (0..tasks).map(|i| format!("burst-{i}")).collect();
    for id in &ids {
        front.call(Method::POST, "/v1/tasks", Some(task(id, steps))).await.expect("submit");
    }
    let mut latencies = Vec::with_capacity(tasks);
    let mut total_steps = 0;
    let mut used = std::collections::BTreeSet::new();
    for id in &ids {
        let done = wait_done(&front, id).await;
        total_steps += done["steps"].as_array().map_or(0, Vec::len);
        latencies.extend(latency_ms(&done));
        used.insert(done["worker"].as_str().unwrap_or_default().to_string());
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort_by(f64::total_cmp);
    println!(
        "| {nodes} | {} | {:.2} | {:.2} | {:.1} | {:.0} | {:.0} | {:.0} | {} |",
        if listen { "NOTIFY" } else { "poll 1 s" },
        percentile(&idle_latencies, 50.0),
        percentile(&idle_latencies, 99.0),
        tasks as f64 / elapsed,
        total_steps as f64 / elapsed,
        percentile(&latencies, 50.0),
        percentile(&latencies, 99.0),
        used.len(),
    );
    drop(fleet);
    drop(front_node);
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE"))).execute(&admin).await;
}

fn main() {
    let Some(url) = ["AGENTD_BENCH_POSTGRES_URL", "AGENTD_TEST_POSTGRES_URL"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|u| !u.is_empty()))
    else {
        eprintln!("fleet benchmark: set AGENTD_BENCH_POSTGRES_URL (or AGENTD_TEST_POSTGRES_URL) to a PostgreSQL URL");
        return;
    };
    let tasks = arg("--tasks", 300);
    let idle = arg("--idle", 40);
    let concurrency = arg("--concurrency", 4);
    let steps = arg("--steps", 5);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    println!(
        "agentd fleet benchmark: PostgreSQL queue, {concurrency} workers per node, mock desktop 640x480, scripted \
         model, {tasks} tasks x {steps} steps per burst, {idle} idle-latency samples; {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "| worker nodes | wake-up | idle submit→start p50 ms | p99 ms | burst tasks/s | steps/s | burst submit→start p50 ms | p99 ms | workers used |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let only_nodes = arg("--nodes", 0);
    let modes: &[bool] = match std::env::args().position(|a| a == "--notify-only") {
        Some(_) => &[true],
        None => &[true, false],
    };
    for &listen in modes {
        for nodes in [1, 2, 3].into_iter().filter(|n| only_nodes == 0 || *n == only_nodes) {
            runtime.block_on(run(&url, nodes, listen, tasks, idle, concurrency, steps));
        }
    }
}
