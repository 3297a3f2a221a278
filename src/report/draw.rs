//! What a step's actions look like on its screenshot: [`marks`] turns actions (screen pixels) into shapes —
//! click points, drag paths, scroll arrows, zoom regions — and keyboard labels (typed text, keys, waits), once,
//! for both renderings: the HTML report draws them as SVG ([`svg`]) over the image, the animation rasterises
//! them onto each frame ([`Canvas`]).
//!
//! The raster drawing is a few anti-aliased primitives written here (a thick segment by distance to it, a
//! ring, a disc, a translucent band, text through `fontdue` with the DejaVu Sans face the mock desktop ships):
//! a drawing crate (`tiny-skia`, `imageproc`) would bring paths, transforms and an image type for the five
//! shapes used here.

use std::fmt::Write as _;
use std::sync::LazyLock;

use agentd_computer::{Action, MouseButton, Point};

/// One action drawn on the screen. `n` is the action's number in its step (from 1), printed beside it.
#[derive(Debug, Clone, PartialEq)]
pub enum Mark {
    /// A click (of `clicks` presses) or a pointer move at one place.
    Pointer { at: Point, n: usize, kind: PointerKind },
    /// A drag along a path.
    Path { points: Vec<Point>, n: usize },
    /// A wheel turn at a place: the arrow points the way the content moves into view.
    Scroll { at: Point, dx: i32, dy: i32, n: usize },
    /// A zoomed-in region.
    Region { from: Point, to: Point, n: usize },
}

/// What happened at a pointer mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PointerKind {
    Click { button: MouseButton, clicks: u8 },
    Move,
}

/// An action with no place on the screen (typed text, keys, waits, button presses), as a short label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    pub n: usize,
    pub text: String,
}

/// The marks and labels of a step's actions, in their order.
pub fn marks(actions: &[Action]) -> (Vec<Mark>, Vec<Label>) {
    let mut marks = Vec::new();
    let mut labels = Vec::new();
    for (i, action) in actions.iter().enumerate() {
        let n = i + 1;
        let click = |x: &i32, y: &i32, button: MouseButton, clicks: u8| Mark::Pointer {
            at: Point::new(*x, *y),
            n,
            kind: PointerKind::Click { button, clicks },
        };
        match action {
            Action::Click { x, y, button, .. } => marks.push(click(x, y, *button, 1)),
            Action::DoubleClick { x, y, .. } => marks.push(click(x, y, MouseButton::Left, 2)),
            Action::TripleClick { x, y, .. } => marks.push(click(x, y, MouseButton::Left, 3)),
            Action::Move { x, y, .. } => {
                marks.push(Mark::Pointer { at: Point::new(*x, *y), n, kind: PointerKind::Move })
            }
            Action::Drag { path, .. } if !path.is_empty() => marks.push(Mark::Path { points: path.clone(), n }),
            Action::Scroll { x, y, scroll_x, scroll_y, .. } => {
                marks.push(Mark::Scroll { at: Point::new(*x, *y), dx: *scroll_x, dy: *scroll_y, n })
            }
            Action::Zoom { x1, y1, x2, y2 } => {
                marks.push(Mark::Region { from: Point::new(*x1, *y1), to: Point::new(*x2, *y2), n })
            }
            Action::Type { text } => labels.push(Label { n, text: format!("type “{}”", shorten(text, 60)) }),
            other => labels.push(Label { n, text: other.summary() }),
        }
    }
    (marks, labels)
}

/// At most `max` characters of `text` (an ellipsis marks a cut), on one line.
pub fn shorten(text: &str, max: usize) -> String {
    let one_line: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if one_line.chars().count() <= max {
        return one_line;
    }
    let mut cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

const RED: [u8; 3] = [0xe5, 0x1c, 0x23];
const BLUE: [u8; 3] = [0x1e, 0x6f, 0xe8];
const WHITE: [u8; 3] = [0xff, 0xff, 0xff];

fn hex(rgb: [u8; 3]) -> String {
    format!("#{:02x}{:02x}{:02x}", rgb[0], rgb[1], rgb[2])
}

/// The marks as SVG elements in screen pixels (the SVG's `viewBox` is the screen), for a screen `width`
/// wide. Only numbers and fixed words are written: nothing from the task reaches the SVG.
pub fn svg(marks: &[Mark], width: u32) -> String {
    let stroke = (f64::from(width) / 250.0).max(2.0);
    let radius = stroke * 5.0;
    let font = stroke * 8.0;
    let mut out = String::new();
    let number = |out: &mut String, at: (f64, f64), n: usize| {
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{:.1}" font-size="{font:.1}" class="n">{n}</text>"#,
            at.0 + radius * 1.1,
            at.1 - radius * 0.9
        );
    };
    for mark in marks {
        match mark {
            Mark::Pointer { at, n, kind } => {
                let (x, y) = (f64::from(at.x), f64::from(at.y));
                let (color, rings) = match kind {
                    PointerKind::Click { button: MouseButton::Left, clicks } => (RED, *clicks),
                    PointerKind::Click { clicks, .. } => (BLUE, *clicks),
                    PointerKind::Move => (RED, 0),
                };
                let color = hex(color);
                if rings == 0 {
                    let _ = write!(
                        out,
                        r#"<circle cx="{x}" cy="{y}" r="{:.1}" fill="none" stroke="{color}" stroke-width="{stroke:.1}" stroke-dasharray="{:.1}" class="halo"/>"#,
                        radius,
                        stroke * 1.5
                    );
                }
                for ring in 0..rings {
                    let _ = write!(
                        out,
                        r#"<circle cx="{x}" cy="{y}" r="{:.1}" fill="none" stroke="{color}" stroke-width="{stroke:.1}" class="halo"/>"#,
                        radius * (1.0 + 0.45 * f64::from(ring))
                    );
                }
                let _ = write!(out, r#"<circle cx="{x}" cy="{y}" r="{:.1}" fill="{color}"/>"#, stroke * 1.2);
                number(&mut out, (x, y), *n);
            }
            Mark::Path { points, n } => {
                let list: Vec<String> = points.iter().map(|p| format!("{},{}", p.x, p.y)).collect();
                let _ = write!(
                    out,
                    r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="{stroke:.1}" stroke-linecap="round" stroke-linejoin="round" class="halo"/>"#,
                    list.join(" "),
                    hex(RED)
                );
                if let (Some(first), Some(last)) = (points.first(), points.last()) {
                    let _ = write!(
                        out,
                        r#"<circle cx="{}" cy="{}" r="{:.1}" fill="{}"/>"#,
                        first.x,
                        first.y,
                        stroke * 2.0,
                        hex(RED)
                    );
                    if let Some(before) = points.iter().rev().find(|p| *p != last) {
                        out.push_str(&arrow_head_svg(*before, *last, stroke, RED));
                    }
                    number(&mut out, (f64::from(first.x), f64::from(first.y)), *n);
                }
            }
            Mark::Scroll { at, dx, dy, n } => {
                let (from, to) = scroll_arrow(*at, *dx, *dy, radius * 4.0);
                let _ = write!(
                    out,
                    r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" stroke-width="{stroke:.1}" class="halo"/>"#,
                    from.x,
                    from.y,
                    to.x,
                    to.y,
                    hex(BLUE)
                );
                out.push_str(&arrow_head_svg(from, to, stroke, BLUE));
                number(&mut out, (f64::from(at.x), f64::from(at.y)), *n);
            }
            Mark::Region { from, to, n } => {
                let (x, y) = (from.x.min(to.x), from.y.min(to.y));
                let (w, h) = ((from.x - to.x).abs(), (from.y - to.y).abs());
                let _ = write!(
                    out,
                    r#"<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="none" stroke="{}" stroke-width="{stroke:.1}" stroke-dasharray="{:.1}" class="halo"/>"#,
                    hex(BLUE),
                    stroke * 3.0
                );
                number(&mut out, (f64::from(x), f64::from(y)), *n);
            }
        }
    }
    out
}

fn arrow_head_svg(from: Point, to: Point, stroke: f64, color: [u8; 3]) -> String {
    let [a, b] = arrow_head(from, to, stroke * 5.0);
    format!(
        r#"<polyline points="{:.1},{:.1} {},{} {:.1},{:.1}" fill="none" stroke="{}" stroke-width="{stroke:.1}" stroke-linecap="round" stroke-linejoin="round" class="halo"/>"#,
        a.0,
        a.1,
        to.x,
        to.y,
        b.0,
        b.1,
        hex(color)
    )
}

/// The two ends of an arrow head at `to`, pointing away from `from`, `length` long.
fn arrow_head(from: Point, to: Point, length: f64) -> [(f64, f64); 2] {
    let (dx, dy) = (f64::from(to.x - from.x), f64::from(to.y - from.y));
    let norm = (dx * dx + dy * dy).sqrt().max(1e-9);
    let (ux, uy) = (dx / norm, dy / norm);
    let (cos, sin) = (0.5f64.cos(), 0.5f64.sin());
    let back = |s: f64| {
        let (rx, ry) = (ux * cos - uy * sin * s, uy * cos + ux * sin * s);
        (f64::from(to.x) - rx * length, f64::from(to.y) - ry * length)
    };
    [back(1.0), back(-1.0)]
}

/// A scroll's arrow: from the wheel's place, `length` long in the direction the view moves (down for a
/// positive `scroll_y`). No amount (a zero scroll) points nowhere: a short arrow down.
fn scroll_arrow(at: Point, dx: i32, dy: i32, length: f64) -> (Point, Point) {
    let (fx, fy) = if dx == 0 && dy == 0 { (0.0, 1.0) } else { (f64::from(dx), f64::from(dy)) };
    let norm = (fx * fx + fy * fy).sqrt();
    let to = Point::new(at.x + (fx / norm * length).round() as i32, at.y + (fy / norm * length).round() as i32);
    (at, to)
}

/// A packed RGB8 image to draw on (an animation frame); everything is clipped to it.
pub struct Canvas<'a> {
    width: u32,
    height: u32,
    pixels: &'a mut [u8],
}

static FONT: LazyLock<Option<fontdue::Font>> = LazyLock::new(|| {
    static TTF: &[u8] = include_bytes!("../../providers/mock/assets/DejaVuSans.ttf");
    fontdue::Font::from_bytes(TTF, fontdue::FontSettings::default()).ok()
});

impl<'a> Canvas<'a> {
    /// `None` when `pixels` is not `width * height * 3` bytes.
    pub fn new(width: u32, height: u32, pixels: &'a mut [u8]) -> Option<Self> {
        (pixels.len() as u64 == u64::from(width) * u64::from(height) * 3).then_some(Self { width, height, pixels })
    }

    fn blend(&mut self, x: i32, y: i32, color: [u8; 3], alpha: f32) {
        if x < 0 || y < 0 || x as u32 >= self.width || y as u32 >= self.height || alpha <= 0.0 {
            return;
        }
        let alpha = alpha.min(1.0);
        let i = (y as usize * self.width as usize + x as usize) * 3;
        for (c, dst) in color.iter().zip(&mut self.pixels[i..i + 3]) {
            *dst = (f32::from(*dst) * (1.0 - alpha) + f32::from(*c) * alpha).round() as u8;
        }
    }

    /// Runs `coverage` over the pixels of a box (clipped), blending `color` by what it returns.
    fn shade(&mut self, bounds: (f32, f32, f32, f32), color: [u8; 3], coverage: impl Fn(f32, f32) -> f32) {
        let (x0, y0, x1, y1) = bounds;
        let x0 = x0.floor().max(0.0) as i32;
        let y0 = y0.floor().max(0.0) as i32;
        let x1 = x1.ceil().min(self.width as f32) as i32;
        let y1 = y1.ceil().min(self.height as f32) as i32;
        for y in y0..y1 {
            for x in x0..x1 {
                let a = coverage(x as f32 + 0.5, y as f32 + 0.5);
                self.blend(x, y, color, a);
            }
        }
    }

    /// A segment `width` thick with round ends.
    pub fn segment(&mut self, a: (f32, f32), b: (f32, f32), width: f32, color: [u8; 3]) {
        let half = width / 2.0;
        let bounds = (
            a.0.min(b.0) - half - 1.0,
            a.1.min(b.1) - half - 1.0,
            a.0.max(b.0) + half + 1.0,
            a.1.max(b.1) + half + 1.0,
        );
        let (dx, dy) = (b.0 - a.0, b.1 - a.1);
        let len2 = dx * dx + dy * dy;
        self.shade(bounds, color, |px, py| {
            let t = if len2 == 0.0 { 0.0 } else { (((px - a.0) * dx + (py - a.1) * dy) / len2).clamp(0.0, 1.0) };
            let (cx, cy) = (a.0 + t * dx - px, a.1 + t * dy - py);
            (half + 0.5 - (cx * cx + cy * cy).sqrt()).clamp(0.0, 1.0)
        });
    }

    /// A circle outline of `radius` (to the middle of the line), `width` thick.
    pub fn ring(&mut self, c: (f32, f32), radius: f32, width: f32, color: [u8; 3]) {
        let r = radius + width;
        self.shade((c.0 - r - 1.0, c.1 - r - 1.0, c.0 + r + 1.0, c.1 + r + 1.0), color, |px, py| {
            let d = ((px - c.0).powi(2) + (py - c.1).powi(2)).sqrt();
            (width / 2.0 + 0.5 - (d - radius).abs()).clamp(0.0, 1.0)
        });
    }

    /// A filled circle.
    pub fn disc(&mut self, c: (f32, f32), radius: f32, color: [u8; 3]) {
        self.shade(
            (c.0 - radius - 1.0, c.1 - radius - 1.0, c.0 + radius + 1.0, c.1 + radius + 1.0),
            color,
            |px, py| (radius + 0.5 - ((px - c.0).powi(2) + (py - c.1).powi(2)).sqrt()).clamp(0.0, 1.0),
        );
    }

    /// A translucent rectangle.
    pub fn band(&mut self, x: i32, y: i32, w: u32, h: u32, color: [u8; 3], alpha: f32) {
        let bounds = (x as f32, y as f32, x as f32 + w as f32, y as f32 + h as f32);
        self.shade(bounds, color, |_, _| alpha);
    }

    /// Text at `px` pixels, its baseline at `y`, cut with an ellipsis to fit `max_width`. Returns the width
    /// drawn. Draws nothing when the embedded font cannot be read.
    pub fn text(&mut self, x: i32, y: i32, px: f32, text: &str, max_width: u32, color: [u8; 3]) -> u32 {
        let Some(font) = FONT.as_ref() else { return 0 };
        let fitted = fit_text(font, text, px, max_width as f32);
        let mut pen = x as f32;
        for c in fitted.chars() {
            let (metrics, coverage) = font.rasterize(c, px);
            let left = pen.round() as i32 + metrics.xmin;
            let top = y - metrics.height as i32 - metrics.ymin;
            for row in 0..metrics.height {
                for col in 0..metrics.width {
                    let a = f32::from(coverage[row * metrics.width + col]) / 255.0;
                    self.blend(left + col as i32, top + row as i32, color, a);
                }
            }
            pen += metrics.advance_width;
        }
        (pen - x as f32).max(0.0).round() as u32
    }

    /// Draws the marks, whose points are screen pixels, on this frame, which is the screen scaled by `scale`.
    pub fn marks(&mut self, marks: &[Mark], scale: f32) {
        let stroke = (self.width as f32 / 250.0).max(2.0);
        let radius = stroke * 5.0;
        let at = |p: &Point| (p.x as f32 * scale, p.y as f32 * scale);
        for mark in marks {
            // Every shape twice: a white outline, then the colour, so it shows on dark and light screens.
            for (color, extra) in [(WHITE, 2.0), (RED, 0.0)] {
                match mark {
                    Mark::Pointer { at: p, kind, .. } => {
                        let c = at(p);
                        let (rings, color) = match kind {
                            PointerKind::Click { button: MouseButton::Left, clicks } => (*clicks, color),
                            PointerKind::Click { clicks, .. } => (*clicks, if color == RED { BLUE } else { color }),
                            PointerKind::Move => (1, color),
                        };
                        for ring in 0..rings {
                            self.ring(c, radius * (1.0 + 0.45 * f32::from(ring)), stroke + extra, color);
                        }
                        self.disc(c, stroke * 1.2 + extra / 2.0, color);
                    }
                    Mark::Path { points, .. } => {
                        for pair in points.windows(2) {
                            self.segment(at(&pair[0]), at(&pair[1]), stroke + extra, color);
                        }
                        if let (Some(first), Some(last)) = (points.first(), points.last()) {
                            self.disc(at(first), stroke * 2.0 + extra / 2.0, color);
                            if let Some(before) = points.iter().rev().find(|p| *p != last) {
                                self.arrow_head(at(before), at(last), stroke * 5.0, stroke + extra, color);
                            }
                        }
                    }
                    Mark::Scroll { at: p, dx, dy, .. } => {
                        let color = if color == RED { BLUE } else { color };
                        let (from, to) = scroll_arrow(*p, *dx, *dy, f64::from(radius * 4.0 / scale.max(1e-3)));
                        self.segment(at(&from), at(&to), stroke + extra, color);
                        self.arrow_head(at(&from), at(&to), stroke * 5.0, stroke + extra, color);
                    }
                    Mark::Region { from, to, .. } => {
                        let color = if color == RED { BLUE } else { color };
                        let (a, b) = (at(from), at(to));
                        for (p, q) in [
                            ((a.0, a.1), (b.0, a.1)),
                            ((b.0, a.1), (b.0, b.1)),
                            ((b.0, b.1), (a.0, b.1)),
                            ((a.0, b.1), (a.0, a.1)),
                        ] {
                            self.segment(p, q, stroke + extra, color);
                        }
                    }
                }
            }
        }
        for mark in marks {
            let (p, n) = match mark {
                Mark::Pointer { at: p, n, .. } | Mark::Scroll { at: p, n, .. } => (at(p), *n),
                Mark::Path { points, n } => match points.first() {
                    Some(p) => (at(p), *n),
                    None => continue,
                },
                Mark::Region { from, to, n } => {
                    ((from.x.min(to.x) as f32 * scale, from.y.min(to.y) as f32 * scale), *n)
                }
            };
            let label = n.to_string();
            let (x, y) = ((p.0 + radius * 1.2) as i32, (p.1 - radius * 0.6) as i32);
            let px = (stroke * 6.0).max(11.0);
            self.band(x - 2, y - px as i32, (px * 0.7 * label.len() as f32) as u32 + 5, px as u32 + 4, [0, 0, 0], 0.6);
            self.text(x, y, px, &label, 200, WHITE);
        }
    }

    fn arrow_head(&mut self, from: (f32, f32), to: (f32, f32), length: f32, width: f32, color: [u8; 3]) {
        let heads = arrow_head(
            Point::new(from.0.round() as i32, from.1.round() as i32),
            Point::new(to.0.round() as i32, to.1.round() as i32),
            f64::from(length),
        );
        for (x, y) in heads {
            self.segment((x as f32, y as f32), to, width, color);
        }
    }
}

/// `text` cut (with an ellipsis) to at most `max_width` pixels at `px`.
fn fit_text(font: &fontdue::Font, text: &str, px: f32, max_width: f32) -> String {
    let width = |s: &str| s.chars().map(|c| font.metrics(c, px).advance_width).sum::<f32>();
    if width(text) <= max_width {
        return text.to_string();
    }
    let ellipsis = width("…");
    let mut out = String::new();
    let mut used = 0.0;
    for c in text.chars() {
        let w = font.metrics(c, px).advance_width;
        if used + w + ellipsis > max_width {
            break;
        }
        used += w;
        out.push(c);
    }
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_become_marks_and_labels_in_order() {
        let actions: Vec<Action> = serde_json::from_value(serde_json::json!([
            {"type": "click", "x": 10, "y": 20},
            {"type": "type", "text": "hello\nworld"},
            {"type": "drag", "path": [{"x": 1, "y": 2}, {"x": 30, "y": 40}]},
            {"type": "scroll", "x": 5, "y": 6, "scroll_y": 300},
            {"type": "keypress", "keys": ["ctrl", "s"]},
            {"type": "double_click", "x": 7, "y": 8}
        ]))
        .expect("actions");
        let (marks, labels) = marks(&actions);
        assert_eq!(marks.len(), 4);
        assert!(matches!(marks[0], Mark::Pointer { n: 1, kind: PointerKind::Click { clicks: 1, .. }, .. }));
        assert!(matches!(&marks[1], Mark::Path { n: 3, points } if points.len() == 2));
        assert!(matches!(marks[2], Mark::Scroll { n: 4, dy: 300, .. }));
        assert!(matches!(marks[3], Mark::Pointer { n: 6, kind: PointerKind::Click { clicks: 2, .. }, .. }));
        assert_eq!(
            labels,
            [Label { n: 2, text: "type “hello world”".into() }, Label { n: 5, text: "keypress(ctrl+s)".into() }]
        );
        let svg = svg(&marks, 1280);
        assert_eq!(svg.matches("<polyline").count(), 3, "{svg}");
        assert!(svg.contains(r#"points="1,2 30,40""#), "{svg}");
    }

    #[test]
    fn drawing_is_clipped_and_changes_pixels_where_the_marks_are() {
        let (w, h) = (100u32, 60u32);
        let mut pixels = vec![0u8; (w * h * 3) as usize];
        let mut canvas = Canvas::new(w, h, &mut pixels).expect("canvas");
        let marks = vec![
            Mark::Pointer {
                at: Point::new(50, 30),
                n: 1,
                kind: PointerKind::Click { button: MouseButton::Left, clicks: 1 },
            },
            Mark::Path { points: vec![Point::new(-50, -50), Point::new(500, 500)], n: 2 },
        ];
        canvas.marks(&marks, 1.0);
        let at = |x: u32, y: u32| pixels[((y * w + x) * 3) as usize..][..3].to_vec();
        assert_ne!(at(50, 30), [0, 0, 0], "the click's dot");
        assert_eq!(at(99, 0), [0, 0, 0], "far from every mark");
        assert!(Canvas::new(w, h, &mut [0u8; 10]).is_none());
    }

    #[test]
    fn text_is_cut_to_fit() {
        let Some(font) = FONT.as_ref() else { panic!("the embedded font parses") };
        let cut = fit_text(font, &"x".repeat(500), 14.0, 100.0);
        assert!(cut.ends_with('…') && cut.chars().count() < 30, "{cut}");
        assert_eq!(fit_text(font, "short", 14.0, 100.0), "short");
    }
}
