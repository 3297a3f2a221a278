//! MCP servers as a task's tools (docs/tools.md): a `{"kind": "mcp"}` entry of the task's `tools` is started
//! (stdio: the program in a process group of its own, from a clean environment) or connected to (Streamable
//! HTTP, through the task's outbound policy) when the attempt is assembled, its tools are listed, and each is
//! offered to the model as `PREFIX__TOOL` with its input schema, as a [`Tool`] of the toolbox — so its calls
//! are checked against the schema, get the secrets' values, are recorded and streamed like every tool's.
//!
//! A call waits at most the entry's `timeout_secs`; what it returns is read as MCP content: text parts are
//! the result the model reads (at most [`MAX_TEXT_BYTES`]), the first image part (PNG or WebP, at most
//! [`MAX_IMAGE_BYTES`]) goes to the model with it, structured content is kept in the record's details,
//! and `isError` makes it a failed call. A server that has exited, or a connection that broke, makes every
//! later call a tool error saying so. The server lives as long as the attempt's toolbox: the program's whole
//! process group is killed when it is dropped.
//!
//! The client is the official Rust SDK's (rmcp), the same crate the daemon's own MCP server uses.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use serde_json::Value;

use agentd_computer::outbound::Outbound;
use reqwest::header::{HeaderName, HeaderValue};

use super::command::{BASE_ENV, ProcessGroup};
use super::http::{header_value, redact_answer};
use super::secrets::Secrets;
use super::{Tool, ToolContext, ToolImage, ToolOutcome};
use crate::model::ToolSpec;
use crate::task::tools::{McpSource, McpTransport, ToolName};

/// The most text of one result the model reads; the rest is cut with a note.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;
/// The largest image of one result the model is shown.
pub const MAX_IMAGE_BYTES: usize = 5 * 1024 * 1024;
/// The largest message (a line on stdio, a response over HTTP) read from a server.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// How long a server has to start, initialize MCP and list its tools (an interpreter importing its SDK on a
/// loaded machine takes seconds; the calls have the entry's own `timeout_secs`).
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Why an MCP server could not give the attempt its tools.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The entry names a program that cannot be started, or a header variable that is not set.
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// The server did not answer as an MCP server within the timeout (a retry may succeed).
    #[error("{field}: {message}")]
    Unreachable { field: String, message: String },
}

type Client = RunningService<RoleClient, ()>;

/// One connected server, shared by its tools; dropping the last tool closes it.
struct Server {
    prefix: String,
    client: Client,
    timeout: Duration,
    /// The task's secrets and the headers sent (name, the worker's variable): redacted out of what the server
    /// says before it is cut.
    secrets: Secrets,
    headers: Vec<(HeaderName, String)>,
    /// The stdio program and its process group, killed when the server is dropped.
    _process: Option<(ProcessGroup, tokio::process::Child)>,
}

/// A server's tool as the model sees it.
struct McpTool {
    server: Arc<Server>,
    /// The server's own name for it.
    remote: String,
    spec: ToolSpec,
}

/// Starts or connects to `source`'s server, lists its tools and returns them (`field`: the entry's place in
/// the task file, for errors; `outbound`: where a Streamable HTTP server may be reached; `secrets`: the
/// task's, kept out of what the server says). What a task from the API may start or reach was checked with its
/// other names (`backends::check_names`).
pub async fn connect(
    source: &McpSource,
    field: &str,
    outbound: &Outbound,
    secrets: Secrets,
) -> Result<Vec<Arc<dyn Tool>>, McpError> {
    let timeout = source.timeout();
    let start = START_TIMEOUT.max(timeout);
    let invalid = |field: String, message: String| McpError::Invalid { field, message };
    let unreachable = |message: String| McpError::Unreachable { field: field.to_string(), message };
    let mut sent = Vec::new();
    let (client, process) = match &source.transport {
        McpTransport::Stdio { command, env } => {
            let (client, process) = spawn(command, env, start).await.map_err(|e| match e {
                Spawn::Start(m) => invalid(format!("{field}.command"), m),
                Spawn::Handshake(m) => unreachable(m),
            })?;
            (client, Some(process))
        }
        McpTransport::Http { url, headers_env } => {
            let mut headers = Vec::with_capacity(headers_env.len());
            for (name, var) in headers_env {
                let at = format!("{field}.headers_env.{name}");
                let name = HeaderName::try_from(name.as_str()).map_err(|e| invalid(at.clone(), e.to_string()))?;
                headers.push((name.clone(), header_value(var).map_err(|m| invalid(at, m))?));
                sent.push((name, var.clone()));
            }
            let client = super::http::client(outbound).map_err(|m| invalid(field.to_string(), m))?;
            (http(url, headers, client, start).await.map_err(unreachable)?, None)
        }
    };
    let server = Arc::new(Server {
        prefix: source.name.as_str().to_string(),
        client,
        timeout,
        secrets,
        headers: sent,
        _process: process,
    });
    let listed = tokio::time::timeout(start, server.client.list_all_tools())
        .await
        .map_err(|_| unreachable(format!("the server did not list its tools within {} s", start.as_secs())))?
        .map_err(|e| unreachable(format!("the server could not list its tools: {e}")))?;
    let mut tools: Vec<Arc<dyn Tool>> = Vec::with_capacity(listed.len());
    for tool in listed {
        let tool = serde_json::to_value(&tool).unwrap_or(Value::Null);
        let Some(remote) = tool.get("name").and_then(Value::as_str) else { continue };
        let name = format!("{}__{}", server.prefix, remote);
        if ToolName::parse(&name).is_err() {
            tracing::warn!(tool = %remote, server = %server.prefix, "an MCP tool whose name the models cannot take is left out");
            continue;
        }
        let mut parameters = tool.get("inputSchema").cloned().unwrap_or_else(|| serde_json::json!({}));
        if parameters.get("type").is_none() {
            parameters["type"] = "object".into();
        }
        let description = tool
            .get("description")
            .and_then(Value::as_str)
            .or_else(|| tool.get("title").and_then(Value::as_str))
            .unwrap_or(remote)
            .to_string();
        tools.push(Arc::new(McpTool {
            server: server.clone(),
            remote: remote.to_string(),
            spec: ToolSpec { name, description, parameters },
        }));
    }
    Ok(tools)
}

enum Spawn {
    /// The program could not be started.
    Start(String),
    /// It started but did not speak MCP in time.
    Handshake(String),
}

/// Starts the program in a process group of its own, from a clean environment, and initializes MCP over its
/// stdin and stdout. Its stderr is dropped: a server's log is no result.
async fn spawn(
    command: &[String],
    env: &[String],
    timeout: Duration,
) -> Result<(Client, (ProcessGroup, tokio::process::Child)), Spawn> {
    let program = command.first().cloned().unwrap_or_default();
    let mut process = tokio::process::Command::new(&program);
    process
        .args(command.iter().skip(1))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .env_clear();
    for name in BASE_ENV.iter().copied().chain(env.iter().map(String::as_str)) {
        if let Some(value) = std::env::var_os(name) {
            process.env(name, value);
        }
    }
    #[cfg(unix)]
    process.process_group(0);
    let mut child = process.spawn().map_err(|e| Spawn::Start(format!("cannot start {program}: {e}")))?;
    let group = ProcessGroup::of(&child);
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(Spawn::Start(format!("cannot talk to {program}")));
    };
    let transport =
        rmcp::transport::async_rw::AsyncRwTransport::new_client(stdout, stdin).with_max_line_length(MAX_MESSAGE_BYTES);
    let client = match tokio::time::timeout(timeout, ().serve(transport)).await {
        Ok(Ok(client)) => client,
        Ok(Err(e)) => return Err(Spawn::Handshake(format!("{program} did not start an MCP session: {e}"))),
        Err(_) => {
            return Err(Spawn::Handshake(format!(
                "{program} did not answer MCP's initialize within {} s",
                timeout.as_secs()
            )));
        }
    };
    Ok((client, (group, child)))
}

/// Connects to a Streamable HTTP server and initializes MCP.
async fn http(
    url: &str,
    headers: Vec<(HeaderName, HeaderValue)>,
    client: reqwest::Client,
    timeout: Duration,
) -> Result<Client, String> {
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_string());
    config.custom_headers = headers.into_iter().collect();
    config.max_json_response_size = MAX_MESSAGE_BYTES;
    config.max_sse_event_size = MAX_MESSAGE_BYTES;
    let transport = StreamableHttpClientTransport::with_client(client, config);
    match tokio::time::timeout(timeout, ().serve(transport)).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(format!("{url} did not start an MCP session: {e}")),
        Err(_) => Err(format!("{url} did not answer MCP's initialize within {} s", timeout.as_secs())),
    }
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call(&self, arguments: Value, context: ToolContext<'_>) -> ToolOutcome {
        let server = &self.server;
        if server.client.is_closed() {
            return ToolOutcome::error(format!("the MCP server {} stopped: its tools cannot be called", server.prefix));
        }
        let mut params = CallToolRequestParams::new(self.remote.clone());
        params.arguments = match arguments {
            Value::Object(map) => Some(map),
            _ => None,
        };
        let call = server.client.call_tool(params);
        let result = tokio::select! {
            result = tokio::time::timeout(server.timeout, call) => result,
            () = context.cancel.cancelled() => return ToolOutcome::error("cancelled"),
        };
        match result {
            Err(_) => {
                ToolOutcome::error(format!("{} did not answer within {} s", self.spec.name, server.timeout.as_secs()))
            }
            Ok(Err(e @ (rmcp::ServiceError::TransportClosed | rmcp::ServiceError::TransportSend(_)))) => {
                ToolOutcome::error(format!(
                    "the MCP server {} stopped ({e}): its tools cannot be called",
                    server.prefix
                ))
            }
            Ok(Err(e)) if server.client.is_closed() => ToolOutcome::error(format!(
                "the MCP server {} stopped ({e}): its tools cannot be called",
                server.prefix
            )),
            Ok(Err(e)) => {
                // The error is the server's words: redacted, then bounded like a result.
                let said = redact_answer(&server.secrets, &server.headers, &e.to_string());
                ToolOutcome::error(format!("{} failed: {}", self.spec.name, cut(said)))
            }
            Ok(Ok(result)) => {
                let redact = |text: &str| redact_answer(&server.secrets, &server.headers, text);
                outcome(&serde_json::to_value(&result).unwrap_or(Value::Null), &redact)
            }
        }
    }
}

/// `text` cut to [`MAX_TEXT_BYTES`] (at a character boundary), saying so.
fn cut(mut text: String) -> String {
    if text.len() > MAX_TEXT_BYTES {
        let mut end = MAX_TEXT_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let total = text.len();
        text.truncate(end);
        text.push_str(&format!("\n(cut: the result had {total} bytes; the first {end} are shown)"));
    }
    text
}

/// A `tools/call` result (as JSON) as the model reads it; `redact` is applied to what the server said before
/// it is cut.
fn outcome(result: &Value, redact: &dyn Fn(&str) -> String) -> ToolOutcome {
    let mut text = String::new();
    let mut image = None;
    let mut notes = Vec::new();
    for part in result.get("content").and_then(Value::as_array).into_iter().flatten() {
        match part.get("type").and_then(Value::as_str) {
            Some("text") => {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(part.get("text").and_then(Value::as_str).unwrap_or_default());
            }
            Some("image") => match decode_image(part) {
                Ok(found) if image.is_none() => image = Some(found),
                Ok(_) => notes.push("(a further image was left out: one image per result)".to_string()),
                Err(why) => notes.push(format!("(an image was left out: {why})")),
            },
            Some(other) => notes.push(format!("(a {other} part was left out)")),
            None => {}
        }
    }
    // Structured content through its JSON text, redacted (the redacted text when it no longer parses).
    let structured = result.get("structuredContent").filter(|v| !v.is_null()).map(|v| {
        let said = redact(&v.to_string());
        serde_json::from_str(&said).unwrap_or(Value::String(said))
    });
    if text.is_empty()
        && let Some(structured) = &structured
    {
        text = structured.to_string();
    }
    let mut text = cut(redact(&text));
    for note in notes {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&note);
    }
    let failed = result.get("isError").and_then(Value::as_bool) == Some(true);
    let mut outcome = if failed { ToolOutcome::error(text) } else { ToolOutcome::ok(text) };
    if let Some(structured) = structured {
        outcome = outcome.with_details(serde_json::json!({ "structured_content": structured }));
    }
    outcome.image = image;
    outcome
}

/// An MCP image part (`data` base64, `mimeType`) as an image for the model.
fn decode_image(part: &Value) -> Result<ToolImage, String> {
    use base64::Engine;
    let media_type = match part.get("mimeType").and_then(Value::as_str) {
        Some("image/png") => "image/png",
        Some("image/webp") => "image/webp",
        other => return Err(format!("{} is not an image type the models take", other.unwrap_or("no type"))),
    };
    let data = part.get("data").and_then(Value::as_str).unwrap_or_default();
    if data.len() / 4 * 3 > MAX_IMAGE_BYTES {
        return Err(format!("over {} MiB", MAX_IMAGE_BYTES / 1024 / 1024));
    }
    let bytes = base64::engine::general_purpose::STANDARD.decode(data).map_err(|e| format!("not base64: {e}"))?;
    ToolImage::new(media_type, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn outcome_plain(result: &Value) -> ToolOutcome {
        outcome(result, &|t: &str| t.to_string())
    }

    #[test]
    fn text_images_structure_and_errors_are_read() {
        let png = {
            let frame = agentd_computer::Frame::from_rgb(agentd_computer::Size::new(2, 3), vec![9; 18]).unwrap();
            crate::screen::image::encode_png(&frame).unwrap()
        };
        use base64::Engine;
        let data = base64::engine::general_purpose::STANDARD.encode(&png);
        let read = outcome_plain(&json!({"content": [
            {"type": "text", "text": "found 2"},
            {"type": "image", "mimeType": "image/png", "data": data},
            {"type": "image", "mimeType": "image/png", "data": data},
            {"type": "resource_link", "uri": "file:///x", "name": "x"},
            {"type": "text", "text": "done"}
        ], "structuredContent": {"n": 2}}));
        assert!(read.ok);
        assert_eq!(
            read.message,
            "found 2\ndone\n(a further image was left out: one image per result)\n(a resource_link part was left out)"
        );
        assert_eq!(read.image.as_ref().map(|i| (i.size.width, i.size.height)), Some((2, 3)));
        assert_eq!(read.details, Some(json!({"structured_content": {"n": 2}})));

        let failed = outcome_plain(&json!({"content": [{"type": "text", "text": "no such order"}], "isError": true}));
        assert!(!failed.ok);
        assert_eq!(failed.message, "no such order");

        let only_structure = outcome_plain(&json!({"content": [], "structuredContent": {"total": 3}}));
        assert_eq!(only_structure.message, "{\"total\":3}");

        let flood = outcome_plain(&json!({"content": [{"type": "text", "text": "é".repeat(MAX_TEXT_BYTES)}]}));
        assert!(flood.message.len() < MAX_TEXT_BYTES + 100, "{}", flood.message.len());
        assert!(flood.message.ends_with("are shown)"), "{}", &flood.message[flood.message.len() - 80..]);

        // A secret across the cut is redacted first: no piece of it is left at the cut.
        let value = "4111-1111-1111-1111";
        let across = format!("{}{value}", "a".repeat(MAX_TEXT_BYTES - 6));
        let redact = |t: &str| t.replace(value, "<secret:card>");
        let read = outcome(
            &json!({"content": [{"type": "text", "text": across}],
                                   "structuredContent": {"card": value}}),
            &redact,
        );
        assert!(!read.message.contains("4111"), "{}", &read.message[read.message.len() - 80..]);
        assert_eq!(read.details, Some(json!({"structured_content": {"card": "<secret:card>"}})));

        let svg =
            outcome_plain(&json!({"content": [{"type": "image", "mimeType": "image/svg+xml", "data": "PHN2Zz4="}]}));
        assert!(svg.image.is_none());
        assert!(svg.message.contains("image/svg+xml is not an image type"), "{}", svg.message);
    }
}
