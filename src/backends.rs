//! Builds runtime objects from config values: the computer a task operates, the model that drives it, the
//! artifact store. A closed `match` per kind, no registry: adding a provider is adding an arm.
//!
//! Errors say whether the input was wrong ([`BuildError::Invalid`], exit 2) or a backend could not be
//! reached ([`BuildError::Unreachable`], exit 3).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use agentd_computer::outbound::Outbound;
use agentd_computer::{ComputerProvider, Size};
use thiserror::Error;

use crate::artifacts::{ArtifactStore, FsStore};
use crate::config::{ArtifactsBackend, Config};
use crate::input::{FileAccess, FileError};
use crate::model::scripted::{Script, ScriptedModel};
use crate::model::{Model, ModelError, Shared};
use crate::task::secrets::SecretSource;
use crate::task::tools::{TaskTool, ToolDecl, ToolKind};
use crate::task::{
    BrowserSpec, CompatibleSpec, ComputerServerSpec, ComputerSpec, LocalSpec, MockSpec, ModelSpec, PortableSpec,
    SceneSource, ScriptSource, ScriptedSpec, VncSpec,
};
use crate::tools::command::CommandRunner;
use crate::tools::http::HttpRunner;
use crate::tools::secrets::{Secrets, SecretsError};
use crate::tools::{Makers, Tool, Toolbox, ToolboxError};

#[derive(Debug, Error)]
pub enum BuildError {
    /// The task or config asks for something invalid (a bad scene or script file, an unknown setting); `field`
    /// is the dotted path of the field at fault, when one is.
    #[error("{}", match field { Some(field) => format!("field `{field}`: {message}"), None => message.clone() })]
    Invalid { field: Option<Cow<'static, str>>, message: String },
    /// A backend the task needs cannot be reached.
    #[error("{0}")]
    Unreachable(String),
}

impl BuildError {
    /// Invalid input at `field` (a dotted path such as `computer.scene`).
    pub fn invalid(field: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        Self::Invalid { field: Some(field.into()), message: message.into() }
    }

    /// The field at fault, when the error is about one.
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::Invalid { field, .. } => field.as_deref(),
            Self::Unreachable(_) => None,
        }
    }
}

/// How a computer is opened.
pub struct ComputerContext<'a> {
    /// Which scene files the task may name (and what relative paths resolve against).
    pub files: &'a FileAccess,
    /// Keep the mock desktop's state here so it survives a restart (the daemon); `None` keeps it in memory.
    pub persist_dir: Option<&'a Path>,
    /// The task's secrets: the mock desktop saves them as their placeholders (see `agentd_mock::Seal`).
    pub secrets: &'a Secrets,
    /// Where the computer may be: a VNC host or computer-server URL the task names is connected to only at
    /// an address this allows.
    pub outbound: &'a Outbound,
    /// What a browser computer may open: `None` for anything (`agentd run`); for tasks submitted over the
    /// API, the `[browser] allowed_urls` patterns and the outbound policy the pages' hosts must pass.
    pub pages: Option<(&'a [String], &'a Outbound)>,
}

/// Opens the computer a task names.
pub async fn computer(spec: &ComputerSpec, ctx: &ComputerContext<'_>) -> Result<Arc<dyn ComputerProvider>, BuildError> {
    match spec {
        ComputerSpec::Mock(MockSpec { scene, width, height }) => {
            let blank = SceneSource::from("blank");
            let scene = load_scene(scene.as_ref().unwrap_or(&blank), ctx.files)
                .await
                .map_err(|e| BuildError::invalid("computer.scene", e))?;
            let size = match (width, height) {
                (None, None) => None,
                (w, h) => Some(Size::new(
                    w.map_or(agentd_mock::DEFAULT_SIZE.width, |w| w.get()),
                    h.map_or(agentd_mock::DEFAULT_SIZE.height, |h| h.get()),
                )),
            };
            let desktop = match ctx.persist_dir {
                Some(dir) => agentd_mock::MockDesktop::open_sealed(
                    scene,
                    size,
                    dir,
                    agentd_mock::Seal::new(ctx.secrets.for_saving()),
                )
                .map_err(|e| match e {
                    e @ agentd_mock::MockError::Size { .. } => BuildError::invalid("computer", format!("{e}")),
                    e => BuildError::Unreachable(format!("mock desktop state in {}: {e}", dir.display())),
                })?,
                None => agentd_mock::MockDesktop::new(scene, size)
                    .map_err(|e| BuildError::invalid("computer", format!("{e}")))?,
            };
            Ok(Arc::new(desktop))
        }
        ComputerSpec::Local(spec) => local_computer(spec).await,
        ComputerSpec::Vnc(spec) => vnc_computer(spec, ctx.outbound).await,
        ComputerSpec::ComputerServer(spec) => cua_computer(spec, ctx.outbound).await,
        ComputerSpec::Portable(spec) => portable_computer(spec).await,
        ComputerSpec::Browser(spec) => browser_computer(spec, ctx.outbound, ctx.pages).await,
        ComputerSpec::Desktop(request) => Err(BuildError::invalid(
            "computer",
            format!(
                "{} of the desktop pool is leased by the daemon's workers (docs/providers.md), not built here",
                request.describe()
            ),
        )),
    }
}

/// The computer of the first `[[desktops]]` entry a pool request matches (docs/providers.md), for a run outside the
/// daemon (`agentd run`, the library), which leases nothing; other specs are returned as they are.
pub fn pool_computer(spec: &ComputerSpec, config: &Config) -> Result<ComputerSpec, BuildError> {
    let ComputerSpec::Desktop(request) = spec else {
        return Ok(spec.clone());
    };
    config
        .desktops
        .iter()
        .find(|d| d.serves(request))
        .map(|d| d.computer.clone())
        .ok_or_else(|| no_desktop(request, config))
}

fn no_desktop(request: &crate::task::DesktopSpec, config: &Config) -> BuildError {
    let field = if request.desktop.is_some() { "computer.desktop" } else { "computer.labels" };
    let have = config.desktops.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", ");
    let message = if have.is_empty() {
        format!("names {}, but no [[desktops]] are configured", request.describe())
    } else {
        format!("no configured desktop is {} (desktops: {have})", request.describe())
    };
    BuildError::invalid(field, message)
}

/// An inline scene, a built-in scene by name, else a scene file the task may name, read with
/// [`FileAccess::read`]. Errors about the files of API tasks quote none of their content.
async fn load_scene(source: &SceneSource, files: &FileAccess) -> Result<agentd_mock::Scene, String> {
    use agentd_mock::{Scene, SceneError};
    let name = match source {
        SceneSource::Named(name) => name.as_str(),
        SceneSource::Inline(scene) => return SceneSource::parse_inline(scene).map_err(|e| e.to_string()),
    };
    if let Some(scene) = Scene::builtin(name) {
        return Ok(scene);
    }
    let unknown = || {
        let builtins = Scene::builtin_names().join(", ");
        format!("unknown scene {name:?}: it is not a built-in scene ({builtins})")
    };
    let (path, text) = match files.read(name).await {
        Ok(read) => read,
        Err(FileError::Relative { .. }) if !name.contains('/') => {
            return Err(format!("{}, and a scene file is named by its absolute path", unknown()));
        }
        Err(FileError::Io { path, source }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!("{} and {} does not exist", unknown(), path.display()));
        }
        Err(e) => return Err(e.to_string()),
    };
    Scene::from_json_str(&text, &path.display().to_string()).map_err(|e| match e {
        SceneError::Invalid { origin, path, line, column, message } if !files.may_quote() => {
            let message = crate::input::redact(&message);
            SceneError::Invalid { origin, path, line, column, message }.to_string()
        }
        e => e.to_string(),
    })
}

/// A script file the task names, read with [`FileAccess::read`] and parsed; errors about the files of API
/// tasks quote none of their content.
async fn load_script(path: &str, files: &FileAccess) -> Result<Script, String> {
    let (file, text) = files.read(path).await.map_err(|e| e.to_string())?;
    let name = file.display().to_string();
    Script::parse(&text, &name).map_err(|e| match e {
        crate::task::TaskFileError::Invalid { source_name, field, line, column, message } if !files.may_quote() => {
            // An unknown field's name is the file's content too: name its parent.
            let field = match field {
                Some(f) if message.starts_with("unknown field") => f.rsplit_once('.').map(|(p, _)| p.to_string()),
                f => f,
            };
            let message = crate::input::redact(&message);
            crate::task::TaskFileError::Invalid { source_name, field, line, column, message }.to_string()
        }
        e => e.to_string(),
    })
}

/// The task's model with a script file replaced by the script it holds, read off the async runtime (the
/// daemon and `agentd run` call this before [`model`], which then reads no file).
pub async fn inline_script(spec: &ModelSpec, files: &FileAccess) -> Result<ModelSpec, BuildError> {
    match spec {
        ModelSpec::Scripted(ScriptedSpec { script: ScriptSource::Path(path), params }) => {
            let script = load_script(path, files).await.map_err(|e| BuildError::invalid("model.script", e))?;
            Ok(ModelSpec::Scripted(ScriptedSpec { script: ScriptSource::Inline(script), params: params.clone() }))
        }
        other => Ok(other.clone()),
    }
}

/// What a build without an optional cargo feature answers when the config or a task asks for it. Every
/// `cfg(not(feature = …))` branch of this module says it through here, so the default build's tests check the
/// wording a lean build gives (a build without default features is linted in CI, not run: its tests would
/// cost a second whole build).
#[cfg_attr(
    all(
        feature = "local",
        feature = "vnc",
        feature = "computer-server",
        feature = "portable",
        feature = "browser",
        feature = "s3"
    ),
    allow(dead_code)
)]
fn not_built(field: &'static str, feature: &str) -> BuildError {
    BuildError::invalid(field, format!("this agentd was built without the `{feature}` feature"))
}

/// The local X display (Linux). One connection per display and monitor is kept for the life of the process
/// and shared by every task that asks for it.
#[cfg(all(feature = "local", target_os = "linux"))]
async fn local_computer(spec: &LocalSpec) -> Result<Arc<dyn ComputerProvider>, BuildError> {
    use agentd_local::{LocalConfig, LocalError, LocalProvider};
    let config = LocalConfig { monitor: spec.monitor, ..LocalConfig::new(spec.display.clone()) };
    match LocalProvider::shared(config).await {
        Ok(provider) => Ok(provider),
        Err(e @ LocalError::NoSuchMonitor { .. }) => Err(BuildError::invalid("computer.monitor", format!("{e}"))),
        Err(e @ LocalError::Invalid(_)) => Err(BuildError::invalid("computer", format!("{e}"))),
        Err(e) => Err(BuildError::Unreachable(format!("local desktop: {e}"))),
    }
}

#[cfg(all(not(feature = "local"), target_os = "linux"))]
async fn local_computer(_: &LocalSpec) -> Result<Arc<dyn ComputerProvider>, BuildError> {
    Err(not_built("computer.provider", "local"))
}

#[cfg(not(target_os = "linux"))]
async fn local_computer(_: &LocalSpec) -> Result<Arc<dyn ComputerProvider>, BuildError> {
    Err(BuildError::invalid(
        "computer.provider",
        "the `local` (X11) provider is Linux-only; on this platform use `portable` (the session's own desktop)",
    ))
}

/// A VNC server. The password comes from the environment variable the task names, never from the task.
#[cfg(feature = "vnc")]
async fn vnc_computer(spec: &VncSpec, outbound: &Outbound) -> Result<Arc<dyn ComputerProvider>, BuildError> {
    use agentd_vnc::{VncConfig, VncError, VncProvider};
    let (host, port) = match spec.address.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() => match port.parse::<u16>() {
            Ok(port) => (host, port),
            Err(_) => return Err(bad_vnc_address(&spec.address)),
        },
        _ => return Err(bad_vnc_address(&spec.address)),
    };
    // A restricted task connects to the address checked, not to the name again (it could resolve elsewhere
    // by then).
    let address = if outbound.is_restricted() {
        let allowed = outbound.resolve(host, port).await.map_err(|e| outbound_error("computer.address", e))?;
        allowed.first().map_or_else(|| spec.address.clone(), ToString::to_string)
    } else {
        spec.address.clone()
    };
    let password = match &spec.password_env {
        Some(name) => Some(std::env::var(name).map_err(|_| {
            BuildError::invalid(
                "computer.password_env",
                format!("the environment variable {name} is not set on this worker"),
            )
        })?),
        None => None,
    };
    // One connection per server for the process's life (see `VncProvider::shared`: it keeps x11vnc current).
    match VncProvider::shared(VncConfig::new(address, password)).await {
        Ok(provider) => Ok(provider),
        Err(e @ (VncError::AuthFailed { .. } | VncError::PasswordRequired { .. })) => {
            Err(BuildError::invalid("computer.password_env", format!("{e}")))
        }
        Err(e @ VncError::UnsupportedSecurity { .. }) => Err(BuildError::invalid("computer.address", format!("{e}"))),
        Err(e) => Err(BuildError::Unreachable(e.to_string())),
    }
}

#[cfg(not(feature = "vnc"))]
async fn vnc_computer(_: &VncSpec, _: &Outbound) -> Result<Arc<dyn ComputerProvider>, BuildError> {
    Err(not_built("computer.provider", "vnc"))
}

#[cfg_attr(not(feature = "vnc"), allow(dead_code))]
fn bad_vnc_address(address: &str) -> BuildError {
    BuildError::invalid("computer.address", format!("{address:?} is not host:port (VNC display :N is port 5900+N)"))
}

/// A destination the task's outbound policy refuses is invalid input at `field`; one that does not resolve
/// is unreachable (it may resolve later).
#[cfg_attr(not(any(feature = "vnc", feature = "computer-server")), allow(dead_code))]
fn outbound_error(field: &'static str, error: agentd_computer::outbound::OutboundError) -> BuildError {
    match error {
        e @ agentd_computer::outbound::OutboundError::Refused { .. } => BuildError::invalid(field, e.to_string()),
        e => BuildError::Unreachable(e.to_string()),
    }
}

/// A machine running cua's computer-server. The API key comes from the environment variable the task names,
/// never from the task. Each task gets its own client (HTTP, no session to share).
#[cfg(feature = "computer-server")]
async fn cua_computer(spec: &ComputerServerSpec, outbound: &Outbound) -> Result<Arc<dyn ComputerProvider>, BuildError> {
    use crate::task::CuaTransport;
    use agentd_cuaserver::{CuaConfig, CuaError, CuaServerProvider, Transport, normalize_url};
    let url = normalize_url(&spec.url).map_err(|e| BuildError::invalid("computer.url", e.to_string()))?;
    let api_key = match &spec.api_key_env {
        Some(name) => Some(std::env::var(name).map_err(|_| {
            BuildError::invalid(
                "computer.api_key_env",
                format!("the environment variable {name} is not set on this worker"),
            )
        })?),
        None => None,
    };
    let transport = match spec.transport {
        None | Some(CuaTransport::Auto) => Transport::Auto,
        Some(CuaTransport::Http) => Transport::Http,
        Some(CuaTransport::Websocket) => Transport::WebSocket,
    };
    let config = CuaConfig {
        api_key,
        container_name: spec.container_name.clone(),
        transport,
        outbound: outbound.clone(),
        ..CuaConfig::new(url)
    };
    match CuaServerProvider::connect(config).await {
        Ok(provider) => Ok(Arc::new(provider)),
        Err(CuaError::Refused(e)) => Err(outbound_error("computer.url", e)),
        Err(e @ CuaError::Auth { .. }) => Err(BuildError::invalid("computer.api_key_env", e.to_string())),
        Err(e @ CuaError::Config(_)) => Err(BuildError::invalid("computer.url", e.to_string())),
        Err(e) => Err(BuildError::Unreachable(e.to_string())),
    }
}

#[cfg(not(feature = "computer-server"))]
async fn cua_computer(_: &ComputerServerSpec, _: &Outbound) -> Result<Arc<dyn ComputerProvider>, BuildError> {
    Err(not_built("computer.provider", "computer-server"))
}

/// The desktop of the session agentd runs in, through enigo and xcap. One provider per monitor is kept for
/// the life of the process and shared by every task that asks for it (held keys and buttons are its state).
#[cfg(feature = "portable")]
async fn portable_computer(spec: &PortableSpec) -> Result<Arc<dyn ComputerProvider>, BuildError> {
    use agentd_portable::{PortableConfig, PortableError, PortableProvider};
    match PortableProvider::shared(PortableConfig { monitor: spec.monitor }).await {
        Ok(provider) => Ok(provider),
        Err(e @ PortableError::NoMonitor { .. }) => Err(BuildError::invalid("computer.monitor", format!("{e}"))),
        Err(e) => Err(BuildError::Unreachable(format!("portable desktop: {e}"))),
    }
}

#[cfg(not(feature = "portable"))]
async fn portable_computer(_: &PortableSpec) -> Result<Arc<dyn ComputerProvider>, BuildError> {
    Err(not_built("computer.provider", "portable"))
}

/// A Chromium-family browser over the DevTools protocol: one started for the task (a fresh profile unless the
/// task names a kept one) and stopped when the task's computer is dropped, or one running at `cdp_url`, where
/// the task gets a browser context of its own. A restricted task's `cdp_url` and `start_url` must be at
/// addresses its outbound policy allows.
#[cfg(feature = "browser")]
async fn browser_computer(
    spec: &BrowserSpec,
    outbound: &Outbound,
    pages: Option<(&[String], &Outbound)>,
) -> Result<Arc<dyn ComputerProvider>, BuildError> {
    use agentd_browser::{BrowserConfig, BrowserError, BrowserProvider, Profile, UrlPolicy};
    if outbound.is_restricted() {
        for (field, url) in [("computer.cdp_url", &spec.cdp_url), ("computer.start_url", &spec.start_url)] {
            if let Some(url) = url {
                let url = url.replacen("ws://", "http://", 1);
                check_url(outbound, &url, field.to_string()).await?;
            }
        }
    }
    let default = BrowserConfig::default();
    let config = BrowserConfig {
        executable: spec.executable.as_ref().map(std::path::PathBuf::from),
        cdp_url: spec.cdp_url.clone(),
        size: Size::new(
            spec.width.map_or(default.size.width, |w| w.get()),
            spec.height.map_or(default.size.height, |h| h.get()),
        ),
        start_url: spec.start_url.clone(),
        profile: match spec.profile.as_deref() {
            None | Some("fresh") => Profile::Fresh,
            Some(dir) => Profile::Dir(dir.into()),
        },
        headless: spec.headless.unwrap_or(true),
        url_policy: pages
            .map(|(allowed, outbound)| UrlPolicy { allowed: allowed.to_vec(), outbound: outbound.clone() }),
        ..default
    };
    match BrowserProvider::open(config).await {
        Ok(provider) => Ok(Arc::new(provider)),
        Err(e @ BrowserError::NoExecutable { .. }) => Err(BuildError::invalid("computer.executable", e.to_string())),
        Err(e @ BrowserError::Config(_)) => Err(BuildError::invalid("computer", e.to_string())),
        Err(e @ BrowserError::Navigation { .. }) => Err(BuildError::invalid("computer.start_url", e.to_string())),
        Err(e) => Err(BuildError::Unreachable(e.to_string())),
    }
}

#[cfg(not(feature = "browser"))]
async fn browser_computer(
    _: &BrowserSpec,
    _: &Outbound,
    _: Option<(&[String], &Outbound)>,
) -> Result<Arc<dyn ComputerProvider>, BuildError> {
    Err(not_built("computer.provider", "browser"))
}

/// Builds the model a task names, drawing HTTP clients, rate limiters, prices and keys from `shared` (one per
/// process). Script paths resolve against `base_dir`.
pub fn model(spec: &ModelSpec, shared: &Shared, base_dir: Option<&Path>) -> Result<Arc<dyn Model>, BuildError> {
    use crate::model::{anthropic, compatible, gemini, openai};
    let invalid = |e: ModelError| BuildError::invalid("model", format!("{e}"));
    let options = spec.options();
    match spec {
        ModelSpec::Scripted(ScriptedSpec { script, params }) => {
            let script = match script {
                ScriptSource::Inline(script) => script.clone(),
                ScriptSource::Path(path) => {
                    let path = match base_dir {
                        Some(base) if Path::new(path).is_relative() => base.join(path),
                        _ => Path::new(path).to_path_buf(),
                    };
                    Script::load(&path).map_err(|e| BuildError::invalid("model.script", format!("{e}")))?
                }
            };
            let script = script.with_params(params).map_err(|e| BuildError::invalid(param_field(&e), e.to_string()))?;
            Ok(Arc::new(ScriptedModel::new(script)))
        }
        ModelSpec::Anthropic(vendor) => {
            let settings =
                shared.settings("anthropic", &options, vendor.tool_version.as_deref(), None).map_err(invalid)?;
            Ok(Arc::new(anthropic::AnthropicModel::new(settings).map_err(invalid)?))
        }
        ModelSpec::Openai(vendor) => {
            let settings =
                shared.settings("openai", &options, vendor.tool_version.as_deref(), None).map_err(invalid)?;
            Ok(Arc::new(openai::OpenAiModel::new(settings).map_err(invalid)?))
        }
        ModelSpec::Gemini(_) => {
            let settings = shared.settings("gemini", &options, None, None).map_err(invalid)?;
            Ok(Arc::new(gemini::GeminiModel::new(settings).map_err(invalid)?))
        }
        ModelSpec::OpenaiCompatible(CompatibleSpec { base_url, .. }) => {
            let settings =
                shared.settings("openai-compatible", &options, None, base_url.as_deref()).map_err(invalid)?;
            Ok(Arc::new(compatible::CompatibleModel::new(settings).map_err(invalid)?))
        }
    }
}

/// The task field a script's parameter error is about.
fn param_field(error: &crate::task::script::ParamError) -> String {
    match error {
        crate::task::script::ParamError::Missing { .. } => "model.params".into(),
        crate::task::script::ParamError::Unused { name } => format!("model.params.{name}"),
    }
}

/// Checks, without opening a computer or a model, that a task submitted over the API may run here and can be
/// built: it
/// names only environment variables and base URLs the config allows ([`check_names`]), and its scene and
/// script files lie under `[api] allowed_paths` (absolute paths; `agentd submit` inlines scripts), are
/// regular files of bounded size, and parse. Returns the field at fault and why.
pub async fn check(task: &crate::task::ResolvedTask, config: &Config) -> Result<(), BuildError> {
    check_names(task, config)?;
    check_destinations(task, config).await?;
    let files = config.file_access();
    if let ComputerSpec::Mock(MockSpec { scene: Some(scene), .. }) = &task.computer {
        load_scene(scene, &files).await.map_err(|e| BuildError::invalid("computer.scene", e))?;
    }
    if let ModelSpec::Scripted(ScriptedSpec { script, params }) = &task.model {
        let script = match script {
            ScriptSource::Path(path) => {
                &load_script(path, &files).await.map_err(|e| BuildError::invalid("model.script", e))?
            }
            ScriptSource::Inline(script) => script,
        };
        script.with_params(params).map_err(|e| BuildError::invalid(param_field(&e), e.to_string()))?;
    }
    // The verifier checks (docs/replay-and-verify.md): reference images readable and decodable, `command` checks
    // naming a
    // `[verifiers.NAME]` program.
    crate::verify::Verifier::build(
        &task.verify,
        task.verify_retries,
        &config.verifiers,
        &files,
        &config.api_outbound(),
    )
    .await
    .map_err(|e| BuildError::invalid(e.field, e.message))?;
    // A secret's file is read by the worker that runs the task, never here; its path must be one the
    // operator allows as a secret (`[api] allowed_secret_paths`, not merely a readable file).
    let secret_files = config.secret_file_access();
    for (name, source) in &task.secrets {
        if let SecretSource::File(path) = source {
            let (access, path) = (secret_files.clone(), path.clone());
            tokio::task::spawn_blocking(move || access.resolve(&path))
                .await
                .map_err(|e| BuildError::invalid(format!("secrets.{name}.file"), e.to_string()))?
                .map_err(|e| BuildError::invalid(format!("secrets.{name}.file"), secret_file_error(e)))?;
        }
    }
    Ok(())
}

/// Refuses at submission what a task names that its outbound policy refuses now: an `http` tool's or `http`
/// check's URL, a computer-server's URL, a VNC host (each as written, or as its name resolves now). The
/// worker checks again when it connects — a name may resolve elsewhere by then — so a name that does not
/// resolve here is left to it.
async fn check_destinations(task: &crate::task::ResolvedTask, config: &Config) -> Result<(), BuildError> {
    let outbound = config.api_outbound();
    for (i, tool) in task.tools.iter().enumerate() {
        if let TaskTool::Declared(decl) = tool
            && let ToolKind::Http(http) = &decl.kind
        {
            check_url(&outbound, &http.url, format!("tools[{i}].url")).await?;
        }
        if let TaskTool::Mcp(source) = tool
            && let crate::task::tools::McpTransport::Http { url, .. } = &source.transport
        {
            check_url(&outbound, url, format!("tools[{i}].url")).await?;
        }
    }
    for (i, check) in task.verify.iter().enumerate() {
        if let crate::task::verify::Check::Http(http) = check {
            check_url(&outbound, &http.url, format!("verify[{i}].url")).await?;
        }
    }
    if config.defaults.computer.as_ref() == Some(&task.computer) {
        return Ok(());
    }
    match &task.computer {
        ComputerSpec::ComputerServer(spec) => check_url(&outbound, &spec.url, "computer.url".into()).await,
        ComputerSpec::Browser(spec) => {
            if let Some(url) = &spec.cdp_url {
                check_url(&outbound, &url.replacen("ws://", "http://", 1), "computer.cdp_url".into()).await?;
            }
            match &spec.start_url {
                Some(url) => check_url(&outbound, url, "computer.start_url".into()).await,
                None => Ok(()),
            }
        }
        ComputerSpec::Vnc(spec) => match spec.address.rsplit_once(':').map(|(h, p)| (h, p.parse::<u16>())) {
            Some((host, Ok(port))) => check_host(&outbound, host, port, "computer.address".into()).await,
            _ => Ok(()),
        },
        _ => Ok(()),
    }
}

async fn check_url(outbound: &Outbound, url: &str, field: String) -> Result<(), BuildError> {
    let Ok(parsed) = reqwest::Url::parse(url) else { return Ok(()) };
    let Some(host) = parsed.host_str() else { return Ok(()) };
    let port = parsed.port_or_known_default().unwrap_or(80);
    check_host(outbound, host, port, field).await
}

async fn check_host(outbound: &Outbound, host: &str, port: u16, field: String) -> Result<(), BuildError> {
    use agentd_computer::outbound::OutboundError;
    if let Err(e) = outbound.check_literal(host) {
        return Err(BuildError::invalid(field, e.to_string()));
    }
    // A resolver that does not answer soon does not hold the submission up: the worker checks when it
    // connects.
    match tokio::time::timeout(std::time::Duration::from_secs(2), outbound.resolve(host, port)).await {
        Ok(Err(e @ OutboundError::Refused { .. })) => Err(BuildError::invalid(field, e.to_string())),
        _ => Ok(()),
    }
}

/// Why a task may not take a secret from a file, naming the key that would allow it.
fn secret_file_error(error: FileError) -> String {
    match error {
        FileError::NotAllowed { path } => format!(
            "path {path:?} is not a file the daemon allows as a secret (`api.allowed_secret_paths` in its config)"
        ),
        other => other.to_string(),
    }
}

/// The task's toolbox: its declared tools, `use` entries looked up in the config's `[tools]`, its output
/// schema, its secrets.
pub fn toolbox(
    task: &crate::task::ResolvedTask,
    catalog: &BTreeMap<String, ToolDecl>,
    secrets: Secrets,
    outbound: &Outbound,
) -> Result<Arc<Toolbox>, BuildError> {
    Toolbox::for_task(task, catalog, &ToolMakers { outbound: outbound.clone(), secrets: secrets.clone() })
        .map(|toolbox| Arc::new(toolbox.with_secrets(secrets)))
        .map_err(|ToolboxError { field, message }| BuildError::invalid(field, message))
}

/// Reads the values of the task's secrets (docs/security.md) on this worker: an environment variable (for an API task,
/// one [`check_names`] allows), or a file through [`FileAccess::read`] (for an API task, under `[api]
/// allowed_paths`), its one trailing newline removed. A missing variable, an unreadable file or an empty
/// value is invalid input naming `secrets.NAME`; no error quotes a value.
pub async fn secrets(task: &crate::task::ResolvedTask, files: &FileAccess) -> Result<Secrets, BuildError> {
    let mut values = Vec::with_capacity(task.secrets.len());
    for (name, source) in &task.secrets {
        let value = match source {
            SecretSource::Env(var) => match std::env::var(var) {
                Ok(value) => value,
                Err(std::env::VarError::NotPresent) => {
                    return Err(BuildError::invalid(
                        format!("secrets.{name}.env"),
                        format!("the environment variable {var} is not set on this worker"),
                    ));
                }
                Err(std::env::VarError::NotUnicode(_)) => {
                    return Err(BuildError::invalid(
                        format!("secrets.{name}.env"),
                        format!("the environment variable {var} is not valid UTF-8"),
                    ));
                }
            },
            SecretSource::File(path) => {
                // File errors name the path and the problem, never the content.
                let (_, mut text) = files
                    .read(path)
                    .await
                    .map_err(|e| BuildError::invalid(format!("secrets.{name}.file"), secret_file_error(e)))?;
                if text.ends_with('\n') {
                    text.pop();
                    if text.ends_with('\r') {
                        text.pop();
                    }
                }
                text
            }
        };
        values.push((name.clone(), value));
    }
    Secrets::new(values).map_err(|SecretsError { field, message }| BuildError::invalid(field, message))
}

/// Makes the in-process tool kinds (`http`, `command`). A task's own `http` tools reach what the task's
/// outbound policy allows; the config's `[tools]` are the operator's and reach anything.
struct ToolMakers {
    outbound: Outbound,
    secrets: Secrets,
}

impl Makers for ToolMakers {
    fn make(&self, decl: &ToolDecl, field: &str, configured: bool) -> Result<Arc<dyn Tool>, ToolboxError> {
        match &decl.kind {
            ToolKind::Http(http) => {
                let outbound = if configured { Outbound::open() } else { self.outbound.clone() };
                HttpRunner::make(decl, http, field, outbound, self.secrets.clone())
            }
            ToolKind::Command(command) => CommandRunner::make(decl, command, field, self.secrets.clone()),
            ToolKind::Remote(_) => Err(ToolboxError {
                field: format!("{field}.kind"),
                message: "a `remote` tool runs in the API client, not in agentd".into(),
            }),
        }
    }
}

/// The environment variables, endpoints and tools a task submitted over the API may name: a VNC
/// `password_env` or computer-server `api_key_env` in `[worker] allowed_env` or named by `[defaults]`; a secret's `env` in `[worker]
/// allowed_env`; an `openai-compatible` `base_url` that is the configured one (or the provider's default), one
/// of its `allowed_base_urls`, or the one `[defaults]` names; `{"use": NAME}` only of a tool in the config's
/// `[tools]`; an `http` tool's `headers_env` variables only from `[worker] allowed_env` (its URL is not
/// limited: any http(s) URL). Checked at submission and again by the worker that runs the task. Returns the
/// field and why.
pub fn check_names(task: &crate::task::ResolvedTask, config: &Config) -> Result<(), BuildError> {
    if let ComputerSpec::Desktop(request) = &task.computer
        && !config.desktops.iter().any(|d| d.serves(request))
    {
        return Err(no_desktop(request, config));
    }
    check_browser(task, config)?;
    let computer_env = match &task.computer {
        ComputerSpec::Vnc(VncSpec { password_env: Some(name), .. }) => Some(("computer.password_env", name)),
        ComputerSpec::ComputerServer(ComputerServerSpec { api_key_env: Some(name), .. }) => {
            Some(("computer.api_key_env", name))
        }
        _ => None,
    };
    if let Some((field, name)) = computer_env {
        let from_defaults = match &config.defaults.computer {
            Some(ComputerSpec::Vnc(VncSpec { password_env: Some(d), .. })) => d == name,
            Some(ComputerSpec::ComputerServer(ComputerServerSpec { api_key_env: Some(d), .. })) => d == name,
            _ => false,
        };
        if !from_defaults && !config.worker.allowed_env.contains(name) {
            return Err(env_refused(field, name));
        }
    }
    for (name, source) in &task.secrets {
        if let SecretSource::Env(var) = source
            && !config.worker.allowed_env.contains(var)
        {
            return Err(env_refused(format!("secrets.{name}.env"), var));
        }
    }
    if let ModelSpec::OpenaiCompatible(CompatibleSpec { base_url: Some(url), .. }) = &task.model {
        let provider = "openai-compatible";
        let normal = |u: &str| u.trim_end_matches('/').to_string();
        let configured = config.models.get(provider);
        let mut allowed: Vec<String> = configured.map(|m| m.allowed_base_urls.clone()).unwrap_or_default();
        allowed.push(
            configured
                .and_then(|m| m.base_url.clone())
                .unwrap_or_else(|| crate::model::default_base_url(provider).to_string()),
        );
        if let Some(ModelSpec::OpenaiCompatible(CompatibleSpec { base_url: Some(d), .. })) = &config.defaults.model {
            allowed.push(d.clone());
        }
        if !allowed.iter().any(|a| normal(a) == normal(url)) {
            return Err(BuildError::invalid(
                "model.base_url",
                format!(
                    "base_url {url:?} is not one tasks from the API may use (the configured \
                     `models.{provider}.base_url`, or one of its `allowed_base_urls`)"
                ),
            ));
        }
    }
    check_tools(task, config)
}

/// A browser task from the API may name a browser binary or a kept profile directory only when `[defaults]
/// computer` names the same: the binary is a program the worker runs, the profile someone's cookies.
fn check_browser(task: &crate::task::ResolvedTask, config: &Config) -> Result<(), BuildError> {
    let ComputerSpec::Browser(browser) = &task.computer else { return Ok(()) };
    let defaults = match &config.defaults.computer {
        Some(ComputerSpec::Browser(defaults)) => Some(defaults),
        _ => None,
    };
    if let Some(executable) = &browser.executable
        && defaults.and_then(|d| d.executable.as_ref()) != Some(executable)
    {
        return Err(BuildError::invalid(
            "computer.executable",
            "tasks from the API may not name a browser binary (the daemon's `[defaults] computer` may)",
        ));
    }
    if let Some(profile) = browser.profile.as_deref().filter(|p| *p != "fresh")
        && defaults.and_then(|d| d.profile.as_deref()) != Some(profile)
    {
        return Err(BuildError::invalid(
            "computer.profile",
            "tasks from the API may not name a kept profile directory (the daemon's `[defaults] computer` may)",
        ));
    }
    Ok(())
}

/// A task's tools may name only the config's `[tools]` (`use`), and, in an `http` tool's `headers_env`,
/// only variables in `[worker] allowed_env`: a variable's value goes to the tool's URL, which the task chose.
fn check_tools(task: &crate::task::ResolvedTask, config: &Config) -> Result<(), BuildError> {
    for (i, entry) in task.tools.iter().enumerate() {
        match entry {
            TaskTool::Use { name } if !config.tools.contains_key(name.as_str()) => {
                let known = if config.tools.is_empty() {
                    "none is configured".to_string()
                } else {
                    format!("configured: {}", config.tools.keys().cloned().collect::<Vec<_>>().join(", "))
                };
                return Err(BuildError::invalid(
                    format!("tools[{i}].use"),
                    format!("no tool {:?} in the config's [tools] ({known})", name.as_str()),
                ));
            }
            TaskTool::Declared(ToolDecl { kind: ToolKind::Http(http), .. }) => {
                if let Some((header, var)) =
                    http.headers_env.iter().find(|(_, var)| !config.worker.allowed_env.contains(var))
                {
                    return Err(env_refused(format!("tools[{i}].headers_env.{header}"), var));
                }
            }
            TaskTool::Mcp(source) => check_mcp(source, &format!("tools[{i}]"), config)?,
            _ => {}
        }
    }
    Ok(())
}

/// An API task's MCP server: a program `[tools] allowed_mcp_commands` names, or a URL `allowed_mcp_urls`
/// allows, with only `[worker] allowed_env` variables given to it.
fn check_mcp(source: &crate::task::tools::McpSource, field: &str, config: &Config) -> Result<(), BuildError> {
    use crate::task::tools::McpTransport;
    let allowed = &config.mcp_allowed;
    let env_allowed = |var: &String| config.worker.allowed_env.contains(var);
    match &source.transport {
        McpTransport::Stdio { command, env } => {
            let program = command.first().map(String::as_str).unwrap_or_default();
            if !allowed.allows_command(command) {
                return Err(BuildError::invalid(
                    format!("{field}.command"),
                    format!(
                        "{program:?} is not a program tasks from the API may start as an MCP server (add it to                          `tools.allowed_mcp_commands` in the daemon's config)"
                    ),
                ));
            }
            if let Some(var) = env.iter().find(|v| !env_allowed(v)) {
                return Err(env_refused(format!("{field}.env"), var));
            }
        }
        McpTransport::Http { url, headers_env } => {
            if !allowed.allows_url(url) {
                return Err(BuildError::invalid(
                    format!("{field}.url"),
                    format!(
                        "{url} is not an MCP server tasks from the API may use (add it to `tools.allowed_mcp_urls`                          in the daemon's config)"
                    ),
                ));
            }
            if let Some((header, var)) = headers_env.iter().find(|(_, var)| !env_allowed(var)) {
                return Err(env_refused(format!("{field}.headers_env.{header}"), var));
            }
        }
    }
    Ok(())
}

/// An environment variable a task from the API names (at `field`) that `[worker] allowed_env` does not list.
fn env_refused(field: impl Into<Cow<'static, str>>, var: &str) -> BuildError {
    BuildError::invalid(
        field,
        format!(
            "the environment variable {var:?} is not one tasks from the API may name (add it to \
             `worker.allowed_env` in the daemon's config)"
        ),
    )
}

/// Builds the artifact store the config names.
pub async fn artifact_store(config: &Config) -> Result<Arc<dyn ArtifactStore>, BuildError> {
    match config.artifacts.backend {
        ArtifactsBackend::Fs => Ok(Arc::new(FsStore::new(config.artifacts_dir()))),
        ArtifactsBackend::S3 => s3_store(config).await,
    }
}

/// An S3 bucket. Bad settings (a malformed endpoint URL, a bad prefix) are `Invalid`; whether the bucket can be
/// reached is found out by `health()`.
#[cfg(feature = "s3")]
async fn s3_store(config: &Config) -> Result<Arc<dyn ArtifactStore>, BuildError> {
    let store = crate::artifacts::s3::S3Store::new(&config.artifacts)
        .await
        .map_err(|e| BuildError::Invalid { field: None, message: e.to_string() })?;
    Ok(Arc::new(store))
}

#[cfg(not(feature = "s3"))]
async fn s3_store(_: &Config) -> Result<Arc<dyn ArtifactStore>, BuildError> {
    Err(not_built("artifacts.backend", "s3"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a lean build answers for a part it was built without: invalid input (exit 2, HTTP 400) naming
    /// the field and the cargo feature.
    #[test]
    fn a_part_left_out_of_the_build_is_invalid_input_naming_its_feature() {
        let error = not_built("computer.provider", "portable");
        assert!(matches!(error, BuildError::Invalid { .. }), "{error:?}");
        assert_eq!(error.field(), Some("computer.provider"));
        assert!(error.to_string().contains("built without the `portable` feature"), "{error}");
    }
}
