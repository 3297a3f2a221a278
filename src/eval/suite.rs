//! A suite file (docs/eval.md), read and checked, and the runs it plans.
//!
//! A suite is TOML or JSON (by its extension; else by its first character): `name`, `tasks` (each
//! `{path = FILE, name?}` — the task file, relative to the suite — or a task written inline, named by its
//! `id`), `models` (each `PROVIDER[:MODEL]` or a task file's `model` object; omitted: each task's own model),
//! `repeat` (k, 1–100, default 1) and `concurrency` (runs at once, 1–256, default 4). Every problem is a
//! [`TaskFileError`]: the file, the field path (`tasks[2].verify`) and, where it can be found, the line and
//! column. A task without a verifier is refused: an unverified success is not a result.
//!
//! The plan puts the repeats of a task far apart (repeat 1 of every task and model, then repeat 2, …), so
//! a fault that lasts a while (a desktop restarting, a vendor's outage) meets one repeat of a task rather than
//! all k. A run's id is derived from the evaluation's id and its place in the suite, so the same suite
//! continued under the same evaluation id plans the same runs with the same ids and task files.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::input::{TaskFileError, field_from, fold_inner_path, line_column, locate_field, parse_json};
use crate::task::script::Script;
use crate::task::{ModelSpec, ScriptSource, ScriptedSpec, TaskId, TaskSource, TaskSpec};

/// At most this many repeats of each task and model.
pub const MAX_REPEAT: u32 = 100;
/// At most this many runs at once.
pub const MAX_CONCURRENCY: u32 = 256;
/// Runs at once when the suite does not say.
pub const DEFAULT_CONCURRENCY: u32 = 4;
/// At most this many runs in one evaluation (tasks × models × repeat).
pub const MAX_RUNS: usize = 10_000;
/// What the result calls the model of a suite without `models`: each task runs with its own.
pub const OWN_MODEL: &str = "(task's own model)";

/// The problems of a suite file are those of any input file agentd reads: file, field, line and column.
pub type SuiteError = TaskFileError;

/// A suite, read and checked.
#[derive(Debug, Clone)]
pub struct Suite {
    pub name: String,
    /// How messages name the suite file.
    pub source_name: String,
    pub tasks: Vec<SuiteTask>,
    /// The models every task runs with; empty: each task's own.
    pub models: Vec<SuiteModel>,
    pub repeat: u32,
    pub concurrency: u32,
}

/// One task of a suite: its name in the result, the task file, and where paths inside it resolve.
#[derive(Debug, Clone)]
pub struct SuiteTask {
    pub name: String,
    pub spec: TaskSpec,
    pub source: TaskSource,
}

/// One model of a suite: its name in the result (as written, or `provider[:model]`) and its spec, scripts
/// already read (a script path is relative to the suite file).
#[derive(Debug, Clone)]
pub struct SuiteModel {
    pub name: String,
    pub spec: ModelSpec,
}

/// One run of an evaluation: a task with one model, one repeat.
#[derive(Debug, Clone)]
pub struct PlannedRun {
    pub id: TaskId,
    /// Index into [`Suite::tasks`].
    pub task: usize,
    /// The model's name in the result.
    pub model: String,
    /// 1-based.
    pub repeat: u32,
    /// The task file the run is: the suite's task with the model, the id and `metadata.eval`.
    pub spec: TaskSpec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SuiteFile {
    name: String,
    tasks: Vec<Value>,
    #[serde(default)]
    models: Vec<Value>,
    #[serde(default)]
    repeat: Option<u32>,
    #[serde(default)]
    concurrency: Option<u32>,
}

/// `{path = FILE, name?}`: a task file of its own.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskPath {
    path: String,
    #[serde(default)]
    name: Option<String>,
}

#[derive(Clone, Copy, PartialEq)]
enum Format {
    Json,
    Toml,
}

impl Suite {
    /// Reads and checks the suite file at `path`, and the task files it names.
    pub fn read(path: &Path) -> Result<Self, SuiteError> {
        let source = TaskSource::of(path);
        let text = source.read_text()?;
        Self::parse(&text, &source)
    }

    /// Checks a suite file's `text`; `source` says how to name it and where its paths resolve.
    pub fn parse(text: &str, source: &TaskSource) -> Result<Self, SuiteError> {
        let format = format_of(source.path.as_deref(), text);
        let locate = Locator { text, format, name: &source.name };
        let file: SuiteFile = match format {
            Format::Json => parse_json(text, &source.name)?,
            Format::Toml => parse_toml(text, &source.name)?,
        };
        let name = file.name.trim().to_string();
        if name.is_empty() || name.chars().count() > 200 || name.chars().any(char::is_control) {
            return Err(locate.error("name", "a suite's name is 1-200 characters, without control characters"));
        }
        let repeat = file.repeat.unwrap_or(1);
        if !(1..=MAX_REPEAT).contains(&repeat) {
            return Err(locate.error("repeat", &format!("repeat is 1-{MAX_REPEAT} (k runs of each task and model)")));
        }
        let concurrency = file.concurrency.unwrap_or(DEFAULT_CONCURRENCY);
        if !(1..=MAX_CONCURRENCY).contains(&concurrency) {
            return Err(locate.error("concurrency", &format!("concurrency is 1-{MAX_CONCURRENCY} runs at once")));
        }
        if file.tasks.is_empty() {
            return Err(locate.error("tasks", "a suite needs at least one task"));
        }
        let mut tasks = Vec::with_capacity(file.tasks.len());
        for (i, entry) in file.tasks.into_iter().enumerate() {
            let task = read_task(entry, i, source, &locate)?;
            if tasks.iter().any(|t: &SuiteTask| t.name == task.name) {
                return Err(locate.error(
                    &format!("tasks[{i}]"),
                    &format!("two tasks are named {:?}: give one a `name` of its own", task.name),
                ));
            }
            tasks.push(task);
        }
        let mut models: Vec<SuiteModel> = Vec::with_capacity(file.models.len());
        for (i, entry) in file.models.into_iter().enumerate() {
            let model = read_model(entry, i, source, &locate)?;
            if models.iter().any(|m| m.name == model.name) {
                return Err(locate.error(&format!("models[{i}]"), &format!("model {:?} is listed twice", model.name)));
            }
            models.push(model);
        }
        let runs = tasks.len() * models.len().max(1) * repeat as usize;
        if runs > MAX_RUNS {
            return Err(locate.error(
                "tasks",
                &format!("the suite plans {runs} runs (tasks × models × repeat); at most {MAX_RUNS} in one evaluation"),
            ));
        }
        Ok(Self { name, source_name: source.name.clone(), tasks, models, repeat, concurrency })
    }

    /// The names of the models the result has a row for, in the suite's order.
    pub fn model_names(&self) -> Vec<String> {
        if self.models.is_empty() {
            vec![OWN_MODEL.to_string()]
        } else {
            self.models.iter().map(|m| m.name.clone()).collect()
        }
    }

    /// Every run of evaluation `eval`: repeat 1 of every task and model first, then repeat 2, and so on.
    pub fn plan(&self, eval: &str) -> Vec<PlannedRun> {
        let models: Vec<Option<&SuiteModel>> =
            if self.models.is_empty() { vec![None] } else { self.models.iter().map(Some).collect() };
        let total = self.tasks.len() * models.len() * self.repeat as usize;
        let mut runs = Vec::with_capacity(total);
        for repeat in 1..=self.repeat {
            for (t, task) in self.tasks.iter().enumerate() {
                for (m, model) in models.iter().enumerate() {
                    let model_name = model.map_or(OWN_MODEL, |m| m.name.as_str()).to_string();
                    let mut spec = task.spec.clone();
                    if let Some(model) = model {
                        spec.model = Some(model.spec.clone());
                    }
                    // `eval` is a TaskId already (checked by the caller), so this is one too.
                    let id = TaskId::parse(&format!("{eval}.t{}.m{}.r{repeat}", t + 1, m + 1))
                        .unwrap_or_else(|_| TaskId::generate());
                    spec.id = Some(id.clone());
                    spec.metadata.insert(
                        "eval".to_string(),
                        json!({
                            "id": eval,
                            "suite": self.name,
                            "task": task.name,
                            "model": model_name,
                            "repeat": repeat,
                            "repeats": self.repeat,
                            "runs": total,
                        }),
                    );
                    runs.push(PlannedRun { id, task: t, model: model_name, repeat, spec });
                }
            }
        }
        runs
    }
}

/// An evaluation's id: given (`--continue ID`) or generated; it starts every run's id, so it is a task id
/// short enough to leave room for the run's place (at most 100 characters).
pub fn eval_id(given: Option<&str>) -> Result<String, String> {
    match given {
        None => Ok(uuid::Uuid::now_v7().to_string()),
        Some(id) if id.len() > 100 => Err(format!("evaluation id {id:?} is longer than 100 characters")),
        Some(id) => {
            TaskId::parse(id).map(|id| id.as_str().to_string()).map_err(|e| e.replace("task id", "evaluation id"))
        }
    }
}

fn format_of(path: Option<&Path>, text: &str) -> Format {
    match path.and_then(Path::extension).and_then(|e| e.to_str()) {
        Some(ext) if ext.eq_ignore_ascii_case("toml") => Format::Toml,
        Some(ext) if ext.eq_ignore_ascii_case("json") => Format::Json,
        _ if text.trim_start_matches('\u{feff}').trim_start().starts_with('{') => Format::Json,
        _ => Format::Toml,
    }
}

/// A TOML suite file into `T`, failures with the field path and the line and column of toml's span.
fn parse_toml<T: serde::de::DeserializeOwned>(text: &str, source_name: &str) -> Result<T, TaskFileError> {
    let invalid = |path: String, error: toml::de::Error| {
        let (line, column) = error.span().map_or((0, 0), |span| line_column(text.as_bytes(), span.start));
        let message = error.message().trim().to_string();
        let (path, message) = fold_inner_path(path, message);
        TaskFileError::Invalid {
            source_name: source_name.to_string(),
            field: field_from(&path, &message),
            line,
            column,
            message,
        }
    };
    let de = toml::de::Deserializer::parse(text).map_err(|e| invalid(String::new(), e))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        invalid(path, e.into_inner())
    })
}

/// Finds where a field of the suite file is, for problems found after parsing.
struct Locator<'a> {
    text: &'a str,
    format: Format,
    name: &'a str,
}

impl Locator<'_> {
    fn error(&self, field: &str, message: &str) -> TaskFileError {
        let (line, column) = self.position(field).unwrap_or((0, 0));
        TaskFileError::Invalid {
            source_name: self.name.to_string(),
            field: Some(field.to_string()),
            line,
            column,
            message: message.to_string(),
        }
    }

    fn position(&self, field: &str) -> Option<(usize, usize)> {
        match self.format {
            Format::Json => {
                // The field itself, else the nearest enclosing one the text holds.
                let mut field = field;
                loop {
                    if let Some(found) = locate_field(self.text, field) {
                        return Some(found);
                    }
                    field = &field[..field.rfind(['.', '['])?];
                }
            }
            // TOML: the key at the top level, or the header of the n-th `[[tasks]]`/`[[models]]` table.
            Format::Toml => {
                let (top, rest) = field.split_once('[').unwrap_or((field, ""));
                let top = top.split('.').next().unwrap_or(top);
                let nth: Option<usize> = rest.split(']').next().and_then(|n| n.parse().ok());
                let mut seen = 0;
                for (i, line) in self.text.lines().enumerate() {
                    let trimmed = line.trim_start();
                    let column = line.len() - trimmed.len() + 1;
                    match nth {
                        Some(n) if trimmed.starts_with(&format!("[[{top}]]")) => {
                            if seen == n {
                                return Some((i + 1, column));
                            }
                            seen += 1;
                        }
                        None if trimmed.starts_with(top) && trimmed[top.len()..].trim_start().starts_with('=') => {
                            return Some((i + 1, column));
                        }
                        _ => {}
                    }
                }
                None
            }
        }
    }
}

/// `serde_path_to_error` over a `Value` already read, the failure placed under `prefix` in the suite file.
fn from_value<T: serde::de::DeserializeOwned>(
    value: Value,
    prefix: &str,
    locate: &Locator,
) -> Result<T, TaskFileError> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let inner = e.path().to_string();
        let (inner, message) = fold_inner_path(inner, e.into_inner().to_string());
        let field = match field_from(&inner, &message) {
            Some(f) if f.starts_with('[') => format!("{prefix}{f}"),
            Some(f) => format!("{prefix}.{f}"),
            None => prefix.to_string(),
        };
        locate.error(&field, &message)
    })
}

fn read_task(entry: Value, i: usize, suite: &TaskSource, locate: &Locator) -> Result<SuiteTask, TaskFileError> {
    let field = format!("tasks[{i}]");
    let Value::Object(object) = entry else {
        return Err(locate.error(&field, "a task is {\"path\": FILE} or a task file's object written inline"));
    };
    let (name, mut spec, source) = if object.contains_key("path") && !object.contains_key("instructions") {
        let entry: TaskPath = from_value(Value::Object(object), &field, locate)?;
        let path = suite.resolve(&entry.path);
        // The task file's own problems name the task file.
        let (spec, source) = TaskSpec::read(&path)?;
        let name = match entry.name {
            Some(name) => name,
            None => path.file_stem().map_or_else(|| format!("task-{}", i + 1), |s| s.to_string_lossy().into_owned()),
        };
        (name, spec, source)
    } else {
        let spec: TaskSpec = from_value(Value::Object(object), &field, locate)?;
        let name = spec.id.as_ref().map_or_else(|| format!("task-{}", i + 1), |id| id.as_str().to_string());
        let source = TaskSource { text: String::new(), ..suite.clone() };
        (name, spec, source)
    };
    if name.trim().is_empty() || name.chars().count() > 200 || name.chars().any(char::is_control) {
        return Err(locate.error(&field, "a task's name is 1-200 characters, without control characters"));
    }
    if spec.verify.is_empty() {
        return Err(locate.error(
            &field,
            &format!(
                "task {name:?} has no verifier: an unverified success is not a result; give it a `verify` check \
                 (docs/replay-and-verify.md)"
            ),
        ));
    }
    // The runs' ids are the evaluation's.
    spec.id = None;
    Ok(SuiteTask { name, spec, source: TaskSource { text: String::new(), ..source } })
}

fn read_model(entry: Value, i: usize, suite: &TaskSource, locate: &Locator) -> Result<SuiteModel, TaskFileError> {
    let field = format!("models[{i}]");
    let (name, spec) = match entry {
        Value::String(written) => {
            let (provider, model) = match written.split_once(':') {
                Some((provider, model)) => (provider, Some(model)),
                None => (written.as_str(), None),
            };
            let mut object = Map::new();
            object.insert("provider".into(), provider.into());
            if let Some(model) = model {
                object.insert("model".into(), model.into());
            }
            let spec: ModelSpec = from_value(Value::Object(object), &field, locate).map_err(|e| {
                locate.error(&field, &format!("{e} (write PROVIDER[:MODEL], e.g. anthropic:claude-sonnet-4-5)"))
            })?;
            (written, spec)
        }
        value @ Value::Object(_) => {
            let spec: ModelSpec = from_value(value, &field, locate)?;
            (describe(&spec, i), spec)
        }
        _ => return Err(locate.error(&field, "a model is \"PROVIDER[:MODEL]\" or a task file's `model` object")),
    };
    let spec = match spec {
        ModelSpec::Scripted(ScriptedSpec { script: ScriptSource::Path(path), params }) => {
            let script = Script::load(&suite.resolve(&path))
                .map_err(|e| locate.error(&format!("{field}.script"), &e.to_string()))?;
            ModelSpec::Scripted(ScriptedSpec { script: ScriptSource::Inline(script), params })
        }
        spec => spec,
    };
    Ok(SuiteModel { name, spec })
}

/// A model object's name in the result: `provider:model`, the provider alone, or for a script its file's stem.
fn describe(spec: &ModelSpec, i: usize) -> String {
    let value = serde_json::to_value(spec).unwrap_or(Value::Null);
    let provider = spec.provider();
    match (value.get("model").and_then(Value::as_str), value.get("script").and_then(Value::as_str)) {
        (Some(model), _) => format!("{provider}:{model}"),
        (None, Some(path)) => {
            let stem = PathBuf::from(path).file_stem().map(|s| s.to_string_lossy().into_owned());
            format!("{provider}:{}", stem.unwrap_or_else(|| (i + 1).to_string()))
        }
        (None, None) if provider == "scripted" => format!("scripted#{}", i + 1),
        (None, None) => provider.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn suite(text: &str, name: &str) -> Result<Suite, SuiteError> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/suites");
        Suite::parse(text, &TaskSource::of(&dir.join(name)))
    }

    const TASK: &str = r#"instructions = "x"
computer = { provider = "mock", scene = "login" }
verify = [{ kind = "mock_state", expect = { screen = "login" } }]"#;

    #[test]
    fn the_repeats_of_a_task_are_planned_far_apart() {
        let text = format!(
            "name = \"s\"\nrepeat = 3\nmodels = [\"anthropic:claude-sonnet-4-5\", \"openai\"]\n\n[[tasks]]\nid = \
             \"a\"\n{TASK}\n\n[[tasks]]\nid = \"b\"\n{TASK}\n"
        );
        let suite = suite(&text, "s.toml").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(suite.model_names(), ["anthropic:claude-sonnet-4-5", "openai"]);
        let plan = suite.plan("e");
        let ids: Vec<&str> = plan.iter().map(|run| run.id.as_str()).collect();
        assert_eq!(ids.len(), 12);
        // Repeat 1 of every task and model, then repeat 2, then 3.
        assert_eq!(&ids[..4], ["e.t1.m1.r1", "e.t1.m2.r1", "e.t2.m1.r1", "e.t2.m2.r1"]);
        assert_eq!(ids[4], "e.t1.m1.r2");
        assert_eq!(ids[11], "e.t2.m2.r3");
        // The model replaces the task's own; the metadata names the run.
        assert_eq!(plan[1].spec.model.as_ref().map(ModelSpec::provider), Some("openai"));
        assert_eq!(
            plan[1].spec.metadata.get("eval"),
            Some(
                &json!({"id": "e", "suite": "s", "task": "a", "model": "openai", "repeat": 1, "repeats": 3, "runs": 12})
            )
        );
    }

    #[test]
    fn problems_name_the_field_and_where_it_is() {
        let err = |text: &str, name: &str| suite(text, name).err().map(|e| e.to_string()).unwrap_or_default();
        // TOML: a wrong type, with toml's own position.
        let e = err("name = \"s\"\nrepeat = \"two\"\n", "s.toml");
        assert!(e.contains("field `repeat`") && e.contains("(line 2, column 10)"), "{e}");
        // A task without a verifier, at its table's header.
        let e = err("name = \"s\"\n\n[[tasks]]\ninstructions = \"x\"\n", "s.toml");
        assert!(
            e.contains("field `tasks[0]`: task \"task-1\" has no verifier") && e.contains("(line 3, column 1)"),
            "{e}"
        );
        // Two tasks of one name.
        let e = err(&format!("name = \"s\"\n[[tasks]]\nid = \"a\"\n{TASK}\n[[tasks]]\nid = \"a\"\n{TASK}\n"), "s.toml");
        assert!(e.contains("field `tasks[1]`: two tasks are named \"a\""), "{e}");
        // JSON: a task's own field, under its place in the suite.
        let e = err(r#"{"name": "s", "tasks": [{"instructions": "x", "limits": {"max_steps": "many"}}]}"#, "s.json");
        assert!(e.contains("field `tasks[0].limits.max_steps`") && e.contains("(line 1, column"), "{e}");
        // A model that names no provider agentd has.
        let e = err(&format!("name = \"s\"\nmodels = [\"acme:x\"]\n[[tasks]]\n{TASK}\n"), "s.toml");
        assert!(e.contains("field `models[0]`") && e.contains("PROVIDER[:MODEL]"), "{e}");
        // A model listed twice; more runs than an evaluation takes.
        let e = err(&format!("name = \"s\"\nmodels = [\"openai\", \"openai\"]\n[[tasks]]\n{TASK}\n"), "s.toml");
        assert!(e.contains("model \"openai\" is listed twice"), "{e}");
        let e = err(
            &format!("name = \"s\"\nrepeat = 100\nmodels = [\"openai\", \"gemini\"]\n[[tasks]]\n{TASK}\n"),
            "s.toml",
        );
        assert!(e.is_empty(), "200 runs are fine: {e}");
    }

    #[test]
    fn an_evaluation_id_is_a_task_id_with_room_for_the_runs_place() {
        assert!(eval_id(None).is_ok_and(|id| id.len() == 36));
        assert_eq!(eval_id(Some("nightly-2026-11-28")), Ok("nightly-2026-11-28".to_string()));
        assert!(eval_id(Some("../x")).is_err_and(|e| e.contains("evaluation id")));
        assert!(eval_id(Some(&"a".repeat(101))).is_err());
    }
}
