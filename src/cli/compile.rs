//! `agentd compile ID [--param NAME=TEXT …]` (docs/replay-and-verify.md): a finished task's trajectory as a script of
//! the scripted
//! model (docs/models.md), for review and version control, with typed texts named as parameters written `{{NAME}}`.
//!
//! One turn per recorded step, in order, so the script plays turn N at step N as the recording did: the step's
//! model text (`say`), its actions in screen pixels, its calls of declared tools, and its `task_completion`
//! (`complete`) where it made one. A step that waited for a human keeps its reason as `ask_human`. Secrets
//! stay the placeholders the record holds (`<secret:NAME>`); the task that plays the script declares them.
//! The scripted model fills `{{NAME}}` from its spec's `params` (`{"provider": "scripted", "script": …,
//! "params": {"email": "ada@example.com"}}`).

use std::collections::BTreeSet;

use agentd_computer::Action;

use super::exit::{CliError, CliResult};
use super::report::{Source, load_record};
use crate::exit::Exit;
use crate::model::TASK_COMPLETION;
use crate::record::{CallKind, TaskState};
use crate::status::TaskRecord;
use crate::task::script::{Completion, Script, ScriptCall, ScriptTurn, is_param_name};

/// Why a record cannot be compiled as asked.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CompileError {
    #[error("--param {0:?}: expected NAME=TEXT (NAME: letters, digits, _ and -, starting with a letter or _)")]
    Param(String),
    #[error("--param {name}: the name is given twice")]
    DuplicateName { name: String },
    #[error("--param {name}={text}: no `type` action of task {task} typed {text:?}")]
    NotTyped { name: String, text: String, task: String },
    #[error("task {task} is {state}: only a finished task's trajectory can be compiled")]
    Unfinished { task: String, state: &'static str },
}

/// A parameter: the recorded text `text` is written `{{name}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    pub name: String,
    pub text: String,
}

impl Param {
    /// `NAME=TEXT` as typed on the command line.
    pub fn parse(arg: &str) -> Result<Param, CompileError> {
        let (name, text) = arg.split_once('=').ok_or_else(|| CompileError::Param(arg.to_string()))?;
        if !is_param_name(name) || text.is_empty() {
            return Err(CompileError::Param(arg.to_string()));
        }
        Ok(Param { name: name.to_string(), text: text.to_string() })
    }
}

/// The script of `record`'s trajectory with `params` named.
pub fn compile(record: &TaskRecord, params: &[Param]) -> Result<Script, CompileError> {
    if !record.state.is_terminal() {
        return Err(CompileError::Unfinished { task: record.id.clone(), state: record.state.as_str() });
    }
    let mut names = BTreeSet::new();
    for param in params {
        if !names.insert(param.name.as_str()) {
            return Err(CompileError::DuplicateName { name: param.name.clone() });
        }
    }
    // The longest texts first, so a text inside another (`Ann` in `Anna`) does not split it.
    let mut by_length: Vec<usize> = (0..params.len()).collect();
    by_length.sort_by_key(|&i| std::cmp::Reverse(params[i].text.len()));
    let mut used = vec![false; params.len()];
    let turns = record
        .steps
        .iter()
        .map(|step| {
            let actions = step
                .actions
                .iter()
                .map(|action| match action {
                    Action::Type { text } => {
                        let mut text = text.clone();
                        for &i in &by_length {
                            let param = &params[i];
                            if text.contains(&param.text) {
                                text = text.replace(&param.text, &format!("{{{{{}}}}}", param.name));
                                used[i] = true;
                            }
                        }
                        Action::Type { text }
                    }
                    other => other.clone(),
                })
                .collect();
            let mut calls = Vec::new();
            let mut complete = None;
            for call in &step.calls {
                if let CallKind::Function { name, arguments } = &call.kind {
                    if name == TASK_COMPLETION {
                        complete = Some(completion_of(arguments));
                    } else {
                        calls.push(ScriptCall { name: name.clone(), arguments: arguments.clone() });
                    }
                }
            }
            let mut turn = ScriptTurn {
                say: Some(step.model_text.clone()).filter(|t| !t.is_empty()),
                actions,
                calls,
                complete,
                usage: None,
                ask_human: step.approval.as_ref().map(|a| a.reason.clone()),
            };
            // A turn that did nothing (the model answered no call) stays a turn, so the steps keep their numbers.
            if turn.say.is_none() && turn.actions.is_empty() && turn.calls.is_empty() && turn.complete.is_none() {
                turn.say = Some(String::new());
            }
            turn
        })
        .collect();
    if let Some(i) = used.iter().position(|u| !u) {
        return Err(CompileError::NotTyped {
            name: params[i].name.clone(),
            text: params[i].text.clone(),
            task: record.id.clone(),
        });
    }
    Ok(Script { turns })
}

/// `task_completion`'s arguments as the script's `complete`.
fn completion_of(arguments: &serde_json::Value) -> Completion {
    Completion {
        success: arguments.get("success").and_then(|v| v.as_bool()).unwrap_or(false),
        summary: arguments.get("summary").and_then(|v| v.as_str()).unwrap_or_default().to_string(),
        output: arguments.get("output").cloned(),
    }
}

/// `agentd compile`: prints the script (pretty JSON) on stdout.
pub async fn run(source: Source<'_>, id: &str, params: &[String]) -> CliResult {
    let params = params.iter().map(|p| Param::parse(p)).collect::<Result<Vec<_>, _>>().map_err(CliError::invalid)?;
    let record = load_record(&source, id).await?;
    if record.state == TaskState::Failed || record.state == TaskState::Cancelled {
        eprintln!("agentd: note: task {id} {}; its script ends as it did", record.state.as_str());
    }
    let script = compile(&record, &params).map_err(CliError::invalid)?;
    let text = serde_json::to_string_pretty(&script).map_err(|e| CliError::failed(anyhow::anyhow!(e)))?;
    println!("{text}");
    Ok(Exit::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_parse_and_bad_ones_are_named() {
        assert_eq!(Param::parse("email=zoe@example.com").unwrap().text, "zoe@example.com");
        assert_eq!(Param::parse("x=a=b").unwrap().text, "a=b");
        for bad in ["email", "=x", "1a=x", "a b=x", "email="] {
            assert_eq!(Param::parse(bad), Err(CompileError::Param(bad.into())), "{bad}");
        }
    }
}
