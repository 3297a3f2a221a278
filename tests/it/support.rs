//! Shared helpers: a hermetic `agentd` command (own config file and data dir) and output capture.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The repository root (where `config/` lives).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn fixtures() -> PathBuf {
    repo().join("tests/fixtures")
}

/// An `agentd` binary with a private data directory and config file.
pub struct Agentd {
    pub dir: tempfile::TempDir,
}

impl Agentd {
    pub fn new() -> Self {
        Self::with_config("")
    }

    /// `extra` is appended to a config that sets `data_dir` to the private directory.
    pub fn with_config(extra: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = format!("data_dir = {:?}\n{extra}", dir.path().join("data").display().to_string());
        std::fs::write(dir.path().join("agentd.toml"), config).expect("write config");
        Self { dir }
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn command(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentd"));
        cmd.arg("--config").arg(self.dir.path().join("agentd.toml"));
        for (name, _) in std::env::vars() {
            if name.starts_with("AGENTD_") {
                cmd.env_remove(name);
            }
        }
        cmd.current_dir(repo());
        cmd
    }

    /// Runs `agentd ARGS` and returns its output.
    pub fn run(&self, args: &[&str]) -> Run {
        let output = self.command().args(args).stdin(Stdio::null()).output().expect("spawn agentd");
        Run::from(output)
    }

    /// Runs `agentd ARGS` with `stdin` as standard input.
    pub fn run_with_stdin(&self, args: &[&str], stdin: &[u8]) -> Run {
        use std::io::Write;
        let mut child = self
            .command()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn agentd");
        child.stdin.take().expect("stdin").write_all(stdin).expect("write stdin");
        Run::from(child.wait_with_output().expect("wait agentd"))
    }
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(output: Output) -> Self {
        Self {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

impl Run {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}\nstderr:\n{}", self.stdout, self.stderr))
    }
}

pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() { stack.push(path) } else { out.push(path) }
        }
    }
    out.sort();
    out
}
