//! Key names as the computer-server expects them: its Linux handler passes a name to pynput, which knows
//! `Key` attribute names (`ctrl`, `shift`, `enter`, `page_down`, `f5`) and single characters. This module
//! maps agentd's keys (X keysyms, `agentd_computer::keys`) to those names; a key with no such name is a
//! tool error naming it, never a guess.

use agentd_computer::Key;

/// pynput's `Key` attribute name for a named keysym.
const NAMED: &[(u32, &str)] = &[
    (0xff08, "backspace"),
    (0xff09, "tab"),
    (0xff0d, "enter"),
    (0xff13, "pause"),
    (0xff14, "scroll_lock"),
    (0xff1b, "esc"),
    (0xff50, "home"),
    (0xff51, "left"),
    (0xff52, "up"),
    (0xff53, "right"),
    (0xff54, "down"),
    (0xff55, "page_up"),
    (0xff56, "page_down"),
    (0xff57, "end"),
    (0xff61, "print_screen"),
    (0xff63, "insert"),
    (0xff67, "menu"),
    (0xff7f, "num_lock"),
    (0xffe1, "shift"),
    (0xffe2, "shift_r"),
    (0xffe3, "ctrl"),
    (0xffe4, "ctrl_r"),
    (0xffe5, "caps_lock"),
    (0xffe7, "cmd"),
    (0xffe9, "alt"),
    (0xffea, "alt_r"),
    (0xffeb, "cmd"),
    (0xffec, "cmd_r"),
    (0xfe03, "alt_gr"),
    (0xffff, "delete"),
    (0x20, "space"),
];

/// The server's name for `key`, or `None` when it has none.
pub fn server_name(key: Key) -> Option<String> {
    if let Some((_, name)) = NAMED.iter().find(|(sym, _)| *sym == key.keysym) {
        return Some((*name).to_string());
    }
    if let 0xffbe..=0xffd1 = key.keysym {
        return Some(format!("f{}", key.keysym - 0xffbe + 1));
    }
    key.to_char().filter(|c| !c.is_control()).map(|c| c.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(key: &str) -> Option<String> {
        server_name(Key::parse(key).ok()?)
    }

    #[test]
    fn named_keys_characters_and_function_keys_map() {
        assert_eq!(name("ctrl").as_deref(), Some("ctrl"));
        assert_eq!(name("Return").as_deref(), Some("enter"));
        assert_eq!(name("BackSpace").as_deref(), Some("backspace"));
        assert_eq!(name("Page_Down").as_deref(), Some("page_down"));
        assert_eq!(name("F5").as_deref(), Some("f5"));
        assert_eq!(name("a").as_deref(), Some("a"));
        assert_eq!(name("slash").as_deref(), Some("/"));
        assert_eq!(name("é").as_deref(), Some("é"));
        assert_eq!(name("space").as_deref(), Some("space"));
        assert_eq!(name("KP_Enter"), None);
    }
}
