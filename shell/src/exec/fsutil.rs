//! Small filesystem helpers shared by the store and the echo agent: durable
//! atomic replacement of one file, directory fsync, name checks, private
//! modes, and OS randomness.
//!
//! Everything the daemon writes under its data directory is its user's
//! alone (issue 46): folders 0700 ([`create_private_dir`]) and files 0600
//! ([`FILE_MODE`]), whatever the umask.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The marker every temporary file name carries, so a startup scan can tell
/// a stray temp file (left by a crash mid-write) from a real one.
pub const TEMP_MARKER: &str = ".tmp-";

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The mode of every file the daemon writes in its data directory: its
/// user's alone (conversations, tokens, secrets).
pub const FILE_MODE: u32 = 0o600;

/// The mode of every folder of the data directory.
pub const DIR_MODE: u32 = 0o700;

/// Makes `dir` and its missing parents with mode [`DIR_MODE`] (the umask
/// can only narrow it), then narrows an existing `dir` whose mode lets
/// its group or others in to [`DIR_MODE`]. Returns whether it narrowed
/// one. Parents that existed are left as they are (`~/.local/share`).
///
/// Errors: the folder cannot be made, or its mode read or set.
pub fn create_private_dir(dir: &Path) -> std::io::Result<bool> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        builder.mode(DIR_MODE);
        builder.create(dir)?;
        let mode = fs::metadata(dir)?.permissions().mode();
        if mode & 0o077 != 0 {
            fs::set_permissions(dir, fs::Permissions::from_mode(mode & 0o700 | DIR_MODE))?;
            return Ok(true);
        }
        Ok(false)
    }
    #[cfg(not(unix))]
    {
        builder.create(dir)?;
        Ok(false)
    }
}

/// Narrows every file and folder below `dir` whose mode lets its group or
/// others in: files to [`FILE_MODE`], folders to [`DIR_MODE`]; links are
/// not followed. For a data directory an older build wrote under the usual
/// umask (0644 files, 0755 folders). Returns how many were narrowed; one
/// that cannot be read or changed is skipped and counted in the second
/// figure.
pub fn narrow_modes_below(dir: &Path) -> (u64, u64) {
    let (mut narrowed, mut failed) = (0u64, 0u64);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mut stack = vec![dir.to_owned()];
        while let Some(folder) = stack.pop() {
            let Ok(entries) = fs::read_dir(&folder) else {
                failed += 1;
                continue;
            };
            for entry in entries.flatten() {
                let Ok(meta) = fs::symlink_metadata(entry.path()) else {
                    failed += 1;
                    continue;
                };
                let want = if meta.is_dir() {
                    stack.push(entry.path());
                    DIR_MODE
                } else if meta.is_file() {
                    FILE_MODE
                } else {
                    continue;
                };
                let mode = meta.permissions().mode() & 0o7777;
                if mode & 0o077 != 0 {
                    match fs::set_permissions(entry.path(), fs::Permissions::from_mode(mode & 0o700 | want)) {
                        Ok(()) => narrowed += 1,
                        Err(_) => failed += 1,
                    }
                }
            }
        }
    }
    #[cfg(not(unix))]
    let _ = dir;
    (narrowed, failed)
}

/// Every fsync this process has asked for (file or directory), for
/// `/metrics` (`ahpd_fsyncs_total`): the load benchmark reads it before and
/// after a run to count fsyncs per turn. Every `sync_all`/`sync_data` of the
/// daemon goes through this module, so this one counter sees them all.
static FSYNCS: AtomicU64 = AtomicU64::new(0);

/// How many fsyncs this process has made so far (see [`FSYNCS`]).
pub fn fsyncs() -> u64 {
    FSYNCS.load(Ordering::Relaxed)
}

/// `file.sync_all()` (data and metadata), counted in [`FSYNCS`].
///
/// Errors: the fsync failed.
pub fn sync_all_counted(file: &File) -> std::io::Result<()> {
    FSYNCS.fetch_add(1, Ordering::Relaxed);
    file.sync_all()
}

/// `file.sync_data()` (fdatasync: the data and the size, not the times),
/// counted in [`FSYNCS`]: what an append-only file needs to be durable.
///
/// Errors: the fsync failed.
pub fn sync_data_counted(file: &File) -> std::io::Result<()> {
    FSYNCS.fetch_add(1, Ordering::Relaxed);
    file.sync_data()
}

/// Whether `name` is safe to use as one path component: non-empty, no `/`,
/// `\`, or NUL, and not starting with `.` (so never `.`, `..`, a hidden file
/// or one of our temp files).
pub fn is_safe_component(name: &str) -> bool {
    !name.is_empty() && !name.starts_with('.') && !name.contains(['/', '\\', '\0'])
}

/// A fresh temp path in `dir` for a write that will be renamed to
/// `final_name`: `.<final_name>.tmp-<pid>-<counter>`, unique within this
/// process and distinct across processes by pid.
pub fn temp_path(dir: &Path, final_name: &str) -> PathBuf {
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    dir.join(format!(".{final_name}{TEMP_MARKER}{}-{n}", std::process::id()))
}

/// The pid a temp file name was written by (`.<name>.tmp-<pid>-<n>`), if
/// the name is one of [`temp_path`]'s.
fn temp_writer(name: &str) -> Option<u32> {
    if !name.starts_with('.') {
        return None;
    }
    let (_, tail) = name.rsplit_once(TEMP_MARKER)?;
    let (pid, n) = tail.split_once('-')?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// Removes the temp files in `dir` that a crash left behind (a write that
/// died between its create and its rename): every [`temp_path`] name whose
/// writer is neither this process nor another process alive now. A
/// directory other processes write too (the awareness registry) keeps a
/// live writer's temp file, which is about to be renamed. Returns how many
/// were removed; each is logged.
///
/// Errors: none: a directory that cannot be read, or a file that cannot be
/// removed, is logged and left.
pub fn remove_stray_temps(dir: &Path) -> usize {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return 0,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "could not look for stray temp files");
            return 0;
        }
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let Ok(name) = entry.file_name().into_string() else { continue };
        if remove_if_stray_temp(dir, &name) {
            removed += 1;
        }
    }
    removed
}

/// Removes `dir/name` when it is a temp file a crash left behind (see
/// [`remove_stray_temps`]), for a caller that lists the directory anyway;
/// returns whether it was removed (a failure is logged).
pub fn remove_if_stray_temp(dir: &Path, name: &str) -> bool {
    let Some(pid) = temp_writer(name) else { return false };
    if pid == std::process::id() || process_alive(pid) {
        return false;
    }
    let path = dir.join(name);
    match fs::remove_file(&path) {
        Ok(()) => {
            tracing::info!(file = %path.display(), "removed a stray temp file");
            true
        }
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "could not remove a stray temp file");
            false
        }
    }
}

/// Whether process `pid` exists now (a signal-0 probe; "not permitted"
/// means it exists and is somebody else's).
fn process_alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else { return false };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        Err(e) => e == rustix::io::Errno::PERM,
    }
}

/// Writes `bytes` to `dir/name` atomically: a unique temp file in the same
/// directory, written and fsynced, then renamed over the target. The
/// directory itself is NOT fsynced (call [`sync_dir`] once per batch).
///
/// Errors: any IO error; the temp file is removed on failure (best effort).
pub fn write_replace(dir: &Path, name: &str, bytes: &[u8], mode: Option<u32>) -> std::io::Result<()> {
    write_via_temp(dir, name, bytes, mode, true)
}

/// Writes `bytes` to `dir/name` atomically (a reader sees the old file or
/// the new one, never a part) but not durably: nothing is fsynced, so a
/// power loss may leave the old file or none. For files that describe a
/// live process and mean nothing after a crash (the awareness registry:
/// issue 21, "heartbeat writes not fsynced per turn").
///
/// Errors: any IO error; the temp file is removed on failure (best effort).
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8], mode: Option<u32>) -> std::io::Result<()> {
    write_via_temp(dir, name, bytes, mode, false)
}

/// A unique temp file in `dir`, written (and fsynced when `sync`), then
/// renamed over `dir/name`.
fn write_via_temp(dir: &Path, name: &str, bytes: &[u8], mode: Option<u32>, sync: bool) -> std::io::Result<()> {
    let tmp = temp_path(dir, name);
    let result = (|| {
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(mode.unwrap_or(FILE_MODE));
        }
        #[cfg(not(unix))]
        let _ = mode;
        let mut file = options.open(&tmp)?;
        write_in_pieces(&mut file, bytes)?;
        if sync {
            sync_all_counted(&file)?;
        }
        drop(file);
        fs::rename(&tmp, dir.join(name))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Fsyncs directory `dir`, making renames and removals in it durable.
///
/// Errors: the directory cannot be opened or synced.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    sync_all_counted(&File::open(dir)?)
}

/// Writes `bytes` to `dir/name` atomically and durably (file and directory
/// fsynced).
///
/// Errors: any IO error.
pub fn write_durable(dir: &Path, name: &str, bytes: &[u8], mode: Option<u32>) -> std::io::Result<()> {
    write_replace(dir, name, bytes, mode)?;
    sync_dir(dir)
}

/// A file's modification time as wall time (ms since the epoch); the epoch
/// itself when the platform does not say.
pub fn mtime_of(meta: &fs::Metadata) -> ahpd_core::WallTime {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| ahpd_core::WallTime(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)))
        .unwrap_or_default()
}

/// Appends `bytes` to the existing file `path` durably (one fdatasync; the
/// file's directory entry is already durable, so no directory fsync).
///
/// Errors: the file does not exist, or any IO error (the file may then end
/// in part of `bytes`).
pub fn append_durable(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = OpenOptions::new().append(true).open(path)?;
    write_in_pieces(&mut file, bytes)?;
    sync_data_counted(&file)
}

/// Most bytes one `write` call hands the kernel, in bytes (see
/// [`write_in_pieces`]).
pub const WRITE_PIECE_BYTES: usize = 64 << 10;

/// `writer.write_all(bytes)` in calls of at most [`WRITE_PIECE_BYTES`].
/// The kernel copies a write's bytes without yielding the core (the
/// kernels this runs on are built without kernel preemption): one call of
/// megabytes held a core for milliseconds, and a thread answering a small
/// request waited behind it (issue 25). Between pieces the thread is back
/// in user space, where the scheduler can take the core.
///
/// Errors: the first failed write (the file may then end in part of `bytes`).
pub fn write_in_pieces(writer: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    for piece in bytes.chunks(WRITE_PIECE_BYTES) {
        writer.write_all(piece)?;
    }
    Ok(())
}

/// Removes `dir/name` durably; a file that is already gone is fine.
///
/// Errors: any IO error other than "not found".
pub fn remove_durable(dir: &Path, name: &str) -> std::io::Result<()> {
    match fs::remove_file(dir.join(name)) {
        Ok(()) => sync_dir(dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// `n` bytes of OS randomness from `/dev/urandom`; where that cannot be read,
/// bytes mixed from std's randomly keyed hasher, the clock and the pid.
pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    let from_os = File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf));
    if from_os.is_ok() {
        return buf;
    }
    use std::hash::{BuildHasher, Hasher};
    let state = std::collections::hash_map::RandomState::new();
    for (i, chunk) in buf.chunks_mut(8).enumerate() {
        let mut h = state.build_hasher();
        h.write_usize(i);
        h.write_u32(std::process::id());
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        h.write_u128(nanos);
        let word = h.finish().to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
    buf
}

/// Renames `dir/name`, a file that cannot be read back, to
/// `name.corrupt-<wall_ms>` (`-<n>` added, never over an earlier one), and
/// logs it with `what` and `error`: how the store sets a damaged record
/// aside and the echo agent a damaged transcript (issue 25), so that the
/// file is kept for whoever restores it and is not read again.
pub fn quarantine(dir: &Path, name: &str, wall_ms: i64, what: &str, error: &str) {
    let from = dir.join(name);
    let mut to = dir.join(format!("{name}.corrupt-{wall_ms}"));
    let mut n = 1;
    while to.exists() {
        to = dir.join(format!("{name}.corrupt-{wall_ms}-{n}"));
        n += 1;
    }
    match std::fs::rename(&from, &to) {
        Ok(()) => tracing::warn!(file = %from.display(), moved_to = %to.display(), error = %error, "{what}; moved aside"),
        Err(e) => tracing::warn!(file = %from.display(), error = %error, rename_error = %e, "{what} and could not be moved aside"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that takes what it is given and remembers each call's size.
    #[derive(Default)]
    struct Calls {
        bytes: Vec<u8>,
        sizes: Vec<usize>,
    }

    impl Write for Calls {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.sizes.push(buf.len());
            self.bytes.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_big_write_reaches_the_writer_whole_in_pieces_of_at_most_64_kib() {
        let bytes: Vec<u8> = (0..900_000u32).map(|i| (i % 251) as u8).collect();
        let mut w = Calls::default();
        write_in_pieces(&mut w, &bytes).expect("written");
        assert_eq!(w.bytes, bytes);
        assert!(w.sizes.iter().all(|&n| n <= WRITE_PIECE_BYTES), "{:?}", w.sizes);
        assert_eq!(w.sizes.len(), bytes.len().div_ceil(WRITE_PIECE_BYTES));
    }

    #[test]
    fn safe_components() {
        assert!(is_safe_component("ahp-session@abc"));
        for bad in ["", ".", "..", ".hidden", "a/b", "a\\b", "a\0b"] {
            assert!(!is_safe_component(bad), "{bad:?}");
        }
    }

    #[test]
    fn write_and_remove() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_durable(dir.path(), "x.json", b"[1]", None).expect("write");
        assert_eq!(fs::read(dir.path().join("x.json")).ok(), Some(b"[1]".to_vec()));
        write_durable(dir.path(), "x.json", b"[2]", None).expect("rewrite");
        assert_eq!(fs::read(dir.path().join("x.json")).ok(), Some(b"[2]".to_vec()));
        assert_eq!(fs::read_dir(dir.path()).map(|d| d.count()).ok(), Some(1));
        assert!(remove_durable(dir.path(), "x.json").is_ok());
        assert!(remove_durable(dir.path(), "x.json").is_ok());
        assert_eq!(random_bytes(32).len(), 32);
    }

    #[test]
    fn stray_temps_of_gone_writers_are_removed_and_live_writers_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let own = std::process::id();
        for name in [
            ".a.json.tmp-999999999-1".to_owned(),   // a writer that is gone
            format!(".b.json.tmp-{own}-3"),          // this process, mid-write
            ".c.json.tmp-x-1".to_owned(),            // not one of our names
            "d.json".to_owned(),
        ] {
            fs::write(d.join(&name), b"x").expect("write");
        }
        assert_eq!(remove_stray_temps(d), 1);
        let mut left: Vec<String> = fs::read_dir(d).expect("read").flatten().filter_map(|e| e.file_name().into_string().ok()).collect();
        left.sort();
        assert_eq!(left, [".b.json.tmp-".to_owned() + &format!("{own}-3"), ".c.json.tmp-x-1".to_owned(), "d.json".to_owned()]);
        assert_eq!(remove_stray_temps(&d.join("missing")), 0);
    }
}
