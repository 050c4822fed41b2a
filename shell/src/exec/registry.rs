//! The workspace-awareness registry (issue 10): a directory of one JSON
//! record per live session of every process on the machine
//! (`$AHPD_HOME/active-agents`, by default `<data-dir>/active-agents`).
//!
//! This executor runs `Effect::Registry` commands in issue order on one
//! task (so a scan sees every record published before it): `Publish`
//! writes a record atomically (unique temp file, rename; not fsynced: a
//! record only says a process is alive), `Remove` deletes one of this process's own records, `Scan` reads
//! every record file (regular files named `*.json`, at most
//! `RECORD_MAX_BYTES` + 1 bytes each), observes the process each names
//! (Linux: `/proc/<pid>/stat`, its start time in clock ticks after boot),
//! and the Git repository of each asked directory. It judges nothing (the
//! core does) and never deletes another process's record. At shutdown
//! ([`Registry::finish`]) it removes the records this process published.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use ahpd_core::awareness::{self, ActiveRecord, ProcessObservation, RegistryFile, RepoObservation};
use ahpd_core::{Input, OpId, Outcome, RegistryCmd};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::fsutil;
use crate::events::EventSink;

/// The registry executor.
pub struct Registry {
    dir: PathBuf,
    tx: Option<mpsc::UnboundedSender<(OpId, RegistryCmd)>>,
    task: Option<JoinHandle<()>>,
    own: Arc<Mutex<BTreeSet<String>>>,
}

impl Registry {
    /// An executor over `dir` (created here if missing, mode 0700 where
    /// new); answers go to `events`.
    pub fn new(dir: PathBuf, events: EventSink) -> Registry {
        if let Err(e) = fsutil::create_private_dir(&dir) {
            // Every command will fail and say so; the sessions go on.
            tracing::warn!(dir = %dir.display(), error = %e, "could not create the awareness registry directory");
        }
        let (tx, mut rx) = mpsc::unbounded_channel::<(OpId, RegistryCmd)>();
        let own: Arc<Mutex<BTreeSet<String>>> = Arc::default();
        let task = {
            let dir = dir.clone();
            let own = own.clone();
            tokio::spawn(async move {
                while let Some((op, command)) = rx.recv().await {
                    let dir = dir.clone();
                    let own = own.clone();
                    let outcome = super::bulk::spawn(move || run(&dir, &own, command))
                        .await
                        .unwrap_or_else(|e| Outcome::Failed { message: format!("registry task failed: {e}") });
                    events.input(Input::Done { op, outcome });
                }
            })
        };
        Registry { dir, tx: Some(tx), task: Some(task), own }
    }

    /// Queues one command; its answer comes back as `Input::Done { op, .. }`.
    pub fn submit(&self, op: OpId, command: RegistryCmd) {
        if let Some(tx) = &self.tx {
            let _ = tx.send((op, command));
        }
    }

    /// Graceful shutdown: lets queued commands finish, then removes every
    /// record this process published.
    pub async fn finish(mut self) {
        self.tx = None;
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        let names: Vec<String> = lock(&self.own).iter().cloned().collect();
        let dir = self.dir.clone();
        let _ = super::bulk::spawn(move || {
            for name in names {
                if let Err(e) = fsutil::remove_durable(&dir, &name) {
                    tracing::warn!(name, error = %e, "could not remove this process's awareness record");
                }
            }
        })
        .await;
    }
}

fn lock(m: &Mutex<BTreeSet<String>>) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn run(dir: &Path, own: &Mutex<BTreeSet<String>>, command: RegistryCmd) -> Outcome {
    match command {
        RegistryCmd::Publish { name, record } => match publish(dir, &name, &record) {
            Ok(()) => {
                lock(own).insert(name);
                Outcome::Ok
            }
            Err(message) => Outcome::Failed { message },
        },
        RegistryCmd::Remove { name } => {
            if !lock(own).contains(&name) {
                // Never another process's record.
                return Outcome::Ok;
            }
            match remove(dir, &name) {
                Ok(()) => {
                    lock(own).remove(&name);
                    Outcome::Ok
                }
                Err(message) => Outcome::Failed { message },
            }
        }
        RegistryCmd::Scan { dirs } => match scan(dir, &dirs) {
            Ok((files, repos)) => Outcome::RegistryScanned { files, repos },
            Err(message) => Outcome::Failed { message },
        },
    }
}

/// Whether `name` may name a record file: a safe component ending `.json`.
pub fn is_record_name(name: &str) -> bool {
    fsutil::is_safe_component(name) && name.ends_with(".json") && !name.contains(fsutil::TEMP_MARKER)
}

/// Writes `record` as `dir/name` atomically (mode 0600), not fsynced: a
/// record says a process is alive, so after a crash it is stale whatever
/// the disk kept, and a scan reads whole files only (docs/AWARENESS.md).
///
/// Errors: a name that is not a record name, or any IO error, in words.
pub fn publish(dir: &Path, name: &str, record: &ActiveRecord) -> Result<(), String> {
    if !is_record_name(name) {
        return Err(format!("refused record name {name:?}"));
    }
    let bytes = serde_json::to_vec(record).map_err(|e| format!("could not encode the record: {e}"))?;
    fsutil::write_atomic(dir, name, &bytes, Some(0o600)).map_err(|e| format!("{}: {e}", dir.join(name).display()))
}

/// Removes `dir/name` (already gone is fine).
///
/// Errors: a name that is not a record name, or any IO error, in words.
pub fn remove(dir: &Path, name: &str) -> Result<(), String> {
    if !is_record_name(name) {
        return Err(format!("refused record name {name:?}"));
    }
    // Not fsynced either: a record that comes back after a crash names a
    // process that is gone, which a scan judges stale.
    match std::fs::remove_file(dir.join(name)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(format!("{}: {e}", dir.join(name).display())),
        _ => Ok(()),
    }
}

/// Reads every record file of `dir` (name order) with what it observed of
/// the process each names, and the repository of each of `dirs`.
///
/// Errors: the directory cannot be listed. A file that cannot be read is
/// left out (it may have been removed meanwhile).
pub fn scan(dir: &Path, dirs: &[String]) -> Result<(Vec<RegistryFile>, BTreeMap<String, Option<RepoObservation>>), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut files = Vec::new();
    for entry in entries.flatten() {
        let Ok(name) = entry.file_name().into_string() else { continue };
        if !is_record_name(&name) {
            continue;
        }
        // Regular files only: a symlink is never followed.
        if !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let Some(bytes) = read_capped(&entry.path()) else { continue };
        let process = awareness::peek_pid(&bytes).map(observe);
        files.push(RegistryFile { name, bytes, process });
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    let repos = dirs.iter().map(|d| (d.clone(), repository(Path::new(d)))).collect();
    Ok((files, repos))
}

fn read_capped(path: &Path) -> Option<Vec<u8>> {
    let file = std::fs::File::open(path).ok()?;
    let mut bytes = Vec::new();
    file.take(awareness::RECORD_MAX_BYTES as u64 + 1).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// What this machine shows of process `pid`: whether it exists and its
/// start time (Linux: `/proc/<pid>/stat` field 22, clock ticks after boot).
/// Elsewhere nothing can be observed and every local record reads stale.
pub fn observe(pid: u32) -> ProcessObservation {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => ProcessObservation { pid, alive: true, start: start_time(&stat) },
        Err(_) => ProcessObservation { pid, alive: false, start: None },
    }
}

/// Field 22 (`starttime`) of a `/proc/<pid>/stat` line. The command name
/// (field 2) is in parentheses and may hold spaces or `)`, so fields are
/// counted after the last `)`.
fn start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After `)`: field 3 (state) is the first; starttime is field 22.
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// This process's start time, as [`observe`] reads it (0 when unknown).
pub fn own_start() -> u64 {
    observe(std::process::id()).start.unwrap_or(0)
}

/// The Git working tree `dir` is in: its root, branch and HEAD commit.
fn repository(dir: &Path) -> Option<RepoObservation> {
    let repo = git2::Repository::discover(dir).ok()?;
    let root = repo.workdir()?.to_str()?.trim_end_matches('/').to_owned();
    let head = repo.head().ok();
    let branch = head.as_ref().filter(|h| h.is_branch()).and_then(|h| h.shorthand().ok().map(str::to_owned));
    let commit = head.as_ref().and_then(|h| h.target()).map(|oid| oid.to_string());
    Some(RepoObservation { root: ahpd_core::git::normalize_path(&root).unwrap_or(root), branch, head: commit })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahpd_core::awareness::{judge, parse_record, Liveness, RECORD_VERSION};

    fn record(pid: u32, pid_start: u64, activity: &str, updated_at: i64) -> ActiveRecord {
        ActiveRecord {
            version: RECORD_VERSION,
            session: "ahp-session:/peer".to_owned(),
            host: "h".to_owned(),
            pid,
            pid_start,
            working_directories: vec!["/w".to_owned()],
            repository: None,
            branch: None,
            head: None,
            status: 8,
            activity: activity.to_owned(),
            claims: vec!["/w/src/a.ts".to_owned()],
            updated_at,
        }
    }

    fn now_ms() -> i64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
    }

    /// Judges every file of a scan the way the host does: the live ones.
    fn live(files: &[RegistryFile], now: i64) -> Vec<ActiveRecord> {
        files
            .iter()
            .filter_map(|f| {
                let r = parse_record(&f.bytes, now).ok()?;
                (judge(&r, "h", f.process.as_ref(), now) == Liveness::Live).then_some(r)
            })
            .collect()
    }

    #[test]
    fn malformed_and_future_records_are_skipped_and_the_scan_goes_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let now = now_ms();
        let me = std::process::id();
        std::fs::write(dir.path().join("1-half.json"), br#"{"pid":"#).expect("write");
        publish(dir.path(), "2-future.json", &record(me, own_start(), "later", now + 3_600_000)).expect("publish");
        publish(dir.path(), "3-good.json", &record(me, own_start(), "working", now)).expect("publish");
        std::fs::write(dir.path().join("notes.txt"), b"not a record").expect("write");
        let (files, _) = scan(dir.path(), &[]).expect("scan");
        assert_eq!(files.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), vec!["1-half.json", "2-future.json", "3-good.json"]);
        let live = live(&files, now);
        assert_eq!(live.len(), 1, "{live:?}");
        assert_eq!(live[0].activity, "working");
        // Nothing was deleted by the reader.
        assert_eq!(std::fs::read_dir(dir.path()).expect("ls").count(), 4);
    }

    #[test]
    fn control_characters_are_stripped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let now = now_ms();
        let hostile = "edit\u{1b}]0;pwned\u{7}ing \u{202E}txt.exe\u{9b}31m";
        publish(dir.path(), "1-x.json", &record(std::process::id(), own_start(), hostile, now)).expect("publish");
        let (files, _) = scan(dir.path(), &[]).expect("scan");
        let live = live(&files, now);
        assert_eq!(live[0].activity, "edit]0;pwneding txt.exe31m");
    }

    #[test]
    fn a_live_unrelated_pid_with_another_start_time_is_stale() {
        let dir = tempfile::tempdir().expect("tempdir");
        let now = now_ms();
        let me = std::process::id();
        let start = own_start();
        assert!(start > 0, "this test needs /proc (Linux)");
        // Our own pid, but a start time that is not ours: a reused pid.
        publish(dir.path(), "1-reused.json", &record(me, start + 1, "ghost", now)).expect("publish");
        // pid 1 runs, and did not write this record.
        publish(dir.path(), "2-init.json", &record(1, start, "ghost", now)).expect("publish");
        let (files, _) = scan(dir.path(), &[]).expect("scan");
        assert_eq!(files.len(), 2);
        assert!(files.iter().all(|f| f.process.is_some_and(|p| p.alive)), "{files:?}");
        assert!(live(&files, now).is_empty());
    }

    #[test]
    fn start_time_is_read_after_the_command_name() {
        let stat = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(start_time(stat), Some(987654));
        assert_eq!(start_time("garbage"), None);
    }

    #[test]
    fn names_are_checked_and_removal_is_idempotent() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(publish(dir.path(), "../x.json", &record(1, 1, "", 0)).is_err());
        assert!(publish(dir.path(), "x.txt", &record(1, 1, "", 0)).is_err());
        publish(dir.path(), "1-a.json", &record(1, 1, "", 0)).expect("publish");
        remove(dir.path(), "1-a.json").expect("remove");
        remove(dir.path(), "1-a.json").expect("remove again");
    }
}
