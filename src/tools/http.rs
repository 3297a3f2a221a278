//! The `http` tool kind (docs/tools.md): POST the call's arguments as JSON to the declared URL; the response body is
//! the result envelope.
//!
//! One HTTP client serves every `http` tool of the process. Header values come from the worker's environment
//! (`headers_env`), read when the tool is made (a missing variable is an input error naming it) and again at
//! each call; they are marked sensitive and appear in no message. Redirects are not followed (a 3xx is a
//! failed call: the body would otherwise be re-sent, or dropped, somewhere the task did not name). A non-2xx
//! status, a timeout, a connection error or a body past [`MAX_ANSWER_BYTES`] is a failed call (`ok: false`)
//! naming the tool and the problem; it never ends the task.
//!
//! The URL is reached only where the task's outbound policy allows (an API task's tool: public addresses and
//! `[outbound] allow`; see `agentd_computer::outbound`). What the server answers is redacted before anything
//! is cut from it — the task's secrets, and the header values the tool sends (a server that echoes its
//! `Authorization` header back gives the model nothing) — so no part of a value survives a cut.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use agentd_computer::outbound::{self, Outbound};
use async_trait::async_trait;
use futures_util::StreamExt;
use reqwest::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use serde_json::json;

use super::envelope::{self, MAX_ANSWER_BYTES};
use super::secrets::Secrets;
use super::{Tool, ToolContext, ToolOutcome, ToolboxError};
use crate::model::ToolSpec;
use crate::task::tools::{DEFAULT_TOOL_TIMEOUT_SECS, HttpTool, ToolDecl};

/// The most of an error response's body quoted to the model.
const ERROR_BODY_QUOTE: usize = 500;

fn build(policy: &Outbound) -> Result<reqwest::Client, String> {
    let builder = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .user_agent(concat!("agentd/", env!("CARGO_PKG_VERSION")));
    outbound::http::apply(builder, policy, 0).build().map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// The client for `policy`: the process's one for open tools (built once), a client of the tool's own
/// otherwise (its resolver holds the policy). An error if it cannot be built, which every call then reports.
pub(crate) fn client(policy: &Outbound) -> Result<reqwest::Client, String> {
    static OPEN: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    if policy.is_restricted() { build(policy) } else { OPEN.get_or_init(|| build(policy)).clone() }
}

/// A declared `http` tool, ready to call.
pub struct HttpRunner {
    spec: ToolSpec,
    url: reqwest::Url,
    headers: Vec<(HeaderName, String)>,
    timeout: Duration,
    outbound: Outbound,
    client: Result<reqwest::Client, String>,
    /// The task's secrets, redacted out of the answer before it is cut.
    secrets: Secrets,
}

impl HttpRunner {
    /// Makes the tool of `decl` (at `field` of the task, for errors). Fails when the URL is not http(s),
    /// a header name is not one, or a `headers_env` variable is not set on this worker.
    pub fn make(
        decl: &ToolDecl,
        http: &HttpTool,
        field: &str,
        outbound: Outbound,
        secrets: Secrets,
    ) -> Result<Arc<dyn Tool>, ToolboxError> {
        let url = crate::task::tools::http_url(&http.url).map_err(|m| ToolboxError::new(format!("{field}.url"), m))?;
        let mut headers = Vec::new();
        for (name, var) in &http.headers_env {
            let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                ToolboxError::new(format!("{field}.headers_env"), format!("{name:?} is not an HTTP header name"))
            })?;
            header_value(var).map_err(|m| ToolboxError::new(format!("{field}.headers_env.{name}"), m))?;
            headers.push((header, var.clone()));
        }
        let timeout = Duration::from_secs(http.timeout_secs.map_or(DEFAULT_TOOL_TIMEOUT_SECS, |t| t.get()));
        let spec = ToolSpec {
            name: decl.name.as_str().to_string(),
            description: decl.description.clone(),
            parameters: decl.parameters.schema().as_value().clone(),
        };
        let client = client(&outbound);
        Ok(Arc::new(Self { spec, url, headers, timeout, outbound, client, secrets }))
    }

    /// `text` with the task's secrets and the values of the tool's own headers replaced.
    fn redact(&self, text: &str) -> String {
        redact_answer(&self.secrets, &self.headers, text)
    }

    async fn post(&self, arguments: &serde_json::Value) -> Result<ToolOutcome, String> {
        let name = &self.spec.name;
        outbound::http::check_url(&self.outbound, &self.url).map_err(|e| e.to_string())?;
        let mut request = self
            .client
            .as_ref()
            .map_err(Clone::clone)?
            .post(self.url.clone())
            .timeout(self.timeout)
            .header(CONTENT_TYPE, "application/json")
            .body(arguments.to_string());
        for (header, var) in &self.headers {
            request = request.header(header.clone(), header_value(var)?);
        }
        let response = request.send().await.map_err(|e| self.failure(&e))?;
        let status = response.status();
        if let Some(length) = response.content_length()
            && length > MAX_ANSWER_BYTES as u64
        {
            return Err(format!("the response ({length} bytes) is larger than the {MAX_ANSWER_BYTES} bytes allowed"));
        }
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| self.failure(&e))?;
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(format!("the response is larger than the {MAX_ANSWER_BYTES} bytes allowed"));
            }
            body.extend_from_slice(&chunk);
        }
        let text = self.redact(&String::from_utf8_lossy(&body));
        if !status.is_success() {
            let why = if status.is_redirection() { " (redirects are not followed)" } else { "" };
            let quoted = envelope::head(&text, ERROR_BODY_QUOTE);
            let message = if quoted.is_empty() {
                format!("tool {name}: the server answered {status}{why}")
            } else {
                format!("tool {name}: the server answered {status}{why}: {quoted}")
            };
            return Ok(ToolOutcome::error(message).with_details(json!({"status": status.as_u16()})));
        }
        Ok(envelope::parse(name, &text))
    }

    fn failure(&self, e: &reqwest::Error) -> String {
        let timeout = self.timeout.as_secs();
        if let Some(refused) = outbound::http::refusal(e) {
            refused.to_string()
        } else if e.is_timeout() {
            format!("no answer within {timeout} s (timed out)")
        } else if e.is_connect() {
            format!("cannot connect to {}: {}", self.url, source_chain(e))
        } else {
            source_chain(e)
        }
    }
}

/// An error with its causes (`reqwest`'s own message is often only "error sending request").
fn source_chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

/// What a server answered, with the task's secrets and the values of the headers sent to it (a header name
/// and the worker's variable holding its value) replaced: done before an answer is cut, so that no piece of
/// a value is left at the cut.
pub(crate) fn redact_answer(secrets: &Secrets, headers: &[(HeaderName, String)], text: &str) -> String {
    let mut text = secrets.redact(text).into_owned();
    for (header, var) in headers {
        if let Ok(value) = std::env::var(var)
            && value.len() >= 4
            && text.contains(&value)
        {
            text = text.replace(&value, &format!("<header {header}>"));
        }
    }
    text
}

/// A header's value from environment variable `var`, marked sensitive; the error names the variable, never
/// a value.
pub(crate) fn header_value(var: &str) -> Result<HeaderValue, String> {
    let value = std::env::var(var).map_err(|e| match e {
        std::env::VarError::NotPresent => format!("the environment variable {var} is not set on this worker"),
        std::env::VarError::NotUnicode(_) => format!("the environment variable {var} is not valid UTF-8"),
    })?;
    let mut value = HeaderValue::from_str(&value)
        .map_err(|_| format!("the environment variable {var} holds characters an HTTP header cannot carry"))?;
    value.set_sensitive(true);
    Ok(value)
}

#[async_trait]
impl Tool for HttpRunner {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call(&self, arguments: serde_json::Value, context: ToolContext<'_>) -> ToolOutcome {
        tokio::select! {
            result = self.post(&arguments) => result.unwrap_or_else(|problem| {
                ToolOutcome::error(format!("tool {}: {problem}", self.spec.name))
            }),
            () = context.cancel.cancelled() => {
                ToolOutcome::error(format!("tool {}: cancelled", self.spec.name))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_util::sync::CancellationToken;

    /// A server that answers every request with `reply` (raw HTTP), or never when `reply` is empty.
    async fn server(reply: Vec<u8>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let reply = reply.clone();
                tokio::spawn(async move {
                    let mut buffer = [0u8; 4096];
                    let _ = stream.read(&mut buffer).await;
                    if reply.is_empty() {
                        tokio::time::sleep(Duration::from_secs(30)).await;
                    }
                    let _ = stream.write_all(&reply).await;
                });
            }
        });
        format!("http://{address}/tool")
    }

    fn tool(url: &str, timeout_secs: u64) -> Arc<dyn Tool> {
        let decl: ToolDecl = serde_json::from_value(json!({
            "name": "t", "description": "d", "kind": "http", "parameters": {"type": "object"},
            "url": url, "timeout_secs": timeout_secs,
        }))
        .unwrap();
        let crate::task::tools::ToolKind::Http(http) = &decl.kind else { panic!() };
        HttpRunner::make(&decl, http, "tools[0]", Outbound::open(), Secrets::none()).unwrap()
    }

    async fn call(tool: &dyn Tool) -> ToolOutcome {
        tool.call(json!({}), ToolContext { cancel: CancellationToken::new(), output: &|_| {} }).await
    }

    fn reply(status: &str, body: &str) -> Vec<u8> {
        format!("HTTP/1.1 {status}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}", body.len()).into_bytes()
    }

    #[tokio::test]
    async fn answers_failures_and_bounds() {
        let url = server(reply("200 OK", "pong\n")).await;
        assert_eq!(call(tool(&url, 5).as_ref()).await, ToolOutcome::ok("pong"));

        let url = server(reply("302 Found", "")).await;
        let outcome = call(tool(&url, 5).as_ref()).await;
        assert!(!outcome.ok && outcome.message.contains("302") && outcome.message.contains("redirects"), "{outcome:?}");

        let big = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", MAX_ANSWER_BYTES + 1).into_bytes();
        let outcome = call(tool(&server(big).await, 5).as_ref()).await;
        assert!(!outcome.ok && outcome.message.contains("larger than the 1048576 bytes"), "{outcome:?}");
        // Without a length, the bound is kept while reading.
        let mut chunked = b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n".to_vec();
        chunked.extend(std::iter::repeat_n(b'x', MAX_ANSWER_BYTES + 10));
        let outcome = call(tool(&server(chunked).await, 5).as_ref()).await;
        assert!(!outcome.ok && outcome.message.contains("larger than"), "{outcome:?}");

        let started = std::time::Instant::now();
        let outcome = call(tool(&server(Vec::new()).await, 1).as_ref()).await;
        assert!(!outcome.ok && outcome.message.contains("within 1 s"), "{outcome:?}");
        assert!(started.elapsed() < Duration::from_secs(5));

        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let outcome = call(tool(&format!("http://{closed}/x"), 5).as_ref()).await;
        assert!(!outcome.ok && outcome.message.contains("tool t: cannot connect"), "{outcome:?}");
    }

    fn tool_with(url: &str, outbound: Outbound, secrets: Secrets, headers: serde_json::Value) -> Arc<dyn Tool> {
        let decl: ToolDecl = serde_json::from_value(json!({
            "name": "t", "description": "d", "kind": "http", "parameters": {"type": "object"},
            "url": url, "timeout_secs": 5, "headers_env": headers,
        }))
        .unwrap();
        let crate::task::tools::ToolKind::Http(http) = &decl.kind else { panic!() };
        HttpRunner::make(&decl, http, "tools[0]", outbound, secrets).unwrap()
    }

    #[tokio::test]
    async fn a_restricted_tool_reaches_no_internal_address_and_quotes_nothing_of_it() {
        let url = server(reply("200 OK", "INTERNAL-S3CRET-42")).await;
        let port = url.trim_start_matches("http://127.0.0.1:").split('/').next().unwrap().to_string();
        let restricted = Outbound::restricted(&[]).unwrap();
        for url in [
            url.clone(),
            format!("http://localhost:{port}/tool"),
            format!("http://[::ffff:127.0.0.1]:{port}/tool"),
            format!("http://2130706433:{port}/tool"),
        ] {
            let outcome = call(tool_with(&url, restricted.clone(), Secrets::none(), json!({})).as_ref()).await;
            assert!(!outcome.ok, "{url}: {outcome:?}");
            assert!(outcome.message.contains("loopback address"), "{url}: {outcome:?}");
            assert!(!outcome.message.contains("INTERNAL"), "{url}: {outcome:?}");
        }
        // The operator's allow-list opens it.
        let allowed = Outbound::restricted(&["127.0.0.1".into()]).unwrap();
        let outcome = call(tool_with(&url, allowed, Secrets::none(), json!({})).as_ref()).await;
        assert_eq!(outcome, ToolOutcome::ok("INTERNAL-S3CRET-42"));
    }

    #[tokio::test]
    async fn an_answer_is_redacted_before_it_is_cut_and_echoed_headers_are_hidden() {
        use crate::task::secrets::SecretName;
        // The secret straddles the 500-byte cut of an error body.
        let secret = "ZebraQuartz-Secret-9";
        let body = format!("{}{secret} and more", "x".repeat(ERROR_BODY_QUOTE - 8));
        let url = server(reply("500 Internal Server Error", &body)).await;
        let secrets = Secrets::new(vec![(SecretName::parse("pw").unwrap(), secret.into())]).unwrap();
        let outcome = call(tool_with(&url, Outbound::open(), secrets, json!({})).as_ref()).await;
        assert!(!outcome.ok, "{outcome:?}");
        for fragment in ["ZebraQu", "Quartz", "Secret-9"] {
            assert!(!outcome.message.contains(fragment), "{fragment} survived the cut: {}", outcome.message);
        }
        // A server that echoes the header it was sent.
        // SAFETY: a variable of this test alone, set before the tool reads it.
        unsafe { std::env::set_var("AGENTD_UNIT_TEST_ECHOED_TOKEN", "Bearer tok-1234567") };
        let url = server(reply("200 OK", "you sent Bearer tok-1234567")).await;
        let outcome = call(
            tool_with(
                &url,
                Outbound::open(),
                Secrets::none(),
                json!({"Authorization": "AGENTD_UNIT_TEST_ECHOED_TOKEN"}),
            )
            .as_ref(),
        )
        .await;
        assert_eq!(outcome, ToolOutcome::ok("you sent <header authorization>"));
    }

    #[test]
    fn a_missing_header_variable_names_the_field() {
        let decl: ToolDecl = serde_json::from_value(json!({
            "name": "t", "description": "d", "kind": "http", "parameters": {"type": "object"},
            "url": "http://127.0.0.1:9/x", "headers_env": {"Authorization": "AGENTD_UNIT_TEST_UNSET_VAR"},
        }))
        .unwrap();
        let crate::task::tools::ToolKind::Http(http) = &decl.kind else { panic!() };
        let Err(e) = HttpRunner::make(&decl, http, "tools[3]", Outbound::open(), Secrets::none()) else {
            panic!("made")
        };
        assert_eq!(e.field, "tools[3].headers_env.Authorization");
        assert!(e.message.contains("AGENTD_UNIT_TEST_UNSET_VAR is not set"), "{e}");
    }
}
