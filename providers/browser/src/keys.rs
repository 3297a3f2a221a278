//! X keysyms (the one key table of `agentd_computer::keys`) to the fields of a DevTools key event: the DOM
//! `key` (what the key means), the DOM `code` (which physical key, on a US keyboard), the Windows virtual
//! key code Chromium derives `keyCode` and its shortcuts from, the text the key types, and its location
//! (left or right modifier, keypad).

use agentd_computer::Key;

/// Modifier bits of DevTools input events: Alt=1, Ctrl=2, Meta/Command=4, Shift=8.
pub const ALT: u8 = 1;
pub const CTRL: u8 = 2;
pub const META: u8 = 4;
pub const SHIFT: u8 = 8;

/// DOM `KeyboardEvent.location`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    Standard,
    Left,
    Right,
    Keypad,
}

/// One key as a DevTools `Input.dispatchKeyEvent` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyDef {
    /// DOM `key`: `a`, `A`, `Enter`, `Shift`, `ArrowLeft`, `€`.
    pub key: String,
    /// DOM `code` of the US layout: `KeyA`, `Digit1`, `ShiftLeft`, `Numpad0`; empty for a character no
    /// key of the layout types.
    pub code: &'static str,
    /// Windows virtual key code (0 when the layout has no key for it).
    pub vk: u32,
    /// What the key types (`\r` for Enter), when it types something.
    pub text: Option<String>,
    pub location: Location,
    /// The modifier bit the key sets while it is down (0 for other keys).
    pub modifier: u8,
}

impl KeyDef {
    fn named(key: &str, code: &'static str, vk: u32) -> Self {
        Self { key: key.to_string(), code, vk, text: None, location: Location::Standard, modifier: 0 }
    }

    fn typing(mut self, text: &str) -> Self {
        self.text = Some(text.to_string());
        self
    }

    fn at(mut self, location: Location) -> Self {
        self.location = location;
        self
    }

    fn modifier(mut self, bit: u8) -> Self {
        self.modifier = bit;
        self
    }

    /// Whether this key is on the keypad.
    pub fn is_keypad(&self) -> bool {
        self.location == Location::Keypad
    }

    /// DevTools' `location` parameter (1 left, 2 right; the keypad is `isKeypad`).
    pub fn cdp_location(&self) -> u8 {
        match self.location {
            Location::Left => 1,
            Location::Right => 2,
            _ => 0,
        }
    }
}

/// The physical key of the US layout that types `c`, whether Shift is needed for it, and its virtual key
/// code. `None` for characters the layout has no key for.
pub fn us_key(c: char) -> Option<(&'static str, bool, u32)> {
    const LETTERS: [&str; 26] = [
        "KeyA", "KeyB", "KeyC", "KeyD", "KeyE", "KeyF", "KeyG", "KeyH", "KeyI", "KeyJ", "KeyK", "KeyL", "KeyM", "KeyN",
        "KeyO", "KeyP", "KeyQ", "KeyR", "KeyS", "KeyT", "KeyU", "KeyV", "KeyW", "KeyX", "KeyY", "KeyZ",
    ];
    const DIGITS: [&str; 10] =
        ["Digit0", "Digit1", "Digit2", "Digit3", "Digit4", "Digit5", "Digit6", "Digit7", "Digit8", "Digit9"];
    Some(match c {
        'a'..='z' => (LETTERS[(c as u8 - b'a') as usize], false, u32::from(c as u8 - b'a' + b'A')),
        'A'..='Z' => (LETTERS[(c as u8 - b'A') as usize], true, u32::from(c as u8)),
        '0'..='9' => (DIGITS[(c as u8 - b'0') as usize], false, u32::from(c as u8)),
        ' ' => ("Space", false, 32),
        ')' => ("Digit0", true, 48),
        '!' => ("Digit1", true, 49),
        '@' => ("Digit2", true, 50),
        '#' => ("Digit3", true, 51),
        '$' => ("Digit4", true, 52),
        '%' => ("Digit5", true, 53),
        '^' => ("Digit6", true, 54),
        '&' => ("Digit7", true, 55),
        '*' => ("Digit8", true, 56),
        '(' => ("Digit9", true, 57),
        ';' => ("Semicolon", false, 186),
        ':' => ("Semicolon", true, 186),
        '=' => ("Equal", false, 187),
        '+' => ("Equal", true, 187),
        ',' => ("Comma", false, 188),
        '<' => ("Comma", true, 188),
        '-' => ("Minus", false, 189),
        '_' => ("Minus", true, 189),
        '.' => ("Period", false, 190),
        '>' => ("Period", true, 190),
        '/' => ("Slash", false, 191),
        '?' => ("Slash", true, 191),
        '`' => ("Backquote", false, 192),
        '~' => ("Backquote", true, 192),
        '[' => ("BracketLeft", false, 219),
        '{' => ("BracketLeft", true, 219),
        '\\' => ("Backslash", false, 220),
        '|' => ("Backslash", true, 220),
        ']' => ("BracketRight", false, 221),
        '}' => ("BracketRight", true, 221),
        '\'' => ("Quote", false, 222),
        '"' => ("Quote", true, 222),
        _ => return None,
    })
}

/// The DevTools description of `key` (an X keysym). Every keysym has one: a character without a key on the
/// US layout is sent with its text and no code.
pub fn key_def(key: Key) -> KeyDef {
    use Location::{Keypad, Left, Right};
    let named = KeyDef::named;
    match key.keysym {
        0xffe1 => named("Shift", "ShiftLeft", 16).at(Left).modifier(SHIFT),
        0xffe2 => named("Shift", "ShiftRight", 16).at(Right).modifier(SHIFT),
        0xffe3 => named("Control", "ControlLeft", 17).at(Left).modifier(CTRL),
        0xffe4 => named("Control", "ControlRight", 17).at(Right).modifier(CTRL),
        0xffe9 => named("Alt", "AltLeft", 18).at(Left).modifier(ALT),
        0xffea => named("Alt", "AltRight", 18).at(Right).modifier(ALT),
        0xfe03 => named("AltGraph", "AltRight", 225).at(Right),
        0xffeb => named("Meta", "MetaLeft", 91).at(Left).modifier(META),
        0xffec => named("Meta", "MetaRight", 92).at(Right).modifier(META),
        0xffed => named("Hyper", "", 0),
        0xffe5 => named("CapsLock", "CapsLock", 20),
        0xff7f => named("NumLock", "NumLock", 144),
        0xff14 => named("ScrollLock", "ScrollLock", 145),
        0xff0d => named("Enter", "Enter", 13).typing("\r"),
        0xff0a => named("Enter", "Enter", 13).typing("\r"),
        0xff09 => named("Tab", "Tab", 9),
        // Shift+Tab as a keyboard reports it: the Tab key (the chord carries Shift).
        0xfe20 => named("Tab", "Tab", 9),
        0x20 => named(" ", "Space", 32).typing(" "),
        0xff08 => named("Backspace", "Backspace", 8),
        0xffff => named("Delete", "Delete", 46),
        0xff63 => named("Insert", "Insert", 45),
        0xff1b => named("Escape", "Escape", 27),
        0xff50 => named("Home", "Home", 36),
        0xff57 => named("End", "End", 35),
        0xff58 => named("Clear", "", 12),
        0xff55 => named("PageUp", "PageUp", 33),
        0xff56 => named("PageDown", "PageDown", 34),
        0xff51 => named("ArrowLeft", "ArrowLeft", 37),
        0xff52 => named("ArrowUp", "ArrowUp", 38),
        0xff53 => named("ArrowRight", "ArrowRight", 39),
        0xff54 => named("ArrowDown", "ArrowDown", 40),
        0xff61 => named("PrintScreen", "PrintScreen", 44),
        0xff15 => named("PrintScreen", "PrintScreen", 44),
        0xff13 => named("Pause", "Pause", 19),
        0xff6b => named("Pause", "Pause", 19),
        0xff67 => named("ContextMenu", "ContextMenu", 93),
        0xff6a => named("Help", "Help", 47),
        0xff69 => named("Cancel", "", 3),
        0xff65 => named("Undo", "Undo", 0),
        0xff66 => named("Redo", "", 0),
        0xff68 => named("Find", "Find", 0),
        0xff0b => named("Clear", "NumpadClear", 12),
        k @ 0xffbe..=0xffd5 => {
            let n = k - 0xffbe + 1;
            KeyDef { key: format!("F{n}"), ..named("", F_CODES[(n - 1) as usize], 111 + n) }
        }
        // F25…F35 have no DOM code or virtual key.
        k @ 0xffd6..=0xffe0 => KeyDef { key: format!("F{}", k - 0xffbe + 1), ..named("", "", 0) },
        k @ 0xffb0..=0xffb9 => {
            let d = k - 0xffb0;
            let digit = char::from_digit(d, 10).unwrap_or('0').to_string();
            KeyDef { key: digit.clone(), text: Some(digit), ..named("", NUMPAD[d as usize], 96 + d) }.at(Keypad)
        }
        0xff8d => named("Enter", "NumpadEnter", 13).typing("\r").at(Keypad),
        0xff80 => named(" ", "Space", 32).typing(" ").at(Keypad),
        0xff89 => named("Tab", "Tab", 9).at(Keypad),
        0xffbd => named("=", "NumpadEqual", 187).typing("=").at(Keypad),
        0xffaa => named("*", "NumpadMultiply", 106).typing("*").at(Keypad),
        0xffab => named("+", "NumpadAdd", 107).typing("+").at(Keypad),
        0xffac => named(",", "NumpadComma", 108).typing(",").at(Keypad),
        0xffad => named("-", "NumpadSubtract", 109).typing("-").at(Keypad),
        0xffae => named(".", "NumpadDecimal", 110).typing(".").at(Keypad),
        0xffaf => named("/", "NumpadDivide", 111).typing("/").at(Keypad),
        // The keypad's keys with Num Lock off.
        0xff95 => named("Home", "Numpad7", 36).at(Keypad),
        0xff96 => named("ArrowLeft", "Numpad4", 37).at(Keypad),
        0xff97 => named("ArrowUp", "Numpad8", 38).at(Keypad),
        0xff98 => named("ArrowRight", "Numpad6", 39).at(Keypad),
        0xff99 => named("ArrowDown", "Numpad2", 40).at(Keypad),
        0xff9a => named("PageUp", "Numpad9", 33).at(Keypad),
        0xff9b => named("PageDown", "Numpad3", 34).at(Keypad),
        0xff9c => named("End", "Numpad1", 35).at(Keypad),
        0xff9d => named("Clear", "Numpad5", 12).at(Keypad),
        0xff9e => named("Insert", "Numpad0", 45).at(Keypad),
        0xff9f => named("Delete", "NumpadDecimal", 46).at(Keypad),
        0x1008ff12 => named("AudioVolumeMute", "AudioVolumeMute", 173),
        0x1008ff11 => named("AudioVolumeDown", "AudioVolumeDown", 174),
        0x1008ff13 => named("AudioVolumeUp", "AudioVolumeUp", 175),
        0x1008ff14 => named("MediaPlayPause", "MediaPlayPause", 179),
        0x1008ff15 => named("MediaStop", "MediaStop", 178),
        0x1008ff16 => named("MediaTrackPrevious", "MediaTrackPrevious", 177),
        0x1008ff17 => named("MediaTrackNext", "MediaTrackNext", 176),
        0x1008ff26 => named("BrowserBack", "BrowserBack", 166),
        0x1008ff27 => named("BrowserForward", "BrowserForward", 167),
        0x1008ff29 => named("BrowserRefresh", "BrowserRefresh", 168),
        0x1008ff1b => named("BrowserSearch", "BrowserSearch", 170),
        0x1008ff18 => named("BrowserHome", "BrowserHome", 172),
        0x1008ff19 => named("LaunchMail", "LaunchMail", 180),
        _ => match key.to_char() {
            Some(c) => {
                let text = c.to_string();
                match us_key(c) {
                    Some((code, _, vk)) => KeyDef { key: text.clone(), text: Some(text), ..named("", code, vk) },
                    None => KeyDef { key: text.clone(), text: Some(text), ..named("", "", 0) },
                }
            }
            None => named("Unidentified", "", 0),
        },
    }
}

const F_CODES: [&str; 24] = [
    "F1", "F2", "F3", "F4", "F5", "F6", "F7", "F8", "F9", "F10", "F11", "F12", "F13", "F14", "F15", "F16", "F17",
    "F18", "F19", "F20", "F21", "F22", "F23", "F24",
];

const NUMPAD: [&str; 10] =
    ["Numpad0", "Numpad1", "Numpad2", "Numpad3", "Numpad4", "Numpad5", "Numpad6", "Numpad7", "Numpad8", "Numpad9"];

#[cfg(test)]
mod tests {
    use super::*;

    fn def(name: &str) -> KeyDef {
        key_def(Key::parse(name).unwrap_or_else(|e| panic!("{name}: {e}")))
    }

    #[test]
    fn characters_are_their_us_keys() {
        let a = def("a");
        assert_eq!((a.key.as_str(), a.code, a.vk, a.text.as_deref()), ("a", "KeyA", 65, Some("a")));
        let bang = def("!");
        assert_eq!((bang.key.as_str(), bang.code, bang.vk), ("!", "Digit1", 49));
        let euro = def("€");
        assert_eq!((euro.key.as_str(), euro.code, euro.vk, euro.text.as_deref()), ("€", "", 0, Some("€")));
        assert_eq!(us_key('T'), Some(("KeyT", true, 84)));
        assert_eq!(us_key('"'), Some(("Quote", true, 222)));
        assert_eq!(us_key('é'), None);
    }

    #[test]
    fn named_keys_and_modifiers() {
        let enter = def("enter");
        assert_eq!(
            (enter.key.as_str(), enter.code, enter.vk, enter.text.as_deref()),
            ("Enter", "Enter", 13, Some("\r"))
        );
        let shift = def("Shift_R");
        assert_eq!(
            (shift.key.as_str(), shift.code, shift.modifier, shift.cdp_location()),
            ("Shift", "ShiftRight", SHIFT, 2)
        );
        assert_eq!(def("cmd").code, "MetaLeft");
        assert_eq!(def("ctrl").modifier, CTRL);
        assert_eq!(def("alt").modifier, ALT);
        assert_eq!(def("super").modifier, META);
        let f12 = def("F12");
        assert_eq!((f12.key.as_str(), f12.code, f12.vk), ("F12", "F12", 123));
        assert_eq!(def("F24").vk, 135);
        assert_eq!(def("Page_Up").key, "PageUp");
        assert_eq!(def("Next").key, "PageDown");
        assert_eq!(def("esc").code, "Escape");
    }

    #[test]
    fn keypad_keys_are_on_the_keypad() {
        let zero = def("KP_0");
        assert_eq!((zero.key.as_str(), zero.code, zero.vk), ("0", "Numpad0", 96));
        assert!(zero.is_keypad());
        let add = def("KP_Add");
        assert_eq!((add.key.as_str(), add.code, add.text.as_deref()), ("+", "NumpadAdd", Some("+")));
        let enter = def("KP_Enter");
        assert_eq!((enter.key.as_str(), enter.code), ("Enter", "NumpadEnter"));
    }

    #[test]
    fn every_named_key_of_the_table_has_a_dom_key() {
        for name in [
            "ctrl",
            "shift",
            "alt",
            "super",
            "return",
            "tab",
            "space",
            "backspace",
            "delete",
            "insert",
            "escape",
            "home",
            "end",
            "pageup",
            "pagedown",
            "left",
            "up",
            "right",
            "down",
            "print",
            "pause",
            "menu",
            "F1",
            "F35",
            "KP_Enter",
            "KP_Home",
            "mute",
            "browserback",
            "caps_lock",
            "num_lock",
            "scroll_lock",
        ] {
            let d = def(name);
            assert!(!d.key.is_empty() && d.key != "Unidentified", "{name}: {d:?}");
        }
    }
}
