//! The computer-server provider's errors: which ones a retry may cure (the server is down, restarting or
//! the connection dropped) and which it cannot (rejected credentials, a server speaking something else, a
//! command the server refused), and how each becomes a `ProviderError` for the agent loop.

use agentd_computer::ProviderError;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CuaError {
    /// Nothing accepted the connection (refused, unreachable, timed out) within the reconnect grace.
    #[error("cannot connect to the computer-server at {url}: {reason}")]
    Connect { url: String, reason: String },
    /// A request was sent and its answer never came (the server died or restarted during it).
    #[error("the connection to the computer-server at {url} was lost during {command}: {reason}")]
    Lost { url: String, command: String, reason: String },
    /// An input command was sent and its answer lost, and the server answered again within the reconnect
    /// grace: whether the command ran before the connection dropped is not known.
    #[error(
        "the connection to the computer-server at {url} was lost during {command} ({reason}); the server is back, but whether {command} took effect is not known"
    )]
    Uncertain { url: String, command: String, reason: String },
    /// The server answered 503: it is not ready (e.g. its container name is not configured yet).
    #[error("the computer-server at {url} is unavailable: {detail}")]
    Unavailable { url: String, detail: String },
    /// The server rejected the credentials (HTTP 401).
    #[error(
        "the computer-server at {url} refused the credentials: {detail} (check computer.api_key_env and computer.container_name)"
    )]
    Auth { url: String, detail: String },
    /// The server does not know the command (an older or other server).
    #[error("the computer-server at {url} does not know the command {command}: {detail}")]
    UnknownCommand { url: String, command: String, detail: String },
    /// The server ran the command and reported a failure.
    #[error("the computer-server at {url} failed {command}: {error}")]
    Command { url: String, command: String, error: String },
    /// The server has no `POST /cmd` (HTTP 404/405): an older server that speaks only `/ws`.
    #[error(
        "the computer-server at {url} has no POST /cmd (HTTP {status}); set computer.transport to \"websocket\" or \"auto\""
    )]
    NoCmdEndpoint { url: String, status: u16 },
    /// The server answered something this client cannot make sense of.
    #[error("the computer-server at {url} answered {command} with something unexpected: {reason}")]
    Protocol { url: String, command: String, reason: String },
    /// The action cannot be expressed with the server's commands, or its arguments are wrong.
    #[error("{0}")]
    Invalid(String),
    /// The action is not something the server can do (e.g. a mouse button it does not know).
    #[error("{action} is not supported by the computer-server provider: {reason}")]
    Unsupported { action: &'static str, reason: String },
    /// Keys were not sent: the machine's X display has no focused window for them (see
    /// [`crate::KeyboardFocus`]).
    #[error("nothing was sent: {}", focus.why_keys_go_nowhere(url, *characters))]
    NoKeyboardFocus { url: String, focus: crate::KeyboardFocus, characters: bool },
    /// The provider's configuration is unusable (a URL that is not http(s)).
    #[error("{0}")]
    Config(String),
    /// The task's outbound policy does not allow the server's address.
    #[error("{0}")]
    Refused(agentd_computer::outbound::OutboundError),
}

impl CuaError {
    /// Whether trying again later may succeed (the server may come back).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Connect { .. } | Self::Lost { .. } | Self::Unavailable { .. })
    }
}

impl From<CuaError> for ProviderError {
    fn from(e: CuaError) -> Self {
        match e {
            CuaError::Invalid(message) => ProviderError::InvalidAction(message),
            e @ CuaError::Uncertain { .. } => ProviderError::Uncertain(e.to_string()),
            e @ CuaError::NoKeyboardFocus { .. } => ProviderError::NotDelivered(e.to_string()),
            CuaError::Unsupported { action, reason } => {
                ProviderError::Unsupported { provider: "computer-server", action, reason }
            }
            e if e.is_retryable() => ProviderError::Unavailable(e.to_string()),
            e => ProviderError::Failed(e.to_string()),
        }
    }
}
