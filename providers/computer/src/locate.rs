//! The one field locator of every JSON file people write for agentd (task files, scripts, mock scenes): finds
//! where a field path (`screens[0].windows[1].widgets[2].button.on_click[0].goto`, `computer.scene`) sits in
//! a JSON text, as a line and column, so that errors found after parsing (an unknown screen, a scene file
//! that does not exist) point at the same place a parse error would. It lives in this crate because both
//! agentd and the mock provider read such files and this is the crate below both.
//!
//! The text has already parsed as JSON when this runs; the scanner still never panics on bad input and simply
//! answers `None` when it cannot follow the path.

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Key(String),
    Index(usize),
}

fn parse_path(path: &str) -> Vec<Segment> {
    let mut segments = Vec::new();
    for part in path.split('.') {
        let (key, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !key.is_empty() {
            segments.push(Segment::Key(key.to_string()));
        }
        while let Some(stripped) = rest.strip_prefix('[') {
            let Some(end) = stripped.find(']') else { break };
            if let Ok(index) = stripped[..end].parse() {
                segments.push(Segment::Index(index));
            }
            rest = &stripped[end + 1..];
        }
    }
    segments
}

/// The 1-based line and column where the value at `path` starts, or where the deepest reachable part of the
/// path starts when the rest is missing.
pub fn locate(text: &str, path: &str) -> (usize, usize) {
    let (pos, _) = follow(text.as_bytes(), path);
    line_column(text.as_bytes(), pos)
}

/// The 1-based line and column where the value at `path` starts; `None` when the text does not hold the whole
/// path.
pub fn find(text: &str, path: &str) -> Option<(usize, usize)> {
    match follow(text.as_bytes(), path) {
        (pos, true) => Some(line_column(text.as_bytes(), pos)),
        (_, false) => None,
    }
}

/// How far `path` can be followed: the offset reached and whether that is the whole path.
fn follow(bytes: &[u8], path: &str) -> (usize, bool) {
    let mut pos = skip_ws(bytes, 0);
    for segment in parse_path(path) {
        match step(bytes, pos, &segment) {
            Some(next) => pos = next,
            None => return (pos, false),
        }
    }
    (pos, true)
}

/// The 1-based line and column (in characters) of a byte offset; bytes that are not UTF-8 count one each.
pub fn line_column(text: &[u8], offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let column = String::from_utf8_lossy(&before[line_start..]).chars().count() + 1;
    (line, column)
}

fn skip_ws(bytes: &[u8], mut pos: usize) -> usize {
    while pos < bytes.len() && bytes[pos].is_ascii_whitespace() {
        pos += 1;
    }
    pos
}

/// From the start of an object or array value, the start of the member `segment` names.
fn step(bytes: &[u8], pos: usize, segment: &Segment) -> Option<usize> {
    match (segment, bytes.get(pos)?) {
        (Segment::Key(want), b'{') => {
            let mut pos = skip_ws(bytes, pos + 1);
            while bytes.get(pos)? == &b'"' {
                let key_end = skip_string(bytes, pos)?;
                let key = &bytes[pos + 1..key_end - 1];
                pos = skip_ws(bytes, key_end);
                if bytes.get(pos)? != &b':' {
                    return None;
                }
                pos = skip_ws(bytes, pos + 1);
                if key == want.as_bytes() {
                    return Some(pos);
                }
                pos = skip_ws(bytes, skip_value(bytes, pos)?);
                if bytes.get(pos)? == &b',' {
                    pos = skip_ws(bytes, pos + 1);
                }
            }
            None
        }
        (Segment::Index(want), b'[') => {
            let mut pos = skip_ws(bytes, pos + 1);
            for _ in 0..*want {
                if bytes.get(pos)? == &b']' {
                    return None;
                }
                pos = skip_ws(bytes, skip_value(bytes, pos)?);
                if bytes.get(pos)? == &b',' {
                    pos = skip_ws(bytes, pos + 1);
                }
            }
            (bytes.get(pos)? != &b']').then_some(pos)
        }
        _ => None,
    }
}

/// The position just past the string starting at `pos` (which holds its opening quote).
fn skip_string(bytes: &[u8], pos: usize) -> Option<usize> {
    let mut i = pos + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// The position just past the value starting at `pos`.
fn skip_value(bytes: &[u8], pos: usize) -> Option<usize> {
    match bytes.get(pos)? {
        b'"' => skip_string(bytes, pos),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = pos;
            while i < bytes.len() {
                match bytes[i] {
                    b'"' => {
                        i = skip_string(bytes, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => {
            let mut i = pos;
            while i < bytes.len() && !matches!(bytes[i], b',' | b'}' | b']') && !bytes[i].is_ascii_whitespace() {
                i += 1;
            }
            Some(i)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"{
  "screens": [
    {"id": "a", "note": "has \"quotes\" and {braces}"},
    {
      "id": "b",
      "windows": [ { "widgets": [ {"button": {"id": "x", "on_click": [{"goto": "nowhere"}]}} ] } ]
    }
  ]
}"#;

    #[test]
    fn finds_nested_values() {
        assert_eq!(locate(TEXT, "screens[1].id"), (5, 13));
        let (line, column) = locate(TEXT, "screens[1].windows[0].widgets[0].button.on_click[0].goto");
        assert_eq!(line, 6);
        assert_eq!(&TEXT.lines().nth(5).unwrap_or("")[column - 1..column + 8], "\"nowhere\"");
    }

    #[test]
    fn stops_at_the_deepest_known_part() {
        assert_eq!(locate(TEXT, "screens[1].missing"), locate(TEXT, "screens[1]"));
        assert_eq!(locate(TEXT, "screens[9]"), locate(TEXT, "screens"));
        assert_eq!(locate(TEXT, ""), (1, 1));
        assert_eq!(locate("not json", "a.b"), (1, 1));
    }

    #[test]
    fn find_wants_the_whole_path() {
        assert_eq!(find(TEXT, "screens[1].id"), Some((5, 13)));
        assert_eq!(find(TEXT, "screens[1].missing"), None);
        assert_eq!(find("not json", "a"), None);
        assert_eq!(line_column("añb\nc".as_bytes(), 3), (1, 3));
        assert_eq!(line_column("añb\nc".as_bytes(), 5), (2, 1));
    }
}
