//! `agentd eval --html FILE` (docs/eval.md): the result as one self-contained page — a table per model, a row
//! per task, and every run that did not pass with why and a link to its trajectory report. No script and
//! nothing fetched (its Content-Security-Policy forbids both); every text is escaped.

use std::fmt::Write;

use super::summary::{EvalResult, percent};
use crate::report::html::escape;

const STYLE: &str = r#"
:root { color-scheme: light dark; --fg: #1d2127; --muted: #5f6b7a; --bg: #f6f7f9; --card: #fff; --line: #dde1e6;
  --ok: #1a7f37; --bad: #c62828; --warn: #9a6700; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6e9ee; --muted: #98a2b3; --bg: #14171c; --card: #1d2127;
  --line: #2f353e; --ok: #4ac26b; --bad: #ff6b6b; --warn: #d4a72c; } }
body { font: 15px/1.45 system-ui, sans-serif; color: var(--fg); background: var(--bg); margin: 0; padding: 24px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 0 0 8px; }
.muted { color: var(--muted); }
section { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 16px; margin: 16px 0; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { font-weight: 600; color: var(--muted); }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.passed { color: var(--ok); } .failed { color: var(--bad); } .infrastructure, .interrupted { color: var(--warn); }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 0 0 12px; }
dt { color: var(--muted); } dd { margin: 0; }
"#;

/// The page for `result`; `report_of(task_id)` is the link to a run's trajectory report, when there is one.
pub fn page(result: &EvalResult, report_of: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(16 * 1024);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str(
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n",
    );
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    out.push_str("<meta name=\"referrer\" content=\"no-referrer\">\n");
    let _ = writeln!(out, "<title>agentd eval {}</title>", escape(&result.suite));
    let _ = writeln!(out, "<style>{STYLE}</style>\n</head>\n<body>");
    let _ = writeln!(
        out,
        "<h1>Suite {}</h1>\n<p class=\"muted\">evaluation <code>{}</code> · repeat {} · {} model(s)</p>",
        escape(&result.suite),
        escape(&result.eval),
        result.repeat,
        result.models.len()
    );
    let opt = |value: Option<f64>, show: &dyn Fn(f64) -> String| value.map_or_else(|| "–".to_string(), show);
    for model in &result.models {
        let _ = writeln!(out, "<section class=\"model\">\n<h2>{}</h2>\n<dl>", escape(&model.name));
        let interval = model
            .interval
            .map_or_else(|| "–".to_string(), |[low, high]| format!("{} – {}", percent(low), percent(high)));
        let rows: [(String, String); 8] = [
            (
                "pass rate".to_string(),
                format!("{} of {} runs ({} passed)", opt(model.pass_rate, &percent), model.runs, model.passed),
            ),
            ("95 % interval".to_string(), interval),
            (format!("pass^{}", result.repeat), opt(model.pass_all_k, &percent)),
            ("median steps".to_string(), opt(model.median_steps, &|s| format!("{s}"))),
            ("median duration".to_string(), opt(model.median_seconds, &|s| format!("{s:.1} s"))),
            ("tokens".to_string(), format!("{} in · {} out", model.input_tokens, model.output_tokens)),
            (
                "cost".to_string(),
                format!(
                    "${:.4} · per task {} · per success {}",
                    model.cost_usd,
                    opt(model.cost_per_task_usd, &|c| format!("${c:.4}")),
                    opt(model.cost_per_success_usd, &|c| format!("${c:.4}"))
                ),
            ),
            (
                "not counted".to_string(),
                format!(
                    "{} infrastructure failure(s) · {} interrupted",
                    model.infrastructure_failures, model.interrupted
                ),
            ),
        ];
        for (term, value) in rows {
            let _ = writeln!(out, "<dt>{}</dt><dd>{}</dd>", escape(&term), escape(&value));
        }
        out.push_str(
            "</dl>\n<table>\n<thead><tr><th>task</th><th class=\"num\">passed</th><th class=\"num\">runs</th>",
        );
        out.push_str("<th class=\"num\">not counted</th><th>runs that did not pass</th></tr></thead>\n<tbody>\n");
        for task in &model.tasks {
            let class = if task.runs > 0 && task.passed == task.runs { "passed" } else { "failed" };
            let _ = write!(
                out,
                "<tr class=\"task\"><td>{}</td><td class=\"num {class}\">{}</td><td class=\"num\">{}</td><td \
                 class=\"num\">{}</td><td>",
                escape(&task.name),
                task.passed,
                task.runs,
                task.infrastructure_failures + task.interrupted
            );
            for failure in &task.failures {
                let label = format!("repeat {}: {} ({})", failure.repeat, failure.verdict.as_str(), failure.reason);
                let _ = write!(out, "<div class=\"failure {}\">", failure.verdict.as_str());
                match report_of(&failure.task_id) {
                    Some(href) => {
                        let _ = write!(out, "<a href=\"{}\">{}</a>", escape(&href), escape(&label));
                    }
                    None => out.push_str(&escape(&label)),
                }
                let _ = write!(
                    out,
                    " <span class=\"muted\">{} · <code>{}</code></span></div>",
                    escape(&failure.summary),
                    escape(&failure.task_id)
                );
            }
            out.push_str("</td></tr>\n");
        }
        out.push_str("</tbody>\n</table>\n</section>\n");
    }
    out.push_str("</body>\n</html>\n");
    out
}
