//! `AGENTD_<SECTION>_<KEY>` overrides (docs/configuration.md): merged into the file's TOML table before it
//! is read, values taken as TOML literals or else strings, each remembered as the variable that set it; a
//! variable naming no setting is a warning with the closest name.

use std::collections::BTreeMap;

use super::load::ConfigProblem;
use super::sections::{FromEnv, TOP_LEVEL};
use super::{Config, MODEL_KEYS};

/// `AGENTD_*` variables that are not configuration keys: the CLI's (`AGENTD_CONFIG`, `AGENTD_SOCKET`,
/// `AGENTD_URL`, `AGENTD_TOKEN`, `AGENTD_CA_FILE`), the log filter, and those the test suite and benchmarks
/// read (besides every `AGENTD_TEST_*` and `AGENTD_BENCH_*`).
const NOT_CONFIG_KEYS: &[&str] = &[
    "AGENTD_CONFIG",
    "AGENTD_SOCKET",
    "AGENTD_URL",
    "AGENTD_TOKEN",
    // The CA file the CLI trusts for `https://` daemon URLs (`cli::client`).
    "AGENTD_CA_FILE",
    "AGENTD_LOG",
    "AGENTD_CRASH_SEED",
    "AGENTD_X11VNC_ARGS",
];

/// Merges `AGENTD_<SECTION>_<KEY>` (and `AGENTD_DATA_DIR`, `AGENTD_MODELS_<NAME>_<KEY>`) into the table, and
/// returns which variable set which key (`worker.concurrency` → `AGENTD_WORKER_CONCURRENCY`). An `AGENTD_*`
/// variable that names no section is a problem, as an unknown key in the file is.
pub(super) fn apply_env(
    table: &mut toml::Table,
    env: &[(String, String)],
    problems: &mut Vec<ConfigProblem>,
    warnings: &mut Vec<String>,
) -> BTreeMap<String, String> {
    let mut from_env = BTreeMap::new();
    let mut unknown = |name: &str, message: String| {
        problems.push(ConfigProblem { field: None, variable: Some(name.to_string()), line: 0, column: 0, message })
    };
    for (name, raw) in env {
        let Some(rest) = name.strip_prefix("AGENTD_") else {
            continue;
        };
        if NOT_CONFIG_KEYS.contains(&name.as_str()) || rest.starts_with("TEST_") || rest.starts_with("BENCH_") {
            continue;
        }
        let rest = rest.to_ascii_lowercase();
        let value = env_value(raw);
        if let Some(whole) = TOP_LEVEL.iter().find(|key| key.env == FromEnv::Whole && key.name == rest) {
            table.insert(whole.name.into(), value);
            from_env.insert(whole.name.to_string(), name.clone());
            continue;
        }
        if let Some(model_rest) = rest.strip_prefix("models_") {
            // The longest key that ends the name wins (`idle_timeout_secs` before `timeout_secs`).
            let key = MODEL_KEYS.iter().filter(|k| model_rest.ends_with(&format!("_{k}"))).max_by_key(|k| k.len());
            match key {
                Some(key) => {
                    let provider = model_rest[..model_rest.len() - key.len() - 1].replace('_', "-");
                    from_env.insert(format!("models.{provider}.{key}"), name.clone());
                    let models = table.entry("models").or_insert_with(|| toml::Value::Table(toml::Table::new()));
                    if let toml::Value::Table(models) = models {
                        let entry = models.entry(provider).or_insert_with(|| toml::Value::Table(toml::Table::new()));
                        if let toml::Value::Table(entry) = entry {
                            entry.insert((*key).to_string(), value);
                        }
                    }
                }
                None => unknown(name, format!("unknown model key; expected one of {}", MODEL_KEYS.join(", "))),
            }
            continue;
        }
        let Some(section) = TOP_LEVEL
            .iter()
            .filter(|key| key.env == FromEnv::Keys)
            .map(|key| key.name)
            .find(|s| rest.starts_with(&format!("{s}_")))
        else {
            // A variable that names no section is somebody else's (a script's own `AGENTD_BIN`): noted, not
            // refused. One that names a section but no key of it is refused below, with the section's keys.
            let hint = match closest_variable(name) {
                Some(close) => format!("; did you mean {close}?"),
                None => String::new(),
            };
            warnings.push(format!("the environment variable {name} is not an agentd setting; ignored{hint}"));
            continue;
        };
        let key = rest[section.len() + 1..].to_string();
        from_env.insert(format!("{section}.{key}"), name.clone());
        let entry = table.entry(section).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if let toml::Value::Table(entry) = entry {
            entry.insert(key, value);
        }
    }
    from_env
}

/// An environment value as TOML: a literal when it parses as one (`8`, `true`, `["a"]`, `{a = "b"}`),
/// otherwise a string.
fn env_value(raw: &str) -> toml::Value {
    let looks_literal = raw.starts_with('[')
        || raw.starts_with('{')
        || raw.starts_with('"')
        || raw == "true"
        || raw == "false"
        || raw.parse::<i64>().is_ok()
        || raw.parse::<f64>().is_ok();
    if looks_literal
        && let Ok(mut parsed) = toml::from_str::<toml::Table>(&format!("v = {raw}"))
        && let Some(value) = parsed.remove("v")
    {
        return value;
    }
    toml::Value::String(raw.to_string())
}

/// The known variable most like `name` (at most a third of its letters different), for a warning.
fn closest_variable(name: &str) -> Option<String> {
    let mut known: Vec<String> = NOT_CONFIG_KEYS.iter().map(|k| (*k).to_string()).collect();
    known.push("AGENTD_DATA_DIR".into());
    if let Ok(toml::Value::Table(table)) = toml::Value::try_from(Config::default()) {
        for (section, value) in table {
            if let toml::Value::Table(keys) = value {
                for key in keys.keys() {
                    known.push(format!("AGENTD_{}_{}", section, key).to_ascii_uppercase());
                }
            }
        }
    }
    known
        .into_iter()
        .map(|k| (strsim::levenshtein(name, &k), k))
        .filter(|(distance, _)| *distance * 3 <= name.len())
        .min()
        .map(|(_, k)| k)
}
