//! Declared tools (docs/tools.md) and JSON Schemas (docs/tools.md, docs/task-file.md) as users write them: in a task
//! file's `tools` and
//! `output_schema`, and in config's `[tools.NAME]`. Parsing checks what can be checked without running
//! anything — names, kinds, that every schema is a valid JSON Schema — so a bad declaration is an input error
//! naming its field. Running tools is `tools`' business.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

use super::{Limit, json_kind, tagged, variant};

/// Names the loop gives its own tools; a declared tool may not take them.
pub const RESERVED_TOOL_NAMES: [&str; 3] = ["computer", "task_completion", "ask_human"];

/// The longest `timeout_secs` a tool may ask for (one hour).
pub const MAX_TOOL_TIMEOUT_SECS: u64 = 3600;

/// What a tool waits for when its declaration names no timeout.
pub const DEFAULT_TOOL_TIMEOUT_SECS: u64 = 30;

/// A tool's name: 1–64 characters of `[A-Za-z0-9_-]`, starting with a letter or `_` (what Anthropic, OpenAI
/// and Gemini all accept), and none of [`RESERVED_TOOL_NAMES`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct ToolName(String);

impl ToolName {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut chars = s.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
        if !first_ok || !rest_ok || s.len() > 64 {
            return Err(format!(
                "invalid tool name {s:?}: use 1-64 characters of A-Z a-z 0-9 _ -, starting with a letter or _"
            ));
        }
        if RESERVED_TOOL_NAMES.contains(&s) {
            return Err(format!("the tool name {s:?} is agentd's own; choose another"));
        }
        Ok(Self(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ToolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ToolName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        ToolName::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A JSON Schema, checked when parsed: it compiles (draft 2020-12 unless it names another with `$schema`),
/// and it refers to nothing outside itself (agentd never fetches a `$ref`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct JsonSchema(serde_json::Value);

impl JsonSchema {
    /// Checks a schema; the error says what is wrong and where inside the schema.
    pub fn new(schema: serde_json::Value) -> Result<Self, String> {
        if !matches!(schema, serde_json::Value::Object(_) | serde_json::Value::Bool(_)) {
            return Err(format!("invalid type: {}, expected a JSON Schema (an object)", json_kind(&schema)));
        }
        jsonschema::validator_for(&schema).map_err(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                format!("not a valid JSON Schema: {e}")
            } else {
                format!("not a valid JSON Schema at {at}: {e}")
            }
        })?;
        Ok(Self(schema))
    }

    pub fn as_value(&self) -> &serde_json::Value {
        &self.0
    }
}

impl<'de> Deserialize<'de> for JsonSchema {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        JsonSchema::new(value).map_err(serde::de::Error::custom)
    }
}

/// The schema of a tool's arguments: a [`JsonSchema`] of `"type": "object"` (every vendor passes arguments
/// as an object).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Parameters(JsonSchema);

impl Parameters {
    pub fn schema(&self) -> &JsonSchema {
        &self.0
    }
}

impl<'de> Deserialize<'de> for Parameters {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let schema = JsonSchema::deserialize(d)?;
        if schema.as_value().get("type").and_then(|t| t.as_str()) != Some("object") {
            return Err(serde::de::Error::custom(
                "a tool's parameters must be a JSON Schema with \"type\": \"object\"",
            ));
        }
        Ok(Self(schema))
    }
}

/// A declared tool: what the model is told (name, description, parameters) and how it runs (`kind`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolDecl {
    pub name: ToolName,
    pub description: String,
    pub parameters: Parameters,
    #[serde(flatten)]
    pub kind: ToolKind,
}

/// How a declared tool runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ToolKind {
    /// POST the arguments as JSON to `url`; the response body is the result.
    Http(HttpTool),
    /// Executed by the API client: the task parks in `awaiting_tool` until it answers, or until the tool's
    /// `timeout_secs` passed (the call then fails with a result saying so, and the task goes on).
    Remote(RemoteTool),
    /// Run a program with the arguments as JSON on stdin (config only).
    Command(CommandTool),
}

impl ToolKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Http(_) => "http",
            Self::Remote(_) => "remote",
            Self::Command(_) => "command",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpTool {
    pub url: String,
    /// Request headers whose values come from environment variables on the worker (`{"Authorization":
    /// "ORDERS_TOKEN"}`): secrets never sit in a task file.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers_env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<Limit<u64, MAX_TOOL_TIMEOUT_SECS>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandTool {
    /// The program and its arguments (no shell).
    pub command: Vec<String>,
    /// The working directory (the worker's own when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The worker's environment variables the program is given, besides the few every program gets (see
    /// `tools::command::BASE_ENV`): it starts from a clean environment, never the daemon's whole one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<Limit<u64, MAX_TOOL_TIMEOUT_SECS>>,
}

impl<'de> Deserialize<'de> for ToolDecl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        decl(d, true)
    }
}

/// Reads a declaration; `command` tools only when `allow_command` (config).
fn decl<'de, D: Deserializer<'de>>(d: D, allow_command: bool) -> Result<ToolDecl, D::Error> {
    use serde::de::Error;
    let (kind, mut rest) = tagged(d, "kind", &["http", "remote", "command"])?;
    if kind == "command" && !allow_command {
        return Err(D::Error::custom(
            "field `kind`: a `command` tool can only be declared in config ([tools.NAME]); name it with {\"use\": \"NAME\"}",
        ));
    }
    let mut take = |field: &'static str| rest.remove(field).ok_or_else(|| D::Error::missing_field(field));
    let name: ToolName = variant_field("name", take("name")?)?;
    let description: String = variant_field("description", take("description")?)?;
    let parameters: Parameters = variant_field("parameters", take("parameters")?)?;
    let kind = match kind.as_str() {
        "http" => {
            let http: HttpTool = variant(rest)?;
            http_url(&http.url).map_err(|m| D::Error::custom(format!("field `url`: {m}")))?;
            check_headers_env(&http.headers_env).map_err(D::Error::custom)?;
            ToolKind::Http(http)
        }
        "remote" => {
            if let Some(field) = rest.keys().find(|k| *k != "timeout_secs") {
                return Err(D::Error::custom(format!("field `{field}`: unknown field for a `remote` tool")));
            }
            ToolKind::Remote(variant(rest)?)
        }
        _ => {
            let command: CommandTool = variant(rest)?;
            if command.command.first().is_none_or(|program| program.is_empty()) {
                return Err(D::Error::custom("field `command`: name the program to run (a non-empty list)"));
            }
            ToolKind::Command(command)
        }
    };
    Ok(ToolDecl { name, description, parameters, kind })
}

/// How long the API client has to answer a `remote` call by default: a day.
pub const DEFAULT_REMOTE_TIMEOUT_SECS: u64 = 24 * 3600;
/// The longest a `remote` call may wait: a week.
pub const MAX_REMOTE_TIMEOUT_SECS: u64 = 7 * 24 * 3600;

/// A `remote` tool: run by the API client.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RemoteTool {
    /// How long the client has to answer (default [`DEFAULT_REMOTE_TIMEOUT_SECS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<Limit<u64, MAX_REMOTE_TIMEOUT_SECS>>,
}

impl RemoteTool {
    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.timeout_secs.map_or(DEFAULT_REMOTE_TIMEOUT_SECS, |t| t.get()))
    }
}

/// An `http` tool's URL: absolute, `http` or `https`, with a host.
pub fn http_url(url: &str) -> Result<reqwest::Url, String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("{url:?} is not an http or https URL"));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(format!("{url:?} names no host"));
    }
    Ok(parsed)
}

fn variant_field<T: serde::de::DeserializeOwned, E: serde::de::Error>(
    field: &str,
    value: serde_json::Value,
) -> Result<T, E> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        if path == "." || path.is_empty() {
            E::custom(format!("field `{field}`: {message}"))
        } else {
            E::custom(format!("field `{field}.{path}`: {message}"))
        }
    })
}

/// A task file's entry in `tools`: a declaration, `{"use": "NAME"}` naming a config tool, or an MCP server
/// whose tools are offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum TaskTool {
    Use {
        #[serde(rename = "use")]
        name: ToolName,
    },
    Declared(ToolDecl),
    Mcp(McpSource),
}

impl TaskTool {
    /// The name the model knows the tool by (an MCP server's: the prefix of its tools' names).
    pub fn name(&self) -> &ToolName {
        match self {
            Self::Use { name } => name,
            Self::Declared(decl) => &decl.name,
            Self::Mcp(source) => &source.name,
        }
    }
}

/// An MCP server (docs/tools.md) a task's model may use: started (stdio) or connected to (Streamable HTTP)
/// for each attempt; each of its tools is offered to the model as `PREFIX__TOOL`.
#[derive(Debug, Clone, PartialEq)]
pub struct McpSource {
    /// The prefix of its tools' names: the model calls the server's `search` as `PREFIX__search`.
    pub name: ToolName,
    pub transport: McpTransport,
    /// How long one call may take, in seconds (default 30).
    pub timeout_secs: Option<Limit<u64, MAX_TOOL_TIMEOUT_SECS>>,
}

/// How agentd reaches an MCP server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum McpTransport {
    /// stdio: a program agentd starts (no shell), in a process group of its own, stopped with the attempt.
    Stdio {
        /// The program and its arguments.
        command: Vec<String>,
        /// The worker's environment variables the program is given, besides the few every program gets: it
        /// starts from a clean environment, never the daemon's whole one.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        env: Vec<String>,
    },
    /// Streamable HTTP: a server at `url`.
    Http {
        url: String,
        /// Request headers whose values come from environment variables on the worker.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        headers_env: BTreeMap<String, String>,
    },
}

impl Serialize for McpSource {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Entry<'a> {
            kind: &'static str,
            name: &'a ToolName,
            #[serde(flatten)]
            transport: &'a McpTransport,
            #[serde(skip_serializing_if = "Option::is_none")]
            timeout_secs: Option<u64>,
        }
        Entry {
            kind: "mcp",
            name: &self.name,
            transport: &self.transport,
            timeout_secs: self.timeout_secs.map(|t| t.get()),
        }
        .serialize(serializer)
    }
}

impl McpSource {
    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.timeout_secs.map_or(DEFAULT_TOOL_TIMEOUT_SECS, |t| t.get()))
    }
}

/// Reads `{"kind": "mcp", "name": …, "command" | "url": …}` (the `kind` already checked).
fn mcp_source(mut map: serde_json::Map<String, serde_json::Value>) -> Result<McpSource, String> {
    map.remove("kind");
    let name = map.remove("name").ok_or("missing field `name`")?;
    let name: ToolName = serde_json::from_value(name).map_err(|e| format!("field `name`: {e}"))?;
    if name.as_str().contains("__") {
        return Err(format!("field `name`: {:?}: an MCP server's name may not contain `__`", name.as_str()));
    }
    match (map.contains_key("command"), map.contains_key("url")) {
        (true, true) => {
            return Err("an MCP server has either `command` (stdio) or `url` (Streamable HTTP), not both".into());
        }
        (false, false) => return Err("missing field `command` (stdio) or `url` (Streamable HTTP)".into()),
        _ => {}
    }
    if let Some(field) = ["description", "parameters"].into_iter().find(|f| map.contains_key(*f)) {
        return Err(format!("field `{field}`: an MCP server's tools describe themselves"));
    }
    if map.contains_key("command") {
        for field in map.keys() {
            if !["command", "env", "timeout_secs"].contains(&field.as_str()) {
                return Err(format!("field `{field}`: unknown field for an MCP server on stdio"));
            }
        }
    } else {
        for field in map.keys() {
            if !["url", "headers_env", "timeout_secs"].contains(&field.as_str()) {
                return Err(format!("field `{field}`: unknown field for an MCP server over HTTP"));
            }
        }
    }
    let timeout_secs = match map.remove("timeout_secs") {
        Some(value) => Some(serde_json::from_value(value).map_err(|e| format!("field `timeout_secs`: {e}"))?),
        None => None,
    };
    let transport: McpTransport = serde_json::from_value(serde_json::Value::Object(map)).map_err(|e| e.to_string())?;
    let source = McpSource { name, transport, timeout_secs };
    match &source.transport {
        McpTransport::Stdio { command, env } => {
            if command.first().is_none_or(|program| program.is_empty()) {
                return Err("field `command`: name the program to run (a non-empty list)".into());
            }
            if let Some(var) = env.iter().find(|v| v.is_empty() || v.contains(['=', '\0'])) {
                return Err(format!("field `env`: {var:?} is not an environment variable name"));
            }
        }
        McpTransport::Http { url, headers_env } => {
            http_url(url).map_err(|m| format!("field `url`: {m}"))?;
            check_headers_env(headers_env)?;
        }
    }
    Ok(source)
}

/// `headers_env`: header names as HTTP allows them, variable names as environments do.
fn check_headers_env(headers_env: &BTreeMap<String, String>) -> Result<(), String> {
    for (header, var) in headers_env {
        if header.is_empty() || !header.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)) {
            return Err(format!("field `headers_env`: {header:?} is not an HTTP header name"));
        }
        if var.is_empty() || var.contains(['=', '\0']) {
            return Err(format!("field `headers_env.{header}`: {var:?} is not an environment variable name"));
        }
    }
    Ok(())
}

impl<'de> Deserialize<'de> for TaskTool {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = serde_json::Value::deserialize(d)?;
        if let serde_json::Value::Object(map) = &value
            && let Some(name) = map.get("use")
        {
            if let Some(other) = map.keys().find(|k| *k != "use") {
                return Err(D::Error::custom(format!(
                    "field `{other}`: a tool named with `use` takes nothing else (its declaration is in config)"
                )));
            }
            return Ok(Self::Use { name: variant_field("use", name.clone())? });
        }
        if let serde_json::Value::Object(map) = &value
            && map.get("kind").and_then(serde_json::Value::as_str) == Some("mcp")
        {
            return mcp_source(map.clone()).map(Self::Mcp).map_err(D::Error::custom);
        }
        decl(value, false).map(Self::Declared).map_err(D::Error::custom)
    }
}

/// Checks what a list of tools needs beyond each entry: unique names. Returns the index and message of the
/// first duplicate.
pub fn check_unique<'a>(names: impl Iterator<Item = &'a ToolName>) -> Result<(), (usize, String)> {
    let mut seen = std::collections::BTreeSet::new();
    for (i, name) in names.enumerate() {
        if !seen.insert(name.as_str()) {
            return Err((i, format!("a tool named {:?} is declared twice; tool names must be unique", name.as_str())));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn task_tool(v: serde_json::Value) -> Result<TaskTool, String> {
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    #[test]
    fn declarations_parse_and_bad_ones_name_the_field() {
        let http = task_tool(json!({"name": "lookup_order", "description": "d", "kind": "http",
            "parameters": {"type": "object", "properties": {"n": {"type": "string"}}},
            "url": "http://x/lookup", "headers_env": {"Authorization": "TOKEN"}, "timeout_secs": 5}))
        .unwrap();
        assert_eq!(http.name().as_str(), "lookup_order");
        let back = serde_json::to_value(&http).unwrap();
        assert_eq!(task_tool(back).unwrap(), http);
        assert!(matches!(task_tool(json!({"use": "notify"})).unwrap(), TaskTool::Use { .. }));

        let e = task_tool(json!({"name": "x", "description": "d", "kind": "command", "parameters": {"type": "object"},
            "command": ["ls"]}))
        .unwrap_err();
        assert!(e.contains("field `kind`") && e.contains("config"), "{e}");
        let e = task_tool(json!({"name": "task_completion", "description": "d", "kind": "remote",
            "parameters": {"type": "object"}}))
        .unwrap_err();
        assert!(e.contains("field `name`") && e.contains("agentd's own"), "{e}");
        let e = task_tool(json!({"name": "x", "description": "d", "kind": "remote",
            "parameters": {"type": "object", "properties": {"a": {"type": "strng"}}}}))
        .unwrap_err();
        assert!(e.contains("field `parameters`") && e.contains("not a valid JSON Schema"), "{e}");
        let e = task_tool(json!({"name": "x", "description": "d", "kind": "remote", "parameters": {"type": "string"}}))
            .unwrap_err();
        assert!(e.contains("\"type\": \"object\""), "{e}");
        let e = task_tool(json!({"name": "x", "description": "d", "kind": "ftp", "parameters": {"type": "object"}}))
            .unwrap_err();
        assert!(e.contains("field `kind`") && e.contains("ftp"), "{e}");
        let e = task_tool(json!({"name": "x", "description": "d", "kind": "http", "parameters": {"type": "object"},
            "url": "http://x", "headers": {}}))
        .unwrap_err();
        assert!(e.contains("headers"), "{e}");
        let e = task_tool(json!({"use": "x", "kind": "http"})).unwrap_err();
        assert!(e.contains("field `kind`"), "{e}");
    }

    #[test]
    fn mcp_servers_parse_round_trip_and_bad_ones_name_the_field() {
        let stdio = task_tool(json!({"kind": "mcp", "name": "files", "command": ["mcp-fs", "/srv"], "env": ["HOME"],
            "timeout_secs": 5}))
        .unwrap();
        assert_eq!(stdio.name().as_str(), "files");
        assert!(matches!(&stdio, TaskTool::Mcp(McpSource { transport: McpTransport::Stdio { .. }, .. })));
        assert_eq!(task_tool(serde_json::to_value(&stdio).unwrap()).unwrap(), stdio);
        let http = task_tool(json!({"kind": "mcp", "name": "crm", "url": "https://crm.example.org/mcp",
            "headers_env": {"Authorization": "CRM_TOKEN"}}))
        .unwrap();
        assert!(matches!(&http, TaskTool::Mcp(McpSource { transport: McpTransport::Http { .. }, .. })));
        assert_eq!(task_tool(serde_json::to_value(&http).unwrap()).unwrap(), http);

        for (bad, expected) in [
            (json!({"kind": "mcp", "name": "x", "command": ["a"], "url": "http://h/mcp"}), "not both"),
            (json!({"kind": "mcp", "name": "x"}), "missing field `command`"),
            (json!({"kind": "mcp", "command": ["a"]}), "missing field `name`"),
            (json!({"kind": "mcp", "name": "a__b", "command": ["a"]}), "may not contain `__`"),
            (json!({"kind": "mcp", "name": "x", "command": ["a"], "description": "d"}), "field `description`"),
            (json!({"kind": "mcp", "name": "x", "command": ["a"], "headers_env": {}}), "field `headers_env`"),
            (json!({"kind": "mcp", "name": "x", "url": "http://h/mcp", "env": []}), "field `env`"),
            (json!({"kind": "mcp", "name": "x", "command": []}), "field `command`"),
            (json!({"kind": "mcp", "name": "x", "url": "ftp://h/mcp"}), "field `url`"),
            (json!({"kind": "mcp", "name": "x", "url": "http://h/mcp", "headers_env": {"A B": "V"}}), "headers_env"),
            (json!({"kind": "mcp", "name": "x", "command": ["a"], "timeout_secs": 0}), "timeout_secs"),
        ] {
            let e = task_tool(bad.clone()).unwrap_err();
            assert!(e.contains(expected), "{bad}: {e}");
        }
    }

    #[test]
    fn names_must_be_unique() {
        let names = [ToolName::parse("a").unwrap(), ToolName::parse("b").unwrap(), ToolName::parse("a").unwrap()];
        assert_eq!(check_unique(names.iter()).unwrap_err().0, 2);
    }
}
