//! Input fidelity (issue 17): one table of cases — long and non-ASCII text (accents, CJK, emoji and ZWJ
//! sequences, right-to-left, combining marks), shifted symbols and shell-hostile characters, `\n` as Return
//! and `\t` as Tab, named keys and chords, every button, double and triple clicks, modifiers held during
//! clicks, drags and scrolls, horizontal and vertical scroll amounts, drags through intermediate points — run
//! by `agentd run` with the scripted model through every provider (local, VNC on x11vnc and on Xvnc,
//! computer-server, portable), each on a fresh X server of its own with the recording app
//! (`tests/apps/recorder.py`) on it. What the app recorded for each case is reduced to one line and compared
//! with the line the case intends; the step screenshot after each text case must show the entry changed (never
//! a stale frame). Each test prints its provider's table (case → exact / tool error / differs: how).
//! On VNC and computer-server a text case with characters outside the keyboard layout runs on a server of
//! its own: those servers keep what earlier text used up ([`fresh_server_for`]).
//!
//! A case a path cannot carry by its nature is listed in [`known_limit`] with the outcome measured for it (a
//! tool error agentd returns, or the exact difference the server makes), so the test fails when anything else
//! changes: a case that regresses, and a limit that goes away (then the table of docs/providers.md is out of date).
//!
//! Needs what `scripts/test` sets up (`AGENTD_TEST_DISPLAY` as the sign that Xvfb is there, x11vnc, Xvnc,
//! `AGENTD_TEST_CUA_PYTHON`); without them a test prints why it skips.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use agentd_local::testing::{self, Process, RecorderApp, XServer, desktop_env, layout};
use serde_json::{Value, json};

use crate::desktops::finish;
use crate::support::{Agentd, Run};

const WIDTH: u32 = 1280;
const HEIGHT: u32 = 800;

/// How the app's record of a case is reduced to one line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum View {
    /// The entry's text after the case, quoted.
    Text,
    /// The entry's text and the keys pressed (no modifiers), for `\n` and `\t`.
    TextKeys,
    /// The keys pressed, modifiers left out, as `keysym/state` (state only when not 0).
    Keys,
    /// Presses and releases (`c` for a press released at once in the same place: a click), multi-clicks and
    /// the drag's intermediate points, as `c1@x,y/state`, `double@x,y`, `via x,y b<buttons>/s<state>`;
    /// repeats as `×n`.
    Pointer,
}

struct Case {
    name: &'static str,
    actions: Vec<Value>,
    view: View,
    expect: String,
    /// The text a text case types (empty for the others).
    text: String,
    /// Points a drag must pass through (their motion events are shown).
    via: Vec<(i64, i64)>,
}

fn case(name: &'static str, view: View, actions: Vec<Value>, expect: impl Into<String>) -> Case {
    Case { name, actions, view, expect: expect.into(), text: String::new(), via: Vec::new() }
}

fn typed(name: &'static str, text: &str) -> Case {
    Case {
        text: text.to_string(),
        ..case(name, View::Text, vec![json!({"type": "type", "text": text})], format!("{text:?}"))
    }
}

fn keys(chords: &[&[&str]]) -> Vec<Value> {
    chords.iter().map(|chord| json!({"type": "keypress", "keys": chord})).collect()
}

const LONG: &str = "The quick brown fox jumps over the lazy dog 0123456789. ";
const ACCENTS: &str = "Grüße aus Köln: naïve café, 10 € — Ça va, señor Ñandú?";
const SHIFTED: &str = "~!@#$%^&*()_+{}|:\"<>? `-=[]\\;',./";
/// 30 distinct CJK characters, more than the X keymap's 19 empty keycodes.
const DISTINCT: &str = "一二三四五六七八九十百千万上下左右中大小山川日月火水木金土天";
const HOSTILE: &str = "$(rm -rf /tmp/x) ';\"`echo hi` \\$HOME && a || b > c < d | e %s %n";

/// The suite, in the order it runs.
fn cases() -> Vec<Case> {
    use View::*;
    let p = |x: i32, y: i32| json!({"x": x, "y": y});
    vec![
        typed("text: ASCII letters", "hello world"),
        typed("text: long (392 characters)", &LONG.repeat(7)),
        typed("text: shifted symbols", SHIFTED),
        typed("text: shell-hostile", HOSTILE),
        typed("text: accents (11 outside the layout)", ACCENTS),
        typed("text: CJK", "中文输入 日本語 한국어"),
        typed("text: right-to-left", "עברית العربية"),
        typed("text: emoji with skin tone", "ok 👍🏽 🎉"),
        typed("text: ZWJ sequence", "👨\u{200d}👩\u{200d}👧"),
        typed("text: combining marks", "e\u{301} a\u{308} n\u{303}"),
        typed("text: 30 distinct characters outside the layout", DISTINCT),
        case(
            "text: \\n as Return, \\t as Tab",
            TextKeys,
            vec![json!({"type": "type", "text": "ab\ncd\r\nef\t"})],
            r#""abcdef" | a b Return c d Return e f Tab"#,
        ),
        case(
            "keys: named keys",
            Keys,
            keys(&[
                &["Escape"],
                &["BackSpace"],
                &["Delete"],
                &["Insert"],
                &["Home"],
                &["End"],
                &["Page_Up"],
                &["pagedown"],
                &["Up"],
                &["Down"],
                &["Left"],
                &["Right"],
                &["F1"],
                &["F5"],
                &["F12"],
                &["space"],
                &["enter"],
                &["esc"],
            ]),
            "Escape BackSpace Delete Insert Home End Prior Next Up Down Left Right F1 F5 F12 space Return Escape",
        ),
        case("keys: keypad", Keys, keys(&[&["KP_Add"], &["KP_Enter"]]), "KP_Add KP_Enter"),
        case(
            "keys: chords",
            Keys,
            keys(&[
                &["ctrl", "a"],
                &["ctrl", "shift", "t"],
                &["alt", "f"],
                &["super", "e"],
                &["ctrl", "shift", "1"],
                &["ctrl", "alt", "Right"],
                &["shift", "F5"],
                &["shift", "Tab"],
            ]),
            "a/4 T/5 f/8 e/64 exclam/5 Right/12 F5/1 ISO_Left_Tab/1",
        ),
        case("click: left", Pointer, vec![json!({"type": "click", "x": 120, "y": 140})], "c1@120,140/0"),
        case(
            "click: right",
            Pointer,
            vec![json!({"type": "click", "x": 130, "y": 150, "button": "right"})],
            "c3@130,150/0",
        ),
        case(
            "click: middle",
            Pointer,
            vec![json!({"type": "click", "x": 140, "y": 160, "button": "middle"})],
            "c2@140,160/0",
        ),
        case(
            "click: back",
            Pointer,
            vec![json!({"type": "click", "x": 150, "y": 170, "button": "back"})],
            "c8@150,170/0",
        ),
        case(
            "click: forward",
            Pointer,
            vec![json!({"type": "click", "x": 160, "y": 180, "button": "forward"})],
            "c9@160,180/0",
        ),
        case(
            "click: double",
            Pointer,
            vec![json!({"type": "double_click", "x": 300, "y": 200})],
            "c1@300,200/0 double@300,200 c1@300,200/0",
        ),
        case(
            "click: triple",
            Pointer,
            vec![json!({"type": "triple_click", "x": 400, "y": 220})],
            "c1@400,220/0 double@400,220 c1@400,220/0 triple@400,220 c1@400,220/0",
        ),
        case(
            "click: shift held",
            Pointer,
            vec![json!({"type": "click", "x": 170, "y": 190, "keys": ["shift"]})],
            "c1@170,190/1",
        ),
        case(
            "click: ctrl+alt held, right button",
            Pointer,
            vec![json!({"type": "click", "x": 180, "y": 200, "button": "right", "keys": ["ctrl", "alt"]})],
            "c3@180,200/12",
        ),
        case(
            "click: super held, middle button",
            Pointer,
            vec![json!({"type": "click", "x": 190, "y": 210, "button": "middle", "keys": ["super"]})],
            "c2@190,210/64",
        ),
        Case {
            via: vec![(150, 220), (300, 260)],
            ..case(
                "drag: left through 2 intermediate points",
                Pointer,
                vec![json!({"type": "drag", "path": [p(60, 200), p(150, 220), p(300, 260), p(500, 350)]})],
                "p1@60,200/0 via 150,220 b1/s0 via 300,260 b1/s0 r1@500,350/0",
            )
        },
        Case {
            via: vec![(200, 320)],
            ..case(
                "drag: shift held",
                Pointer,
                vec![json!({"type": "drag", "path": [p(60, 300), p(200, 320), p(400, 380)], "keys": ["shift"]})],
                "p1@60,300/1 via 200,320 b1/s1 r1@400,380/1",
            )
        },
        Case {
            via: vec![(350, 250)],
            ..case(
                "drag: right button, ctrl held",
                Pointer,
                vec![json!({"type": "drag", "path": [p(300, 200), p(350, 250), p(450, 300)], "button": "right",
                            "keys": ["ctrl"]})],
                "p3@300,200/4 via 350,250 b4/s4 r3@450,300/4",
            )
        },
        Case {
            via: vec![(270, 310)],
            ..case(
                "drag: mouse_down with ctrl, move with shift, mouse_up",
                Pointer,
                vec![
                    json!({"type": "move", "x": 250, "y": 300}),
                    json!({"type": "mouse_down", "keys": ["ctrl"]}),
                    json!({"type": "move", "x": 270, "y": 310, "keys": ["shift"]}),
                    json!({"type": "mouse_up"}),
                ],
                "p1@250,300/4 via 270,310 b1/s5 r1@270,310/4",
            )
        },
        case(
            "scroll: down 300 px",
            Pointer,
            vec![json!({"type": "scroll", "x": 800, "y": 250, "scroll_y": 300})],
            "c5@800,250/0 ×3",
        ),
        case(
            "scroll: up 200 px",
            Pointer,
            vec![json!({"type": "scroll", "x": 800, "y": 250, "scroll_y": -200})],
            "c4@800,250/0 ×2",
        ),
        case(
            "scroll: right 200 px",
            Pointer,
            vec![json!({"type": "scroll", "x": 810, "y": 260, "scroll_x": 200})],
            "c5@810,260/1 ×2",
        ),
        case(
            "scroll: left 100 px",
            Pointer,
            vec![json!({"type": "scroll", "x": 820, "y": 270, "scroll_x": -100})],
            "c4@820,270/1",
        ),
        case(
            "scroll: down 100 and right 100",
            Pointer,
            vec![json!({"type": "scroll", "x": 830, "y": 280, "scroll_x": 100, "scroll_y": 100})],
            "c5@830,280/0 c5@830,280/1",
        ),
        case(
            "scroll: ctrl held, up 100 px",
            Pointer,
            vec![json!({"type": "scroll", "x": 840, "y": 290, "scroll_y": -100, "keys": ["ctrl"]})],
            "c4@840,290/4",
        ),
        case(
            "scroll: shift held, down 200 px",
            Pointer,
            vec![json!({"type": "scroll", "x": 850, "y": 300, "scroll_y": 200, "keys": ["shift"]})],
            "c5@850,300/1 ×2",
        ),
    ]
}

/// What one case came to on one provider.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Exact,
    /// agentd answered the action with a tool error (this message).
    ToolError(String),
    /// The app recorded something else (this line), or the screenshot after a text case did not change.
    Differs(String),
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exact => write!(f, "exact"),
            Self::ToolError(message) => write!(f, "tool error: {message}"),
            Self::Differs(how) => write!(f, "differs: {how}"),
        }
    }
}

/// A case a provider cannot carry by its nature, and the outcome measured for it.
enum Limit {
    /// agentd refuses the action with a tool error containing this.
    ToolError(&'static str),
    /// The app records exactly this line.
    Records(&'static str),
    /// The app records one of these lines (a path whose outcome depends on a race it has, named where used).
    RecordsOneOf(&'static [&'static str]),
    /// Typing through computer-server on X: within [`computer_server_typing`] (every ASCII character exact,
    /// in order and in place; characters outside the layout may come out as others outside it, or not at
    /// all; pynput's borrowed keycodes, docs/providers.md, "cua computer-server machines": Typing), and not exact.
    GarblesNonAscii,
    /// Exact, or the same presses and releases with some of the drag's intermediate points missed: x11vnc
    /// (its default `-pointer_mode 2`) eats queued pointer motion, and on a loaded machine it can fall a
    /// drag's 40 ms pause at a point behind (measured at load average 16 on 2 cores; exact when idle).
    MayMissDragPoints,
}

/// The providers the suite runs through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Local,
    X11vnc,
    Xvnc,
    ComputerServer,
    #[cfg_attr(not(feature = "portable"), allow(dead_code))]
    Portable,
}

/// The limits measured on each path (see the module docs and docs/providers.md, "Input fidelity per provider").
fn known_limit(route: Route, case: &str) -> Option<Limit> {
    use Route::*;
    match (route, case) {
        (X11vnc | Xvnc, "click: forward") => Some(Limit::ToolError("RFB has no forward mouse button (button 9)")),
        // Xvnc (TigerVNC 1.12) has a 7-button pointer and x11vnc passes buttons 1-5 only: back (8) is dropped.
        (X11vnc | Xvnc, "click: back") => Some(Limit::Records("")),
        // x11vnc drops the horizontal wheel (RFB buttons 6 and 7) too.
        (X11vnc, "scroll: right 200 px" | "scroll: left 100 px") => Some(Limit::Records("")),
        (X11vnc, "scroll: down 100 and right 100") => Some(Limit::Records("c5@830,280/0")),
        (X11vnc, name) if name.starts_with("drag: ") => Some(Limit::MayMissDragPoints),
        // x11vnc (its default -modtweak) lifts Shift for a keysym its keymap types without Shift: shift+F5
        // arrives as F5. Xvnc keeps it.
        (X11vnc, "keys: chords") => Some(Limit::Records("a/4 T/5 f/8 e/64 exclam/5 Right/12 F5 ISO_Left_Tab/1")),
        // The server's spare keycodes (18 on x11vnc, 19 on Xvnc) run out: later characters are dropped.
        (X11vnc, "text: 30 distinct characters outside the layout") => {
            Some(Limit::Records("\"一二三四五六七八九十百千万上下左右中\""))
        }
        (Xvnc, "text: 30 distinct characters outside the layout") => {
            Some(Limit::Records("\"一二三四五六七八九十百千万上下左右中大\""))
        }
        (ComputerServer, "click: back" | "click: forward") => Some(Limit::ToolError("computer-server has no")),
        (ComputerServer, "keys: keypad") => Some(Limit::ToolError("no name for the key \"KP_Add\"")),
        // pynput types a key with the modifier state it tracks itself, which has no Super: super+e is e.
        (ComputerServer, "keys: chords") => Some(Limit::Records("a/4 T/5 f/8 e exclam/5 Right/12 F5/1 ISO_Left_Tab/1")),
        (
            ComputerServer,
            "text: accents (11 outside the layout)"
            | "text: CJK"
            | "text: right-to-left"
            | "text: emoji with skin tone"
            | "text: ZWJ sequence"
            | "text: 30 distinct characters outside the layout",
        ) => Some(Limit::GarblesNonAscii),
        // pynput types a combining mark as a dead key, which takes the next character (the space) with it:
        // acute + space is ', diaeresis + space is ", and the last tilde is left pending. pynput puts each dead
        // key on the keycode it borrows, remapping it for the next one: when the app has not read the new
        // mapping by the time the key arrives (a loaded machine), the diaeresis is read as the acute again.
        (ComputerServer, "text: combining marks") => Some(Limit::RecordsOneOf(&[r#""e'a\"n""#, r#""e'a'n""#])),
        _ => None,
    }
}

/// Whether `outcome` (with the entry's text as recorded, for text cases) is what `limit` says the path does
/// with `case`.
fn within(limit: &Limit, case: &Case, outcome: &Outcome, text: Option<&str>) -> bool {
    match (limit, outcome) {
        (Limit::ToolError(part), Outcome::ToolError(message)) => message.contains(part),
        (Limit::Records(line), Outcome::Differs(got)) => got == line,
        (Limit::RecordsOneOf(lines), Outcome::Differs(got)) => lines.contains(&got.as_str()),
        (Limit::GarblesNonAscii, Outcome::Differs(_)) => {
            computer_server_typing(&case.text, text.unwrap_or_default()).is_ok()
        }
        (Limit::MayMissDragPoints, Outcome::Exact) => true,
        (Limit::MayMissDragPoints, Outcome::Differs(got)) => without_points(got) == without_points(&case.expect),
        _ => false,
    }
}

/// Whether `got` is what typing `intended` through cua's computer-server on X may give — the limit docs/providers.md
/// states ("cua computer-server machines", Typing) and every test of that path holds it to: every ASCII
/// character comes out exactly, in order and in place; a character outside the layout (any non-ASCII one)
/// may come out as another character outside it, or not at all (on a loaded machine more than one per text
/// was lost). `Err` says how `got` breaks it.
pub(crate) fn computer_server_typing(intended: &str, got: &str) -> Result<(), String> {
    // Each text as its ASCII characters and, around them, how many others stand in each gap (before the
    // first, between two, after the last).
    let split = |text: &str| {
        let mut ascii = Vec::new();
        let mut gaps = vec![0usize];
        for c in text.chars() {
            if c.is_ascii() {
                ascii.push(c);
                gaps.push(0);
            } else if let Some(last) = gaps.last_mut() {
                *last += 1;
            }
        }
        (ascii.into_iter().collect::<String>(), gaps)
    };
    let (intended_ascii, intended_gaps) = split(intended);
    let (got_ascii, got_gaps) = split(got);
    if got_ascii != intended_ascii {
        return Err(format!(
            "{got:?} for {intended:?}: the ASCII characters are {got_ascii:?}, not {intended_ascii:?}"
        ));
    }
    for (gap, (want, had)) in intended_gaps.iter().zip(&got_gaps).enumerate() {
        if had > want {
            return Err(format!(
                "{got:?} for {intended:?}: {had} characters outside the layout after ASCII character {gap}, where \
                 {want} were typed"
            ));
        }
    }
    Ok(())
}

/// A pointer line without its `via x,y b…/s…` and `missed via x,y` tokens.
fn without_points(line: &str) -> String {
    let mut kept = Vec::new();
    let mut words = line.split(' ');
    while let Some(word) = words.next() {
        match word {
            "via" | "missed" => {
                let _ = words.nth(1);
            }
            _ => kept.push(word),
        }
    }
    kept.join(" ")
}

/// The marker clicks around case `index`'s preparation: on the window's background above the entry (no widget
/// there, so they move no focus), at an x that names the case; the first (y 10) ends the record of the case
/// before, the second (y 15) starts this one's.
fn marker(index: usize) -> i64 {
    20 + 10 * index as i64
}

/// The turns: before each case, its first marker, the entry focused and emptied (ctrl+slash selects all in
/// Tk) and its second marker; then the case as one turn; a last marker turn ends the last case's record.
fn script(cases: &[&Case]) -> Value {
    let mut turns = Vec::new();
    for index in 0..=cases.len() {
        let x = marker(index);
        turns.push(json!({"say": format!("marker {index}"), "actions": [
            {"type": "click", "x": x, "y": 10},
            {"type": "click", "x": layout::ENTRY.0, "y": layout::ENTRY.1},
            {"type": "keypress", "keys": ["ctrl", "slash"]},
            {"type": "keypress", "keys": ["BackSpace"]},
            {"type": "click", "x": x, "y": 15}
        ]}));
        if let Some(case) = cases.get(index) {
            turns.push(json!({"say": case.name, "actions": case.actions}));
        }
    }
    turns.push(json!({"complete": {"success": true, "summary": "every case sent"}}));
    json!({ "turns": turns })
}

fn n(event: &Value, field: &str) -> i64 {
    event[field].as_i64().unwrap_or(-1)
}

fn is_marker(event: &Value) -> bool {
    event["event"] == "press" && event["where"] == "." && matches!(n(event, "y"), 10 | 15)
}

/// The recorded events of case `index`: after its second marker's release, up to the next first marker.
fn segment(events: &[Value], index: usize) -> Vec<Value> {
    let x = marker(index);
    let Some(start) = events.iter().position(|e| is_marker(e) && n(e, "x") == x && n(e, "y") == 15) else {
        return Vec::new();
    };
    let rest = &events[start + 1..];
    let rest = match rest.iter().position(|e| e["event"] == "release" && n(e, "x") == x) {
        Some(release) => &rest[release + 1..],
        None => rest,
    };
    let end = rest.iter().position(is_marker).unwrap_or(rest.len());
    rest[..end].to_vec()
}

const MODIFIER_KEYS: [&str; 12] = [
    "Shift_L",
    "Shift_R",
    "Control_L",
    "Control_R",
    "Alt_L",
    "Alt_R",
    "Meta_L",
    "Meta_R",
    "Super_L",
    "Super_R",
    "ISO_Level3_Shift",
    "Mode_switch",
];

/// Shift, Control, Mod1 (Alt) and Mod4 (Super) of an X state.
fn modifiers(event: &Value) -> i64 {
    n(event, "state") & (1 | 4 | 8 | 64)
}

fn key_line(events: &[Value], with_state: bool) -> String {
    events
        .iter()
        .filter(|e| e["event"] == "key")
        .filter_map(|e| {
            let keysym = e["keysym"].as_str()?;
            if MODIFIER_KEYS.contains(&keysym) {
                return None;
            }
            Some(match modifiers(e) {
                s if s != 0 && with_state => format!("{keysym}/{s}"),
                _ => keysym.to_string(),
            })
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn text_line(events: &[Value]) -> String {
    match events.iter().rev().find(|e| e["event"] == "text").and_then(|e| e["value"].as_str()) {
        Some(text) => format!("{text:?}"),
        None => "(no text)".to_string(),
    }
}

fn pointer_line(events: &[Value], via: &[(i64, i64)]) -> String {
    let mut tokens: Vec<String> = Vec::new();
    let mut seen_via = Vec::new();
    let mut i = 0;
    while i < events.len() {
        let e = &events[i];
        let (x, y) = (n(e, "x"), n(e, "y"));
        match e["event"].as_str().unwrap_or_default() {
            "press" => {
                let b = n(e, "button");
                let s = modifiers(e);
                let next = events[i + 1..].iter().find(|e| e["event"] != "motion");
                let released_at_once = next.is_some_and(|r| {
                    r["event"] == "release"
                        && n(r, "button") == b
                        && (n(r, "x"), n(r, "y")) == (x, y)
                        && modifiers(r) == s
                });
                if released_at_once {
                    tokens.push(format!("c{b}@{x},{y}/{s}"));
                    i = events[i + 1..].iter().position(|e| e["event"] == "release").map_or(i, |r| i + 1 + r);
                } else {
                    tokens.push(format!("p{b}@{x},{y}/{s}"));
                }
            }
            "release" => tokens.push(format!("r{}@{x},{y}/{}", n(e, "button"), modifiers(e))),
            "double" | "triple" => tokens.push(format!("{}@{x},{y}", e["event"].as_str().unwrap_or_default())),
            "motion" if via.contains(&(x, y)) && !seen_via.contains(&(x, y)) => {
                seen_via.push((x, y));
                tokens.push(format!("via {x},{y} b{}/s{}", n(e, "buttons"), modifiers(e)));
            }
            _ => {}
        }
        i += 1;
    }
    for point in via.iter().filter(|p| !seen_via.contains(p)) {
        tokens.push(format!("missed via {},{}", point.0, point.1));
    }
    // Repeats as ×n.
    let mut line: Vec<String> = Vec::new();
    let mut j = 0;
    while j < tokens.len() {
        let repeats = tokens[j..].iter().take_while(|t| **t == tokens[j]).count();
        line.push(if repeats > 1 { format!("{} ×{repeats}", tokens[j]) } else { tokens[j].clone() });
        j += repeats;
    }
    line.join(" ")
}

fn observe(case: &Case, events: &[Value]) -> String {
    match case.view {
        View::Text => text_line(events),
        View::TextKeys => format!("{} | {}", text_line(events), key_line(events, false)),
        View::Keys => key_line(events, true),
        View::Pointer => pointer_line(events, &case.via),
    }
}

/// A step's screenshot as RGB(A) rows, from the data directory.
fn screenshot(agentd: &Agentd, step: &Value) -> Option<(usize, usize, Vec<u8>)> {
    let key = step["screenshot"]["key"].as_str()?;
    let path =
        crate::support::files_under(&agentd.data_dir()).into_iter().find(|p| p.to_string_lossy().ends_with(key))?;
    let decoder = png::Decoder::new(std::io::Cursor::new(std::fs::read(path).ok()?));
    let mut reader = decoder.read_info().ok()?;
    let mut buf = vec![0; reader.output_buffer_size()?];
    let info = reader.next_frame(&mut buf).ok()?;
    buf.truncate(info.buffer_size());
    Some((info.width as usize, info.color_type.samples(), buf))
}

/// The recorder's entry (10,25)-(610,55) in a screenshot.
fn entry_pixels((width, channels, rgb): &(usize, usize, Vec<u8>)) -> Vec<u8> {
    (25..55).flat_map(|y| rgb[(y * width + 10) * channels..(y * width + 610) * channels].to_vec()).collect()
}

/// A desktop to run cases on: a fresh X server with the recording app, and the task's `computer`. `display`
/// is the `$DISPLAY` agentd runs with (the portable provider drives the session's own desktop).
struct Rig {
    computer: Value,
    display: Option<String>,
    app: RecorderApp,
    _x: XServer,
    _server: Option<Process>,
}

/// What one case came to: the outcome, the entry's text as recorded (text cases), and its record.
struct Measured {
    outcome: Outcome,
    text: Option<String>,
    events: Vec<Value>,
}

/// Plays `cases` as one `agentd run` on `rig` and measures each.
fn play(agentd: &Agentd, id: &str, rig: &Rig, cases: &[&Case]) -> Vec<Measured> {
    // The first turn waits a second: x11vnc watches the X screen only from about half a second after a
    // client connects (docs/providers.md, the VNC provider), and each run is a new connection.
    let mut turns = vec![json!({"say": "settle", "actions": [{"type": "wait", "duration_ms": 1000}]})];
    turns.extend(script(cases)["turns"].as_array().cloned().unwrap_or_default());
    let task = json!({
        "id": id,
        "instructions": "input fidelity cases on the recorder app",
        "computer": rig.computer,
        "model": {"provider": "scripted", "script": {"turns": turns}},
        "limits": {"max_steps": 2 * cases.len() + 10, "timeout_secs": 900},
        // The suite judges what the app records, not what the screen shows: the stuck-loop guard, which
        // judges a model by visible change, has nothing to judge in a script (on a loaded machine the app
        // redraws cases later than the settle's quiet time and ten of them in a row read as "stuck").
        "guard": {"no_change_steps": 0, "repeat_actions": 0, "idle_turns": 0, "wait_steps": 0}
    });
    let file = agentd.dir.path().join(format!("{id}.json"));
    std::fs::write(&file, serde_json::to_vec_pretty(&task).expect("task json")).expect("write task");
    let mut command = agentd.command();
    command.args(["run", "--json"]).arg(&file).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some(display) = &rig.display {
        command.env("DISPLAY", display);
    }
    let run: Run = finish(command.spawn().expect("spawn agentd"), Duration::from_secs(900));
    assert_eq!(run.code, 0, "agentd run failed:\nstdout: {}\nstderr: {}", run.stdout, run.stderr);
    let record = run.json();
    assert_eq!(record["state"], "succeeded", "{record:#}");
    let steps = record["steps"].as_array().cloned().unwrap_or_default();
    let last = marker(cases.len());
    let events = rig.app.wait_until(Duration::from_secs(15), |events| {
        events.iter().any(|e| is_marker(e) && n(e, "x") == last && n(e, "y") == 15)
    });
    cases
        .iter()
        .enumerate()
        .map(|(index, case)| {
            // Turn 0 settles, turn 2i+1 is the marker, 2i+2 the case; step n plays turn n, and its screenshot
            // is taken before it.
            let step = &steps[2 * index + 2];
            let error = step["results"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|r| r["ok"] == false)
                .map(|r| r["message"].as_str().unwrap_or_default().to_string());
            let events = segment(&events, index);
            let got = observe(case, &events);
            let mut outcome = match error {
                Some(message) => Outcome::ToolError(message),
                None if got == case.expect => Outcome::Exact,
                None => Outcome::Differs(got),
            };
            if outcome == Outcome::Exact && matches!(case.view, View::Text | View::TextKeys) {
                let before = screenshot(agentd, step).map(|s| entry_pixels(&s));
                let after = screenshot(agentd, &steps[2 * index + 3]).map(|s| entry_pixels(&s));
                if before.is_none() || before == after {
                    outcome = Outcome::Differs("the screenshot after the text shows the entry unchanged".into());
                }
            }
            let text = events.iter().rev().find(|e| e["event"] == "text").and_then(|e| e["value"].as_str());
            Measured { outcome, text: text.map(str::to_string), events }
        })
        .collect()
}

/// Runs every case through `route` on rigs from `start`, prints the route's table (markdown rows: route,
/// case, outcome, whether it is the known limit) and asserts each case is exact or its known limit. On VNC
/// each text case with characters outside the keyboard layout gets a fresh server (see [`fresh_server_for`]).
fn run_suite(route: Route, label: &str, start: impl Fn(&Path) -> Rig) {
    let agentd = Agentd::new();
    let cases = cases();
    let (alone, together): (Vec<&Case>, Vec<&Case>) = cases.iter().partition(|c| fresh_server_for(route, c));
    let mut measured: Vec<(&Case, Measured)> = Vec::new();
    let rig = start(&agentd.dir.path().join("rec.log"));
    measured.extend(together.iter().copied().zip(play(&agentd, "fidelity", &rig, &together)));
    drop(rig);
    for (i, case) in alone.iter().enumerate() {
        let rig = start(&agentd.dir.path().join(format!("rec-{i}.log")));
        measured.extend(std::iter::once(*case).zip(play(&agentd, &format!("fidelity-{i}"), &rig, &[case])));
    }
    measured.sort_by_key(|(case, _)| cases.iter().position(|c| c.name == case.name));

    let mut table = format!("input fidelity through {label}:\n");
    let mut wrong = Vec::new();
    for (case, m) in &measured {
        let verdict = match known_limit(route, case.name) {
            Some(limit) if within(&limit, case, &m.outcome, m.text.as_deref()) => match m.outcome {
                Outcome::Exact => "",
                _ => "known limit",
            },
            Some(_) => "NOT THE KNOWN LIMIT",
            None if m.outcome == Outcome::Exact => "",
            None => "UNEXPECTED",
        };
        if verdict.starts_with(char::is_uppercase) {
            wrong.push(format!("{}: {} (intended {})\n  record: {:?}", case.name, m.outcome, case.expect, m.events));
        }
        let fresh = if fresh_server_for(route, case) { " (fresh server)" } else { "" };
        table.push_str(&format!("| {label} | {}{fresh} | {} | {verdict} |\n", case.name, m.outcome));
    }
    println!("{table}");
    assert!(wrong.is_empty(), "{label}: cases off their expected outcome:\n{}", wrong.join("\n"));
}

/// Whether `case` runs on a server of its own: text with characters outside the keyboard layout, on VNC and
/// computer-server. A VNC server maps each such character onto a spare keycode of its own keymap and keeps it
/// there (measured: 18 on x11vnc, 19 on Xvnc, the empty keycodes of the default X keymap), and the
/// computer-server's pynput garbles them from the first few distinct ones of its session on (and leaves a
/// combining mark's dead key pending), so on one server the later cases would only measure what the earlier
/// ones used up; the case "text: 30 distinct characters" measures that.
fn fresh_server_for(route: Route, case: &Case) -> bool {
    matches!(route, Route::X11vnc | Route::Xvnc | Route::ComputerServer) && !case.text.is_ascii()
}

fn x_available() -> bool {
    desktop_env().is_some()
}

fn recorder(x: &XServer, log: &Path) -> RecorderApp {
    RecorderApp::start(&x.display, log).expect("recorder")
}

#[test]
fn local_delivers_every_case() {
    if !x_available() {
        return;
    }
    let _load = crate::support::timing_sensitive();
    run_suite(Route::Local, "local", |log| {
        let x = XServer::xvfb(WIDTH, HEIGHT).expect("Xvfb");
        let computer = json!({"provider": "local", "display": x.display});
        Rig { computer, display: None, app: recorder(&x, log), _x: x, _server: None }
    });
}

#[test]
fn x11vnc_delivers_every_case_or_its_known_limit() {
    if !x_available() {
        return;
    }
    let _load = crate::support::timing_sensitive();
    run_suite(Route::X11vnc, "vnc (x11vnc)", |log| {
        let x = XServer::xvfb(WIDTH, HEIGHT).expect("Xvfb");
        let port = testing::free_port().expect("port");
        let server = testing::x11vnc(&x.display, port, None).expect("x11vnc");
        let computer = json!({"provider": "vnc", "address": format!("127.0.0.1:{port}")});
        Rig { computer, display: None, app: recorder(&x, log), _x: x, _server: Some(server) }
    });
}

#[test]
fn xvnc_delivers_every_case_or_its_known_limit() {
    if !x_available() {
        return;
    }
    let _load = crate::support::timing_sensitive();
    run_suite(Route::Xvnc, "vnc (Xvnc)", |log| {
        let port = testing::free_port().expect("port");
        let x = XServer::xvnc(WIDTH, HEIGHT, port, None).expect("Xvnc");
        let computer = json!({"provider": "vnc", "address": format!("127.0.0.1:{port}")});
        Rig { computer, display: None, app: recorder(&x, log), _x: x, _server: None }
    });
}

#[test]
fn computer_server_delivers_every_case_or_its_known_limit() {
    let Some(python) = std::env::var("AGENTD_TEST_CUA_PYTHON").ok().filter(|v| !v.is_empty()) else {
        agentd_testenv::skip("AGENTD_TEST_CUA_PYTHON not set (scripts/test installs cua-computer-server and sets it)");
        return;
    };
    let _load = crate::support::timing_sensitive();
    run_suite(Route::ComputerServer, "computer-server", |log| {
        let x = XServer::xvfb(WIDTH, HEIGHT).expect("Xvfb");
        let port = testing::free_port().expect("port");
        let server = crate::cua::start_server(&python, &x.display, port);
        let computer = json!({"provider": "computer-server", "url": format!("http://127.0.0.1:{port}")});
        Rig { computer, display: None, app: recorder(&x, log), _x: x, _server: Some(server) }
    });
}

/// The portable provider drives the session's own desktop: `agentd` runs with `$DISPLAY` set to a fresh Xvfb
/// (enigo refuses an X server without an unused keycode).
#[cfg(feature = "portable")]
#[test]
fn portable_delivers_every_case() {
    if !x_available() {
        return;
    }
    let _load = crate::support::timing_sensitive();
    run_suite(Route::Portable, "portable", |log| {
        let x = XServer::xvfb(WIDTH, HEIGHT).expect("Xvfb");
        let display = Some(x.display.clone());
        Rig { computer: json!({"provider": "portable"}), display, app: recorder(&x, log), _x: x, _server: None }
    });
}

#[test]
fn the_views_reduce_a_record_to_one_line() {
    let events: Vec<Value> = [
        json!({"event": "press", "button": 1, "x": 5, "y": 6, "state": 16, "where": "pad"}),
        json!({"event": "release", "button": 1, "x": 5, "y": 6, "state": 272, "where": "pad"}),
        json!({"event": "press", "button": 5, "x": 5, "y": 6, "state": 0, "where": "pad"}),
        json!({"event": "release", "button": 5, "x": 5, "y": 6, "state": 0, "where": "pad"}),
        json!({"event": "press", "button": 5, "x": 5, "y": 6, "state": 0, "where": "pad"}),
        json!({"event": "release", "button": 5, "x": 5, "y": 6, "state": 0, "where": "pad"}),
        json!({"event": "press", "button": 3, "x": 1, "y": 2, "state": 1, "where": "pad"}),
        json!({"event": "motion", "x": 3, "y": 4, "buttons": 4, "state": 1}),
        json!({"event": "release", "button": 3, "x": 3, "y": 4, "state": 1, "where": "pad"}),
        json!({"event": "key", "keysym": "Control_L", "state": 0}),
        json!({"event": "key", "keysym": "T", "state": 5}),
        json!({"event": "text", "value": "a\"b"}),
    ]
    .into();
    assert_eq!(
        pointer_line(&events, &[(3, 4), (9, 9)]),
        "c1@5,6/0 c5@5,6/0 ×2 p3@1,2/1 via 3,4 b4/s1 r3@3,4/1 missed via 9,9"
    );
    assert_eq!(key_line(&events, true), "T/5");
    assert_eq!(text_line(&events), r#""a\"b""#);
    let case = typed("t", "aé");
    let differs = Outcome::Differs(String::new());
    assert!(within(&Limit::GarblesNonAscii, &case, &differs, Some("aö")));
    assert!(!within(&Limit::GarblesNonAscii, &case, &differs, Some("bé")));
    assert!(within(&Limit::GarblesNonAscii, &case, &differs, Some("a")), "a character outside the layout lost");
    assert!(!within(&Limit::GarblesNonAscii, &case, &differs, Some("é")), "an ASCII one lost");
    assert!(!within(&Limit::GarblesNonAscii, &case, &differs, Some("aéx")), "one more");
    assert!(!within(&Limit::GarblesNonAscii, &case, &Outcome::Exact, Some("aé")));
    let case = typed("t", "Grüße, Ça");
    assert!(within(&Limit::GarblesNonAscii, &case, &differs, Some("Grüe, —a")), "measured once on computer-server");
    assert!(!within(&Limit::GarblesNonAscii, &case, &differs, Some("Grüße Ça")), "the comma lost");
    assert!(within(&Limit::GarblesNonAscii, &case, &differs, Some("Grüe, a")), "two outside the layout lost");
    assert!(!within(&Limit::GarblesNonAscii, &case, &differs, Some("Grüe, ")), "the last ASCII one lost");
    assert!(!within(&Limit::GarblesNonAscii, &case, &differs, Some("Grüßße, Ça")), "one too many");
    assert_eq!(without_points("p1@1,2/1 via 3,4 b1/s1 missed via 5,6 r1@7,8/1"), "p1@1,2/1 r1@7,8/1");
}

#[test]
fn the_computer_server_typing_limit_fails_on_bad_output() {
    let ok = |intended: &str, got: &str| {
        if let Err(why) = computer_server_typing(intended, got) {
            panic!("{intended:?} typed as {got:?} is within the limit, but: {why}");
        }
    };
    let bad = |intended: &str, got: &str, why: &str| {
        assert!(computer_server_typing(intended, got).is_err(), "{intended:?} typed as {got:?} passed: {why}");
    };
    ok("Grüße aus Köln", "Grüße aus Köln");
    ok("Grüße aus Köln", "Grüße aus Küln");
    ok("Grüße aus Köln", "Grüe aus Köln");
    ok("naïve, 10 €", "naöve, 10 ö");
    // As measured on Xvfb with computer-server 0.3.46 (benches/results/input-fidelity-2026-11-24.md).
    ok("ok 👍🏽 🎉", "ok 👍🏽 🏽");
    ok("👨\u{200d}👩\u{200d}👧", "👨\u{200d}\u{200d}\u{200d}👧");
    ok("中文输入 日本語 한국어", "中文文入 日日語 한한어");
    ok("Grüße aus Köln", "Grüße aus Kln");
    // Measured in the soak with both cores busy (load average ~10): two lost in one text.
    ok("Grüße aus Köln: 10 (ok?) #42", "Grüe aus Kln: 10 (ok?) #42");
    bad("Grüße aus Köln", "Grüße aus Koln", "one came out as an ASCII character");
    bad("Grüße aus Köln", "Grüße aus Köl", "an ASCII character lost");
    bad("Grüße aus Köln", "Grüße aus Kölnn", "an ASCII character more");
    bad("Grüße aus Köln", "Grüße aus Kööln", "a character outside the layout more");
    bad("Grüße aus Köln", "Grüße aus Klön", "one moved past an ASCII character");
    bad("Grüße aus Köln", "Grüße Köln aus", "ASCII out of order");
    bad("Grüße aus Köln", "", "nothing typed");
}
