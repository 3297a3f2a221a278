//! `FramebufferUpdate` messages into the local copy of the remote screen: the Raw, CopyRect and ZRLE
//! encodings and the DesktopSize, ExtendedDesktopSize and LastRect pseudo-encodings (RFC 6143, sections 7.6.1
//! and 7.7).
//!
//! An update is read and decoded completely first ([`Decoder::read_update`] → a list of [`Op`]s), then
//! applied to the [`Framebuffer`] in one go by the caller, under its lock: a screenshot never sees half an
//! update, and the lock is never held while waiting on the network. Every size, length and coordinate the
//! server sends is checked: a malformed update is an error that drops the connection, never a panic.

use std::io::Read;

use flate2::{Decompress, FlushDecompress, Status};

use crate::error::WireError;
use crate::proto::{COPY_RECT, DESKTOP_SIZE, EXTENDED_DESKTOP_SIZE, LAST_RECT, RAW, ZRLE, read_u8, read_u16, read_u32};

/// The largest screen accepted (width and height each).
pub const MAX_DIMENSION: u32 = 16_384;
/// The largest compressed ZRLE rectangle accepted.
const MAX_ZRLE_BYTES: usize = 64 << 20;

fn protocol(message: impl Into<String>) -> WireError {
    WireError::Protocol(message.into())
}

/// The local copy of the remote screen, packed RGB.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Framebuffer {
    pub width: u32,
    pub height: u32,
    pub rgb: Vec<u8>,
}

impl Framebuffer {
    /// A black screen of `width` x `height`.
    pub fn new(width: u32, height: u32) -> Self {
        Self { width, height, rgb: vec![0; width as usize * height as usize * 3] }
    }

    /// Applies decoded operations in order.
    pub fn apply(&mut self, ops: Vec<Op>) {
        for op in ops {
            match op {
                Op::Pixels { rect, rgb } => self.blit(rect, &rgb),
                Op::Copy { from_x, from_y, to } => self.copy(from_x, from_y, to),
                Op::Resize { width, height } => {
                    if (width, height) != (self.width, self.height) {
                        *self = Framebuffer::new(width, height);
                    }
                }
            }
        }
    }

    fn blit(&mut self, rect: Rect, rgb: &[u8]) {
        let stride = self.width as usize * 3;
        let row = rect.w as usize * 3;
        for (i, src) in rgb.chunks_exact(row).take(rect.h as usize).enumerate() {
            let at = (rect.y as usize + i) * stride + rect.x as usize * 3;
            if let Some(dst) = self.rgb.get_mut(at..at + row) {
                dst.copy_from_slice(src);
            }
        }
    }

    fn copy(&mut self, from_x: u32, from_y: u32, to: Rect) {
        let stride = self.width as usize * 3;
        let row = to.w as usize * 3;
        // Through a copy of the source, so overlapping rectangles come out right.
        let mut source = Vec::with_capacity(row * to.h as usize);
        for i in 0..to.h as usize {
            let at = (from_y as usize + i) * stride + from_x as usize * 3;
            match self.rgb.get(at..at + row) {
                Some(src) => source.extend_from_slice(src),
                None => return,
            }
        }
        self.blit(to, &source);
    }
}

/// A rectangle of the framebuffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rect {
    pub x: u32,
    pub y: u32,
    pub w: u32,
    pub h: u32,
}

/// One decoded change to the framebuffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// New pixels for `rect` (packed RGB, `rect.w * rect.h * 3` bytes).
    Pixels { rect: Rect, rgb: Vec<u8> },
    /// `to` takes the pixels currently at (`from_x`, `from_y`).
    Copy { from_x: u32, from_y: u32, to: Rect },
    /// The remote screen changed size.
    Resize { width: u32, height: u32 },
}

/// Per-connection decoding state: the screen size as updates change it, and the ZRLE zlib stream (one per
/// connection, RFC 6143, section 7.7.6).
pub struct Decoder {
    width: u32,
    height: u32,
    zlib: Decompress,
    inflated: Vec<u8>,
}

impl Decoder {
    pub fn new(width: u32, height: u32) -> Self {
        Self { width, height, zlib: Decompress::new(true), inflated: Vec::new() }
    }

    /// Reads one `FramebufferUpdate` (its message-type byte already read) and decodes every rectangle.
    pub fn read_update(&mut self, r: &mut impl Read) -> Result<Vec<Op>, WireError> {
        read_u8(r)?;
        let count = read_u16(r)?;
        let mut ops = Vec::new();
        // 0xffff: "until a LastRect" when the server knows we understand LastRect.
        let mut remaining = if count == 0xffff { usize::MAX } else { usize::from(count) };
        while remaining > 0 {
            remaining -= 1;
            let rect = Rect {
                x: u32::from(read_u16(r)?),
                y: u32::from(read_u16(r)?),
                w: u32::from(read_u16(r)?),
                h: u32::from(read_u16(r)?),
            };
            let encoding = read_u32(r)? as i32;
            match encoding {
                LAST_RECT => break,
                DESKTOP_SIZE => ops.push(self.resize(rect.w, rect.h)?),
                EXTENDED_DESKTOP_SIZE => {
                    let screens = read_u8(r)?;
                    let mut skip = vec![0u8; 3 + usize::from(screens) * 16];
                    r.read_exact(&mut skip)?;
                    // rect.y is the status: non-zero answers a resize request of ours (we make none).
                    if rect.y == 0 {
                        ops.push(self.resize(rect.w, rect.h)?);
                    }
                }
                RAW => {
                    self.check(rect)?;
                    let mut raw = vec![0u8; rect.w as usize * rect.h as usize * 4];
                    r.read_exact(&mut raw)?;
                    let mut rgb = Vec::with_capacity(raw.len() / 4 * 3);
                    for px in raw.chunks_exact(4) {
                        rgb.extend_from_slice(&px[..3]);
                    }
                    ops.push(Op::Pixels { rect, rgb });
                }
                COPY_RECT => {
                    let from_x = u32::from(read_u16(r)?);
                    let from_y = u32::from(read_u16(r)?);
                    self.check(rect)?;
                    self.check(Rect { x: from_x, y: from_y, ..rect })?;
                    ops.push(Op::Copy { from_x, from_y, to: rect });
                }
                ZRLE => {
                    self.check(rect)?;
                    let len = read_u32(r)? as usize;
                    if len > MAX_ZRLE_BYTES {
                        return Err(protocol(format!("a ZRLE rectangle of {len} bytes")));
                    }
                    let mut compressed = vec![0u8; len];
                    r.read_exact(&mut compressed)?;
                    let rgb = self.zrle(rect, &compressed)?;
                    ops.push(Op::Pixels { rect, rgb });
                }
                other => {
                    return Err(protocol(format!(
                        "a rectangle in encoding {other}, which this client did not ask for"
                    )));
                }
            }
        }
        Ok(ops)
    }

    fn resize(&mut self, width: u32, height: u32) -> Result<Op, WireError> {
        if width == 0 || height == 0 || width > MAX_DIMENSION || height > MAX_DIMENSION {
            return Err(protocol(format!("a desktop size of {width}x{height}")));
        }
        self.width = width;
        self.height = height;
        Ok(Op::Resize { width, height })
    }

    fn check(&self, rect: Rect) -> Result<(), WireError> {
        if rect.x + rect.w > self.width || rect.y + rect.h > self.height {
            return Err(protocol(format!(
                "a rectangle {}x{}+{}+{} outside the {}x{} screen",
                rect.w, rect.h, rect.x, rect.y, self.width, self.height
            )));
        }
        Ok(())
    }

    /// Inflates a ZRLE rectangle's data (on the connection's zlib stream) and decodes its tiles.
    fn zrle(&mut self, rect: Rect, compressed: &[u8]) -> Result<Vec<u8>, WireError> {
        let pixels = rect.w as usize * rect.h as usize;
        let tiles = (rect.w as usize).div_ceil(64) * (rect.h as usize).div_ceil(64);
        // The most a rectangle can inflate to: every pixel as a run of its own (4 bytes), plus headers.
        let limit = pixels * 5 + tiles * 64 + 4096;
        self.inflated.clear();
        let mut input = compressed;
        loop {
            if self.inflated.len() >= limit {
                return Err(protocol("ZRLE data inflates beyond the rectangle's size"));
            }
            self.inflated.reserve((input.len() * 4).clamp(4096, limit - self.inflated.len()));
            let before_in = self.zlib.total_in();
            let before_out = self.zlib.total_out();
            let status = self
                .zlib
                .decompress_vec(input, &mut self.inflated, FlushDecompress::Sync)
                .map_err(|e| protocol(format!("ZRLE zlib data: {e}")))?;
            let consumed = (self.zlib.total_in() - before_in) as usize;
            let produced = self.zlib.total_out() - before_out;
            input = &input[consumed..];
            // Done when the input is used up and zlib left output room unused (it has nothing pending).
            if input.is_empty() && self.inflated.len() < self.inflated.capacity() {
                break;
            }
            if status == Status::StreamEnd {
                return Err(protocol("the ZRLE zlib stream ended"));
            }
            if consumed == 0 && produced == 0 {
                return Err(protocol("ZRLE zlib data makes no progress"));
            }
        }
        let mut out = vec![0u8; pixels * 3];
        let mut data = Cursor::new(&self.inflated);
        let stride = rect.w as usize * 3;
        for ty in (0..rect.h as usize).step_by(64) {
            let th = 64.min(rect.h as usize - ty);
            for tx in (0..rect.w as usize).step_by(64) {
                let tw = 64.min(rect.w as usize - tx);
                let tile = decode_tile(&mut data, tw, th)?;
                for (row, src) in tile.chunks_exact(tw * 3).enumerate() {
                    let at = (ty + row) * stride + tx * 3;
                    out[at..at + tw * 3].copy_from_slice(src);
                }
            }
        }
        Ok(out)
    }
}

/// A reader over inflated ZRLE data.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.buf.len())
            .ok_or_else(|| protocol("ZRLE data is truncated"))?;
        let slice = &self.buf[self.pos..end];
        self.pos = end;
        Ok(slice)
    }

    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }

    /// A compact pixel: R, G, B in this client's pixel format.
    fn cpixel(&mut self) -> Result<[u8; 3], WireError> {
        let b = self.take(3)?;
        Ok([b[0], b[1], b[2]])
    }

    /// A run length: bytes summed while they are 255, plus one.
    fn run_length(&mut self) -> Result<usize, WireError> {
        let mut len = 1usize;
        loop {
            let b = self.u8()?;
            len += usize::from(b);
            if b != 255 {
                return Ok(len);
            }
        }
    }
}

/// Decodes one ZRLE tile of `tw` x `th` pixels into packed RGB.
fn decode_tile(data: &mut Cursor<'_>, tw: usize, th: usize) -> Result<Vec<u8>, WireError> {
    let count = tw * th;
    let mut rgb = Vec::with_capacity(count * 3);
    let sub = data.u8()?;
    let palette = |data: &mut Cursor<'_>, size: usize| -> Result<Vec<[u8; 3]>, WireError> {
        (0..size).map(|_| data.cpixel()).collect()
    };
    let push_run = |rgb: &mut Vec<u8>, px: [u8; 3], len: usize| -> Result<(), WireError> {
        if rgb.len() / 3 + len > count {
            return Err(protocol("a ZRLE run overflows its tile"));
        }
        for _ in 0..len {
            rgb.extend_from_slice(&px);
        }
        Ok(())
    };
    match sub {
        0 => rgb.extend_from_slice(data.take(count * 3)?),
        1 => {
            let px = data.cpixel()?;
            push_run(&mut rgb, px, count)?;
        }
        2..=16 => {
            let colours = palette(data, usize::from(sub))?;
            let bits = match sub {
                2 => 1,
                3 | 4 => 2,
                _ => 4,
            };
            let row_bytes = (tw * bits).div_ceil(8);
            for _ in 0..th {
                let row = data.take(row_bytes)?;
                for x in 0..tw {
                    let bit = x * bits;
                    let byte = row[bit / 8];
                    let index = (byte >> (8 - bits - bit % 8)) & ((1 << bits) - 1);
                    let px =
                        colours.get(usize::from(index)).ok_or_else(|| protocol("a ZRLE palette index out of range"))?;
                    rgb.extend_from_slice(px);
                }
            }
        }
        128 => {
            while rgb.len() < count * 3 {
                let px = data.cpixel()?;
                let len = data.run_length()?;
                push_run(&mut rgb, px, len)?;
            }
        }
        130..=255 => {
            let colours = palette(data, usize::from(sub - 128))?;
            while rgb.len() < count * 3 {
                let index = data.u8()?;
                let len = if index & 128 != 0 { data.run_length()? } else { 1 };
                let px = *colours
                    .get(usize::from(index & 127))
                    .ok_or_else(|| protocol("a ZRLE palette index out of range"))?;
                push_run(&mut rgb, px, len)?;
            }
        }
        other => return Err(protocol(format!("ZRLE tile sub-encoding {other}"))),
    }
    Ok(rgb)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::{Compress, Compression, FlushCompress};

    fn rect_header(x: u16, y: u16, w: u16, h: u16, encoding: i32) -> Vec<u8> {
        let mut b = Vec::new();
        for v in [x, y, w, h] {
            b.extend_from_slice(&v.to_be_bytes());
        }
        b.extend_from_slice(&encoding.to_be_bytes());
        b
    }

    fn update(rects: &[Vec<u8>], count: u16) -> Vec<u8> {
        let mut b = vec![0u8];
        b.extend_from_slice(&count.to_be_bytes());
        for r in rects {
            b.extend_from_slice(r);
        }
        b
    }

    fn decode(decoder: &mut Decoder, fb: &mut Framebuffer, bytes: &[u8]) -> Result<(), WireError> {
        let ops = decoder.read_update(&mut std::io::Cursor::new(bytes))?;
        fb.apply(ops);
        Ok(())
    }

    fn pixel(fb: &Framebuffer, x: u32, y: u32) -> [u8; 3] {
        let i = ((y * fb.width + x) * 3) as usize;
        [fb.rgb[i], fb.rgb[i + 1], fb.rgb[i + 2]]
    }

    /// A server-side ZRLE stream: one zlib stream, sync-flushed per rectangle.
    struct ZrleServer(Compress);

    impl ZrleServer {
        fn rect(&mut self, tiles: &[u8]) -> Vec<u8> {
            let mut out = Vec::with_capacity(tiles.len() + 64);
            self.0.compress_vec(tiles, &mut out, FlushCompress::Sync).unwrap();
            let mut b = (out.len() as u32).to_be_bytes().to_vec();
            b.extend_from_slice(&out);
            b
        }
    }

    #[test]
    fn raw_and_copy_rect() {
        let mut decoder = Decoder::new(4, 4);
        let mut fb = Framebuffer::new(4, 4);
        let mut raw = rect_header(1, 1, 2, 1, RAW);
        raw.extend_from_slice(&[10, 20, 30, 0, 40, 50, 60, 0]);
        let mut copy = rect_header(2, 3, 2, 1, COPY_RECT);
        copy.extend_from_slice(&1u16.to_be_bytes());
        copy.extend_from_slice(&1u16.to_be_bytes());
        decode(&mut decoder, &mut fb, &update(&[raw, copy], 2)).unwrap();
        assert_eq!(pixel(&fb, 1, 1), [10, 20, 30]);
        assert_eq!(pixel(&fb, 2, 1), [40, 50, 60]);
        assert_eq!(pixel(&fb, 2, 3), [10, 20, 30]);
        assert_eq!(pixel(&fb, 3, 3), [40, 50, 60]);
        assert_eq!(pixel(&fb, 0, 0), [0, 0, 0]);
    }

    #[test]
    fn zrle_every_tile_kind_across_rectangles() {
        let mut server = ZrleServer(Compress::new(Compression::default(), true));
        let mut decoder = Decoder::new(70, 3);
        let mut fb = Framebuffer::new(70, 3);
        // 70x1: a raw 64-pixel tile, then a solid 6-pixel tile.
        let mut tiles = vec![0u8];
        for i in 0..64u8 {
            tiles.extend_from_slice(&[i, i, i]);
        }
        tiles.push(1);
        tiles.extend_from_slice(&[200, 100, 50]);
        let mut first = rect_header(0, 0, 70, 1, ZRLE);
        first.extend_from_slice(&server.rect(&tiles));
        // 3x1 packed palette (2 colours, 1 bit): 1,0,1 → 0b1010_0000.
        let mut second = rect_header(0, 1, 3, 1, ZRLE);
        second.extend_from_slice(&server.rect(&[2, 1, 1, 1, 9, 9, 9, 0b1010_0000]));
        // 5x1 plain RLE: 2 red, 3 green (lengths encoded as len-1).
        let mut third = rect_header(0, 2, 5, 1, ZRLE);
        third.extend_from_slice(&server.rect(&[128, 255, 0, 0, 1, 0, 255, 0, 2]));
        // 4x1 palette RLE over the same row's end: palette [blue, white]; blue x3 (run), white x1.
        let mut fourth = rect_header(66, 0, 4, 1, ZRLE);
        fourth.extend_from_slice(&server.rect(&[130, 0, 0, 255, 255, 255, 255, 0x80, 2, 1]));
        decode(&mut decoder, &mut fb, &update(&[first, second, third, fourth], 4)).unwrap();
        assert_eq!(pixel(&fb, 5, 0), [5, 5, 5]);
        assert_eq!(pixel(&fb, 64, 0), [200, 100, 50]);
        assert_eq!(pixel(&fb, 66, 0), [0, 0, 255]);
        assert_eq!(pixel(&fb, 68, 0), [0, 0, 255]);
        assert_eq!(pixel(&fb, 69, 0), [255, 255, 255]);
        assert_eq!((pixel(&fb, 0, 1), pixel(&fb, 1, 1), pixel(&fb, 2, 1)), ([9, 9, 9], [1, 1, 1], [9, 9, 9]));
        assert_eq!(pixel(&fb, 1, 2), [255, 0, 0]);
        assert_eq!(pixel(&fb, 2, 2), [0, 255, 0]);
        assert_eq!(pixel(&fb, 4, 2), [0, 255, 0]);
    }

    #[test]
    fn resizes_and_last_rect() {
        let mut decoder = Decoder::new(4, 4);
        let mut fb = Framebuffer::new(4, 4);
        let size = rect_header(0, 0, 8, 2, DESKTOP_SIZE);
        let mut raw = rect_header(7, 1, 1, 1, RAW);
        raw.extend_from_slice(&[1, 2, 3, 0]);
        let last = rect_header(0, 0, 0, 0, LAST_RECT);
        decode(&mut decoder, &mut fb, &update(&[size, raw, last], 0xffff)).unwrap();
        assert_eq!((fb.width, fb.height), (8, 2));
        assert_eq!(pixel(&fb, 7, 1), [1, 2, 3]);
        let mut extended = rect_header(1, 0, 3, 5, EXTENDED_DESKTOP_SIZE);
        extended.extend_from_slice(&[1, 0, 0, 0]);
        extended.extend_from_slice(&[0u8; 16]);
        decode(&mut decoder, &mut fb, &update(&[extended], 1)).unwrap();
        assert_eq!((fb.width, fb.height), (3, 5));
    }

    #[test]
    fn malformed_updates_are_errors() {
        let mut decoder = Decoder::new(4, 4);
        let mut fb = Framebuffer::new(4, 4);
        let outside = rect_header(3, 3, 2, 2, RAW);
        assert!(decode(&mut decoder, &mut fb, &update(&[outside], 1)).is_err());
        let unknown = rect_header(0, 0, 1, 1, 7);
        assert!(decode(&mut decoder, &mut fb, &update(&[unknown], 1)).is_err());
        let huge = rect_header(0, 0, 0, 0, DESKTOP_SIZE);
        assert!(decode(&mut decoder, &mut fb, &update(&[huge], 1)).is_err());
        let truncated = rect_header(0, 0, 2, 2, RAW);
        assert!(decode(&mut decoder, &mut fb, &update(&[truncated], 1)).is_err());
        // A ZRLE run longer than its tile.
        let mut server = ZrleServer(Compress::new(Compression::default(), true));
        let mut zrle = rect_header(0, 0, 2, 1, ZRLE);
        zrle.extend_from_slice(&server.rect(&[128, 1, 2, 3, 5]));
        let mut decoder = Decoder::new(4, 4);
        assert!(decode(&mut decoder, &mut fb, &update(&[zrle], 1)).is_err());
        // Garbage instead of zlib data.
        let mut garbage = rect_header(0, 0, 2, 1, ZRLE);
        garbage.extend_from_slice(&4u32.to_be_bytes());
        garbage.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        let mut decoder = Decoder::new(4, 4);
        assert!(decode(&mut decoder, &mut fb, &update(&[garbage], 1)).is_err());
    }
}
