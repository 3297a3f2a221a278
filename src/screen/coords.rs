//! The one place coordinates change space.
//!
//! A provider reports its screen in pixels; a model works in some other space — the pixels of a scaled-down
//! screenshot (Anthropic, OpenAI, local VLMs), or a normalized 0–999 grid (Gemini). [`CoordinateMap`] maps
//! between the two with pixel-centre rounding, so a point survives a round trip within half a source pixel
//! (within 1 px whenever the scale factor is at most 2). [`fit_within`] picks a scaled image size that keeps
//! the aspect ratio. HiDPI factors enter here too: a provider whose input space differs from its capture
//! space reports the capture size, and the factor becomes part of the same map.

use agentd_computer::{Action, Point, Size};

/// Maps points between screen pixels and a model's coordinate space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoordinateMap {
    screen: Size,
    model: Size,
}

impl CoordinateMap {
    /// The model works in screen pixels.
    pub fn identity(screen: Size) -> Self {
        Self { screen, model: screen }
    }

    /// The model works in the pixels of an image of `model` size showing the whole screen.
    pub fn scaled(screen: Size, model: Size) -> Self {
        let model = Size::new(model.width.max(1), model.height.max(1));
        Self { screen, model }
    }

    /// The model works on a `grid` × `grid` lattice over the screen (Gemini: 1000, coordinates 0–999).
    pub fn normalized(screen: Size, grid: u32) -> Self {
        Self { screen, model: Size::new(grid.max(1), grid.max(1)) }
    }

    pub fn screen(&self) -> Size {
        self.screen
    }

    /// The extent of the model's coordinate space (the scaled image size, or the grid).
    pub fn model(&self) -> Size {
        self.model
    }

    pub fn is_identity(&self) -> bool {
        self.screen == self.model
    }

    /// A model point to the screen pixel whose centre it names. Out-of-range model points map outside the
    /// screen (so validation reports them as off-screen instead of silently clamping a wrong click).
    pub fn to_screen(self, p: Point) -> Point {
        Point::new(
            map_axis(p.x, self.model.width, self.screen.width),
            map_axis(p.y, self.model.height, self.screen.height),
        )
    }

    /// A screen pixel to the model point whose cell contains it.
    pub fn to_model(self, p: Point) -> Point {
        Point::new(
            map_axis(p.x, self.screen.width, self.model.width),
            map_axis(p.y, self.screen.height, self.model.height),
        )
    }

    /// Converts every coordinate of an action from model space to screen space. Scroll amounts are distances,
    /// scaled by the same factor.
    pub fn action_to_screen(&self, action: &Action) -> Action {
        let mut out = action.clone();
        if self.is_identity() {
            return out;
        }
        out.map_points(|p| self.to_screen(p));
        if let Action::Scroll { scroll_x, scroll_y, .. } = &mut out {
            *scroll_x = scale_distance(*scroll_x, self.model.width, self.screen.width);
            *scroll_y = scale_distance(*scroll_y, self.model.height, self.screen.height);
        }
        out
    }

    /// Converts every coordinate of an action from screen space to model space (a human's edit of proposed
    /// actions, given in screen pixels, goes back through the loop as the model's).
    pub fn action_to_model(&self, action: &Action) -> Action {
        let mut out = action.clone();
        if self.is_identity() {
            return out;
        }
        out.map_points(|p| self.to_model(p));
        if let Action::Scroll { scroll_x, scroll_y, .. } = &mut out {
            *scroll_x = scale_distance(*scroll_x, self.screen.width, self.model.width);
            *scroll_y = scale_distance(*scroll_y, self.screen.height, self.model.height);
        }
        out
    }
}

/// Maps one axis from a space of `from` cells to one of `to` cells by pixel centres:
/// `to_coord = round((c + 0.5) * to / from - 0.5)`. Values outside `0..from` keep their direction (so
/// they stay outside `0..to`).
fn map_axis(c: i32, from: u32, to: u32) -> i32 {
    if from == to || from == 0 {
        return c;
    }
    let mapped = ((f64::from(c) + 0.5) * f64::from(to) / f64::from(from) - 0.5).round();
    let mapped = mapped.clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i32;
    // Keep in-range inputs in range and out-of-range inputs out of range.
    if c >= 0 && (c as i64) < i64::from(from) {
        mapped.clamp(0, to as i32 - 1)
    } else if c < 0 {
        mapped.min(-1)
    } else {
        mapped.max(to as i32)
    }
}

fn scale_distance(d: i32, from: u32, to: u32) -> i32 {
    if from == to || from == 0 {
        return d;
    }
    (f64::from(d) * f64::from(to) / f64::from(from)).round() as i32
}

/// The largest size with `screen`'s aspect ratio that fits within `max` (never larger than the screen).
pub fn fit_within(screen: Size, max: Size) -> Size {
    if screen.width <= max.width && screen.height <= max.height {
        return screen;
    }
    let scale = (f64::from(max.width) / f64::from(screen.width)).min(f64::from(max.height) / f64::from(screen.height));
    Size::new(
        ((f64::from(screen.width) * scale).round() as u32).clamp(1, max.width),
        ((f64::from(screen.height) * scale).round() as u32).clamp(1, max.height),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn identity_is_exact() {
        let map = CoordinateMap::identity(Size::new(1280, 800));
        assert_eq!(map.to_screen(Point::new(17, 799)), Point::new(17, 799));
        assert!(map.is_identity());
    }

    #[test]
    fn corners_map_to_corners() {
        let map = CoordinateMap::scaled(Size::new(1920, 1080), Size::new(1366, 768));
        assert_eq!(map.to_screen(Point::new(0, 0)), Point::new(0, 0));
        assert_eq!(map.to_screen(Point::new(1365, 767)), Point::new(1919, 1079));
        assert_eq!(map.to_model(Point::new(1919, 1079)), Point::new(1365, 767));
        let grid = CoordinateMap::normalized(Size::new(1440, 900), 1000);
        assert_eq!(grid.to_screen(Point::new(0, 0)), Point::new(0, 0));
        assert_eq!(grid.to_screen(Point::new(999, 999)), Point::new(1439, 899));
        assert_eq!(grid.to_screen(Point::new(500, 500)), Point::new(720, 450));
    }

    #[test]
    fn out_of_range_stays_out_of_range() {
        let map = CoordinateMap::scaled(Size::new(1920, 1080), Size::new(1024, 576));
        let screen = map.screen();
        assert!(!screen.contains(map.to_screen(Point::new(1024, 10))));
        assert!(!screen.contains(map.to_screen(Point::new(-1, 10))));
        assert!(!screen.contains(map.to_screen(Point::new(10, 576))));
    }

    #[test]
    fn scroll_and_drag_are_converted() {
        let map = CoordinateMap::scaled(Size::new(2048, 1536), Size::new(1024, 768));
        let action = Action::Scroll { x: 100, y: 100, scroll_x: 0, scroll_y: 50, keys: Vec::new() };
        assert_eq!(
            map.action_to_screen(&action),
            Action::Scroll { x: 201, y: 201, scroll_x: 0, scroll_y: 100, keys: Vec::new() }
        );
        let drag = Action::Drag {
            path: vec![Point::new(0, 0), Point::new(1023, 767)],
            button: Default::default(),
            keys: Vec::new(),
        };
        assert_eq!(map.action_to_screen(&drag).points(), vec![Point::new(1, 1), Point::new(2047, 1535)]);
    }

    #[test]
    fn fit_within_keeps_aspect() {
        assert_eq!(fit_within(Size::new(1920, 1080), Size::new(1366, 768)), Size::new(1365, 768));
        assert_eq!(fit_within(Size::new(1280, 800), Size::new(1280, 800)), Size::new(1280, 800));
        assert_eq!(fit_within(Size::new(800, 600), Size::new(1280, 800)), Size::new(800, 600));
        assert_eq!(fit_within(Size::new(2560, 1600), Size::new(1280, 800)), Size::new(1280, 800));
    }

    fn sizes() -> impl Strategy<Value = (Size, Size)> {
        // A screen, and a model space no more than 2x smaller or larger on each axis.
        (64u32..4000, 64u32..4000).prop_flat_map(|(w, h)| {
            ((Just(w), Just(h)), ((w / 2).max(1)..=w * 2, (h / 2).max(1)..=h * 2))
                .prop_map(|((w, h), (mw, mh))| (Size::new(w, h), Size::new(mw, mh)))
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn screen_round_trip_within_one_pixel((screen, model) in sizes(), fx in 0.0f64..1.0, fy in 0.0f64..1.0) {
            let map = CoordinateMap::scaled(screen, model);
            let p = Point::new((fx * f64::from(screen.width)) as i32, (fy * f64::from(screen.height)) as i32);
            prop_assume!(screen.contains(p));
            let back = map.to_screen(map.to_model(p));
            prop_assert!((back.x - p.x).abs() <= 1 && (back.y - p.y).abs() <= 1, "{p:?} -> {back:?} via {map:?}");
        }

        #[test]
        fn model_round_trip_within_one_pixel((screen, model) in sizes(), fx in 0.0f64..1.0, fy in 0.0f64..1.0) {
            let map = CoordinateMap::scaled(screen, model);
            let p = Point::new((fx * f64::from(model.width)) as i32, (fy * f64::from(model.height)) as i32);
            prop_assume!(model.contains(p));
            let on_screen = map.to_screen(p);
            prop_assert!(screen.contains(on_screen));
            let back = map.to_model(on_screen);
            prop_assert!((back.x - p.x).abs() <= 1 && (back.y - p.y).abs() <= 1, "{p:?} -> {back:?} via {map:?}");
        }

        #[test]
        fn normalized_grid_round_trip(w in 500u32..2000, h in 500u32..2000, x in 0i32..1000, y in 0i32..1000) {
            let map = CoordinateMap::normalized(Size::new(w, h), 1000);
            let back = map.to_model(map.to_screen(Point::new(x, y)));
            prop_assert!((back.x - x).abs() <= 1 && (back.y - y).abs() <= 1);
        }

        #[test]
        fn mapping_is_monotonic((screen, model) in sizes(), a in 0i32..4000, b in 0i32..4000) {
            let map = CoordinateMap::scaled(screen, model);
            let (lo, hi) = (a.min(b), a.max(b));
            prop_assert!(map.to_screen(Point::new(lo, 0)).x <= map.to_screen(Point::new(hi, 0)).x);
        }
    }
}
