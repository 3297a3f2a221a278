//! Retention (docs/operations.md) at scale: `--tasks N` (default 10,000) finished tasks with two screenshots each,
//! finished two
//! days ago, pruned while new tasks run, on SQLite + fs and (with `AGENTD_BENCH_POSTGRES_URL` and
//! `AGENTD_BENCH_S3_ENDPOINT`) on PostgreSQL + S3.
//!
//! The old tasks are copies of one real task (made through the `Queue` API: rows, steps and events as the
//! daemon writes them) under new ids, with their screenshots put in the store. Then an embedded daemon runs
//! new scripted tasks on the mock desktop, four at a time, while a client reads a running task's status and
//! the task list every 10 ms: first for a baseline window, then while `POST /v1/prune` (the background job's
//! code path) deletes the old tasks. Prints the prune's duration, the API p50/p99/max in both windows, the
//! new tasks' integrity (every one succeeded with all its steps and screenshots), and the database and
//! artifact sizes before, full and after.
//!
//! `cargo bench --bench retention` (add `-- --tasks N`, and `--pg-tasks N` for PostgreSQL + S3 alone).

#[path = "support/mod.rs"]
mod support;

use support::{arg, percentile};

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agentd::artifacts::{ArtifactStore, artifact_key};
use agentd::cli::client::{Client, Endpoint};
use agentd::config::Config;
use agentd::queue::{Finish, NewTask, Queue, WorkerIdentity};
use agentd::record::events::{Event, EventKind};
use agentd::record::{EndReason, Outcome, ScreenshotRef, StepRecord, Usage};
use agentd::task::TaskSpec;
use hyper::Method;
use serde_json::{Value, json};
use time::OffsetDateTime;

const SCREENSHOT_BYTES: usize = 16 * 1024;
const TWO_DAYS_MS: i64 = 2 * 86_400_000;

enum Kind {
    SqliteFs,
    PostgresS3 { url: String, endpoint: String, bucket: String },
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1048576.0)
}

/// One real finished task (`template`): two steps, five events, as the daemon writes them.
async fn template(queue: &dyn Queue) {
    let spec = TaskSpec::parse(
        &json!({"id": "template", "instructions": "an old task", "labels": {"bench": "old"}}).to_string(),
        "bench",
    )
    .expect("spec");
    queue.submit(NewTask { spec, max_attempts: 1 }).await.expect("submit");
    let worker = WorkerIdentity {
        name: "bench".into(),
        labels: [("bench".to_string(), "old".to_string())].into(),
        desktops: agentd::queue::desktop::DesktopScope::new("bench", Some(":0"), None),
        pool: Vec::new(),
    };
    let lease = queue.claim(&worker, Duration::from_secs(60)).await.expect("claim").expect("a task");
    for index in 0..2 {
        let key = artifact_key("template", 1, index, "png");
        let shot = ScreenshotRef { url: format!("file:///{key}"), width: 1280, height: 800, key };
        let mut step = StepRecord::begun(index, OffsetDateTime::now_utc(), shot);
        step.finished = true;
        step.model_text = format!("step {index}");
        queue
            .record_step("template", lease.token, &step, Duration::from_millis(10), &agentd::record::Usage::default())
            .await
            .expect("step");
    }
    let events: Vec<Event> = (0..5)
        .map(|i| Event {
            seq: lease.next_seq + i,
            task_id: "template".into(),
            ts: OffsetDateTime::now_utc(),
            kind: EventKind::StepStarted { step: i as u32, by: agentd::By::Model },
        })
        .collect();
    queue.append_events("template", Some(lease.token), &events).await.expect("events");
    let outcome = Outcome::new(true, "done", EndReason::Completed);
    let finish = Finish { outcome, usage: Usage::default(), final_screenshot: None, computer_state: None };
    queue.finish("template", lease.token, &finish).await.expect("finish");
}

fn old_id(i: usize) -> String {
    format!("old-{i:05}")
}

/// Copies the template's rows under `n` new ids, finished two days ago.
async fn copy_rows(kind: &Kind, db: &Path, n: usize) {
    match kind {
        Kind::SqliteFs => {
            use sqlx::Connection;
            let options = sqlx::sqlite::SqliteConnectOptions::new().filename(db);
            let mut conn = sqlx::SqliteConnection::connect_with(&options).await.expect("open");
            for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
                let mut tx = conn.begin().await.expect("begin");
                sqlx::query("CREATE TEMP TABLE IF NOT EXISTS t AS SELECT * FROM tasks WHERE 0")
                    .execute(&mut *tx)
                    .await
                    .expect("temp");
                for &i in chunk {
                    let id = old_id(i);
                    for statement in [
                        "DELETE FROM temp.t",
                        "INSERT INTO temp.t SELECT * FROM tasks WHERE id = 'template'",
                        "UPDATE temp.t SET id = ?1",
                        "INSERT INTO tasks SELECT * FROM temp.t",
                        "INSERT INTO steps SELECT ?1, idx, record FROM steps WHERE task_id = 'template'",
                        "INSERT INTO events SELECT ?1, seq, event FROM events WHERE task_id = 'template'",
                    ] {
                        sqlx::query(statement).bind(&id).execute(&mut *tx).await.expect(statement);
                    }
                }
                tx.commit().await.expect("commit");
            }
            sqlx::query("UPDATE tasks SET finished_ms = finished_ms - ?1 WHERE state = 'succeeded'")
                .bind(TWO_DAYS_MS)
                .execute(&mut conn)
                .await
                .expect("backdate");
            let _ = conn.close().await;
        }
        Kind::PostgresS3 { url, .. } => {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
            for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
                let ids: Vec<String> = chunk.iter().map(|&i| old_id(i)).collect();
                let mut tx = conn.begin().await.expect("begin");
                sqlx::query(
                    "CREATE TEMP TABLE IF NOT EXISTS t ON COMMIT DROP AS SELECT * FROM agentd_tasks WHERE false",
                )
                .execute(&mut *tx)
                .await
                .expect("temp");
                sqlx::query("INSERT INTO t SELECT * FROM agentd_tasks WHERE id = 'template'")
                    .execute(&mut *tx)
                    .await
                    .expect("template row");
                // One row per id: the template's row with the id replaced.
                sqlx::query(
                    "INSERT INTO agentd_tasks SELECT (jsonb_populate_record(t, jsonb_build_object('id', n))).*
                     FROM t, unnest($1::text[]) AS n",
                )
                .bind(&ids)
                .execute(&mut *tx)
                .await
                .expect("tasks");
                sqlx::query(
                    "INSERT INTO agentd_steps SELECT n, idx, record FROM agentd_steps, unnest($1::text[]) AS n
                     WHERE task_id = 'template'",
                )
                .bind(&ids)
                .execute(&mut *tx)
                .await
                .expect("steps");
                sqlx::query(
                    "INSERT INTO agentd_events SELECT n, seq, event FROM agentd_events, unnest($1::text[]) AS n
                     WHERE task_id = 'template'",
                )
                .bind(&ids)
                .execute(&mut *tx)
                .await
                .expect("events");
                tx.commit().await.expect("commit");
            }
            sqlx::query(
                "UPDATE agentd_tasks SET finished_at = finished_at - interval '2 days' WHERE state = 'succeeded'",
            )
            .execute(&mut conn)
            .await
            .expect("backdate");
            let _ = conn.close().await;
        }
    }
}

/// Puts two screenshots per old task into the store, 32 at a time.
async fn put_screenshots(store: Arc<dyn ArtifactStore>, n: usize) {
    use futures_util::StreamExt;
    let bytes: Arc<[u8]> = (0..SCREENSHOT_BYTES).map(|i| (i * 7 % 251) as u8).collect::<Vec<_>>().into();
    futures_util::stream::iter((0..n).flat_map(|i| [(i, 0), (i, 1)]))
        .map(|(i, step)| {
            let store = store.clone();
            let bytes = bytes.clone();
            async move { store.put(&artifact_key(&old_id(i), 1, step, "png"), &bytes, "image/png").await.expect("put") }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
}

/// Bytes of the SQLite database and its log, or of the PostgreSQL tables.
async fn db_bytes(kind: &Kind, db: &Path) -> u64 {
    match kind {
        Kind::SqliteFs => {
            let size = |suffix: &str| std::fs::metadata(format!("{}{suffix}", db.display())).map_or(0, |m| m.len());
            if size("-wal") > 0 {
                println!("    (SQLite: database file {}, its WAL {})", mib(size("")), mib(size("-wal")));
            }
            size("") + size("-wal")
        }
        Kind::PostgresS3 { url, .. } => {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
            let total: i64 = sqlx::query_scalar(
                "SELECT (pg_total_relation_size('agentd_tasks') + pg_total_relation_size('agentd_steps')
                 + pg_total_relation_size('agentd_events'))::bigint",
            )
            .fetch_one(&mut conn)
            .await
            .expect("size");
            let _ = conn.close().await;
            total as u64
        }
    }
}

async fn store_bytes(store: &dyn ArtifactStore) -> (usize, u64) {
    let listed = store.list("tasks/").await.expect("list");
    (listed.len(), listed.iter().map(|(_, size)| size).sum())
}

fn new_task(i: usize) -> Value {
    let turns: Vec<Value> = (0..5)
        .map(|_| json!({"actions": [{"type": "click", "x": 640, "y": 370}, {"type": "wait", "duration_ms": 50}]}))
        .chain(std::iter::once(json!({"complete": {"success": true, "summary": "done"}})))
        .collect();
    json!({
        "id": format!("new-{i:04}"),
        "instructions": "a new task",
        "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "scripted", "script": {"turns": turns}},
        "limits": {"max_steps": 20, "timeout_secs": 600},
    })
}

async fn run(kind: Kind, n: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let db = data.join("queue.db");
    let socket = dir.path().join("agentd.sock");
    let (queue_section, artifacts_section) = match &kind {
        Kind::SqliteFs => (String::new(), String::new()),
        Kind::PostgresS3 { url, endpoint, bucket } => (
            format!("backend = \"postgres\"\nurl = {url:?}\n"),
            format!(
                "[artifacts]\nbackend = \"s3\"\nbucket = {bucket:?}\nregion = \"us-east-1\"\nendpoint = {endpoint:?}\n\
                 force_path_style = true\n"
            ),
        ),
    };
    let text = format!(
        "data_dir = {:?}\n[api]\nsocket = {:?}\n[worker]\nconcurrency = 4\n[queue]\n{queue_section}poll_ms = 200\n\
         [retention]\nfinished_days = 0\nbatch = 100\n{artifacts_section}",
        data.display().to_string(),
        socket.display().to_string()
    );
    let config: Config = agentd::config::parse(&text, "bench", &[]).expect("config");
    let store = agentd::backends::artifact_store(&config).await.expect("store");
    if let Kind::PostgresS3 { bucket, endpoint, .. } = &kind {
        let s3 = agentd::artifacts::s3::S3Store::new(&config.artifacts).await.expect("s3");
        s3.client().create_bucket().bucket(bucket).send().await.expect("create bucket");
        println!("  S3 endpoint {endpoint}, bucket {bucket}");
    }

    // Populate.
    let started = Instant::now();
    {
        let queue = agentd::daemon::open_queue(&config).await.expect("queue");
        template(queue.as_ref()).await;
    }
    let empty_db = db_bytes(&kind, &db).await;
    copy_rows(&kind, &db, n).await;
    put_screenshots(store.clone(), n).await;
    let full_db = db_bytes(&kind, &db).await;
    let (full_objects, full_store) = store_bytes(store.as_ref()).await;
    println!(
        "  populated {n} finished tasks (2 steps, 6 events, 2 screenshots of {} KiB each) in {:.1} s: database {} \
         (empty {}), artifacts {full_objects} objects, {}",
        SCREENSHOT_BYTES / 1024,
        started.elapsed().as_secs_f64(),
        mib(full_db),
        mib(empty_db),
        mib(full_store)
    );

    // The daemon, new tasks and a reading client.
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    let daemon = tokio::spawn(agentd::daemon::serve_until(config, async move { stopped.cancelled().await }));
    let client = Arc::new(Client::new(Endpoint::Unix(socket)));
    for _ in 0..400 {
        if client.call(Method::GET, "/healthz", None).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let submitting = Arc::new(AtomicBool::new(true));
    let submitter = tokio::spawn({
        let client = client.clone();
        let submitting = submitting.clone();
        async move {
            let mut i = 0;
            while submitting.load(Ordering::Relaxed) {
                let running = client.call(Method::GET, "/v1/tasks?state=queued&limit=50", None).await.expect("list").1;
                if running["tasks"].as_array().map_or(0, Vec::len) < 4 {
                    let body = new_task(i).to_string().into_bytes();
                    client.call(Method::POST, "/v1/tasks", Some(body)).await.expect("submit");
                    i += 1;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            i
        }
    });
    let probe = |running: Arc<AtomicBool>| {
        let client = client.clone();
        tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut i = 0usize;
            while running.load(Ordering::Relaxed) {
                let path = if i.is_multiple_of(2) {
                    format!("/v1/tasks/new-{:04}", (i / 2) % 4)
                } else {
                    "/v1/tasks?limit=20".to_string()
                };
                let sent = Instant::now();
                let _ = client.request(Method::GET, &path, None).await.expect("probe");
                samples.push(ms(sent.elapsed()));
                i += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            samples
        })
    };
    let report = |name: &str, mut samples: Vec<f64>| {
        samples.sort_by(f64::total_cmp);
        println!(
            "  API {name}: {} requests, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            samples.len(),
            percentile(&samples, 50.0),
            percentile(&samples, 99.0),
            samples.last().copied().unwrap_or(f64::NAN)
        );
    };
    let running = Arc::new(AtomicBool::new(true));
    let baseline = probe(running.clone());
    tokio::time::sleep(Duration::from_secs(10)).await;
    running.store(false, Ordering::Relaxed);
    report("baseline (new tasks running, no prune)", baseline.await.expect("baseline"));

    let running = Arc::new(AtomicBool::new(true));
    let during = probe(running.clone());
    let pruned_at = Instant::now();
    let body = json!({"older_than_days": 1}).to_string().into_bytes();
    let (_, pruned) = client.call(Method::POST, "/v1/prune", Some(body)).await.expect("prune");
    let took = pruned_at.elapsed().as_secs_f64();
    running.store(false, Ordering::Relaxed);
    report("during the prune (new tasks running)", during.await.expect("during"));
    println!(
        "  prune: {} tasks and {} artifacts ({}) deleted in {took:.1} s ({:.0} tasks/s), {} left pending",
        pruned["tasks"],
        pruned["artifacts"],
        mib(pruned["bytes"].as_u64().unwrap_or(0)),
        pruned["tasks"].as_f64().unwrap_or(0.0) / took,
        pruned["artifacts_pending"]
    );

    submitting.store(false, Ordering::Relaxed);
    let submitted = submitter.await.expect("submitter");
    // Every new task ends well with all its steps and screenshots.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut intact = 0;
    for i in 0..submitted {
        let id = format!("new-{i:04}");
        loop {
            let task = client.call(Method::GET, &format!("/v1/tasks/{id}"), None).await.expect("status").1;
            if task["state"] == "succeeded" {
                let steps = task["steps"].as_array().map_or(0, Vec::len);
                let stored = store.list(&format!("tasks/{id}/")).await.expect("list").len();
                if steps == 6 && stored >= steps {
                    intact += 1;
                } else {
                    println!("  {id}: {steps} steps, {stored} screenshots");
                }
                break;
            }
            assert!(Instant::now() < deadline, "{id} did not finish: {task}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    println!("  new tasks: {intact} of {submitted} succeeded with all 6 steps and their screenshots");
    let left = client.call(Method::POST, "/v1/prune", Some(br#"{"dry_run": true, "older_than_days": 1}"#.to_vec()));
    let left = left.await.expect("dry run").1;
    println!("  old tasks left: {}", left["tasks"]);
    stop.cancel();
    let _ = daemon.await;
    let after_db = db_bytes(&kind, &db).await;
    let (after_objects, after_store) = store_bytes(store.as_ref()).await;
    println!(
        "  after: database {} (full {}, empty {}), artifacts {after_objects} objects, {} (full {})",
        mib(after_db),
        mib(full_db),
        mib(empty_db),
        mib(after_store),
        mib(full_store)
    );
}

async fn pg_execute(url: &str, statement: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
    sqlx::query(sqlx::AssertSqlSafe(statement.to_string())).execute(&mut conn).await.expect(statement);
    let _ = conn.close().await;
}

fn main() {
    let n = arg("--tasks", 10_000);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    println!(
        "agentd retention benchmark: {n} old finished tasks pruned while new tasks run (mock desktop, scripted model)"
    );
    println!("SQLite + fs:");
    runtime.block_on(run(Kind::SqliteFs, n));
    match (std::env::var("AGENTD_BENCH_POSTGRES_URL"), std::env::var("AGENTD_BENCH_S3_ENDPOINT")) {
        (Ok(url), Ok(endpoint)) if !url.is_empty() && !endpoint.is_empty() => {
            println!("PostgreSQL + S3 ({} tasks):", arg("--pg-tasks", n));
            let bucket = format!("agentd-retention-{}", uuid::Uuid::now_v7().simple());
            let schema = format!("agentd_bench_{}", uuid::Uuid::now_v7().simple());
            runtime.block_on(pg_execute(&url, &format!("CREATE SCHEMA {schema}")));
            let separator = if url.contains('?') { '&' } else { '?' };
            let schema_url = format!("{url}{separator}options[search_path]={schema}");
            let pg_tasks = arg("--pg-tasks", n);
            runtime.block_on(run(Kind::PostgresS3 { url: schema_url, endpoint, bucket }, pg_tasks));
            runtime.block_on(pg_execute(&url, &format!("DROP SCHEMA {schema} CASCADE")));
        }
        _ => println!("PostgreSQL + S3: skipped (set AGENTD_BENCH_POSTGRES_URL and AGENTD_BENCH_S3_ENDPOINT)"),
    }
}
