//! Executes the core's filesystem commands (issue 48, `ahpd_core::files::fs`)
//! off the driver thread, answering each with `Input::Done { op, outcome:
//! Outcome::Fs(..) }`; resource watches report through `Input::FsChanged`.
//!
//! No rule lives here: which paths a request may reach, the limits, the
//! protocol's errors are the core's, and come in the command. What this
//! file does on its own is keep the core's check true when it acts: every
//! path the core checked is resolved again first and the command is
//! refused ([`FsError::Moved`]) when it no longer resolves to itself (a
//! link swapped in between the core's check and the act), and the last
//! name is opened without following a link (`O_NOFOLLOW`), replaced by
//! `rename` (which replaces a link, never what it points at) or removed
//! itself. A parent folder swapped for a link in the microseconds between
//! the second resolution and the act is not caught (that would need
//! `openat2(RESOLVE_BENEATH)` relative to the checked root, which the
//! commands do not name).
//!
//! Watches use the `notify` crate (inotify on Linux); their events are
//! coalesced per watch into batches ([`WATCH_WINDOW`], [`WATCH_BATCH_MAX`]).
//! Completions walk each root with the `ignore` crate (`.gitignore`,
//! `.ignore`, hidden files) and match with `nucleo-matcher`; the list of a
//! root's files is kept a little while ([`FileLists`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::OsString;
use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use ahp_types::state::ResourceChangeType;
use ahpd_core::files::attachments::{self, AttachmentReads, Unread};
use ahpd_core::files::fs::{FsCmd, FsError, FsKind, FsResult, Resolved, WriteMode};
use ahpd_core::{Input, OpId, Outcome};
use notify::event::{ModifyKind, RenameMode};
use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::events::EventSink;

/// How long a watch gathers changes after the first one of a batch before
/// it sends them. Small: a change should reach a watching client in about
/// 50 ms (p50, issue 48), and inotify itself takes a few.
pub const WATCH_WINDOW: Duration = Duration::from_millis(25);

/// Most paths in one `Input::FsChanged` batch; a batch that fills is sent
/// at once and the next one started.
pub const WATCH_BATCH_MAX: usize = 1_000;

/// Most files a completion walk lists per root; a bigger tree's completions
/// come from the first this many found (logged).
pub const COMPLETE_MAX_FILES: usize = 200_000;

/// How long a root's file list is used as it is for completions; an older
/// one (or one a watch saw change) is still used, once, while a fresh walk
/// runs beside it, so that completions stay fast on a big tree.
pub const COMPLETE_FRESH: Duration = Duration::from_secs(2);

/// A root's file list older than this is walked again before it answers.
const COMPLETE_KEEP: Duration = Duration::from_secs(60);

/// Most roots whose file lists are kept; the oldest goes first.
const COMPLETE_ROOTS_KEPT: usize = 8;

/// Most links followed while resolving one path (Linux's own limit).
const MAX_LINK_HOPS: u32 = 40;

/// Bytes moved at a time when `insert` (or `append` before the end) shifts
/// a file's tail, so a big file is not read into memory whole.
const SHIFT_CHUNK: u64 = 1 << 20;

/// Writes to one file are serialized through one of this many locks
/// (striped by path), so an `append` and an `ifMatch` check-then-write are
/// atomic against the daemon's other writers.
const WRITE_LOCKS: usize = 64;

/// The filesystem executor: runs every [`FsCmd`] on a bulk thread and keeps
/// the watches and the completion file lists.
#[derive(Clone)]
pub struct FsExec {
    events: EventSink,
    shared: Arc<Shared>,
}

/// What the executor's tasks share.
#[derive(Default)]
struct Shared {
    /// The watches by the core's id.
    watches: Mutex<HashMap<u64, WatchSlot>>,
    /// The completion file lists.
    files: Arc<FileLists>,
}

/// One watch: its watcher once in place, and whether it still is wanted
/// (an `Unwatch` clears it, so its last batch is not sent).
struct WatchSlot {
    alive: Arc<AtomicBool>,
    watcher: Option<notify::RecommendedWatcher>,
}

impl FsExec {
    /// An executor answering through `events`.
    pub fn new(events: EventSink) -> FsExec {
        FsExec { events, shared: Arc::default() }
    }

    /// Runs `command`. Everything but [`FsCmd::Unwatch`] is answered as
    /// `Input::Done { op, outcome: Outcome::Fs(..) }` through the event
    /// sink, from a bulk thread; the caller's thread touches no file.
    /// Must be called inside a tokio runtime.
    pub fn execute(&self, op: OpId, command: FsCmd) {
        match command {
            FsCmd::Unwatch { watch } => self.unwatch(watch),
            FsCmd::Watch { watch, path, recursive } => self.watch(op, watch, path, recursive),
            command => {
                let events = self.events.clone();
                let files = Arc::clone(&self.shared.files);
                tokio::spawn(async move {
                    let result = match super::bulk::spawn(move || run(&command, &files)).await {
                        Ok(result) => result,
                        Err(e) => FsResult::Failed(FsError::Other(format!("the filesystem task failed: {e}"))),
                    };
                    events.input(Input::Done { op, outcome: Outcome::Fs(result) });
                });
            }
        }
    }

    /// Starts watch `watch` on `path`: its slot is taken now (so an
    /// `Unwatch` that comes before the watcher is in place still ends it),
    /// the watcher is made on a bulk thread, and `Done` answers once it is
    /// in place.
    fn watch(&self, op: OpId, watch: u64, path: String, recursive: bool) {
        let alive = Arc::new(AtomicBool::new(true));
        let replaced = lock(&self.shared.watches).insert(watch, WatchSlot { alive: Arc::clone(&alive), watcher: None });
        if let Some(old) = replaced {
            end_watch(old);
        }
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(gather(rx, Arc::clone(&alive), self.events.clone(), watch, path.clone(), Arc::clone(&self.shared.files)));
        let events = self.events.clone();
        let shared = Arc::clone(&self.shared);
        tokio::spawn(async move {
            let started = super::bulk::spawn(move || {
                let made = start_watcher(&path, recursive, tx);
                let mut watches = lock(&shared.watches);
                let slot = watches.get_mut(&watch).filter(|slot| Arc::ptr_eq(&slot.alive, &alive));
                let unwanted = match (made, slot) {
                    (Ok(watcher), Some(slot)) => {
                        slot.watcher = Some(watcher);
                        None
                    }
                    // Unwatched (or replaced) meanwhile: this watcher is
                    // nobody's.
                    (Ok(watcher), None) => Some(watcher),
                    (Err(e), slot) => {
                        // Nothing is watched: the slot goes (unless a
                        // later watch of the same id has taken it).
                        if slot.is_some() {
                            watches.remove(&watch);
                        }
                        return Err(e);
                    }
                };
                // Dropped with the lock released: ending a watcher waits
                // for its thread, and the driver takes this lock.
                drop(watches);
                drop(unwanted);
                Ok(())
            });
            let result = match started.await {
                Ok(Ok(())) => FsResult::Done,
                Ok(Err(e)) => FsResult::Failed(e),
                Err(e) => FsResult::Failed(FsError::Other(format!("the watch task failed: {e}"))),
            };
            events.input(Input::Done { op, outcome: Outcome::Fs(result) });
        });
    }

    /// Ends watch `watch`; nothing more of it is sent. Unknown ids are
    /// ignored.
    fn unwatch(&self, watch: u64) {
        let slot = lock(&self.shared.watches).remove(&watch);
        if let Some(slot) = slot {
            end_watch(slot);
        }
    }
}

/// Marks a watch ended and drops its watcher on a bulk thread (dropping one
/// stops and joins notify's thread).
fn end_watch(slot: WatchSlot) {
    slot.alive.store(false, Ordering::Release);
    if let Some(watcher) = slot.watcher {
        drop(super::bulk::spawn(move || drop(watcher)));
    }
}

/// A mutex's guard, also when another thread panicked holding it (what it
/// guards stays consistent: every change is one insert or remove).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs one command other than a watch to its answer (blocking; call it off
/// the driver thread). Completions use and fill `files`.
pub fn run(command: &FsCmd, files: &Arc<FileLists>) -> FsResult {
    let done = |r: Result<(), FsError>| r.map(|()| FsResult::Done);
    let result = match command {
        FsCmd::Resolve { paths, follow } => resolve_all(paths, *follow).map(FsResult::Resolved),
        FsCmd::Read { path, max_bytes } => read(path, *max_bytes).map(|(data, etag)| FsResult::Read { data, etag }),
        FsCmd::Write { path, data, mode, position, create_only, if_match } => {
            done(write(path, data, *mode, *position, *create_only, if_match.as_deref()))
        }
        FsCmd::List { path, max_entries } => list(path, *max_entries).map(FsResult::Listed),
        FsCmd::Mkdir { path } => done(mkdir(path)),
        FsCmd::Copy { from, to, fail_if_exists } => done(copy(from, to, *fail_if_exists)),
        FsCmd::Move { from, to, fail_if_exists } => done(move_path(from, to, *fail_if_exists)),
        FsCmd::Delete { path, recursive } => done(delete(path, *recursive)),
        FsCmd::Complete { roots, query, limit } => complete(roots, query, *limit, files).map(FsResult::Completed),
        // Watches need the executor's state: `FsExec::execute` runs them.
        FsCmd::Watch { .. } | FsCmd::Unwatch { .. } => Err(FsError::Other("a watch is not run here".to_owned())),
    };
    result.unwrap_or_else(FsResult::Failed)
}

// ---------------------------------------------------------------------------
// Paths

/// Refuses a path that is not absolute or holds a NUL.
fn check_path(path: &str) -> Result<(), FsError> {
    if !path.starts_with('/') || path.contains('\0') {
        return Err(FsError::Invalid);
    }
    Ok(())
}

/// The names of a path (or a link's target), empty ones dropped.
fn names(bytes: &[u8]) -> impl DoubleEndedIterator<Item = OsString> + '_ {
    bytes.split(|b| *b == b'/').filter(|n| !n.is_empty()).map(|n| OsString::from_vec(n.to_vec()))
}

/// `path`'s real path, and whether it exists: links followed (the last
/// name's only with `follow_last`), `.` and `..` resolved, and the missing
/// names past the deepest existing ancestor appended as they are (a `.` or
/// `..` among them is [`FsError::Invalid`]). Resolved name by name with
/// `lstat` and `readlink`, so a dangling link resolves to where it points.
fn real_path(path: &str, follow_last: bool) -> Result<(PathBuf, bool), FsError> {
    check_path(path)?;
    let mut pending: VecDeque<OsString> = names(path.as_bytes()).collect();
    let mut real = PathBuf::from("/");
    let mut missing = false;
    let mut hops = 0u32;
    while let Some(name) = pending.pop_front() {
        if name == "." || name == ".." {
            // Below a missing name, `..` has nothing to resolve against.
            if missing {
                return Err(FsError::Invalid);
            }
            if name == ".." {
                real.pop();
            }
            continue;
        }
        if missing {
            real.push(name);
            continue;
        }
        let candidate = real.join(&name);
        let last = pending.is_empty();
        match fs::symlink_metadata(&candidate) {
            Ok(meta) if meta.file_type().is_symlink() && (follow_last || !last) => {
                hops += 1;
                if hops > MAX_LINK_HOPS {
                    return Err(FsError::Other("too many levels of symbolic links".to_owned()));
                }
                let target = fs::read_link(&candidate).map_err(map_io)?;
                if target.is_absolute() {
                    real = PathBuf::from("/");
                }
                for n in names(target.as_os_str().as_bytes()).rev() {
                    pending.push_front(n);
                }
            }
            Ok(_) => real = candidate,
            Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory) => {
                missing = true;
                real = candidate;
            }
            Err(e) => return Err(map_io(e)),
        }
    }
    Ok((real, !missing))
}

/// `path` as a string, or [`FsError::Invalid`] when it is not UTF-8 (the
/// interface's paths are strings).
fn path_string(path: PathBuf) -> Result<String, FsError> {
    path.into_os_string().into_string().map_err(|_| FsError::Invalid)
}

/// Resolves the command's paths: the first with `follow` for its last name,
/// the rest always followed. One path that cannot be resolved fails all.
fn resolve_all(paths: &[String], follow: bool) -> Result<Vec<Resolved>, FsError> {
    paths.iter().enumerate().map(|(i, p)| resolve_one(p, follow || i > 0)).collect()
}

/// One path as [`FsCmd::Resolve`] answers it.
fn resolve_one(path: &str, follow_last: bool) -> Result<Resolved, FsError> {
    let (real, exists) = real_path(path, follow_last)?;
    // The path's own entry (a link with `follow_last: false`): never
    // followed, since `real` has no link left in it that should be.
    let meta = if exists {
        match fs::symlink_metadata(&real) {
            Ok(meta) => Some(meta),
            // Gone since it was resolved: answered as missing.
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(map_io(e)),
        }
    } else {
        None
    };
    let kind = meta.as_ref().map(kind_of);
    Ok(Resolved {
        path: path.to_owned(),
        real: path_string(real)?,
        kind,
        size: meta.as_ref().filter(|m| m.is_file()).map(Metadata::len),
        mtime_ms: meta.as_ref().map(|m| m.mtime().saturating_mul(1000).saturating_add(m.mtime_nsec() / 1_000_000)),
        ctime_ms: meta.as_ref().map(created_ms),
        etag: meta.as_ref().filter(|m| m.is_file()).map(etag),
    })
}

/// When it was created (the birth time where the filesystem keeps one),
/// else when its status last changed; ms since the Unix epoch.
fn created_ms(meta: &Metadata) -> i64 {
    let birth = meta.created().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).and_then(|d| i64::try_from(d.as_millis()).ok());
    birth.unwrap_or_else(|| meta.ctime().saturating_mul(1000).saturating_add(meta.ctime_nsec() / 1_000_000))
}

fn kind_of(meta: &Metadata) -> FsKind {
    let t = meta.file_type();
    if t.is_symlink() {
        FsKind::Symlink
    } else if t.is_dir() {
        FsKind::Directory
    } else if t.is_file() {
        FsKind::File
    } else {
        FsKind::Other
    }
}

/// A file's version token: its size, mtime in nanoseconds and inode, in
/// hex. A write through a new file (rename) changes the inode even when
/// the size and the clock's reading do not.
pub fn etag(meta: &Metadata) -> String {
    let mtime_ns = i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec());
    format!("{:x}-{:x}-{:x}", meta.size(), mtime_ns, meta.ino())
}

/// Refuses to act on `path` unless it still resolves to itself (the last
/// name followed with `follow_last`): [`FsError::Moved`] when a link now
/// leads elsewhere.
fn recheck(path: &str, follow_last: bool) -> Result<(), FsError> {
    let (real, _) = real_path(path, follow_last)?;
    if real.as_path() != Path::new(path) {
        return Err(FsError::Moved);
    }
    Ok(())
}

/// The operating system's error as an [`FsError`]; the words are the
/// system's (they never carry a file's contents).
fn map_io(e: io::Error) -> FsError {
    match e.kind() {
        io::ErrorKind::NotFound => FsError::NotFound,
        io::ErrorKind::AlreadyExists => FsError::AlreadyExists,
        io::ErrorKind::NotADirectory => FsError::NotADirectory,
        io::ErrorKind::IsADirectory => FsError::IsADirectory,
        io::ErrorKind::DirectoryNotEmpty => FsError::NotEmpty,
        _ => FsError::Other(e.to_string()),
    }
}

/// [`map_io`] for opening a checked path without following its last name:
/// `ELOOP` there means a link took the checked file's place.
fn map_open(e: io::Error) -> FsError {
    if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
        return FsError::Moved;
    }
    map_io(e)
}

/// Open flags for a checked path: never follow a link in its last name, and
/// never wait on a fifo.
fn no_follow() -> i32 {
    (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32
}

// ---------------------------------------------------------------------------
// Reading and writing

/// The whole file and its etag (taken before the read, so a change during
/// it makes a later `ifMatch` conflict rather than pass).
fn read(path: &str, max_bytes: u64) -> Result<(Vec<u8>, String), FsError> {
    recheck(path, true)?;
    let file = OpenOptions::new().read(true).custom_flags(no_follow()).open(path).map_err(map_open)?;
    let meta = file.metadata().map_err(map_io)?;
    if meta.is_dir() {
        return Err(FsError::IsADirectory);
    }
    if !meta.is_file() {
        return Err(FsError::Other("not a regular file".to_owned()));
    }
    if meta.len() > max_bytes {
        return Err(FsError::TooLarge);
    }
    let mut data = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // One byte past the bound shows a file that grew past it meanwhile.
    file.take(max_bytes.saturating_add(1)).read_to_end(&mut data).map_err(map_io)?;
    if data.len() as u64 > max_bytes {
        return Err(FsError::TooLarge);
    }
    Ok((data, etag(&meta)))
}

/// One attached file as read for an agent (`ahpd_core::files::attachments`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadAttachment {
    /// The attachment's label.
    pub label: String,
    /// The URI the client sent.
    pub uri: String,
    /// What was read, or why nothing was.
    pub body: AttachmentBody,
}

/// The content of an attached file, or why it was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttachmentBody {
    /// UTF-8 text, with its content type (the client's, else `text/plain`).
    Text {
        /// The file's text.
        text: String,
        /// Its content type.
        mime: String,
    },
    /// Anything else, with its content type (the client's, else
    /// `application/octet-stream`).
    Blob {
        /// The file's bytes.
        data: Vec<u8>,
        /// Its content type.
        mime: String,
    },
    /// Not read ([`Unread::words`] say why).
    Unread(Unread),
}

/// Reads a turn's attached files for its agent (module docs of
/// `ahpd_core::files::attachments`): the session's folders and each file
/// resolved (links followed, `..` resolved), a file admitted only when its
/// real path is inside a real folder (`attachments::admit`, the core's
/// rule), then read as [`read`] reads (`O_NOFOLLOW`, refused when it no
/// longer resolves to itself, bounded by `reads.max_bytes`). Blocking: run
/// it off the async threads.
pub fn read_attachments(reads: &AttachmentReads) -> Vec<ReadAttachment> {
    let roots: Vec<String> = reads
        .roots
        .iter()
        .filter_map(|r| resolve_one(r, true).ok())
        .filter(|r| r.kind == Some(FsKind::Directory))
        .map(|r| r.real)
        .collect();
    reads
        .files
        .iter()
        .map(|f| {
            // What the core refused is not read (its rule: malformed, or
            // past the bound of files read).
            let body = match (&f.path, f.refused) {
                (Some(path), None) => read_attachment(path, &roots, reads.max_bytes, f.content_type.as_deref()),
                (_, why) => AttachmentBody::Unread(why.unwrap_or(Unread::Malformed)),
            };
            ReadAttachment { label: f.label.clone(), uri: f.uri.clone(), body }
        })
        .collect()
}

/// One attached file ([`read_attachments`]).
fn read_attachment(path: &str, roots: &[String], max_bytes: u64, content_type: Option<&str>) -> AttachmentBody {
    let resolved = match resolve_one(path, true) {
        Ok(r) => r,
        Err(FsError::NotFound | FsError::Invalid) => return AttachmentBody::Unread(Unread::Unavailable),
        Err(_) => return AttachmentBody::Unread(Unread::Failed),
    };
    // Outside and missing read the same (the agent learns nothing of what
    // lies outside its folders).
    if resolved.kind.is_none() || !attachments::admit(&resolved.real, roots.iter().map(String::as_str)) {
        return AttachmentBody::Unread(Unread::Unavailable);
    }
    if resolved.kind != Some(FsKind::File) {
        return AttachmentBody::Unread(Unread::NotAFile);
    }
    match read(&resolved.real, max_bytes) {
        Ok((data, _)) => match String::from_utf8(data) {
            Ok(text) => AttachmentBody::Text { text, mime: content_type.unwrap_or("text/plain").to_owned() },
            Err(e) => AttachmentBody::Blob { data: e.into_bytes(), mime: content_type.unwrap_or("application/octet-stream").to_owned() },
        },
        Err(FsError::TooLarge) => AttachmentBody::Unread(Unread::TooLarge),
        Err(FsError::IsADirectory) => AttachmentBody::Unread(Unread::NotAFile),
        Err(FsError::NotFound | FsError::Moved) => AttachmentBody::Unread(Unread::Unavailable),
        Err(_) => AttachmentBody::Unread(Unread::Failed),
    }
}

/// The lock serializing this daemon's writes to `path`.
fn write_lock(path: &str) -> &'static Mutex<()> {
    static LOCKS: OnceLock<Vec<Mutex<()>>> = OnceLock::new();
    let locks = LOCKS.get_or_init(|| (0..WRITE_LOCKS).map(|_| Mutex::new(())).collect());
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::hash::Hash::hash(path, &mut h);
    let i = usize::try_from(std::hash::Hasher::finish(&h) % WRITE_LOCKS as u64).unwrap_or(0);
    &locks[i]
}

/// [`FsCmd::Write`]: see its doc. A whole overwrite (`truncate` at 0, or a
/// new file) goes through a new file renamed into place, so a reader sees
/// the old bytes or the new, never half; the other modes change the file
/// in place.
fn write(path: &str, data: &[u8], mode: WriteMode, position: u64, create_only: bool, if_match: Option<&str>) -> Result<(), FsError> {
    recheck(path, true)?;
    let _serialized = lock(write_lock(path));
    let current = match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => return Err(FsError::Moved),
        Ok(meta) if meta.is_dir() => return Err(FsError::IsADirectory),
        Ok(meta) => Some(meta),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(map_io(e)),
    };
    if create_only && current.is_some() {
        return Err(FsError::AlreadyExists);
    }
    if let Some(tag) = if_match {
        match &current {
            Some(meta) if etag(meta) == tag => {}
            _ => return Err(FsError::Conflict),
        }
    }
    let Some(meta) = current else {
        // A new file is `data` whatever the mode: there is nothing before
        // or after it.
        return replace_whole(path, data, None, create_only);
    };
    let len = meta.len();
    match mode {
        WriteMode::Truncate if position == 0 => replace_whole(path, data, Some(&meta), false),
        WriteMode::Truncate => {
            let file = open_existing(path)?;
            // `existing[0..position] + data`; a position past the end is
            // the end (no hole of zeros).
            let at = position.min(len);
            file.set_len(at).map_err(map_io)?;
            file.write_all_at(data, at).map_err(map_io)
        }
        WriteMode::Append if position == 0 => {
            // O_APPEND: the kernel places each write at the end, so other
            // programs' appends are not clobbered either.
            let mut file = OpenOptions::new().append(true).custom_flags(no_follow()).open(path).map_err(map_open)?;
            file.write_all(data).map_err(map_io)
        }
        // `position` bytes back from the end; more than the file is its start.
        WriteMode::Append => splice(path, len.saturating_sub(position), data),
        WriteMode::Insert => splice(path, position.min(len), data),
    }
}

/// Opens an existing regular file for writing, its last name not followed.
fn open_existing(path: &str) -> Result<File, FsError> {
    let file = OpenOptions::new().read(true).write(true).custom_flags(no_follow()).open(path).map_err(map_open)?;
    let meta = file.metadata().map_err(map_io)?;
    if !meta.is_file() {
        return Err(FsError::Other("not a regular file".to_owned()));
    }
    Ok(file)
}

/// Inserts `data` at byte `at` of the file, shifting what follows by
/// chunks from the end (memory stays one chunk whatever the file's size).
fn splice(path: &str, at: u64, data: &[u8]) -> Result<(), FsError> {
    let file = open_existing(path)?;
    let len = file.metadata().map_err(map_io)?.len();
    let at = at.min(len);
    let shift = data.len() as u64;
    if shift == 0 {
        return Ok(());
    }
    let mut buf = vec![0u8; usize::try_from(SHIFT_CHUNK.min(len - at)).unwrap_or(0)];
    let mut end = len;
    while end > at {
        let n = SHIFT_CHUNK.min(end - at);
        let start = end - n;
        let chunk = &mut buf[..usize::try_from(n).unwrap_or(0)];
        file.read_exact_at(chunk, start).map_err(map_io)?;
        file.write_all_at(chunk, start + shift).map_err(map_io)?;
        end = start;
    }
    file.write_all_at(data, at).map_err(map_io)
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A temporary name beside `path` (same folder, so a rename is atomic),
/// marked as the daemon's other temporary files are.
fn temp_beside(path: &Path) -> Result<PathBuf, FsError> {
    let parent = path.parent().ok_or(FsError::IsADirectory)?;
    let name = path.file_name().ok_or(FsError::Invalid)?;
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut temp = OsString::from(".");
    temp.push(name);
    temp.push(format!("{}{}-{n}", super::fsutil::TEMP_MARKER, std::process::id()));
    Ok(parent.join(temp))
}

/// Writes `data` to a new file beside `path` and puts it in `path`'s place:
/// with `no_replace` only if nothing is there ([`FsError::AlreadyExists`]
/// otherwise, checked atomically by `link`), else replacing what is (a
/// link is replaced, not followed). An existing file's mode is kept. A
/// missing parent folder is [`FsError::NotFound`].
fn replace_whole(path: &str, data: &[u8], existing: Option<&Metadata>, no_replace: bool) -> Result<(), FsError> {
    let target = Path::new(path);
    let temp = temp_beside(target)?;
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    let mode = existing.map(|m| m.permissions().mode() & 0o7777);
    if let Some(mode) = mode {
        options.mode(mode);
    }
    let mut file = options.open(&temp).map_err(map_io)?;
    let written = (|| {
        file.write_all(data)?;
        if let Some(mode) = mode {
            // `mode` above was narrowed by the umask; the file keeps its own.
            file.set_permissions(fs::Permissions::from_mode(mode))?;
        }
        // On disk before it takes the old file's place: a crash leaves
        // the old bytes or the new, not an empty file.
        file.sync_data()
    })();
    drop(file);
    let placed = written.map_err(map_io).and_then(|()| {
        if !no_replace {
            return fs::rename(&temp, target).map_err(map_io);
        }
        match fs::hard_link(&temp, target) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(FsError::AlreadyExists),
            // A filesystem without hard links: checked, then renamed
            // (not atomic against another program creating it).
            Err(_) => match fs::symlink_metadata(target) {
                Ok(_) => Err(FsError::AlreadyExists),
                Err(_) => fs::rename(&temp, target).map_err(map_io),
            },
        }
    });
    // Gone already after a rename; after a link (or a failure) it is the
    // spare name.
    let _ = fs::remove_file(&temp);
    placed
}

// ---------------------------------------------------------------------------
// Folders, copies, moves, deletes

/// [`FsCmd::List`]: the names (UTF-8 ones; the interface's names are
/// strings) and kinds, links as links, sorted by name.
fn list(path: &str, max_entries: usize) -> Result<Vec<(String, FsKind)>, FsError> {
    recheck(path, true)?;
    let dir_flags = (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::DIRECTORY).bits() as i32;
    let dir = OpenOptions::new().read(true).custom_flags(dir_flags).open(path).map_err(map_open)?;
    let entries = rustix::fs::Dir::read_from(&dir).map_err(|e| map_io(e.into()))?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| map_io(e.into()))?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let Ok(name) = std::str::from_utf8(name) else { continue };
        let kind = match entry.file_type() {
            rustix::fs::FileType::RegularFile => FsKind::File,
            rustix::fs::FileType::Directory => FsKind::Directory,
            rustix::fs::FileType::Symlink => FsKind::Symlink,
            // Some filesystems do not say in the entry: ask the entry itself.
            rustix::fs::FileType::Unknown => match fs::symlink_metadata(Path::new(path).join(name)) {
                Ok(meta) => kind_of(&meta),
                Err(_) => continue,
            },
            _ => FsKind::Other,
        };
        if out.len() == max_entries {
            return Err(FsError::TooLarge);
        }
        out.push((name.to_owned(), kind));
    }
    out.sort_unstable();
    Ok(out)
}

/// [`FsCmd::Mkdir`]: the folder and its missing parents.
fn mkdir(path: &str) -> Result<(), FsError> {
    recheck(path, true)?;
    fs::DirBuilder::new().recursive(true).mode(0o777).create(path).map_err(map_io)
}

/// Removes what is at `path` (a link itself, a file, a whole folder).
fn remove_any(path: &Path, meta: &Metadata) -> Result<(), FsError> {
    if meta.is_dir() {
        fs::remove_dir_all(path).map_err(map_io)
    } else {
        fs::remove_file(path).map_err(map_io)
    }
}

/// `to` inside (or equal to) `from`: a tree cannot be copied or moved into
/// itself.
fn inside(to: &str, from: &str) -> bool {
    Path::new(to).starts_with(from)
}

/// [`FsCmd::Copy`]: a file or a tree, links copied as links. An existing
/// file destination is replaced through a rename (never half there); an
/// existing folder destination is removed first.
fn copy(from: &str, to: &str, fail_if_exists: bool) -> Result<(), FsError> {
    recheck(from, true)?;
    recheck(to, false)?;
    if inside(to, from) {
        return Err(FsError::Invalid);
    }
    let source = fs::symlink_metadata(from).map_err(map_io)?;
    let dest = match fs::symlink_metadata(to) {
        Ok(_) if fail_if_exists => return Err(FsError::AlreadyExists),
        Ok(meta) => Some(meta),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(map_io(e)),
    };
    match dest {
        Some(dest) if source.is_file() && !dest.is_dir() => {
            let temp = temp_beside(Path::new(to))?;
            let copied = copy_tree(Path::new(from), &temp).and_then(|()| fs::rename(&temp, to).map_err(map_io));
            if copied.is_err() {
                let _ = fs::remove_file(&temp);
            }
            copied
        }
        Some(dest) => {
            remove_any(Path::new(to), &dest)?;
            copy_tree(Path::new(from), Path::new(to))
        }
        None => copy_tree(Path::new(from), Path::new(to)),
    }
}

/// Copies `from` (a file, a link or a folder and everything in it) to `to`,
/// which must not exist. Links are copied as links; modes are kept;
/// sockets, devices and fifos are refused.
fn copy_tree(from: &Path, to: &Path) -> Result<(), FsError> {
    let mut stack = vec![(from.to_path_buf(), to.to_path_buf())];
    // Folders get their modes last, so a read-only one can be filled.
    let mut modes = Vec::new();
    while let Some((src, dst)) = stack.pop() {
        let meta = fs::symlink_metadata(&src).map_err(map_io)?;
        let t = meta.file_type();
        if t.is_symlink() {
            let target = fs::read_link(&src).map_err(map_io)?;
            std::os::unix::fs::symlink(target, &dst).map_err(map_io)?;
        } else if t.is_dir() {
            fs::create_dir(&dst).map_err(map_io)?;
            modes.push((dst.clone(), meta.permissions().mode() & 0o7777));
            for entry in fs::read_dir(&src).map_err(map_io)? {
                let entry = entry.map_err(map_io)?;
                stack.push((entry.path(), dst.join(entry.file_name())));
            }
        } else if t.is_file() {
            let mut input = OpenOptions::new().read(true).custom_flags(no_follow()).open(&src).map_err(map_open)?;
            let mut output = OpenOptions::new().write(true).create_new(true).open(&dst).map_err(map_io)?;
            // File to file: the kernel copies (copy_file_range).
            io::copy(&mut input, &mut output).map_err(map_io)?;
            output.set_permissions(fs::Permissions::from_mode(meta.permissions().mode() & 0o7777)).map_err(map_io)?;
        } else {
            return Err(FsError::Other("a socket, device or fifo cannot be copied".to_owned()));
        }
    }
    for (dir, mode) in modes.into_iter().rev() {
        fs::set_permissions(&dir, fs::Permissions::from_mode(mode)).map_err(map_io)?;
    }
    Ok(())
}

/// Whether `e` is `EXDEV` (a rename across filesystems).
fn cross_device(e: &io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::XDEV.raw_os_error())
}

/// [`FsCmd::Move`]: a rename of the path itself (a link moves as a link);
/// across filesystems a copy and a delete. A destination the rename cannot
/// replace (a folder with things in it, a file where a folder goes) is
/// removed first unless `fail_if_exists`.
fn move_path(from: &str, to: &str, fail_if_exists: bool) -> Result<(), FsError> {
    recheck(from, false)?;
    recheck(to, false)?;
    let source = fs::symlink_metadata(from).map_err(map_io)?;
    if Path::new(from) == Path::new(to) {
        return Ok(());
    }
    if inside(to, from) {
        return Err(FsError::Invalid);
    }
    let dest = match fs::symlink_metadata(to) {
        Ok(_) if fail_if_exists => return Err(FsError::AlreadyExists),
        Ok(meta) => Some(meta),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(map_io(e)),
    };
    let across = |dest: Option<&Metadata>| -> Result<(), FsError> {
        if let Some(dest) = dest {
            remove_any(Path::new(to), dest)?;
        }
        copy_tree(Path::new(from), Path::new(to))?;
        remove_any(Path::new(from), &source)
    };
    match fs::rename(from, to) {
        Ok(()) => Ok(()),
        Err(e) if cross_device(&e) => across(dest.as_ref()),
        Err(e) => match &dest {
            Some(d)
                if matches!(
                    e.kind(),
                    io::ErrorKind::DirectoryNotEmpty | io::ErrorKind::IsADirectory | io::ErrorKind::NotADirectory | io::ErrorKind::AlreadyExists
                ) =>
            {
                remove_any(Path::new(to), d)?;
                match fs::rename(from, to) {
                    Ok(()) => Ok(()),
                    Err(e) if cross_device(&e) => across(None),
                    Err(e) => Err(map_io(e)),
                }
            }
            _ => Err(map_io(e)),
        },
    }
}

/// [`FsCmd::Delete`]: a file, a link itself, or a folder (with what is in
/// it only when `recursive`).
fn delete(path: &str, recursive: bool) -> Result<(), FsError> {
    recheck(path, false)?;
    if Path::new(path).parent().is_none() {
        // The root folder is never deleted, whatever the core decided.
        return Err(FsError::Invalid);
    }
    let meta = fs::symlink_metadata(path).map_err(map_io)?;
    if meta.is_dir() {
        if recursive {
            // std's remove_dir_all never follows a link inside the tree.
            fs::remove_dir_all(path).map_err(map_io)
        } else {
            fs::remove_dir(path).map_err(map_io)
        }
    } else {
        fs::remove_file(path).map_err(map_io)
    }
}

// ---------------------------------------------------------------------------
// Watches

/// Makes the watcher for `path`; its events go to `tx`.
fn start_watcher(path: &str, recursive: bool, tx: mpsc::UnboundedSender<notify::Result<notify::Event>>) -> Result<notify::RecommendedWatcher, FsError> {
    recheck(path, true)?;
    let mut watcher = notify::recommended_watcher(move |event| {
        let _ = tx.send(event);
    })
    .map_err(map_notify)?;
    let mode = if recursive { RecursiveMode::Recursive } else { RecursiveMode::NonRecursive };
    watcher.watch(Path::new(path), mode).map_err(map_notify)?;
    Ok(watcher)
}

fn map_notify(e: notify::Error) -> FsError {
    match e.kind {
        notify::ErrorKind::Io(io) => map_io(io),
        notify::ErrorKind::PathNotFound => FsError::NotFound,
        notify::ErrorKind::MaxFilesWatch => FsError::Other("the system's limit on watches is reached (fs.inotify.max_user_watches)".to_owned()),
        notify::ErrorKind::Generic(words) => FsError::Other(words),
        other => FsError::Other(format!("{other:?}")),
    }
}

/// One batch of changes being gathered: each path once, in the order first
/// seen, with its kind of change.
#[derive(Default)]
struct Batch {
    changes: Vec<(String, ResourceChangeType)>,
    at: HashMap<String, usize>,
}

impl Batch {
    /// Notes `kind` for `path`. A path seen again keeps its last kind,
    /// except that one added in this batch and then changed stays added
    /// (what the client has not seen yet is new to it).
    fn note(&mut self, path: &Path, kind: ResourceChangeType) {
        let Some(path) = path.to_str() else { return };
        match self.at.get(path) {
            Some(&i) => {
                let last = &mut self.changes[i].1;
                if !(*last == ResourceChangeType::Added && kind == ResourceChangeType::Updated) {
                    *last = kind;
                }
            }
            None => {
                self.at.insert(path.to_owned(), self.changes.len());
                self.changes.push((path.to_owned(), kind));
            }
        }
    }

    /// Notes what one of notify's events says. An event that lost track
    /// (the kernel's queue overflowed) reports the watched path updated.
    fn add(&mut self, event: notify::Result<notify::Event>, root: &str) {
        let event = match event {
            Ok(event) => event,
            Err(e) => {
                tracing::debug!(error = %e, "a watch's error");
                return;
            }
        };
        if event.need_rescan() {
            self.note(Path::new(root), ResourceChangeType::Updated);
        }
        use ResourceChangeType::{Added, Deleted, Updated};
        match event.kind {
            EventKind::Create(_) => event.paths.iter().for_each(|p| self.note(p, Added)),
            EventKind::Remove(_) => event.paths.iter().for_each(|p| self.note(p, Deleted)),
            EventKind::Modify(ModifyKind::Name(RenameMode::From)) => event.paths.iter().for_each(|p| self.note(p, Deleted)),
            EventKind::Modify(ModifyKind::Name(RenameMode::To)) => event.paths.iter().for_each(|p| self.note(p, Added)),
            EventKind::Modify(ModifyKind::Name(RenameMode::Both)) => {
                if let [from, to, ..] = event.paths.as_slice() {
                    self.note(from, Deleted);
                    self.note(to, Added);
                }
            }
            // A rename notify could not pair: what is there now says which.
            EventKind::Modify(ModifyKind::Name(_)) => {
                for p in &event.paths {
                    self.note(p, if fs::symlink_metadata(p).is_ok() { Added } else { Deleted });
                }
            }
            EventKind::Modify(_) | EventKind::Any => event.paths.iter().for_each(|p| self.note(p, Updated)),
            // Reading a file (and closing it after writing, which the
            // write's own modify event already reported) changes nothing.
            EventKind::Access(_) | EventKind::Other => {}
        }
    }
}

/// Gathers one watch's events into batches and sends each as
/// `Input::FsChanged`: a batch starts with the first event, takes what
/// comes within [`WATCH_WINDOW`] (or until [`WATCH_BATCH_MAX`] paths), and
/// is sent unless empty or the watch has ended. Ends when the watcher
/// (the sending side) is gone.
async fn gather(
    mut rx: mpsc::UnboundedReceiver<notify::Result<notify::Event>>,
    alive: Arc<AtomicBool>,
    events: EventSink,
    watch: u64,
    root: String,
    files: Arc<FileLists>,
) {
    let mut open = true;
    while open {
        let Some(first) = rx.recv().await else { return };
        let mut batch = Batch::default();
        batch.add(first, &root);
        let deadline = tokio::time::Instant::now() + WATCH_WINDOW;
        while batch.changes.len() < WATCH_BATCH_MAX {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(event)) => batch.add(event, &root),
                Ok(None) => {
                    open = false;
                    break;
                }
                Err(_) => break,
            }
        }
        if batch.changes.is_empty() {
            continue;
        }
        if !alive.load(Ordering::Acquire) {
            return;
        }
        files.changed(batch.changes.iter().filter(|(_, k)| *k != ResourceChangeType::Updated).map(|(p, _)| p.as_str()));
        // One event may have added two paths past the cap.
        let mut changes = batch.changes;
        while changes.len() > WATCH_BATCH_MAX {
            let rest = changes.split_off(WATCH_BATCH_MAX);
            events.input(Input::FsChanged { watch, changes });
            changes = rest;
        }
        events.input(Input::FsChanged { watch, changes });
    }
}

// ---------------------------------------------------------------------------
// Completions

/// The files of the roots completions were asked over, kept a little while
/// ([`COMPLETE_FRESH`]) so that each keystroke does not walk the tree again.
#[derive(Default)]
pub struct FileLists {
    lists: Mutex<HashMap<String, Arc<Listing>>>,
    /// Roots being walked again in the background.
    refreshing: Mutex<HashSet<String>>,
}

/// One root's files.
struct Listing {
    /// Paths relative to the root, sorted.
    files: Vec<String>,
    walked: Instant,
    /// A watch saw a file added or deleted under the root since.
    stale: AtomicBool,
}

impl FileLists {
    /// `root`'s files: the kept list while fresh; an older (or stale) one,
    /// while a new walk runs in the background; else a walk now.
    fn get(self: &Arc<Self>, root: &str) -> Arc<Listing> {
        let kept = lock(&self.lists).get(root).cloned();
        if let Some(listing) = kept {
            let age = listing.walked.elapsed();
            if age < COMPLETE_FRESH && !listing.stale.load(Ordering::Relaxed) {
                return listing;
            }
            if age < COMPLETE_KEEP {
                self.refresh(root);
                return listing;
            }
        }
        let listing = Arc::new(walk(root));
        self.keep(root, Arc::clone(&listing));
        listing
    }

    fn keep(&self, root: &str, listing: Arc<Listing>) {
        let mut lists = lock(&self.lists);
        lists.insert(root.to_owned(), listing);
        while lists.len() > COMPLETE_ROOTS_KEPT {
            let oldest = lists.iter().min_by_key(|(_, l)| l.walked).map(|(r, _)| r.clone());
            match oldest {
                Some(r) => lists.remove(&r),
                None => break,
            };
        }
    }

    /// Walks `root` again on a bulk thread, once at a time per root.
    fn refresh(self: &Arc<Self>, root: &str) {
        if !lock(&self.refreshing).insert(root.to_owned()) {
            return;
        }
        let lists = Arc::clone(self);
        let root = root.to_owned();
        drop(super::bulk::spawn(move || {
            let listing = Arc::new(walk(&root));
            lists.keep(&root, listing);
            lock(&lists.refreshing).remove(&root);
        }));
    }

    /// A watch saw `paths` added or deleted: the lists of roots holding any
    /// of them are walked again on their next use.
    fn changed<'a>(&self, paths: impl Iterator<Item = &'a str>) {
        let lists = lock(&self.lists);
        if lists.is_empty() {
            return;
        }
        for path in paths {
            for (root, listing) in lists.iter() {
                if Path::new(path).starts_with(root) {
                    listing.stale.store(true, Ordering::Relaxed);
                }
            }
        }
    }
}

/// The files under `root`, relative to it: `.gitignore` (also outside a
/// git repository), `.ignore` and hidden files honoured, links not
/// followed (nor listed), at most [`COMPLETE_MAX_FILES`].
fn walk(root: &str) -> Listing {
    let started = Instant::now();
    let count = AtomicUsize::new(0);
    let capped = AtomicBool::new(false);
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let base = Path::new(root);
    ignore::WalkBuilder::new(root)
        .hidden(true)
        .ignore(true)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(true)
        .parents(true)
        .require_git(false)
        .follow_links(false)
        .threads(2)
        .build_parallel()
        .run(|| {
            let tx = tx.clone();
            let (count, capped) = (&count, &capped);
            Box::new(move |entry| {
                let Ok(entry) = entry else { return ignore::WalkState::Continue };
                if !entry.file_type().is_some_and(|t| t.is_file()) {
                    return ignore::WalkState::Continue;
                }
                if count.fetch_add(1, Ordering::Relaxed) >= COMPLETE_MAX_FILES {
                    capped.store(true, Ordering::Relaxed);
                    return ignore::WalkState::Quit;
                }
                if let Some(rel) = entry.path().strip_prefix(base).ok().and_then(Path::to_str) {
                    let _ = tx.send(rel.to_owned());
                }
                ignore::WalkState::Continue
            })
        });
    drop(tx);
    let mut files: Vec<String> = rx.into_iter().collect();
    files.sort_unstable();
    if capped.load(Ordering::Relaxed) {
        tracing::info!(root, files = files.len(), "completions list only the first files of a big tree");
    }
    tracing::debug!(root, files = files.len(), walk_ms = started.elapsed().as_secs_f64() * 1e3, "walked a root for completions");
    Listing { files, walked: Instant::now(), stale: AtomicBool::new(false) }
}

/// [`FsCmd::Complete`]: the files under `roots` whose relative path matches
/// `query` fuzzily, best first (ties by path), at most `limit`, as absolute
/// real paths. An empty query answers the shortest paths first.
fn complete(roots: &[String], query: &str, limit: usize, files: &Arc<FileLists>) -> Result<Vec<String>, FsError> {
    for root in roots {
        recheck(root, true)?;
    }
    if limit == 0 {
        return Ok(Vec::new());
    }
    let listings: Vec<(&str, Arc<Listing>)> = roots.iter().map(|r| (r.as_str(), files.get(r))).collect();
    // (rank, root, relative path): lower rank is better.
    let mut found: Vec<(i64, &str, &str)> = Vec::new();
    let query = query.trim();
    if query.is_empty() {
        for (root, listing) in &listings {
            found.extend(listing.files.iter().map(|rel| (rel.len() as i64, *root, rel.as_str())));
        }
    } else {
        use nucleo_matcher::pattern::{CaseMatching, Normalization, Pattern};
        let mut matcher = nucleo_matcher::Matcher::new(nucleo_matcher::Config::DEFAULT.match_paths());
        let pattern = Pattern::parse(query, CaseMatching::Smart, Normalization::Smart);
        let mut buf = Vec::new();
        for (root, listing) in &listings {
            for rel in &listing.files {
                if let Some(score) = pattern.score(nucleo_matcher::Utf32Str::new(rel, &mut buf), &mut matcher) {
                    found.push((-i64::from(score), root, rel.as_str()));
                }
            }
        }
    }
    // Only the best `limit` (and a few more, for duplicates from nested
    // roots) are sorted.
    let keep = limit.saturating_mul(2).min(found.len());
    if keep < found.len() {
        found.select_nth_unstable(keep);
        found.truncate(keep);
    }
    found.sort_unstable();
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (_, root, rel) in found {
        let path = if root.ends_with('/') { format!("{root}{rel}") } else { format!("{root}/{rel}") };
        if seen.insert(path.clone()) {
            out.push(path);
            if out.len() == limit {
                break;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Event;

    /// A fresh folder, by its real path (the temp folder may sit behind a link).
    fn folder() -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let real = fs::canonicalize(dir.path()).unwrap_or_else(|e| panic!("canonicalize: {e}"));
        let real = real.to_str().unwrap_or_else(|| panic!("not UTF-8")).to_owned();
        (dir, real)
    }

    fn go(command: FsCmd) -> FsResult {
        run(&command, &Arc::default())
    }

    fn resolved(path: &str, follow: bool) -> Resolved {
        match go(FsCmd::Resolve { paths: vec![path.to_owned()], follow }) {
            FsResult::Resolved(mut r) => r.remove(0),
            other => panic!("resolve {path}: {other:?}"),
        }
    }

    fn write(path: &str, data: &str, mode: WriteMode, position: u64) -> FsResult {
        go(FsCmd::Write { path: path.to_owned(), data: data.as_bytes().to_vec(), mode, position, create_only: false, if_match: None })
    }

    fn text(path: &str) -> String {
        fs::read_to_string(path).unwrap_or_else(|e| panic!("read {path}: {e}"))
    }

    fn put(path: &str, data: &str) {
        fs::write(path, data).unwrap_or_else(|e| panic!("write {path}: {e}"));
    }

    fn link(target: &str, at: &str) {
        std::os::unix::fs::symlink(target, at).unwrap_or_else(|e| panic!("symlink {at}: {e}"));
    }

    /// An attached file is read only inside the session's folders: a link
    /// out, `..` out and a missing file read the same ("unavailable"); a
    /// folder, a big file and a binary one as what they are.
    #[test]
    fn attachments_are_read_only_inside_the_sessions_folders() {
        use ahpd_core::files::attachments::FileAttachment;
        let (_d, base) = folder();
        fs::create_dir_all(format!("{base}/w/sub")).unwrap_or_else(|e| panic!("{e}"));
        fs::create_dir_all(format!("{base}/outside")).unwrap_or_else(|e| panic!("{e}"));
        put(&format!("{base}/outside/secret.txt"), "secret");
        put(&format!("{base}/w/notes.md"), "hello\n");
        put(&format!("{base}/w/big.txt"), &"x".repeat(100));
        fs::write(format!("{base}/w/bin"), [0u8, 159, 146, 150]).unwrap_or_else(|e| panic!("{e}"));
        link("../outside/secret.txt", &format!("{base}/w/leak"));
        let file = |label: &str, path: Option<String>| {
            let refused = path.is_none().then_some(Unread::Malformed);
            FileAttachment { label: label.into(), uri: format!("file://{}", path.clone().unwrap_or_default()), path, refused, content_type: None }
        };
        let reads = AttachmentReads {
            files: vec![
                file("notes", Some(format!("{base}/w/notes.md"))),
                file("leak", Some(format!("{base}/w/leak"))),
                file("dotdot", Some(format!("{base}/w/../outside/secret.txt"))),
                file("abs", Some(format!("{base}/outside/secret.txt"))),
                file("missing", Some(format!("{base}/w/nope"))),
                file("dir", Some(format!("{base}/w/sub"))),
                file("big", Some(format!("{base}/w/big.txt"))),
                file("bin", Some(format!("{base}/w/bin"))),
                file("bad", None),
            ],
            roots: vec![format!("{base}/w")],
            max_bytes: 50,
        };
        let got: Vec<(String, AttachmentBody)> = read_attachments(&reads).into_iter().map(|r| (r.label, r.body)).collect();
        let unavailable = AttachmentBody::Unread(Unread::Unavailable);
        assert_eq!(
            got,
            vec![
                ("notes".to_owned(), AttachmentBody::Text { text: "hello\n".into(), mime: "text/plain".into() }),
                ("leak".to_owned(), unavailable.clone()),
                ("dotdot".to_owned(), unavailable.clone()),
                ("abs".to_owned(), unavailable.clone()),
                ("missing".to_owned(), unavailable),
                ("dir".to_owned(), AttachmentBody::Unread(Unread::NotAFile)),
                ("big".to_owned(), AttachmentBody::Unread(Unread::TooLarge)),
                ("bin".to_owned(), AttachmentBody::Blob { data: vec![0, 159, 146, 150], mime: "application/octet-stream".into() }),
                ("bad".to_owned(), AttachmentBody::Unread(Unread::Malformed)),
            ]
        );
    }

    #[test]
    fn a_link_inside_pointing_out_resolves_to_the_outside_real_path() {
        let (_d, base) = folder();
        fs::create_dir_all(format!("{base}/inside")).unwrap_or_else(|e| panic!("{e}"));
        fs::create_dir_all(format!("{base}/outside")).unwrap_or_else(|e| panic!("{e}"));
        put(&format!("{base}/outside/secret.txt"), "secret");
        link("../outside", &format!("{base}/inside/out"));
        link(&format!("{base}/outside/secret.txt"), &format!("{base}/inside/file"));

        let r = resolved(&format!("{base}/inside/out/secret.txt"), true);
        assert_eq!(r.real, format!("{base}/outside/secret.txt"));
        assert_eq!(r.kind, Some(FsKind::File));
        assert_eq!(r.size, Some(6));
        assert!(r.etag.is_some() && r.mtime_ms.is_some_and(|t| t > 0) && r.ctime_ms.is_some());

        // Not followed: the link itself.
        let r = resolved(&format!("{base}/inside/file"), false);
        assert_eq!(r.real, format!("{base}/inside/file"));
        assert_eq!(r.kind, Some(FsKind::Symlink));
        assert_eq!(r.etag, None);
        // Followed, and the roots after the first path always are.
        match go(FsCmd::Resolve { paths: vec![format!("{base}/inside/file"), format!("{base}/inside/out")], follow: false }) {
            FsResult::Resolved(r) => {
                assert_eq!(r[0].kind, Some(FsKind::Symlink));
                assert_eq!(r[1].real, format!("{base}/outside"));
                assert_eq!(r[1].kind, Some(FsKind::Directory));
            }
            other => panic!("{other:?}"),
        }
        // A dangling link resolves to where it points.
        link(&format!("{base}/outside/new.txt"), &format!("{base}/inside/dangling"));
        let r = resolved(&format!("{base}/inside/dangling"), true);
        assert_eq!(r.real, format!("{base}/outside/new.txt"));
        assert_eq!(r.kind, None);
    }

    #[test]
    fn missing_names_are_appended_and_dots_after_them_are_invalid() {
        let (_d, base) = folder();
        fs::create_dir(format!("{base}/a")).unwrap_or_else(|e| panic!("{e}"));
        // `..` after an existing name is resolved; after it, missing names are appended.
        let r = resolved(&format!("{base}/./a/../b/c.txt"), true);
        assert_eq!(r.real, format!("{base}/b/c.txt"));
        assert_eq!((r.kind, r.size, r.etag), (None, None, None));
        for bad in [format!("{base}/missing/../x"), format!("{base}/missing/./x"), "relative/path".to_owned(), format!("{base}/a\0b")] {
            let asked = FsCmd::Resolve { paths: vec![format!("{base}"), bad.clone()], follow: true };
            assert_eq!(go(asked), FsResult::Failed(FsError::Invalid), "{bad:?}");
        }
    }

    #[test]
    fn a_write_changes_the_etag_and_a_stale_if_match_conflicts() {
        let (_d, base) = folder();
        let path = format!("{base}/notes.md");
        assert_eq!(write(&path, "hello", WriteMode::Truncate, 0), FsResult::Done);
        let first = resolved(&path, true).etag.unwrap_or_else(|| panic!("no etag"));
        let (data, read_etag) = match go(FsCmd::Read { path: path.clone(), max_bytes: 100 }) {
            FsResult::Read { data, etag } => (data, etag),
            other => panic!("{other:?}"),
        };
        assert_eq!((data.as_slice(), read_etag.as_str()), (b"hello".as_slice(), first.as_str()));
        // Same size, same second: still another etag (a new inode).
        assert_eq!(write(&path, "world", WriteMode::Truncate, 0), FsResult::Done);
        let second = resolved(&path, true).etag.unwrap_or_else(|| panic!("no etag"));
        assert_ne!(first, second);

        let guarded = |tag: &str, data: &str| go(FsCmd::Write {
            path: path.clone(),
            data: data.as_bytes().to_vec(),
            mode: WriteMode::Truncate,
            position: 0,
            create_only: false,
            if_match: Some(tag.to_owned()),
        });
        assert_eq!(guarded(&first, "stale"), FsResult::Failed(FsError::Conflict));
        assert_eq!(text(&path), "world");
        assert_eq!(guarded(&second, "fresh"), FsResult::Done);
        assert_eq!(text(&path), "fresh");
        // A missing file matches no etag.
        let missing = FsCmd::Write { path: format!("{base}/none"), data: vec![], mode: WriteMode::Truncate, position: 0, create_only: false, if_match: Some(second) };
        assert_eq!(go(missing), FsResult::Failed(FsError::Conflict));
        assert_eq!(go(FsCmd::Read { path: path.clone(), max_bytes: 2 }), FsResult::Failed(FsError::TooLarge));
        assert_eq!(go(FsCmd::Read { path: base.clone(), max_bytes: 2 }), FsResult::Failed(FsError::IsADirectory));
    }

    #[test]
    fn create_only_refuses_an_existing_file_and_parents_are_never_made() {
        let (_d, base) = folder();
        let path = format!("{base}/new.txt");
        let create = |path: &str| go(FsCmd::Write { path: path.to_owned(), data: b"x".to_vec(), mode: WriteMode::Truncate, position: 0, create_only: true, if_match: None });
        assert_eq!(create(&path), FsResult::Done);
        assert_eq!(create(&path), FsResult::Failed(FsError::AlreadyExists));
        assert_eq!(text(&path), "x");
        assert_eq!(create(&format!("{base}/no/such/dir.txt")), FsResult::Failed(FsError::NotFound));
        assert!(!Path::new(&format!("{base}/no")).exists());
        // No temporary file is left beside them.
        let names: Vec<_> = fs::read_dir(&base).into_iter().flatten().flatten().map(|e| e.file_name()).collect();
        assert_eq!(names, vec![OsString::from("new.txt")]);
    }

    #[test]
    fn append_insert_and_truncate_place_data_by_position() {
        let (_d, base) = folder();
        let path = format!("{base}/f.txt");
        put(&path, "hello world");
        assert_eq!(write(&path, "!", WriteMode::Append, 0), FsResult::Done);
        assert_eq!(text(&path), "hello world!");
        assert_eq!(write(&path, "?", WriteMode::Append, 1), FsResult::Done);
        assert_eq!(text(&path), "hello world?!");
        assert_eq!(write(&path, ",", WriteMode::Insert, 5), FsResult::Done);
        assert_eq!(text(&path), "hello, world?!");
        assert_eq!(write(&path, "<", WriteMode::Insert, 0), FsResult::Done);
        assert_eq!(text(&path), "<hello, world?!");
        assert_eq!(write(&path, " there", WriteMode::Truncate, 6), FsResult::Done);
        assert_eq!(text(&path), "<hello there");
        // Positions past the file are its end (insert, truncate) or its
        // start (append).
        assert_eq!(write(&path, ">", WriteMode::Insert, 999), FsResult::Done);
        assert_eq!(write(&path, "^", WriteMode::Append, 999), FsResult::Done);
        assert_eq!(text(&path), "^<hello there>");
        // A missing file is created by every mode.
        assert_eq!(write(&format!("{base}/g.txt"), "new", WriteMode::Insert, 3), FsResult::Done);
        assert_eq!(text(&format!("{base}/g.txt")), "new");
    }

    #[test]
    fn copy_and_move_honour_fail_if_exists_and_copy_links_as_links() {
        let (_d, base) = folder();
        let (a, b) = (format!("{base}/a.txt"), format!("{base}/b.txt"));
        put(&a, "A");
        put(&b, "B");
        let copy = |from: &str, to: &str, fail: bool| go(FsCmd::Copy { from: from.to_owned(), to: to.to_owned(), fail_if_exists: fail });
        let mv = |from: &str, to: &str, fail: bool| go(FsCmd::Move { from: from.to_owned(), to: to.to_owned(), fail_if_exists: fail });
        assert_eq!(copy(&a, &b, true), FsResult::Failed(FsError::AlreadyExists));
        assert_eq!(text(&b), "B");
        assert_eq!(copy(&a, &b, false), FsResult::Done);
        assert_eq!(text(&b), "A");

        // A tree, with a link inside copied as a link.
        let tree = format!("{base}/tree");
        fs::create_dir_all(format!("{tree}/sub")).unwrap_or_else(|e| panic!("{e}"));
        put(&format!("{tree}/sub/x.txt"), "X");
        link("../../a.txt", &format!("{tree}/sub/l"));
        assert_eq!(copy(&tree, &format!("{base}/copy"), false), FsResult::Done);
        assert_eq!(text(&format!("{base}/copy/sub/x.txt")), "X");
        let copied = fs::read_link(format!("{base}/copy/sub/l")).unwrap_or_else(|e| panic!("not a link: {e}"));
        assert_eq!(copied, PathBuf::from("../../a.txt"));
        assert_eq!(copy(&tree, &format!("{tree}/sub/inner"), false), FsResult::Failed(FsError::Invalid));

        put(&b, "B");
        assert_eq!(mv(&a, &b, true), FsResult::Failed(FsError::AlreadyExists));
        assert_eq!(mv(&a, &b, false), FsResult::Done);
        assert_eq!(text(&b), "A");
        assert!(!Path::new(&a).exists());
        // A folder over a folder that has things in it.
        assert_eq!(mv(&format!("{base}/copy"), &tree, true), FsResult::Failed(FsError::AlreadyExists));
        assert_eq!(mv(&format!("{base}/copy"), &tree, false), FsResult::Done);
        assert!(Path::new(&format!("{tree}/sub/x.txt")).exists() && !Path::new(&format!("{base}/copy")).exists());
        assert_eq!(mv(&format!("{base}/gone"), &a, false), FsResult::Failed(FsError::NotFound));
    }

    #[test]
    fn delete_refuses_a_non_empty_folder_unless_recursive_and_removes_a_link_itself() {
        let (_d, base) = folder();
        let dir = format!("{base}/d");
        fs::create_dir_all(format!("{dir}/e")).unwrap_or_else(|e| panic!("{e}"));
        put(&format!("{dir}/e/f"), "f");
        put(&format!("{base}/target"), "t");
        link(&format!("{base}/target"), &format!("{base}/l"));
        let delete = |path: &str, recursive: bool| go(FsCmd::Delete { path: path.to_owned(), recursive });
        assert_eq!(delete(&dir, false), FsResult::Failed(FsError::NotEmpty));
        assert_eq!(delete(&dir, true), FsResult::Done);
        assert!(!Path::new(&dir).exists());
        assert_eq!(delete(&format!("{base}/l"), false), FsResult::Done);
        assert_eq!(text(&format!("{base}/target")), "t");
        assert_eq!(delete(&format!("{base}/l"), false), FsResult::Failed(FsError::NotFound));
    }

    #[test]
    fn a_checked_path_that_became_a_link_is_moved() {
        let (_d, base) = folder();
        fs::create_dir_all(format!("{base}/root")).unwrap_or_else(|e| panic!("{e}"));
        put(&format!("{base}/outside.txt"), "secret");
        let path = format!("{base}/root/f.txt");
        put(&path, "mine");
        let checked = resolved(&path, true).real;
        // Swapped between the core's check and the act.
        fs::remove_file(&path).unwrap_or_else(|e| panic!("{e}"));
        link(&format!("{base}/outside.txt"), &path);
        assert_eq!(go(FsCmd::Read { path: checked.clone(), max_bytes: 100 }), FsResult::Failed(FsError::Moved));
        assert_eq!(write(&checked, "x", WriteMode::Append, 0), FsResult::Failed(FsError::Moved));
        assert_eq!(write(&checked, "x", WriteMode::Truncate, 0), FsResult::Failed(FsError::Moved));
        assert_eq!(go(FsCmd::List { path: checked.clone(), max_entries: 9 }), FsResult::Failed(FsError::Moved));
        assert_eq!(text(&format!("{base}/outside.txt")), "secret");
        // A folder on the way swapped for a link.
        fs::create_dir_all(format!("{base}/root/sub")).unwrap_or_else(|e| panic!("{e}"));
        let deep = format!("{base}/root/sub/new.txt");
        fs::remove_dir(format!("{base}/root/sub")).unwrap_or_else(|e| panic!("{e}"));
        link(&base, &format!("{base}/root/sub"));
        assert_eq!(write(&deep, "x", WriteMode::Truncate, 0), FsResult::Failed(FsError::Moved));
        assert!(!Path::new(&format!("{base}/new.txt")).exists());
    }

    #[test]
    fn list_is_sorted_with_kinds_and_bounded() {
        let (_d, base) = folder();
        put(&format!("{base}/b"), "");
        put(&format!("{base}/a"), "");
        fs::create_dir(format!("{base}/c")).unwrap_or_else(|e| panic!("{e}"));
        link("a", &format!("{base}/d"));
        let listed = go(FsCmd::List { path: base.clone(), max_entries: 4 });
        let want = vec![("a".to_owned(), FsKind::File), ("b".to_owned(), FsKind::File), ("c".to_owned(), FsKind::Directory), ("d".to_owned(), FsKind::Symlink)];
        assert_eq!(listed, FsResult::Listed(want));
        assert_eq!(go(FsCmd::List { path: base.clone(), max_entries: 3 }), FsResult::Failed(FsError::TooLarge));
        assert_eq!(go(FsCmd::List { path: format!("{base}/a"), max_entries: 3 }), FsResult::Failed(FsError::NotADirectory));
        assert_eq!(go(FsCmd::List { path: format!("{base}/zz"), max_entries: 3 }), FsResult::Failed(FsError::NotFound));
        assert_eq!(go(FsCmd::Mkdir { path: format!("{base}/x/y/z") }), FsResult::Done);
        assert_eq!(go(FsCmd::Mkdir { path: format!("{base}/x/y") }), FsResult::Done);
        assert_eq!(go(FsCmd::Mkdir { path: format!("{base}/a") }), FsResult::Failed(FsError::AlreadyExists));
    }

    /// The next input through `rx` that satisfies `want`, within `wait`.
    async fn next_input(rx: &mut mpsc::UnboundedReceiver<Event>, wait: Duration, mut want: impl FnMut(&Input) -> bool) -> Option<Input> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(Event::Input(input))) if want(&input) => return Some(input),
                Ok(Some(_)) => continue,
                Ok(None) | Err(_) => return None,
            }
        }
    }

    fn changes_of(input: Option<Input>) -> Vec<(String, ResourceChangeType)> {
        match input {
            Some(Input::FsChanged { watch: 7, changes }) => changes,
            other => panic!("no change reported: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_watch_reports_a_write_and_a_delete_and_ends_with_unwatch() {
        let (_d, base) = folder();
        let (events, mut rx) = EventSink::channel();
        let exec = FsExec::new(events);
        exec.execute(OpId(1), FsCmd::Watch { watch: 7, path: base.clone(), recursive: true });
        let done = next_input(&mut rx, Duration::from_secs(5), |i| matches!(i, Input::Done { .. })).await;
        assert!(matches!(done, Some(Input::Done { op: OpId(1), outcome: Outcome::Fs(FsResult::Done) })), "{done:?}");

        let path = format!("{base}/new.txt");
        put(&path, "hello");
        let is_change = |i: &Input| matches!(i, Input::FsChanged { .. });
        let changes = changes_of(next_input(&mut rx, Duration::from_secs(1), is_change).await);
        assert_eq!(changes, vec![(path.clone(), ResourceChangeType::Added)]);

        fs::remove_file(&path).unwrap_or_else(|e| panic!("{e}"));
        let changes = changes_of(next_input(&mut rx, Duration::from_secs(1), is_change).await);
        assert_eq!(changes, vec![(path.clone(), ResourceChangeType::Deleted)]);

        // In a subfolder made after the watch began (recursive).
        fs::create_dir(format!("{base}/sub")).unwrap_or_else(|e| panic!("{e}"));
        let changes = changes_of(next_input(&mut rx, Duration::from_secs(1), is_change).await);
        assert_eq!(changes, vec![(format!("{base}/sub"), ResourceChangeType::Added)]);
        tokio::time::sleep(Duration::from_millis(50)).await;
        put(&format!("{base}/sub/x"), "x");
        let changes = changes_of(next_input(&mut rx, Duration::from_secs(1), is_change).await);
        assert!(changes.contains(&(format!("{base}/sub/x"), ResourceChangeType::Added)), "{changes:?}");

        exec.execute(OpId(2), FsCmd::Unwatch { watch: 7 });
        put(&format!("{base}/after.txt"), "x");
        assert_eq!(next_input(&mut rx, Duration::from_millis(300), is_change).await, None);
    }

    #[tokio::test]
    async fn a_watch_on_a_missing_path_fails() {
        let (_d, base) = folder();
        let (events, mut rx) = EventSink::channel();
        FsExec::new(events).execute(OpId(3), FsCmd::Watch { watch: 1, path: format!("{base}/none"), recursive: false });
        let done = next_input(&mut rx, Duration::from_secs(5), |i| matches!(i, Input::Done { .. })).await;
        assert!(matches!(done, Some(Input::Done { outcome: Outcome::Fs(FsResult::Failed(FsError::NotFound)), .. })), "{done:?}");
    }

    #[test]
    fn batches_keep_each_path_once_with_its_last_kind() {
        let mut batch = Batch::default();
        let event = |kind: EventKind, path: &str| Ok(notify::Event::new(kind).add_path(PathBuf::from(path)));
        batch.add(event(EventKind::Create(notify::event::CreateKind::File), "/w/a"), "/w");
        batch.add(event(EventKind::Modify(ModifyKind::Data(notify::event::DataChange::Any)), "/w/a"), "/w");
        batch.add(event(EventKind::Modify(ModifyKind::Data(notify::event::DataChange::Any)), "/w/b"), "/w");
        batch.add(event(EventKind::Remove(notify::event::RemoveKind::File), "/w/b"), "/w");
        batch.add(event(EventKind::Modify(ModifyKind::Name(RenameMode::From)), "/w/c"), "/w");
        batch.add(event(EventKind::Access(notify::event::AccessKind::Any), "/w/d"), "/w");
        use ResourceChangeType::*;
        assert_eq!(batch.changes, vec![("/w/a".to_owned(), Added), ("/w/b".to_owned(), Deleted), ("/w/c".to_owned(), Deleted)]);
    }

    #[test]
    fn completion_finds_a_file_by_a_partial_name_and_skips_ignored_ones() {
        let (_d, base) = folder();
        for dir in ["src", "target/debug", ".hidden"] {
            fs::create_dir_all(format!("{base}/{dir}")).unwrap_or_else(|e| panic!("{e}"));
        }
        put(&format!("{base}/.gitignore"), "target/\nsecret.rs\n");
        for file in ["src/main.rs", "src/lib.rs", "README.md", "target/debug/main.rs", "secret.rs", ".hidden/main.rs"] {
            put(&format!("{base}/{file}"), "");
        }
        let files: Arc<FileLists> = Arc::default();
        let complete = |query: &str, limit: usize| match run(&FsCmd::Complete { roots: vec![base.clone()], query: query.to_owned(), limit }, &files) {
            FsResult::Completed(paths) => paths,
            other => panic!("{other:?}"),
        };
        assert_eq!(complete("mainrs", 10), vec![format!("{base}/src/main.rs")]);
        let all = complete("", 10);
        assert_eq!(all, vec![format!("{base}/README.md"), format!("{base}/src/lib.rs"), format!("{base}/src/main.rs")]);
        assert_eq!(complete("", 1).len(), 1);
        assert!(complete("secret", 10).is_empty());
        assert_eq!(complete("rs", 10).len(), 2);
        // A moved root is refused like any checked path.
        link(&format!("{base}/src"), &format!("{base}/lnk"));
        let moved = run(&FsCmd::Complete { roots: vec![format!("{base}/lnk")], query: String::new(), limit: 3 }, &files);
        assert_eq!(moved, FsResult::Failed(FsError::Moved));
    }
}
