//! The echo agent's transcript files, `<data-dir>/echo/<conversation id>.json`:
//! their format, how they are read whole (to resume) and how the catalogue
//! scan reads a bounded head and tail of each (issue 21).
//!
//! The format written now is JSON lines (a stream of JSON values, one per
//! line; `jq` reads it as is), so a finished turn is one append and one
//! fsync (issue 21: fsyncs per turn), not a rewrite of the whole file:
//!
//! ```text
//! {"format":"ahpd.echo.lines/1","session":"ahp-session:/…","chat":"ahp-chat:/…","workingDirectory":"file:///…","createdAt":"…"}
//! {"turn":{…an ahp_types Turn…},"summary":{"title":"…","modifiedAt":"…"}}
//! {"turn":{…},"summary":{…}}
//! ```
//!
//! The first line names the session and chat this host gave the
//! conversation, so a restart with `--sessions memory` (which keeps no
//! store records) finds the session again through the scan. Each turn line
//! ends with the conversation's title and time as of that turn, so the
//! scan learns both from the file's last few KiB. A last line cut short by
//! a crash (its fsync had not returned, so its turn was never reported
//! finished) is ignored; the next save rewrites the file whole.
//!
//! Two earlier formats are still read: one JSON object `{session, chat,
//! title, workingDirectory?, createdAt, modifiedAt, turns}`, and the first,
//! a bare JSON array of turns. A file in either is rewritten in lines at
//! its conversation's next save.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::Path;

use ahp_types::state::Turn;
use ahp_types::Uri;
use ahpd_core::{ScannedRow, WallTime};
use serde::{Deserialize, Serialize};

/// The first line's `format` value of a transcript in JSON lines.
pub const LINES_FORMAT: &str = "ahpd.echo.lines/1";

/// Bytes the scan reads from a transcript's start (its first line).
const HEAD_BYTES: u64 = 16 * 1024;
/// Bytes the scan reads from a transcript's end (the last turn line's
/// summary: a title of at most 80 characters and a time).
const TAIL_BYTES: u64 = 4 * 1024;

/// The file name of `conversation_id`'s transcript (the caller has checked
/// the id is a safe path component).
pub fn file_name(conversation_id: &str) -> String {
    format!("{conversation_id}.json")
}

/// What a transcript says about its conversation besides the turns.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    /// The session this host gave the conversation.
    pub session: Uri,
    /// The chat this host gave the conversation.
    pub chat: Uri,
    /// The conversation's title (empty until its first turn names it).
    pub title: String,
    /// The chat's working directory, when it has one.
    pub working_directory: Option<Uri>,
    /// When the conversation was started (ISO 8601).
    pub created_at: String,
    /// When a turn last ended in it (ISO 8601).
    pub modified_at: String,
}

/// The first line of a transcript in JSON lines, as written.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct HeadOut<'a> {
    format: &'a str,
    session: &'a str,
    chat: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    working_directory: Option<&'a str>,
    created_at: &'a str,
}

/// The first line of a transcript in JSON lines, as read.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HeadIn {
    format: String,
    session: Uri,
    chat: Uri,
    #[serde(default)]
    working_directory: Option<Uri>,
    #[serde(default)]
    created_at: Option<String>,
}

/// The conversation's title and time as of one turn, at the end of its line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Summary {
    #[serde(default)]
    title: String,
    #[serde(default)]
    modified_at: Option<String>,
}

/// One turn line, as written: the summary last, where the scan finds it.
#[derive(Serialize)]
struct LineOut<'a> {
    turn: &'a Turn,
    summary: SummaryOut<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SummaryOut<'a> {
    title: &'a str,
    modified_at: &'a str,
}

/// One turn line, as read.
#[derive(Deserialize)]
struct LineIn<T> {
    turn: T,
    summary: Summary,
}

/// The second format: one object (written only by the tests now, which
/// keep its reader tested).
#[cfg(test)]
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ObjectOut<'a> {
    session: &'a str,
    chat: &'a str,
    title: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    working_directory: Option<&'a str>,
    created_at: &'a str,
    modified_at: &'a str,
    turns: &'a [Turn],
}

/// The second format as read; any field may be missing.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObjectIn<T> {
    #[serde(default)]
    session: Option<Uri>,
    #[serde(default)]
    chat: Option<Uri>,
    #[serde(default)]
    title: String,
    #[serde(default)]
    working_directory: Option<Uri>,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    modified_at: Option<String>,
    turns: Vec<T>,
}

/// A transcript as read, in any format; the fields the first format did
/// not have are `None`/empty.
#[derive(Debug)]
pub struct FileIn<T> {
    /// The session the file names.
    pub session: Option<Uri>,
    /// The chat the file names.
    pub chat: Option<Uri>,
    /// The title the file names (empty: none yet).
    pub title: String,
    /// The working directory the file names.
    pub working_directory: Option<Uri>,
    /// When the conversation was started, as the file says.
    pub created_at: Option<String>,
    /// When a turn last ended, as the file says.
    pub modified_at: Option<String>,
    /// The turns, in order.
    pub turns: Vec<T>,
    /// Whether a turn may be appended to the file as it is: JSON lines
    /// ending in a whole line (otherwise the next save rewrites it whole).
    pub appendable: bool,
}

/// The whole file for `header` and `turns`, in JSON lines. A header with no
/// title yet is stamped with the one its first turn's message gives.
///
/// Errors: a turn that cannot be encoded.
pub fn encode(header: &Header, turns: &[Turn]) -> serde_json::Result<Vec<u8>> {
    let titled;
    let header = match turns.first() {
        Some(first) if header.title.is_empty() => {
            titled = Header { title: ahpd_core::transcript::clean_title(&first.message.text), ..header.clone() };
            &titled
        }
        _ => header,
    };
    let head = HeadOut {
        format: LINES_FORMAT,
        session: &header.session,
        chat: &header.chat,
        working_directory: header.working_directory.as_deref(),
        created_at: &header.created_at,
    };
    let mut bytes = serde_json::to_vec(&head)?;
    bytes.push(b'\n');
    for turn in turns {
        bytes.extend(encode_turn(header, turn)?);
    }
    Ok(bytes)
}

/// One turn's line (with its newline), stamped with `header`'s title and
/// time: what a finished turn appends.
///
/// Errors: the turn cannot be encoded.
pub fn encode_turn(header: &Header, turn: &Turn) -> serde_json::Result<Vec<u8>> {
    let line = LineOut { turn, summary: SummaryOut { title: &header.title, modified_at: &header.modified_at } };
    let mut bytes = serde_json::to_vec(&line)?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// `turns` in the second format (the object): kept so the readers of that
/// format stay tested.
#[cfg(test)]
pub fn encode_object(header: &Header, turns: &[Turn]) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&ObjectOut {
        session: &header.session,
        chat: &header.chat,
        title: &header.title,
        working_directory: header.working_directory.as_deref(),
        created_at: &header.created_at,
        modified_at: &header.modified_at,
        turns,
    })
}

/// The first line of `bytes` when it is the head of a transcript in JSON
/// lines.
fn lines_head(bytes: &[u8]) -> Option<HeadIn> {
    let end = bytes.iter().position(|b| *b == b'\n').unwrap_or(bytes.len());
    serde_json::from_slice::<HeadIn>(&bytes[..end]).ok().filter(|h| h.format == LINES_FORMAT)
}

/// Parses a transcript in any of the three formats.
///
/// Errors: not a transcript, or (in JSON lines) a damaged line before the
/// last one.
pub fn parse<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<FileIn<T>, String> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'[') {
        let turns: Vec<T> = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        return Ok(FileIn {
            session: None,
            chat: None,
            title: String::new(),
            working_directory: None,
            created_at: None,
            modified_at: None,
            turns,
            appendable: false,
        });
    }
    let Some(head) = lines_head(bytes) else {
        let object: ObjectIn<T> = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        return Ok(FileIn {
            session: object.session,
            chat: object.chat,
            title: object.title,
            working_directory: object.working_directory,
            created_at: object.created_at,
            modified_at: object.modified_at,
            turns: object.turns,
            appendable: false,
        });
    };
    let whole = bytes.ends_with(b"\n");
    // A last line with no newline was cut short: never reported, left out.
    let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let mut file = FileIn {
        session: Some(head.session),
        chat: Some(head.chat),
        title: String::new(),
        working_directory: head.working_directory,
        created_at: head.created_at,
        modified_at: None,
        turns: Vec::new(),
        appendable: whole,
    };
    for (n, line) in bytes[..complete].split(|b| *b == b'\n').enumerate().skip(1) {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let line: LineIn<T> = serde_json::from_slice(line).map_err(|e| format!("line {}: {e}", n + 1))?;
        file.turns.push(line.turn);
        file.title = line.summary.title;
        file.modified_at = line.summary.modified_at.or(file.modified_at);
    }
    Ok(file)
}

/// Of a turn, only what a scan needs: the message's text.
#[derive(Debug, Deserialize)]
struct TurnHead {
    message: MessageHead,
}

/// Of a message, only its text.
#[derive(Debug, Deserialize)]
struct MessageHead {
    #[serde(default)]
    text: String,
}

/// One transcript's catalogue row; `Ok(None)` when it has no turns or
/// names no session. A transcript in JSON lines is read only at its head
/// (the first line) and its tail (the last turn line's summary); a file in
/// an earlier format, or one whose last line was cut short, is read whole.
/// Times come from the file, else its mtime.
///
/// Errors: the file cannot be read or is not a transcript.
pub fn scan_row(path: &Path, stem: &str) -> Result<Option<ScannedRow>, String> {
    let mut file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    let len = meta.len();
    let mtime = super::fsutil::mtime_of(&meta);
    let mut head = Vec::new();
    (&mut file).take(HEAD_BYTES.min(len)).read_to_end(&mut head).map_err(|e| e.to_string())?;
    let head_end = head.iter().position(|b| *b == b'\n').map(|i| i as u64 + 1);
    if let (Some(head_in), Some(head_end)) = (lines_head(&head), head_end) {
        if len == head_end {
            return Ok(None);
        }
        let from = len - TAIL_BYTES.min(len - head_end);
        let mut tail = Vec::new();
        file.seek(SeekFrom::Start(from)).map_err(|e| e.to_string())?;
        (&mut file).take(len - from).read_to_end(&mut tail).map_err(|e| e.to_string())?;
        if let Some(summary) = last_summary(&tail) {
            let created_at = head_in.created_at.as_deref().and_then(WallTime::parse_iso).unwrap_or(mtime);
            let modified_at = summary.modified_at.as_deref().and_then(WallTime::parse_iso).unwrap_or(mtime);
            return Ok(Some(ScannedRow {
                conversation_id: stem.to_owned(),
                session: Some(head_in.session),
                chat: Some(head_in.chat),
                title: summary.title,
                working_directory: head_in.working_directory,
                created_at,
                modified_at: modified_at.max(created_at),
            }));
        }
    }
    let mut bytes = Vec::new();
    file.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
    file.read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    row_of_whole(&bytes, stem, mtime)
}

/// The summary that ends `tail` (the end of a file in JSON lines), when its
/// last line is whole. The summary is the last member of the last line, so
/// the last `,"summary":` in the bytes is its own: inside a string a quote
/// is escaped, and anything of the turn's comes before it.
fn last_summary(tail: &[u8]) -> Option<Summary> {
    const KEY: &[u8] = b",\"summary\":";
    if !tail.ends_with(b"\n") {
        return None;
    }
    let at = tail.windows(KEY.len()).rposition(|w| w == KEY)? + KEY.len();
    serde_json::Deserializer::from_slice(&tail[at..]).into_iter::<Summary>().next()?.ok()
}

/// A row from a whole transcript in any format (see [`scan_row`]).
fn row_of_whole(bytes: &[u8], stem: &str, mtime: WallTime) -> Result<Option<ScannedRow>, String> {
    let file: FileIn<TurnHead> = parse(bytes)?;
    let Some(first) = file.turns.first() else { return Ok(None) };
    let (session, chat) = match (file.session, file.chat) {
        (Some(session), chat) => (session, chat),
        (None, _) => match stem.split_once('@') {
            Some((scheme, id)) => (format!("{scheme}:/{id}"), Some(format!("ahp-chat:/{stem}"))),
            None => return Ok(None),
        },
    };
    let created_at = file.created_at.as_deref().and_then(WallTime::parse_iso).unwrap_or(mtime);
    let modified_at = file.modified_at.as_deref().and_then(WallTime::parse_iso).unwrap_or(mtime);
    let title = if file.title.is_empty() { ahpd_core::transcript::clean_title(&first.message.text) } else { file.title };
    Ok(Some(ScannedRow {
        conversation_id: stem.to_owned(),
        session: Some(session),
        chat,
        title,
        working_directory: file.working_directory,
        created_at,
        modified_at: modified_at.max(created_at),
    }))
}

/// Turns and headers the transcript tests of this module and the echo
/// agent's share.
#[cfg(test)]
pub(crate) mod test_support {
    use super::*;
    use ahp_types::state::{Message, MessageKind, MessageOrigin, TurnState};

    /// A finished user turn `id` saying `text`.
    pub fn turn(id: &str, text: &str) -> Turn {
        Turn {
            id: id.to_owned(),
            started_at: None,
            duration: None,
            message: Message {
                text: text.to_owned(),
                origin: MessageOrigin { kind: MessageKind::User },
                attachments: None,
                model: None,
                agent: None,
                meta: None,
            },
            response_parts: Vec::new(),
            usage: None,
            state: TurnState::Complete,
        }
    }

    /// The header of `ahp-session:/s1`'s default chat in `file:///w`.
    pub fn header_titled(title: &str, modified_at: &str) -> Header {
        Header {
            session: "ahp-session:/s1".to_owned(),
            chat: "ahp-chat:/ahp-session@s1".to_owned(),
            title: title.to_owned(),
            working_directory: Some("file:///w".to_owned()),
            created_at: "2026-01-01T00:00:00.000Z".to_owned(),
            modified_at: modified_at.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use super::test_support::{header_titled as header, turn};

    #[test]
    fn appended_turns_read_back_in_order_with_the_last_summary() {
        let mut bytes = encode(&header("", "2026-01-01T00:00:00.000Z"), &[]).expect("encode");
        let h = header("first", "2026-01-02T00:00:00.000Z");
        bytes.extend(encode_turn(&h, &turn("t1", "first")).expect("turn"));
        bytes.extend(encode_turn(&header("first", "2026-01-03T00:00:00.000Z"), &turn("t2", "second")).expect("turn"));
        let file: FileIn<Turn> = parse(&bytes).expect("parse");
        assert_eq!(file.turns, vec![turn("t1", "first"), turn("t2", "second")]);
        assert_eq!((file.title.as_str(), file.modified_at.as_deref()), ("first", Some("2026-01-03T00:00:00.000Z")));
        assert_eq!(file.session.as_deref(), Some("ahp-session:/s1"));
        assert!(file.appendable);
        // The whole-file encoding names an untitled conversation by its
        // first message, as the scan shows it.
        let whole = encode(&header("", "2026-01-02T00:00:00.000Z"), &[turn("t1", "  \nhello there\nmore")]).expect("encode");
        assert_eq!(parse::<Turn>(&whole).expect("parse").title, "hello there");
    }

    #[test]
    fn a_last_line_cut_short_is_left_out_and_the_file_is_rewritten_next() {
        let h = header("first", "2026-01-02T00:00:00.000Z");
        let mut bytes = encode(&h, &[turn("t1", "first")]).expect("encode");
        let torn = encode_turn(&h, &turn("t2", "never reported")).expect("turn");
        bytes.extend(&torn[..torn.len() / 2]);
        let file: FileIn<Turn> = parse(&bytes).expect("parse");
        assert_eq!(file.turns, vec![turn("t1", "first")]);
        assert!(!file.appendable, "appending after half a line would damage the file");
        // Damage before the last line is refused, not skipped.
        let mut damaged = encode(&h, &[]).expect("encode");
        damaged.extend(b"{not a turn}\n");
        damaged.extend(encode_turn(&h, &turn("t1", "x")).expect("turn"));
        assert!(parse::<Turn>(&damaged).unwrap_err().contains("line 2"));
    }

    #[test]
    fn the_scan_reads_only_the_head_and_the_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ahp-session@s1.json");
        let h = header("first line", "2026-01-05T00:00:00.000Z");
        let mut bytes = encode(&h, &[]).expect("encode");
        // A middle the scan must not need: 1 MiB that is no turn at all.
        bytes.extend(vec![b'x'; 1 << 20]);
        bytes.push(b'\n');
        bytes.extend(encode_turn(&h, &turn("t9", "last")).expect("turn"));
        std::fs::write(&path, &bytes).expect("write");
        let row = scan_row(&path, "ahp-session@s1").expect("scan").expect("a row");
        assert_eq!(row.title, "first line");
        assert_eq!(row.session.as_deref(), Some("ahp-session:/s1"));
        assert_eq!(row.chat.as_deref(), Some("ahp-chat:/ahp-session@s1"));
        assert_eq!(row.working_directory.as_deref(), Some("file:///w"));
        assert_eq!(row.created_at, WallTime::parse_iso("2026-01-01T00:00:00Z").unwrap_or_default());
        assert_eq!(row.modified_at, WallTime::parse_iso("2026-01-05T00:00:00Z").unwrap_or_default());
        // A conversation never spoken in has no row.
        std::fs::write(&path, encode(&h, &[]).expect("encode")).expect("write");
        assert!(scan_row(&path, "ahp-session@s1").expect("scan").is_none());
        // A torn last line: read whole, the whole lines counted.
        let mut torn = encode(&h, &[turn("t1", "first line")]).expect("encode");
        torn.extend(b"{\"turn\":{\"id\":");
        std::fs::write(&path, &torn).expect("write");
        assert_eq!(scan_row(&path, "ahp-session@s1").expect("scan").expect("a row").title, "first line");
        // The second format, read whole.
        std::fs::write(&path, encode_object(&header("", "2026-01-02T00:00:00.000Z"), &[turn("t1", "old")]).expect("encode"))
            .expect("write");
        let row = scan_row(&path, "ahp-session@s1").expect("scan").expect("a row");
        assert_eq!((row.title.as_str(), row.modified_at), ("old", WallTime::parse_iso("2026-01-02T00:00:00Z").unwrap_or_default()));
    }
}
