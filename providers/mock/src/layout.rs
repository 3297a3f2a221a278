//! Geometry: where every window and widget of the current screen is, for a screen size and the current state.
//!
//! Layout is a pure function of (scene, state, size), recomputed whenever it is needed; drawing and hit
//! testing read the same [`Layout`], so what is clicked is exactly what is drawn. Windows are placed by their
//! `position` in the area above the taskbar and shrunk to fit the screen; a window whose content is taller than
//! its body scrolls. Widgets flow top to bottom in columns (split by `column_break`); an `inline` widget sits to
//! the right of the previous one.

use agentd_computer::Size;

use crate::canvas::Rect;
use crate::font::{TextStyle, char_offsets, text_width, wrap};
use crate::scene::{LabelStyle, Position, Scene, WidgetDef, WindowStyle, expand};
use crate::widgets::Value;
use crate::world::WorldState;

pub const TASKBAR_H: i32 = 40;
pub const MARGIN: i32 = 16;
pub const TITLE_H: i32 = 34;
pub const PAD: i32 = 20;
pub const NOTE_PAD: i32 = 16;
pub const GAP: i32 = 12;
pub const INLINE_GAP: i32 = 10;
pub const COLUMN_GAP: i32 = 28;
pub const CONTROL_H: i32 = 34;
pub const CAPTION_GAP: i32 = 5;
pub const CHECK_SIZE: i32 = 18;
pub const ROW_H: i32 = 26;
pub const SCROLLBAR_W: i32 = 10;
pub const FIELD_PAD: i32 = 9;
pub const DEFAULT_WINDOW_W: i32 = 440;

pub const BODY: TextStyle = TextStyle::regular(15);
pub const CAPTION: TextStyle = TextStyle::regular(14);
pub const TITLE: TextStyle = TextStyle::bold(14);
pub const HEADING: TextStyle = TextStyle::bold(22);
pub const BOLD: TextStyle = TextStyle::bold(15);
pub const ROW_TEXT: TextStyle = TextStyle::regular(14);
pub const BOX_TEXT: TextStyle = TextStyle::regular(14);

pub fn label_style(style: LabelStyle) -> TextStyle {
    match style {
        LabelStyle::Heading => HEADING,
        LabelStyle::Bold => BOLD,
        _ => BODY,
    }
}

/// One widget placed on the screen. Rectangles are in screen pixels, already scrolled.
#[derive(Debug, Clone)]
pub struct Item {
    pub widget: usize,
    /// Everything the widget covers, caption included.
    pub bounds: Rect,
    /// The caption line above the control (fields, dropdowns, lists, sliders, text boxes).
    pub caption: Option<Rect>,
    /// The part that reacts to the pointer: the field box, the button, the checkbox row, the list box, the
    /// slider track area, the text box.
    pub control: Rect,
    /// Wrapped lines of text (labels and text boxes).
    pub lines: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct WindowBox {
    pub frame: Rect,
    pub title_bar: Option<Rect>,
    /// The body below the title bar; content is clipped to it.
    pub body: Rect,
    pub scroll: i32,
    pub max_scroll: i32,
    pub items: Vec<Item>,
}

/// The open dropdown's option list.
#[derive(Debug, Clone)]
pub struct Popup {
    pub widget: usize,
    pub rect: Rect,
    pub visible_rows: i32,
    pub scroll: i32,
    pub max_scroll: i32,
}

#[derive(Debug, Clone)]
pub struct Layout {
    pub windows: Vec<WindowBox>,
    pub popup: Option<Popup>,
    pub taskbar: Option<Rect>,
}

impl Layout {
    pub fn item(&self, widget: usize) -> Option<(usize, &Item)> {
        self.windows.iter().enumerate().find_map(|(w, b)| b.items.iter().find(|i| i.widget == widget).map(|i| (w, i)))
    }

    /// The topmost window under (x, y).
    pub fn window_at(&self, x: i32, y: i32) -> Option<usize> {
        (0..self.windows.len()).rev().find(|&w| self.windows[w].frame.contains(x, y))
    }

    /// The widget under (x, y) in window `w`, if the point is inside the window body.
    pub fn item_at(&self, w: usize, x: i32, y: i32) -> Option<&Item> {
        let window = self.windows.get(w)?;
        if !window.body.contains(x, y) {
            return None;
        }
        window
            .items
            .iter()
            .find(|i| i.control.contains(x, y))
            .or_else(|| window.items.iter().find(|i| i.bounds.contains(x, y)))
    }
}

/// The text a label or text box shows, with `${id}` references expanded.
pub fn display_text(scene: &Scene, state: &WorldState, text: &str) -> String {
    expand(text, |id| match scene.widget(id) {
        Some(i) => state.values.get(i).map(|v| v.as_text(&scene.widgets[i])).unwrap_or_default(),
        None => String::new(),
    })
}

/// The text a field shows: bullets for passwords.
pub fn field_display(text: &str, password: bool) -> String {
    if password { "•".repeat(text.chars().count()) } else { text.to_string() }
}

/// How far a field's text is shifted left so that the caret stays inside a box `inner_w` wide.
pub fn field_shift(display: &str, caret: usize, inner_w: i32) -> i32 {
    let offsets = char_offsets(display, BODY);
    let caret_x = offsets.get(caret).copied().unwrap_or_else(|| offsets.last().copied().unwrap_or(0));
    (caret_x - inner_w + 2).max(0)
}

/// The character boundary of a field's text nearest to x (relative to the text's start).
pub fn field_index_at(display: &str, x: i32) -> usize {
    let offsets = char_offsets(display, BODY);
    let mut best = 0;
    for (i, &o) in offsets.iter().enumerate() {
        if (o - x).abs() < (offsets[best] - x).abs() {
            best = i;
        }
    }
    best
}

/// The part of a scrollable box left for content when it shows a scrollbar.
pub fn scrollbar_rect(area: Rect) -> Rect {
    Rect::new(area.right() - SCROLLBAR_W - 2, area.y + 2, SCROLLBAR_W, area.h - 4)
}

/// The thumb of a scrollbar in `track` for `content` pixels shown `view` at a time, scrolled by `scroll`.
pub fn scroll_thumb(track: Rect, content: i32, view: i32, scroll: i32) -> Rect {
    if content <= view || content <= 0 {
        return track;
    }
    let h = (track.h * view / content).max(20).min(track.h);
    let travel = track.h - h;
    let max_scroll = content - view;
    let y = track.y + if max_scroll > 0 { travel * scroll.clamp(0, max_scroll) / max_scroll } else { 0 };
    Rect::new(track.x, y, track.w, h)
}

/// How tall the content of a text box is, in pixels, for its lines.
pub fn text_box_content_h(lines: usize) -> i32 {
    lines as i32 * BOX_TEXT.line_height() + 2 * 8
}

/// The slider's track (horizontal band) inside its control, and the pixel x of a value.
pub fn slider_track(control: Rect) -> Rect {
    Rect::new(control.x + 10, control.center_y() - 2, (control.w - 20).max(1), 4)
}

pub fn slider_x(control: Rect, min: i64, max: i64, value: i64) -> i32 {
    let track = slider_track(control);
    let span = (max - min).max(1);
    track.x + ((value.clamp(min, max) - min) * i64::from(track.w) / span) as i32
}

/// The slider value nearest to pixel x, snapped to `step`.
pub fn slider_value_at(control: Rect, min: i64, max: i64, step: i64, x: i32) -> i64 {
    let track = slider_track(control);
    let rel = i64::from((x - track.x).clamp(0, track.w));
    let span = max - min;
    let raw = min + (rel * span * 2 + i64::from(track.w)) / (2 * i64::from(track.w));
    let step = step.max(1);
    let snapped = min + ((raw - min) * 2 + step) / (2 * step) * step;
    snapped.clamp(min, max)
}

/// Lays out the current screen.
pub fn compute(scene: &Scene, state: &WorldState, size: Size) -> Layout {
    let screen_w = size.width as i32;
    let screen_h = size.height as i32;
    let taskbar = scene.taskbar.then(|| Rect::new(0, screen_h - TASKBAR_H, screen_w, TASKBAR_H));
    let area = Rect::new(0, 0, screen_w, screen_h - taskbar.map_or(0, |t| t.h));
    let Some(screen) = scene.screens.get(state.screen) else {
        return Layout { windows: Vec::new(), popup: None, taskbar };
    };

    let mut windows = Vec::new();
    for (w, window) in screen.windows.iter().enumerate() {
        let has_title = matches!(window.style, WindowStyle::Window | WindowStyle::Dialog);
        let pad = if window.style == WindowStyle::Note { NOTE_PAD } else { PAD };
        let title_h = if has_title { TITLE_H } else { 0 };
        let width = window.width.map_or(DEFAULT_WINDOW_W, |w| w as i32).min(area.w - 2 * MARGIN).max(120);
        let content_w = width - 2 * pad;
        let (mut items, content_h) = flow(scene, state, &window.widgets, content_w);
        let natural_h = title_h + pad + content_h + pad + 1;
        let height = window.height.map_or(natural_h, |h| h as i32).min(area.h - 2 * MARGIN).max(title_h + 40);
        let (x, y) = place(window.position, window.x, window.y, width, height, area);
        let frame = Rect::new(x, y, width, height);
        let title_bar = has_title.then(|| Rect::new(x, y, width, title_h));
        let body = Rect::new(x + 1, y + title_h, width - 2, height - title_h - 1);
        let max_scroll = (pad + content_h + pad - body.h).max(0);
        let scroll = state.window_scroll.get(w).copied().unwrap_or(0).clamp(0, max_scroll);
        let (dx, dy) = (x + pad, y + title_h + pad - scroll);
        for item in &mut items {
            item.bounds = item.bounds.translate(dx, dy);
            item.control = item.control.translate(dx, dy);
            item.caption = item.caption.map(|c| c.translate(dx, dy));
        }
        windows.push(WindowBox { frame, title_bar, body, scroll, max_scroll, items });
    }

    let popup = state.open_dropdown.and_then(|widget| {
        let WidgetDef::Dropdown(def) = scene.widgets.get(widget)? else {
            return None;
        };
        let item = windows.iter().flat_map(|w| &w.items).find(|i| i.widget == widget)?;
        let rows = def.options.len() as i32;
        let visible_rows = rows.min(def.rows.map_or(8, |r| r as i32)).max(1);
        let h = visible_rows * ROW_H + 2;
        let below = item.control.bottom() + 2;
        let y = if below + h <= area.bottom() { below } else { (item.control.y - 2 - h).max(0) };
        let rect = Rect::new(item.control.x, y, item.control.w, h);
        let max_scroll = ((rows - visible_rows) * ROW_H).max(0);
        let scroll = match state.values.get(widget) {
            Some(Value::Choice { scroll, .. }) => (*scroll).clamp(0, max_scroll),
            _ => 0,
        };
        Some(Popup { widget, rect, visible_rows, scroll, max_scroll })
    });

    Layout { windows, popup, taskbar }
}

fn place(position: Position, x: Option<i32>, y: Option<i32>, w: i32, h: i32, area: Rect) -> (i32, i32) {
    let left = area.x + MARGIN;
    let right = area.right() - MARGIN - w;
    let top = area.y + MARGIN;
    let bottom = area.bottom() - MARGIN - h;
    let cx = area.x + (area.w - w) / 2;
    let cy = area.y + (area.h - h) / 2;
    let (px, py) = match position {
        Position::Center => (cx, cy),
        Position::Top => (cx, top),
        Position::Bottom => (cx, bottom),
        Position::Left => (left, cy),
        Position::Right => (right, cy),
        Position::TopLeft => (left, top),
        Position::TopRight => (right, top),
        Position::BottomLeft => (left, bottom),
        Position::BottomRight => (right, bottom),
    };
    let px = x.map_or(px, |x| area.x + x).min(area.right() - w).max(area.x);
    let py = y.map_or(py, |y| area.y + y).min(area.bottom() - h).max(area.y);
    (px, py)
}

/// Places the widgets of one window in content coordinates (origin at the content's top left); returns the
/// items and the content height.
fn flow(scene: &Scene, state: &WorldState, widgets: &[usize], content_w: i32) -> (Vec<Item>, i32) {
    let columns = 1 + widgets.iter().filter(|&&i| matches!(scene.widgets[i], WidgetDef::ColumnBreak(_))).count() as i32;
    let col_w = ((content_w - (columns - 1) * COLUMN_GAP) / columns).max(40);
    let mut items = Vec::new();
    let mut content_h = 0;
    let mut column = 0;
    // Per column: the top of the current row, the bottom of the current row, the x where an inline widget goes.
    let mut row_top = 0;
    let mut row_bottom = 0;
    let mut row_x = 0;
    let mut row_started = false;
    for &index in widgets {
        let def = &scene.widgets[index];
        if matches!(def, WidgetDef::ColumnBreak(_)) {
            column += 1;
            row_top = 0;
            row_bottom = 0;
            row_x = 0;
            row_started = false;
            continue;
        }
        let col_x = column * (col_w + COLUMN_GAP);
        let natural = natural_width(scene, state, index, col_w);
        let inline_fits = def.inline() && row_started && row_x + INLINE_GAP + natural.min(col_w) <= col_w;
        let (x, width) = if inline_fits {
            (row_x + INLINE_GAP, natural.min(col_w - row_x - INLINE_GAP))
        } else {
            (0, natural.min(col_w))
        };
        let mut item = measure(scene, state, index, width);
        if item.bounds.h == 0 {
            // An empty label takes no room (an error message that is not showing).
            continue;
        }
        let y = if inline_fits {
            row_top
        } else {
            let y = if row_started { row_bottom + GAP } else { 0 };
            row_top = y;
            y
        };
        item.bounds = item.bounds.translate(col_x + x, y);
        item.control = item.control.translate(col_x + x, y);
        item.caption = item.caption.map(|c| c.translate(col_x + x, y));
        row_x = x + width;
        row_bottom = row_bottom.max(item.bounds.bottom());
        row_started = true;
        content_h = content_h.max(row_bottom);
        items.push(item);
    }
    (items, content_h)
}

fn natural_width(scene: &Scene, state: &WorldState, index: usize, col_w: i32) -> i32 {
    let fixed = |w: Option<u32>| w.map_or(col_w, |w| w as i32);
    match &scene.widgets[index] {
        WidgetDef::Button(d) => match d.width {
            Some(w) => w as i32,
            None => (text_width(&display_text(scene, state, &d.text), BOLD) + 36).max(96),
        },
        WidgetDef::Checkbox(d) => CHECK_SIZE + 10 + text_width(&d.text, BODY) + 2,
        WidgetDef::Label(d) if d.inline => {
            let text = match state.values.get(index) {
                Some(Value::Label(t)) => display_text(scene, state, t),
                _ => String::new(),
            };
            text_width(&text, label_style(d.style)) + 2
        }
        WidgetDef::TextField(d) => fixed(d.width),
        WidgetDef::Dropdown(d) | WidgetDef::List(d) => fixed(d.width),
        WidgetDef::TextBox(d) => fixed(d.width),
        WidgetDef::Slider(d) => fixed(d.width),
        _ => col_w,
    }
}

/// The item for a widget of `width` at the content origin.
fn measure(scene: &Scene, state: &WorldState, index: usize, width: i32) -> Item {
    let def = &scene.widgets[index];
    let caption_h = CAPTION.line_height();
    let with_caption = |caption: &Option<String>, control_h: i32| -> (Option<Rect>, Rect, i32) {
        match caption {
            Some(_) => (
                Some(Rect::new(0, 0, width, caption_h)),
                Rect::new(0, caption_h + CAPTION_GAP, width, control_h),
                caption_h + CAPTION_GAP + control_h,
            ),
            None => (None, Rect::new(0, 0, width, control_h), control_h),
        }
    };
    let item = |caption: Option<Rect>, control: Rect, h: i32, lines: Vec<String>| Item {
        widget: index,
        bounds: Rect::new(0, 0, width, h),
        caption,
        control,
        lines,
    };
    match def {
        WidgetDef::Label(d) => {
            let text = match state.values.get(index) {
                Some(Value::Label(t)) => display_text(scene, state, t),
                _ => String::new(),
            };
            if text.is_empty() {
                return item(None, Rect::default(), 0, Vec::new());
            }
            let style = label_style(d.style);
            let lines = wrap(&text, style, width);
            let h = lines.len() as i32 * style.line_height();
            item(None, Rect::new(0, 0, width, h), h, lines)
        }
        WidgetDef::Button(_) => item(None, Rect::new(0, 0, width, CONTROL_H), CONTROL_H, Vec::new()),
        WidgetDef::Checkbox(_) => item(None, Rect::new(0, 0, width, 24), 24, Vec::new()),
        WidgetDef::TextField(d) => {
            let (caption, control, h) = with_caption(&d.label, CONTROL_H);
            item(caption, control, h, Vec::new())
        }
        WidgetDef::Dropdown(d) => {
            let (caption, control, h) = with_caption(&d.label, CONTROL_H);
            item(caption, control, h, Vec::new())
        }
        WidgetDef::List(d) => {
            let rows = d.rows.map_or(5, |r| r as i32);
            let (caption, control, h) = with_caption(&d.label, rows * ROW_H + 2);
            item(caption, control, h, Vec::new())
        }
        WidgetDef::TextBox(d) => {
            let box_h = d.height.map_or(120, |h| h as i32);
            let caption_text = d.label.clone();
            let (caption, control, h) = with_caption(&caption_text, box_h);
            let text = match state.values.get(index) {
                Some(Value::TextBox { text, .. }) => display_text(scene, state, text),
                _ => String::new(),
            };
            let lines = wrap(&text, BOX_TEXT, width - 2 * 8 - SCROLLBAR_W - 4);
            item(caption, control, h, lines)
        }
        WidgetDef::Slider(d) => {
            let (caption, control, h) = with_caption(&d.label, 28);
            item(caption, control, h, Vec::new())
        }
        WidgetDef::Separator(_) => item(None, Rect::new(0, 0, width, 9), 9, Vec::new()),
        WidgetDef::ColumnBreak(_) => item(None, Rect::default(), 0, Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slider_mapping_round_trips() {
        let control = Rect::new(100, 0, 220, 28);
        for v in [1, 5, 25, 50] {
            let x = slider_x(control, 1, 50, v);
            assert_eq!(slider_value_at(control, 1, 50, 1, x), v);
        }
        assert_eq!(slider_value_at(control, 1, 50, 1, 0), 1);
        assert_eq!(slider_value_at(control, 1, 50, 1, 10_000), 50);
        assert_eq!(slider_value_at(control, 0, 100, 10, slider_x(control, 0, 100, 44)), 40);
    }

    #[test]
    fn field_index_picks_the_nearest_boundary() {
        let offsets = char_offsets("abc", BODY);
        assert_eq!(field_index_at("abc", -5), 0);
        assert_eq!(field_index_at("abc", offsets[2] + 1), 2);
        assert_eq!(field_index_at("abc", 999), 3);
        assert_eq!(field_shift("abc", 3, 400), 0);
        assert!(field_shift(&"w".repeat(80), 80, 100) > 0);
    }

    #[test]
    fn thumbs_stay_in_their_track() {
        let track = Rect::new(0, 10, 10, 100);
        let top = scroll_thumb(track, 400, 100, 0);
        let bottom = scroll_thumb(track, 400, 100, 300);
        assert_eq!(top.y, 10);
        assert_eq!(bottom.bottom(), track.bottom());
        assert_eq!(scroll_thumb(track, 400, 100, 9999).bottom(), track.bottom());
    }
}
