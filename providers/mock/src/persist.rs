//! Saving a desktop to a directory so that it survives its process: `actions.jsonl` (every action received,
//! one JSON line each, appended and flushed before the action returns) and `state.json` (a snapshot of the
//! whole desktop state, replaced atomically by write-then-rename every [`SNAPSHOT_EVERY`] actions — a new
//! file per action made the filesystem's inode allocator the bottleneck of a busy daemon).
//!
//! A process killed at any point leaves a usable directory: a partly written last line of the log is dropped
//! on open, and actions in the log past the snapshot (killed between append and rename) are replayed by the
//! desktop. Writes are flushed to the operating system, not fsynced: they survive the process, not a power cut.
//! Files are 0600 and directories 0700 on Unix; elsewhere they inherit their directory's access.
//!
//! A [`Seal`] keeps given values (a task's secrets) out of the directory: they are written as their
//! placeholders and read back as the values, so a resumed desktop holds what was typed.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
#[cfg(unix)]
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use agentd_computer::{Action, Size};
use serde::{Deserialize, Serialize};

use crate::desktop::MockError;
use crate::world::WorldState;

/// Windows has no mode bits: there the files inherit the ACL of their directory.
#[cfg(not(unix))]
trait NoModes {
    fn mode(&mut self, _mode: u32) -> &mut Self {
        self
    }
}
#[cfg(not(unix))]
impl NoModes for OpenOptions {}
#[cfg(not(unix))]
impl NoModes for std::fs::DirBuilder {}

pub const STATE_FILE: &str = "state.json";
pub const ACTIONS_FILE: &str = "actions.jsonl";
/// How many actions go by between snapshots; the ones after the last snapshot are replayed on open.
pub const SNAPSHOT_EVERY: u64 = 32;
const FORMAT_VERSION: u32 = 1;

/// What `state.json` holds.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Saved {
    pub version: u32,
    pub scene: String,
    pub size: Size,
    pub state: WorldState,
}

impl Saved {
    pub fn new(scene: &str, size: Size, state: &WorldState) -> Saved {
        Saved { version: FORMAT_VERSION, scene: scene.to_string(), size, state: state.clone() }
    }
}

/// Values that are never written to the save directory: each is saved as its placeholder, and a placeholder
/// read back becomes the value again. Shows no value in `Debug`.
#[derive(Clone, Default)]
pub struct Seal {
    /// (value, placeholder), longest value first.
    pairs: Vec<(String, String)>,
}

impl std::fmt::Debug for Seal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seal").field("placeholders", &self.pairs.iter().map(|p| &p.1).collect::<Vec<_>>()).finish()
    }
}

impl Seal {
    /// Seals these `(value, placeholder)` pairs (empty values are ignored).
    pub fn new(pairs: Vec<(String, String)>) -> Seal {
        let mut pairs: Vec<_> = pairs.into_iter().filter(|(v, _)| !v.is_empty()).collect();
        pairs.sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
        Seal { pairs }
    }

    fn map(value: &mut serde_json::Value, f: &dyn Fn(&str) -> String) {
        use serde_json::Value;
        match value {
            Value::String(s) => *s = f(s),
            Value::Array(items) => items.iter_mut().for_each(|v| Seal::map(v, f)),
            Value::Object(map) => map.values_mut().for_each(|v| Seal::map(v, f)),
            _ => {}
        }
    }

    fn hide(&self, value: &mut serde_json::Value) {
        if !self.pairs.is_empty() {
            Seal::map(value, &|s| self.pairs.iter().fold(s.to_string(), |s, (v, p)| s.replace(v.as_str(), p)));
        }
    }

    fn reveal(&self, value: &mut serde_json::Value) {
        if !self.pairs.is_empty() {
            Seal::map(value, &|s| self.pairs.iter().fold(s.to_string(), |s, (v, p)| s.replace(p.as_str(), v)));
        }
    }

    /// The JSON text of `value` with the sealed values hidden.
    fn to_vec<T: Serialize>(&self, value: &T) -> Result<Vec<u8>, serde_json::Error> {
        let mut json = serde_json::to_value(value)?;
        self.hide(&mut json);
        serde_json::to_vec(&json)
    }

    /// Parses text written by [`Seal::to_vec`], the values revealed.
    fn parse<T: serde::de::DeserializeOwned>(&self, text: &str) -> Result<T, serde_json::Error> {
        let mut json: serde_json::Value = serde_json::from_str(text)?;
        self.reveal(&mut json);
        serde_json::from_value(json)
    }
}

/// An open save directory.
#[derive(Debug)]
pub(crate) struct Store {
    dir: PathBuf,
    log: File,
    seal: Seal,
}

/// What a save directory held when it was opened.
pub(crate) struct Loaded {
    pub saved: Option<Saved>,
    pub actions: Vec<Action>,
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> MockError + '_ {
    move |source| MockError::Persist { path: path.to_path_buf(), source }
}

impl Store {
    /// Opens (creating if needed) a save directory and reads what it holds.
    pub fn open(dir: &Path, seal: Seal) -> Result<(Store, Loaded), MockError> {
        // The state holds what was typed (passwords too): private to agentd whatever the umask.
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(io_error(dir))?;
        let state_path = dir.join(STATE_FILE);
        let saved = match std::fs::read_to_string(&state_path) {
            Ok(text) => Some(seal.parse::<Saved>(&text).map_err(|e| MockError::Resume {
                path: state_path.clone(),
                message: format!("not a saved mock state: {e}"),
            })?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_error(&state_path)(e)),
        };
        if let Some(saved) = &saved
            && saved.version != FORMAT_VERSION
        {
            return Err(MockError::Resume {
                path: state_path,
                message: format!("saved by format version {}, this build reads {FORMAT_VERSION}", saved.version),
            });
        }

        let log_path = dir.join(ACTIONS_FILE);
        let actions = read_log(&log_path, &seal)?;
        let log =
            OpenOptions::new().create(true).append(true).mode(0o600).open(&log_path).map_err(io_error(&log_path))?;
        Ok((Store { dir: dir.to_path_buf(), log, seal }, Loaded { saved, actions }))
    }

    /// Appends one action to the log and flushes it.
    pub fn append(&mut self, action: &Action) -> Result<(), MockError> {
        let path = self.dir.join(ACTIONS_FILE);
        let mut line = self
            .seal
            .to_vec(action)
            .map_err(|e| MockError::Persist { path: path.clone(), source: std::io::Error::other(e) })?;
        line.push(b'\n');
        self.log.write_all(&line).map_err(io_error(&path))?;
        self.log.flush().map_err(io_error(&path))
    }

    /// Replaces the snapshot atomically.
    pub fn save(&self, saved: &Saved) -> Result<(), MockError> {
        let path = self.dir.join(STATE_FILE);
        let tmp = self.dir.join(format!("{STATE_FILE}.tmp"));
        let text = self
            .seal
            .to_vec(saved)
            .map_err(|e| MockError::Persist { path: path.clone(), source: std::io::Error::other(e) })?;
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io_error(&tmp))?;
        file.write_all(&text).map_err(io_error(&tmp))?;
        drop(file);
        std::fs::rename(&tmp, &path).map_err(io_error(&path))
    }
}

/// Reads the action log, dropping (and truncating away) a last line that was cut short by a crash.
fn read_log(path: &Path, seal: &Seal) -> Result<Vec<Action>, MockError> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error(path)(e)),
    };
    let mut reader = BufReader::new(file);
    let mut actions = Vec::new();
    let mut good_len = 0u64;
    let mut line = String::new();
    let mut number = 0;
    loop {
        line.clear();
        let read = reader.read_line(&mut line).map_err(io_error(path))?;
        if read == 0 {
            break;
        }
        number += 1;
        if !line.ends_with('\n') {
            // A partial last line: the process died while writing it. The action never returned.
            break;
        }
        let action = seal.parse::<Action>(line.trim_end()).map_err(|e| MockError::Resume {
            path: path.to_path_buf(),
            message: format!("line {number} is not an action: {e}"),
        })?;
        actions.push(action);
        good_len += read as u64;
    }
    let file_len = std::fs::metadata(path).map_err(io_error(path))?.len();
    if file_len != good_len {
        let file = OpenOptions::new().write(true).open(path).map_err(io_error(path))?;
        file.set_len(good_len).map_err(io_error(path))?;
    }
    Ok(actions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_last_line_is_dropped() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let log = dir.path().join(ACTIONS_FILE);
        std::fs::write(&log, "{\"type\":\"move\",\"x\":1,\"y\":2}\n{\"type\":\"cli").unwrap_or_default();
        let (mut store, loaded) = Store::open(dir.path(), Seal::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(loaded.actions, vec![Action::Move { x: 1, y: 2, keys: Vec::new() }]);
        assert!(loaded.saved.is_none());
        store.append(&Action::Move { x: 3, y: 4, keys: Vec::new() }).unwrap_or_else(|e| panic!("{e}"));
        let (_, again) = Store::open(dir.path(), Seal::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            again.actions,
            vec![Action::Move { x: 1, y: 2, keys: Vec::new() }, Action::Move { x: 3, y: 4, keys: Vec::new() }]
        );
    }

    #[test]
    fn sealed_values_are_saved_as_placeholders_and_read_back_as_values() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let seal = || Seal::new(vec![("hunter2".into(), "<secret:password>".into())]);
        let typed = Action::Type { text: "pw hunter2".into() };
        let (mut store, _) = Store::open(dir.path(), seal()).unwrap_or_else(|e| panic!("{e}"));
        store.append(&typed).unwrap_or_else(|e| panic!("{e}"));
        let on_disk = std::fs::read_to_string(dir.path().join(ACTIONS_FILE)).unwrap_or_default();
        assert!(on_disk.contains("pw <secret:password>") && !on_disk.contains("hunter2"), "{on_disk}");
        assert!(!format!("{:?}", seal()).contains("hunter2"));
        let (_, loaded) = Store::open(dir.path(), seal()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(loaded.actions, vec![typed]);
    }

    #[test]
    fn a_corrupt_line_in_the_middle_is_an_error() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.path().join(ACTIONS_FILE), "garbage\n{\"type\":\"move\",\"x\":1,\"y\":2}\n")
            .unwrap_or_default();
        let err = Store::open(dir.path(), Seal::default()).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("line 1"), "{err}");
    }
}
