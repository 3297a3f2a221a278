//! An evaluation's result (docs/eval.md) from its runs' task records, and its comparison with a baseline.
//!
//! A run is `passed` (the task succeeded and its verifier passed), `failed` (the model's failure: it gave up,
//! its verifier failed, it ran out of steps, time or budget, was stuck or rejected), `infrastructure` (the
//! run ended in an error — the computer unavailable, the model unreachable after its retries, an internal
//! error — or could not start), or `interrupted` (cancelled). Only passed and failed runs are results: the
//! pass rate, its interval and the medians are theirs; infrastructure failures and interruptions are counted
//! apart, so an outage never reads as a worse model. Tokens and cost are every run's.

use serde::{Deserialize, Serialize};

use crate::record::{EndReason, Usage};
use crate::status::TaskRecord;

/// z for a two-sided 95 % interval.
const Z95: f64 = 1.959_963_984_540_054;

/// What one run counts as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Passed,
    Failed,
    Infrastructure,
    Interrupted,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Passed => "passed",
            Self::Failed => "failed",
            Self::Infrastructure => "infrastructure",
            Self::Interrupted => "interrupted",
        }
    }

    /// Passed and failed runs are results; the others say nothing of the model.
    pub fn is_result(self) -> bool {
        matches!(self, Self::Passed | Self::Failed)
    }
}

/// One run as the result sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    pub task: String,
    pub model: String,
    pub repeat: u32,
    pub task_id: String,
    pub verdict: Verdict,
    /// The end reason (`verification_failed`, `error`, …), or `unavailable` for a run that could not start.
    pub reason: String,
    pub summary: String,
    pub steps: u32,
    pub seconds: Option<f64>,
    pub usage: Usage,
}

impl RunOutcome {
    /// A run that ended, from its record.
    pub fn from_record(task: &str, model: &str, repeat: u32, record: &TaskRecord) -> Self {
        let (verdict, reason, summary) = match (&record.outcome, record.state.is_terminal()) {
            (Some(outcome), true) => {
                let verdict = match outcome.reason {
                    _ if outcome.success && outcome.verified == Some(true) => Verdict::Passed,
                    EndReason::Error => Verdict::Infrastructure,
                    EndReason::Cancelled => Verdict::Interrupted,
                    _ => Verdict::Failed,
                };
                let reason = match outcome.reason {
                    // A success no check confirmed is no pass (a suite's tasks all have checks).
                    EndReason::Completed if outcome.success && verdict == Verdict::Failed => "unverified",
                    reason => reason.as_str(),
                };
                (verdict, reason.to_string(), outcome.summary.clone())
            }
            _ => (Verdict::Interrupted, record.state.as_str().to_string(), "the run has not ended".to_string()),
        };
        let seconds = match (record.started_at, record.finished_at) {
            (Some(start), Some(end)) => Some((end - start).as_seconds_f64().max(0.0)),
            _ => None,
        };
        Self {
            task: task.to_string(),
            model: model.to_string(),
            repeat,
            task_id: record.id.clone(),
            verdict,
            reason,
            summary,
            steps: u32::try_from(record.steps.len()).unwrap_or(u32::MAX),
            seconds,
            usage: record.usage,
        }
    }

    /// A run that could not start: its computer or model could not be built, or the daemon refused it.
    pub fn unavailable(task: &str, model: &str, repeat: u32, task_id: &str, message: String) -> Self {
        Self {
            task: task.to_string(),
            model: model.to_string(),
            repeat,
            task_id: task_id.to_string(),
            verdict: Verdict::Infrastructure,
            reason: "unavailable".to_string(),
            summary: message,
            steps: 0,
            seconds: None,
            usage: Usage::default(),
        }
    }
}

/// The result document (`agentd eval --json`, docs/eval.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalResult {
    pub suite: String,
    /// The evaluation's id (`--continue ID`); each run's task id begins with it.
    pub eval: String,
    pub repeat: u32,
    pub models: Vec<ModelResult>,
}

/// One model's result over the suite.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelResult {
    pub name: String,
    /// Runs with a result (passed or failed).
    pub runs: u32,
    pub passed: u32,
    pub failed: u32,
    pub infrastructure_failures: u32,
    pub interrupted: u32,
    /// `passed / runs`; `null` without results.
    pub pass_rate: Option<f64>,
    /// The pass rate's 95 % Wilson score interval.
    pub interval: Option<[f64; 2]>,
    /// The share of tasks whose k repeats all passed, over the tasks with k results.
    pub pass_all_k: Option<f64>,
    pub median_steps: Option<f64>,
    pub median_seconds: Option<f64>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Every run's cost, infrastructure failures included.
    pub cost_usd: f64,
    pub cost_per_task_usd: Option<f64>,
    pub cost_per_success_usd: Option<f64>,
    pub tasks: Vec<TaskResult>,
}

/// One task's row under a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskResult {
    pub name: String,
    pub runs: u32,
    pub passed: u32,
    pub infrastructure_failures: u32,
    pub interrupted: u32,
    /// Every run's task id, repeat 1 first.
    pub task_ids: Vec<String>,
    /// The runs that did not pass, with why.
    pub failures: Vec<RunFailure>,
}

/// A run that did not pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunFailure {
    pub task_id: String,
    pub repeat: u32,
    pub verdict: Verdict,
    pub reason: String,
    pub summary: String,
}

impl EvalResult {
    /// The result of `runs` (any order) for the models and tasks named, in the suite's order.
    pub fn summarize(
        suite: &str,
        eval: &str,
        repeat: u32,
        models: &[String],
        tasks: &[String],
        runs: &[RunOutcome],
    ) -> Self {
        let models = models
            .iter()
            .map(|model| {
                let mine: Vec<&RunOutcome> = runs.iter().filter(|r| &r.model == model).collect();
                ModelResult::of(model, repeat, tasks, &mine)
            })
            .collect();
        Self { suite: suite.to_string(), eval: eval.to_string(), repeat, models }
    }

    /// Whether any run failed for infrastructure reasons or was interrupted.
    pub fn incomplete(&self) -> bool {
        self.models.iter().any(|m| m.infrastructure_failures + m.interrupted > 0)
    }
}

impl ModelResult {
    fn of(name: &str, repeat: u32, task_names: &[String], runs: &[&RunOutcome]) -> Self {
        let with = |verdict: Verdict| count(runs.iter().filter(|r| r.verdict == verdict));
        let (passed, failed) = (with(Verdict::Passed), with(Verdict::Failed));
        let results = passed + failed;
        let mut usage = Usage::default();
        for run in runs {
            usage.add(&run.usage);
        }
        let tasks: Vec<TaskResult> = task_names
            .iter()
            .map(|task| {
                let mut mine: Vec<&&RunOutcome> = runs.iter().filter(|r| &r.task == task).collect();
                mine.sort_by_key(|r| r.repeat);
                TaskResult::of(task, &mine)
            })
            .collect();
        let complete: Vec<&TaskResult> = tasks.iter().filter(|t| t.runs == repeat).collect();
        let all_passed = count(complete.iter().filter(|t| t.passed == repeat));
        let steps: Vec<f64> = runs.iter().filter(|r| r.verdict.is_result()).map(|r| f64::from(r.steps)).collect();
        let seconds: Vec<f64> = runs.iter().filter(|r| r.verdict.is_result()).filter_map(|r| r.seconds).collect();
        let cost = round(usage.cost_usd, 6);
        Self {
            name: name.to_string(),
            runs: results,
            passed,
            failed,
            infrastructure_failures: with(Verdict::Infrastructure),
            interrupted: with(Verdict::Interrupted),
            pass_rate: ratio(passed, results).map(|r| round(r, 4)),
            interval: wilson(passed, results).map(|[low, high]| [round(low, 4), round(high, 4)]),
            pass_all_k: ratio(all_passed, count(complete.iter())).map(|r| round(r, 4)),
            median_steps: median(steps),
            median_seconds: median(seconds).map(|s| round(s, 3)),
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cost_usd: cost,
            cost_per_task_usd: (!runs.is_empty()).then(|| round(usage.cost_usd / runs.len() as f64, 6)),
            cost_per_success_usd: (passed > 0).then(|| round(usage.cost_usd / f64::from(passed), 6)),
            tasks,
        }
    }
}

impl TaskResult {
    fn of(name: &str, runs: &[&&RunOutcome]) -> Self {
        let with = |verdict: Verdict| count(runs.iter().filter(|r| r.verdict == verdict));
        Self {
            name: name.to_string(),
            runs: with(Verdict::Passed) + with(Verdict::Failed),
            passed: with(Verdict::Passed),
            infrastructure_failures: with(Verdict::Infrastructure),
            interrupted: with(Verdict::Interrupted),
            task_ids: runs.iter().map(|r| r.task_id.clone()).collect(),
            failures: runs
                .iter()
                .filter(|r| r.verdict != Verdict::Passed)
                .map(|r| RunFailure {
                    task_id: r.task_id.clone(),
                    repeat: r.repeat,
                    verdict: r.verdict,
                    reason: r.reason.clone(),
                    summary: r.summary.clone(),
                })
                .collect(),
        }
    }
}

fn count<T>(items: impl Iterator<Item = T>) -> u32 {
    u32::try_from(items.count()).unwrap_or(u32::MAX)
}

fn ratio(part: u32, whole: u32) -> Option<f64> {
    (whole > 0).then(|| f64::from(part) / f64::from(whole))
}

fn round(value: f64, places: i32) -> f64 {
    let scale = 10f64.powi(places);
    (value * scale).round() / scale
}

/// The 95 % Wilson score interval of `passed` successes in `runs` trials; `None` without trials.
pub fn wilson(passed: u32, runs: u32) -> Option<[f64; 2]> {
    if runs == 0 {
        return None;
    }
    let n = f64::from(runs);
    let p = f64::from(passed.min(runs)) / n;
    let z2 = Z95 * Z95;
    let denominator = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / denominator;
    let half = Z95 * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / denominator;
    Some([(centre - half).max(0.0), (centre + half).min(1.0)])
}

/// The median; the mean of the two middle values for an even count; `None` for none.
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len().is_multiple_of(2) { (values[mid - 1] + values[mid]) / 2.0 } else { values[mid] })
}

/// What a baseline file must hold: an earlier `--json` result (extra fields are ignored).
#[derive(Debug, Clone, Deserialize)]
pub struct Baseline {
    pub models: Vec<BaselineModel>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct BaselineModel {
    pub name: String,
    #[serde(default)]
    pub pass_rate: Option<f64>,
    #[serde(default)]
    pub interval: Option<[f64; 2]>,
}

/// A model whose pass rate fell below the baseline's interval (or that has no result where the baseline has).
#[derive(Debug, Clone, PartialEq)]
pub struct Regression {
    pub model: String,
    pub pass_rate: Option<f64>,
    pub baseline_interval: [f64; 2],
}

/// One line per model of the result: how it compares with the baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub lines: Vec<String>,
    pub regressions: Vec<Regression>,
}

impl Baseline {
    /// Compares `result` with this baseline: a model regressed when its pass rate is below the low end of the
    /// baseline's interval for the model of the same name, or when it has no result and the baseline has one.
    pub fn compare(&self, result: &EvalResult) -> Comparison {
        let mut lines = Vec::new();
        let mut regressions = Vec::new();
        for model in &result.models {
            let Some(base) = self.models.iter().find(|b| b.name == model.name) else {
                lines.push(format!("{}: not in the baseline (not compared)", model.name));
                continue;
            };
            let Some(interval) = base.interval else {
                lines.push(format!("{}: the baseline has no interval for it (not compared)", model.name));
                continue;
            };
            let shown = |rate: Option<f64>| rate.map_or_else(|| "no result".to_string(), percent);
            let range = format!("[{}, {}]", percent(interval[0]), percent(interval[1]));
            match model.pass_rate {
                Some(rate) if rate >= interval[0] => lines.push(format!(
                    "{}: {} (baseline {} {range}): ok",
                    model.name,
                    percent(rate),
                    shown(base.pass_rate)
                )),
                rate => {
                    lines.push(format!(
                        "{}: {} is below the baseline's interval {range} (baseline {}): REGRESSION",
                        model.name,
                        shown(rate),
                        shown(base.pass_rate)
                    ));
                    regressions.push(Regression {
                        model: model.name.clone(),
                        pass_rate: rate,
                        baseline_interval: interval,
                    });
                }
            }
        }
        Comparison { lines, regressions }
    }
}

/// `0.5` → `50.0%`.
pub fn percent(rate: f64) -> String {
    format!("{:.1}%", rate * 100.0)
}

/// The result as a table for a terminal: a line per model, then its tasks. Texts are the suite's and the
/// runs' own: the caller makes them safe to print.
pub fn table(result: &EvalResult) -> String {
    let mut out = format!("suite {}  (evaluation {}, repeat {})\n", result.suite, result.eval, result.repeat);
    let opt = |value: Option<f64>, show: &dyn Fn(f64) -> String| value.map_or_else(|| "-".to_string(), show);
    for model in &result.models {
        out.push_str(&format!(
            "\n{}\n  pass rate {} of {} runs, 95% interval {}; pass^{} {}\n  median {} steps, {} s; tokens {} in / {} \
             out; cost ${:.4} (per task {}, per success {})\n",
            model.name,
            opt(model.pass_rate, &percent),
            model.runs,
            model.interval.map_or_else(|| "-".to_string(), |[l, h]| format!("[{}, {}]", percent(l), percent(h))),
            result.repeat,
            opt(model.pass_all_k, &percent),
            opt(model.median_steps, &|s| format!("{s}")),
            opt(model.median_seconds, &|s| format!("{s:.1}")),
            model.input_tokens,
            model.output_tokens,
            model.cost_usd,
            opt(model.cost_per_task_usd, &|c| format!("${c:.4}")),
            opt(model.cost_per_success_usd, &|c| format!("${c:.4}")),
        ));
        if model.infrastructure_failures + model.interrupted > 0 {
            out.push_str(&format!(
                "  not counted: {} infrastructure failure(s), {} interrupted\n",
                model.infrastructure_failures, model.interrupted
            ));
        }
        let width = model.tasks.iter().map(|t| t.name.chars().count()).max().unwrap_or(4).max(4);
        out.push_str(&format!("  {:<width$}  passed  not counted\n", "task"));
        for task in &model.tasks {
            out.push_str(&format!(
                "  {:<width$}  {:>3}/{:<3} {}\n",
                task.name,
                task.passed,
                task.runs,
                task.infrastructure_failures + task.interrupted
            ));
            for failure in &task.failures {
                out.push_str(&format!(
                    "  {:<width$}    repeat {}: {} ({}): {}  [{}]\n",
                    "",
                    failure.repeat,
                    failure.verdict.as_str(),
                    failure.reason,
                    failure.summary,
                    failure.task_id
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wilson_interval_matches_its_published_values() {
        // Newcombe (1998), table I: 81/263 → 0.2553–0.3662; 15/148 → 0.0624–0.1605; 0/10 → 0–0.2775.
        let check = |passed, runs, low: f64, high: f64| {
            let [l, h] = wilson(passed, runs).unwrap_or([f64::NAN, f64::NAN]);
            assert!((l - low).abs() < 5e-5 && (h - high).abs() < 5e-5, "{passed}/{runs}: [{l}, {h}]");
        };
        check(81, 263, 0.2553, 0.3662);
        check(15, 148, 0.0624, 0.1605);
        check(0, 10, 0.0, 0.2775);
        check(2, 4, 0.1500, 0.8500);
        check(10, 10, 0.7225, 1.0);
        assert_eq!(wilson(0, 0), None);
    }

    #[test]
    fn a_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(Vec::new()), None);
    }

    fn run(task: &str, repeat: u32, verdict: Verdict, steps: u32) -> RunOutcome {
        RunOutcome {
            task: task.into(),
            model: "m".into(),
            repeat,
            task_id: format!("e.{task}.r{repeat}"),
            verdict,
            reason: "x".into(),
            summary: String::new(),
            steps,
            seconds: Some(f64::from(steps)),
            usage: Usage { input_tokens: 10, output_tokens: 1, cost_usd: 0.01, ..Usage::default() },
        }
    }

    #[test]
    fn infrastructure_failures_and_interruptions_are_counted_apart_from_results() {
        let runs = [
            run("a", 1, Verdict::Passed, 3),
            run("a", 2, Verdict::Passed, 5),
            run("b", 1, Verdict::Failed, 10),
            run("b", 2, Verdict::Infrastructure, 0),
            run("c", 1, Verdict::Passed, 4),
            run("c", 2, Verdict::Failed, 6),
        ];
        let tasks = ["a".to_string(), "b".to_string(), "c".to_string()];
        let result = EvalResult::summarize("s", "e", 2, &["m".to_string()], &tasks, &runs);
        let m = &result.models[0];
        assert_eq!((m.runs, m.passed, m.failed, m.infrastructure_failures, m.interrupted), (5, 3, 2, 1, 0));
        assert_eq!(m.pass_rate, Some(0.6));
        // pass^k: a passed both repeats; c did not; b has one result of two and is not counted.
        assert_eq!(m.pass_all_k, Some(0.5));
        assert_eq!(m.median_steps, Some(5.0));
        assert_eq!(m.cost_usd, 0.06);
        assert_eq!(m.cost_per_success_usd, Some(0.02));
        assert_eq!(m.tasks[1].task_ids, vec!["e.b.r1".to_string(), "e.b.r2".to_string()]);
        assert_eq!(m.tasks[1].failures.len(), 2);
        assert!(result.incomplete());
    }

    #[test]
    fn a_pass_rate_below_the_baselines_interval_is_a_regression() {
        let runs = [run("a", 1, Verdict::Passed, 1), run("a", 2, Verdict::Failed, 1)];
        let result = EvalResult::summarize("s", "e", 2, &["m".to_string()], &["a".to_string()], &runs);
        let baseline = |low: f64| Baseline {
            models: vec![BaselineModel { name: "m".into(), pass_rate: Some(0.9), interval: Some([low, 1.0]) }],
        };
        assert!(baseline(0.5).compare(&result).regressions.is_empty());
        let failing = baseline(0.51).compare(&result);
        assert_eq!(failing.regressions.len(), 1, "{:?}", failing.lines);
        assert!(failing.lines[0].contains("REGRESSION"), "{:?}", failing.lines);
        let other = Baseline { models: vec![BaselineModel { name: "n".into(), pass_rate: None, interval: None }] };
        assert!(other.compare(&result).regressions.is_empty());
    }
}
