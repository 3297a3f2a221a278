//! Painting: turns a [`World`] and its [`Layout`] into pixels — desktop, windows, widgets, the open dropdown,
//! the taskbar and the pointer — in one fixed order, so equal states give equal frames.

use crate::canvas::{Canvas, Color, Rect};
use crate::font::{GlyphCache, TextStyle, baseline_in, char_offsets, elide, text_width};
use crate::layout::{
    self, BODY, BOLD, BOX_TEXT, CAPTION, CHECK_SIZE, FIELD_PAD, Item, Layout, ROW_H, ROW_TEXT, SCROLLBAR_W, TITLE,
    WindowBox, display_text, field_display, field_shift, label_style,
};
use crate::scene::{LabelStyle, WidgetDef, WindowStyle};
use crate::widgets::Value;
use crate::world::{Press, World, window_track};

const INK: Color = Color::rgb(0x1f, 0x29, 0x33);
const MUTED: Color = Color::rgb(0x61, 0x6e, 0x7c);
const CAPTION_INK: Color = Color::rgb(0x3e, 0x4c, 0x59);
const PLACEHOLDER: Color = Color::rgb(0x9a, 0xa5, 0xb1);
const ERROR: Color = Color::rgb(0xc6, 0x28, 0x28);
const SUCCESS: Color = Color::rgb(0x2e, 0x7d, 0x32);
const WHITE: Color = Color::rgb(0xff, 0xff, 0xff);
const BORDER: Color = Color::rgb(0x9a, 0xa5, 0xb1);
const LIGHT_BORDER: Color = Color::rgb(0xcb, 0xd2, 0xd9);
const WINDOW_BORDER: Color = Color::rgb(0x7b, 0x87, 0x94);
const TITLE_BG: Color = Color::rgb(0xe9, 0xed, 0xf2);
const ACCENT: Color = Color::rgb(0x25, 0x63, 0xeb);
const ACCENT_HOVER: Color = Color::rgb(0x1d, 0x4e, 0xd8);
const ACCENT_PRESSED: Color = Color::rgb(0x1e, 0x40, 0xaf);
const RING: Color = Color::rgb(0x93, 0xb4, 0xf5);
const SELECTION: Color = Color::rgb(0xb3, 0xd4, 0xfc);
const ROW_SELECTED_INACTIVE: Color = Color::rgb(0xcf, 0xdc, 0xf5);
const ROW_HOVER: Color = Color::rgb(0xee, 0xf3, 0xfb);
const DISABLED_BG: Color = Color::rgb(0xf0, 0xf2, 0xf5);
const SCROLL_TRACK: Color = Color::rgb(0xee, 0xf1, 0xf4);
const SCROLL_THUMB: Color = Color::rgb(0xa9, 0xb4, 0xc0);
const NOTE_BG: Color = Color::rgb(0xff, 0xf3, 0xa8);
const NOTE_BORDER: Color = Color::rgb(0xe0, 0xc8, 0x4a);
const TASKBAR: Color = Color::rgb(0x1f, 0x29, 0x33);
const TASK_BUTTON: Color = Color::rgb(0x3a, 0x48, 0x56);
const BLACK: Color = Color::rgb(0, 0, 0);

/// Paints the whole screen.
pub(crate) fn render(world: &World, canvas: &mut Canvas, glyphs: &mut GlyphCache) {
    let layout = world.layout();
    let mut painter = Painter { world, canvas, glyphs, layout: &layout, hover: hovered(world, &layout) };
    painter.canvas.clear(world.scene.background);
    for (w, window) in layout.windows.iter().enumerate() {
        painter.window(w, window);
    }
    painter.popup();
    painter.taskbar();
    draw_pointer(painter.canvas, world.state.pointer.x, world.state.pointer.y);
}

/// The widget under the pointer, when no button is held (hover feedback).
fn hovered(world: &World, layout: &Layout) -> Option<usize> {
    let p = world.state.pointer;
    if let Some(popup) = &layout.popup
        && popup.rect.contains(p.x, p.y)
    {
        return None;
    }
    let w = layout.window_at(p.x, p.y)?;
    layout.item_at(w, p.x, p.y).filter(|i| i.control.contains(p.x, p.y)).map(|i| i.widget)
}

struct Painter<'a> {
    world: &'a World,
    canvas: &'a mut Canvas,
    glyphs: &'a mut GlyphCache,
    layout: &'a Layout,
    hover: Option<usize>,
}

impl Painter<'_> {
    fn text(&mut self, x: i32, baseline: i32, text: &str, style: TextStyle, color: Color, clip: Rect) -> i32 {
        self.glyphs.draw(self.canvas, x, baseline, text, style, color, clip)
    }

    fn line_text(&mut self, rect: Rect, text: &str, style: TextStyle, color: Color, clip: Rect) {
        self.glyphs.draw_in_line(self.canvas, rect, text, style, color, clip);
    }

    fn focused(&self, widget: usize) -> bool {
        self.world.state.focus == Some(widget)
    }

    fn ring(&mut self, rect: Rect, clip: Rect) {
        self.canvas.fill_round_rect(rect.inset(-3), 7, RING, clip);
    }

    fn window(&mut self, w: usize, window: &WindowBox) {
        let Some(def) = self.world.scene.screens.get(self.world.state.screen).and_then(|s| s.windows.get(w)) else {
            return;
        };
        let all = self.canvas.bounds();
        let frame = window.frame;
        self.canvas.shadow(frame, 3, 5, 40, all);
        self.canvas.shadow(frame, 1, 2, 40, all);
        match def.style {
            WindowStyle::Note => self.canvas.bordered_round_rect(frame, 3, NOTE_BORDER, NOTE_BG, all),
            _ => self.canvas.bordered_round_rect(frame, 7, WINDOW_BORDER, WHITE, all),
        }
        if let Some(bar) = window.title_bar {
            let inner = Rect::new(bar.x + 1, bar.y + 1, bar.w - 2, bar.h - 1);
            self.canvas.fill_round_rect(inner, 6, TITLE_BG, all);
            self.canvas.fill_rect(Rect::new(inner.x, inner.y + 8, inner.w, inner.h - 8), TITLE_BG, all);
            self.canvas.fill_rect(Rect::new(inner.x, bar.bottom() - 1, inner.w, 1), LIGHT_BORDER, all);
            let title = def.title.as_deref().map(|t| display_text(&self.world.scene, &self.world.state, t));
            let title = elide(&title.unwrap_or_default(), TITLE, bar.w - 28);
            self.line_text(Rect::new(bar.x + 14, bar.y, bar.w - 28, bar.h), &title, TITLE, INK, all);
        }
        let clip = window.body.inset(1);
        for item in &window.items {
            if item.bounds.intersect(clip).is_empty() {
                continue;
            }
            self.item(item, clip);
        }
        if window.max_scroll > 0 {
            let track = window_track(window.body);
            self.scrollbar(track, window.body.h + window.max_scroll, window.body.h, window.scroll, all);
        }
    }

    fn scrollbar(&mut self, track: Rect, content: i32, view: i32, scroll: i32, clip: Rect) {
        self.canvas.fill_round_rect(track, 5, SCROLL_TRACK, clip);
        let thumb = layout::scroll_thumb(track, content, view, scroll);
        self.canvas.fill_round_rect(thumb, 5, SCROLL_THUMB, clip);
    }

    fn caption(&mut self, item: &Item, text: &Option<String>, clip: Rect) {
        if let (Some(rect), Some(text)) = (item.caption, text) {
            let text = elide(text, CAPTION, rect.w);
            self.line_text(rect, &text, CAPTION, CAPTION_INK, clip);
        }
    }

    fn item(&mut self, item: &Item, clip: Rect) {
        let widget = item.widget;
        let Some(def) = self.world.scene.widgets.get(widget) else {
            return;
        };
        let value = self.world.state.values.get(widget);
        match (def, value) {
            (WidgetDef::Label(d), _) => {
                let style = label_style(d.style);
                let color = match d.style {
                    LabelStyle::Muted => MUTED,
                    LabelStyle::Error => ERROR,
                    LabelStyle::Success => SUCCESS,
                    _ => INK,
                };
                let lh = style.line_height();
                for (i, line) in item.lines.iter().enumerate() {
                    let rect = Rect::new(item.control.x, item.control.y + i as i32 * lh, item.control.w, lh);
                    self.line_text(rect, line, style, color, clip);
                }
            }
            (WidgetDef::Button(d), _) => {
                let pressed = self.world.state.left_down
                    && self.world.state.press == Press::Widget(widget)
                    && self.hover_raw(item);
                let hover = self.hover == Some(widget) && !self.world.state.left_down;
                if self.focused(widget) {
                    self.ring(item.control, clip);
                }
                let (bg, border, ink) = match (d.disabled, d.primary) {
                    (true, _) => (DISABLED_BG, LIGHT_BORDER, PLACEHOLDER),
                    (false, true) => {
                        let bg = if pressed {
                            ACCENT_PRESSED
                        } else if hover {
                            ACCENT_HOVER
                        } else {
                            ACCENT
                        };
                        (bg, bg, WHITE)
                    }
                    (false, false) => {
                        let bg = if pressed {
                            Color::rgb(0xe1, 0xe7, 0xee)
                        } else if hover {
                            Color::rgb(0xf0, 0xf4, 0xf8)
                        } else {
                            WHITE
                        };
                        (bg, BORDER, INK)
                    }
                };
                self.canvas.bordered_round_rect(item.control, 6, border, bg, clip);
                let text = display_text(&self.world.scene, &self.world.state, &d.text);
                let text = elide(&text, BOLD, item.control.w - 12);
                let tw = text_width(&text, BOLD);
                let rect =
                    Rect::new(item.control.x + (item.control.w - tw) / 2, item.control.y, tw + 2, item.control.h);
                self.line_text(rect, &text, BOLD, ink, clip.intersect(item.control));
            }
            (WidgetDef::TextField(d), Some(Value::Field(edit))) => {
                self.caption(item, &d.label, clip);
                let focused = self.focused(widget);
                let c = item.control;
                let bg = if d.disabled { DISABLED_BG } else { WHITE };
                if focused {
                    self.canvas.bordered_round_rect(c.inset(-1), 6, RING, RING, clip);
                    self.canvas.bordered_round_rect(c, 5, ACCENT, bg, clip);
                    self.canvas.fill_round_rect(c.inset(1), 4, ACCENT, clip);
                    self.canvas.fill_round_rect(c.inset(2), 3, bg, clip);
                } else {
                    self.canvas.bordered_round_rect(c, 5, BORDER, bg, clip);
                }
                let inner = Rect::new(c.x + FIELD_PAD, c.y + 2, c.w - 2 * FIELD_PAD, c.h - 4);
                let inner_clip = clip.intersect(inner);
                let display = field_display(&edit.text, d.password);
                let baseline = baseline_in(c, BODY);
                if display.is_empty() {
                    if let Some(placeholder) = &d.placeholder {
                        self.text(inner.x, baseline, placeholder, BODY, PLACEHOLDER, inner_clip);
                    }
                } else {
                    let shift = if focused { field_shift(&display, edit.caret, inner.w) } else { 0 };
                    let x0 = inner.x - shift;
                    if focused && let Some((a, b)) = edit.selection() {
                        let offsets = char_offsets(&display, BODY);
                        let (xa, xb) = (offsets.get(a).copied().unwrap_or(0), offsets.get(b).copied().unwrap_or(0));
                        self.canvas.fill_rect(Rect::new(x0 + xa, c.y + 7, xb - xa, c.h - 14), SELECTION, inner_clip);
                    }
                    let ink = if d.disabled { PLACEHOLDER } else { INK };
                    self.text(x0, baseline, &display, BODY, ink, inner_clip);
                }
                if focused {
                    let shift = field_shift(&display, edit.caret, inner.w);
                    let offsets = char_offsets(&display, BODY);
                    let x = inner.x - shift + offsets.get(edit.caret).copied().unwrap_or(0);
                    self.canvas.fill_rect(Rect::new(x, c.y + 7, 1, c.h - 14), INK, clip.intersect(c.inset(1)));
                }
            }
            (WidgetDef::Checkbox(d), Some(Value::Checked(on))) => {
                let c = item.control;
                let b = Rect::new(c.x, c.center_y() - CHECK_SIZE / 2, CHECK_SIZE, CHECK_SIZE);
                if self.focused(widget) {
                    self.ring(b, clip);
                }
                let hover = self.hover == Some(widget);
                if *on {
                    let fill = if d.disabled { PLACEHOLDER } else { ACCENT };
                    self.canvas.fill_round_rect(b, 4, fill, clip);
                    let (x, y) = (b.x as f32, b.y as f32);
                    self.canvas.stroke_segment((x + 4.0, y + 9.5), (x + 7.5, y + 13.0), 2.2, WHITE, clip);
                    self.canvas.stroke_segment((x + 7.5, y + 13.0), (x + 14.0, y + 5.5), 2.2, WHITE, clip);
                } else {
                    let border = if hover { ACCENT } else { WINDOW_BORDER };
                    let fill = if d.disabled { DISABLED_BG } else { WHITE };
                    self.canvas.bordered_round_rect(b, 4, border, fill, clip);
                }
                let ink = if d.disabled { PLACEHOLDER } else { INK };
                let rect = Rect::new(b.right() + 10, c.y, c.right() - b.right() - 10, c.h);
                self.line_text(rect, &d.text, BODY, ink, clip);
            }
            (WidgetDef::Dropdown(d), Some(Value::Choice { selected, .. })) => {
                self.caption(item, &d.label, clip);
                let c = item.control;
                let open = self.world.state.open_dropdown == Some(widget);
                if self.focused(widget) && !open {
                    self.ring(c, clip);
                }
                let border = if open || self.hover == Some(widget) { ACCENT } else { BORDER };
                let bg = if d.disabled { DISABLED_BG } else { WHITE };
                self.canvas.bordered_round_rect(c, 5, border, bg, clip);
                let text_rect = Rect::new(c.x + FIELD_PAD, c.y, c.w - FIELD_PAD - 30, c.h);
                match selected.and_then(|i| d.options.get(i)) {
                    Some(option) => {
                        let text = elide(option, BODY, text_rect.w);
                        self.line_text(text_rect, &text, BODY, INK, clip);
                    }
                    None => {
                        let text = d.placeholder.as_deref().unwrap_or("Select…");
                        self.line_text(text_rect, text, BODY, PLACEHOLDER, clip);
                    }
                }
                let (cx, cy) = ((c.right() - 18) as f32, c.center_y() as f32);
                self.canvas.stroke_segment((cx - 5.0, cy - 2.5), (cx, cy + 2.5), 1.8, CAPTION_INK, clip);
                self.canvas.stroke_segment((cx, cy + 2.5), (cx + 5.0, cy - 2.5), 1.8, CAPTION_INK, clip);
            }
            (WidgetDef::List(d), Some(Value::Choice { selected, scroll })) => {
                self.caption(item, &d.label, clip);
                let c = item.control;
                let focused = self.focused(widget);
                if focused {
                    self.ring(c, clip);
                }
                self.canvas.bordered_round_rect(c, 4, BORDER, if d.disabled { DISABLED_BG } else { WHITE }, clip);
                let content = d.options.len() as i32 * ROW_H;
                let view = c.h - 2;
                let overflow = content > view;
                let scroll = (*scroll).clamp(0, (content - view).max(0));
                let rows_w = c.w - 2 - if overflow { SCROLLBAR_W + 4 } else { 0 };
                let inner = clip.intersect(Rect::new(c.x + 1, c.y + 1, c.w - 2, view));
                let hover_row = self.hover_row(c, scroll, widget);
                for (i, option) in d.options.iter().enumerate() {
                    let row = Rect::new(c.x + 1, c.y + 1 + i as i32 * ROW_H - scroll, rows_w, ROW_H);
                    if row.intersect(inner).is_empty() {
                        continue;
                    }
                    let is_selected = *selected == Some(i);
                    let ink = if is_selected && focused { WHITE } else { INK };
                    if is_selected {
                        self.canvas.fill_rect(row, if focused { ACCENT } else { ROW_SELECTED_INACTIVE }, inner);
                    } else if hover_row == Some(i) {
                        self.canvas.fill_rect(row, ROW_HOVER, inner);
                    }
                    let text = elide(option, ROW_TEXT, row.w - 2 * FIELD_PAD);
                    self.line_text(
                        Rect::new(row.x + FIELD_PAD, row.y, row.w - FIELD_PAD, row.h),
                        &text,
                        ROW_TEXT,
                        ink,
                        inner,
                    );
                }
                if overflow {
                    self.scrollbar(layout::scrollbar_rect(c), content, view, scroll, clip);
                }
            }
            (WidgetDef::TextBox(d), Some(Value::TextBox { scroll, .. })) => {
                self.caption(item, &d.label, clip);
                let c = item.control;
                self.canvas.bordered_round_rect(c, 4, LIGHT_BORDER, Color::rgb(0xfa, 0xfb, 0xfc), clip);
                let content = layout::text_box_content_h(item.lines.len());
                let scroll = (*scroll).clamp(0, (content - c.h).max(0));
                let inner = clip.intersect(c.inset(1));
                let lh = BOX_TEXT.line_height();
                for (i, line) in item.lines.iter().enumerate() {
                    let rect = Rect::new(c.x + 8, c.y + 8 + i as i32 * lh - scroll, c.w - 16, lh);
                    if rect.intersect(inner).is_empty() {
                        continue;
                    }
                    self.line_text(rect, line, BOX_TEXT, INK, inner);
                }
                if content > c.h {
                    self.scrollbar(layout::scrollbar_rect(c), content, c.h, scroll, clip);
                }
            }
            (WidgetDef::Slider(d), Some(Value::Slider(v))) => {
                if let Some(rect) = item.caption {
                    let value = v.to_string();
                    let vw = text_width(&value, TextStyle::bold(14));
                    if let Some(label) = &d.label {
                        let label = elide(label, CAPTION, rect.w - vw - 12);
                        self.line_text(rect, &label, CAPTION, CAPTION_INK, clip);
                    }
                    let value_rect = Rect::new(rect.right() - vw - 2, rect.y, vw + 2, rect.h);
                    self.line_text(value_rect, &value, TextStyle::bold(14), INK, clip);
                }
                let c = item.control;
                let track = layout::slider_track(c);
                let x = layout::slider_x(c, d.min, d.max, *v);
                let fill = if d.disabled { PLACEHOLDER } else { ACCENT };
                self.canvas.fill_round_rect(track, 2, LIGHT_BORDER, clip);
                self.canvas.fill_round_rect(Rect::new(track.x, track.y, x - track.x, track.h), 2, fill, clip);
                let cy = track.y as f32 + 2.0;
                if self.focused(widget) {
                    self.canvas.fill_circle(x as f32, cy, 12.5, RING, clip);
                }
                self.canvas.fill_circle(x as f32, cy, 9.0, fill, clip);
                self.canvas.fill_circle(x as f32, cy, 6.5, WHITE, clip);
            }
            (WidgetDef::Separator(_), _) => {
                let c = item.control;
                self.canvas.fill_rect(Rect::new(c.x, c.center_y(), c.w, 1), LIGHT_BORDER, clip);
            }
            _ => {}
        }
    }

    fn hover_raw(&self, item: &Item) -> bool {
        let p = self.world.state.pointer;
        item.control.contains(p.x, p.y)
    }

    /// The list row under the pointer, when the pointer is over this list.
    fn hover_row(&self, control: Rect, scroll: i32, widget: usize) -> Option<usize> {
        if self.hover != Some(widget) {
            return None;
        }
        let p = self.world.state.pointer;
        let row = (p.y - control.y - 1 + scroll) / ROW_H;
        (p.y > control.y && row >= 0).then_some(row as usize)
    }

    fn popup(&mut self) {
        let Some(popup) = &self.layout.popup else {
            return;
        };
        let Some(WidgetDef::Dropdown(d)) = self.world.scene.widgets.get(popup.widget) else {
            return;
        };
        let all = self.canvas.bounds();
        let r = popup.rect;
        self.canvas.shadow(r, 2, 4, 50, all);
        self.canvas.bordered_round_rect(r, 4, BORDER, WHITE, all);
        let overflow = popup.max_scroll > 0;
        let rows_w = r.w - 2 - if overflow { SCROLLBAR_W + 4 } else { 0 };
        let inner = Rect::new(r.x + 1, r.y + 1, r.w - 2, r.h - 2);
        let p = self.world.state.pointer;
        let selected = match self.world.state.values.get(popup.widget) {
            Some(Value::Choice { selected, .. }) => *selected,
            _ => None,
        };
        for (i, option) in d.options.iter().enumerate() {
            let row = Rect::new(r.x + 1, r.y + 1 + i as i32 * ROW_H - popup.scroll, rows_w, ROW_H);
            if row.intersect(inner).is_empty() {
                continue;
            }
            let highlighted = self.world.state.highlight == i;
            if highlighted {
                self.canvas.fill_rect(row, ACCENT, inner);
            } else if row.contains(p.x, p.y) {
                self.canvas.fill_rect(row, ROW_HOVER, inner);
            }
            let style = if selected == Some(i) { TextStyle::bold(14) } else { ROW_TEXT };
            let ink = if highlighted { WHITE } else { INK };
            let text = elide(option, style, row.w - 2 * FIELD_PAD);
            self.line_text(Rect::new(row.x + FIELD_PAD, row.y, row.w - FIELD_PAD, row.h), &text, style, ink, inner);
        }
        if overflow {
            let view = popup.visible_rows * ROW_H;
            self.scrollbar(layout::scrollbar_rect(r), view + popup.max_scroll, view, popup.scroll, all);
        }
    }

    fn taskbar(&mut self) {
        let Some(bar) = self.layout.taskbar else {
            return;
        };
        let all = self.canvas.bounds();
        self.canvas.fill_rect(bar, TASKBAR, all);
        let start = Rect::new(bar.x + 8, bar.y + 8, 24, 24);
        self.canvas.fill_round_rect(start, 5, Color::rgb(0x3b, 0x82, 0xf6), all);
        for (dx, dy) in [(5, 5), (13, 5), (5, 13), (13, 13)] {
            self.canvas.fill_rect(Rect::new(start.x + dx, start.y + dy, 6, 6), WHITE, all);
        }
        let scene = &self.world.scene;
        let title = elide(&scene.title, BOLD, (bar.w / 3).max(40));
        let end = self.glyphs.draw(self.canvas, bar.x + 42, baseline_in(bar, BOLD), &title, BOLD, WHITE, all);
        let clock_w = text_width(&scene.clock, BODY);
        let clock_x = bar.right() - 14 - clock_w;
        if let Some(screen) = scene.screens.get(self.world.state.screen) {
            let name = screen.title.clone().unwrap_or_else(|| screen.id.clone());
            let room = clock_x - 16 - (end + 18);
            if room > 60 {
                let name = elide(&name, CAPTION, (room - 24).min(220));
                let w = text_width(&name, CAPTION) + 24;
                let button = Rect::new(end + 18, bar.y + 6, w, bar.h - 12);
                self.canvas.fill_round_rect(button, 5, TASK_BUTTON, all);
                self.canvas.fill_rect(
                    Rect::new(button.x + 8, button.bottom() - 3, w - 16, 2),
                    Color::rgb(0x60, 0xa5, 0xfa),
                    all,
                );
                self.line_text(Rect::new(button.x + 12, button.y, w - 12, button.h), &name, CAPTION, WHITE, all);
            }
        }
        self.line_text(Rect::new(clock_x, bar.y, clock_w + 2, bar.h), &scene.clock, BODY, WHITE, all);
    }
}

/// The classic arrow pointer, 12×19: `#` outline, `.` fill.
const POINTER: [&str; 19] = [
    "#           ",
    "##          ",
    "#.#         ",
    "#..#        ",
    "#...#       ",
    "#....#      ",
    "#.....#     ",
    "#......#    ",
    "#.......#   ",
    "#........#  ",
    "#.........# ",
    "#..........#",
    "#......#####",
    "#...#..#    ",
    "#..##..#    ",
    "#.#  #..#   ",
    "##   #..#   ",
    "      #..#  ",
    "      ###   ",
];

fn draw_pointer(canvas: &mut Canvas, x: i32, y: i32) {
    let all = canvas.bounds();
    for (dy, row) in POINTER.iter().enumerate() {
        for (dx, cell) in row.bytes().enumerate() {
            let color = match cell {
                b'#' => BLACK,
                b'.' => WHITE,
                _ => continue,
            };
            canvas.fill_rect(Rect::new(x + dx as i32, y + dy as i32, 1, 1), color, all);
        }
    }
}
