//! Configuration (docs/configuration.md): the TOML file, its defaults, `AGENTD_<SECTION>_<KEY>` overrides, and
//! validation that reports every problem at once, each with the file, the key and the line.
//!
//! Loading: the file (or built-in defaults when there is none) is parsed into a TOML table; environment
//! overrides are merged into it (values are read as TOML literals — `8`, `true`, `{os = "x"}` — and as
//! strings otherwise); then every section is deserialized on its own so one bad section does not hide the
//! problems of another; then cross-field rules run. `config/agentd.example.toml` documents every key, and a
//! test parses it.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::input::FileAccess;
use crate::record::Usage;
use crate::task::TaskDefaults;
use crate::task::guard::GuardSpec;
use crate::task::tools::ToolDecl;

pub mod schema;
use crate::task::verify::VerifierDecl;

/// The system-wide config file, used when `--config` and `$AGENTD_CONFIG` are not given and it exists.
pub const SYSTEM_CONFIG: &str = "/etc/agentd/agentd.toml";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where the queue database, artifacts, spool and mock desktops live.
    pub data_dir: PathBuf,
    pub api: ApiConfig,
    pub queue: QueueConfig,
    pub worker: WorkerConfig,
    pub artifacts: ArtifactsConfig,
    pub models: BTreeMap<String, ModelConfig>,
    pub defaults: TaskDefaults,
    /// How the loop waits for the screen after actions.
    pub settle: SettlePolicy,
    /// `[guard]`: the stuck-loop guard's thresholds (docs/task-file.md) for tasks that do not set their own.
    pub guard: GuardSpec,
    /// `[tools.NAME]`: tools tasks name with `{"use": "NAME"}` (docs/tools.md); the only place `command` tools come
    /// from.
    pub tools: BTreeMap<String, ToolDecl>,
    /// `[verifiers.NAME]`: programs a task's `{"kind": "command", "use": "NAME"}` check runs
    /// (docs/replay-and-verify.md).
    pub verifiers: BTreeMap<String, VerifierDecl>,
    /// `[log]`: how log lines are written (docs/operations.md).
    pub log: LogConfig,
    /// `[otel]`: where OpenTelemetry traces go (docs/operations.md).
    pub otel: OtelConfig,
    /// `[retention]`: how long finished tasks are kept (docs/operations.md).
    pub retention: RetentionConfig,
    /// `[outbound]`: which internal addresses tasks submitted over the API may reach.
    pub outbound: OutboundConfig,
    /// `[browser]`: what the browser computers of tasks submitted over the API may open.
    pub browser: BrowserSettings,
    /// `[[approval]]`: approval rules for every task (docs/humans.md), before each task's own.
    #[serde(default)]
    pub approval: Vec<crate::task::approval::ApprovalRule>,
    /// `[[desktops]]`: the desktop pool (docs/providers.md) the workers lease desktops from.
    #[serde(default)]
    pub desktops: Vec<DesktopConfig>,
    /// What loading noticed but did not refuse (an `AGENTD_*` variable that names no setting), for the
    /// command line to print.
    #[serde(skip)]
    pub warnings: Vec<String>,
}

/// One desktop of the pool (`[[desktops]]`, docs/providers.md): a computer with a name and labels, and the commands the
/// workers run around its tasks, each bounded by `timeout_secs`: `setup` when the daemon starts, `reset`
/// before each task that did not run on it last, `teardown` when the daemon stops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DesktopConfig {
    pub name: crate::task::DesktopName,
    pub computer: crate::task::ComputerSpec,
    #[serde(default)]
    pub labels: Vec<crate::task::DesktopName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<HookCommand>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset: Option<HookCommand>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub teardown: Option<HookCommand>,
    /// Seconds each of its commands may run before its process group is killed and the command failed.
    #[serde(default = "default_hook_timeout")]
    pub timeout_secs: u64,
}

impl DesktopConfig {
    /// Whether this desktop serves a task's pool request (docs/providers.md): its name, or every label asked for.
    pub fn serves(&self, request: &crate::task::DesktopSpec) -> bool {
        request.matches(self.name.as_str(), self.labels.iter().map(|l| l.as_str()))
    }
}

fn default_hook_timeout() -> u64 {
    120
}

/// A desktop's lifecycle command: a string for `sh -c`, or a program and its arguments (no shell), run on the
/// daemon's machine; or `{guest = "…"}`, a command run inside the desktop through its computer
/// (`ComputerProvider::run_command`: cua computer-server machines).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum HookCommand {
    Shell(String),
    Argv(Vec<String>),
    Guest(GuestCommand),
}

/// `{guest = "…"}`: a command the desktop's computer runs in its guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GuestCommand {
    pub guest: String,
}

impl HookCommand {
    /// The program and its arguments on the daemon's machine; `None` for a guest command.
    pub fn argv(&self) -> Option<Vec<String>> {
        match self {
            Self::Shell(script) => Some(vec!["sh".into(), "-c".into(), script.clone()]),
            Self::Argv(argv) => Some(argv.clone()),
            Self::Guest(_) => None,
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Self::Shell(script) | Self::Guest(GuestCommand { guest: script }) => script.trim().is_empty(),
            Self::Argv(argv) => argv.first().is_none_or(|p| p.is_empty()),
        }
    }
}

/// `[retention]` (docs/operations.md): finished tasks older than `finished_days` are deleted with their steps, events
/// and
/// artifacts by the daemon in the background, `batch` tasks at a time, every `interval_secs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Days a finished task (succeeded, failed, cancelled) is kept after it finished; 0 keeps them forever.
    pub finished_days: u32,
    /// Seconds between two rounds of the background job (it also runs once at start).
    pub interval_secs: u64,
    /// Tasks deleted per batch; the job yields between batches.
    pub batch: u32,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self { finished_days: 30, interval_secs: 300, batch: 100 }
    }
}

/// `[outbound]`: where tasks submitted over the API may connect. Their `http` tools and `http` verifiers,
/// and the VNC host or computer-server URL they name, reach public addresses only; `allow` adds address
/// ranges (`10.1.0.0/16`), addresses (`127.0.0.1`) or host names (`orders.internal`) of the inside.
/// Tasks run with `agentd run`, the config's own `[tools]`, `[[desktops]]` and `[defaults] computer` are
/// the operator's and reach anything. (`docs/security.md` has the table.)
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct OutboundConfig {
    pub allow: Vec<String>,
}

/// `[browser]`: what a browser computer (`computer.provider = "browser"`) of a task submitted over the API may
/// open. Every request the browser makes is checked before it leaves: its URL must match one of
/// `allowed_urls` (patterns, `*` for any characters; every http(s) and ws(s) URL when empty) and its host
/// must resolve to addresses the task's outbound policy allows (`[outbound]`); `about:`, `data:` and `blob:`
/// URLs are allowed, other schemes (`file:`) refused. Tasks run with `agentd run` open anything.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct BrowserSettings {
    pub allowed_urls: Vec<String>,
}

impl Config {
    /// The outbound policy of a task submitted over the API (`OutboundConfig`); the entries were checked
    /// when the config was loaded.
    pub fn api_outbound(&self) -> agentd_computer::outbound::Outbound {
        agentd_computer::outbound::Outbound::restricted(&self.outbound.allow).unwrap_or_else(|_| {
            // Unreachable after validation; refuse every internal address rather than allow one.
            agentd_computer::outbound::Outbound::restricted(&[]).unwrap_or_default()
        })
    }
}

/// How log lines on stderr are written (`[log] format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One human-readable line per event (the default).
    #[default]
    Text,
    /// One JSON object per line, with the fields of the task and step the event happened in.
    Json,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `text` (default) or `json`. Which events are written is `AGENTD_LOG` (a `tracing` filter).
    pub format: LogFormat,
}

/// `[otel]`: OpenTelemetry traces over OTLP/HTTP (protobuf), for builds with the cargo feature `otel`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct OtelConfig {
    /// The collector's OTLP/HTTP base URL (`http://127.0.0.1:4318`); spans go to `{endpoint}/v1/traces`
    /// (an endpoint already ending in `/v1/traces` is used as it is). Unset (the default): no traces.
    pub endpoint: Option<String>,
    /// The `service.name` resource attribute of every span.
    pub service_name: String,
    /// How long one export may take before it is abandoned.
    pub timeout_secs: u64,
}

impl Default for OtelConfig {
    fn default() -> Self {
        Self { endpoint: None, service_name: "agentd".into(), timeout_secs: 10 }
    }
}

impl OtelConfig {
    /// The URL spans are posted to, when an endpoint is set.
    pub fn traces_url(&self) -> Option<String> {
        let endpoint = self.endpoint.as_deref()?.trim_end_matches('/');
        Some(if endpoint.ends_with("/v1/traces") { endpoint.to_string() } else { format!("{endpoint}/v1/traces") })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ApiConfig {
    /// The Unix socket the API listens on (mode 0660). Default: `$RUNTIME_DIRECTORY/agentd.sock`, else
    /// `/run/agentd/agentd.sock` as root, else `$XDG_RUNTIME_DIR/agentd/agentd.sock`, else under `data_dir`.
    pub socket: Option<PathBuf>,
    /// An optional TCP address (`127.0.0.1:8787`); requires `token_file`.
    pub listen: Option<String>,
    /// A file holding the bearer token TCP clients must send.
    pub token_file: Option<PathBuf>,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Host names accepted in the `Host` header of TCP requests, besides localhost and the listen address.
    pub allowed_hosts: Vec<String>,
    /// Directories whose files (mock scenes, model scripts) tasks submitted over the API may name, by
    /// absolute path. Empty (the default): such tasks name no files (`agentd submit` inlines its scripts).
    pub allowed_paths: Vec<PathBuf>,
    /// Files, or directories of files, that tasks submitted over the API may name as a secret's `file`.
    /// Empty (the default): such tasks take secrets from `[worker] allowed_env` variables only. Apart from
    /// `allowed_paths` on purpose: a file readable there is not thereby meant to be sent anywhere.
    pub allowed_secret_paths: Vec<PathBuf>,
    /// A connection must send a complete request head within this many seconds of opening, or of its previous
    /// response (so it is also the idle keep-alive timeout), or it is closed.
    pub header_timeout_secs: u64,
    /// A request body must arrive whole within this many seconds (408 past it).
    pub body_timeout_secs: u64,
    /// A response write that makes no progress for this many seconds ends its connection (a client that
    /// stopped reading, an event stream nobody drains).
    pub write_timeout_secs: u64,
    /// Open connections served at once, the socket and TCP together; more wait in the listen backlog.
    pub max_connections: usize,
    /// A PEM file with the TCP listener's certificate chain (leaf first): with `tls_key`, the listener speaks
    /// HTTPS only. Both files are read again on SIGHUP.
    pub tls_cert: Option<PathBuf>,
    /// A PEM file with the private key of `tls_cert` (PKCS#8, PKCS#1 or SEC1).
    pub tls_key: Option<PathBuf>,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            socket: None,
            listen: None,
            token_file: None,
            max_body_bytes: 1024 * 1024,
            allowed_hosts: Vec::new(),
            allowed_paths: Vec::new(),
            allowed_secret_paths: Vec::new(),
            header_timeout_secs: 10,
            body_timeout_secs: 30,
            write_timeout_secs: 30,
            max_connections: 256,
            tls_cert: None,
            tls_key: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum QueueBackend {
    #[default]
    Sqlite,
    Postgres,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct QueueConfig {
    pub backend: QueueBackend,
    /// SQLite database file (default `data_dir/queue.db`).
    pub path: Option<PathBuf>,
    /// PostgreSQL URL (`postgres://user@host/db`), for `backend = "postgres"`.
    pub url: Option<String>,
    /// How long a lease lasts without a heartbeat.
    pub lease_secs: u64,
    /// How often a worker renews its leases.
    pub heartbeat_secs: u64,
    /// Attempts a task gets before it fails for good (a crash or a retryable error uses one).
    pub max_attempts: u32,
    /// How often an idle worker polls for tasks (a safety net beside wake-ups).
    pub poll_ms: u64,
    /// PostgreSQL: hold a `LISTEN` connection for wake-ups and cancellations from other nodes (turn off
    /// behind a transaction-pooling PgBouncer, where LISTEN does not work; workers then poll).
    pub listen: bool,
    /// PostgreSQL: connections in this process's pool.
    pub max_connections: u32,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            backend: QueueBackend::Sqlite,
            path: None,
            url: None,
            lease_secs: 30,
            heartbeat_secs: 10,
            max_attempts: 3,
            poll_ms: 1000,
            listen: true,
            max_connections: 10,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerConfig {
    /// Tasks run at once.
    pub concurrency: u32,
    /// This worker's labels; a task runs here only if its labels are a subset.
    pub labels: BTreeMap<String, String>,
    /// The worker's name in records (default: the host name and process id).
    pub name: Option<String>,
    /// How long a graceful shutdown waits for running steps before cancelling them.
    pub shutdown_grace_secs: u64,
    /// Where mock desktops keep their state between restarts (default `data_dir/mock`). Nodes of a fleet
    /// that should resume each other's mock tasks share it, as a real VM outlives the worker driving it.
    pub mock_state_dir: Option<PathBuf>,
    /// Environment variables of this worker that tasks submitted over the API may name (a VNC computer's
    /// `password_env`, a computer-server's `api_key_env`), besides those `[defaults]` names. Empty by default: such tasks name none.
    pub allowed_env: Vec<String>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            concurrency: 2,
            labels: BTreeMap::new(),
            name: None,
            shutdown_grace_secs: 30,
            mock_state_dir: None,
            allowed_env: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ArtifactsBackend {
    #[default]
    Fs,
    S3,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ArtifactsConfig {
    pub backend: ArtifactsBackend,
    /// For `fs`: the directory (default `data_dir/artifacts`).
    pub dir: Option<PathBuf>,
    pub bucket: Option<String>,
    pub prefix: String,
    pub region: Option<String>,
    /// An S3-compatible endpoint URL (MinIO, Ceph, moto).
    pub endpoint: Option<String>,
    pub force_path_style: bool,
    /// `when_supported` (default) or `when_required`, for stores that reject the newer default checksums.
    pub checksum: String,
    /// Lifetime of presigned URLs in status documents.
    pub presign_secs: u64,
    /// Largest spool of not-yet-uploaded artifacts; past it the worker stops taking new tasks.
    pub spool_max_bytes: u64,
}

impl Default for ArtifactsConfig {
    fn default() -> Self {
        Self {
            backend: ArtifactsBackend::Fs,
            dir: None,
            bucket: None,
            prefix: String::new(),
            region: None,
            endpoint: None,
            force_path_style: false,
            checksum: "when_supported".into(),
            presign_secs: 3600,
            spool_max_bytes: 512 * 1024 * 1024,
        }
    }
}

/// The environment a vendor's computer tool declares (`[models.NAME] environment`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ComputerEnvironment {
    Linux,
    Ubuntu,
    Windows,
    Mac,
    #[serde(alias = "ENVIRONMENT_BROWSER")]
    Browser,
}

impl ComputerEnvironment {
    /// The name OpenAI's `computer_use_preview` tool takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Linux => "linux",
            Self::Ubuntu => "ubuntu",
            Self::Windows => "windows",
            Self::Mac => "mac",
            Self::Browser => "browser",
        }
    }
}

/// An openai-compatible model's coordinate space (`[models.openai-compatible] coordinate_space`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CoordinateSpace {
    /// Pixels of the screenshot sent.
    #[default]
    Pixels,
    /// 0–1000 across the screenshot.
    #[serde(rename = "relative-1000")]
    Relative1000,
    /// Pixels of the image after Qwen2.5-VL's smart resize.
    SmartResize,
}

/// How an openai-compatible model states its actions (`[models.openai-compatible] action_format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ActionFormat {
    /// Function calling.
    #[default]
    Tools,
    /// The UI-TARS text action grammar.
    UiTars,
}

/// `[models.NAME]`: how to reach one model provider, and how its adapter behaves. Every key is optional; the
/// adapter's defaults are in `docs/models.md` and `config/agentd.example.toml`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    pub base_url: Option<String>,
    /// Base URLs a task submitted over the API may name for this provider (`openai-compatible`'s per-task
    /// `base_url`), besides `base_url` (or the provider's default). Empty by default.
    pub allowed_base_urls: Vec<String>,
    /// The environment variable holding the API key (default: the provider's usual one).
    pub api_key_env: Option<String>,
    /// A file holding the API key (read when a task's model is built; wins over `api_key_env`).
    pub api_key_file: Option<PathBuf>,
    /// The default model id.
    pub model: Option<String>,
    pub max_tokens: Option<u32>,
    pub tool_version: Option<String>,
    /// Longest time one request attempt may take, from sending to the last byte (default 600).
    pub timeout_secs: Option<u64>,
    /// TCP/TLS connect timeout (default 5).
    pub connect_timeout_secs: Option<u64>,
    /// Longest silence inside a response body or stream before the attempt is abandoned (default 60).
    pub idle_timeout_secs: Option<u64>,
    /// Retries of a failed request (5xx, 529, timeouts, 429 without a delay) (default 4).
    pub max_retries: Option<u32>,
    /// Longest total time one call waits out 429s that say how long to wait (default 600).
    pub rate_limit_wait_secs: Option<u64>,
    /// Most requests in flight to this provider from the whole process (default 8).
    pub max_concurrency: Option<u32>,
    /// Stream responses (`model_delta` events as text arrives). Default: true, except openai-compatible.
    pub stream: Option<bool>,
    /// The environment the computer tool declares: OpenAI `linux`/`windows`/`mac`/`ubuntu`/`browser`
    /// (default `linux`), Gemini `browser` (`ENVIRONMENT_BROWSER`, the default and the only one it has).
    pub environment: Option<ComputerEnvironment>,
    /// openai-compatible: the model's coordinate space, `pixels` (default), `relative-1000` or
    /// `smart-resize` (Qwen2.5-VL / UI-TARS-1.5).
    pub coordinate_space: Option<CoordinateSpace>,
    /// openai-compatible: `tools` (function calling, default) or `ui-tars` (the UI-TARS text action grammar).
    pub action_format: Option<ActionFormat>,
    /// Old screenshots leave the context in chunks of this many (default 3 for anthropic, keeping its prompt
    /// cache valid between drops; 1 elsewhere).
    pub screenshot_chunk: Option<u32>,
    /// The model's context window in tokens; older turns are summarised before a request comes near it.
    pub context_window: Option<u64>,
    /// Prices in USD per million tokens by model id prefix, overriding the built-in table:
    /// `{ "model-id" = { input = 3.0, output = 15.0, cache_read = 0.3, cache_write = 3.75 } }`.
    pub prices: BTreeMap<String, Price>,
    /// Acknowledge vendor safety checks without asking a human. Off unless set.
    pub auto_acknowledge_safety_checks: bool,
}

/// The model provider names `[models.NAME]` accepts.
pub const MODEL_PROVIDERS: &[&str] = &["anthropic", "openai", "gemini", "openai-compatible"];

impl Default for Config {
    fn default() -> Self {
        Self {
            data_dir: default_data_dir(),
            api: ApiConfig::default(),
            queue: QueueConfig::default(),
            worker: WorkerConfig::default(),
            artifacts: ArtifactsConfig::default(),
            models: BTreeMap::new(),
            defaults: TaskDefaults::default(),
            settle: SettlePolicy::default(),
            guard: GuardSpec::default(),
            tools: BTreeMap::new(),
            verifiers: BTreeMap::new(),
            log: LogConfig::default(),
            otel: OtelConfig::default(),
            retention: RetentionConfig::default(),
            outbound: OutboundConfig::default(),
            browser: BrowserSettings::default(),
            approval: Vec::new(),
            desktops: Vec::new(),
            warnings: Vec::new(),
        }
    }
}

/// Whether this process runs as root (never on Windows, which has no such user id).
#[cfg(not(unix))]
fn is_root() -> bool {
    false
}

#[cfg(unix)]
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// This machine's host name (for worker names): `%COMPUTERNAME%` on Windows.
#[cfg(not(unix))]
pub fn host_name() -> String {
    std::env::var("COMPUTERNAME").ok().filter(|name| !name.is_empty()).unwrap_or_else(|| "localhost".into())
}

/// This machine's host name (for worker names).
#[cfg(unix)]
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        if let Ok(name) = std::str::from_utf8(&buf[..end])
            && !name.is_empty()
        {
            return name.to_string();
        }
    }
    "localhost".into()
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// `$STATE_DIRECTORY` (systemd), else `/var/lib/agentd` as root, else `$XDG_DATA_HOME/agentd`, else
/// `~/.local/share/agentd`, else `./agentd-data`.
pub fn default_data_dir() -> PathBuf {
    if let Some(dir) = env_path("STATE_DIRECTORY") {
        // systemd may list several, colon-separated; the first is ours.
        let first = dir.to_string_lossy().split(':').next().unwrap_or_default().to_string();
        return PathBuf::from(first);
    }
    if is_root() {
        return PathBuf::from("/var/lib/agentd");
    }
    if let Some(dir) = env_path("XDG_DATA_HOME") {
        return dir.join("agentd");
    }
    if let Some(home) = env_path("HOME") {
        return home.join(".local/share/agentd");
    }
    PathBuf::from("agentd-data")
}

impl Config {
    /// Which files tasks submitted over the API may name: absolute paths under `[api] allowed_paths`, and the
    /// scene and script the config itself names in `[defaults]`.
    pub fn file_access(&self) -> FileAccess {
        use crate::task::{ComputerSpec, MockSpec, ModelSpec, SceneSource, ScriptSource, ScriptedSpec};
        let mut configured = Vec::new();
        if let Some(ComputerSpec::Mock(MockSpec { scene: Some(SceneSource::Named(scene)), .. })) =
            &self.defaults.computer
        {
            configured.push(scene.clone());
        }
        if let Some(ModelSpec::Scripted(ScriptedSpec { script: ScriptSource::Path(script), .. })) = &self.defaults.model
        {
            configured.push(script.clone());
        }
        FileAccess::Api { allowed: self.api.allowed_paths.clone(), configured }
    }

    /// Which files tasks submitted over the API may name as secrets: those under `[api]
    /// allowed_secret_paths`, nothing else.
    pub fn secret_file_access(&self) -> FileAccess {
        FileAccess::Api { allowed: self.api.allowed_secret_paths.clone(), configured: Vec::new() }
    }

    pub fn socket_path(&self) -> PathBuf {
        if let Some(socket) = &self.api.socket {
            return socket.clone();
        }
        if let Some(dir) = env_path("RUNTIME_DIRECTORY") {
            let first = dir.to_string_lossy().split(':').next().unwrap_or_default().to_string();
            return PathBuf::from(first).join("agentd.sock");
        }
        if is_root() {
            return PathBuf::from("/run/agentd/agentd.sock");
        }
        if let Some(dir) = env_path("XDG_RUNTIME_DIR") {
            return dir.join("agentd/agentd.sock");
        }
        self.data_dir.join("agentd.sock")
    }

    pub fn queue_path(&self) -> PathBuf {
        self.queue.path.clone().unwrap_or_else(|| self.data_dir.join("queue.db"))
    }

    pub fn artifacts_dir(&self) -> PathBuf {
        self.artifacts.dir.clone().unwrap_or_else(|| self.data_dir.join("artifacts"))
    }

    pub fn spool_dir(&self) -> PathBuf {
        self.data_dir.join("spool")
    }

    /// Where a mock desktop keeps its state for a task, so it survives a daemon restart like a real VM does.
    pub fn mock_dir(&self, task_id: &str) -> PathBuf {
        self.worker.mock_state_dir.clone().unwrap_or_else(|| self.data_dir.join("mock")).join(task_id)
    }

    pub fn model(&self, provider: &str) -> ModelConfig {
        self.models.get(provider).cloned().unwrap_or_default()
    }
}

/// Shortest bearer token `api.token_file` may hold.
pub const MIN_TOKEN_CHARS: usize = 16;

/// Reads the bearer token of `api.token_file` (the file's text, trimmed) as `serve` uses it. Errors name the
/// key and the file, never the token.
pub fn read_token_file(path: &Path) -> Result<String, String> {
    let token = std::fs::read_to_string(path)
        .map_err(|e| format!("api.token_file {}: {e}", path.display()))?
        .trim()
        .to_string();
    if token.chars().count() < MIN_TOKEN_CHARS {
        return Err(format!(
            "api.token_file {}: the token must have at least {MIN_TOKEN_CHARS} characters",
            path.display()
        ));
    }
    Ok(token)
}

/// Windows has no file mode bits to check (its ACLs are the operator's to set).
#[cfg(not(unix))]
pub fn world_readable_warning(_key: &str, _path: &Path) -> Option<String> {
    None
}

/// A warning when a secret's file may be read by every local user (mode `o+r`), else `None`.
#[cfg(unix)]
pub fn world_readable_warning(key: &str, path: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode();
    (mode & 0o004 != 0).then(|| {
        format!(
            "{key} {} is readable by every local user (mode {:o}); make it 0600 or 0640 (chmod o-rwx)",
            path.display(),
            mode & 0o777
        )
    })
}

/// One configuration problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    pub field: Option<String>,
    /// The environment variable the value came from (then `line` is 0: the file is not to blame).
    pub variable: Option<String>,
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// Everything wrong with a configuration, each problem on its own line.
#[derive(Debug, Error)]
pub struct ConfigError {
    pub source_name: String,
    pub problems: Vec<ConfigProblem>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self
            .problems
            .iter()
            .map(|p| match &p.variable {
                Some(variable) => crate::task::format_location(
                    &format!("environment variable {variable}"),
                    &p.field,
                    0,
                    0,
                    &p.message,
                ),
                None => crate::task::format_location(&self.source_name, &p.field, p.line, p.column, &p.message),
            })
            .collect();
        f.write_str(&lines.join("\n"))
    }
}

/// Where the configuration comes from.
#[derive(Debug, Clone)]
pub enum ConfigSource {
    File(PathBuf),
    BuiltIn,
}

impl ConfigSource {
    /// `--config PATH`, else `$AGENTD_CONFIG`, else the system file unless it does not exist, else built-in
    /// defaults. Only "not found" means there is no system file: one that cannot be looked at (permission
    /// denied on `/etc/agentd`, an I/O error) is still the file, and loading it reports why it cannot be read
    /// — a service never runs on the built-in defaults because its config was out of its reach.
    pub fn locate(explicit: Option<&Path>) -> Self {
        Self::locate_with(explicit, Path::new(SYSTEM_CONFIG))
    }

    fn locate_with(explicit: Option<&Path>, system: &Path) -> Self {
        if let Some(path) = explicit {
            return Self::File(path.to_path_buf());
        }
        if let Some(path) = env_path("AGENTD_CONFIG") {
            return Self::File(path);
        }
        match std::fs::metadata(system) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Self::BuiltIn,
            _ => Self::File(system.to_path_buf()),
        }
    }

    pub fn name(&self) -> String {
        match self {
            Self::File(path) => path.display().to_string(),
            Self::BuiltIn => "<built-in config>".into(),
        }
    }

    /// Loads and validates the configuration with the process environment's overrides; prints what it
    /// noticed but did not refuse ([`Config::warnings`]) on stderr, once per process.
    pub fn load(&self) -> Result<Config, ConfigError> {
        let config = self.load_quietly()?;
        static WARNED: std::sync::Once = std::sync::Once::new();
        WARNED.call_once(|| {
            for warning in &config.warnings {
                eprintln!("agentd: warning: {warning}");
            }
        });
        Ok(config)
    }

    /// As [`ConfigSource::load`], printing nothing.
    pub fn load_quietly(&self) -> Result<Config, ConfigError> {
        let env: Vec<(String, String)> = std::env::vars().collect();
        match self {
            Self::File(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
                    source_name: self.name(),
                    problems: vec![ConfigProblem {
                        field: None,
                        variable: None,
                        line: 0,
                        column: 0,
                        message: format!("cannot read: {e}"),
                    }],
                })?;
                parse(&text, &self.name(), &env)
            }
            Self::BuiltIn => parse("", &self.name(), &env),
        }
    }
}
const SECTIONS: &[&str] = &[
    "api",
    "queue",
    "worker",
    "artifacts",
    "models",
    "defaults",
    "settle",
    "guard",
    "tools",
    "verifiers",
    "log",
    "otel",
    "retention",
    "outbound",
    "browser",
    "approval",
    "desktops",
];
const MODEL_KEYS: &[&str] = &[
    "base_url",
    "allowed_base_urls",
    "api_key_env",
    "api_key_file",
    "model",
    "max_tokens",
    "tool_version",
    "timeout_secs",
    "connect_timeout_secs",
    "idle_timeout_secs",
    "max_retries",
    "rate_limit_wait_secs",
    "max_concurrency",
    "stream",
    "environment",
    "coordinate_space",
    "action_format",
    "screenshot_chunk",
    "context_window",
    "prices",
    "auto_acknowledge_safety_checks",
];

/// Parses config text with environment overrides (`env` as (name, value) pairs).
pub fn parse(text: &str, source_name: &str, env: &[(String, String)]) -> Result<Config, ConfigError> {
    let error = |problems| ConfigError { source_name: source_name.to_string(), problems };
    let mut table: toml::Table = toml::from_str(text).map_err(|e| {
        let (line, column) = e.span().map_or((0, 0), |span| crate::input::line_column(text.as_bytes(), span.start));
        error(vec![ConfigProblem {
            field: None,
            variable: None,
            line,
            column,
            message: e.message().trim().to_string(),
        }])
    })?;
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let from_env = apply_env(&mut table, env, &mut problems, &mut warnings);

    let locate = |field: &str| locate_key(text, field);
    let mut config = Config::default();
    let mut section_problems = Vec::new();
    for (key, value) in table {
        match key.as_str() {
            "data_dir" => section(value, &key, &mut section_problems).map(|v| config.data_dir = v),
            "api" => keyed(value, &key, &mut section_problems).map(|v| config.api = v),
            "queue" => keyed(value, &key, &mut section_problems).map(|v| config.queue = v),
            "worker" => keyed(value, &key, &mut section_problems).map(|v| config.worker = v),
            "artifacts" => keyed(value, &key, &mut section_problems).map(|v| config.artifacts = v),
            "defaults" => keyed(value, &key, &mut section_problems).map(|v| config.defaults = v),
            "settle" => keyed(value, &key, &mut section_problems).map(|v| config.settle = v),
            "guard" => keyed(value, &key, &mut section_problems).map(|v| config.guard = v),
            "log" => keyed(value, &key, &mut section_problems).map(|v| config.log = v),
            "otel" => keyed(value, &key, &mut section_problems).map(|v| config.otel = v),
            "retention" => keyed(value, &key, &mut section_problems).map(|v| config.retention = v),
            "outbound" => keyed(value, &key, &mut section_problems).map(|v| config.outbound = v),
            "browser" => keyed(value, &key, &mut section_problems).map(|v| config.browser = v),
            "approval" => section(value, &key, &mut section_problems).map(|v| config.approval = v),
            "desktops" => section(value, &key, &mut section_problems).map(|v| config.desktops = v),
            "models" => models(value, &mut section_problems).map(|v| config.models = v),
            "tools" => tools(value, &mut section_problems).map(|v| config.tools = v),
            "verifiers" => verifiers(value, &mut section_problems).map(|v| config.verifiers = v),
            other => {
                section_problems.push((
                    other.to_string(),
                    format!("unknown key `{other}`; expected data_dir or one of the sections {}", SECTIONS.join(", ")),
                ));
                None
            }
        };
    }
    for (field, message) in section_problems.into_iter().chain(validate(&config)) {
        // A value set by a variable is that variable's problem, not the file's.
        let variable = from_env
            .iter()
            .find(|(key, _)| field == **key || field.starts_with(&format!("{key}.")))
            .map(|(_, variable)| variable.clone());
        let (line, column) = if variable.is_some() { (0, 0) } else { locate(&field) };
        problems.push(ConfigProblem { field: Some(field), variable, line, column, message });
    }
    config.warnings = warnings;
    if problems.is_empty() { Ok(config) } else { Err(error(problems)) }
}

/// The known variable most like `name` (at most a third of its letters different), for a warning.
fn closest_variable(name: &str) -> Option<String> {
    let mut known: Vec<String> = NOT_CONFIG_KEYS.iter().map(|k| (*k).to_string()).collect();
    known.push("AGENTD_DATA_DIR".into());
    if let Ok(toml::Value::Table(table)) = toml::Value::try_from(Config::default()) {
        for (section, value) in table {
            if let toml::Value::Table(keys) = value {
                for key in keys.keys() {
                    known.push(format!("AGENTD_{}_{}", section, key).to_ascii_uppercase());
                }
            }
        }
    }
    known
        .into_iter()
        .map(|k| (strsim::levenshtein(name, &k), k))
        .filter(|(distance, _)| *distance * 3 <= name.len())
        .min()
        .map(|(_, k)| k)
}

/// Deserializes a section key by key (each alone, the others defaulted), so every bad key is reported,
/// then as a whole.
fn keyed<T: serde::de::DeserializeOwned>(
    value: toml::Value,
    name: &str,
    problems: &mut Vec<(String, String)>,
) -> Option<T> {
    let toml::Value::Table(table) = value else {
        return section(value, name, problems);
    };
    let before = problems.len();
    for (key, item) in &table {
        let mut single = toml::Table::new();
        single.insert(key.clone(), item.clone());
        let _: Option<T> = section(toml::Value::Table(single), name, problems);
    }
    if problems.len() > before {
        return None;
    }
    section(toml::Value::Table(table), name, problems)
}

/// `[models.NAME]` tables, each checked key by key.
fn models(value: toml::Value, problems: &mut Vec<(String, String)>) -> Option<BTreeMap<String, ModelConfig>> {
    let toml::Value::Table(table) = value else {
        return section(value, "models", problems);
    };
    let mut out = BTreeMap::new();
    for (name, entry) in table {
        if let Some(model) = keyed::<ModelConfig>(entry, &format!("models.{name}"), problems) {
            out.insert(name, model);
        }
    }
    Some(out)
}

/// `[tools.NAME]` tables: a tool declaration of docs/tools.md whose name is its key.
fn tools(value: toml::Value, problems: &mut Vec<(String, String)>) -> Option<BTreeMap<String, ToolDecl>> {
    let toml::Value::Table(table) = value else {
        return section(value, "tools", problems);
    };
    let mut out = BTreeMap::new();
    for (name, entry) in table {
        let field = format!("tools.{name}");
        let toml::Value::Table(mut entry) = entry else {
            problems.push((field, "must be a table of a tool's settings".into()));
            continue;
        };
        if entry.contains_key("name") {
            problems.push((format!("{field}.name"), "the tool's name is its key in [tools]; remove `name`".into()));
            continue;
        }
        entry.insert("name".into(), toml::Value::String(name.clone()));
        if let Some(tool) = section::<ToolDecl>(toml::Value::Table(entry), &field, problems) {
            out.insert(name, tool);
        }
    }
    Some(out)
}

/// `[verifiers.NAME]` tables (docs/replay-and-verify.md); `command` names a program.
fn verifiers(value: toml::Value, problems: &mut Vec<(String, String)>) -> Option<BTreeMap<String, VerifierDecl>> {
    let toml::Value::Table(table) = value else {
        return section(value, "verifiers", problems);
    };
    let mut out = BTreeMap::new();
    for (name, entry) in table {
        let field = format!("verifiers.{name}");
        if let Some(decl) = section::<VerifierDecl>(entry, &field, problems) {
            if decl.command.first().is_none_or(String::is_empty) {
                problems.push((format!("{field}.command"), "name the program to run (a non-empty list)".into()));
                continue;
            }
            out.insert(name, decl);
        }
    }
    Some(out)
}

/// Deserializes one value, recording (field path, message) on failure.
fn section<T: serde::de::DeserializeOwned>(
    value: toml::Value,
    key: &str,
    problems: &mut Vec<(String, String)>,
) -> Option<T> {
    match serde_path_to_error::deserialize(value) {
        Ok(v) => Some(v),
        Err(e) => {
            let path = e.path().to_string();
            // toml appends "\nin `key`" lines; the path already says where.
            let message = e.into_inner().to_string().lines().next().unwrap_or_default().trim().to_string();
            // Hand-read values (a tool's `kind`) name their inner field in the message: move it to the path.
            let (path, message) = crate::input::fold_inner_path(path, message);
            let mut field = if path == "." || path.is_empty() { key.to_string() } else { format!("{key}.{path}") };
            if let Some(name) = message.strip_prefix("missing field `").and_then(|m| m.split('`').next()) {
                field = format!("{field}.{name}");
            }
            problems.push((field, message));
            None
        }
    }
}

fn validate(config: &Config) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    let mut problem = |field: &str, message: String| problems.push((field.to_string(), message));
    if config.data_dir.as_os_str().is_empty() {
        problem("data_dir", "must not be empty".into());
    }
    let mut names = std::collections::BTreeSet::new();
    for (i, desktop) in config.desktops.iter().enumerate() {
        if !names.insert(desktop.name.as_str()) {
            problem(&format!("desktops[{i}].name"), format!("{:?} names another desktop too", desktop.name.as_str()));
        }
        if matches!(desktop.computer, crate::task::ComputerSpec::Desktop(_)) {
            problem(&format!("desktops[{i}].computer"), "needs a `provider` (local, vnc, computer-server, …)".into());
        }
        if desktop.timeout_secs == 0 || desktop.timeout_secs > 3600 {
            problem(
                &format!("desktops[{i}].timeout_secs"),
                format!("must be between 1 and 3600, got {}", desktop.timeout_secs),
            );
        }
        for (what, command) in [("setup", &desktop.setup), ("reset", &desktop.reset), ("teardown", &desktop.teardown)] {
            if command.as_ref().is_some_and(HookCommand::is_empty) {
                problem(&format!("desktops[{i}].{what}"), "must not be empty".into());
            }
        }
    }
    if config.worker.concurrency == 0 || config.worker.concurrency > 256 {
        problem("worker.concurrency", format!("must be between 1 and 256, got {}", config.worker.concurrency));
    }
    if config.queue.lease_secs < 2 {
        problem("queue.lease_secs", format!("must be at least 2, got {}", config.queue.lease_secs));
    }
    if config.queue.heartbeat_secs == 0 || config.queue.heartbeat_secs * 2 > config.queue.lease_secs {
        problem(
            "queue.heartbeat_secs",
            format!(
                "must be at least 1 and at most half of queue.lease_secs ({}), got {}",
                config.queue.lease_secs, config.queue.heartbeat_secs
            ),
        );
    }
    if config.queue.max_attempts == 0 {
        problem("queue.max_attempts", "must be at least 1".into());
    }
    for (i, pattern) in config.browser.allowed_urls.iter().enumerate() {
        if pattern.trim().is_empty() {
            problem(&format!("browser.allowed_urls[{i}]"), "an empty pattern (use `*` for any characters)".into());
        }
    }
    for (i, entry) in config.outbound.allow.iter().enumerate() {
        if let Err(message) = agentd_computer::outbound::Outbound::restricted(std::slice::from_ref(entry)) {
            problem(&format!("outbound.allow[{i}]"), message);
        }
    }
    if config.retention.interval_secs == 0 {
        problem("retention.interval_secs", "must be at least 1".into());
    }
    if config.retention.batch == 0 || config.retention.batch > 1000 {
        problem("retention.batch", format!("must be between 1 and 1000, got {}", config.retention.batch));
    }
    if config.settle.interval_ms == 0 {
        problem("settle.interval_ms", "must be at least 1".into());
    }
    if config.settle.timeout_ms > 60_000 {
        problem("settle.timeout_ms", format!("must be at most 60000, got {}", config.settle.timeout_ms));
    }
    if config.queue.poll_ms == 0 {
        problem("queue.poll_ms", "must be at least 1".into());
    }
    if config.queue.max_connections < 2 {
        problem("queue.max_connections", format!("must be at least 2, got {}", config.queue.max_connections));
    }
    match config.queue.backend {
        QueueBackend::Postgres if config.queue.url.is_none() => {
            problem("queue.url", "backend \"postgres\" needs url (postgres://user@host/db)".into())
        }
        QueueBackend::Postgres if config.queue.path.is_some() => {
            problem("queue.path", "path is for backend \"sqlite\"; postgres uses url".into())
        }
        QueueBackend::Sqlite if config.queue.url.is_some() => {
            problem("queue.url", "url is for backend \"postgres\"; sqlite uses path".into())
        }
        _ => {}
    }
    if let Some(url) = &config.queue.url
        && !(url.starts_with("postgres://") || url.starts_with("postgresql://"))
    {
        problem("queue.url", "must start with postgres:// or postgresql://".into());
    }
    // The queue is the daemon's: a library without it (no feature `daemon`, no sqlx) has no queue to check for.
    #[cfg(feature = "daemon")]
    if let Some(url) = &config.queue.url
        && (url.starts_with("postgres://") || url.starts_with("postgresql://"))
        && let Err(e) = url.parse::<sqlx::postgres::PgConnectOptions>()
    {
        // The parser's messages never repeat the URL, so no password reaches the terminal.
        problem("queue.url", format!("not a valid PostgreSQL URL: {e}"));
    }
    #[cfg(not(unix))]
    if config.api.socket.is_some() {
        problem("api.socket", "this platform has no Unix socket: the API listens on TCP only (api.listen)".into());
    }
    if let Some(listen) = &config.api.listen {
        if listen.parse::<std::net::SocketAddr>().is_err() {
            problem("api.listen", format!("{listen:?} is not an address like 127.0.0.1:8787"));
        }
        if config.api.token_file.is_none() {
            problem("api.token_file", "a TCP listener (api.listen) needs a bearer token file".into());
        }
    }
    match (&config.api.tls_cert, &config.api.tls_key) {
        (Some(_), None) => {
            problem("api.tls_key", "api.tls_cert needs api.tls_key (the certificate's private key)".into())
        }
        (None, Some(_)) => problem("api.tls_cert", "api.tls_key needs api.tls_cert (the certificate chain)".into()),
        (Some(_), Some(_)) if config.api.listen.is_none() => {
            problem("api.tls_cert", "TLS is for the TCP listener: set api.listen too".into())
        }
        _ => {}
    }
    if let Some(endpoint) = &config.otel.endpoint
        && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
    {
        problem("otel.endpoint", format!("{endpoint:?} is not an http or https URL (http://127.0.0.1:4318)"));
    }
    if config.otel.service_name.trim().is_empty() {
        problem("otel.service_name", "must not be empty".into());
    }
    if config.otel.timeout_secs == 0 || config.otel.timeout_secs > 600 {
        problem("otel.timeout_secs", format!("must be between 1 and 600, got {}", config.otel.timeout_secs));
    }
    if config.api.max_body_bytes < 1024 {
        problem("api.max_body_bytes", "must be at least 1024".into());
    }
    // Past a day a timeout protects nothing (and huge values would overflow the timer).
    for (key, value, max) in [
        ("api.header_timeout_secs", config.api.header_timeout_secs, 86_400),
        ("api.body_timeout_secs", config.api.body_timeout_secs, 86_400),
        ("api.write_timeout_secs", config.api.write_timeout_secs, 86_400),
        ("api.max_connections", config.api.max_connections as u64, 1_000_000),
    ] {
        if !(1..=max).contains(&value) {
            problem(key, format!("must be between 1 and {max}"));
        }
    }
    match config.artifacts.backend {
        ArtifactsBackend::S3 if config.artifacts.bucket.is_none() => {
            problem("artifacts.bucket", "backend \"s3\" needs a bucket".into())
        }
        ArtifactsBackend::Fs if config.artifacts.bucket.is_some() => {
            problem("artifacts.bucket", "bucket is for backend \"s3\"; fs uses dir".into())
        }
        _ => {}
    }
    if !matches!(config.artifacts.checksum.as_str(), "when_supported" | "when_required") {
        problem(
            "artifacts.checksum",
            format!("must be \"when_supported\" or \"when_required\", got {:?}", config.artifacts.checksum),
        );
    }
    for name in config.models.keys() {
        if !MODEL_PROVIDERS.contains(&name.as_str()) {
            problem(
                &format!("models.{name}"),
                format!("unknown model provider; expected one of {}", MODEL_PROVIDERS.join(", ")),
            );
        }
    }
    for (name, model) in &config.models {
        for (key, value) in [
            ("timeout_secs", model.timeout_secs),
            ("connect_timeout_secs", model.connect_timeout_secs),
            ("idle_timeout_secs", model.idle_timeout_secs),
            ("max_concurrency", model.max_concurrency.map(u64::from)),
            ("screenshot_chunk", model.screenshot_chunk.map(u64::from)),
            ("max_tokens", model.max_tokens.map(u64::from)),
        ] {
            if value == Some(0) {
                problem(&format!("models.{name}.{key}"), "must be at least 1".into());
            }
        }
        if name == "gemini"
            && let Some(environment) = model.environment
            && environment != ComputerEnvironment::Browser
        {
            problem(
                "models.gemini.environment",
                format!("{:?}: the Gemini computer-use tool has only \"browser\"", environment.as_str()),
            );
        }
        for (model_id, price) in &model.prices {
            let values = [Some(price.input), Some(price.output), price.cache_read, price.cache_write];
            if values.into_iter().flatten().any(|v| !v.is_finite() || v < 0.0) {
                problem(&format!("models.{name}.prices"), format!("{model_id:?}: prices must be non-negative numbers"));
            }
        }
        if let Some(url) = &model.base_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            problem(&format!("models.{name}.base_url"), format!("{url:?} must start with http:// or https://"));
        }
        for url in &model.allowed_base_urls {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                problem(
                    &format!("models.{name}.allowed_base_urls"),
                    format!("{url:?} must start with http:// or https://"),
                );
            }
        }
    }
    for path in &config.api.allowed_secret_paths {
        if !path.is_absolute() {
            problem("api.allowed_secret_paths", format!("{:?} must be an absolute path", path.display().to_string()));
        }
    }
    for dir in &config.api.allowed_paths {
        if !dir.is_absolute() {
            problem("api.allowed_paths", format!("{:?} must be an absolute directory", dir.display().to_string()));
        }
    }
    for name in &config.worker.allowed_env {
        if name.is_empty() || name.contains(['=', '\0']) {
            problem("worker.allowed_env", format!("{name:?} is not an environment variable name"));
        }
    }
    problems
}

/// `AGENTD_*` variables that are not configuration keys: the CLI's (`AGENTD_CONFIG`, `AGENTD_SOCKET`,
/// `AGENTD_URL`, `AGENTD_TOKEN`, `AGENTD_CA_FILE`), the log filter, and those the test suite and benchmarks
/// read (besides every `AGENTD_TEST_*` and `AGENTD_BENCH_*`).
const NOT_CONFIG_KEYS: &[&str] = &[
    "AGENTD_CONFIG",
    "AGENTD_SOCKET",
    "AGENTD_URL",
    "AGENTD_TOKEN",
    // The CA file the CLI trusts for `https://` daemon URLs (`cli::client`).
    "AGENTD_CA_FILE",
    "AGENTD_LOG",
    "AGENTD_CRASH_SEED",
    "AGENTD_X11VNC_ARGS",
];

/// Merges `AGENTD_<SECTION>_<KEY>` (and `AGENTD_DATA_DIR`, `AGENTD_MODELS_<NAME>_<KEY>`) into the table, and
/// returns which variable set which key (`worker.concurrency` → `AGENTD_WORKER_CONCURRENCY`). An `AGENTD_*`
/// variable that names no section is a problem, as an unknown key in the file is.
fn apply_env(
    table: &mut toml::Table,
    env: &[(String, String)],
    problems: &mut Vec<ConfigProblem>,
    warnings: &mut Vec<String>,
) -> BTreeMap<String, String> {
    let mut from_env = BTreeMap::new();
    let mut unknown = |name: &str, message: String| {
        problems.push(ConfigProblem { field: None, variable: Some(name.to_string()), line: 0, column: 0, message })
    };
    for (name, raw) in env {
        let Some(rest) = name.strip_prefix("AGENTD_") else {
            continue;
        };
        if NOT_CONFIG_KEYS.contains(&name.as_str()) || rest.starts_with("TEST_") || rest.starts_with("BENCH_") {
            continue;
        }
        let rest = rest.to_ascii_lowercase();
        let value = env_value(raw);
        if rest == "data_dir" {
            table.insert("data_dir".into(), value);
            from_env.insert("data_dir".to_string(), name.clone());
            continue;
        }
        if let Some(model_rest) = rest.strip_prefix("models_") {
            // The longest key that ends the name wins (`idle_timeout_secs` before `timeout_secs`).
            let key = MODEL_KEYS.iter().filter(|k| model_rest.ends_with(&format!("_{k}"))).max_by_key(|k| k.len());
            match key {
                Some(key) => {
                    let provider = model_rest[..model_rest.len() - key.len() - 1].replace('_', "-");
                    from_env.insert(format!("models.{provider}.{key}"), name.clone());
                    let models = table.entry("models").or_insert_with(|| toml::Value::Table(toml::Table::new()));
                    if let toml::Value::Table(models) = models {
                        let entry = models.entry(provider).or_insert_with(|| toml::Value::Table(toml::Table::new()));
                        if let toml::Value::Table(entry) = entry {
                            entry.insert((*key).to_string(), value);
                        }
                    }
                }
                None => unknown(name, format!("unknown model key; expected one of {}", MODEL_KEYS.join(", "))),
            }
            continue;
        }
        let Some(section) = [
            "api",
            "queue",
            "worker",
            "artifacts",
            "defaults",
            "settle",
            "guard",
            "log",
            "otel",
            "retention",
            "outbound",
            "browser",
        ]
        .into_iter()
        .find(|s| rest.starts_with(&format!("{s}_"))) else {
            // A variable that names no section is somebody else's (a script's own `AGENTD_BIN`): noted, not
            // refused. One that names a section but no key of it is refused below, with the section's keys.
            let hint = match closest_variable(name) {
                Some(close) => format!("; did you mean {close}?"),
                None => String::new(),
            };
            warnings.push(format!("the environment variable {name} is not an agentd setting; ignored{hint}"));
            continue;
        };
        let key = rest[section.len() + 1..].to_string();
        from_env.insert(format!("{section}.{key}"), name.clone());
        let entry = table.entry(section).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if let toml::Value::Table(entry) = entry {
            entry.insert(key, value);
        }
    }
    from_env
}

/// An environment value as TOML: a literal when it parses as one (`8`, `true`, `["a"]`, `{a = "b"}`),
/// otherwise a string.
fn env_value(raw: &str) -> toml::Value {
    let looks_literal = raw.starts_with('[')
        || raw.starts_with('{')
        || raw.starts_with('"')
        || raw == "true"
        || raw == "false"
        || raw.parse::<i64>().is_ok()
        || raw.parse::<f64>().is_ok();
    if looks_literal
        && let Ok(mut parsed) = toml::from_str::<toml::Table>(&format!("v = {raw}"))
        && let Some(value) = parsed.remove("v")
    {
        return value;
    }
    toml::Value::String(raw.to_string())
}

/// Finds the line of a dotted key (`worker.concurrency`, `models.openai.base_url`) in TOML text: the key's
/// line inside its `[section]`, else the section header, else 0 (the value came from the environment).
fn locate_key(text: &str, field: &str) -> (usize, usize) {
    let parts: Vec<&str> = field.split('.').map(|p| p.split('[').next().unwrap_or(p)).collect();
    let mut best = (0, 0);
    let mut current_section = String::new();
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if let Some(header) = trimmed.strip_prefix('[').and_then(|h| h.split(']').next()) {
            current_section = header.trim().trim_matches('"').to_string();
            if field.starts_with(&current_section) && best.0 == 0 {
                best = (n + 1, 1);
            }
            continue;
        }
        let Some((key, _)) = trimmed.split_once('=') else {
            continue;
        };
        let key = key.trim().trim_matches('"');
        let full = if current_section.is_empty() { key.to_string() } else { format!("{current_section}.{key}") };
        let wanted = parts.join(".");
        if full == wanted || wanted.starts_with(&format!("{full}.")) {
            let column = line.find(key).map_or(1, |c| c + 1);
            return (n + 1, column);
        }
    }
    best
}

/// How the loop waits for the screen after acting (`[settle]` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SettlePolicy {
    /// Settle at all (false: take the next screenshot right after the actions).
    pub enabled: bool,
    /// How long the screen must stay unchanged, in milliseconds.
    pub quiet_ms: u64,
    /// How often to look, in milliseconds.
    pub interval_ms: u64,
    /// The longest to wait, in milliseconds; the screen is then taken as it is.
    pub timeout_ms: u64,
    /// Changed pixels that still count as "unchanged" (a caret, a pointer).
    pub tolerance_pixels: u64,
}

impl Default for SettlePolicy {
    fn default() -> Self {
        Self { enabled: true, quiet_ms: 100, interval_ms: 25, timeout_ms: 3000, tolerance_pixels: 256 }
    }
}

/// USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    /// Cache reads (default: the input price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<f64>,
    /// Cache writes (default: the input price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
}

impl Price {
    pub const fn new(input: f64, output: f64, cache_read: f64, cache_write: f64) -> Self {
        Self { input, output, cache_read: Some(cache_read), cache_write: Some(cache_write) }
    }

    pub fn cost(&self, usage: &Usage) -> f64 {
        let read = usage.cache_read_tokens.min(usage.input_tokens);
        let write = usage.cache_write_tokens.min(usage.input_tokens - read);
        let plain = usage.input_tokens - read - write;
        (plain as f64 * self.input
            + read as f64 * self.cache_read.unwrap_or(self.input)
            + write as f64 * self.cache_write.unwrap_or(self.input)
            + usage.output_tokens as f64 * self.output)
            / 1_000_000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn empty_config_is_all_defaults() {
        let config = parse("", "x.toml", &[]).unwrap();
        assert_eq!(config.worker.concurrency, 2);
        assert_eq!(config.queue.backend, QueueBackend::Sqlite);
    }

    #[test]
    fn every_problem_is_reported_with_its_line() {
        let text =
            "data_dir = \"/tmp/a\"\n[worker]\nconcurrency = 0\ncolour = 1\n[queue]\nbackend = \"postgres\"\n[bogus]\n";
        let err = parse(text, "x.toml", &[]).unwrap_err();
        let fields: Vec<_> = err.problems.iter().filter_map(|p| p.field.clone()).collect();
        assert!(fields.contains(&"worker.colour".to_string()), "{err}");
        assert!(fields.contains(&"bogus".to_string()), "{err}");
        assert!(fields.contains(&"queue.url".to_string()), "{err}");
        let colour = err.problems.iter().find(|p| p.field.as_deref() == Some("worker.colour")).unwrap();
        assert_eq!(colour.line, 4, "{err}");
        assert!(err.to_string().contains("x.toml: field `worker.colour`"), "{err}");
    }

    #[test]
    fn bad_tool_declarations_name_their_field() {
        let text = "[tools.lookup]\ndescription = \"d\"\nparameters = { type = \"object\" }\nkind = \"http\"\n\
                    url = \"ftp://x\"\n[tools.run_it]\ndescription = \"d\"\nparameters = { type = \"object\" }\n\
                    kind = \"command\"\ncommand = []\n[tools.fine]\ndescription = \"d\"\n\
                    parameters = { type = \"object\" }\nkind = \"http\"\nurl = \"https://x.example/a\"\n";
        let err = parse(text, "x.toml", &[]).unwrap_err();
        let fields: Vec<_> = err.problems.iter().filter_map(|p| p.field.clone()).collect();
        assert_eq!(fields, ["tools.lookup.url", "tools.run_it.command"], "{err}");
        assert!(err.to_string().contains("not an http or https URL"), "{err}");
        assert!(!err.to_string().contains("field `url`"), "{err}");
    }

    #[test]
    fn syntax_errors_have_a_position() {
        let err = parse("[worker\nconcurrency = 1", "x.toml", &[]).unwrap_err();
        assert_eq!(err.problems[0].line, 1, "{err}");
    }

    #[test]
    fn environment_overrides_file_values() {
        let text = "[worker]\nconcurrency = 1\n";
        let config = parse(
            text,
            "x.toml",
            &env(&[
                ("AGENTD_WORKER_CONCURRENCY", "8"),
                ("AGENTD_DATA_DIR", "/srv/agentd"),
                ("AGENTD_WORKER_LABELS", "{os = \"ubuntu\"}"),
                ("AGENTD_MODELS_OPENAI_COMPATIBLE_BASE_URL", "http://127.0.0.1:8000/v1"),
                ("AGENTD_SOCKET", "/ignored"),
            ]),
        )
        .unwrap();
        assert_eq!(config.worker.concurrency, 8);
        assert_eq!(config.data_dir, PathBuf::from("/srv/agentd"));
        assert_eq!(config.worker.labels.get("os").map(String::as_str), Some("ubuntu"));
        assert_eq!(config.models["openai-compatible"].base_url.as_deref(), Some("http://127.0.0.1:8000/v1"));
    }

    #[test]
    fn log_otel_and_tls_keys_parse_and_are_checked() {
        let config = parse(
            "[otel]\nendpoint = \"http://127.0.0.1:4318/\"\n",
            "x.toml",
            &env(&[("AGENTD_LOG_FORMAT", "json"), ("AGENTD_OTEL_SERVICE_NAME", "agentd-eu")]),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.log.format, LogFormat::Json);
        assert_eq!(config.otel.service_name, "agentd-eu");
        assert_eq!(config.otel.traces_url().as_deref(), Some("http://127.0.0.1:4318/v1/traces"));
        let full = OtelConfig { endpoint: Some("https://c.example/v1/traces".into()), ..OtelConfig::default() };
        assert_eq!(full.traces_url().as_deref(), Some("https://c.example/v1/traces"));
        assert_eq!(Config::default().otel.traces_url(), None);

        let err = parse("[log]\nformat = \"xml\"\n[otel]\nendpoint = \"127.0.0.1:4318\"\n", "x.toml", &[]).unwrap_err();
        let fields: Vec<_> = err.problems.iter().filter_map(|p| p.field.clone()).collect();
        assert_eq!(fields, ["log.format", "otel.endpoint"], "{err}");
        assert_eq!(err.problems[0].line, 2, "{err}");

        let listen = "[api]\nlisten = \"127.0.0.1:8787\"\ntoken_file = \"/t\"\n";
        for (tls, field) in [("tls_cert = \"/c\"\n", "api.tls_key"), ("tls_key = \"/k\"\n", "api.tls_cert")] {
            let err = parse(&format!("{listen}{tls}"), "x.toml", &[]).unwrap_err();
            assert_eq!(err.problems.len(), 1, "{err}");
            assert_eq!(err.problems[0].field.as_deref(), Some(field), "{err}");
        }
        let err = parse("[api]\ntls_cert = \"/c\"\ntls_key = \"/k\"\n", "x.toml", &[]).unwrap_err();
        assert!(err.to_string().contains("set api.listen too"), "{err}");
        parse(&format!("{listen}tls_cert = \"/c\"\ntls_key = \"/k\"\n"), "x.toml", &[])
            .unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn bad_environment_values_are_named() {
        let err = parse("", "x.toml", &env(&[("AGENTD_WORKER_CONCURRENCY", "many")])).unwrap_err();
        assert_eq!(err.problems[0].field.as_deref(), Some("worker.concurrency"), "{err}");
    }

    #[test]
    fn a_bad_environment_value_blames_its_variable_not_the_file() {
        let text = "data_dir = \"/tmp/a\"\n[worker]\nconcurrency = 4\n";
        for (value, fragment) in [("abc", "invalid type"), ("0", "must be between 1 and 256")] {
            let err = parse(text, "x.toml", &env(&[("AGENTD_WORKER_CONCURRENCY", value)])).unwrap_err();
            let message = err.to_string();
            assert_eq!(err.problems.len(), 1, "{message}");
            assert!(
                message.starts_with("environment variable AGENTD_WORKER_CONCURRENCY: field `worker.concurrency`: "),
                "{message}"
            );
            assert!(message.contains(fragment), "{message}");
            assert!(!message.contains("x.toml") && !message.contains("line"), "{message}");
        }
        // A file value is still the file's problem, with its line.
        let err = parse("[worker]\nconcurrency = 0\n", "x.toml", &env(&[("AGENTD_DATA_DIR", "/srv")])).unwrap_err();
        assert!(err.to_string().starts_with("x.toml: field `worker.concurrency`"), "{err}");
        assert_eq!(err.problems[0].line, 2, "{err}");
    }

    #[test]
    fn a_variable_naming_a_section_but_no_key_of_it_is_a_problem() {
        for name in ["AGENTD_WORKER_CONCURENCY", "AGENTD_MODELS_X_Y"] {
            let err = parse("", "x.toml", &env(&[(name, "3")])).map(|_| ()).unwrap_err();
            assert_eq!(err.problems.len(), 1, "{name}: {err}");
            assert_eq!(err.problems[0].variable.as_deref(), Some(name), "{err}");
            assert!(err.to_string().starts_with(&format!("environment variable {name}: ")), "{err}");
        }
    }

    #[test]
    fn a_variable_naming_no_setting_is_a_warning_with_the_closest_name() {
        let config =
            parse("", "x.toml", &env(&[("AGENTD_BIN", "/usr/bin/agentd"), ("AGENTD_WORKERS_CONCURRENCY", "3")]))
                .unwrap_or_else(|e| panic!("refused: {e}"));
        assert_eq!(config.warnings.len(), 2, "{:?}", config.warnings);
        let workers = config.warnings.iter().find(|w| w.contains("AGENTD_WORKERS_CONCURRENCY")).expect("warned");
        assert!(workers.ends_with("did you mean AGENTD_WORKER_CONCURRENCY?"), "{workers}");
        let bin = config.warnings.iter().find(|w| w.contains("AGENTD_BIN")).expect("warned");
        assert!(bin.contains("is not an agentd setting; ignored"), "{bin}");
        assert_eq!(config.worker.concurrency, Config::default().worker.concurrency);
    }

    #[test]
    fn unknown_environment_variables_of_others_are_not_problems() {
        // Variables that are not configuration keys: the CLI's, the log filter, the test suite's.
        let others = [
            ("AGENTD_CONFIG", "/x.toml"),
            ("AGENTD_SOCKET", "/x.sock"),
            ("AGENTD_URL", "http://127.0.0.1:1"),
            ("AGENTD_TOKEN", "t"),
            ("AGENTD_CA_FILE", "/ca.pem"),
            ("AGENTD_LOG", "info"),
            ("AGENTD_TEST_POSTGRES_URL", "postgres://x"),
            ("AGENTD_BENCH_POSTGRES_URL", "postgres://x"),
            ("AGENTD_CRASH_SEED", "1"),
            ("AGENTD_X11VNC_ARGS", "-defer 0"),
        ];
        parse("", "x.toml", &env(&others)).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn a_system_config_that_cannot_be_looked_at_is_not_taken_for_a_missing_one() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(ConfigSource::locate_with(None, &dir.path().join("agentd.toml")), ConfigSource::BuiltIn));
        // Not "not found": a path through a file (ENOTDIR); under /etc, permission denied is the usual one
        // (tested as an unprivileged user in tests/it/cli.rs).
        std::fs::write(dir.path().join("file"), "").unwrap();
        let behind_a_file = dir.path().join("file/agentd.toml");
        assert!(matches!(ConfigSource::locate_with(None, &behind_a_file), ConfigSource::File(p) if p == behind_a_file));
        let err = ConfigSource::File(behind_a_file).load().unwrap_err();
        assert!(err.to_string().contains("cannot read"), "{err}");
    }

    #[test]
    fn approval_rules_are_read_and_a_bad_one_is_named() {
        let config = parse("[[approval]]\nkeys = \"ctrl+alt+delete\"\n[[approval]]\ntool = \"mail\"\n", "t", &[])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.approval.len(), 2);
        let err = parse("[[approval]]\naction = \"explode\"\n", "t", &[]).unwrap_err().to_string();
        assert!(err.contains("approval") && err.contains("explode"), "{err}");
    }

    #[test]
    fn the_example_config_parses() {
        let text = include_str!("../config/agentd.example.toml");
        let config = parse(text, "agentd.example.toml", &[]).unwrap_or_else(|e| panic!("{e}"));
        assert!(config.models.contains_key("anthropic"));
    }

    #[test]
    fn the_example_documents_every_key() {
        let text = include_str!("../config/agentd.example.toml");
        let documented = |key: &str| {
            text.lines().any(|line| {
                let line = line.trim_start_matches('#').trim();
                line.starts_with(&format!("{key} ="))
                    || line.starts_with(&format!("[{key}"))
                    || line.starts_with(&format!("[[{key}]]"))
            })
        };
        let mut config = Config::default();
        config.models.insert("anthropic".into(), ModelConfig::default());
        let value = serde_json::to_value(&config).unwrap();
        let mut missing = Vec::new();
        for (section, inner) in value.as_object().unwrap() {
            if !documented(section) {
                missing.push(section.clone());
            }
            let keys: Vec<String> = match section.as_str() {
                "models" => inner["anthropic"].as_object().unwrap().keys().cloned().collect(),
                _ => inner.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default(),
            };
            missing.extend(keys.into_iter().filter(|k| !documented(k)).map(|k| format!("{section}.{k}")));
        }
        assert!(missing.is_empty(), "undocumented keys: {missing:?}");
    }
}
