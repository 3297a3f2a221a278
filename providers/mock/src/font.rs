//! Text: the embedded DejaVu Sans faces, measuring, word wrapping, and drawing with a glyph cache.
//!
//! The fonts are parsed once per process. Glyphs are rasterised by `fontdue` at whole-pixel sizes and cached
//! per (character, size, weight), so steady-state text drawing is a mask blend per glyph. Pen positions are
//! accumulated in `f32` and rounded per glyph; measuring ([`char_offsets`], [`text_width`]) uses the same rule
//! as drawing, so caret positions and hit tests line up with the pixels.

use std::collections::HashMap;
use std::sync::LazyLock;

use fontdue::{Font, FontSettings};

use crate::canvas::{Canvas, Color, Rect};

static REGULAR_TTF: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
static BOLD_TTF: &[u8] = include_bytes!("../assets/DejaVuSans-Bold.ttf");

struct Faces {
    regular: Font,
    bold: Font,
}

static FACES: LazyLock<Faces> = LazyLock::new(|| {
    let load = |bytes: &'static [u8]| {
        // The fonts are part of this crate, not input: a failure here is a broken build, caught by every test.
        Font::from_bytes(bytes, FontSettings { scale: 24.0, ..FontSettings::default() })
            .unwrap_or_else(|e| panic!("embedded DejaVu font does not parse: {e}"))
    };
    Faces { regular: load(REGULAR_TTF), bold: load(BOLD_TTF) }
});

/// A size and weight to draw text in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TextStyle {
    pub px: u16,
    pub bold: bool,
}

impl TextStyle {
    pub const fn regular(px: u16) -> Self {
        Self { px, bold: false }
    }

    pub const fn bold(px: u16) -> Self {
        Self { px, bold: true }
    }

    fn font(&self) -> &'static Font {
        if self.bold { &FACES.bold } else { &FACES.regular }
    }

    /// The height of one line of text, gap included.
    pub fn line_height(&self) -> i32 {
        (f32::from(self.px) * 1.4).round() as i32
    }
}

fn advance(c: char, style: TextStyle) -> f32 {
    style.font().metrics(c, f32::from(style.px)).advance_width
}

/// The x offset of every character boundary of `text`: `chars + 1` entries, the first 0, the last the width.
pub fn char_offsets(text: &str, style: TextStyle) -> Vec<i32> {
    let mut offsets = Vec::with_capacity(text.len() + 1);
    let mut pen = 0.0f32;
    offsets.push(0);
    for c in text.chars() {
        pen += advance(c, style);
        offsets.push(pen.round() as i32);
    }
    offsets
}

/// The width of `text` in pixels.
pub fn text_width(text: &str, style: TextStyle) -> i32 {
    let pen: f32 = text.chars().map(|c| advance(c, style)).sum();
    pen.round() as i32
}

/// Splits `text` into lines no wider than `max_width`, breaking at spaces (and inside words that are wider than
/// a line on their own). Explicit `\n` always breaks; an empty text is one empty line.
pub fn wrap(text: &str, style: TextStyle, max_width: i32) -> Vec<String> {
    let mut lines = Vec::new();
    for paragraph in text.split('\n') {
        let mut line = String::new();
        for word in paragraph.split(' ') {
            let candidate = if line.is_empty() { word.to_string() } else { format!("{line} {word}") };
            if text_width(&candidate, style) <= max_width || line.is_empty() && text_width(word, style) <= max_width {
                line = candidate;
                continue;
            }
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
            }
            // The word alone: break it by characters if it still does not fit.
            for c in word.chars() {
                line.push(c);
                if text_width(&line, style) > max_width && line.chars().count() > 1 {
                    line.pop();
                    lines.push(std::mem::take(&mut line));
                    line.push(c);
                }
            }
        }
        lines.push(line);
    }
    lines
}

/// Shortens `text` with a trailing ellipsis so that it fits in `max_width`.
pub fn elide(text: &str, style: TextStyle, max_width: i32) -> String {
    if text_width(text, style) <= max_width {
        return text.to_string();
    }
    let mut chars: Vec<char> = text.chars().collect();
    while !chars.is_empty() {
        chars.pop();
        let candidate: String = chars.iter().collect::<String>() + "…";
        if text_width(&candidate, style) <= max_width {
            return candidate;
        }
    }
    String::new()
}

struct Glyph {
    xmin: i32,
    ymin: i32,
    width: i32,
    height: i32,
    advance: f32,
    coverage: Vec<u8>,
}

/// Rasterised glyphs, kept for the life of a desktop.
#[derive(Default)]
pub struct GlyphCache {
    glyphs: HashMap<(char, TextStyle), Glyph>,
}

impl GlyphCache {
    fn glyph(&mut self, c: char, style: TextStyle) -> &Glyph {
        self.glyphs.entry((c, style)).or_insert_with(|| {
            let (m, coverage) = style.font().rasterize(c, f32::from(style.px));
            Glyph {
                xmin: m.xmin,
                ymin: m.ymin,
                width: m.width as i32,
                height: m.height as i32,
                advance: m.advance_width,
                coverage,
            }
        })
    }

    /// Draws `text` with its baseline at `baseline` and its pen starting at `x`. Returns the end x.
    #[allow(clippy::too_many_arguments)]
    pub fn draw(
        &mut self,
        canvas: &mut Canvas,
        x: i32,
        baseline: i32,
        text: &str,
        style: TextStyle,
        color: Color,
        clip: Rect,
    ) -> i32 {
        let mut pen = 0.0f32;
        for c in text.chars() {
            let start = x + pen.round() as i32;
            let glyph = self.glyph(c, style);
            if glyph.width > 0 && glyph.height > 0 {
                let gx = start + glyph.xmin;
                let gy = baseline - glyph.ymin - glyph.height;
                canvas.blend_mask(Rect::new(gx, gy, glyph.width, glyph.height), &glyph.coverage, color, clip);
            }
            pen += glyph.advance;
        }
        x + pen.round() as i32
    }

    /// Draws `text` vertically centred in the line box `rect` starting at `rect.x`.
    pub fn draw_in_line(
        &mut self,
        canvas: &mut Canvas,
        rect: Rect,
        text: &str,
        style: TextStyle,
        color: Color,
        clip: Rect,
    ) -> i32 {
        let baseline = baseline_in(rect, style);
        self.draw(canvas, rect.x, baseline, text, style, color, clip.intersect(rect))
    }
}

/// The baseline that centres a line of `style` text vertically in `rect`.
pub fn baseline_in(rect: Rect, style: TextStyle) -> i32 {
    // Centre the cap height (about 0.73 em for DejaVu Sans) rather than the full ascent+descent box: that is
    // what looks centred in buttons and fields.
    let cap = (f32::from(style.px) * 0.73).round() as i32;
    rect.y + (rect.h + cap) / 2
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_computer::Size;

    #[test]
    fn measuring_agrees_with_offsets() {
        let style = TextStyle::regular(15);
        let offsets = char_offsets("Hello", style);
        assert_eq!(offsets.len(), 6);
        assert_eq!(offsets[0], 0);
        assert_eq!(*offsets.last().unwrap_or(&0), text_width("Hello", style));
        assert!(offsets.windows(2).all(|w| w[1] > w[0]));
        assert!(text_width("Hello", TextStyle::bold(15)) >= text_width("Hello", style));
    }

    #[test]
    fn wrapping_breaks_at_spaces_and_inside_long_words() {
        let style = TextStyle::regular(15);
        let lines = wrap("the quick brown fox jumps over the lazy dog", style, 120);
        assert!(lines.len() > 2, "{lines:?}");
        assert!(lines.iter().all(|l| text_width(l, style) <= 120), "{lines:?}");
        assert_eq!(lines.join(" "), "the quick brown fox jumps over the lazy dog");
        let long = wrap("abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz", style, 100);
        assert!(long.len() > 1 && long.iter().all(|l| text_width(l, style) <= 100), "{long:?}");
        assert_eq!(wrap("a\n\nb", style, 100), vec!["a", "", "b"]);
        assert_eq!(wrap("", style, 100), vec![""]);
    }

    #[test]
    fn drawing_puts_ink_inside_the_line() {
        let mut canvas = Canvas::new(Size::new(120, 30), Color::rgb(255, 255, 255));
        let mut cache = GlyphCache::default();
        let end = cache.draw_in_line(
            &mut canvas,
            Rect::new(4, 0, 116, 30),
            "Sign in",
            TextStyle::regular(15),
            Color::rgb(0, 0, 0),
            Rect::new(0, 0, 120, 30),
        );
        assert!(end > 40);
        let dark = canvas.as_rgb().chunks_exact(3).filter(|p| p[0] < 128).count();
        assert!(dark > 50, "only {dark} dark pixels");
        assert_eq!(elide("a very long text indeed", TextStyle::regular(15), 60).chars().last(), Some('…'));
    }
}
