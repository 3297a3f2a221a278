//! Reading what an out-of-process tool answered (an `http` tool's response body, a `command` tool's stdout)
//! as the docs/tools.md result envelope, and the size bound every such answer is held to.
//!
//! An answer that is a JSON object with an `ok` member is an envelope: `ok` must be a boolean, `output` a
//! string, `details` (optional) anything; other members are ignored. A malformed envelope is a failed call
//! saying what is wrong (the tool meant to answer an envelope). Anything else — plain text, a JSON value that
//! is not such an object — is `ok` output as it is (trailing white space, such as a
//! program's last newline, removed).

use serde_json::Value;

use super::ToolOutcome;

/// The most an `http` tool's response body or a `command` tool's stdout may hold (1 MiB); a larger answer
/// is a failed call.
pub const MAX_ANSWER_BYTES: usize = 1 << 20;

/// The most of a `command` tool's stderr kept for its error message (the tail: the last 2 KiB).
pub const STDERR_TAIL_BYTES: usize = 2 << 10;

/// Reads `text` as the envelope of tool `tool`'s answer.
pub fn parse(tool: &str, text: &str) -> ToolOutcome {
    envelope(tool, text).unwrap_or_else(|| plain(text))
}

/// Reads a program's stdout: the envelope when the whole of it is one, else when its last non-empty line is
/// one (the lines before it were progress, streamed as they came), else plain text.
pub fn parse_output(tool: &str, text: &str) -> ToolOutcome {
    envelope(tool, text)
        .or_else(|| text.trim_end().rsplit('\n').next().and_then(|last| envelope(tool, last)))
        .unwrap_or_else(|| plain(text))
}

fn plain(text: &str) -> ToolOutcome {
    ToolOutcome::ok(text.trim_end())
}

/// `text` as an envelope, or `None` when it is not a JSON object with an `ok` member.
fn envelope(tool: &str, text: &str) -> Option<ToolOutcome> {
    let trimmed = text.trim();
    if !trimmed.starts_with('{') {
        return None;
    }
    let Ok(Value::Object(mut map)) = serde_json::from_str::<Value>(trimmed) else {
        return None;
    };
    let ok = map.remove("ok")?;
    let malformed = |problem: &str| {
        Some(ToolOutcome::error(format!(
            "tool {tool} answered a malformed result envelope: {problem} (expected {{\"ok\": bool, \"output\": string, \"details\"?: any}})"
        )))
    };
    let Value::Bool(ok) = ok else {
        return malformed("`ok` is not a boolean");
    };
    let output = match map.remove("output") {
        Some(Value::String(output)) => output,
        Some(_) => return malformed("`output` is not a string"),
        None => return malformed("`output` is missing"),
    };
    Some(ToolOutcome { ok, message: output, details: map.remove("details"), image: None })
}

/// The end of `bytes` as text: at most `max` bytes, cut at a character boundary, marked when cut.
pub fn tail(bytes: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim_end();
    if text.len() <= max {
        return text.to_string();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

/// The start of `text`: at most `max` bytes, cut at a character boundary, marked when cut.
pub fn head(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn envelopes_plain_text_and_malformed_envelopes() {
        assert_eq!(
            parse("t", r#"{"ok": true, "output": "found", "details": {"n": 1}}"#),
            ToolOutcome::ok("found").with_details(json!({"n": 1}))
        );
        assert_eq!(
            parse("t", "  {\"ok\": false, \"output\": \"no such order\"}\n"),
            ToolOutcome::error("no such order")
        );
        // Plain text, other JSON, objects that are not envelopes: ok output as they are.
        assert_eq!(parse("t", "order 7 shipped\n"), ToolOutcome::ok("order 7 shipped"));
        assert_eq!(parse("t", "[1, 2]"), ToolOutcome::ok("[1, 2]"));
        assert_eq!(parse("t", r#"{"status": "shipped"}"#), ToolOutcome::ok(r#"{"status": "shipped"}"#));
        assert_eq!(parse("t", "{not json"), ToolOutcome::ok("{not json"));
        assert_eq!(parse("t", ""), ToolOutcome::ok(""));
        for (body, problem) in [
            (r#"{"ok": "yes", "output": "x"}"#, "`ok` is not a boolean"),
            (r#"{"ok": true}"#, "`output` is missing"),
            (r#"{"ok": true, "output": 5}"#, "`output` is not a string"),
        ] {
            let outcome = parse("lookup", body);
            assert!(
                !outcome.ok && outcome.message.contains(problem) && outcome.message.contains("lookup"),
                "{outcome:?}"
            );
        }
    }

    #[test]
    fn a_program_may_print_progress_before_its_envelope() {
        let stdout = "step 1\nstep 2\n{\"ok\": false, \"output\": \"no\", \"details\": 1}\n\n";
        assert_eq!(parse_output("t", stdout), ToolOutcome::error("no").with_details(json!(1)));
        assert_eq!(parse("t", stdout), ToolOutcome::ok(stdout.trim_end()));
        assert_eq!(parse_output("t", "a\nb\n"), ToolOutcome::ok("a\nb"));
        let pretty = "{\n  \"ok\": true,\n  \"output\": \"x\"\n}\n";
        assert_eq!(parse_output("t", pretty), ToolOutcome::ok("x"));
    }

    #[test]
    fn heads_and_tails_cut_at_characters() {
        assert_eq!(tail(b"abc\n", 10), "abc");
        assert_eq!(tail("xxé".as_bytes(), 1), "…");
        assert_eq!(tail(b"0123456789", 3), "…789");
        assert_eq!(head("é1234", 1), "…");
        assert_eq!(head("0123456789", 3), "012…");
    }
}
