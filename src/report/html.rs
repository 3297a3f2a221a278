//! The HTML report: one self-contained file — CSS inline, screenshots as `data:` URIs, the actions drawn as
//! inline SVG over them in screen pixels, no script and nothing fetched (its Content-Security-Policy forbids
//! both) — with the task (instructions, state, outcome, structured output, usage, cost, times), then every step:
//! screenshot with its actions, the model's text and thinking, tool calls with results and details, errors;
//! and a place for verifiers.
//!
//! Everything that comes from the task, the model or a tool goes through [`escape`]: a task whose text holds
//! markup shows that markup as text.
//!
//! [`HtmlWriter`] writes the file as the steps arrive: the header (from the status document alone) first, then
//! each step with its screenshot base64-encoded straight into the output, so one screenshot at a time is held.

use std::fmt::Write as _;
use std::io::Write;

use time::OffsetDateTime;

use super::draw;
use super::{ReportError, Sink, StepView, duration, png_size};
use crate::record::{StepRecord, Usage};
use crate::status::TaskRecord;

/// Escapes text for HTML element content and quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = r#"
:root { color-scheme: light dark; --fg: #1d2127; --muted: #5f6b7a; --bg: #f6f7f9; --card: #fff; --line: #dde1e6;
  --ok: #1a7f37; --err: #c62828; --accent: #1e6fe8; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6e9ee; --muted: #9aa5b4; --bg: #14171b; --card: #1d2127;
  --line: #303640; --ok: #4cc26b; --err: #ff6b6b; --accent: #6aa5ff; } }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg); }
header, main, section.verifiers, nav { max-width: 1200px; margin: 0 auto; padding: 0 16px; }
header { padding-top: 24px; }
h1 { font-size: 22px; margin: 0 0 12px; word-break: break-all; }
h2 { font-size: 18px; margin: 0; }
h3 { font-size: 14px; margin: 12px 0 4px; text-transform: uppercase; letter-spacing: .04em; color: var(--muted); }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; margin: 0 0 16px; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; min-width: 0; }
pre { white-space: pre-wrap; word-break: break-word; margin: 0; padding: 8px 10px; background: var(--bg);
  border: 1px solid var(--line); border-radius: 6px; font: 13px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; }
.state { font-weight: 600; }
.ok, .state-succeeded { color: var(--ok); }
.err, .state-failed, .state-cancelled { color: var(--err); }
nav.steps { display: flex; flex-wrap: wrap; gap: 6px; padding-bottom: 16px; }
nav.steps a { padding: 2px 8px; border: 1px solid var(--line); border-radius: 12px; text-decoration: none; color: var(--accent); background: var(--card); }
nav.steps a.has-error { border-color: var(--err); color: var(--err); }
article.step { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 14px 16px; margin: 0 0 18px; }
article.step > header { padding: 0 0 10px; max-width: none; display: flex; flex-wrap: wrap; gap: 4px 14px; align-items: baseline; }
.meta { color: var(--muted); font-size: 13px; }
.cols { display: grid; grid-template-columns: minmax(0, 3fr) minmax(0, 2fr); gap: 16px; }
@media (max-width: 900px) { .cols { grid-template-columns: minmax(0, 1fr); } }
.shot { position: relative; margin: 0; line-height: 0; border: 1px solid var(--line); border-radius: 6px; overflow: hidden; }
.shot img { display: block; width: 100%; height: auto; }
.shot svg { position: absolute; inset: 0; width: 100%; height: 100%; pointer-events: none; }
.shot svg .halo { filter: drop-shadow(0 0 1.5px rgba(255,255,255,.9)); }
.shot svg text.n { fill: #fff; stroke: #000; stroke-width: 3px; paint-order: stroke; font-weight: 700; font-family: sans-serif; }
.shot .keys { position: absolute; left: 8px; top: 8px; max-width: calc(100% - 16px); line-height: 1.35; font-size: 13px;
  background: rgba(16,18,22,.78); color: #fff; padding: 4px 8px; border-radius: 6px; }
.missing { padding: 48px 16px; text-align: center; color: var(--muted); background: var(--bg); line-height: 1.4; }
ol.actions { margin: 0; padding-left: 22px; }
ol.actions li { margin: 2px 0; }
code { font: 13px ui-monospace, "DejaVu Sans Mono", monospace; }
.tool { border-left: 3px solid var(--line); padding: 2px 0 2px 10px; margin: 6px 0; }
.tool.failed { border-left-color: var(--err); }
.errors { color: var(--err); }
section.verifiers { margin-bottom: 18px; }
section.verifiers > div { background: var(--card); border: 1px dashed var(--line); border-radius: 10px; padding: 12px 16px; }
details summary { cursor: pointer; color: var(--muted); }
"#;

/// The HTML report, written to `W` a step at a time.
pub struct HtmlWriter<W: Write> {
    out: W,
    done: bool,
}

impl<W: Write> HtmlWriter<W> {
    /// Writes everything before the steps: the head, the task's header, the verifiers and the steps' links.
    pub fn new(record: &TaskRecord, mut out: W) -> Result<Self, ReportError> {
        let mut text = String::with_capacity(64 * 1024);
        text.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
        // Defence in depth: everything is escaped, and the file may run no script and fetch nothing anyway.
        text.push_str(
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; \
             style-src 'unsafe-inline'\">\n",
        );
        text.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
        text.push_str("<meta name=\"referrer\" content=\"no-referrer\">\n");
        let _ = writeln!(text, "<title>agentd task {} — {}</title>", escape(&record.id), record.state.as_str());
        let _ = writeln!(text, "<style>{STYLE}</style>\n</head>\n<body>");
        header(&mut text, record);
        verifiers(&mut text, record.outcome.as_ref());
        text.push_str("<nav class=\"steps\" aria-label=\"Steps\">");
        for step in &record.steps {
            let class = if StepView::of(step).errors().is_empty() { "" } else { " class=\"has-error\"" };
            let _ = write!(text, "<a href=\"#step-{0}\"{class}>{0}</a>", step.index);
        }
        if record.final_screenshot.is_some() {
            text.push_str("<a href=\"#final\">end</a>");
        }
        text.push_str("</nav>\n<main>\n");
        out.write_all(text.as_bytes())?;
        Ok(Self { out, done: false })
    }
}

impl<W: Write> Sink for HtmlWriter<W> {
    fn step(&mut self, step: &StepRecord, png: Option<&[u8]>) -> Result<(), ReportError> {
        step_html(&mut self.out, step, png)?;
        Ok(())
    }

    fn end(&mut self, record: &TaskRecord, png: Option<&[u8]>) -> Result<(), ReportError> {
        let Some(shot) = &record.final_screenshot else { return Ok(()) };
        self.out.write_all(
            b"<article class=\"step final\" id=\"final\">\n<header><h2>After the last step</h2></header>\n",
        )?;
        screenshot(&mut self.out, png, shot.width, shot.height, "the screen after the last step", &[], &[])?;
        self.out.write_all(b"</article>\n")?;
        Ok(())
    }

    fn finish(&mut self) -> Result<(), ReportError> {
        if std::mem::replace(&mut self.done, true) {
            return Err(ReportError::Encode("the report was finished already".into()));
        }
        self.out.write_all(b"</main>\n</body>\n</html>\n")?;
        self.out.flush()?;
        Ok(())
    }
}

/// The verifier checks' last round (docs/replay-and-verify.md): `data-verifiers` is `none`, `passed` or `failed`; one
/// row per
/// check with its kind, result, message and evidence.
fn verifiers(out: &mut String, outcome: Option<&crate::record::Outcome>) {
    let checks = outcome.map(|o| o.checks.as_slice()).unwrap_or_default();
    if checks.is_empty() {
        out.push_str(
            "<section class=\"verifiers\" id=\"verifiers\" data-verifiers=\"none\">\n<h2>Verifiers</h2>\n<div>\
             <p class=\"meta\">No verifiers ran for this task.</p></div>\n</section>\n",
        );
        return;
    }
    let passed = checks.iter().all(|c| c.ok);
    let _ = writeln!(
        out,
        "<section class=\"verifiers\" id=\"verifiers\" data-verifiers=\"{}\">\n<h2>Verifiers</h2>\n<div>\
         <p class=\"meta\">{} of {} check(s) passed.</p>\n<ol class=\"checks\">",
        if passed { "passed" } else { "failed" },
        checks.iter().filter(|c| c.ok).count(),
        checks.len()
    );
    for check in checks {
        let evidence = check.evidence.as_ref().map(|e| format!(" <code>{}</code>", escape(&e.to_string())));
        let _ = writeln!(
            out,
            "<li class=\"check {}\" data-kind=\"{}\"><b>{}</b> {} — {}{}</li>",
            if check.ok { "ok" } else { "failed" },
            escape(&check.kind),
            escape(&check.kind),
            if check.ok { "passed" } else { "failed" },
            escape(&check.message),
            evidence.unwrap_or_default()
        );
    }
    out.push_str("</ol></div>\n</section>\n");
}

fn header(out: &mut String, record: &TaskRecord) {
    let _ = writeln!(out, "<header>\n<h1>Task <code>{}</code></h1>\n<dl class=\"facts\">", escape(&record.id));
    let mut fact = |name: &str, html: String| {
        let _ = writeln!(out, "<dt>{name}</dt><dd>{html}</dd>");
    };
    fact("Instructions", format!("<pre class=\"instructions\">{}</pre>", escape(record.task.instructions.as_str())));
    fact("State", format!("<span class=\"state state-{0}\" id=\"state\">{0}</span>", record.state.as_str()));
    if let Some(outcome) = &record.outcome {
        let class = if outcome.success { "ok" } else { "err" };
        fact(
            "Outcome",
            format!(
                "<span class=\"{class}\">{}</span> ({}): <span class=\"summary\">{}</span>",
                if outcome.success { "success" } else { "failure" },
                outcome.reason.as_str(),
                escape(&outcome.summary)
            ),
        );
        if let Some(output) = &outcome.output {
            fact("Output", format!("<pre class=\"output\">{}</pre>", escape(&pretty(output))));
        }
    }
    if let Some(reason) = &record.waiting_reason {
        fact("Waiting for", escape(reason));
    }
    if !record.pending_tool_calls.is_empty() {
        let calls: Vec<String> =
            record.pending_tool_calls.iter().map(|c| format!("{} ({})", escape(&c.name), escape(&c.id))).collect();
        fact("Awaiting tools", calls.join(", "));
    }
    fact("Steps", record.steps.len().to_string());
    fact("Usage", usage(&record.usage));
    fact("Cost", format!("${:.4}", record.usage.cost_usd));
    let model = serde_json::to_value(&record.task.model).unwrap_or_default();
    let computer = serde_json::to_value(&record.task.computer).unwrap_or_default();
    let name = |v: &serde_json::Value, key: &str| v[key].as_str().map(escape);
    let model = [name(&model, "provider"), name(&model, "model")].into_iter().flatten().collect::<Vec<_>>();
    if !model.is_empty() {
        fact("Model", model.join(" "));
    }
    if let Some(provider) = name(&computer, "provider") {
        fact("Computer", provider);
    }
    fact("Created", when(record.created_at));
    if let Some(started) = record.started_at {
        fact("Started", when(started));
    }
    if let Some(finished) = record.finished_at {
        let took = record.started_at.map(|s| {
            let ms = u64::try_from((finished - s).whole_milliseconds()).unwrap_or(0);
            format!(" (took {})", duration(ms))
        });
        fact("Finished", format!("{}{}", when(finished), took.unwrap_or_default()));
    }
    fact("Attempt", format!("{} on {}", record.attempt, escape(record.worker.as_deref().unwrap_or("-"))));
    out.push_str("</dl>\n</header>\n");
}

fn usage(usage: &Usage) -> String {
    let mut text = format!("{} input / {} output tokens", usage.input_tokens, usage.output_tokens);
    if usage.cache_read_tokens + usage.cache_write_tokens > 0 {
        text.push_str(&format!(" ({} cache read, {} cache write)", usage.cache_read_tokens, usage.cache_write_tokens));
    }
    text
}

fn when(at: OffsetDateTime) -> String {
    let format = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    at.to_offset(time::UtcOffset::UTC).format(&format).unwrap_or_default()
}

fn pretty(value: &serde_json::Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// One step's article: the text around its screenshot is made in memory, the screenshot streamed.
fn step_html(writer: &mut impl Write, step: &StepRecord, png: Option<&[u8]>) -> std::io::Result<()> {
    let view = StepView::of(step);
    let errors = view.errors();
    let mut text = String::with_capacity(4096);
    let out = &mut text;
    let _ = writeln!(
        out,
        "<article class=\"step\" id=\"step-{0}\" data-step=\"{0}\" data-by=\"{5}\">\n<header><h2>Step {0}{6}</h2>\
         <span class=\"meta\">{1} · {2} · {3} · ${4:.4}</span></header>",
        step.index,
        when(step.started_at),
        duration(step.duration_ms),
        usage(&step.usage),
        step.usage.cost_usd,
        if step.by.is_model() { "model" } else { "human" },
        if step.by.is_model() { "" } else { " — by a person" }
    );
    out.push_str("<div class=\"cols\">\n<div>");
    let (marks, labels) = draw::marks(&step.actions);
    let what = format!("the screenshot of step {}", step.index);
    writer.write_all(out.as_bytes())?;
    out.clear();
    screenshot(writer, png, step.screenshot.width, step.screenshot.height, &what, &marks, &labels)?;
    out.push_str("</div>\n<div>\n");
    if let Some(page) = &step.page {
        // A browser's page: its title and URL as text (never a link: the page is the task's, not the reader's).
        let _ = writeln!(
            out,
            "<p class=\"page\">Page: <strong>{}</strong> <code>{}</code></p>",
            escape(&page.title),
            escape(&page.url)
        );
    }
    if !step.model_text.is_empty() {
        let _ = writeln!(out, "<h3>Model</h3><pre class=\"model-text\">{}</pre>", escape(&step.model_text));
    }
    if step.interrupted {
        out.push_str("<p class=\"err\">The model's turn was cut short; none of its calls ran.</p>\n");
    }
    if !step.thinking.is_empty() {
        let _ = writeln!(
            out,
            "<details class=\"thinking\"><summary>Thinking</summary><pre>{}</pre></details>",
            escape(&step.thinking)
        );
    }
    if !view.actions.is_empty() {
        out.push_str("<h3>Actions</h3><ol class=\"actions\">\n");
        for (action, result) in &view.actions {
            let shown = match action {
                agentd_computer::Action::Type { text } => format!("type “{}”", text),
                other => other.summary(),
            };
            let result = match result {
                Some(r) if r.ok && r.message.is_empty() => " <span class=\"ok\">✓</span>".to_string(),
                Some(r) if r.ok => {
                    format!(" <span class=\"ok\">✓</span> <span class=\"meta\">{}</span>", escape(&r.message))
                }
                Some(r) => format!(" <span class=\"err\">✗ {}</span>", escape(&r.message)),
                None => " <span class=\"meta\">(did not run)</span>".to_string(),
            };
            let _ = writeln!(out, "<li><code>{}</code>{result}</li>", escape(&shown));
        }
        out.push_str("</ol>\n");
    }
    if !view.tools.is_empty() {
        out.push_str("<h3>Tools</h3>\n");
        for tool in &view.tools {
            let failed = tool.result.as_ref().is_some_and(|r| !r.ok);
            let _ = write!(
                out,
                "<div class=\"tool{}\"><code>{}</code> <span class=\"meta\">{}</span>\
                 <pre class=\"arguments\">{}</pre>",
                if failed { " failed" } else { "" },
                escape(tool.name),
                escape(tool.id),
                escape(&pretty(tool.arguments))
            );
            match &tool.result {
                Some(r) => {
                    let _ = write!(
                        out,
                        "<p>{} <span class=\"result\">{}</span></p>",
                        if r.ok { "<span class=\"ok\">✓</span>" } else { "<span class=\"err\">✗</span>" },
                        escape(r.message)
                    );
                    if let Some(details) = r.details {
                        let _ = write!(
                            out,
                            "<details><summary>Details</summary><pre class=\"details\">{}</pre></details>",
                            escape(&pretty(details))
                        );
                    }
                }
                None if step.awaiting_tools.iter().any(|id| id == tool.id) => {
                    out.push_str("<p class=\"meta\">awaiting the API client's answer</p>")
                }
                None => out.push_str("<p class=\"meta\">(no result)</p>"),
            }
            out.push_str("</div>\n");
        }
    }
    if let Some(approval) = &step.approval {
        let answer = match approval.approved {
            Some(true) => "<span class=\"ok\">approved</span>",
            Some(false) => "<span class=\"err\">rejected</span>",
            None => "waiting for a human",
        };
        let _ = writeln!(out, "<h3>Approval</h3><p>{}: {answer}</p>", escape(&approval.reason));
    }
    if !errors.is_empty() {
        out.push_str("<h3>Errors</h3><ul class=\"errors\">\n");
        for error in &errors {
            let _ = writeln!(out, "<li>{}</li>", escape(error));
        }
        out.push_str("</ul>\n");
    }
    out.push_str("</div>\n</div>\n</article>\n");
    writer.write_all(text.as_bytes())
}

/// The screenshot as a `data:` URI (base64-encoded straight into `out`) with the marks over it (an SVG whose
/// viewBox is the screen, so marks are drawn in screen pixels whatever size the page shows the image at), and
/// the keyboard labels in a box.
fn screenshot(
    out: &mut impl Write,
    png: Option<&[u8]>,
    width: u32,
    height: u32,
    what: &str,
    marks: &[draw::Mark],
    labels: &[draw::Label],
) -> std::io::Result<()> {
    let (width, height) = (width.max(1), height.max(1));
    out.write_all(b"<figure class=\"shot\">")?;
    let mut text = String::new();
    match png.map(|bytes| (bytes, png_size(bytes))) {
        Some((bytes, Ok(_))) => {
            out.write_all(b"<img class=\"step-shot\" src=\"data:image/png;base64,")?;
            {
                let mut encoder =
                    base64::write::EncoderWriter::new(&mut *out, &base64::engine::general_purpose::STANDARD);
                encoder.write_all(bytes)?;
                encoder.finish()?;
            }
            let _ = write!(text, "\" width=\"{width}\" height=\"{height}\" alt=\"{}\">", escape(&capitalise(what)));
            let _ = write!(
                text,
                "<svg viewBox=\"0 0 {width} {height}\" preserveAspectRatio=\"none\" aria-hidden=\"true\">{}</svg>",
                draw::svg(marks, width)
            );
            if !labels.is_empty() {
                text.push_str("<div class=\"keys\">");
                for label in labels {
                    let _ = write!(text, "<div><b>{}</b> {}</div>", label.n, escape(&label.text));
                }
                text.push_str("</div>");
            }
        }
        Some((_, Err(why))) => {
            let _ = write!(
                text,
                "<div class=\"missing\">{} is unreadable: {}</div>",
                escape(&capitalise(what)),
                escape(&why)
            );
        }
        None => {
            let _ = write!(text, "<div class=\"missing\">{} is missing</div>", escape(&capitalise(what)));
        }
    }
    text.push_str("</figure>\n");
    out.write_all(text.as_bytes())
}

fn capitalise(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::Held;

    /// The whole report of `record`, its screenshots missing.
    fn render(record: &TaskRecord) -> String {
        let mut out = Vec::new();
        {
            let mut writer = HtmlWriter::new(record, &mut out).expect("html");
            let mut missing = Held::new(vec![None; record.steps.len()], None);
            crate::report::render(record, &mut missing, &mut [&mut writer]).expect("render");
        }
        String::from_utf8(out).expect("UTF-8")
    }

    #[test]
    fn markup_is_escaped_in_content_and_attributes() {
        assert_eq!(
            escape("<script>alert('x')</script>&\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;"
        );
        assert_eq!(escape("plain ✓"), "plain ✓");
    }

    #[test]
    fn a_hostile_task_renders_as_text() {
        let hostile = "<script>document.title='pwned'</script><img src=x onerror=alert(1)>";
        let record: crate::status::TaskRecord = serde_json::from_value(serde_json::json!({
            "version": 1, "id": "t<1>", "state": "failed", "created_at": "2026-01-01T00:00:00Z",
            "started_at": null, "finished_at": null, "attempt": 1, "worker": "w\"x",
            "task": {"instructions": hostile},
            "outcome": {"success": false, "summary": hostile, "reason": "error", "output": {"k": hostile}},
            "usage": {"input_tokens": 1, "output_tokens": 2, "cache_read_tokens": 0, "cache_write_tokens": 0, "cost_usd": 0.5},
            "steps": [{"index": 1, "started_at": "2026-01-01T00:00:01Z", "duration_ms": 5,
                "screenshot": {"url": "file:///x", "width": 100, "height": 50, "key": "k"},
                "model_text": hostile, "thinking": hostile,
                "page": {"url": format!("https://example.org/?q={hostile}"), "title": hostile},
                "actions": [{"type": "type", "text": hostile}, {"type": "click", "x": 3, "y": 4}],
                "results": [{"ok": false, "message": hostile}, {"ok": true, "message": ""},
                            {"ok": true, "message": hostile, "tool": "t", "call_id": "c1", "details": {"d": hostile}}],
                "usage": {"input_tokens": 1, "output_tokens": 2, "cache_read_tokens": 0, "cache_write_tokens": 0, "cost_usd": 0.5},
                "calls": [{"id": "c1", "call": "function", "name": hostile, "arguments": {"a": hostile}}],
                "call_results": [], "finished": true}]
        }))
        .expect("record");
        let html = render(&record);
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<img src=x"), "{html}");
        assert!(html.contains("&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;"));
        assert!(html.contains("The screenshot of step 1 is missing"));
        assert!(html.contains("id=\"verifiers\""));
        assert!(html.contains("Page: <strong>&lt;script&gt;"), "the page's title, as text: {html}");
        assert!(html.contains("<code>https://example.org/?q=&lt;script&gt;"), "the page's URL, as text: {html}");
    }
}
