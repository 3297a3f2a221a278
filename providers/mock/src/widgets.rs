//! The run-time value of each widget and the editing rules of text fields.
//!
//! [`Value`] is what changes when a user acts (a field's text, a box's check, a chosen option, a slider
//! position, a scroll offset); the scene's [`WidgetDef`] is what does not. [`TextEdit`] is a single-line
//! editor with a caret and a selection, in character (not byte) positions, with the usual desktop rules.

use serde::{Deserialize, Serialize};

use crate::scene::WidgetDef;

/// A single-line text being edited: the text, the caret and the selection anchor (the selection runs from
/// `anchor` to `caret` when `anchor` is set and differs from it). Positions count characters.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub(crate) struct TextEdit {
    pub text: String,
    pub caret: usize,
    pub anchor: Option<usize>,
}

fn byte_index(text: &str, chars: usize) -> usize {
    text.char_indices().nth(chars).map_or(text.len(), |(i, _)| i)
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

impl TextEdit {
    pub fn new(text: &str) -> Self {
        let text = text.to_string();
        let caret = text.chars().count();
        Self { text, caret, anchor: None }
    }

    pub fn len(&self) -> usize {
        self.text.chars().count()
    }

    /// The selected range, ordered, when it is not empty.
    pub fn selection(&self) -> Option<(usize, usize)> {
        let anchor = self.anchor?;
        (anchor != self.caret).then(|| (anchor.min(self.caret), anchor.max(self.caret)))
    }

    pub fn selected_text(&self) -> Option<String> {
        let (a, b) = self.selection()?;
        Some(self.text.chars().skip(a).take(b - a).collect())
    }

    fn delete_range(&mut self, a: usize, b: usize) {
        let (ba, bb) = (byte_index(&self.text, a), byte_index(&self.text, b));
        self.text.replace_range(ba..bb, "");
        self.caret = a;
        self.anchor = None;
    }

    /// Deletes the selection; whether there was one.
    fn delete_selection(&mut self) -> bool {
        match self.selection() {
            Some((a, b)) => {
                self.delete_range(a, b);
                true
            }
            None => {
                self.anchor = None;
                false
            }
        }
    }

    /// Types `text` at the caret, replacing the selection; stops at `max_length` characters.
    pub fn insert(&mut self, text: &str, max_length: Option<usize>) {
        self.delete_selection();
        let room = max_length.map_or(usize::MAX, |max| max.saturating_sub(self.len()));
        let insert: String = text.chars().filter(|c| !c.is_control()).take(room).collect();
        let at = byte_index(&self.text, self.caret);
        self.text.insert_str(at, &insert);
        self.caret += insert.chars().count();
    }

    pub fn backspace(&mut self, word: bool) {
        if self.delete_selection() || self.caret == 0 {
            return;
        }
        let start = if word { self.word_start_before(self.caret) } else { self.caret - 1 };
        self.delete_range(start, self.caret);
    }

    pub fn delete(&mut self, word: bool) {
        if self.delete_selection() || self.caret >= self.len() {
            return;
        }
        let end = if word { self.word_end_after(self.caret) } else { self.caret + 1 };
        let caret = self.caret;
        self.delete_range(caret, end);
    }

    /// Moves the caret to `to`, extending the selection when `select`, else collapsing it.
    pub fn move_to(&mut self, to: usize, select: bool) {
        let to = to.min(self.len());
        if select {
            if self.anchor.is_none() {
                self.anchor = Some(self.caret);
            }
        } else {
            self.anchor = None;
        }
        self.caret = to;
    }

    pub fn left(&mut self, select: bool, word: bool) {
        if !select
            && !word
            && let Some((a, _)) = self.selection()
        {
            self.move_to(a, false);
            return;
        }
        let to = if word { self.word_start_before(self.caret) } else { self.caret.saturating_sub(1) };
        self.move_to(to, select);
    }

    pub fn right(&mut self, select: bool, word: bool) {
        if !select
            && !word
            && let Some((_, b)) = self.selection()
        {
            self.move_to(b, false);
            return;
        }
        let to = if word { self.word_end_after(self.caret) } else { self.caret + 1 };
        self.move_to(to, select);
    }

    pub fn select_all(&mut self) {
        self.anchor = Some(0);
        self.caret = self.len();
    }

    /// Selects the word (or run of spaces or punctuation) around position `at`.
    pub fn select_word_at(&mut self, at: usize) {
        let chars: Vec<char> = self.text.chars().collect();
        if chars.is_empty() {
            self.anchor = None;
            self.caret = 0;
            return;
        }
        let i = at.min(chars.len() - 1);
        let class = |c: char| {
            if is_word(c) {
                0
            } else if c.is_whitespace() {
                1
            } else {
                2
            }
        };
        let k = class(chars[i]);
        let mut a = i;
        while a > 0 && class(chars[a - 1]) == k {
            a -= 1;
        }
        let mut b = i + 1;
        while b < chars.len() && class(chars[b]) == k {
            b += 1;
        }
        self.anchor = Some(a);
        self.caret = b;
    }

    fn word_start_before(&self, from: usize) -> usize {
        let chars: Vec<char> = self.text.chars().collect();
        let mut i = from.min(chars.len());
        while i > 0 && !is_word(chars[i - 1]) {
            i -= 1;
        }
        while i > 0 && is_word(chars[i - 1]) {
            i -= 1;
        }
        i
    }

    fn word_end_after(&self, from: usize) -> usize {
        let chars: Vec<char> = self.text.chars().collect();
        let mut i = from.min(chars.len());
        while i < chars.len() && !is_word(chars[i]) {
            i += 1;
        }
        while i < chars.len() && is_word(chars[i]) {
            i += 1;
        }
        i
    }
}

/// The changing part of one widget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Value {
    /// A label's text (it may contain `${id}` references, expanded when drawn).
    Label(String),
    /// A text box's text and how far it is scrolled, in pixels.
    TextBox {
        text: String,
        scroll: i32,
    },
    Field(TextEdit),
    Checked(bool),
    /// The chosen option of a dropdown or list, and the scroll offset of the list (or the dropdown's popup).
    Choice {
        selected: Option<usize>,
        scroll: i32,
    },
    Slider(i64),
    /// Buttons, separators, column breaks.
    Nothing,
}

impl Value {
    /// A widget's value as the scene file declares it.
    pub fn initial(def: &WidgetDef) -> Value {
        match def {
            WidgetDef::Label(d) => Value::Label(d.text.clone()),
            WidgetDef::TextBox(d) => Value::TextBox { text: d.text.clone(), scroll: 0 },
            WidgetDef::TextField(d) => Value::Field(TextEdit::new(&d.value)),
            WidgetDef::Checkbox(d) => Value::Checked(d.checked),
            WidgetDef::Dropdown(d) | WidgetDef::List(d) => Value::Choice {
                selected: d.value.as_ref().and_then(|v| d.options.iter().position(|o| o == v)),
                scroll: 0,
            },
            WidgetDef::Slider(d) => Value::Slider(d.value.unwrap_or(d.min)),
            WidgetDef::Button(_) | WidgetDef::Separator(_) | WidgetDef::ColumnBreak(_) => Value::Nothing,
        }
    }

    /// Whether a saved value can belong to `def` (used when resuming saved state).
    pub fn fits(&self, def: &WidgetDef) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(&Value::initial(def))
    }

    /// The value as text, for conditions and `${id}` references: a field's text, a checkbox's `yes`/`no`,
    /// the chosen option (or empty), a slider's number.
    pub fn as_text(&self, def: &WidgetDef) -> String {
        match (self, def) {
            (Value::Label(text), _) | (Value::TextBox { text, .. }, _) => text.clone(),
            (Value::Field(edit), _) => edit.text.clone(),
            (Value::Checked(on), _) => if *on { "yes" } else { "no" }.to_string(),
            (Value::Choice { selected: Some(i), .. }, WidgetDef::Dropdown(d) | WidgetDef::List(d)) => {
                d.options.get(*i).cloned().unwrap_or_default()
            }
            (Value::Slider(v), _) => v.to_string(),
            _ => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typing_inserts_at_the_caret_and_replaces_the_selection() {
        let mut e = TextEdit::new("helo");
        e.left(false, false);
        e.insert("l", None);
        assert_eq!((e.text.as_str(), e.caret), ("hello", 4));
        e.select_all();
        e.insert("bye", None);
        assert_eq!(e.text, "bye");
        e.insert("€ü", Some(4));
        assert_eq!(e.text, "bye€");
    }

    #[test]
    fn deleting_by_character_word_and_selection() {
        let mut e = TextEdit::new("hello big world");
        e.backspace(false);
        assert_eq!(e.text, "hello big worl");
        e.backspace(true);
        assert_eq!(e.text, "hello big ");
        e.move_to(0, false);
        e.delete(false);
        assert_eq!(e.text, "ello big ");
        e.delete(true);
        assert_eq!(e.text, " big ");
        e.select_all();
        e.backspace(false);
        assert_eq!((e.text.as_str(), e.caret), ("", 0));
        e.backspace(false);
        e.delete(false);
        assert_eq!(e.text, "");
    }

    #[test]
    fn caret_motion_and_selection() {
        let mut e = TextEdit::new("one two");
        e.move_to(0, false);
        e.right(true, true);
        assert_eq!(e.selected_text().as_deref(), Some("one"));
        e.right(false, false);
        assert_eq!((e.caret, e.selection()), (3, None));
        e.move_to(99, true);
        assert_eq!(e.selected_text().as_deref(), Some(" two"));
        e.left(false, false);
        assert_eq!(e.caret, 3);
        e.select_word_at(5);
        assert_eq!(e.selected_text().as_deref(), Some("two"));
        e.select_word_at(3);
        assert_eq!(e.selected_text().as_deref(), Some(" "));
    }
}
