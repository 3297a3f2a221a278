//! Screenshot processing between capture and use: scaling to the model's size, PNG encoding, and JPEG for the
//! live view.
//!
//! PNG with the `png` crate's `Fast` setting (fdeflate, adaptive filtering) is lossless, accepted by every
//! model API, and costs a few milliseconds on a UI screenshot; scaling uses `fast_image_resize` (bilinear,
//! SIMD). Both are CPU work, so the loop runs them on the blocking pool.

use std::sync::{Arc, OnceLock};

use agentd_computer::{Frame, Size};
use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};
use thiserror::Error;

pub const PNG: &str = "image/png";

#[derive(Debug, Error)]
pub enum ImageError {
    #[error("cannot scale a {from} frame to {to}: {message}")]
    Scale { from: Size, to: Size, message: String },
    #[error("cannot encode an image: {0}")]
    Encode(String),
}

/// An encoded image ready to store.
#[derive(Debug, Clone)]
pub struct Encoded {
    pub size: Size,
    pub media_type: &'static str,
    pub extension: &'static str,
    pub bytes: Arc<[u8]>,
}

/// A screenshot prepared for both of its uses: the full-resolution artifact and the model's image.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub artifact: Encoded,
    pub model: ModelImage,
}

/// Scales `frame` to `to` (bilinear). Returns a copy when the sizes match.
pub fn scale(frame: &Frame, to: Size) -> Result<Frame, ImageError> {
    if frame.size() == to {
        return Ok(frame.clone());
    }
    let error = |message: String| ImageError::Scale { from: frame.size(), to, message };
    let src = ImageRef::new(frame.width(), frame.height(), frame.as_rgb(), PixelType::U8x3)
        .map_err(|e| error(e.to_string()))?;
    let mut dst = Image::new(to.width, to.height, PixelType::U8x3);
    let options = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::Bilinear));
    Resizer::new().resize(&src, &mut dst, &options).map_err(|e| error(e.to_string()))?;
    Frame::from_rgb(to, dst.into_vec()).map_err(|e| error(e.to_string()))
}

/// Encodes `frame` as an 8-bit RGB PNG.
pub fn encode_png(frame: &Frame) -> Result<Vec<u8>, ImageError> {
    let mut out = Vec::with_capacity(frame.as_rgb().len() / 8);
    {
        let mut encoder = png::Encoder::new(&mut out, frame.width(), frame.height());
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        encoder.set_compression(png::Compression::Fast);
        let mut writer = encoder.write_header().map_err(|e| ImageError::Encode(format!("PNG: {e}")))?;
        writer.write_image_data(frame.as_rgb()).map_err(|e| ImageError::Encode(format!("PNG: {e}")))?;
        writer.finish().map_err(|e| ImageError::Encode(format!("PNG: {e}")))?;
    }
    Ok(out)
}

/// Encodes `frame` as a baseline JPEG of `quality` (1–100): for views of the screen a person watches (the live
/// view), never for what is stored or sent to a model.
pub fn encode_jpeg(frame: &Frame, quality: u8) -> Result<Vec<u8>, ImageError> {
    let too_large = || ImageError::Encode(format!("a JPEG is at most 65535 pixels a side, not {}", frame.size()));
    let width = u16::try_from(frame.width()).map_err(|_| too_large())?;
    let height = u16::try_from(frame.height()).map_err(|_| too_large())?;
    let mut out = Vec::with_capacity(frame.as_rgb().len() / 10);
    jpeg_encoder::Encoder::new(&mut out, quality)
        .encode(frame.as_rgb(), width, height, jpeg_encoder::ColorType::Rgb)
        .map_err(|e| ImageError::Encode(format!("JPEG: {e}")))?;
    Ok(out)
}

/// Decodes a PNG written by [`encode_png`] (or any 8-bit RGB/RGBA PNG) back into a frame.
pub fn decode_png(bytes: &[u8]) -> Result<Frame, ImageError> {
    let err = |e: &dyn std::fmt::Display| ImageError::Encode(format!("PNG decode: {e}"));
    let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    let mut reader = decoder.read_info().map_err(|e| err(&e))?;
    let mut buf = vec![0; reader.output_buffer_size().ok_or_else(|| err(&"image too large"))?];
    let info = reader.next_frame(&mut buf).map_err(|e| err(&e))?;
    buf.truncate(info.buffer_size());
    let size = Size::new(info.width, info.height);
    let rgb = match (info.color_type, info.bit_depth) {
        (png::ColorType::Rgb, png::BitDepth::Eight) => buf,
        (png::ColorType::Rgba, png::BitDepth::Eight) => buf.chunks_exact(4).flat_map(|p| [p[0], p[1], p[2]]).collect(),
        other => return Err(err(&format!("unsupported PNG format {other:?}"))),
    };
    Frame::from_rgb(size, rgb).map_err(|e| err(&e))
}

/// Encodes the artifact at screen resolution and the model's image at `model_size` (one encode when the
/// sizes match).
pub fn prepare(frame: &Frame, model_size: Size) -> Result<Prepared, ImageError> {
    let artifact_bytes: Arc<[u8]> = encode_png(frame)?.into();
    let artifact = Encoded { size: frame.size(), media_type: PNG, extension: "png", bytes: artifact_bytes.clone() };
    let model = if model_size == frame.size() {
        ModelImage::new(frame.size(), PNG, artifact_bytes)
    } else {
        let scaled = scale(frame, model_size)?;
        ModelImage::new(model_size, PNG, encode_png(&scaled)?.into())
    };
    Ok(Prepared { artifact, model })
}

/// An encoded screenshot as a model sees it.
#[derive(Clone)]
pub struct ModelImage {
    pub size: Size,
    pub media_type: &'static str,
    pub bytes: Arc<[u8]>,
    /// Base64 of `bytes`, computed once on first use (several requests may resend the same image).
    base64: Arc<OnceLock<String>>,
}

impl ModelImage {
    pub fn new(size: Size, media_type: &'static str, bytes: Arc<[u8]>) -> Self {
        Self { size, media_type, bytes, base64: Arc::new(OnceLock::new()) }
    }

    pub fn base64(&self) -> &str {
        self.base64.get_or_init(|| {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.encode(&self.bytes)
        })
    }
}

impl std::fmt::Debug for ModelImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ModelImage({}, {}, {} bytes)", self.size, self.media_type, self.bytes.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_computer::Point;

    fn gradient(size: Size) -> Frame {
        let mut pixels = Vec::with_capacity(size.area() as usize * 3);
        for y in 0..size.height {
            for x in 0..size.width {
                pixels.extend_from_slice(&[(x % 256) as u8, (y % 256) as u8, 128]);
            }
        }
        Frame::from_rgb(size, pixels).unwrap()
    }

    #[test]
    fn png_round_trips_losslessly() {
        let frame = gradient(Size::new(300, 200));
        let png = encode_png(&frame).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        assert_eq!(decode_png(&png).unwrap(), frame);
    }

    #[test]
    fn scaling_changes_size_and_keeps_content() {
        let frame = gradient(Size::new(400, 200));
        let scaled = scale(&frame, Size::new(200, 100)).unwrap();
        assert_eq!(scaled.size(), Size::new(200, 100));
        let p = scaled.pixel(Point::new(100, 50)).unwrap();
        assert!((i32::from(p[0]) - 201).abs() <= 2, "{p:?}");
    }

    #[test]
    fn prepare_shares_one_encode_when_unscaled() {
        let frame = gradient(Size::new(64, 64));
        let same = prepare(&frame, frame.size()).unwrap();
        assert!(Arc::ptr_eq(&same.artifact.bytes, &same.model.bytes));
        let smaller = prepare(&frame, Size::new(32, 32)).unwrap();
        assert_eq!(smaller.model.size, Size::new(32, 32));
        assert_eq!(decode_png(&smaller.model.bytes).unwrap().size(), Size::new(32, 32));
    }
}
