//! The portable provider's errors, and how each becomes a `ProviderError` for the agent loop: what a retry
//! may cure (no input connection, a capture that failed because the session went away), what goes back to
//! the model (a key or button this platform's backend cannot produce), and what ends the task (a monitor
//! that does not exist).

use agentd_computer::ProviderError;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PortableError {
    /// enigo could not open its input connection (no X server, no permission for accessibility on macOS).
    #[error("cannot open the input connection of the portable provider: {0}")]
    Connect(String),
    /// Sending input failed (the session went away mid-action).
    #[error("sending input failed: {0}")]
    Input(String),
    /// xcap could not list the monitors or capture one.
    #[error("screen capture failed: {0}")]
    Capture(String),
    /// The configured monitor does not exist.
    #[error("monitor {index} does not exist (the session has {count}: 0..{count})")]
    NoMonitor { index: usize, count: usize },
    /// The action's arguments are wrong (an unknown key name, a drag without a path).
    #[error("{0}")]
    Invalid(String),
    /// enigo cannot produce this input on this platform (a key it has no name for, a button it lacks).
    #[error("{action} is not supported by the portable provider: {reason}")]
    Unsupported { action: &'static str, reason: String },
    /// The provider's input thread is gone (it panicked); nothing more can be done with this provider.
    #[error("the portable provider's input thread stopped")]
    WorkerGone,
}

impl From<PortableError> for ProviderError {
    fn from(e: PortableError) -> Self {
        match e {
            PortableError::Invalid(message) => ProviderError::InvalidAction(message),
            PortableError::Unsupported { action, reason } => {
                ProviderError::Unsupported { provider: "portable", action, reason }
            }
            e @ (PortableError::Connect(_) | PortableError::Input(_) | PortableError::Capture(_)) => {
                ProviderError::Unavailable(e.to_string())
            }
            e @ (PortableError::NoMonitor { .. } | PortableError::WorkerGone) => ProviderError::Failed(e.to_string()),
        }
    }
}

/// An enigo input error: a key enigo cannot map is the model's to hear about; anything else is the session.
pub(crate) fn input_error(action: &'static str, e: enigo::InputError) -> PortableError {
    match e {
        enigo::InputError::Mapping(_) | enigo::InputError::NoEmptyKeycodes | enigo::InputError::InvalidInput(_) => {
            PortableError::Unsupported { action, reason: e.to_string() }
        }
        other => PortableError::Input(other.to_string()),
    }
}
