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
//! run is the same attempt `agentd run` and the daemon's workers make. The modules below the curated items
//! are the binary's and the tests'; they are not part of the library's API.

// The internal modules below are documented for their maintainers (`cargo doc --document-private-items`);
// their docs link to their own private items, which the public docs hide with them.
#![allow(rustdoc::private_intra_doc_links)]

#[doc(hidden)]
pub mod agent;
#[doc(hidden)]
pub mod api;
#[doc(hidden)]
pub mod artifacts;
#[doc(hidden)]
pub mod attempt;
#[doc(hidden)]
pub mod backends;
#[doc(hidden)]
pub mod cli;
#[doc(hidden)]
pub mod config;
#[doc(hidden)]
pub mod daemon;
#[doc(hidden)]
pub mod exit;
#[doc(hidden)]
pub mod input;
#[doc(hidden)]
pub mod library;
#[doc(hidden)]
pub mod mcp;
#[doc(hidden)]
pub mod metrics;
#[doc(hidden)]
pub mod model;
#[doc(hidden)]
pub mod pool;
#[doc(hidden)]
pub mod private;
#[doc(hidden)]
pub mod queue;
#[doc(hidden)]
pub mod record;
#[doc(hidden)]
pub mod report;
#[doc(hidden)]
pub mod retention;
#[doc(hidden)]
pub mod screen;
#[doc(hidden)]
pub mod sse;
#[doc(hidden)]
pub mod status;
#[doc(hidden)]
pub mod task;
#[doc(hidden)]
pub mod tools;
#[doc(hidden)]
pub mod verify;

// The agent and its runs.
pub use library::{
    AbortHandle, Agent, AgentBuilder, CallContext, FnTool, Human, Run, RunFailed, RunReport, mock_desktop,
    parameters_of, scripted_model, tool_fn,
};
// What a run reports.
pub use record::{EndReason, Event, EventKind, Outcome, Proposed, ScreenshotRef, StepRecord, TaskState, Usage};
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
