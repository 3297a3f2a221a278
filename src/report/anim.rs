//! The animation of a run: one frame per step — its screenshot scaled down, the step's actions drawn on it, a
//! caption band with the step's number and actions — and, when the screen after the last step was kept, a
//! last frame with the outcome. Encoded as a GIF (the `gif` crate, NeuQuant palettes per frame) or an
//! animated lossless WebP (frames from `image-webp`'s VP8L encoder, in the animated container of Google's
//! WebP container spec: `VP8X` + `ANIM` + one `ANMF` per frame).
//!
//! Frames fit within [`AnimOptions::max_width`] × [`AnimOptions::max_height`] (never scaled up), so a
//! frame's size is bounded whatever the screen; the file grows with the number of steps.

use agentd_computer::{Frame, Size};

use super::draw::{self, Canvas};
use super::{ReportError, Trajectory, png_size};
use crate::screen::coords::fit_within;
use crate::screen::image::{decode_png, scale};

/// How the animation is made.
#[derive(Debug, Clone, Copy)]
pub struct AnimOptions {
    pub max_width: u32,
    pub max_height: u32,
    /// How long each step's frame shows.
    pub step_ms: u32,
    /// How long the last frame shows before the animation starts over.
    pub last_ms: u32,
}

impl Default for AnimOptions {
    fn default() -> Self {
        Self { max_width: 800, max_height: 800, step_ms: 1200, last_ms: 3000 }
    }
}

/// One frame: packed RGB8 pixels of the animation's size.
pub struct AnimFrame {
    pub rgb: Vec<u8>,
    pub duration_ms: u32,
}

/// The frames of a run and their common size (the screenshot scaled down and the caption band below it): one
/// per step, then the final screen when there is one.
pub fn frames(trajectory: &Trajectory, options: &AnimOptions) -> Result<(Size, Vec<AnimFrame>), ReportError> {
    let record = &trajectory.record;
    let first = record.steps.first().ok_or(ReportError::Empty)?;
    let screen = Size::new(first.screenshot.width.max(1), first.screenshot.height.max(1));
    let size = fit_within(screen, Size::new(options.max_width.max(16), options.max_height.max(16)));
    let total = record.steps.len();
    let mut frames = Vec::with_capacity(total + 1);
    for (i, step) in record.steps.iter().enumerate() {
        let (marks, _) = draw::marks(&step.actions);
        let mut caption = format!("step {}", step.index);
        for (j, action) in step.actions.iter().enumerate() {
            let text = match action {
                agentd_computer::Action::Type { text } => format!("type “{}”", draw::shorten(text, 40)),
                other => other.summary(),
            };
            caption.push_str(&format!("   {} {text}", j + 1));
        }
        if step.actions.is_empty() {
            let view = super::StepView::of(step);
            for tool in &view.tools {
                caption.push_str(&format!("   tool {}", tool.name));
            }
        }
        let what = format!("the screenshot of step {}", step.index);
        let shot = trajectory.screenshots.get(i).and_then(Option::as_deref);
        let screen_width = step.screenshot.width.max(1);
        let rgb = frame(shot, &what, size, screen_width, &marks, &caption)?;
        let last = i + 1 == total && trajectory.final_screenshot.is_none();
        frames.push(AnimFrame { rgb, duration_ms: if last { options.last_ms } else { options.step_ms } });
    }
    if let Some(shot) = &trajectory.final_screenshot {
        let caption = match &record.outcome {
            Some(o) => format!(
                "{} {}: {}",
                if o.success { "✓" } else { "✗" },
                record.state.as_str(),
                draw::shorten(&o.summary, 200)
            ),
            None => format!("the screen after step {total} ({})", record.state.as_str()),
        };
        let width = record.final_screenshot.as_ref().map_or(screen.width, |s| s.width.max(1));
        let rgb = frame(Some(shot), "the final screenshot", size, width, &[], &caption)?;
        frames.push(AnimFrame { rgb, duration_ms: options.last_ms });
    }
    Ok((Size::new(size.width, size.height + caption_band(size.width)), frames))
}

/// One frame of `size`: the screenshot (or a grey placeholder saying it is missing or unreadable), the marks (screen pixels
/// of a screen `screen_width` wide), the caption.
fn frame(
    png: Option<&[u8]>,
    what: &str,
    size: Size,
    screen_width: u32,
    marks: &[draw::Mark],
    caption: &str,
) -> Result<Vec<u8>, ReportError> {
    let image_error = |message: String| ReportError::Image { what: what.to_string(), message };
    let decoded = png.map(|bytes| -> Result<Vec<u8>, String> {
        png_size(bytes)?;
        let decoded = decode_png(bytes).map_err(|e| e.to_string())?;
        Ok(scale(&decoded, size).map_err(|e| e.to_string())?.into_rgb())
    });
    // A screenshot that is missing or unreadable becomes a grey frame saying so: the run is still animated.
    let (image, missing) = match decoded {
        Some(Ok(rgb)) => (rgb, None),
        Some(Err(why)) => {
            (Frame::filled(size, [0x55, 0x5b, 0x63]).into_rgb(), Some(format!("{what} is unreadable: {why}")))
        }
        None => (Frame::filled(size, [0x55, 0x5b, 0x63]).into_rgb(), Some(format!("{what} is missing"))),
    };
    // The caption band goes below the screenshot, so it hides nothing of it.
    let band = caption_band(size.width);
    let mut rgb = image;
    rgb.resize(rgb.len() + (size.width * band * 3) as usize, 0x16);
    let height = size.height + band;
    let Some(mut canvas) = Canvas::new(size.width, height, &mut rgb) else {
        return Err(image_error("the scaled frame has the wrong size".into()));
    };
    canvas.marks(marks, size.width as f32 / screen_width as f32);
    let px = caption_px(size.width);
    if let Some(missing) = missing {
        let y = (size.height / 2) as i32;
        canvas.text(12, y, px * 1.3, &missing, size.width.saturating_sub(24), [0xff; 3]);
    }
    let baseline = size.height as i32 + (band as f32 * 0.68).round() as i32;
    canvas.text(8, baseline, px, caption, size.width.saturating_sub(16), [0xff; 3]);
    Ok(rgb)
}

fn caption_px(width: u32) -> f32 {
    (width as f32 / 55.0).clamp(11.0, 16.0)
}

/// The height of the caption band below a frame `width` wide.
pub fn caption_band(width: u32) -> u32 {
    (caption_px(width) * 1.8).round() as u32
}

/// The run as an animated GIF that loops.
pub fn gif(trajectory: &Trajectory, options: &AnimOptions) -> Result<Vec<u8>, ReportError> {
    let (size, frames) = frames(trajectory, options)?;
    let encode = |e: gif::EncodingError| ReportError::Encode(e.to_string());
    let (Ok(width), Ok(height)) = (u16::try_from(size.width), u16::try_from(size.height)) else {
        return Err(ReportError::Encode(format!("a {}x{} frame is too large for a GIF", size.width, size.height)));
    };
    let mut out = Vec::new();
    {
        let mut encoder = gif::Encoder::new(&mut out, width, height, &[]).map_err(encode)?;
        encoder.set_repeat(gif::Repeat::Infinite).map_err(encode)?;
        for frame in &frames {
            // Speed 10: NeuQuant samples every 10th pixel; screenshots have few colours, that is plenty.
            let mut gif_frame = gif::Frame::from_rgb_speed(width, height, &frame.rgb, 10);
            gif_frame.delay = u16::try_from(frame.duration_ms / 10).unwrap_or(u16::MAX);
            encoder.write_frame(&gif_frame).map_err(encode)?;
        }
    }
    Ok(out)
}

/// The run as an animated lossless WebP that loops.
pub fn webp(trajectory: &Trajectory, options: &AnimOptions) -> Result<Vec<u8>, ReportError> {
    let (size, frames) = frames(trajectory, options)?;
    let mut chunks = Vec::new();
    // VP8X: the animation flag, the canvas size.
    let mut vp8x = vec![0x02, 0, 0, 0];
    vp8x.extend_from_slice(&u24(size.width - 1));
    vp8x.extend_from_slice(&u24(size.height - 1));
    push_chunk(&mut chunks, b"VP8X", &vp8x);
    // ANIM: a white background, loop forever.
    push_chunk(&mut chunks, b"ANIM", &[0xff, 0xff, 0xff, 0xff, 0, 0]);
    for frame in &frames {
        let mut single = Vec::new();
        image_webp::WebPEncoder::new(&mut single)
            .encode(&frame.rgb, size.width, size.height, image_webp::ColorType::Rgb8)
            .map_err(|e| ReportError::Encode(e.to_string()))?;
        // A still WebP is `RIFF size WEBP` and one `VP8L` chunk: the frame's data is that chunk.
        let Some(vp8l) = single.get(12..).filter(|c| c.starts_with(b"VP8L")) else {
            return Err(ReportError::Encode("the WebP encoder wrote no VP8L chunk".into()));
        };
        let mut anmf = Vec::with_capacity(16 + vp8l.len());
        anmf.extend_from_slice(&u24(0)); // x / 2
        anmf.extend_from_slice(&u24(0)); // y / 2
        anmf.extend_from_slice(&u24(size.width - 1));
        anmf.extend_from_slice(&u24(size.height - 1));
        anmf.extend_from_slice(&u24(frame.duration_ms.min(0xff_ffff)));
        anmf.push(0x02); // do not blend, do not dispose: every frame covers the canvas
        anmf.extend_from_slice(vp8l);
        push_chunk(&mut chunks, b"ANMF", &anmf);
    }
    let riff_size = u32::try_from(chunks.len() + 4)
        .map_err(|_| ReportError::Encode("the animation is larger than a WebP file can be (4 GiB)".into()))?;
    let mut out = Vec::with_capacity(chunks.len() + 12);
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&riff_size.to_le_bytes());
    out.extend_from_slice(b"WEBP");
    out.extend_from_slice(&chunks);
    Ok(out)
}

fn u24(value: u32) -> [u8; 3] {
    let b = value.to_le_bytes();
    [b[0], b[1], b[2]]
}

/// A RIFF chunk: its FourCC, its size, its data, padded to an even length.
fn push_chunk(out: &mut Vec<u8>, fourcc: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(fourcc);
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(data);
    if data.len() % 2 == 1 {
        out.push(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::TaskRecord;

    fn record(steps: usize) -> TaskRecord {
        let step = |i: usize| {
            serde_json::json!({"index": i, "started_at": "2026-01-01T00:00:01Z", "duration_ms": 5,
                "screenshot": {"url": "file:///x", "width": 1280, "height": 800, "key": "k"},
                "model_text": "", "actions": [{"type": "click", "x": 10, "y": 10}], "results": [],
                "usage": {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0, "cost_usd": 0.0},
                "calls": [], "call_results": [], "finished": true})
        };
        serde_json::from_value(serde_json::json!({
            "version": 1, "id": "t", "state": "succeeded", "created_at": "2026-01-01T00:00:00Z",
            "started_at": null, "finished_at": null, "attempt": 1, "worker": null, "task": {"instructions": "x"},
            "outcome": {"success": true, "summary": "done", "reason": "completed"},
            "usage": {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0, "cost_usd": 0.0},
            "steps": (0..steps).map(step).collect::<Vec<_>>(),
            "final_screenshot": {"url": "file:///y", "width": 1280, "height": 800, "key": "f"}
        }))
        .expect("record")
    }

    #[test]
    fn missing_and_unreadable_screenshots_become_frames_and_both_formats_decode() {
        let png = crate::screen::image::encode_png(&Frame::filled(Size::new(1280, 800), [200, 210, 220])).expect("png");
        let trajectory = Trajectory {
            record: record(3),
            screenshots: vec![Some(png.clone()), None, Some(b"not a png".to_vec())],
            final_screenshot: Some(png),
        };
        let options = AnimOptions::default();
        let (size, frames) = frames(&trajectory, &options).expect("frames");
        assert_eq!(frames.len(), 4);
        assert_eq!(size, Size::new(800, 500 + caption_band(800)));

        let gif = gif(&trajectory, &options).expect("gif");
        let mut decoder = gif::DecodeOptions::new().read_info(std::io::Cursor::new(&gif)).expect("decodes");
        let mut count = 0;
        while let Some(frame) = decoder.read_next_frame().expect("frame") {
            assert_eq!((frame.width, frame.height), (800, size.height as u16));
            count += 1;
        }
        assert_eq!(count, 4);

        let webp = webp(&trajectory, &options).expect("webp");
        let mut decoder = image_webp::WebPDecoder::new(std::io::Cursor::new(&webp)).expect("decodes");
        assert!(decoder.is_animated());
        assert_eq!((decoder.num_frames(), decoder.dimensions()), (4, (size.width, size.height)));
        let mut buf = vec![0; decoder.output_buffer_size().expect("size")];
        for _ in 0..4 {
            decoder.read_frame(&mut buf).expect("frame");
        }
        assert!(matches!(
            super::frames(&Trajectory { record: record(0), screenshots: vec![], final_screenshot: None }, &options),
            Err(ReportError::Empty)
        ));
    }
}
