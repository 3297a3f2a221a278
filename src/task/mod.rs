//! The task file (docs/task-file.md): its wire form, parsing with errors that point at the problem, and
//! resolution against config defaults into the [`ResolvedTask`] the agent loop runs.
//!
//! Validation happens while deserializing (through small validated newtypes), so every error — a wrong type,
//! an unknown field, a value out of range — carries the field path and the line/column serde_json saw it at.
//!
//! `spec.rs` holds `TaskSpec` itself and reading a file; each field with types of its own has a file
//! (`computer.rs`, `model.rs`, `limits.rs`, `context.rs`, and the modules below for tools, secrets, replay,
//! verification, conversations, approvals and pool desktops); `ids.rs` and `numbers.rs` the validated newtypes;
//! `tagged.rs` the reading of objects tagged by `provider` or `kind`; `resolve.rs` the defaults applied.

pub mod approval;
mod computer;
mod context;
pub mod conversation;
pub mod desktop;
pub mod guard;
mod ids;
mod limits;
mod model;
mod numbers;
pub mod replay;
mod resolve;
pub mod schema;
pub mod script;
pub mod secrets;
mod spec;
mod tagged;
pub mod tools;
pub mod verify;

pub use crate::input::{TaskFileError, format_location, locate_field, parse_json};
pub use crate::record::Compaction;
pub use computer::{
    BrowserSpec, ComputerServerSpec, ComputerSpec, CuaTransport, LocalSpec, MockSpec, PortableSpec, SceneSource,
    ScreenDimension, ScreenHeight, ScreenWidth, VncSpec,
};
pub use context::{ContextSpec, HistoryBudget};
pub use desktop::{DesktopName, DesktopSpec};
pub use ids::{LabelKey, TaskId};
pub use limits::{
    LimitsSpec, MAX_HUMAN_TIMEOUT_SECS, MAX_STEPS_LIMIT, MAX_TIMEOUT_SECS, NO_ANSWER, OnHumanTimeout, human_timeout,
};
pub use model::{
    CompatibleSpec, GeminiSpec, ModelOptions, ModelSpec, ScriptSource, ScriptedSpec, Temperature, VendorModelSpec,
};
pub use numbers::{Bounded, Cost, Limit, Positive};
pub use resolve::{
    DEFAULT_KEEP_SCREENSHOTS, DEFAULT_MAX_COST_USD, DEFAULT_MAX_STEPS, DEFAULT_TIMEOUT_SECS, Limits, ResolvedTask,
    TaskDefaults,
};
pub use spec::{Instructions, TaskSource, TaskSpec};
use tagged::{json_kind, tagged, variant};
