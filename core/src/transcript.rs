//! Reading Claude Code's transcripts (`~/.claude/projects/<slug>/<id>.jsonl`)
//! for the catalogue, bounded: only a head and a tail of each file are read
//! (Sessions page, "Finding one": external sessions). The shell reads the
//! bytes; this module turns them into a row, and never fails as a whole on
//! bad lines.
//!
//! A session is attributed by the `cwd` recorded inside it, never by the
//! folder slug (the slug is lossy: `_`, `.` and non-Latin characters all
//! become `-`).

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::ids;

/// Bytes read from the start of a transcript.
pub const HEAD_BYTES: usize = 64 * 1024;
/// Bytes read from the end of a transcript (where Claude Code re-appends a
/// custom title).
pub const TAIL_BYTES: usize = 64 * 1024;
/// Longest title kept, in characters.
pub const TITLE_MAX_CHARS: usize = 80;

/// What the catalogue needs of one transcript.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TranscriptSummary {
    /// The session id (the file name's stem, validated).
    pub session_id: String,
    /// The working directory recorded inside the transcript.
    pub cwd: Option<String>,
    /// The title: a custom title, else a summary line, else the first
    /// prompt; valid UTF-8, cut on a character boundary, no control
    /// characters.
    pub title: String,
    /// The first user prompt, cut like the title.
    pub first_prompt: Option<String>,
    /// The first timestamp seen (ISO-8601).
    pub first_timestamp: Option<String>,
    /// The last timestamp seen (ISO-8601).
    pub last_timestamp: Option<String>,
    /// User and assistant messages: exact when the whole file was read,
    /// else scaled from the sample.
    pub message_estimate: u64,
    /// Lines that did not parse (logged by the caller, never fatal).
    pub bad_lines: u64,
}

/// Cuts `text` to `TITLE_MAX_CHARS` characters on a character boundary,
/// first line only, without control or bidirectional-override characters.
pub fn clean_title(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .chars()
        .filter(|c| !c.is_control() && !matches!(*c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}'))
        .take(TITLE_MAX_CHARS)
        .collect()
}

/// One transcript line, only the fields the scan reads, each kept as its raw
/// JSON text (borrowed from the line, nothing else of it copied or built):
/// a field of an unexpected shape is then skipped on its own rather than
/// costing the line, and the rest of the line (a tool's output, a progress
/// record's payload) is only stepped over.
#[derive(Deserialize)]
struct Line<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    cwd: Option<&'a RawValue>,
    #[serde(borrow, default)]
    timestamp: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "isSidechain")]
    is_sidechain: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "customTitle")]
    custom_title: Option<&'a RawValue>,
    #[serde(borrow, default)]
    summary: Option<&'a RawValue>,
    #[serde(borrow, default)]
    message: Option<&'a RawValue>,
}

/// A message's `content`, raw.
#[derive(Deserialize)]
struct MessageContent<'a> {
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

/// One block of a message's content list, raw.
#[derive(Deserialize)]
struct Block<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    text: Option<&'a RawValue>,
}

/// The string a raw field holds; `None` when it holds anything else.
fn string(raw: Option<&RawValue>) -> Option<String> {
    raw.filter(|r| r.get().starts_with('"')).and_then(|r| serde_json::from_str::<String>(r.get()).ok())
}

/// The text of a user message: its content when that is a string, else
/// the first `text` block of its list.
fn user_text(message: Option<&RawValue>) -> Option<String> {
    let content = serde_json::from_str::<MessageContent<'_>>(message?.get()).ok()?.content?;
    match content.get().as_bytes().first() {
        Some(b'"') => string(Some(content)),
        Some(b'[') => serde_json::from_str::<Vec<Block<'_>>>(content.get())
            .ok()?
            .into_iter()
            .find_map(|b| (string(b.kind).as_deref() == Some("text")).then(|| string(b.text)).flatten()),
        _ => None,
    }
}

#[derive(Default)]
struct Scan {
    cwd: Option<String>,
    custom_title: Option<String>,
    summary: Option<String>,
    first_prompt: Option<String>,
    first_timestamp: Option<String>,
    last_timestamp: Option<String>,
    messages: u64,
    bad_lines: u64,
}

impl Scan {
    fn line(&mut self, raw: &[u8]) {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let Ok(line) = serde_json::from_slice::<Line<'_>>(raw) else {
            self.bad_lines += 1;
            return;
        };
        let kind = string(line.kind).unwrap_or_default();
        if self.cwd.is_none() {
            self.cwd = string(line.cwd);
        }
        if let Some(ts) = string(line.timestamp) {
            if self.first_timestamp.is_none() {
                self.first_timestamp = Some(ts.clone());
            }
            self.last_timestamp = Some(ts);
        }
        match kind.as_str() {
            "user" | "assistant" => {
                self.messages += 1;
                let sidechain = line.is_sidechain.is_some_and(|r| r.get() == "true");
                if kind == "user" && self.first_prompt.is_none() && !sidechain {
                    if let Some(text) = user_text(line.message) {
                        let cleaned = clean_title(&text);
                        if !cleaned.is_empty() {
                            self.first_prompt = Some(cleaned);
                        }
                    }
                }
            }
            "custom-title" => {
                if let Some(t) = string(line.custom_title) {
                    self.custom_title = Some(clean_title(&t));
                }
            }
            "summary" => {
                if let Some(t) = string(line.summary) {
                    self.summary = Some(clean_title(&t));
                }
            }
            _ => {}
        }
    }

    /// Scans the complete lines of `bytes`; `from_start`/`to_end` say
    /// whether its first/last line is whole. A last line cut by the end of
    /// a head (`from_start` and not `to_end`) is read as far as it goes, for
    /// the working directory and the first prompt only: a first message
    /// longer than the head (a pasted file) still names the row.
    fn chunk(&mut self, bytes: &[u8], from_start: bool, to_end: bool) {
        let mut lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
        if !from_start && !lines.is_empty() {
            lines.remove(0);
        }
        let cut = if to_end { None } else { lines.pop() };
        for l in lines {
            self.line(l);
        }
        if let Some(prefix) = cut.filter(|_| from_start) {
            self.cut_line(prefix);
        }
    }

    /// A line whose end was not read: closed where it was cut
    /// ([`close_truncated`]) and read for what a head owes the row when
    /// nothing before it said so: the `cwd`, and the first prompt of a user
    /// message (its `type` may come after the message, so the message's
    /// `role` stands in). Never counted as a message or a bad line.
    fn cut_line(&mut self, prefix: &[u8]) {
        if self.cwd.is_some() && self.first_prompt.is_some() {
            return;
        }
        let Some(closed) = close_truncated(prefix) else { return };
        let Ok(line) = serde_json::from_slice::<Line<'_>>(&closed) else { return };
        if self.cwd.is_none() {
            self.cwd = string(line.cwd);
        }
        let sidechain = line.is_sidechain.is_some_and(|r| r.get() == "true");
        let role = || line.message.and_then(|m| serde_json::from_str::<MessageRole<'_>>(m.get()).ok()).and_then(|m| string(m.role));
        let is_user = match string(line.kind) {
            Some(kind) => kind == "user",
            None => role().as_deref() == Some("user"),
        };
        if is_user && !sidechain && self.first_prompt.is_none() {
            if let Some(text) = user_text(line.message) {
                let cleaned = clean_title(&text);
                if !cleaned.is_empty() {
                    self.first_prompt = Some(cleaned);
                }
            }
        }
    }
}

/// A message's `role`, raw.
#[derive(Deserialize)]
struct MessageRole<'a> {
    #[serde(borrow, default)]
    role: Option<&'a RawValue>,
}

/// Most nesting [`close_truncated`] follows; a deeper line is not read.
const CLOSE_DEPTH_MAX: usize = 64;

/// What a container of a cut document expects next.
#[derive(Clone, Copy, PartialEq)]
enum Expect {
    Key,
    Colon,
    Value,
    CommaOrEnd,
}

/// The closers of the containers `open` (innermost last), appended to `out`.
fn close_all(out: &mut Vec<u8>, open: &[(u8, Expect)]) {
    for &(c, _) in open.iter().rev() {
        out.push(if c == b'{' { b'}' } else { b']' });
    }
}

/// Turns the first bytes of a JSON object whose end was cut off into a
/// complete document that keeps every member read whole and, when the cut
/// fell inside a string value, that value up to the cut. Whatever was
/// half read otherwise (a key, a number, `tru`) is dropped back to the last
/// member that was whole, and the open containers are closed. `None` when
/// the bytes do not start an object or nest deeper than
/// [`CLOSE_DEPTH_MAX`]. One pass over the input.
fn close_truncated(bytes: &[u8]) -> Option<Vec<u8>> {
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace())?;
    if bytes[start] != b'{' {
        return None;
    }
    // The containers open, innermost last, and what each expects next.
    let mut stack: Vec<(u8, Expect)> = Vec::new();
    // The last place the document could end, with the containers then open.
    let mut safe: (usize, Vec<(u8, Expect)>) = (start, Vec::new());
    let mut i = start;
    while i < bytes.len() {
        let b = bytes[i];
        if b.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let expect = stack.last().map(|&(_, e)| e);
        match b {
            b'{' | b'[' if matches!(expect, None | Some(Expect::Value)) => {
                if stack.len() >= CLOSE_DEPTH_MAX {
                    return None;
                }
                if let Some(top) = stack.last_mut() {
                    top.1 = Expect::CommaOrEnd;
                }
                stack.push((b, if b == b'{' { Expect::Key } else { Expect::Value }));
                i += 1;
                safe = (i, stack.clone());
            }
            b'}' | b']' if stack.last().is_some_and(|&(open, e)| match (open, b) {
                (b'{', b'}') => matches!(e, Expect::Key | Expect::CommaOrEnd),
                (b'[', b']') => matches!(e, Expect::Value | Expect::CommaOrEnd),
                _ => false,
            }) => {
                stack.pop();
                i += 1;
                if stack.is_empty() {
                    return Some(bytes[start..i].to_vec());
                }
                safe = (i, stack.clone());
            }
            b'"' if matches!(expect, Some(Expect::Key | Expect::Value)) => {
                let is_key = expect == Some(Expect::Key);
                // The string's end, stepping over escapes.
                let mut j = i + 1;
                let mut closed = false;
                while j < bytes.len() {
                    match bytes[j] {
                        b'\\' => j += 2,
                        b'"' => {
                            closed = true;
                            break;
                        }
                        _ => j += 1,
                    }
                }
                if !closed {
                    if is_key {
                        break;
                    }
                    // Cut inside a value: keep it up to the last whole
                    // character, never half an escape.
                    let body = &bytes[i + 1..];
                    let mut end = body.len();
                    let mut k = 0;
                    // Where a high surrogate's escape began, while it is
                    // the last thing read: cut alone, it is not JSON.
                    let mut high_surrogate_at = None;
                    while k < body.len() {
                        if body[k] == b'\\' {
                            let len = if body.get(k + 1) == Some(&b'u') { 6 } else { 2 };
                            if k + len > body.len() {
                                end = k;
                                break;
                            }
                            let high = len == 6 && matches!(body.get(k + 2..k + 4), Some([b'd' | b'D', b'8' | b'9' | b'a' | b'b' | b'A' | b'B']));
                            high_surrogate_at = high.then_some(k);
                            k += len;
                        } else {
                            high_surrogate_at = None;
                            k += 1;
                        }
                    }
                    if let Some(at) = high_surrogate_at.filter(|&at| at + 6 == end) {
                        end = at;
                    }
                    let whole = match std::str::from_utf8(&body[..end]) {
                        Ok(_) => end,
                        Err(e) => e.valid_up_to(),
                    };
                    let mut out = bytes[start..i + 1 + whole].to_vec();
                    out.push(b'"');
                    close_all(&mut out, &stack);
                    return Some(out);
                }
                i = j + 1;
                if let Some(top) = stack.last_mut() {
                    top.1 = if is_key { Expect::Colon } else { Expect::CommaOrEnd };
                }
                if !is_key {
                    safe = (i, stack.clone());
                }
            }
            b':' if expect == Some(Expect::Colon) => {
                if let Some(top) = stack.last_mut() {
                    top.1 = Expect::Value;
                }
                i += 1;
            }
            b',' if expect == Some(Expect::CommaOrEnd) => {
                if let Some(top) = stack.last_mut() {
                    top.1 = if top.0 == b'{' { Expect::Key } else { Expect::Value };
                }
                i += 1;
            }
            _ if expect == Some(Expect::Value) => {
                // A number or a literal: whole only when something follows.
                let mut j = i;
                while j < bytes.len() && !matches!(bytes[j], b',' | b'}' | b']') && !bytes[j].is_ascii_whitespace() {
                    j += 1;
                }
                if j == i {
                    // `,` or a closer where a value belongs: not JSON.
                    return None;
                }
                if j == bytes.len() {
                    break;
                }
                i = j;
                if let Some(top) = stack.last_mut() {
                    top.1 = Expect::CommaOrEnd;
                }
                safe = (i, stack.clone());
            }
            _ => return None,
        }
    }
    let (end, open) = safe;
    let mut out = bytes[start..end].to_vec();
    close_all(&mut out, &open);
    Some(out)
}

/// Summarizes one transcript from the first `head` bytes and (when the file
/// is longer than the head) the last `tail` bytes of a file `file_len`
/// bytes long whose name's stem is `file_stem`.
///
/// Errors: a stem that is not a valid id (`ids::validate_id`): such a file
/// is never listed, since its id would reach paths. A half-written last
/// line, malformed lines, lone surrogate escapes are counted in
/// `bad_lines` and skipped.
pub fn summarize(file_stem: &str, head: &[u8], tail: Option<&[u8]>, file_len: u64) -> Result<TranscriptSummary, String> {
    ids::validate_id(file_stem).map_err(|e| format!("transcript name {}: {e}", ids::printable(file_stem)))?;
    let mut scan = Scan::default();
    let whole = tail.is_none() && head.len() as u64 >= file_len;
    scan.chunk(head, true, whole);
    let mut sampled = head.len() as u64;
    if let Some(tail) = tail {
        let mut tail_scan = Scan::default();
        tail_scan.chunk(tail, false, true);
        sampled += tail.len() as u64;
        scan.bad_lines += tail_scan.bad_lines;
        scan.messages += tail_scan.messages;
        if tail_scan.last_timestamp.is_some() {
            scan.last_timestamp = tail_scan.last_timestamp;
        }
        if tail_scan.custom_title.is_some() {
            scan.custom_title = tail_scan.custom_title;
        }
        if tail_scan.summary.is_some() {
            scan.summary = tail_scan.summary;
        }
        if scan.cwd.is_none() {
            scan.cwd = tail_scan.cwd;
        }
    }
    let message_estimate = if whole || sampled == 0 || sampled >= file_len {
        scan.messages
    } else {
        scan.messages.saturating_mul(file_len) / sampled
    };
    let title = scan
        .custom_title
        .clone()
        .filter(|t| !t.is_empty())
        .or_else(|| scan.summary.clone().filter(|t| !t.is_empty()))
        .or_else(|| scan.first_prompt.clone())
        .unwrap_or_default();
    Ok(TranscriptSummary {
        session_id: file_stem.to_owned(),
        cwd: scan.cwd,
        title,
        first_prompt: scan.first_prompt,
        first_timestamp: scan.first_timestamp,
        last_timestamp: scan.last_timestamp,
        message_estimate,
        bad_lines: scan.bad_lines,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(stem: &str, text: &str) -> TranscriptSummary {
        summarize(stem, text.as_bytes(), None, text.len() as u64).expect("summary")
    }

    const USER: &str = r#"{"type":"user","cwd":"/w/a_b","timestamp":"2026-01-01T00:00:00Z","message":{"role":"user","content":"fix the bug"}}"#;
    const ASSISTANT: &str = r#"{"type":"assistant","timestamp":"2026-01-01T00:00:05Z","message":{"role":"assistant","content":[{"type":"text","text":"done"}]}}"#;

    #[test]
    fn reads_cwd_title_and_times() {
        let s = whole("abc-1", &format!("{USER}\n{ASSISTANT}\n"));
        assert_eq!(s.cwd.as_deref(), Some("/w/a_b"));
        assert_eq!(s.title, "fix the bug");
        assert_eq!(s.last_timestamp.as_deref(), Some("2026-01-01T00:00:05Z"));
        assert_eq!(s.message_estimate, 2);
        assert_eq!(s.bad_lines, 0);
    }

    #[test]
    fn survives_half_written_and_malformed_lines() {
        let text = format!("{USER}\nnot json\n{ASSISTANT}\n{{\"type\":\"user\",\"message\":{{\"content\":\"cut");
        let s = whole("abc", &text);
        assert_eq!(s.title, "fix the bug");
        assert_eq!(s.bad_lines, 2);
        assert_eq!(s.message_estimate, 2);
    }

    #[test]
    fn lone_surrogates_and_line_separators_do_not_break_the_scan() {
        let lone = r#"{"type":"user","message":{"content":"bad \ud83c here"}}"#;
        let sep = "{\"type\":\"user\",\"message\":{\"content\":\"a\u{2028}b\"}}";
        let s = whole("x", &format!("{lone}\n{sep}\n{ASSISTANT}\n"));
        assert!(!s.title.contains('\u{2028}'));
        assert!(s.title.starts_with('a'));
    }

    #[test]
    fn titles_are_cut_on_a_character_boundary() {
        let prompt = format!("{}🦀{}", "a".repeat(49), "b".repeat(100_000));
        let line = serde_json::json!({"type": "user", "message": {"content": prompt}}).to_string();
        let s = whole("x", &line);
        assert_eq!(s.title.chars().count(), TITLE_MAX_CHARS);
        assert!(s.title.contains('🦀'));
    }

    #[test]
    fn a_custom_title_in_the_tail_wins() {
        let head = format!("{USER}\n{ASSISTANT}\n{{\"type\":\"progress\",\"data\":\"");
        let tail = "xxxx\"}\n{\"type\":\"custom-title\",\"customTitle\":\"My title\"}\n{\"type\":\"assistant\",\"timestamp\":\"2026-02-01T00:00:00Z\"}\n";
        let s = summarize("x", head.as_bytes(), Some(tail.as_bytes()), 100_000_000).expect("summary");
        assert_eq!(s.title, "My title");
        assert_eq!(s.last_timestamp.as_deref(), Some("2026-02-01T00:00:00Z"));
        assert_eq!(s.cwd.as_deref(), Some("/w/a_b"));
    }

    #[test]
    fn a_field_of_another_shape_is_skipped_not_the_line() {
        let odd = r#"{"type":"user","cwd":5,"isSidechain":"no","timestamp":"2026-03-01T00:00:00Z","message":{"content":[{"type":"image"},{"type":"text","text":"from a block"}]},"toolUseResult":{"stdout":"x"}}"#;
        let s = whole("x", &format!("{odd}\n{USER}\n"));
        assert_eq!(s.bad_lines, 0);
        assert_eq!(s.cwd.as_deref(), Some("/w/a_b"), "the first cwd that is a string");
        assert_eq!(s.first_timestamp.as_deref(), Some("2026-03-01T00:00:00Z"));
        assert_eq!(s.title, "from a block");
        assert_eq!(s.message_estimate, 2);
    }

    #[test]
    fn a_first_prompt_longer_than_the_head_still_names_the_row() {
        // Claude Code writes `type` and `timestamp` after the message.
        for len in [70_000, 100_000, HEAD_BYTES - 40] {
            let prompt = format!("paste: {}", "x".repeat(len));
            let line = format!(
                r#"{{"parentUuid":null,"isSidechain":false,"cwd":"/w/long","message":{{"role":"user","content":"{prompt}"}},"type":"user","timestamp":"2026-01-01T00:00:00Z"}}"#
            );
            let text = format!("{line}\n{ASSISTANT}\n");
            let head = &text.as_bytes()[..HEAD_BYTES.min(text.len())];
            let tail = &text.as_bytes()[text.len() - 200..];
            let s = summarize("x", head, Some(tail), text.len() as u64).expect("summary");
            assert_eq!(s.cwd.as_deref(), Some("/w/long"), "len {len}");
            assert!(s.title.starts_with("paste: xxx"), "len {len}: {:?}", s.title);
            assert_eq!(s.title.chars().count(), TITLE_MAX_CHARS);
        }
        // The same with the prompt as a text block.
        let line = format!(r#"{{"cwd":"/w/b","message":{{"role":"user","content":[{{"type":"text","text":"block {}"#, "y".repeat(HEAD_BYTES));
        let s = summarize("x", &line.as_bytes()[..HEAD_BYTES], Some(b"\n"), 10 * HEAD_BYTES as u64).expect("summary");
        assert_eq!((s.cwd.as_deref(), s.title.get(..7)), (Some("/w/b"), Some("block y")));
        // An assistant line cut the same way names nothing.
        let line = format!(r#"{{"cwd":"/w/c","message":{{"role":"assistant","content":"{}"#, "z".repeat(HEAD_BYTES));
        let s = summarize("x", &line.as_bytes()[..HEAD_BYTES], Some(b"\n"), 10 * HEAD_BYTES as u64).expect("summary");
        assert_eq!((s.cwd.as_deref(), s.title.as_str()), (Some("/w/c"), ""));
    }

    #[test]
    fn a_cut_line_is_closed_keeping_what_was_whole() {
        let close = |s: &[u8]| close_truncated(s).map(|v| String::from_utf8(v).expect("utf-8"));
        let cases: &[(&[u8], Option<&str>)] = &[
            (br#"{"a":"b","c":"de"#, Some(r#"{"a":"b","c":"de"}"#)),
            (br#"{"a":1,"b":tru"#, Some(r#"{"a":1}"#)),
            (br#"{"a":{"b":[1,2"#, Some(r#"{"a":{"b":[1]}}"#)),
            (br#"{"a":"x\u12"#, Some(r#"{"a":"x"}"#)),
            (br#"{"a":"x\"#, Some(r#"{"a":"x"}"#)),
            (br#"{"a":"x\n"#, Some(r#"{"a":"x\n"}"#)),
            (br#"{"a":"x\"y"#, Some(r#"{"a":"x\"y"}"#)),
            (b"{\"a\":\"\xc3\xa9\xf0\x9f", Some("{\"a\":\"\u{e9}\"}")),
            (br#"{"ke"#, Some("{}")),
            (br#"{"a":"b"} trailing"#, Some(r#"{"a":"b"}"#)),
            (b"[1,2", None),
            (b"{]", None),
            (b"{\"a\"}", None),
            (b"{\"a\":}", None),
            (b"{\"a\":[1,,", None),
            (b"{\"a\":[}", None),
        ];
        for (input, want) in cases {
            assert_eq!(close(input).as_deref(), *want, "{:?}", String::from_utf8_lossy(input));
        }
        // Every cut of a line with every kind of member closes to JSON
        // that keeps the line's whole members.
        let line = r#"{"n":-1.5e3,"t":true,"z":null,"s":"a\"b\\c\u00e9\ud83e\udd80 🦀","o":{"k":[1,"two",{"x":[]}],"e":{}},"last":"end"}"#;
        for cut in 1..line.len() {
            let closed = close(&line.as_bytes()[..cut]).unwrap_or_else(|| panic!("cut at {cut}"));
            let value: serde_json::Value = serde_json::from_str(&closed).unwrap_or_else(|e| panic!("cut at {cut}: {closed:?}: {e}"));
            assert!(value.is_object(), "cut at {cut}");
        }
        assert_eq!(close(line.as_bytes()).as_deref(), Some(line));
        assert_eq!(close("[".repeat(100).as_bytes()), None);
        assert_eq!(close(format!("{{\"a\":{}", "[".repeat(100)).as_bytes()), None);
        for text in ["", "{", "{\"", "{\"a\"", "{\"a\":", "{\"a\":\"", "{\"a\":[", "{\"a\":[\"x\","] {
            if let Some(c) = close(text.as_bytes()) {
                assert!(serde_json::from_str::<serde_json::Value>(&c).is_ok(), "{text:?} -> {c:?}");
            }
        }
    }

    #[test]
    fn hostile_names_are_refused() {
        for stem in ["..", "../x", "a/b", ""] {
            assert!(summarize(stem, b"", None, 0).is_err());
        }
    }
}
