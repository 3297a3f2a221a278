//! Text printed for people on a terminal: control characters escaped.
//!
//! Whatever the CLI prints for humans may hold text it does not control — a model's words and summaries, an
//! upstream error body, a field name from a task file, a daemon's reply. A terminal acts on control
//! characters (ESC and CSI sequences recolour, move the cursor, set the window title, write the clipboard)
//! and bidirectional formatting characters reorder what is shown, so every human-facing print goes through
//! [`sanitize`] (one line: newlines are escaped too) or [`sanitize_lines`] (a multi-line message, whose
//! `\n` and `\t` are meant). Escapes look like Rust's: `\u{1b}`. `--json` output is left alone: it is JSON,
//! whose encoder escapes what a JSON reader needs.

use std::borrow::Cow;

/// `text` with every character a terminal would act on escaped, newlines and tabs included.
pub fn sanitize(text: &str) -> Cow<'_, str> {
    escape(text, false)
}

/// Like [`sanitize`], but keeps `\n` and `\t`: for messages of several lines.
pub fn sanitize_lines(text: &str) -> Cow<'_, str> {
    escape(text, true)
}

/// Control characters (C0, DEL, C1), bidirectional formatting characters (the embeddings, overrides and
/// isolates U+202A–U+202E and U+2066–U+2069, the marks U+200E, U+200F and U+061C), and the line and paragraph
/// separators U+2028/U+2029.
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}')
}

fn escape(text: &str, keep_lines: bool) -> Cow<'_, str> {
    let unsafe_char = |c: char| is_unsafe(c) && !(keep_lines && matches!(c, '\n' | '\t'));
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unsafe_char(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_bidi_are_escaped_and_plain_text_is_kept() {
        assert!(matches!(sanitize("Logged in as alice ✓ 日本"), Cow::Borrowed(_)));
        assert_eq!(sanitize("a\x1b[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(sanitize("\x1b]52;c;aGk=\x07"), "\\u{1b}]52;c;aGk=\\u{7}");
        assert_eq!(sanitize("x\u{9b}31m\u{7f}"), "x\\u{9b}31m\\u{7f}");
        assert_eq!(sanitize("\u{202e}txt.exe\u{2066}\u{200f}"), "\\u{202e}txt.exe\\u{2066}\\u{200f}");
        assert_eq!(sanitize("one\ntwo\r\tthree"), "one\\u{a}two\\u{d}\\u{9}three");
        assert_eq!(sanitize_lines("one\ntwo\r\tthree\x1b"), "one\ntwo\\u{d}\tthree\\u{1b}");
    }
}
