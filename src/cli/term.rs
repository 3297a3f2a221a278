//! What the CLI knows about the terminal it prints to: whether a stream is one that a live view may redraw,
//! whether colour is allowed (`NO_COLOR`, [no-color.org](https://no-color.org)), its width, and the few ANSI
//! sequences the live views use (erase a line, move up, auto-wrap off and on, home, colours).
//!
//! Plain ANSI rather than a terminal crate: the views need four cursor sequences and five colours, every
//! terminal emulator in use understands them, and the decisions (is this a terminal, may it be coloured)
//! stay here in one place.

use std::io::IsTerminal;

/// Erase the line the cursor is on and go to its start.
pub const ERASE_LINE: &str = "\r\x1b[2K";
/// Move the cursor one line up.
pub const UP: &str = "\x1b[1A";
/// Turn the terminal's automatic line wrap off: a line longer than the screen is cut, not wrapped, so a
/// redrawn region always covers as many rows as it has lines.
pub const WRAP_OFF: &str = "\x1b[?7l";
/// Turn the automatic line wrap back on.
pub const WRAP_ON: &str = "\x1b[?7h";
/// Cursor to the top left corner.
pub const HOME: &str = "\x1b[H";
/// Erase from the cursor to the end of the line.
pub const ERASE_TO_EOL: &str = "\x1b[K";
/// Erase from the cursor to the end of the screen.
pub const ERASE_BELOW: &str = "\x1b[J";
/// Erase the whole screen.
pub const CLEAR_SCREEN: &str = "\x1b[2J";

/// `NO_COLOR` is set to something (an empty value is as if unset).
pub fn no_color() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}

/// Whether a view may redraw lines on `stream`: it is a terminal, and not one that says it cannot move its
/// cursor (`TERM=dumb`).
pub fn live(stream: &impl IsTerminal) -> bool {
    stream.is_terminal() && std::env::var("TERM").map_or(true, |term| term != "dumb")
}

/// The width of the terminal in columns: `$COLUMNS`, else 80 (Windows: no `TIOCGWINSZ` to ask).
#[cfg(not(unix))]
pub fn width(_fd: i32) -> usize {
    std::env::var("COLUMNS").ok().and_then(|c| c.trim().parse().ok()).filter(|&c| c > 0).unwrap_or(80)
}

/// The width of the terminal on file descriptor `fd` in columns: what the terminal says, else `$COLUMNS`,
/// else 80.
#[cfg(unix)]
pub fn width(fd: i32) -> usize {
    let mut size = libc::winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct it is given, which lives for the call.
    let rc = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut size) };
    if rc == 0 && size.ws_col > 0 {
        return usize::from(size.ws_col);
    }
    std::env::var("COLUMNS").ok().and_then(|c| c.trim().parse().ok()).filter(|&c| c > 0).unwrap_or(80)
}

/// Colours for text printed on one stream; without colour, every method returns the text as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    colour: bool,
}

impl Style {
    pub fn new(colour: bool) -> Self {
        Self { colour }
    }

    /// Colour on a terminal that can be redrawn, unless `NO_COLOR` says otherwise.
    pub fn for_stream(stream: &impl IsTerminal) -> Self {
        Self::new(live(stream) && !no_color())
    }

    pub fn colour(&self) -> bool {
        self.colour
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.colour && !text.is_empty() { format!("\x1b[{code}m{text}\x1b[0m") } else { text.to_string() }
    }

    pub fn bold(&self, text: &str) -> String {
        self.paint("1", text)
    }

    pub fn dim(&self, text: &str) -> String {
        self.paint("2", text)
    }

    pub fn red(&self, text: &str) -> String {
        self.paint("31", text)
    }

    pub fn green(&self, text: &str) -> String {
        self.paint("32", text)
    }

    pub fn yellow(&self, text: &str) -> String {
        self.paint("33", text)
    }

    pub fn cyan(&self, text: &str) -> String {
        self.paint("36", text)
    }
}

/// `text` cut to at most `width` characters, the last one `…` when it was cut.
pub fn truncate(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut out: String = text.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A duration as people read it on a progress line: `4.2s`, `1m05s`, `2h03m`.
pub fn elapsed(duration: std::time::Duration) -> String {
    let secs = duration.as_secs();
    match secs {
        0..60 => format!("{:.1}s", duration.as_secs_f64()),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, (secs % 3600) / 60),
    }
}

/// How long ago something happened, in the largest whole unit (as `kubectl get` shows ages): `12s`, `5m`,
/// `3h`, `4d`. A time in the future (a clock ahead of this one) is `0s`.
pub fn age(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn styles_paint_only_with_colour() {
        assert_eq!(Style::new(true).red("x"), "\x1b[31mx\x1b[0m");
        assert_eq!(Style::new(false).red("x"), "x");
        assert_eq!(Style::new(true).bold(""), "");
    }

    #[test]
    fn truncation_counts_characters() {
        assert_eq!(truncate("日本語です", 5), "日本語です");
        assert_eq!(truncate("日本語です", 4), "日本語…");
        assert_eq!(truncate("abc", 0), "…");
    }

    #[test]
    fn durations_and_ages_read_as_people_say_them() {
        assert_eq!(elapsed(Duration::from_millis(4210)), "4.2s");
        assert_eq!(elapsed(Duration::from_secs(65)), "1m05s");
        assert_eq!(elapsed(Duration::from_secs(7380)), "2h03m");
        assert_eq!(age(-5), "0s");
        assert_eq!(age(59), "59s");
        assert_eq!(age(60), "1m");
        assert_eq!(age(3 * 3600 + 10), "3h");
        assert_eq!(age(4 * 86400), "4d");
    }
}
