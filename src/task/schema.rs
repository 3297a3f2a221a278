//! The task file's JSON Schema (`agentd schema task`, docs/cli.md), derived from the types it is parsed into.
//!
//! The plain serde types derive `schemars::JsonSchema` where they are declared, so their fields, defaults and
//! `deny_unknown_fields` are the schema's. The types here deserialize by hand — validated newtypes, and the
//! objects tagged by `provider`, `kind` or a lone matcher, which are parsed field by field to keep error paths —
//! so their schemas are written beside what their parsers accept: the same tags, fields and bounds. What a
//! schema cannot say (a file that exists, an inline scene's own format, a tool's schema being a valid JSON
//! Schema, unique tool names) the parser still checks, naming the field.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::{Value, json};

use super::approval::{ACTION_TYPES, ApprovalRule};
use super::desktop::{DesktopName, DesktopSpec};
use super::replay::{self, ParamName};
use super::script::Script;
use super::secrets::SecretName;
use super::tools::{self, CommandTool, HttpTool, Parameters, RESERVED_TOOL_NAMES, RemoteTool, TaskTool, ToolName};
use super::verify::{self, Check, GuestCheck, HttpCheck, MAX_GUEST_COMMAND_BYTES, Pointer, ScreenCheck, Status};
use super::{
    Bounded, BrowserSpec, CompatibleSpec, ComputerServerSpec, ComputerSpec, Cost, GeminiSpec, Instructions, LabelKey,
    Limit, LocalSpec, MockSpec, ModelSpec, PortableSpec, Positive, SceneSource, ScreenDimension, ScriptSource,
    ScriptedSpec, TaskId, TaskSpec, Temperature, VendorModelSpec, VncSpec,
};

/// The schema `agentd schema task` prints: draft 2020-12, subschemas under `$defs`.
pub fn task_schema() -> Value {
    let schema = schemars::generate::SchemaSettings::draft2020_12().into_generator().into_root_schema_for::<TaskSpec>();
    schema.to_value()
}

/// A schema impl for a type whose schema is one JSON literal.
macro_rules! literal_schema {
    ($ty:ty, $name:literal, $schema:tt) => {
        impl JsonSchema for $ty {
            fn schema_name() -> Cow<'static, str> {
                $name.into()
            }
            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                json_schema!($schema)
            }
        }
    };
}

literal_schema!(TaskId, "TaskId", {
    "description": "A client-chosen task id: 1-128 characters of A-Z a-z 0-9 . _ -, not starting with `.`.",
    "type": "string",
    "pattern": "^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$"
});
literal_schema!(Instructions, "Instructions", {
    "description": "What the model is asked to do: not blank, at most 100,000 characters.",
    "type": "string",
    "minLength": 1,
    "maxLength": 100_000,
    "pattern": "\\S"
});
literal_schema!(LabelKey, "LabelKey", {
    "description": "A label key: 1-63 characters of A-Z a-z 0-9 . _ - /.",
    "type": "string",
    "pattern": "^[A-Za-z0-9._/-]{1,63}$"
});
literal_schema!(DesktopName, "DesktopName", {
    "description": "A desktop's name or label: 1-63 characters of A-Z a-z 0-9 . _ -.",
    "type": "string",
    "pattern": "^[A-Za-z0-9._-]{1,63}$"
});
literal_schema!(SecretName, "SecretName", {
    "description": "A secret's name (its placeholder is `<secret:NAME>`): 1-64 characters of A-Z a-z 0-9 _ -.",
    "type": "string",
    "pattern": "^[A-Za-z0-9_-]{1,64}$"
});
literal_schema!(ParamName, "ParamName", {
    "description": "A recorded typed text a replay parameter replaces (not empty).",
    "type": "string",
    "minLength": 1
});
literal_schema!(SceneSource, "SceneSource", {
    "description": "A built-in scene (`blank`, `login`, `form`), a path to a scene file, or the scene itself (providers/mock/SCENES.md).",
    "anyOf": [{"type": "string", "minLength": 1}, {"type": "object"}]
});
literal_schema!(Temperature, "Temperature", {"description": "A sampling temperature.", "type": "number", "minimum": 0, "maximum": 2});
literal_schema!(Cost, "Cost", {"description": "US dollars.", "type": "number", "minimum": 0});
literal_schema!(replay::Score, "ReplayScore", {"type": "number", "minimum": 0, "maximum": 1});
literal_schema!(verify::Score, "Score", {"type": "number", "minimum": 0, "maximum": 1});
literal_schema!(Status, "HttpStatus", {"type": "integer", "minimum": 100, "maximum": 599});
literal_schema!(Pointer, "JsonPointer", {
    "description": "A JSON pointer (RFC 6901): empty (the whole document) or starting with `/`.",
    "type": "string",
    "pattern": "^(/.*)?$"
});
literal_schema!(tools::JsonSchema, "JsonSchema", {
    "description": "A JSON Schema (an object, or a boolean schema).",
    "type": ["object", "boolean"]
});
literal_schema!(Parameters, "Parameters", {
    "description": "A JSON Schema of the tool's arguments, with \"type\": \"object\".",
    "type": "object",
    "required": ["type"],
    "properties": {"type": {"const": "object"}}
});

impl JsonSchema for ToolName {
    fn schema_name() -> Cow<'static, str> {
        "ToolName".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A tool's name: 1-64 characters of A-Z a-z 0-9 _ -, starting with a letter or _; not one of agentd's own.",
            "type": "string",
            "pattern": "^[A-Za-z_][A-Za-z0-9_-]{0,63}$",
            "not": {"enum": RESERVED_TOOL_NAMES}
        })
    }
}

impl<const MIN: u32, const MAX: u32> JsonSchema for ScreenDimension<MIN, MAX> {
    fn schema_name() -> Cow<'static, str> {
        format!("Pixels_{MIN}_to_{MAX}").into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "integer", "minimum": MIN, "maximum": MAX})
    }
}

/// `T`'s schema with `bounds` (`minimum`, `maximum`) set.
fn bounded<T: JsonSchema>(generator: &mut SchemaGenerator, bounds: &[(&str, u64)]) -> Schema {
    let mut schema = T::json_schema(generator);
    for (key, value) in bounds {
        schema.insert((*key).to_string(), json!(value));
    }
    schema
}

impl<T: JsonSchema> JsonSchema for Positive<T> {
    fn schema_name() -> Cow<'static, str> {
        format!("Positive_{}", T::schema_name()).into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        bounded::<T>(generator, &[("minimum", 1)])
    }
}

impl<T: JsonSchema, const MAX: u64> JsonSchema for Limit<T, MAX> {
    fn schema_name() -> Cow<'static, str> {
        format!("Limit_{}_to_{MAX}", T::schema_name()).into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        bounded::<T>(generator, &[("minimum", 1), ("maximum", MAX)])
    }
}

impl<T: JsonSchema, const MIN: u64, const MAX: u64> JsonSchema for Bounded<T, MIN, MAX> {
    fn schema_name() -> Cow<'static, str> {
        format!("Bounded_{}_{MIN}_to_{MAX}", T::schema_name()).into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        bounded::<T>(generator, &[("minimum", MIN), ("maximum", MAX)])
    }
}

/// `T`'s object schema with the tag `tag` = `value` added (required), as the hand-written parsers of tagged
/// objects read them: the tag, then `T`'s own fields and nothing else.
fn tagged<T: JsonSchema>(generator: &mut SchemaGenerator, tag: &str, value: &str) -> Schema {
    let mut schema = T::json_schema(generator);
    let object = schema.ensure_object();
    if let Some(properties) = object.entry("properties").or_insert_with(|| json!({})).as_object_mut() {
        properties.insert(tag.to_string(), json!({"const": value}));
    }
    if let Some(required) = object.entry("required").or_insert_with(|| json!([])).as_array_mut() {
        required.insert(0, json!(tag));
    }
    schema
}

/// An object tagged `tag` = `value` with exactly the fields `fields` (name → schema), `required` among them.
fn tagged_fields(tag: &str, value: &str, fields: Value, required: &[&str]) -> Value {
    let mut properties = fields;
    if let Some(map) = properties.as_object_mut() {
        map.insert(tag.to_string(), json!({"const": value}));
    }
    let mut all_required = vec![tag];
    all_required.extend_from_slice(required);
    json!({"type": "object", "properties": properties, "required": all_required, "additionalProperties": false})
}

impl JsonSchema for ComputerSpec {
    fn schema_name() -> Cow<'static, str> {
        "ComputerSpec".into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let mut pool = DesktopSpec::json_schema(generator);
        pool.insert("anyOf".into(), json!([{"required": ["desktop"]}, {"required": ["labels"]}]));
        let variants = vec![
            tagged::<MockSpec>(generator, "provider", "mock").to_value(),
            tagged::<LocalSpec>(generator, "provider", "local").to_value(),
            tagged::<VncSpec>(generator, "provider", "vnc").to_value(),
            tagged::<ComputerServerSpec>(generator, "provider", "computer-server").to_value(),
            tagged::<PortableSpec>(generator, "provider", "portable").to_value(),
            tagged::<BrowserSpec>(generator, "provider", "browser").to_value(),
            pool.to_value(),
        ];
        json_schema!({
            "description": "The computer the task operates, by `provider`; or, without one, a desktop of the daemon's pool by `desktop` and/or `labels`.",
            "oneOf": variants
        })
    }
}

impl JsonSchema for ModelSpec {
    fn schema_name() -> Cow<'static, str> {
        "ModelSpec".into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let variants = vec![
            tagged::<VendorModelSpec>(generator, "provider", "anthropic").to_value(),
            tagged::<VendorModelSpec>(generator, "provider", "openai").to_value(),
            tagged::<GeminiSpec>(generator, "provider", "gemini").to_value(),
            tagged::<CompatibleSpec>(generator, "provider", "openai-compatible").to_value(),
            tagged::<ScriptedSpec>(generator, "provider", "scripted").to_value(),
        ];
        json_schema!({"description": "The model that drives the task, by `provider`.", "oneOf": variants})
    }
}

impl JsonSchema for ScriptSource {
    fn schema_name() -> Cow<'static, str> {
        "ScriptSource".into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let script = generator.subschema_for::<Script>().to_value();
        json_schema!({
            "description": "A path to a script file, or the script itself.",
            "anyOf": [{"type": "string", "minLength": 1}, script]
        })
    }
}

/// The declaration of a tool of `kinds` (`http`, `remote`, `command`), as `decl` in `tools.rs` parses it: the
/// common fields (with `name` unless `named_by_key`: `[tools.NAME]`), the `kind` tag and the kind's own fields.
pub(crate) fn declared_tools(generator: &mut SchemaGenerator, kinds: &[&str], named_by_key: bool) -> Vec<Value> {
    let mut common = json!({
        "description": {"type": "string"},
        "parameters": generator.subschema_for::<Parameters>().to_value()
    });
    let mut common_required = vec!["description", "parameters"];
    if !named_by_key {
        common["name"] = generator.subschema_for::<ToolName>().to_value();
        common_required.insert(0, "name");
    }
    let mut declared = Vec::new();
    for kind in kinds {
        let mut fields = match *kind {
            "http" => HttpTool::json_schema(generator),
            "remote" => RemoteTool::json_schema(generator),
            _ => CommandTool::json_schema(generator),
        }
        .to_value();
        if *kind == "command" {
            fields["properties"]["command"]["minItems"] = json!(1);
        }
        let own = fields.get_mut("properties").map(Value::take).unwrap_or_else(|| json!({}));
        let own_required: Vec<String> = fields
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        let mut properties = common.clone();
        if let (Some(all), Some(own)) = (properties.as_object_mut(), own.as_object()) {
            all.extend(own.clone());
        }
        let mut required = common_required.clone();
        required.extend(own_required.iter().map(String::as_str));
        declared.push(tagged_fields("kind", kind, properties, &required));
    }
    declared
}

impl JsonSchema for TaskTool {
    fn schema_name() -> Cow<'static, str> {
        "TaskTool".into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let name = generator.subschema_for::<ToolName>().to_value();
        let mut variants = vec![
            json!({"type": "object", "properties": {"use": name.clone()}, "required": ["use"], "additionalProperties": false}),
        ];
        variants.extend(declared_tools(generator, &["http", "remote"], false));
        let strings = json!({"type": "array", "items": {"type": "string"}});
        let timeout = json!({"type": "integer", "minimum": 1, "maximum": tools::MAX_TOOL_TIMEOUT_SECS});
        let mcp = |transport: Value, required: &str| {
            let mut properties =
                json!({"kind": {"const": "mcp"}, "name": name.clone(), "timeout_secs": timeout.clone()});
            if let (Some(all), Some(own)) = (properties.as_object_mut(), transport.as_object()) {
                all.extend(own.clone());
            }
            json!({"type": "object", "properties": properties, "required": ["kind", "name", required],
                   "additionalProperties": false})
        };
        variants.push(mcp(
            json!({"command": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                               "description": "An MCP server on stdio: the program and its arguments (no shell)."},
                   "env": strings.clone()}),
            "command",
        ));
        variants.push(mcp(
            json!({"url": {"type": "string", "description": "An MCP server over Streamable HTTP."},
                   "headers_env": {"type": "object", "additionalProperties": {"type": "string"}}}),
            "url",
        ));
        json_schema!({
            "description": "A tool the model may call: declared here (`http`, or `remote`: answered by the API client), a `[tools.NAME]` of the configuration named with `use` (the only way to a `command` tool), or an MCP server (`mcp`) whose tools are offered as NAME__TOOL.",
            "oneOf": variants
        })
    }
}

impl JsonSchema for Check {
    fn schema_name() -> Cow<'static, str> {
        "Check".into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let pointers = json!({"type": "object", "propertyNames": generator.subschema_for::<Pointer>().to_value()});
        let mut guest = tagged::<GuestCheck>(generator, "kind", "guest_command");
        if let Some(command) = guest.get_mut("properties").and_then(|p| p.get_mut("command")) {
            *command = json!({"type": "string", "minLength": 1, "maxLength": MAX_GUEST_COMMAND_BYTES});
        }
        let variants = vec![
            tagged_fields("kind", "mock_state", json!({"expect": {"type": "object"}}), &["expect"]),
            tagged::<ScreenCheck>(generator, "kind", "screen").to_value(),
            tagged::<HttpCheck>(generator, "kind", "http").to_value(),
            tagged_fields("kind", "output", json!({"expect": pointers}), &["expect"]),
            tagged_fields("kind", "command", json!({"use": {"type": "string", "minLength": 1}}), &["use"]),
            guest.to_value(),
        ];
        json_schema!({"description": "A verifier check, by `kind` (docs/replay-and-verify.md).", "oneOf": variants})
    }
}

impl JsonSchema for ApprovalRule {
    fn schema_name() -> Cow<'static, str> {
        "ApprovalRule".into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let mut actions: Vec<&str> = ACTION_TYPES.to_vec();
        actions.push("key");
        let secret = generator.subschema_for::<SecretName>().to_value();
        json_schema!({
            "description": "An approval rule (docs/humans.md): exactly one matcher, and an optional reason.",
            "type": "object",
            "properties": {
                "action": {"enum": actions},
                "keys": {"type": "string", "minLength": 1},
                "tool": {"type": "string", "pattern": "\\S"},
                "secret": {"anyOf": [{"const": true}, secret]},
                "task_completion": {"const": true},
                "reason": {"type": "string"}
            },
            "additionalProperties": false,
            "oneOf": [
                {"required": ["action"]},
                {"required": ["keys"]},
                {"required": ["tool"]},
                {"required": ["secret"]},
                {"required": ["task_completion"]}
            ]
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use serde_json::{Value, json};

    use super::task_schema;
    use crate::task::TaskSpec;

    fn repo() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
    }

    fn json_files(dir: &Path) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.expect("a directory entry").path())
            .filter(|path| path.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        files
    }

    fn validator() -> jsonschema::Validator {
        jsonschema::validator_for(&task_schema()).expect("the task schema is a valid JSON Schema")
    }

    /// What the schema says about `instance`: nothing when it is valid.
    fn problems(validator: &jsonschema::Validator, instance: &Value) -> Vec<String> {
        validator.iter_errors(instance).map(|e| format!("{}: {e}", e.instance_path())).collect()
    }

    #[test]
    fn the_schema_is_draft_2020_12_and_names_the_task_fields() {
        let schema = task_schema();
        assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["additionalProperties"], false, "unknown fields are refused");
        assert_eq!(schema["required"], json!(["instructions"]));
        for field in ["id", "computer", "model", "limits", "context", "tools", "secrets", "verify", "approval"] {
            assert!(schema["properties"].get(field).is_some(), "{field}: {schema:#}");
        }
    }

    #[test]
    fn every_shipped_task_file_and_script_is_valid() {
        let validator = validator();
        let tasks = json_files(&repo().join("config/tasks"));
        assert!(tasks.len() >= 3, "{tasks:?}");
        for path in &tasks {
            let text = std::fs::read_to_string(path).expect("a shipped task file");
            TaskSpec::parse(&text, &path.display().to_string()).expect("agentd reads it");
            let task: Value = serde_json::from_str(&text).expect("JSON");
            assert_eq!(problems(&validator, &task), Vec::<String>::new(), "{}", path.display());
        }
        // The scripts the shipped tasks name, given inline as `agentd submit` sends them.
        let scripts = json_files(&repo().join("config/scripts"));
        assert!(!scripts.is_empty());
        for path in &scripts {
            let script: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("a script")).expect("JSON");
            let task = json!({"instructions": "x", "model": {"provider": "scripted", "script": script}});
            TaskSpec::parse(&task.to_string(), "inline").expect("agentd reads it");
            assert_eq!(problems(&validator, &task), Vec::<String>::new(), "{}", path.display());
        }
    }

    #[test]
    fn every_kind_of_computer_model_tool_check_and_rule_is_valid() {
        let task = json!({
            "id": "qa-123.run_1",
            "instructions": "Log in as alice",
            "computer": {"provider": "computer-server", "url": "http://10.0.0.5:8000", "api_key_env": "CUA_API_KEY",
                         "container_name": "box", "transport": "websocket"},
            "model": {"provider": "openai-compatible", "base_url": "http://127.0.0.1:8000/v1", "model": "ui-tars",
                      "max_tokens": 1024, "temperature": 0.0},
            "limits": {"max_steps": 50, "timeout_secs": 1800, "max_cost_usd": 2.0, "verify_retries": 2,
                       "human_timeout_secs": 600, "on_human_timeout": "continue"},
            "context": {"keep_screenshots": 3, "keep_steps": 40, "max_tokens": 60000, "compaction": "model"},
            "guard": {"no_change_steps": 5, "repeat_actions": 0, "idle_turns": 3, "wait_steps": 30},
            "labels": {"os": "ubuntu-24.04"},
            "metadata": {"ticket": "QA-123", "n": [1, 2]},
            "tools": [
                {"name": "lookup_order", "description": "d", "parameters": {"type": "object"}, "kind": "http",
                 "url": "https://orders.example/lookup", "headers_env": {"Authorization": "TOKEN"}, "timeout_secs": 10},
                {"name": "approve_refund", "description": "d", "parameters": {"type": "object"}, "kind": "remote",
                 "timeout_secs": 600},
                {"use": "notify"},
                {"kind": "mcp", "name": "files", "command": ["mcp-server-filesystem", "/srv"], "env": ["HOME"],
                 "timeout_secs": 60},
                {"kind": "mcp", "name": "crm", "url": "https://crm.example.org/mcp",
                 "headers_env": {"Authorization": "CRM_TOKEN"}}
            ],
            "output_schema": {"type": "object", "required": ["order"]},
            "secrets": {"password": {"env": "PORTAL_PASSWORD"}, "token": {"file": "/run/secrets/t"}},
            "replay": {"of": "form-1", "params": {"zoe@example.com": "ada@example.com"}, "on_divergence": "model",
                       "masks": [{"x": 0, "y": 0, "width": 100, "height": 20}], "min_score": 0.98, "tolerance": 12},
            "verify": [
                {"kind": "mock_state", "expect": {"screen": "welcome"}},
                {"kind": "screen", "image": "welcome.png", "region": {"x": 1, "y": 2, "width": 3, "height": 4},
                 "min_score": 0.9},
                {"kind": "http", "url": "http://orders.internal/1", "expect_status": 200, "expect_json": {"/status": "ok"}},
                {"kind": "output", "expect": {"/order": "004512", "": {}}},
                {"kind": "command", "use": "order_saved"},
                {"kind": "guest_command", "command": "test -f /tmp/x", "expect_exit": 0, "expect_stdout": "x"}
            ],
            "conversation": {"from": "talk", "turns": [{"instructions": "log in",
                "steps": [{"text": "Clicking.", "actions": [{"type": "click", "x": 1, "y": 2, "button": "right", "keys": ["shift"]}]}],
                "outcome": {"success": true, "summary": "in", "reason": "completed"}}]},
            "ask_human": false,
            "approval": [{"action": "key"}, {"keys": "ctrl+alt+delete", "reason": "r"}, {"tool": "send_email"},
                         {"secret": true}, {"secret": "password"}, {"task_completion": true}]
        });
        TaskSpec::parse(&task.to_string(), "t.json").expect("agentd reads it");
        let validator = validator();
        assert_eq!(problems(&validator, &task), Vec::<String>::new());
        for computer in [
            json!({"provider": "mock", "scene": "login", "width": 1280, "height": 800}),
            json!({"provider": "mock", "scene": {"name": "inline", "screens": []}}),
            json!({"provider": "local", "display": ":0", "monitor": 1}),
            json!({"provider": "vnc", "address": "host:5900", "password_env": "VNC_PASSWORD"}),
            json!({"provider": "portable", "monitor": 0}),
            json!({"provider": "browser", "start_url": "https://example.org/", "width": 1280, "height": 800}),
            json!({"provider": "browser", "cdp_url": "http://127.0.0.1:9222", "profile": "/var/lib/agentd/profile"}),
            json!({"desktop": "box-1"}),
            json!({"labels": ["gpu"]}),
        ] {
            let task = json!({"instructions": "x", "computer": computer});
            assert_eq!(problems(&validator, &task), Vec::<String>::new(), "{computer}");
        }
        for model in [
            json!({"provider": "anthropic", "model": "claude-sonnet-4-5", "max_tokens": 4096, "tool_version": "computer_20250124"}),
            json!({"provider": "openai", "model": "computer-use-preview"}),
            json!({"provider": "gemini", "temperature": 1.0}),
            json!({"provider": "scripted", "script": "script.json", "params": {"email": "a@b"}}),
        ] {
            TaskSpec::parse(&json!({"instructions": "x", "model": model}).to_string(), "t").expect("agentd reads it");
            let task = json!({"instructions": "x", "model": model});
            assert_eq!(problems(&validator, &task), Vec::<String>::new(), "{model}");
        }
    }

    /// The malformed-input corpus: every task agentd refuses for its shape — a field unknown, missing or of
    /// the wrong type, an unknown tag, a value out of bounds — the schema refuses too. What only reading
    /// further can find is listed here with the reason.
    #[test]
    fn what_agentd_refuses_for_its_shape_the_schema_refuses() {
        const BEYOND_THE_SCHEMA: &[(&str, &str)] = &[
            ("approval-bad-chord.json", "key names are resolved against the keysym table"),
            ("computer-server-bad-url.json", "URL forms are parsed, not matched"),
            ("duplicate-field.json", "a JSON value keeps one of two equal keys; the parser sees both"),
            ("output-schema-invalid.json", "whether a JSON Schema is valid is the meta-schema's business"),
            ("output-schema-not-a-schema.json", "whether a JSON Schema is valid is the meta-schema's business"),
            ("tools-bad-header-name.json", "HTTP header names are checked by their grammar"),
            ("tools-bad-url-scheme.json", "URL forms are parsed, not matched"),
            ("tools-bad-url.json", "URL forms are parsed, not matched"),
            ("tools-duplicate-name.json", "names unique across the list"),
            ("tools-invalid-schema.json", "whether a JSON Schema is valid is the meta-schema's business"),
            ("verify-http-url.json", "URL forms are parsed, not matched"),
        ];
        let validator = validator();
        let dir = repo().join("tests/fixtures/bad-tasks");
        let mut accepted = Vec::new();
        let mut checked = 0;
        for path in json_files(&dir) {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
            let Ok(text) = std::fs::read_to_string(&path) else { continue };
            let Ok(instance) = serde_json::from_str::<Value>(&text) else { continue };
            if name == "expected.json" || TaskSpec::parse(&text, &name).is_ok() {
                continue; // Not a task, or refused later (files it names, the queue, the config).
            }
            checked += 1;
            let beyond = BEYOND_THE_SCHEMA.iter().any(|(n, _)| *n == name);
            let valid = validator.is_valid(&instance);
            if valid != beyond {
                accepted.push(format!("{name}: schema says {}", if valid { "valid" } else { "invalid" }));
            }
        }
        assert!(checked >= 60, "only {checked} files of the corpus were checked");
        assert!(
            accepted.is_empty(),
            "the schema disagrees with the parser (or BEYOND_THE_SCHEMA is out of date):\n{}",
            accepted.join("\n")
        );
    }
}
