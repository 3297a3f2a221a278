//! agentd's key names (X keysyms, [`agentd_computer::Key`]) as enigo keys, the same on every platform.
//!
//! Named keys map to the enigo variants that exist on macOS, Windows and Linux alike (so a task means the
//! same key everywhere: `super`/`cmd`/`win` is enigo's `Meta`); a key with a character is enigo's
//! `Unicode`. On Linux every other keysym is passed through as `Other(keysym)` (enigo's x11rb backend takes
//! keysyms); elsewhere such a key (e.g. `Insert` on macOS) is a tool error naming it.

use agentd_computer::Key;
use enigo::Key as E;

use crate::error::PortableError;

/// Keysym → enigo key for the named keys every platform has.
const NAMED: &[(u32, E)] = &[
    (0xffe3, E::Control),
    (0xffe4, E::RControl),
    (0xffe1, E::Shift),
    (0xffe2, E::RShift),
    (0xffe9, E::Alt),
    (0xffea, E::Alt),
    (0xffeb, E::Meta),
    (0xffec, E::Meta),
    (0xff0d, E::Return),
    (0xff09, E::Tab),
    (0x20, E::Space),
    (0xff08, E::Backspace),
    (0xffff, E::Delete),
    (0xff1b, E::Escape),
    (0xff50, E::Home),
    (0xff57, E::End),
    (0xff55, E::PageUp),
    (0xff56, E::PageDown),
    (0xff51, E::LeftArrow),
    (0xff52, E::UpArrow),
    (0xff53, E::RightArrow),
    (0xff54, E::DownArrow),
    (0xffe5, E::CapsLock),
    (0xffbe, E::F1),
    (0xffbf, E::F2),
    (0xffc0, E::F3),
    (0xffc1, E::F4),
    (0xffc2, E::F5),
    (0xffc3, E::F6),
    (0xffc4, E::F7),
    (0xffc5, E::F8),
    (0xffc6, E::F9),
    (0xffc7, E::F10),
    (0xffc8, E::F11),
    (0xffc9, E::F12),
    (0xffca, E::F13),
    (0xffcb, E::F14),
    (0xffcc, E::F15),
    (0xffcd, E::F16),
    (0xffce, E::F17),
    (0xffcf, E::F18),
    (0xffd0, E::F19),
    (0xffd1, E::F20),
    (0xffb0, E::Numpad0),
    (0xffb1, E::Numpad1),
    (0xffb2, E::Numpad2),
    (0xffb3, E::Numpad3),
    (0xffb4, E::Numpad4),
    (0xffb5, E::Numpad5),
    (0xffb6, E::Numpad6),
    (0xffb7, E::Numpad7),
    (0xffb8, E::Numpad8),
    (0xffb9, E::Numpad9),
    (0xffab, E::Add),
    (0xffad, E::Subtract),
    (0xffaa, E::Multiply),
    (0xffaf, E::Divide),
    (0xffae, E::Decimal),
];

/// The enigo key for an agentd key name; an unknown name is a tool error naming it.
pub fn enigo_key(name: &str) -> Result<E, PortableError> {
    let key = Key::parse(name).map_err(|e| PortableError::Invalid(e.to_string()))?;
    if let Some((_, named)) = NAMED.iter().find(|(keysym, _)| *keysym == key.keysym) {
        return Ok(*named);
    }
    if let Some(c) = key.to_char() {
        return Ok(E::Unicode(c));
    }
    other_key(name, key)
}

/// On X every other keysym passes through: `KP_Enter` stays the keypad's Enter (an application can tell it
/// from Return), `KP_Add` the keypad's plus.
#[cfg(all(unix, not(target_os = "macos")))]
fn other_key(_name: &str, key: Key) -> Result<E, PortableError> {
    Ok(E::Other(key.keysym))
}

/// Elsewhere enigo has no keypad Enter: `KP_Enter` is Return there; other keys without an enigo name are
/// refused.
#[cfg(not(all(unix, not(target_os = "macos"))))]
fn other_key(name: &str, key: Key) -> Result<E, PortableError> {
    if key.keysym == 0xff8d {
        return Ok(E::Return);
    }
    Err(PortableError::Unsupported {
        action: "keypress",
        reason: format!("enigo has no key {name:?} on this platform"),
    })
}

/// The enigo keys for `names`, all checked before any is pressed.
pub fn enigo_keys(names: &[String]) -> Result<Vec<E>, PortableError> {
    names.iter().map(|name| enigo_key(name)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_the_keys_every_platform_has() {
        assert_eq!(enigo_key("ctrl").unwrap(), E::Control);
        assert_eq!(enigo_key("cmd").unwrap(), E::Meta);
        assert_eq!(enigo_key("super").unwrap(), E::Meta);
        assert_eq!(enigo_key("Enter").unwrap(), E::Return);
        assert_eq!(enigo_key("Page_Down").unwrap(), E::PageDown);
        assert_eq!(enigo_key("F12").unwrap(), E::F12);
        assert_eq!(enigo_key("a").unwrap(), E::Unicode('a'));
        assert_eq!(enigo_key("é").unwrap(), E::Unicode('é'));
        assert!(matches!(enigo_key("nosuchkey"), Err(PortableError::Invalid(m)) if m.contains("nosuchkey")));
    }

    #[cfg(all(unix, not(target_os = "macos")))]
    #[test]
    fn other_keysyms_pass_through_on_linux() {
        assert_eq!(enigo_key("Insert").unwrap(), E::Other(0xff63));
        // The keypad's Enter, not Return (measured: it arrived as Return when it was mapped to enigo's Return).
        assert_eq!(enigo_key("KP_Enter").unwrap(), E::Other(0xff8d));
    }
}
