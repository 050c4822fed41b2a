//! The session store executor (`--sessions file|memory`).
//!
//! `file`: one JSON file per session at `<data-dir>/sessions/<key>.json`,
//! behind a write-ahead journal (`sessions/journal`, [`super::journal`]).
//! Commands run one at a time in issue order on one task; whatever queued
//! up while a batch was being written is taken as the next batch (group
//! commit). A batch is appended to the journal and fsynced once; only then
//! is each command answered `Input::Done { outcome: Ok }`, and each record
//! is written to its own file (temp file, rename; made durable by the
//! journal's next checkpoint). A batch of puts that are all
//! `Durability::WithNext` (a turn's end) is appended and answered without
//! an fsync: the next batch's fsync covers it, or the store syncs it after
//! [`WITH_NEXT_MAX`] of quiet. A store whose journal cannot be opened
//! writes each file durably instead (file fsync, rename, one directory
//! fsync per batch), and says so in the log.
//!
//! `memory`: keeps nothing and answers `Ok` at once.
//!
//! No rule of the Sessions page lives here: the core decides what to write
//! and when; this only makes it durable and reports.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use ahpd_core::{Durability, Input, OpId, Outcome, SessionRecord, StoreCmd};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::fsutil::{self, TEMP_MARKER};
use super::journal::{self, Entry, Journal};
use crate::events::EventSink;

/// The longest a write made `Durability::WithNext` waits for another
/// write's fsync before the store syncs the journal for it (issue 21;
/// docs/DECISIONS.md, 32): the most a crash of the machine can take back
/// of a quiet daemon. Under the bulk threads' keep-alive, so the thread
/// that appended the write syncs it (no thread started for one fsync).
pub const WITH_NEXT_MAX: std::time::Duration = std::time::Duration::from_millis(200);

/// How long after a failed sync of the journal the store tries again
/// when no write comes (one log line per try).
const SYNC_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// Which store `--sessions` chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreKind {
    /// One durable JSON file per session (the default).
    File,
    /// Nothing kept: every write succeeds at once and a restart forgets.
    Memory,
}

/// A handle on the running store executor.
pub struct Store {
    inner: Inner,
}

enum Inner {
    File { queue: mpsc::UnboundedSender<(OpId, StoreCmd)>, task: JoinHandle<()> },
    Memory { events: EventSink },
}

/// The file name a record with store key `key` lives in, or `None` when the
/// key is not safe to use as a file name.
pub fn file_name(key: &str) -> Option<String> {
    fsutil::is_safe_component(key).then(|| format!("{key}.json"))
}

impl Store {
    /// Starts the file store writing under `dir` (which must exist). Results
    /// go to `events` as `Input::Done`.
    pub fn file(dir: PathBuf, events: EventSink) -> Store {
        let (queue, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run_file_store(dir, rx, events));
        Store { inner: Inner::File { queue, task } }
    }

    /// The memory store: every command answers `Ok` at once.
    pub fn memory(events: EventSink) -> Store {
        Store { inner: Inner::Memory { events } }
    }

    /// Queues one command; its `Input::Done { op, .. }` comes back through
    /// the event channel once it is durable (or failed).
    pub fn submit(&self, op: OpId, command: StoreCmd) {
        match &self.inner {
            Inner::File { queue, .. } => {
                if queue.send((op, command)).is_err() {
                    tracing::error!(op = op.0, "store executor is gone; write dropped");
                }
            }
            Inner::Memory { events } => events.input(Input::Done { op, outcome: Outcome::Ok }),
        }
    }

    /// Stops taking commands and waits until every queued write is on disk
    /// (graceful shutdown).
    pub async fn finish(self) {
        if let Inner::File { queue, task } = self.inner {
            drop(queue);
            if let Err(e) = task.await {
                tracing::error!(error = %e, "store executor ended abnormally");
            }
        }
    }
}

async fn run_file_store(dir: PathBuf, mut rx: mpsc::UnboundedReceiver<(OpId, StoreCmd)>, events: EventSink) {
    // Opened at the first write, not before: the daemon starts this store
    // before it reads the records, and reading replays and empties the
    // journal (`load`); no write comes before the host is built from them.
    let mut journal: Option<Journal> = None;
    let mut opened = false;
    // When the journal must be synced for writes made
    // `Durability::WithNext`: [`WITH_NEXT_MAX`] after the first of them,
    // unless a durable batch syncs it before.
    let mut sync_due: Option<tokio::time::Instant> = None;
    loop {
        if !journal.as_ref().is_some_and(Journal::unsynced) {
            sync_due = None;
        } else if sync_due.is_none() {
            sync_due = Some(tokio::time::Instant::now() + WITH_NEXT_MAX);
        }
        let next = match sync_due {
            Some(due) => match tokio::time::timeout_at(due, rx.recv()).await {
                Ok(next) => next,
                Err(_) => {
                    let synced = on_bulk(&mut journal, |journal| match journal.as_mut().map(Journal::sync) {
                        Some(Err(e)) => {
                            tracing::warn!(error = %e, "store journal sync failed; tried again with the next write or in 5 s");
                            false
                        }
                        _ => true,
                    })
                    .await;
                    if synced == Ok(false) {
                        sync_due = Some(tokio::time::Instant::now() + SYNC_RETRY);
                    }
                    continue;
                }
            },
            None => rx.recv().await,
        };
        let Some(first) = next else { break };
        let mut batch = vec![first];
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
        }
        if !opened {
            opened = true;
            journal = match Journal::open(&dir) {
                Ok(journal) => Some(journal),
                Err(e) => {
                    tracing::error!(dir = %dir.display(), error = %e, "could not open the store journal; every record is written durably on its own");
                    None
                }
            };
        }
        // Automations are written on their own, each file durably (few,
        // and rarely written: no journal); the session records go on.
        let (autos, batch): (Vec<_>, Vec<_>) = batch.into_iter().partition(|(_, c)| matches!(c, StoreCmd::PutAutomation { .. } | StoreCmd::DeleteAutomation { .. }));
        if !autos.is_empty() {
            let adir = automations_dir(&dir);
            let results = super::bulk::spawn(move || write_automations(&adir, autos)).await.unwrap_or_default();
            for (op, outcome) in results {
                if let Outcome::Failed { message } = &outcome {
                    tracing::warn!(op = op.0, detail = %message, "automation store write failed");
                }
                events.input(Input::Done { op, outcome });
            }
        }
        if batch.is_empty() {
            continue;
        }
        let ops: Vec<OpId> = batch.iter().map(|(op, _)| *op).collect();
        let dir = dir.clone();
        let written = on_bulk(&mut journal, move |journal| match journal.as_mut() {
            Some(journal) => write_batch(journal, batch),
            None => write_batch_direct(&dir, batch),
        })
        .await;
        let results = match written {
            Ok(results) => results,
            Err(message) => ops.into_iter().map(|op| (op, Outcome::Failed { message: message.clone() })).collect(),
        };
        for (op, outcome) in results {
            if let Outcome::Failed { message } = &outcome {
                tracing::warn!(op = op.0, detail = %message, "store write failed");
            }
            events.input(Input::Done { op, outcome });
        }
    }
    if let Some(mut journal) = journal {
        // A graceful stop leaves the record files whole and the journal
        // empty, so offline commands read the files alone.
        if let Err(e) = super::bulk::spawn(move || journal.checkpoint()).await.unwrap_or_else(|e| Err(std::io::Error::other(e))) {
            tracing::warn!(error = %e, "store checkpoint at stop failed; the journal is replayed at the next start");
        }
    }
}

/// Runs `work` on the journal (or on `None`: no journal) on a bulk thread
/// and puts the journal back. Errors: the task failed (panicked); the
/// journal went down with it, which is logged: what it held is durable and
/// replayed at the next start, and from here on each record is written
/// durably on its own.
async fn on_bulk<R: Send + 'static>(journal: &mut Option<Journal>, work: impl FnOnce(&mut Option<Journal>) -> R + Send + 'static) -> Result<R, String> {
    let mut taken = journal.take();
    match super::bulk::spawn(move || {
        let result = work(&mut taken);
        (taken, result)
    })
    .await
    {
        Ok((back, result)) => {
            *journal = back;
            Ok(result)
        }
        Err(e) => {
            tracing::error!(error = %e, "store write task failed; the journal is closed");
            Err(format!("store write task failed: {e}"))
        }
    }
}

/// Executes `batch` through the journal: every command appended and made
/// durable with one fsync (none when every command is a put made
/// `Durability::WithNext`: those ride the next one), then written to its
/// record file. A command that
/// cannot be journaled (an unsafe key) is answered `Failed` on its own; a
/// journal that cannot be written fails every command of the batch; a
/// command whose file cannot be written is taken back out of the journal
/// and answered `Failed` (so a restart never brings back a write the client
/// was told failed). Past [`journal::CHECKPOINT_BYTES`] a checkpoint
/// follows.
fn write_batch(journal: &mut Journal, batch: Vec<(OpId, StoreCmd)>) -> Vec<(OpId, Outcome)> {
    let mut results: Vec<(OpId, Result<(), String>)> = Vec::with_capacity(batch.len());
    // Each journaled entry with the index of its command's result.
    let mut entries: Vec<(usize, Entry)> = Vec::with_capacity(batch.len());
    // One write that must be durable now makes the whole batch so.
    let mut sync = false;
    for (op, command) in batch {
        let entry = match command {
            StoreCmd::Put { record, durability } => {
                sync |= durability == Durability::Now;
                Entry::Put(record)
            }
            StoreCmd::Delete { key } => {
                sync = true;
                Entry::Delete(key)
            }
            // Taken out of the batch before it comes here.
            StoreCmd::PutAutomation { .. } | StoreCmd::DeleteAutomation { .. } => {
                results.push((op, Err("an automation write reached the session journal".to_owned())));
                continue;
            }
        };
        if file_name(&entry.key()).is_none() {
            results.push((op, Err(format!("refused unsafe store key {:?}", entry.key()))));
            continue;
        }
        entries.push((results.len(), entry));
        results.push((op, Ok(())));
    }
    if entries.is_empty() {
        return answer(results);
    }
    let start = journal.len();
    if !sync {
        // Their files wait for the fsync that makes their lines durable.
        let indices: Vec<usize> = entries.iter().map(|(i, _)| *i).collect();
        if let Err(e) = journal.append_with_next(entries.into_iter().map(|(_, e)| e).collect()) {
            let message = format!("could not write the store journal: {e}");
            for i in indices {
                results[i].1 = Err(message.clone());
            }
        }
        return answer(results);
    }
    // Encoded from where they are: a record is not copied to be journaled.
    if let Err(e) = journal.append(entries.iter().map(|(_, e)| e)) {
        let message = format!("could not write the store journal: {e}");
        for (i, _) in &entries {
            results[*i].1 = Err(message.clone());
        }
        return answer(results);
    }
    let mut kept: Vec<Entry> = Vec::with_capacity(entries.len());
    let mut refused = false;
    for (i, entry) in entries {
        match journal.apply(&entry) {
            Ok(()) => kept.push(entry),
            Err(message) => {
                results[i].1 = Err(message);
                refused = true;
            }
        }
    }
    if refused {
        if let Err(e) = journal.cut_back(start, &kept) {
            tracing::error!(error = %e, "a refused store write could not be taken back out of the journal; a restart may replay it");
        }
    }
    if journal.wants_checkpoint() {
        if let Err(e) = journal.checkpoint() {
            tracing::warn!(error = %e, "store checkpoint failed; the journal keeps every record and grows until one works");
        }
    }
    answer(results)
}

/// Each command's answer from its step's result.
fn answer(results: Vec<(OpId, Result<(), String>)>) -> Vec<(OpId, Outcome)> {
    results
        .into_iter()
        .map(|(op, result)| (op, result.map_or_else(|message| Outcome::Failed { message }, |()| Outcome::Ok)))
        .collect()
}

/// Executes `batch` with no journal: each record file written durably in
/// order, then the directory fsynced once. A command whose own step failed,
/// or every command when the directory fsync failed, is answered `Failed`.
fn write_batch_direct(dir: &Path, batch: Vec<(OpId, StoreCmd)>) -> Vec<(OpId, Outcome)> {
    let mut results: Vec<(OpId, Result<(), String>)> = Vec::with_capacity(batch.len());
    for (op, command) in batch {
        let result = match command {
            StoreCmd::Put { record, .. } => put(dir, &record),
            StoreCmd::Delete { key } => delete(dir, &key),
            StoreCmd::PutAutomation { .. } | StoreCmd::DeleteAutomation { .. } => Err("an automation write reached the session store".to_owned()),
        };
        results.push((op, result));
    }
    let dir_sync = fsutil::sync_dir(dir).map_err(|e| format!("could not sync {}: {e}", dir.display()));
    answer(results.into_iter().map(|(op, result)| (op, result.and_then(|()| dir_sync.clone()))).collect())
}

/// Where automation records live: `automations/` beside the session
/// store's folder (`<data-dir>/automations`).
pub fn automations_dir(sessions_dir: &Path) -> PathBuf {
    sessions_dir.parent().map_or_else(|| PathBuf::from("automations"), |p| p.join("automations"))
}

/// Writes automation records (each file durably: temp file fsynced, then
/// renamed) and removes others, then fsyncs the folder once.
fn write_automations(dir: &Path, batch: Vec<(OpId, StoreCmd)>) -> Vec<(OpId, Outcome)> {
    let mut results: Vec<(OpId, Result<(), String>)> = Vec::with_capacity(batch.len());
    for (op, command) in batch {
        let result = match command {
            StoreCmd::PutAutomation { record } => match record.key().and_then(|k| file_name(&k)) {
                None => Err(format!("refused unsafe automation resource {:?}", record.resource)),
                Some(name) => serde_json::to_vec_pretty(&record)
                    .map_err(|e| format!("could not encode automation {}: {e}", record.resource))
                    .and_then(|bytes| fsutil::write_replace(dir, &name, &bytes, None).map_err(|e| format!("could not write {}: {e}", dir.join(&name).display()))),
            },
            StoreCmd::DeleteAutomation { key } => delete(dir, &key),
            StoreCmd::Put { .. } | StoreCmd::Delete { .. } => Err("a session write reached the automation store".to_owned()),
        };
        results.push((op, result));
    }
    let dir_sync = fsutil::sync_dir(dir).map_err(|e| format!("could not sync {}: {e}", dir.display()));
    answer(results.into_iter().map(|(op, result)| (op, result.and_then(|()| dir_sync.clone()))).collect())
}

/// Reads every automation record under `dir` at startup, in file-name
/// order. A file that does not parse is moved aside (as a session record
/// is) and logged; a temp file a crash left is removed.
///
/// Errors: the folder cannot be listed.
pub fn load_automations(dir: &Path, wall_ms: i64) -> std::io::Result<Vec<ahpd_core::automation::AutomationRecord>> {
    let mut names: Vec<String> = fs::read_dir(dir)?.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect();
    names.sort();
    let mut records = Vec::new();
    for name in names {
        if name.starts_with('.') && name.contains(TEMP_MARKER) {
            fsutil::remove_if_stray_temp(dir, &name);
            continue;
        }
        if !name.ends_with(".json") {
            continue;
        }
        let parsed = fs::read(dir.join(&name))
            .map_err(|e| e.to_string())
            .and_then(|bytes| serde_json::from_slice::<ahpd_core::automation::AutomationRecord>(&bytes).map_err(|e| e.to_string()));
        match parsed {
            Ok(record) if record.key().as_deref() == name.strip_suffix(".json") => records.push(record),
            Ok(record) => tracing::warn!(file = %dir.join(&name).display(), resource = %record.resource, "skipped an automation whose resource does not match its file name"),
            Err(error) => quarantine(dir, &name, wall_ms, &error),
        }
    }
    Ok(records)
}

/// Writes one record outside the running store (`ahpd session import`)
/// through the same code path: [`put`] (unique temp file, fsync, rename),
/// then the directory fsync.
///
/// Errors: an unsafe key, encoding or IO, as a message naming the file.
pub fn write_record(dir: &Path, record: &SessionRecord) -> Result<(), String> {
    put(dir, record)?;
    fsutil::sync_dir(dir).map_err(|e| format!("could not sync {}: {e}", dir.display()))
}

/// Replaces `<dir>/<key>.json` with `record` atomically (not yet durable:
/// the caller fsyncs the directory).
///
/// Errors: an unsafe key, encoding or IO, as a message naming the file.
fn put(dir: &Path, record: &SessionRecord) -> Result<(), String> {
    let name = file_name(&record.key()).ok_or_else(|| format!("refused unsafe store key {:?}", record.key()))?;
    let bytes = serde_json::to_vec_pretty(record).map_err(|e| format!("could not encode record {}: {e}", record.key()))?;
    fsutil::write_replace(dir, &name, &bytes, None).map_err(|e| format!("could not write {}: {e}", dir.join(&name).display()))
}

fn delete(dir: &Path, key: &str) -> Result<(), String> {
    let name = file_name(key).ok_or_else(|| format!("refused unsafe store key {key:?}"))?;
    match fs::remove_file(dir.join(&name)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("could not remove {}: {e}", dir.join(&name).display())),
    }
}

/// Reads every record under `dir` at startup, after [`journal::recover`]
/// has brought the files up to the journal, into a `Vec` in file-name
/// order ([`load_each`] with every batch kept).
///
/// Errors: as [`load_each`].
#[cfg(test)]
pub fn load(dir: &Path, wall_ms: i64) -> std::io::Result<Vec<SessionRecord>> {
    let mut records = Vec::new();
    load_each(dir, wall_ms, |loaded| match loaded {
        Loaded::Expect(n) => records.reserve_exact(n),
        Loaded::Records(batch) => records.extend(batch),
    })?;
    Ok(records)
}

/// What [`load_each`] hands its caller, in this order: how many record
/// files there are, then the records in batches.
#[derive(Debug)]
pub enum Loaded {
    /// How many record files the listing found (an upper bound on the
    /// records to come: a file that does not parse is left out).
    Expect(usize),
    /// The next records, in file-name order.
    Records(Vec<SessionRecord>),
}

/// Names a reader thread takes at a time: small enough that the first
/// batch reaches the host at once, large enough that handing them out
/// costs nothing.
const LOAD_BATCH: usize = 512;

/// Reads every record under `dir` at startup, after [`journal::recover`]
/// has brought the files up to the journal, handing them to `each` in
/// batches in file-name order while the rest are still being read (issue
/// 21: the host is built from the first batches while the readers read the
/// later ones, so a 100k-record start costs about the longer of the two,
/// not their sum). `each` is told first how many record files there are
/// ([`Loaded::Expect`]).
///
/// The files are read and parsed on every core (batches of
/// [`LOAD_BATCH`] names handed out in order; `each` runs on the calling
/// thread, which puts them back in order). A `*.json` file that does not
/// parse is renamed to `<name>.corrupt-<unix-ms>` (never overwritten) and
/// logged; a temp file an interrupted write left is removed (one of a
/// live writer is skipped), in the same listing, so once the daemon
/// answers, no half-written file is left; a record whose key does not
/// match its file name is left alone and skipped.
///
/// Errors: the directory cannot be read at all, or the journal cannot be
/// replayed (nothing is read then: a store behind its journal is not
/// served).
pub fn load_each(dir: &Path, wall_ms: i64, mut each: impl FnMut(Loaded)) -> std::io::Result<()> {
    // What the journal acknowledged goes onto the files first (a crash may
    // have left them behind it), so the files alone are the store below.
    journal::recover(dir, wall_ms).map_err(std::io::Error::other)?;
    let mut names: Vec<String> = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "could not read a store directory entry");
                continue;
            }
        };
        match entry.file_name().into_string() {
            Ok(name) => names.push(name),
            Err(name) => tracing::warn!(name = ?name, "ignored a store file whose name is not UTF-8"),
        }
    }
    names.sort();
    // One listing serves the sweep too (100k names are not listed twice):
    // a temp file a crash left goes, one a live writer holds stays.
    names.retain(|name| {
        if name.starts_with('.') && name.contains(TEMP_MARKER) {
            fsutil::remove_if_stray_temp(dir, name);
            return false;
        }
        name.ends_with(".json")
    });
    each(Loaded::Expect(names.len()));
    let batches: Vec<&[String]> = names.chunks(LOAD_BATCH).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 8).min(batches.len().max(1));
    type Batch = Vec<(String, Result<SessionRecord, String>)>;
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::channel::<(usize, Batch)>();
        let (batches, next) = (&batches, &next);
        let readers: Vec<_> = (0..threads)
            .map(|_| {
                let tx = tx.clone();
                scope.spawn(move || loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(slice) = batches.get(i) else { return };
                    let batch = slice
                        .iter()
                        .map(|name| {
                            let parsed = fs::read(dir.join(name))
                                .map_err(|e| e.to_string())
                                .and_then(|bytes| serde_json::from_slice::<SessionRecord>(&bytes).map_err(|e| e.to_string()));
                            (name.clone(), parsed)
                        })
                        .collect();
                    if tx.send((i, batch)).is_err() {
                        return;
                    }
                })
            })
            .collect();
        drop(tx);
        // Batches come in any order; they go to `each` in name order.
        let mut early: BTreeMap<usize, Batch> = BTreeMap::new();
        let mut due = 0;
        for (i, batch) in rx {
            early.insert(i, batch);
            while let Some(batch) = early.remove(&due) {
                due += 1;
                let mut records = Vec::with_capacity(batch.len());
                for (name, parsed) in batch {
                    let stem = name.strip_suffix(".json").unwrap_or(&name);
                    match parsed {
                        Ok(record) if record.key() == stem => records.push(record),
                        Ok(record) => tracing::warn!(
                            file = %dir.join(&name).display(),
                            key = %record.key(),
                            "skipped a record whose key does not match its file name"
                        ),
                        Err(error) => quarantine(dir, &name, wall_ms, &error),
                    }
                }
                each(Loaded::Records(records));
            }
        }
        // A reader that panicked must not leave its records silently
        // unread: its panic goes on.
        for reader in readers {
            reader.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        }
    });
    Ok(())
}

/// Renames an unreadable record aside, never overwriting an earlier one
/// ([`fsutil::quarantine`]).
pub(crate) fn quarantine(dir: &Path, name: &str, wall_ms: i64, error: &str) {
    fsutil::quarantine(dir, name, wall_ms, "a session record does not parse", error);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal record, built from JSON so new defaulted fields in the
    /// core do not break this test.
    fn record(key: &str) -> SessionRecord {
        let at = "2026-01-01T00:00:00.000Z";
        serde_json::from_value(serde_json::json!({
            "format": 1, "key": key, "resource": "ahp-session:/abc", "provider": "echo",
            "title": "t", "createdAt": at, "modifiedAt": at, "isRead": false, "isArchived": false,
            "workingDirectories": [], "defaultChat": "ahp-chat:/ahp-session@abc",
            "chats": [{"resource": "ahp-chat:/ahp-session@abc", "title": "", "conversationId": key,
                       "modifiedAt": at, "status": 1}]
        }))
        .expect("a valid record")
    }

    #[test]
    fn batch_put_delete_and_load() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let mut journal = Journal::open(d).expect("journal");
        let out = write_batch(
            &mut journal,
            vec![
                (OpId(1), StoreCmd::Put { record: Box::new(record("ahp-session@abc")), durability: Durability::Now }),
                (OpId(2), StoreCmd::Put { record: Box::new(record("ahp-session@gone")), durability: Durability::Now }),
                (OpId(3), StoreCmd::Delete { key: "ahp-session@gone".to_owned() }),
                (OpId(4), StoreCmd::Delete { key: "never-there".to_owned() }),
                (OpId(5), StoreCmd::Delete { key: "../etc".to_owned() }),
                (OpId(6), StoreCmd::Put { record: Box::new(record(".hidden")), durability: Durability::Now }),
            ],
        );
        let ok: Vec<bool> = out.iter().map(|(_, o)| *o == Outcome::Ok).collect();
        assert_eq!(ok, vec![true, true, true, true, false, false]);
        assert!(d.join("ahp-session@abc.json").exists(), "on its file before any checkpoint");
        assert!(!d.join("ahp-session@gone.json").exists());
        drop(journal);
        // Without a journal: the same answers, each file durable on its own.
        let direct = write_batch_direct(
            d,
            vec![
                (OpId(7), StoreCmd::Put { record: Box::new(record("ahp-session@abc")), durability: Durability::Now }),
                (OpId(8), StoreCmd::Delete { key: "../etc".to_owned() }),
            ],
        );
        assert_eq!(direct.iter().map(|(_, o)| *o == Outcome::Ok).collect::<Vec<_>>(), vec![true, false]);
        fs::write(d.join("broken.json"), b"{not json").expect("write");
        // A temp file of a writer that is gone (no process has this pid).
        fs::write(d.join(".x.json.tmp-999999999-2"), b"partial").expect("write");
        let loaded = load(d, 42).expect("load");
        assert_eq!(loaded.len(), 1);
        assert_eq!(loaded[0].key(), "ahp-session@abc");
        assert!(d.join("broken.json.corrupt-42").exists());
        assert!(!d.join("broken.json").exists());
        assert!(!d.join(".x.json.tmp-999999999-2").exists());
        // A second corrupt file at the same millisecond is not overwritten.
        fs::write(d.join("broken.json"), b"{again").expect("write");
        load(d, 42).expect("load");
        assert!(d.join("broken.json.corrupt-42-1").exists());
    }

    #[test]
    fn the_store_is_read_as_the_journal_acknowledged_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let mut journal = Journal::open(d).expect("journal");
        write_batch(&mut journal, vec![(OpId(1), StoreCmd::Put { record: Box::new(record("ahp-session@old")), durability: Durability::Now })]);
        // The crash: a later batch reached the journal but not the files.
        journal
            .append(&[Entry::Delete("ahp-session@old".to_owned()), Entry::Put(Box::new(record("ahp-session@new")))])
            .expect("append");
        drop(journal);
        assert!(d.join("ahp-session@old.json").exists() && !d.join("ahp-session@new.json").exists());
        let loaded = load(d, 1).expect("load");
        assert_eq!(loaded.iter().map(|r| r.key().into_owned()).collect::<Vec<_>>(), ["ahp-session@new"]);
        assert!(!d.join("ahp-session@old.json").exists() && d.join("ahp-session@new.json").exists());
        assert_eq!(fs::metadata(d.join(journal::JOURNAL_NAME)).expect("journal").len(), 0);
    }

    #[test]
    fn a_turn_ends_write_rides_the_next_fsync_and_is_read_back_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let mut journal = Journal::open(d).expect("journal");
        let titled = |title: &str| {
            let mut r = record("ahp-session@abc");
            r.title = title.into();
            Box::new(r)
        };
        let out = write_batch(&mut journal, vec![(OpId(1), StoreCmd::Put { record: titled("start"), durability: Durability::Now })]);
        assert_eq!(out, vec![(OpId(1), Outcome::Ok)]);
        assert!(!journal.unsynced(), "a write made durable now is fsynced before its answer");
        let on_disk = || journal::title_on_disk(d, "ahp-session@abc").unwrap_or_default();
        let journal_len = || fs::metadata(d.join(journal::JOURNAL_NAME)).expect("journal").len();
        assert_eq!(on_disk(), "start");
        let before = journal_len();
        let out = write_batch(&mut journal, vec![(OpId(2), StoreCmd::Put { record: titled("end"), durability: Durability::WithNext })]);
        assert_eq!(out, vec![(OpId(2), Outcome::Ok)]);
        assert!(journal.unsynced(), "a batch of with-next writes is answered before any fsync");
        assert!(journal_len() > before, "its line is in the journal");
        assert_eq!(on_disk(), "start", "its file waits until its line is durable: the files never run ahead of the journal");
        // The next durable batch covers it (one fsync for both).
        let out = write_batch(
            &mut journal,
            vec![
                (OpId(3), StoreCmd::Put { record: Box::new(record("ahp-session@other")), durability: Durability::WithNext }),
                (OpId(4), StoreCmd::Put { record: Box::new(record("ahp-session@new")), durability: Durability::Now }),
            ],
        );
        assert!(out.iter().all(|(_, o)| *o == Outcome::Ok));
        assert!(!journal.unsynced(), "one write made durable now syncs the whole batch and what came before it");
        assert_eq!(on_disk(), "end", "written once the next batch's fsync made its line durable");
        assert!(d.join("ahp-session@other.json").exists() && d.join("ahp-session@new.json").exists());
        write_batch(&mut journal, vec![(OpId(5), StoreCmd::Put { record: titled("later"), durability: Durability::WithNext })]);
        assert_eq!(on_disk(), "end");
        journal.sync().expect("sync");
        assert!(!journal.unsynced());
        assert_eq!(on_disk(), "later", "the store's own sync writes it too");
        drop(journal);
        // A restart replays the journal in order: the last write wins.
        let loaded = load(d, 1).expect("load");
        let abc = loaded.iter().find(|r| r.key() == "ahp-session@abc").expect("the record");
        assert_eq!(&*abc.title, "later");
        assert_eq!(loaded.len(), 3);
    }

    #[test]
    fn records_reach_the_host_in_name_order_across_batches_read_on_every_core() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let n = LOAD_BATCH * 2 + 7;
        // Written in reverse so the directory's own order is not the answer.
        for i in (0..n).rev() {
            let key = format!("ahp-session@k{i:05}");
            fs::write(d.join(format!("{key}.json")), serde_json::to_vec(&record(&key)).expect("encode")).expect("write");
        }
        fs::write(d.join("ahp-session@k00003.json"), b"{torn").expect("write");
        let mut told = Vec::new();
        let mut keys = Vec::new();
        load_each(d, 5, |loaded| match loaded {
            Loaded::Expect(count) => told.push(count),
            Loaded::Records(batch) => {
                assert!(!told.is_empty(), "the count comes before any record");
                keys.extend(batch.into_iter().map(|r| r.key().into_owned()));
            }
        })
        .expect("load");
        assert_eq!(told, vec![n]);
        let want: Vec<String> = (0..n).filter(|i| *i != 3).map(|i| format!("ahp-session@k{i:05}")).collect();
        assert_eq!(keys, want);
        assert!(d.join("ahp-session@k00003.json.corrupt-5").exists());
    }
}
