//! End-to-end tests of the session store (issue 5): crash safety under a
//! write storm with `kill -9`, pre-seeded damage, a store write that fails,
//! and the offline `ahpd session export|import` / `ahpd sessions list`
//! commands. The real `ahpd` binary runs on a loopback port and is driven
//! by the official `ahp` client.
//!
//! Every await is bounded by [`STEP`], so a hang fails fast as a timeout
//! naming the step. Set `AHPD_STORM_SEED` to replay other kill points, and
//! run with `--nocapture` to see each run's kill point and result.

mod common;

use common::*;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ahp::ahp_types::actions::{
    ActionEnvelope, SessionIsArchivedChangedAction, SessionIsReadChangedAction,
    SessionTitleChangedAction, StateAction,
};
use ahp::ahp_types::commands::CreateSessionParams;
use ahp::{Client, SessionSubscription, SubscriptionEvent};
use ahpd_core::export::ExportedSession;
use ahpd_core::SessionRecord;
use serde_json::Value;

/// The longest any single step may take.
/// Status bits the host owns (`SessionStatus::IsRead`, `IsArchived`).
const IS_READ: u32 = 32;
const IS_ARCHIVED: u32 = 64;
/// Updates each storm client sends.
const STORM_UPDATES: usize = 200;
/// Storm runs, each with its own kill point.
const STORM_RUNS: usize = 4;
/// The kill points' seed unless `AHPD_STORM_SEED` says otherwise.
const STORM_SEED: u64 = 0x5EED_2026_0005;

// ---------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------



/// Creates an echo session, subscribes to its default chat and has one
/// turn in it (so it is announced and stored). Returns (session, chat).
async fn session_with_turns(c: &Client, texts: &[&str]) -> (String, String) {
    let sid = format!("ahp-session:/{}", fresh_id());
    let params = CreateSessionParams {
        channel: sid.clone(),
        meta: None,
        provider: Some("echo".to_owned()),
        working_directories: Some(vec!["file:///tmp".to_owned()]),
        config: None,
        active_client: None,
        progress_token: None,
    };
    let r: Value = within("createSession", c.request("createSession", params)).await.expect("createSession");
    assert_eq!(r, Value::Null);
    let (s, _ssub) = subscribe_session(c, &sid).await;
    let chat = s.default_chat.clone().or_else(|| s.chats.first().map(|c| c.resource.clone())).expect("a default chat");
    let (_, mut csub) = subscribe_chat(c, &chat).await;
    for (i, text) in texts.iter().enumerate() {
        turn(c, &chat, &mut csub, &format!("t{}", i + 1), text).await;
    }
    (sid, chat)
}

/// The store file of a session URI (`<scheme>@<id>.json`).
fn record_path(data: &Path, sid: &str) -> PathBuf {
    let (scheme, id) = sid.split_once(":/").expect("a session URI");
    data.join("sessions").join(format!("{scheme}@{id}.json"))
}

/// The stored record of `sid` once it holds what the daemon lists: the
/// write of its last turn has landed (writes are group-committed behind the
/// turn's end, so a read right after it can see the one before).
async fn settled_record(c: &Client, data: &Path, sid: &str) -> Vec<u8> {
    let row = list(c).await.into_iter().find(|s| s.resource == sid).expect("listed");
    let path = record_path(data, sid);
    within("the last turn's record is written", async {
        loop {
            if let Ok(bytes) = std::fs::read(&path) {
                if serde_json::from_slice::<SessionRecord>(&bytes).is_ok_and(|r| r.modified_at.to_string() == row.modified_at) {
                    return bytes;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

fn read_record(path: &Path) -> SessionRecord {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()))
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Waits on `sub` for the envelope that echoes (`client_id`, `client_seq`).
async fn echo_of(sub: &mut SessionSubscription, client_id: &str, client_seq: i64) -> ActionEnvelope {
    within("the echo of our action", async {
        loop {
            match sub.recv().await {
                Some(SubscriptionEvent::Action(env)) => {
                    if env.origin.as_ref().is_some_and(|o| o.client_id == client_id && o.client_seq == client_seq) {
                        return env;
                    }
                }
                Some(_) => {}
                None => panic!("subscription closed before the echo"),
            }
        }
    })
    .await
}

/// xorshift64*: the kill points' seeded random stream.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform-ish in `lo..hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}

// ---------------------------------------------------------------------------
// Write storm, kill -9
// ---------------------------------------------------------------------------

/// One storm update.
#[derive(Debug, Clone, PartialEq)]
enum Update {
    Title(String),
    Read(bool),
    Archived(bool),
}

impl Update {
    /// The `i`th update of client `tag`: title, read, archived in turn,
    /// each title distinct, the bits flipping.
    fn nth(tag: &str, i: usize) -> Update {
        let flip = (i / 3) & 1 == 0;
        match i % 3 {
            0 => Update::Title(format!("{tag}-{i}")),
            1 => Update::Read(flip),
            _ => Update::Archived(!flip),
        }
    }

    fn action(&self) -> StateAction {
        match self {
            Update::Title(t) => StateAction::SessionTitleChanged(SessionTitleChangedAction { title: t.clone() }),
            Update::Read(b) => StateAction::SessionIsReadChanged(SessionIsReadChangedAction { is_read: *b }),
            Update::Archived(b) => StateAction::SessionIsArchivedChanged(SessionIsArchivedChangedAction { is_archived: *b }),
        }
    }

    fn of(action: &StateAction) -> Option<Update> {
        match action {
            StateAction::SessionTitleChanged(a) => Some(Update::Title(a.title.clone())),
            StateAction::SessionIsReadChanged(a) => Some(Update::Read(a.is_read)),
            StateAction::SessionIsArchivedChanged(a) => Some(Update::Archived(a.is_archived)),
            _ => None,
        }
    }
}

/// The host-owned bits the storm moves.
#[derive(Debug, Clone, PartialEq)]
struct Bits {
    title: String,
    read: bool,
    archived: bool,
}

impl Bits {
    fn apply(&mut self, u: &Update) {
        match u {
            Update::Title(t) => self.title = t.clone(),
            Update::Read(b) => self.read = *b,
            Update::Archived(b) => self.archived = *b,
        }
    }
}

/// What one storm run saw and found.
#[derive(Debug)]
struct StormResult {
    acked: [usize; 2],
    last_acked_seq: u64,
    unacked_sent: usize,
    restored: Bits,
    restored_from: String,
}

/// Collects every envelope on `sub` until it closes, or until `killed` is
/// set and it has been quiet for a moment; counts own echoes in `acks`.
async fn collect(
    mut sub: SessionSubscription,
    client_id: String,
    acks: Arc<AtomicUsize>,
    killed: Arc<AtomicBool>,
) -> Vec<ActionEnvelope> {
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "{client_id}: the storm never ended");
        match tokio::time::timeout(Duration::from_millis(300), sub.recv()).await {
            Ok(Some(SubscriptionEvent::Action(env))) => {
                let own = env.origin.as_ref().is_some_and(|o| o.client_id == client_id);
                if own && env.rejection_reason.is_none() {
                    acks.fetch_add(1, Ordering::SeqCst);
                }
                seen.push(env);
            }
            Ok(Some(_)) => {}
            Ok(None) => return seen,
            Err(_) if killed.load(Ordering::SeqCst) => return seen,
            Err(_) => {}
        }
    }
}

/// One run: two clients each send STORM_UPDATES updates to one session;
/// the daemon is killed with SIGKILL once `kill_after` echoes arrived plus
/// `jitter_us`; then it restarts and the stored state is checked.
async fn storm_run(run: usize, kill_after: usize, jitter_us: u64) -> StormResult {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut daemon = Daemon::start(&data);
    let setup = connect_init(&daemon.url, &format!("storm-setup-{run}")).await.0;
    let (sid, _chat) = session_with_turns(&setup, &["hello"]).await;

    let ids = [format!("storm-a-{run}"), format!("storm-b-{run}")];
    let tags = ["a", "b"];
    let clients = [connect_init(&daemon.url, &ids[0]).await.0, connect_init(&daemon.url, &ids[1]).await.0];
    let (initial, sub_a) = subscribe_session(&clients[0], &sid).await;
    let (_, sub_b) = subscribe_session(&clients[1], &sid).await;
    let start = Bits { title: initial.title.clone(), read: initial.status & IS_READ != 0, archived: initial.status & IS_ARCHIVED != 0 };

    let acks = Arc::new(AtomicUsize::new(0));
    let killed = Arc::new(AtomicBool::new(false));
    let collectors = [
        tokio::spawn(collect(sub_a, ids[0].clone(), acks.clone(), killed.clone())),
        tokio::spawn(collect(sub_b, ids[1].clone(), acks.clone(), killed.clone())),
    ];
    let mut senders = Vec::new();
    for (c, tag) in clients.iter().zip(tags) {
        let (c, sid) = (c.clone(), sid.clone());
        senders.push(tokio::spawn(async move {
            let mut sent: BTreeMap<i64, Update> = BTreeMap::new();
            for i in 0..STORM_UPDATES {
                let u = Update::nth(tag, i);
                match c.dispatch(sid.clone(), u.action()).await {
                    Ok(h) => {
                        sent.insert(h.client_seq, u);
                    }
                    // The daemon is gone: this one never left.
                    Err(_) => break,
                }
            }
            sent
        }));
    }

    // Kill -9 at the chosen moment.
    let waited = Instant::now();
    while acks.load(Ordering::SeqCst) < kill_after {
        assert!(waited.elapsed() < Duration::from_secs(120), "run {run}: only {} echoes arrived", acks.load(Ordering::SeqCst));
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    std::thread::sleep(Duration::from_micros(jitter_us));
    daemon.kill();
    killed.store(true, Ordering::SeqCst);

    let mut sent: [BTreeMap<i64, Update>; 2] = Default::default();
    for (i, s) in senders.into_iter().enumerate() {
        sent[i] = within("senders", s).await.expect("sender task");
    }
    let mut seen: Vec<Vec<ActionEnvelope>> = Vec::new();
    for c in collectors {
        seen.push(within("collectors", c).await.expect("collector task"));
    }
    for c in &clients {
        c.shutdown().await;
    }
    setup.shutdown().await;

    // Each client's acknowledged writes: its own echoes, unrejected.
    let mut acked: [BTreeSet<i64>; 2] = Default::default();
    let mut last_acked_seq = 0u64;
    for k in 0..2 {
        for env in &seen[k] {
            let Some(o) = &env.origin else { continue };
            if o.client_id != ids[k] {
                continue;
            }
            assert!(env.rejection_reason.is_none(), "run {run}: a storm update was rejected before the kill: {env:?}");
            assert_eq!(Update::of(&env.action).as_ref(), sent[k].get(&o.client_seq), "run {run}: the echo matches what was sent");
            acked[k].insert(o.client_seq);
            last_acked_seq = last_acked_seq.max(env.server_seq);
        }
    }
    assert!(acked[0].len() + acked[1].len() >= kill_after, "run {run}: fewer echoes recorded than counted");

    // The state as of the last acknowledged update: every storm envelope
    // up to it (either client saw the same stream), in serverSeq order.
    let mut stream: BTreeMap<u64, (String, i64, Update)> = BTreeMap::new();
    for env in seen.iter().flatten() {
        if let (Some(o), Some(u)) = (&env.origin, Update::of(&env.action)) {
            if ids.contains(&o.client_id) && env.rejection_reason.is_none() {
                stream.insert(env.server_seq, (o.client_id.clone(), o.client_seq, u));
            }
        } else if env.origin.is_none() {
            assert!(Update::of(&env.action).is_none(), "run {run}: the host changed a stored bit by itself: {env:?}");
        }
    }
    let mut at_last = start.clone();
    let mut applied: BTreeSet<(String, i64)> = BTreeSet::new();
    for (_, (client, seq, u)) in stream.range(..=last_acked_seq) {
        at_last.apply(u);
        applied.insert((client.clone(), *seq));
    }
    // Later, unacknowledged updates the store may also hold.
    let later: Vec<Update> = (0..2)
        .flat_map(|k| sent[k].iter().filter(|(seq, _)| !applied.contains(&(ids[k].clone(), **seq))).map(|(_, u)| u.clone()).collect::<Vec<_>>())
        .collect();

    // Restart: every store file parses, nothing is quarantined or left
    // half-written, and the session's bits are those of the last
    // acknowledged update or a later one.
    let daemon = Daemon::start(&data);
    // Answered once the store is read: the journal, where a write the kill
    // caught between its journal line and its file is, has been replayed
    // onto the record files by then.
    let c = connect_init(&daemon.url, &format!("storm-check-{run}")).await.0;
    within("ping", c.ping()).await.expect("ping after the restart");
    let sessions = data.join("sessions");
    for name in names(&sessions) {
        if name == "journal" {
            // The write-ahead journal (docs/ARCHITECTURE.md, "The store"):
            // replayed onto the record files at the start just made.
            continue;
        }
        assert!(name.ends_with(".json") && !name.starts_with('.'), "run {run}: unexpected store file {name}");
        read_record(&sessions.join(&name));
    }
    for name in names(&data.join("echo")) {
        // JSON lines (docs/ARCHITECTURE.md, "The echo agent's transcripts"):
        // a line the kill cut short is left out by the reader; every whole
        // line is JSON.
        let bytes = std::fs::read(data.join("echo").join(&name)).expect("read transcript");
        let whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        for line in bytes[..whole].split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            serde_json::from_slice::<Value>(line).unwrap_or_else(|e| panic!("run {run}: transcript {name} has a line that does not parse: {e}"));
        }
    }
    let record = read_record(&record_path(&data, &sid));
    let restored = Bits { title: record.title.to_string(), read: record.is_read, archived: record.is_archived };
    let title_ok = restored.title == at_last.title || later.contains(&Update::Title(restored.title.clone()));
    let read_ok = restored.read == at_last.read || later.contains(&Update::Read(restored.read));
    let archived_ok = restored.archived == at_last.archived || later.contains(&Update::Archived(restored.archived));
    assert!(
        title_ok && read_ok && archived_ok,
        "run {run}: restored {restored:?}, but the last acknowledged state is {at_last:?} (serverSeq {last_acked_seq}) \
         and no later update says otherwise"
    );
    let restored_from = if restored.title == at_last.title {
        format!("last acknowledged title {:?}", at_last.title)
    } else {
        format!("later unacknowledged title {:?} (last acknowledged {:?})", restored.title, at_last.title)
    };

    // The daemon serves what the store holds.
    let (state, _sub) = subscribe_session(&c, &sid).await;
    assert_eq!(state.title, restored.title, "run {run}");
    assert_eq!(state.status & IS_READ != 0, restored.read, "run {run}: read bit");
    assert_eq!(state.status & IS_ARCHIVED != 0, restored.archived, "run {run}: archived bit");
    within("ping", c.ping()).await.expect("ping");
    c.shutdown().await;
    StormResult {
        acked: [acked[0].len(), acked[1].len()],
        last_acked_seq,
        unacked_sent: later.len(),
        restored,
        restored_from,
    }
}

/// Two clients each send 200 rapid updates (title, read, archived) to one
/// session; the daemon is killed with SIGKILL at a seeded random moment;
/// after a restart every store file parses and no acknowledged write is
/// lost. Several kill points.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn write_storm_then_kill_9_loses_no_acknowledged_write() {
    let seed = std::env::var("AHPD_STORM_SEED").ok().and_then(|s| s.parse::<u64>().ok()).unwrap_or(STORM_SEED);
    let mut rng = Rng(seed | 1);
    let total = (2 * STORM_UPDATES) as u64;
    for run in 0..STORM_RUNS {
        // Spread the kill points over the storm: early, middle, late.
        let band = total * run as u64 / STORM_RUNS as u64;
        let kill_after = rng.range(band.max(1), band + total / STORM_RUNS as u64 - 10) as usize;
        let jitter_us = rng.range(0, 3_000);
        let r = storm_run(run, kill_after, jitter_us).await;
        eprintln!(
            "storm seed {seed} run {run}: SIGKILL after {kill_after} echoes + {jitter_us} us; acknowledged a={} b={} \
             (last at serverSeq {}), {} sent but unacknowledged; restored {:?} = {}",
            r.acked[0], r.acked[1], r.last_acked_seq, r.unacked_sent, r.restored, r.restored_from
        );
    }
}

// ---------------------------------------------------------------------------
// Pre-seeded damage
// ---------------------------------------------------------------------------

/// Store files of 4 KiB of NUL bytes, of 0 bytes, and cut off mid-object:
/// the daemon starts, lists the valid session, renames each damaged file to
/// `<name>.corrupt-<ms>` (never over an earlier one) and logs each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_store_files_are_quarantined_and_logged_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut daemon = Daemon::start(&data);
    let c = connect_init(&daemon.url, "damage-1").await.0;
    let (sid, _) = session_with_turns(&c, &["hello"]).await;
    c.shutdown().await;
    assert!(daemon.terminate().success(), "ahpd exited badly after SIGTERM");

    let sessions = data.join("sessions");
    let valid = std::fs::read(record_path(&data, &sid)).expect("the valid record");
    let damage: [(&str, Vec<u8>); 3] = [
        ("ahp-session@zeros.json", vec![0u8; 4096]),
        ("ahp-session@empty.json", Vec::new()),
        ("ahp-session@cut.json", valid[..valid.len() / 2].to_vec()),
    ];
    for round in 1..=2usize {
        for (name, bytes) in &damage {
            std::fs::write(sessions.join(name), bytes).expect("seed damage");
        }
        let from = log_len(&data);
        let mut daemon = Daemon::start(&data);
        let c = connect_init(&daemon.url, &format!("damage-{round}b")).await.0;
        let rows = list(&c).await;
        assert!(rows.iter().any(|s| s.resource == sid), "round {round}: the valid session is listed: {rows:?}");
        assert_eq!(rows.len(), 1, "round {round}: only the valid session: {rows:?}");
        within("ping", c.ping()).await.expect("ping");
        c.shutdown().await;
        assert!(daemon.terminate().success(), "ahpd exited badly after SIGTERM");

        let all = names(&sessions);
        let log = log_since(&data, from);
        for (name, bytes) in &damage {
            assert!(!sessions.join(name).exists(), "round {round}: {name} is moved aside");
            let aside: Vec<&String> = all.iter().filter(|n| n.starts_with(&format!("{name}.corrupt-"))).collect();
            assert_eq!(aside.len(), round, "round {round}: {name}: one quarantined copy per start, none overwritten: {all:?}");
            for n in &aside {
                let suffix = &n[name.len() + ".corrupt-".len()..];
                assert!(suffix.chars().all(|ch| ch.is_ascii_digit() || ch == '-'), "{n}");
                assert_eq!(&std::fs::read(sessions.join(n)).expect("read quarantined"), bytes, "{n} keeps the bytes");
            }
            let logged = log.lines().filter(|l| l.contains("does not parse") && l.contains(&format!("/{name} "))).count();
            assert_eq!(logged, 1, "round {round}: {name} logged once; log:\n{log}");
        }
        let kept = read_record(&record_path(&data, &sid));
        assert_eq!(kept.resource, sid);
        assert_eq!(&*kept.title, "hello");
    }
}

/// Issue 25: an echo transcript damaged while the daemon is stopped. At
/// start the pass over the transcripts finds it: the session is listed at
/// Error with words that say what to do; opening it fails with -32603 and
/// the same words; nothing a client reads names a server path; the file is
/// moved aside as a damaged record is (`<name>.corrupt-<ms>`, its bytes
/// kept) and the operator's log names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_transcript_is_listed_at_error_says_what_to_do_and_is_moved_aside() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut daemon = Daemon::start(&data);
    let c = connect_init(&daemon.url, "before").await.0;
    let (sid, chat) = session_with_turns(&c, &["hello"]).await;
    c.shutdown().await;
    assert!(daemon.terminate().success(), "ahpd exited badly after SIGTERM");

    let echo = data.join("echo");
    let files: Vec<String> = names(&echo).into_iter().filter(|n| n.ends_with(".json")).collect();
    let [name] = &files[..] else { panic!("one transcript: {files:?}") };
    let garbage = b"{\"format\": not a transcript\nat all\n".to_vec();
    std::fs::write(echo.join(name), &garbage).expect("damage the transcript");

    let from = log_len(&data);
    let mut daemon = Daemon::start(&data);
    let c = connect_init(&daemon.url, "after").await.0;
    let data_text = data.display().to_string();
    // Listed, at Error with what to do, once the first pass is merged.
    let row = within("the row goes to Error", async {
        loop {
            let rows = list(&c).await;
            let row = rows.into_iter().find(|r| r.resource == sid).expect("still listed");
            if row.status & 0x1f == 2 {
                return row;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let activity = row.activity.clone().unwrap_or_default();
    assert!(activity.contains("dispose") && activity.contains("backup"), "{activity}");
    assert!(!activity.contains(&data_text) && !activity.contains(".json"), "no server path: {activity}");
    // Opening it says the same, and no path.
    for channel in [&sid, &chat] {
        let e = rpc_error(within("subscribe", c.subscribe(channel.clone())).await.map(|(r, _)| r));
        assert_eq!(e.code, -32603, "{e:?}");
        assert!(e.message.contains("dispose") && e.message.contains("backup"), "{e:?}");
        assert!(!e.message.contains(&data_text) && !e.message.contains(".json"), "no server path: {e:?}");
    }
    // Moved aside, its bytes kept, and the log names it.
    assert!(!echo.join(name).exists(), "the damaged transcript is moved aside");
    let aside: Vec<String> = names(&echo).into_iter().filter(|n| n.starts_with(&format!("{name}.corrupt-"))).collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(std::fs::read(echo.join(&aside[0])).expect("read"), garbage);
    let log = log_since(&data, from);
    assert!(log.lines().any(|l| l.contains("cannot be read back") && l.contains(&format!("/{name} "))), "log:\n{log}");
    // Still listed at Error after another restart (the mark is the
    // record's), and disposing it works.
    c.shutdown().await;
    assert!(daemon.terminate().success(), "ahpd exited badly after SIGTERM");
    let mut daemon = Daemon::start(&data);
    let c = connect_init(&daemon.url, "again").await.0;
    let row = list(&c).await.into_iter().find(|r| r.resource == sid).expect("still listed");
    assert_eq!(row.status & 0x1f, 2, "{row:?}");
    let params = ahp::ahp_types::commands::DisposeSessionParams { channel: sid.clone(), meta: None };
    let r: Value = within("dispose", c.request("disposeSession", params)).await.expect("disposeSession");
    assert_eq!(r, Value::Null);
    assert!(list(&c).await.iter().all(|r| r.resource != sid), "gone once disposed");
    c.shutdown().await;
    assert!(daemon.terminate().success(), "ahpd exited badly after SIGTERM");
}

// ---------------------------------------------------------------------------
// A store write that fails
// ---------------------------------------------------------------------------

/// How the store directory was made unwritable.
enum Blocked {
    /// `chmod 0500`: works for an unprivileged user.
    ReadOnly(PathBuf),
    /// Root ignores permissions: the directory was moved aside and a plain
    /// file put in its place, so every write under it fails (ENOTDIR).
    Swapped { dir: PathBuf, aside: PathBuf },
}

/// Makes `dir` unwritable for the daemon, whoever runs the test.
///
/// `chmod 0500` is tried first and probed with a write; as root (CI) the
/// probe succeeds, so the directory is replaced by a file instead. Neither
/// `chattr +i` (needs CAP_LINUX_IMMUTABLE and a filesystem that has the
/// attribute, and leaves an undeletable directory if the test dies) nor a
/// read-only mount (needs mount rights) works everywhere; the swap does and
/// leaves the stored records untouched in the moved directory.
fn block_writes(dir: &Path) -> Blocked {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o500)).expect("chmod 0500");
    let probe = dir.join("probe-write");
    match std::fs::write(&probe, b"x") {
        Err(_) => Blocked::ReadOnly(dir.to_owned()),
        Ok(()) => {
            std::fs::remove_file(&probe).expect("remove probe");
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("chmod 0755");
            let aside = dir.with_extension("away");
            std::fs::rename(dir, &aside).expect("move the store aside");
            std::fs::write(dir, b"not a directory").expect("a file in its place");
            Blocked::Swapped { dir: dir.to_owned(), aside }
        }
    }
}

fn unblock(blocked: Blocked) {
    use std::os::unix::fs::PermissionsExt;
    match blocked {
        Blocked::ReadOnly(dir) => std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("chmod 0755"),
        Blocked::Swapped { dir, aside } => {
            std::fs::remove_file(&dir).expect("remove the file");
            std::fs::rename(aside, dir).expect("move the store back");
        }
    }
}

/// The store cannot be written for one update: the client gets the echo
/// with a rejection naming the store failure, the stored record is intact,
/// the daemon keeps serving, and once writable again an update succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_store_write_is_rejected_and_the_daemon_keeps_serving() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut daemon = Daemon::start(&data);
    let c = connect_init(&daemon.url, "ro-1").await.0;
    let (sid, _) = session_with_turns(&c, &["hello"]).await;
    let (_, mut ssub) = subscribe_session(&c, &sid).await;
    let path = record_path(&data, &sid);
    let before = settled_record(&c, &data, &sid).await;

    let blocked = block_writes(&data.join("sessions"));
    let how = match &blocked {
        Blocked::ReadOnly(_) => "chmod 0500",
        Blocked::Swapped { .. } => "store directory replaced by a file (running as root)",
    };
    let title = StateAction::SessionTitleChanged(SessionTitleChangedAction { title: "never saved".to_owned() });
    let h = within("dispatch", c.dispatch(sid.clone(), title)).await.expect("dispatch");
    let env = echo_of(&mut ssub, "ro-1", h.client_seq).await;
    let reason = env.rejection_reason.clone().unwrap_or_else(|| panic!("{how}: the update must be rejected: {env:?}"));
    assert!(reason.contains("store"), "{how}: the reason names the store failure: {reason}");

    // Still serving, with the old title.
    within("ping", c.ping()).await.expect("ping while the store is broken");
    let row = list(&c).await.into_iter().find(|s| s.resource == sid).expect("still listed");
    assert_eq!(row.title, "hello", "{how}: the refused title is not shown");
    let other = connect_init(&daemon.url, "ro-2").await.0;
    within("ping", other.ping()).await.expect("a new client is served");
    other.shutdown().await;

    unblock(blocked);
    assert_eq!(std::fs::read(&path).expect("the record"), before, "{how}: the stored record is intact");
    let title = StateAction::SessionTitleChanged(SessionTitleChangedAction { title: "saved".to_owned() });
    let h = within("dispatch", c.dispatch(sid.clone(), title)).await.expect("dispatch");
    let env = echo_of(&mut ssub, "ro-1", h.client_seq).await;
    assert!(env.rejection_reason.is_none(), "{how}: accepted once writable: {env:?}");
    assert_eq!(&*read_record(&path).title, "saved");
    c.shutdown().await;
    assert!(daemon.terminate().success(), "ahpd exited badly after SIGTERM");
    let daemon = Daemon::start(&data);
    let c = connect_init(&daemon.url, "ro-3").await.0;
    let row = list(&c).await.into_iter().find(|s| s.resource == sid).expect("listed after restart");
    assert_eq!(row.title, "saved");
    c.shutdown().await;
    eprintln!("store write blocked by: {how}");
}

// ---------------------------------------------------------------------------
// ahpd session export | import, ahpd sessions list
// ---------------------------------------------------------------------------


fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("an exit code")
}

/// Export a session the daemon ran, import it into another data directory,
/// and the daemon there serves it with its messages and takes a new turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_then_import_brings_a_session_back() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut daemon = Daemon::start(&data);
    let c = connect_init(&daemon.url, "cli-1").await.0;
    let (sid, chat) = session_with_turns(&c, &["hello", "again"]).await;
    c.shutdown().await;
    assert!(daemon.terminate().success(), "ahpd exited badly after SIGTERM");
    let d = data.to_str().expect("utf-8 path");

    // `session show` prints the row and every message in order, with who
    // sent the user's.
    let out = ahpd_cli(&["session", "show", &sid, "--data-dir", d], None);
    assert_eq!(code(&out), 0, "stderr: {}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains(&format!("session   {sid}")), "{shown}");
    let hello = shown.find("user [cli-1]: hello").expect("first message with its sender");
    let reply = shown.find("assistant: Echo: hello").expect("first reply");
    let again = shown.find("user [cli-1]: again").expect("second message");
    assert!(hello < reply && reply < again, "{shown}");
    assert_eq!(code(&ahpd_cli(&["session", "show", "ahp-session:/nope", "--data-dir", d], None)), 1);

    // Export to stdout and to a file: the same document.
    let out = ahpd_cli(&["session", "export", &sid, "--data-dir", d], None);
    assert_eq!(code(&out), 0, "stderr: {}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("export is JSON");
    let file = tmp.path().join("out.json");
    let f = file.to_str().expect("utf-8 path");
    let out = ahpd_cli(&["session", "export", &sid, "-o", f, "--data-dir", d], None);
    assert_eq!(code(&out), 0, "stderr: {}", text(&out.stderr));
    assert!(out.stdout.is_empty());
    let from_file: Value = serde_json::from_slice(&std::fs::read(&file).expect("read export")).expect("JSON");
    assert_eq!(from_file, doc);
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&file).expect("stat").permissions().mode() & 0o777, 0o600);
    }
    assert_eq!(doc["format"], "ahpd.session.v1");
    assert_eq!(doc["id"], sid.as_str());
    assert_eq!(doc["provider"], "echo");
    assert_eq!(doc["title"], "hello");
    assert_eq!(doc["workingDirectory"], "file:///tmp");
    let messages: Vec<(String, String, Option<String>)> = doc["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| (m["role"].as_str().unwrap_or("").to_owned(), m["content"].as_str().unwrap_or("").to_owned(), m["sender"].as_str().map(str::to_owned)))
        .collect();
    let expected = [
        ("user", "hello", Some("cli-1")),
        ("assistant", "Echo: hello", None),
        ("user", "again", Some("cli-1")),
        ("assistant", "Echo: again", None),
    ];
    assert_eq!(messages.len(), expected.len(), "{messages:?}");
    for (got, want) in messages.iter().zip(expected) {
        assert_eq!((got.0.as_str(), got.1.as_str(), got.2.as_deref()), want, "{messages:?}");
    }
    check_against_docs(&doc);

    // Import into a fresh data directory; the URI is printed.
    let data2 = tmp.path().join("data2");
    let d2 = data2.to_str().expect("utf-8 path");
    let out = ahpd_cli(&["session", "import", f, "--data-dir", d2], None);
    assert_eq!(code(&out), 0, "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), sid);
    assert!(text(&out.stderr).contains("next starts"), "{}", text(&out.stderr));

    // A second import of the same id gets a new URI; the first is untouched.
    let first = std::fs::read(record_path(&data2, &sid)).expect("record");
    let out = ahpd_cli(&["session", "import", "-", "--data-dir", d2], Some(&std::fs::read(&file).expect("read")));
    assert_eq!(code(&out), 0, "stderr: {}", text(&out.stderr));
    let second = text(&out.stdout).trim().to_owned();
    assert_eq!(second, format!("{sid}-imported-1"));
    assert_eq!(std::fs::read(record_path(&data2, &sid)).expect("record"), first);

    // sessions list: a table and JSON.
    let out = ahpd_cli(&["sessions", "list", "--data-dir", d2], None);
    assert_eq!(code(&out), 0, "stderr: {}", text(&out.stderr));
    let table = text(&out.stdout);
    let header = table.lines().next().expect("a header");
    for column in ["URI", "TITLE", "OWNER", "STATUS", "MODIFIED"] {
        assert!(header.contains(column), "{table}");
    }
    assert_eq!(table.lines().count(), 3, "{table}");
    assert!(table.lines().any(|l| l.starts_with(&format!("{sid} ")) && l.contains("hello") && l.contains("unread")), "{table}");
    let out = ahpd_cli(&["sessions", "list", "--json", "--data-dir", d2], None);
    assert_eq!(code(&out), 0);
    let rows: Value = serde_json::from_slice(&out.stdout).expect("list --json is JSON");
    let uris: BTreeSet<&str> = rows.as_array().expect("an array").iter().filter_map(|r| r["resource"].as_str()).collect();
    assert_eq!(uris, BTreeSet::from([sid.as_str(), second.as_str()]));
    assert!(rows[0]["isRead"].is_boolean() && rows[0]["modifiedAt"].is_string(), "{rows}");

    // The daemon picks the imports up when it starts, with their messages,
    // and the conversation goes on.
    let daemon = Daemon::start(&data2);
    let c = connect_init(&daemon.url, "cli-2").await.0;
    let listed: BTreeSet<String> = list(&c).await.into_iter().map(|s| s.resource).collect();
    assert!(listed.contains(&sid) && listed.contains(&second), "{listed:?}");
    let (state, _) = subscribe_session(&c, &sid).await;
    let chat2 = state.default_chat.clone().expect("a default chat");
    assert_eq!(chat2, chat, "the default chat keeps its URI");
    let (chat_state, mut csub) = subscribe_chat(&c, &chat2).await;
    let texts: Vec<String> = chat_state.turns.iter().map(markdown).collect();
    assert_eq!(texts, ["Echo: hello", "Echo: again"], "{:?}", chat_state.turns);
    turn(&c, &chat2, &mut csub, "t3", "more").await;
    c.shutdown().await;
}

/// Checks an export against the JSON Schema and the example in
/// docs/EXPORT.md: the schema is draft 2020-12, its required keys are in
/// the export, the export has no key the schema does not describe, and the
/// example parses as an export.
fn check_against_docs(doc: &Value) {
    let md = include_str!("../docs/EXPORT.md");
    let blocks: Vec<Value> = md
        .split("```json")
        .skip(1)
        .map(|b| b.split("```").next().unwrap_or(""))
        .map(|b| serde_json::from_str(b).unwrap_or_else(|e| panic!("a json block in docs/EXPORT.md does not parse: {e}\n{b}")))
        .collect();
    assert_eq!(blocks.len(), 2, "docs/EXPORT.md has the schema and one example");
    let (schema, example) = (&blocks[0], &blocks[1]);
    assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
    let keys = |v: &Value| -> BTreeSet<String> { v.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default() };
    let props = keys(&schema["properties"]);
    for required in schema["required"].as_array().expect("required") {
        assert!(doc.get(required.as_str().unwrap_or("")).is_some(), "the export lacks required {required}");
    }
    assert!(keys(doc).is_subset(&props), "export keys {:?} vs schema {props:?}", keys(doc));
    let message_props = keys(&schema["$defs"]["message"]["properties"]);
    for m in doc["messages"].as_array().expect("messages") {
        assert!(keys(m).is_subset(&message_props), "message keys {:?} vs schema {message_props:?}", keys(m));
    }
    let chat_props = keys(&schema["$defs"]["chat"]["properties"]);
    for c in doc["chats"].as_array().expect("chats") {
        assert!(keys(c).is_subset(&chat_props), "chat keys {:?} vs schema {chat_props:?}", keys(c));
    }
    let parsed: ExportedSession = serde_json::from_value(example.clone()).expect("the example is an export");
    assert_eq!(parsed.format, "ahpd.session.v1");
    assert!(keys(example).is_subset(&props));
}

/// A hostile id is refused before the data directory is touched; usage
/// errors exit 2; runtime errors exit 1 with a message.
#[test]
fn import_refuses_hostile_files_and_exit_codes_follow_the_convention() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let template = serde_json::json!({
        "format": "ahpd.session.v1", "id": "ahp-session:/ok", "provider": "echo", "title": "t",
        "workingDirectory": null, "createdAt": "2026-01-01T00:00:00.000Z", "modifiedAt": "2026-01-01T00:00:00.000Z",
        "config": {}, "owner": null,
        "messages": [{"role": "user", "content": "hi", "turnId": "t1"}],
        "chats": []
    });
    let data = tmp.path().join("never-created");
    let d = data.to_str().expect("utf-8 path");
    for id in ["ahp-session:/../../etc/passwd", "ahp-session:/..", "ahp-session:/a/b", "ahp-session:/a\\b", "ahp-session:/a\u{0}b", "ahp-session:/", "ahp-session:/a\nb"] {
        let mut doc = template.clone();
        doc["id"] = Value::String(id.to_owned());
        let file = tmp.path().join("hostile.json");
        std::fs::write(&file, serde_json::to_vec(&doc).expect("encode")).expect("write");
        let out = ahpd_cli(&["session", "import", file.to_str().expect("utf-8"), "--data-dir", d], None);
        assert_eq!(code(&out), 1, "{id:?}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains("refused"), "{id:?}: {}", text(&out.stderr));
        assert!(out.stdout.is_empty());
        assert!(!data.exists(), "{id:?}: nothing may be created");
    }
    // A file that is not an export at all.
    let junk = tmp.path().join("junk.json");
    std::fs::write(&junk, b"\0\0\0").expect("write");
    let out = ahpd_cli(&["session", "import", junk.to_str().expect("utf-8"), "--data-dir", d], None);
    assert_eq!(code(&out), 1);
    assert!(!data.exists());
    // Usage errors.
    assert_eq!(code(&ahpd_cli(&["session", "import"], None)), 2);
    assert_eq!(code(&ahpd_cli(&["session", "export", "ahp-session:/../x", "--data-dir", d], None)), 2);
    assert_eq!(code(&ahpd_cli(&["sessions", "list", "--bogus"], None)), 2);
    assert_eq!(code(&ahpd_cli(&["session"], None)), 2);
    // Runtime errors.
    let out = ahpd_cli(&["session", "export", "ahp-session:/nope", "--data-dir", d], None);
    assert_eq!(code(&out), 1);
    assert!(text(&out.stderr).starts_with("ahpd: "), "{}", text(&out.stderr));
    assert_eq!(code(&ahpd_cli(&["sessions", "list", "--data-dir", d], None)), 1);
    // --help says when an import is picked up.
    let help = text(&ahpd_cli(&["session", "import", "--help"], None).stdout);
    assert!(help.contains("next starts"), "{help}");
}
