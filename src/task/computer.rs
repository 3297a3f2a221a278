//! `computer` (docs/task-file.md, docs/providers.md): which computer a task operates, tagged by `provider` —
//! the mock desktop and its scene, the local X display, the session's own desktop, a browser, VNC, cua's
//! computer-server — or, without a provider, a desktop of the configured pool; with the checks of their URLs
//! and the mock screen's bounds.

use serde::{Deserialize, Deserializer, Serialize};

use super::{DesktopSpec, json_kind, tagged, variant};

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
