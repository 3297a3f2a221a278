//! Server-Sent Events, read incrementally (WHATWG HTML "server-sent events", section 9.2.6): the one parser both the
//! model adapters' streams and the CLI's event follower use.
//!
//! Bytes are split into lines before they are decoded, so a character split across network chunks is never
//! corrupted; `data:` lines are joined with `\n`, comments (`:`) ignored, an event dispatched at a blank line,
//! `\r\n` and `\n` line ends. `id:` sets the last event ID, which every later event carries until another
//! `id:` changes it: what a client sends back as `Last-Event-ID` to resume.

/// One Server-Sent Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The last event ID when this event was dispatched (its own `id:`, else the latest one before it).
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

/// Largest line buffered while parsing a stream (a base64 image in an echo could be large).
const MAX_SSE_LINE: usize = 64 * 1024 * 1024;

/// An incremental SSE parser: feed it chunks as they arrive, collect the events they complete.
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    event: Option<String>,
    data: Option<String>,
    last_id: Option<String>,
}

impl SseParser {
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), String> {
        for &byte in chunk {
            if byte == b'\n' {
                let mut line = std::mem::take(&mut self.line);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                self.line_done(&line, out);
            } else {
                if self.line.len() >= MAX_SSE_LINE {
                    return Err("a stream line is longer than 64 MiB".into());
                }
                self.line.push(byte);
            }
        }
        Ok(())
    }

    fn line_done(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            if let Some(data) = self.data.take() {
                out.push(SseEvent { id: self.last_id.clone(), event: self.event.take(), data });
            }
            self.event = None;
            return;
        }
        if line[0] == b':' {
            return;
        }
        let text = String::from_utf8_lossy(line);
        let (field, value) = match text.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (text.as_ref(), ""),
        };
        match field {
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            "event" => self.event = Some(value.to_string()),
            // The standard ignores an id holding NUL.
            "id" if !value.contains('\0') => self.last_id = Some(value.to_string()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = SseParser::default();
        let mut out = Vec::new();
        for chunk in chunks {
            parser.push(chunk, &mut out).unwrap();
        }
        out
    }

    #[test]
    fn sse_events_split_anywhere_join_multiline_data_and_skip_comments() {
        let text =
            "event: a\r\nid: 7\r\ndata: {\"x\":\r\ndata: \"é日\"}\r\n\r\n: ping\n\nevent: b\ndata:2\n\nid\ndata: 3\n\n"
                .as_bytes();
        let whole = parse_all(&[text]);
        assert_eq!(
            whole,
            vec![
                SseEvent { id: Some("7".into()), event: Some("a".into()), data: "{\"x\":\n\"é日\"}".into() },
                SseEvent { id: Some("7".into()), event: Some("b".into()), data: "2".into() },
                SseEvent { id: Some(String::new()), event: None, data: "3".into() },
            ]
        );
        for split in 1..text.len() {
            assert_eq!(parse_all(&[&text[..split], &text[split..]]), whole, "split at {split}");
        }
        // An event without its blank line at the end of the stream is not dispatched.
        assert!(parse_all(&[b"data: 1\n"]).is_empty());
    }
}
