//! The scripted model's script (docs/models.md), part of what users write: inline in a task file or a file of its own.
//! The format is described in `model::scripted`, which plays it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use agentd_computer::Action;
use serde::{Deserialize, Serialize};

use crate::input::{TaskFileError, parse_json};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Script {
    #[schemars(length(min = 1))]
    pub turns: Vec<ScriptTurn>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScriptTurn {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub say: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<Action>,
    /// Calls of declared tools (docs/tools.md), run in order after the turn's actions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<ScriptCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complete: Option<Completion>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ScriptUsage>,
    /// Ask a human before the turn's actions run (the task waits in `waiting_for_human`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask_human: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Completion {
    pub success: bool,
    #[serde(default)]
    pub summary: String,
    /// The structured output (docs/task-file.md), passed to `task_completion` as `output`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<serde_json::Value>,
}

/// A call of a declared tool: its name and arguments, as a model would make it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScriptCall {
    pub name: String,
    #[serde(default = "empty_object")]
    pub arguments: serde_json::Value,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScriptUsage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_read_tokens: u64,
    #[serde(default)]
    pub cache_write_tokens: u64,
    #[serde(default)]
    pub cost_usd: f64,
}

impl Script {
    /// Parses a script file's text; errors name `source_name`, the field and the line/column.
    pub fn parse(text: &str, source_name: &str) -> Result<Self, TaskFileError> {
        let script: Script = parse_json(text, source_name)?;
        script.check(source_name)?;
        Ok(script)
    }

    /// Reads and parses a script file (blocking; a regular file of bounded size, see `input::files`).
    pub fn load(path: &Path) -> Result<Self, TaskFileError> {
        let name = path.display().to_string();
        let text = crate::input::read_text_blocking(path)
            .map_err(|e| TaskFileError::Read { source_name: name.clone(), error: e.into_io() })?;
        Self::parse(&text, &name)
    }

    /// Checks what the types cannot: a script has turns, and no turn is empty.
    pub fn check(&self, source_name: &str) -> Result<(), TaskFileError> {
        let invalid = |field: String, message: &str| TaskFileError::Invalid {
            source_name: source_name.to_string(),
            field: Some(field),
            line: 0,
            column: 0,
            message: message.to_string(),
        };
        if self.turns.is_empty() {
            return Err(invalid("turns".into(), "a script needs at least one turn"));
        }
        for (i, turn) in self.turns.iter().enumerate() {
            if turn.say.is_none()
                && turn.actions.is_empty()
                && turn.calls.is_empty()
                && turn.complete.is_none()
                && turn.ask_human.is_none()
            {
                return Err(invalid(format!("turns[{i}]"), "a turn needs `say`, `actions`, `calls` or `complete`"));
            }
            for (j, call) in turn.calls.iter().enumerate() {
                if call.name.is_empty() {
                    return Err(invalid(format!("turns[{i}].calls[{j}].name"), "name the tool to call"));
                }
            }
            if let Some(usage) = &turn.usage
                && (!usage.cost_usd.is_finite() || usage.cost_usd < 0.0)
            {
                return Err(invalid(format!("turns[{i}].usage.cost_usd"), "must be a non-negative number"));
            }
        }
        Ok(())
    }
}

impl Script {
    /// The script with every `{{NAME}}` in its `type` actions' texts replaced by `params[NAME]` (a script
    /// `agentd compile` wrote with parameters). Errors name what does not fit: a `{{NAME}}` without a value
    /// (`turns[i].actions[j].text`) or a value the script never uses (`NAME`).
    pub fn with_params(&self, params: &BTreeMap<String, String>) -> Result<Script, ParamError> {
        let mut used = BTreeSet::new();
        let mut script = self.clone();
        for (i, turn) in script.turns.iter_mut().enumerate() {
            for (j, action) in turn.actions.iter_mut().enumerate() {
                let Action::Type { text } = action else { continue };
                let mut out = String::with_capacity(text.len());
                let mut rest = text.as_str();
                while let Some(start) = rest.find("{{") {
                    let after = &rest[start + 2..];
                    let name = after.find("}}").map(|end| &after[..end]).filter(|n| is_param_name(n));
                    match name {
                        Some(name) => {
                            let value = params.get(name).ok_or_else(|| ParamError::Missing {
                                field: format!("turns[{i}].actions[{j}].text"),
                                name: name.to_string(),
                            })?;
                            used.insert(name.to_string());
                            out.push_str(&rest[..start]);
                            out.push_str(value);
                            rest = &after[name.len() + 2..];
                        }
                        None => {
                            out.push_str(&rest[..start + 2]);
                            rest = after;
                        }
                    }
                }
                out.push_str(rest);
                *text = out;
            }
        }
        if let Some(unused) = params.keys().find(|name| !used.contains(*name)) {
            return Err(ParamError::Unused { name: unused.clone() });
        }
        Ok(script)
    }
}

/// A parameter name: 1–64 of `A-Z a-z 0-9 _ -`, starting with a letter or `_`.
pub fn is_param_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Why a script's parameters do not fit it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParamError {
    #[error("{field} types {{{{{name}}}}} and `model.params` gives no {name:?}")]
    Missing { field: String, name: String },
    #[error("the script types no {{{{{name}}}}}")]
    Unused { name: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_fill_typed_texts_and_misfits_are_named() {
        let script = Script::parse(
            r#"{"turns":[{"actions":[{"type":"type","text":"{{user}} <{{email}}> {{not a name}} {{"}]}]}"#,
            "s.json",
        )
        .unwrap();
        let params: BTreeMap<String, String> =
            [("user".to_string(), "Ada".to_string()), ("email".to_string(), "a@x".to_string())].into();
        let filled = script.with_params(&params).unwrap();
        assert_eq!(filled.turns[0].actions[0], Action::Type { text: "Ada <a@x> {{not a name}} {{".into() });
        let missing = script.with_params(&[("user".to_string(), "Ada".to_string())].into()).unwrap_err();
        assert_eq!(missing, ParamError::Missing { field: "turns[0].actions[0].text".into(), name: "email".into() });
        let mut extra = params.clone();
        extra.insert("phone".into(), "1".into());
        assert_eq!(script.with_params(&extra).unwrap_err(), ParamError::Unused { name: "phone".into() });
    }

    #[test]
    fn script_errors_name_the_field() {
        let err =
            Script::parse(r#"{"turns":[{"say":"hi","actions":[{"type":"click","x":1}]}]}"#, "s.json").unwrap_err();
        assert_eq!(err.field(), Some("turns[0].actions[0].y"), "{err}");
        let err = Script::parse(r#"{"turns":[]}"#, "s.json").unwrap_err();
        assert_eq!(err.field(), Some("turns"));
        let err = Script::parse(r#"{"turns":[{}]}"#, "s.json").unwrap_err();
        assert_eq!(err.field(), Some("turns[0]"));
        let err = Script::parse(r#"{"turns":[{"sya":"x"}]}"#, "s.json").unwrap_err();
        assert_eq!(err.field(), Some("turns[0].sya"), "{err}");
    }
}
