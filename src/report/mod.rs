//! Trajectory reports (docs/reports.md): what a task did, made to be looked at — one self-contained HTML file
//! ([`html::HtmlWriter`]) and an animation of the run ([`anim::GifWriter`], [`anim::WebpWriter`]) — from its
//! status document and its screenshots. [`draw`] turns actions into the marks both draw on the screenshots.
//!
//! A report holds no IO of its own and never holds a run whole: [`render`] asks a [`Screenshots`] source for
//! each screenshot when the step that shows it is rendered (the CLI fetches it then from the daemon's API, or
//! from an `agentd run` result on disk), hands it to every [`Sink`] — each encodes that step and writes it to
//! its output at once — and drops it before asking for the next. Memory stays that of one step whatever the
//! number of steps.

pub mod anim;
pub mod draw;
pub mod html;

use thiserror::Error;

use crate::record::{ActionResult, CallKind, CallResult, StepRecord};
use crate::status::TaskRecord;
use agentd_computer::Action;

/// Which screenshot a report asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shot {
    /// The screenshot of `record.steps[i]` (the position in the record, not the step's `index`).
    Step(usize),
    /// The screen after the last step (asked for only when the record has one).
    Final,
}

/// Where a report's screenshots come from. [`render`] asks for each once, in order — every step's, then the
/// final screen's — and drops it before asking for the next.
pub trait Screenshots {
    /// The PNG bytes as the source hands them out.
    type Png: AsRef<[u8]>;

    /// The screenshot's PNG bytes, or `None` when it cannot be had (no longer stored, not stored yet): the
    /// report says it is missing. An error ends the report.
    fn get(&mut self, shot: Shot) -> Result<Option<Self::Png>, ReportError>;
}

/// One output of a report: the steps handed to it in order, each written before the next arrives.
pub trait Sink {
    /// Step `step` and its screenshot (`None`: missing).
    fn step(&mut self, step: &StepRecord, png: Option<&[u8]>) -> Result<(), ReportError>;
    /// The screen after the last step; called only when `record.final_screenshot` is set.
    fn end(&mut self, record: &TaskRecord, png: Option<&[u8]>) -> Result<(), ReportError>;
    /// Writes what closes the output (a trailer, a size written last) and flushes it.
    fn finish(&mut self) -> Result<(), ReportError>;
}

/// Renders `record` into every sink: each screenshot is asked of `source` once, handed to every sink and
/// dropped before the next is asked for; then every sink is finished.
pub fn render<S: Screenshots>(
    record: &TaskRecord,
    source: &mut S,
    sinks: &mut [&mut dyn Sink],
) -> Result<(), ReportError> {
    for (i, step) in record.steps.iter().enumerate() {
        let png = source.get(Shot::Step(i))?;
        for sink in sinks.iter_mut() {
            sink.step(step, png.as_ref().map(AsRef::as_ref))?;
        }
    }
    if record.final_screenshot.is_some() {
        let png = source.get(Shot::Final)?;
        for sink in sinks.iter_mut() {
            sink.end(record, png.as_ref().map(AsRef::as_ref))?;
        }
    }
    for sink in sinks.iter_mut() {
        sink.finish()?;
    }
    Ok(())
}

/// Why a report could not be made.
#[derive(Debug, Error)]
pub enum ReportError {
    #[error("the task has no steps: there is nothing to animate")]
    Empty,
    #[error("{what}: {message}")]
    Image { what: String, message: String },
    #[error("encoding the animation: {0}")]
    Encode(String),
    /// The output could not be written.
    #[error("writing the report: {0}")]
    Write(#[from] std::io::Error),
    /// The source of the screenshots failed (it says why where it can).
    #[error("reading the screenshots: {0}")]
    Source(String),
}

/// The largest screenshot side a report decodes (larger is refused as not a screenshot).
pub const MAX_SIDE: u32 = 16_384;

/// A step's computer actions paired with their results (in order), and its declared tool calls.
pub struct StepView<'a> {
    pub actions: Vec<(&'a Action, Option<&'a ActionResult>)>,
    pub tools: Vec<ToolView<'a>>,
}

/// One declared tool call of a step and its result, when it has one.
pub struct ToolView<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub arguments: &'a serde_json::Value,
    pub result: Option<ToolResultView<'a>>,
}

/// A tool call's result, from the step's results (or, for an answered `remote` call, its call results).
pub struct ToolResultView<'a> {
    pub ok: bool,
    pub message: &'a str,
    pub details: Option<&'a serde_json::Value>,
}

impl<'a> StepView<'a> {
    pub fn of(step: &'a StepRecord) -> Self {
        let action_results: Vec<&ActionResult> = step.results.iter().filter(|r| r.is_action()).collect();
        let actions = step.actions.iter().enumerate().map(|(i, a)| (a, action_results.get(i).copied())).collect();
        let tools = step
            .calls
            .iter()
            .filter_map(|call| match &call.kind {
                CallKind::Function { name, arguments } => Some(ToolView {
                    id: &call.id,
                    name,
                    arguments,
                    result: tool_result(&step.results, &step.call_results, &call.id),
                }),
                CallKind::Computer { .. } => None,
            })
            .collect();
        Self { actions, tools }
    }

    /// The failed actions' and tools' messages.
    pub fn errors(&self) -> Vec<String> {
        let actions = self
            .actions
            .iter()
            .filter_map(|(a, r)| r.filter(|r| !r.ok).map(|r| format!("{}: {}", a.summary(), r.message)));
        let tools = self
            .tools
            .iter()
            .filter_map(|t| t.result.as_ref().filter(|r| !r.ok).map(|r| format!("{}: {}", t.name, r.message)));
        actions.chain(tools).collect()
    }
}

fn tool_result<'a>(results: &'a [ActionResult], calls: &'a [CallResult], id: &str) -> Option<ToolResultView<'a>> {
    if let Some(r) = results.iter().find(|r| r.call_id.as_deref() == Some(id)) {
        return Some(ToolResultView { ok: r.ok, message: &r.message, details: r.details.as_ref() });
    }
    calls.iter().find(|r| r.call_id == id).map(|r| ToolResultView {
        ok: r.ok,
        message: &r.message,
        details: r.details.as_ref(),
    })
}

/// A duration in milliseconds for people: `850 ms`, `12.3 s`, `4 min 05 s`.
pub fn duration(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        _ => format!("{} min {:02} s", ms / 60_000, ms % 60_000 / 1000),
    }
}

/// Reads a PNG's size from its header, refusing what is not a PNG or is larger than [`MAX_SIDE`] (decoding
/// such a "screenshot" would take the memory of a decompression bomb).
pub fn png_size(bytes: &[u8]) -> Result<(u32, u32), String> {
    const SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";
    if bytes.len() < 24 || &bytes[..8] != SIGNATURE || &bytes[12..16] != b"IHDR" {
        return Err("not a PNG image".into());
    }
    let width = u32::from_be_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]);
    let height = u32::from_be_bytes([bytes[20], bytes[21], bytes[22], bytes[23]]);
    if width == 0 || height == 0 || width > MAX_SIDE || height > MAX_SIDE {
        return Err(format!("a {width}x{height} PNG is not a screenshot (at most {MAX_SIDE} pixels a side)"));
    }
    Ok((width, height))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::cell::{Cell, RefCell};
    use std::io::{Cursor, Seek, SeekFrom, Write};
    use std::rc::Rc;

    /// Screenshots held in memory, each handed out once.
    pub(crate) struct Held {
        steps: Vec<Option<Vec<u8>>>,
        last: Option<Vec<u8>>,
    }

    impl Held {
        pub(crate) fn new(steps: Vec<Option<Vec<u8>>>, last: Option<Vec<u8>>) -> Self {
            Self { steps, last }
        }
    }

    impl Screenshots for Held {
        type Png = Vec<u8>;

        fn get(&mut self, shot: Shot) -> Result<Option<Vec<u8>>, ReportError> {
            Ok(match shot {
                Shot::Step(i) => self.steps.get_mut(i).and_then(Option::take),
                Shot::Final => self.last.take(),
            })
        }
    }

    /// A record of `steps` steps on a screen of `size`, each clicking once; with a final screen or not.
    pub(crate) fn record_of(steps: usize, (width, height): (u32, u32), with_final: bool) -> TaskRecord {
        let step = |i: usize| {
            serde_json::json!({"index": i, "started_at": "2026-01-01T00:00:01Z", "duration_ms": 5,
                "screenshot": {"url": "file:///x", "width": width, "height": height, "key": "k"},
                "model_text": "", "actions": [{"type": "click", "x": 10, "y": 10}], "results": [],
                "usage": {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0, "cost_usd": 0.0},
                "calls": [], "call_results": [], "finished": true})
        };
        let last =
            with_final.then(|| serde_json::json!({"url": "file:///y", "width": width, "height": height, "key": "f"}));
        serde_json::from_value(serde_json::json!({
            "version": 1, "id": "t", "state": "succeeded", "created_at": "2026-01-01T00:00:00Z",
            "started_at": null, "finished_at": null, "attempt": 1, "worker": null, "task": {"instructions": "x"},
            "outcome": {"success": true, "summary": "done", "reason": "completed"},
            "usage": {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0, "cost_usd": 0.0},
            "steps": (0..steps).map(step).collect::<Vec<_>>(),
            "final_screenshot": last
        }))
        .expect("record")
    }

    /// An output in memory that shares how many bytes it holds.
    struct Output {
        bytes: Cursor<Vec<u8>>,
        len: Rc<Cell<usize>>,
    }

    impl Write for Output {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let n = self.bytes.write(buf)?;
            self.len.set(self.bytes.get_ref().len());
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Seek for Output {
        fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
            self.bytes.seek(pos)
        }
    }

    /// A screenshot handed out by [`Counting`]: while it lives, it counts as alive.
    struct CountedPng {
        bytes: Vec<u8>,
        alive: Rc<Cell<usize>>,
    }

    impl AsRef<[u8]> for CountedPng {
        fn as_ref(&self) -> &[u8] {
            &self.bytes
        }
    }

    impl Drop for CountedPng {
        fn drop(&mut self) {
            self.alive.set(self.alive.get() - 1);
        }
    }

    /// What [`Counting`] saw at a request: the shot asked for, how many screenshots were alive then, the
    /// outputs' lengths then.
    type Seen = (Shot, usize, Vec<usize>);

    /// Hands out a fresh copy of one PNG for every screenshot, and notes at each request how many it handed
    /// out are still alive and how much each output holds.
    struct Counting {
        png: Vec<u8>,
        alive: Rc<Cell<usize>>,
        outputs: Vec<Rc<Cell<usize>>>,
        seen: Rc<RefCell<Vec<Seen>>>,
    }

    impl Screenshots for Counting {
        type Png = CountedPng;

        fn get(&mut self, shot: Shot) -> Result<Option<CountedPng>, ReportError> {
            let lengths = self.outputs.iter().map(|len| len.get()).collect();
            self.seen.borrow_mut().push((shot, self.alive.get(), lengths));
            self.alive.set(self.alive.get() + 1);
            Ok(Some(CountedPng { bytes: self.png.clone(), alive: self.alive.clone() }))
        }
    }

    #[test]
    fn each_screenshot_is_read_when_its_step_is_rendered_and_written_out_before_the_next_is_read() {
        const STEPS: usize = 12;
        let screen = agentd_computer::Size::new(320, 200);
        let png =
            crate::screen::image::encode_png(&agentd_computer::Frame::filled(screen, [90, 140, 200])).expect("png");
        let record = record_of(STEPS, (screen.width, screen.height), true);
        let output = || {
            let len = Rc::new(Cell::new(0));
            (Output { bytes: Cursor::new(Vec::new()), len: len.clone() }, len)
        };
        let ((mut html_out, html_len), (mut gif_out, gif_len), (mut webp_out, webp_len)) =
            (output(), output(), output());
        let mut source = Counting {
            png,
            alive: Rc::new(Cell::new(0)),
            outputs: vec![html_len, gif_len, webp_len],
            seen: Rc::new(RefCell::new(Vec::new())),
        };
        let seen = source.seen.clone();
        let options = anim::AnimOptions::default();
        {
            let mut html = html::HtmlWriter::new(&record, &mut html_out).expect("html");
            let mut gif = anim::GifWriter::new(&record, &options, &mut gif_out).expect("gif");
            let mut webp = anim::WebpWriter::new(&record, &options, &mut webp_out).expect("webp");
            render(&record, &mut source, &mut [&mut html, &mut gif, &mut webp]).expect("render");
        }
        let seen = seen.borrow();
        let asked: Vec<Shot> = seen.iter().map(|(shot, ..)| *shot).collect();
        let expected: Vec<Shot> = (0..STEPS).map(Shot::Step).chain([Shot::Final]).collect();
        assert_eq!(asked, expected, "every screenshot asked for once, in order");
        for (i, window) in seen.windows(2).enumerate() {
            let ((_, _, before), (shot, alive, after)) = (&window[0], &window[1]);
            // The screenshot handed out before this request was dropped: one is alive at a time.
            assert_eq!(*alive, 0, "{shot:?} was asked for while {alive} screenshot(s) were alive: {seen:?}");
            // Every output grew between the requests: step i was encoded and written before step i + 1 was read.
            for (format, (b, a)) in ["html", "gif", "webp"].iter().zip(before.iter().zip(after)) {
                assert!(a > b, "the {format} output did not grow between step {i} and {shot:?}: {b} → {a} bytes");
            }
        }

        // The outputs are whole: every step and the final screen in each.
        let html = String::from_utf8(html_out.bytes.into_inner()).expect("UTF-8");
        assert_eq!(html.matches("<img class=\"step-shot\" src=\"data:image/png;base64,").count(), STEPS + 1);
        assert!(html.ends_with("</html>\n"));
        let gif = gif_out.bytes.into_inner();
        let mut decoder = gif::DecodeOptions::new().read_info(Cursor::new(&gif)).expect("a GIF");
        let mut frames = 0;
        while decoder.read_next_frame().expect("a frame").is_some() {
            frames += 1;
        }
        assert_eq!(frames, STEPS + 1);
        let webp = webp_out.bytes.into_inner();
        let decoder = image_webp::WebPDecoder::new(Cursor::new(&webp)).expect("a WebP");
        assert_eq!(decoder.num_frames() as usize, STEPS + 1);
    }

    #[test]
    fn png_headers_are_checked_before_decoding() {
        let frame = agentd_computer::Frame::filled(agentd_computer::Size::new(3, 2), [1, 2, 3]);
        let png = crate::screen::image::encode_png(&frame).expect("png");
        assert_eq!(png_size(&png), Ok((3, 2)));
        assert!(png_size(b"GIF89a").is_err());
        let mut huge = png.clone();
        huge[16..20].copy_from_slice(&100_000u32.to_be_bytes());
        assert!(png_size(&huge).unwrap_err().contains("100000x2"));
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(850), "850 ms");
        assert_eq!(duration(12_340), "12.3 s");
        assert_eq!(duration(245_000), "4 min 05 s");
    }
}
