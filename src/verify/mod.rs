//! Verifiers (docs/replay-and-verify.md): the task's `"verify"` checks, made ready when the attempt is built
//! ([`Verifier::build`]:
//! reference images read and decoded, `command` checks' programs looked up in `[verifiers]`) and run in
//! rounds ([`Verifier::round`]) by the agent loop, when the model completes with success and at the end.
//!
//! One small file per kind that needs more than a few lines: [`screen`] (the image matcher), [`http`],
//! [`command`]. A check never fails the round by erroring: what went wrong is its failed result's message.

use std::collections::BTreeMap;
use std::sync::Arc;

use agentd_computer::{ComputerProvider, Frame, Size};
use serde_json::json;

use crate::artifacts::{Uploader, verify_crop_key};
use crate::input::FileAccess;
use crate::record::CheckResult;
use crate::task::verify::{Check, DEFAULT_MIN_SCORE, GuestCheck, HttpCheck, Pointer, VerifierDecl, json_subset};

pub mod command;
pub mod http;
pub mod screen;

/// A task's checks, ready to run.
#[derive(Default)]
pub struct Verifier {
    checks: Vec<Ready>,
    retries: u32,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier").field("checks", &self.checks.len()).field("retries", &self.retries).finish()
    }
}

enum Ready {
    MockState(serde_json::Value),
    Screen {
        image: String,
        reference: Arc<Frame>,
        region: Option<screen::Area>,
        min_score: f64,
    },
    /// The check, and where the task may connect.
    Http(HttpCheck, agentd_computer::outbound::Outbound),
    Output(BTreeMap<Pointer, serde_json::Value>),
    Command {
        name: String,
        program: crate::tools::command::Program,
    },
    Guest(GuestCheck),
}

/// A check that cannot be made ready: the field at fault (`verify[0].image`) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}`: {message}")]
pub struct VerifyError {
    pub field: String,
    pub message: String,
}

/// What a round of checks looks at.
pub struct Subject<'a> {
    pub computer: &'a dyn ComputerProvider,
    /// `task_completion`'s `output`, if any.
    pub output: Option<&'a serde_json::Value>,
    /// The task record so far, given to `command` checks on stdin.
    pub record: serde_json::Value,
    /// Where crops of `screen` checks go.
    pub uploader: &'a Uploader,
    pub task_id: &'a str,
    pub attempt: u32,
    /// The round's number (1 for the first), in the crops' keys.
    pub round: u32,
    pub cancel: &'a tokio_util::sync::CancellationToken,
}

impl Verifier {
    /// Makes `checks` ready: reads and decodes reference images through `files`, looks `command` checks up
    /// in `verifiers` (config). `retries` is `limits.verify_retries`.
    pub async fn build(
        checks: &[Check],
        retries: u32,
        verifiers: &BTreeMap<String, VerifierDecl>,
        files: &FileAccess,
        outbound: &agentd_computer::outbound::Outbound,
    ) -> Result<Self, VerifyError> {
        let mut ready = Vec::with_capacity(checks.len());
        for (i, check) in checks.iter().enumerate() {
            let field = |name: &str| format!("verify[{i}].{name}");
            ready.push(match check {
                Check::MockState { expect } => Ready::MockState(serde_json::Value::Object(expect.clone())),
                Check::Screen(check) => {
                    let reference = load_png(&check.image, files)
                        .await
                        .map_err(|message| VerifyError { field: field("image"), message })?;
                    let region = check.region.map(|r| screen::Area {
                        x: r.x,
                        y: r.y,
                        width: r.width.get(),
                        height: r.height.get(),
                    });
                    if let Some(area) = region
                        && (reference.width() > area.width || reference.height() > area.height)
                    {
                        return Err(VerifyError {
                            field: field("region"),
                            message: format!(
                                "the {}×{} region is smaller than the {} reference image",
                                area.width,
                                area.height,
                                screen::describe(reference.size())
                            ),
                        });
                    }
                    Ready::Screen {
                        image: check.image.clone(),
                        reference: Arc::new(reference),
                        region,
                        min_score: check.min_score.map_or(DEFAULT_MIN_SCORE, |s| s.get()),
                    }
                }
                Check::Http(check) => Ready::Http(check.clone(), outbound.clone()),
                Check::GuestCommand(check) => Ready::Guest(check.clone()),
                Check::Output { expect } => Ready::Output(expect.clone()),
                Check::Command { use_ } => {
                    let Some(decl) = verifiers.get(use_) else {
                        let known = verifiers.keys().map(|k| format!("`{k}`")).collect::<Vec<_>>();
                        return Err(VerifyError {
                            field: field("use"),
                            message: if known.is_empty() {
                                format!("no verifier `{use_}`: the config declares no [verifiers]")
                            } else {
                                format!("no verifier `{use_}` in config; it declares {}", known.join(", "))
                            },
                        });
                    };
                    Ready::Command {
                        name: use_.clone(),
                        program: command::program(decl)
                            .map_err(|message| VerifyError { field: field("use"), message })?,
                    }
                }
            });
        }
        Ok(Self { checks: ready, retries })
    }

    /// Whether the task has no checks (`verified` stays `null`).
    pub fn is_empty(&self) -> bool {
        self.checks.is_empty()
    }

    /// Failed rounds the model may fix before the task fails `verification_failed`.
    pub fn retries(&self) -> u32 {
        self.retries
    }

    /// Runs every check once, in the task's order, on the computer as it is now.
    pub async fn round(&self, subject: &Subject<'_>) -> Vec<CheckResult> {
        let needs_screen = self.checks.iter().any(|c| matches!(c, Ready::Screen { .. }));
        let frame = if needs_screen {
            Some(subject.computer.screenshot().await.map_err(|e| format!("cannot take a screenshot: {e}")))
        } else {
            None
        };
        let needs_state = self.checks.iter().any(|c| matches!(c, Ready::MockState(_)));
        let state = if needs_state { subject.computer.state().await } else { None };
        let mut results = Vec::with_capacity(self.checks.len());
        for (n, check) in self.checks.iter().enumerate() {
            let result = match check {
                Ready::MockState(expect) => mock_state(expect, state.as_ref()),
                Ready::Screen { image, reference, region, min_score } => match &frame {
                    Some(Ok(frame)) => {
                        let key = verify_crop_key(subject.task_id, subject.attempt, subject.round, n);
                        screen_check(frame, reference, *region, *min_score, image, key, subject.uploader).await
                    }
                    Some(Err(problem)) => failed("screen", problem.clone()),
                    None => failed("screen", "no screenshot".into()),
                },
                Ready::Http(check, outbound) => http::check(check, outbound).await,
                Ready::Output(expect) => output(expect, subject.output),
                Ready::Command { name, program } => {
                    command::check(name, program, &subject.record, subject.cancel).await
                }
                Ready::Guest(check) => tokio::select! {
                    result = guest_command(check, subject.computer) => result,
                    () = subject.cancel.cancelled() => failed("guest_command", "cancelled".into()),
                },
            };
            results.push(result);
        }
        results
    }
}

/// What the model reads when a round failed: each failed check's message.
pub fn failures(results: &[CheckResult]) -> String {
    results
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.ok)
        .map(|(i, r)| format!("check {} ({}): {}", i + 1, r.kind, r.message))
        .collect::<Vec<_>>()
        .join("; ")
}

fn failed(kind: &str, message: String) -> CheckResult {
    CheckResult { kind: kind.to_string(), ok: false, message, evidence: None }
}

fn passed(kind: &str, message: String) -> CheckResult {
    CheckResult { kind: kind.to_string(), ok: true, message, evidence: None }
}

/// Reads and decodes a PNG reference image the task names.
async fn load_png(path: &str, files: &FileAccess) -> Result<Frame, String> {
    let (access, named) = (files.clone(), path.to_string());
    let bytes = tokio::task::spawn_blocking(move || {
        let file = access.resolve(&named).map_err(|e| e.to_string())?;
        crate::input::read_bytes_blocking(&file).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| format!("cannot read {path}: {e}"))??;
    crate::screen::image::decode_png(&bytes).map_err(|e| format!("{path} is not a PNG image agentd can read: {e}"))
}

/// `guest_command`: the command run in the guest exits with `expect_exit` (0) and prints `expect_stdout`.
async fn guest_command(check: &GuestCheck, computer: &dyn ComputerProvider) -> CheckResult {
    let output = match computer.run_command(&check.command).await {
        Ok(output) => output,
        Err(e) => return failed("guest_command", format!("cannot run `{}` in the guest: {e}", check.command)),
    };
    let expected = check.expect_exit.unwrap_or(0);
    let printed = format!("{}{}", output.stdout, output.stderr);
    let printed = crate::tools::envelope::tail(printed.as_bytes(), command::MESSAGE_BYTES);
    let mut problems = Vec::new();
    match output.exit_code {
        Some(code) if code == expected => {}
        Some(code) => problems.push(format!("exited {code}, expected {expected}")),
        None => problems.push("the guest reported no exit code".to_string()),
    }
    if let Some(text) = &check.expect_stdout
        && !output.stdout.contains(text.as_str())
    {
        problems.push(format!("its output does not contain {text:?}"));
    }
    let mut result = if problems.is_empty() {
        passed("guest_command", format!("`{}` exited {expected}: {printed}", check.command))
    } else {
        failed("guest_command", format!("`{}` {}: {printed}", check.command, problems.join("; ")))
    };
    result.evidence = Some(serde_json::json!({ "exit_code": output.exit_code }));
    result
}

/// `mock_state`: the computer's state contains `expect`.
fn mock_state(expect: &serde_json::Value, state: Option<&serde_json::Value>) -> CheckResult {
    let Some(state) = state else {
        return failed("mock_state", "the computer reports no state (only the mock desktop has computer_state)".into());
    };
    if json_subset(expect, state) {
        return passed("mock_state", "computer_state matches".into());
    }
    let mut differences = Vec::new();
    differ(expect, state, String::new(), &mut differences);
    let mut result = failed("mock_state", format!("computer_state differs: {}", differences.join("; ")));
    result.evidence = Some(json!({"differences": differences}));
    result
}

/// The places where `actual` does not contain `expected`, as `/pointer: expected X, found Y`.
fn differ(expected: &serde_json::Value, actual: &serde_json::Value, at: String, out: &mut Vec<String>) {
    match (expected, actual) {
        (serde_json::Value::Object(want), serde_json::Value::Object(have)) => {
            for (k, v) in want {
                let path = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                match have.get(k) {
                    Some(h) => differ(v, h, path, out),
                    None => out.push(format!("{path}: expected {v}, missing")),
                }
            }
        }
        _ if expected != actual => {
            out.push(format!("{}: expected {expected}, found {}", if at.is_empty() { "/" } else { &at }, clip(actual)))
        }
        _ => {}
    }
}

/// A JSON value for a message, at most 200 characters.
fn clip(value: &serde_json::Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= 200 { text } else { format!("{}…", text.chars().take(200).collect::<String>()) }
}

/// Pointer checks shared by `output` and `http`'s `expect_json`: the failures, as messages.
pub fn pointers(expect: &BTreeMap<Pointer, serde_json::Value>, document: &serde_json::Value) -> Vec<String> {
    compare(expect, document, true)
}

/// As [`pointers`], without quoting what the document holds: for a document a destination sent back (the
/// `http` check), which a task may not read through its verifier.
pub fn pointers_unquoted(expect: &BTreeMap<Pointer, serde_json::Value>, document: &serde_json::Value) -> Vec<String> {
    compare(expect, document, false)
}

fn compare(expect: &BTreeMap<Pointer, serde_json::Value>, document: &serde_json::Value, quote: bool) -> Vec<String> {
    expect
        .iter()
        .filter_map(|(pointer, want)| match document.pointer(pointer.as_str()) {
            Some(have) if have == want => None,
            Some(have) if quote => Some(format!("{}: expected {want}, found {}", pointer.as_str(), clip(have))),
            Some(_) => Some(format!("{}: expected {want}, found another value", pointer.as_str())),
            None => Some(format!("{}: expected {want}, missing", pointer.as_str())),
        })
        .collect()
}

/// `output`: `task_completion`'s output holds the expected values.
fn output(expect: &BTreeMap<Pointer, serde_json::Value>, output: Option<&serde_json::Value>) -> CheckResult {
    let Some(output) = output else {
        return failed("output", "task_completion gave no `output`".into());
    };
    let problems = pointers(expect, output);
    if problems.is_empty() {
        passed("output", format!("output matches at {} pointer(s)", expect.len()))
    } else {
        failed("output", format!("output differs: {}", problems.join("; ")))
    }
}

/// `screen`: the reference found in the region (or anywhere); the crop where it matched best is saved.
async fn screen_check(
    frame: &Frame,
    reference: &Arc<Frame>,
    region: Option<screen::Area>,
    min_score: f64,
    image: &str,
    key: String,
    uploader: &Uploader,
) -> CheckResult {
    let (screen_frame, reference_frame) = (frame.clone(), Arc::clone(reference));
    let found = tokio::task::spawn_blocking(move || {
        let found = screen::find(&screen_frame, &reference_frame, region)?;
        let crop = screen_frame.crop(found.at, reference_frame.size());
        let png = crate::screen::image::encode_png(&crop).map_err(|e| e.to_string())?;
        Ok::<_, String>((found, png))
    })
    .await
    .map_err(|e| e.to_string())
    .and_then(|found| found);
    let (found, png) = match found {
        Ok(found) => found,
        Err(problem) => return failed("screen", format!("{image}: {problem}")),
    };
    uploader.submit(key.clone(), png.into(), None).await;
    let size: Size = reference.size();
    let score = (found.score * 10_000.0).round() / 10_000.0;
    let ok = found.score >= min_score;
    let place = match region {
        Some(_) => "in the region",
        None => "on the screen",
    };
    let message = if ok {
        format!("{image} found {place} at ({},{}) with score {score:.4} (at least {min_score})", found.at.x, found.at.y)
    } else {
        format!(
            "{image} not found {place}: the best match, at ({},{}), scores {score:.4}, below {min_score}",
            found.at.x, found.at.y
        )
    };
    CheckResult {
        kind: "screen".into(),
        ok,
        message,
        evidence: Some(json!({
            "region": {"x": found.at.x, "y": found.at.y, "width": size.width, "height": size.height},
            "score": score,
            "min_score": min_score,
            "crop": {"key": key, "url": uploader.store().url(&key)},
        })),
    }
}
