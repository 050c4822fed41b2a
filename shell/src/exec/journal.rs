//! The file store's write-ahead journal: `<sessions dir>/journal`, one JSON
//! line per write (`{"put": <record>}` or `{"delete": "<key>"}`), appended
//! and fsynced once per batch (issue 21: a turn's two record writes cost one
//! fsync each, shared by every session written in the same batch, instead of
//! a file fsync and a directory fsync each).
//!
//! The store stays one JSON file per session (the Sessions page): after the
//! journal is durable, each record is written to its own file atomically
//! (temp file, rename) but not fsynced. A *checkpoint* makes those files
//! durable (each file written since the last one fsynced, then the
//! directory) and empties the journal; it runs when the journal passes
//! [`CHECKPOINT_BYTES`], when the store stops, and at start.
//!
//! After a crash the files may be older than what was acknowledged, or (on
//! a filesystem that does not order a rename after its data) empty; the
//! journal is not. [`recover`], run before the store is read, writes every
//! record the journal names to its file durably and then empties the
//! journal, so the files alone are the store again. A last line cut short
//! by the crash was never acknowledged as durable (its fsync had not
//! returned: a write the core made `Durability::WithNext` may have been
//! answered, which is what that durability allows) and is ignored; a
//! damaged line elsewhere is skipped with a warning and the journal is kept
//! aside as `journal.damaged-<ms>` for a person to read. (Lines appended
//! after the last fsync may reach the disk out of order after a crash of
//! the machine, so such a line can also be a lost `WithNext` write; a
//! record file is replaced only once its line is durable, so the files
//! never run ahead of the journal.)
//!
//! No rule of the Sessions page lives here: this only makes the core's
//! writes durable.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::Read as _;
use std::path::{Path, PathBuf};

use ahpd_core::SessionRecord;
use serde::{Deserialize, Serialize};

use super::fsutil;

/// The journal's file name in the sessions directory (not `*.json`, so the
/// record reader never takes it for a record; no store key can make it).
pub const JOURNAL_NAME: &str = "journal";

/// Journal size (bytes) past which a batch is followed by a checkpoint.
/// 8 MiB holds some thousands of records: the checkpoint's fsyncs (one per
/// distinct file written since the last) are shared by all of them.
pub const CHECKPOINT_BYTES: u64 = 8 << 20;

/// One write, as the journal keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Entry {
    /// The record's file is replaced by this record.
    Put(Box<SessionRecord>),
    /// The file of the record with this store key is removed.
    Delete(String),
}

impl Entry {
    /// The store key this entry writes.
    pub fn key(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Entry::Put(record) => record.key(),
            Entry::Delete(key) => std::borrow::Cow::Borrowed(key),
        }
    }
}

/// The open journal of a running file store.
#[derive(Debug)]
pub struct Journal {
    dir: PathBuf,
    file: File,
    /// Bytes in the journal (all of them acknowledged).
    len: u64,
    /// Keys whose files were written or removed since the last checkpoint:
    /// the files a checkpoint must make durable.
    dirty: BTreeSet<String>,
    /// An append failed and could not be cut back: the file may end in a
    /// half-written line, so nothing more is appended after it.
    broken: bool,
    /// Bytes were appended without an fsync (writes made
    /// `Durability::WithNext`): the next [`Journal::append`],
    /// [`Journal::sync`] or checkpoint makes them durable.
    unsynced: bool,
    /// Entries appended without an fsync whose record files are not
    /// written yet: a file is replaced only once its journal line is
    /// durable, so that [`recover`] can always write it again (a rename
    /// not yet on disk may leave the old file or none). Written, in order,
    /// once the journal is synced; one whose file could not be written
    /// stays until it is, or until a later write of its key supersedes it.
    deferred: Vec<Entry>,
}

impl Journal {
    /// Opens (creating if needed) the journal in `dir`, which [`recover`]
    /// has emptied.
    ///
    /// Errors: the file cannot be opened or created, or the directory
    /// holding a new journal cannot be synced.
    pub fn open(dir: &Path) -> std::io::Result<Journal> {
        let path = dir.join(JOURNAL_NAME);
        let existed = path.exists();
        let mut options = OpenOptions::new();
        options.create(true).append(true).read(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, fsutil::FILE_MODE);
        let file = options.open(&path)?;
        if !existed {
            fsutil::sync_dir(dir)?;
        }
        let len = file.metadata()?.len();
        Ok(Journal { dir: dir.to_owned(), file, len, dirty: BTreeSet::new(), broken: false, unsynced: false, deferred: Vec::new() })
    }

    /// Appends `entries` and makes them (and every entry appended before
    /// them) durable with one fsync: once this returns `Ok`, they survive a
    /// crash. On failure nothing of this call is acknowledged and the
    /// journal is cut back to where it was (so a later append never follows
    /// a half-written line).
    ///
    /// Errors: encoding or IO. When the cut back failed too, every later
    /// append is refused (the store then fails its writes rather than
    /// acknowledge one the journal might not replay).
    pub fn append<'a>(&mut self, entries: impl IntoIterator<Item = &'a Entry>) -> std::io::Result<()> {
        self.write_lines(entries, true)
    }

    /// Appends `entries` (writes made `Durability::WithNext`) without an
    /// fsync: they are written in order after every earlier entry and
    /// become durable with the next fsync ([`Journal::append`],
    /// [`Journal::sync`], a checkpoint); a crash of the machine before it
    /// may lose them, and only them and what came after. Their files are
    /// written only then ([`Journal::deferred`]).
    ///
    /// Errors: as [`Journal::append`].
    pub fn append_with_next(&mut self, entries: Vec<Entry>) -> std::io::Result<()> {
        self.write_lines(&entries, false)?;
        self.deferred.extend(entries);
        Ok(())
    }

    /// Writes `entries` as lines, with an fsync when `sync`.
    fn write_lines<'a>(&mut self, entries: impl IntoIterator<Item = &'a Entry>, sync: bool) -> std::io::Result<()> {
        if self.broken {
            return Err(std::io::Error::other("the journal could not be cut back after a failed write"));
        }
        let mut bytes = Vec::new();
        for entry in entries {
            serde_json::to_writer(&mut bytes, entry).map_err(std::io::Error::other)?;
            bytes.push(b'\n');
        }
        let written = fsutil::write_in_pieces(&mut self.file, &bytes).and_then(|()| if sync { fsutil::sync_data_counted(&self.file) } else { Ok(()) });
        match written {
            Ok(()) => {
                self.len += bytes.len() as u64;
                self.unsynced = !sync;
                if sync {
                    self.apply_deferred();
                }
                Ok(())
            }
            Err(e) => {
                if self.file.set_len(self.len).is_err() {
                    self.broken = true;
                }
                Err(e)
            }
        }
    }

    /// Whether entries were appended since the last fsync.
    pub fn unsynced(&self) -> bool {
        self.unsynced
    }

    /// Makes every entry appended so far durable (one fsync), if any was
    /// appended without one, then writes the deferred entries' files.
    ///
    /// Errors: the fsync failed; the entries stay unsynced and a later
    /// sync, append or checkpoint tries again.
    pub fn sync(&mut self) -> std::io::Result<()> {
        if self.unsynced {
            fsutil::sync_data_counted(&self.file)?;
            self.unsynced = false;
        }
        self.apply_deferred();
        Ok(())
    }

    /// Writes the deferred entries' files, in order (the journal is
    /// synced). One that fails is logged and kept for the next sync.
    fn apply_deferred(&mut self) {
        if self.unsynced || self.deferred.is_empty() {
            return;
        }
        let mut failed = Vec::new();
        for entry in std::mem::take(&mut self.deferred) {
            match self.apply(&entry) {
                Ok(()) => {}
                Err(message) => {
                    tracing::warn!(key = %entry.key(), detail = %message, "a record file could not be written; its journal line keeps it");
                    failed.push(entry);
                }
            }
        }
        self.deferred = failed;
    }

    /// Bytes in the journal now (every one acknowledged): where
    /// [`Journal::cut_back`] returns to.
    #[allow(clippy::len_without_is_empty)] // a position, not a collection
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Writes what `entry` says to its record file, atomically but not
    /// durably (the journal holds it until the next checkpoint).
    ///
    /// Errors: the file cannot be written or removed (the store directory
    /// is read-only, gone, full); the entry must then be taken back out of
    /// the journal ([`Journal::cut_back`]) and its write refused, so a
    /// restart never brings back a write the client was told failed.
    pub fn apply(&mut self, entry: &Entry) -> Result<(), String> {
        // A deferred entry of the same key that could not be written is
        // older than this one: it must not be written after it.
        self.deferred.retain(|d| d.key() != entry.key());
        write_file(&self.dir, entry, false)?;
        self.dirty.insert(entry.key().into_owned());
        Ok(())
    }

    /// Takes back everything appended after byte `len` and appends `keep`
    /// instead, durably: how a batch some of whose files could not be
    /// written keeps only the writes that were.
    ///
    /// Errors: as [`Journal::append`]; when the journal could not be cut,
    /// every later append is refused and the entries past `len` stay (a
    /// restart replays them).
    pub fn cut_back(&mut self, len: u64, keep: &[Entry]) -> std::io::Result<()> {
        if let Err(e) = self.file.set_len(len) {
            self.broken = true;
            return Err(e);
        }
        self.len = len;
        if keep.is_empty() {
            fsutil::sync_data_counted(&self.file)?;
            self.unsynced = false;
            return Ok(());
        }
        self.append(keep.iter())
    }

    /// Whether the journal has grown past [`CHECKPOINT_BYTES`].
    pub fn wants_checkpoint(&self) -> bool {
        self.len >= CHECKPOINT_BYTES
    }

    /// Makes every file written since the last checkpoint durable (each
    /// fsynced, then the directory), then empties the journal.
    ///
    /// Errors: a file, the directory or the journal could not be synced or
    /// cut; the journal then keeps every entry (nothing is lost, the next
    /// checkpoint tries again).
    pub fn checkpoint(&mut self) -> std::io::Result<()> {
        // Every line durable and every file written first: a line whose
        // file could not be written stays in the journal.
        self.sync()?;
        if !self.deferred.is_empty() {
            return Err(std::io::Error::other("a record file could not be written; the journal keeps its line"));
        }
        for key in &self.dirty {
            sync_file(&self.dir, key)?;
        }
        fsutil::sync_dir(&self.dir)?;
        self.dirty.clear();
        self.file.set_len(0)?;
        fsutil::sync_data_counted(&self.file)?;
        self.len = 0;
        self.unsynced = false;
        Ok(())
    }
}

/// The file name of store key `key`, or why it is refused.
fn file_name(key: &str) -> Result<String, String> {
    super::store::file_name(key).ok_or_else(|| format!("refused unsafe store key {key:?}"))
}

/// Writes (or removes) `entry`'s record file: atomically, and durably when
/// `durable` (the file fsynced; the caller syncs the directory).
fn write_file(dir: &Path, entry: &Entry, durable: bool) -> Result<(), String> {
    let name = file_name(&entry.key())?;
    match entry {
        Entry::Put(record) => {
            let bytes =
                serde_json::to_vec_pretty(record).map_err(|e| format!("could not encode record {}: {e}", record.key()))?;
            let written = if durable {
                fsutil::write_replace(dir, &name, &bytes, None)
            } else {
                fsutil::write_atomic(dir, &name, &bytes, None)
            };
            written.map_err(|e| format!("could not write {}: {e}", dir.join(&name).display()))
        }
        Entry::Delete(_) => match fs::remove_file(dir.join(&name)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("could not remove {}: {e}", dir.join(&name).display())),
        },
    }
}

/// Fsyncs the record file of `key`; one that is gone (removed) is fine.
fn sync_file(dir: &Path, key: &str) -> std::io::Result<()> {
    let Ok(name) = file_name(key) else { return Ok(()) };
    match File::open(dir.join(name)) {
        Ok(file) => fsutil::sync_all_counted(&file),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// What [`read`] found in a journal.
#[derive(Debug, Default)]
pub struct Contents {
    /// The acknowledged entries, in order.
    pub entries: Vec<Entry>,
    /// Lines that did not parse (a last line cut short by a crash is not
    /// counted: it was never acknowledged).
    pub damaged: usize,
}

/// Reads the journal in `dir` (none there reads as empty), without
/// changing anything: for [`recover`], and for offline readers that want
/// the store as it was acknowledged (`ahpd session export`).
///
/// Errors: the journal exists but cannot be read.
pub fn read(dir: &Path) -> std::io::Result<Contents> {
    let mut bytes = Vec::new();
    match File::open(dir.join(JOURNAL_NAME)) {
        Ok(mut file) => {
            file.read_to_end(&mut bytes)?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Contents::default()),
        Err(e) => return Err(e),
    }
    Ok(parse(&bytes))
}

/// The entries of journal bytes `bytes` (see [`read`]).
fn parse(bytes: &[u8]) -> Contents {
    let mut out = Contents::default();
    let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    for line in bytes[..complete].split(|b| *b == b'\n') {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Entry>(line) {
            Ok(entry) => out.entries.push(entry),
            Err(_) => out.damaged += 1,
        }
    }
    out
}

/// The journal's last word on each key it names, read-only: `Some(record)`
/// for a record written since the files were last made whole, `None` for
/// one removed. Offline readers (`ahpd sessions list`, `ahpd session
/// export`) put these over the record files to see the store as it was
/// acknowledged, even after a crash, without writing anything (a daemon may
/// be running).
///
/// Errors: the journal cannot be read.
pub fn last_words(dir: &Path) -> std::io::Result<BTreeMap<String, Option<SessionRecord>>> {
    let mut last = BTreeMap::new();
    for entry in read(dir)?.entries {
        match entry {
            Entry::Put(record) => last.insert(record.key().into_owned(), Some(*record)),
            Entry::Delete(key) => last.insert(key, None),
        };
    }
    Ok(last)
}

/// Brings the record files of `dir` up to what the journal acknowledged,
/// durably, then empties the journal: run before the store is read (at
/// start, and by offline commands that write the store). Returns how many
/// records the journal settled. A journal with damaged lines is copied
/// aside as `journal.damaged-<wall_ms>` first. No journal: nothing to do.
///
/// Errors: the journal cannot be read, a record file cannot be written, or
/// the directory or journal cannot be synced; the journal is then kept
/// whole, so the next start tries again.
pub fn recover(dir: &Path, wall_ms: i64) -> Result<usize, String> {
    let path = dir.join(JOURNAL_NAME);
    let read = read(dir).map_err(|e| format!("could not read the store journal {}: {e}", path.display()))?;
    if read.damaged > 0 {
        let aside = dir.join(format!("{JOURNAL_NAME}.damaged-{wall_ms}"));
        match fs::copy(&path, &aside) {
            Ok(_) => tracing::warn!(
                journal = %path.display(),
                kept = %aside.display(),
                damaged = read.damaged,
                "store journal lines that do not parse were skipped; the journal is kept aside"
            ),
            Err(e) => tracing::warn!(journal = %path.display(), error = %e, "could not keep a damaged store journal aside"),
        }
    }
    if read.entries.is_empty() && read.damaged == 0 {
        let empty = fs::metadata(&path).map_or(true, |m| m.len() == 0);
        if empty {
            return Ok(0);
        }
    }
    // The last word on each key, in key order.
    let mut last: BTreeMap<String, Entry> = BTreeMap::new();
    for entry in read.entries {
        last.insert(entry.key().into_owned(), entry);
    }
    for entry in last.values() {
        write_file(dir, entry, true)?;
    }
    fsutil::sync_dir(dir).map_err(|e| format!("could not sync {}: {e}", dir.display()))?;
    let file = OpenOptions::new().write(true).open(&path).map_err(|e| format!("could not open {}: {e}", path.display()))?;
    file.set_len(0)
        .and_then(|()| fsutil::sync_data_counted(&file))
        .map_err(|e| format!("could not empty the store journal {}: {e}", path.display()))?;
    if !last.is_empty() {
        tracing::info!(records = last.len(), "store journal replayed onto the record files");
    }
    Ok(last.len())
}

/// The title of the record file of `key` in `dir`, if it reads (the
/// journal's and the store's tests).
#[cfg(test)]
pub(crate) fn title_on_disk(dir: &Path, key: &str) -> Option<String> {
    let bytes = fs::read(dir.join(format!("{key}.json"))).ok()?;
    serde_json::from_slice::<SessionRecord>(&bytes).ok().map(|r| r.title.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn record(key: &str, title: &str) -> SessionRecord {
        let at = "2026-01-01T00:00:00.000Z";
        serde_json::from_value(serde_json::json!({
            "format": 1, "key": key, "resource": "ahp-session:/abc", "provider": "echo",
            "title": title, "createdAt": at, "modifiedAt": at, "isRead": false, "isArchived": false,
            "workingDirectories": [], "defaultChat": "ahp-chat:/ahp-session@abc",
            "chats": [{"resource": "ahp-chat:/ahp-session@abc", "title": "", "conversationId": key,
                       "modifiedAt": at, "status": 1}]
        }))
        .expect("a valid record")
    }

    #[test]
    fn a_crash_before_the_files_are_written_loses_nothing_acknowledged() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let mut journal = Journal::open(d).expect("open");
        let entries = vec![
            Entry::Put(Box::new(record("ahp-session@a", "one"))),
            Entry::Put(Box::new(record("ahp-session@b", "b"))),
            Entry::Put(Box::new(record("ahp-session@a", "two"))),
            Entry::Delete("ahp-session@b".to_owned()),
        ];
        journal.append(&entries).expect("append");
        // The crash: the journal is durable, no record file was written,
        // and the next write was cut short mid-line.
        drop(journal);
        let mut file = OpenOptions::new().append(true).open(d.join(JOURNAL_NAME)).expect("open");
        file.write_all(b"{\"put\":{\"format\":1,\"ke").expect("torn");
        drop(file);
        assert_eq!(title_on_disk(d, "ahp-session@a"), None);

        let words = last_words(d).expect("last words");
        assert_eq!(words.get("ahp-session@a").cloned().flatten().map(|r| r.title).as_deref(), Some("two"));
        assert_eq!(words.get("ahp-session@b"), Some(&None));
        assert_eq!(words.len(), 2);

        assert_eq!(recover(d, 7).expect("recover"), 2);
        assert_eq!(title_on_disk(d, "ahp-session@a").as_deref(), Some("two"));
        assert!(!d.join("ahp-session@b.json").exists());
        assert_eq!(fs::metadata(d.join(JOURNAL_NAME)).expect("journal").len(), 0, "emptied once the files hold it");
        assert!(!d.join("journal.damaged-7").exists(), "a torn last line is not damage");
        assert_eq!(recover(d, 8).expect("again"), 0);
    }

    /// A journal in `d` holding one durable put of `ahp-session@a` titled
    /// "one", its file written.
    fn holding_one(d: &Path) -> Journal {
        let mut journal = Journal::open(d).expect("open");
        let put = Entry::Put(Box::new(record("ahp-session@a", "one")));
        journal.append(std::slice::from_ref(&put)).expect("append");
        journal.apply(&put).expect("apply");
        journal
    }

    #[test]
    fn an_unsynced_line_writes_its_file_only_once_durable_and_a_checkpoint_or_a_stop_does() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let mut journal = holding_one(d);
        let later = Entry::Put(Box::new(record("ahp-session@a", "two")));
        journal.append_with_next(vec![later]).expect("append");
        assert!(journal.unsynced());
        assert_eq!(title_on_disk(d, "ahp-session@a").as_deref(), Some("one"), "the file waits for its line's fsync");
        assert_eq!(last_words(d).expect("read")["ahp-session@a"].as_ref().map(|r| r.title.to_string()).as_deref(), Some("two"), "readers of the journal see it");
        // The store's stop (a checkpoint) syncs, writes the file, empties the journal.
        journal.checkpoint().expect("checkpoint");
        assert!(!journal.unsynced());
        assert_eq!(title_on_disk(d, "ahp-session@a").as_deref(), Some("two"));
        assert_eq!(fs::metadata(d.join(JOURNAL_NAME)).expect("journal").len(), 0);
    }

    #[test]
    fn applied_writes_are_on_their_files_and_a_checkpoint_empties_the_journal() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let mut journal = holding_one(d);
        assert_eq!(title_on_disk(d, "ahp-session@a").as_deref(), Some("one"), "readers see it before any checkpoint");
        assert!(!journal.wants_checkpoint());
        journal.checkpoint().expect("checkpoint");
        assert_eq!(fs::metadata(d.join(JOURNAL_NAME)).expect("journal").len(), 0);
        let gone = Entry::Delete("ahp-session@a".to_owned());
        journal.append(std::slice::from_ref(&gone)).expect("append");
        journal.apply(&gone).expect("apply");
        assert!(!d.join("ahp-session@a.json").exists());
        assert_eq!(read(d).expect("read").entries.len(), 1);
        // A batch whose second file could not be written keeps only the first.
        let at = journal.len();
        let b = Entry::Put(Box::new(record("ahp-session@b", "b")));
        journal.append(&[b.clone(), Entry::Put(Box::new(record("ahp-session@c", "c")))]).expect("append");
        journal.cut_back(at, std::slice::from_ref(&b)).expect("cut back");
        let words = last_words(d).expect("read");
        assert_eq!(words.keys().map(String::as_str).collect::<Vec<_>>(), ["ahp-session@a", "ahp-session@b"]);
    }

    #[test]
    fn a_damaged_line_is_skipped_and_kept_aside() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let good = serde_json::to_string(&Entry::Put(Box::new(record("ahp-session@a", "kept")))).expect("encode");
        fs::write(d.join(JOURNAL_NAME), format!("{{garbage\n{good}\n")).expect("write");
        assert_eq!(recover(d, 9).expect("recover"), 1);
        assert_eq!(title_on_disk(d, "ahp-session@a").as_deref(), Some("kept"));
        assert!(d.join("journal.damaged-9").exists());
    }
}
