//! The software canvas the mock desktop paints on: a packed RGB8 buffer with clipped, anti-aliased primitives
//! (rectangles, rounded rectangles, circles, thick line segments, alpha masks for glyphs).
//!
//! Everything here is integer or plain `f32` arithmetic on fixed inputs, so the same calls always give the same
//! bytes. Every drawing call takes a clip rectangle; nothing is ever written outside it or outside the canvas.

use agentd_computer::{Frame, Size};

/// An RGB colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Color(pub [u8; 3]);

impl Color {
    pub const fn rgb(r: u8, g: u8, b: u8) -> Self {
        Self([r, g, b])
    }

    /// Parses `#rrggbb` (the `#` is optional).
    pub fn parse_hex(text: &str) -> Option<Self> {
        let hex = text.strip_prefix('#').unwrap_or(text);
        if hex.len() != 6 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        let byte = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).ok();
        Some(Self([byte(0)?, byte(2)?, byte(4)?]))
    }
}

/// A rectangle in canvas pixels; `w`/`h` of zero or less is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rect {
    pub x: i32,
    pub y: i32,
    pub w: i32,
    pub h: i32,
}

impl Rect {
    pub const fn new(x: i32, y: i32, w: i32, h: i32) -> Self {
        Self { x, y, w, h }
    }

    pub fn right(&self) -> i32 {
        self.x + self.w
    }

    pub fn bottom(&self) -> i32 {
        self.y + self.h
    }

    pub fn is_empty(&self) -> bool {
        self.w <= 0 || self.h <= 0
    }

    pub fn contains(&self, x: i32, y: i32) -> bool {
        x >= self.x && y >= self.y && x < self.right() && y < self.bottom()
    }

    pub fn intersect(&self, other: Rect) -> Rect {
        let x = self.x.max(other.x);
        let y = self.y.max(other.y);
        let r = self.right().min(other.right());
        let b = self.bottom().min(other.bottom());
        Rect::new(x, y, (r - x).max(0), (b - y).max(0))
    }

    /// The rectangle shrunk by `d` on every side (grown when `d` is negative).
    pub fn inset(&self, d: i32) -> Rect {
        Rect::new(self.x + d, self.y + d, self.w - 2 * d, self.h - 2 * d)
    }

    pub fn translate(&self, dx: i32, dy: i32) -> Rect {
        Rect::new(self.x + dx, self.y + dy, self.w, self.h)
    }

    pub fn center_y(&self) -> i32 {
        self.y + self.h / 2
    }
}

/// An RGB8 pixel buffer, row-major, top row first (the layout of [`Frame`]).
#[derive(Clone)]
pub struct Canvas {
    width: i32,
    height: i32,
    pixels: Vec<u8>,
}

impl Canvas {
    pub fn new(size: Size, fill: Color) -> Self {
        let mut canvas = Self {
            width: size.width as i32,
            height: size.height as i32,
            pixels: vec![0; size.width as usize * size.height as usize * 3],
        };
        canvas.clear(fill);
        canvas
    }

    pub fn bounds(&self) -> Rect {
        Rect::new(0, 0, self.width, self.height)
    }

    pub fn size(&self) -> Size {
        Size::new(self.width as u32, self.height as u32)
    }

    #[cfg(test)]
    pub fn as_rgb(&self) -> &[u8] {
        &self.pixels
    }

    /// A copy of the pixels as a [`Frame`].
    pub fn to_frame(&self) -> Frame {
        // The buffer length is fixed at construction from the same size, so this cannot fail; fall back to a
        // blank frame rather than panic if it ever did.
        Frame::from_rgb(self.size(), self.pixels.clone()).unwrap_or_else(|_| Frame::filled(self.size(), [0, 0, 0]))
    }

    pub fn clear(&mut self, color: Color) {
        let all = self.bounds();
        self.fill_rect(all, color, all);
    }

    fn index(&self, x: i32, y: i32) -> usize {
        (y as usize * self.width as usize + x as usize) * 3
    }

    /// The pixel at (x, y), if it is on the canvas.
    #[cfg(test)]
    pub fn pixel(&self, x: i32, y: i32) -> Option<Color> {
        if !self.bounds().contains(x, y) {
            return None;
        }
        let i = self.index(x, y);
        Some(Color([self.pixels[i], self.pixels[i + 1], self.pixels[i + 2]]))
    }

    /// Blends `color` over the pixel at (x, y) with coverage `alpha` (0–255). The caller has clipped.
    fn blend(&mut self, x: i32, y: i32, color: Color, alpha: u32) {
        let i = self.index(x, y);
        if alpha >= 255 {
            self.pixels[i..i + 3].copy_from_slice(&color.0);
            return;
        }
        let inv = 255 - alpha;
        for c in 0..3 {
            let dst = u32::from(self.pixels[i + c]);
            let src = u32::from(color.0[c]);
            self.pixels[i + c] = ((src * alpha + dst * inv + 127) / 255) as u8;
        }
    }

    fn clip(&self, clip: Rect) -> Rect {
        clip.intersect(self.bounds())
    }

    pub fn fill_rect(&mut self, rect: Rect, color: Color, clip: Rect) {
        let r = rect.intersect(self.clip(clip));
        if r.is_empty() {
            return;
        }
        let row_bytes = r.w as usize * 3;
        let start = self.index(r.x, r.y);
        let stride = self.width as usize * 3;
        let first = &mut self.pixels[start..start + row_bytes];
        for px in first.chunks_exact_mut(3) {
            px.copy_from_slice(&color.0);
        }
        for row in 1..r.h as usize {
            let (head, tail) = self.pixels.split_at_mut(start + row * stride);
            tail[..row_bytes].copy_from_slice(&head[start..start + row_bytes]);
        }
    }

    /// Blends `color` over a rectangle with a uniform coverage `alpha` (0–255): shadows and tints.
    pub fn shade_rect(&mut self, rect: Rect, color: Color, alpha: u8, clip: Rect) {
        let r = rect.intersect(self.clip(clip));
        for y in r.y..r.bottom() {
            for x in r.x..r.right() {
                self.blend(x, y, color, u32::from(alpha));
            }
        }
    }

    /// A drop shadow of `rect` offset by (dx, dy) ≥ 0, drawn only where it shows around `rect` (which the
    /// caller paints over next).
    pub fn shadow(&mut self, rect: Rect, dx: i32, dy: i32, alpha: u8, clip: Rect) {
        let shadow = rect.translate(dx, dy);
        let right = Rect::new(rect.right(), shadow.y, shadow.right() - rect.right(), shadow.h);
        let bottom = Rect::new(shadow.x, rect.bottom(), rect.right() - shadow.x, shadow.bottom() - rect.bottom());
        self.shade_rect(right, Color::rgb(0, 0, 0), alpha, clip);
        self.shade_rect(bottom, Color::rgb(0, 0, 0), alpha, clip);
    }

    /// A filled rectangle with anti-aliased round corners of `radius` pixels.
    pub fn fill_round_rect(&mut self, rect: Rect, radius: i32, color: Color, clip: Rect) {
        let radius = radius.min(rect.w / 2).min(rect.h / 2).max(0);
        if radius == 0 {
            self.fill_rect(rect, color, clip);
            return;
        }
        // The middle band and the two side bands between the corners are plain rectangles.
        self.fill_rect(Rect::new(rect.x, rect.y + radius, rect.w, rect.h - 2 * radius), color, clip);
        self.fill_rect(Rect::new(rect.x + radius, rect.y, rect.w - 2 * radius, radius), color, clip);
        self.fill_rect(Rect::new(rect.x + radius, rect.bottom() - radius, rect.w - 2 * radius, radius), color, clip);
        let r = radius as f32;
        let corners = [
            (rect.x, rect.y, rect.x as f32 + r, rect.y as f32 + r),
            (rect.right() - radius, rect.y, (rect.right() - radius) as f32, rect.y as f32 + r),
            (rect.x, rect.bottom() - radius, rect.x as f32 + r, (rect.bottom() - radius) as f32),
            (
                rect.right() - radius,
                rect.bottom() - radius,
                (rect.right() - radius) as f32,
                (rect.bottom() - radius) as f32,
            ),
        ];
        let clip = self.clip(clip);
        for (x0, y0, cx, cy) in corners {
            for y in y0..y0 + radius {
                for x in x0..x0 + radius {
                    if !clip.contains(x, y) {
                        continue;
                    }
                    let dx = x as f32 + 0.5 - cx;
                    let dy = y as f32 + 0.5 - cy;
                    let coverage = (r + 0.5 - (dx * dx + dy * dy).sqrt()).clamp(0.0, 1.0);
                    let alpha = (coverage * 255.0).round() as u32;
                    if alpha > 0 {
                        self.blend(x, y, color, alpha);
                    }
                }
            }
        }
    }

    /// A rounded rectangle with a `border`-coloured outline one pixel thick and a `fill`ed inside.
    pub fn bordered_round_rect(&mut self, rect: Rect, radius: i32, border: Color, fill: Color, clip: Rect) {
        self.fill_round_rect(rect, radius, border, clip);
        self.fill_round_rect(rect.inset(1), (radius - 1).max(0), fill, clip);
    }

    /// An anti-aliased filled circle.
    pub fn fill_circle(&mut self, cx: f32, cy: f32, radius: f32, color: Color, clip: Rect) {
        let clip = self.clip(clip);
        let x0 = (cx - radius - 1.0).floor() as i32;
        let y0 = (cy - radius - 1.0).floor() as i32;
        let x1 = (cx + radius + 1.0).ceil() as i32;
        let y1 = (cy + radius + 1.0).ceil() as i32;
        for y in y0..y1 {
            for x in x0..x1 {
                if !clip.contains(x, y) {
                    continue;
                }
                let dx = x as f32 + 0.5 - cx;
                let dy = y as f32 + 0.5 - cy;
                let coverage = (radius + 0.5 - (dx * dx + dy * dy).sqrt()).clamp(0.0, 1.0);
                let alpha = (coverage * 255.0).round() as u32;
                if alpha > 0 {
                    self.blend(x, y, color, alpha);
                }
            }
        }
    }

    /// An anti-aliased line segment `width` pixels thick with round ends.
    pub fn stroke_segment(&mut self, from: (f32, f32), to: (f32, f32), width: f32, color: Color, clip: Rect) {
        let clip = self.clip(clip);
        let half = width / 2.0;
        let x0 = (from.0.min(to.0) - half - 1.0).floor() as i32;
        let y0 = (from.1.min(to.1) - half - 1.0).floor() as i32;
        let x1 = (from.0.max(to.0) + half + 1.0).ceil() as i32;
        let y1 = (from.1.max(to.1) + half + 1.0).ceil() as i32;
        let (dx, dy) = (to.0 - from.0, to.1 - from.1);
        let len2 = (dx * dx + dy * dy).max(f32::EPSILON);
        for y in y0..y1 {
            for x in x0..x1 {
                if !clip.contains(x, y) {
                    continue;
                }
                let (px, py) = (x as f32 + 0.5, y as f32 + 0.5);
                let t = (((px - from.0) * dx + (py - from.1) * dy) / len2).clamp(0.0, 1.0);
                let (qx, qy) = (from.0 + t * dx - px, from.1 + t * dy - py);
                let distance = (qx * qx + qy * qy).sqrt();
                let coverage = (half + 0.5 - distance).clamp(0.0, 1.0);
                let alpha = (coverage * 255.0).round() as u32;
                if alpha > 0 {
                    self.blend(x, y, color, alpha);
                }
            }
        }
    }

    /// Blends a coverage mask (one byte per pixel, row-major) covering `at` in `color`.
    pub fn blend_mask(&mut self, at: Rect, mask: &[u8], color: Color, clip: Rect) {
        let Rect { x, y, w, h } = at;
        let target = Rect::new(x, y, w, h).intersect(self.clip(clip));
        if target.is_empty() || mask.len() < (w * h) as usize {
            return;
        }
        for py in target.y..target.bottom() {
            let row = ((py - y) * w) as usize;
            for px in target.x..target.right() {
                let alpha = u32::from(mask[row + (px - x) as usize]);
                if alpha > 0 {
                    self.blend(px, py, color, alpha);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_rect_is_clipped_to_clip_and_canvas() {
        let mut c = Canvas::new(Size::new(10, 10), Color::rgb(0, 0, 0));
        let red = Color::rgb(255, 0, 0);
        c.fill_rect(Rect::new(-5, -5, 100, 100), red, Rect::new(2, 2, 3, 3));
        assert_eq!(c.pixel(2, 2), Some(red));
        assert_eq!(c.pixel(4, 4), Some(red));
        assert_eq!(c.pixel(5, 5), Some(Color::rgb(0, 0, 0)));
        assert_eq!(c.pixel(1, 2), Some(Color::rgb(0, 0, 0)));
        // Entirely off the canvas: nothing happens, nothing panics.
        c.fill_rect(Rect::new(50, 50, 10, 10), red, c.bounds());
        c.fill_circle(-40.0, -40.0, 5.0, red, c.bounds());
        c.stroke_segment((-10.0, -10.0), (30.0, 30.0), 3.0, red, c.bounds());
        c.fill_round_rect(Rect::new(8, 8, 20, 20), 6, red, c.bounds());
    }

    #[test]
    fn masks_blend_by_coverage() {
        let mut c = Canvas::new(Size::new(4, 1), Color::rgb(0, 0, 0));
        let all = c.bounds();
        c.blend_mask(Rect::new(0, 0, 4, 1), &[0, 128, 255, 64], Color::rgb(255, 255, 255), all);
        assert_eq!(c.pixel(0, 0), Some(Color::rgb(0, 0, 0)));
        assert_eq!(c.pixel(1, 0), Some(Color::rgb(128, 128, 128)));
        assert_eq!(c.pixel(2, 0), Some(Color::rgb(255, 255, 255)));
    }

    #[test]
    fn hex_colours_parse() {
        assert_eq!(Color::parse_hex("#0a0B0c"), Some(Color::rgb(10, 11, 12)));
        assert_eq!(Color::parse_hex("ffffff"), Some(Color::rgb(255, 255, 255)));
        assert_eq!(Color::parse_hex("#fff"), None);
        assert_eq!(Color::parse_hex("#gggggg"), None);
    }
}
