//! Key names to X keysyms: the one table every provider shares.
//!
//! Models name keys the way xdotool does (`Return`, `ctrl`, `Page_Down`, `KP_0`, `super`) or the way people
//! write them (`Enter`, `Esc`, `cmd`, `PageDown`, `ArrowLeft`). [`Key::parse`] accepts all of them,
//! case-insensitively, and returns an X keysym — the value XTest, RFB `KeyEvent` and the mock desktop all take,
//! so the local and VNC providers cannot disagree about what a name means. A single character names itself
//! (its case is kept: `A` is the keysym for capital A). Keysyms follow X11's `keysymdef.h`; characters outside
//! Latin-1 use the Unicode keysym range (`0x0100_0000 + code point`).

use thiserror::Error;

/// One key, as an X keysym.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    pub keysym: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KeyError {
    #[error(
        "unknown key name {0:?} (use X keysym names such as Return, ctrl, alt, super, Page_Down, F5, KP_0, or a single character)"
    )]
    Unknown(String),
    #[error("empty key name")]
    Empty,
}

/// Named keys: (lower-case alias, keysym). The first alias of a keysym is not special; [`Key::name`] uses
/// [`CANONICAL`] for the display name.
const NAMED: &[(&str, u32)] = &[
    // Modifiers.
    ("ctrl", 0xffe3),
    ("control", 0xffe3),
    ("control_l", 0xffe3),
    ("ctrl_l", 0xffe3),
    ("lctrl", 0xffe3),
    ("control_r", 0xffe4),
    ("ctrl_r", 0xffe4),
    ("rctrl", 0xffe4),
    ("shift", 0xffe1),
    ("shift_l", 0xffe1),
    ("lshift", 0xffe1),
    ("shift_r", 0xffe2),
    ("rshift", 0xffe2),
    ("alt", 0xffe9),
    ("option", 0xffe9),
    ("opt", 0xffe9),
    ("alt_l", 0xffe9),
    ("lalt", 0xffe9),
    ("alt_r", 0xffea),
    ("ralt", 0xffea),
    ("altgr", 0xfe03),
    ("iso_level3_shift", 0xfe03),
    ("super", 0xffeb),
    ("super_l", 0xffeb),
    ("cmd", 0xffeb),
    ("command", 0xffeb),
    ("meta", 0xffeb),
    ("meta_l", 0xffeb),
    ("win", 0xffeb),
    ("windows", 0xffeb),
    ("lsuper", 0xffeb),
    ("super_r", 0xffec),
    ("meta_r", 0xffec),
    ("rsuper", 0xffec),
    ("hyper", 0xffed),
    ("hyper_l", 0xffed),
    ("caps_lock", 0xffe5),
    ("capslock", 0xffe5),
    ("num_lock", 0xff7f),
    ("numlock", 0xff7f),
    ("scroll_lock", 0xff14),
    ("scrolllock", 0xff14),
    // Editing and navigation.
    ("return", 0xff0d),
    ("enter", 0xff0d),
    ("ret", 0xff0d),
    ("linefeed", 0xff0a),
    ("tab", 0xff09),
    ("iso_left_tab", 0xfe20),
    ("space", 0x20),
    ("spacebar", 0x20),
    ("backspace", 0xff08),
    ("back_space", 0xff08),
    ("bksp", 0xff08),
    ("delete", 0xffff),
    ("del", 0xffff),
    ("insert", 0xff63),
    ("ins", 0xff63),
    ("escape", 0xff1b),
    ("esc", 0xff1b),
    ("home", 0xff50),
    ("end", 0xff57),
    ("begin", 0xff58),
    ("page_up", 0xff55),
    ("pageup", 0xff55),
    ("pgup", 0xff55),
    ("prior", 0xff55),
    ("page_down", 0xff56),
    ("pagedown", 0xff56),
    ("pgdn", 0xff56),
    ("next", 0xff56),
    ("left", 0xff51),
    ("arrowleft", 0xff51),
    ("arrow_left", 0xff51),
    ("up", 0xff52),
    ("arrowup", 0xff52),
    ("arrow_up", 0xff52),
    ("right", 0xff53),
    ("arrowright", 0xff53),
    ("arrow_right", 0xff53),
    ("down", 0xff54),
    ("arrowdown", 0xff54),
    ("arrow_down", 0xff54),
    ("print", 0xff61),
    ("printscreen", 0xff61),
    ("print_screen", 0xff61),
    ("prtsc", 0xff61),
    ("sys_req", 0xff15),
    ("sysrq", 0xff15),
    ("pause", 0xff13),
    ("break", 0xff6b),
    ("menu", 0xff67),
    ("apps", 0xff67),
    ("contextmenu", 0xff67),
    ("help", 0xff6a),
    ("cancel", 0xff69),
    ("undo", 0xff65),
    ("redo", 0xff66),
    ("find", 0xff68),
    ("clear", 0xff0b),
    // Keypad.
    ("kp_enter", 0xff8d),
    ("kp_space", 0xff80),
    ("kp_tab", 0xff89),
    ("kp_equal", 0xffbd),
    ("kp_multiply", 0xffaa),
    ("kp_add", 0xffab),
    ("kp_separator", 0xffac),
    ("kp_subtract", 0xffad),
    ("kp_decimal", 0xffae),
    ("kp_divide", 0xffaf),
    ("kp_home", 0xff95),
    ("kp_left", 0xff96),
    ("kp_up", 0xff97),
    ("kp_right", 0xff98),
    ("kp_down", 0xff99),
    ("kp_prior", 0xff9a),
    ("kp_page_up", 0xff9a),
    ("kp_next", 0xff9b),
    ("kp_page_down", 0xff9b),
    ("kp_end", 0xff9c),
    ("kp_begin", 0xff9d),
    ("kp_insert", 0xff9e),
    ("kp_delete", 0xff9f),
    // Punctuation by X keysym name.
    ("exclam", 0x21),
    ("quotedbl", 0x22),
    ("numbersign", 0x23),
    ("dollar", 0x24),
    ("percent", 0x25),
    ("ampersand", 0x26),
    ("apostrophe", 0x27),
    ("quoteright", 0x27),
    ("parenleft", 0x28),
    ("parenright", 0x29),
    ("asterisk", 0x2a),
    ("plus", 0x2b),
    ("comma", 0x2c),
    ("minus", 0x2d),
    ("period", 0x2e),
    ("slash", 0x2f),
    ("colon", 0x3a),
    ("semicolon", 0x3b),
    ("less", 0x3c),
    ("equal", 0x3d),
    ("greater", 0x3e),
    ("question", 0x3f),
    ("at", 0x40),
    ("bracketleft", 0x5b),
    ("backslash", 0x5c),
    ("bracketright", 0x5d),
    ("asciicircum", 0x5e),
    ("underscore", 0x5f),
    ("grave", 0x60),
    ("quoteleft", 0x60),
    ("backtick", 0x60),
    ("braceleft", 0x7b),
    ("bar", 0x7c),
    ("braceright", 0x7d),
    ("asciitilde", 0x7e),
    ("tilde", 0x7e),
    // Media and browser keys (XF86 keysyms).
    ("xf86audiomute", 0x1008ff12),
    ("mute", 0x1008ff12),
    ("audiomute", 0x1008ff12),
    ("xf86audiolowervolume", 0x1008ff11),
    ("volumedown", 0x1008ff11),
    ("audiovolumedown", 0x1008ff11),
    ("xf86audioraisevolume", 0x1008ff13),
    ("volumeup", 0x1008ff13),
    ("audiovolumeup", 0x1008ff13),
    ("xf86audioplay", 0x1008ff14),
    ("mediaplaypause", 0x1008ff14),
    ("xf86audiostop", 0x1008ff15),
    ("xf86audioprev", 0x1008ff16),
    ("mediaprevioustrack", 0x1008ff16),
    ("xf86audionext", 0x1008ff17),
    ("medianexttrack", 0x1008ff17),
    ("xf86back", 0x1008ff26),
    ("browserback", 0x1008ff26),
    ("xf86forward", 0x1008ff27),
    ("browserforward", 0x1008ff27),
    ("xf86refresh", 0x1008ff29),
    ("browserrefresh", 0x1008ff29),
    ("xf86search", 0x1008ff1b),
    ("xf86homepage", 0x1008ff18),
    ("xf86mail", 0x1008ff19),
];

/// Display names (X keysym names) for the named keysyms.
const CANONICAL: &[(u32, &str)] = &[
    (0xffe3, "Control_L"),
    (0xffe4, "Control_R"),
    (0xffe1, "Shift_L"),
    (0xffe2, "Shift_R"),
    (0xffe9, "Alt_L"),
    (0xffea, "Alt_R"),
    (0xfe03, "ISO_Level3_Shift"),
    (0xffeb, "Super_L"),
    (0xffec, "Super_R"),
    (0xffed, "Hyper_L"),
    (0xffe5, "Caps_Lock"),
    (0xff7f, "Num_Lock"),
    (0xff14, "Scroll_Lock"),
    (0xff0d, "Return"),
    (0xff0a, "Linefeed"),
    (0xff09, "Tab"),
    (0xfe20, "ISO_Left_Tab"),
    (0x20, "space"),
    (0xff08, "BackSpace"),
    (0xffff, "Delete"),
    (0xff63, "Insert"),
    (0xff1b, "Escape"),
    (0xff50, "Home"),
    (0xff57, "End"),
    (0xff58, "Begin"),
    (0xff55, "Prior"),
    (0xff56, "Next"),
    (0xff51, "Left"),
    (0xff52, "Up"),
    (0xff53, "Right"),
    (0xff54, "Down"),
    (0xff61, "Print"),
    (0xff15, "Sys_Req"),
    (0xff13, "Pause"),
    (0xff6b, "Break"),
    (0xff67, "Menu"),
    (0xff6a, "Help"),
    (0xff69, "Cancel"),
    (0xff65, "Undo"),
    (0xff66, "Redo"),
    (0xff68, "Find"),
    (0xff0b, "Clear"),
    (0xff8d, "KP_Enter"),
    (0xff80, "KP_Space"),
    (0xff89, "KP_Tab"),
    (0xffbd, "KP_Equal"),
    (0xffaa, "KP_Multiply"),
    (0xffab, "KP_Add"),
    (0xffac, "KP_Separator"),
    (0xffad, "KP_Subtract"),
    (0xffae, "KP_Decimal"),
    (0xffaf, "KP_Divide"),
    (0xff95, "KP_Home"),
    (0xff96, "KP_Left"),
    (0xff97, "KP_Up"),
    (0xff98, "KP_Right"),
    (0xff99, "KP_Down"),
    (0xff9a, "KP_Prior"),
    (0xff9b, "KP_Next"),
    (0xff9c, "KP_End"),
    (0xff9d, "KP_Begin"),
    (0xff9e, "KP_Insert"),
    (0xff9f, "KP_Delete"),
    (0x1008ff12, "XF86AudioMute"),
    (0x1008ff11, "XF86AudioLowerVolume"),
    (0x1008ff13, "XF86AudioRaiseVolume"),
    (0x1008ff14, "XF86AudioPlay"),
    (0x1008ff15, "XF86AudioStop"),
    (0x1008ff16, "XF86AudioPrev"),
    (0x1008ff17, "XF86AudioNext"),
    (0x1008ff26, "XF86Back"),
    (0x1008ff27, "XF86Forward"),
    (0x1008ff29, "XF86Refresh"),
    (0x1008ff1b, "XF86Search"),
    (0x1008ff18, "XF86HomePage"),
    (0x1008ff19, "XF86Mail"),
];

pub const SHIFT: Key = Key { keysym: 0xffe1 };
pub const CONTROL: Key = Key { keysym: 0xffe3 };
pub const ALT: Key = Key { keysym: 0xffe9 };
pub const SUPER: Key = Key { keysym: 0xffeb };
pub const RETURN: Key = Key { keysym: 0xff0d };
pub const TAB: Key = Key { keysym: 0xff09 };
pub const BACKSPACE: Key = Key { keysym: 0xff08 };
pub const DELETE: Key = Key { keysym: 0xffff };
pub const ESCAPE: Key = Key { keysym: 0xff1b };

impl Key {
    /// Parses one key name (see the module docs for what is accepted).
    pub fn parse(name: &str) -> Result<Key, KeyError> {
        if name.is_empty() {
            return Err(KeyError::Empty);
        }
        let mut chars = name.chars();
        if let (Some(c), None) = (chars.next(), chars.next()) {
            return Ok(Key::from_char(c));
        }
        let lower = name.to_ascii_lowercase();
        if let Some((_, keysym)) = NAMED.iter().find(|(alias, _)| *alias == lower) {
            return Ok(Key { keysym: *keysym });
        }
        if let Some(n) = lower.strip_prefix('f').and_then(|n| n.parse::<u32>().ok())
            && (1..=35).contains(&n)
        {
            return Ok(Key { keysym: 0xffbe + n - 1 });
        }
        if let Some(n) = lower.strip_prefix("kp_").and_then(|n| n.parse::<u32>().ok())
            && n <= 9
        {
            return Ok(Key { keysym: 0xffb0 + n });
        }
        if let Some(hex) = lower.strip_prefix("u+").or_else(|| lower.strip_prefix("0x"))
            && let Ok(code) = u32::from_str_radix(hex, 16)
            && let Some(c) = char::from_u32(code)
        {
            return Ok(Key::from_char(c));
        }
        Err(KeyError::Unknown(name.to_string()))
    }

    /// The keysym that types `c`.
    pub fn from_char(c: char) -> Key {
        let code = c as u32;
        let keysym = match c {
            '\n' | '\r' => 0xff0d,
            '\t' => 0xff09,
            '\u{8}' => 0xff08,
            '\u{1b}' => 0xff1b,
            _ if (0x20..=0x7e).contains(&code) || (0xa0..=0xff).contains(&code) => code,
            _ => 0x0100_0000 + code,
        };
        Key { keysym }
    }

    /// The character this key types, when it is a printable character key.
    pub fn to_char(&self) -> Option<char> {
        match self.keysym {
            k @ (0x20..=0x7e | 0xa0..=0xff) => char::from_u32(k),
            k @ 0x0100_0000..=0x0110_ffff => char::from_u32(k - 0x0100_0000),
            0xffb0..=0xffb9 => char::from_digit(self.keysym - 0xffb0, 10),
            _ => None,
        }
    }

    pub fn is_modifier(&self) -> bool {
        matches!(self.keysym, 0xffe1..=0xffee | 0xfe03)
    }

    /// The X keysym name (`Return`, `Control_L`, `F5`), or the character itself for character keys.
    pub fn name(&self) -> String {
        if let Some((_, name)) = CANONICAL.iter().find(|(k, _)| *k == self.keysym) {
            return (*name).to_string();
        }
        match self.keysym {
            k @ 0xffbe..=0xffe0 => format!("F{}", k - 0xffbe + 1),
            k @ 0xffb0..=0xffb9 => format!("KP_{}", k - 0xffb0),
            _ => match self.to_char() {
                Some(c) => c.to_string(),
                None => format!("0x{:x}", self.keysym),
            },
        }
    }
}

/// Digits and punctuation of the US layout and what they type with Shift held.
const US_SHIFTED: &[(char, char)] = &[
    ('1', '!'),
    ('2', '@'),
    ('3', '#'),
    ('4', '$'),
    ('5', '%'),
    ('6', '^'),
    ('7', '&'),
    ('8', '*'),
    ('9', '('),
    ('0', ')'),
    ('-', '_'),
    ('=', '+'),
    ('[', '{'),
    (']', '}'),
    ('\\', '|'),
    (';', ':'),
    ('\'', '"'),
    (',', '<'),
    ('.', '>'),
    ('/', '?'),
    ('`', '~'),
];

impl Key {
    /// Whether this is a Shift key (left or right).
    pub fn is_shift(&self) -> bool {
        matches!(self.keysym, 0xffe1 | 0xffe2)
    }

    /// The keysym this key produces while Shift is held, as a keyboard would report it: a letter its capital
    /// (`t` → `T`, `é` → `É`), Tab `ISO_Left_Tab`, a digit or punctuation mark its shifted symbol on the US
    /// layout (`1` → `!`, `-` → `_`). Every other key (already shifted symbols, function keys, arrows,
    /// modifiers, keypad) is itself.
    pub fn shifted(&self) -> Key {
        if self.keysym == TAB.keysym {
            return Key { keysym: 0xfe20 };
        }
        let Some(c) = self.to_char().filter(|_| !(0xffb0..=0xffb9).contains(&self.keysym)) else {
            return *self;
        };
        if let Some((_, shifted)) = US_SHIFTED.iter().find(|(plain, _)| *plain == c) {
            return Key::from_char(*shifted);
        }
        let mut upper = c.to_uppercase();
        match (upper.next(), upper.next()) {
            (Some(u), None) if u != c => Key::from_char(u),
            _ => *self,
        }
    }
}

/// The keys of a chord as a keyboard — and every VNC viewer — sends them: when a Shift key is among them, every
/// other key is sent as its [`Key::shifted`] keysym (`ctrl+shift+t` is Control, Shift, `T`). Servers that map
/// keysyms to keycodes (x11vnc, Xvnc) otherwise type the unshifted keysym they were given by lifting Shift or
/// faking Caps Lock, and the application sees the chord without Shift.
pub fn chord_keys(keys: &[Key]) -> Vec<Key> {
    if keys.iter().any(Key::is_shift) { keys.iter().map(Key::shifted).collect() } else { keys.to_vec() }
}

/// Splits an xdotool-style chord (`ctrl+shift+t`, `ctrl++`) into key names.
pub fn split_chord(chord: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut current = String::new();
    for c in chord.trim().chars() {
        if c == '+' && !current.is_empty() {
            keys.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    if !current.is_empty() {
        keys.push(current);
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(name: &str) -> u32 {
        Key::parse(name).unwrap_or_else(|e| panic!("{name}: {e}")).keysym
    }

    #[test]
    fn aliases_are_case_insensitive_and_agree() {
        assert_eq!(sym("ctrl"), 0xffe3);
        assert_eq!(sym("Control"), 0xffe3);
        assert_eq!(sym("CTRL"), 0xffe3);
        assert_eq!(sym("alt"), sym("Option"));
        for alias in ["super", "cmd", "Meta", "win", "Super_L"] {
            assert_eq!(sym(alias), 0xffeb, "{alias}");
        }
        assert_eq!(sym("enter"), sym("Return"));
        assert_eq!(sym("esc"), sym("Escape"));
        assert_eq!(sym("pageup"), sym("Page_Up"));
        assert_eq!(sym("PageDown"), sym("Next"));
        assert_eq!(sym("ArrowLeft"), sym("Left"));
        assert_eq!(sym("BackSpace"), 0xff08);
    }

    #[test]
    fn function_and_keypad_keys() {
        assert_eq!(sym("f1"), 0xffbe);
        assert_eq!(sym("F12"), 0xffc9);
        assert_eq!(sym("F24"), 0xffd5);
        assert_eq!(sym("KP_0"), 0xffb0);
        assert_eq!(sym("kp_9"), 0xffb9);
        assert_eq!(sym("KP_Enter"), 0xff8d);
        assert!(Key::parse("F36").is_err());
        assert!(Key::parse("KP_10").is_err());
    }

    #[test]
    fn characters_name_themselves() {
        assert_eq!(sym("a"), 0x61);
        assert_eq!(sym("A"), 0x41);
        assert_eq!(sym("é"), 0xe9);
        assert_eq!(sym("€"), 0x0100_20ac);
        assert_eq!(sym("U+20AC"), 0x0100_20ac);
        assert_eq!(Key::from_char('€').to_char(), Some('€'));
        assert_eq!(Key::from_char('\n'), Key::parse("Return").unwrap());
    }

    #[test]
    fn unknown_names_are_errors_that_name_the_key() {
        let err = Key::parse("hyperdrive").unwrap_err();
        assert!(err.to_string().contains("\"hyperdrive\""));
        assert_eq!(Key::parse(""), Err(KeyError::Empty));
    }

    #[test]
    fn display_names_and_modifiers() {
        assert_eq!(Key::parse("enter").unwrap().name(), "Return");
        assert_eq!(Key::parse("f5").unwrap().name(), "F5");
        assert_eq!(Key::parse("x").unwrap().name(), "x");
        assert!(Key::parse("shift").unwrap().is_modifier());
        assert!(!Key::parse("a").unwrap().is_modifier());
    }

    #[test]
    fn every_alias_parses() {
        for (alias, keysym) in NAMED {
            assert_eq!(sym(alias), *keysym, "{alias}");
            assert_eq!(sym(&alias.to_uppercase()), *keysym, "{alias}");
        }
    }

    #[test]
    fn shift_gives_the_shifted_keysym() {
        let shifted = |name: &str| Key::parse(name).unwrap().shifted().name();
        assert_eq!(shifted("t"), "T");
        assert_eq!(shifted("T"), "T");
        assert_eq!(shifted("Tab"), "ISO_Left_Tab");
        assert_eq!(shifted("1"), "!");
        assert_eq!(shifted("-"), "_");
        assert_eq!(shifted("slash"), "?");
        assert_eq!(shifted("\\"), "|");
        assert_eq!(shifted("'"), "\"");
        assert_eq!(shifted("é"), "É");
        assert_eq!(shifted("ß"), "ß", "no single-character capital");
        for same in ["F5", "Left", "Return", "ctrl", "shift", "KP_1", "!", "space"] {
            assert_eq!(Key::parse(same).unwrap().shifted(), Key::parse(same).unwrap(), "{same}");
        }
    }

    #[test]
    fn chords_with_shift_send_shifted_keys() {
        let chord = |names: &[&str]| {
            let keys: Vec<Key> = names.iter().map(|n| Key::parse(n).unwrap()).collect();
            chord_keys(&keys).iter().map(Key::name).collect::<Vec<_>>()
        };
        assert_eq!(chord(&["ctrl", "shift", "t"]), ["Control_L", "Shift_L", "T"]);
        assert_eq!(chord(&["shift", "Tab"]), ["Shift_L", "ISO_Left_Tab"]);
        assert_eq!(chord(&["ctrl", "alt", "Shift_R", "r"]), ["Control_L", "Alt_L", "Shift_R", "R"]);
        assert_eq!(chord(&["ctrl", "t"]), ["Control_L", "t"], "no Shift, no change");
        assert_eq!(chord(&["shift", "1"]), ["Shift_L", "!"]);
    }

    #[test]
    fn chords_split_on_plus() {
        assert_eq!(split_chord("ctrl+shift+t"), vec!["ctrl", "shift", "t"]);
        assert_eq!(split_chord("ctrl++"), vec!["ctrl", "+"]);
        assert_eq!(split_chord("Return"), vec!["Return"]);
        assert_eq!(split_chord("+"), vec!["+"]);
    }
}
