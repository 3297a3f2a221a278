//! X11 image bytes to packed RGB: the pixel layouts a `ZPixmap` image comes in, and the conversion.
//!
//! A true-colour X screen describes its pixels by the root visual's channel masks, the pixmap format's bits
//! per pixel and the server's image byte order. Almost every server today is 32 bits per pixel, depth 24,
//! least significant byte first, red mask `0xff0000` — bytes B, G, R, X in memory — and that case has its
//! own loop; every other 32- or 16-bit true-colour layout goes through the general one.

use crate::error::LocalError;

/// One colour channel inside a pixel value: its shift and width in bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Channel {
    pub shift: u32,
    pub bits: u32,
}

impl Channel {
    /// The channel described by an X visual's mask (e.g. `0xff0000` → shift 16, 8 bits).
    pub fn from_mask(mask: u32) -> Result<Self, LocalError> {
        if mask == 0 {
            return Err(LocalError::PixelFormat("empty colour mask".into()));
        }
        let shift = mask.trailing_zeros();
        let bits = (mask >> shift).trailing_ones();
        if (mask >> shift) >> bits != 0 {
            return Err(LocalError::PixelFormat(format!("colour mask {mask:#x} is not contiguous")));
        }
        Ok(Self { shift, bits })
    }

    fn extract(&self, value: u32) -> u8 {
        let raw = (value >> self.shift) & ((1u32 << self.bits) - 1);
        match self.bits {
            8 => raw as u8,
            b if b > 8 => (raw >> (b - 8)) as u8,
            // Scale a narrow channel up to the full 0..=255 range (5 bits: 31 → 255).
            b => ((raw * 255 + ((1 << b) - 1) / 2) / ((1 << b) - 1)) as u8,
        }
    }
}

/// How the pixels of a `ZPixmap` image are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PixelLayout {
    /// 4 or 2.
    pub bytes_per_pixel: usize,
    /// The server sends multi-byte pixels most significant byte first.
    pub big_endian: bool,
    pub red: Channel,
    pub green: Channel,
    pub blue: Channel,
}

impl PixelLayout {
    pub fn new(
        bits_per_pixel: u8,
        big_endian: bool,
        red_mask: u32,
        green_mask: u32,
        blue_mask: u32,
    ) -> Result<Self, LocalError> {
        let bytes_per_pixel = match bits_per_pixel {
            32 => 4,
            16 => 2,
            other => {
                return Err(LocalError::PixelFormat(format!("{other} bits per pixel (only 32 and 16 are decoded)")));
            }
        };
        Ok(Self {
            bytes_per_pixel,
            big_endian,
            red: Channel::from_mask(red_mask)?,
            green: Channel::from_mask(green_mask)?,
            blue: Channel::from_mask(blue_mask)?,
        })
    }

    /// The layout of nearly every X server: 32 bits per pixel, bytes B, G, R, X.
    pub fn bgrx() -> Self {
        Self {
            bytes_per_pixel: 4,
            big_endian: false,
            red: Channel { shift: 16, bits: 8 },
            green: Channel { shift: 8, bits: 8 },
            blue: Channel { shift: 0, bits: 8 },
        }
    }

    fn is_bgrx(&self) -> bool {
        *self == Self::bgrx()
    }

    /// Bytes per row of a `width`-pixel image (rows are padded to 32 bits).
    pub fn stride(&self, width: usize) -> usize {
        (width * self.bytes_per_pixel).div_ceil(4) * 4
    }

    /// Converts a `width` x `height` image whose rows are `stride` bytes apart into packed RGB, replacing
    /// the contents of `out`.
    pub fn to_rgb(
        &self,
        src: &[u8],
        stride: usize,
        width: usize,
        height: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), LocalError> {
        let row_bytes = width * self.bytes_per_pixel;
        if stride < row_bytes || src.len() < stride * height.saturating_sub(1) + row_bytes {
            return Err(LocalError::PixelFormat(format!(
                "image of {} bytes is too short for {width}x{height} with stride {stride}",
                src.len()
            )));
        }
        out.clear();
        out.resize(width * height * 3, 0);
        let rows = out.chunks_exact_mut(width * 3).zip(src.chunks(stride));
        if self.is_bgrx() {
            for (dst, row) in rows {
                for (d, s) in dst.chunks_exact_mut(3).zip(row[..row_bytes].chunks_exact(4)) {
                    d[0] = s[2];
                    d[1] = s[1];
                    d[2] = s[0];
                }
            }
            return Ok(());
        }
        for (dst, row) in rows {
            for (d, s) in dst.chunks_exact_mut(3).zip(row[..row_bytes].chunks_exact(self.bytes_per_pixel)) {
                let value = match (self.bytes_per_pixel, self.big_endian) {
                    (4, false) => u32::from_le_bytes([s[0], s[1], s[2], s[3]]),
                    (4, true) => u32::from_be_bytes([s[0], s[1], s[2], s[3]]),
                    (_, false) => u32::from(u16::from_le_bytes([s[0], s[1]])),
                    (_, true) => u32::from(u16::from_be_bytes([s[0], s[1]])),
                };
                d[0] = self.red.extract(value);
                d[1] = self.green.extract(value);
                d[2] = self.blue.extract(value);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_become_channels() {
        assert_eq!(Channel::from_mask(0xff0000).unwrap(), Channel { shift: 16, bits: 8 });
        assert_eq!(Channel::from_mask(0xf800).unwrap(), Channel { shift: 11, bits: 5 });
        assert!(Channel::from_mask(0).is_err());
        assert!(Channel::from_mask(0xf0f0).is_err());
    }

    #[test]
    fn bgrx_rows_with_padding() {
        // 2x2 image, stride 12 (4 bytes of padding per row).
        let src = [
            1, 2, 3, 0, 4, 5, 6, 0, 99, 99, 99, 99, //
            7, 8, 9, 0, 10, 11, 12, 0, 99, 99, 99, 99,
        ];
        let mut out = Vec::new();
        PixelLayout::bgrx().to_rgb(&src, 12, 2, 2, &mut out).unwrap();
        assert_eq!(out, vec![3, 2, 1, 6, 5, 4, 9, 8, 7, 12, 11, 10]);
    }

    #[test]
    fn general_layouts_agree_with_the_fast_path() {
        let src = [0x10, 0x20, 0x30, 0x00, 0xff, 0x80, 0x01, 0x00];
        let mut fast = Vec::new();
        PixelLayout::bgrx().to_rgb(&src, 8, 2, 1, &mut fast).unwrap();
        // The same pixels, big-endian: X, R, G, B.
        let be = [0x00, 0x30, 0x20, 0x10, 0x00, 0x01, 0x80, 0xff];
        let layout = PixelLayout::new(32, true, 0xff0000, 0xff00, 0xff).unwrap();
        let mut slow = Vec::new();
        layout.to_rgb(&be, 8, 2, 1, &mut slow).unwrap();
        assert_eq!(fast, slow);
        assert_eq!(fast, vec![0x30, 0x20, 0x10, 0x01, 0x80, 0xff]);
    }

    #[test]
    fn rgb565_scales_to_full_range() {
        let layout = PixelLayout::new(16, false, 0xf800, 0x07e0, 0x001f).unwrap();
        let white = 0xffffu16.to_le_bytes();
        let red = 0xf800u16.to_le_bytes();
        let src = [white[0], white[1], red[0], red[1]];
        let mut out = Vec::new();
        layout.to_rgb(&src, 4, 2, 1, &mut out).unwrap();
        assert_eq!(out, vec![255, 255, 255, 255, 0, 0]);
    }

    #[test]
    fn short_buffers_are_errors_not_panics() {
        let mut out = Vec::new();
        assert!(PixelLayout::bgrx().to_rgb(&[0; 10], 8, 2, 2, &mut out).is_err());
        assert!(PixelLayout::new(24, false, 0xff0000, 0xff00, 0xff).is_err());
    }
}
