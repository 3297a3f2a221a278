//! The animation of a run: one frame per step — its screenshot scaled down, the step's actions drawn on it, a
//! caption band with the step's number and actions — and, when the screen after the last step was kept, a
//! last frame with the outcome. Encoded as a GIF ([`GifWriter`]: the `gif` crate, NeuQuant palettes per
//! frame) or an animated lossless WebP ([`WebpWriter`]: frames from `image-webp`'s VP8L encoder, in the
//! animated container of Google's WebP container spec: `VP8X` + `ANIM` + one `ANMF` per frame).
//!
//! Frames fit within [`AnimOptions::max_width`] × [`AnimOptions::max_height`] (never scaled up), so a
//! frame's size is bounded whatever the screen. Each frame is made when its step arrives, encoded and written
//! to the output before the next: the file grows with the number of steps, the memory does not.

use std::io::{Seek, SeekFrom, Write};

use agentd_computer::{Frame, Size};

use super::draw::{self, Canvas};
use super::{ReportError, Sink, png_size};
use crate::record::StepRecord;
use crate::screen::coords::fit_within;
use crate::screen::image::{decode_png, scale};
use crate::status::TaskRecord;

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

/// Makes the frames of a run one at a time, as its steps arrive: their common size (the screenshot scaled
/// down and the caption band below it) is the first step's screen's, known from the record.
pub struct Frames {
    options: AnimOptions,
    /// The first step's screen.
    screen: Size,
    /// The screenshot part of every frame.
    image: Size,
    /// Steps in the record, and how many were made into frames so far.
    total: usize,
    made: usize,
    /// Whether a final frame follows the last step's.
    has_final: bool,
}

impl Frames {
    pub fn new(record: &TaskRecord, options: &AnimOptions) -> Result<Self, ReportError> {
        let first = record.steps.first().ok_or(ReportError::Empty)?;
        let screen = Size::new(first.screenshot.width.max(1), first.screenshot.height.max(1));
        let image = fit_within(screen, Size::new(options.max_width.max(16), options.max_height.max(16)));
        Ok(Self {
            options: *options,
            screen,
            image,
            total: record.steps.len(),
            made: 0,
            has_final: record.final_screenshot.is_some(),
        })
    }

    /// The size of every frame.
    pub fn size(&self) -> Size {
        Size::new(self.image.width, self.image.height + caption_band(self.image.width))
    }

    /// The frame of the next step.
    pub fn step(&mut self, step: &StepRecord, png: Option<&[u8]>) -> Result<AnimFrame, ReportError> {
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
        let rgb = frame(png, &what, self.image, step.screenshot.width.max(1), &marks, &caption)?;
        self.made += 1;
        let last = self.made >= self.total && !self.has_final;
        Ok(AnimFrame { rgb, duration_ms: if last { self.options.last_ms } else { self.options.step_ms } })
    }

    /// The last frame: the screen after the last step (a placeholder when `png` is missing) with the outcome.
    pub fn end(&self, record: &TaskRecord, png: Option<&[u8]>) -> Result<AnimFrame, ReportError> {
        let caption = match &record.outcome {
            Some(o) => format!(
                "{} {}: {}",
                if o.success { "✓" } else { "✗" },
                record.state.as_str(),
                draw::shorten(&o.summary, 200)
            ),
            None => format!("the screen after step {} ({})", self.total, record.state.as_str()),
        };
        let width = record.final_screenshot.as_ref().map_or(self.screen.width, |s| s.width.max(1));
        let rgb = frame(png, "the final screenshot", self.image, width, &[], &caption)?;
        Ok(AnimFrame { rgb, duration_ms: self.options.last_ms })
    }
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

/// The run as an animated GIF that loops, written to `W` a frame at a time.
pub struct GifWriter<W: Write> {
    frames: Frames,
    width: u16,
    height: u16,
    /// `None` once finished.
    encoder: Option<gif::Encoder<W>>,
}

fn gif_error(e: gif::EncodingError) -> ReportError {
    match e {
        gif::EncodingError::Io(e) => ReportError::Write(e),
        other => ReportError::Encode(other.to_string()),
    }
}

impl<W: Write> GifWriter<W> {
    /// Writes the GIF's header to `out`.
    pub fn new(record: &TaskRecord, options: &AnimOptions, out: W) -> Result<Self, ReportError> {
        let frames = Frames::new(record, options)?;
        let size = frames.size();
        let (Ok(width), Ok(height)) = (u16::try_from(size.width), u16::try_from(size.height)) else {
            return Err(ReportError::Encode(format!("a {}x{} frame is too large for a GIF", size.width, size.height)));
        };
        let mut encoder = gif::Encoder::new(out, width, height, &[]).map_err(gif_error)?;
        encoder.set_repeat(gif::Repeat::Infinite).map_err(gif_error)?;
        Ok(Self { frames, width, height, encoder: Some(encoder) })
    }

    fn write(&mut self, frame: AnimFrame) -> Result<(), ReportError> {
        let encoder = self.encoder.as_mut().ok_or_else(finished)?;
        // Speed 10: NeuQuant samples every 10th pixel; screenshots have few colours, that is plenty.
        let mut gif_frame = gif::Frame::from_rgb_speed(self.width, self.height, &frame.rgb, 10);
        gif_frame.delay = u16::try_from(frame.duration_ms / 10).unwrap_or(u16::MAX);
        encoder.write_frame(&gif_frame).map_err(gif_error)
    }
}

fn finished() -> ReportError {
    ReportError::Encode("the animation was finished already".into())
}

impl<W: Write> Sink for GifWriter<W> {
    fn step(&mut self, step: &StepRecord, png: Option<&[u8]>) -> Result<(), ReportError> {
        let frame = self.frames.step(step, png)?;
        self.write(frame)
    }

    fn end(&mut self, record: &TaskRecord, png: Option<&[u8]>) -> Result<(), ReportError> {
        let frame = self.frames.end(record, png)?;
        self.write(frame)
    }

    fn finish(&mut self) -> Result<(), ReportError> {
        let encoder = self.encoder.take().ok_or_else(finished)?;
        let mut out = encoder.into_inner().map_err(gif_error)?;
        out.flush()?;
        Ok(())
    }
}

/// The run as an animated lossless WebP that loops, written to `W` a frame at a time: the RIFF header's size,
/// which counts every chunk, is written last (`W` seeks back to it).
pub struct WebpWriter<W: Write + Seek> {
    frames: Frames,
    out: W,
    /// Where the RIFF header starts in `out`, and the bytes written after its size field so far.
    start: u64,
    riff_size: u64,
    done: bool,
}

/// The most a RIFF size field can say.
const RIFF_MAX: u64 = u32::MAX as u64;

impl<W: Write + Seek> WebpWriter<W> {
    /// Writes the RIFF header (its size to be filled in), `VP8X` (the animation flag, the canvas size) and `ANIM`
    /// (a white background, loop forever) to `out`.
    pub fn new(record: &TaskRecord, options: &AnimOptions, mut out: W) -> Result<Self, ReportError> {
        let frames = Frames::new(record, options)?;
        let size = frames.size();
        let start = out.stream_position()?;
        out.write_all(b"RIFF")?;
        out.write_all(&0u32.to_le_bytes())?;
        out.write_all(b"WEBP")?;
        let mut writer = Self { frames, out, start, riff_size: 4, done: false };
        let mut vp8x = vec![0x02, 0, 0, 0];
        vp8x.extend_from_slice(&u24(size.width - 1));
        vp8x.extend_from_slice(&u24(size.height - 1));
        writer.chunk(b"VP8X", &[&vp8x])?;
        writer.chunk(b"ANIM", &[&[0xff, 0xff, 0xff, 0xff, 0, 0]])?;
        Ok(writer)
    }

    /// A RIFF chunk of the concatenated `parts`: its FourCC, its size, its data, padded to an even length.
    fn chunk(&mut self, fourcc: &[u8; 4], parts: &[&[u8]]) -> Result<(), ReportError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let padded = 8 + len as u64 + (len as u64 % 2);
        if self.riff_size + padded > RIFF_MAX {
            return Err(ReportError::Encode("the animation is larger than a WebP file can be (4 GiB)".into()));
        }
        self.out.write_all(fourcc)?;
        self.out.write_all(&(len as u32).to_le_bytes())?;
        for part in parts {
            self.out.write_all(part)?;
        }
        if len % 2 == 1 {
            self.out.write_all(&[0])?;
        }
        self.riff_size += padded;
        Ok(())
    }

    fn write(&mut self, frame: AnimFrame) -> Result<(), ReportError> {
        if self.done {
            return Err(finished());
        }
        let size = self.frames.size();
        let mut single = Vec::new();
        image_webp::WebPEncoder::new(&mut single)
            .encode(&frame.rgb, size.width, size.height, image_webp::ColorType::Rgb8)
            .map_err(|e| ReportError::Encode(e.to_string()))?;
        let duration_ms = frame.duration_ms;
        drop(frame);
        // A still WebP is `RIFF size WEBP` and one `VP8L` chunk: the frame's data is that chunk.
        let Some(vp8l) = single.get(12..).filter(|c| c.starts_with(b"VP8L")) else {
            return Err(ReportError::Encode("the WebP encoder wrote no VP8L chunk".into()));
        };
        let mut header = Vec::with_capacity(16);
        header.extend_from_slice(&u24(0)); // x / 2
        header.extend_from_slice(&u24(0)); // y / 2
        header.extend_from_slice(&u24(size.width - 1));
        header.extend_from_slice(&u24(size.height - 1));
        header.extend_from_slice(&u24(duration_ms.min(0xff_ffff)));
        header.push(0x02); // do not blend, do not dispose: every frame covers the canvas
        self.chunk(b"ANMF", &[&header, vp8l])
    }
}

impl<W: Write + Seek> Sink for WebpWriter<W> {
    fn step(&mut self, step: &StepRecord, png: Option<&[u8]>) -> Result<(), ReportError> {
        let frame = self.frames.step(step, png)?;
        self.write(frame)
    }

    fn end(&mut self, record: &TaskRecord, png: Option<&[u8]>) -> Result<(), ReportError> {
        let frame = self.frames.end(record, png)?;
        self.write(frame)
    }

    /// Writes the RIFF size (everything after its field) into the header, and leaves `out` at the end.
    fn finish(&mut self) -> Result<(), ReportError> {
        if std::mem::replace(&mut self.done, true) {
            return Err(finished());
        }
        let size = u32::try_from(self.riff_size)
            .map_err(|_| ReportError::Encode("the animation is larger than a WebP file can be (4 GiB)".into()))?;
        let end = self.out.stream_position()?;
        self.out.seek(SeekFrom::Start(self.start + 4))?;
        self.out.write_all(&size.to_le_bytes())?;
        self.out.seek(SeekFrom::Start(end))?;
        self.out.flush()?;
        Ok(())
    }
}

fn u24(value: u32) -> [u8; 3] {
    let b = value.to_le_bytes();
    [b[0], b[1], b[2]]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::{Held, record_of};

    #[test]
    fn missing_and_unreadable_screenshots_become_frames_and_both_formats_decode() {
        let png = crate::screen::image::encode_png(&Frame::filled(Size::new(1280, 800), [200, 210, 220])).expect("png");
        let record = record_of(3, (1280, 800), true);
        let shots = || Held::new(vec![Some(png.clone()), None, Some(b"not a png".to_vec())], Some(png.clone()));
        let options = AnimOptions::default();
        let size = Frames::new(&record, &options).expect("frames").size();
        assert_eq!(size, Size::new(800, 500 + caption_band(800)));

        let mut gif = Vec::new();
        {
            let mut writer = GifWriter::new(&record, &options, &mut gif).expect("gif");
            crate::report::render(&record, &mut shots(), &mut [&mut writer]).expect("gif");
        }
        let mut decoder = gif::DecodeOptions::new().read_info(std::io::Cursor::new(&gif)).expect("decodes");
        let mut delays = Vec::new();
        while let Some(frame) = decoder.read_next_frame().expect("frame") {
            assert_eq!((frame.width, frame.height), (800, size.height as u16));
            delays.push(frame.delay);
        }
        assert_eq!(delays, [120, 120, 120, 300], "one frame per step, then the final screen's");

        let mut webp = std::io::Cursor::new(Vec::new());
        {
            let mut writer = WebpWriter::new(&record, &options, &mut webp).expect("webp");
            crate::report::render(&record, &mut shots(), &mut [&mut writer]).expect("webp");
        }
        let webp = webp.into_inner();
        assert_eq!(u32::from_le_bytes([webp[4], webp[5], webp[6], webp[7]]) as usize, webp.len() - 8, "RIFF size");
        let mut decoder = image_webp::WebPDecoder::new(std::io::Cursor::new(&webp)).expect("decodes");
        assert!(decoder.is_animated());
        assert_eq!((decoder.num_frames(), decoder.dimensions()), (4, (size.width, size.height)));
        let mut buf = vec![0; decoder.output_buffer_size().expect("size")];
        for _ in 0..4 {
            decoder.read_frame(&mut buf).expect("frame");
        }
        assert!(matches!(Frames::new(&record_of(0, (1280, 800), false), &options), Err(ReportError::Empty)));
    }
}
