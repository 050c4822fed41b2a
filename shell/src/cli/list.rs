//! `ahpd sessions list`: the sessions in the store, read-only.
//!
//! Unlike the daemon's startup scan this never changes the store: a record
//! that does not parse is reported on stderr and skipped (the daemon moves
//! it aside when it next starts), and temp files are left alone (one may be
//! a running daemon's write in progress).

use std::fs;
use std::io::Write;
use std::path::Path;

use ahp_types::state::ChangesSummary;
use ahpd_core::{ids, SessionRecord};
use serde::Serialize;

use super::{note, DataDirArg};
use crate::exec::fsutil::TEMP_MARKER;
use crate::exec::journal;

/// Longest title shown in the table, in characters.
const TITLE_COLUMN_CHARS: usize = 40;

/// `--help` text of `ahpd sessions list`.
pub const LIST_ABOUT: &str = "\
List the sessions in the store of the data directory (<DIR>/sessions/), \
newest change first, as a table: URI, title, owner, status (read or unread, \
archived, external), modified time, and the diff stat last seen (changes). \
With --json, print the records' summaries as a JSON array instead.

The store is only read: a record that does not parse is reported on stderr \
and skipped (the daemon moves it aside as <name>.corrupt-<ms> when it next \
starts). Safe while the daemon runs; a change the daemon is writing shows \
once it is on disk.";

/// Text after the options of `ahpd sessions list --help`.
pub const LIST_AFTER: &str = "\
JSON fields of each summary: resource, provider, title, owner, scope, \
isRead, isArchived, external, createdAt, modifiedAt, chats (how many), \
changes (additions, deletions, files; absent when unknown).

Exit status: 0 listed (an empty store lists nothing); 1 the store \
directory cannot be read; 2 a usage error.";

/// Options of `ahpd sessions list`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Print a JSON array of summaries instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The data directory.
    #[command(flatten)]
    pub data: DataDirArg,
}

/// What `--json` prints of one record.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordSummary {
    /// The session URI.
    pub resource: String,
    /// The backend that runs it.
    pub provider: String,
    /// Its title.
    pub title: String,
    /// Whose work it is, if anybody's.
    pub owner: Option<String>,
    /// The team or project it is charged to, if any.
    pub scope: Option<String>,
    /// The host's read bit.
    pub is_read: bool,
    /// The host's archived bit.
    pub is_archived: bool,
    /// A session a backend listed that this host never ran.
    pub external: bool,
    /// When it was first started (ISO-8601).
    pub created_at: String,
    /// Its last change (ISO-8601).
    pub modified_at: String,
    /// How many chats it has.
    pub chats: usize,
    /// The diff stat last read, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes: Option<ChangesSummary>,
}

impl RecordSummary {
    /// The summary of `record`.
    pub fn of(record: &SessionRecord) -> RecordSummary {
        RecordSummary {
            resource: record.resource.clone(),
            provider: record.provider.to_string(),
            title: record.title.to_string(),
            owner: record.owner.as_deref().map(str::to_owned),
            scope: record.scope.as_deref().map(str::to_owned),
            is_read: record.is_read,
            is_archived: record.is_archived,
            external: record.external,
            created_at: record.created_at.to_string(),
            modified_at: record.modified_at.to_string(),
            chats: record.chats.len(),
            changes: record.changes.as_deref().cloned(),
        }
    }
}

/// `ahpd sessions list`.
///
/// Errors: the store directory cannot be read, or stdout cannot be written.
pub fn list(args: &ListArgs) -> Result<(), String> {
    let data_dir = args.data.resolve()?;
    let records = read_records(&data_dir.join("sessions"))?;
    let summaries: Vec<RecordSummary> = records.iter().map(RecordSummary::of).collect();
    let text = if args.json {
        let mut text = serde_json::to_string_pretty(&summaries).map_err(|e| format!("could not encode the list: {e}"))?;
        text.push('\n');
        text
    } else {
        table(&summaries)
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|()| out.flush()).map_err(|e| format!("could not write to stdout: {e}"))
}

/// Every record under `dir` that parses, is not a tombstone and whose key
/// matches its file name, newest `modifiedAt` first (then by URI). Nothing is changed.
///
/// Errors: the directory cannot be listed.
pub fn read_records(dir: &Path) -> Result<Vec<SessionRecord>, String> {
    let entries = fs::read_dir(dir).map_err(|e| format!("could not read the session store {}: {e}", dir.display()))?;
    let mut names: Vec<String> = entries
        .filter_map(|entry| entry.ok().and_then(|e| e.file_name().into_string().ok()))
        .filter(|name| name.ends_with(".json") && !name.starts_with('.') && !name.contains(TEMP_MARKER))
        .collect();
    names.sort();
    // What the store acknowledged after the files were last made whole
    // (a daemon running, or one that crashed) overrides the files.
    let mut journaled = journal::last_words(dir).map_err(|e| format!("could not read the store journal in {}: {e}", dir.display()))?;
    let mut records = Vec::new();
    for name in names {
        let path = dir.join(&name);
        let stem = name.trim_end_matches(".json");
        let parsed = match journaled.remove(stem) {
            Some(Some(record)) => Ok(record),
            Some(None) => continue,
            None => fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|bytes| serde_json::from_slice::<SessionRecord>(&bytes).map_err(|e| e.to_string())),
        };
        match parsed {
            // A tombstone is a disposed session, not one to list.
            Ok(record) if record.deleted => {}
            Ok(record) if record.key() == stem => records.push(record),
            Ok(record) => note(&format!(
                "skipped {}: it holds the record of {}",
                path.display(),
                ids::printable(&record.key())
            )),
            Err(e) => note(&format!(
                "skipped {}: it does not parse ({e}); the daemon moves it aside when it next starts",
                path.display()
            )),
        }
    }
    // Records only the journal holds so far.
    records.extend(journaled.into_values().flatten().filter(|r| !r.deleted));
    let when = |r: &SessionRecord| r.modified_at.time().map_or(i64::MIN, |t| t.0);
    records.sort_by(|a, b| when(b).cmp(&when(a)).then_with(|| a.resource.cmp(&b.resource)));
    Ok(records)
}

/// The status column: `read` or `unread`, then `archived` and `external`.
fn status(s: &RecordSummary) -> String {
    let mut words = vec![if s.is_read { "read" } else { "unread" }];
    if s.is_archived {
        words.push("archived");
    }
    if s.external {
        words.push("external");
    }
    words.join(",")
}

/// The changes column: `+a -d (f files)`, or `-`.
fn changes(s: &RecordSummary) -> String {
    match &s.changes {
        Some(c) => format!(
            "+{} -{} ({} files)",
            c.additions.unwrap_or(0),
            c.deletions.unwrap_or(0),
            c.files.unwrap_or(0)
        ),
        None => "-".to_owned(),
    }
}

/// Text safe for a terminal cell: control and bidirectional-override
/// characters dropped (titles come from users), cut to `max` characters.
fn cell(text: &str, max: usize) -> String {
    let clean: String = text
        .chars()
        .map(|c| if c.is_control() || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}') { ' ' } else { c })
        .collect();
    if clean.chars().count() > max {
        let mut cut: String = clean.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    } else {
        clean
    }
}

/// The table: a header row, then one row per session; columns padded to
/// their widest cell.
fn table(summaries: &[RecordSummary]) -> String {
    let header = ["URI", "TITLE", "OWNER", "STATUS", "MODIFIED", "CHANGES"].map(str::to_owned);
    let mut rows: Vec<[String; 6]> = vec![header];
    for s in summaries {
        rows.push([
            cell(&s.resource, usize::MAX),
            if s.title.is_empty() { "-".to_owned() } else { cell(&s.title, TITLE_COLUMN_CHARS) },
            s.owner.as_deref().map_or_else(|| "-".to_owned(), |o| cell(o, usize::MAX)),
            status(s),
            cell(&s.modified_at, usize::MAX),
            changes(s),
        ]);
    }
    let mut widths = [0usize; 6];
    for row in &rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (i, (c, w)) in row.iter().zip(widths).enumerate() {
            line.push_str(c);
            if i + 1 < row.len() {
                line.extend(std::iter::repeat_n(' ', w - c.chars().count() + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(key: &str, title: &str, modified: &str) -> SessionRecord {
        let id = key.split_once('@').map_or(key, |(_, id)| id);
        serde_json::from_value(serde_json::json!({
            "format": 1, "key": key, "resource": format!("ahp-session:/{id}"), "provider": "echo",
            "title": title, "createdAt": "2026-01-01T00:00:00.000Z", "modifiedAt": modified,
            "isRead": true, "isArchived": true, "workingDirectories": [], "owner": "user:alice",
            "defaultChat": format!("ahp-chat:/{key}"), "chats": []
        }))
        .expect("a valid record")
    }

    #[test]
    fn reads_sorted_skips_bad_files_and_changes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        for (key, modified) in [("ahp-session@old", "2026-01-01T00:00:00.000Z"), ("ahp-session@new", "2026-02-01T00:00:00.000Z")] {
            let bytes = serde_json::to_vec(&record(key, "t", modified)).expect("encode");
            fs::write(d.join(format!("{key}.json")), bytes).expect("write");
        }
        fs::write(d.join("broken.json"), b"{").expect("write");
        fs::write(d.join(".ahp-session@x.json.tmp-1-2"), b"partial").expect("write");
        let misnamed = serde_json::to_vec(&record("ahp-session@other", "t", "2026-01-01T00:00:00.000Z")).expect("encode");
        fs::write(d.join("ahp-session@mis.json"), misnamed).expect("write");
        let records = read_records(d).expect("read");
        let keys: Vec<String> = records.iter().map(|r| r.key().into_owned()).collect();
        assert_eq!(keys, ["ahp-session@new", "ahp-session@old"]);
        assert!(d.join("broken.json").exists() && d.join(".ahp-session@x.json.tmp-1-2").exists());
        assert!(read_records(&d.join("missing")).is_err());
    }

    #[test]
    fn the_journal_overrides_the_files_and_nothing_is_written() {
        use crate::exec::journal::{Entry, Journal, JOURNAL_NAME};
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        for key in ["ahp-session@kept", "ahp-session@gone"] {
            let bytes = serde_json::to_vec(&record(key, "on file", "2026-01-01T00:00:00.000Z")).expect("encode");
            fs::write(d.join(format!("{key}.json")), bytes).expect("write");
        }
        // As a daemon that crashed after its journal was durable but before
        // any record file was written leaves it.
        let mut journal = Journal::open(d).expect("journal");
        journal
            .append(&[
                Entry::Put(Box::new(record("ahp-session@kept", "journaled", "2026-03-01T00:00:00.000Z"))),
                Entry::Delete("ahp-session@gone".to_owned()),
                Entry::Put(Box::new(record("ahp-session@fresh", "only in the journal", "2026-02-01T00:00:00.000Z"))),
            ])
            .expect("append");
        let journal_len = fs::metadata(d.join(JOURNAL_NAME)).expect("journal").len();
        let records = read_records(d).expect("read");
        let seen: Vec<(String, &str)> = records.iter().map(|r| (r.key().into_owned(), &*r.title)).collect();
        assert_eq!(seen, [("ahp-session@kept".to_owned(), "journaled"), ("ahp-session@fresh".to_owned(), "only in the journal")]);
        assert!(d.join("ahp-session@gone.json").exists(), "a reader changes nothing");
        assert_eq!(fs::metadata(d.join(JOURNAL_NAME)).expect("journal").len(), journal_len);
    }

    #[test]
    fn table_has_every_column_and_cleans_titles() {
        let summaries = [RecordSummary::of(&record("ahp-session@a", "evil\u{1b}[31m title\u{202e}", "2026-01-01T00:00:00.000Z"))];
        let text = table(&summaries);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        for column in ["URI", "TITLE", "OWNER", "STATUS", "MODIFIED", "CHANGES"] {
            assert!(lines[0].contains(column), "{text}");
        }
        assert!(lines[1].starts_with("ahp-session:/a "), "{text}");
        assert!(lines[1].contains("user:alice") && lines[1].contains("read,archived"), "{text}");
        assert!(!text.contains('\u{1b}') && !text.contains('\u{202e}'), "{text:?}");
        assert_eq!(cell(&"x".repeat(50), 10).chars().count(), 10);
    }
}
