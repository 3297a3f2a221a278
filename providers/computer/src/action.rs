//! The action vocabulary: one enum every provider executes and every model adapter maps to.
//!
//! Coordinates are integer pixels of the screen as the provider reports it, never of a scaled image; the
//! agent loop converts model coordinates before an action reaches this type's consumers. [`Action::validate`]
//! is the single place that decides whether an action can be attempted on a screen of a given size; its
//! errors are meant to go back to the model as tool errors, never to end a task.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::keys::{Key, KeyError};

/// A pixel position on the screen. Signed so that a model's negative coordinate is a validation error the
/// model can read, not a parse failure of the whole turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Point {
    pub x: i32,
    pub y: i32,
}

impl Point {
    pub const fn new(x: i32, y: i32) -> Self {
        Self { x, y }
    }
}

/// A size in pixels (of a screen or of an image).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Size {
    pub width: u32,
    pub height: u32,
}

impl Size {
    pub const fn new(width: u32, height: u32) -> Self {
        Self { width, height }
    }

    /// Whether `point` lies on a screen of this size.
    pub fn contains(&self, point: Point) -> bool {
        point.x >= 0 && point.y >= 0 && (point.x as i64) < self.width as i64 && (point.y as i64) < self.height as i64
    }

    pub fn area(&self) -> u64 {
        u64::from(self.width) * u64::from(self.height)
    }
}

impl std::fmt::Display for Size {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.width, self.height)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MouseButton {
    #[default]
    Left,
    Right,
    Middle,
    Back,
    Forward,
}

impl MouseButton {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Left => "left",
            Self::Right => "right",
            Self::Middle => "middle",
            Self::Back => "back",
            Self::Forward => "forward",
        }
    }

    /// The X11 / RFB button number (1-based: left, middle, right; 8 and 9 for back and forward).
    pub fn x11_button(&self) -> u8 {
        match self {
            Self::Left => 1,
            Self::Middle => 2,
            Self::Right => 3,
            Self::Back => 8,
            Self::Forward => 9,
        }
    }
}

/// One action of docs/task-file.md, in its JSON form (`{"type": "click", "x": 10, "y": 20}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Action {
    Click {
        x: i32,
        y: i32,
        #[serde(default, skip_serializing_if = "is_left")]
        button: MouseButton,
        /// Modifier keys held during the click.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        keys: Vec<String>,
    },
    DoubleClick {
        x: i32,
        y: i32,
    },
    TripleClick {
        x: i32,
        y: i32,
    },
    /// Presses `button` where the pointer is; `keys` stay held until the matching `mouse_up` (docs/task-file.md).
    MouseDown {
        #[serde(default, skip_serializing_if = "is_left")]
        button: MouseButton,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        keys: Vec<String>,
    },
    MouseUp {
        #[serde(default, skip_serializing_if = "is_left")]
        button: MouseButton,
    },
    Move {
        x: i32,
        y: i32,
        /// Modifier keys held down for the whole action (docs/task-file.md).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        keys: Vec<String>,
    },
    /// Presses `button` (default left) at the path's first point, moves through the others, releases.
    Drag {
        path: Vec<Point>,
        #[serde(default, skip_serializing_if = "is_left")]
        button: MouseButton,
        /// Modifier keys held down for the whole action (docs/task-file.md).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        keys: Vec<String>,
    },
    /// Scroll amounts are pixels; positive `scroll_y` scrolls down, positive `scroll_x` scrolls right.
    Scroll {
        x: i32,
        y: i32,
        #[serde(default)]
        scroll_x: i32,
        #[serde(default)]
        scroll_y: i32,
        /// Modifier keys held down for the whole action (docs/task-file.md).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        keys: Vec<String>,
    },
    Type {
        text: String,
    },
    /// One chord: every key pressed in order, then released in reverse order.
    Keypress {
        keys: Vec<String>,
    },
    HoldKey {
        keys: Vec<String>,
        duration_ms: u64,
    },
    Wait {
        duration_ms: u64,
    },
    Screenshot {},
    CursorPosition {},
    /// A close-up of the screen region from (x1, y1) to (x2, y2), both inclusive corners.
    Zoom {
        x1: i32,
        y1: i32,
        x2: i32,
        y2: i32,
    },
    /// Opens `url` in the page shown (browser computers; the others refuse it as a tool error).
    Navigate {
        url: String,
    },
    /// One page back in the shown page's history (browser computers).
    Back {},
    /// One page forward in the shown page's history (browser computers).
    Forward {},
    /// Loads the page shown again (browser computers).
    Reload {},
}

fn is_left(button: &MouseButton) -> bool {
    *button == MouseButton::Left
}

/// `,ctrl+shift` for a summary, or nothing.
fn with_keys(keys: &[String]) -> String {
    if keys.is_empty() { String::new() } else { format!(",{}", keys.join("+")) }
}

/// Longest `hold_key` / `wait` an action may ask for; a model asking for more gets a tool error.
pub const MAX_DURATION_MS: u64 = 60_000;
/// Longest text a single `type` action may carry.
pub const MAX_TYPE_CHARS: usize = 10_000;
/// Most points a drag path may have.
pub const MAX_DRAG_POINTS: usize = 1_000;
/// Longest URL a `navigate` action may carry.
pub const MAX_URL_BYTES: usize = 8_192;

/// Why an action cannot be attempted. Its `Display` is written for the model to read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ActionError {
    #[error("coordinate ({x}, {y}) is off the screen ({size}); valid x is 0..{}, y is 0..{}", size.width.saturating_sub(1), size.height.saturating_sub(1))]
    OffScreen { x: i32, y: i32, size: Size },
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error("{0}")]
    Invalid(String),
}

impl Action {
    /// The action's `type` tag as it appears in JSON.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Click { .. } => "click",
            Self::DoubleClick { .. } => "double_click",
            Self::TripleClick { .. } => "triple_click",
            Self::MouseDown { .. } => "mouse_down",
            Self::MouseUp { .. } => "mouse_up",
            Self::Move { .. } => "move",
            Self::Drag { .. } => "drag",
            Self::Scroll { .. } => "scroll",
            Self::Type { .. } => "type",
            Self::Keypress { .. } => "keypress",
            Self::HoldKey { .. } => "hold_key",
            Self::Wait { .. } => "wait",
            Self::Screenshot {} => "screenshot",
            Self::CursorPosition {} => "cursor_position",
            Self::Zoom { .. } => "zoom",
            Self::Navigate { .. } => "navigate",
            Self::Back {} => "back",
            Self::Forward {} => "forward",
            Self::Reload {} => "reload",
        }
    }

    /// Whether this is one of the browser's page actions (`navigate`, `back`, `forward`, `reload`), which only
    /// a browser computer performs.
    pub fn is_navigation(&self) -> bool {
        matches!(self, Self::Navigate { .. } | Self::Back {} | Self::Forward {} | Self::Reload {})
    }

    /// Every screen position this action names, in order.
    pub fn points(&self) -> Vec<Point> {
        match self {
            Self::Click { x, y, .. }
            | Self::DoubleClick { x, y }
            | Self::TripleClick { x, y }
            | Self::Move { x, y, .. }
            | Self::Scroll { x, y, .. } => vec![Point::new(*x, *y)],
            Self::Drag { path, .. } => path.clone(),
            Self::Zoom { x1, y1, x2, y2 } => vec![Point::new(*x1, *y1), Point::new(*x2, *y2)],
            _ => Vec::new(),
        }
    }

    /// Applies `f` to every screen position of the action (used to convert between coordinate spaces).
    pub fn map_points(&mut self, mut f: impl FnMut(Point) -> Point) {
        let mut apply = |x: &mut i32, y: &mut i32| {
            let p = f(Point::new(*x, *y));
            *x = p.x;
            *y = p.y;
        };
        match self {
            Self::Click { x, y, .. }
            | Self::DoubleClick { x, y }
            | Self::TripleClick { x, y }
            | Self::Move { x, y, .. }
            | Self::Scroll { x, y, .. } => apply(x, y),
            Self::Drag { path, .. } => {
                for p in path.iter_mut() {
                    apply(&mut p.x, &mut p.y);
                }
            }
            Self::Zoom { x1, y1, x2, y2 } => {
                apply(x1, y1);
                apply(x2, y2);
            }
            _ => {}
        }
    }

    /// The keys this action names (modifiers held during a pointer action, a chord, a held key), unparsed.
    pub fn key_names(&self) -> &[String] {
        match self {
            Self::Click { keys, .. }
            | Self::MouseDown { keys, .. }
            | Self::Move { keys, .. }
            | Self::Drag { keys, .. }
            | Self::Scroll { keys, .. }
            | Self::Keypress { keys }
            | Self::HoldKey { keys, .. } => keys,
            _ => &[],
        }
    }

    /// The modifiers a pointer action holds down while it runs (docs/task-file.md); empty for keyboard actions.
    pub fn held_keys(&self) -> &[String] {
        match self {
            Self::Keypress { .. } | Self::HoldKey { .. } => &[],
            _ => self.key_names(),
        }
    }

    /// Parses the action's keys into keysyms.
    pub fn keys(&self) -> Result<Vec<Key>, KeyError> {
        self.key_names().iter().map(|name| Key::parse(name)).collect()
    }

    /// Whether the action changes what is on the screen or the input state (everything but observing and waiting).
    pub fn is_input(&self) -> bool {
        !matches!(self, Self::Wait { .. } | Self::Screenshot {} | Self::CursorPosition {} | Self::Zoom { .. })
    }

    /// Checks that the action can be attempted on a screen of `screen` size: coordinates on the screen, keys
    /// known, durations and lengths bounded. The error is meant for the model.
    pub fn validate(&self, screen: Size) -> Result<(), ActionError> {
        for point in self.points() {
            if !screen.contains(point) {
                return Err(ActionError::OffScreen { x: point.x, y: point.y, size: screen });
            }
        }
        self.keys()?;
        match self {
            Self::Keypress { keys } | Self::HoldKey { keys, .. } if keys.is_empty() => {
                Err(ActionError::Invalid(format!("{} needs at least one key", self.kind())))
            }
            Self::HoldKey { duration_ms, .. } | Self::Wait { duration_ms } if *duration_ms > MAX_DURATION_MS => {
                Err(ActionError::Invalid(format!(
                    "{} duration_ms {duration_ms} is over the limit of {MAX_DURATION_MS}",
                    self.kind()
                )))
            }
            Self::Drag { path, .. } if path.len() < 2 => {
                Err(ActionError::Invalid("drag needs a path of at least 2 points".into()))
            }
            Self::Drag { path, .. } if path.len() > MAX_DRAG_POINTS => Err(ActionError::Invalid(format!(
                "drag path has {} points; at most {MAX_DRAG_POINTS} are allowed",
                path.len()
            ))),
            Self::Type { text } if text.chars().count() > MAX_TYPE_CHARS => {
                Err(ActionError::Invalid(format!("type text is longer than {MAX_TYPE_CHARS} characters")))
            }
            Self::Zoom { x1, y1, x2, y2 } if x2 <= x1 || y2 <= y1 => Err(ActionError::Invalid(format!(
                "zoom region ({x1}, {y1})-({x2}, {y2}) is empty; x2 must be greater than x1 and y2 than y1"
            ))),
            Self::Navigate { url } if url.trim().is_empty() => Err(ActionError::Invalid("navigate needs a url".into())),
            Self::Navigate { url } if url.len() > MAX_URL_BYTES => {
                Err(ActionError::Invalid(format!("navigate url is longer than {MAX_URL_BYTES} bytes")))
            }
            _ => Ok(()),
        }
    }

    /// How long the action itself asks to take (a `wait`, a `hold_key`); zero for the others.
    pub fn duration(&self) -> std::time::Duration {
        match self {
            Self::Wait { duration_ms } | Self::HoldKey { duration_ms, .. } => {
                std::time::Duration::from_millis(*duration_ms)
            }
            _ => std::time::Duration::ZERO,
        }
    }

    /// A short human-readable form for progress lines and logs (`click(120,40)`, `type("alice")`).
    pub fn summary(&self) -> String {
        match self {
            Self::Click { x, y, button, keys } => {
                let button = match button {
                    MouseButton::Left => String::new(),
                    other => format!(",{}", other.as_str()),
                };
                format!("click({x},{y}{button}{})", with_keys(keys))
            }
            Self::DoubleClick { x, y } => format!("double_click({x},{y})"),
            Self::TripleClick { x, y } => format!("triple_click({x},{y})"),
            Self::MouseDown { button, keys } => format!("mouse_down({}{})", button.as_str(), with_keys(keys)),
            Self::MouseUp { button } => format!("mouse_up({})", button.as_str()),
            Self::Move { x, y, keys } => format!("move({x},{y}{})", with_keys(keys)),
            Self::Drag { path, button, keys } => {
                let button = match button {
                    MouseButton::Left => String::new(),
                    other => format!(",{}", other.as_str()),
                };
                match (path.first(), path.last()) {
                    (Some(a), Some(b)) => format!("drag({},{}→{},{}{button}{})", a.x, a.y, b.x, b.y, with_keys(keys)),
                    _ => "drag()".into(),
                }
            }
            Self::Scroll { x, y, scroll_x, scroll_y, keys } => {
                format!("scroll({x},{y},{scroll_x},{scroll_y}{})", with_keys(keys))
            }
            Self::Type { text } => {
                let shown: String = text.chars().take(24).collect();
                if text.chars().count() > 24 { format!("type({shown:?}…)") } else { format!("type({shown:?})") }
            }
            Self::Keypress { keys } => format!("keypress({})", keys.join("+")),
            Self::HoldKey { keys, duration_ms } => {
                format!("hold_key({},{duration_ms}ms)", keys.join("+"))
            }
            Self::Wait { duration_ms } => format!("wait({duration_ms}ms)"),
            Self::Screenshot {} => "screenshot".into(),
            Self::CursorPosition {} => "cursor_position".into(),
            Self::Zoom { x1, y1, x2, y2 } => format!("zoom({x1},{y1},{x2},{y2})"),
            Self::Navigate { url } => {
                let shown: String = url.chars().take(60).collect();
                if url.chars().count() > 60 {
                    format!("navigate({shown:?}…)")
                } else {
                    format!("navigate({shown:?})")
                }
            }
            Self::Back {} => "back".into(),
            Self::Forward {} => "forward".into(),
            Self::Reload {} => "reload".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Action, serde_json::Error> {
        serde_json::from_str(json)
    }

    #[test]
    fn json_forms_round_trip() {
        let cases = [
            r#"{"type":"click","x":1,"y":2}"#,
            r#"{"type":"click","x":1,"y":2,"button":"right","keys":["ctrl"]}"#,
            r#"{"type":"double_click","x":1,"y":2}"#,
            r#"{"type":"triple_click","x":1,"y":2}"#,
            r#"{"type":"mouse_down"}"#,
            r#"{"type":"mouse_up","button":"middle"}"#,
            r#"{"type":"move","x":3,"y":4}"#,
            r#"{"type":"drag","path":[{"x":1,"y":2},{"x":3,"y":4}]}"#,
            r#"{"type":"scroll","x":1,"y":2,"scroll_x":0,"scroll_y":120}"#,
            r#"{"type":"type","text":"héllo"}"#,
            r#"{"type":"keypress","keys":["ctrl","s"]}"#,
            r#"{"type":"hold_key","keys":["shift"],"duration_ms":500}"#,
            r#"{"type":"wait","duration_ms":100}"#,
            r#"{"type":"screenshot"}"#,
            r#"{"type":"cursor_position"}"#,
            r#"{"type":"zoom","x1":0,"y1":0,"x2":10,"y2":10}"#,
            r#"{"type":"navigate","url":"https://example.org/a?b=c"}"#,
            r#"{"type":"back"}"#,
            r#"{"type":"forward"}"#,
            r#"{"type":"reload"}"#,
        ];
        for case in cases {
            let action = parse(case).unwrap_or_else(|e| panic!("{case}: {e}"));
            let back = serde_json::to_string(&action).unwrap();
            assert_eq!(parse(&back).unwrap(), action, "{case} -> {back}");
        }
    }

    #[test]
    fn unknown_fields_and_types_are_rejected() {
        assert!(parse(r#"{"type":"click","x":1,"y":2,"z":3}"#).is_err());
        assert!(parse(r#"{"type":"teleport","x":1}"#).is_err());
        assert!(parse(r#"{"type":"click","x":"1","y":2}"#).is_err());
        assert!(parse(r#"{"type":"click","x":1,"y":2,"button":"thumb"}"#).is_err());
        assert!(parse(r#"{"type":"screenshot","x":1}"#).is_err());
    }

    #[test]
    fn pointer_actions_carry_held_keys_and_drag_any_button() {
        let drag: Action =
            parse(r#"{"type":"drag","path":[{"x":1,"y":2},{"x":3,"y":4}],"button":"right","keys":["shift"]}"#).unwrap();
        assert_eq!(
            drag,
            Action::Drag {
                path: vec![Point::new(1, 2), Point::new(3, 4)],
                button: MouseButton::Right,
                keys: vec!["shift".into()]
            }
        );
        assert_eq!(drag.summary(), "drag(1,2→3,4,right,shift)");
        assert_eq!(drag.held_keys(), ["shift".to_string()]);
        let scroll: Action = parse(r#"{"type":"scroll","x":5,"y":6,"scroll_y":100,"keys":["ctrl"]}"#).unwrap();
        assert_eq!(scroll.summary(), "scroll(5,6,0,100,ctrl)");
        let down: Action = parse(r#"{"type":"mouse_down","keys":["ctrl","alt"]}"#).unwrap();
        assert_eq!(down, Action::MouseDown { button: MouseButton::Left, keys: vec!["ctrl".into(), "alt".into()] });
        let moved: Action = parse(r#"{"type":"move","x":1,"y":1,"keys":["shift"]}"#).unwrap();
        assert_eq!(moved.held_keys().len(), 1);
        // Without keys (or with the default button) the JSON stays as it was.
        let plain =
            Action::Drag { path: vec![Point::new(1, 2), Point::new(3, 4)], button: MouseButton::Left, keys: vec![] };
        assert_eq!(serde_json::to_string(&plain).unwrap(), r#"{"type":"drag","path":[{"x":1,"y":2},{"x":3,"y":4}]}"#);
        // A keypress's keys are its chord, not held modifiers.
        assert!(Action::Keypress { keys: vec!["a".into()] }.held_keys().is_empty());
        // Unknown held keys are refused like any other key.
        let bad = Action::Scroll { x: 1, y: 1, scroll_x: 0, scroll_y: 1, keys: vec!["hyperkey".into()] };
        assert!(bad.validate(Size::new(10, 10)).unwrap_err().to_string().contains("hyperkey"));
        assert!(parse(r#"{"type":"mouse_up","keys":["ctrl"]}"#).is_err(), "mouse_up releases what mouse_down held");
    }

    #[test]
    fn validation_names_the_problem() {
        let screen = Size::new(100, 50);
        let off = Action::Click { x: 100, y: 10, button: MouseButton::Left, keys: vec![] };
        let err = off.validate(screen).unwrap_err().to_string();
        assert!(err.contains("(100, 10)") && err.contains("off the screen"), "{err}");
        let neg = Action::Move { x: -1, y: 0, keys: Vec::new() };
        assert!(matches!(neg.validate(screen), Err(ActionError::OffScreen { .. })));
        let key = Action::Keypress { keys: vec!["ctrl".into(), "nosuchkey".into()] };
        assert!(key.validate(screen).unwrap_err().to_string().contains("nosuchkey"));
        assert!(
            Action::Drag { path: vec![Point::new(1, 1)], button: Default::default(), keys: Vec::new() }
                .validate(screen)
                .is_err()
        );
        assert!(Action::Zoom { x1: 5, y1: 5, x2: 5, y2: 9 }.validate(screen).is_err());
        assert!(Action::Wait { duration_ms: MAX_DURATION_MS + 1 }.validate(screen).is_err());
        assert!(Action::Keypress { keys: vec![] }.validate(screen).is_err());
        assert!(
            Action::Click { x: 99, y: 49, button: MouseButton::Right, keys: vec!["Shift".into()] }
                .validate(screen)
                .is_ok()
        );
    }

    #[test]
    fn map_points_touches_every_coordinate() {
        let mut drag = Action::Drag {
            path: vec![Point::new(1, 2), Point::new(3, 4)],
            button: Default::default(),
            keys: Vec::new(),
        };
        drag.map_points(|p| Point::new(p.x * 10, p.y * 10));
        assert_eq!(drag.points(), vec![Point::new(10, 20), Point::new(30, 40)]);
        let mut zoom = Action::Zoom { x1: 1, y1: 2, x2: 3, y2: 4 };
        zoom.map_points(|p| Point::new(p.x + 1, p.y + 1));
        assert_eq!(zoom, Action::Zoom { x1: 2, y1: 3, x2: 4, y2: 5 });
    }
}
