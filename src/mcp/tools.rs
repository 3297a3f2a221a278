//! The task tools the MCP server offers, listed once: their names, what they do, their input schemas and
//! their annotations (`readOnlyHint`, `destructiveHint`, `idempotentHint`, `openWorldHint`). `docs/mcp.md`
//! documents the same list; a test checks that it names every tool.

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

/// A tool of the server, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskTool {
    RunTask,
    SubmitTask,
    GetTask,
    ListTasks,
    Answer,
    Approve,
    Reject,
    Cancel,
    SendMessage,
    LeaseComputer,
    ReleaseComputer,
}

impl TaskTool {
    pub const ALL: [TaskTool; 11] = [
        Self::RunTask,
        Self::SubmitTask,
        Self::GetTask,
        Self::ListTasks,
        Self::Answer,
        Self::Approve,
        Self::Reject,
        Self::Cancel,
        Self::SendMessage,
        Self::LeaseComputer,
        Self::ReleaseComputer,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::RunTask => "run_task",
            Self::SubmitTask => "submit_task",
            Self::GetTask => "get_task",
            Self::ListTasks => "list_tasks",
            Self::Answer => "answer",
            Self::Approve => "approve",
            Self::Reject => "reject",
            Self::Cancel => "cancel",
            Self::SendMessage => "send_message",
            Self::LeaseComputer => "lease_computer",
            Self::ReleaseComputer => "release_computer",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|tool| tool.name() == name)
    }

    fn description(self) -> &'static str {
        match self {
            Self::RunTask => {
                "Run a computer-use task and wait for its end: a vision model operates a computer (screenshots, \
                 clicks, typing) until it completes the instructions or a limit ends it. The arguments are a \
                 task file's fields (only `instructions` is required). Sends a progress notification per step \
                 when the request carries a progress token. Returns the outcome (success, summary, reason), the \
                 structured `output` when the task has an `output_schema`, and the last screenshot. Cancelling \
                 the request cancels the task."
            }
            Self::SubmitTask => {
                "Queue a computer-use task and return its id at once, without waiting (follow it with \
                 get_task). The arguments are a task file's fields (only `instructions` is required)."
            }
            Self::GetTask => {
                "A task's status document: state, outcome, steps with the model's text and actions, usage, and \
                 what it waits for (`waiting`) when it waits for a human."
            }
            Self::ListTasks => "Tasks, newest first, optionally only those in one state.",
            Self::Answer => {
                "Answer the question a task's model asked (the task waits in waiting_for_human with \
                 `waiting.kind` = `question`); it resumes with the text as the answer."
            }
            Self::Approve => {
                "Approve the actions a task waits to be allowed to take (`waiting.kind` = `approval`); they run \
                 and the task resumes."
            }
            Self::Reject => {
                "Reject the actions a task waits to be allowed to take; they do not run (the task goes on \
                 without them, or ends `rejected`)."
            }
            Self::Cancel => "Cancel a queued, waiting or running task (a running one stops at its next safe point).",
            Self::SendMessage => {
                "Send a finished task the user's next message: a new turn of the task, run with its history."
            }
            Self::LeaseComputer => {
                "Lease a computer of the daemon for this session and operate it yourself with the computer tools \
                 (screenshot, click, double_click, type, key, scroll, drag, move, wait), each returning the \
                 screenshot after it. `desktop` names a desktop of the daemon's pool (refused while another \
                 session or task holds it); `computer` is a task file's computer object instead. The session is \
                 recorded as a task (every call a step); release_computer, or the end of this MCP session, \
                 ends it. Returns the task id and the first screenshot."
            }
            Self::ReleaseComputer => {
                "End the computer session lease_computer started: its task completes, recorded with every step."
            }
        }
    }

    fn input_schema(self) -> Value {
        let id =
            json!({"type": "string", "description": "The task's id (as run_task, submit_task or list_tasks gave it)."});
        let object = |properties: Value, required: &[&str]| json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false});
        match self {
            Self::RunTask | Self::SubmitTask => task_file_schema(),
            Self::GetTask | Self::Approve | Self::Cancel => object(json!({ "id": id }), &["id"]),
            Self::ListTasks => object(
                json!({
                    "state": {"type": "string", "description": "Only tasks in this state.",
                              "enum": ["queued", "running", "waiting_for_human", "awaiting_tool", "succeeded",
                                       "failed", "cancelled"]},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 1000,
                              "description": "At most this many tasks (default 20)."}
                }),
                &[],
            ),
            Self::Answer => object(
                json!({"id": id, "text": {"type": "string", "minLength": 1, "description": "The answer the model reads."}}),
                &["id", "text"],
            ),
            Self::Reject => object(
                json!({"id": id, "reason": {"type": "string", "description": "Why: recorded and shown in the outcome."}}),
                &["id"],
            ),
            Self::SendMessage => object(
                json!({"id": id, "text": {"type": "string", "minLength": 1, "description": "What the user asks next."}}),
                &["id", "text"],
            ),
            Self::LeaseComputer => object(
                json!({
                    "desktop": {"type": "string", "description": "A desktop of the daemon's pool, by name."},
                    "computer": {"type": "object", "description": "A task file's computer object, instead of `desktop`."},
                    "instructions": {"type": "string", "description": "What the session is for (the recorded task's instructions)."},
                    "secrets": {"type": "object", "description": "Secrets typed by placeholder (`<secret:NAME>` in `type`): {\"NAME\": {\"env\": \"VAR\"}}, read on the daemon."},
                }),
                &[],
            ),
            Self::ReleaseComputer => object(json!({}), &[]),
        }
    }

    /// The hints, honestly: a task operates a computer (anything it can reach), so starting or resuming one is
    /// destructive and open-world; reading is read-only; cancelling ends work for good.
    fn annotations(self) -> ToolAnnotations {
        let (title, read_only, destructive, idempotent, open_world) = match self {
            Self::RunTask => ("Run a computer-use task", false, true, false, true),
            Self::SubmitTask => ("Queue a computer-use task", false, true, false, true),
            Self::GetTask => ("Show a task", true, false, true, false),
            Self::ListTasks => ("List tasks", true, false, true, false),
            // The task goes on acting on its computer with the answer.
            Self::Answer => ("Answer a task's question", false, true, false, true),
            // The held actions run.
            Self::Approve => ("Approve a task's held actions", false, true, false, true),
            Self::Reject => ("Reject a task's held actions", false, false, false, false),
            Self::Cancel => ("Cancel a task", false, true, true, false),
            Self::SendMessage => ("Continue a finished task", false, true, false, true),
            // Leasing holds a computer; only the computer tools act on it.
            Self::LeaseComputer => ("Lease a computer", false, false, false, false),
            Self::ReleaseComputer => ("Release the leased computer", false, false, true, false),
        };
        ToolAnnotations::with_title(title)
            .read_only(read_only)
            .destructive(destructive)
            .idempotent(idempotent)
            .open_world(open_world)
    }

    /// The tool as `tools/list` gives it.
    pub fn tool(self) -> Tool {
        let schema = match self.input_schema() {
            Value::Object(map) => map,
            _ => JsonObject::new(),
        };
        Tool::new(self.name(), self.description(), Arc::new(schema)).with_annotations(self.annotations())
    }
}

/// The input schema of `run_task` and `submit_task`: the task file's fields (the task file reference,
/// `docs/` and `agentd schema`, holds the details; the server checks the arguments as a task file and names the
/// field at fault).
fn task_file_schema() -> Value {
    let object = |description: &str| json!({"type": "object", "description": description});
    let array = |description: &str| json!({"type": "array", "items": {"type": "object"}, "description": description});
    json!({
        "type": "object",
        "properties": {
            "instructions": {"type": "string", "minLength": 1, "description": "What the model is to do on the computer."},
            "id": {"type": "string", "description": "An idempotency key: the same id again returns the existing task."},
            "computer": object("The computer: {\"provider\": \"mock\", \"scene\": \"login\"}, {\"provider\": \"local\", \"display\": \":0\"}, {\"provider\": \"vnc\", \"address\": \"host:5900\"}, {\"desktop\": \"NAME\"}, …"),
            "model": object("The model: {\"provider\": \"anthropic\", \"model\": \"claude-sonnet-4-5\"}, or {\"provider\": \"scripted\", \"script\": …}."),
            "limits": {"type": "object", "description": "Hard limits.",
                       "properties": {"max_steps": {"type": "integer", "minimum": 1},
                                      "timeout_secs": {"type": "integer", "minimum": 1},
                                      "max_cost_usd": {"type": "number", "minimum": 0}}},
            "context": object("How much history the model keeps: {\"keep_screenshots\": 3}."),
            "labels": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Run only on a worker with these labels."},
            "metadata": object("Free-form data kept with the task."),
            "tools": array("Tools beside the computer (http, remote, {\"use\": NAME})."),
            "output_schema": object("The JSON Schema of the structured output the model must give at the end; the result carries it as structured content."),
            "secrets": object("Secrets the model uses by placeholder: {\"NAME\": {\"env\": \"VAR\"}}."),
            "guard": object("The stuck-loop guard's thresholds."),
            "replay": object("Replay a succeeded task's recorded actions: {\"of\": ID}."),
            "verify": array("Checks run when the model says it succeeded."),
            "conversation": object("Earlier turns of a conversation this task continues."),
            "ask_human": {"type": "boolean", "description": "Whether the model may ask a human (default true)."},
            "approval": array("Approval rules: matching actions wait for approve/reject."),
        },
        "required": ["instructions"],
        "additionalProperties": false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found_again() {
        for tool in TaskTool::ALL {
            assert_eq!(TaskTool::from_name(tool.name()), Some(tool));
        }
        assert_eq!(TaskTool::from_name("computer"), None);
    }

    /// docs/mcp.md has a row for every tool.
    #[test]
    fn the_docs_name_every_tool() {
        let docs = include_str!("../../docs/mcp.md");
        for tool in TaskTool::ALL {
            assert!(docs.contains(&format!("| `{}` |", tool.name())), "docs/mcp.md has no row for {}", tool.name());
        }
    }

    #[test]
    fn reading_tools_are_read_only_and_the_rest_are_not() {
        for tool in TaskTool::ALL {
            let listed = tool.tool();
            let hints = listed.annotations.clone().unwrap_or_default();
            let reads = matches!(tool, TaskTool::GetTask | TaskTool::ListTasks);
            assert_eq!(hints.read_only_hint, Some(reads), "{}", tool.name());
            assert_eq!(listed.input_schema.get("type"), Some(&json!("object")), "{}", tool.name());
        }
    }

    /// The task file schema names every field the task file takes (the parser's own list, from its error for
    /// an unknown field), so a client is offered every field and none the server refuses.
    #[test]
    fn the_task_schema_names_the_task_files_fields() {
        let schema = task_file_schema();
        let listed: std::collections::BTreeSet<String> =
            schema["properties"].as_object().map(|p| p.keys().cloned().collect()).unwrap_or_default();
        let error = match crate::task::TaskSpec::parse(r#"{"instructions": "x", "no_such_field": 1}"#, "t") {
            Ok(_) => panic!("an unknown field is refused"),
            Err(e) => e.to_string(),
        };
        let expected = error.split("expected one of").nth(1).unwrap_or_else(|| panic!("no field list in: {error}"));
        let fields: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
        assert!(fields.contains(&"instructions"), "{error}");
        for field in &fields {
            assert!(listed.contains(*field), "the task file's field {field} is missing from run_task's schema");
        }
        for field in &listed {
            assert!(fields.contains(&field.as_str()), "run_task's schema names {field}, which the task file refuses");
        }
    }
}
