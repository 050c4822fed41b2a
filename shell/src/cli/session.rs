//! `ahpd session export` and `ahpd session import`: one session as a plain
//! JSON file (`ahpd_core::export`, documented in `docs/EXPORT.md`).
//!
//! Export reads the store record `<data-dir>/sessions/<key>.json` and, for
//! the `echo` provider, each chat's transcript under `<data-dir>/echo/`.
//! Import checks the whole file before it touches the data directory, then
//! writes the transcripts and, last, the store record (the record is what
//! makes the session exist, so an import cut short leaves at most an
//! orphaned transcript, never a session without its messages).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use ahp_types::Uri;
use ahpd_core::export::{ExportedSession, EXPORT_FORMAT};
use ahpd_core::ids::{self, ResourceId};
use ahpd_core::{SessionRecord, WallTime};

use super::transcript::{self, ECHO_PROVIDER};
use super::{note, DataDirArg};
use crate::exec::{fsutil, journal, store};

/// Longest turn id accepted in an import, in bytes (the daemon's own limit
/// for a turn started by a client).
const TURN_ID_MAX_BYTES: usize = 256;
/// Longest provider name accepted in an import, in bytes.
const PROVIDER_MAX_BYTES: usize = 64;
/// Most candidate URIs tried for a taken id before giving up.
const MAX_ID_TRIES: usize = 10_000;

/// `--help` text of `ahpd session export`.
pub const EXPORT_ABOUT: &str = "\
Write one session as a plain JSON file that any JSON viewer can read: its id, \
provider, title, working directory, created and modified times, settings, \
owner, and every message in order (role, content, and who sent each user \
message). The same file is the session's audit trail. The format (tagged \
\"ahpd.session.v1\") is documented with a JSON Schema in docs/EXPORT.md.

The session is read from the store in the data directory \
(<DIR>/sessions/<key>.json); the messages come from the agent's own \
transcripts. This host reads the transcripts of the built-in `echo` agent; \
for another provider the export holds the session's record and no messages, \
and says so on stderr. Reading is safe while the daemon runs.";

/// Text after the options of `ahpd session export --help`.
pub const EXPORT_AFTER: &str = "\
Examples:
  ahpd session export ahp-session:/3f2a-11ee > session.json
  ahpd session export ahp-session:/3f2a-11ee -o session.json --data-dir /srv/ahpd

Exit status: 0 written; 1 the session is not in the store, or a file could \
not be read or written (the reason on stderr); 2 a usage error (e.g. a URI \
that is not <scheme>:/<id>).";

/// `--help` text of `ahpd session import`.
pub const IMPORT_ABOUT: &str = "\
Bring back a session from a file written by `ahpd session export`, as a \
resumable session: the store record goes to <DIR>/sessions/ (written \
atomically, like the daemon's own writes) and, for the `echo` provider, each \
chat's messages go to the agent's transcript under <DIR>/echo/. The URI the \
session was imported as is printed on stdout: the file's own id, or \
<id>-imported-<n> when that id is already in the store.

The whole file is checked before anything is written: its format tag, the \
session id (refused if empty, longer than 256 bytes, or holding `/`, `\\`, \
NUL, control characters or `..`), the provider name, the turn ids and the \
timestamps. A refused file writes nothing.

A running daemon does not see an imported session until it next starts: \
import while it is stopped, or restart it afterwards.

Messages of a provider other than `echo` cannot be put back into that \
provider's own transcripts: the session is imported with its record only, \
its chats start afresh, and stderr says so.";

/// Text after the options of `ahpd session import --help`.
pub const IMPORT_AFTER: &str = "\
Examples:
  ahpd session import session.json
  ahpd session import - --data-dir /srv/ahpd < session.json

Exit status: 0 imported (the URI on stdout); 1 the file is refused or \
unreadable, or the store could not be written (the reason on stderr; \
nothing is left half-written); 2 a usage error.";

/// Options of `ahpd session export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The session's URI, e.g. `ahp-session:/3f2a-11ee`.
    #[arg(value_name = "URI", value_parser = super::parse_session_uri)]
    pub uri: ResourceId,
    /// Write to FILE (atomically, mode 0600: it holds the conversation)
    /// instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The data directory.
    #[command(flatten)]
    pub data: DataDirArg,
}

/// Options of `ahpd session show`.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// The session's URI, e.g. `ahp-session:/3f2a-11ee`.
    #[arg(value_name = "URI", value_parser = super::parse_session_uri)]
    pub uri: ResourceId,
    /// The data directory.
    #[command(flatten)]
    pub data: DataDirArg,
}

/// `ahpd session show`: the session's row, then each chat's messages in
/// order (`role [sender]: text`), from the same reading as `export`.
///
/// Errors: as `export`.
pub fn show(args: &ShowArgs) -> Result<(), String> {
    let data_dir = args.data.resolve()?;
    let doc = build_export(&data_dir, &args.uri)?;
    let mut out = String::new();
    out.push_str(&format!("session   {}\n", doc.id));
    out.push_str(&format!("title     {}\n", if doc.title.is_empty() { "(untitled)" } else { doc.title.as_str() }));
    out.push_str(&format!("provider  {}\n", doc.provider));
    out.push_str(&format!("owner     {}\n", doc.owner.as_deref().unwrap_or("-")));
    out.push_str(&format!("folder    {}\n", doc.working_directory.as_deref().unwrap_or("-")));
    out.push_str(&format!("created   {}\nmodified  {}\n", doc.created_at, doc.modified_at));
    for chat in &doc.chats {
        out.push_str(&format!("\nchat {}{}\n", chat.id, if chat.title.is_empty() { String::new() } else { format!(" ({})", chat.title) }));
        if chat.messages.is_empty() {
            out.push_str("  (no messages)\n");
        }
        for m in &chat.messages {
            let who = m.sender.as_deref().map(|s| format!(" [{s}]")).unwrap_or_default();
            let state = m.state.as_deref().filter(|s| *s != "complete").map(|s| format!(" ({s})")).unwrap_or_default();
            out.push_str(&format!("  {}{who}{state}: {}\n", m.role, m.content.replace('\n', "\n    ")));
        }
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes()).and_then(|()| stdout.flush()).map_err(|e| format!("could not write to stdout: {e}"))
}

/// Options of `ahpd session import`.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// The export file to read (`-` reads stdin).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// The data directory.
    #[command(flatten)]
    pub data: DataDirArg,
}

/// `ahpd session export`.
///
/// Errors: no such session, an unreadable record or transcript, or the
/// output cannot be written.
pub fn export(args: &ExportArgs) -> Result<(), String> {
    let data_dir = args.data.resolve()?;
    let doc = build_export(&data_dir, &args.uri)?;
    let mut bytes = serde_json::to_vec_pretty(&doc).map_err(|e| format!("could not encode the export: {e}"))?;
    bytes.push(b'\n');
    match &args.output {
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(&bytes).and_then(|()| out.flush()).map_err(|e| format!("could not write to stdout: {e}"))
        }
        Some(path) => write_output(path, &bytes),
    }
}

/// The export of session `id` from the store under `data_dir`. A chat whose
/// transcript is missing (its agent never started) contributes no
/// messages; that is said on stderr unless the chat never started.
///
/// Errors: no record, a record that does not parse or names another
/// session, or a transcript that cannot be read.
pub fn build_export(data_dir: &Path, id: &ResourceId) -> Result<ExportedSession, String> {
    let uri = id.uri();
    let sessions_dir = data_dir.join("sessions");
    let key = id.store_key();
    let name = store::file_name(&key).ok_or_else(|| format!("session {} has no safe store key", ids::printable(&uri)))?;
    let path = sessions_dir.join(name);
    let journaled = journal::last_words(&sessions_dir)
        .map_err(|e| format!("could not read the store journal in {}: {e}", sessions_dir.display()))?
        .remove(&key);
    let missing = || format!("no session {uri} in the store {}", sessions_dir.display());
    let record: SessionRecord = match journaled {
        // The journal's word is newer than the file's.
        Some(Some(record)) => record,
        Some(None) => return Err(missing()),
        None => {
            let bytes = match fs::read(&path) {
                Ok(bytes) => bytes,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(missing()),
                Err(e) => return Err(format!("could not read {}: {e}", path.display())),
            };
            serde_json::from_slice(&bytes).map_err(|e| format!("the store record {} does not parse: {e}", path.display()))?
        }
    };
    if record.key() != key || record.resource != uri {
        return Err(format!("the store record {} names another session ({})", path.display(), ids::printable(&record.resource)));
    }
    if record.deleted {
        return Err(format!("session {uri} was disposed; the store keeps only its tombstone"));
    }
    let mut turns = BTreeMap::new();
    if record.provider == ECHO_PROVIDER {
        let echo_dir = data_dir.join("echo");
        for chat in &record.chats {
            match transcript::read(&echo_dir, &chat.conversation_id)? {
                Some(chat_turns) => {
                    turns.insert(chat.resource.clone(), chat_turns);
                }
                None if chat.fresh => {}
                None => note(&format!(
                    "chat {} has no transcript in {}; it is exported with no messages",
                    ids::printable(&chat.resource),
                    echo_dir.display()
                )),
            }
        }
    } else {
        note(&format!(
            "this host cannot read the transcripts of provider {:?}; the export holds the session's record and no messages",
            record.provider
        ));
    }
    Ok(ahpd_core::export::export(&record, &turns))
}

/// Writes `bytes` to `path` atomically and durably, mode 0600.
fn write_output(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| format!("{} is not a file name this command can write (it must end in a UTF-8 name)", path.display()))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    fsutil::write_durable(dir, name, bytes, Some(0o600)).map_err(|e| format!("could not write {}: {e}", path.display()))
}

/// `ahpd session import`.
///
/// Errors: the file cannot be read, is refused by [`check`], or the data
/// directory cannot be written.
pub fn import(args: &ImportArgs) -> Result<(), String> {
    let shown = args.file.display().to_string();
    let bytes = if args.file.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::stdin().lock().read_to_end(&mut buf).map_err(|e| format!("could not read stdin: {e}"))?;
        buf
    } else {
        fs::read(&args.file).map_err(|e| format!("could not read {shown}: {e}"))?
    };
    let doc: ExportedSession =
        serde_json::from_slice(&bytes).map_err(|e| format!("{shown} is not an ahpd session export: {e}"))?;
    // Everything about the file is checked before the data directory is
    // touched.
    check(&doc).map_err(|e| format!("refused {shown}: {e}; nothing was written"))?;
    let data_dir = args.data.resolve()?;
    let uri = import_doc(&data_dir, &doc)?;
    println!("{uri}");
    note(&format!("imported as {uri}; a running daemon picks it up when it next starts"));
    Ok(())
}

/// Checks an export before anything is written: the format tag, the
/// session id (`ids::ResourceId`), the provider name, the timestamps, and
/// every chat's turn ids (1 to 256 bytes, unique in their chat); then a dry
/// run of the import itself.
///
/// Errors: the first problem found, as a message.
pub fn check(doc: &ExportedSession) -> Result<(), String> {
    if doc.format != EXPORT_FORMAT {
        return Err(format!("format {:?} is not {EXPORT_FORMAT:?}", ids::printable(&doc.format)));
    }
    ResourceId::parse(&doc.id).map_err(|e| format!("the session id is refused: {e}"))?;
    check_provider(&doc.provider)?;
    for (field, value) in [("createdAt", &doc.created_at), ("modifiedAt", &doc.modified_at)] {
        if WallTime::parse_iso(value).is_none() {
            return Err(format!("{field} {:?} is not an RFC 3339 timestamp", ids::printable(value)));
        }
    }
    let chats: Vec<&[ahpd_core::export::ExportedMessage]> =
        if doc.chats.is_empty() { vec![&doc.messages] } else { doc.chats.iter().map(|c| c.messages.as_slice()).collect() };
    for (i, messages) in chats.into_iter().enumerate() {
        let mut seen = BTreeSet::new();
        for m in messages {
            if m.turn_id.is_empty() || m.turn_id.len() > TURN_ID_MAX_BYTES {
                return Err(format!("chat {i}: a turn id must be 1 to {TURN_ID_MAX_BYTES} bytes"));
            }
            if m.role == "user" && !seen.insert(m.turn_id.as_str()) {
                return Err(format!("chat {i}: turn id {} is used twice", ids::printable(&m.turn_id)));
            }
        }
    }
    ahpd_core::export::import(doc, |_| false).map(|_| ())
}

/// A provider name: 1 to 64 bytes of `a-z A-Z 0-9 . _ + -`, not starting
/// with `.` or `-`.
fn check_provider(provider: &str) -> Result<(), String> {
    let ok = !provider.is_empty()
        && provider.len() <= PROVIDER_MAX_BYTES
        && !provider.starts_with(['.', '-'])
        && provider.chars().all(|c| c.is_ascii_alphanumeric() || "._+-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!("provider {:?} is not a provider name", ids::printable(provider)))
    }
}

/// Imports a checked export into `data_dir`; returns the URI it was
/// imported as. Transcripts are written first and the store record last;
/// when a later write fails, what this import wrote is removed again.
///
/// Errors: the directories cannot be made or read, every candidate id is
/// taken, or a write failed.
pub fn import_doc(data_dir: &Path, doc: &ExportedSession) -> Result<Uri, String> {
    let sessions_dir = data_dir.join("sessions");
    let echo_dir = data_dir.join("echo");
    for dir in [&sessions_dir, &echo_dir] {
        fs::create_dir_all(dir).map_err(|e| format!("could not create {}: {e}", dir.display()))?;
        fs::read_dir(dir).map_err(|e| format!("could not read {}: {e}", dir.display()))?;
    }
    // A journal a crashed daemon left is settled onto the files first, so
    // a replay at the next start cannot write over what this import adds
    // (say, over a tombstone this import brings a session back over).
    journal::recover(&sessions_dir, crate::driver::wall_ms()).map_err(|e| format!("the store could not be settled first: {e}"))?;
    let chat_count = doc.chats.len().max(1);
    let problem: RefCell<Option<String>> = RefCell::new(None);
    let tries = Cell::new(0usize);
    let taken = |uri: &str| -> bool {
        tries.set(tries.get() + 1);
        if tries.get() > MAX_ID_TRIES {
            problem.borrow_mut().get_or_insert_with(|| format!("no free id after {MAX_ID_TRIES} tries"));
            return false;
        }
        match is_taken(&sessions_dir, &echo_dir, uri, chat_count) {
            Ok(taken) => taken,
            Err(e) => {
                problem.borrow_mut().get_or_insert(e);
                false
            }
        }
    };
    let imported = ahpd_core::export::import(doc, taken)?;
    if let Some(e) = problem.into_inner() {
        return Err(e);
    }
    let mut record = imported.record;
    let mut written: Vec<PathBuf> = Vec::new();
    if record.provider == ECHO_PROVIDER {
        for chat in &record.chats {
            let turns = imported.turns.get(&chat.resource).map(Vec::as_slice).unwrap_or(&[]);
            let path = transcript::path(&echo_dir, &chat.conversation_id)?;
            if let Err(e) = transcript::write(&echo_dir, &chat.conversation_id, turns) {
                undo(&written);
                return Err(e);
            }
            written.push(path);
        }
    } else {
        let messages: usize = imported.turns.values().map(Vec::len).sum();
        note(&format!(
            "this host cannot write the transcripts of provider {:?}: the session is imported with its record only \
             and its chats start afresh; {messages} turn(s) stay only in the export file",
            record.provider
        ));
        // The backend has no such conversation to resume.
        for chat in &mut record.chats {
            chat.fresh = true;
        }
    }
    if let Err(e) = store::write_record(&sessions_dir, &record) {
        undo(&written);
        return Err(e);
    }
    Ok(record.resource)
}

/// Whether `uri` is in use: its store record exists, or a transcript its
/// chats would be written to does.
///
/// Errors: the existence of a file cannot be told.
fn is_taken(sessions_dir: &Path, echo_dir: &Path, uri: &str, chat_count: usize) -> Result<bool, String> {
    let key = ResourceId::parse(uri).map_err(|e| e.to_string())?.store_key();
    let record = store::file_name(&key).ok_or_else(|| format!("session {} has no safe store key", ids::printable(uri)))?;
    let record = sessions_dir.join(record);
    // A disposed session's tombstone does not hold its URI: an import
    // brings the session back over it.
    let tombstone = fs::read(&record).ok().and_then(|b| serde_json::from_slice::<SessionRecord>(&b).ok()).is_some_and(|r| r.deleted);
    let mut paths = if tombstone { Vec::new() } else { vec![record] };
    for i in 0..chat_count {
        let conversation = if i == 0 { key.clone() } else { format!("{key}.{i}") };
        paths.push(transcript::path(echo_dir, &conversation)?);
    }
    for path in paths {
        match fs::symlink_metadata(&path) {
            Ok(_) => return Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("could not check {}: {e}", path.display())),
        }
    }
    Ok(false)
}

/// Removes files this import wrote (best effort; the import failed anyway).
fn undo(written: &[PathBuf]) {
    for path in written {
        if let Err(e) = fs::remove_file(path) {
            note(&format!("could not remove {} again: {e}", path.display()));
        }
        if let Some(dir) = path.parent() {
            let _ = fsutil::sync_dir(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> ExportedSession {
        serde_json::from_value(serde_json::json!({
            "format": EXPORT_FORMAT, "id": "ahp-session:/a", "provider": "echo", "title": "hi",
            "workingDirectory": "file:///w", "createdAt": "2026-01-01T00:00:00.000Z",
            "modifiedAt": "2026-01-01T00:00:01.000Z", "config": {}, "owner": null,
            "messages": [
                {"role": "user", "content": "hi", "sender": "alice", "turnId": "t1"},
                {"role": "assistant", "content": "Echo: hi", "turnId": "t1", "state": "complete"}
            ],
            "chats": [{"id": "ahp-chat:/ahp-session@a", "title": "", "messages": [
                {"role": "user", "content": "hi", "sender": "alice", "turnId": "t1"},
                {"role": "assistant", "content": "Echo: hi", "turnId": "t1", "state": "complete"}
            ]}]
        }))
        .expect("a valid export")
    }

    #[test]
    fn check_refuses_hostile_or_broken_files() {
        assert!(check(&doc()).is_ok());
        for id in ["ahp-session:/../x", "ahp-session:/..", "ahp-session:/a/b", "ahp-session:/a\\b", "ahp-session:/a\0b", "ahp-session:/", "x"] {
            let d = ExportedSession { id: id.into(), ..doc() };
            assert!(check(&d).is_err(), "{id:?}");
        }
        let long = format!("ahp-session:/{}", "a".repeat(257));
        assert!(check(&ExportedSession { id: long, ..doc() }).is_err());
        for provider in ["", "../echo", "a/b", ".x", "e\ncho"] {
            assert!(check(&ExportedSession { provider: provider.into(), ..doc() }).is_err(), "{provider:?}");
        }
        assert!(check(&ExportedSession { format: "v0".into(), ..doc() }).is_err());
        assert!(check(&ExportedSession { created_at: "yesterday".into(), ..doc() }).is_err());
        let mut dup = doc();
        let again = dup.chats[0].messages.clone();
        dup.chats[0].messages.extend(again);
        assert!(check(&dup).is_err());
        let mut role = doc();
        role.chats[0].messages[1].role = "system".into();
        assert!(check(&role).is_err());
    }

    #[test]
    fn import_then_export_round_trips_and_a_taken_id_gets_a_new_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let uri = import_doc(dir.path(), &doc()).expect("import");
        assert_eq!(uri, "ahp-session:/a");
        assert!(dir.path().join("sessions/ahp-session@a.json").is_file());
        assert!(dir.path().join("echo/ahp-session@a.json").is_file());
        let id = ResourceId::parse(&uri).expect("uri");
        let back = build_export(dir.path(), &id).expect("export");
        assert_eq!(back.messages, doc().messages);
        assert_eq!(back.title, "hi");
        let before = fs::read(dir.path().join("sessions/ahp-session@a.json")).expect("read");
        let again = import_doc(dir.path(), &doc()).expect("import again");
        assert_eq!(again, "ahp-session:/a-imported-1");
        assert_eq!(fs::read(dir.path().join("sessions/ahp-session@a.json")).ok(), Some(before), "the first is untouched");
        // An orphaned transcript also makes an id taken: it is never overwritten.
        fs::write(dir.path().join("echo/ahp-session@b.json"), b"[]").expect("write");
        let b = ExportedSession { id: "ahp-session:/b".into(), ..doc() };
        assert_eq!(import_doc(dir.path(), &b).ok().as_deref(), Some("ahp-session:/b-imported-1"));
        assert_eq!(fs::read(dir.path().join("echo/ahp-session@b.json")).ok(), Some(b"[]".to_vec()));
    }

    #[test]
    fn anything_in_the_way_counts_as_taken_and_a_broken_store_writes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        // A directory where the record's file goes: the id counts as taken.
        fs::create_dir_all(dir.path().join("sessions/ahp-session@a.json/x")).expect("mkdir");
        let moved = import_doc(dir.path(), &ExportedSession { id: "ahp-session:/a".into(), ..doc() });
        assert_eq!(moved.ok().as_deref(), Some("ahp-session:/a-imported-1"));
        assert!(dir.path().join("sessions/ahp-session@a.json/x").is_dir());
        // No usable store directory: refused before any transcript is written.
        let other = tempfile::tempdir().expect("tempdir");
        fs::create_dir_all(other.path().join("echo")).expect("mkdir");
        fs::write(other.path().join("sessions"), b"not a directory").expect("write");
        assert!(import_doc(other.path(), &doc()).is_err());
        assert_eq!(fs::read_dir(other.path().join("echo")).map(|d| d.count()).ok(), Some(0));
    }

    #[test]
    fn another_provider_is_imported_with_fresh_chats_and_exported_without_messages() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = ExportedSession { provider: "claude".into(), ..doc() };
        let uri = import_doc(dir.path(), &d).expect("import");
        assert!(!dir.path().join("echo/ahp-session@a.json").exists());
        let back = build_export(dir.path(), &ResourceId::parse(&uri).expect("uri")).expect("export");
        assert!(back.messages.is_empty());
        let record: SessionRecord =
            serde_json::from_slice(&fs::read(dir.path().join("sessions/ahp-session@a.json")).expect("read")).expect("parse");
        assert!(record.chats.iter().all(|c| c.fresh));
    }
}
