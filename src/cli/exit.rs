//! The error type that carries an exit code to `main` (the table itself is `crate::exit`).

use std::fmt;

pub use crate::exit::Exit;

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
