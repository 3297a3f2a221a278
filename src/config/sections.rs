//! The top-level keys of the configuration file, listed once ([`TOP_LEVEL`]): for each, how it is read into
//! [`Config`], whether `AGENTD_*` variables set it, and its JSON Schema. The reader ([`super::parse`]), the
//! environment overrides and `agentd schema config` ([`super::schema`]) all go through this table, and a test
//! checks it has an entry for every field of [`Config`].

use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Value, json};

use super::load::{keyed, models, section, tools, verifiers};
use super::{
    ApiConfig, ArtifactsConfig, BrowserSettings, Config, ConsoleConfig, DesktopConfig, LogConfig, MODEL_PROVIDERS,
    ModelConfig, OtelConfig, OutboundConfig, QueueConfig, RetentionConfig, SettlePolicy, WorkerConfig,
};
use crate::task::TaskDefaults;
use crate::task::approval::ApprovalRule;
use crate::task::guard::GuardSpec;
use crate::task::schema::declared_tools;
use crate::task::verify::VerifierDecl;

/// Problems found while reading: (field path, message).
pub(super) type Problems = Vec<(String, String)>;

/// How `AGENTD_*` variables reach a top-level key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FromEnv {
    /// A plain value, set whole: `AGENTD_DATA_DIR`.
    Whole,
    /// A table of fixed keys, each set by `AGENTD_<SECTION>_<KEY>`.
    Keys,
    /// `[models.NAME]`: `AGENTD_MODELS_<NAME>_<KEY>`, one of `MODEL_KEYS` (`models.rs`).
    ModelKeys,
    /// No variable: tables of named entries (`[tools.NAME]`) and arrays of tables (`[[desktops]]`).
    Never,
}

/// One top-level key of the file.
pub(super) struct TopLevelKey {
    pub name: &'static str,
    pub env: FromEnv,
    /// Reads the key's value (named by the second argument) into the config, adding what is wrong to the
    /// problems; a key with problems leaves the config's default in place.
    pub read: fn(toml::Value, &str, &mut Problems, &mut Config),
    /// The key's schema in `agentd schema config`.
    pub schema: fn(&mut SchemaGenerator) -> Value,
}

/// A section read key by key ([`keyed`]) into a field of [`Config`] of the same name, whose schema is its
/// type's.
macro_rules! keyed_section {
    ($field:ident: $type:ty) => {
        TopLevelKey {
            name: stringify!($field),
            env: FromEnv::Keys,
            read: |value, name, problems, config| set(keyed::<$type>(value, name, problems), &mut config.$field),
            schema: |generator| <$type>::json_schema(generator).to_value(),
        }
    };
}

/// Every top-level key, in the order the message about an unknown one lists them.
pub(super) const TOP_LEVEL: &[TopLevelKey] = &[
    TopLevelKey {
        name: "data_dir",
        env: FromEnv::Whole,
        read: |value, name, problems, config| set(section(value, name, problems), &mut config.data_dir),
        schema: |_| json!({"description": "Where the queue database, artifacts, spool and mock desktops live.", "type": "string"}),
    },
    keyed_section!(api: ApiConfig),
    keyed_section!(queue: QueueConfig),
    keyed_section!(worker: WorkerConfig),
    keyed_section!(artifacts: ArtifactsConfig),
    TopLevelKey {
        name: "models",
        env: FromEnv::ModelKeys,
        read: |value, _, problems, config| set(models(value, problems), &mut config.models),
        schema: |generator| {
            json!({
                "description": "How to reach each model provider, by its name.",
                "type": "object",
                "propertyNames": {"enum": MODEL_PROVIDERS},
                "additionalProperties": generator.subschema_for::<ModelConfig>().to_value()
            })
        },
    },
    keyed_section!(defaults: TaskDefaults),
    keyed_section!(settle: SettlePolicy),
    keyed_section!(guard: GuardSpec),
    TopLevelKey {
        name: "tools",
        env: FromEnv::Never,
        read: |value, _, problems, config| {
            if let Some((tools, allowed)) = tools(value, problems) {
                config.tools = tools;
                config.mcp_allowed = allowed;
            }
        },
        schema: |generator| {
            let list = |what: &str| json!({"description": what, "type": "array", "items": {"type": "string"}});
            json!({
                "description": "Tools tasks name with {\"use\": \"NAME\"}; the key is the tool's name. Two keys are lists instead: what MCP servers tasks submitted over the API may use.",
                "type": "object",
                "properties": {
                    "allowed_mcp_commands": list("Programs an API task's {\"kind\": \"mcp\"} tool may start (its command's first element, exactly)."),
                    "allowed_mcp_urls": list("URLs an API task's {\"kind\": \"mcp\"} tool may connect to: exactly, or under an entry ending in *."),
                },
                "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_-]{0,63}$"},
                "additionalProperties": {"oneOf": declared_tools(generator, &["http", "remote", "command"], true)}
            })
        },
    },
    TopLevelKey {
        name: "verifiers",
        env: FromEnv::Never,
        read: |value, _, problems, config| set(verifiers(value, problems), &mut config.verifiers),
        schema: |generator| {
            json!({
                "description": "Programs a task's {\"kind\": \"command\", \"use\": \"NAME\"} check runs.",
                "type": "object",
                "additionalProperties": generator.subschema_for::<VerifierDecl>().to_value()
            })
        },
    },
    keyed_section!(log: LogConfig),
    keyed_section!(otel: OtelConfig),
    keyed_section!(retention: RetentionConfig),
    keyed_section!(outbound: OutboundConfig),
    keyed_section!(browser: BrowserSettings),
    keyed_section!(console: ConsoleConfig),
    TopLevelKey {
        name: "approval",
        env: FromEnv::Never,
        read: |value, name, problems, config| set(section(value, name, problems), &mut config.approval),
        schema: |generator| json!({"type": "array", "items": generator.subschema_for::<ApprovalRule>().to_value()}),
    },
    TopLevelKey {
        name: "desktops",
        env: FromEnv::Never,
        read: |value, name, problems, config| set(section(value, name, problems), &mut config.desktops),
        schema: |generator| json!({"type": "array", "items": generator.subschema_for::<DesktopConfig>().to_value()}),
    },
];

/// What the top level of the file may hold, for the message about a key it may not.
pub(super) fn expected() -> String {
    let names = |whole: bool| -> Vec<&str> {
        TOP_LEVEL.iter().filter(|key| (key.env == FromEnv::Whole) == whole).map(|key| key.name).collect()
    };
    format!("{} or one of the sections {}", names(true).join(", "), names(false).join(", "))
}

fn set<T>(value: Option<T>, field: &mut T) {
    if let Some(value) = value {
        *field = value;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_of_the_config_is_a_top_level_key() {
        let value = serde_json::to_value(Config::default()).unwrap_or_default();
        let mut fields: Vec<&str> =
            value.as_object().map(|o| o.keys().map(String::as_str).collect()).unwrap_or_default();
        let mut keys: Vec<&str> = TOP_LEVEL.iter().map(|key| key.name).collect();
        fields.sort_unstable();
        keys.sort_unstable();
        assert_eq!(keys, fields);
    }
}
