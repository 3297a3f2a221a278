//! The `command` tool kind (docs/tools.md, config only): run a program with the call's arguments as JSON on stdin;
//! its stdout is the result envelope.
//!
//! The program is `command[0]` with the arguments `command[1..]`, started directly (no shell), in `cwd`
//! (the worker's own directory when absent), in a process group of its own. Its stdout lines are streamed as
//! `tool_output` events while it runs; the envelope is the whole of stdout or, after progress lines, its last
//! line. It is killed (the whole group) when it outlives its timeout, prints
//! more than [`MAX_ANSWER_BYTES`] on stdout, or the task is cancelled. A program that cannot be started,
//! exits non-zero, is killed by a signal or times out is a failed call (`ok: false`) naming the tool and the
//! problem, with the tail of its stderr; it never ends the task.
//!
//! The program starts from a clean environment: [`BASE_ENV`] and the variables its declaration lists in
//! `env`, never the daemon's whole environment (which holds model API keys).
//!
//! Process groups are Unix's: on Windows the program is killed alone (its own children may outlive it).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use super::envelope::{self, MAX_ANSWER_BYTES, STDERR_TAIL_BYTES};
use super::{Tool, ToolContext, ToolOutcome, ToolboxError};
use crate::model::ToolSpec;
use crate::task::tools::{CommandTool, DEFAULT_TOOL_TIMEOUT_SECS, ToolDecl};

/// A `command` tool from config, ready to call.
pub struct CommandRunner {
    spec: ToolSpec,
    program: String,
    args: Vec<String>,
    cwd: Option<PathBuf>,
    timeout: Duration,
    env: Vec<String>,
    /// The task's secrets, redacted out of stderr before its tail is cut.
    secrets: super::secrets::Secrets,
}

impl CommandRunner {
    /// Makes the tool of `decl` (at `field`, for errors). Fails when `command` is empty or `cwd` is not a
    /// directory on this worker.
    pub fn make(
        decl: &ToolDecl,
        command: &CommandTool,
        field: &str,
        secrets: super::secrets::Secrets,
    ) -> Result<Arc<dyn Tool>, ToolboxError> {
        let Some((program, args)) = command.command.split_first().filter(|(p, _)| !p.is_empty()) else {
            return Err(ToolboxError::new(format!("{field}.command"), "name the program to run (a non-empty list)"));
        };
        let cwd = command.cwd.as_ref().map(PathBuf::from);
        if let Some(dir) = &cwd
            && !dir.is_dir()
        {
            return Err(ToolboxError::new(
                format!("{field}.cwd"),
                format!("{} is not a directory on this worker", dir.display()),
            ));
        }
        let timeout = Duration::from_secs(command.timeout_secs.map_or(DEFAULT_TOOL_TIMEOUT_SECS, |t| t.get()));
        let spec = ToolSpec {
            name: decl.name.as_str().to_string(),
            description: decl.description.clone(),
            parameters: decl.parameters.schema().as_value().clone(),
        };
        let env = command.env.clone();
        Ok(Arc::new(Self { spec, program: program.clone(), args: args.to_vec(), cwd, timeout, env, secrets }))
    }

    async fn run(&self, arguments: &serde_json::Value, context: &ToolContext<'_>) -> ToolOutcome {
        let name = &self.spec.name;
        let (stdout, status, stderr) =
            match self.program().run(arguments.to_string(), &context.cancel, context.output).await {
                Ok(ran) => ran,
                Err(problem) => return ToolOutcome::error(format!("tool {name}: {problem}")),
            };
        if status.success() {
            return envelope::parse_output(name, &String::from_utf8_lossy(&stdout));
        }
        // Redacted first, cut after: no part of a secret survives the cut.
        let stderr = self.secrets.redact(&String::from_utf8_lossy(&stderr)).into_owned();
        let tail = envelope::tail(stderr.as_bytes(), STDERR_TAIL_BYTES);
        let how = exit_how(status);
        let message = if tail.is_empty() {
            format!("tool {name}: {} {how}", self.program)
        } else {
            format!("tool {name}: {} {how}; stderr: {tail}", self.program)
        };
        ToolOutcome::error(message).with_details(json!({"exit_code": status.code()}))
    }

    fn program(&self) -> Program {
        Program {
            program: self.program.clone(),
            args: self.args.clone(),
            cwd: self.cwd.clone(),
            timeout: self.timeout,
            env: self.env.clone(),
        }
    }
}

/// How a program ended that did not exit 0 (`exited with status 3`, `was killed by signal 9`).
pub fn exit_how(status: std::process::ExitStatus) -> String {
    match status.code() {
        Some(code) => format!("exited with status {code}"),
        #[cfg(unix)]
        None => {
            use std::os::unix::process::ExitStatusExt;
            format!("was killed by signal {}", status.signal().unwrap_or_default())
        }
        #[cfg(not(unix))]
        None => "ended without an exit status".into(),
    }
}

/// A program to run: `program` with `args` (no shell), in `cwd` (the worker's own when absent), in a process
/// group of its own that is killed when it outlives `timeout`, prints too much, or is cancelled. Used by
/// `command` tools and by verifier programs (docs/replay-and-verify.md).
#[derive(Debug, Clone)]
pub struct Program {
    pub program: String,
    pub args: Vec<String>,
    pub cwd: Option<PathBuf>,
    pub timeout: Duration,
    /// The worker's variables passed on besides [`BASE_ENV`].
    pub env: Vec<String>,
}

/// The variables every program gets from the worker's environment (when set): what a program needs to find
/// other programs and to read and write text, and nothing that holds a credential (the last ones are what a
/// Windows program needs to start at all).
pub const BASE_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "SystemRoot",
    "windir",
    "COMSPEC",
    "PATHEXT",
    "TEMP",
    "TMP",
    "USERPROFILE",
];

impl Program {
    /// Runs the program with `input` on its stdin, streaming its stdout lines to `emit`. Returns its stdout
    /// (at most [`MAX_ANSWER_BYTES`]), how it ended and the tail of its stderr; or why it could not be run to
    /// its end (the message names the program).
    pub async fn run(
        &self,
        input: String,
        cancel: &tokio_util::sync::CancellationToken,
        emit: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<(Vec<u8>, std::process::ExitStatus, Vec<u8>), String> {
        let mut command = Command::new(&self.program);
        command.args(&self.args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        command.env_clear();
        for name in BASE_ENV.iter().copied().chain(self.env.iter().map(String::as_str)) {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        #[cfg(unix)]
        command.process_group(0);
        if let Some(dir) = &self.cwd {
            command.current_dir(dir);
        }
        let mut child = command.spawn().map_err(|e| format!("cannot start {}: {e}", self.program))?;
        // Until the program has been waited for, dropping this (a cancelled task) kills its whole group.
        let mut group = ProcessGroup::of(&child);
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(format!("cannot talk to {}", self.program));
        };
        // A program that does not read its stdin is not an error: a broken pipe is ignored.
        let writer = async move {
            let _ = stdin.write_all(input.as_bytes()).await;
            drop(stdin);
        };
        let errors = tokio::spawn(keep_tail(stderr));
        let run = async {
            let (read, ()) = tokio::join!(read_stdout(stdout, emit), writer);
            let read = read?;
            let status = child.wait().await.map_err(|e| format!("cannot wait for {}: {e}", self.program))?;
            Ok::<_, String>((read, status))
        };
        let ended = tokio::select! {
            ended = tokio::time::timeout(self.timeout, run) => ended,
            () = cancel.cancelled() => {
                group.kill();
                return Err("cancelled".into());
            }
        };
        let (stdout, status) = match ended {
            Ok(Ok(done)) => {
                group.0 = None;
                done
            }
            Ok(Err(problem)) => {
                group.kill();
                return Err(problem);
            }
            Err(_) => {
                group.kill();
                return Err(format!(
                    "{} did not finish within {} s and was killed",
                    self.program,
                    self.timeout.as_secs()
                ));
            }
        };
        // A background process the program left may hold stderr open: its tail is what arrived by then.
        let stderr =
            tokio::time::timeout(Duration::from_secs(1), errors).await.ok().and_then(Result::ok).unwrap_or_default();
        Ok((stdout, status, stderr))
    }
}

/// A running program's process group, killed when it must stop or when this is dropped before it ended.
pub(crate) struct ProcessGroup(Option<i32>);

impl ProcessGroup {
    /// The group `child` leads (it was started with `process_group(0)`).
    pub(crate) fn of(child: &tokio::process::Child) -> Self {
        Self(child.id().and_then(|pid| i32::try_from(pid).ok()))
    }

    fn kill(&mut self) {
        if let Some(pid) = self.0.take() {
            kill_process_group(pid);
        }
    }
}

/// Sends SIGKILL to the process group `leader` leads (a program started in a group of its own, with
/// everything it started). Without process groups (not Unix) it does nothing: the program itself dies when
/// its `Child` is dropped (`kill_on_drop`).
pub(crate) fn kill_process_group(leader: i32) {
    #[cfg(unix)]
    // SAFETY: kill(2) with a negative pid signals the process group `leader` leads; no memory is involved.
    unsafe {
        libc::kill(-leader, libc::SIGKILL);
    }
    #[cfg(not(unix))]
    let _ = leader;
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Reads stdout to its end, streaming each complete line as it arrives; more than [`MAX_ANSWER_BYTES`] is an
/// error.
async fn read_stdout(
    mut stdout: impl AsyncRead + Unpin,
    emit: &(dyn Fn(&str) + Send + Sync),
) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut streamed = 0;
    let mut buffer = [0u8; 8192];
    loop {
        let n = stdout.read(&mut buffer).await.map_err(|e| format!("cannot read its output: {e}"))?;
        if n == 0 {
            break;
        }
        if out.len() + n > MAX_ANSWER_BYTES {
            return Err(format!("its output is larger than the {MAX_ANSWER_BYTES} bytes allowed; it was killed"));
        }
        out.extend_from_slice(&buffer[..n]);
        while let Some(end) = out[streamed..].iter().position(|b| *b == b'\n') {
            emit(&String::from_utf8_lossy(&out[streamed..streamed + end]));
            streamed += end + 1;
        }
    }
    if streamed < out.len() {
        emit(&String::from_utf8_lossy(&out[streamed..]));
    }
    Ok(out)
}

/// Reads stderr to its end, keeping only its last [`STDERR_TAIL_BYTES`] (and a little more, to cut at a
/// character).
async fn keep_tail(mut stderr: impl AsyncRead + Unpin) -> Vec<u8> {
    let keep = STDERR_TAIL_BYTES + 8;
    let mut tail = Vec::new();
    let mut buffer = [0u8; 4096];
    while let Ok(n) = stderr.read(&mut buffer).await {
        if n == 0 {
            break;
        }
        tail.extend_from_slice(&buffer[..n]);
        if tail.len() > 2 * keep {
            tail.drain(..tail.len() - keep);
        }
    }
    if tail.len() > keep {
        tail.drain(..tail.len() - keep);
    }
    tail
}

#[async_trait]
impl Tool for CommandRunner {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call(&self, arguments: serde_json::Value, context: ToolContext<'_>) -> ToolOutcome {
        self.run(&arguments, &context).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use tokio_util::sync::CancellationToken;

    fn runner(command: &[&str], timeout_secs: u64) -> Arc<dyn Tool> {
        let decl: ToolDecl = serde_json::from_value(json!({
            "name": "t", "description": "d", "kind": "command", "parameters": {"type": "object"},
            "command": command, "timeout_secs": timeout_secs,
        }))
        .unwrap();
        let crate::task::tools::ToolKind::Command(command) = &decl.kind else { panic!() };
        CommandRunner::make(&decl, command, "tools.t", super::super::secrets::Secrets::none()).unwrap()
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn a_program_gets_a_clean_environment_and_what_it_declares() {
        // SAFETY: variables of this test alone, set before the program starts.
        unsafe {
            std::env::set_var("AGENTD_UNIT_MODEL_KEY", "sk-should-not-pass");
            std::env::set_var("AGENTD_UNIT_DECLARED", "passed-on");
        }
        let decl: ToolDecl = serde_json::from_value(json!({
            "name": "t", "description": "d", "kind": "command", "parameters": {"type": "object"},
            "command": ["sh", "-c", "env"], "env": ["AGENTD_UNIT_DECLARED"],
        }))
        .unwrap();
        let crate::task::tools::ToolKind::Command(command) = &decl.kind else { panic!() };
        let tool = CommandRunner::make(&decl, command, "tools.t", super::super::secrets::Secrets::none()).unwrap();
        let (outcome, _) = call(tool.as_ref(), json!({})).await;
        assert!(outcome.ok, "{outcome:?}");
        assert!(
            !outcome.message.contains("sk-should-not-pass"),
            "the daemon's environment leaked: {}",
            outcome.message
        );
        assert!(outcome.message.contains("AGENTD_UNIT_DECLARED=passed-on"), "{}", outcome.message);
        assert!(outcome.message.contains("PATH="), "{}", outcome.message);
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn stderr_is_redacted_before_its_tail_is_cut() {
        use crate::task::secrets::SecretName;
        let secret = "ZebraQuartz-Secret-9";
        let secrets =
            super::super::secrets::Secrets::new(vec![(SecretName::parse("pw").unwrap(), secret.into())]).unwrap();
        // The tail's cut falls inside the secret: 2048 bytes from the end start 10 bytes into it.
        let script = format!(
            "printf '%s' '{secret}' >&2; head -c {} /dev/zero | tr '\\0' y >&2; exit 3",
            STDERR_TAIL_BYTES - 10
        );
        let decl: ToolDecl = serde_json::from_value(json!({
            "name": "t", "description": "d", "kind": "command", "parameters": {"type": "object"},
            "command": ["sh", "-c", script],
        }))
        .unwrap();
        let crate::task::tools::ToolKind::Command(command) = &decl.kind else { panic!() };
        let tool = CommandRunner::make(&decl, command, "tools.t", secrets).unwrap();
        let (outcome, _) = call(tool.as_ref(), json!({})).await;
        assert!(!outcome.ok, "{outcome:?}");
        for fragment in ["Secret-9", "et-9", "Quartz"] {
            assert!(!outcome.message.contains(fragment), "{fragment} survived the cut: {}", outcome.message);
        }
    }

    async fn call(tool: &dyn Tool, arguments: serde_json::Value) -> (ToolOutcome, Vec<String>) {
        let lines = Mutex::new(Vec::new());
        let emit = |line: &str| lines.lock().unwrap().push(line.to_string());
        let outcome = tool.call(arguments, ToolContext { cancel: CancellationToken::new(), output: &emit }).await;
        (outcome, lines.into_inner().unwrap())
    }

    #[tokio::test]
    async fn stdin_is_the_arguments_and_stdout_the_envelope() {
        let script =
            r#"read -r args; echo "working"; printf '{"ok": true, "output": "got it", "details": %s}\n' "$args""#;
        let (outcome, lines) = call(runner(&["sh", "-c", script], 5).as_ref(), json!({"a": 1})).await;
        assert_eq!(outcome, ToolOutcome::ok("got it").with_details(json!({"a": 1})));
        assert_eq!(lines, ["working", r#"{"ok": true, "output": "got it", "details": {"a":1}}"#]);
        let (outcome, _) = call(runner(&["echo", "plain", "text"], 5).as_ref(), json!({})).await;
        assert_eq!(outcome, ToolOutcome::ok("plain text"));
    }

    /// Whether process `pid` is gone (or a zombie waiting for its reaper).
    fn gone(pid: &str) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')),
        }
    }

    /// A script that starts a grandchild (its pid written to `pidfile`), says so, and waits for it.
    fn with_grandchild(pidfile: &std::path::Path) -> String {
        format!("sleep 60 & echo $! > {}; echo started; wait", pidfile.display())
    }

    async fn grandchild_is_gone(pidfile: &std::path::Path, when: &str) {
        let pid = std::fs::read_to_string(pidfile).unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(gone(pid.trim()), "the grandchild {} outlived {when}", pid.trim());
        std::fs::remove_file(pidfile).unwrap();
    }

    #[tokio::test]
    async fn a_late_or_cancelled_program_is_killed_with_its_children() {
        let scratch = tempfile::tempdir().unwrap();
        let pidfile = scratch.path().join("pid");
        let (outcome, lines) = call(runner(&["sh", "-c", &with_grandchild(&pidfile)], 1).as_ref(), json!({})).await;
        assert!(!outcome.ok && outcome.message.contains("killed"), "{outcome:?}");
        assert_eq!(lines, ["started"]);
        grandchild_is_gone(&pidfile, "the timeout").await;

        let cancel = CancellationToken::new();
        let stop = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            stop.cancel();
        });
        let started = std::time::Instant::now();
        let tool = runner(&["sh", "-c", &with_grandchild(&pidfile)], 30);
        let outcome = tool.call(json!({}), ToolContext { cancel, output: &|_| {} }).await;
        assert!(!outcome.ok && outcome.message.contains("cancelled"), "{outcome:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
        grandchild_is_gone(&pidfile, "the cancel").await;

        // Dropping the call (the loop stops waiting for it) kills the group too.
        let tool = runner(&["sh", "-c", &with_grandchild(&pidfile)], 30);
        let _ = tokio::time::timeout(Duration::from_millis(300), call(tool.as_ref(), json!({}))).await;
        grandchild_is_gone(&pidfile, "the dropped call").await;
    }

    #[tokio::test]
    async fn failures_are_tool_errors() {
        let (outcome, _) = call(runner(&["sh", "-c", "echo oops >&2; exit 3"], 5).as_ref(), json!({})).await;
        assert!(!outcome.ok && outcome.message.contains("status 3") && outcome.message.contains("oops"), "{outcome:?}");
        assert_eq!(outcome.details, Some(json!({"exit_code": 3})));
        let (outcome, _) = call(runner(&["/no/such/program"], 5).as_ref(), json!({})).await;
        assert!(!outcome.ok && outcome.message.contains("cannot start"), "{outcome:?}");
        let started = std::time::Instant::now();
        let (outcome, _) = call(runner(&["sleep", "30"], 1).as_ref(), json!({})).await;
        assert!(!outcome.ok && outcome.message.contains("within 1 s"), "{outcome:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
        let (outcome, _) = call(runner(&["yes"], 10).as_ref(), json!({})).await;
        assert!(!outcome.ok && outcome.message.contains("larger than"), "{outcome:?}");
    }
}
