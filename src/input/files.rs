//! Files a task names (mock scene files, model scripts): where they may be, and the one way they are read.
//! (`Config::file_access` says which an API task may name.)
//!
//! Every file a task names is read by [`read_text`] (off the async runtime, with a timeout) or, outside a
//! runtime, [`read_text_blocking`]: only a regular file (a FIFO, a device or a directory is refused before
//! anything is read from it, so `/dev/zero` cannot grow memory and a FIFO cannot block), at most
//! [`MAX_FILE_BYTES`].
//!
//! [`FileAccess`] says which paths a task may name. `agentd run` reads the user's own files (relative paths
//! resolve against the task file's directory). A task submitted over the API is untrusted: its paths must be
//! absolute, lie under a directory of `[api] allowed_paths` once symbolic links are resolved (none by
//! default) or be one the config names itself (`[defaults]`), and errors about them never quote the file's content ([`redact`]), so the daemon — often root —
//! is neither a reader of files its callers cannot read nor an oracle of which files exist.

use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use thiserror::Error;

/// The largest file a task may name (4 MiB): scenes and scripts are a few kilobytes.
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// The longest a read of a task-named file may take (a hung network filesystem).
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a file a task names cannot be used.
#[derive(Debug, Error)]
pub enum FileError {
    #[error("path {path:?} must be absolute when submitted to the daemon")]
    Relative { path: String },
    #[error("path {path:?} is not under a directory the daemon allows files from (`api.allowed_paths` in its config)")]
    NotAllowed { path: String },
    #[error("path {path:?} leads out of the allowed directories, or to nothing (a symbolic link)")]
    Escapes { path: String },
    #[error("cannot read {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{} is not a regular file (it is a {kind})", path.display())]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error("{} is larger than {MAX_FILE_BYTES} bytes", path.display())]
    TooLarge { path: PathBuf },
    #[error("{} is not valid UTF-8", path.display())]
    NotUtf8 { path: PathBuf },
    #[error("reading {} took longer than {} s", path.display(), READ_TIMEOUT.as_secs())]
    TimedOut { path: PathBuf },
}

impl FileError {
    /// The error as an `io::Error` whose message does not repeat the path (for errors that name it already).
    pub fn into_io(self) -> std::io::Error {
        use std::io::{Error, ErrorKind};
        match self {
            Self::Io { source, .. } => source,
            Self::NotRegular { kind, .. } => {
                Error::new(ErrorKind::InvalidInput, format!("not a regular file (it is a {kind})"))
            }
            Self::TooLarge { .. } => Error::new(ErrorKind::FileTooLarge, format!("larger than {MAX_FILE_BYTES} bytes")),
            Self::NotUtf8 { .. } => Error::new(ErrorKind::InvalidData, "not valid UTF-8"),
            Self::TimedOut { .. } => {
                Error::new(ErrorKind::TimedOut, format!("took longer than {} s", READ_TIMEOUT.as_secs()))
            }
            other @ (Self::Relative { .. } | Self::NotAllowed { .. } | Self::Escapes { .. }) => {
                Error::new(ErrorKind::PermissionDenied, other.to_string())
            }
        }
    }
}

/// Which files a task may name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileAccess {
    /// `agentd run`: the user's own files; relative paths resolve against `base_dir` (the task file's).
    Local { base_dir: PathBuf },
    /// A task from the API: absolute paths under one of `allowed` (after resolving symbolic links) only, and
    /// the paths the config itself names (`configured`: `[defaults]`'s scene and script), as written.
    Api { allowed: Vec<PathBuf>, configured: Vec<String> },
}

impl FileAccess {
    /// Whether errors about this file may quote its content (only the user's own files).
    pub fn may_quote(&self) -> bool {
        matches!(self, Self::Local { .. })
    }

    /// The file `path` (as the task wrote it) names, if the task may name it. Blocking: for an API task it
    /// resolves symbolic links.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, FileError> {
        match self {
            Self::Local { base_dir } => {
                let p = Path::new(path);
                Ok(if p.is_absolute() { p.to_path_buf() } else { base_dir.join(p) })
            }
            Self::Api { configured, .. } if configured.iter().any(|c| c == path) => Ok(PathBuf::from(path)),
            Self::Api { allowed, .. } => resolve_allowed(path, allowed),
        }
    }

    /// Resolves `path` and reads the file, off the async runtime and within [`READ_TIMEOUT`]. Returns the
    /// file's path (for messages) and its text.
    pub async fn read(&self, path: &str) -> Result<(PathBuf, String), FileError> {
        let access = self.clone();
        let named = path.to_string();
        off_runtime(PathBuf::from(path), READ_TIMEOUT, move || {
            let file = access.resolve(&named)?;
            let text = read_text_blocking(&file)?;
            Ok((file, text))
        })
        .await
    }
}

/// An API task's path: absolute, without `..`, lexically under an allowed directory (as configured or
/// canonical), and still under one once every symbolic link is resolved. Nothing about a path outside the
/// allowed directories is looked up, so the answer says nothing about whether it exists.
fn resolve_allowed(path: &str, allowed: &[PathBuf]) -> Result<PathBuf, FileError> {
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(FileError::Relative { path: path.to_string() });
    }
    let not_allowed = || FileError::NotAllowed { path: path.to_string() };
    if p.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(not_allowed());
    }
    let roots: Vec<PathBuf> = allowed
        .iter()
        .filter(|dir| dir.is_absolute())
        .flat_map(|dir| [Some(dir.clone()), std::fs::canonicalize(dir).ok()])
        .flatten()
        .collect();
    if !roots.iter().any(|root| p.starts_with(root)) {
        return Err(not_allowed());
    }
    let real_roots: Vec<PathBuf> = allowed.iter().filter_map(|dir| std::fs::canonicalize(dir).ok()).collect();
    let inside = |real: &Path| real_roots.iter().any(|root| real.starts_with(root));
    match std::fs::canonicalize(p) {
        Ok(real) if inside(&real) => Ok(real),
        Ok(_) => Err(FileError::Escapes { path: path.to_string() }),
        Err(source) => {
            // Whether a file behind a link out of the allowed directories exists is not said either: a path
            // through a symbolic link that leads nowhere gets the same answer as one that leads outside.
            let through_link = p
                .ancestors()
                .take_while(|a| roots.iter().any(|root| a.starts_with(root) && *a != root.as_path()))
                .any(|a| std::fs::symlink_metadata(a).is_ok_and(|m| m.file_type().is_symlink()));
            if through_link {
                return Err(FileError::Escapes { path: path.to_string() });
            }
            let nearest = p.ancestors().skip(1).find_map(|a| std::fs::canonicalize(a).ok());
            match nearest {
                Some(real) if inside(&real) => Err(FileError::Io { path: p.to_path_buf(), source }),
                _ => Err(FileError::Escapes { path: path.to_string() }),
            }
        }
    }
}

/// Reads a task-named file: a regular file of at most [`MAX_FILE_BYTES`], as UTF-8. See [`read_bytes_blocking`].
pub fn read_text_blocking(path: &Path) -> Result<String, FileError> {
    String::from_utf8(read_bytes_blocking(path)?).map_err(|_| FileError::NotUtf8 { path: path.to_path_buf() })
}

/// Reads a task-named file: a regular file of at most [`MAX_FILE_BYTES`]. The file is checked before it is
/// opened and again through the open descriptor (opened non-blocking, so opening a FIFO put in its place does
/// not wait for a writer).
pub fn read_bytes_blocking(path: &Path) -> Result<Vec<u8>, FileError> {
    let io = |source| FileError::Io { path: path.to_path_buf(), source };
    let check = |meta: &std::fs::Metadata| {
        if !meta.file_type().is_file() {
            return Err(FileError::NotRegular { path: path.to_path_buf(), kind: kind_of(&meta.file_type()) });
        }
        if meta.len() > MAX_FILE_BYTES {
            return Err(FileError::TooLarge { path: path.to_path_buf() });
        }
        Ok(())
    };
    check(&std::fs::metadata(path).map_err(io)?)?;
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NONBLOCK | libc::O_NOCTTY);
    let file = options.open(path).map_err(io)?;
    check(&file.metadata().map_err(io)?)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(FileError::TooLarge { path: path.to_path_buf() });
    }
    Ok(bytes)
}

/// Reads at most [`MAX_FILE_BYTES`] from a stream (standard input).
pub fn read_stream(stream: impl Read) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    stream.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(std::io::Error::new(std::io::ErrorKind::FileTooLarge, format!("more than {MAX_FILE_BYTES} bytes")));
    }
    Ok(bytes)
}

/// [`read_text_blocking`] off the async runtime, within [`READ_TIMEOUT`].
pub async fn read_text(path: &Path) -> Result<String, FileError> {
    let file = path.to_path_buf();
    off_runtime(path.to_path_buf(), READ_TIMEOUT, move || read_text_blocking(&file)).await
}

/// Runs a blocking read on the blocking pool; past `timeout` the caller gets [`FileError::TimedOut`] (the
/// thread finishes on its own).
async fn off_runtime<T: Send + 'static>(
    path: PathBuf,
    timeout: Duration,
    read: impl FnOnce() -> Result<T, FileError> + Send + 'static,
) -> Result<T, FileError> {
    match tokio::time::timeout(timeout, tokio::task::spawn_blocking(read)).await {
        Ok(Ok(result)) => result,
        Ok(Err(join)) => Err(FileError::Io { path, source: std::io::Error::other(join.to_string()) }),
        Err(_) => Err(FileError::TimedOut { path }),
    }
}

/// Windows has directories and special files only (no FIFOs or devices in the file system).
#[cfg(not(unix))]
fn kind_of(file_type: &std::fs::FileType) -> &'static str {
    if file_type.is_dir() { "directory" } else { "special file" }
}

#[cfg(unix)]
fn kind_of(file_type: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_dir() {
        "directory"
    } else if file_type.is_fifo() {
        "FIFO"
    } else if file_type.is_char_device() {
        "character device"
    } else if file_type.is_block_device() {
        "block device"
    } else if file_type.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

/// A message about a file's content with every quoted piece of that content (`"…"`, `` `…` ``: what serde
/// and our checks quote of the values, keys and names they saw) replaced by `…`.
pub fn redact(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut chars = message.chars();
    while let Some(c) = chars.next() {
        if c == '"' || c == '`' {
            out.push(c);
            out.push('…');
            let mut escaped = false;
            for inner in chars.by_ref() {
                match (escaped, inner) {
                    (false, '\\') => escaped = true,
                    (false, end) if end == c => break,
                    _ => escaped = false,
                }
            }
            out.push(c);
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_are_read_and_everything_else_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("scene.json");
        std::fs::write(&file, "{\"screens\": []}").unwrap();
        assert_eq!(read_text_blocking(&file).unwrap(), "{\"screens\": []}");

        // A FIFO with no writer: refused at once (before: the open blocked until someone wrote).
        let fifo = dir.path().join("fifo");
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        assert!(matches!(read_text_blocking(&fifo), Err(FileError::NotRegular { kind: "FIFO", .. })));

        assert!(matches!(
            read_text_blocking(Path::new("/dev/zero")),
            Err(FileError::NotRegular { kind: "character device", .. })
        ));
        assert!(matches!(read_text_blocking(dir.path()), Err(FileError::NotRegular { kind: "directory", .. })));

        let big = dir.path().join("big.json");
        std::fs::write(&big, vec![b' '; MAX_FILE_BYTES as usize + 1]).unwrap();
        assert!(matches!(read_text_blocking(&big), Err(FileError::TooLarge { .. })));
        std::fs::write(&big, vec![b' '; MAX_FILE_BYTES as usize]).unwrap();
        assert!(read_text_blocking(&big).is_ok());

        std::fs::write(&big, b"\xff\xfe").unwrap();
        assert!(matches!(read_text_blocking(&big), Err(FileError::NotUtf8 { .. })));
    }

    #[tokio::test]
    async fn a_read_that_hangs_times_out() {
        // (spawn_blocking work holds tokio's paused clock still, so this one runs on the real clock.)
        let slow = off_runtime(PathBuf::from("/slow"), Duration::from_millis(50), || {
            std::thread::sleep(Duration::from_secs(1));
            Ok(())
        });
        assert!(matches!(slow.await, Err(FileError::TimedOut { .. })));
    }

    #[test]
    fn api_paths_stay_inside_the_allowed_directories() {
        let root = tempfile::tempdir().unwrap();
        let allowed = root.path().join("scenes");
        let outside = root.path().join("secret");
        std::fs::create_dir_all(&allowed).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(allowed.join("ok.json"), "{}").unwrap();
        std::fs::write(outside.join("key.json"), "{}").unwrap();
        std::os::unix::fs::symlink(outside.join("key.json"), allowed.join("link.json")).unwrap();
        let access = FileAccess::Api { allowed: vec![allowed.clone()], configured: Vec::new() };
        let path = |p: &Path| p.to_str().unwrap().to_string();

        assert!(access.resolve(&path(&allowed.join("ok.json"))).is_ok());
        assert!(matches!(access.resolve("ok.json"), Err(FileError::Relative { .. })));
        assert!(matches!(access.resolve(&path(&outside.join("key.json"))), Err(FileError::NotAllowed { .. })));
        // An existing and a missing file outside get the same answer.
        assert!(matches!(access.resolve(&path(&outside.join("nope.json"))), Err(FileError::NotAllowed { .. })));
        assert!(matches!(
            access.resolve(&path(&allowed.join("../secret/key.json"))),
            Err(FileError::NotAllowed { .. })
        ));
        assert!(matches!(access.resolve(&path(&allowed.join("link.json"))), Err(FileError::Escapes { .. })));
        // A link to a missing file outside gets the same answer as a link to an existing one.
        std::os::unix::fs::symlink(outside.join("nope.json"), allowed.join("dangling.json")).unwrap();
        assert!(matches!(access.resolve(&path(&allowed.join("dangling.json"))), Err(FileError::Escapes { .. })));
        // Through a linked directory, an existing and a missing file outside get the same answer.
        std::os::unix::fs::symlink(&outside, allowed.join("out")).unwrap();
        assert!(matches!(access.resolve(&path(&allowed.join("out/key.json"))), Err(FileError::Escapes { .. })));
        assert!(matches!(access.resolve(&path(&allowed.join("out/nope.json"))), Err(FileError::Escapes { .. })));
        assert!(matches!(access.resolve(&path(&allowed.join("nope.json"))), Err(FileError::Io { .. })));
        // No directory allowed: no path at all.
        let none = FileAccess::Api { allowed: Vec::new(), configured: Vec::new() };
        assert!(matches!(none.resolve(&path(&allowed.join("ok.json"))), Err(FileError::NotAllowed { .. })));
        // What the config names itself (a `[defaults]` scene) is the operator's choice.
        let configured = FileAccess::Api { allowed: Vec::new(), configured: vec![path(&outside.join("key.json"))] };
        assert_eq!(configured.resolve(&path(&outside.join("key.json"))).unwrap(), outside.join("key.json"));
        // A local run reads what its user names.
        let local = FileAccess::Local { base_dir: outside.clone() };
        assert_eq!(local.resolve("key.json").unwrap(), outside.join("key.json"));
    }

    #[test]
    fn redaction_removes_quoted_content() {
        assert_eq!(
            redact("screens: invalid type: string \"AKIA-123\\\"x\", expected a sequence"),
            "screens: invalid type: string \"…\", expected a sequence"
        );
        assert_eq!(redact("unknown field `aws_key`, expected `name`"), "unknown field `…`, expected `…`");
        assert_eq!(redact("invalid type: integer `12345`"), "invalid type: integer `…`");
        assert_eq!(redact("EOF while parsing"), "EOF while parsing");
    }
}
