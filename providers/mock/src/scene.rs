//! Scenes: the JSON format a mock desktop is described in, its validation, the built-in scenes, and how a name
//! or a path becomes a [`Scene`].
//!
//! A scene is a set of screens, one current at a time; a screen holds windows; a window holds widgets laid out
//! top to bottom. Buttons carry declarative effects (`goto`, `set`, `if`, `reset`, `focus`). `SCENES.md`
//! beside this crate documents every field. Parsing is strict: unknown fields are errors, and every error —
//! a syntax or type error found by serde, or a semantic one found here (an unknown screen, a duplicate id) —
//! names the origin, the field path and the line/column.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;

use crate::canvas::Color;
use agentd_computer::locate::locate;

/// The built-in scenes: (name, JSON text). They are ordinary scene files and double as examples.
const BUILTINS: &[(&str, &str)] = &[
    ("blank", include_str!("../scenes/blank.json")),
    ("login", include_str!("../scenes/login.json")),
    ("form", include_str!("../scenes/form.json")),
];

/// Why a scene could not be loaded.
#[derive(Debug, Error)]
pub enum SceneError {
    #[error("cannot read scene file {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    /// The text is not a valid scene. `path` is the field path (`screens[0].windows[1].width`), empty for
    /// the document itself.
    #[error("{origin}:{line}:{column}: {}: {message}", if path.is_empty() { "(document)" } else { path.as_str() })]
    Invalid { origin: String, path: String, line: usize, column: usize, message: String },
    #[error("unknown scene {name:?}: it is not a built-in scene ({}) and {} does not exist", builtins.join(", "), path.display())]
    NotFound { name: String, path: PathBuf, builtins: Vec<&'static str> },
}

// ---------------------------------------------------------------------------------------------------------
// The file format. Field docs here are the short form; SCENES.md has the long one.

fn default_true() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SceneFile {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    start: Option<String>,
    #[serde(default)]
    background: Option<String>,
    #[serde(default)]
    clock: Option<String>,
    #[serde(default = "default_true")]
    taskbar: bool,
    screens: Vec<ScreenDef>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScreenDef {
    id: String,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    default_button: Option<String>,
    #[serde(default)]
    focus: Option<String>,
    #[serde(default)]
    windows: Vec<WindowDef>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum WindowStyle {
    #[default]
    Window,
    Dialog,
    Note,
    Panel,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Position {
    #[default]
    Center,
    Top,
    Bottom,
    Left,
    Right,
    TopLeft,
    TopRight,
    BottomLeft,
    BottomRight,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WindowDef {
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    style: WindowStyle,
    #[serde(default)]
    width: Option<u32>,
    #[serde(default)]
    height: Option<u32>,
    #[serde(default)]
    position: Position,
    #[serde(default)]
    x: Option<i32>,
    #[serde(default)]
    y: Option<i32>,
    #[serde(default)]
    widgets: Vec<WidgetDef>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum LabelStyle {
    #[default]
    Normal,
    Heading,
    Bold,
    Muted,
    Error,
    Success,
}

/// One widget, tagged by its type as the single key of an object: `{"button": {"id": "ok", "text": "OK"}}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum WidgetDef {
    Label(LabelDef),
    Button(ButtonDef),
    TextField(TextFieldDef),
    Checkbox(CheckboxDef),
    Dropdown(ChoiceDef),
    List(ChoiceDef),
    TextBox(TextBoxDef),
    Slider(SliderDef),
    Separator(EmptyDef),
    /// Starts a new column to the right in the window.
    ColumnBreak(EmptyDef),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LabelDef {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub text: String,
    #[serde(default)]
    pub style: LabelStyle,
    #[serde(default)]
    pub inline: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ButtonDef {
    pub id: String,
    pub text: String,
    #[serde(default)]
    pub primary: bool,
    #[serde(default)]
    pub disabled: bool,
    #[serde(default)]
    pub width: Option<u32>,
    #[serde(default)]
    pub inline: bool,
    #[serde(default)]
    pub on_click: Vec<Effect>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TextFieldDef {
    pub id: String,
    #[serde(default)]
    pub label: Option<String>,
    #[serde(default)]
    pub value: String,
    #[serde(default)]
    pub placeholder: Option<String>,
    #[serde(default)]
    pub password: bool,
    #[serde(default)]
    pub max_length: Option<usize>,
    #[serde(default)]
    pub width: Option<u32>,
    #[serde(default)]
    pub disabled: bool,
    #[serde(default)]
    pub inline: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CheckboxDef {
    pub id: String,
    pub text: String,
    #[serde(default)]
    pub checked: bool,
    #[serde(default)]
    pub disabled: bool,
    #[serde(default)]
    pub inline: bool,
}

/// A dropdown or a list box: a choice of one option.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ChoiceDef {
    pub id: String,
    #[serde(default)]
    pub label: Option<String>,
    pub options: Vec<String>,
    #[serde(default)]
    pub value: Option<String>,
    #[serde(default)]
    pub placeholder: Option<String>,
    /// Visible rows (list boxes) or popup rows (dropdowns).
    #[serde(default)]
    pub rows: Option<u32>,
    #[serde(default)]
    pub width: Option<u32>,
    #[serde(default)]
    pub disabled: bool,
    #[serde(default)]
    pub inline: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TextBoxDef {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub label: Option<String>,
    pub text: String,
    #[serde(default)]
    pub height: Option<u32>,
    #[serde(default)]
    pub width: Option<u32>,
    #[serde(default)]
    pub inline: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SliderDef {
    pub id: String,
    #[serde(default)]
    pub label: Option<String>,
    #[serde(default)]
    pub min: i64,
    #[serde(default = "default_max")]
    pub max: i64,
    #[serde(default = "default_step")]
    pub step: i64,
    #[serde(default)]
    pub value: Option<i64>,
    #[serde(default)]
    pub width: Option<u32>,
    #[serde(default)]
    pub disabled: bool,
    #[serde(default)]
    pub inline: bool,
}

fn default_max() -> i64 {
    100
}

fn default_step() -> i64 {
    1
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EmptyDef {}

/// What a button does when activated, in order.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Effect {
    /// Makes another screen current.
    Goto(String),
    /// Sets a widget's value (label text, field text, checkbox state, chosen option, slider value).
    Set(SetDef),
    /// Runs `then` or `else` depending on a condition.
    If(Box<IfDef>),
    /// Puts widgets back to their initial values; an empty list resets every widget of the scene.
    Reset(Vec<String>),
    /// Moves the keyboard focus to a widget.
    Focus(String),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SetDef {
    pub id: String,
    pub value: serde_json::Value,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct IfDef {
    pub when: Condition,
    #[serde(default)]
    pub then: Vec<Effect>,
    #[serde(default, rename = "else")]
    pub otherwise: Vec<Effect>,
}

/// A test on widget values, for `if`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Condition {
    Equals(FieldTest),
    NotEquals(FieldTest),
    Contains(FieldTest),
    Empty(String),
    NotEmpty(String),
    Checked(String),
    All(Vec<Condition>),
    Any(Vec<Condition>),
    Not(Box<Condition>),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FieldTest {
    pub field: String,
    pub value: String,
}

impl WidgetDef {
    pub fn id(&self) -> Option<&str> {
        match self {
            Self::Label(d) => d.id.as_deref(),
            Self::Button(d) => Some(&d.id),
            Self::TextField(d) => Some(&d.id),
            Self::Checkbox(d) => Some(&d.id),
            Self::Dropdown(d) | Self::List(d) => Some(&d.id),
            Self::TextBox(d) => d.id.as_deref(),
            Self::Slider(d) => Some(&d.id),
            Self::Separator(_) | Self::ColumnBreak(_) => None,
        }
    }

    pub fn inline(&self) -> bool {
        match self {
            Self::Label(d) => d.inline,
            Self::Button(d) => d.inline,
            Self::TextField(d) => d.inline,
            Self::Checkbox(d) => d.inline,
            Self::Dropdown(d) | Self::List(d) => d.inline,
            Self::TextBox(d) => d.inline,
            Self::Slider(d) => d.inline,
            Self::Separator(_) | Self::ColumnBreak(_) => false,
        }
    }

    /// The JSON key of the widget's type.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Label(_) => "label",
            Self::Button(_) => "button",
            Self::TextField(_) => "text_field",
            Self::Checkbox(_) => "checkbox",
            Self::Dropdown(_) => "dropdown",
            Self::List(_) => "list",
            Self::TextBox(_) => "text_box",
            Self::Slider(_) => "slider",
            Self::Separator(_) => "separator",
            Self::ColumnBreak(_) => "column_break",
        }
    }

    /// Whether Tab stops at this widget (when enabled).
    pub fn focusable(&self) -> bool {
        match self {
            Self::Button(d) => !d.disabled,
            Self::TextField(d) => !d.disabled,
            Self::Checkbox(d) => !d.disabled,
            Self::Dropdown(d) | Self::List(d) => !d.disabled,
            Self::Slider(d) => !d.disabled,
            Self::Label(_) | Self::TextBox(_) | Self::Separator(_) | Self::ColumnBreak(_) => false,
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// The validated scene.

/// A window of a screen; its widgets are indices into [`Scene::widgets`].
#[derive(Debug, Clone)]
pub(crate) struct Window {
    pub title: Option<String>,
    pub style: WindowStyle,
    pub width: Option<u32>,
    pub height: Option<u32>,
    pub position: Position,
    pub x: Option<i32>,
    pub y: Option<i32>,
    pub widgets: Vec<usize>,
}

#[derive(Debug, Clone)]
pub(crate) struct Screen {
    pub id: String,
    pub title: Option<String>,
    pub default_button: Option<usize>,
    pub focus: Option<usize>,
    pub windows: Vec<Window>,
}

/// A validated scene, ready to drive a [`crate::MockDesktop`].
#[derive(Debug, Clone)]
pub struct Scene {
    pub(crate) name: String,
    pub(crate) title: String,
    pub(crate) background: Color,
    pub(crate) clock: String,
    pub(crate) taskbar: bool,
    pub(crate) start: usize,
    pub(crate) screens: Vec<Screen>,
    /// Every widget of every screen; the index is the widget's identity at run time.
    pub(crate) widgets: Vec<WidgetDef>,
    /// The screen each widget is on.
    pub(crate) widget_screen: Vec<usize>,
    pub(crate) ids: HashMap<String, usize>,
}

impl Scene {
    /// Parses and validates a scene. `origin` names the text in errors (a file path, or `builtin:login`); a
    /// scene without a `name` field is named after it (its file stem).
    pub fn from_json_str(text: &str, origin: &str) -> Result<Scene, SceneError> {
        let deserializer = &mut serde_json::Deserializer::from_str(text);
        let file: SceneFile = match serde_path_to_error::deserialize(deserializer) {
            Ok(file) => file,
            Err(e) => {
                let path = e.path().to_string();
                let inner = e.into_inner();
                let message = strip_position(&inner.to_string());
                return Err(SceneError::Invalid {
                    origin: origin.to_string(),
                    path: if path == "." { String::new() } else { path },
                    line: inner.line(),
                    column: inner.column(),
                    message,
                });
            }
        };
        let default_name = Path::new(origin)
            .file_stem()
            .map(|s| s.to_string_lossy().trim_start_matches("builtin:").to_string())
            .unwrap_or_else(|| origin.to_string());
        build(file, &default_name).map_err(|(path, message)| {
            let (line, column) = locate(text, &path);
            SceneError::Invalid { origin: origin.to_string(), path, line, column, message }
        })
    }

    /// The largest scene file [`Scene::load`] reads.
    pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

    /// Reads and parses a scene file: a regular file (a FIFO or a device is refused before it is opened) of
    /// at most [`Scene::MAX_FILE_BYTES`]. Blocking. (agentd reads the files tasks name itself, off its async
    /// runtime, and hands their text to [`Scene::from_json_str`].)
    pub fn load(path: &Path) -> Result<Scene, SceneError> {
        use std::io::{Error, ErrorKind, Read};
        let read_error = |source| SceneError::Read { path: path.to_path_buf(), source };
        let check = |meta: std::fs::Metadata| {
            if !meta.is_file() {
                return Err(read_error(Error::new(ErrorKind::InvalidInput, "not a regular file")));
            }
            if meta.len() > Self::MAX_FILE_BYTES {
                let message = format!("larger than {} bytes", Self::MAX_FILE_BYTES);
                return Err(read_error(Error::new(ErrorKind::FileTooLarge, message)));
            }
            Ok(())
        };
        check(std::fs::metadata(path).map_err(read_error)?)?;
        let file = std::fs::File::open(path).map_err(read_error)?;
        check(file.metadata().map_err(read_error)?)?;
        let mut text = String::new();
        file.take(Self::MAX_FILE_BYTES).read_to_string(&mut text).map_err(read_error)?;
        Self::from_json_str(&text, &path.display().to_string())
    }

    /// A built-in scene by name (`blank`, `login`, `form`).
    pub fn builtin(name: &str) -> Option<Scene> {
        let (_, text) = BUILTINS.iter().find(|(n, _)| *n == name)?;
        // Built-in scenes are validated by this crate's tests; an error here would be a build defect, so it is
        // reported as "no such scene" rather than a panic.
        Self::from_json_str(text, &format!("builtin:{name}")).ok()
    }

    /// The names of the built-in scenes.
    pub fn builtin_names() -> Vec<&'static str> {
        BUILTINS.iter().map(|(n, _)| *n).collect()
    }

    /// The JSON text of a built-in scene (to copy and adapt).
    pub fn builtin_json(name: &str) -> Option<&'static str> {
        BUILTINS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
    }

    /// A built-in scene name, else a scene file path (relative to `base_dir` when given and the path is
    /// relative).
    pub fn resolve(name_or_path: &str, base_dir: Option<&Path>) -> Result<Scene, SceneError> {
        if let Some(scene) = Self::builtin(name_or_path) {
            return Ok(scene);
        }
        let path = Path::new(name_or_path);
        let path = match base_dir {
            Some(base) if path.is_relative() => base.join(path),
            _ => path.to_path_buf(),
        };
        if !path.exists() {
            return Err(SceneError::NotFound { name: name_or_path.to_string(), path, builtins: Self::builtin_names() });
        }
        Self::load(&path)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The screen ids, in file order.
    pub fn screen_ids(&self) -> Vec<&str> {
        self.screens.iter().map(|s| s.id.as_str()).collect()
    }

    /// The id of the screen a desktop starts on.
    pub fn start_screen(&self) -> &str {
        &self.screens[self.start].id
    }

    pub(crate) fn widget(&self, id: &str) -> Option<usize> {
        self.ids.get(id).copied()
    }

    pub(crate) fn screen_index(&self, id: &str) -> Option<usize> {
        self.screens.iter().position(|s| s.id == id)
    }
}

/// serde_json appends " at line L column C" to its messages; the error carries them separately.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

type Invalid = (String, String);

fn invalid(path: impl Into<String>, message: impl Into<String>) -> Invalid {
    (path.into(), message.into())
}

/// Turns a parsed file into a [`Scene`], checking everything serde cannot: references, uniqueness, ranges.
fn build(file: SceneFile, default_name: &str) -> Result<Scene, Invalid> {
    if file.screens.is_empty() {
        return Err(invalid("screens", "a scene needs at least one screen"));
    }
    let background = match &file.background {
        Some(text) => Color::parse_hex(text)
            .ok_or_else(|| invalid("background", format!("{text:?} is not a colour; use #rrggbb")))?,
        None => Color::rgb(0x2f, 0x5d, 0x84),
    };

    // Pass 1: ids of screens and widgets, flattened widget list.
    let mut screen_ids = HashSet::new();
    for (s, screen) in file.screens.iter().enumerate() {
        check_id(&screen.id, &format!("screens[{s}].id"))?;
        if !screen_ids.insert(screen.id.as_str()) {
            return Err(invalid(format!("screens[{s}].id"), format!("duplicate screen id {:?}", screen.id)));
        }
    }
    let mut widgets = Vec::new();
    let mut widget_screen = Vec::new();
    let mut widget_paths = Vec::new();
    let mut ids: HashMap<String, usize> = HashMap::new();
    let mut screens = Vec::new();
    for (s, screen) in file.screens.iter().enumerate() {
        let mut windows = Vec::new();
        for (w, window) in screen.windows.iter().enumerate() {
            let window_path = format!("screens[{s}].windows[{w}]");
            pixels(window.width, &format!("{window_path}.width"))?;
            pixels(window.height, &format!("{window_path}.height"))?;
            for (name, value) in [("x", window.x), ("y", window.y)] {
                if value.is_some_and(|v| v.unsigned_abs() > MAX_PIXELS) {
                    return Err(invalid(format!("{window_path}.{name}"), format!("must be within ±{MAX_PIXELS}")));
                }
            }
            let mut indices = Vec::new();
            for (i, widget) in window.widgets.iter().enumerate() {
                let path = format!("{window_path}.widgets[{i}].{}", widget.type_name());
                if let Some(id) = widget.id() {
                    check_id(id, &format!("{path}.id"))?;
                    if ids.insert(id.to_string(), widgets.len()).is_some() {
                        return Err(invalid(
                            format!("{path}.id"),
                            format!("duplicate widget id {id:?} (widget ids are unique across the scene)"),
                        ));
                    }
                }
                indices.push(widgets.len());
                widgets.push(widget.clone());
                widget_screen.push(s);
                widget_paths.push(path);
            }
            windows.push(Window {
                title: window.title.clone(),
                style: window.style,
                width: window.width,
                height: window.height,
                position: window.position,
                x: window.x,
                y: window.y,
                widgets: indices,
            });
        }
        screens.push(Screen {
            id: screen.id.clone(),
            title: screen.title.clone(),
            default_button: None,
            focus: None,
            windows,
        });
    }

    let checker = Checker { widgets: &widgets, ids: &ids, screen_ids: &screen_ids };

    // Pass 2: screen references.
    for (s, screen) in file.screens.iter().enumerate() {
        for (w, window) in screen.windows.iter().enumerate() {
            if let Some(title) = &window.title {
                checker.template(title, &format!("screens[{s}].windows[{w}].title"))?;
            }
        }
        if let Some(id) = &screen.default_button {
            let path = format!("screens[{s}].default_button");
            let index = checker.widget(id, &path)?;
            if !matches!(widgets[index], WidgetDef::Button(_)) || widget_screen[index] != s {
                return Err(invalid(path, format!("{id:?} is not a button on screen {:?}", screen.id)));
            }
            screens[s].default_button = Some(index);
        }
        if let Some(id) = &screen.focus {
            let path = format!("screens[{s}].focus");
            let index = checker.widget(id, &path)?;
            if !widgets[index].focusable() || widget_screen[index] != s {
                return Err(invalid(path, format!("{id:?} is not a focusable widget on screen {:?}", screen.id)));
            }
            screens[s].focus = Some(index);
        }
    }

    // Pass 3: each widget's own fields and its effects.
    for (index, widget) in widgets.iter().enumerate() {
        checker.widget_fields(widget, &widget_paths[index])?;
    }

    let start = match &file.start {
        Some(id) => file
            .screens
            .iter()
            .position(|s| &s.id == id)
            .ok_or_else(|| invalid("start", format!("no screen has the id {id:?}")))?,
        None => 0,
    };
    let name = file.name.clone().unwrap_or_else(|| default_name.to_string());
    Ok(Scene {
        title: file.title.clone().unwrap_or_else(|| name.clone()),
        name,
        background,
        clock: file.clock.clone().unwrap_or_else(|| "09:41".to_string()),
        taskbar: file.taskbar,
        start,
        screens,
        widgets,
        widget_screen,
        ids,
    })
}

/// The largest width, height or offset a scene may give in pixels.
const MAX_PIXELS: u32 = 10_000;
/// The most rows a list or dropdown popup may show.
const MAX_ROWS: u32 = 200;
/// The largest magnitude of a slider's ends (keeps every step computation far from overflow).
const MAX_SLIDER: i64 = 1_000_000_000_000;

fn pixels(value: Option<u32>, path: &str) -> Result<(), Invalid> {
    match value {
        Some(v) if v == 0 || v > MAX_PIXELS => Err(invalid(path, format!("must be 1..={MAX_PIXELS} pixels"))),
        _ => Ok(()),
    }
}

fn check_id(id: &str, path: &str) -> Result<(), Invalid> {
    let ok = !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok { Ok(()) } else { Err(invalid(path, format!("{id:?} is not a valid id (use letters, digits, '_' and '-')"))) }
}

struct Checker<'a> {
    widgets: &'a [WidgetDef],
    ids: &'a HashMap<String, usize>,
    screen_ids: &'a HashSet<&'a str>,
}

impl Checker<'_> {
    fn widget(&self, id: &str, path: &str) -> Result<usize, Invalid> {
        self.ids.get(id).copied().ok_or_else(|| invalid(path, format!("no widget has the id {id:?}")))
    }

    /// Checks the `${id}` references of a text.
    fn template(&self, text: &str, path: &str) -> Result<(), Invalid> {
        for id in template_refs(text).map_err(|message| invalid(path, message))? {
            self.widget(&id, path).map_err(|(p, m)| (p, format!("{m} (in a ${{…}} reference)")))?;
        }
        Ok(())
    }

    fn width(&self, width: Option<u32>, path: &str) -> Result<(), Invalid> {
        pixels(width, &format!("{path}.width"))
    }

    fn widget_fields(&self, widget: &WidgetDef, path: &str) -> Result<(), Invalid> {
        match widget {
            WidgetDef::Label(d) => self.template(&d.text, &format!("{path}.text")),
            WidgetDef::Button(d) => {
                self.width(d.width, path)?;
                self.template(&d.text, &format!("{path}.text"))?;
                self.effects(&d.on_click, &format!("{path}.on_click"))
            }
            WidgetDef::TextField(d) => {
                self.width(d.width, path)?;
                if let Some(max) = d.max_length
                    && d.value.chars().count() > max
                {
                    return Err(invalid(format!("{path}.value"), format!("longer than max_length {max}")));
                }
                Ok(())
            }
            WidgetDef::Checkbox(_) | WidgetDef::Separator(_) | WidgetDef::ColumnBreak(_) => Ok(()),
            WidgetDef::Dropdown(d) | WidgetDef::List(d) => {
                self.width(d.width, path)?;
                if d.options.is_empty() {
                    return Err(invalid(format!("{path}.options"), "needs at least one option"));
                }
                if d.rows.is_some_and(|r| r == 0 || r > MAX_ROWS) {
                    return Err(invalid(format!("{path}.rows"), format!("rows must be 1..={MAX_ROWS}")));
                }
                if let Some(value) = &d.value
                    && !d.options.contains(value)
                {
                    return Err(invalid(format!("{path}.value"), format!("{value:?} is not one of the options")));
                }
                Ok(())
            }
            WidgetDef::TextBox(d) => {
                self.width(d.width, path)?;
                pixels(d.height, &format!("{path}.height"))?;
                self.template(&d.text, &format!("{path}.text"))
            }
            WidgetDef::Slider(d) => {
                self.width(d.width, path)?;
                for (name, value) in [("min", d.min), ("max", d.max)] {
                    if value.unsigned_abs() > MAX_SLIDER.unsigned_abs() {
                        return Err(invalid(format!("{path}.{name}"), format!("must be within ±{MAX_SLIDER}")));
                    }
                }
                if d.max <= d.min {
                    return Err(invalid(
                        format!("{path}.max"),
                        format!("max ({}) must be greater than min ({})", d.max, d.min),
                    ));
                }
                if d.step <= 0 || d.step > d.max - d.min {
                    return Err(invalid(format!("{path}.step"), "step must be positive and at most max - min"));
                }
                if let Some(v) = d.value
                    && !(d.min..=d.max).contains(&v)
                {
                    return Err(invalid(format!("{path}.value"), format!("{v} is outside {}..={}", d.min, d.max)));
                }
                Ok(())
            }
        }
    }

    fn effects(&self, effects: &[Effect], path: &str) -> Result<(), Invalid> {
        for (i, effect) in effects.iter().enumerate() {
            let path = format!("{path}[{i}]");
            match effect {
                Effect::Goto(screen) => {
                    if !self.screen_ids.contains(screen.as_str()) {
                        return Err(invalid(format!("{path}.goto"), format!("no screen has the id {screen:?}")));
                    }
                }
                Effect::Set(set) => self.set(set, &format!("{path}.set"))?,
                Effect::If(def) => {
                    self.condition(&def.when, &format!("{path}.if.when"))?;
                    self.effects(&def.then, &format!("{path}.if.then"))?;
                    self.effects(&def.otherwise, &format!("{path}.if.else"))?;
                }
                Effect::Reset(ids) => {
                    for (j, id) in ids.iter().enumerate() {
                        self.widget(id, &format!("{path}.reset[{j}]"))?;
                    }
                }
                Effect::Focus(id) => {
                    let index = self.widget(id, &format!("{path}.focus"))?;
                    if !self.widgets[index].focusable() {
                        return Err(invalid(format!("{path}.focus"), format!("{id:?} cannot take the focus")));
                    }
                }
            }
        }
        Ok(())
    }

    fn set(&self, set: &SetDef, path: &str) -> Result<(), Invalid> {
        let index = self.widget(&set.id, &format!("{path}.id"))?;
        let value_path = format!("{path}.value");
        let want_text = |what: &str| -> Result<(), Invalid> {
            match set.value.as_str() {
                Some(text) => self.template(text, &value_path),
                None => Err(invalid(&value_path, format!("{what} {:?} takes a string", set.id))),
            }
        };
        match &self.widgets[index] {
            WidgetDef::Label(_) => want_text("label"),
            WidgetDef::TextField(_) => want_text("text field"),
            WidgetDef::TextBox(_) => want_text("text box"),
            WidgetDef::Checkbox(_) => match set.value {
                serde_json::Value::Bool(_) => Ok(()),
                _ => Err(invalid(value_path, format!("checkbox {:?} takes true or false", set.id))),
            },
            WidgetDef::Dropdown(d) | WidgetDef::List(d) => match &set.value {
                serde_json::Value::Null => Ok(()),
                serde_json::Value::String(s) if d.options.contains(s) => Ok(()),
                _ => Err(invalid(value_path, format!("{:?} takes one of its options (or null)", set.id))),
            },
            WidgetDef::Slider(d) => match set.value.as_i64() {
                Some(v) if (d.min..=d.max).contains(&v) => Ok(()),
                _ => Err(invalid(value_path, format!("slider {:?} takes an integer in {}..={}", set.id, d.min, d.max))),
            },
            WidgetDef::Button(_) | WidgetDef::Separator(_) | WidgetDef::ColumnBreak(_) => {
                Err(invalid(format!("{path}.id"), format!("{:?} has no value to set", set.id)))
            }
        }
    }

    fn condition(&self, condition: &Condition, path: &str) -> Result<(), Invalid> {
        match condition {
            Condition::Equals(t) | Condition::NotEquals(t) | Condition::Contains(t) => {
                let key = match condition {
                    Condition::Equals(_) => "equals",
                    Condition::NotEquals(_) => "not_equals",
                    _ => "contains",
                };
                self.valued(&t.field, &format!("{path}.{key}.field")).map(drop)
            }
            Condition::Empty(id) => self.valued(id, &format!("{path}.empty")).map(drop),
            Condition::NotEmpty(id) => self.valued(id, &format!("{path}.not_empty")).map(drop),
            Condition::Checked(id) => {
                let index = self.widget(id, &format!("{path}.checked"))?;
                match self.widgets[index] {
                    WidgetDef::Checkbox(_) => Ok(()),
                    _ => Err(invalid(format!("{path}.checked"), format!("{id:?} is not a checkbox"))),
                }
            }
            Condition::All(list) | Condition::Any(list) => {
                let key = if matches!(condition, Condition::All(_)) { "all" } else { "any" };
                for (i, c) in list.iter().enumerate() {
                    self.condition(c, &format!("{path}.{key}[{i}]"))?;
                }
                Ok(())
            }
            Condition::Not(inner) => self.condition(inner, &format!("{path}.not")),
        }
    }

    /// A widget that has a value to test.
    fn valued(&self, id: &str, path: &str) -> Result<usize, Invalid> {
        let index = self.widget(id, path)?;
        match self.widgets[index] {
            WidgetDef::Button(_) | WidgetDef::Separator(_) | WidgetDef::ColumnBreak(_) => {
                Err(invalid(path, format!("{id:?} has no value to test")))
            }
            _ => Ok(index),
        }
    }
}

/// The widget ids a text refers to with `${id}`; `$$` is a literal `$`.
pub(crate) fn template_refs(text: &str) -> Result<Vec<String>, String> {
    let mut refs = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        let after = &rest[i + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            rest = stripped;
        } else if let Some(body) = after.strip_prefix('{') {
            let end = body.find('}').ok_or_else(|| "unclosed ${ in text (write $$ for a literal $)".to_string())?;
            refs.push(body[..end].to_string());
            rest = &body[end + 1..];
        } else {
            rest = after;
        }
    }
    Ok(refs)
}

/// Expands `${id}` references with `value_of(id)`; `$$` becomes `$`.
pub(crate) fn expand(text: &str, value_of: impl Fn(&str) -> String) -> String {
    if !text.contains('$') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(body) = after.strip_prefix('{')
            && let Some(end) = body.find('}')
        {
            out.push_str(&value_of(&body[..end]));
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> (String, usize, usize, String) {
        match Scene::from_json_str(text, "test.json") {
            Err(SceneError::Invalid { path, line, column, message, .. }) => (path, line, column, message),
            other => panic!("expected an Invalid error, got {other:?}"),
        }
    }

    #[test]
    fn builtins_parse_and_name_themselves() {
        for name in Scene::builtin_names() {
            let text = Scene::builtin_json(name).unwrap_or_default();
            let scene = Scene::from_json_str(text, &format!("builtin:{name}"))
                .unwrap_or_else(|e| panic!("built-in scene {name}: {e}"));
            assert_eq!(scene.name(), name);
        }
        assert!(Scene::builtin("nope").is_none());
    }

    #[test]
    fn unknown_fields_name_path_and_position() {
        let text = "{\n  \"screens\": [\n    {\"id\": \"a\", \"windows\": [{\"widgets\": [\n      {\"label\": {\"text\": \"x\", \"colour\": \"red\"}}\n    ]}]}\n  ]\n}";
        let (path, line, _, message) = err(text);
        assert_eq!(path, "screens[0].windows[0].widgets[0].label.colour");
        assert_eq!(line, 4);
        assert!(message.contains("unknown field `colour`"), "{message}");
    }

    #[test]
    fn wrong_types_name_path_and_position() {
        let (path, line, column, message) =
            err("{\"screens\": [{\"id\": \"a\", \"windows\": [{\"width\": \"wide\"}]}]}");
        assert_eq!(path, "screens[0].windows[0].width");
        assert_eq!(line, 1);
        assert!(column > 30, "{column}");
        assert!(message.contains("invalid type"), "{message}");
    }

    #[test]
    fn semantic_errors_are_located() {
        let text = r#"{
  "screens": [
    {"id": "a", "windows": [{"widgets": [
      {"button": {"id": "go", "text": "Go", "on_click": [{"goto": "nowhere"}]}}
    ]}]}
  ]
}"#;
        let (path, line, column, message) = err(text);
        assert_eq!(path, "screens[0].windows[0].widgets[0].button.on_click[0].goto");
        assert_eq!((line, column), (4, 67));
        assert!(message.contains("nowhere"), "{message}");

        let dup = r#"{"screens": [{"id": "a", "windows": [{"widgets": [
            {"checkbox": {"id": "x", "text": "one"}},
            {"checkbox": {"id": "x", "text": "two"}}]}]}]}"#;
        let (path, line, _, message) = err(dup);
        assert_eq!(path, "screens[0].windows[0].widgets[1].checkbox.id");
        assert_eq!(line, 3);
        assert!(message.contains("duplicate widget id"), "{message}");

        let (path, _, _, _) = err(r#"{"screens": [{"id": "a"}], "start": "b"}"#);
        assert_eq!(path, "start");
        let (path, _, _, message) =
            err(r#"{"screens": [{"id": "a", "windows": [{"widgets": [{"label": {"text": "hi ${who}"}}]}]}]}"#);
        assert_eq!(path, "screens[0].windows[0].widgets[0].label.text");
        assert!(message.contains("who"), "{message}");
        let (path, _, _, _) = err(
            r#"{"screens": [{"id": "a", "windows": [{"widgets": [{"list": {"id": "l", "options": ["x"], "rows": 100000}}]}]}]}"#,
        );
        assert_eq!(path, "screens[0].windows[0].widgets[0].list.rows");
        let (path, _, _, _) = err(r#"{"screens": [{"id": "a", "windows": [{"width": 4000000000}]}]}"#);
        assert_eq!(path, "screens[0].windows[0].width");
        let (path, _, _, _) = err(
            r#"{"screens": [{"id": "a", "windows": [{"widgets": [{"slider": {"id": "s", "min": -9223372036854775808}}]}]}]}"#,
        );
        assert_eq!(path, "screens[0].windows[0].widgets[0].slider.min");
        let (_, _, _, message) = err("{\"screens\": []}");
        assert!(message.contains("at least one screen"));
    }

    #[test]
    fn error_display_names_origin_path_and_position() {
        let e = Scene::from_json_str("{\"screens\": [{\"id\": 5}]}", "my/scene.json").err();
        let text = e.map(|e| e.to_string()).unwrap_or_default();
        assert!(text.starts_with("my/scene.json:1:"), "{text}");
        assert!(text.contains("screens[0].id"), "{text}");
    }

    #[test]
    fn resolve_finds_builtins_then_files() {
        assert_eq!(Scene::resolve("login", None).map(|s| s.name).ok().as_deref(), Some("login"));
        let dir = std::env::temp_dir().join(format!("agentd-mock-scene-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(dir.join("mine.json"), r#"{"screens": [{"id": "only"}]}"#);
        let scene = Scene::resolve("mine.json", Some(&dir));
        assert_eq!(scene.map(|s| s.name).ok().as_deref(), Some("mine"));
        assert!(matches!(Scene::resolve("missing.json", Some(&dir)), Err(SceneError::NotFound { .. })));
        // Devices and directories are refused without reading them (`/dev/zero` would never end).
        assert!(matches!(Scene::load(Path::new("/dev/zero")), Err(SceneError::Read { .. })));
        assert!(matches!(Scene::load(&dir), Err(SceneError::Read { .. })));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn templates_expand() {
        let value = |id: &str| {
            if id == "user" { "alice".to_string() } else { String::new() }
        };
        assert_eq!(expand("Welcome, ${user}! $$5", value), "Welcome, alice! $5");
        assert_eq!(expand("plain", value), "plain");
        assert_eq!(template_refs("${a} and ${b}").ok(), Some(vec!["a".to_string(), "b".to_string()]));
        assert!(template_refs("${a").is_err());
    }
}
