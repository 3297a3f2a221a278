//! Perceptual comparison of two screens (a replay's recorded screenshot and the live one, docs/replay-and-verify.md):
//! each frame
//! is reduced once to a small grayscale grid ([`Signature`]: the mean luminance of each cell of a grid
//! [`GRID_COLUMNS`] wide, as many rows as the aspect ratio gives), and two signatures are compared cell by
//! cell with a tolerance, ignoring the cells masked regions touch (clocks and other volatile parts). The
//! score is the share of compared cells that agree (0..1); [`Comparison::region`] is where they differ.
//!
//! Pure functions, no IO. A grid of the same shape compares frames of different sizes with the same aspect
//! ratio (a screenshot scaled to a model's image size against the full-size recording).

use agentd_computer::{Frame, Size};
use serde::{Deserialize, Serialize};

/// How many cells wide a signature's grid is (16 px cells on a 1280-pixel-wide screen).
pub const GRID_COLUMNS: u32 = 80;

/// How far (0–255) a cell's mean luminance may move before the cell counts as different.
pub const DEFAULT_TOLERANCE: u8 = 10;

/// A rectangle in screen pixels (a mask, or where two screens differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Region {
    pub x: u32,
    pub y: u32,
    pub width: u32,
    pub height: u32,
}

/// A frame reduced to its grid of mean luminances.
#[derive(Debug, Clone, PartialEq)]
pub struct Signature {
    /// The size of the frame it was made from.
    pub screen: Size,
    pub columns: u32,
    pub rows: u32,
    cells: Vec<u8>,
}

/// How two signatures compare.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// The share of compared cells that agree, 0..1 (0 when the grids differ in shape).
    pub score: f64,
    /// Cells that differ by more than the tolerance.
    pub differing: u32,
    /// Cells compared (those no mask touches).
    pub compared: u32,
    /// The bounding box of the differing cells, in the recorded screen's pixels.
    pub region: Option<Region>,
}

/// The grid shape for a screen of `size`: [`GRID_COLUMNS`] wide, rows by the aspect ratio (at least 1).
fn grid_shape(size: Size) -> (u32, u32) {
    let columns = GRID_COLUMNS.min(size.width.max(1));
    let rows = ((u64::from(columns) * u64::from(size.height) + u64::from(size.width) / 2)
        / u64::from(size.width.max(1)))
    .clamp(1, u64::from(size.height.max(1))) as u32;
    (columns, rows)
}

/// Reduces `frame` to its signature: the frame box-filtered down to the grid (SIMD, `fast_image_resize`),
/// then each cell's luminance.
pub fn signature(frame: &Frame) -> Signature {
    let size = frame.size();
    let (columns, rows) = grid_shape(size);
    let cells = match box_filtered(frame, Size::new(columns, rows)) {
        Some(small) => small.chunks_exact(3).map(|p| luma(p[0], p[1], p[2]) as u8).collect(),
        None => exact_cells(frame, columns, rows),
    };
    Signature { screen: size, columns, rows, cells }
}

fn luma(r: u8, g: u8, b: u8) -> u32 {
    (u32::from(r) * 77 + u32::from(g) * 150 + u32::from(b) * 29) >> 8
}

/// The frame scaled to `to` with a box filter: each output pixel the mean of the pixels it covers.
fn box_filtered(frame: &Frame, to: Size) -> Option<Vec<u8>> {
    use fast_image_resize::images::{Image, ImageRef};
    use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};
    let src = ImageRef::new(frame.width(), frame.height(), frame.as_rgb(), PixelType::U8x3).ok()?;
    let mut dst = Image::new(to.width, to.height, PixelType::U8x3);
    let options = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::Box));
    Resizer::new().resize(&src, &mut dst, &options).ok()?;
    Some(dst.into_vec())
}

/// The cells' mean luminances computed pixel by pixel (when the frame cannot be scaled).
fn exact_cells(frame: &Frame, columns: u32, rows: u32) -> Vec<u8> {
    let size = frame.size();
    let (width, height) = (size.width.max(1) as usize, size.height.max(1) as usize);
    let mut sums = vec![0u64; (columns * rows) as usize];
    let mut counts = vec![0u32; (columns * rows) as usize];
    // Which column each x falls in, computed once per frame.
    let column_of: Vec<usize> = (0..width).map(|x| x * columns as usize / width).collect();
    let rgb = frame.as_rgb();
    for (y, row) in rgb.chunks_exact(width * 3).enumerate().take(height) {
        let base = (y * rows as usize / height) * columns as usize;
        for (x, pixel) in row.chunks_exact(3).enumerate() {
            let cell = base + column_of[x];
            sums[cell] += u64::from(luma(pixel[0], pixel[1], pixel[2]));
            counts[cell] += 1;
        }
    }
    sums.iter().zip(&counts).map(|(&sum, &count)| (sum / u64::from(count.max(1))) as u8).collect()
}

/// Compares the live signature with the recorded one: cells a mask (in the recorded screen's pixels)
/// touches are skipped, the others differ when their luminance moved by more than `tolerance`.
pub fn compare(recorded: &Signature, live: &Signature, masks: &[Region], tolerance: u8) -> Comparison {
    let whole = Region { x: 0, y: 0, width: recorded.screen.width, height: recorded.screen.height };
    if (recorded.columns, recorded.rows) != (live.columns, live.rows) {
        let compared = recorded.columns * recorded.rows;
        return Comparison { score: 0.0, differing: compared, compared, region: Some(whole) };
    }
    let (columns, rows) = (recorded.columns, recorded.rows);
    let (width, height) = (recorded.screen.width.max(1), recorded.screen.height.max(1));
    // A cell's pixel bounds in the recorded screen: [x0, x1) × [y0, y1).
    let cell_x = |c: u32| (u64::from(c) * u64::from(width)).div_ceil(u64::from(columns)) as u32;
    let cell_y = |r: u32| (u64::from(r) * u64::from(height)).div_ceil(u64::from(rows)) as u32;
    let masked = |c: u32, r: u32| {
        let (x0, x1, y0, y1) = (cell_x(c), cell_x(c + 1), cell_y(r), cell_y(r + 1));
        masks
            .iter()
            .any(|m| m.x < x1 && x0 < m.x.saturating_add(m.width) && m.y < y1 && y0 < m.y.saturating_add(m.height))
    };
    let (mut compared, mut differing) = (0u32, 0u32);
    let (mut min_c, mut min_r, mut max_c, mut max_r) = (u32::MAX, u32::MAX, 0, 0);
    for r in 0..rows {
        for c in 0..columns {
            if !masks.is_empty() && masked(c, r) {
                continue;
            }
            compared += 1;
            let i = (r * columns + c) as usize;
            if recorded.cells[i].abs_diff(live.cells[i]) > tolerance {
                differing += 1;
                (min_c, min_r, max_c, max_r) = (min_c.min(c), min_r.min(r), max_c.max(c), max_r.max(r));
            }
        }
    }
    let score = if compared == 0 { 1.0 } else { 1.0 - f64::from(differing) / f64::from(compared) };
    let region = (differing > 0).then(|| {
        let (x, y) = (cell_x(min_c), cell_y(min_r));
        Region { x, y, width: cell_x(max_c + 1) - x, height: cell_y(max_r + 1) - y }
    });
    Comparison { score, differing, compared, region }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_box(size: Size, at: Region, rgb: [u8; 3]) -> Frame {
        let mut pixels = Frame::filled(size, [240, 240, 240]).into_rgb();
        for y in at.y..at.y + at.height {
            for x in at.x..at.x + at.width {
                let i = ((y * size.width + x) * 3) as usize;
                pixels[i..i + 3].copy_from_slice(&rgb);
            }
        }
        Frame::from_rgb(size, pixels).unwrap()
    }

    const SCREEN: Size = Size::new(1280, 800);

    #[test]
    fn the_same_screen_scores_one() {
        let frame = with_box(SCREEN, Region { x: 100, y: 100, width: 120, height: 36 }, [30, 90, 200]);
        let a = signature(&frame);
        assert_eq!((a.columns, a.rows), (80, 50));
        let c = compare(&a, &signature(&frame), &[], DEFAULT_TOLERANCE);
        assert_eq!((c.score, c.differing, c.compared, c.region), (1.0, 0, 4000, None));
    }

    #[test]
    fn a_moved_button_differs_where_it_was_and_where_it_is() {
        let before = with_box(SCREEN, Region { x: 100, y: 100, width: 120, height: 36 }, [30, 90, 200]);
        let after = with_box(SCREEN, Region { x: 500, y: 300, width: 120, height: 36 }, [30, 90, 200]);
        let c = compare(&signature(&before), &signature(&after), &[], DEFAULT_TOLERANCE);
        assert!(c.differing >= 40 && c.score < 0.99, "{c:?}");
        let region = c.region.unwrap();
        assert!(region.x <= 100 && region.y <= 100, "{region:?}");
        assert!(region.x + region.width >= 620 && region.y + region.height >= 336, "{region:?}");
    }

    #[test]
    fn masks_hide_volatile_regions_and_small_noise_is_tolerated() {
        let clock = Region { x: 1180, y: 0, width: 100, height: 24 };
        let before = with_box(SCREEN, clock, [0, 0, 0]);
        let after = with_box(SCREEN, clock, [255, 255, 255]);
        let unmasked = compare(&signature(&before), &signature(&after), &[], DEFAULT_TOLERANCE);
        assert!(unmasked.differing > 0);
        let masked = compare(&signature(&before), &signature(&after), &[clock], DEFAULT_TOLERANCE);
        assert_eq!((masked.differing, masked.region), (0, None), "{masked:?}");
        assert!(masked.compared < 4000);
        // A blinking caret changes a cell or two: far from the default threshold.
        let caret = with_box(SCREEN, Region { x: 300, y: 300, width: 1, height: 14 }, [0, 0, 0]);
        let plain = Frame::filled(SCREEN, [240, 240, 240]);
        let blink = compare(&signature(&plain), &signature(&caret), &[], DEFAULT_TOLERANCE);
        assert!(blink.differing <= 2 && blink.score > 0.999, "{blink:?}");
        // The two ways of computing the grid agree.
        let frame = with_box(SCREEN, Region { x: 100, y: 100, width: 120, height: 36 }, [30, 90, 200]);
        let exact = exact_cells(&frame, 80, 50);
        let fast = signature(&frame).cells;
        assert!(exact.iter().zip(&fast).all(|(a, b)| a.abs_diff(*b) <= 2), "{exact:?}\n{fast:?}");
    }

    #[test]
    fn a_scaled_screen_compares_with_the_full_size_one() {
        let full = with_box(SCREEN, Region { x: 160, y: 160, width: 320, height: 160 }, [30, 90, 200]);
        let small = crate::screen::image::scale(&full, Size::new(1024, 640)).unwrap();
        let c = compare(&signature(&full), &signature(&small), &[], DEFAULT_TOLERANCE);
        assert!(c.score > 0.99, "{c:?}");
        // Another aspect ratio is another screen.
        let other = compare(&signature(&full), &signature(&Frame::filled(Size::new(800, 800), [0; 3])), &[], 10);
        assert_eq!(other.score, 0.0);
    }
}
