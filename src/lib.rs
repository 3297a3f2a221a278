//! agentd lets a vision model operate a computer: it shows the model the screen, runs the clicks and keys it
//! asks for, and records every step. It is a daemon (`agentd serve`), a command (`agentd run TASK.json`) and
//! this library.
//!
//! An [`Agent`] is a model, a computer, tools, instructions and limits. [`Agent::run`] starts a [`Run`]: a
//! [`Stream`](futures_util::Stream) of [`Event`]s that can be [aborted](Run::abort) and [finishes](Run::finish)
//! with a [`RunReport`] (the [`Outcome`] — `success`, `summary`, `reason`, the structured `output` — the
//! steps and the usage). Tools of your own run in-process: [`tool_fn`] makes one of an async function whose
//! arguments are a type deriving `Deserialize` and `JsonSchema` (the schema the model sees is derived from
//! it), or implement [`Tool`].
//!
//! ```
//! use agentd::{Agent, CallContext, ToolOutcome, mock_desktop, scripted_model, tool_fn};
//! use futures_util::StreamExt;
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct Lookup {
//!     /// The order number shown on screen.
//!     order: String,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! // A model that looks the order up, then completes: a scripted stand-in for a vision model.
//! let model = scripted_model(&serde_json::json!({"turns": [
//!     {"calls": [{"name": "lookup_order", "arguments": {"order": "A-1001"}}]},
//!     {"complete": {"success": true, "summary": "A-1001 ships tomorrow"}}
//! ]}))?;
//! let agent = Agent::builder()
//!     .instructions("Find out when order A-1001 ships")
//!     .model(model)
//!     .computer(mock_desktop("blank")?)
//!     .tool(tool_fn("lookup_order", "Looks an order up in the order system", |args: Lookup, _: CallContext| async move {
//!         ToolOutcome::ok(format!("order {} ships tomorrow", args.order))
//!     }))
//! #   .data_dir(dir.path())
//!     .build()
//!     .await?;
//! let mut run = agent.run();
//! while let Some(event) = run.next().await {
//!     println!("{}", serde_json::to_string(&event)?);
//! }
//! let report = run.finish().await.into_result()?;
//! assert_eq!(report.outcome.summary, "A-1001 ships tomorrow");
//! # Ok(())
//! # }
//! ```
//!
//! Everything a task file says can be said here too ([`AgentBuilder::task`], [`AgentBuilder::model_spec`],
//! [`AgentBuilder::computer_spec`], [`AgentBuilder::declared_tool`], [`AgentBuilder::output_schema`]); a
//! run is the same attempt `agentd run` and the daemon's workers make.
//!
//! # Features
//!
//! The default features build the daemon and the command line (`daemon`: the SQLite and PostgreSQL queue, the
//! HTTP API and web console, the MCP server, the desktop pool, retention, metrics), the real desktops (`local`,
//! `vnc`, `computer-server`, `browser`; `portable` is off), the S3 artifact store (`s3`) and OpenTelemetry
//! traces (`otel`). A program that embeds the agent can turn them all off (`default-features = false`): what
//! is left is the loop, the mock desktop, the scripted model and every model adapter, the filesystem artifact
//! store and this API, with none of the daemon's dependencies (docs/library.md lists them). Feature
//! `internals` is agentd's own, for its tests and benchmarks: it makes the crate's modules public, unstable and
//! not covered by semver.

// The modules are the crate's own: with feature `internals` (agentd's tests, benchmarks and examples, through
// the dev-dependency on this package; unstable, not covered by semver) they are public and hidden from the
// docs, else crate-private. What a library uses of them is re-exported below. The modules of the daemon and the
// command line (the queue, the HTTP API, the MCP server, the pool, retention, the metrics, the CLI) are built
// with feature `daemon` only.
//
// Without `internals`, the items (and re-exports) of the modules that only the tests, the benchmarks or the
// daemon use are unused: that is no finding (with it, every one of them is public and unchecked alike).
#![cfg_attr(not(feature = "internals"), allow(dead_code, unused_imports))]
// With `internals`, the hidden modules' docs link to their own private items, which the docs hide with them.
#![cfg_attr(feature = "internals", allow(rustdoc::private_intra_doc_links))]

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod agent;
#[cfg(not(feature = "internals"))]
pub(crate) mod agent;
#[cfg(all(feature = "daemon", feature = "internals"))]
#[doc(hidden)]
pub mod api;
#[cfg(all(feature = "daemon", not(feature = "internals")))]
pub(crate) mod api;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod artifacts;
#[cfg(not(feature = "internals"))]
pub(crate) mod artifacts;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod attempt;
#[cfg(not(feature = "internals"))]
pub(crate) mod attempt;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod backends;
#[cfg(not(feature = "internals"))]
pub(crate) mod backends;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod budget;
#[cfg(not(feature = "internals"))]
pub(crate) mod budget;
#[cfg(all(feature = "daemon", feature = "internals"))]
#[doc(hidden)]
pub mod cli;
#[cfg(all(feature = "daemon", not(feature = "internals")))]
pub(crate) mod cli;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod config;
#[cfg(not(feature = "internals"))]
pub(crate) mod config;
#[cfg(all(feature = "daemon", feature = "internals"))]
#[doc(hidden)]
pub mod daemon;
#[cfg(all(feature = "daemon", not(feature = "internals")))]
pub(crate) mod daemon;
#[cfg(all(feature = "daemon", feature = "internals"))]
#[doc(hidden)]
pub mod eval;
#[cfg(all(feature = "daemon", not(feature = "internals")))]
pub(crate) mod eval;
#[cfg(all(feature = "daemon", feature = "internals"))]
#[doc(hidden)]
pub mod exit;
#[cfg(all(feature = "daemon", not(feature = "internals")))]
pub(crate) mod exit;
#[cfg(all(feature = "daemon", feature = "internals"))]
#[doc(hidden)]
pub mod hands;
#[cfg(all(feature = "daemon", not(feature = "internals")))]
pub(crate) mod hands;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod input;
#[cfg(not(feature = "internals"))]
pub(crate) mod input;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod library;
#[cfg(not(feature = "internals"))]
pub(crate) mod library;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod live;
#[cfg(not(feature = "internals"))]
pub(crate) mod live;
#[cfg(all(feature = "daemon", feature = "internals"))]
#[doc(hidden)]
pub mod mcp;
#[cfg(all(feature = "daemon", not(feature = "internals")))]
pub(crate) mod mcp;
#[cfg(all(feature = "daemon", feature = "internals"))]
#[doc(hidden)]
pub mod metrics;
#[cfg(all(feature = "daemon", not(feature = "internals")))]
pub(crate) mod metrics;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod model;
#[cfg(not(feature = "internals"))]
pub(crate) mod model;
#[cfg(all(feature = "daemon", feature = "internals"))]
#[doc(hidden)]
pub mod pool;
#[cfg(all(feature = "daemon", not(feature = "internals")))]
pub(crate) mod pool;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod private;
#[cfg(not(feature = "internals"))]
pub(crate) mod private;
#[cfg(all(feature = "daemon", feature = "internals"))]
#[doc(hidden)]
pub mod queue;
#[cfg(all(feature = "daemon", not(feature = "internals")))]
pub(crate) mod queue;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod record;
#[cfg(not(feature = "internals"))]
pub(crate) mod record;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod report;
#[cfg(not(feature = "internals"))]
pub(crate) mod report;
#[cfg(all(feature = "daemon", feature = "internals"))]
#[doc(hidden)]
pub mod retention;
#[cfg(all(feature = "daemon", not(feature = "internals")))]
pub(crate) mod retention;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod screen;
#[cfg(not(feature = "internals"))]
pub(crate) mod screen;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod sse;
#[cfg(not(feature = "internals"))]
pub(crate) mod sse;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod status;
#[cfg(not(feature = "internals"))]
pub(crate) mod status;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod task;
#[cfg(not(feature = "internals"))]
pub(crate) mod task;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod tools;
#[cfg(not(feature = "internals"))]
pub(crate) mod tools;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod verify;
#[cfg(not(feature = "internals"))]
pub(crate) mod verify;

/// The `agentd` binary's entry point (`src/main.rs`): not part of the library's API.
#[cfg(feature = "daemon")]
#[doc(hidden)]
pub use cli::main as binary_main;

// The agent and its runs.
pub use library::{
    AbortHandle, Agent, AgentBuilder, CallContext, FnTool, Human, Run, RunFailed, RunReport, mock_desktop,
    parameters_of, scripted_model, tool_fn,
};
// What a run reports.
pub use record::{By, EndReason, Event, EventKind, Outcome, Proposed, ScreenshotRef, StepRecord, TaskState, Usage};
// Tools of your own (`#[agentd::async_trait]` on an `impl Tool`).
pub use async_trait::async_trait;
pub use tools::{Tool, ToolContext, ToolOutcome};
// The boundaries an agent is made of.
pub use agentd_computer::{Action, ComputerProvider};
pub use agentd_mock::{MockDesktop, Scene};
pub use artifacts::{ArtifactStore, FsStore};
pub use model::scripted::{Script, ScriptedModel};
pub use model::{Model, ToolSpec};
// The declarative path: what a task file and the config say.
pub use backends::BuildError;
pub use config::Config;
pub use task::tools::ToolDecl;
pub use task::{ComputerSpec, Limits, ModelSpec, TaskId, TaskSpec};

/// docs/library.md, whose example the doc tests compile and run, so the page the front page links to cannot
/// drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../docs/library.md")]
struct LibraryPage;
