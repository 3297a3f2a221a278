//! The WebSocket transport: computer-server's `/ws` endpoint, the one older servers have beside or instead
//! of `POST /cmd`. One connection carries one command at a time: a JSON text message
//! `{"command", "params"}` out, the next text message back (`{"success", …}`, the same fields as a `/cmd`
//! data line). A server in cloud mode (`CONTAINER_NAME` set) wants `{"command": "authenticate", "params":
//! {"api_key", "container_name"}}` first. A dropped connection is made again by the next command; what a
//! drop means for the command in flight is the caller's (the provider's) decision, as for HTTP.
//!
//! TLS (`wss://` for an `https://` server) is tokio-rustls with aws-lc-rs and the platform's verifier, the
//! build's one TLS stack (async-tungstenite's own TLS features would bring a second verifier version).

use std::sync::Arc;
use std::time::Duration;

use async_tungstenite::tungstenite::Message;
use futures_util::{FutureExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::CuaError;

/// A byte stream a WebSocket runs over: plain TCP or TLS.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

type Socket = async_tungstenite::WebSocketStream<async_tungstenite::tokio::TokioAdapter<Box<dyn Io>>>;

/// The `/ws` connection of one provider, made on first use and again after a drop.
pub(crate) struct WsTransport {
    /// `ws://host:port/ws` or `wss://…`.
    url: String,
    /// `http(s)://host:port`, for error messages (the same the HTTP transport names).
    server: String,
    api_key: Option<String>,
    container_name: Option<String>,
    connect_timeout: Duration,
    request_timeout: Duration,
    outbound: agentd_computer::outbound::Outbound,
    socket: tokio::sync::Mutex<Option<Socket>>,
}

impl WsTransport {
    pub(crate) fn new(server: &str, config: &crate::CuaConfig) -> Self {
        let url = match server.strip_prefix("https://") {
            Some(rest) => format!("wss://{rest}/ws"),
            None => format!("ws://{}/ws", server.trim_start_matches("http://")),
        };
        Self {
            url,
            server: server.to_string(),
            api_key: config.api_key.clone(),
            container_name: config.container_name.clone(),
            connect_timeout: config.connect_timeout,
            request_timeout: config.request_timeout,
            outbound: config.outbound.clone(),
            socket: tokio::sync::Mutex::new(None),
        }
    }

    /// Sends one command and returns the server's reply object (its `success` not yet looked at).
    pub(crate) async fn call(&self, command: &str, params: &Value) -> Result<Value, CuaError> {
        let mut socket = self.socket.lock().await;
        // A connection the server closed meanwhile (a restart) is made again before the command is sent, so
        // that a command is only ever lost on a connection that was alive when it went out.
        if socket.as_mut().is_some_and(closed_meanwhile) {
            *socket = None;
        }
        if socket.is_none() {
            *socket = Some(self.open().await?);
        }
        let Some(open) = socket.as_mut() else {
            return Err(self.connect_error("no connection".into()));
        };
        let exchange = async {
            let message = json!({ "command": command, "params": params }).to_string();
            open.send(Message::text(message)).await.map_err(|e| e.to_string())?;
            next_reply(open).await
        };
        match tokio::time::timeout(self.request_timeout, exchange).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(reason)) => {
                *socket = None;
                Err(CuaError::Lost { url: self.server.clone(), command: command.to_string(), reason })
            }
            Err(_) => {
                *socket = None;
                Err(CuaError::Lost {
                    url: self.server.clone(),
                    command: command.to_string(),
                    reason: format!("no answer within {:?}", self.request_timeout),
                })
            }
        }
    }

    fn connect_error(&self, reason: String) -> CuaError {
        CuaError::Connect { url: self.server.clone(), reason }
    }

    /// Connects, upgrades to a WebSocket and authenticates when credentials are configured.
    async fn open(&self) -> Result<Socket, CuaError> {
        let opened = tokio::time::timeout(self.connect_timeout, self.handshake()).await;
        let mut socket = match opened {
            Ok(result) => result?,
            Err(_) => return Err(self.connect_error(format!("no WebSocket within {:?}", self.connect_timeout))),
        };
        if let Some(api_key) = &self.api_key {
            let hello = json!({"command": "authenticate", "params": {
                "api_key": api_key, "container_name": self.container_name.clone().unwrap_or_default()}});
            let answer = async {
                socket.send(Message::text(hello.to_string())).await.map_err(|e| e.to_string())?;
                next_reply(&mut socket).await
            };
            let reply = tokio::time::timeout(self.connect_timeout, answer)
                .await
                .map_err(|_| self.connect_error("no answer to authenticate".into()))?
                .map_err(|reason| self.connect_error(reason))?;
            if reply["success"] != true {
                let detail = reply["error"].as_str().unwrap_or("refused").to_string();
                return Err(CuaError::Auth { url: self.server.clone(), detail });
            }
        }
        Ok(socket)
    }

    async fn handshake(&self) -> Result<Socket, CuaError> {
        let (host, port, tls) = endpoint(&self.url).map_err(|e| CuaError::Config(e.to_string()))?;
        // Only to addresses the outbound policy allows, resolved here so the address connected is the one
        // checked.
        let addresses = self.outbound.resolve(&host, port).await.map_err(|e| match e {
            e @ agentd_computer::outbound::OutboundError::Refused { .. } => CuaError::Refused(e),
            e => self.connect_error(e.to_string()),
        })?;
        let tcp = tokio::net::TcpStream::connect(addresses.as_slice())
            .await
            .map_err(|e| self.connect_error(e.to_string()))?;
        let _ = tcp.set_nodelay(true);
        let stream: Box<dyn Io> = if tls {
            let config = tls_config().map_err(|e| self.connect_error(format!("TLS setup: {e}")))?;
            let name = rustls::pki_types::ServerName::try_from(host.clone())
                .map_err(|e| CuaError::Config(format!("{host:?} is not a TLS server name: {e}")))?;
            let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
            Box::new(connector.connect(name, tcp).await.map_err(|e| self.connect_error(format!("TLS: {e}")))?)
        } else {
            Box::new(tcp)
        };
        let (socket, _) = async_tungstenite::tokio::client_async(self.url.as_str(), stream).await.map_err(|e| {
            match e {
                // A server without `/ws` answers the upgrade with 404: a protocol mismatch, not an outage.
                async_tungstenite::tungstenite::Error::Http(response) => CuaError::Protocol {
                    url: self.server.clone(),
                    command: "/ws".into(),
                    reason: format!("the WebSocket upgrade was answered with HTTP {}", response.status()),
                },
                other => self.connect_error(other.to_string()),
            }
        })?;
        Ok(socket)
    }
}

/// Whether the server closed the connection while it was idle (seen without waiting). Between commands the
/// server sends nothing, so anything ready now is the end of the connection.
fn closed_meanwhile(socket: &mut Socket) -> bool {
    match socket.next().now_or_never() {
        None => false,
        Some(None | Some(Err(_)) | Some(Ok(Message::Close(_)))) => true,
        Some(Some(Ok(_))) => false,
    }
}

/// The next text message as a JSON object; control frames are skipped.
async fn next_reply(socket: &mut Socket) -> Result<Value, String> {
    loop {
        match socket.next().await {
            None => return Err("the server closed the WebSocket".into()),
            Some(Err(e)) => return Err(e.to_string()),
            Some(Ok(Message::Text(text))) => {
                let value: Value =
                    serde_json::from_str(text.as_str()).map_err(|e| format!("a reply that is not JSON: {e}"))?;
                if !value.is_object() {
                    return Err("a reply that is not a JSON object".into());
                }
                return Ok(value);
            }
            Some(Ok(Message::Close(_))) => return Err("the server closed the WebSocket".into()),
            Some(Ok(_)) => continue,
        }
    }
}

/// Host, port and whether TLS is used, from a `ws(s)://host[:port]/ws` URL.
fn endpoint(url: &str) -> Result<(String, u16, bool), String> {
    let (rest, tls, default_port) = match url.strip_prefix("wss://") {
        Some(rest) => (rest, true, 443),
        None => (url.strip_prefix("ws://").ok_or_else(|| format!("{url} is not a ws:// URL"))?, false, 80),
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || authority.starts_with('[') => match port.parse::<u16>() {
            Ok(port) => (host, port),
            Err(_) => (authority, default_port),
        },
        _ => (authority, default_port),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("{url} has no host"));
    }
    Ok((host.to_string(), port, tls))
}

fn tls_config() -> Result<rustls::ClientConfig, rustls::Error> {
    use rustls_platform_verifier::BuilderVerifierExt;
    Ok(rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_platform_verifier()?
        .with_no_client_auth())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_of_ws_urls() {
        assert_eq!(endpoint("ws://10.0.0.5:8000/ws").unwrap(), ("10.0.0.5".into(), 8000, false));
        assert_eq!(endpoint("wss://box.example/ws").unwrap(), ("box.example".into(), 443, true));
        assert_eq!(endpoint("ws://[::1]:8000/ws").unwrap(), ("::1".into(), 8000, false));
        assert!(endpoint("http://x/ws").is_err());
        assert!(endpoint("ws:///ws").is_err());
    }

    #[test]
    fn the_ws_url_follows_the_server_url() {
        let http = WsTransport::new("http://127.0.0.1:8000", &crate::CuaConfig::new("http://127.0.0.1:8000"));
        assert_eq!(http.url, "ws://127.0.0.1:8000/ws");
        let https = WsTransport::new("https://box.example", &crate::CuaConfig::new("https://box.example"));
        assert_eq!(https.url, "wss://box.example/ws");
    }
}
