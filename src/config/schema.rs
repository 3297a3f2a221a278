//! The configuration file's JSON Schema (`agentd schema config`, docs/configuration.md), derived from the
//! types its sections are read into.
//!
//! Its root lists the file's top-level keys from the one table the reader uses (`sections.rs`: every
//! section optional, each filled from its defaults), and each key's schema is the one written there, mostly its
//! type's. What only `agentd config check` can find (files that exist, addresses that answer, bounds across
//! sections) is not in it.

use schemars::generate::SchemaSettings;
use serde_json::{Value, json};

use super::sections::TOP_LEVEL;

/// The schema `agentd schema config` prints: draft 2020-12, for the TOML file as a JSON document.
pub fn config_schema() -> Value {
    let mut generator = SchemaSettings::draft2020_12().into_generator();
    let properties: serde_json::Map<String, Value> =
        TOP_LEVEL.iter().map(|key| (key.name.to_string(), (key.schema)(&mut generator))).collect();
    let definitions: serde_json::Map<String, Value> = generator.take_definitions(true);
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "agentd configuration (agentd.toml)",
        "description": "Every section is optional; what a section leaves out takes its default (config/agentd.example.toml lists them). See docs/configuration.md.",
        "type": "object",
        "properties": properties,
        "additionalProperties": false,
        "$defs": definitions
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::config_schema;

    fn validator() -> jsonschema::Validator {
        jsonschema::validator_for(&config_schema()).expect("the config schema is a valid JSON Schema")
    }

    /// A TOML text as the JSON document the schema describes, and whether agentd reads it.
    fn read(text: &str) -> (Value, bool) {
        let value: Value = toml::from_str(text).expect("TOML");
        (value, super::super::parse(text, "agentd.toml", &[]).is_ok())
    }

    fn problems(validator: &jsonschema::Validator, instance: &Value) -> Vec<String> {
        validator.iter_errors(instance).map(|e| format!("{}: {e}", e.instance_path())).collect()
    }

    #[test]
    fn the_shipped_configuration_is_valid() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/config/agentd.example.toml");
        let text = std::fs::read_to_string(path).expect("config/agentd.example.toml");
        let (value, read) = read(&text);
        assert!(read, "agentd reads {path}");
        assert_eq!(problems(&validator(), &value), Vec::<String>::new());
        // The sections it shows commented out, uncommented: `# [tools.NAME]` … up to the next blank line.
        let mut uncommented = String::new();
        let mut inside = false;
        for line in text.lines() {
            let bare = line.strip_prefix("# ").unwrap_or("");
            if bare.starts_with("[tools.")
                || bare.starts_with("[verifiers.")
                || bare.starts_with("[[approval]]")
                || bare.starts_with("[[desktops]]")
            {
                inside = true;
            }
            if line.trim().is_empty() {
                inside = false;
            }
            if inside {
                uncommented.push_str(bare);
                uncommented.push('\n');
            }
        }
        assert!(uncommented.contains("[tools."), "{uncommented}");
        let value: Value = toml::from_str(&uncommented).unwrap_or_else(|e| panic!("{e}\n{uncommented}"));
        assert_eq!(problems(&validator(), &value), Vec::<String>::new(), "{uncommented}");
    }

    #[test]
    fn every_section_and_kind_is_valid() {
        let text = r#"
data_dir = "/var/lib/agentd"
[api]
socket = "/run/agentd/agentd.sock"
allowed_paths = ["/srv/tasks"]
max_connections = 64
[queue]
backend = "postgres"
url = "postgres://agentd@db/agentd"
listen = false
[worker]
concurrency = 4
labels = { os = "ubuntu-24.04" }
allowed_env = ["VNC_PASSWORD"]
[artifacts]
backend = "s3"
bucket = "b"
force_path_style = true
[models.anthropic]
api_key_env = "ANTHROPIC_API_KEY"
max_retries = 3
prices = { "claude-sonnet-4-5" = { input = 3.0, output = 15.0 } }
[models.openai-compatible]
base_url = "http://127.0.0.1:8000/v1"
coordinate_space = "smart-resize"
action_format = "ui-tars"
[defaults]
computer = { provider = "mock", scene = "login" }
model = { provider = "scripted", script = "s.json" }
limits = { max_steps = 20 }
[settle]
quiet_ms = 50
[guard]
no_change_steps = 0
[log]
format = "json"
[otel]
endpoint = "http://collector:4318"
[retention]
finished_days = 7
[outbound]
allow = ["10.0.0.0/8"]
[tools.notify]
kind = "command"
description = "Notify"
parameters = { type = "object" }
command = ["/usr/local/bin/notify"]
env = ["ONCALL_TOKEN"]
[tools.lookup]
kind = "http"
description = "Look up"
parameters = { type = "object" }
url = "https://orders.example/lookup"
[verifiers.saved]
command = ["/usr/local/bin/check"]
[[approval]]
keys = "ctrl+alt+delete"
[[desktops]]
name = "box-1"
computer = { provider = "vnc", address = "10.0.0.7:5900" }
labels = ["gpu"]
reset = ["/usr/local/bin/reset", "box-1"]
setup = { guest = "echo hi" }
"#;
        let (value, read) = read(text);
        assert!(read, "agentd reads it: {:?}", super::super::parse(text, "agentd.toml", &[]).err());
        assert_eq!(problems(&validator(), &value), Vec::<String>::new());
    }

    #[test]
    fn what_agentd_refuses_for_its_shape_the_schema_refuses() {
        let validator = validator();
        for text in [
            "[apii]\nsocket = \"/x\"",          // an unknown section
            "[api]\nsockett = \"/x\"",          // an unknown key
            "[worker]\nconcurrency = \"four\"", // a wrong type
            "[queue]\nbackend = \"mysql\"",     // an unknown backend
            "[models.skynet]\nmodel = \"x\"",   // an unknown provider
            "[models.openai]\ntemperature = 1", // a key the model section has not
            "[tools.x]\nkind = \"ftp\"\ndescription = \"d\"\nparameters = { type = \"object\" }",
            "[tools.x]\nname = \"x\"\nkind = \"remote\"\ndescription = \"d\"\nparameters = { type = \"object\" }",
            "[[approval]]\ntool = \"a\"\naction = \"type\"", // two matchers
            "[guard]\nidle_turns = 20000",                   // over the bound
            "[defaults]\ncomputer = { provider = \"amiga\" }",
            "[[desktops]]\nname = \"two words\"\ncomputer = { provider = \"mock\" }",
        ] {
            let (value, read) = read(text);
            assert!(!read, "agentd refuses {text:?}");
            assert!(!validator.is_valid(&value), "the schema refuses {text:?} too: {}", json!(value));
        }
    }
}
