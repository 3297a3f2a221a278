//! Configuration (docs/configuration.md): the TOML file, its defaults, `AGENTD_<SECTION>_<KEY>` overrides, and
//! validation that reports every problem at once, each with the file, the key and the line.
//!
//! Loading: the file (or built-in defaults when there is none) is parsed into a TOML table; environment
//! overrides are merged into it (values are read as TOML literals — `8`, `true`, `{os = "x"}` — and as
//! strings otherwise); then every section is deserialized on its own so one bad section does not hide the
//! problems of another; then cross-field rules run. `config/agentd.example.toml` documents every key, and a
//! test parses it.
//!
//! `load.rs` finds the file and reads it, `sections.rs` lists the top-level keys once (how each is read,
//! whether variables set it, its schema), `env.rs` merges the variables, `validate.rs` holds the cross-field
//! rules; the sections' types live one topic a file: `api.rs`, `queue.rs` (and `[worker]`), `models.rs`,
//! `artifacts.rs` (and `[retention]`), `telemetry.rs` (`[log]`, `[otel]`), `desktops.rs` (and `[settle]`),
//! `access.rs` (`[outbound]`, `[browser]`, the files API tasks may name), `paths.rs` (default locations).

mod access;
mod api;
mod artifacts;
mod desktops;
mod env;
mod load;
mod models;
mod paths;
mod queue;
pub mod schema;
mod sections;
mod telemetry;
mod validate;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::task::TaskDefaults;
use crate::task::guard::GuardSpec;
use crate::task::tools::ToolDecl;
use crate::task::verify::VerifierDecl;

pub use access::{BrowserSettings, McpAllowed, OutboundConfig};
pub use api::{ApiConfig, ConsoleConfig, MAX_LIVE_FPS, MIN_TOKEN_CHARS, read_token_file, world_readable_warning};
pub use artifacts::{ArtifactsBackend, ArtifactsConfig, RetentionConfig};
pub use desktops::{DesktopConfig, GuestCommand, HookCommand, SettlePolicy};
pub use load::{ConfigError, ConfigProblem, ConfigSource, SYSTEM_CONFIG, parse};
use models::MODEL_KEYS;
pub use models::{ActionFormat, ComputerEnvironment, CoordinateSpace, MODEL_PROVIDERS, ModelConfig, Price};
pub use paths::{default_data_dir, host_name};
pub use queue::{QueueBackend, QueueConfig, WorkerConfig};
pub use telemetry::{LogConfig, LogFormat, OtelConfig};

/// A whole configuration: one field per top-level key of the file (`sections.rs` lists them, with how each
/// is read), each section's defaults filling what the file leaves out.
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
    /// `[tools] allowed_mcp_commands` and `allowed_mcp_urls` (read with `[tools]`, written in it): the MCP
    /// servers tasks submitted over the API may start or reach (docs/tools.md).
    #[serde(skip)]
    pub mcp_allowed: McpAllowed,
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
    /// `[console]`: the web console's live view (docs/console.md).
    pub console: ConsoleConfig,
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
            mcp_allowed: McpAllowed::default(),
            verifiers: BTreeMap::new(),
            log: LogConfig::default(),
            otel: OtelConfig::default(),
            retention: RetentionConfig::default(),
            outbound: OutboundConfig::default(),
            browser: BrowserSettings::default(),
            console: ConsoleConfig::default(),
            approval: Vec::new(),
            desktops: Vec::new(),
            warnings: Vec::new(),
        }
    }
}
