//! The values of a task's secrets (docs/security.md) while it runs on a worker, and the two things done with them:
//! substitution (`<secret:NAME>` → value, at the moment of acting) and redaction (value → `<secret:NAME>`,
//! everywhere else).
//!
//! [`Secrets`] never shows a value: its `Debug` lists names only, it has no `Serialize`, and the only way a
//! value leaves it is [`Secrets::substitute`] / [`Secrets::substitute_json`], which the loop calls just
//! before a `type` action reaches the computer and the toolbox calls just before a tool runs. Everything that
//! comes back (action messages, tool envelopes, the computer's state) goes through [`Secrets::redact`] /
//! [`Secrets::redact_json`], the one redaction function, before it is recorded, emitted or shown to the model.
//!
//! Logs are written by one process-wide subscriber that does not know which task logs: every live
//! `Secrets` registers its values here, and [`redact_logged`] (the log writer's filter) replaces the values of
//! all of them.

use std::borrow::Cow;
use std::sync::{Arc, Mutex, Weak};

use aho_corasick::{AhoCorasick, MatchKind};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::record::{StepRecord, ToolCall};
use crate::task::secrets::SecretName;

/// Why a task's secrets cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SecretsError {
    /// `secrets.NAME` (or `secrets.NAME.env` / `.file`).
    pub field: String,
    pub message: String,
}

struct Entry {
    name: SecretName,
    placeholder: String,
    value: String,
}

struct Inner {
    entries: Vec<Entry>,
    /// Finds values (leftmost-longest, so a value containing another is replaced whole).
    values: AhoCorasick,
    /// Finds placeholders.
    placeholders: AhoCorasick,
    /// Finds long fragments of values (see [`fragment_len`]): pattern `i` is `fragment_of[i]` = (entry, byte
    /// offset in its value). `None` when no value is long enough to have one.
    fragments: Option<(AhoCorasick, Vec<(usize, usize)>)>,
}

/// How long a piece of a secret's value must be to be taken for the secret: three quarters of it, and at
/// least 8 bytes. A value typed and then edited (one Backspace), or cut off by a length limit, still hides most
/// of the secret; a short common piece ("admin") of a long value does not turn into a placeholder.
fn fragment_len(value: &str) -> Option<usize> {
    let len = (value.len() * 3).div_ceil(4).max(8);
    (len < value.len()).then_some(len)
}

/// A task's secret values. Cheap to clone; shows names only.
#[derive(Clone, Default)]
pub struct Secrets {
    inner: Option<Arc<Inner>>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets").field("names", &self.names()).finish_non_exhaustive()
    }
}

/// The values of every live [`Secrets`], for the log writer.
static LIVE: Mutex<Vec<Weak<Inner>>> = Mutex::new(Vec::new());

impl Secrets {
    /// No secrets: substitution and redaction change nothing.
    pub fn none() -> Self {
        Self::default()
    }

    /// Secrets with these values. An empty value is an error naming `secrets.NAME`.
    pub fn new(values: Vec<(SecretName, String)>) -> Result<Self, SecretsError> {
        if values.is_empty() {
            return Ok(Self::none());
        }
        let mut entries = Vec::with_capacity(values.len());
        for (name, value) in values {
            if value.is_empty() {
                return Err(SecretsError {
                    field: format!("secrets.{name}"),
                    message: format!("the secret {name:?} is empty; a secret needs a value"),
                });
            }
            entries.push(Entry { placeholder: name.placeholder(), name, value });
        }
        let build = |patterns: Vec<&str>| {
            AhoCorasick::builder().match_kind(MatchKind::LeftmostLongest).build(patterns).map_err(|e| SecretsError {
                field: "secrets".into(),
                message: format!("cannot prepare the secrets: {e}"),
            })
        };
        let values = build(entries.iter().map(|e| e.value.as_str()).collect())?;
        let placeholders = build(entries.iter().map(|e| e.placeholder.as_str()).collect())?;
        let mut fragment_patterns = Vec::new();
        let mut fragment_of = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            let Some(len) = fragment_len(&entry.value) else { continue };
            for start in 0..=entry.value.len() - len {
                if let Some(piece) = entry.value.get(start..start + len) {
                    fragment_patterns.push(piece);
                    fragment_of.push((i, start));
                }
            }
        }
        let fragments = if fragment_patterns.is_empty() {
            None
        } else {
            let finder = AhoCorasick::builder().build(&fragment_patterns).map_err(|e| SecretsError {
                field: "secrets".into(),
                message: format!("cannot prepare the secrets: {e}"),
            })?;
            Some((finder, fragment_of))
        };
        let inner = Arc::new(Inner { entries, values, placeholders, fragments });
        let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|w| w.strong_count() > 0);
        live.push(Arc::downgrade(&inner));
        Ok(Self { inner: Some(inner) })
    }

    pub fn is_empty(&self) -> bool {
        self.inner.is_none()
    }

    /// `(value, placeholder)` pairs, for a computer that saves what it receives and must save the
    /// placeholders instead (the mock desktop's `Seal`). The one way values leave besides substitution.
    pub fn for_saving(&self) -> Vec<(String, String)> {
        self.inner
            .as_ref()
            .map(|i| i.entries.iter().map(|e| (e.value.clone(), e.placeholder.clone())).collect())
            .unwrap_or_default()
    }

    /// The secrets' names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.inner.as_ref().map(|i| i.entries.iter().map(|e| e.name.as_str()).collect()).unwrap_or_default()
    }

    /// What the model is told (appended to the instructions), or `None` without secrets. Names only.
    pub fn note(&self) -> Option<String> {
        let inner = self.inner.as_ref()?;
        let placeholders: Vec<&str> = inner.entries.iter().map(|e| e.placeholder.as_str()).collect();
        Some(format!(
            "Secrets: you may type these values by placeholder without knowing them: {}. Write the placeholder \
             exactly (for example as the text of a type action, or in a tool's arguments) and it is replaced by \
             the real value when the action runs; you will never see the value itself.",
            placeholders.join(", ")
        ))
    }

    /// `text` with every placeholder replaced by its value (what the computer or a tool receives).
    pub fn substitute<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match &self.inner {
            Some(inner) if inner.placeholders.is_match(text) => {
                let values: Vec<&str> = inner.entries.iter().map(|e| e.value.as_str()).collect();
                Cow::Owned(inner.placeholders.replace_all(text, &values))
            }
            _ => Cow::Borrowed(text),
        }
    }

    /// A JSON value with placeholders replaced in every string (object keys are left as they are).
    pub fn substitute_json<'a>(&self, value: &'a serde_json::Value) -> Cow<'a, serde_json::Value> {
        if self.inner.is_none() {
            return Cow::Borrowed(value);
        }
        let mut copy = value.clone();
        if map_strings(&mut copy, &mut |s| self.substitute(s).into_owned()) {
            Cow::Owned(copy)
        } else {
            Cow::Borrowed(value)
        }
    }

    /// The one redaction function: `text` with every value replaced by its placeholder.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match &self.inner {
            Some(inner) => inner.redact(text),
            None => Cow::Borrowed(text),
        }
    }

    /// Whether `text` ends with the beginning of a secret's value: more text after it may complete the value,
    /// so text that arrives in pieces is held back until it no longer does (as [`StreamRedactor`] does).
    pub fn may_go_on_into_a_value(&self, text: &str) -> bool {
        self.inner.as_ref().is_some_and(|inner| inner.safe_prefix(text) < text.len())
    }

    /// Redacts every string of a JSON value in place (keys too); whether anything changed.
    pub fn redact_json(&self, value: &mut serde_json::Value) -> bool {
        let Some(inner) = &self.inner else { return false };
        redact_value(inner, value)
    }

    /// A redacted copy of a serializable value, through its JSON form; `Ok(None)` when it held no value,
    /// `Err(())` when the redacted form no longer deserializes (a value equal to a tag such as `"click"`):
    /// the caller then withholds it.
    #[allow(clippy::result_unit_err)]
    pub fn redact_serde<T: Serialize + DeserializeOwned>(&self, value: &T) -> Result<Option<T>, ()> {
        if self.inner.is_none() {
            return Ok(None);
        }
        let mut json = serde_json::to_value(value).map_err(|_| ())?;
        if !self.redact_json(&mut json) {
            return Ok(None);
        }
        serde_json::from_value(json).map(Some).map_err(|_| ())
    }

    /// Redacts a step record in place: every text a model, a tool or the computer put in it.
    pub fn redact_step(&self, step: &mut StepRecord) {
        if self.inner.is_none() {
            return;
        }
        let redact = |s: &mut String| {
            if let Cow::Owned(r) = self.redact(s) {
                *s = r;
            }
        };
        redact(&mut step.model_text);
        redact(&mut step.thinking);
        for action in &mut step.actions {
            self.redact_action(action);
        }
        for result in &mut step.results {
            redact(&mut result.message);
            if let Some(details) = &mut result.details {
                self.redact_json(details);
            }
        }
        for call in &mut step.calls {
            self.redact_call(call);
        }
        for result in &mut step.call_results {
            redact(&mut result.message);
            if let Some(details) = &mut result.details {
                self.redact_json(details);
            }
        }
        if let Some(raw) = &mut step.raw {
            self.redact_json(raw);
        }
        if let Some(approval) = &mut step.approval {
            redact(&mut approval.reason);
            self.redact_json(&mut approval.details);
        }
    }

    /// Redacts a model's turn in place before it joins the history the model is shown again: its text, its
    /// thinking, its calls' arguments and typed texts, the vendor's raw content the adapter replays, and an
    /// approval's reason. A model that wrote a value (read off the screen, or guessed) does not get it back:
    /// the history it reads is the record it would read after a resume.
    pub fn redact_turn(&self, turn: &mut crate::model::ModelTurn) {
        if self.inner.is_none() {
            return;
        }
        let redact = |s: &mut String| {
            if let Cow::Owned(r) = self.redact(s) {
                *s = r;
            }
        };
        redact(&mut turn.text);
        redact(&mut turn.thinking);
        for call in &mut turn.calls {
            self.redact_call(call);
        }
        if let Some(raw) = &mut turn.raw {
            self.redact_json(raw);
        }
        if let Some(approval) = &mut turn.approval {
            redact(&mut approval.reason);
            self.redact_json(&mut approval.details);
        }
    }

    fn redact_action(&self, action: &mut agentd_computer::Action) {
        if let agentd_computer::Action::Type { text } = action
            && let Cow::Owned(r) = self.redact(text)
        {
            *text = r;
        }
    }

    fn redact_call(&self, call: &mut ToolCall) {
        match &mut call.kind {
            crate::record::CallKind::Computer { actions } => actions.iter_mut().for_each(|a| self.redact_action(a)),
            crate::record::CallKind::Function { arguments, .. } => {
                self.redact_json(arguments);
            }
        }
    }
}

/// Redaction of a text that arrives in pieces — a model's streamed deltas, a tool call's streamed arguments.
/// Redacting each piece alone would let a secret split across two pieces through in halves; this holds back
/// the end of what arrived for as long as it could still be the start of a secret, and emits the rest
/// redacted. Concatenated, what [`StreamRedactor::push`] and [`StreamRedactor::finish`] return is the whole
/// text redacted.
#[derive(Debug, Default)]
pub struct StreamRedactor {
    secrets: Secrets,
    /// What arrived and was not emitted yet: a tail that may be the beginning of a secret.
    pending: String,
}

impl StreamRedactor {
    pub fn new(secrets: Secrets) -> Self {
        Self { secrets, pending: String::new() }
    }

    /// Takes the next piece; returns the redacted text that can be emitted now (possibly empty).
    pub fn push(&mut self, piece: &str) -> String {
        let Some(inner) = self.secrets.inner.as_ref() else { return piece.to_string() };
        self.pending.push_str(piece);
        let cut = inner.safe_prefix(&self.pending);
        let rest = self.pending.split_off(cut);
        let ready = std::mem::replace(&mut self.pending, rest);
        inner.redact(&ready).into_owned()
    }

    /// The end of the stream: what is still held back, redacted.
    pub fn finish(&mut self) -> String {
        let rest = std::mem::take(&mut self.pending);
        self.secrets.redact(&rest).into_owned()
    }
}

impl Inner {
    /// How much of `text` (a byte index) can be redacted and emitted now: everything before the longest
    /// tail that is the beginning of a secret's value (more text may complete it), and never a part of a
    /// whole value that reaches into that tail.
    fn safe_prefix(&self, text: &str) -> usize {
        let mut held = 0;
        for entry in &self.entries {
            let value = entry.value.as_str();
            // The longest proper prefix of the value that `text` ends with.
            for len in (held + 1..value.len()).rev() {
                if value.is_char_boundary(len) && text.ends_with(&value[..len]) {
                    held = len;
                    break;
                }
            }
        }
        let mut cut = text.len() - held;
        for found in self.values.find_iter(text) {
            if found.start() < cut && found.end() > cut {
                cut = found.start();
            }
        }
        cut
    }

    fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let whole = if self.values.is_match(text) {
            let placeholders: Vec<&str> = self.entries.iter().map(|e| e.placeholder.as_str()).collect();
            Cow::Owned(self.values.replace_all(text, &placeholders))
        } else {
            Cow::Borrowed(text)
        };
        match self.redact_fragments(&whole) {
            Some(redacted) => Cow::Owned(redacted),
            None => whole,
        }
    }

    /// `text` with every long fragment of a value ([`fragment_len`]), grown to as much of the value as it
    /// matches, replaced by the value's placeholder; `None` when there is none.
    fn redact_fragments(&self, text: &str) -> Option<String> {
        let (finder, fragment_of) = self.fragments.as_ref()?;
        let bytes = text.as_bytes();
        let mut spans: Vec<(usize, usize, usize)> = Vec::new();
        for found in finder.find_overlapping_iter(text) {
            let (entry, offset) = fragment_of[found.pattern().as_usize()];
            let value = self.entries[entry].value.as_bytes();
            let (mut start, mut end) = (found.start(), found.end());
            let (mut value_start, mut value_end) = (offset, offset + (end - start));
            while start > 0 && value_start > 0 && bytes[start - 1] == value[value_start - 1] {
                start -= 1;
                value_start -= 1;
            }
            while end < bytes.len() && value_end < value.len() && bytes[end] == value[value_end] {
                end += 1;
                value_end += 1;
            }
            // Whole characters only: a value's bytes never end inside a character of the same value, but be sure.
            while !text.is_char_boundary(start) {
                start -= 1;
            }
            while !text.is_char_boundary(end) {
                end += 1;
            }
            spans.push((start, end, entry));
        }
        if spans.is_empty() {
            return None;
        }
        spans.sort();
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for (start, end, entry) in spans {
            if end <= at {
                continue;
            }
            out.push_str(&text[at..start.max(at)]);
            out.push_str(&self.entries[entry].placeholder);
            at = end;
        }
        out.push_str(&text[at..]);
        Some(out)
    }
}

fn redact_value(inner: &Inner, value: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::String(s) => match inner.redact(s) {
            Cow::Owned(r) => {
                *s = r;
                true
            }
            Cow::Borrowed(_) => false,
        },
        Value::Array(items) => items.iter_mut().fold(false, |changed, v| redact_value(inner, v) | changed),
        Value::Object(map) => {
            let mut changed = false;
            if map.keys().any(|k| inner.values.is_match(k)) {
                let old = std::mem::take(map);
                for (k, v) in old {
                    map.insert(inner.redact(&k).into_owned(), v);
                }
                changed = true;
            }
            map.values_mut().fold(changed, |changed, v| redact_value(inner, v) | changed)
        }
        _ => false,
    }
}

/// Applies `f` to every string value (not keys); whether any changed.
fn map_strings(value: &mut serde_json::Value, f: &mut dyn FnMut(&str) -> String) -> bool {
    use serde_json::Value;
    match value {
        Value::String(s) => {
            let new = f(s);
            let changed = new != *s;
            *s = new;
            changed
        }
        Value::Array(items) => items.iter_mut().fold(false, |changed, v| map_strings(v, f) | changed),
        Value::Object(map) => map.values_mut().fold(false, |changed, v| map_strings(v, f) | changed),
        _ => false,
    }
}

/// `text` with the values of every live task's secrets replaced (what the log writer prints).
pub fn redact_logged(text: &str) -> Cow<'_, str> {
    let live: Vec<Arc<Inner>> = {
        let guard = LIVE.lock().unwrap_or_else(|p| p.into_inner());
        guard.iter().filter_map(Weak::upgrade).collect()
    };
    let mut out = Cow::Borrowed(text);
    for inner in &live {
        if let Cow::Owned(r) = inner.redact(&out) {
            out = Cow::Owned(r);
        }
    }
    out
}

/// A writer that redacts every live secret out of what it writes: the log subscriber's stderr.
pub struct RedactingWriter<W>(pub W);

impl<W: std::io::Write> std::io::Write for RedactingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // The log formatter writes one whole event per call, so a value is never split across calls.
        match std::str::from_utf8(buf) {
            Ok(text) => match redact_logged(text) {
                Cow::Borrowed(_) => self.0.write_all(buf)?,
                Cow::Owned(redacted) => self.0.write_all(redacted.as_bytes())?,
            },
            Err(_) => self.0.write_all(String::from_utf8_lossy(buf).as_bytes())?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn a_secret_split_across_streamed_pieces_never_comes_out_in_part() {
        let secrets = Secrets::new(vec![
            (SecretName::parse("pw").unwrap(), "ZebraQuartz-Secret-9".into()),
            (SecretName::parse("pin").unwrap(), "4711".into()),
        ])
        .unwrap();
        let text = "log in with ZebraQuartz-Secret-9 then 4711, not Zebra or 47 alone: ZebraQuartz-Secret-9";
        // Every way of cutting the text into two, and into pieces of every width.
        let mut cuttings: Vec<Vec<&str>> = (0..=text.len()).map(|i| vec![&text[..i], &text[i..]]).collect();
        for width in 1..6 {
            let bytes = text.as_bytes();
            cuttings.push(bytes.chunks(width).map(|c| std::str::from_utf8(c).unwrap()).collect());
        }
        let whole = secrets.redact(text).into_owned();
        for pieces in cuttings {
            let mut stream = StreamRedactor::new(secrets.clone());
            let mut emitted: Vec<String> = pieces.iter().map(|p| stream.push(p)).collect();
            emitted.push(stream.finish());
            for piece in &emitted {
                for value in ["ZebraQuartz-Secret-9", "4711"] {
                    assert!(!piece.contains(value), "{piece:?} of {pieces:?} holds a value");
                }
                assert!(!piece.contains("Quartz-Secret"), "{piece:?} of {pieces:?} holds a part of the secret");
            }
            assert_eq!(emitted.concat(), whole, "the pieces {pieces:?} put together differ from the redacted text");
        }
    }

    #[test]
    fn a_long_fragment_of_a_secret_is_taken_for_the_secret() {
        let secrets = Secrets::new(vec![(SecretName::parse("pw").unwrap(), "ZebraQuartz-Secret-9".into())]).unwrap();
        // Typed, then one Backspace: what the entry field holds.
        assert_eq!(secrets.redact("field: ZebraQuartz-Secret-"), "field: <secret:pw>");
        // Cut off by a length limit, at either end.
        assert_eq!(secrets.redact("…Quartz-Secret-9 and on"), "…<secret:pw> and on");
        // A short common piece stays: "Zebra" alone is no secret.
        assert_eq!(secrets.redact("a Zebra crossing"), "a Zebra crossing");
        // The whole value, as ever.
        assert_eq!(secrets.redact("x ZebraQuartz-Secret-9 y"), "x <secret:pw> y");
    }

    #[test]
    fn a_stream_without_secrets_is_passed_through_at_once() {
        let mut stream = StreamRedactor::new(Secrets::none());
        assert_eq!(stream.push("Zebra"), "Zebra");
        assert_eq!(stream.finish(), "");
    }

    use super::*;

    fn secrets(pairs: &[(&str, &str)]) -> Secrets {
        Secrets::new(pairs.iter().map(|(n, v)| (SecretName::parse(n).unwrap(), v.to_string())).collect()).unwrap()
    }

    #[test]
    fn substitution_and_redaction_are_inverse_and_never_show_a_value() {
        let s = secrets(&[("password", "hunter2"), ("pin", "4711"), ("long", "hunter2-and-more")]);
        assert_eq!(s.substitute("<secret:password>\n"), "hunter2\n");
        assert_eq!(s.substitute("a <secret:pin> b <secret:nope>"), "a 4711 b <secret:nope>");
        assert!(matches!(s.substitute("no placeholder"), Cow::Borrowed(_)));
        // The longest value wins where values overlap, and redaction round-trips substitution.
        assert_eq!(s.redact("x hunter2-and-more y hunter2"), "x <secret:long> y <secret:password>");
        let text = "typed <secret:long> then <secret:pin>";
        assert_eq!(s.redact(&s.substitute(text)), text);
        // Names only, whatever is printed.
        let debug = format!("{s:?}");
        assert!(debug.contains("password") && !debug.contains("hunter2") && !debug.contains("4711"), "{debug}");
        assert!(s.note().unwrap().contains("<secret:password>") && !s.note().unwrap().contains("hunter2"));
        // Empty values are refused, naming the secret.
        let e = Secrets::new(vec![(SecretName::parse("x").unwrap(), String::new())]).unwrap_err();
        assert_eq!(e.field, "secrets.x");
        assert!(Secrets::none().is_empty() && Secrets::none().note().is_none());
    }

    #[test]
    fn json_values_are_substituted_and_redacted_in_every_string() {
        let s = secrets(&[("token", "s3cr3t-t0ken")]);
        let args = json!({"auth": "Bearer <secret:token>", "list": ["<secret:token>", 5], "<secret:token>": 1});
        let sent = s.substitute_json(&args).into_owned();
        // Values only: keys stay as written.
        assert_eq!(sent, json!({"auth": "Bearer s3cr3t-t0ken", "list": ["s3cr3t-t0ken", 5], "<secret:token>": 1}));
        let mut echoed = json!({"echo": sent, "s3cr3t-t0ken": "key"});
        assert!(s.redact_json(&mut echoed));
        assert!(!echoed.to_string().contains("s3cr3t-t0ken"), "{echoed}");
        assert_eq!(echoed["echo"]["auth"], "Bearer <secret:token>");
        assert!(!s.redact_json(&mut json!({"clean": true})));
        // A typed value goes through its JSON form; one that no longer deserializes is withheld.
        let outcome = crate::record::Outcome::new(false, "saw s3cr3t-t0ken", crate::record::EndReason::Error);
        assert_eq!(s.redact_serde(&outcome).unwrap().unwrap().summary, "saw <secret:token>");
        let tag = secrets(&[("t", "error")]);
        assert!(tag.redact_serde(&outcome).is_err());
    }

    #[test]
    fn a_turn_is_redacted_in_its_text_calls_and_raw_content() {
        let s = secrets(&[("pw", "turn-secret-77x")]);
        let mut turn = crate::model::ModelTurn {
            text: "typing turn-secret-77x".into(),
            thinking: "it is turn-secret-77".into(),
            calls: vec![
                ToolCall {
                    id: "c1".into(),
                    kind: crate::record::CallKind::Computer {
                        actions: vec![agentd_computer::Action::Type { text: "turn-secret-77x".into() }],
                    },
                },
                ToolCall {
                    id: "c2".into(),
                    kind: crate::record::CallKind::Function {
                        name: "lookup".into(),
                        arguments: json!({"token": "turn-secret-77x"}),
                    },
                },
            ],
            raw: Some(json!([{"type": "text", "text": "typing turn-secret-77x"}])),
            ..Default::default()
        };
        s.redact_turn(&mut turn);
        let shown = format!("{turn:?}");
        assert!(!shown.contains("turn-secret-77"), "{shown}");
        assert_eq!(turn.text, "typing <secret:pw>");
        assert_eq!(turn.raw.unwrap()[0]["text"], "typing <secret:pw>");
    }

    #[test]
    fn the_log_writer_redacts_the_values_of_live_secrets_only() {
        use std::io::Write;
        let live = secrets(&[("w", "log-secret-9f2")]);
        let mut out = RedactingWriter(Vec::new());
        out.write_all(b"error: typing log-secret-9f2 failed\n").unwrap();
        assert_eq!(String::from_utf8(out.0).unwrap(), "error: typing <secret:w> failed\n");
        drop(live);
        assert_eq!(redact_logged("log-secret-9f2"), "log-secret-9f2");
    }
}
