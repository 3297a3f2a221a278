//! `TaskSpec`, the task file as submitted (docs/task-file.md): its fields, `instructions`, parsing a file's text
//! with errors that name the field and position, and `TaskSource`, where a file came from and how the paths
//! inside it resolve.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize};

use super::approval;
use super::conversation;
use super::guard::GuardSpec;
use super::replay::ReplaySpec;
use super::secrets::{SecretName, SecretSource};
use super::tools::{self, JsonSchema, TaskTool};
use super::verify;
use super::{ComputerSpec, ContextSpec, LabelKey, LimitsSpec, ModelSpec, TaskFileError, TaskId, parse_json};
use crate::input::line_column;

/// A task as submitted. Every field but `instructions` is optional and falls back to config defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<TaskId>,
    pub instructions: Instructions,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub computer: Option<ComputerSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelSpec>,
    #[serde(default, skip_serializing_if = "LimitsSpec::is_empty")]
    pub limits: LimitsSpec,
    #[serde(default, skip_serializing_if = "ContextSpec::is_empty")]
    pub context: ContextSpec,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<LabelKey, String>,
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// Tools beside the computer tool and `task_completion` (docs/tools.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "unique_tools")]
    pub tools: Vec<TaskTool>,
    /// The JSON Schema `task_completion`'s `output` must match (docs/task-file.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<JsonSchema>,
    /// Secrets the task may use by placeholder (docs/security.md).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<SecretName, SecretSource>,
    /// The stuck-loop guard's thresholds (docs/task-file.md), over the config's `[guard]`.
    #[serde(default, skip_serializing_if = "GuardSpec::is_empty")]
    pub guard: GuardSpec,
    /// Run a succeeded task's recorded actions without a model (docs/replay-and-verify.md; `replay.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<ReplaySpec>,
    /// Checks run when the model completes with success and at the end (docs/replay-and-verify.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "verify::checks")]
    #[schemars(length(max = verify::MAX_CHECKS))]
    pub verify: Vec<verify::Check>,
    /// The earlier turns of a conversation this task continues (docs/humans.md; `conversation.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<conversation::Conversation>,
    /// Whether the model is given the `ask_human` tool (docs/humans.md); on unless the task says `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask_human: Option<bool>,
    /// Approval rules (docs/humans.md), beside the config's `[[approval]]`: a matching turn waits for a human.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approval: Vec<approval::ApprovalRule>,
}

/// `tools`, with every name once.
fn unique_tools<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<TaskTool>, D::Error> {
    let tools = Vec::<TaskTool>::deserialize(d)?;
    tools::check_unique(tools.iter().map(TaskTool::name))
        .map_err(|(i, message)| serde::de::Error::custom(format!("field `[{i}].name`: {message}")))?;
    Ok(tools)
}

/// The task's instructions: not blank, at most 100,000 characters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Instructions(String);

impl Instructions {
    pub const MAX_CHARS: usize = 100_000;

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for Instructions {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.trim().is_empty() {
            return Err(serde::de::Error::custom("instructions must not be empty"));
        }
        if s.chars().count() > Self::MAX_CHARS {
            return Err(serde::de::Error::custom(format!(
                "instructions are longer than {} characters",
                Self::MAX_CHARS
            )));
        }
        Ok(Self(s))
    }
}

impl From<&str> for Instructions {
    fn from(s: &str) -> Self {
        Self(s.to_string())
    }
}

impl TaskSpec {
    /// Parses a task file's text; `source_name` is how errors name it (a path, or `<stdin>`).
    pub fn parse(text: &str, source_name: &str) -> Result<Self, TaskFileError> {
        let first = text.trim_start_matches('\u{feff}').trim_start().chars().next();
        if matches!(first, Some('[' | '"' | '0'..='9' | '-' | 't' | 'f' | 'n')) {
            // Valid JSON that is not an object: say what a task file is instead of serde's struct-as-array talk.
            if serde_json::from_str::<serde_json::Value>(text.trim_start_matches('\u{feff}')).is_ok() {
                return Err(TaskFileError::Invalid {
                    source_name: source_name.to_string(),
                    field: None,
                    line: 1,
                    column: 1,
                    message: "invalid type: a task file must be a JSON object {\"instructions\": …}".into(),
                });
            }
        }
        parse_json(text, source_name)
    }

    /// Reads and parses a task file; `-` reads standard input.
    pub fn read(path: &Path) -> Result<(Self, TaskSource), TaskFileError> {
        let mut source = TaskSource::of(path);
        let text = source.read_text()?;
        let spec = Self::parse(&text, &source.name)?;
        source.text = text;
        Ok((spec, source))
    }
}

/// Where a task file came from: its display name and the directory relative paths inside it resolve against.
#[derive(Debug, Clone)]
pub struct TaskSource {
    pub name: String,
    pub path: Option<PathBuf>,
    pub base_dir: PathBuf,
    /// The file's text, once read (for locating fields in errors found after parsing).
    pub text: String,
}

impl TaskSource {
    pub fn of(path: &Path) -> Self {
        if path == Path::new("-") {
            let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
            return Self { name: "<stdin>".into(), path: None, base_dir: cwd, text: String::new() };
        }
        let base_dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Self { name: path.display().to_string(), path: Some(path.to_path_buf()), base_dir, text: String::new() }
    }

    pub fn read_text(&self) -> Result<String, TaskFileError> {
        let read = match &self.path {
            Some(path) => crate::input::read_bytes_blocking(path).map_err(crate::input::FileError::into_io),
            None => crate::input::read_stream(std::io::stdin()),
        };
        let bytes = read.map_err(|error| TaskFileError::Read { source_name: self.name.clone(), error })?;
        String::from_utf8(bytes).map_err(|e| {
            let (line, column) = line_column(e.as_bytes(), e.utf8_error().valid_up_to());
            TaskFileError::Invalid {
                source_name: self.name.clone(),
                field: None,
                line,
                column,
                message: "file is not valid UTF-8".into(),
            }
        })
    }

    /// Resolves a path written inside the task file.
    pub fn resolve(&self, path: &str) -> PathBuf {
        let p = Path::new(path);
        if p.is_absolute() { p.to_path_buf() } else { self.base_dir.join(p) }
    }
}

#[cfg(test)]
mod tests {
    use crate::task::*;

    fn err(text: &str) -> TaskFileError {
        TaskSpec::parse(text, "t.json").unwrap_err()
    }

    #[test]
    fn full_example_parses() {
        let text = r#"{
          "id": "optional-client-chosen-id",
          "instructions": "Log in as alice",
          "computer": { "provider": "mock", "scene": "login" },
          "model": { "provider": "anthropic", "model": "claude-sonnet-4-5" },
          "limits": { "max_steps": 50, "timeout_secs": 1800, "max_cost_usd": 2.0 },
          "context": { "keep_screenshots": 3 },
          "labels": { "os": "ubuntu-24.04" },
          "metadata": { "ticket": "QA-123" }
        }"#;
        let task = TaskSpec::parse(text, "t.json").unwrap();
        assert_eq!(task.id.as_ref().unwrap().as_str(), "optional-client-chosen-id");
        assert_eq!(task.limits.max_steps.unwrap().get(), 50);
        let back = serde_json::to_string(&task).unwrap();
        assert_eq!(TaskSpec::parse(&back, "x").unwrap(), task);
    }

    #[test]
    fn errors_name_field_and_position() {
        let e = err("{\n  \"instructions\": \"x\",\n  \"limits\": {\"max_steps\": \"5\"}\n}");
        assert_eq!(e.field(), Some("limits.max_steps"));
        let text = e.to_string();
        assert!(text.contains("t.json") && text.contains("line 3"), "{text}");

        let e = err(r#"{"instructions":"x","colour":1}"#);
        assert_eq!(e.field(), Some("colour"), "{e}");

        let e = err(r#"{"limits":{}}"#);
        assert_eq!(e.field(), Some("instructions"), "{e}");

        let e = err(r#"{"instructions":"x","computer":{"provider":"amiga"}}"#);
        assert_eq!(e.field(), Some("computer.provider"), "{e}");
        assert!(e.to_string().contains("amiga"));

        let e = err(r#"{"instructions":"x","computer":{"provider":"mock","scene":"login","colour":1}}"#);
        assert_eq!(e.field(), Some("computer.colour"), "{e}");

        let e = err(r#"{"instructions":"x","id":"../../etc"}"#);
        assert_eq!(e.field(), Some("id"), "{e}");
    }

    #[test]
    fn a_scene_is_a_name_a_path_or_the_scene_itself() {
        let task = TaskSpec::parse(
            r#"{"instructions":"x","computer":{"provider":"mock","scene":{"name":"mine","screens":[{"id":"a"}]}}}"#,
            "t.json",
        )
        .unwrap();
        let Some(ComputerSpec::Mock(MockSpec { scene: Some(scene @ SceneSource::Inline(_)), .. })) = &task.computer
        else {
            panic!("{task:?}")
        };
        assert_eq!(scene.describe(), "mine");
        let back = serde_json::to_string(&task).unwrap();
        assert_eq!(TaskSpec::parse(&back, "x").unwrap(), task);

        let e = err(r#"{"instructions":"x","computer":{"provider":"mock","scene":{"screens":[{"id":5}]}}}"#);
        assert_eq!(e.field(), Some("computer.scene.screens[0].id"), "{e}");
        let e = err(r#"{"instructions":"x","computer":{"provider":"mock","scene":7}}"#);
        assert_eq!(e.field(), Some("computer.scene"), "{e}");
    }

    #[test]
    fn fields_are_located_in_the_text() {
        let text = "{\n  \"instructions\": \"say \\\"scene\\\"\",\n  \"computer\": {\"provider\": \"mock\", \"scene\": \"nope\"},\n  \"model\": {\"provider\": \"scripted\", \"script\": {\"turns\": [{}, {\"say\": 1}]}}\n}";
        assert_eq!(locate_field(text, "computer.scene"), Some((3, 45)));
        assert_eq!(locate_field(text, "computer"), Some((3, 15)));
        assert_eq!(locate_field(text, "model.script.turns[1].say"), Some((4, 70)));
        assert_eq!(locate_field(text, "computer.width"), None);
        assert_eq!(locate_field("not json", "a"), None);
    }
}
