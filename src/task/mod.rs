//! The task file (docs/task-file.md): its wire form, parsing with errors that point at the problem, and
//! resolution against config defaults into the [`ResolvedTask`] the agent loop runs.
//!
//! Validation happens while deserializing (through small validated newtypes), so every error — a wrong type,
//! an unknown field, a value out of range — carries the field path and the line/column serde_json saw it at.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize};

pub mod approval;
pub mod conversation;
pub mod desktop;
pub mod guard;
pub mod replay;
pub mod schema;
pub mod script;
pub mod secrets;
pub mod tools;
pub mod verify;

use crate::input::line_column;
pub use crate::input::{TaskFileError, format_location, locate_field, parse_json};
pub use crate::record::Compaction;
pub use desktop::{DesktopName, DesktopSpec};
use guard::{Guard, GuardSpec};
use replay::ReplaySpec;
use script::Script;
use secrets::{SecretName, SecretSource};
use tools::{JsonSchema, TaskTool};

/// Built-in limits and context defaults (used when neither the task nor the config says).
pub const DEFAULT_MAX_STEPS: u32 = 50;
pub const DEFAULT_TIMEOUT_SECS: u64 = 1800;
pub const DEFAULT_MAX_COST_USD: f64 = 2.0;
pub const DEFAULT_KEEP_SCREENSHOTS: u32 = 3;
/// The most `limits.max_steps` a task may ask for.
pub const MAX_STEPS_LIMIT: u64 = 100_000;
/// The longest `limits.timeout_secs` a task may ask for (30 days).
pub const MAX_TIMEOUT_SECS: u64 = 30 * 24 * 3600;
/// The longest `limits.human_timeout_secs` (30 days).
pub const MAX_HUMAN_TIMEOUT_SECS: u64 = 30 * 24 * 3600;

/// A task as submitted. Every field but `instructions` is optional and falls back to config defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<TaskId>,
    pub instructions: Instructions,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub computer: Option<ComputerSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelSpec>,
    #[serde(default, skip_serializing_if = "LimitsSpec::is_empty")]
    pub limits: LimitsSpec,
    #[serde(default, skip_serializing_if = "ContextSpec::is_empty")]
    pub context: ContextSpec,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<LabelKey, String>,
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// Tools beside the computer tool and `task_completion` (docs/tools.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "unique_tools")]
    pub tools: Vec<TaskTool>,
    /// The JSON Schema `task_completion`'s `output` must match (docs/task-file.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<JsonSchema>,
    /// Secrets the task may use by placeholder (docs/security.md).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<SecretName, SecretSource>,
    /// The stuck-loop guard's thresholds (docs/task-file.md), over the config's `[guard]`.
    #[serde(default, skip_serializing_if = "GuardSpec::is_empty")]
    pub guard: GuardSpec,
    /// Run a succeeded task's recorded actions without a model (docs/replay-and-verify.md; `replay.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<ReplaySpec>,
    /// Checks run when the model completes with success and at the end (docs/replay-and-verify.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "verify::checks")]
    #[schemars(length(max = verify::MAX_CHECKS))]
    pub verify: Vec<verify::Check>,
    /// The earlier turns of a conversation this task continues (docs/humans.md; `conversation.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<conversation::Conversation>,
    /// Whether the model is given the `ask_human` tool (docs/humans.md); on unless the task says `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask_human: Option<bool>,
    /// Approval rules (docs/humans.md), beside the config's `[[approval]]`: a matching turn waits for a human.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approval: Vec<approval::ApprovalRule>,
}

/// `tools`, with every name once.
fn unique_tools<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<TaskTool>, D::Error> {
    let tools = Vec::<TaskTool>::deserialize(d)?;
    tools::check_unique(tools.iter().map(TaskTool::name))
        .map_err(|(i, message)| serde::de::Error::custom(format!("field `[{i}].name`: {message}")))?;
    Ok(tools)
}

/// A client-chosen task id: 1–128 characters of `[A-Za-z0-9._-]`, not starting with `.` (ids become parts of
/// artifact keys and file names, so nothing that could climb out of a directory is accepted).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct TaskId(String);

impl TaskId {
    pub fn parse(s: &str) -> Result<Self, String> {
        let ok_chars = s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if s.is_empty() || s.len() > 128 || !ok_chars || s.starts_with('.') {
            return Err(format!(
                "invalid task id {s:?}: use 1-128 characters of A-Z a-z 0-9 . _ - (not starting with '.')"
            ));
        }
        Ok(Self(s.to_string()))
    }

    /// A fresh id for a task submitted without one (time-ordered UUIDv7).
    pub fn generate() -> Self {
        Self(uuid::Uuid::now_v7().to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for TaskId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        TaskId::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// The task's instructions: not blank, at most 100,000 characters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Instructions(String);

impl Instructions {
    pub const MAX_CHARS: usize = 100_000;

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for Instructions {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.trim().is_empty() {
            return Err(serde::de::Error::custom("instructions must not be empty"));
        }
        if s.chars().count() > Self::MAX_CHARS {
            return Err(serde::de::Error::custom(format!(
                "instructions are longer than {} characters",
                Self::MAX_CHARS
            )));
        }
        Ok(Self(s))
    }
}

impl From<&str> for Instructions {
    fn from(s: &str) -> Self {
        Self(s.to_string())
    }
}

/// A label key: 1–63 characters of `[A-Za-z0-9._/-]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct LabelKey(String);

impl LabelKey {
    pub fn parse(s: &str) -> Result<Self, String> {
        let ok_chars = s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'));
        if s.is_empty() || s.len() > 63 || !ok_chars {
            return Err(format!("invalid label key {s:?}: use 1-63 characters of A-Z a-z 0-9 . _ - /"));
        }
        Ok(Self(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for LabelKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        LabelKey::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Which computer the task operates (docs/task-file.md `computer`), tagged by `provider`; or, without a `provider`, a
/// desktop of the configured pool (docs/providers.md: `{"desktop": "NAME"}`, `{"labels": […]}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ComputerSpec {
    Mock(MockSpec),
    Local(LocalSpec),
    Vnc(VncSpec),
    ComputerServer(ComputerServerSpec),
    Portable(PortableSpec),
    Browser(BrowserSpec),
    Desktop(DesktopSpec),
}

impl Serialize for ComputerSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeMap};
        let fields = match self {
            Self::Mock(spec) => serde_json::to_value(spec),
            Self::Local(spec) => serde_json::to_value(spec),
            Self::Vnc(spec) => serde_json::to_value(spec),
            Self::ComputerServer(spec) => serde_json::to_value(spec),
            Self::Portable(spec) => serde_json::to_value(spec),
            Self::Browser(spec) => serde_json::to_value(spec),
            Self::Desktop(spec) => return spec.serialize(s),
        }
        .map_err(S::Error::custom)?;
        let fields = match fields {
            serde_json::Value::Object(fields) => fields,
            _ => serde_json::Map::new(),
        };
        let mut map = s.serialize_map(Some(fields.len() + 1))?;
        map.serialize_entry("provider", self.provider())?;
        for (key, value) in &fields {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// The built-in mock desktop. `scene` is a built-in scene name, a path to a scene file, or the scene itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MockSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scene: Option<SceneSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<ScreenWidth>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub height: Option<ScreenHeight>,
}

/// A mock scene: a built-in name or a path to a scene file (a string), or the scene itself (an object in
/// the scene file format, checked with the task; `agentd submit` sends scene files this way).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum SceneSource {
    Named(String),
    Inline(serde_json::Map<String, serde_json::Value>),
}

impl SceneSource {
    /// How progress lines and messages name the scene.
    pub fn describe(&self) -> String {
        match self {
            Self::Named(name) => name.clone(),
            Self::Inline(scene) => scene.get("name").and_then(|n| n.as_str()).unwrap_or("inline scene").to_string(),
        }
    }

    /// Parses and checks an inline scene.
    pub fn parse_inline(
        scene: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<agentd_mock::Scene, agentd_mock::SceneError> {
        let text = serde_json::Value::Object(scene.clone()).to_string();
        agentd_mock::Scene::from_json_str(&text, "inline scene")
    }
}

impl From<&str> for SceneSource {
    fn from(name: &str) -> Self {
        Self::Named(name.to_string())
    }
}

impl<'de> Deserialize<'de> for SceneSource {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(name) if name.is_empty() => Err(D::Error::custom("scene must not be empty")),
            serde_json::Value::String(name) => Ok(Self::Named(name)),
            serde_json::Value::Object(scene) => match Self::parse_inline(&scene) {
                Ok(_) => Ok(Self::Inline(scene)),
                Err(agentd_mock::SceneError::Invalid { path, message, .. }) if !path.is_empty() => {
                    Err(D::Error::custom(format!("field `{path}`: {message}")))
                }
                Err(e) => Err(D::Error::custom(e)),
            },
            other => Err(D::Error::custom(format!(
                "invalid type: {}, expected a scene name, a path to a scene file or a scene object",
                json_kind(&other)
            ))),
        }
    }
}

/// The desktop agentd runs on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LocalSpec {
    /// The X display (`":0"`); the worker's `$DISPLAY` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<String>,
    /// Which monitor of the display to use, by index in RandR's list (`xrandr --listmonitors`); every
    /// coordinate is then relative to that monitor. The whole X screen when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monitor: Option<usize>,
}

/// The desktop of the session agentd runs in, through the cross-platform input and capture crates (macOS,
/// Windows, Wayland, X11).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PortableSpec {
    /// Which monitor of the session to use, by index in the capture crate's list; every coordinate is then
    /// relative to that monitor. The primary monitor when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monitor: Option<usize>,
}

/// A Chromium-family browser driven over the DevTools protocol: one it starts (`executable`, headless by
/// default) or one already running (`cdp_url`). The screen is the page's viewport.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BrowserSpec {
    /// The browser binary; the first of `chromium`, `chromium-browser`, `google-chrome` on `PATH` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executable: Option<String>,
    /// A running browser to attach to: `http://HOST:PORT` (its DevTools HTTP endpoint) or a `ws://…`
    /// DevTools WebSocket. The task gets a browser context of its own there.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "cdp_url")]
    pub cdp_url: Option<String>,
    /// The viewport width in pixels (default 1280).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<ScreenWidth>,
    /// The viewport height in pixels (default 800).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub height: Option<ScreenHeight>,
    /// The page the browser opens first (default `about:blank`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_url: Option<String>,
    /// `"fresh"` (default): a new profile per task, removed after it; or the absolute path of a directory kept
    /// across tasks.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "browser_profile")]
    pub profile: Option<String>,
    /// Whether the browser shows no window (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headless: Option<bool>,
}

fn cdp_url<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    use serde::de::Error;
    let url = String::deserialize(d)?;
    let lower = url.trim().to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("ws://")) {
        return Err(D::Error::custom(format!(
            "{url:?} must be http://HOST:PORT (the browser's DevTools address) or a ws:// DevTools endpoint"
        )));
    }
    Ok(Some(url))
}

fn browser_profile<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    use serde::de::Error;
    let profile = String::deserialize(d)?;
    if profile != "fresh" && !std::path::Path::new(&profile).is_absolute() {
        return Err(D::Error::custom(format!(
            "{profile:?} is neither \"fresh\" nor the absolute path of a profile directory"
        )));
    }
    Ok(Some(profile))
}

/// A machine serving RFB (VNC) at `address` (`host:port`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VncSpec {
    pub address: String,
    /// The name of an environment variable on the worker that holds the VNC password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_env: Option<String>,
}

/// A machine running cua's computer-server at `url` (`http://host:port`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ComputerServerSpec {
    /// `http://host:port` or `https://…`: scheme, host and port only.
    #[serde(deserialize_with = "computer_server_url")]
    pub url: String,
    /// The name of an environment variable on the worker that holds the API key (sent as `X-API-Key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// The container name the server checks credentials against (sent as `X-Container-Name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_name: Option<String>,
    /// How commands travel: `auto` (default: `POST /cmd`, the `/ws` WebSocket for a server without it),
    /// `http` or `websocket`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<CuaTransport>,
}

/// `computer.transport` of a computer-server task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CuaTransport {
    Auto,
    Http,
    Websocket,
}

fn computer_server_url<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    use serde::de::Error;
    let url = String::deserialize(d)?;
    let lower = url.trim().to_ascii_lowercase();
    let Some(rest) = lower.strip_prefix("http://").or_else(|| lower.strip_prefix("https://")) else {
        return Err(D::Error::custom(format!("{url:?} must start with http:// or https://")));
    };
    let rest = rest.trim_end_matches('/');
    if rest.is_empty() || rest.contains(['/', '?', '#', '@', ' ']) {
        return Err(D::Error::custom(format!(
            "{url:?} is not http://host:port (give only scheme, host and port, e.g. http://10.0.0.5:8000)"
        )));
    }
    Ok(url)
}

impl ComputerSpec {
    pub fn provider(&self) -> &'static str {
        match self {
            Self::Mock(_) => "mock",
            Self::Local(_) => "local",
            Self::Vnc(_) => "vnc",
            Self::ComputerServer(_) => "computer-server",
            Self::Portable(_) => "portable",
            Self::Browser(_) => "browser",
            Self::Desktop(_) => "desktop",
        }
    }
}

impl<'de> Deserialize<'de> for ComputerSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = serde_json::Value::deserialize(d)?;
        // No provider, a desktop or labels: a desktop of the pool (docs/providers.md).
        if let serde_json::Value::Object(map) = &value
            && !map.contains_key("provider")
            && (map.contains_key("desktop") || map.contains_key("labels"))
        {
            return variant(map.clone()).map(Self::Desktop);
        }
        let (provider, rest) =
            tagged(value, "provider", &["mock", "local", "vnc", "computer-server", "portable", "browser"])
                .map_err(|e: serde_json::Error| D::Error::custom(e.to_string()))?;
        match provider.as_str() {
            "mock" => variant(rest).map(Self::Mock),
            "local" => variant(rest).map(Self::Local),
            "vnc" => variant(rest).map(Self::Vnc),
            "portable" => variant(rest).map(Self::Portable),
            "browser" => variant(rest).map(Self::Browser),
            _ => variant(rest).map(Self::ComputerServer),
        }
    }
}

/// Splits a `{"provider": …, …}` object (or another `tag`) into its tag and the remaining fields. Internally
/// tagged enums derived by serde buffer their content and lose the path of errors inside it; deserializing the
/// variant with [`variant`] keeps it (as a `field `…`: ` prefix that [`parse_json`] folds into the field path).
fn tagged<'de, D: Deserializer<'de>>(
    d: D,
    tag: &'static str,
    known: &[&'static str],
) -> Result<(String, serde_json::Map<String, serde_json::Value>), D::Error> {
    use serde::de::Error;
    let mut map = match serde_json::Value::deserialize(d)? {
        serde_json::Value::Object(map) => map,
        other => {
            return Err(D::Error::custom(format!(
                "invalid type: {}, expected an object with a \"{tag}\"",
                json_kind(&other)
            )));
        }
    };
    let value = match map.remove(tag) {
        Some(serde_json::Value::String(p)) => p,
        Some(other) => {
            return Err(D::Error::custom(format!(
                "field `{tag}`: invalid type: {}, expected a string",
                json_kind(&other)
            )));
        }
        None => return Err(D::Error::missing_field(tag)),
    };
    if !known.contains(&value.as_str()) {
        return Err(D::Error::custom(format!(
            "field `{tag}`: unknown {tag} `{value}`, expected one of {}",
            known.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
        )));
    }
    Ok((value, map))
}

fn variant<T: serde::de::DeserializeOwned, E: serde::de::Error>(
    rest: serde_json::Map<String, serde_json::Value>,
) -> Result<T, E> {
    serde_path_to_error::deserialize(serde_json::Value::Object(rest)).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        if path == "." || path.is_empty() {
            E::custom(message)
        } else {
            E::custom(format!("field `{path}`: {message}"))
        }
    })
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

/// A mock screen dimension in pixels, within the mock desktop's bounds `MIN..=MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct ScreenDimension<const MIN: u32, const MAX: u32>(u32);

/// A mock screen width (`agentd_mock::MIN_SIZE` to `MAX_SIZE`).
pub type ScreenWidth = ScreenDimension<320, 7680>;
/// A mock screen height (`agentd_mock::MIN_SIZE` to `MAX_SIZE`).
pub type ScreenHeight = ScreenDimension<240, 4320>;

const _: () = assert!(agentd_mock::MIN_SIZE.width == 320 && agentd_mock::MAX_SIZE.width == 7680);
const _: () = assert!(agentd_mock::MIN_SIZE.height == 240 && agentd_mock::MAX_SIZE.height == 4320);

impl<const MIN: u32, const MAX: u32> ScreenDimension<MIN, MAX> {
    pub fn get(self) -> u32 {
        self.0
    }
}

impl<'de, const MIN: u32, const MAX: u32> Deserialize<'de> for ScreenDimension<MIN, MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = u32::deserialize(d)?;
        if !(MIN..=MAX).contains(&v) {
            return Err(serde::de::Error::custom(format!("must be between {MIN} and {MAX} pixels, got {v}")));
        }
        Ok(Self(v))
    }
}

/// Which model drives the task (docs/task-file.md `model`), tagged by `provider`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "provider", rename_all = "kebab-case")]
pub enum ModelSpec {
    Anthropic(VendorModelSpec),
    Openai(VendorModelSpec),
    Gemini(GeminiSpec),
    OpenaiCompatible(CompatibleSpec),
    Scripted(ScriptedSpec),
}

/// Per-task options of the Anthropic and OpenAI adapters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VendorModelSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<Positive<u32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<Temperature>,
    /// The computer tool version (default: the newest the model supports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_version: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GeminiSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<Positive<u32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<Temperature>,
}

/// A vision model behind an OpenAI-compatible Chat Completions endpoint (vLLM and similar).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompatibleSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<Positive<u32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<Temperature>,
}

/// Plays a fixed script (docs/models.md): `script` is a path or the script itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScriptedSpec {
    pub script: ScriptSource,
    /// Values for the `{{NAME}}` parameters of the script's typed texts (a script `agentd compile` wrote).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, String>,
}

impl<'de> Deserialize<'de> for ModelSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (provider, rest) =
            tagged(d, "provider", &["anthropic", "openai", "gemini", "openai-compatible", "scripted"])?;
        match provider.as_str() {
            "anthropic" => variant(rest).map(Self::Anthropic),
            "openai" => variant(rest).map(Self::Openai),
            "gemini" => variant(rest).map(Self::Gemini),
            "openai-compatible" => variant(rest).map(Self::OpenaiCompatible),
            _ => variant(rest).map(Self::Scripted),
        }
    }
}

impl ModelSpec {
    pub fn provider(&self) -> &'static str {
        match self {
            Self::Anthropic(_) => "anthropic",
            Self::Openai(_) => "openai",
            Self::Gemini(_) => "gemini",
            Self::OpenaiCompatible(_) => "openai-compatible",
            Self::Scripted(_) => "scripted",
        }
    }

    /// The per-task options of a vendor model (empty for `scripted`).
    pub fn options(&self) -> ModelOptions {
        let (model, max_tokens, temperature) = match self {
            Self::Anthropic(s) | Self::Openai(s) => (&s.model, s.max_tokens, s.temperature),
            Self::Gemini(s) => (&s.model, s.max_tokens, s.temperature),
            Self::OpenaiCompatible(s) => (&s.model, s.max_tokens, s.temperature),
            Self::Scripted(_) => return ModelOptions::default(),
        };
        ModelOptions {
            model: model.clone(),
            max_tokens: max_tokens.map(Positive::get),
            temperature: temperature.map(Temperature::get),
        }
    }
}

/// Options every vendor model accepts per task.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelOptions {
    pub model: Option<String>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
}

/// A sampling temperature: 0.0 to 2.0.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Temperature(f64);

impl Temperature {
    pub fn get(self) -> f64 {
        self.0
    }
}

impl<'de> Deserialize<'de> for Temperature {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if !(0.0..=2.0).contains(&v) {
            return Err(serde::de::Error::custom(format!("temperature must be between 0 and 2, got {v}")));
        }
        Ok(Self(v))
    }
}

/// A script given inline (a JSON object, checked with the task file) or as a path to a JSON file.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ScriptSource {
    Path(String),
    Inline(Script),
}

impl<'de> Deserialize<'de> for ScriptSource {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct SourceVisitor;
        impl<'de> serde::de::Visitor<'de> for SourceVisitor {
            type Value = ScriptSource;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a path to a script file, or a script object {\"turns\": [...]}")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ScriptSource, E> {
                if v.is_empty() {
                    return Err(E::custom("script path must not be empty"));
                }
                Ok(ScriptSource::Path(v.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<ScriptSource, A::Error> {
                let script = Script::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                script.check("script").map_err(|e| serde::de::Error::custom(e.to_string()))?;
                Ok(ScriptSource::Inline(script))
            }
        }
        d.deserialize_any(SourceVisitor)
    }
}

/// docs/task-file.md `limits`: hard limits checked before every model call and every action.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitsSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<Limit<u32, MAX_STEPS_LIMIT>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<Limit<u64, MAX_TIMEOUT_SECS>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<Cost>,
    /// Failed verification rounds the model may fix (docs/replay-and-verify.md).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "verify::retries")]
    #[schemars(range(max = verify::MAX_VERIFY_RETRIES))]
    pub verify_retries: Option<u32>,
    /// How long a question of the model's (`ask_human`, docs/humans.md) waits for an answer; unset: until answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub human_timeout_secs: Option<Limit<u64, MAX_HUMAN_TIMEOUT_SECS>>,
    /// What an unanswered question comes to when `human_timeout_secs` is up (default `fail`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_human_timeout: Option<OnHumanTimeout>,
}

/// docs/humans.md `limits.on_human_timeout`: what a question nobody answered in time comes to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnHumanTimeout {
    /// The task ends failed, reason `timeout`.
    #[default]
    Fail,
    /// The model gets the tool result [`NO_ANSWER`] and goes on.
    Continue,
}

/// The `ask_human` result the model reads when nobody answered in time and the task goes on.
pub const NO_ANSWER: &str = "no answer";

/// When a question of the model's stops waiting (docs/humans.md), from the task's `limits` over the config's
/// `[defaults.limits]`: `None` when neither sets `human_timeout_secs`.
pub fn human_timeout(task: &LimitsSpec, defaults: &LimitsSpec) -> Option<(std::time::Duration, OnHumanTimeout)> {
    let secs = task.human_timeout_secs.or(defaults.human_timeout_secs)?.get();
    let then = task.on_human_timeout.or(defaults.on_human_timeout).unwrap_or_default();
    Some((std::time::Duration::from_secs(secs), then))
}

impl LimitsSpec {
    fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// docs/task-file.md `context`: what the model sees of the history — its budget by images, by steps and by estimated
/// tokens, and who writes the summary of the steps that leave it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContextSpec {
    /// How many of the most recent screenshots stay in the model's context (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_screenshots: Option<Positive<u32>>,
    /// At most this many earlier steps stay verbatim in the model's context; older ones are compacted into
    /// the summary (half of them at a time, so a prompt cache stays valid between compactions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_steps: Option<Bounded<u32, 2, 10_000>>,
    /// The estimated prompt (text at 4 characters a token, images by area) stays under this many tokens:
    /// older steps are compacted when it would not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<Bounded<u64, 8_000, 10_000_000>>,
    /// Who writes the summary of compacted steps: `mechanical` (default) or `model` (one extra call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<Compaction>,
}

/// The history budget of a resolved task, beside `keep_screenshots` (the model's context window, from its
/// config, is the last bound).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HistoryBudget {
    /// `context.keep_steps`.
    pub keep_steps: Option<u32>,
    /// `context.max_tokens`.
    pub max_tokens: Option<u64>,
    pub compaction: Compaction,
}

/// An integer from `MIN` to `MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Bounded<T, const MIN: u64, const MAX: u64>(T);

impl<T: Copy, const MIN: u64, const MAX: u64> Bounded<T, MIN, MAX> {
    pub fn get(self) -> T {
        self.0
    }
}

impl<'de, T, const MIN: u64, const MAX: u64> Deserialize<'de> for Bounded<T, MIN, MAX>
where
    T: Deserialize<'de> + Copy + Into<u64> + fmt::Display,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = T::deserialize(d)?;
        if v.into() < MIN {
            return Err(serde::de::Error::custom(format!("must be at least {MIN}, got {v}")));
        }
        if v.into() > MAX {
            return Err(serde::de::Error::custom(format!("must be at most {MAX}, got {v}")));
        }
        Ok(Self(v))
    }
}

impl ContextSpec {
    fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// An integer that must be at least 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Positive<T>(T);

impl<T: Copy> Positive<T> {
    pub fn get(self) -> T {
        self.0
    }
}

impl<'de, T> Deserialize<'de> for Positive<T>
where
    T: Deserialize<'de> + PartialOrd + From<u8> + fmt::Display,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = T::deserialize(d)?;
        if v < T::from(1u8) {
            return Err(serde::de::Error::custom(format!("must be at least 1, got {v}")));
        }
        Ok(Self(v))
    }
}

/// A limit: an integer from 1 to `MAX` (so that no deadline or counter built from it can overflow).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Limit<T, const MAX: u64>(T);

impl<T: Copy, const MAX: u64> Limit<T, MAX> {
    pub fn get(self) -> T {
        self.0
    }
}

impl<'de, T, const MAX: u64> Deserialize<'de> for Limit<T, MAX>
where
    T: Deserialize<'de> + Copy + Into<u64> + fmt::Display,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = T::deserialize(d)?;
        if v.into() < 1 {
            return Err(serde::de::Error::custom(format!("must be at least 1, got {v}")));
        }
        if v.into() > MAX {
            return Err(serde::de::Error::custom(format!("must be at most {MAX}, got {v}")));
        }
        Ok(Self(v))
    }
}

/// A cost in US dollars: finite and not negative.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Cost(f64);

impl Cost {
    pub fn get(self) -> f64 {
        self.0
    }
}

impl<'de> Deserialize<'de> for Cost {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if !v.is_finite() || v < 0.0 {
            return Err(serde::de::Error::custom(format!("must be a non-negative number of dollars, got {v}")));
        }
        Ok(Self(v))
    }
}

impl TaskSpec {
    /// Parses a task file's text; `source_name` is how errors name it (a path, or `<stdin>`).
    pub fn parse(text: &str, source_name: &str) -> Result<Self, TaskFileError> {
        let first = text.trim_start_matches('\u{feff}').trim_start().chars().next();
        if matches!(first, Some('[' | '"' | '0'..='9' | '-' | 't' | 'f' | 'n')) {
            // Valid JSON that is not an object: say what a task file is instead of serde's struct-as-array talk.
            if serde_json::from_str::<serde_json::Value>(text.trim_start_matches('\u{feff}')).is_ok() {
                return Err(TaskFileError::Invalid {
                    source_name: source_name.to_string(),
                    field: None,
                    line: 1,
                    column: 1,
                    message: "invalid type: a task file must be a JSON object {\"instructions\": …}".into(),
                });
            }
        }
        parse_json(text, source_name)
    }

    /// Reads and parses a task file; `-` reads standard input.
    pub fn read(path: &Path) -> Result<(Self, TaskSource), TaskFileError> {
        let mut source = TaskSource::of(path);
        let text = source.read_text()?;
        let spec = Self::parse(&text, &source.name)?;
        source.text = text;
        Ok((spec, source))
    }
}

/// Where a task file came from: its display name and the directory relative paths inside it resolve against.
#[derive(Debug, Clone)]
pub struct TaskSource {
    pub name: String,
    pub path: Option<PathBuf>,
    pub base_dir: PathBuf,
    /// The file's text, once read (for locating fields in errors found after parsing).
    pub text: String,
}

impl TaskSource {
    pub fn of(path: &Path) -> Self {
        if path == Path::new("-") {
            let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
            return Self { name: "<stdin>".into(), path: None, base_dir: cwd, text: String::new() };
        }
        let base_dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Self { name: path.display().to_string(), path: Some(path.to_path_buf()), base_dir, text: String::new() }
    }

    pub fn read_text(&self) -> Result<String, TaskFileError> {
        let read = match &self.path {
            Some(path) => crate::input::read_bytes_blocking(path).map_err(crate::input::FileError::into_io),
            None => crate::input::read_stream(std::io::stdin()),
        };
        let bytes = read.map_err(|error| TaskFileError::Read { source_name: self.name.clone(), error })?;
        String::from_utf8(bytes).map_err(|e| {
            let (line, column) = line_column(e.as_bytes(), e.utf8_error().valid_up_to());
            TaskFileError::Invalid {
                source_name: self.name.clone(),
                field: None,
                line,
                column,
                message: "file is not valid UTF-8".into(),
            }
        })
    }

    /// Resolves a path written inside the task file.
    pub fn resolve(&self, path: &str) -> PathBuf {
        let p = Path::new(path);
        if p.is_absolute() { p.to_path_buf() } else { self.base_dir.join(p) }
    }
}

/// A task with every default applied: what the agent loop runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedTask {
    pub instructions: String,
    /// The task's tools as written (`use` entries are resolved against config when the toolbox is built).
    pub tools: Vec<TaskTool>,
    pub output_schema: Option<JsonSchema>,
    pub secrets: BTreeMap<SecretName, SecretSource>,
    pub computer: ComputerSpec,
    pub model: ModelSpec,
    pub limits: Limits,
    pub keep_screenshots: u32,
    /// The rest of the history budget (`context.keep_steps`, `max_tokens`, `compaction`).
    pub history: HistoryBudget,
    pub guard: Guard,
    /// The task's verifier checks (docs/replay-and-verify.md).
    pub verify: Vec<verify::Check>,
    /// `limits.verify_retries`: failed verification rounds the model may fix before the task fails
    /// (docs/replay-and-verify.md).
    pub verify_retries: u32,
    /// The model is given the `ask_human` tool (docs/humans.md).
    pub ask_human: bool,
    /// The approval rules (docs/humans.md): the task's own here; the attempt's builder puts the config's first.
    pub approval: Vec<approval::ApprovalRule>,
}

/// Concrete limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub max_steps: u32,
    pub timeout_secs: u64,
    pub max_cost_usd: f64,
}

/// Task defaults as the config's `[defaults]` gives them (same shape as the task file, all optional).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskDefaults {
    #[serde(default)]
    pub computer: Option<ComputerSpec>,
    #[serde(default)]
    pub model: Option<ModelSpec>,
    #[serde(default)]
    pub limits: LimitsSpec,
    #[serde(default)]
    pub context: ContextSpec,
}

impl TaskSpec {
    /// Applies config defaults, then built-in defaults (mock `blank` desktop, Anthropic model).
    /// The model the task runs with: its own, else the config's `[defaults]`, else Anthropic's default.
    pub fn model_spec(&self, defaults: &TaskDefaults) -> ModelSpec {
        self.model
            .clone()
            .or_else(|| defaults.model.clone())
            .unwrap_or_else(|| ModelSpec::Anthropic(VendorModelSpec::default()))
    }

    /// The task with the config's `[defaults]` and `[guard]` (then the built-in defaults) filling what it
    /// leaves out.
    pub fn resolve(&self, defaults: &TaskDefaults, guard: &GuardSpec) -> ResolvedTask {
        let computer = self
            .computer
            .clone()
            .or_else(|| defaults.computer.clone())
            .unwrap_or_else(|| ComputerSpec::Mock(MockSpec::default()));
        let model = self.model_spec(defaults);
        let limits = Limits {
            max_steps: self.limits.max_steps.or(defaults.limits.max_steps).map_or(DEFAULT_MAX_STEPS, Limit::get),
            timeout_secs: self
                .limits
                .timeout_secs
                .or(defaults.limits.timeout_secs)
                .map_or(DEFAULT_TIMEOUT_SECS, Limit::get),
            max_cost_usd: self
                .limits
                .max_cost_usd
                .or(defaults.limits.max_cost_usd)
                .map_or(DEFAULT_MAX_COST_USD, Cost::get),
        };
        let verify_retries =
            self.limits.verify_retries.or(defaults.limits.verify_retries).unwrap_or(verify::DEFAULT_VERIFY_RETRIES);
        let keep_screenshots = self
            .context
            .keep_screenshots
            .or(defaults.context.keep_screenshots)
            .map_or(DEFAULT_KEEP_SCREENSHOTS, Positive::get);
        // A continued conversation (docs/humans.md): the model reads the earlier turns, then the instructions as the
        // user's next message.
        let instructions = match &self.conversation {
            Some(conversation) => format!("{}{}", conversation.preamble(), self.instructions.as_str()),
            None => self.instructions.as_str().to_string(),
        };
        let (context, fallback) = (&self.context, &defaults.context);
        let history = HistoryBudget {
            keep_steps: context.keep_steps.or(fallback.keep_steps).map(Bounded::get),
            max_tokens: context.max_tokens.or(fallback.max_tokens).map(Bounded::get),
            compaction: context.compaction.or(fallback.compaction).unwrap_or_default(),
        };
        ResolvedTask {
            instructions,
            tools: self.tools.clone(),
            output_schema: self.output_schema.clone(),
            secrets: self.secrets.clone(),
            computer,
            model,
            limits,
            keep_screenshots,
            history,
            guard: self.guard.over(guard),
            verify: self.verify.clone(),
            verify_retries,
            ask_human: self.ask_human.unwrap_or(true),
            approval: self.approval.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> TaskFileError {
        TaskSpec::parse(text, "t.json").unwrap_err()
    }

    #[test]
    fn full_example_parses() {
        let text = r#"{
          "id": "optional-client-chosen-id",
          "instructions": "Log in as alice",
          "computer": { "provider": "mock", "scene": "login" },
          "model": { "provider": "anthropic", "model": "claude-sonnet-4-5" },
          "limits": { "max_steps": 50, "timeout_secs": 1800, "max_cost_usd": 2.0 },
          "context": { "keep_screenshots": 3 },
          "labels": { "os": "ubuntu-24.04" },
          "metadata": { "ticket": "QA-123" }
        }"#;
        let task = TaskSpec::parse(text, "t.json").unwrap();
        assert_eq!(task.id.as_ref().unwrap().as_str(), "optional-client-chosen-id");
        assert_eq!(task.limits.max_steps.unwrap().get(), 50);
        let back = serde_json::to_string(&task).unwrap();
        assert_eq!(TaskSpec::parse(&back, "x").unwrap(), task);
    }

    #[test]
    fn minimal_task_gets_defaults() {
        let task = TaskSpec::parse(r#"{"instructions":"x"}"#, "t.json").unwrap();
        let resolved = task.resolve(&TaskDefaults::default(), &GuardSpec::default());
        assert_eq!(resolved.limits.max_steps, DEFAULT_MAX_STEPS);
        assert_eq!(resolved.keep_screenshots, DEFAULT_KEEP_SCREENSHOTS);
        assert_eq!(resolved.history, HistoryBudget::default());
        assert_eq!(resolved.computer.provider(), "mock");
    }

    #[test]
    fn the_history_budget_takes_the_task_then_the_config_defaults() {
        let task = TaskSpec::parse(
            r#"{"instructions":"x","context":{"keep_screenshots":2,"keep_steps":12,"compaction":"model"}}"#,
            "t.json",
        )
        .unwrap();
        let defaults: TaskDefaults =
            serde_json::from_value(serde_json::json!({"context": {"max_tokens": 60000, "keep_steps": 40}})).unwrap();
        let resolved = task.resolve(&defaults, &GuardSpec::default());
        assert_eq!(resolved.keep_screenshots, 2);
        assert_eq!(
            resolved.history,
            HistoryBudget { keep_steps: Some(12), max_tokens: Some(60_000), compaction: Compaction::Model }
        );
        let back = serde_json::to_string(&task).unwrap();
        assert_eq!(TaskSpec::parse(&back, "x").unwrap(), task);

        let e = err(r#"{"instructions":"x","context":{"max_tokens":100}}"#);
        assert_eq!(e.field(), Some("context.max_tokens"), "{e}");
        assert!(e.to_string().contains("at least 8000"), "{e}");
        let e = err(r#"{"instructions":"x","context":{"keep_steps":1}}"#);
        assert_eq!(e.field(), Some("context.keep_steps"), "{e}");
        let e = err(r#"{"instructions":"x","context":{"compaction":"magic"}}"#);
        assert_eq!(e.field(), Some("context.compaction"), "{e}");
    }

    #[test]
    fn errors_name_field_and_position() {
        let e = err("{\n  \"instructions\": \"x\",\n  \"limits\": {\"max_steps\": \"5\"}\n}");
        assert_eq!(e.field(), Some("limits.max_steps"));
        let text = e.to_string();
        assert!(text.contains("t.json") && text.contains("line 3"), "{text}");

        let e = err(r#"{"instructions":"x","colour":1}"#);
        assert_eq!(e.field(), Some("colour"), "{e}");

        let e = err(r#"{"limits":{}}"#);
        assert_eq!(e.field(), Some("instructions"), "{e}");

        let e = err(r#"{"instructions":"x","computer":{"provider":"amiga"}}"#);
        assert_eq!(e.field(), Some("computer.provider"), "{e}");
        assert!(e.to_string().contains("amiga"));

        let e = err(r#"{"instructions":"x","computer":{"provider":"mock","scene":"login","colour":1}}"#);
        assert_eq!(e.field(), Some("computer.colour"), "{e}");

        let e = err(r#"{"instructions":"x","id":"../../etc"}"#);
        assert_eq!(e.field(), Some("id"), "{e}");
    }

    #[test]
    fn a_scene_is_a_name_a_path_or_the_scene_itself() {
        let task = TaskSpec::parse(
            r#"{"instructions":"x","computer":{"provider":"mock","scene":{"name":"mine","screens":[{"id":"a"}]}}}"#,
            "t.json",
        )
        .unwrap();
        let Some(ComputerSpec::Mock(MockSpec { scene: Some(scene @ SceneSource::Inline(_)), .. })) = &task.computer
        else {
            panic!("{task:?}")
        };
        assert_eq!(scene.describe(), "mine");
        let back = serde_json::to_string(&task).unwrap();
        assert_eq!(TaskSpec::parse(&back, "x").unwrap(), task);

        let e = err(r#"{"instructions":"x","computer":{"provider":"mock","scene":{"screens":[{"id":5}]}}}"#);
        assert_eq!(e.field(), Some("computer.scene.screens[0].id"), "{e}");
        let e = err(r#"{"instructions":"x","computer":{"provider":"mock","scene":7}}"#);
        assert_eq!(e.field(), Some("computer.scene"), "{e}");
    }

    #[test]
    fn fields_are_located_in_the_text() {
        let text = "{\n  \"instructions\": \"say \\\"scene\\\"\",\n  \"computer\": {\"provider\": \"mock\", \"scene\": \"nope\"},\n  \"model\": {\"provider\": \"scripted\", \"script\": {\"turns\": [{}, {\"say\": 1}]}}\n}";
        assert_eq!(locate_field(text, "computer.scene"), Some((3, 45)));
        assert_eq!(locate_field(text, "computer"), Some((3, 15)));
        assert_eq!(locate_field(text, "model.script.turns[1].say"), Some((4, 70)));
        assert_eq!(locate_field(text, "computer.width"), None);
        assert_eq!(locate_field("not json", "a"), None);
    }
}
