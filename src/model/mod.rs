//! The model boundary: what the agent loop asks of a model, in agentd's own types.
//!
//! A [`Model`] turns the history of a task (its [`Exchange`]s), the current screenshot and the declared
//! tools into a [`ModelTurn`]: text, tool calls (computer actions or function calls such as
//! `task_completion`), usage. Vendor wire types never leave their adapter module; what an adapter must replay
//! verbatim later (an assistant message, reasoning items, thought signatures) it keeps in
//! [`ModelTurn::raw`], which the loop stores and hands back untouched. Coordinates in a turn are in the
//! model's own space ([`Model::coordinates`]); the loop converts them.

pub mod anthropic;
pub mod compatible;
pub mod gemini;
pub mod http;
pub mod navigation;
pub mod openai;
pub mod pricing;
pub mod replay;
pub mod scripted;
mod shared;
mod wire;

pub use shared::{Shared, default_base_url};

/// The function tool the loop always declares beside the computer tool: the model calls it to end the task.
pub const TASK_COMPLETION: &str = "task_completion";

/// What an old screenshot is replaced with once it leaves the model's context.
pub const SCREENSHOT_PLACEHOLDER: &str = "[screenshot omitted to save context]";

use agentd_computer::{PageInfo, Size};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use crate::record::{CallKind, ToolCall, Usage};
use crate::screen::CoordinateMap;
pub use crate::screen::ModelImage;

/// A tool the loop declares next to the model's computer tool (e.g. `task_completion`).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: serde_json::Value,
}

/// What the model answered in one call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelTurn {
    pub text: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub thinking: String,
    pub calls: Vec<ToolCall>,
    pub usage: Usage,
    /// Vendor data the adapter needs to replay this turn exactly; opaque to everything else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<serde_json::Value>,
    /// Set when the turn's calls must not run before a human approves them (an OpenAI
    /// `pending_safety_checks`, a Gemini `require_confirmation`, a scripted `ask_human`). The loop records
    /// the step, parks the task in `waiting_for_human`, and runs the calls only after approval. When an
    /// adapter later renders this turn from the history with results present, the approval was given and it
    /// must acknowledge the checks the way its API requires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalRequest>,
}

/// Why a turn needs a human, and the vendor's details (kept for the record and the acknowledgement).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    pub reason: String,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub details: serde_json::Value,
}

/// The answer to one tool call, as the model will see it.
#[derive(Debug, Clone)]
pub struct ToolResult {
    pub call_id: String,
    pub ok: bool,
    /// What the model reads.
    pub message: String,
    /// An image that belongs to this result (a zoom), beyond the step's screenshot.
    pub image: Option<ModelImage>,
}

/// One completed step of the conversation: the screenshot shown, what the model said, and the results.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub step: u32,
    /// The screenshot shown before this turn; `None` once the context policy dropped it.
    pub screenshot: Option<ModelImage>,
    /// Loop notes shown with that screenshot (e.g. "the task was resumed after a crash").
    pub notes: Vec<String>,
    /// The page a browser showed with that screenshot; `None` on desktops.
    pub page: Option<PageInfo>,
    pub turn: ModelTurn,
    /// One result per call of `turn`, in the same order.
    pub results: Vec<ToolResult>,
}

/// Everything a model needs for its next turn.
#[derive(Debug, Clone, Copy)]
pub struct ModelRequest<'a> {
    pub instructions: &'a str,
    pub history: &'a [Exchange],
    /// The current screen, to show after the last exchange's results (or with the instructions).
    pub screenshot: &'a ModelImage,
    /// Loop notes for this turn (e.g. a resume warning), shown with the screenshot.
    pub notes: &'a [String],
    pub tools: &'a [ToolSpec],
    /// The real screen size (for adapters that state it in a tool definition).
    pub screen: Size,
    /// Whether the computer is a browser ([`agentd_computer::ComputerProvider::navigates`]): adapters then
    /// offer their vendor's browser mode (Gemini's browser functions, OpenAI's `browser` environment, the
    /// navigation functions of [`navigation`]).
    pub browser: bool,
    /// The page the browser shows now (with `screenshot`); `None` on desktops.
    pub page: Option<&'a PageInfo>,
    /// The step this turn belongs to (for events and logs).
    pub step: u32,
    /// What the context policy's compaction made of exchanges no longer in `history` (shown right after the
    /// instructions), or `None` when nothing was compacted.
    pub summary: Option<&'a str>,
}

/// Streams a turn as it arrives; the loop turns deltas into events (`agent::stream`).
pub type DeltaSink<'a> = &'a (dyn Fn(Delta<'_>) + Send + Sync);

/// A piece of a turn as the vendor streams it.
///
/// Ids in `ToolCall`/`ToolArgs` are the ids the adapter gives the calls of the finished turn
/// ([`ToolCall::id`]), so the loop can pair what streamed with what the turn holds. A call that streamed and
/// is not in the turn (cut off by the token limit) is closed by the loop as dropped.
#[derive(Debug, Clone, Copy)]
pub enum Delta<'a> {
    Text(&'a str),
    Thinking(&'a str),
    /// A tool call begins: the vendor's tool name (`computer` for Anthropic's and OpenAI's computer tool,
    /// the predefined function for Gemini's).
    ToolCall {
        id: &'a str,
        name: &'a str,
    },
    /// A piece of that call's arguments as JSON text (not valid JSON until the call is complete).
    ToolArgs {
        id: &'a str,
        delta: &'a str,
    },
    /// The adapter is reading a new response after an earlier response of this call had begun (its
    /// decoder had started: a stream cut short, an error event inside it, then a retry): everything
    /// streamed since the last `Restart` (or the start) is void, and the turn starts over. Sent before the
    /// new response's first delta; the loop ignores it when nothing had streamed.
    Restart,
}

/// Why a model call failed. The loop decides by kind: retryable errors were already retried by the adapter
/// and mean "try again later"; the rest end the task.
#[derive(Debug, Error)]
pub enum ModelError {
    #[error("model request was rejected ({status}): {message}")]
    Rejected { status: u16, message: String },
    #[error("model authentication failed: {0}")]
    Auth(String),
    #[error("model unavailable after retries: {0}")]
    Unavailable(String),
    /// The provider asked to wait longer than agentd sleeps inside one call: try the task again later.
    #[error("model rate limited for {retry_after_secs} s: {message}")]
    RateLimited { retry_after_secs: u64, message: String },
    #[error("model response could not be understood: {0}")]
    Protocol(String),
    #[error("model configuration: {0}")]
    Config(String),
    #[error("script: {0}")]
    Script(String),
}

impl ModelError {
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::RateLimited { .. })
    }
}

/// A model that can drive a computer.
#[async_trait]
pub trait Model: Send + Sync {
    /// The provider name (`anthropic`, `scripted`, …) and model id, for records and logs.
    fn describe(&self) -> String;

    /// The model id requests name (`claude-sonnet-4-5`, …), for traces; `None` where there is none (scripted).
    fn model_id(&self) -> Option<&str> {
        None
    }

    /// The coordinate space the model works in for a screen of `screen` size, and thereby the size of the
    /// image it is shown (the map's model size for image-space models; the screen scaled for grid models).
    fn coordinates(&self, screen: Size) -> CoordinateMap;

    /// The size of the screenshot to send for a screen of `screen` size.
    fn image_size(&self, screen: Size) -> Size {
        self.coordinates(screen).model()
    }

    /// Old screenshots leave the context in chunks of this many (see `agent::context::ContextPolicy`), so a
    /// prompt-cache prefix stays valid for several turns. 1 drops exactly down to `keep_screenshots`.
    fn context_chunk(&self) -> u32 {
        1
    }

    /// The model's context window in tokens; the context policy compacts the history before a request
    /// would come near it. `None`: no compaction.
    fn context_window(&self) -> Option<u64> {
        None
    }

    /// The next turn.
    async fn next_turn(&self, request: ModelRequest<'_>, deltas: DeltaSink<'_>) -> Result<ModelTurn, ModelError>;
}
