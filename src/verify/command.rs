//! The `command` check: a `[verifiers.NAME]` program from config, run with `tools::command`'s runner (no
//! shell, its own process group, killed at its timeout), given the task record as JSON on stdin. Exit status
//! 0 passes; the tail of its stdout and stderr (at most [`MESSAGE_BYTES`]) is the check's message.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use crate::record::CheckResult;
use crate::task::verify::{DEFAULT_VERIFIER_TIMEOUT_SECS, VerifierDecl};
use crate::tools::command::{Program, exit_how};

/// The most of the program's output the message keeps.
pub const MESSAGE_BYTES: usize = 2048;

/// The program of a `[verifiers.NAME]` entry; `cwd` must be a directory on this worker.
pub fn program(decl: &VerifierDecl) -> Result<Program, String> {
    let Some((program, args)) = decl.command.split_first().filter(|(p, _)| !p.is_empty()) else {
        return Err("the verifier names no program".into());
    };
    let cwd = decl.cwd.as_ref().map(PathBuf::from);
    if let Some(dir) = &cwd
        && !dir.is_dir()
    {
        return Err(format!("the verifier's cwd {} is not a directory on this worker", dir.display()));
    }
    let timeout = Duration::from_secs(decl.timeout_secs.map_or(DEFAULT_VERIFIER_TIMEOUT_SECS, |t| t.get()));
    Ok(Program { program: program.clone(), args: args.to_vec(), cwd, timeout, env: decl.env.clone() })
}

pub async fn check(
    name: &str,
    program: &Program,
    record: &serde_json::Value,
    cancel: &tokio_util::sync::CancellationToken,
) -> CheckResult {
    let (ok, message, evidence) = match program.run(record.to_string(), cancel, &|_| {}).await {
        Ok((stdout, status, stderr)) => {
            let mut text = String::from_utf8_lossy(&stdout).trim().to_string();
            let stderr = String::from_utf8_lossy(&stderr).trim().to_string();
            if !stderr.is_empty() {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(&stderr);
            }
            let tail = crate::tools::envelope::tail(text.as_bytes(), MESSAGE_BYTES);
            let ok = status.success();
            let how = if ok { "passed".to_string() } else { exit_how(status) };
            let message = if tail.is_empty() {
                format!("verifier {name} {how}")
            } else {
                format!("verifier {name} {how}: {tail}")
            };
            (ok, message, Some(json!({"exit_code": status.code()})))
        }
        Err(problem) => (false, format!("verifier {name}: {problem}"), None),
    };
    CheckResult { kind: "command".into(), ok, message, evidence }
}
