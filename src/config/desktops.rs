//! `[[desktops]]`, the desktop pool the workers lease desktops from (docs/providers.md): each desktop's
//! computer, name, labels and lifecycle commands; and `[settle]`, how the loop waits for a desktop's screen
//! after acting.

use serde::{Deserialize, Serialize};

/// One desktop of the pool (`[[desktops]]`, docs/providers.md): a computer with a name and labels, and the commands the
/// workers run around its tasks, each bounded by `timeout_secs`: `setup` when the daemon starts, `reset`
/// before each task that did not run on it last, `teardown` when the daemon stops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DesktopConfig {
    pub name: crate::task::DesktopName,
    pub computer: crate::task::ComputerSpec,
    #[serde(default)]
    pub labels: Vec<crate::task::DesktopName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<HookCommand>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset: Option<HookCommand>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub teardown: Option<HookCommand>,
    /// Seconds each of its commands may run before its process group is killed and the command failed.
    #[serde(default = "default_hook_timeout")]
    pub timeout_secs: u64,
}

impl DesktopConfig {
    /// Whether this desktop serves a task's pool request (docs/providers.md): its name, or every label asked for.
    pub fn serves(&self, request: &crate::task::DesktopSpec) -> bool {
        request.matches(self.name.as_str(), self.labels.iter().map(|l| l.as_str()))
    }
}

fn default_hook_timeout() -> u64 {
    120
}

/// A desktop's lifecycle command: a string for `sh -c`, or a program and its arguments (no shell), run on the
/// daemon's machine; or `{guest = "…"}`, a command run inside the desktop through its computer
/// (`ComputerProvider::run_command`: cua computer-server machines).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum HookCommand {
    Shell(String),
    Argv(Vec<String>),
    Guest(GuestCommand),
}

/// `{guest = "…"}`: a command the desktop's computer runs in its guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GuestCommand {
    pub guest: String,
}

impl HookCommand {
    /// The program and its arguments on the daemon's machine; `None` for a guest command.
    pub fn argv(&self) -> Option<Vec<String>> {
        match self {
            Self::Shell(script) => Some(vec!["sh".into(), "-c".into(), script.clone()]),
            Self::Argv(argv) => Some(argv.clone()),
            Self::Guest(_) => None,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        match self {
            Self::Shell(script) | Self::Guest(GuestCommand { guest: script }) => script.trim().is_empty(),
            Self::Argv(argv) => argv.first().is_none_or(|p| p.is_empty()),
        }
    }
}

/// How the loop waits for the screen after acting (`[settle]` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SettlePolicy {
    /// Settle at all (false: take the next screenshot right after the actions).
    pub enabled: bool,
    /// How long the screen must stay unchanged, in milliseconds.
    pub quiet_ms: u64,
    /// How often to look, in milliseconds.
    pub interval_ms: u64,
    /// The longest to wait, in milliseconds; the screen is then taken as it is.
    pub timeout_ms: u64,
    /// Changed pixels that still count as "unchanged" (a caret, a pointer).
    pub tolerance_pixels: u64,
}

impl Default for SettlePolicy {
    fn default() -> Self {
        Self { enabled: true, quiet_ms: 100, interval_ms: 25, timeout_ms: 3000, tolerance_pixels: 256 }
    }
}
