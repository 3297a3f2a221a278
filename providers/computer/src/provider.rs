//! The `ComputerProvider` trait: what the agent loop asks of a computer, and how a computer says no.

use async_trait::async_trait;
use thiserror::Error;

use crate::action::{Action, Point, Size};
use crate::frame::Frame;

/// The page a browser computer shows: where it is and what it is called.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PageInfo {
    pub url: String,
    pub title: String,
}

/// A file the computer downloaded (a browser's download), handed to the loop to store with the step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Download {
    /// The file's name as the page named it (not yet made safe as a storage key).
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its content; `None` when it is larger than the provider keeps (then only its name and size are
    /// recorded).
    pub content: Option<Vec<u8>>,
}

/// What a performed action reports back beyond success.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActionReport {
    /// A note for the model (e.g. "pointer at 10,20"); empty when there is nothing to say.
    pub message: Option<String>,
    /// The pointer position, for `cursor_position`.
    pub cursor: Option<Point>,
}

/// Why a provider could not do what it was asked. The loop decides by kind, never by message:
/// [`ProviderError::is_tool_error`] errors (refused or uncertain actions) go back to the model and the task goes on;
/// [`ProviderError::Unavailable`] ends the attempt in a way the daemon may retry; [`ProviderError::Failed`]
/// ends it for good.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProviderError {
    /// The provider cannot perform this kind of action at all.
    #[error("{action} is not supported by the {provider} provider: {reason}")]
    Unsupported { provider: &'static str, action: &'static str, reason: String },
    /// The action's arguments are not acceptable (off-screen coordinates, unknown key, …).
    #[error("{0}")]
    InvalidAction(String),
    /// The computer cannot be reached right now (connection refused or dropped, display gone).
    #[error("computer unavailable: {0}")]
    Unavailable(String),
    /// Anything else that went wrong on the provider's side.
    #[error("computer failed: {0}")]
    Failed(String),
    /// The action was sent, its answer was lost, and the computer is back: whether it took effect is not
    /// known. The model is told (it sees the screen next) and the task goes on; the action is not repeated.
    #[error("not known whether the action took effect: {0}")]
    Uncertain(String),
    /// The action was not sent because the computer would not deliver it anywhere (e.g. keys on an X display
    /// with no focused window, through a server that sends them to the focused window). The model is told
    /// why and the task goes on.
    #[error("{0}")]
    NotDelivered(String),
}

impl ProviderError {
    /// Whether the model should be told and the task go on.
    pub fn is_tool_error(&self) -> bool {
        matches!(self, Self::Unsupported { .. } | Self::InvalidAction(_) | Self::Uncertain(_) | Self::NotDelivered(_))
    }

    /// Whether a later attempt (a reconnect, another worker) may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}

/// A computer agentd can see and operate: the mock desktop, the local X display, a VNC server.
///
/// Contract, checked by [`crate::conformance`]:
/// - `screenshot` returns a frame of exactly `screen_size`;
/// - `perform` receives input actions and `wait`/`cursor_position`; `screenshot` and `zoom` are built by the
///   loop from `screenshot` and never reach `perform`;
/// - an action the provider cannot do, or whose arguments are bad, is an `Unsupported`/`InvalidAction` error,
///   never a panic and never a dead connection; providers check coordinates and keys themselves too;
/// - every method may be called from several tasks at once.
#[async_trait]
pub trait ComputerProvider: Send + Sync {
    /// The provider's kind as written in a task file (`mock`, `local`, `vnc`).
    fn kind(&self) -> &'static str;

    /// The screen size in pixels; every coordinate of every action is in this space.
    async fn screen_size(&self) -> Result<Size, ProviderError>;

    /// A capture of the whole screen.
    async fn screenshot(&self) -> Result<Frame, ProviderError>;

    /// Performs one action. The caller has validated it against `screen_size`.
    async fn perform(&self, action: &Action) -> Result<ActionReport, ProviderError>;

    /// Whether the computer is reachable and usable now.
    async fn health(&self) -> Result<(), ProviderError> {
        self.screen_size().await.map(drop)
    }

    /// Whether a frame captured right after `perform` returns already shows everything the action changed,
    /// and nothing on the screen changes by itself (true for a deterministic in-memory desktop). The loop
    /// then takes the next screenshot at once instead of waiting for the screen to settle.
    fn frames_are_synchronous(&self) -> bool {
        false
    }

    /// Whether the computer is a browser: it carries out `navigate`, `back`, `forward` and `reload`, and
    /// shows pages ([`ComputerProvider::page`]). Model adapters then offer their vendors' browser modes.
    fn navigates(&self) -> bool {
        false
    }

    /// The page shown, for computers that show pages (a browser); `None` for desktops. Each step records it.
    async fn page(&self) -> Option<PageInfo> {
        None
    }

    /// The files downloaded since the last call, taken (a browser's downloads); none for desktops.
    async fn take_downloads(&self) -> Vec<Download> {
        Vec::new()
    }

    /// Clears what an earlier task left in the computer itself, for the next task on it (a desktop pool calls
    /// this between tasks): a browser disposes of the task's browser context — its pages, cookies, storage,
    /// cache and downloads — and opens a fresh one. Returns whether there was anything to clear: `false` for
    /// computers that keep no per-task state of their own (a desktop's is reset by the pool's `reset`
    /// command). An error means the computer is no longer usable (the pool opens it anew).
    async fn reset(&self) -> Result<bool, ProviderError> {
        Ok(false)
    }

    /// The provider's own record of its state for the task result (`computer_state`); `None` for real desktops.
    async fn state(&self) -> Option<serde_json::Value> {
        None
    }

    /// Runs a shell command inside the guest (for verifiers' `guest_command` checks): only providers whose
    /// computer runs commands for agentd (cua's computer-server) can; the others say `Unsupported`.
    async fn run_command(&self, command: &str) -> Result<GuestOutput, ProviderError> {
        let _ = command;
        Err(ProviderError::Unsupported {
            provider: self.kind(),
            action: "run_command",
            reason: "this computer does not run commands in its guest".into(),
        })
    }
}

/// What a command run in the guest printed, and its exit code (`None` when the guest did not say).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuestOutput {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: Option<i64>,
}

/// Performs `wait` the way every provider without a clock of its own does: by sleeping.
pub async fn sleep_for(action: &Action) -> Option<ActionReport> {
    if let Action::Wait { duration_ms } = action {
        tokio::time::sleep(std::time::Duration::from_millis(*duration_ms)).await;
        return Some(ActionReport::default());
    }
    None
}

/// What every computer but a browser answers to `navigate`, `back`, `forward` and `reload`: a tool error
/// naming the provider. `Ok` for every other action.
pub fn refuse_navigation(provider: &'static str, action: &Action) -> Result<(), ProviderError> {
    if action.is_navigation() {
        return Err(ProviderError::Unsupported {
            provider,
            action: action.kind(),
            reason: "pages are opened on a browser computer (computer.provider \"browser\"); here, use the \
                     desktop's own browser with clicks and keys"
                .into(),
        });
    }
    Ok(())
}

/// The check every provider makes before acting: coordinates on the screen and keys known.
pub fn check_action(action: &Action, screen: Size) -> Result<(), ProviderError> {
    action.validate(screen).map_err(|e| ProviderError::InvalidAction(e.to_string()))
}
