//! Small filesystem helpers shared by the store and the echo agent: durable
//! atomic replacement of one file, directory fsync, name checks, and OS
//! randomness.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The marker every temporary file name carries, so a startup scan can tell
/// a stray temp file (left by a crash mid-write) from a real one.
pub const TEMP_MARKER: &str = ".tmp-";

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

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

/// Writes `bytes` to `dir/name` atomically: a unique temp file in the same
/// directory, written and fsynced, then renamed over the target. The
/// directory itself is NOT fsynced (call [`sync_dir`] once per batch).
///
/// Errors: any IO error; the temp file is removed on failure (best effort).
pub fn write_replace(dir: &Path, name: &str, bytes: &[u8], mode: Option<u32>) -> std::io::Result<()> {
    let tmp = temp_path(dir, name);
    let result = (|| {
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(mode.unwrap_or(0o644));
        }
        #[cfg(not(unix))]
        let _ = mode;
        let mut file = options.open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
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
    File::open(dir)?.sync_all()
}

/// Writes `bytes` to `dir/name` atomically and durably (file and directory
/// fsynced).
///
/// Errors: any IO error.
pub fn write_durable(dir: &Path, name: &str, bytes: &[u8], mode: Option<u32>) -> std::io::Result<()> {
    write_replace(dir, name, bytes, mode)?;
    sync_dir(dir)
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
