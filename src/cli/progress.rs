//! Human-readable live progress on stderr. On a terminal, the live view ([`super::live`]): the model's
//! text as it streams and a status line redrawn in place. Elsewhere (a pipe, a file, `TERM=dumb`), plain
//! lines as [`Printer`] writes them: one per step with its actions and time, then the outcome.

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use super::live::{LiveView, TICK};
use super::sanitize::sanitize;
use super::term::{self, Style};
use crate::record::TaskState;
use crate::record::events::{Event, EventKind};

/// Progress on stderr, shared by the code that reads events and the code that prints its own messages
/// (Ctrl-C, reconnecting). Cloning shares it.
#[derive(Clone)]
pub struct Progress {
    inner: Arc<Inner>,
}

struct Inner {
    mode: Mutex<Mode>,
    ticker: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// A question is being asked on the terminal: the status line is not redrawn under its prompt.
    asking: std::sync::atomic::AtomicBool,
}

enum Mode {
    Plain(Printer),
    Live(Box<LiveView>),
}

/// The file descriptor of stderr, whose width the live view fits.
const STDERR: i32 = 2;

impl Progress {
    /// The live view when stderr is a terminal that can be redrawn (coloured unless `NO_COLOR` is set),
    /// plain lines otherwise. The live view redraws its status line every [`TICK`] on the current Tokio
    /// runtime until [`Progress::finish`].
    pub fn on_stderr() -> Self {
        let stderr = std::io::stderr();
        if !term::live(&stderr) {
            return Self::plain();
        }
        let view = LiveView::new(Style::for_stream(&stderr), Instant::now());
        let progress = Self::with(Mode::Live(Box::new(view)));
        let weak = Arc::downgrade(&progress.inner);
        let ticker = tokio::spawn(async move {
            let mut interval = tokio::time::interval(TICK);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                interval.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                inner.draw(|view| view.tick(term::width(STDERR), Instant::now()));
            }
        });
        *progress.inner.ticker.lock().unwrap_or_else(PoisonError::into_inner) = Some(ticker);
        progress
    }

    /// Plain lines, whatever stderr is.
    pub fn plain() -> Self {
        Self::with(Mode::Plain(Printer::default()))
    }

    fn with(mode: Mode) -> Self {
        let asking = std::sync::atomic::AtomicBool::new(false);
        Self { inner: Arc::new(Inner { mode: Mutex::new(mode), ticker: Mutex::new(None), asking }) }
    }

    /// Shows one event.
    pub fn event(&self, event: &Event) {
        let mut mode = self.inner.mode.lock().unwrap_or_else(PoisonError::into_inner);
        let out = match &mut *mode {
            Mode::Plain(printer) => printer.line(event).map(|line| format!("{line}\n")).unwrap_or_default(),
            Mode::Live(view) => view.event(event, term::width(STDERR), Instant::now()),
        };
        write_stderr(&out);
    }

    /// Prints a message of the CLI's own (one or more lines, already made safe to print) above the view.
    pub fn note(&self, message: &str) {
        let mut mode = self.inner.mode.lock().unwrap_or_else(PoisonError::into_inner);
        let out = match &mut *mode {
            Mode::Plain(_) => format!("{message}\n"),
            Mode::Live(view) => view.note(message, term::width(STDERR), Instant::now()),
        };
        write_stderr(&out);
    }

    /// Asks on the terminal: `prompt` (already made safe to print) on stderr, the live view's region erased
    /// and not redrawn until a line is read from stdin (`None` at its end). The line's end is cut off.
    pub async fn ask(&self, prompt: String) -> Option<String> {
        use std::sync::atomic::Ordering;
        self.inner.asking.store(true, Ordering::SeqCst);
        {
            let mut mode = self.inner.mode.lock().unwrap_or_else(PoisonError::into_inner);
            let erased = match &mut *mode {
                Mode::Plain(_) => String::new(),
                Mode::Live(view) => view.suspend(),
            };
            write_stderr(&format!("{erased}{prompt}"));
        }
        let line = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            match std::io::stdin().read_line(&mut line) {
                Ok(0) | Err(_) => None,
                Ok(_) => Some(line.trim_end_matches(['\n', '\r']).to_string()),
            }
        })
        .await
        .ok()
        .flatten();
        self.inner.asking.store(false, Ordering::SeqCst);
        line
    }

    /// Says on the status line what the task is doing when no event tells (live view only).
    pub fn phase(&self, phase: &str) {
        self.inner.draw(|view| view.set_phase(phase, term::width(STDERR), Instant::now()));
    }

    /// Ends the view: the status line is erased and stops being redrawn. Lines printed afterwards start
    /// on a fresh line.
    pub fn finish(&self) {
        if let Some(ticker) = self.inner.ticker.lock().unwrap_or_else(PoisonError::into_inner).take() {
            ticker.abort();
        }
        self.inner.draw(LiveView::finish);
    }
}

impl Inner {
    /// Writes what `draw` returns for the live view (nothing in plain mode), under the lock, so a tick and an
    /// event never interleave their bytes.
    fn draw(&self, draw: impl FnOnce(&mut LiveView) -> String) {
        if self.asking.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let mut mode = self.mode.lock().unwrap_or_else(PoisonError::into_inner);
        if let Mode::Live(view) = &mut *mode {
            write_stderr(&draw(view));
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(ticker) = self.ticker.get_mut().unwrap_or_else(PoisonError::into_inner).take() {
            ticker.abort();
        }
    }
}

/// One write, so the terminal never shows half a redraw.
fn write_stderr(out: &str) {
    if out.is_empty() {
        return;
    }
    let mut stderr = std::io::stderr().lock();
    let _ = stderr.write_all(out.as_bytes());
    let _ = stderr.flush();
}

/// Turns events into progress lines; keeps what a step line needs until the step ends. Every text from the
/// event (ids, worker names, actions, messages, summaries) is [`sanitize`]d: lines are safe to print.
#[derive(Default)]
pub struct Printer {
    actions: Vec<String>,
    failures: Vec<String>,
}

impl Printer {
    pub fn line(&mut self, event: &Event) -> Option<String> {
        match &event.kind {
            EventKind::TaskQueued {} => Some(format!("task {} queued", sanitize(&event.task_id))),
            EventKind::TurnQueued { turn } => {
                Some(format!("task {}: turn {turn} queued (a new message)", sanitize(&event.task_id)))
            }
            EventKind::TaskStarted { attempt, worker } => Some(format!(
                "task {} started (attempt {attempt}, worker {})",
                sanitize(&event.task_id),
                sanitize(worker)
            )),
            EventKind::DesktopLeased { desktop, reset, duration_ms } => Some(format!(
                "task {}: desktop {}{}",
                sanitize(&event.task_id),
                sanitize(desktop),
                if *reset { format!(" (reset in {duration_ms} ms)") } else { String::new() }
            )),
            EventKind::DesktopFailed { failure } => Some(format!(
                "task {}: desktop {} failed: {}; the task goes back to the queue",
                sanitize(&event.task_id),
                sanitize(failure["desktop"].as_str().unwrap_or("?")),
                sanitize(failure["reason"].as_str().unwrap_or("?"))
            )),
            EventKind::StepStarted { .. } => {
                self.actions.clear();
                self.failures.clear();
                None
            }
            EventKind::ActionStarted { action, .. } => {
                self.actions.push(sanitize(&action.summary()).into_owned());
                None
            }
            EventKind::ActionFinished { ok: false, message, .. } => {
                self.failures.push(sanitize(message).into_owned());
                None
            }
            EventKind::StepFinished { step, duration_ms, usage } => {
                let actions = if self.actions.is_empty() { "(no actions)".to_string() } else { self.actions.join(" ") };
                let mut line = format!("step {step:>3}  {actions}  {duration_ms} ms");
                if usage.input_tokens + usage.output_tokens > 0 {
                    line.push_str(&format!("  {}→{} tok", usage.input_tokens, usage.output_tokens));
                }
                for failure in &self.failures {
                    line.push_str(&format!("\n           ✗ {failure}"));
                }
                Some(line)
            }
            EventKind::WaitingForHuman { question: Some(question), .. } => {
                Some(format!("the model asks a human: {}", sanitize(question)))
            }
            EventKind::WaitingForHuman { reason, .. } => Some(format!("waiting for a human: {}", sanitize(reason))),
            EventKind::TaskFinished { state, outcome, usage } => {
                let mark = if *state == TaskState::Succeeded { "✓" } else { "✗" };
                Some(format!(
                    "{mark} {}: {} ({}; {} input / {} output tokens, ${:.4})",
                    state.as_str(),
                    sanitize(&outcome.summary),
                    outcome.reason.as_str(),
                    usage.input_tokens,
                    usage.output_tokens,
                    usage.cost_usd
                ))
            }
            EventKind::ToolFinished { name, ok, output, .. } => Some(format!(
                "           {} tool {}: {}",
                if *ok { "·" } else { "✗" },
                sanitize(name),
                sanitize(&first_line(output))
            )),
            EventKind::AwaitingTool { calls, .. } => Some(format!(
                "awaiting remote tool results: {}",
                calls
                    .iter()
                    .map(|c| format!("{} ({})", sanitize(&c.name), sanitize(&c.id)))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            EventKind::Error { message, .. } => Some(format!("error: {}", sanitize(message))),
            EventKind::StuckDetected { check, count, stopped, .. } => Some(format!(
                "           ! stuck-loop guard: {} reached {count}{}",
                check.as_str(),
                if *stopped { ", ending the task" } else { ", the model is warned" }
            )),
            EventKind::VerifyFinished { round, ok, checks } => Some(format!(
                "           {} verifiers (round {round}): {} of {} check(s) passed",
                if *ok { "✓" } else { "✗" },
                checks.iter().filter(|c| c.ok).count(),
                checks.len()
            )),
            EventKind::ModelDelta { .. }
            | EventKind::ActionFinished { .. }
            | EventKind::ScreenshotSaved { .. }
            | EventKind::MessageStart { .. }
            | EventKind::MessageEnd { .. }
            | EventKind::TextStart { .. }
            | EventKind::TextEnd { .. }
            | EventKind::ThinkingStart { .. }
            | EventKind::ThinkingEnd { .. }
            | EventKind::ToolCallStart { .. }
            | EventKind::ToolCallDelta { .. }
            | EventKind::ToolCallEnd { .. }
            | EventKind::ToolStarted { .. }
            | EventKind::ToolOutput { .. } => None,
        }
    }
}

/// The first line of a tool's output, at most 120 characters, for one progress line.
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    let mut short: String = line.chars().take(120).collect();
    if short.len() < line.len() || text.lines().nth(1).is_some() {
        short.push('…');
    }
    short
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::events::DeltaKind;

    #[test]
    fn the_model_stream_prints_nothing() {
        let mut printer = Printer::default();
        let kinds = [
            EventKind::MessageStart { step: 0 },
            EventKind::ThinkingStart { step: 0 },
            EventKind::ModelDelta { step: 0, kind: DeltaKind::Thinking, text: "hm".into() },
            EventKind::ThinkingEnd { step: 0, text: "hm".into() },
            EventKind::TextStart { step: 0 },
            EventKind::ModelDelta { step: 0, kind: DeltaKind::Text, text: "Hello".into() },
            EventKind::TextEnd { step: 0, text: "Hello".into() },
            EventKind::ToolCallStart { step: 0, call_id: "c".into(), name: "computer".into() },
            EventKind::ToolCallDelta { step: 0, call_id: "c".into(), delta: "{".into() },
            EventKind::ToolCallEnd {
                step: 0,
                call_id: "c".into(),
                name: "computer".into(),
                arguments: serde_json::json!({}),
            },
            EventKind::MessageEnd { step: 0, interrupted: true },
        ];
        for (seq, kind) in kinds.into_iter().enumerate() {
            let event = Event { seq: seq as u64 + 1, task_id: "t".into(), ts: time::OffsetDateTime::UNIX_EPOCH, kind };
            assert_eq!(printer.line(&event), None, "{event:?}");
        }
    }
}
