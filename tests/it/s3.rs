//! The S3 artifact store against moto_server (started by `scripts/test`, `scripts/setup/30-s3.sh`, which exports
//! `AGENTD_TEST_S3_ENDPOINT` and dummy AWS credentials): round trips under a prefix, missing keys, stable and
//! presigned URLs, health messages, the `when_required` checksum option, the uploader through a store outage
//! (a [`FaultProxy`] taken down), and `agentd serve` on S3 (presigned URLs in status documents, only `s3://` URLs
//! in stored events). The `config check` tests need no server: they point at a port nobody listens on.
//!
//! Each test makes its own bucket.

#![cfg(feature = "s3")]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentd::artifacts::s3::S3Store;
use agentd::artifacts::{ArtifactError, ArtifactStore, Uploader};
use agentd::config::{ArtifactsBackend, ArtifactsConfig};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::proxy::FaultProxy;
use crate::support::{Agentd, Daemon, Run};

/// The moto endpoint, or `None` after saying why the test is skipped.
pub(crate) fn moto(test: &str) -> Option<String> {
    match std::env::var("AGENTD_TEST_S3_ENDPOINT") {
        Ok(endpoint) if !endpoint.is_empty() => Some(endpoint),
        _ => {
            agentd_testenv::skip(format!(
                "{test}: AGENTD_TEST_S3_ENDPOINT is not set (run ./scripts/test, which starts moto_server)"
            ));
            None
        }
    }
}

fn unique_bucket(tag: &str) -> String {
    format!("agentd-{tag}-{}", uuid::Uuid::now_v7().simple())
}

fn s3_config(endpoint: &str, bucket: &str, prefix: &str) -> ArtifactsConfig {
    ArtifactsConfig {
        backend: ArtifactsBackend::S3,
        bucket: Some(bucket.to_string()),
        prefix: prefix.to_string(),
        region: Some("us-east-1".into()),
        endpoint: Some(endpoint.to_string()),
        force_path_style: true,
        ..ArtifactsConfig::default()
    }
}

/// A store on a new bucket of its own.
pub(crate) async fn fresh_store(endpoint: &str, tag: &str, prefix: &str) -> S3Store {
    let bucket = unique_bucket(tag);
    let store = S3Store::new(&s3_config(endpoint, &bucket, prefix)).await.expect("S3 store");
    store.client().create_bucket().bucket(&bucket).send().await.expect("create the test bucket");
    store
}

/// A local port nobody listens on.
fn dead_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

fn payload(i: u32, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i as usize * 31 + j * 7) as u8).collect()
}

#[tokio::test]
async fn s3_put_get_and_overwrite_under_a_prefix() {
    let Some(endpoint) = moto("s3_put_get_and_overwrite_under_a_prefix") else { return };
    let store = fresh_store(&endpoint, "roundtrip", "/fleet/runs/").await;
    let key = "tasks/t1/1/00000.png";
    store.put(key, b"first", "image/png").await.expect("put");
    assert_eq!(store.get(key).await.expect("get"), b"first");
    store.put(key, &payload(1, 300_000), "image/png").await.expect("overwrite");
    assert_eq!(store.get(key).await.expect("get"), payload(1, 300_000), "a re-upload overwrites");

    // The object sits under the prefix, as a folder, with its content type.
    let object = store
        .client()
        .head_object()
        .bucket(store.bucket())
        .key("fleet/runs/tasks/t1/1/00000.png")
        .send()
        .await
        .expect("the object is at prefix/key");
    assert_eq!(object.content_type(), Some("image/png"));
    let listed = store.client().list_objects_v2().bucket(store.bucket()).send().await.expect("list");
    let keys: Vec<&str> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, ["fleet/runs/tasks/t1/1/00000.png"], "one object, no duplicate");
}

#[tokio::test]
async fn s3_missing_key_is_not_found() {
    let Some(endpoint) = moto("s3_missing_key_is_not_found") else { return };
    let store = fresh_store(&endpoint, "missing", "p").await;
    match store.get("tasks/nope/1/00000.png").await {
        Err(ArtifactError::NotFound(key)) => assert_eq!(key, "tasks/nope/1/00000.png"),
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert!(matches!(store.get("../etc/passwd").await, Err(ArtifactError::InvalidKey(_))));
}

#[tokio::test]
async fn s3_url_is_stable_and_shareable_url_is_presigned() {
    let Some(endpoint) = moto("s3_url_is_stable_and_shareable_url_is_presigned") else { return };
    let store = fresh_store(&endpoint, "presign", "shots").await;
    let key = "tasks/t2/1/00003.png";
    let bytes = payload(3, 50_000);
    store.put(key, &bytes, "image/png").await.expect("put");

    let stable = store.url(key);
    assert_eq!(stable, format!("s3://{}/shots/{key}", store.bucket()));
    assert!(!stable.contains("X-Amz") && !stable.contains('?'), "no signature in stored URLs: {stable}");
    assert_eq!(store.url(key), stable, "stable: the same every time");

    let shared = store.shareable_url(key).await.expect("presign");
    assert!(shared.starts_with(&format!("{endpoint}/{}/shots/{key}?", store.bucket())), "{shared}");
    for part in ["X-Amz-Signature=", "X-Amz-Credential=", "X-Amz-Expires=3600", "X-Amz-SignedHeaders=host"] {
        assert!(shared.contains(part), "{part} missing from {shared}");
    }
    // A plain GET, no SDK, fetches the bytes.
    let response = reqwest::get(&shared).await.expect("GET the presigned URL");
    assert_eq!(response.status(), 200);
    assert_eq!(response.bytes().await.expect("body").as_ref(), bytes.as_slice());
}

#[tokio::test]
async fn s3_health_ok_missing_bucket_and_dead_endpoint() {
    let Some(endpoint) = moto("s3_health_ok_missing_bucket_and_dead_endpoint") else { return };
    let store = fresh_store(&endpoint, "health", "").await;
    store.health().await.expect("an existing bucket is healthy");
    assert!(store.describe().starts_with(&format!("s3://{} (endpoint {endpoint})", store.bucket())));

    let missing = unique_bucket("absent");
    let absent = S3Store::new(&s3_config(&endpoint, &missing, "")).await.expect("store");
    let error = absent.health().await.expect_err("a missing bucket is not healthy");
    assert!(error.is_retryable(), "an operator can create the bucket: keep retrying ({error})");
    let text = error.to_string();
    assert!(text.contains(&missing) && text.contains("does not exist"), "{text}");

    let dead = format!("http://127.0.0.1:{}", dead_port());
    let nobody = S3Store::new(&s3_config(&dead, "agentd-artifacts", "")).await.expect("store");
    let started = Instant::now();
    let error = nobody.health().await.expect_err("nobody listens");
    let text = error.to_string();
    assert!(error.is_retryable(), "{text}");
    assert!(text.contains("agentd-artifacts") && text.contains(&dead) && text.contains("refused"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(15), "health answers quickly: {:?}", started.elapsed());
    // Puts to an unreachable store are retryable too: the uploader keeps the artifact.
    let put = nobody.put("tasks/t/1/00000.png", b"x", "image/png").await.expect_err("unreachable");
    assert!(matches!(put, ArtifactError::Unavailable(_)), "{put}");
    assert!(!put.to_string().contains("X-Amz"), "{put}");
}

#[tokio::test]
async fn s3_checksum_when_required() {
    let Some(endpoint) = moto("s3_checksum_when_required") else { return };
    let bucket = unique_bucket("checksum");
    let config = ArtifactsConfig { checksum: "when_required".into(), ..s3_config(&endpoint, &bucket, "c") };
    let store = S3Store::new(&config).await.expect("store");
    store.client().create_bucket().bucket(&bucket).send().await.expect("create bucket");
    let key = "tasks/t3/1/00000.png";
    store.put(key, &payload(9, 10_000), "image/png").await.expect("put without optional checksums");
    assert_eq!(store.get(key).await.expect("get"), payload(9, 10_000));
    store.health().await.expect("health");
    // With `when_required` the SDK sends no CRC32 of its own, so the store keeps none.
    let head = store
        .client()
        .head_object()
        .bucket(&bucket)
        .key(format!("c/{key}"))
        .checksum_mode(aws_sdk_s3::types::ChecksumMode::Enabled)
        .send()
        .await
        .expect("head");
    assert_eq!(head.checksum_crc32(), None, "no optional checksum was sent");

    // The default (`when_supported`) does send one: the option is what made the difference.
    let default = S3Store::new(&s3_config(&endpoint, &bucket, "d")).await.expect("store");
    default.put(key, b"default", "image/png").await.expect("put");
    let head = store
        .client()
        .head_object()
        .bucket(&bucket)
        .key(format!("d/{key}"))
        .checksum_mode(aws_sdk_s3::types::ChecksumMode::Enabled)
        .send()
        .await
        .expect("head");
    assert!(head.checksum_crc32().is_some(), "when_supported sends a CRC32");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_uploader_spools_through_an_outage_and_delivers_everything() {
    let Some(endpoint) = moto("s3_uploader_spools_through_an_outage_and_delivers_everything") else { return };
    let direct = fresh_store(&endpoint, "outage", "spooled").await;
    let upstream: SocketAddr =
        endpoint.trim_start_matches("http://").parse().expect("AGENTD_TEST_S3_ENDPOINT is http://IP:PORT");
    let proxy = FaultProxy::start(upstream);
    let through = S3Store::new(&s3_config(&proxy.url(), direct.bucket(), "spooled")).await.expect("store");
    through.health().await.expect("healthy through the proxy while it is up");
    proxy.set_down(true);
    assert!(through.health().await.is_err(), "down through the proxy");

    let dir = tempfile::tempdir().expect("tempdir");
    let tracker = TaskTracker::new();
    let cancel = CancellationToken::new();
    // A bound of ten artifacts' worth: the outage passes it.
    let uploader = Uploader::start(Arc::new(through), dir.path().join("spool"), 4, 10_000, &tracker, cancel.clone());
    assert!(!uploader.spool_full());
    let artifacts: Vec<(String, Vec<u8>)> =
        (0..50).map(|i| (format!("tasks/outage/1/{i:05}.png"), payload(i, 1000))).collect();
    let mut slowest = Duration::ZERO;
    for (key, bytes) in &artifacts {
        let started = Instant::now();
        uploader.submit(key.clone(), bytes.clone().into(), None).await;
        slowest = slowest.max(started.elapsed());
    }
    assert!(slowest < Duration::from_millis(100), "submit never waits on the store (slowest {slowest:?})");

    let deadline = Instant::now() + Duration::from_secs(30);
    while !(uploader.spool_full() && uploader.stats().upload_errors > 0) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stats = uploader.stats();
    assert!(stats.spool_full && uploader.spool_full(), "past the bound: {stats:?}");
    assert!(stats.upload_errors > 0, "uploads were tried and failed: {stats:?}");
    assert_eq!(stats.pending, 50, "nothing dropped: {stats:?}");
    assert!(stats.spooled_bytes >= 10_000, "{stats:?}");
    assert!(proxy.refused() > 0, "the store was really unreachable");

    proxy.set_down(false);
    let left = uploader.flush(Duration::from_secs(120)).await;
    assert_eq!(left, 0, "everything uploaded after the outage: {:?}", uploader.stats());
    assert!(!uploader.spool_full());
    assert_eq!(uploader.stats().spooled_bytes, 0);
    for (key, bytes) in &artifacts {
        assert_eq!(&direct.get(key).await.expect("in the bucket"), bytes, "{key} byte for byte");
    }
    let listed = direct.client().list_objects_v2().bucket(direct.bucket()).send().await.expect("list");
    assert_eq!(listed.key_count(), Some(50));
    cancel.cancel();
    tracker.close();
    tracker.wait().await;
}

pub(crate) fn artifacts_section(endpoint: &str, bucket: &str) -> String {
    format!(
        "[artifacts]\nbackend = \"s3\"\nbucket = {bucket:?}\nprefix = \"runs\"\nregion = \"us-east-1\"\n\
         endpoint = {endpoint:?}\nforce_path_style = true\n"
    )
}

fn config_check(agentd: &Agentd) -> Run {
    let output = agentd
        .command()
        .args(["config", "check"])
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("spawn agentd");
    Run::from(output)
}

#[test]
fn s3_config_check_reports_an_unreachable_bucket_with_exit_3() {
    let endpoint = format!("http://127.0.0.1:{}", dead_port());
    let agentd = Agentd::with_config(&artifacts_section(&endpoint, "agentd-fleet-shots"));
    let run = config_check(&agentd);
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(run.stderr.contains("agentd-fleet-shots"), "names the bucket: {}", run.stderr);
    assert!(run.stderr.contains("refused") && run.stderr.contains(&endpoint), "{}", run.stderr);
    assert!(!run.stderr.contains("testing"), "no credentials in messages: {}", run.stderr);
}

#[test]
fn s3_config_check_without_credentials_says_so_with_exit_3() {
    let endpoint = format!("http://127.0.0.1:{}", dead_port());
    let agentd = Agentd::with_config(&artifacts_section(&endpoint, "agentd-fleet-shots"));
    let mut command = agentd.command();
    for name in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"] {
        command.env_remove(name);
    }
    let output = command
        .args(["config", "check"])
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_CONFIG_FILE", "/nonexistent/aws-config")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
        .env("AGENTD_LOG", "error")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("spawn agentd");
    let run = Run::from(output);
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(
        run.stderr.contains("agentd-fleet-shots") && run.stderr.contains("no usable AWS credentials"),
        "{}",
        run.stderr
    );
}

#[test]
fn s3_config_check_rejects_a_bad_endpoint_with_exit_2() {
    let agentd = Agentd::with_config(&artifacts_section("localhost:9000", "agentd-fleet-shots"));
    let run = config_check(&agentd);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("artifacts.endpoint"), "{}", run.stderr);
}

/// `agentd serve` on S3: the mock-login example runs; `GET /v1/tasks/{id}` (and `agentd status --json`) shows
/// presigned URLs that fetch the PNGs; the screenshot endpoint reads through the store; stored events keep
/// only `s3://` URLs; `config check` is happy.
#[test]
fn s3_daemon_serves_presigned_urls_and_stores_only_stable_ones() {
    let Some(endpoint) = moto("s3_daemon_serves_presigned_urls_and_stores_only_stable_ones") else { return };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let store = runtime.block_on(fresh_store(&endpoint, "daemon", "runs"));
    let bucket = store.bucket().to_string();
    let section = artifacts_section(&endpoint, &bucket);

    let check = config_check(&Agentd::with_config(&section));
    assert_eq!(check.code, 0, "{}", check.stderr);
    assert!(check.stderr.contains(&format!("s3://{bucket}/runs")), "{}", check.stderr);

    let daemon = Daemon::start(&section);
    let run = daemon.cli(&["submit", "config/tasks/mock-login.json", "--wait"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, daemon.log());
    let id = run.stdout.trim().to_string();

    let doc = daemon.task(&id);
    let steps = doc["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 4);
    let mut urls: Vec<(String, String)> = steps
        .iter()
        .map(|s| {
            (
                s["screenshot"]["key"].as_str().unwrap_or("").to_string(),
                s["screenshot"]["url"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    if let Some(last) = doc["final_screenshot"].as_object() {
        urls.push((last["key"].as_str().unwrap_or("").to_string(), last["url"].as_str().unwrap_or("").to_string()));
    }
    let prefix = format!("{endpoint}/{bucket}/runs/tasks/{id}/1/");
    for (key, url) in &urls {
        assert!(url.starts_with(&prefix) && url.contains("X-Amz-Signature="), "presigned: {url}");
        let bytes = runtime
            .block_on(async { reqwest::get(url).await?.error_for_status()?.bytes().await })
            .expect("fetch the presigned URL");
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{key} is a PNG");
        assert_eq!(runtime.block_on(store.get(key)).expect("in the bucket"), bytes.as_ref());
    }

    let status = daemon.cli(&["status", &id, "--json"]);
    assert_eq!(status.code, 0, "{}", status.stderr);
    let first = status.json()["steps"][0]["screenshot"]["url"].as_str().unwrap_or("").to_string();
    assert!(first.starts_with(&prefix) && first.contains("X-Amz-Signature="), "agentd status shows it: {first}");

    let (code, png) =
        crate::support::http(&daemon.socket, "GET", &format!("/v1/tasks/{id}/steps/1/screenshot"), None, &[])
            .expect("screenshot request");
    assert_eq!(code, 200);
    assert!(png.contains("PNG"));

    let events = daemon.cli(&["events", &id, "--json"]);
    assert_eq!(events.code, 0, "{}", events.stderr);
    assert!(!events.stdout.contains("X-Amz"), "stored events carry no signatures:\n{}", events.stdout);
    let saved: Vec<serde_json::Value> = events
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("JSON line"))
        .filter(|e| e["type"] == "screenshot_saved")
        .collect();
    assert!(!saved.is_empty(), "screenshot events are stored:\n{}", events.stdout);
    for event in &saved {
        let url = event["url"].as_str().unwrap_or("");
        assert!(url.starts_with(&format!("s3://{bucket}/runs/tasks/{id}/1/")), "{url}");
    }
    let (code, metrics) = crate::support::http(&daemon.socket, "GET", "/metrics", None, &[]).expect("metrics");
    assert_eq!(code, 200);
    assert!(metrics.lines().any(|l| l == "agentd_spool_full 0"), "{metrics}");
    let (code, health) = crate::support::http(&daemon.socket, "GET", "/healthz", None, &[]).expect("healthz");
    assert_eq!(code, 200, "{health}");
    assert!(health.contains("\"spool_full\":false"), "{health}");
}

/// Past `spool_max_bytes` the daemon takes no new task (nothing is dropped), and takes them again once the store
/// is back and the spool drained.
#[test]
fn s3_daemon_stops_claiming_while_the_spool_is_full() {
    let Some(endpoint) = moto("s3_daemon_stops_claiming_while_the_spool_is_full") else { return };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let store = runtime.block_on(fresh_store(&endpoint, "backpressure", "runs"));
    let upstream: SocketAddr =
        endpoint.trim_start_matches("http://").parse().expect("AGENTD_TEST_S3_ENDPOINT is http://IP:PORT");
    let proxy = FaultProxy::start(upstream);
    let section = format!("{}spool_max_bytes = 1\n", artifacts_section(&proxy.url(), store.bucket()));
    let daemon = Daemon::start(&section);

    proxy.set_down(true);
    let first = daemon.cli(&["submit", "config/tasks/mock-login.json", "--wait"]);
    assert_eq!(first.code, 0, "a store outage does not fail the task: {}\n{}", first.stderr, daemon.log());
    let first = first.stdout.trim().to_string();
    // The screenshots reach the spool once their first upload attempt failed.
    let deadline = Instant::now() + Duration::from_secs(30);
    let metrics = loop {
        let (_, metrics) = crate::support::http(&daemon.socket, "GET", "/metrics", None, &[]).expect("metrics");
        if metrics.lines().any(|l| l == "agentd_spool_full 1") || Instant::now() > deadline {
            break metrics;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(metrics.lines().any(|l| l == "agentd_spool_full 1"), "{metrics}");
    let (code, health) = crate::support::http(&daemon.socket, "GET", "/healthz", None, &[]).expect("healthz");
    assert_eq!(code, 503, "the store is down: {health}");
    assert!(health.contains("\"spool_full\":true") && health.contains(store.bucket()), "{health}");

    let second = daemon.cli(&["submit", "config/tasks/mock-login.json"]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    let second = second.stdout.trim().to_string();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(daemon.task(&second)["state"], "queued", "not claimed while the spool is full");
    assert!(daemon.log().contains("artifact spool is full; taking no new tasks"), "{}", daemon.log());

    proxy.set_down(false);
    let done = daemon.wait_terminal(&second, Duration::from_secs(90));
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert!(daemon.log().contains("artifact spool below its bound again"), "{}", daemon.log());
    // Every screenshot of the task that ran during the outage reached the bucket.
    let steps = daemon.task(&first)["steps"].as_array().cloned().unwrap_or_default();
    assert_eq!(steps.len(), 4);
    for step in steps {
        let key = step["screenshot"]["key"].as_str().unwrap_or_default().to_string();
        let bytes = runtime.block_on(store.get(&key)).unwrap_or_else(|e| panic!("{key} is in the bucket: {e}"));
        assert!(bytes.starts_with(b"\x89PNG"), "{key}");
    }
}

/// Deleting a task's artifacts (docs/operations.md) lists and deletes in rounds of at most 1000 keys (DeleteObjects'
/// bound),
/// under the store's prefix, and touches no other task's — not even one whose id extends this one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_delete_prefix_removes_one_task_in_rounds_of_1000() {
    let Some(endpoint) = moto("s3_delete_prefix_removes_one_task_in_rounds_of_1000") else { return };
    let store = Arc::new(fresh_store(&endpoint, "retention", "runs").await);
    let keys: Vec<String> = (0..1005).map(|i| format!("tasks/big/{}/{:05}.png", 1 + i / 500, i % 500)).collect();
    for chunk in keys.chunks(64) {
        let puts = chunk.iter().map(|key| {
            let store = store.clone();
            let key = key.clone();
            async move { store.put(&key, b"0123456789", "image/png").await }
        });
        for result in futures_util::future::join_all(puts).await {
            result.expect("put");
        }
    }
    store.put("tasks/bigger/1/00000.png", b"keep", "image/png").await.expect("put");
    store.put("tasks/other/1/00000.png", b"keep", "image/png").await.expect("put");
    let listed = store.list("tasks/big/").await.expect("list");
    assert_eq!(listed.len(), 1005, "listing pages through every key");
    assert!(listed.iter().all(|(key, size)| key.starts_with("tasks/big/") && *size == 10));
    assert_eq!(store.list("tasks/").await.expect("list all").len(), 1007);

    let removed = store.delete_prefix("tasks/big/").await.expect("delete");
    assert_eq!(removed, agentd::artifacts::Removed { objects: 1005, bytes: 10_050 });
    assert!(store.list("tasks/big/").await.expect("list").is_empty());
    assert_eq!(store.get("tasks/bigger/1/00000.png").await.expect("kept"), b"keep");
    assert_eq!(store.get("tasks/other/1/00000.png").await.expect("kept"), b"keep");
    // The objects under the store's prefix: nothing of the task is left in the bucket.
    let objects = store.client().list_objects_v2().bucket(store.bucket()).send().await.expect("list the bucket");
    let left: Vec<&str> = objects.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(left, vec!["runs/tasks/bigger/1/00000.png", "runs/tasks/other/1/00000.png"]);
    assert_eq!(store.delete_prefix("tasks/big/").await.expect("again"), agentd::artifacts::Removed::default());
    assert!(matches!(store.delete_prefix("tasks/../").await, Err(ArtifactError::InvalidKey(_))));
}

/// `agentd delete` and `agentd prune` on a daemon whose screenshots are in S3: the bucket is emptied of the
/// task's objects.
#[test]
fn s3_daemon_deletes_a_finished_tasks_screenshots_from_the_bucket() {
    let Some(endpoint) = moto("s3_daemon_deletes_a_finished_tasks_screenshots_from_the_bucket") else { return };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let store = runtime.block_on(fresh_store(&endpoint, "retention-daemon", "runs"));
    let daemon = Daemon::start(&artifacts_section(&endpoint, store.bucket()));
    let mut ids = Vec::new();
    for _ in 0..2 {
        let run = daemon.cli(&["submit", "config/tasks/mock-login.json", "--wait"]);
        assert_eq!(run.code, 0, "{}\n{}", run.stderr, daemon.log());
        ids.push(run.stdout.trim().to_string());
    }
    let objects = |id: &str| runtime.block_on(store.list(&format!("tasks/{id}/"))).expect("list").len();
    assert!(objects(&ids[0]) >= 4 && objects(&ids[1]) >= 4, "screenshots in the bucket");

    let run = daemon.cli(&["delete", &ids[0], "--json"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, daemon.log());
    let reply = run.json();
    assert_eq!(reply["artifacts_pending"], false, "{reply}");
    assert!(reply["artifacts"].as_u64().unwrap_or(0) >= 4, "{reply}");
    assert_eq!(objects(&ids[0]), 0, "the task's objects are gone");
    assert!(objects(&ids[1]) >= 4, "the other task's stay");

    let run = daemon.cli(&["prune", "--older-than", "0", "--dry-run", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json()["artifacts"].as_u64(), Some(objects(&ids[1]) as u64), "{}", run.stdout);
    let run = daemon.cli(&["prune", "--older-than", "0"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(objects(&ids[1]), 0);
    assert!(runtime.block_on(store.list("tasks/")).expect("list").is_empty(), "the bucket holds no task any more");
}
