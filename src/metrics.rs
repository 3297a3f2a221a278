//! Daemon metrics in the Prometheus text exposition format (version 0.0.4): counters and a histogram kept
//! in atomics, plus gauges read from the queue and the uploader when `/metrics` is scraped.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::artifacts::uploader::UploaderStats;
use crate::record::TaskState;

/// Upper bounds of the step-duration histogram, in seconds.
const STEP_BUCKETS: &[f64] = &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

#[derive(Default)]
pub struct Metrics {
    step_buckets: [AtomicU64; 13],
    step_count: AtomicU64,
    /// Sum of step durations in microseconds.
    step_sum_us: AtomicU64,
    pub model_errors: AtomicU64,
    pub action_errors: AtomicU64,
    pub tasks_started: AtomicU64,
    pub tasks_finished: AtomicU64,
    pub lease_losses: AtomicU64,
    pub api_requests: AtomicU64,
}

impl Metrics {
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

    /// Renders every metric; `tasks` and `uploads` are read by the caller at scrape time.
    pub fn render(&self, tasks: &BTreeMap<TaskState, u64>, running_here: usize, uploads: UploaderStats) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# HELP agentd_tasks Tasks in the queue by state.");
        let _ = writeln!(out, "# TYPE agentd_tasks gauge");
        for state in TaskState::ALL {
            let _ = writeln!(
                out,
                "agentd_tasks{{state=\"{}\"}} {}",
                state.as_str(),
                tasks.get(&state).copied().unwrap_or(0)
            );
        }
        let gauge = |out: &mut String, name: &str, help: &str, value: u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}");
        };
        let counter = |out: &mut String, name: &str, help: &str, value: u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}");
        };
        let count = |state: TaskState| tasks.get(&state).copied().unwrap_or(0);
        gauge(
            &mut out,
            "agentd_queue_depth",
            "Tasks waiting to be claimed (queued, across every node of the queue).",
            count(TaskState::Queued),
        );
        gauge(
            &mut out,
            "agentd_leases",
            "Leases held (running tasks, across every node of the queue).",
            count(TaskState::Running),
        );
        gauge(&mut out, "agentd_worker_running_tasks", "Tasks this process is running now.", running_here as u64);
        gauge(&mut out, "agentd_uploads_pending", "Artifacts not stored yet.", uploads.pending);
        gauge(&mut out, "agentd_spool_bytes", "Bytes of artifacts waiting in the local spool.", uploads.spooled_bytes);
        gauge(
            &mut out,
            "agentd_spool_full",
            "Whether the spool reached artifacts.spool_max_bytes (then no new tasks are taken): 0 or 1.",
            u64::from(uploads.spool_full),
        );
        counter(&mut out, "agentd_upload_errors_total", "Failed artifact uploads (retried).", uploads.upload_errors);
        counter(
            &mut out,
            "agentd_model_errors_total",
            "Model calls that failed after retries.",
            self.model_errors.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "agentd_action_errors_total",
            "Actions that failed.",
            self.action_errors.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "agentd_tasks_started_total",
            "Task attempts started here.",
            self.tasks_started.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "agentd_tasks_finished_total",
            "Tasks finished here.",
            self.tasks_finished.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "agentd_lease_losses_total",
            "Leases this process lost.",
            self.lease_losses.load(Ordering::Relaxed),
        );
        counter(&mut out, "agentd_api_requests_total", "HTTP API requests.", self.api_requests.load(Ordering::Relaxed));
        let _ = writeln!(out, "# HELP agentd_step_duration_seconds Duration of agent loop steps.");
        let _ = writeln!(out, "# TYPE agentd_step_duration_seconds histogram");
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
            self.step_sum_us.load(Ordering::Relaxed) as f64 / 1_000_000.0
        );
        let _ = writeln!(out, "agentd_step_duration_seconds_count {count}");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_is_cumulative_and_text_is_well_formed() {
        let metrics = Metrics::default();
        metrics.observe_step(3);
        metrics.observe_step(40);
        metrics.observe_step(120_000);
        let text = metrics.render(&BTreeMap::from([(TaskState::Queued, 2)]), 1, UploaderStats::default());
        assert!(text.contains("agentd_tasks{state=\"queued\"} 2"));
        assert!(text.contains("agentd_queue_depth 2"));
        assert!(text.contains("agentd_step_duration_seconds_bucket{le=\"0.005\"} 1"));
        assert!(text.contains("agentd_step_duration_seconds_bucket{le=\"0.05\"} 2"));
        assert!(text.contains("agentd_step_duration_seconds_bucket{le=\"+Inf\"} 3"));
        assert!(text.contains("agentd_step_duration_seconds_count 3"));
        assert!(text.lines().any(|l| l == "agentd_spool_full 0"));
        let full = metrics.render(&BTreeMap::new(), 0, UploaderStats { spool_full: true, ..UploaderStats::default() });
        assert!(full.lines().any(|l| l == "agentd_spool_full 1"), "{full}");
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }
}
