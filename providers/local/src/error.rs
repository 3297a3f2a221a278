//! The local provider's errors, and how each maps onto the `ProviderError` kinds the agent loop acts on.

use agentd_computer::ProviderError;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LocalError {
    /// No X server answers on the display (not started, gone, or refusing us).
    #[error("cannot connect to X display {display}: {reason}")]
    Connect { display: String, reason: String },
    /// The connection to the X server broke while in use (the server exited or was killed).
    #[error("the X display {display} went away: {reason}")]
    Gone { display: String, reason: String },
    /// The server lacks an extension the provider cannot work without.
    #[error("the X server on {display} lacks the {extension} extension")]
    MissingExtension { display: String, extension: &'static str },
    /// The configured monitor does not exist.
    #[error("monitor {index} does not exist on {display}; it has {count} monitor(s): {names}")]
    NoSuchMonitor { display: String, index: usize, count: usize, names: String },
    /// The screen uses a pixel layout the capture code does not decode.
    #[error("unsupported X pixel format: {0}")]
    PixelFormat(String),
    /// The X server rejected a request (an X protocol error).
    #[error("the X server rejected a request: {0}")]
    Request(String),
    /// The action cannot be done as asked (off-screen coordinates, unknown key, too many keys at once).
    #[error("{0}")]
    Invalid(String),
    /// The X server did not answer in time (it hangs or is stopped).
    #[error("the X server on {display} did not answer within {seconds} s")]
    Timeout { display: String, seconds: u64 },
    /// The provider's worker thread stopped (it panicked); the provider must be rebuilt.
    #[error("the X worker thread stopped")]
    WorkerStopped,
}

impl From<LocalError> for ProviderError {
    fn from(e: LocalError) -> Self {
        match e {
            LocalError::Invalid(message) => ProviderError::InvalidAction(message),
            LocalError::Connect { .. } | LocalError::Gone { .. } | LocalError::Timeout { .. } => {
                ProviderError::Unavailable(e.to_string())
            }
            LocalError::NoSuchMonitor { .. } => ProviderError::Failed(e.to_string()),
            LocalError::MissingExtension { .. }
            | LocalError::PixelFormat(_)
            | LocalError::Request(_)
            | LocalError::WorkerStopped => ProviderError::Failed(e.to_string()),
        }
    }
}
