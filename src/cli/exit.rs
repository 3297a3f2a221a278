//! The exit codes of every command (product contract §2), and the error type that carries one.

use std::fmt;

/// `0` success; `1` the task ended without success; `2` invalid input; `3` the daemon or a backend could
/// not be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Success = 0,
    Unsuccessful = 1,
    InvalidInput = 2,
    Unreachable = 3,
}

impl Exit {
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// An error at the binary's edge: the message chain to print and the exit code it maps to.
#[derive(Debug)]
pub struct CliError {
    pub exit: Exit,
    pub error: anyhow::Error,
}

impl CliError {
    pub fn invalid(error: impl Into<anyhow::Error>) -> Self {
        Self { exit: Exit::InvalidInput, error: error.into() }
    }

    pub fn unreachable(error: impl Into<anyhow::Error>) -> Self {
        Self { exit: Exit::Unreachable, error: error.into() }
    }

    pub fn failed(error: impl Into<anyhow::Error>) -> Self {
        Self { exit: Exit::Unsuccessful, error: error.into() }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.error)
    }
}

impl From<crate::config::ConfigError> for CliError {
    fn from(e: crate::config::ConfigError) -> Self {
        Self::invalid(e)
    }
}

impl From<crate::task::TaskFileError> for CliError {
    fn from(e: crate::task::TaskFileError) -> Self {
        Self::invalid(e)
    }
}

pub type CliResult<T = Exit> = Result<T, CliError>;
