//! Fleet mode, end to end: several real `agentd serve` processes share one PostgreSQL queue and one S3
//! bucket (moto), run tasks on the mock desktop with the scripted model, and are hurt on purpose: nodes
//! SIGKILLed mid-run, PostgreSQL restarted, S3 unreachable for 60 s, a node frozen past its lease. The mock
//! desktops keep their state (and their own record of every action received) in a directory all nodes
//! share, as a real VM outlives the worker driving it, so a repeated action is visible.
//!
//! Needs `AGENTD_TEST_POSTGRES_URL` and `AGENTD_TEST_S3_ENDPOINT` (`./scripts/test` starts both); the
//! PostgreSQL restart runs on a server of its own, `AGENTD_TEST_PG_RESTART_URL`, which it stops and starts
//! with `AGENTD_TEST_PG_CTL`, so the tests beside it keep their connections. Each test uses a schema and a
//! bucket of its own; three daemons load the machine, so the tests never run beside timing-sensitive ones
//! (`support::heavy`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::{Daemon, http};

struct Services {
    postgres: String,
    s3: String,
}

fn services() -> Option<Services> {
    let postgres = std::env::var("AGENTD_TEST_POSTGRES_URL").ok().filter(|v| !v.is_empty());
    let s3 = std::env::var("AGENTD_TEST_S3_ENDPOINT").ok().filter(|v| !v.is_empty());
    match (postgres, s3) {
        (Some(postgres), Some(s3)) => Some(Services { postgres, s3 }),
        (postgres, s3) => {
            agentd_testenv::skip(format!(
                "fleet tests need PostgreSQL and S3 ({}{}); ./scripts/test starts both",
                if postgres.is_none() { "AGENTD_TEST_POSTGRES_URL is not set " } else { "" },
                if s3.is_none() { "AGENTD_TEST_S3_ENDPOINT is not set" } else { "" },
            ));
            None
        }
    }
}

fn unique(prefix: &str) -> String {
    format!("{prefix}{}", uuid::Uuid::now_v7().simple())
}

/// Runs SQL on the test server (schema set-up).
fn sql(url: &str, statement: String) {
    if let Err(e) = try_sql(url, statement) {
        panic!("{e}");
    }
}

/// How long one statement of [`try_sql`] may take, connecting included: the test server answers these in
/// milliseconds; only a server that is gone or stuck takes this long.
const SQL_WITHIN: Duration = Duration::from_secs(60);

/// Runs SQL on the test server, within [`SQL_WITHIN`].
fn try_sql(url: &str, statement: String) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    // The timeout is made inside the runtime (its timer needs one).
    let run = runtime.block_on(async {
        tokio::time::timeout(SQL_WITHIN, async {
            use sqlx::Connection;
            let mut conn =
                sqlx::PgConnection::connect(url).await.map_err(|e| format!("connect to the test PostgreSQL: {e}"))?;
            let done = sqlx::query(sqlx::AssertSqlSafe(statement.clone())).execute(&mut conn).await;
            let _ = conn.close().await;
            done.map(drop).map_err(|e| format!("{statement}: {e}"))
        })
        .await
    });
    run.unwrap_or_else(|_| Err(format!("{statement}: no answer from the test PostgreSQL within {SQL_WITHIN:?}")))
}

/// `host:port` of an `http://host:port` endpoint.
fn host_port(endpoint: &str) -> String {
    endpoint.trim_start_matches("http://").trim_end_matches('/').to_string()
}

/// A fleet: nodes sharing a schema of the test database, a bucket and the mock desktops' state.
struct Fleet {
    dir: tempfile::TempDir,
    postgres: String,
    schema: String,
    bucket: String,
    /// The S3 endpoint the nodes use (moto itself, or a fault proxy in front of it).
    nodes_s3: String,
    nodes: Vec<Daemon>,
}

impl Fleet {
    fn new(services: &Services, nodes_s3: Option<String>) -> Self {
        let schema = unique("agentd_fleet_");
        sql(&services.postgres, format!("CREATE SCHEMA {schema}"));
        let bucket = unique("fleet-");
        // moto takes an unsigned CreateBucket.
        let (status, body) =
            http(Path::new(&host_port(&services.s3)), "PUT", &format!("/{bucket}"), None, &[]).expect("create bucket");
        assert!(status == 200, "create bucket: {status} {body}");
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
            postgres: services.postgres.clone(),
            schema,
            bucket,
            nodes_s3: nodes_s3.unwrap_or_else(|| services.s3.clone()),
            nodes: Vec::new(),
        }
    }

    fn mock_dir(&self) -> PathBuf {
        self.dir.path().join("mock")
    }

    /// The config of one node, after `[queue]` (see `Daemon::start`).
    fn node_config(&self, concurrency: u32, extra_queue: &str) -> String {
        let separator = if self.postgres.contains('?') { '&' } else { '?' };
        format!(
            "backend = \"postgres\"\nurl = \"{}{separator}options[search_path]={}\"\nmax_attempts = 1000\n{extra_queue}\n\
             [worker]\nconcurrency = {concurrency}\nmock_state_dir = {:?}\n\
             [artifacts]\nbackend = \"s3\"\nbucket = \"{}\"\nprefix = \"fleet\"\nendpoint = \"{}\"\n\
             region = \"us-east-1\"\nforce_path_style = true\n",
            self.postgres,
            self.schema,
            self.mock_dir().display().to_string(),
            self.bucket,
            self.nodes_s3,
        )
    }

    /// Starts `count` nodes; `queue` replaces the test defaults of lease, heartbeat and poll ([`FAST_LEASES`])
    /// when not empty.
    fn start_nodes(&mut self, count: usize, concurrency: u32, queue: &str) {
        let queue = if queue.is_empty() { FAST_LEASES } else { queue };
        for _ in 0..count {
            let config = self.node_config(concurrency, "");
            self.nodes.push(Daemon::start_with("", queue, &config));
        }
    }

    fn submit(&self, node: usize, task: &serde_json::Value) {
        let body = task.to_string();
        let (status, reply) = http(&self.nodes[node].socket, "POST", "/v1/tasks", Some(body.as_bytes()), &[])
            .expect("submit over the API");
        assert_eq!(status, 201, "{reply}");
    }

    /// Every task of the queue, read through `node`'s API.
    fn tasks(&self, node: usize) -> Vec<serde_json::Value> {
        let (status, body) = http(&self.nodes[node].socket, "GET", "/v1/tasks?limit=10000", None, &[]).expect("list");
        assert_eq!(status, 200, "{body}");
        let list: serde_json::Value = serde_json::from_str(&body).expect("list JSON");
        list["tasks"].as_array().cloned().unwrap_or_default()
    }

    /// Waits until all `count` tasks are terminal, asking whichever node answers; fails after `timeout` with
    /// what the nodes last answered (also when none answered at all).
    fn wait_all_terminal(&self, count: usize, timeout: Duration) -> Vec<serde_json::Value> {
        let deadline = Instant::now() + timeout;
        let mut seen = String::from("no node answered yet");
        loop {
            for (i, node) in self.nodes.iter().enumerate().filter(|(_, n)| n.child.is_some()) {
                match http(&node.socket, "GET", "/v1/tasks?limit=10000", None, &[]) {
                    Ok((200, body)) => match serde_json::from_str::<serde_json::Value>(&body) {
                        Ok(list) => {
                            let tasks = list["tasks"].as_array().cloned().unwrap_or_default();
                            let done = tasks
                                .iter()
                                .filter(|t| {
                                    ["succeeded", "failed", "cancelled"].contains(&t["state"].as_str().unwrap_or(""))
                                })
                                .count();
                            if done >= count {
                                return tasks;
                            }
                            seen = format!("node {i}: {done} of {count} tasks finished; states {:?}", states(&tasks));
                            break;
                        }
                        Err(e) => seen = format!("node {i}: the task list is not JSON ({e}): {body}"),
                    },
                    Ok((status, body)) => seen = format!("node {i}: {status} {body}"),
                    Err(e) => seen = format!("node {i}: {e}"),
                }
            }
            assert!(Instant::now() < deadline, "after {timeout:?}: {seen}\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// What the nodes logged about a task, and the workers that started each of its attempts: why a task
    /// needed another attempt.
    fn history(&self, id: &str) -> String {
        let lines: String = self
            .nodes
            .iter()
            .enumerate()
            .flat_map(|(i, n)| {
                n.log().lines().filter(|l| l.contains(id)).map(|l| format!("node {i}: {l}\n")).collect::<Vec<_>>()
            })
            .collect();
        format!("--- {id}: attempts started by {:?}\n{lines}", self.attempt_workers(id))
    }

    fn logs(&self) -> String {
        self.nodes.iter().enumerate().map(|(i, n)| format!("--- node {i}\n{}", tail(&n.log(), 40))).collect()
    }

    /// The actions a task's mock desktop received, one line each.
    fn actions(&self, id: &str) -> Vec<String> {
        std::fs::read_to_string(self.mock_dir().join(id).join(agentd_mock::ACTIONS_FILE))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("\"move\""))
            .map(str::to_string)
            .collect()
    }

    /// Moves a task's desktop received more than once.
    fn repeated_actions(&self, ids: &[String]) -> BTreeMap<String, usize> {
        let mut repeated = BTreeMap::new();
        for id in ids {
            let mut seen: BTreeMap<String, usize> = BTreeMap::new();
            for line in self.actions(id) {
                *seen.entry(line).or_default() += 1;
            }
            for (line, count) in seen.into_iter().filter(|(_, c)| *c > 1) {
                repeated.insert(format!("{id}: {line}"), count);
            }
        }
        repeated
    }

    /// Checks every task's record and its desktop's own record of moves against the resume design
    /// ([`crate::crash::audit_moves`]): one step per turn with its move and a screenshot, no move twice, a move
    /// missing only where its step was in flight when an attempt died, at most one such step per attempt that
    /// died. `tasks` pairs each id with its script's number of turns ([`walking_task`]). Returns the moves
    /// skipped, the steps left in flight and the attempts after the first, over all tasks.
    fn assert_moves_complete(&self, tasks: &[(String, usize)]) -> (usize, usize, usize) {
        let (mut skipped, mut interrupted, mut resumed) = (0, 0, 0);
        let mut problems = Vec::new();
        for (i, (id, turns)) in tasks.iter().enumerate() {
            let task = self.nodes[i % self.nodes.len()].task(id);
            let log =
                std::fs::read_to_string(self.mock_dir().join(id).join(agentd_mock::ACTIONS_FILE)).unwrap_or_default();
            let expected: Vec<(i64, i64)> = (0..*turns as i64).map(|i| (5 + i, 7 + i / 3)).collect();
            match crate::crash::audit_moves(id, &task, &log, &expected) {
                Ok(audit) => {
                    skipped += audit.skipped.len();
                    interrupted += audit.interrupted.len();
                    resumed += audit.attempts.saturating_sub(1);
                }
                Err(problem) => problems.push(problem),
            }
        }
        assert!(problems.is_empty(), "{} tasks break the resume design:\n{}", problems.len(), problems.join("\n\n"));
        (skipped, interrupted, resumed)
    }

    /// Checks that every step screenshot (and final screenshot) of every task is in the bucket: each is
    /// fetched through a node's screenshot endpoint, which reads the object from S3 (never from a spool).
    /// Returns how many were checked.
    fn assert_screenshots_stored(&self, ids: &[String]) -> usize {
        let mut checked = 0;
        let mut missing = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            let node = &self.nodes[i % self.nodes.len()];
            let task = node.task(id);
            let steps = task["steps"].as_array().cloned().unwrap_or_default();
            let mut indexes: Vec<u64> = steps.iter().filter_map(|s| s["index"].as_u64()).collect();
            if task["final_screenshot"]["key"].is_string() {
                indexes.push(steps.len() as u64);
            }
            assert!(!indexes.is_empty(), "task {id} has no screenshots: {task}");
            for index in indexes {
                let path = format!("/v1/tasks/{id}/steps/{index}/screenshot");
                match http(&node.socket, "GET", &path, None, &[]) {
                    Ok((200, body)) if body.starts_with("\u{fffd}PNG") => checked += 1,
                    Ok((status, body)) => missing.push(format!("{path}: {status} {body}")),
                    Err(e) => missing.push(format!("{path}: {e}")),
                }
            }
        }
        assert!(
            missing.is_empty(),
            "{} screenshots not in the bucket: {:?}",
            missing.len(),
            &missing[..missing.len().min(10)]
        );
        checked
    }

    /// Waits until no node has artifacts left to upload.
    fn wait_uploads_drained(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        for node in self.nodes.iter().filter(|n| n.child.is_some()) {
            loop {
                let pending = http(&node.socket, "GET", "/healthz", None, &[])
                    .ok()
                    .and_then(|(_, body)| serde_json::from_str::<serde_json::Value>(&body).ok())
                    .and_then(|h| h["uploads_pending"].as_u64());
                if pending == Some(0) {
                    break;
                }
                assert!(Instant::now() < deadline, "uploads still pending ({pending:?}):\n{}", self.logs());
                std::thread::sleep(Duration::from_millis(250));
            }
        }
    }

    /// The workers that started each attempt of a task, from its events.
    fn attempt_workers(&self, id: &str) -> Vec<String> {
        let (_, body) = http(&self.nodes[0].socket, "GET", &format!("/v1/tasks/{id}/events?follow=false"), None, &[])
            .expect("events");
        body.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<serde_json::Value>(d.trim()).ok())
            .filter(|e| e["type"] == "task_started")
            .filter_map(|e| e["worker"].as_str().map(str::to_string))
            .collect()
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
        if let Err(e) = try_sql(&self.postgres, format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema)) {
            eprintln!("could not drop schema {}: {e}", self.schema);
        }
    }
}

/// Leases the tests that kill, freeze and cut nodes use, so that a dead node's task is rescued in seconds.
const FAST_LEASES: &str = "lease_secs = 3\nheartbeat_secs = 1\npoll_ms = 100";

/// The product's own lease and heartbeat (`[queue]` defaults): a lease lost under them is a fault, not a busy
/// moment of a loaded machine (a 3 s lease is lost by any 2 s stall of a node or of PostgreSQL).
const PRODUCT_LEASES: &str = "lease_secs = 30\nheartbeat_secs = 10\npoll_ms = 100";

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n") + "\n"
}

/// A task that walks the pointer: `turns` moves, each to a place no other turn of it uses, with `wait_ms`
/// of waiting before each (so kills land mid-task), then completes.
fn walking_task(id: &str, turns: usize, wait_ms: u64) -> serde_json::Value {
    let turns: Vec<serde_json::Value> = (0..turns)
        .map(|i| {
            let mut actions = Vec::new();
            if wait_ms > 0 {
                actions.push(serde_json::json!({"type": "wait", "duration_ms": wait_ms}));
            }
            actions.push(serde_json::json!({"type": "move", "x": 5 + i, "y": 7 + i / 3}));
            serde_json::json!({ "actions": actions })
        })
        .chain(std::iter::once(serde_json::json!({"complete": {"success": true, "summary": "walked"}})))
        .collect();
    serde_json::json!({
        "id": id,
        "instructions": "walk the pointer",
        "computer": {"provider": "mock", "scene": "blank", "width": 320, "height": 240},
        "model": {"provider": "scripted", "script": {"turns": turns}},
        "limits": {"max_steps": turns.len() + 5, "timeout_secs": 900}
    })
}

/// How many tasks are in each state, and why those that did not succeed ended.
fn states(tasks: &[serde_json::Value]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for task in tasks {
        let state = task["state"].as_str().unwrap_or("?").to_string();
        if state == "failed" || state == "cancelled" {
            eprintln!("task {} {state} (attempt {}): {}", task["id"], task["attempt"], task["outcome"]);
        }
        *out.entry(state).or_default() += 1;
    }
    out
}

#[test]
fn three_nodes_run_300_tasks_each_exactly_once_with_every_screenshot_in_the_bucket() {
    let Some(services) = services() else { return };
    let _heavy = crate::support::heavy();
    let mut fleet = Fleet::new(&services, None);
    // No fault is made here, so every task must take one attempt: with the product's leases, not the short
    // ones the fault tests use to be rescued quickly.
    fleet.start_nodes(3, 4, PRODUCT_LEASES);
    const TASKS: usize = 300;
    const TURNS: usize = 3;
    let started = Instant::now();
    let ids: Vec<String> = (0..TASKS).map(|i| format!("fleet-{i:03}")).collect();
    for (i, id) in ids.iter().enumerate() {
        fleet.submit(i % 3, &walking_task(id, TURNS, 0));
    }
    let tasks = fleet.wait_all_terminal(TASKS, Duration::from_secs(600));
    let elapsed = started.elapsed();
    assert_eq!(states(&tasks).get("succeeded"), Some(&TASKS), "{:?}\n{}", states(&tasks), fleet.logs());

    // Exactly once: one attempt each, every move received once.
    let retried: Vec<&str> = tasks.iter().filter(|t| t["attempt"] != 1).filter_map(|t| t["id"].as_str()).collect();
    assert!(
        retried.is_empty(),
        "tasks that needed more than one attempt: {retried:?}\n{}",
        retried.iter().map(|id| fleet.history(id)).collect::<String>()
    );
    let repeated = fleet.repeated_actions(&ids);
    assert!(repeated.is_empty(), "actions executed twice: {repeated:?}");
    for id in &ids {
        assert_eq!(fleet.actions(id).len(), TURNS, "task {id} did not receive each of its moves");
    }
    // All three nodes took part.
    let workers: BTreeMap<String, usize> = tasks.iter().fold(BTreeMap::new(), |mut m, t| {
        *m.entry(t["worker"].as_str().unwrap_or("?").to_string()).or_default() += 1;
        m
    });
    assert_eq!(workers.len(), 3, "tasks per worker: {workers:?}");

    fleet.wait_uploads_drained(Duration::from_secs(120));
    let checked = fleet.assert_screenshots_stored(&ids);
    eprintln!(
        "fleet: {TASKS} tasks on 3 nodes in {:.1} s ({:.1} tasks/s); tasks per node {workers:?}; {checked} screenshots in the bucket",
        elapsed.as_secs_f64(),
        TASKS as f64 / elapsed.as_secs_f64()
    );

    // Status and events of any task can be read from any node.
    let id = &ids[0];
    let a = fleet.nodes[1].task(id);
    let b = fleet.nodes[2].task(id);
    assert_eq!(a["steps"].as_array().map(Vec::len), b["steps"].as_array().map(Vec::len));
    let events = fleet.nodes[2].cli(&["events", id, "--json"]);
    assert_eq!(events.code, 0, "{}", events.stderr);
    // With the store up, the screenshots' events come before task_finished, the last event.
    assert!(events.stdout.lines().last().is_some_and(|l| l.contains("\"task_finished\"")), "{}", events.stdout);
}

#[test]
fn sigkill_of_nodes_mid_run_loses_nothing_and_repeats_no_action() {
    let Some(services) = services() else { return };
    let _heavy = crate::support::heavy();
    let mut fleet = Fleet::new(&services, None);
    fleet.start_nodes(3, 3, "");
    const TASKS: usize = 24;
    const TURNS: usize = 40;
    const KILLS: usize = 10;
    let ids: Vec<String> = (0..TASKS).map(|i| format!("kill-{i:02}")).collect();
    for (i, id) in ids.iter().enumerate() {
        fleet.submit(i % 3, &walking_task(id, TURNS, 60));
    }
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(7, |d| d.as_nanos() as u64);
    eprintln!("fleet kill test seed {seed}");
    let mut rng = seed | 1;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut kills = 0;
    let started = Instant::now();
    while kills < KILLS && started.elapsed() < Duration::from_secs(300) {
        std::thread::sleep(Duration::from_millis(300 + next(900)));
        // The victim is a node running tasks right now, so every kill lands mid-task.
        let busy: Vec<usize> = (0..fleet.nodes.len())
            .filter(|&i| {
                http(&fleet.nodes[i].socket, "GET", "/healthz", None, &[])
                    .ok()
                    .and_then(|(_, body)| serde_json::from_str::<serde_json::Value>(&body).ok())
                    .and_then(|h| h["running"].as_u64())
                    .unwrap_or(0)
                    > 0
            })
            .collect();
        if busy.is_empty() {
            continue;
        }
        let victim = busy[next(busy.len() as u64) as usize];
        fleet.nodes[victim].signal(libc::SIGKILL);
        fleet.nodes[victim].wait();
        kills += 1;
        fleet.nodes[victim].spawn();
    }
    assert!(kills >= KILLS, "only {kills} kills landed on a node with running tasks");
    let tasks = fleet.wait_all_terminal(TASKS, Duration::from_secs(600));
    assert_eq!(states(&tasks).get("succeeded"), Some(&TASKS), "{:?}\n{}", states(&tasks), fleet.logs());
    let repeated = fleet.repeated_actions(&ids);
    assert!(repeated.is_empty(), "actions executed twice: {repeated:?}");
    // Every move arrived once, but for those of steps in flight at a kill: at most one per attempt that died.
    let walked: Vec<(String, usize)> = ids.iter().map(|id| (id.clone(), TURNS)).collect();
    let (skipped, interrupted, resumed) = fleet.assert_moves_complete(&walked);
    // A rescued task continues on whichever node claims it: count those that moved to another process.
    let moved = ids.iter().filter(|id| fleet.attempt_workers(id).iter().collect::<BTreeSet<_>>().len() > 1).count();
    eprintln!(
        "fleet kills: {kills} SIGKILLs of nodes with running tasks; {moved} tasks finished on another node; \
         {skipped} moves were in flight at a kill and skipped ({interrupted} steps left in flight, {resumed} \
         attempts after the first); 0 repeated"
    );
    assert!(moved >= 1, "no rescued task finished on another node");
    fleet.wait_uploads_drained(Duration::from_secs(120));
    fleet.assert_screenshots_stored(&ids);
}

#[test]
fn a_postgres_restart_mid_run_loses_nothing_and_workers_reconnect() {
    let Some(mut services) = services() else { return };
    // A server of its own: restarting the one every other test shares would refuse their connections.
    let restartable =
        ["AGENTD_TEST_PG_CTL", "AGENTD_TEST_PG_RESTART_URL"].map(|v| std::env::var(v).ok().filter(|v| !v.is_empty()));
    let [Some(pg_ctl), Some(restart_url)] = restartable else {
        agentd_testenv::skip(
            "AGENTD_TEST_PG_CTL or AGENTD_TEST_PG_RESTART_URL is not set (./scripts/test runs a private PostgreSQL \
             for this test to restart)",
        );
        return;
    };
    services.postgres = restart_url;
    let _heavy = crate::support::heavy();
    let mut fleet = Fleet::new(&services, None);
    fleet.start_nodes(3, 3, "");
    const TASKS: usize = 15;
    const TURNS: usize = 25;
    let ids: Vec<String> = (0..TASKS).map(|i| format!("pg-{i:02}")).collect();
    for (i, id) in ids.iter().enumerate() {
        fleet.submit(i % 3, &walking_task(id, TURNS, 60));
    }
    std::thread::sleep(Duration::from_secs(2));
    let pg = |command: &str| {
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{pg_ctl} {command}"))
            .stdout(std::process::Stdio::null())
            .status()
            .expect("pg_ctl");
        assert!(status.success(), "pg_ctl {command} failed");
    };
    pg("stop -m fast");
    std::thread::sleep(Duration::from_secs(3));
    pg("start");
    // New work after the restart reaches the reconnected workers.
    let after: Vec<String> = (0..6).map(|i| format!("pg-after-{i}")).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    for (i, id) in after.iter().enumerate() {
        loop {
            let body = walking_task(id, 3, 0).to_string();
            match http(&fleet.nodes[i % 3].socket, "POST", "/v1/tasks", Some(body.as_bytes()), &[]) {
                Ok((201, _)) => break,
                other => {
                    assert!(Instant::now() < deadline, "submitting after the restart: {other:?}\n{}", fleet.logs());
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
    }
    let tasks = fleet.wait_all_terminal(TASKS + after.len(), Duration::from_secs(600));
    assert_eq!(states(&tasks).get("succeeded"), Some(&(TASKS + after.len())), "{:?}\n{}", states(&tasks), fleet.logs());
    let all: Vec<String> = ids.iter().chain(&after).cloned().collect();
    let repeated = fleet.repeated_actions(&all);
    assert!(repeated.is_empty(), "actions executed twice: {repeated:?}");
    for node in &fleet.nodes {
        let (status, body) = http(&node.socket, "GET", "/healthz", None, &[]).expect("healthz");
        assert_eq!(status, 200, "a node did not recover: {body}");
    }
    // Every task's steps are all recorded, each move arrived once, and a move is missing only where its step was
    // in flight when an attempt ended on the outage (at most one per attempt that ended so).
    let walked: Vec<(String, usize)> =
        ids.iter().map(|id| (id.clone(), TURNS)).chain(after.iter().map(|id| (id.clone(), 3))).collect();
    let (skipped, interrupted, resumed) = fleet.assert_moves_complete(&walked);
    // Every step's screenshot (and the final one) reached the bucket.
    fleet.wait_uploads_drained(Duration::from_secs(120));
    let checked = fleet.assert_screenshots_stored(&all);
    let retried = tasks.iter().filter(|t| t["attempt"].as_u64().unwrap_or(0) > 1).count();
    eprintln!(
        "postgres restart: {} tasks, all succeeded; {retried} needed another attempt ({resumed} attempts after the \
         first); {interrupted} steps were in flight when an attempt ended, {skipped} of their moves never arrived; \
         {checked} screenshots in the bucket",
        all.len()
    );
}

#[test]
fn s3_unreachable_for_60_seconds_fails_no_task_and_loses_no_screenshot() {
    let Some(services) = services() else { return };
    let _heavy = crate::support::heavy();
    let upstream: std::net::SocketAddr = host_port(&services.s3).parse().expect("moto address");
    let proxy = crate::proxy::FaultProxy::start(upstream);
    let mut fleet = Fleet::new(&services, Some(proxy.url()));
    fleet.start_nodes(3, 3, "");
    const TASKS: usize = 24;
    const TURNS: usize = 10;
    let ids: Vec<String> = (0..TASKS).map(|i| format!("s3-{i:02}")).collect();
    for (i, id) in ids.iter().enumerate() {
        fleet.submit(i % 3, &walking_task(id, TURNS, 100));
    }
    std::thread::sleep(Duration::from_millis(500));
    proxy.set_down(true);
    let outage = Instant::now();
    let mut spooled_peak = 0;
    while outage.elapsed() < Duration::from_secs(60) {
        for node in &fleet.nodes {
            if let Ok((_, body)) = http(&node.socket, "GET", "/healthz", None, &[])
                && let Ok(health) = serde_json::from_str::<serde_json::Value>(&body)
            {
                spooled_peak = spooled_peak.max(health["uploads_pending"].as_u64().unwrap_or(0));
            }
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let during = states(&fleet.tasks(0));
    proxy.set_down(false);
    let tasks = fleet.wait_all_terminal(TASKS, Duration::from_secs(300));
    assert_eq!(states(&tasks).get("succeeded"), Some(&TASKS), "{:?}\n{}", states(&tasks), fleet.logs());
    assert!(spooled_peak > 0, "nothing waited for S3 during the outage");
    fleet.wait_uploads_drained(Duration::from_secs(180));
    let checked = fleet.assert_screenshots_stored(&ids);
    eprintln!(
        "s3 outage: 60 s; states at its end {during:?}; peak artifacts waiting on one node {spooled_peak}; \
         0 task failures; {checked} screenshots in the bucket afterwards"
    );
}

#[test]
fn a_node_frozen_past_its_lease_cannot_write_when_it_wakes() {
    let Some(services) = services() else { return };
    let _heavy = crate::support::heavy();
    let mut fleet = Fleet::new(&services, None);
    fleet.start_nodes(1, 1, "");
    let id = "frozen-1".to_string();
    fleet.submit(0, &walking_task(&id, 40, 100));
    let deadline = Instant::now() + Duration::from_secs(30);
    let frozen_worker = loop {
        let task = fleet.nodes[0].task(&id);
        if task["state"] == "running" && task["steps"].as_array().is_some_and(|s| s.len() >= 3) {
            break task["worker"].as_str().unwrap_or_default().to_string();
        }
        assert!(Instant::now() < deadline, "the task never started: {task}");
        std::thread::sleep(Duration::from_millis(50));
    };
    fleet.nodes[0].signal(libc::SIGSTOP);
    // A second node takes over once the lease (3 s) has run out.
    fleet.start_nodes(1, 1, "");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let task = fleet.nodes[1].task(&id);
        if task["state"] == "running" && task["worker"].as_str() != Some(frozen_worker.as_str()) {
            break;
        }
        assert!(Instant::now() < deadline, "nobody took over the frozen node's task: {task}");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    fleet.nodes[0].signal(libc::SIGCONT);
    let task = fleet.nodes[1].wait_terminal(&id, Duration::from_secs(120));
    assert_eq!(task["state"], "succeeded", "{task}\n{}", fleet.logs());
    assert_ne!(task["worker"].as_str(), Some(frozen_worker.as_str()), "finished by the node that took over");
    // The woken node was fenced out: it counted the lost lease and wrote nothing more.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, metrics) = http(&fleet.nodes[0].socket, "GET", "/metrics", None, &[]).expect("metrics");
        let losses = metrics
            .lines()
            .find(|l| l.starts_with("agentd_lease_losses_total"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        if losses >= 1 {
            break;
        }
        assert!(Instant::now() < deadline, "the woken node never noticed it lost the lease:\n{metrics}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // At most the action in flight at the freeze ran twice; every step record is the new owner's.
    let actions = fleet.actions(&id);
    let distinct: BTreeSet<&String> = actions.iter().collect();
    assert!(actions.len() - distinct.len() <= 1, "repeated actions: {actions:?}");
    // The move in flight at the freeze may be skipped (the new owner cannot know whether it ran).
    assert!(distinct.len() >= 39, "moves missing: {} of 40 arrived", distinct.len());
    std::thread::sleep(Duration::from_secs(2));
    // (Screenshot URLs are presigned afresh for every request: compare the journal without them.)
    let journal = |task: &serde_json::Value| {
        let mut steps = task["steps"].clone();
        for step in steps.as_array_mut().into_iter().flatten() {
            step["screenshot"]["url"] = serde_json::Value::Null;
        }
        steps
    };
    let again = fleet.nodes[1].task(&id);
    assert_eq!(journal(&again), journal(&task), "the woken node changed the journal after it lost the lease");
}

#[test]
fn a_cancel_sent_to_any_node_stops_the_task_where_it_runs() {
    let Some(services) = services() else { return };
    let _heavy = crate::support::heavy();
    let mut fleet = Fleet::new(&services, None);
    // A long heartbeat, so a cancel that arrives quickly came by NOTIFY, not with the next heartbeat.
    fleet.start_nodes(1, 1, PRODUCT_LEASES);
    let id = "cancel-remote".to_string();
    fleet.submit(0, &walking_task(&id, 200, 50));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let task = fleet.nodes[0].task(&id);
        if task["state"] == "running" {
            break;
        }
        assert!(Instant::now() < deadline, "the task never started: {task}\n{}", fleet.logs());
        std::thread::sleep(Duration::from_millis(20));
    }
    // A second node, which does not run the task, takes the cancel.
    fleet.start_nodes(1, 1, PRODUCT_LEASES);
    let asked = Instant::now();
    let run = fleet.nodes[1].cli(&["cancel", &id]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let task = fleet.nodes[1].wait_terminal(&id, Duration::from_secs(30));
    let took = asked.elapsed();
    assert_eq!(task["state"], "cancelled", "{task}");
    assert_eq!(task["outcome"]["reason"], "cancelled");
    eprintln!("cancel through another node: the task stopped {} ms after the request", took.as_millis());
    assert!(took < Duration::from_secs(5), "took {took:?}: the cancel waited for a heartbeat (10 s)");
}
