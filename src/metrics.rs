//! Daemon metrics in the Prometheus text exposition format (version 0.0.4): counters and a histogram kept
//! in atomics, labelled counters (tokens and cost by provider and model, outcomes by state and reason, API
//! requests by method, route and status) in small maps, plus what is read at scrape time: gauges from the
//! queue and the uploader, the build, and the standard process metrics ([`process`]).
//!
//! Label values that come from outside (a task's model id) are bounded: past [`MAX_MODEL_SERIES`] pairs of
//! provider and model, further ones are counted under `model="other"`, so a client cannot make the
//! exposition grow without end.

mod process;

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

pub use process::ProcessStats;

use crate::artifacts::uploader::UploaderStats;
use crate::record::{EndReason, StuckCheck, TaskState, Usage};

/// Upper bounds of the step-duration histogram, in seconds.
const STEP_BUCKETS: &[f64] = &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// At most this many (provider, model) label pairs; further models are counted as `model="other"`.
pub const MAX_MODEL_SERIES: usize = 64;

/// Every way a task ends, so each `agentd_tasks_finished_total` series is there from the start.
const END_REASONS: [EndReason; 7] = [
    EndReason::Completed,
    EndReason::MaxSteps,
    EndReason::Timeout,
    EndReason::Budget,
    EndReason::Cancelled,
    EndReason::Rejected,
    EndReason::Error,
];

/// The HTTP methods counted by name; any other is counted as `method="other"`.
const METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

#[derive(Default)]
pub struct Metrics {
    step_buckets: [AtomicU64; 13],
    step_count: AtomicU64,
    /// Sum of step durations in microseconds.
    step_sum_us: AtomicU64,
    pub model_errors: AtomicU64,
    pub action_errors: AtomicU64,
    pub tasks_started: AtomicU64,
    pub lease_losses: AtomicU64,
    /// Retention (docs/operations.md): tasks deleted here (by `DELETE`, prune or the background job), and their
    /// artifacts.
    pub deleted_tasks: AtomicU64,
    pub deleted_artifacts: AtomicU64,
    pub deleted_artifact_bytes: AtomicU64,
    /// Tasks ended here, by (state, reason).
    finished: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    /// Model usage, by (provider, model).
    usage: Mutex<BTreeMap<(String, String), Usage>>,
    /// API requests, by (method, route template, status).
    requests: Mutex<BTreeMap<(&'static str, String, u16), u64>>,
    /// The stuck-loop guard's firings (docs/task-file.md), by check and by what it did (warned, stopped).
    stuck_guard: [[AtomicU64; 2]; 4],
    /// Verifier checks (docs/replay-and-verify.md) of finished tasks' last rounds, by kind and result.
    verifications: [[AtomicU64; 2]; VERIFY_KINDS.len()],
}

/// The kinds of verifier checks, in the order `agentd_verifications_total` lists them.
const VERIFY_KINDS: [&str; 5] = ["mock_state", "screen", "http", "output", "command"];

impl Metrics {
    /// Counts one firing of the stuck-loop guard.
    pub fn observe_guard(&self, check: StuckCheck, stopped: bool) {
        self.stuck_guard[guard_index(check)][usize::from(stopped)].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a finished task's verifier checks (its outcome's last round).
    pub fn observe_checks(&self, checks: &[crate::record::CheckResult]) {
        for check in checks {
            if let Some(kind) = VERIFY_KINDS.iter().position(|k| *k == check.kind) {
                self.verifications[kind][usize::from(check.ok)].fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub fn observe_step(&self, duration_ms: u64) {
        let seconds = duration_ms as f64 / 1000.0;
        for (i, bound) in STEP_BUCKETS.iter().enumerate() {
            if seconds <= *bound {
                self.step_buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.step_count.fetch_add(1, Ordering::Relaxed);
        self.step_sum_us.fetch_add(duration_ms * 1000, Ordering::Relaxed);
    }

    /// A task ended here (by a worker, or through the API: a cancel or a rejection).
    pub fn task_finished(&self, state: TaskState, reason: EndReason) {
        if let Ok(mut finished) = self.finished.lock() {
            *finished.entry((state.as_str(), reason.as_str())).or_default() += 1;
        }
    }

    /// What one model call (one step) used: `provider` is the task's model provider, `model` the model id
    /// it ran with.
    pub fn model_usage(&self, provider: &str, model: &str, used: &Usage) {
        let Ok(mut usage) = self.usage.lock() else { return };
        let mut key = (provider.to_string(), model.to_string());
        if !usage.contains_key(&key) && usage.len() >= MAX_MODEL_SERIES {
            key.1 = "other".to_string();
        }
        usage.entry(key).or_default().add(used);
    }

    /// One API request: `route` is the matched route template (`/v1/tasks/{id}`), never the raw path.
    pub fn api_request(&self, method: &str, route: &str, status: u16) {
        let method = METHODS.iter().find(|m| **m == method).copied().unwrap_or("other");
        if let Ok(mut requests) = self.requests.lock() {
            *requests.entry((method, route.to_string(), status)).or_default() += 1;
        }
    }

    /// Renders every metric; `tasks`, `uploads` and `process` are read by the caller at scrape time.
    pub fn render(
        &self,
        tasks: &BTreeMap<TaskState, u64>,
        running_here: usize,
        uploads: UploaderStats,
        process: &ProcessStats,
    ) -> String {
        let mut out = String::new();
        let out = &mut out;
        header(out, "agentd_build_info", "gauge", "The agentd build: always 1, its labels say which build.");
        let _ = writeln!(
            out,
            "agentd_build_info{{version=\"{}\",arch=\"{}\",os=\"{}\",profile=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::ARCH,
            std::env::consts::OS,
            if cfg!(debug_assertions) { "debug" } else { "release" },
        );
        header(out, "agentd_tasks", "gauge", "Tasks in the queue by state.");
        for state in TaskState::ALL {
            let _ = writeln!(
                out,
                "agentd_tasks{{state=\"{}\"}} {}",
                state.as_str(),
                tasks.get(&state).copied().unwrap_or(0)
            );
        }
        let count = |state: TaskState| tasks.get(&state).copied().unwrap_or(0);
        single(
            out,
            "agentd_queue_depth",
            "gauge",
            "Tasks waiting to be claimed (queued, across every node of the queue).",
            count(TaskState::Queued),
        );
        single(
            out,
            "agentd_leases",
            "gauge",
            "Leases held (running tasks, across every node of the queue).",
            count(TaskState::Running),
        );
        single(out, "agentd_worker_running_tasks", "gauge", "Tasks this process is running now.", running_here);
        single(out, "agentd_uploads_pending", "gauge", "Artifacts not stored yet.", uploads.pending);
        single(
            out,
            "agentd_spool_bytes",
            "gauge",
            "Bytes of artifacts waiting in the local spool.",
            uploads.spooled_bytes,
        );
        single(
            out,
            "agentd_spool_full",
            "gauge",
            "Whether the spool reached artifacts.spool_max_bytes (then no new tasks are taken): 0 or 1.",
            u64::from(uploads.spool_full),
        );
        single(
            out,
            "agentd_upload_errors_total",
            "counter",
            "Failed artifact uploads (retried).",
            uploads.upload_errors,
        );
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        single(
            out,
            "agentd_model_errors_total",
            "counter",
            "Model calls that failed after retries.",
            load(&self.model_errors),
        );
        single(out, "agentd_action_errors_total", "counter", "Actions that failed.", load(&self.action_errors));
        single(out, "agentd_tasks_started_total", "counter", "Task attempts started here.", load(&self.tasks_started));
        self.render_finished(out);
        single(out, "agentd_lease_losses_total", "counter", "Leases this process lost.", load(&self.lease_losses));
        single(
            out,
            "agentd_retention_deleted_tasks_total",
            "counter",
            "Finished tasks this process deleted (DELETE, prune, the retention job), with steps and events.",
            load(&self.deleted_tasks),
        );
        single(
            out,
            "agentd_retention_deleted_artifacts_total",
            "counter",
            "Artifacts of deleted tasks this process removed from the store.",
            load(&self.deleted_artifacts),
        );
        single(
            out,
            "agentd_retention_deleted_bytes_total",
            "counter",
            "Bytes of the artifacts of deleted tasks this process removed from the store.",
            load(&self.deleted_artifact_bytes),
        );
        self.render_usage(out);
        self.render_requests(out);
        self.render_guard(out);
        self.render_verifications(out);
        self.render_steps(out);
        render_process(out, process);
        std::mem::take(out)
    }

    fn render_finished(&self, out: &mut String) {
        header(
            out,
            "agentd_tasks_finished_total",
            "counter",
            "Tasks ended here (by a worker, or by a cancel or rejection through this node's API), by final \
             state and outcome reason.",
        );
        let mut finished = self.finished.lock().map(|f| f.clone()).unwrap_or_default();
        // Every (state, reason) a task can end with, at 0 until one does.
        for reason in END_REASONS {
            let state = crate::record::Outcome::new(false, "", reason).state();
            finished.entry((state.as_str(), reason.as_str())).or_default();
        }
        finished.entry((TaskState::Succeeded.as_str(), EndReason::Completed.as_str())).or_default();
        for ((state, reason), n) in finished {
            let _ = writeln!(out, "agentd_tasks_finished_total{{state=\"{state}\",reason=\"{reason}\"}} {n}");
        }
    }

    fn render_usage(&self, out: &mut String) {
        let usage = self.usage.lock().map(|u| u.clone()).unwrap_or_default();
        header(
            out,
            "agentd_model_tokens_total",
            "counter",
            "Tokens used by model calls made here, by model provider, model and kind (input, output, cache_read, \
             cache_write).",
        );
        for ((provider, model), used) in &usage {
            let (provider, model) = (escape(provider), escape(model));
            for (kind, n) in [
                ("input", used.input_tokens),
                ("output", used.output_tokens),
                ("cache_read", used.cache_read_tokens),
                ("cache_write", used.cache_write_tokens),
            ] {
                let _ = writeln!(
                    out,
                    "agentd_model_tokens_total{{provider=\"{provider}\",model=\"{model}\",kind=\"{kind}\"}} {n}"
                );
            }
        }
        header(
            out,
            "agentd_model_cost_usd_total",
            "counter",
            "What model calls made here cost, in US dollars (at the configured prices), by model provider and model.",
        );
        for ((provider, model), used) in &usage {
            let _ = writeln!(
                out,
                "agentd_model_cost_usd_total{{provider=\"{}\",model=\"{}\"}} {}",
                escape(provider),
                escape(model),
                float(used.cost_usd)
            );
        }
    }

    fn render_requests(&self, out: &mut String) {
        header(
            out,
            "agentd_api_requests_total",
            "counter",
            "HTTP API requests answered, by method, route template (\"unmatched\" for no route) and status code.",
        );
        let requests = self.requests.lock().map(|r| r.clone()).unwrap_or_default();
        for ((method, route, status), n) in requests {
            let _ = writeln!(
                out,
                "agentd_api_requests_total{{method=\"{method}\",route=\"{}\",status=\"{status}\"}} {n}",
                escape(&route)
            );
        }
    }

    fn render_guard(&self, out: &mut String) {
        header(
            out,
            "agentd_stuck_guard_total",
            "counter",
            "Stuck-loop guard firings, by check and by what it did (warned the model, stopped the task).",
        );
        for check in
            [StuckCheck::NoChangeSteps, StuckCheck::RepeatActions, StuckCheck::IdleTurns, StuckCheck::WaitSteps]
        {
            for (stopped, action) in [(false, "warned"), (true, "stopped")] {
                let value = self.stuck_guard[guard_index(check)][usize::from(stopped)].load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "agentd_stuck_guard_total{{check=\"{}\",action=\"{action}\"}} {value}",
                    check.as_str()
                );
            }
        }
    }

    fn render_verifications(&self, out: &mut String) {
        header(
            out,
            "agentd_verifications_total",
            "counter",
            "Verifier checks of finished tasks (their last round), by kind and whether they passed.",
        );
        for (i, kind) in VERIFY_KINDS.iter().enumerate() {
            for ok in [false, true] {
                let value = self.verifications[i][usize::from(ok)].load(Ordering::Relaxed);
                let _ = writeln!(out, "agentd_verifications_total{{kind=\"{kind}\",ok=\"{ok}\"}} {value}");
            }
        }
    }

    fn render_steps(&self, out: &mut String) {
        header(out, "agentd_step_duration_seconds", "histogram", "Duration of agent loop steps.");
        for (i, bound) in STEP_BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "agentd_step_duration_seconds_bucket{{le=\"{bound}\"}} {}",
                self.step_buckets[i].load(Ordering::Relaxed)
            );
        }
        let count = self.step_count.load(Ordering::Relaxed);
        let _ = writeln!(out, "agentd_step_duration_seconds_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(
            out,
            "agentd_step_duration_seconds_sum {}",
            float(self.step_sum_us.load(Ordering::Relaxed) as f64 / 1_000_000.0)
        );
        let _ = writeln!(out, "agentd_step_duration_seconds_count {count}");
    }
}

fn guard_index(check: StuckCheck) -> usize {
    match check {
        StuckCheck::NoChangeSteps => 0,
        StuckCheck::RepeatActions => 1,
        StuckCheck::IdleTurns => 2,
        StuckCheck::WaitSteps => 3,
    }
}

fn render_process(out: &mut String, process: &ProcessStats) {
    let mut one = |name: &str, kind: &str, help: &str, value: Option<String>| {
        if let Some(value) = value {
            header(out, name, kind, help);
            let _ = writeln!(out, "{name} {value}");
        }
    };
    one(
        "process_cpu_seconds_total",
        "counter",
        "Total user and system CPU time spent in seconds.",
        process.cpu_seconds.map(float),
    );
    one(
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size in bytes.",
        process.resident_bytes.map(|n| n.to_string()),
    );
    one(
        "process_virtual_memory_bytes",
        "gauge",
        "Virtual memory size in bytes.",
        process.virtual_bytes.map(|n| n.to_string()),
    );
    one("process_open_fds", "gauge", "Number of open file descriptors.", process.open_fds.map(|n| n.to_string()));
    one("process_max_fds", "gauge", "Maximum number of open file descriptors.", process.max_fds.map(|n| n.to_string()));
    one(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since unix epoch in seconds.",
        process.start_time_seconds.map(float),
    );
}

/// The desktop pool's series (docs/providers.md), from `(name, state, resets)` of each desktop: nothing without a pool.
pub fn render_desktops(desktops: &[(&str, &str, u64)]) -> String {
    let mut out = String::new();
    if desktops.is_empty() {
        return out;
    }
    header(&mut out, "agentd_desktops", "gauge", "Desktops of the pool by state (starting, free, busy, failed).");
    for state in ["starting", "free", "busy", "failed"] {
        let n = desktops.iter().filter(|(_, s, _)| *s == state).count();
        let _ = writeln!(out, "agentd_desktops{{state=\"{state}\"}} {n}");
    }
    header(&mut out, "agentd_desktop_up", "gauge", "1 while the desktop is in the pool, 0 once it failed.");
    for (name, state, _) in desktops {
        let _ = writeln!(out, "agentd_desktop_up{{desktop=\"{}\"}} {}", escape(name), u8::from(*state != "failed"));
    }
    header(&mut out, "agentd_desktop_resets_total", "counter", "Resets the desktop ran successfully before tasks.");
    for (name, _, resets) in desktops {
        let _ = writeln!(out, "agentd_desktop_resets_total{{desktop=\"{}\"}} {resets}", escape(name));
    }
    out
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn single(out: &mut String, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
    header(out, name, kind, help);
    let _ = writeln!(out, "{name} {value}");
}

/// A sample value: Rust's shortest round-trip form, which the text format reads (`NaN`, `+Inf`, `-Inf` spelled
/// its way).
fn float(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else {
        value.to_string()
    }
}

/// A label value as the text format wants it: `\\`, `\"` and `\n` escaped.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(metrics: &Metrics, tasks: &BTreeMap<TaskState, u64>, uploads: UploaderStats) -> String {
        metrics.render(tasks, 1, uploads, &ProcessStats::default())
    }

    #[test]
    fn histogram_is_cumulative_and_text_is_well_formed() {
        let metrics = Metrics::default();
        metrics.observe_step(3);
        metrics.observe_step(40);
        metrics.observe_step(120_000);
        let text = render(&metrics, &BTreeMap::from([(TaskState::Queued, 2)]), UploaderStats::default());
        assert!(text.contains("agentd_tasks{state=\"queued\"} 2"));
        assert!(text.contains("agentd_queue_depth 2"));
        assert!(text.contains("agentd_step_duration_seconds_bucket{le=\"0.005\"} 1"));
        assert!(text.contains("agentd_step_duration_seconds_bucket{le=\"0.05\"} 2"));
        assert!(text.contains("agentd_step_duration_seconds_bucket{le=\"+Inf\"} 3"));
        assert!(text.contains("agentd_step_duration_seconds_count 3"));
        assert!(text.lines().any(|l| l == "agentd_spool_full 0"));
        let full = render(&metrics, &BTreeMap::new(), UploaderStats { spool_full: true, ..UploaderStats::default() });
        assert!(full.lines().any(|l| l == "agentd_spool_full 1"), "{full}");
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }

    #[test]
    fn labelled_counters_add_up_and_escape_their_values() {
        let metrics = Metrics::default();
        let used =
            Usage { input_tokens: 100, output_tokens: 7, cache_read_tokens: 3, cache_write_tokens: 0, cost_usd: 0.25 };
        metrics.model_usage("anthropic", "claude \"x\"\\\n", &used);
        metrics.model_usage("anthropic", "claude \"x\"\\\n", &used);
        metrics.task_finished(TaskState::Failed, EndReason::Budget);
        metrics.api_request("GET", "/v1/tasks/{id}", 404);
        metrics.api_request("BREW", "unmatched", 405);
        let text = render(&metrics, &BTreeMap::new(), UploaderStats::default());
        let model = r#"provider="anthropic",model="claude \"x\"\\\n""#;
        assert!(text.contains(&format!("agentd_model_tokens_total{{{model},kind=\"input\"}} 200\n")), "{text}");
        assert!(text.contains(&format!("agentd_model_cost_usd_total{{{model}}} 0.5\n")), "{text}");
        assert!(text.contains("agentd_tasks_finished_total{state=\"failed\",reason=\"budget\"} 1\n"), "{text}");
        assert!(text.contains("agentd_tasks_finished_total{state=\"cancelled\",reason=\"cancelled\"} 0\n"), "{text}");
        assert!(text.contains("agentd_tasks_finished_total{state=\"succeeded\",reason=\"completed\"} 0\n"), "{text}");
        assert!(
            text.contains("agentd_api_requests_total{method=\"GET\",route=\"/v1/tasks/{id}\",status=\"404\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("method=\"other\",route=\"unmatched\",status=\"405\"} 1"), "{text}");
        assert!(text.contains("agentd_build_info{version=\""), "{text}");
    }

    #[test]
    fn model_series_are_bounded() {
        let metrics = Metrics::default();
        let used = Usage { input_tokens: 1, ..Usage::default() };
        for i in 0..MAX_MODEL_SERIES + 10 {
            metrics.model_usage("openai-compatible", &format!("model-{i}"), &used);
        }
        let text = render(&metrics, &BTreeMap::new(), UploaderStats::default());
        let series = text.lines().filter(|l| l.starts_with("agentd_model_cost_usd_total{")).count();
        assert_eq!(series, MAX_MODEL_SERIES + 1, "{text}");
        assert!(text.contains("model=\"other\",kind=\"input\"} 10\n"), "{text}");
    }
}
