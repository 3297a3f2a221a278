//! A captured screen image in memory: tightly packed 8-bit RGB, row-major, top row first.
//!
//! Every provider converts its native format (X11 BGRX, RFB pixel formats, the mock's canvas) into this one
//! layout once, at capture; scaling and encoding downstream then never branch on where a frame came from.

use std::sync::Arc;

use crate::action::{Point, Size};

/// Cheap to clone: the pixels are shared, never changed after capture.
#[derive(Clone, PartialEq, Eq)]
pub struct Frame {
    size: Size,
    /// `width * height * 3` bytes, RGB.
    pixels: Arc<Vec<u8>>,
}

impl std::fmt::Debug for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frame").field("size", &self.size).field("bytes", &self.pixels.len()).finish()
    }
}

/// A frame's pixel buffer did not match its size.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("frame of {size} needs {expected} RGB bytes, got {actual}")]
pub struct FrameSizeError {
    pub size: Size,
    pub expected: usize,
    pub actual: usize,
}

impl Frame {
    /// Wraps an RGB buffer of exactly `size.width * size.height * 3` bytes.
    pub fn from_rgb(size: Size, pixels: Vec<u8>) -> Result<Self, FrameSizeError> {
        let expected = size.width as usize * size.height as usize * 3;
        if pixels.len() != expected {
            return Err(FrameSizeError { size, expected, actual: pixels.len() });
        }
        Ok(Self { size, pixels: Arc::new(pixels) })
    }

    /// A frame of one colour.
    pub fn filled(size: Size, rgb: [u8; 3]) -> Self {
        let pixels = rgb.iter().copied().cycle().take(size.width as usize * size.height as usize * 3).collect();
        Self { size, pixels: Arc::new(pixels) }
    }

    pub fn size(&self) -> Size {
        self.size
    }

    pub fn width(&self) -> u32 {
        self.size.width
    }

    pub fn height(&self) -> u32 {
        self.size.height
    }

    pub fn as_rgb(&self) -> &[u8] {
        &self.pixels
    }

    /// The pixels, without a copy unless the frame is shared.
    pub fn into_rgb(self) -> Vec<u8> {
        Arc::try_unwrap(self.pixels).unwrap_or_else(|shared| (*shared).clone())
    }

    /// The pixel at `point`, if it is inside the frame.
    pub fn pixel(&self, point: Point) -> Option<[u8; 3]> {
        if !self.size.contains(point) {
            return None;
        }
        let i = (point.y as usize * self.size.width as usize + point.x as usize) * 3;
        Some([self.pixels[i], self.pixels[i + 1], self.pixels[i + 2]])
    }

    /// A copy of the region from `top_left` spanning `size`, clipped to the frame.
    pub fn crop(&self, top_left: Point, size: Size) -> Frame {
        let x0 = top_left.x.clamp(0, self.size.width as i32) as usize;
        let y0 = top_left.y.clamp(0, self.size.height as i32) as usize;
        let x1 = (x0 + size.width as usize).min(self.size.width as usize);
        let y1 = (y0 + size.height as usize).min(self.size.height as usize);
        let stride = self.size.width as usize * 3;
        let mut pixels = Vec::with_capacity((x1 - x0) * (y1 - y0) * 3);
        for row in y0..y1 {
            pixels.extend_from_slice(&self.pixels[row * stride + x0 * 3..row * stride + x1 * 3]);
        }
        Frame { size: Size::new((x1 - x0) as u32, (y1 - y0) as u32), pixels: Arc::new(pixels) }
    }

    /// A fast 64-bit fingerprint of the pixels (not cryptographic), for "did the screen change" checks.
    /// Four independent lanes over 32-byte blocks, so the multiplications overlap instead of waiting on each
    /// other (a 1280x800 frame in about a quarter of the time of one serial chain).
    pub fn digest(&self) -> u64 {
        const K: u64 = 0x9E37_79B9_7F4A_7C15;
        let seed = u64::from(self.size.width) << 32 | u64::from(self.size.height);
        let mut lanes = [seed, seed ^ 1, seed ^ 2, seed ^ 3];
        let mut blocks = self.pixels.chunks_exact(32);
        for block in &mut blocks {
            for (lane, word) in lanes.iter_mut().zip(block.chunks_exact(8)) {
                let mut bytes = [0u8; 8];
                bytes.copy_from_slice(word);
                *lane = (lane.rotate_left(5) ^ u64::from_le_bytes(bytes)).wrapping_mul(K);
            }
        }
        let mut hash = lanes.iter().fold(seed, |h, lane| (h.rotate_left(5) ^ lane).wrapping_mul(K));
        for &byte in blocks.remainder() {
            hash = (hash.rotate_left(5) ^ u64::from(byte)).wrapping_mul(K);
        }
        hash
    }

    /// How many pixels differ from `other` (frames of different sizes differ everywhere).
    pub fn changed_pixels(&self, other: &Frame) -> u64 {
        self.count_changed(other, u64::MAX)
    }

    /// Whether more than `tolerance` pixels differ from `other`; stops counting as soon as that is known.
    pub fn differs_by_more_than(&self, other: &Frame, tolerance: u64) -> bool {
        self.count_changed(other, tolerance) > tolerance
    }

    /// Counts differing pixels up to just past `stop_after`. Blocks of 256 pixels that are equal (most of a
    /// screen, most of the time) are skipped with one slice comparison.
    fn count_changed(&self, other: &Frame, stop_after: u64) -> u64 {
        if self.size != other.size {
            return self.size.area().max(other.size.area());
        }
        // 256 pixels: long enough that one comparison call covers a lot, short enough to stop early.
        const BLOCK: usize = 768;
        let mut changed = 0u64;
        let pairs = self.pixels.chunks(BLOCK).zip(other.pixels.chunks(BLOCK));
        for (a, b) in pairs {
            if a != b {
                changed += a.chunks_exact(3).zip(b.chunks_exact(3)).filter(|(p, q)| p != q).count() as u64;
                if changed > stop_after {
                    break;
                }
            }
        }
        changed
    }

    /// Whether every pixel has the same colour.
    pub fn is_uniform(&self) -> bool {
        match self.pixels.get(..3) {
            Some(first) => self.pixels.chunks_exact(3).all(|p| p == first),
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_is_checked() {
        assert!(Frame::from_rgb(Size::new(2, 2), vec![0; 12]).is_ok());
        let err = Frame::from_rgb(Size::new(2, 2), vec![0; 11]).unwrap_err();
        assert_eq!(err.expected, 12);
    }

    #[test]
    fn crop_clips_and_copies() {
        let mut pixels = Vec::new();
        for i in 0..16u8 {
            pixels.extend_from_slice(&[i, i, i]);
        }
        let frame = Frame::from_rgb(Size::new(4, 4), pixels).unwrap();
        let crop = frame.crop(Point::new(1, 1), Size::new(2, 2));
        assert_eq!(crop.size(), Size::new(2, 2));
        assert_eq!(crop.pixel(Point::new(0, 0)), Some([5, 5, 5]));
        assert_eq!(crop.pixel(Point::new(1, 1)), Some([10, 10, 10]));
        let clipped = frame.crop(Point::new(3, 3), Size::new(5, 5));
        assert_eq!(clipped.size(), Size::new(1, 1));
    }

    #[test]
    fn digest_and_change_count_see_one_pixel() {
        let a = Frame::filled(Size::new(10, 10), [1, 2, 3]);
        let mut pixels = a.as_rgb().to_vec();
        pixels[150] = 9;
        let b = Frame::from_rgb(Size::new(10, 10), pixels).unwrap();
        assert_ne!(a.digest(), b.digest());
        assert_eq!(a.changed_pixels(&b), 1);
        assert!(a.is_uniform());
        assert!(!b.is_uniform());
    }

    #[test]
    fn changed_pixels_counts_exactly_and_stops_early() {
        let size = Size::new(97, 31);
        let a = Frame::filled(size, [10, 20, 30]);
        let mut pixels = a.as_rgb().to_vec();
        // Pixels spread over block boundaries, including the first and the last.
        let changed: Vec<usize> = vec![0, 7, 8, 9, 500, 1503, 97 * 31 - 1];
        for &p in &changed {
            pixels[p * 3 + (p % 3)] ^= 0xff;
        }
        let b = Frame::from_rgb(size, pixels).unwrap();
        assert_eq!(a.changed_pixels(&b), changed.len() as u64);
        assert!(a.differs_by_more_than(&b, changed.len() as u64 - 1));
        assert!(!a.differs_by_more_than(&b, changed.len() as u64));
        assert!(!a.differs_by_more_than(&a.clone(), 0));
        assert_ne!(a.digest(), b.digest());
        assert_eq!(a.digest(), a.clone().digest());
    }
}
