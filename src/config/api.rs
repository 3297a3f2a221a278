//! `[api]`: the daemon's HTTP API — its Unix socket, the TCP listener with its bearer token and TLS, the
//! connection bounds and timeouts, and the files tasks submitted over it may name; reading the token file and
//! warning about secret files every local user may read. `[console]`: what the web console serves.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ApiConfig {
    /// The Unix socket the API listens on (mode 0660). Default: `$RUNTIME_DIRECTORY/agentd.sock`, else
    /// `/run/agentd/agentd.sock` as root, else `$XDG_RUNTIME_DIR/agentd/agentd.sock`, else under `data_dir`.
    pub socket: Option<PathBuf>,
    /// An optional TCP address (`127.0.0.1:8787`); requires `token_file`.
    pub listen: Option<String>,
    /// A file holding the bearer token TCP clients must send.
    pub token_file: Option<PathBuf>,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Host names accepted in the `Host` header of TCP requests, besides localhost and the listen address.
    pub allowed_hosts: Vec<String>,
    /// Directories whose files (mock scenes, model scripts) tasks submitted over the API may name, by
    /// absolute path. Empty (the default): such tasks name no files (`agentd submit` inlines its scripts).
    pub allowed_paths: Vec<PathBuf>,
    /// Files, or directories of files, that tasks submitted over the API may name as a secret's `file`.
    /// Empty (the default): such tasks take secrets from `[worker] allowed_env` variables only. Apart from
    /// `allowed_paths` on purpose: a file readable there is not thereby meant to be sent anywhere.
    pub allowed_secret_paths: Vec<PathBuf>,
    /// A connection must send a complete request head within this many seconds of opening, or of its previous
    /// response (so it is also the idle keep-alive timeout), or it is closed.
    pub header_timeout_secs: u64,
    /// A request body must arrive whole within this many seconds (408 past it).
    pub body_timeout_secs: u64,
    /// A response write that makes no progress for this many seconds ends its connection (a client that
    /// stopped reading, an event stream nobody drains).
    pub write_timeout_secs: u64,
    /// Open connections served at once, the socket and TCP together; more wait in the listen backlog.
    pub max_connections: usize,
    /// A PEM file with the TCP listener's certificate chain (leaf first): with `tls_key`, the listener speaks
    /// HTTPS only. Both files are read again on SIGHUP.
    pub tls_cert: Option<PathBuf>,
    /// A PEM file with the private key of `tls_cert` (PKCS#8, PKCS#1 or SEC1).
    pub tls_key: Option<PathBuf>,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            socket: None,
            listen: None,
            token_file: None,
            max_body_bytes: 1024 * 1024,
            allowed_hosts: Vec::new(),
            allowed_paths: Vec::new(),
            allowed_secret_paths: Vec::new(),
            header_timeout_secs: 10,
            body_timeout_secs: 30,
            write_timeout_secs: 30,
            max_connections: 256,
            tls_cert: None,
            tls_key: None,
        }
    }
}

/// Shortest bearer token `api.token_file` may hold.
pub const MIN_TOKEN_CHARS: usize = 16;

/// Reads the bearer token of `api.token_file` (the file's text, trimmed) as `serve` uses it. Errors name the
/// key and the file, never the token.
pub fn read_token_file(path: &Path) -> Result<String, String> {
    let token = std::fs::read_to_string(path)
        .map_err(|e| format!("api.token_file {}: {e}", path.display()))?
        .trim()
        .to_string();
    if token.chars().count() < MIN_TOKEN_CHARS {
        return Err(format!(
            "api.token_file {}: the token must have at least {MIN_TOKEN_CHARS} characters",
            path.display()
        ));
    }
    Ok(token)
}

/// `[console]` (docs/console.md): the web console's live view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleConfig {
    /// The most frames a second the live view of a running task sends (`GET /v1/tasks/{id}/live`), 1 to 30;
    /// none while the screen does not change.
    pub live_fps: u32,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        Self { live_fps: 10 }
    }
}

/// The most frames a second `[console] live_fps` may ask for.
pub const MAX_LIVE_FPS: u32 = 30;

/// Windows has no file mode bits to check (its ACLs are the operator's to set).
#[cfg(not(unix))]
pub fn world_readable_warning(_key: &str, _path: &Path) -> Option<String> {
    None
}

/// A warning when a secret's file may be read by every local user (mode `o+r`), else `None`.
#[cfg(unix)]
pub fn world_readable_warning(key: &str, path: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode();
    (mode & 0o004 != 0).then(|| {
        format!(
            "{key} {} is readable by every local user (mode {:o}); make it 0600 or 0640 (chmod o-rwx)",
            path.display(),
            mode & 0o777
        )
    })
}
