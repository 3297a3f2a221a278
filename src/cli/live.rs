//! The live progress view of `run` and `submit --wait` on a terminal: lines that stay (the task starting,
//! the model's text as it streams, one line per step, tools, the outcome) above a region redrawn in place —
//! the model's unfinished line of text and a status line with the step, what it is doing now (waiting for
//! the model, running an action, uploading screenshots), the time since the task started and its cost so
//! far.
//!
//! [`LiveView`] is the state and the drawing, with no I/O: each input returns the bytes to write, so it is
//! tested as it is. The region is drawn with the terminal's auto-wrap off and each row cut to the width, so
//! it always covers as many rows as it has lines and erasing it never leaves a piece behind.

use std::time::{Duration, Instant};

use super::progress::Printer;
use super::sanitize::sanitize;
use super::term::{self, Style};
use crate::record::TaskState;
use crate::record::events::{DeltaKind, Event, EventKind};

/// The spinner's frames, one per tick.
const SPINNER: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/// What a line of the model's text starts with.
const TEXT_PREFIX: &str = "│ ";

/// How often the status line is redrawn when nothing happens (the spinner and the elapsed time move).
pub const TICK: Duration = Duration::from_millis(100);

/// The live view's state.
pub struct LiveView {
    style: Style,
    /// When the view began; the elapsed time counts from the task's start once it is seen.
    began: Instant,
    task_started: Option<Instant>,
    step: Option<u32>,
    /// What the task is doing now, for the status line.
    phase: String,
    cost_usd: f64,
    tokens: (u64, u64),
    /// The model's line of text that has not ended yet (sanitized).
    partial: String,
    /// The last line of text written was empty (consecutive empty lines are shown as one).
    blank: bool,
    steps_started: u32,
    screenshots_saved: u32,
    printer: Printer,
    frame: usize,
    /// Rows of the region now on the screen (0: nothing drawn).
    drawn: usize,
    done: bool,
}

impl LiveView {
    pub fn new(style: Style, now: Instant) -> Self {
        Self {
            style,
            began: now,
            task_started: None,
            step: None,
            phase: "waiting for the task to start".into(),
            cost_usd: 0.0,
            tokens: (0, 0),
            partial: String::new(),
            blank: true,
            steps_started: 0,
            screenshots_saved: 0,
            printer: Printer::default(),
            frame: 0,
            drawn: 0,
            done: false,
        }
    }

    /// Takes one event; returns what to write (lines that stay, then the region drawn again).
    pub fn event(&mut self, event: &Event, width: usize, now: Instant) -> String {
        let mut lines = Vec::new();
        let printed = self.printer.line(event);
        match &event.kind {
            EventKind::TaskQueued {} | EventKind::TurnQueued { .. } | EventKind::DesktopFailed { .. } => {
                self.phase = "queued".into()
            }
            EventKind::DesktopLeased { .. } => self.phase = "preparing its desktop".into(),
            EventKind::TaskStarted { .. } => {
                self.task_started.get_or_insert(now);
                self.phase = "starting".into();
            }
            EventKind::StepStarted { step, .. } => {
                self.flush_text(&mut lines);
                self.step = Some(*step);
                self.steps_started += 1;
                self.phase = "taking a screenshot".into();
            }
            EventKind::MessageStart { .. } => self.phase = "waiting for the model".into(),
            EventKind::ThinkingStart { .. } | EventKind::ModelDelta { kind: DeltaKind::Thinking, .. } => {
                self.phase = "the model is thinking".into();
            }
            EventKind::TextStart { .. } => self.phase = "the model is writing".into(),
            EventKind::ModelDelta { kind: DeltaKind::Text, text, .. } => {
                self.phase = "the model is writing".into();
                self.push_text(text, width, &mut lines);
            }
            EventKind::TextEnd { .. } => self.flush_text(&mut lines),
            EventKind::ToolCallStart { name, .. } => {
                self.flush_text(&mut lines);
                self.phase = format!("the model is calling {}", sanitize(name));
            }
            EventKind::MessageEnd { .. } => {
                self.flush_text(&mut lines);
                self.phase = "reading the model's answer".into();
            }
            EventKind::ActionStarted { action, .. } => {
                self.phase = format!("running {}", sanitize(&action.summary()));
            }
            EventKind::ToolStarted { name, .. } => self.phase = format!("running tool {}", sanitize(name)),
            EventKind::ScreenshotSaved { .. } => {
                self.screenshots_saved += 1;
                if self.phase.starts_with("uploading") {
                    self.phase = self.after_step();
                }
            }
            EventKind::StepFinished { usage, .. } => {
                self.flush_text(&mut lines);
                self.cost_usd += usage.cost_usd;
                self.tokens.0 += usage.input_tokens;
                self.tokens.1 += usage.output_tokens;
                self.phase = self.after_step();
            }
            EventKind::WaitingForHuman { question, .. } => {
                self.flush_text(&mut lines);
                let command = if question.is_some() { "answer" } else { "approve" };
                self.phase = format!("waiting for a human (agentd {command} {})", sanitize(&event.task_id));
            }
            EventKind::AwaitingTool { .. } => {
                self.flush_text(&mut lines);
                self.phase = "waiting for remote tool results".into();
            }
            EventKind::TaskFinished { usage, .. } => {
                self.flush_text(&mut lines);
                self.cost_usd = self.cost_usd.max(usage.cost_usd);
                self.done = true;
            }
            EventKind::Error { .. } | EventKind::StuckDetected { .. } => self.flush_text(&mut lines),
            EventKind::ActionFinished { .. }
            | EventKind::ThinkingEnd { .. }
            | EventKind::ToolCallDelta { .. }
            | EventKind::ToolCallEnd { .. }
            | EventKind::ToolOutput { .. }
            | EventKind::ToolFinished { .. }
            | EventKind::VerifyFinished { .. } => {}
        }
        if let Some(line) = printed {
            lines.push(self.paint(&event.kind, line));
        }
        self.redraw(&lines, width, now)
    }

    /// Sets what the status line says the task is doing (for what no event tells, e.g. the client
    /// reconnecting).
    pub fn set_phase(&mut self, phase: &str, width: usize, now: Instant) -> String {
        self.phase = sanitize(phase).into_owned();
        self.redraw(&[], width, now)
    }

    /// A line that stays (a message of the CLI's own), printed above the region.
    pub fn note(&mut self, line: &str, width: usize, now: Instant) -> String {
        let mut lines = Vec::new();
        self.flush_text(&mut lines);
        lines.push(line.to_string());
        self.redraw(&lines, width, now)
    }

    /// The spinner turns and the elapsed time moves.
    pub fn tick(&mut self, width: usize, now: Instant) -> String {
        self.frame = self.frame.wrapping_add(1);
        self.redraw(&[], width, now)
    }

    /// Erases the region and writes the text still pending: the view is over, the cursor at the start of
    /// an empty line.
    pub fn finish(&mut self) -> String {
        let out = self.suspend();
        self.done = true;
        out
    }

    /// Erases the region and writes the text still pending, the cursor at the start of an empty line (for a
    /// question asked on the terminal); the next redraw draws the region again below.
    pub fn suspend(&mut self) -> String {
        let mut lines = Vec::new();
        self.flush_text(&mut lines);
        let mut out = self.erase();
        for line in lines {
            out.push_str(&line);
            out.push('\n');
        }
        out
    }

    fn after_step(&self) -> String {
        if self.screenshots_saved < self.steps_started {
            format!("uploading screenshots ({} of {} stored)", self.screenshots_saved, self.steps_started)
        } else {
            "between steps".into()
        }
    }

    /// Adds streamed text: complete lines stay; the unfinished one is wrapped at the width (at a space when
    /// there is one) so the region keeps to one row for it.
    fn push_text(&mut self, text: &str, width: usize, lines: &mut Vec<String>) {
        let room = width.saturating_sub(TEXT_PREFIX.chars().count() + 1).max(10);
        let mut pieces = text.split('\n').peekable();
        while let Some(piece) = pieces.next() {
            let piece = piece.strip_suffix('\r').unwrap_or(piece).replace('\t', "    ");
            self.partial.push_str(&sanitize(&piece));
            while self.partial.chars().count() > room {
                let cut: String = self.partial.chars().take(room).collect();
                let at = cut.rfind(' ').filter(|&i| i > 0).unwrap_or(cut.len());
                let rest = self.partial[at..].trim_start().to_string();
                self.partial.truncate(at);
                self.commit_text(lines);
                self.partial = rest;
            }
            if pieces.peek().is_some() {
                self.commit_text(lines);
            }
        }
    }

    fn flush_text(&mut self, lines: &mut Vec<String>) {
        if !self.partial.is_empty() {
            self.commit_text(lines);
        }
    }

    fn commit_text(&mut self, lines: &mut Vec<String>) {
        let line = std::mem::take(&mut self.partial);
        let blank = line.trim().is_empty();
        if blank && self.blank {
            return;
        }
        self.blank = blank;
        lines.push(format!("{}{}", self.style.dim(TEXT_PREFIX), line.trim_end()));
    }

    /// A line of the plain printer, coloured: the step number bold, the outcome green or red, failures red.
    fn paint(&self, kind: &EventKind, line: String) -> String {
        match kind {
            EventKind::TaskFinished { state, .. } => {
                if *state == TaskState::Succeeded {
                    self.style.green(&line)
                } else {
                    self.style.red(&line)
                }
            }
            EventKind::StepFinished { step, .. } => {
                let mut parts = line.split('\n');
                let head = parts.next().unwrap_or_default();
                let label = format!("step {step:>3}");
                let mut out = match head.strip_prefix(&label) {
                    Some(rest) => format!("{}{rest}", self.style.bold(&label)),
                    None => head.to_string(),
                };
                for failure in parts {
                    out.push('\n');
                    out.push_str(&self.style.red(failure));
                }
                out
            }
            EventKind::Error { .. } => self.style.red(&line),
            EventKind::WaitingForHuman { .. } | EventKind::AwaitingTool { .. } => self.style.yellow(&line),
            _ => line,
        }
    }

    /// Moves the cursor to the first row of the region and erases it, row by row.
    fn erase(&mut self) -> String {
        let mut out = String::new();
        if self.drawn > 0 {
            out.push_str(term::ERASE_LINE);
            for _ in 1..self.drawn {
                out.push_str(term::UP);
                out.push_str(term::ERASE_LINE);
            }
        }
        self.drawn = 0;
        out
    }

    fn redraw(&mut self, lines: &[String], width: usize, now: Instant) -> String {
        let mut out = self.erase();
        for line in lines {
            out.push_str(line);
            out.push('\n');
        }
        if !lines.is_empty() {
            self.blank = lines.last().is_some_and(|l| l.trim().is_empty());
        }
        if self.done {
            return out;
        }
        let row = width.saturating_sub(1).max(10);
        out.push_str(term::WRAP_OFF);
        if !self.partial.is_empty() {
            let text = term::truncate(&self.partial, row.saturating_sub(TEXT_PREFIX.chars().count()));
            out.push_str(&format!("{}{text}\n", self.style.dim(TEXT_PREFIX)));
            self.drawn += 1;
        }
        out.push_str(&self.status(row, now));
        out.push_str(term::WRAP_ON);
        self.drawn += 1;
        out
    }

    /// `⠹ step 3 · running click(412, 300) · 12.3s · $0.0123 · 1200→340 tok`, cut to `width`.
    fn status(&self, width: usize, now: Instant) -> String {
        let spinner = SPINNER[self.frame % SPINNER.len()];
        let elapsed = now.saturating_duration_since(self.task_started.unwrap_or(self.began));
        let mut parts = Vec::new();
        if let Some(step) = self.step {
            parts.push(format!("step {step}"));
        }
        parts.push(self.phase.clone());
        parts.push(term::elapsed(elapsed));
        parts.push(format!("${:.4}", self.cost_usd));
        if self.tokens != (0, 0) {
            parts.push(format!("{}→{} tok", self.tokens.0, self.tokens.1));
        }
        // Cut as plain text first, then coloured: escape codes take no columns.
        let plain = term::truncate(&format!("{spinner} {}", parts.join(" · ")), width);
        let Some(rest) = plain.strip_prefix(spinner) else { return plain };
        match (self.step, rest.strip_prefix(" step ")) {
            (Some(step), Some(after)) if after.starts_with(&step.to_string()) => {
                let after = &after[step.to_string().len()..];
                format!(
                    "{} {}{}",
                    self.style.cyan(spinner),
                    self.style.bold(&format!("step {step}")),
                    self.style.dim(after)
                )
            }
            _ => format!("{}{}", self.style.cyan(spinner), self.style.dim(rest)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Usage;
    use agentd_computer::Action;

    fn event(seq: u64, kind: EventKind) -> Event {
        Event { seq, task_id: "t1".into(), ts: time::OffsetDateTime::UNIX_EPOCH, kind }
    }

    /// What a terminal would show after `out` is written: rows of text, with the cursor moves, erases and
    /// colours of [`term`] applied (a tiny screen model, enough for these sequences).
    fn screen(out: &str) -> Vec<String> {
        let mut rows: Vec<String> = vec![String::new()];
        let mut row = 0;
        let mut rest = out;
        while let Some(c) = rest.chars().next() {
            if let Some(tail) = rest.strip_prefix('\x1b') {
                // CSI: ESC [ params final
                let end = tail.find(|ch: char| ch.is_ascii_alphabetic()).expect("CSI end");
                let (seq, after) = tail.split_at(end + 1);
                match seq.chars().last() {
                    Some('K') => rows[row].clear(),
                    Some('A') => row = row.saturating_sub(1),
                    _ => {}
                }
                rest = after;
                continue;
            }
            match c {
                '\r' => {}
                '\n' => {
                    row += 1;
                    if rows.len() <= row {
                        rows.push(String::new());
                    }
                }
                c => rows[row].push(c),
            }
            rest = &rest[c.len_utf8()..];
        }
        while rows.last().is_some_and(String::is_empty) {
            rows.pop();
        }
        rows
    }

    #[test]
    fn the_region_is_redrawn_in_place_and_lines_stay_above_it() {
        let now = Instant::now();
        let mut view = LiveView::new(Style::new(true), now);
        let mut out = String::new();
        let later = now + Duration::from_millis(1500);
        out += &view.event(&event(1, EventKind::TaskStarted { attempt: 1, worker: "w".into() }), 80, now);
        out += &view.event(&event(2, EventKind::StepStarted { step: 1, by: crate::record::By::Model }), 80, now);
        out += &view.event(&event(3, EventKind::MessageStart { step: 1 }), 80, now);
        assert!(screen(&out).last().expect("row").contains("step 1 · waiting for the model · 0.0s · $0.0000"));
        let text = "Hello there.\nI see a login form and will click";
        out += &view.event(
            &event(4, EventKind::ModelDelta { step: 1, kind: DeltaKind::Text, text: text.into() }),
            80,
            later,
        );
        let rows = screen(&out);
        assert_eq!(rows.len(), 4, "{rows:#?}");
        assert_eq!(rows[1], "│ Hello there.");
        assert_eq!(rows[2], "│ I see a login form and will click", "the unfinished line is in the region");
        assert!(rows[3].contains("the model is writing · 1.5s"), "{rows:#?}");
        let click = Action::Click { x: 4, y: 5, button: Default::default(), keys: Vec::new() };
        out += &view.event(&event(5, EventKind::MessageEnd { step: 1, interrupted: false }), 80, later);
        out += &view.event(&event(6, EventKind::ActionStarted { step: 1, index: 0, action: click }), 80, later);
        assert!(screen(&out).last().expect("row").contains("running click(4,5)"), "{:#?}", screen(&out));
        let usage = Usage { input_tokens: 1200, output_tokens: 34, cost_usd: 0.0123, ..Usage::default() };
        out += &view.event(&event(7, EventKind::StepFinished { step: 1, duration_ms: 20, usage }), 80, later);
        let rows = screen(&out);
        assert!(rows[3].starts_with("step   1  click(4,5)  20 ms"), "{rows:#?}");
        assert!(rows[4].contains("uploading screenshots (0 of 1 stored) · 1.5s · $0.0123 · 1200→34 tok"), "{rows:#?}");
        out += &view.finish();
        assert_eq!(screen(&out).len(), 4, "the region is gone: {:#?}", screen(&out));
        assert!(out.contains("\x1b[1mstep   1\x1b[0m"), "the step is bold with colour");
    }

    #[test]
    fn long_text_wraps_at_a_space_and_control_characters_are_escaped() {
        let now = Instant::now();
        let mut view = LiveView::new(Style::new(false), now);
        let words = "alpha beta gamma delta epsilon zeta eta theta iota kappa \u{1b}[2J";
        let out = view.event(
            &event(1, EventKind::ModelDelta { step: 0, kind: DeltaKind::Text, text: words.into() }),
            24,
            now,
        );
        let out = out + &view.finish();
        assert!(!out.contains("\x1b[2J"), "{out:?}");
        let rows = screen(&out);
        assert!(rows.iter().all(|r| r.chars().count() <= 23), "{rows:#?}");
        assert_eq!(rows[0], "│ alpha beta gamma");
        assert!(rows.last().expect("row").ends_with("\\u{1b}[2J"), "{rows:#?}");
        assert!(!out.contains("\x1b[2m") && !out.contains("\x1b[0m"), "no colour without it");
    }
}
