//! The tools the agent loop declares next to a model's computer tool (docs/tools.md), and the result envelope every
//! tool call produces.
//!
//! A [`Toolbox`] is built per attempt from the task's `tools` (with `{"use": NAME}` entries looked up in the
//! config's `[tools.NAME]`), the task's `output_schema` and any in-process [`Tool`]s a library user adds. It
//! tells the model what it may call ([`Toolbox::specs`], `task_completion` first) and runs a call
//! ([`Toolbox::call`]): arguments are checked against the tool's schema before anything runs, a failure is
//! a tool error the model reads, and a `remote` tool is not run here at all — the loop parks the task until
//! the API client answers ([`Called::Remote`]). `ask_human` (docs/humans.md, on unless the task turns it off) is not
//! run here either: the loop parks the task in `waiting_for_human` until a person answers its question.
//!
//! Every call ends in a [`ToolOutcome`]: `ok`, the `message` the model reads, and `details` kept for the
//! record and the events only.
//!
//! The toolbox also holds the task's [`Secrets`] (docs/security.md): a tool's arguments get their placeholders replaced
//! by the values just before the tool runs (the caller, the records and the events keep the placeholders),
//! and the envelope it returns (and what it streams) is redacted before anyone sees it. `task_completion`
//! and `remote` calls are not substituted: neither acts on the worker.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::model::{TASK_COMPLETION, ToolSpec};
pub use crate::record::ASK_HUMAN;
use crate::task::ResolvedTask;
use crate::task::tools::{JsonSchema, TaskTool, ToolDecl, ToolKind};

pub mod command;
pub mod envelope;
pub mod http;
#[cfg(feature = "daemon")]
pub mod mcp;
pub mod schema;
pub mod secrets;

use schema::Checker;
use secrets::Secrets;

/// The envelope every tool call produces (docs/tools.md `{ok, output, details?}`).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    pub ok: bool,
    /// What the model reads (the envelope's `output`).
    pub message: String,
    /// Kept in the record and the events, never shown to the model.
    pub details: Option<serde_json::Value>,
    /// An image the model is shown with the result (an MCP tool's image content); not kept in the record.
    pub image: Option<ToolImage>,
}

impl ToolOutcome {
    pub fn ok(message: impl Into<String>) -> Self {
        Self { ok: true, message: message.into(), details: None, image: None }
    }

    pub fn error(message: impl Into<String>) -> Self {
        Self { ok: false, message: message.into(), details: None, image: None }
    }

    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
    }
}

/// An image a tool returned, as the models take it: PNG or WebP (the formats agentd reads the size of).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolImage {
    pub size: agentd_computer::Size,
    pub media_type: &'static str,
    pub bytes: Arc<[u8]>,
}

impl ToolImage {
    /// Reads the image's size from its header; `Err` says why it cannot be shown.
    pub fn new(media_type: &'static str, bytes: Vec<u8>) -> Result<Self, String> {
        let size = match media_type {
            "image/png" => {
                let reader = png::Decoder::new(std::io::Cursor::new(&bytes))
                    .read_info()
                    .map_err(|e| format!("not a PNG: {e}"))?;
                let info = reader.info();
                agentd_computer::Size::new(info.width, info.height)
            }
            "image/webp" => {
                let decoder = image_webp::WebPDecoder::new(std::io::Cursor::new(&bytes))
                    .map_err(|e| format!("not a WebP image: {e}"))?;
                let (width, height) = decoder.dimensions();
                agentd_computer::Size::new(width, height)
            }
            other => return Err(format!("{other} is not shown to models; send PNG or WebP")),
        };
        Ok(Self { size, media_type, bytes: bytes.into() })
    }

    /// The image as the model adapters send it.
    pub fn to_model(&self) -> crate::model::ModelImage {
        crate::model::ModelImage::new(self.size, self.media_type, self.bytes.clone())
    }
}

/// How many times a task's model may give an invalid structured output (docs/task-file.md) before the task ends failed
/// (reason `error`). Counted over the whole task: the steps of earlier attempts count too.
pub const MAX_INVALID_OUTPUTS: u32 = 3;

/// What a function call asks of the loop beyond its result.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// End the task with this outcome (`output`: the structured output, already checked).
    Complete { success: bool, summary: String, output: Option<serde_json::Value> },
    /// `task_completion` was refused because of its `output` (missing, or not matching the task's
    /// `output_schema`): the loop counts these against [`MAX_INVALID_OUTPUTS`]. `problems` says what is wrong.
    InvalidOutput { problems: String },
}

/// Why `task_completion`'s arguments were refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CompletionError {
    /// Not `{success, summary, output?}` (the model reads the message and tries again).
    #[error("{0}")]
    Arguments(String),
    /// The structured output is missing or does not match the task's `output_schema`.
    #[error("{message}")]
    Output {
        /// What the model reads.
        message: String,
        /// The schema problems alone (for the task's summary when the tries run out).
        problems: String,
    },
}

/// What calling a tool came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Called {
    /// It ran (or was refused before running); the model reads the outcome.
    Done(ToolOutcome, Option<Effect>),
    /// A `remote` tool with valid arguments: the API client runs it; the task waits for the answer.
    Remote,
}

/// What a running tool may use: its cancellation, and a way to stream output (`tool_output` events).
pub struct ToolContext<'a> {
    /// Cancelled when the task is cancelled or times out; a tool should stop soon after.
    pub cancel: CancellationToken,
    /// Streams a piece of output while the tool runs.
    pub output: &'a (dyn Fn(&str) + Send + Sync),
}

/// A tool that runs inside agentd's process: the declared kinds (`http`, `command`) and a library user's own.
#[async_trait]
pub trait Tool: Send + Sync {
    /// What the model is told: name, description and the JSON Schema of the arguments.
    fn spec(&self) -> ToolSpec;

    /// Runs one call. The arguments were already checked against the schema.
    async fn call(&self, arguments: serde_json::Value, context: ToolContext<'_>) -> ToolOutcome;
}

/// Why a toolbox could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ToolboxError {
    /// The task file's field the problem is in (`tools[2].use`, `output_schema`, …).
    pub field: String,
    pub message: String,
}

impl ToolboxError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), message: message.into() }
    }
}

enum Runner {
    Local(Arc<dyn Tool>),
    Remote,
    /// `ask_human`: a person answers (the loop parks the task for the question).
    Human,
}

struct Entry {
    spec: ToolSpec,
    checker: Checker,
    runner: Runner,
}

/// The tools of one attempt. Cheap to share (`Arc`), immutable once built.
pub struct Toolbox {
    entries: Vec<Entry>,
    output: Option<(JsonSchema, Checker)>,
    secrets: Secrets,
}

impl std::fmt::Debug for Toolbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Toolbox")
            .field("tools", &self.entries.iter().map(|e| e.spec.name.as_str()).collect::<Vec<_>>())
            .field("output_schema", &self.output.is_some())
            .finish()
    }
}

/// How the declared kinds that run in-process are made into [`Tool`]s (the `http` and `command` runners,
/// which need the worker's HTTP client and environment).
pub trait Makers {
    /// `configured`: the declaration is the operator's (a `[tools]` entry the task names with `use`), not the
    /// task's own.
    fn make(&self, decl: &ToolDecl, field: &str, configured: bool) -> Result<Arc<dyn Tool>, ToolboxError>;
}

impl Toolbox {
    /// Only `task_completion`.
    pub fn empty() -> Self {
        Self { entries: Vec::new(), output: None, secrets: Secrets::none() }
    }

    /// The task's tools: declarations as written, `use` entries from `catalog` (the config's `[tools]`), the
    /// in-process kinds made by `makers`.
    pub fn for_task(
        task: &ResolvedTask,
        catalog: &BTreeMap<String, ToolDecl>,
        makers: &dyn Makers,
    ) -> Result<Self, ToolboxError> {
        let mut toolbox = Self::empty();
        for (i, entry) in task.tools.iter().enumerate() {
            let field = format!("tools[{i}]");
            let (decl, configured) = match entry {
                // Its tools are known once the server is reached: the attempt adds them (`tools::mcp`).
                TaskTool::Mcp(_) => continue,
                TaskTool::Declared(decl) => (decl, false),
                TaskTool::Use { name } => (
                    catalog.get(name.as_str()).ok_or_else(|| {
                        ToolboxError::new(
                            format!("{field}.use"),
                            format!("no tool {:?} in the config's [tools] ({})", name.as_str(), known(catalog)),
                        )
                    })?,
                    true,
                ),
            };
            let runner = match &decl.kind {
                ToolKind::Remote(_) => Runner::Remote,
                _ => Runner::Local(makers.make(decl, &field, configured)?),
            };
            let spec = ToolSpec {
                name: decl.name.as_str().to_string(),
                description: decl.description.clone(),
                parameters: decl.parameters.schema().as_value().clone(),
            };
            toolbox.push(spec, runner, &field)?;
        }
        if task.ask_human {
            toolbox = toolbox.with_ask_human()?;
        }
        if let Some(schema) = &task.output_schema {
            let checker = Checker::new(schema).map_err(|m| ToolboxError::new("output_schema", m))?;
            toolbox.output = Some((schema.clone(), checker));
        }
        Ok(toolbox)
    }

    /// Declares `ask_human` (docs/humans.md): the model may ask a person a question and wait for the answer.
    pub fn with_ask_human(mut self) -> Result<Self, ToolboxError> {
        let spec = ToolSpec {
            name: ASK_HUMAN.to_string(),
            description: "Ask a person a question and wait for the answer. Use it only when you cannot go on \
                          without information or a choice only a person has (an ambiguous instruction, a missing \
                          detail); the answer may take hours."
                .to_string(),
            parameters: json!({
                "type": "object",
                "properties": {"question": {"type": "string", "minLength": 1, "description": "The question, on its own."}},
                "required": ["question"],
                "additionalProperties": false
            }),
        };
        self.push(spec, Runner::Human, "ask_human")?;
        Ok(self)
    }

    /// The question of a valid `ask_human` call (`None` for any other call, or when `ask_human` is not
    /// declared, or its arguments are wrong: then it is a tool error the model reads).
    pub fn question<'a>(&self, name: &str, arguments: &'a serde_json::Value) -> Option<&'a str> {
        let entry = self.entries.iter().find(|e| e.spec.name == name && matches!(e.runner, Runner::Human))?;
        entry.checker.check(arguments).ok()?;
        arguments.get("question").and_then(|q| q.as_str())
    }

    /// The task's secrets: substituted into tools' arguments, redacted out of their results.
    pub fn with_secrets(mut self, secrets: Secrets) -> Self {
        self.secrets = secrets;
        self
    }

    /// The task's secrets (the loop substitutes them into `type` actions and redacts with them).
    pub fn secrets(&self) -> &Secrets {
        &self.secrets
    }

    /// Adds an in-process tool (the library's builder).
    pub fn with_tool(mut self, tool: Arc<dyn Tool>) -> Result<Self, ToolboxError> {
        let spec = tool.spec();
        crate::task::tools::ToolName::parse(&spec.name).map_err(|m| ToolboxError::new("tools", m))?;
        self.push(spec, Runner::Local(tool), "tools")?;
        Ok(self)
    }

    fn push(&mut self, spec: ToolSpec, runner: Runner, field: &str) -> Result<(), ToolboxError> {
        if self.entries.iter().any(|e| e.spec.name == spec.name) {
            return Err(ToolboxError::new(
                format!("{field}.name"),
                format!("a tool named {:?} is declared twice; tool names must be unique", spec.name),
            ));
        }
        let schema = JsonSchema::new(spec.parameters.clone())
            .map_err(|m| ToolboxError::new(format!("{field}.parameters"), m))?;
        let checker = Checker::new(&schema).map_err(|m| ToolboxError::new(format!("{field}.parameters"), m))?;
        self.entries.push(Entry { spec, checker, runner });
        Ok(())
    }

    /// The function tools the model is given: `task_completion` first, then the declared tools in order.
    pub fn specs(&self) -> Vec<ToolSpec> {
        let mut specs = vec![self.completion_spec()];
        specs.extend(self.entries.iter().map(|e| e.spec.clone()));
        specs
    }

    /// Whether `name` is a `remote` tool.
    pub fn is_remote(&self, name: &str) -> bool {
        self.entries.iter().any(|e| e.spec.name == name && matches!(e.runner, Runner::Remote))
    }

    /// Checks a call's arguments against its tool's schema, without running it.
    pub fn check(&self, name: &str, arguments: &serde_json::Value) -> Result<(), ToolOutcome> {
        if name == TASK_COMPLETION {
            return self.completion(arguments).map(|_| ()).map_err(|e| ToolOutcome::error(e.to_string()));
        }
        let entry = self.entry(name)?;
        entry
            .checker
            .check(arguments)
            .map_err(|problems| ToolOutcome::error(format!("invalid arguments for {name}: {problems}")))
    }

    fn entry(&self, name: &str) -> Result<&Entry, ToolOutcome> {
        self.entries.iter().find(|e| e.spec.name == name).ok_or_else(|| {
            let mut names: Vec<&str> = vec![TASK_COMPLETION];
            names.extend(self.entries.iter().map(|e| e.spec.name.as_str()));
            ToolOutcome::error(format!("unknown tool {name:?}; the tools are: {}", names.join(", ")))
        })
    }

    /// Runs a function call: arguments checked first; `task_completion` handled here; a `remote` tool
    /// comes back as [`Called::Remote`].
    pub async fn call(&self, name: &str, arguments: &serde_json::Value, context: ToolContext<'_>) -> Called {
        if name == TASK_COMPLETION {
            return match self.completion(arguments) {
                Ok(effect) => Called::Done(ToolOutcome::ok("Task completion recorded."), Some(effect)),
                Err(CompletionError::Arguments(message)) => Called::Done(ToolOutcome::error(message), None),
                Err(CompletionError::Output { message, problems }) => {
                    Called::Done(ToolOutcome::error(message), Some(Effect::InvalidOutput { problems }))
                }
            };
        }
        let entry = match self.entry(name) {
            Ok(entry) => entry,
            Err(outcome) => return Called::Done(outcome, None),
        };
        if let Runner::Human = entry.runner {
            // Valid: the loop parks for it before calling here; what arrives here is refused.
            return match entry.checker.check(arguments) {
                Ok(()) => Called::Done(ToolOutcome::error("internal error: ask_human was run in-process"), None),
                Err(problems) => {
                    Called::Done(ToolOutcome::error(format!("invalid arguments for {name}: {problems}")), None)
                }
            };
        }
        if let Runner::Remote = entry.runner {
            // The API client runs it with the arguments as the model wrote them (placeholders included).
            return match entry.checker.check(arguments) {
                Ok(()) => Called::Remote,
                Err(problems) => {
                    Called::Done(ToolOutcome::error(format!("invalid arguments for {name}: {problems}")), None)
                }
            };
        }
        // What the tool receives (and its schema checks) has the secrets' values; nothing the tool says back
        // does.
        let arguments = self.secrets.substitute_json(arguments).into_owned();
        let outcome = match (&entry.runner, entry.checker.check(&arguments)) {
            (_, Err(problems)) => ToolOutcome::error(format!("invalid arguments for {name}: {problems}")),
            (Runner::Local(tool), Ok(())) => {
                let secrets = &self.secrets;
                let output = context.output;
                let redacting = move |text: &str| output(&secrets.redact(text));
                tool.call(arguments, ToolContext { cancel: context.cancel, output: &redacting }).await
            }
            (Runner::Remote | Runner::Human, Ok(())) => {
                ToolOutcome::error("internal error: a remote tool was run in-process")
            }
        };
        Called::Done(self.redact(outcome), None)
    }

    /// The envelope with every secret value replaced by its placeholder.
    fn redact(&self, mut outcome: ToolOutcome) -> ToolOutcome {
        if let std::borrow::Cow::Owned(message) = self.secrets.redact(&outcome.message) {
            outcome.message = message;
        }
        if let Some(details) = &mut outcome.details {
            self.secrets.redact_json(details);
        }
        outcome
    }

    /// `task_completion`'s schema: `output` is added (and required) when the task gives an `output_schema`.
    fn completion_spec(&self) -> ToolSpec {
        let mut parameters = json!({
            "type": "object",
            "properties": {
                "success": {"type": "boolean", "description": "Whether the task was accomplished."},
                "summary": {"type": "string", "description": "What was done, or why it could not be done."}
            },
            "required": ["success", "summary"],
            "additionalProperties": false
        });
        let mut description = "Call this when the task is finished, or when it cannot be finished. Set success \
                               to true only if everything the task asked for was done, and summarise what happened."
            .to_string();
        if let Some((schema, _)) = &self.output {
            parameters["properties"]["output"] = schema.as_value().clone();
            if let Some(required) = parameters["required"].as_array_mut() {
                required.push(json!("output"));
            }
            description.push_str(" Give the result the task asks for as `output`, matching its schema.");
        }
        ToolSpec { name: TASK_COMPLETION.to_string(), description, parameters }
    }

    /// Reads `task_completion`'s arguments; the output is checked against the task's schema.
    pub fn completion(&self, arguments: &serde_json::Value) -> Result<Effect, CompletionError> {
        let args = CompletionArgs::deserialize(arguments).map_err(|e| {
            CompletionError::Arguments(format!(
                "invalid arguments for {TASK_COMPLETION}: {e}; expected {{\"success\": bool, \"summary\": string{}}}",
                if self.output.is_some() { ", \"output\": …" } else { "" }
            ))
        })?;
        let output = match (&self.output, args.output) {
            (None, None) => None,
            (None, Some(_)) => {
                return Err(CompletionError::Arguments(format!(
                    "invalid arguments for {TASK_COMPLETION}: this task asks for no `output`"
                )));
            }
            // A task that failed need not produce its output.
            (Some(_), None) if !args.success => None,
            (Some(_), None) => {
                return Err(CompletionError::Output {
                    message: format!(
                        "invalid arguments for {TASK_COMPLETION}: `output` is required, matching the task's output \
                         schema"
                    ),
                    problems: "`output` is missing".to_string(),
                });
            }
            (Some((_, checker)), Some(output)) => {
                checker.check(&output).map_err(|problems| CompletionError::Output {
                    message: format!("the output does not match the task's output schema: {problems}"),
                    problems,
                })?;
                Some(output)
            }
        };
        Ok(Effect::Complete { success: args.success, summary: args.summary, output })
    }
}

fn known(catalog: &BTreeMap<String, ToolDecl>) -> String {
    if catalog.is_empty() {
        "none is configured".to_string()
    } else {
        format!("configured: {}", catalog.keys().map(String::as_str).collect::<Vec<_>>().join(", "))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CompletionArgs {
    success: bool,
    #[serde(default)]
    summary: String,
    #[serde(default)]
    output: Option<serde_json::Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noop(_: &str) {}

    fn context() -> ToolContext<'static> {
        ToolContext { cancel: CancellationToken::new(), output: &noop }
    }

    #[tokio::test]
    async fn completion_is_parsed_and_validated() {
        let toolbox = Toolbox::empty();
        let Called::Done(outcome, effect) =
            toolbox.call(TASK_COMPLETION, &json!({"success": true, "summary": "done"}), context()).await
        else {
            panic!("not done")
        };
        assert!(outcome.ok);
        assert_eq!(effect, Some(Effect::Complete { success: true, summary: "done".into(), output: None }));
        let Called::Done(outcome, effect) = toolbox.call(TASK_COMPLETION, &json!({"success": "yes"}), context()).await
        else {
            panic!("not done")
        };
        assert!(!outcome.ok && effect.is_none());
        let Called::Done(outcome, _) = toolbox.call("rm_rf", &json!({}), context()).await else { panic!() };
        assert!(!outcome.ok && outcome.message.contains("rm_rf"), "{outcome:?}");
    }

    fn with_output_schema(schema: serde_json::Value) -> Toolbox {
        let schema = JsonSchema::new(schema).unwrap();
        let checker = Checker::new(&schema).unwrap();
        Toolbox { output: Some((schema, checker)), ..Toolbox::empty() }
    }

    #[tokio::test]
    async fn structured_output_is_checked_and_an_invalid_one_is_counted() {
        let toolbox = with_output_schema(json!({"type": "object", "properties": {"total": {"type": "number"}},
            "required": ["total"]}));
        let spec = &toolbox.specs()[0];
        assert_eq!(spec.parameters["properties"]["output"]["required"], json!(["total"]));
        assert_eq!(spec.parameters["required"], json!(["success", "summary", "output"]));
        let call = |args: serde_json::Value| {
            let toolbox = &toolbox;
            async move {
                match toolbox.call(TASK_COMPLETION, &args, context()).await {
                    Called::Done(outcome, effect) => (outcome, effect),
                    Called::Remote => panic!("remote"),
                }
            }
        };
        let (outcome, effect) = call(json!({"success": true, "summary": "s", "output": {"total": 4.5}})).await;
        assert!(outcome.ok);
        assert_eq!(
            effect,
            Some(Effect::Complete { success: true, summary: "s".into(), output: Some(json!({"total": 4.5})) })
        );
        let (outcome, effect) = call(json!({"success": true, "summary": "s", "output": {"total": "4"}})).await;
        assert!(!outcome.ok && outcome.message.contains("/total"), "{outcome:?}");
        assert!(matches!(effect, Some(Effect::InvalidOutput { problems }) if problems.contains("/total")));
        let (outcome, effect) = call(json!({"success": true, "summary": "s"})).await;
        assert!(!outcome.ok && outcome.message.contains("`output` is required"), "{outcome:?}");
        assert!(matches!(effect, Some(Effect::InvalidOutput { .. })));
        // A task that failed owes no output.
        let (outcome, effect) = call(json!({"success": false, "summary": "no"})).await;
        assert!(outcome.ok);
        assert_eq!(effect, Some(Effect::Complete { success: false, summary: "no".into(), output: None }));
        // Malformed arguments are not an invalid output (they do not count against the output's tries).
        let (outcome, effect) = call(json!({"success": "yes", "output": {"total": 1}})).await;
        assert!(!outcome.ok && effect.is_none(), "{outcome:?}");
    }

    struct Echo;

    #[async_trait]
    impl Tool for Echo {
        fn spec(&self) -> ToolSpec {
            ToolSpec {
                name: "echo".into(),
                description: "echoes".into(),
                parameters: json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
            }
        }
        async fn call(&self, arguments: serde_json::Value, _: ToolContext<'_>) -> ToolOutcome {
            ToolOutcome::ok(arguments["text"].as_str().unwrap_or_default()).with_details(json!({"len": 1}))
        }
    }

    #[tokio::test]
    async fn arguments_are_checked_before_a_tool_runs() {
        let toolbox = Toolbox::empty().with_tool(Arc::new(Echo)).unwrap();
        assert_eq!(toolbox.specs().len(), 2);
        let Called::Done(outcome, _) = toolbox.call("echo", &json!({"text": "hi"}), context()).await else { panic!() };
        assert_eq!(outcome, ToolOutcome::ok("hi").with_details(json!({"len": 1})));
        let Called::Done(outcome, _) = toolbox.call("echo", &json!({"text": 5}), context()).await else { panic!() };
        assert!(!outcome.ok && outcome.message.contains("/text"), "{outcome:?}");
        assert!(Toolbox::empty().with_tool(Arc::new(Echo)).unwrap().with_tool(Arc::new(Echo)).is_err());
    }

    /// Echoes its arguments in its message, its details and its streamed output, and keeps what it received.
    struct Spy(std::sync::Mutex<Vec<serde_json::Value>>);

    #[async_trait]
    impl Tool for Spy {
        fn spec(&self) -> ToolSpec {
            ToolSpec {
                name: "spy".into(),
                description: "echoes".into(),
                parameters: json!({"type": "object", "properties": {"token": {"type": "string", "pattern": "^[a-z0-9-]+$"}}}),
            }
        }
        async fn call(&self, arguments: serde_json::Value, context: ToolContext<'_>) -> ToolOutcome {
            self.0.lock().unwrap().push(arguments.clone());
            (context.output)(&arguments.to_string());
            ToolOutcome::ok(format!("got {arguments}")).with_details(json!({"echo": arguments}))
        }
    }

    #[tokio::test]
    async fn a_tool_receives_the_values_and_its_envelope_shows_the_placeholders() {
        use crate::task::secrets::SecretName;
        let secrets = Secrets::new(vec![(SecretName::parse("token").unwrap(), "abc-123-zz".into())]).unwrap();
        let spy = Arc::new(Spy(Default::default()));
        let toolbox = Toolbox::empty().with_tool(spy.clone()).unwrap().with_secrets(secrets);
        let streamed = std::sync::Mutex::new(String::new());
        let sink = |t: &str| streamed.lock().unwrap().push_str(t);
        let args = json!({"token": "<secret:token>"});
        let context = ToolContext { cancel: CancellationToken::new(), output: &sink };
        let Called::Done(outcome, _) = toolbox.call("spy", &args, context).await else { panic!() };
        // The tool got the value (and the schema, whose pattern the placeholder would fail, checked it).
        assert_eq!(spy.0.lock().unwrap().as_slice(), [json!({"token": "abc-123-zz"})]);
        assert!(outcome.ok, "{outcome:?}");
        let shown = format!("{} {} {}", outcome.message, outcome.details.unwrap(), streamed.lock().unwrap());
        assert!(!shown.contains("abc-123-zz") && shown.matches("<secret:token>").count() == 3, "{shown}");
        // A schema error quoting the value is redacted too.
        let bad = json!({"token": "<secret:token>!"});
        let context = ToolContext { cancel: CancellationToken::new(), output: &noop };
        let Called::Done(outcome, _) = toolbox.call("spy", &bad, context).await else { panic!() };
        assert!(!outcome.ok && !outcome.message.contains("abc-123-zz"), "{outcome:?}");
    }
}
