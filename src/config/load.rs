//! Loading a configuration: where it comes from (`--config`, `$AGENTD_CONFIG`, the system file, built-in
//! defaults), reading the file's top-level keys one by one ([`super::sections`]) with the environment's
//! overrides, and every problem found reported at once with its file or variable, key and line.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use thiserror::Error;

use super::env::apply_env;
use super::paths::env_path;
use super::sections::{TOP_LEVEL, expected};
use super::validate::validate;
use super::{Config, McpAllowed, ModelConfig};
use crate::task::tools::ToolDecl;
use crate::task::verify::VerifierDecl;

/// The system-wide config file, used when `--config` and `$AGENTD_CONFIG` are not given and it exists.
pub const SYSTEM_CONFIG: &str = "/etc/agentd/agentd.toml";

/// One configuration problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    pub field: Option<String>,
    /// The environment variable the value came from (then `line` is 0: the file is not to blame).
    pub variable: Option<String>,
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// Everything wrong with a configuration, each problem on its own line.
#[derive(Debug, Error)]
pub struct ConfigError {
    pub source_name: String,
    pub problems: Vec<ConfigProblem>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self
            .problems
            .iter()
            .map(|p| match &p.variable {
                Some(variable) => crate::task::format_location(
                    &format!("environment variable {variable}"),
                    &p.field,
                    0,
                    0,
                    &p.message,
                ),
                None => crate::task::format_location(&self.source_name, &p.field, p.line, p.column, &p.message),
            })
            .collect();
        f.write_str(&lines.join("\n"))
    }
}

/// Where the configuration comes from.
#[derive(Debug, Clone)]
pub enum ConfigSource {
    File(PathBuf),
    BuiltIn,
}

impl ConfigSource {
    /// `--config PATH`, else `$AGENTD_CONFIG`, else the system file unless it does not exist, else built-in
    /// defaults. Only "not found" means there is no system file: one that cannot be looked at (permission
    /// denied on `/etc/agentd`, an I/O error) is still the file, and loading it reports why it cannot be read
    /// — a service never runs on the built-in defaults because its config was out of its reach.
    pub fn locate(explicit: Option<&Path>) -> Self {
        Self::locate_with(explicit, Path::new(SYSTEM_CONFIG))
    }

    fn locate_with(explicit: Option<&Path>, system: &Path) -> Self {
        if let Some(path) = explicit {
            return Self::File(path.to_path_buf());
        }
        if let Some(path) = env_path("AGENTD_CONFIG") {
            return Self::File(path);
        }
        match std::fs::metadata(system) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Self::BuiltIn,
            _ => Self::File(system.to_path_buf()),
        }
    }

    pub fn name(&self) -> String {
        match self {
            Self::File(path) => path.display().to_string(),
            Self::BuiltIn => "<built-in config>".into(),
        }
    }

    /// Loads and validates the configuration with the process environment's overrides; prints what it
    /// noticed but did not refuse ([`Config::warnings`]) on stderr, once per process.
    pub fn load(&self) -> Result<Config, ConfigError> {
        let config = self.load_quietly()?;
        static WARNED: std::sync::Once = std::sync::Once::new();
        WARNED.call_once(|| {
            for warning in &config.warnings {
                eprintln!("agentd: warning: {warning}");
            }
        });
        Ok(config)
    }

    /// As [`ConfigSource::load`], printing nothing.
    pub fn load_quietly(&self) -> Result<Config, ConfigError> {
        let env: Vec<(String, String)> = std::env::vars().collect();
        match self {
            Self::File(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
                    source_name: self.name(),
                    problems: vec![ConfigProblem {
                        field: None,
                        variable: None,
                        line: 0,
                        column: 0,
                        message: format!("cannot read: {e}"),
                    }],
                })?;
                parse(&text, &self.name(), &env)
            }
            Self::BuiltIn => parse("", &self.name(), &env),
        }
    }
}

/// Parses config text with environment overrides (`env` as (name, value) pairs).
pub fn parse(text: &str, source_name: &str, env: &[(String, String)]) -> Result<Config, ConfigError> {
    let error = |problems| ConfigError { source_name: source_name.to_string(), problems };
    let mut table: toml::Table = toml::from_str(text).map_err(|e| {
        let (line, column) = e.span().map_or((0, 0), |span| crate::input::line_column(text.as_bytes(), span.start));
        error(vec![ConfigProblem {
            field: None,
            variable: None,
            line,
            column,
            message: e.message().trim().to_string(),
        }])
    })?;
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let from_env = apply_env(&mut table, env, &mut problems, &mut warnings);

    let locate = |field: &str| locate_key(text, field);
    let mut config = Config::default();
    let mut section_problems = Vec::new();
    for (key, value) in table {
        match TOP_LEVEL.iter().find(|top| top.name == key) {
            Some(top) => (top.read)(value, &key, &mut section_problems, &mut config),
            None => section_problems.push((key.clone(), format!("unknown key `{key}`; expected {}", expected()))),
        }
    }
    for (field, message) in section_problems.into_iter().chain(validate(&config)) {
        // A value set by a variable is that variable's problem, not the file's.
        let variable = from_env
            .iter()
            .find(|(key, _)| field == **key || field.starts_with(&format!("{key}.")))
            .map(|(_, variable)| variable.clone());
        let (line, column) = if variable.is_some() { (0, 0) } else { locate(&field) };
        problems.push(ConfigProblem { field: Some(field), variable, line, column, message });
    }
    config.warnings = warnings;
    if problems.is_empty() { Ok(config) } else { Err(error(problems)) }
}

/// Deserializes a section key by key (each alone, the others defaulted), so every bad key is reported,
/// then as a whole.
pub(super) fn keyed<T: serde::de::DeserializeOwned>(
    value: toml::Value,
    name: &str,
    problems: &mut Vec<(String, String)>,
) -> Option<T> {
    let toml::Value::Table(table) = value else {
        return section(value, name, problems);
    };
    let before = problems.len();
    for (key, item) in &table {
        let mut single = toml::Table::new();
        single.insert(key.clone(), item.clone());
        let _: Option<T> = section(toml::Value::Table(single), name, problems);
    }
    if problems.len() > before {
        return None;
    }
    section(toml::Value::Table(table), name, problems)
}

/// `[models.NAME]` tables, each checked key by key.
pub(super) fn models(
    value: toml::Value,
    problems: &mut Vec<(String, String)>,
) -> Option<BTreeMap<String, ModelConfig>> {
    let toml::Value::Table(table) = value else {
        return section(value, "models", problems);
    };
    let mut out = BTreeMap::new();
    for (name, entry) in table {
        if let Some(model) = keyed::<ModelConfig>(entry, &format!("models.{name}"), problems) {
            out.insert(name, model);
        }
    }
    Some(out)
}

/// `[tools.NAME]` tables: a tool declaration of docs/tools.md whose name is its key.
pub(super) fn tools(
    value: toml::Value,
    problems: &mut Vec<(String, String)>,
) -> Option<(BTreeMap<String, ToolDecl>, McpAllowed)> {
    let toml::Value::Table(mut table) = value else {
        return section::<BTreeMap<String, ToolDecl>>(value, "tools", problems).map(|t| (t, McpAllowed::default()));
    };
    // The two lists of what tasks submitted over the API may start or reach as MCP servers; every other key
    // is a tool.
    let mut allowed = McpAllowed::default();
    for (key, list) in [("allowed_mcp_commands", &mut allowed.commands), ("allowed_mcp_urls", &mut allowed.urls)] {
        if let Some(value) = table.remove(key)
            && let Some(read) = section::<Vec<String>>(value, &format!("tools.{key}"), problems)
        {
            *list = read;
        }
    }
    let mut out = BTreeMap::new();
    for (name, entry) in table {
        let field = format!("tools.{name}");
        let toml::Value::Table(mut entry) = entry else {
            problems.push((field, "must be a table of a tool's settings".into()));
            continue;
        };
        if entry.contains_key("name") {
            problems.push((format!("{field}.name"), "the tool's name is its key in [tools]; remove `name`".into()));
            continue;
        }
        entry.insert("name".into(), toml::Value::String(name.clone()));
        if let Some(tool) = section::<ToolDecl>(toml::Value::Table(entry), &field, problems) {
            out.insert(name, tool);
        }
    }
    Some((out, allowed))
}

/// `[verifiers.NAME]` tables (docs/replay-and-verify.md); `command` names a program.
pub(super) fn verifiers(
    value: toml::Value,
    problems: &mut Vec<(String, String)>,
) -> Option<BTreeMap<String, VerifierDecl>> {
    let toml::Value::Table(table) = value else {
        return section(value, "verifiers", problems);
    };
    let mut out = BTreeMap::new();
    for (name, entry) in table {
        let field = format!("verifiers.{name}");
        if let Some(decl) = section::<VerifierDecl>(entry, &field, problems) {
            if decl.command.first().is_none_or(String::is_empty) {
                problems.push((format!("{field}.command"), "name the program to run (a non-empty list)".into()));
                continue;
            }
            out.insert(name, decl);
        }
    }
    Some(out)
}

/// Deserializes one value, recording (field path, message) on failure.
pub(super) fn section<T: serde::de::DeserializeOwned>(
    value: toml::Value,
    key: &str,
    problems: &mut Vec<(String, String)>,
) -> Option<T> {
    match serde_path_to_error::deserialize(value) {
        Ok(v) => Some(v),
        Err(e) => {
            let path = e.path().to_string();
            // toml appends "\nin `key`" lines; the path already says where.
            let message = e.into_inner().to_string().lines().next().unwrap_or_default().trim().to_string();
            // Hand-read values (a tool's `kind`) name their inner field in the message: move it to the path.
            let (path, message) = crate::input::fold_inner_path(path, message);
            let mut field = if path == "." || path.is_empty() { key.to_string() } else { format!("{key}.{path}") };
            if let Some(name) = message.strip_prefix("missing field `").and_then(|m| m.split('`').next()) {
                field = format!("{field}.{name}");
            }
            problems.push((field, message));
            None
        }
    }
}

/// Finds the line of a dotted key (`worker.concurrency`, `models.openai.base_url`) in TOML text: the key's
/// line inside its `[section]`, else the section header, else 0 (the value came from the environment).
fn locate_key(text: &str, field: &str) -> (usize, usize) {
    let parts: Vec<&str> = field.split('.').map(|p| p.split('[').next().unwrap_or(p)).collect();
    let mut best = (0, 0);
    let mut current_section = String::new();
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if let Some(header) = trimmed.strip_prefix('[').and_then(|h| h.split(']').next()) {
            current_section = header.trim().trim_matches('"').to_string();
            if field.starts_with(&current_section) && best.0 == 0 {
                best = (n + 1, 1);
            }
            continue;
        }
        let Some((key, _)) = trimmed.split_once('=') else {
            continue;
        };
        let key = key.trim().trim_matches('"');
        let full = if current_section.is_empty() { key.to_string() } else { format!("{current_section}.{key}") };
        let wanted = parts.join(".");
        if full == wanted || wanted.starts_with(&format!("{full}.")) {
            let column = line.find(key).map_or(1, |c| c + 1);
            return (n + 1, column);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{LogFormat, OtelConfig, QueueBackend};

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn empty_config_is_all_defaults() {
        let config = parse("", "x.toml", &[]).unwrap();
        assert_eq!(config.worker.concurrency, 2);
        assert_eq!(config.queue.backend, QueueBackend::Sqlite);
    }

    #[test]
    fn every_problem_is_reported_with_its_line() {
        let text =
            "data_dir = \"/tmp/a\"\n[worker]\nconcurrency = 0\ncolour = 1\n[queue]\nbackend = \"postgres\"\n[bogus]\n";
        let err = parse(text, "x.toml", &[]).unwrap_err();
        let fields: Vec<_> = err.problems.iter().filter_map(|p| p.field.clone()).collect();
        assert!(fields.contains(&"worker.colour".to_string()), "{err}");
        assert!(fields.contains(&"bogus".to_string()), "{err}");
        assert!(fields.contains(&"queue.url".to_string()), "{err}");
        let colour = err.problems.iter().find(|p| p.field.as_deref() == Some("worker.colour")).unwrap();
        assert_eq!(colour.line, 4, "{err}");
        assert!(err.to_string().contains("x.toml: field `worker.colour`"), "{err}");
    }

    #[test]
    fn bad_tool_declarations_name_their_field() {
        let text = "[tools.lookup]\ndescription = \"d\"\nparameters = { type = \"object\" }\nkind = \"http\"\n\
                    url = \"ftp://x\"\n[tools.run_it]\ndescription = \"d\"\nparameters = { type = \"object\" }\n\
                    kind = \"command\"\ncommand = []\n[tools.fine]\ndescription = \"d\"\n\
                    parameters = { type = \"object\" }\nkind = \"http\"\nurl = \"https://x.example/a\"\n";
        let err = parse(text, "x.toml", &[]).unwrap_err();
        let fields: Vec<_> = err.problems.iter().filter_map(|p| p.field.clone()).collect();
        assert_eq!(fields, ["tools.lookup.url", "tools.run_it.command"], "{err}");
        assert!(err.to_string().contains("not an http or https URL"), "{err}");
        assert!(!err.to_string().contains("field `url`"), "{err}");
    }

    #[test]
    fn syntax_errors_have_a_position() {
        let err = parse("[worker\nconcurrency = 1", "x.toml", &[]).unwrap_err();
        assert_eq!(err.problems[0].line, 1, "{err}");
    }

    #[test]
    fn environment_overrides_file_values() {
        let text = "[worker]\nconcurrency = 1\n";
        let config = parse(
            text,
            "x.toml",
            &env(&[
                ("AGENTD_WORKER_CONCURRENCY", "8"),
                ("AGENTD_DATA_DIR", "/srv/agentd"),
                ("AGENTD_WORKER_LABELS", "{os = \"ubuntu\"}"),
                ("AGENTD_MODELS_OPENAI_COMPATIBLE_BASE_URL", "http://127.0.0.1:8000/v1"),
                ("AGENTD_SOCKET", "/ignored"),
            ]),
        )
        .unwrap();
        assert_eq!(config.worker.concurrency, 8);
        assert_eq!(config.data_dir, PathBuf::from("/srv/agentd"));
        assert_eq!(config.worker.labels.get("os").map(String::as_str), Some("ubuntu"));
        assert_eq!(config.models["openai-compatible"].base_url.as_deref(), Some("http://127.0.0.1:8000/v1"));
    }

    #[test]
    fn log_otel_and_tls_keys_parse_and_are_checked() {
        let config = parse(
            "[otel]\nendpoint = \"http://127.0.0.1:4318/\"\n",
            "x.toml",
            &env(&[("AGENTD_LOG_FORMAT", "json"), ("AGENTD_OTEL_SERVICE_NAME", "agentd-eu")]),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.log.format, LogFormat::Json);
        assert_eq!(config.otel.service_name, "agentd-eu");
        assert_eq!(config.otel.traces_url().as_deref(), Some("http://127.0.0.1:4318/v1/traces"));
        let full = OtelConfig { endpoint: Some("https://c.example/v1/traces".into()), ..OtelConfig::default() };
        assert_eq!(full.traces_url().as_deref(), Some("https://c.example/v1/traces"));
        assert_eq!(Config::default().otel.traces_url(), None);

        let err = parse("[log]\nformat = \"xml\"\n[otel]\nendpoint = \"127.0.0.1:4318\"\n", "x.toml", &[]).unwrap_err();
        let fields: Vec<_> = err.problems.iter().filter_map(|p| p.field.clone()).collect();
        assert_eq!(fields, ["log.format", "otel.endpoint"], "{err}");
        assert_eq!(err.problems[0].line, 2, "{err}");

        let listen = "[api]\nlisten = \"127.0.0.1:8787\"\ntoken_file = \"/t\"\n";
        for (tls, field) in [("tls_cert = \"/c\"\n", "api.tls_key"), ("tls_key = \"/k\"\n", "api.tls_cert")] {
            let err = parse(&format!("{listen}{tls}"), "x.toml", &[]).unwrap_err();
            assert_eq!(err.problems.len(), 1, "{err}");
            assert_eq!(err.problems[0].field.as_deref(), Some(field), "{err}");
        }
        let err = parse("[api]\ntls_cert = \"/c\"\ntls_key = \"/k\"\n", "x.toml", &[]).unwrap_err();
        assert!(err.to_string().contains("set api.listen too"), "{err}");
        parse(&format!("{listen}tls_cert = \"/c\"\ntls_key = \"/k\"\n"), "x.toml", &[])
            .unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn bad_environment_values_are_named() {
        let err = parse("", "x.toml", &env(&[("AGENTD_WORKER_CONCURRENCY", "many")])).unwrap_err();
        assert_eq!(err.problems[0].field.as_deref(), Some("worker.concurrency"), "{err}");
    }

    #[test]
    fn a_bad_environment_value_blames_its_variable_not_the_file() {
        let text = "data_dir = \"/tmp/a\"\n[worker]\nconcurrency = 4\n";
        for (value, fragment) in [("abc", "invalid type"), ("0", "must be between 1 and 256")] {
            let err = parse(text, "x.toml", &env(&[("AGENTD_WORKER_CONCURRENCY", value)])).unwrap_err();
            let message = err.to_string();
            assert_eq!(err.problems.len(), 1, "{message}");
            assert!(
                message.starts_with("environment variable AGENTD_WORKER_CONCURRENCY: field `worker.concurrency`: "),
                "{message}"
            );
            assert!(message.contains(fragment), "{message}");
            assert!(!message.contains("x.toml") && !message.contains("line"), "{message}");
        }
        // A file value is still the file's problem, with its line.
        let err = parse("[worker]\nconcurrency = 0\n", "x.toml", &env(&[("AGENTD_DATA_DIR", "/srv")])).unwrap_err();
        assert!(err.to_string().starts_with("x.toml: field `worker.concurrency`"), "{err}");
        assert_eq!(err.problems[0].line, 2, "{err}");
    }

    #[test]
    fn a_variable_naming_a_section_but_no_key_of_it_is_a_problem() {
        for name in ["AGENTD_WORKER_CONCURENCY", "AGENTD_MODELS_X_Y"] {
            let err = parse("", "x.toml", &env(&[(name, "3")])).map(|_| ()).unwrap_err();
            assert_eq!(err.problems.len(), 1, "{name}: {err}");
            assert_eq!(err.problems[0].variable.as_deref(), Some(name), "{err}");
            assert!(err.to_string().starts_with(&format!("environment variable {name}: ")), "{err}");
        }
    }

    #[test]
    fn a_variable_naming_no_setting_is_a_warning_with_the_closest_name() {
        let config =
            parse("", "x.toml", &env(&[("AGENTD_BIN", "/usr/bin/agentd"), ("AGENTD_WORKERS_CONCURRENCY", "3")]))
                .unwrap_or_else(|e| panic!("refused: {e}"));
        assert_eq!(config.warnings.len(), 2, "{:?}", config.warnings);
        let workers = config.warnings.iter().find(|w| w.contains("AGENTD_WORKERS_CONCURRENCY")).expect("warned");
        assert!(workers.ends_with("did you mean AGENTD_WORKER_CONCURRENCY?"), "{workers}");
        let bin = config.warnings.iter().find(|w| w.contains("AGENTD_BIN")).expect("warned");
        assert!(bin.contains("is not an agentd setting; ignored"), "{bin}");
        assert_eq!(config.worker.concurrency, Config::default().worker.concurrency);
    }

    #[test]
    fn unknown_environment_variables_of_others_are_not_problems() {
        // Variables that are not configuration keys: the CLI's, the log filter, the test suite's.
        let others = [
            ("AGENTD_CONFIG", "/x.toml"),
            ("AGENTD_SOCKET", "/x.sock"),
            ("AGENTD_URL", "http://127.0.0.1:1"),
            ("AGENTD_TOKEN", "t"),
            ("AGENTD_CA_FILE", "/ca.pem"),
            ("AGENTD_LOG", "info"),
            ("AGENTD_TEST_POSTGRES_URL", "postgres://x"),
            ("AGENTD_BENCH_POSTGRES_URL", "postgres://x"),
            ("AGENTD_CRASH_SEED", "1"),
            ("AGENTD_X11VNC_ARGS", "-defer 0"),
        ];
        parse("", "x.toml", &env(&others)).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn a_system_config_that_cannot_be_looked_at_is_not_taken_for_a_missing_one() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(ConfigSource::locate_with(None, &dir.path().join("agentd.toml")), ConfigSource::BuiltIn));
        // Not "not found": a path through a file (ENOTDIR); under /etc, permission denied is the usual one
        // (tested as an unprivileged user in tests/it/cli.rs).
        std::fs::write(dir.path().join("file"), "").unwrap();
        let behind_a_file = dir.path().join("file/agentd.toml");
        assert!(matches!(ConfigSource::locate_with(None, &behind_a_file), ConfigSource::File(p) if p == behind_a_file));
        let err = ConfigSource::File(behind_a_file).load().unwrap_err();
        assert!(err.to_string().contains("cannot read"), "{err}");
    }

    #[test]
    fn approval_rules_are_read_and_a_bad_one_is_named() {
        let config = parse("[[approval]]\nkeys = \"ctrl+alt+delete\"\n[[approval]]\ntool = \"mail\"\n", "t", &[])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.approval.len(), 2);
        let err = parse("[[approval]]\naction = \"explode\"\n", "t", &[]).unwrap_err().to_string();
        assert!(err.contains("approval") && err.contains("explode"), "{err}");
    }

    #[test]
    fn the_example_config_parses() {
        let text = include_str!("../../config/agentd.example.toml");
        let config = parse(text, "agentd.example.toml", &[]).unwrap_or_else(|e| panic!("{e}"));
        assert!(config.models.contains_key("anthropic"));
    }

    #[test]
    fn the_example_documents_every_key() {
        let text = include_str!("../../config/agentd.example.toml");
        let documented = |key: &str| {
            text.lines().any(|line| {
                let line = line.trim_start_matches('#').trim();
                line.starts_with(&format!("{key} ="))
                    || line.starts_with(&format!("[{key}"))
                    || line.starts_with(&format!("[[{key}]]"))
            })
        };
        let mut config = Config::default();
        config.models.insert("anthropic".into(), ModelConfig::default());
        let value = serde_json::to_value(&config).unwrap();
        let mut missing = Vec::new();
        for (section, inner) in value.as_object().unwrap() {
            if !documented(section) {
                missing.push(section.clone());
            }
            let keys: Vec<String> = match section.as_str() {
                "models" => inner["anthropic"].as_object().unwrap().keys().cloned().collect(),
                _ => inner.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default(),
            };
            missing.extend(keys.into_iter().filter(|k| !documented(k)).map(|k| format!("{section}.{k}")));
        }
        assert!(missing.is_empty(), "undocumented keys: {missing:?}");
    }
}
