//! The VNC provider's errors: which ones a retry may cure (the server is down or the connection dropped)
//! and which it cannot (a wrong password, a server speaking something else), and how each becomes a
//! `ProviderError` for the agent loop.

use agentd_computer::ProviderError;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum VncError {
    /// Nothing accepted the TCP connection (refused, unreachable, timed out).
    #[error("cannot connect to the VNC server at {address}: {reason}")]
    Connect { address: String, reason: String },
    /// The server closed the session before it was established, giving `reason` (RFB connection failure,
    /// e.g. "Too many security failures").
    #[error("the VNC server at {address} refused the session: {reason}")]
    Refused { address: String, reason: String },
    /// The server rejected the password.
    #[error("VNC authentication to {address} failed: {reason} (check the password)")]
    AuthFailed { address: String, reason: String },
    /// The server wants VNC authentication and no password was configured.
    #[error(
        "the VNC server at {address} requires a password; set computer.password_env to the name of an environment variable holding it"
    )]
    PasswordRequired { address: String },
    /// The server offers no security type this client speaks.
    #[error(
        "the VNC server at {address} offers security types {offered:?}; agentd supports 1 (None) and 2 (VNC authentication)"
    )]
    UnsupportedSecurity { address: String, offered: Vec<u8> },
    /// The established connection dropped (server killed or restarted, network gone).
    #[error("the connection to the VNC server at {address} was lost: {reason}")]
    Lost { address: String, reason: String },
    /// The server sent something this client cannot make sense of.
    #[error("the VNC server at {address} broke the RFB protocol: {reason}")]
    Protocol { address: String, reason: String },
    /// The action cannot be expressed in RFB or its arguments are wrong.
    #[error("{0}")]
    Invalid(String),
    /// The provider is shutting down.
    #[error("the VNC provider for {address} is closed")]
    Closed { address: String },
}

impl VncError {
    /// Whether trying again later may succeed (the server may come back).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Connect { .. } | Self::Refused { .. } | Self::Lost { .. })
    }
}

impl From<VncError> for ProviderError {
    fn from(e: VncError) -> Self {
        match &e {
            VncError::Invalid(message) => ProviderError::InvalidAction(message.clone()),
            _ if e.is_retryable() => ProviderError::Unavailable(e.to_string()),
            _ => ProviderError::Failed(e.to_string()),
        }
    }
}

/// A protocol problem found while reading, before the address is known to the reader.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    #[error("{0}")]
    Io(String),
    #[error("{0}")]
    Protocol(String),
}

impl From<std::io::Error> for WireError {
    fn from(e: std::io::Error) -> Self {
        match e.kind() {
            std::io::ErrorKind::UnexpectedEof => WireError::Io("the server closed the connection".into()),
            _ => WireError::Io(e.to_string()),
        }
    }
}

impl WireError {
    pub fn at(self, address: &str) -> VncError {
        match self {
            WireError::Io(reason) => VncError::Lost { address: address.to_string(), reason },
            WireError::Protocol(reason) => VncError::Protocol { address: address.to_string(), reason },
        }
    }
}
