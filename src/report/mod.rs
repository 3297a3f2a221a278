//! Trajectory reports (§22): what a task did, made to be looked at — one self-contained HTML file
//! ([`html::render`]) and an animation of the run ([`anim::gif`], [`anim::webp`]) — from its status document
//! and its screenshots. [`draw`] turns actions into the marks both draw on the screenshots.
//!
//! A report holds no IO: [`Trajectory`] is the status document and the screenshot bytes, however they were
//! fetched (the CLI reads them from the daemon's API, or from an `agentd run` result on disk).

pub mod anim;
pub mod draw;
pub mod html;

use thiserror::Error;

use crate::record::{ActionResult, CallKind, CallResult, StepRecord};
use crate::status::TaskRecord;
use agentd_computer::Action;

/// A task's status document and its screenshots.
#[derive(Debug, Clone)]
pub struct Trajectory {
    pub record: TaskRecord,
    /// One entry per step of `record.steps`, in the same order: the screenshot's PNG bytes, or `None` when it
    /// could not be had (no longer stored, not stored yet).
    pub screenshots: Vec<Option<Vec<u8>>>,
    /// The screen after the last step, when there is one.
    pub final_screenshot: Option<Vec<u8>>,
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
mod tests {
    use super::*;

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
