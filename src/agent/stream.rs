//! The boundaries of a model turn (docs/events.md granular events): turns the deltas a model adapter streams
//! ([`Delta`]) and the turn it finally returns into `message_start` … `message_end`, with text, thinking and
//! tool-call blocks between them, and keeps the text streamed so far for a turn that is cut short.
//!
//! The shapes, for every adapter and the scripted model alike:
//! - `message_start` before the call; `message_end` after it (`interrupted: true` when the turn was cut
//!   short — cancelled, timed out, failed, or voided by the adapter's retry — and none of it ran).
//! - A text block is `text_start`, `model_delta {kind: "text"}`…, `text_end {text}`; thinking likewise with
//!   `thinking_*` and `kind: "thinking"`. A block opens at its first delta and closes when a delta of another
//!   kind (or a tool call) arrives, or when the message ends. Blocks never overlap.
//! - A tool call is `tool_call_start {call_id, name}`, `tool_call_delta {call_id, delta}`… (its JSON arguments
//!   as they stream), and, once the turn is complete, `tool_call_end {call_id, name, arguments}` for every
//!   call of the turn in the turn's order. A call that did not stream (a non-streaming adapter, the scripted
//!   model) gets its `tool_call_start` right before its end. A call that streamed but is not in the turn (cut
//!   off by the token limit, or voided by a retry) ends with `arguments: null`.
//! - Text or thinking the turn holds but that never streamed (a non-streamed response) is reported as one
//!   block when the turn returns, so every turn has the same shape.
//! - When an adapter sends the request again after a response had begun to stream ([`Delta::Restart`]), the
//!   message so far ends with `interrupted: true`, an `error {retryable: true}` says why, and a new
//!   `message_start` begins: the turn of a step is always its last message.
//! - A failed call ends the message `interrupted` and is followed by `error {message, retryable}`.
//!
//! Deltas are redacted as a stream ([`StreamRedactor`]): a secret's value split across two deltas never
//! reaches an event in part. The end of a block's (or a call's arguments') text that could still be the start
//! of a secret is held back until the next delta decides it, or until the block ends.

use super::events::EventSink;
use crate::model::{CallKind, Delta, ModelError, ModelTurn};
use crate::record::events::{DeltaKind, EventKind};
use crate::tools::secrets::StreamRedactor;

/// What the error event of a voided response says.
pub const RESTART_MESSAGE: &str =
    "the model's response broke off while it streamed; the request was sent again and what it streamed is void";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Text,
    Thinking,
}

/// What a cut-short turn had streamed: the step record keeps it (`interrupted: true`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Partial {
    pub text: String,
    pub thinking: String,
}

/// The state of one step's model call.
pub struct TurnStream {
    step: u32,
    events: EventSink,
    /// The open text or thinking block, its text so far, and the redaction of its deltas.
    open: Option<(Block, String, StreamRedactor)>,
    /// The closed text blocks of this message, and its thinking.
    texts: Vec<String>,
    thinking: Vec<String>,
    /// Calls that streamed in this message: (call id, name), in order, and the redaction of their arguments.
    calls: Vec<(String, String, StreamRedactor)>,
    /// Whether anything streamed in this message.
    began: bool,
}

impl TurnStream {
    /// Emits `message_start` for `step`.
    pub fn begin(step: u32, events: EventSink) -> Self {
        events.emit(EventKind::MessageStart { step });
        Self { step, events, open: None, texts: Vec::new(), thinking: Vec::new(), calls: Vec::new(), began: false }
    }

    fn emit(&self, kind: EventKind) {
        self.events.emit(kind);
    }

    /// One delta from the adapter.
    pub fn delta(&mut self, delta: Delta<'_>) {
        match delta {
            Delta::Text(text) => self.block_delta(Block::Text, text),
            Delta::Thinking(text) => self.block_delta(Block::Thinking, text),
            Delta::ToolCall { id, name } => {
                if self.calls.iter().any(|(known, ..)| known == id) {
                    return;
                }
                self.close_block();
                self.began = true;
                self.calls.push((id.to_string(), name.to_string(), StreamRedactor::new(self.events.secrets())));
                self.emit(EventKind::ToolCallStart {
                    step: self.step,
                    call_id: id.to_string(),
                    name: name.to_string(),
                });
            }
            Delta::ToolArgs { id, delta } => {
                let Some((_, _, redactor)) = self.calls.iter_mut().find(|(known, ..)| known == id) else { return };
                let delta = redactor.push(delta);
                if delta.is_empty() {
                    return;
                }
                self.emit(EventKind::ToolCallDelta { step: self.step, call_id: id.to_string(), delta });
            }
            Delta::Restart => {
                if !self.began {
                    return;
                }
                self.void(true);
                self.emit(EventKind::Error { step: Some(self.step), message: RESTART_MESSAGE.into(), retryable: true });
                self.emit(EventKind::MessageStart { step: self.step });
            }
        }
    }

    fn block_delta(&mut self, kind: Block, text: &str) {
        if text.is_empty() {
            return;
        }
        if self.open.as_ref().map(|(open, ..)| *open) != Some(kind) {
            self.close_block();
            self.emit(match kind {
                Block::Text => EventKind::TextStart { step: self.step },
                Block::Thinking => EventKind::ThinkingStart { step: self.step },
            });
            self.open = Some((kind, String::new(), StreamRedactor::new(self.events.secrets())));
        }
        self.began = true;
        let Some((_, so_far, redactor)) = self.open.as_mut() else { return };
        so_far.push_str(text);
        let ready = redactor.push(text);
        self.emit_delta(kind, ready);
    }

    fn emit_delta(&self, kind: Block, text: String) {
        if text.is_empty() {
            return;
        }
        let kind = match kind {
            Block::Text => DeltaKind::Text,
            Block::Thinking => DeltaKind::Thinking,
        };
        self.emit(EventKind::ModelDelta { step: self.step, kind, text });
    }

    fn close_block(&mut self) {
        let Some((kind, text, mut redactor)) = self.open.take() else { return };
        self.emit_delta(kind, redactor.finish());
        match kind {
            Block::Text => {
                self.emit(EventKind::TextEnd { step: self.step, text: text.clone() });
                self.texts.push(text);
            }
            Block::Thinking => {
                self.emit(EventKind::ThinkingEnd { step: self.step, text: text.clone() });
                self.thinking.push(text);
            }
        }
    }

    /// Closes what is open, ends every streamed call with `arguments: null`, ends the message as
    /// `interrupted`, and forgets it; returns what it had streamed.
    fn void(&mut self, interrupted: bool) -> Partial {
        self.close_block();
        for (call_id, name, redactor) in std::mem::take(&mut self.calls) {
            self.flush_arguments(&call_id, redactor);
            self.emit(EventKind::ToolCallEnd { step: self.step, call_id, name, arguments: serde_json::Value::Null });
        }
        self.emit(EventKind::MessageEnd { step: self.step, interrupted });
        self.began = false;
        Partial {
            text: std::mem::take(&mut self.texts).join("\n"),
            thinking: std::mem::take(&mut self.thinking).concat(),
        }
    }

    /// The turn returned: reports what did not stream, ends every call, emits `message_end`.
    pub fn finish(mut self, turn: &ModelTurn) {
        self.close_block();
        if self.thinking.is_empty() && !turn.thinking.is_empty() {
            self.block_delta(Block::Thinking, &turn.thinking);
            self.close_block();
        }
        if self.texts.is_empty() && !turn.text.is_empty() {
            self.block_delta(Block::Text, &turn.text);
            self.close_block();
        }
        let mut streamed = std::mem::take(&mut self.calls);
        for call in &turn.calls {
            let position = streamed.iter().position(|(id, ..)| *id == call.id);
            let name = match position {
                Some(i) => {
                    let (call_id, name, redactor) = streamed.remove(i);
                    self.flush_arguments(&call_id, redactor);
                    name
                }
                None => {
                    let name = match &call.kind {
                        CallKind::Function { name, .. } => name.clone(),
                        CallKind::Computer { .. } => "computer".to_string(),
                    };
                    self.emit(EventKind::ToolCallStart {
                        step: self.step,
                        call_id: call.id.clone(),
                        name: name.clone(),
                    });
                    name
                }
            };
            let arguments = match &call.kind {
                CallKind::Function { arguments, .. } => arguments.clone(),
                CallKind::Computer { actions } => serde_json::json!({ "actions": actions }),
            };
            self.emit(EventKind::ToolCallEnd { step: self.step, call_id: call.id.clone(), name, arguments });
        }
        self.calls = streamed;
        self.void(false);
    }

    /// The last of a streamed call's arguments that was held back (it could have begun a secret).
    fn flush_arguments(&self, call_id: &str, mut redactor: StreamRedactor) {
        let delta = redactor.finish();
        if !delta.is_empty() {
            self.emit(EventKind::ToolCallDelta { step: self.step, call_id: call_id.to_string(), delta });
        }
    }

    /// The call was cut short (cancelled, timed out): ends the message `interrupted` and returns what it
    /// had streamed.
    pub fn interrupt(mut self) -> Partial {
        self.void(true)
    }

    /// The call failed: ends the message `interrupted`, then emits `error`.
    pub fn fail(mut self, error: &ModelError) {
        self.void(true);
        self.emit(EventKind::Error {
            step: Some(self.step),
            message: error.to_string(),
            retryable: error.is_retryable(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolCall;
    use crate::record::events::Event;
    use serde_json::json;

    fn kinds(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Event>) -> Vec<EventKind> {
        let mut out = Vec::new();
        while let Ok(event) = rx.try_recv() {
            out.push(event.kind);
        }
        out
    }

    fn names(kinds: &[EventKind]) -> Vec<&'static str> {
        kinds.iter().map(EventKind::type_name).collect()
    }

    #[test]
    fn a_secret_streamed_in_two_halves_reaches_no_event_in_part() {
        use crate::task::secrets::SecretName;
        use crate::tools::secrets::Secrets;
        let (sink, mut rx) = EventSink::channel("t", 1);
        let secret = "ZebraQuartz-Secret-9";
        sink.seal(Secrets::new(vec![(SecretName::parse("pw").unwrap(), secret.into())]).unwrap());
        let mut stream = TurnStream::begin(1, sink);
        stream.delta(Delta::Text("the password is Zebra"));
        stream.delta(Delta::Text("Quartz-Secret-9, typed"));
        stream.delta(Delta::Thinking("ZebraQuartz-"));
        stream.delta(Delta::Thinking("Secret-9"));
        stream.delta(Delta::ToolCall { id: "a", name: "lookup" });
        stream.delta(Delta::ToolArgs { id: "a", delta: "{\"q\":\"ZebraQu" });
        stream.delta(Delta::ToolArgs { id: "a", delta: "artz-Secret-9\"}" });
        let turn = ModelTurn {
            text: format!("the password is {secret}, typed"),
            thinking: secret.into(),
            calls: vec![ToolCall {
                id: "a".into(),
                kind: CallKind::Function { name: "lookup".into(), arguments: json!({"q": secret}) },
            }],
            ..ModelTurn::default()
        };
        stream.finish(&turn);
        let events = kinds(&mut rx);
        let mut text = String::new();
        let mut args = String::new();
        for kind in &events {
            let json = serde_json::to_string(kind).unwrap();
            for part in ["Quartz", "Secret-9", "Zebra"] {
                assert!(!json.contains(part), "{part:?} reached an event: {json}");
            }
            match kind {
                EventKind::ModelDelta { kind: DeltaKind::Text, text: t, .. } => text.push_str(t),
                EventKind::ToolCallDelta { delta, .. } => args.push_str(delta),
                _ => {}
            }
        }
        // The deltas still add up to the (redacted) text and arguments.
        assert_eq!(text, "the password is <secret:pw>, typed");
        assert_eq!(args, "{\"q\":\"<secret:pw>\"}");
    }

    #[test]
    fn blocks_open_at_their_first_delta_and_close_when_another_kind_starts() {
        let (sink, mut rx) = EventSink::channel("t", 1);
        let mut stream = TurnStream::begin(4, sink);
        stream.delta(Delta::Thinking("hm"));
        stream.delta(Delta::Text("Hel"));
        stream.delta(Delta::Text(""));
        stream.delta(Delta::Text("lo"));
        stream.delta(Delta::ToolCall { id: "a", name: "lookup" });
        stream.delta(Delta::ToolArgs { id: "a", delta: "{\"q\":" });
        stream.delta(Delta::ToolArgs { id: "zz", delta: "ignored: no such call" });
        stream.delta(Delta::ToolCall { id: "b", name: "computer" });
        stream.delta(Delta::ToolArgs { id: "a", delta: "1}" });
        let turn = ModelTurn {
            text: "Hello".into(),
            thinking: "hm".into(),
            calls: vec![
                ToolCall {
                    id: "a".into(),
                    kind: CallKind::Function { name: "lookup".into(), arguments: json!({"q": 1}) },
                },
                ToolCall {
                    id: "b".into(),
                    kind: CallKind::Computer { actions: vec![agentd_computer::Action::Screenshot {}] },
                },
                ToolCall {
                    id: "c".into(),
                    kind: CallKind::Function { name: "task_completion".into(), arguments: json!({}) },
                },
            ],
            ..ModelTurn::default()
        };
        stream.finish(&turn);
        let events = kinds(&mut rx);
        assert_eq!(
            names(&events),
            [
                "message_start",
                "thinking_start",
                "model_delta",
                "thinking_end",
                "text_start",
                "model_delta",
                "model_delta",
                "text_end",
                "tool_call_start",
                "tool_call_delta",
                "tool_call_start",
                "tool_call_delta",
                "tool_call_end",
                "tool_call_end",
                "tool_call_start",
                "tool_call_end",
                "message_end"
            ]
        );
        assert_eq!(events[7], EventKind::TextEnd { step: 4, text: "Hello".into() });
        assert_eq!(events[11], EventKind::ToolCallDelta { step: 4, call_id: "a".into(), delta: "1}".into() });
        assert_eq!(
            events[13],
            EventKind::ToolCallEnd {
                step: 4,
                call_id: "b".into(),
                name: "computer".into(),
                arguments: json!({"actions": [{"type": "screenshot"}]})
            }
        );
        assert_eq!(
            events[14],
            EventKind::ToolCallStart { step: 4, call_id: "c".into(), name: "task_completion".into() }
        );
        assert_eq!(events[16], EventKind::MessageEnd { step: 4, interrupted: false });
    }

    #[test]
    fn a_turn_that_never_streamed_gets_the_same_shape() {
        let (sink, mut rx) = EventSink::channel("t", 1);
        let stream = TurnStream::begin(0, sink);
        let turn = ModelTurn { text: "Done.".into(), ..ModelTurn::default() };
        stream.finish(&turn);
        let events = kinds(&mut rx);
        assert_eq!(names(&events), ["message_start", "text_start", "model_delta", "text_end", "message_end"]);
        assert_eq!(events[2], EventKind::ModelDelta { step: 0, kind: DeltaKind::Text, text: "Done.".into() });
    }

    #[test]
    fn a_restart_voids_the_message_and_begins_another() {
        let (sink, mut rx) = EventSink::channel("t", 1);
        let mut stream = TurnStream::begin(1, sink);
        stream.delta(Delta::Restart); // nothing streamed yet: nothing to void
        stream.delta(Delta::Text("Half"));
        stream.delta(Delta::ToolCall { id: "x", name: "computer" });
        stream.delta(Delta::Restart);
        stream.delta(Delta::Text("Whole"));
        stream.finish(&ModelTurn { text: "Whole".into(), ..ModelTurn::default() });
        let events = kinds(&mut rx);
        assert_eq!(
            names(&events),
            [
                "message_start",
                "text_start",
                "model_delta",
                "text_end",
                "tool_call_start",
                "tool_call_end",
                "message_end",
                "error",
                "message_start",
                "text_start",
                "model_delta",
                "text_end",
                "message_end"
            ]
        );
        assert_eq!(
            events[5],
            EventKind::ToolCallEnd {
                step: 1,
                call_id: "x".into(),
                name: "computer".into(),
                arguments: serde_json::Value::Null
            }
        );
        assert_eq!(events[6], EventKind::MessageEnd { step: 1, interrupted: true });
        assert!(matches!(&events[7], EventKind::Error { retryable: true, .. }));
        assert_eq!(events[11], EventKind::TextEnd { step: 1, text: "Whole".into() });
    }

    #[test]
    fn an_interrupted_turn_keeps_what_streamed() {
        let (sink, mut rx) = EventSink::channel("t", 1);
        let mut stream = TurnStream::begin(2, sink);
        stream.delta(Delta::Thinking("Think"));
        stream.delta(Delta::Text("Part one"));
        stream.delta(Delta::ToolCall { id: "a", name: "lookup" });
        stream.delta(Delta::Text("part two"));
        let partial = stream.interrupt();
        assert_eq!(partial, Partial { text: "Part one\npart two".into(), thinking: "Think".into() });
        let events = kinds(&mut rx);
        let tail: Vec<_> = names(&events).into_iter().rev().take(3).collect();
        assert_eq!(tail, ["message_end", "tool_call_end", "text_end"]);
        assert_eq!(events.last(), Some(&EventKind::MessageEnd { step: 2, interrupted: true }));
    }

    #[test]
    fn a_failed_call_ends_the_message_then_says_why() {
        let (sink, mut rx) = EventSink::channel("t", 1);
        let mut stream = TurnStream::begin(0, sink);
        stream.delta(Delta::Text("Hi"));
        stream.fail(&ModelError::Unavailable("anthropic after 2 retries: 529".into()));
        let events = kinds(&mut rx);
        assert_eq!(names(&events), ["message_start", "text_start", "model_delta", "text_end", "message_end", "error"]);
        assert_eq!(
            events[5],
            EventKind::Error {
                step: Some(0),
                message: "model unavailable after retries: anthropic after 2 retries: 529".into(),
                retryable: true
            }
        );
    }
}
