//! The desktop's behaviour: what a pointer press, a drag, a scroll, a key or typed text does to the current
//! screen, and what the declarative effects of a button do. No pixels and no IO here: [`World`] is the scene
//! plus a serialisable [`WorldState`], and every input is a method that changes that state. [`MockState`] is
//! the part of it reported to users as `computer_state`.

use std::collections::BTreeMap;
use std::sync::Arc;

use agentd_computer::{Key, Point, Size};
use serde::{Deserialize, Serialize};

use crate::canvas::Rect;
use crate::layout::{self, Item, Layout, ROW_H, SCROLLBAR_W, display_text, field_display, field_index_at, field_shift};
use crate::scene::{Condition, Effect, Scene, SetDef, WidgetDef};
use crate::widgets::{TextEdit, Value};

/// Something that scrolls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ScrollTarget {
    /// A window of the current screen, by index.
    Window(usize),
    /// A list, a text box, or an open dropdown's popup.
    Widget(usize),
}

/// What the held left button is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Press {
    #[default]
    None,
    /// A button or checkbox armed: it acts if the button is released over it.
    Widget(usize),
    /// Dragging a slider's thumb; `grab` is where on the thumb it was taken.
    Slider { widget: usize, grab: i32 },
    /// Selecting text in a field by dragging.
    Select(usize),
    /// Dragging a scrollbar thumb.
    Thumb { target: ScrollTarget, grab: i32 },
}

/// Everything about the desktop that changes. Serialisable so a desktop can be saved and resumed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct WorldState {
    pub screen: usize,
    /// One per widget of the scene, in scene order.
    pub values: Vec<Value>,
    pub focus: Option<usize>,
    pub pointer: Point,
    pub left_down: bool,
    pub press: Press,
    pub open_dropdown: Option<usize>,
    /// The highlighted row of the open dropdown.
    pub highlight: usize,
    /// Per window of the current screen.
    pub window_scroll: Vec<i32>,
    pub clipboard: String,
    pub clicked: Vec<String>,
    pub visited: Vec<String>,
    pub actions_received: u64,
}

/// Held modifier keys.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Mods {
    pub shift: bool,
    pub ctrl: bool,
    pub alt: bool,
    pub meta: bool,
}

impl Mods {
    pub fn from_keys(keys: &[Key]) -> Mods {
        let mut mods = Mods::default();
        for key in keys {
            match key.keysym {
                0xffe1 | 0xffe2 => mods.shift = true,
                0xffe3 | 0xffe4 => mods.ctrl = true,
                0xffe9 | 0xffea | 0xfe03 => mods.alt = true,
                0xffeb..=0xffee => mods.meta = true,
                _ => {}
            }
        }
        mods
    }

    fn command(&self) -> bool {
        self.ctrl || self.alt || self.meta
    }
}

mod keysym {
    pub const RETURN: u32 = 0xff0d;
    pub const KP_ENTER: u32 = 0xff8d;
    pub const TAB: u32 = 0xff09;
    pub const KP_TAB: u32 = 0xff89;
    pub const ISO_LEFT_TAB: u32 = 0xfe20;
    pub const ESCAPE: u32 = 0xff1b;
    pub const BACKSPACE: u32 = 0xff08;
    pub const DELETE: u32 = 0xffff;
    pub const HOME: u32 = 0xff50;
    pub const LEFT: u32 = 0xff51;
    pub const UP: u32 = 0xff52;
    pub const RIGHT: u32 = 0xff53;
    pub const DOWN: u32 = 0xff54;
    pub const PAGE_UP: u32 = 0xff55;
    pub const PAGE_DOWN: u32 = 0xff56;
    pub const END: u32 = 0xff57;
    pub const F4: u32 = 0xffc1;

    /// Keypad navigation keys act as their main-block twins.
    pub fn normalize(keysym: u32) -> u32 {
        match keysym {
            0xff95 => HOME,
            0xff96 => LEFT,
            0xff97 => UP,
            0xff98 => RIGHT,
            0xff99 => DOWN,
            0xff9a => PAGE_UP,
            0xff9b => PAGE_DOWN,
            0xff9c => END,
            0xff9f => DELETE,
            KP_ENTER => RETURN,
            KP_TAB => TAB,
            0xff80 => 0x20,
            other => other,
        }
    }
}

/// The state reported as `computer_state`: what a test of an automation asserts on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MockState {
    pub scene: String,
    /// The current screen's id.
    pub screen: String,
    /// Text field values by id (passwords included, in clear: this is a test fixture).
    pub fields: BTreeMap<String, String>,
    pub checkboxes: BTreeMap<String, bool>,
    /// The chosen option of each dropdown and list, or null.
    pub selections: BTreeMap<String, Option<String>>,
    pub sliders: BTreeMap<String, i64>,
    /// The text of every label that has an id, as shown (references expanded).
    pub labels: BTreeMap<String, String>,
    /// Scroll offsets in pixels of lists and text boxes that have an id.
    pub scroll: BTreeMap<String, i32>,
    /// Ids of the buttons activated, in order.
    pub clicked: Vec<String>,
    /// Ids of the screens shown, in order, starting with the first.
    pub screens_visited: Vec<String>,
    pub focused: Option<String>,
    pub pointer: Point,
    pub actions_received: u64,
    pub size: Size,
}

/// A scene being operated.
#[derive(Debug, Clone)]
pub(crate) struct World {
    pub scene: Arc<Scene>,
    pub size: Size,
    pub state: WorldState,
}

impl World {
    pub fn new(scene: Arc<Scene>, size: Size) -> World {
        let values = scene.widgets.iter().map(Value::initial).collect();
        let start = scene.start;
        let state = WorldState {
            screen: start,
            values,
            focus: scene.screens[start].focus,
            pointer: Point::new(size.width as i32 / 2, size.height as i32 / 2),
            left_down: false,
            press: Press::None,
            open_dropdown: None,
            highlight: 0,
            window_scroll: vec![0; scene.screens[start].windows.len()],
            clipboard: String::new(),
            clicked: Vec::new(),
            visited: vec![scene.screens[start].id.clone()],
            actions_received: 0,
        };
        World { scene, size, state }
    }

    /// Checks that a saved state belongs to this scene (same widgets, a real screen).
    pub fn accepts(&self, state: &WorldState) -> bool {
        let widgets = &self.scene.widgets;
        let in_range = |w: Option<usize>| w.is_none_or(|w| w < widgets.len());
        state.screen < self.scene.screens.len()
            && state.values.len() == widgets.len()
            && state.values.iter().zip(widgets.iter()).all(|(v, d)| v.fits(d))
            && in_range(state.focus)
            && in_range(state.open_dropdown)
    }

    pub fn layout(&self) -> Layout {
        layout::compute(&self.scene, &self.state, self.size)
    }

    fn def(&self, widget: usize) -> Option<&WidgetDef> {
        self.scene.widgets.get(widget)
    }

    fn edit(&mut self, widget: usize) -> Option<&mut TextEdit> {
        match self.state.values.get_mut(widget) {
            Some(Value::Field(edit)) => Some(edit),
            _ => None,
        }
    }

    fn text_of(&self, widget: usize) -> String {
        match (self.state.values.get(widget), self.def(widget)) {
            (Some(v), Some(d)) => v.as_text(d),
            _ => String::new(),
        }
    }

    // ------------------------------------------------------------------------------------------------------
    // Pointer.

    pub fn move_pointer(&mut self, to: Point) {
        self.state.pointer = to;
        if !self.state.left_down {
            return;
        }
        match self.state.press {
            Press::Slider { widget, grab } => {
                let layout = self.layout();
                if let (Some((_, item)), Some(WidgetDef::Slider(d))) = (layout.item(widget), self.def(widget)) {
                    let v = layout::slider_value_at(item.control, d.min, d.max, d.step, to.x - grab);
                    self.state.values[widget] = Value::Slider(v);
                }
            }
            Press::Select(widget) => {
                let layout = self.layout();
                if let Some(index) = self.field_index(&layout, widget, to.x)
                    && let Some(edit) = self.edit(widget)
                {
                    edit.move_to(index, true);
                }
            }
            Press::Thumb { target, grab } => {
                let layout = self.layout();
                if let Some(bar) = self.scrollbar(&layout, target) {
                    let thumb = layout::scroll_thumb(bar.track, bar.content, bar.view, bar.scroll);
                    let travel = (bar.track.h - thumb.h).max(1);
                    let top = (to.y - grab - bar.track.y).clamp(0, travel);
                    let max = (bar.content - bar.view).max(0);
                    self.set_scroll(target, top * max / travel);
                }
            }
            Press::None | Press::Widget(_) => {}
        }
    }

    /// The left button goes down at the pointer; `count` is 2 or 3 for the later presses of a double or
    /// triple click.
    pub fn press(&mut self, mods: Mods, count: u32) {
        if self.state.left_down {
            return;
        }
        self.state.left_down = true;
        self.state.press = Press::None;
        let p = self.state.pointer;
        let layout = self.layout();

        if let Some(popup) = &layout.popup {
            let widget = popup.widget;
            if popup.rect.contains(p.x, p.y) {
                let target = ScrollTarget::Widget(widget);
                if popup.max_scroll > 0 && layout::scrollbar_rect(popup.rect).contains(p.x, p.y) {
                    self.start_thumb(&layout, target, p);
                    return;
                }
                let row = ((p.y - popup.rect.y - 1 + popup.scroll) / ROW_H).max(0) as usize;
                self.choose(widget, row);
                self.state.open_dropdown = None;
                return;
            }
            self.state.open_dropdown = None;
            if layout.item(widget).is_some_and(|(_, item)| item.control.contains(p.x, p.y)) {
                return;
            }
        }

        let Some(w) = layout.window_at(p.x, p.y) else {
            self.state.focus = None;
            return;
        };
        let window = &layout.windows[w];
        if window.max_scroll > 0 && window_track(window.body).contains(p.x, p.y) {
            self.start_thumb(&layout, ScrollTarget::Window(w), p);
            return;
        }
        let Some(item) = layout.item_at(w, p.x, p.y).cloned() else {
            self.state.focus = None;
            return;
        };
        self.press_item(&layout, &item, p, mods, count);
    }

    fn press_item(&mut self, layout: &Layout, item: &Item, p: Point, mods: Mods, count: u32) {
        let widget = item.widget;
        let Some(def) = self.def(widget).cloned() else {
            return;
        };
        if !def.focusable() {
            // Labels, text boxes, separators, disabled widgets: only a text box's scrollbar reacts.
            if let WidgetDef::TextBox(_) = def
                && let Some(bar) = self.scrollbar(layout, ScrollTarget::Widget(widget))
                && bar.content > bar.view
                && bar.track.contains(p.x, p.y)
            {
                self.start_thumb(layout, ScrollTarget::Widget(widget), p);
                return;
            }
            self.state.focus = None;
            return;
        }
        let was_focused = self.state.focus == Some(widget);
        // Where in a field's text the press lands depends on how it was drawn, before it took the focus.
        let field_index = self.field_index(layout, widget, p.x);
        self.state.focus = Some(widget);
        match def {
            WidgetDef::Button(_) | WidgetDef::Checkbox(_) => self.state.press = Press::Widget(widget),
            WidgetDef::TextField(_) => {
                let index = field_index.unwrap_or(0);
                let Some(edit) = self.edit(widget) else {
                    return;
                };
                match count {
                    2 => edit.select_word_at(index),
                    c if c >= 3 => edit.select_all(),
                    _ => {
                        edit.move_to(index, mods.shift && was_focused);
                    }
                }
                self.state.press = Press::Select(widget);
            }
            WidgetDef::Dropdown(d) => {
                let selected = match self.state.values.get(widget) {
                    Some(Value::Choice { selected, .. }) => *selected,
                    _ => None,
                };
                self.state.highlight = selected.unwrap_or(0).min(d.options.len().saturating_sub(1));
                self.state.open_dropdown = Some(widget);
                self.reveal_popup_row();
            }
            WidgetDef::List(d) => {
                let target = ScrollTarget::Widget(widget);
                if let Some(bar) = self.scrollbar(layout, target)
                    && bar.content > bar.view
                    && bar.track.contains(p.x, p.y)
                {
                    self.start_thumb(layout, target, p);
                    return;
                }
                let scroll = match self.state.values.get(widget) {
                    Some(Value::Choice { scroll, .. }) => *scroll,
                    _ => 0,
                };
                let row = (p.y - item.control.y - 1 + scroll) / ROW_H;
                if p.y > item.control.y && row >= 0 && (row as usize) < d.options.len() {
                    self.choose(widget, row as usize);
                }
            }
            WidgetDef::Slider(d) => {
                let value = match self.state.values.get(widget) {
                    Some(Value::Slider(v)) => *v,
                    _ => d.min,
                };
                let thumb_x = layout::slider_x(item.control, d.min, d.max, value);
                let grab = if (p.x - thumb_x).abs() <= 10 {
                    p.x - thumb_x
                } else {
                    let v = layout::slider_value_at(item.control, d.min, d.max, d.step, p.x);
                    self.state.values[widget] = Value::Slider(v);
                    0
                };
                self.state.press = Press::Slider { widget, grab };
            }
            _ => {}
        }
    }

    /// The left button goes up at the pointer.
    pub fn release(&mut self) {
        if !self.state.left_down {
            return;
        }
        self.state.left_down = false;
        let press = std::mem::take(&mut self.state.press);
        let Press::Widget(widget) = press else { return };
        let layout = self.layout();
        let p = self.state.pointer;
        let over = layout
            .window_at(p.x, p.y)
            .and_then(|w| layout.item_at(w, p.x, p.y))
            .is_some_and(|item| item.widget == widget && item.control.contains(p.x, p.y));
        if !over || layout.popup.is_some() {
            return;
        }
        match self.def(widget) {
            Some(WidgetDef::Button(_)) => self.activate(widget),
            Some(WidgetDef::Checkbox(_)) => self.toggle(widget),
            _ => {}
        }
    }

    /// A full click: move, press, release.
    pub fn click(&mut self, at: Point, mods: Mods, count: u32) {
        self.move_pointer(at);
        self.press(mods, count);
        self.release();
    }

    /// Scrolls whatever is under `at` by pixels; an inner box at its limit passes the rest to its window.
    pub fn scroll(&mut self, at: Point, dy: i32) {
        self.move_pointer(at);
        if dy == 0 {
            return;
        }
        let layout = self.layout();
        if let Some(popup) = &layout.popup {
            if popup.rect.contains(at.x, at.y) {
                self.scroll_by(&layout, ScrollTarget::Widget(popup.widget), dy);
                return;
            }
            self.state.open_dropdown = None;
        }
        let Some(w) = layout.window_at(at.x, at.y) else {
            return;
        };
        let mut rest = dy;
        if let Some(item) = layout.item_at(w, at.x, at.y)
            && matches!(self.def(item.widget), Some(WidgetDef::List(_) | WidgetDef::TextBox(_)))
            && item.control.contains(at.x, at.y)
        {
            rest -= self.scroll_by(&layout, ScrollTarget::Widget(item.widget), dy);
        }
        if rest != 0 {
            self.scroll_by(&layout, ScrollTarget::Window(w), rest);
        }
    }

    // ------------------------------------------------------------------------------------------------------
    // Scrolling helpers.

    fn scrollbar(&self, layout: &Layout, target: ScrollTarget) -> Option<ScrollBar> {
        match target {
            ScrollTarget::Window(w) => {
                let window = layout.windows.get(w)?;
                Some(ScrollBar {
                    track: window_track(window.body),
                    content: window.body.h + window.max_scroll,
                    view: window.body.h,
                    scroll: window.scroll,
                })
            }
            ScrollTarget::Widget(widget) => {
                let scroll = match self.state.values.get(widget)? {
                    Value::Choice { scroll, .. } | Value::TextBox { scroll, .. } => *scroll,
                    _ => return None,
                };
                if let Some(popup) = layout.popup.as_ref().filter(|p| p.widget == widget) {
                    return Some(ScrollBar {
                        track: layout::scrollbar_rect(popup.rect),
                        content: popup.visible_rows * ROW_H + popup.max_scroll,
                        view: popup.visible_rows * ROW_H,
                        scroll: popup.scroll,
                    });
                }
                let (_, item) = layout.item(widget)?;
                let (content, view) = match self.def(widget)? {
                    WidgetDef::List(d) => (d.options.len() as i32 * ROW_H, item.control.h - 2),
                    WidgetDef::TextBox(_) => (layout::text_box_content_h(item.lines.len()), item.control.h),
                    _ => return None,
                };
                Some(ScrollBar { track: layout::scrollbar_rect(item.control), content, view, scroll })
            }
        }
    }

    fn set_scroll(&mut self, target: ScrollTarget, value: i32) {
        match target {
            ScrollTarget::Window(w) => {
                if let Some(s) = self.state.window_scroll.get_mut(w) {
                    *s = value.max(0);
                }
            }
            ScrollTarget::Widget(widget) => {
                if let Some(Value::Choice { scroll, .. } | Value::TextBox { scroll, .. }) =
                    self.state.values.get_mut(widget)
                {
                    *scroll = value.max(0);
                }
            }
        }
    }

    /// Scrolls `target` by `dy` within its range; returns how much it moved.
    fn scroll_by(&mut self, layout: &Layout, target: ScrollTarget, dy: i32) -> i32 {
        let Some(bar) = self.scrollbar(layout, target) else {
            return 0;
        };
        let max = (bar.content - bar.view).max(0);
        let current = bar.scroll.clamp(0, max);
        let next = current.saturating_add(dy).clamp(0, max);
        self.set_scroll(target, next);
        next - current
    }

    fn start_thumb(&mut self, layout: &Layout, target: ScrollTarget, p: Point) {
        let Some(bar) = self.scrollbar(layout, target) else {
            return;
        };
        let thumb = layout::scroll_thumb(bar.track, bar.content, bar.view, bar.scroll);
        let grab = if thumb.contains(p.x, p.y) {
            p.y - thumb.y
        } else {
            // A press on the track jumps the thumb's middle there.
            let grab = thumb.h / 2;
            let travel = (bar.track.h - thumb.h).max(1);
            let top = (p.y - grab - bar.track.y).clamp(0, travel);
            self.set_scroll(target, top * (bar.content - bar.view).max(0) / travel);
            grab
        };
        self.state.press = Press::Thumb { target, grab };
    }

    /// Scrolls the current screen's windows so that `widget` is in view.
    fn reveal(&mut self, widget: usize) {
        let layout = self.layout();
        let Some((w, item)) = layout.item(widget) else {
            return;
        };
        let window = &layout.windows[w];
        let mut scroll = window.scroll;
        if item.bounds.y < window.body.y + 8 {
            scroll -= window.body.y + 8 - item.bounds.y;
        } else if item.bounds.bottom() > window.body.bottom() - 8 {
            scroll += item.bounds.bottom() - (window.body.bottom() - 8);
        }
        self.set_scroll(ScrollTarget::Window(w), scroll.clamp(0, window.max_scroll));
    }

    /// Scrolls a list so that its selected row is visible.
    fn reveal_list_row(&mut self, widget: usize) {
        let layout = self.layout();
        let (Some((_, item)), Some(Value::Choice { selected: Some(row), scroll })) =
            (layout.item(widget), self.state.values.get(widget))
        else {
            return;
        };
        let view = item.control.h - 2;
        let top = *row as i32 * ROW_H;
        let scroll = if top < *scroll {
            top
        } else if top + ROW_H > scroll + view {
            top + ROW_H - view
        } else {
            *scroll
        };
        self.set_scroll(ScrollTarget::Widget(widget), scroll);
    }

    fn reveal_popup_row(&mut self) {
        let Some(widget) = self.state.open_dropdown else {
            return;
        };
        let layout = self.layout();
        let Some(popup) = &layout.popup else { return };
        let view = popup.visible_rows * ROW_H;
        let top = self.state.highlight as i32 * ROW_H;
        let scroll = if top < popup.scroll {
            top
        } else if top + ROW_H > popup.scroll + view {
            top + ROW_H - view
        } else {
            popup.scroll
        };
        self.set_scroll(ScrollTarget::Widget(widget), scroll);
    }

    // ------------------------------------------------------------------------------------------------------
    // Keyboard.

    /// One chord: modifiers held, the last non-modifier key pressed.
    pub fn keypress(&mut self, keys: &[Key]) {
        let mods = Mods::from_keys(keys);
        let Some(key) = keys.iter().rev().find(|k| !k.is_modifier()) else {
            return;
        };
        self.key(keysym::normalize(key.keysym), *key, mods);
    }

    /// Types text as if by a keyboard: `\n` presses Enter, `\t` Tab, `\u{8}` Backspace.
    pub fn type_text(&mut self, text: &str) {
        for c in text.chars() {
            match c {
                '\n' | '\r' => self.enter(),
                '\t' => self.move_focus(false),
                '\u{8}' => self.key(keysym::BACKSPACE, Key::from_char(c), Mods::default()),
                c if c.is_control() => {}
                c => self.char_input(c),
            }
        }
    }

    fn key(&mut self, keysym: u32, key: Key, mods: Mods) {
        match keysym {
            keysym::TAB | keysym::ISO_LEFT_TAB if !mods.ctrl && !mods.alt && !mods.meta => {
                self.move_focus(mods.shift || keysym == keysym::ISO_LEFT_TAB);
                return;
            }
            keysym::RETURN if !mods.command() => {
                self.enter();
                return;
            }
            keysym::ESCAPE => {
                self.state.open_dropdown = None;
                return;
            }
            _ => {}
        }
        let focus = self.state.focus;
        match focus.and_then(|f| self.def(f).cloned()) {
            Some(WidgetDef::TextField(d)) => {
                if let Some(f) = focus {
                    self.field_key(f, d.password, d.max_length, keysym, key, mods);
                }
            }
            Some(WidgetDef::Checkbox(_)) if keysym == 0x20 && !mods.command() => {
                if let Some(f) = focus {
                    self.toggle(f);
                }
            }
            Some(WidgetDef::Button(_)) if keysym == 0x20 && !mods.command() => {
                if let Some(f) = focus {
                    self.activate(f);
                }
            }
            Some(WidgetDef::Dropdown(d)) => {
                if let Some(f) = focus {
                    self.dropdown_key(f, d.options.len(), keysym, key, mods);
                }
            }
            Some(WidgetDef::List(d)) => {
                if let Some(f) = focus {
                    self.list_key(f, d.options.len(), keysym, key, mods);
                }
            }
            Some(WidgetDef::Slider(d)) => {
                if let Some(f) = focus {
                    let Some(Value::Slider(v)) = self.state.values.get(f) else {
                        return;
                    };
                    let next = match keysym {
                        keysym::LEFT | keysym::DOWN => v - d.step,
                        keysym::RIGHT | keysym::UP => v + d.step,
                        keysym::PAGE_DOWN => v - 10 * d.step,
                        keysym::PAGE_UP => v + 10 * d.step,
                        keysym::HOME => d.min,
                        keysym::END => d.max,
                        _ => *v,
                    };
                    self.state.values[f] = Value::Slider(next.clamp(d.min, d.max));
                }
            }
            _ => {
                // Nothing focused (or a widget that ignores the key): navigation keys scroll the topmost
                // window that can scroll.
                let layout = self.layout();
                let Some(w) = (0..layout.windows.len()).rev().find(|&w| layout.windows[w].max_scroll > 0) else {
                    return;
                };
                let page = (layout.windows[w].body.h * 9 / 10).max(40);
                let dy = match keysym {
                    keysym::DOWN => 40,
                    keysym::UP => -40,
                    keysym::PAGE_DOWN | 0x20 => page,
                    keysym::PAGE_UP => -page,
                    keysym::HOME => -layout.windows[w].max_scroll,
                    keysym::END => layout.windows[w].max_scroll,
                    _ => 0,
                };
                self.scroll_by(&layout, ScrollTarget::Window(w), dy);
            }
        }
    }

    fn field_key(&mut self, f: usize, password: bool, max_length: Option<usize>, keysym: u32, key: Key, mods: Mods) {
        let Some(edit) = self.edit(f) else { return };
        match keysym {
            keysym::BACKSPACE => edit.backspace(mods.ctrl),
            keysym::DELETE => edit.delete(mods.ctrl),
            keysym::LEFT => edit.left(mods.shift, mods.ctrl),
            keysym::RIGHT => edit.right(mods.shift, mods.ctrl),
            keysym::HOME | keysym::UP => edit.move_to(0, mods.shift),
            keysym::END | keysym::DOWN => edit.move_to(usize::MAX, mods.shift),
            _ => {
                let Some(c) = key.to_char() else { return };
                if mods.ctrl || mods.meta {
                    match c.to_ascii_lowercase() {
                        'a' => edit.select_all(),
                        'c' if !password => {
                            if let Some(text) = edit.selected_text() {
                                self.state.clipboard = text;
                            }
                        }
                        'x' if !password => {
                            if let Some(text) = edit.selected_text() {
                                edit.backspace(false);
                                self.state.clipboard = text;
                            }
                        }
                        'v' => {
                            let clip = self.state.clipboard.clone();
                            if let Some(edit) = self.edit(f) {
                                edit.insert(&clip, max_length);
                            }
                        }
                        _ => {}
                    }
                } else if !mods.alt {
                    let c = if mods.shift { c.to_uppercase().next().unwrap_or(c) } else { c };
                    edit.insert(&c.to_string(), max_length);
                }
            }
        }
    }

    fn dropdown_key(&mut self, f: usize, options: usize, keysym: u32, key: Key, mods: Mods) {
        let open = self.state.open_dropdown == Some(f);
        if open {
            let last = options.saturating_sub(1);
            match keysym {
                keysym::UP => self.state.highlight = self.state.highlight.saturating_sub(1),
                keysym::DOWN => self.state.highlight = (self.state.highlight + 1).min(last),
                keysym::HOME | keysym::PAGE_UP => self.state.highlight = 0,
                keysym::END | keysym::PAGE_DOWN => self.state.highlight = last,
                0x20 => {
                    let row = self.state.highlight;
                    self.choose(f, row);
                    self.state.open_dropdown = None;
                }
                _ => {
                    if let Some(row) = key.to_char().and_then(|c| self.type_ahead(f, c)) {
                        self.state.highlight = row;
                    }
                }
            }
            self.reveal_popup_row();
            return;
        }
        match keysym {
            0x20 | keysym::F4 => self.open_dropdown(f),
            keysym::DOWN if mods.alt => self.open_dropdown(f),
            keysym::UP | keysym::DOWN | keysym::HOME | keysym::END => self.step_choice(f, options, keysym),
            _ => {
                if !mods.command()
                    && let Some(row) = key.to_char().and_then(|c| self.type_ahead(f, c))
                {
                    self.choose(f, row);
                }
            }
        }
    }

    fn list_key(&mut self, f: usize, options: usize, keysym: u32, key: Key, mods: Mods) {
        match keysym {
            keysym::UP | keysym::DOWN | keysym::HOME | keysym::END | keysym::PAGE_UP | keysym::PAGE_DOWN => {
                self.step_choice(f, options, keysym)
            }
            _ => {
                if !mods.command()
                    && let Some(row) = key.to_char().and_then(|c| self.type_ahead(f, c))
                {
                    self.choose(f, row);
                }
            }
        }
        self.reveal_list_row(f);
    }

    fn step_choice(&mut self, f: usize, options: usize, keysym: u32) {
        let Some(Value::Choice { selected, .. }) = self.state.values.get(f) else {
            return;
        };
        let last = options.saturating_sub(1);
        let row = match (keysym, *selected) {
            (keysym::UP, Some(i)) => i.saturating_sub(1),
            (keysym::PAGE_UP, Some(i)) => i.saturating_sub(5),
            (keysym::DOWN, Some(i)) => (i + 1).min(last),
            (keysym::PAGE_DOWN, Some(i)) => (i + 5).min(last),
            (keysym::HOME, _) => 0,
            (keysym::END, _) => last,
            (_, None) => 0,
            (_, Some(i)) => i,
        };
        self.choose(f, row);
    }

    fn open_dropdown(&mut self, f: usize) {
        let selected = match self.state.values.get(f) {
            Some(Value::Choice { selected, .. }) => *selected,
            _ => None,
        };
        self.state.highlight = selected.unwrap_or(0);
        self.state.open_dropdown = Some(f);
        self.reveal_popup_row();
    }

    /// The next option after the current one whose text starts with `c` (case-insensitive).
    fn type_ahead(&self, f: usize, c: char) -> Option<usize> {
        let (Some(WidgetDef::Dropdown(d) | WidgetDef::List(d)), Some(Value::Choice { selected, .. })) =
            (self.def(f), self.state.values.get(f))
        else {
            return None;
        };
        let current = if self.state.open_dropdown == Some(f) { Some(self.state.highlight) } else { *selected };
        let c = c.to_lowercase().collect::<String>();
        let n = d.options.len();
        let start = current.map_or(0, |i| i + 1);
        (0..n).map(|k| (start + k) % n).find(|&i| d.options[i].to_lowercase().starts_with(&c))
    }

    fn char_input(&mut self, c: char) {
        let Some(f) = self.state.focus else { return };
        match self.def(f).cloned() {
            Some(WidgetDef::TextField(d)) => {
                if let Some(edit) = self.edit(f) {
                    edit.insert(&c.to_string(), d.max_length);
                }
            }
            _ => self.key(if c == ' ' { 0x20 } else { Key::from_char(c).keysym }, Key::from_char(c), Mods::default()),
        }
    }

    fn enter(&mut self) {
        if let Some(f) = self.state.open_dropdown {
            let row = self.state.highlight;
            self.choose(f, row);
            self.state.open_dropdown = None;
            return;
        }
        if let Some(f) = self.state.focus
            && let Some(WidgetDef::Button(d)) = self.def(f)
        {
            if !d.disabled {
                self.activate(f);
            }
            return;
        }
        if let Some(b) = self.scene.screens.get(self.state.screen).and_then(|s| s.default_button) {
            self.activate(b);
        }
    }

    /// Tab order: the focusable widgets of the current screen, window by window, in file order.
    fn move_focus(&mut self, backward: bool) {
        self.state.open_dropdown = None;
        let Some(screen) = self.scene.screens.get(self.state.screen) else {
            return;
        };
        let order: Vec<usize> = screen
            .windows
            .iter()
            .flat_map(|w| w.widgets.iter().copied())
            .filter(|&i| self.scene.widgets[i].focusable())
            .collect();
        if order.is_empty() {
            return;
        }
        let n = order.len();
        let position = self.state.focus.and_then(|f| order.iter().position(|&i| i == f));
        let next = match (position, backward) {
            (None, false) => 0,
            (None, true) => n - 1,
            (Some(i), false) => (i + 1) % n,
            (Some(i), true) => (i + n - 1) % n,
        };
        let widget = order[next];
        self.state.focus = Some(widget);
        if let Some(edit) = self.edit(widget) {
            edit.select_all();
        }
        self.reveal(widget);
    }

    // ------------------------------------------------------------------------------------------------------
    // Widget actions and effects.

    /// The caret position under pixel `x` in a text field, as the field is drawn now (focused fields are
    /// shifted to keep their caret visible; unfocused ones show their start).
    fn field_index(&self, layout: &Layout, widget: usize, x: i32) -> Option<usize> {
        let (_, item) = layout.item(widget)?;
        let WidgetDef::TextField(d) = self.def(widget)? else {
            return None;
        };
        let Some(Value::Field(edit)) = self.state.values.get(widget) else {
            return None;
        };
        let display = field_display(&edit.text, d.password);
        let inner_w = item.control.w - 2 * layout::FIELD_PAD;
        let shift = if self.state.focus == Some(widget) { field_shift(&display, edit.caret, inner_w) } else { 0 };
        Some(field_index_at(&display, x - (item.control.x + layout::FIELD_PAD) + shift))
    }

    fn choose(&mut self, widget: usize, row: usize) {
        let options = match self.def(widget) {
            Some(WidgetDef::Dropdown(d) | WidgetDef::List(d)) => d.options.len(),
            _ => return,
        };
        if row < options
            && let Some(Value::Choice { selected, .. }) = self.state.values.get_mut(widget)
        {
            *selected = Some(row);
        }
    }

    fn toggle(&mut self, widget: usize) {
        if let Some(Value::Checked(on)) = self.state.values.get_mut(widget) {
            *on = !*on;
        }
    }

    /// A button is activated: recorded, then its effects run in order.
    pub fn activate(&mut self, widget: usize) {
        let scene = Arc::clone(&self.scene);
        let Some(WidgetDef::Button(def)) = scene.widgets.get(widget) else {
            return;
        };
        if def.disabled || scene.widget_screen.get(widget) != Some(&self.state.screen) {
            return;
        }
        self.state.clicked.push(def.id.clone());
        self.run(&def.on_click);
    }

    fn run(&mut self, effects: &[Effect]) {
        for effect in effects {
            match effect {
                Effect::Goto(id) => self.goto(id),
                Effect::Set(set) => self.set(set),
                Effect::If(def) => {
                    if self.eval(&def.when) {
                        self.run(&def.then);
                    } else {
                        self.run(&def.otherwise);
                    }
                }
                Effect::Reset(ids) => {
                    let targets: Vec<usize> = if ids.is_empty() {
                        (0..self.scene.widgets.len()).collect()
                    } else {
                        ids.iter().filter_map(|id| self.scene.widget(id)).collect()
                    };
                    for i in targets {
                        self.state.values[i] = Value::initial(&self.scene.widgets[i]);
                    }
                }
                Effect::Focus(id) => {
                    if let Some(i) = self.scene.widget(id)
                        && self.scene.widget_screen.get(i) == Some(&self.state.screen)
                    {
                        self.state.focus = Some(i);
                        if let Some(edit) = self.edit(i) {
                            edit.select_all();
                        }
                    }
                }
            }
        }
    }

    fn goto(&mut self, id: &str) {
        let Some(screen) = self.scene.screen_index(id) else {
            return;
        };
        self.state.screen = screen;
        self.state.open_dropdown = None;
        self.state.press = Press::None;
        self.state.focus = self.scene.screens[screen].focus;
        self.state.window_scroll = vec![0; self.scene.screens[screen].windows.len()];
        self.state.visited.push(id.to_string());
    }

    fn set(&mut self, set: &SetDef) {
        let Some(i) = self.scene.widget(&set.id) else {
            return;
        };
        let text = set.value.as_str().map(|t| display_text(&self.scene, &self.state, t));
        let value = match (&self.scene.widgets[i], &set.value) {
            (WidgetDef::Label(_), _) => text.map(Value::Label),
            (WidgetDef::TextField(_), _) => text.map(|t| Value::Field(TextEdit::new(&t))),
            (WidgetDef::TextBox(_), _) => text.map(|t| Value::TextBox { text: t, scroll: 0 }),
            (WidgetDef::Checkbox(_), serde_json::Value::Bool(on)) => Some(Value::Checked(*on)),
            (WidgetDef::Dropdown(d) | WidgetDef::List(d), v) => {
                let selected = v.as_str().and_then(|s| d.options.iter().position(|o| o == s));
                Some(Value::Choice { selected, scroll: 0 })
            }
            (WidgetDef::Slider(d), v) => v.as_i64().map(|n| Value::Slider(n.clamp(d.min, d.max))),
            _ => None,
        };
        if let Some(value) = value {
            self.state.values[i] = value;
        }
    }

    fn eval(&self, condition: &Condition) -> bool {
        let value = |id: &str| self.scene.widget(id).map(|i| self.text_of(i)).unwrap_or_default();
        match condition {
            Condition::Equals(t) => value(&t.field) == t.value,
            Condition::NotEquals(t) => value(&t.field) != t.value,
            Condition::Contains(t) => value(&t.field).contains(&t.value),
            Condition::Empty(id) => value(id).is_empty(),
            Condition::NotEmpty(id) => !value(id).is_empty(),
            Condition::Checked(id) => {
                matches!(self.scene.widget(id).and_then(|i| self.state.values.get(i)), Some(Value::Checked(true)))
            }
            Condition::All(list) => list.iter().all(|c| self.eval(c)),
            Condition::Any(list) => list.iter().any(|c| self.eval(c)),
            Condition::Not(inner) => !self.eval(inner),
        }
    }

    // ------------------------------------------------------------------------------------------------------
    // Reporting.

    pub fn report(&self) -> MockState {
        let scene = &self.scene;
        let mut report = MockState {
            scene: scene.name.clone(),
            screen: scene.screens.get(self.state.screen).map(|s| s.id.clone()).unwrap_or_default(),
            fields: BTreeMap::new(),
            checkboxes: BTreeMap::new(),
            selections: BTreeMap::new(),
            sliders: BTreeMap::new(),
            labels: BTreeMap::new(),
            scroll: BTreeMap::new(),
            clicked: self.state.clicked.clone(),
            screens_visited: self.state.visited.clone(),
            focused: self.state.focus.and_then(|f| scene.widgets.get(f)).and_then(|d| d.id()).map(str::to_string),
            pointer: self.state.pointer,
            actions_received: self.state.actions_received,
            size: self.size,
        };
        for (i, (def, value)) in scene.widgets.iter().zip(&self.state.values).enumerate() {
            let Some(id) = def.id().map(str::to_string) else {
                continue;
            };
            match value {
                Value::Label(text) => {
                    report.labels.insert(id, display_text(scene, &self.state, text));
                }
                Value::Field(edit) => {
                    report.fields.insert(id, edit.text.clone());
                }
                Value::Checked(on) => {
                    report.checkboxes.insert(id, *on);
                }
                Value::Choice { scroll, .. } => {
                    let text = self.text_of(i);
                    report.selections.insert(id.clone(), (!text.is_empty()).then_some(text));
                    if matches!(def, WidgetDef::List(_)) {
                        report.scroll.insert(id, *scroll);
                    }
                }
                Value::Slider(v) => {
                    report.sliders.insert(id, *v);
                }
                Value::TextBox { scroll, .. } => {
                    report.scroll.insert(id, *scroll);
                }
                Value::Nothing => {}
            }
        }
        report
    }
}

struct ScrollBar {
    track: Rect,
    content: i32,
    view: i32,
    scroll: i32,
}

/// The scrollbar track of a scrolling window body.
pub(crate) fn window_track(body: Rect) -> Rect {
    Rect::new(body.right() - SCROLLBAR_W - 3, body.y + 3, SCROLLBAR_W, body.h - 6)
}
