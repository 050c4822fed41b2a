//! Claude Code's own transcripts as an external source for the catalogue
//! (Sessions page, "Finding one": external sessions).
//!
//! Claude Code writes one JSON-lines transcript per conversation at
//! `<root>/<slug>/<conversation-id>.jsonl` (root: `~/.claude/projects`). A
//! pass walks exactly that shape and nothing else: subdirectories of a slug
//! folder (`<id>/subagents/`, tool output) are skipped, symlinks are never
//! followed, and nothing under the root is ever written. Of each file only a
//! bounded head ([`HEAD_BYTES`]) and tail ([`TAIL_BYTES`]) are read and handed
//! to the core's pure reader, [`ahpd_core::transcript::summarize`]; a file it
//! refuses is skipped and counted, never fatal.
//!
//! A row is attributed by the `cwd` recorded inside its transcript, never by
//! the folder slug (the slug is lossy: `_`, `.` and non-Latin characters all
//! become `-`).
//!
//! This module depends on nothing of the daemon but the core, so the
//! catalogue benchmark (`src/bin/bench_catalogue.rs`) runs exactly this code.

use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::UNIX_EPOCH;

use ahpd_core::transcript::{self, HEAD_BYTES, TAIL_BYTES};
use ahpd_core::{ScannedRow, WallTime};

/// The provider name Claude Code's transcripts are listed under
/// (`claude:/<conversation-id>`).
pub const PROVIDER: &str = "claude";

/// The file extension of a Claude Code transcript.
const EXTENSION: &str = "jsonl";

/// `~/.claude/projects`, when `$HOME` is set and that directory exists.
pub fn default_root() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
    let root = PathBuf::from(home).join(".claude").join("projects");
    root.is_dir().then_some(root)
}

/// What one pass found, with the counts its log line reports.
#[derive(Debug, Default)]
pub struct ScanReport {
    /// One row per transcript listed.
    pub rows: Vec<ScannedRow>,
    /// Transcript files looked at.
    pub files: usize,
    /// Files the reader refused (a name that is not a safe id).
    pub refused: usize,
    /// Files that could not be opened or read (or changed identity between
    /// listing and opening, e.g. swapped for a symlink), and slug folders
    /// that could not be listed.
    pub unreadable: usize,
    /// Symlinks met and not followed.
    pub symlinks: usize,
    /// Lines inside the read parts that did not parse (bad lines only log).
    pub bad_lines: u64,
}

/// Transcripts handed from the reader to the parser at once (one wake-up
/// per batch rather than per file).
const BATCH: usize = 16;
/// Batches read ahead of the parser, at most: a pass holds at most about
/// `(READ_AHEAD + 2) * BATCH` heads and tails (a few MB).
const READ_AHEAD: usize = 2;

/// The bounded parts of one transcript, read and waiting to be summarized.
#[derive(Debug)]
pub struct ReadTranscript {
    /// The file name's stem: the conversation id, unvalidated.
    pub stem: String,
    /// Up to [`HEAD_BYTES`] from the start.
    pub head: Vec<u8>,
    /// Up to [`TAIL_BYTES`] from the end, past the head; `None` when the
    /// file fits in the head.
    pub tail: Option<Vec<u8>>,
    /// The file's length when it was opened.
    pub len: u64,
    /// Its modification time.
    pub mtime: WallTime,
}

/// What the walk hands the parser for one file.
enum Item {
    Read(ReadTranscript),
    Unreadable,
}

/// One pass over the transcripts under `root`. One thread walks the tree
/// and reads each file's bounded parts while this one summarizes them, so
/// the parsing overlaps the reading (handed over in batches of [`BATCH`],
/// at most [`READ_AHEAD`] batches ahead);
/// where no thread can be started, the pass runs on this thread alone.
///
/// Errors: the root itself cannot be listed. Anything wrong with one slug
/// folder or one file is counted in the report and skipped.
pub fn scan(root: &Path) -> Result<ScanReport, String> {
    scan_with(root, true)
}

/// The same pass as [`scan`] with no reader thread: each file is read and
/// then summarized on this thread (the benchmark's comparison).
///
/// Errors: the root itself cannot be listed.
#[cfg_attr(not(test), allow(dead_code))] // the benchmark's and the tests' only
pub fn scan_on_one_thread(root: &Path) -> Result<ScanReport, String> {
    scan_with(root, false)
}

fn scan_with(root: &Path, read_ahead: bool) -> Result<ScanReport, String> {
    let slugs = fs::read_dir(root).map_err(|e| format!("could not list {}: {e}", root.display()))?;
    let mut report = ScanReport::default();
    if !read_ahead {
        let mut walk = Walk::default();
        walk.run(slugs, &mut |path| {
            report.take(read_item(path, Vec::new(), Vec::new()), None);
            true
        });
        report.add(&walk);
        return Ok(report);
    }
    let (tx, rx) = mpsc::sync_channel::<Vec<Item>>(READ_AHEAD);
    let (free_tx, free_rx) = mpsc::channel::<(Vec<u8>, Vec<u8>)>();
    std::thread::scope(|scope| {
        let reader = std::thread::Builder::new().name("claude-scan".to_owned()).spawn_scoped(scope, move || {
            let mut walk = Walk::default();
            let mut batch = Vec::with_capacity(BATCH);
            let mut open = true;
            walk.run(slugs, &mut |path| {
                let (head, tail) = free_rx.try_recv().unwrap_or_default();
                batch.push(read_item(path, head, tail));
                if batch.len() == BATCH {
                    open = tx.send(std::mem::replace(&mut batch, Vec::with_capacity(BATCH))).is_ok();
                }
                open
            });
            if open && !batch.is_empty() {
                let _ = tx.send(batch);
            }
            walk
        });
        match reader {
            Ok(reader) => {
                for item in rx.into_iter().flatten() {
                    report.take(item, Some(&free_tx));
                }
                let walk = reader.join().unwrap_or_default();
                report.add(&walk);
            }
            Err(e) => {
                tracing::debug!("claude scan: no reader thread ({e}); reading and parsing on one thread");
                // The closure that owned the walk's ends was dropped with
                // the failed spawn: list the root again.
                let Ok(slugs) = fs::read_dir(root) else { return };
                let mut walk = Walk::default();
                walk.run(slugs, &mut |path| {
                    report.take(read_item(path, Vec::new(), Vec::new()), None);
                    true
                });
                report.add(&walk);
            }
        }
    });
    Ok(report)
}

/// Reads one file for the parser; a failure is logged and counted.
fn read_item(path: &Path, head: Vec<u8>, tail: Vec<u8>) -> Item {
    match read_transcript(path, head, tail) {
        Ok(read) => Item::Read(read),
        Err(e) => {
            tracing::debug!(file = %path.display(), "claude transcript unreadable: {e}");
            Item::Unreadable
        }
    }
}

impl ScanReport {
    /// Summarizes one file's parts into a row (or counts why not), handing
    /// its buffers back for reuse.
    fn take(&mut self, item: Item, free: Option<&mpsc::Sender<(Vec<u8>, Vec<u8>)>>) {
        self.files += 1;
        let read = match item {
            Item::Read(read) => read,
            Item::Unreadable => {
                self.unreadable += 1;
                return;
            }
        };
        match row_of(&read) {
            Some((row, bad_lines)) => {
                self.bad_lines += bad_lines;
                self.rows.push(row);
            }
            None => self.refused += 1,
        }
        if let Some(free) = free {
            let _ = free.send((read.head, read.tail.unwrap_or_default()));
        }
    }

    fn add(&mut self, walk: &Walk) {
        self.symlinks += walk.symlinks;
        self.unreadable += walk.unlistable;
    }
}

/// The walk over `<root>/<slug>/<id>.jsonl`, and what it skipped.
#[derive(Debug, Default)]
struct Walk {
    symlinks: usize,
    unlistable: usize,
}

impl Walk {
    /// Calls `visit` with every regular `*.jsonl` file directly inside a
    /// slug folder (a real directory directly under the root), never
    /// following a symlink; stops when `visit` says so.
    fn run(&mut self, slugs: fs::ReadDir, visit: &mut dyn FnMut(&Path) -> bool) {
        for slug in slugs.flatten() {
            let Ok(kind) = slug.file_type() else { continue };
            if kind.is_symlink() {
                self.symlinks += 1;
                continue;
            }
            if !kind.is_dir() {
                continue;
            }
            let Ok(entries) = fs::read_dir(slug.path()) else {
                self.unlistable += 1;
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.extension().and_then(|e| e.to_str()) != Some(EXTENSION) {
                    continue;
                }
                let Ok(kind) = entry.file_type() else { continue };
                if kind.is_symlink() {
                    self.symlinks += 1;
                    continue;
                }
                if kind.is_file() && !visit(&path) {
                    return;
                }
            }
        }
    }
}

/// Reads one transcript's bounded parts into `head` and `tail` (reused
/// buffers).
///
/// Errors: the file cannot be opened or read, has no UTF-8 name, or is not
/// the regular file the directory listing named (it was swapped, e.g. for a
/// symlink, meanwhile).
pub fn read_transcript(path: &Path, mut head: Vec<u8>, mut tail: Vec<u8>) -> io::Result<ReadTranscript> {
    let stem = path.file_stem().and_then(|s| s.to_str()).ok_or_else(|| io::Error::other("a name that is not UTF-8"))?;
    let listed = fs::symlink_metadata(path)?;
    if !listed.file_type().is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    let mut file = File::open(path)?;
    let meta = file.metadata()?;
    if !same_file(&listed, &meta) {
        return Err(io::Error::other("replaced while being read"));
    }
    let len = meta.len();
    let has_tail = read_head_tail(&mut file, len, &mut head, &mut tail)?;
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| WallTime(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)))
        .unwrap_or_default();
    Ok(ReadTranscript { stem: stem.to_owned(), head, tail: has_tail.then_some(tail), len, mtime })
}

/// The row for one read transcript, with the count of bad lines seen;
/// `None` when the core's reader refuses it (its name is not a safe id).
pub fn row_of(read: &ReadTranscript) -> Option<(ScannedRow, u64)> {
    let summary = transcript::summarize(&read.stem, &read.head, read.tail.as_deref(), read.len).ok()?;
    let created_at = summary.first_timestamp.as_deref().and_then(WallTime::parse_iso).unwrap_or(read.mtime);
    let modified_at = summary.last_timestamp.as_deref().and_then(WallTime::parse_iso).unwrap_or(read.mtime);
    let row = ScannedRow {
        conversation_id: summary.session_id,
        session: None,
        chat: None,
        title: summary.title,
        working_directory: summary.cwd.as_deref().and_then(file_uri),
        created_at,
        modified_at,
    };
    Some((row, summary.bad_lines))
}

#[cfg(unix)]
fn same_file(a: &fs::Metadata, b: &fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
fn same_file(_: &fs::Metadata, b: &fs::Metadata) -> bool {
    b.file_type().is_file()
}

/// Reads at most [`HEAD_BYTES`] from the start of `file` (`len` bytes long)
/// into `head` and, when the file is longer than that, the last bytes past
/// the head, at most [`TAIL_BYTES`], into `tail`. Returns whether there is
/// a tail. A file that shrank meanwhile gives short parts.
///
/// Errors: any read or seek error.
pub fn read_head_tail(file: &mut File, len: u64, head: &mut Vec<u8>, tail: &mut Vec<u8>) -> io::Result<bool> {
    read_up_to(file, len.min(HEAD_BYTES as u64), head)?;
    if len <= HEAD_BYTES as u64 {
        return Ok(false);
    }
    let start = len.saturating_sub(TAIL_BYTES as u64).max(HEAD_BYTES as u64);
    file.seek(SeekFrom::Start(start))?;
    read_up_to(file, len - start, tail)?;
    Ok(true)
}

/// Replaces `buf` with up to `n` bytes read from `file`'s current position.
fn read_up_to(file: &mut File, n: u64, buf: &mut Vec<u8>) -> io::Result<()> {
    buf.clear();
    buf.reserve(usize::try_from(n).unwrap_or(0));
    file.take(n).read_to_end(buf)?;
    Ok(())
}

/// The `file://` URI of an absolute path as a transcript records it: a
/// POSIX path (`/home/a b` → `file:///home/a%20b`), a Windows drive path
/// (`C:\w` → `file:///C:/w`) or a UNC path (`\\srv\share` →
/// `file://srv/share`). Every byte but `A-Z a-z 0-9 - . _ ~ /` (and the
/// drive's colon) is percent-encoded. `None` for a relative path, an empty
/// one, or one holding NUL.
pub fn file_uri(path: &str) -> Option<String> {
    if path.contains('\0') {
        return None;
    }
    let bytes = path.as_bytes();
    let drive = bytes.len() >= 3 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':' && matches!(bytes[2], b'\\' | b'/');
    let (mut out, rest) = if path.starts_with("\\\\") {
        let rest = path.trim_start_matches('\\').replace('\\', "/");
        (String::from("file://"), rest)
    } else if drive {
        let rest = path[2..].replace('\\', "/");
        (format!("file:///{}:", char::from(bytes[0])), rest)
    } else if path.starts_with('/') {
        (String::from("file://"), path.to_owned())
    } else {
        return None;
    };
    for b in rest.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_uris_are_percent_encoded() {
        assert_eq!(file_uri("/home/a b/ü#?%").as_deref(), Some("file:///home/a%20b/%C3%BC%23%3F%25"));
        assert_eq!(file_uri("/w/a_b.c~d-e").as_deref(), Some("file:///w/a_b.c~d-e"));
        assert_eq!(file_uri("C:\\Users\\me\\x y").as_deref(), Some("file:///C:/Users/me/x%20y"));
        assert_eq!(file_uri("\\\\srv\\share\\p").as_deref(), Some("file://srv/share/p"));
        assert_eq!(file_uri("relative/path"), None);
        assert_eq!(file_uri(""), None);
        assert_eq!(file_uri("/a\0b"), None);
    }

    fn write(path: &Path, text: &str) {
        fs::write(path, text).expect("write");
    }

    #[test]
    fn walks_only_slug_files_and_attributes_by_cwd() {
        let root = tempfile::tempdir().expect("tempdir");
        let slug = root.path().join("-w-a-b");
        fs::create_dir_all(slug.join("s1").join("subagents")).expect("mkdir");
        let line = r#"{"type":"user","cwd":"/w/a_b","timestamp":"2026-01-01T00:00:00Z","message":{"role":"user","content":"hi there"}}"#;
        write(&slug.join("s1.jsonl"), &format!("{line}\n"));
        write(&slug.join("s1").join("subagents").join("agent-1.jsonl"), &format!("{line}\n"));
        write(&slug.join("notes.txt"), "x");
        write(&slug.join("..jsonl"), "x");
        write(&root.path().join("top.jsonl"), &format!("{line}\n"));
        #[cfg(unix)]
        {
            let outside = tempfile::tempdir().expect("tempdir");
            write(&outside.path().join("secret.jsonl"), &format!("{line}\n"));
            std::os::unix::fs::symlink(outside.path(), root.path().join("linked")).expect("symlink");
            std::os::unix::fs::symlink(outside.path().join("secret.jsonl"), slug.join("s2.jsonl")).expect("symlink");
            let report = scan(root.path()).expect("scan");
            assert_eq!(report.symlinks, 2);
            assert_eq!(report.rows.len(), 1, "{:?}", report.rows);
            let row = &report.rows[0];
            assert_eq!(row.conversation_id, "s1");
            assert_eq!(row.session, None);
            assert_eq!(row.title, "hi there");
            assert_eq!(row.working_directory.as_deref(), Some("file:///w/a_b"));
            assert_eq!(row.modified_at, WallTime::parse_iso("2026-01-01T00:00:00Z").unwrap_or_default());
            assert_eq!(report.refused, 1, "the file named `..jsonl`");
        }
    }

    #[test]
    fn the_read_ahead_pass_and_the_one_thread_pass_agree() {
        let root = tempfile::tempdir().expect("tempdir");
        for n in 0..(3 * BATCH + 5) {
            let slug = root.path().join(format!("-w-{}", n % 4));
            fs::create_dir_all(&slug).expect("mkdir");
            let line = format!(r#"{{"type":"user","cwd":"/w/{n}","timestamp":"2026-01-01T00:00:00Z","message":{{"content":"task {n}"}}}}"#);
            write(&slug.join(format!("id-{n}.jsonl")), &format!("{line}\n"));
        }
        write(&root.path().join("-w-0").join("bad name!.jsonl"), "{}\n");
        let key = |r: &ScannedRow| (r.conversation_id.clone(), r.title.clone(), r.working_directory.clone());
        let mut ahead: Vec<_> = scan(root.path()).expect("scan").rows.iter().map(key).collect();
        let one = scan_on_one_thread(root.path()).expect("scan");
        let mut single: Vec<_> = one.rows.iter().map(key).collect();
        ahead.sort();
        single.sort();
        assert_eq!(ahead.len(), 3 * BATCH + 5);
        assert_eq!(ahead, single);
        assert_eq!((one.files, one.refused), (3 * BATCH + 6, 1));
        assert!(ahead.contains(&("id-7".to_owned(), "task 7".to_owned(), Some("file:///w/7".to_owned()))));
    }

    #[test]
    fn a_file_longer_than_the_head_is_read_in_two_bounded_parts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("big.jsonl");
        let filler = format!("{{\"type\":\"progress\",\"data\":\"{}\"}}\n", "x".repeat(3000));
        let mut text = String::from("{\"type\":\"user\",\"cwd\":\"/w\",\"message\":{\"content\":\"first\"}}\n");
        while text.len() < 1_000_000 {
            text.push_str(&filler);
        }
        text.push_str("{\"type\":\"custom-title\",\"customTitle\":\"Named\"}\n");
        write(&path, &text);
        let read = read_transcript(&path, Vec::new(), Vec::new()).expect("read");
        assert!(read.head.len() <= HEAD_BYTES && read.tail.as_ref().is_some_and(|t| t.len() <= TAIL_BYTES));
        assert_eq!(read.head.len() + read.tail.as_ref().map_or(0, Vec::len), HEAD_BYTES + TAIL_BYTES);
        let (row, _) = row_of(&read).expect("a row");
        assert_eq!(row.title, "Named");
        // An mtime stands in for missing timestamps.
        assert!(row.modified_at.0 > 0);
    }
}
