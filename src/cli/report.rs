//! `export` and `show` (docs/reports.md): a task's trajectory — its status document and screenshots, from the daemon's
//! API
//! or, with `--local`, from what `agentd run` wrote (`data_dir/runs/ID.json` and the configured artifact
//! store) — written as a report file (`crate::report`: HTML, GIF, WebP) or printed as a step table.
//!
//! `export` streams: the screenshots are fetched one at a time (the next while the current step renders, never
//! more ahead), every requested file gets each step as it comes, and a file is written beside its destination
//! under a temporary name and renamed over it only once whole — a failure part-way leaves no file that looks
//! complete, and an existing file at the destination as it was.

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hyper::Method;
use tokio::sync::mpsc;

use super::client::Client;
use super::exit::{CliError, CliResult, Exit};
use super::print_stderr;
use super::remote::{encode, record_of};
use super::sanitize::sanitize;
use crate::artifacts::ArtifactStore;
use crate::config::Config;
use crate::report::{self, ReportError, Screenshots, Shot, Sink, StepView, anim, draw, duration, html};
use crate::status::TaskRecord;

/// Where a task's record and screenshots come from.
pub enum Source<'a> {
    Daemon(&'a Client),
    /// `agentd run`'s result on this machine.
    Local(&'a Config),
}

/// The files `export` writes.
pub struct ExportArgs<'a> {
    pub html: Option<&'a Path>,
    pub gif: Option<&'a Path>,
    pub webp: Option<&'a Path>,
}

/// `export ID --html FILE | --gif FILE | --webp FILE` (any of them, at once).
pub async fn export(source: Source<'_>, id: &str, files: &ExportArgs<'_>, json: bool) -> CliResult {
    if files.html.is_none() && files.gif.is_none() && files.webp.is_none() {
        return Err(CliError::invalid(anyhow::anyhow!(
            "export needs at least one of --html FILE, --gif FILE, --webp FILE"
        )));
    }
    let (steps, written) = write_reports(&source, id, files).await?;
    if json {
        let files: Vec<_> = written
            .iter()
            .map(|w| serde_json::json!({"format": w.kind.name(), "path": w.path, "bytes": w.bytes}))
            .collect();
        println!("{}", serde_json::json!({"id": id, "steps": steps, "files": files}));
    } else {
        for w in &written {
            print_stderr(&format!("wrote {} ({}, {} bytes)", w.path.display(), w.kind.name(), w.bytes));
        }
    }
    Ok(Exit::Success)
}

/// Writes the report files of task `id` (export's work without its printing): the task's steps, the files
/// written.
async fn write_reports(
    source: &Source<'_>,
    id: &str,
    files: &ExportArgs<'_>,
) -> Result<(usize, Vec<Written>), CliError> {
    let record = Arc::new(load_record(source, id).await?);
    let store = match source {
        Source::Local(config) => Some(crate::backends::artifact_store(config).await.map_err(CliError::invalid)?),
        Source::Daemon(_) => None,
    };
    let mut outputs = Vec::new();
    for (path, kind) in [(files.html, Kind::Html), (files.gif, Kind::Gif), (files.webp, Kind::Webp)] {
        if let Some(path) = path {
            outputs.push(OutputFile::create(path, kind)?);
        }
    }
    let written = write_outputs(record.clone(), outputs, |shot| {
        let wanted = match shot {
            Shot::Step(i) => record.steps.get(i).map(|step| (step.index, step.screenshot.key.clone())),
            // The daemon serves the final screen as step `steps.len()`.
            Shot::Final => record.final_screenshot.as_ref().map(|s| (record.steps.len() as u32, s.key.clone())),
        };
        let (source, store, id) = (source, store.as_ref(), record.id.as_str());
        async move {
            match wanted {
                Some((index, key)) => fetch_screenshot(source, store, id, index, key).await,
                None => Ok(None),
            }
        }
    })
    .await?;
    Ok((record.steps.len(), written))
}

/// Writes task `id`'s HTML trajectory report to `path` (what `agentd eval --html` links each failure to).
pub(super) async fn write_html_report(source: &Source<'_>, id: &str, path: &Path) -> Result<(), CliError> {
    write_reports(source, id, &ExportArgs { html: Some(path), gif: None, webp: None }).await.map(drop)
}

/// The formats `export` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Html,
    Gif,
    Webp,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Html => "html",
            Kind::Gif => "gif",
            Kind::Webp => "webp",
        }
    }
}

/// A file `export` wrote.
struct Written {
    kind: Kind,
    path: PathBuf,
    bytes: u64,
}

/// A screenshot on its way from the fetcher to the renderer.
type Fetched = (Shot, Option<Vec<u8>>);

/// Renders `record` into `outputs`, fetching each screenshot (with `fetch`, in order: every step's, then the
/// final screen's when the record has one) while the renderer, off the runtime's threads, works on the one
/// before: at most one waits between them. Every output is committed (renamed to its destination) only when
/// all were written whole; on any error none is, and their temporary files are gone.
async fn write_outputs<F, Fut>(
    record: Arc<TaskRecord>,
    outputs: Vec<OutputFile>,
    mut fetch: F,
) -> Result<Vec<Written>, CliError>
where
    F: FnMut(Shot) -> Fut,
    Fut: std::future::Future<Output = Result<Option<Vec<u8>>, CliError>>,
{
    let (sender, receiver) = mpsc::channel::<Fetched>(1);
    let shots: Vec<Shot> =
        (0..record.steps.len()).map(Shot::Step).chain(record.final_screenshot.as_ref().map(|_| Shot::Final)).collect();
    let id = record.id.clone();
    let rendering = tokio::task::spawn_blocking(move || render_outputs(&record, receiver, outputs));
    let fetching = async move {
        for shot in shots {
            let png = fetch(shot).await?;
            if sender.send((shot, png)).await.is_err() {
                // The renderer stopped: its error says why.
                break;
            }
        }
        Ok::<(), CliError>(())
    };
    let (fetched, rendered) = tokio::join!(fetching, rendering);
    // A failed fetch first: all the renderer saw of it is screenshots that stopped coming.
    fetched?;
    let outputs = rendered
        .map_err(|e| CliError::failed(anyhow::anyhow!("rendering the report of task {id}: {e}")))?
        .map_err(|e| match e {
            ReportError::Write(e) => CliError::invalid(anyhow::anyhow!("cannot write {e}")),
            other => CliError::unreachable(anyhow::anyhow!("task {id}: {other}")),
        })?;
    outputs.into_iter().map(OutputFile::commit).collect()
}

/// The screenshots the fetcher sends, in the order [`report::render`] asks for them.
struct Received(mpsc::Receiver<Fetched>);

impl Screenshots for Received {
    type Png = Vec<u8>;

    fn get(&mut self, shot: Shot) -> Result<Option<Vec<u8>>, ReportError> {
        match self.0.blocking_recv() {
            Some((sent, png)) if sent == shot => Ok(png),
            Some((sent, _)) => Err(ReportError::Source(format!("{sent:?} arrived when {shot:?} was expected"))),
            None => Err(ReportError::Source(format!("{shot:?} never arrived"))),
        }
    }
}

/// The renderer's side: every output's writer made, the screenshots rendered into all of them as they arrive.
fn render_outputs(
    record: &TaskRecord,
    receiver: mpsc::Receiver<Fetched>,
    mut outputs: Vec<OutputFile>,
) -> Result<Vec<OutputFile>, ReportError> {
    let options = anim::AnimOptions::default();
    {
        let mut sinks: Vec<Box<dyn Sink + '_>> = Vec::with_capacity(outputs.len());
        for output in outputs.iter_mut() {
            let out = &mut output.writer;
            sinks.push(match output.kind {
                Kind::Html => Box::new(html::HtmlWriter::new(record, out)?),
                Kind::Gif => Box::new(anim::GifWriter::new(record, &options, out)?),
                Kind::Webp => Box::new(anim::WebpWriter::new(record, &options, out)?),
            });
        }
        let mut sinks: Vec<&mut dyn Sink> = sinks.iter_mut().map(|s| &mut **s as &mut dyn Sink).collect();
        report::render(record, &mut Received(receiver), &mut sinks)?;
    }
    Ok(outputs)
}

/// One file `export` writes: under a temporary name beside its destination (removed unless committed), or,
/// for a destination that exists and is no regular file (`/dev/stdout`, a FIFO), straight to it.
struct OutputFile {
    kind: Kind,
    /// The destination as given.
    path: PathBuf,
    writer: Counted<BufWriter<File>>,
    /// The temporary file and where it goes, when there is one.
    part: Option<Part>,
}

/// A temporary file, removed when dropped unless it was renamed to `destination`.
struct Part {
    temporary: PathBuf,
    destination: PathBuf,
    renamed: bool,
}

impl Drop for Part {
    fn drop(&mut self) {
        if !self.renamed {
            let _ = std::fs::remove_file(&self.temporary);
        }
    }
}

impl OutputFile {
    fn create(path: &Path, kind: Kind) -> Result<Self, CliError> {
        let cannot = |e: std::io::Error| CliError::invalid(anyhow::anyhow!("cannot write {}: {e}", path.display()));
        let existing = std::fs::metadata(path).ok();
        if existing.as_ref().is_some_and(|m| !m.is_file()) {
            let file = File::create(path).map_err(cannot)?;
            return Ok(Self { kind, path: path.to_path_buf(), writer: Counted::new(file, path), part: None });
        }
        // Beside the file a symbolic link points to, so the rename replaces that file and keeps the link.
        let destination = match existing {
            Some(_) => std::fs::canonicalize(path).map_err(cannot)?,
            None => path.to_path_buf(),
        };
        let name = destination.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let dir = destination.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let temporary = dir.join(format!(".{name}.{}-{:08x}.part", std::process::id(), fastrand::u32(..)));
        let file = std::fs::OpenOptions::new().write(true).create_new(true).open(&temporary).map_err(cannot)?;
        let part = Part { temporary, destination, renamed: false };
        // The file that replaces an existing one keeps its permissions (as writing over it would have).
        #[cfg(unix)]
        if let Some(existing) = &existing {
            file.set_permissions(existing.permissions()).map_err(cannot)?;
        }
        Ok(Self { kind, path: path.to_path_buf(), writer: Counted::new(file, path), part: Some(part) })
    }

    /// Flushes the file and renames it to its destination.
    fn commit(self) -> Result<Written, CliError> {
        let cannot =
            |e: std::io::Error| CliError::invalid(anyhow::anyhow!("cannot write {}: {e}", self.path.display()));
        let bytes = self.writer.len;
        let file = self.writer.inner.into_inner().map_err(|e| cannot(e.into_error()))?;
        drop(file);
        if let Some(mut part) = self.part {
            std::fs::rename(&part.temporary, &part.destination).map_err(cannot)?;
            part.renamed = true;
        }
        Ok(Written { kind: self.kind, path: self.path, bytes })
    }
}

/// A writer that counts the file's length and names the file in its errors.
struct Counted<W> {
    inner: W,
    path: PathBuf,
    position: u64,
    len: u64,
}

impl Counted<BufWriter<File>> {
    fn new(file: File, path: &Path) -> Self {
        Counted { inner: BufWriter::with_capacity(64 * 1024, file), path: path.to_path_buf(), position: 0, len: 0 }
    }
}

impl<W> Counted<W> {
    fn named(&self, e: std::io::Error) -> std::io::Error {
        std::io::Error::new(e.kind(), format!("{}: {e}", self.path.display()))
    }
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf).map_err(|e| self.named(e))?;
        self.position += n as u64;
        self.len = self.len.max(self.position);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush().map_err(|e| self.named(e))
    }
}

impl<W: Seek> Seek for Counted<W> {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        self.position = self.inner.seek(to).map_err(|e| self.named(e))?;
        self.len = self.len.max(self.position);
        Ok(self.position)
    }
}

/// `show ID`: one row per step (step, time, took, actions, result or error, tokens, cost), then the outcome.
pub async fn show(source: Source<'_>, id: &str, json: bool) -> CliResult {
    let record = load_record(&source, id).await?;
    if json {
        let steps: Vec<_> = record
            .steps
            .iter()
            .map(|step| {
                let view = StepView::of(step);
                serde_json::json!({
                    "step": step.index,
                    "started_at": step.started_at.format(&time::format_description::well_known::Rfc3339).ok(),
                    "duration_ms": step.duration_ms,
                    "actions": step.actions.iter().map(|a| a.summary()).collect::<Vec<_>>(),
                    "tools": view.tools.iter().map(|t| t.name).collect::<Vec<_>>(),
                    "errors": view.errors(),
                    "said": step_words(step).into_iter().map(|(who, text)| serde_json::json!({"by": who, "text": text})).collect::<Vec<_>>(),
                    "usage": step.usage,
                })
            })
            .collect();
        let doc = serde_json::json!({"id": record.id, "state": record.state, "outcome": record.outcome,
                                     "usage": record.usage, "steps": steps});
        println!("{doc}");
        return Ok(Exit::Success);
    }
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{}", table(&record));
    Ok(exit_for(&record))
}

fn exit_for(record: &TaskRecord) -> Exit {
    match &record.outcome {
        Some(outcome) if record.state.is_terminal() && !outcome.success => Exit::Unsuccessful,
        _ => Exit::Success,
    }
}

/// The step table and the outcome, every text from the task sanitized for a terminal.
pub fn table(record: &TaskRecord) -> String {
    const ACTIONS: usize = 44;
    const RESULT: usize = 36;
    let mut out = String::new();
    out.push_str(&format!(
        "task {}  {}\n  {}\n",
        sanitize(&record.id),
        record.state.as_str(),
        sanitize(&draw::shorten(record.task.instructions.as_str(), 110))
    ));
    out.push_str(&format!(
        "{:>5}  {:<8}  {:>9}  {:<ACTIONS$}  {:<RESULT$}  {:>13}  {:>8}\n",
        "step", "time", "took", "actions", "result", "tokens in→out", "cost"
    ));
    let time_format = time::macros::format_description!("[hour]:[minute]:[second]");
    for step in &record.steps {
        let view = StepView::of(step);
        let mut actions: Vec<String> = step.actions.iter().map(|a| a.summary()).collect();
        actions.extend(view.tools.iter().map(|t| format!("tool:{}", t.name)));
        let actions = if actions.is_empty() { "-".to_string() } else { actions.join(" ") };
        let errors = view.errors();
        let result = if let Some(first) = errors.first() {
            let more = if errors.len() > 1 { format!(" (+{})", errors.len() - 1) } else { String::new() };
            format!("✗ {first}{more}")
        } else if step.interrupted {
            "interrupted".to_string()
        } else if !step.finished {
            if step.approval.as_ref().is_some_and(|a| a.approved.is_none()) {
                "waiting for a human".to_string()
            } else if !step.awaiting_tools.is_empty() {
                "awaiting tools".to_string()
            } else {
                "running".to_string()
            }
        } else {
            "ok".to_string()
        };
        let time = step.started_at.to_offset(time::UtcOffset::UTC).format(&time_format).unwrap_or_default();
        out.push_str(&format!(
            "{:>5}  {:<8}  {:>9}  {:<ACTIONS$}  {:<RESULT$}  {:>13}  {:>8}\n",
            step.index,
            time,
            duration(step.duration_ms),
            sanitize(&draw::shorten(&actions, ACTIONS)),
            sanitize(&draw::shorten(&result, RESULT)),
            format!("{}→{}", step.usage.input_tokens, step.usage.output_tokens),
            format!("${:.4}", step.usage.cost_usd)
        ));
        for (who, text) in step_words(step) {
            out.push_str(&format!("{:>7}{who}: {}\n", "", sanitize(&draw::shorten(&text, 140))));
        }
    }
    match &record.outcome {
        Some(outcome) => {
            let mark = if outcome.success { "✓" } else { "✗" };
            out.push_str(&format!(
                "{mark} {} ({}): {}\n",
                record.state.as_str(),
                outcome.reason.as_str(),
                sanitize(&outcome.summary)
            ));
            if let Some(output) = &outcome.output {
                out.push_str(&format!("  output {}\n", sanitize(&output.to_string())));
            }
        }
        None => out.push_str(&format!("{} (no outcome yet)\n", record.state.as_str())),
    }
    let took = match (record.started_at, record.finished_at) {
        (Some(start), Some(end)) => {
            format!(" in {}", duration(u64::try_from((end - start).whole_milliseconds()).unwrap_or(0)))
        }
        _ => String::new(),
    };
    out.push_str(&format!(
        "  {} steps{took}; {} input / {} output tokens; ${:.4}\n",
        record.steps.len(),
        record.usage.input_tokens,
        record.usage.output_tokens,
        record.usage.cost_usd
    ));
    out
}

/// What was said at a step besides its actions: the model's text, and what a person answered (an approval
/// or rejection, the answer to an `ask_human` question, the note of a hand-back), in that order.
fn step_words(step: &crate::record::StepRecord) -> Vec<(&'static str, String)> {
    let mut words = Vec::new();
    if !step.model_text.trim().is_empty() {
        words.push(("model", step.model_text.trim().to_string()));
    }
    if let Some(approval) = &step.approval {
        match (approval.approved, &approval.rejected) {
            (Some(true), _) => words.push(("human", "approved".to_string())),
            (Some(false), Some(reason)) => words.push(("human", format!("rejected: {reason}"))),
            (Some(false), None) => words.push(("human", "rejected".to_string())),
            (None, _) => {}
        }
    }
    for call in &step.calls {
        if let crate::record::CallKind::Function { name, .. } = &call.kind
            && name == crate::tools::ASK_HUMAN
            && let Some(result) = step.call_results.iter().find(|r| r.call_id == call.id)
        {
            words.push(("human", format!("answered: {}", result.message)));
        }
    }
    if let Some(handed_back) = &step.handed_back {
        let note = handed_back.note.as_deref().unwrap_or("(no note)");
        words.push(("human", format!("handed the desktop back: {note}")));
    }
    words
}

pub(super) async fn load_record(source: &Source<'_>, id: &str) -> Result<TaskRecord, CliError> {
    match source {
        Source::Daemon(client) => {
            let (_, reply) = client.call(Method::GET, &format!("/v1/tasks/{}", encode(id)), None).await?;
            record_of(reply)
        }
        Source::Local(config) => {
            let path = local_record_path(config, id)?;
            let text = std::fs::read(&path).map_err(|e| {
                CliError::invalid(anyhow::anyhow!(
                    "{}: {e} (--local reads what `agentd run` wrote for task {id})",
                    path.display()
                ))
            })?;
            serde_json::from_slice(&text)
                .map_err(|e| CliError::invalid(anyhow::anyhow!("{}: not a task record: {e}", path.display())))
        }
    }
}

/// A daemon that does not know task `id` when `agentd run` wrote a record of it here: the error says to read
/// that one with `--local`.
pub(super) fn hint_local(result: CliResult, config: &Config, id: &str) -> CliResult {
    match result {
        Err(mut e) if local_record_path(config, id).is_ok_and(|path| path.is_file()) => {
            e.error = e
                .error
                .context(format!("the daemon has no task {id}, but `agentd run` ran one here: read it with `--local`"));
            Err(e)
        }
        other => other,
    }
}

/// `data_dir/runs/ID.json`, for an id that names a file there and nothing else.
fn local_record_path(config: &Config, id: &str) -> Result<PathBuf, CliError> {
    if id.is_empty() || id.starts_with('.') || id.contains(['/', '\\', '\0']) {
        return Err(CliError::invalid(anyhow::anyhow!("task id {:?} cannot name a file under runs/", id)));
    }
    Ok(config.data_dir.join("runs").join(format!("{id}.json")))
}

/// Fetches one screenshot: step `index`'s (the daemon serves the final screen as step `steps.len()`), or the
/// artifact `key` of an `agentd run` result. A screenshot the store no longer has (or has not yet) is `None`
/// with a warning: the report says it is missing.
async fn fetch_screenshot(
    source: &Source<'_>,
    store: Option<&Arc<dyn ArtifactStore>>,
    id: &str,
    index: u32,
    key: String,
) -> Result<Option<Vec<u8>>, CliError> {
    match (source, store) {
        (Source::Daemon(client), _) => {
            let path = format!("/v1/tasks/{}/steps/{index}/screenshot", encode(id));
            let (status, bytes) = client.get_bytes(&path).await?;
            match status {
                200..300 => Ok(Some(bytes)),
                404 | 410 => {
                    let why = serde_json::from_slice::<serde_json::Value>(&bytes)
                        .ok()
                        .and_then(|v| v["error"]["message"].as_str().map(str::to_string));
                    print_stderr(&format!(
                        "warning: {}",
                        why.unwrap_or_else(|| format!("the screenshot of step {index} is missing"))
                    ));
                    Ok(None)
                }
                other => Err(CliError::unreachable(anyhow::anyhow!(
                    "the screenshot of step {index}: HTTP {other}: {}",
                    String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
                ))),
            }
        }
        (Source::Local(_), Some(store)) => match store.get(&key).await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) => {
                print_stderr(&format!("warning: the screenshot of step {index} ({key}): {e}"));
                Ok(None)
            }
        },
        (Source::Local(_), None) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::record_of;

    fn png() -> Vec<u8> {
        let frame = agentd_computer::Frame::filled(agentd_computer::Size::new(320, 200), [40, 120, 200]);
        crate::screen::image::encode_png(&frame).expect("png")
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("read dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[tokio::test]
    async fn a_failure_part_way_leaves_no_file_and_an_existing_one_as_it_was() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (html, gif, webp) = (dir.path().join("r.html"), dir.path().join("r.gif"), dir.path().join("r.webp"));
        std::fs::write(&html, "the report of before").expect("write");
        let record = Arc::new(record_of(6, (320, 200), true));
        let outputs = || {
            vec![
                OutputFile::create(&html, Kind::Html).expect("html"),
                OutputFile::create(&gif, Kind::Gif).expect("gif"),
                OutputFile::create(&webp, Kind::Webp).expect("webp"),
            ]
        };
        let png = png();
        // The daemon fails to answer for step 3's screenshot, after steps 0 to 2 were written.
        let failed = write_outputs(record.clone(), outputs(), |shot| {
            let png = png.clone();
            async move {
                match shot {
                    Shot::Step(3) => Err(CliError::unreachable(anyhow::anyhow!("the screenshot of step 3: HTTP 500"))),
                    _ => Ok(Some(png)),
                }
            }
        })
        .await;
        let error = failed.err().expect("the export fails");
        assert_eq!(error.exit, Exit::Unreachable, "{error}");
        assert!(error.to_string().contains("HTTP 500"), "the fetch's error, not the renderer's: {error}");
        assert_eq!(names(dir.path()), ["r.html"], "no part of a file left behind");
        assert_eq!(std::fs::read_to_string(&html).expect("read"), "the report of before");

        // Whole, every file is in place (the HTML over the old one) and reports what it wrote.
        let written = write_outputs(record, outputs(), |_| {
            let png = png.clone();
            async move { Ok(Some(png)) }
        })
        .await
        .expect("export");
        assert_eq!(names(dir.path()), ["r.gif", "r.html", "r.webp"]);
        for w in &written {
            assert_eq!(std::fs::metadata(&w.path).expect("file").len(), w.bytes, "{:?}", w.kind);
        }
        let text = std::fs::read_to_string(&html).expect("read");
        assert_eq!(text.matches("data:image/png;base64,").count(), 7, "six steps and the final screen");
        let webp = std::fs::read(&webp).expect("read");
        let decoder = image_webp::WebPDecoder::new(std::io::Cursor::new(&webp)).expect("a WebP");
        assert_eq!(decoder.num_frames(), 7);
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn a_destination_behind_a_symbolic_link_is_replaced_and_the_link_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().join("real.gif");
        let link = dir.path().join("link.gif");
        std::fs::write(&real, "old").expect("write");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        let png = png();
        let outputs = vec![OutputFile::create(&link, Kind::Gif).expect("gif")];
        write_outputs(Arc::new(record_of(2, (320, 200), false)), outputs, |_| {
            let png = png.clone();
            async move { Ok(Some(png)) }
        })
        .await
        .expect("export");
        assert!(std::fs::symlink_metadata(&link).expect("link").file_type().is_symlink(), "the link is kept");
        assert!(std::fs::read(&real).expect("real").starts_with(b"GIF89a"), "the file it points to is the GIF");
        assert_eq!(names(dir.path()), ["link.gif", "real.gif"]);
    }
}
