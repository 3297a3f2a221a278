//! Vocabulary: writing agentd's own files under `data_dir` (the queue's marker, screenshots, records, the
//! spool, the mock desktop's state) — atomically, and private to agentd (0600 files, 0700 directories)
//! whatever the process umask. Every layer that keeps files uses these two functions. The modes are Unix's;
//! on Windows the files inherit the ACL of `data_dir`.

use std::path::{Path, PathBuf};

/// Writes `bytes` to a temporary file beside `path`, then renames it into place: readers see the old file or
/// the new one, never half of one. The file is created 0600 and missing directories 0700, whatever the
/// process umask: what agentd keeps under `data_dir` (screenshots, records, the spool) is its own.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_private_dir_all(parent)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&tmp)?;
    file.write_all(bytes)?;
    drop(file);
    std::fs::rename(&tmp, path)
}

/// `create_dir_all` with 0700 for every directory it creates (existing ones are left as they are).
pub fn create_private_dir_all(path: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(path)
}
