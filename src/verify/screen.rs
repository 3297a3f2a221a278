//! The `screen` check's matcher: where a reference image best matches the screen, within a region or
//! anywhere, and how well.
//!
//! The score ([`score_at`]) is the smaller of 1 − the mean absolute difference of the RGB channels (divided
//! by 255) and their zero-mean normalized cross-correlation: 1.0 is a pixel-exact match; a reference
//! differing everywhere by 5% of full scale scores at most 0.95; a blank patch where text was expected
//! scores near 0.
//! The search is coarse to fine so that "anywhere" stays fast on a large screen: both images are reduced to
//! grey pyramids (2× box averaging per level), every position is tried at the coarsest level where the
//! reference still has at least [`MIN_COARSE_SIDE`] pixels a side, the best [`CANDIDATES`] positions are
//! refined one level at a time within ±2 pixels, and the survivors are scored in full colour.

use agentd_computer::{Frame, Point, Size};

/// The smallest side the reference keeps at the coarsest level of the search.
pub const MIN_COARSE_SIDE: u32 = 8;
/// The most halvings the search makes.
pub const MAX_LEVELS: u32 = 4;
/// Positions kept from the coarse search for refining.
pub const CANDIDATES: usize = 6;

/// Where the reference matched best, and its score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Found {
    pub at: Point,
    pub score: f64,
}

/// A rectangle of the screen to search (`x`, `y`, `width`, `height` in pixels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Area {
    pub x: u32,
    pub y: u32,
    pub width: u32,
    pub height: u32,
}

/// Finds `reference` within `area` of `screen` (the whole screen when `None`). `Err` says why it cannot be
/// searched (the reference is larger than the area, the area is off screen).
pub fn find(screen: &Frame, reference: &Frame, area: Option<Area>) -> Result<Found, String> {
    let (sw, sh) = (screen.width(), screen.height());
    let area = area.unwrap_or(Area { x: 0, y: 0, width: sw, height: sh });
    // The area, clipped to the screen.
    let x1 = area.x.saturating_add(area.width).min(sw);
    let y1 = area.y.saturating_add(area.height).min(sh);
    if area.x >= sw || area.y >= sh {
        return Err(format!("the region ({},{}) lies outside the {sw}×{sh} screen", area.x, area.y));
    }
    let (rw, rh) = (reference.width(), reference.height());
    if rw > x1 - area.x || rh > y1 - area.y {
        return Err(format!(
            "the {rw}×{rh} reference is larger than the {}×{} region searched",
            x1 - area.x,
            y1 - area.y
        ));
    }
    // Positions (top-left corners) allowed, inclusive.
    let (px0, py0, px1, py1) = (area.x, area.y, x1 - rw, y1 - rh);

    let mut levels = 0;
    while levels < MAX_LEVELS && (rw >> (levels + 1)) >= MIN_COARSE_SIDE && (rh >> (levels + 1)) >= MIN_COARSE_SIDE {
        levels += 1;
    }
    let screen_pyramid = pyramid(screen, levels);
    let reference_pyramid = pyramid(reference, levels);

    // Exhaustive at the top level.
    let top = levels as usize;
    let (s, r) = (&screen_pyramid[top], &reference_pyramid[top]);
    let mut best: Vec<(u64, u32, u32)> = Vec::with_capacity(CANDIDATES + 1);
    let (qx0, qy0) = (px0 >> levels, py0 >> levels);
    let (qx1, qy1) =
        ((px1 >> levels).min(s.width.saturating_sub(r.width)), (py1 >> levels).min(s.height.saturating_sub(r.height)));
    for y in qy0..=qy1.max(qy0) {
        for x in qx0..=qx1.max(qx0) {
            let limit = if best.len() == CANDIDATES { best[CANDIDATES - 1].0 } else { u64::MAX };
            if let Some(sad) = sad(s, r, x, y, limit) {
                let position = best.partition_point(|b| b.0 <= sad);
                best.insert(position, (sad, x, y));
                best.truncate(CANDIDATES);
            }
        }
    }
    // Refine each candidate down the pyramid.
    let mut finalists = Vec::with_capacity(best.len());
    for &(_, mut x, mut y) in &best {
        for level in (0..levels as usize).rev() {
            let (s, r) = (&screen_pyramid[level], &reference_pyramid[level]);
            let scale = 1u32 << level;
            let (lx0, ly0) = (px0.div_ceil(scale), py0.div_ceil(scale));
            let (lx1, ly1) = ((px1 / scale).min(s.width - r.width), (py1 / scale).min(s.height - r.height));
            let (cx, cy) = (x * 2, y * 2);
            let mut local = (u64::MAX, cx.clamp(lx0, lx1.max(lx0)), cy.clamp(ly0, ly1.max(ly0)));
            for ny in cy.saturating_sub(2).max(ly0)..=(cy + 2).min(ly1) {
                for nx in cx.saturating_sub(2).max(lx0)..=(cx + 2).min(lx1) {
                    if let Some(sad) = sad(s, r, nx, ny, local.0) {
                        local = (sad, nx, ny);
                    }
                }
            }
            (x, y) = (local.1, local.2);
        }
        finalists.push((x, y));
    }
    finalists.sort_unstable();
    finalists.dedup();
    finalists
        .into_iter()
        .map(|(x, y)| Found { at: Point::new(x as i32, y as i32), score: score_at(screen, reference, x, y) })
        .max_by(|a, b| a.score.total_cmp(&b.score))
        .ok_or_else(|| "no position to compare".to_string())
}

/// The score of `reference` placed with its top-left corner at (`x`, `y`) of `screen`, in full colour: the
/// smaller of 1 − the mean absolute difference (the colours must agree) and the zero-mean normalized
/// cross-correlation (the structure must agree: a blank patch does not pass for a form with thin text on
/// it). A uniform reference has no structure to correlate: its score is the first alone.
pub fn score_at(screen: &Frame, reference: &Frame, x: u32, y: u32) -> f64 {
    let crop = screen.crop(Point::new(x as i32, y as i32), reference.size());
    if crop.size() != reference.size() {
        return 0.0;
    }
    let (a, b) = (crop.as_rgb(), reference.as_rgb());
    let n = b.len().max(1) as f64;
    let total: u64 = a.iter().zip(b).map(|(a, b)| u64::from(a.abs_diff(*b))).sum();
    let mad = 1.0 - total as f64 / (n * 255.0);
    let mean = |v: &[u8]| v.iter().map(|&p| f64::from(p)).sum::<f64>() / n;
    let (ma, mb) = (mean(a), mean(b));
    let (mut ab, mut aa, mut bb) = (0.0, 0.0, 0.0);
    for (&p, &q) in a.iter().zip(b) {
        let (da, db) = (f64::from(p) - ma, f64::from(q) - mb);
        ab += da * db;
        aa += da * da;
        bb += db * db;
    }
    if bb < 1e-9 {
        return mad;
    }
    if aa < 1e-9 {
        return 0.0;
    }
    mad.min((ab / (aa * bb).sqrt()).clamp(0.0, 1.0))
}

/// A grey image.
struct Grey {
    width: u32,
    height: u32,
    pixels: Vec<u8>,
}

/// Level 0 is the frame in grey; each next level halves it (2×2 averages).
fn pyramid(frame: &Frame, levels: u32) -> Vec<Grey> {
    let pixels = frame
        .as_rgb()
        .chunks_exact(3)
        .map(|p| ((u32::from(p[0]) * 77 + u32::from(p[1]) * 150 + u32::from(p[2]) * 29) >> 8) as u8)
        .collect();
    let mut out = vec![Grey { width: frame.width(), height: frame.height(), pixels }];
    for _ in 0..levels {
        let Some(last) = out.last() else { break };
        let (w, h) = (last.width / 2, last.height / 2);
        let mut pixels = Vec::with_capacity((w * h) as usize);
        for y in 0..h {
            let (r0, r1) = ((2 * y * last.width) as usize, ((2 * y + 1) * last.width) as usize);
            for x in 0..w {
                let c = (2 * x) as usize;
                let sum = u32::from(last.pixels[r0 + c])
                    + u32::from(last.pixels[r0 + c + 1])
                    + u32::from(last.pixels[r1 + c])
                    + u32::from(last.pixels[r1 + c + 1]);
                pixels.push((sum / 4) as u8);
            }
        }
        out.push(Grey { width: w, height: h, pixels });
    }
    out
}

/// The sum of absolute differences of `r` placed at (`x`, `y`) of `s`; `None` once it exceeds `limit` (or
/// when `r` does not fit there).
fn sad(s: &Grey, r: &Grey, x: u32, y: u32, limit: u64) -> Option<u64> {
    if x + r.width > s.width || y + r.height > s.height {
        return None;
    }
    let mut total = 0u64;
    for row in 0..r.height {
        let so = ((y + row) * s.width + x) as usize;
        let ro = (row * r.width) as usize;
        let line: u32 = s.pixels[so..so + r.width as usize]
            .iter()
            .zip(&r.pixels[ro..ro + r.width as usize])
            .map(|(a, b)| u32::from(a.abs_diff(*b)))
            .sum();
        total += u64::from(line);
        if total >= limit {
            return None;
        }
    }
    Some(total)
}

/// The size of a reference image, for messages.
pub fn describe(size: Size) -> String {
    format!("{}×{}", size.width, size.height)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A screen with a gradient background and a distinctive patch at (`x`, `y`).
    fn scene(x: u32, y: u32) -> (Frame, Frame) {
        let (w, h) = (640u32, 400u32);
        let mut rgb = Vec::with_capacity((w * h * 3) as usize);
        for py in 0..h {
            for px in 0..w {
                let inside = px >= x && px < x + 60 && py >= y && py < y + 40;
                let v = if inside { ((px - x) * 4 + (py - y) * 3) as u8 } else { ((px + py) / 5) as u8 };
                rgb.extend_from_slice(&[v, v.wrapping_mul(3), 255 - v]);
            }
        }
        let screen = Frame::from_rgb(Size::new(w, h), rgb).unwrap();
        let reference = screen.crop(Point::new(x as i32, y as i32), Size::new(60, 40));
        (screen, reference)
    }

    #[test]
    fn the_reference_is_found_anywhere_exactly() {
        let (screen, reference) = scene(301, 177);
        let found = find(&screen, &reference, None).unwrap();
        assert_eq!(found.at, Point::new(301, 177));
        assert!((found.score - 1.0).abs() < 1e-9, "{found:?}");
    }

    #[test]
    fn a_region_limits_the_search() {
        let (screen, reference) = scene(301, 177);
        let inside = find(&screen, &reference, Some(Area { x: 280, y: 150, width: 120, height: 100 })).unwrap();
        assert_eq!(inside.at, Point::new(301, 177));
        let elsewhere = find(&screen, &reference, Some(Area { x: 0, y: 0, width: 200, height: 150 })).unwrap();
        assert!(elsewhere.score < 0.95, "{elsewhere:?}");
        assert!(find(&screen, &reference, Some(Area { x: 0, y: 0, width: 30, height: 30 })).is_err());
        assert!(find(&screen, &reference, Some(Area { x: 700, y: 0, width: 30, height: 30 })).is_err());
    }
}
