//! Input errors and the one field locator, the vocabulary every layer may use: every JSON input agentd reads
//! (task files, scripts, scenes named by tasks, API bodies) is parsed by [`parse_json`], and every problem with
//! one is a [`TaskFileError`] that names the file, the field path and the line/column
//! (`file: field `a.b`: message (line L, column C)`, [`format_location`]). Problems found after parsing (a
//! scene file that does not exist) are located with [`locate_field`]; the config's TOML errors use
//! [`line_column`] on their spans. Files a task names are read by [`files`] only (regular files, bounded,
//! off the runtime), from where [`FileAccess`] allows.

pub mod files;

pub use files::{FileAccess, FileError, read_bytes_blocking, read_stream, read_text, read_text_blocking, redact};
use thiserror::Error;

/// A task file could not be read or is not a valid task. `Display` names the file, the field and where.
#[derive(Debug, Error)]
pub enum TaskFileError {
    #[error("{source_name}: cannot read: {error}")]
    Read { source_name: String, error: std::io::Error },
    #[error("{}", format_location(source_name, field, *line, *column, message))]
    Invalid { source_name: String, field: Option<String>, line: usize, column: usize, message: String },
}

impl TaskFileError {
    /// The dotted path of the offending field, when the error is about one.
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::Invalid { field, .. } => field.as_deref(),
            Self::Read { .. } => None,
        }
    }
}

/// `file: field `a.b`: message (line L, column C)` — the one shape every input error in agentd has.
pub fn format_location(source: &str, field: &Option<String>, line: usize, column: usize, message: &str) -> String {
    let mut out = source.to_string();
    if let Some(field) = field {
        out.push_str(&format!(": field `{field}`"));
    }
    out.push_str(&format!(": {message}"));
    if line > 0 {
        out.push_str(&format!(" (line {line}, column {column})"));
    }
    out
}

/// Parses JSON text into `T`, turning any failure into a message with the field path and line/column.
/// Used for every JSON input agentd reads (task files, scripts, API bodies).
pub fn parse_json<T: serde::de::DeserializeOwned>(text: &str, source_name: &str) -> Result<T, TaskFileError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let de = &mut serde_json::Deserializer::from_str(text);
    let invalid = |path: String, inner: serde_json::Error| {
        let (path, message) = fold_inner_path(path, clean_serde_message(&inner.to_string()));
        let field = field_from(&path, &message);
        TaskFileError::Invalid {
            source_name: source_name.to_string(),
            field,
            line: inner.line(),
            column: inner.column(),
            message,
        }
    };
    let value: T = serde_path_to_error::deserialize(&mut *de).map_err(|err| {
        let path = err.path().to_string();
        invalid(path, err.into_inner())
    })?;
    // Trailing characters after the document are an error too.
    de.end().map_err(|e| invalid(String::new(), e))?;
    Ok(value)
}

/// Moves `field `a.b`: ` prefixes (from `task::variant`) out of the message and onto the path.
pub fn fold_inner_path(mut path: String, mut message: String) -> (String, String) {
    while let Some(rest) = message.strip_prefix("field `")
        && let Some((inner, tail)) = rest.split_once("`: ")
    {
        path = if path == "." || path.is_empty() {
            inner.to_string()
        } else if inner.starts_with('[') {
            // An array index (`[1].name`, from a list's own check) joins without a dot.
            format!("{path}{inner}")
        } else {
            format!("{path}.{inner}")
        };
        message = tail.to_string();
    }
    (path, message)
}

/// serde_json appends " at line L column C" to its messages; we print the location our own way.
fn clean_serde_message(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) if message[i..].contains(" column ") => message[..i].to_string(),
        _ => message.to_string(),
    }
}

/// The field to name: the path serde saw, or for a missing or unknown field the field itself (serde names it
/// in the message, not the path). Shared by every input parsed through serde: JSON bodies and files, query
/// strings.
pub fn field_from(path: &str, message: &str) -> Option<String> {
    // serde_path_to_error says `?` where the input ended before a field was known.
    let path = path.trim_end_matches('?').trim_end_matches('.');
    let base = if path == "." || path.is_empty() { None } else { Some(path.to_string()) };
    let quoted = message
        .split('`')
        .nth(1)
        .filter(|_| message.starts_with("missing field") || message.starts_with("unknown field"));
    match (base, quoted) {
        (Some(base), Some(name)) if base == name || base.ends_with(&format!(".{name}")) => Some(base),
        (Some(base), Some(name)) => Some(format!("{base}.{name}")),
        (None, Some(name)) => Some(name.to_string()),
        (base, None) => base,
    }
}

/// The line and column (1-based) where the value of `field` (a dotted path like `computer.scene`, with `[n]`
/// for array items) starts in the JSON `text`, for errors found after parsing (a scene that does not exist,
/// a script file that cannot be read). `None` when the text does not hold that path. The one locator,
/// shared with the mock provider's scenes: `agentd_computer::locate`.
pub fn locate_field(text: &str, field: &str) -> Option<(usize, usize)> {
    agentd_computer::locate::find(text, field)
}

/// The 1-based line and column (in characters) of a byte offset.
pub fn line_column(bytes: &[u8], offset: usize) -> (usize, usize) {
    agentd_computer::locate::line_column(bytes, offset)
}
