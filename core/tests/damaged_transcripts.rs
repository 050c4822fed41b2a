//! Issue 25: a backend transcript that cannot be read back. The session
//! stays listed, its row at Error with words that say what to do and name
//! no server path; a wake fails with those words (-32603) whatever the
//! backend said; the mark is in the record, so a restart keeps it; a start
//! that reads the conversation again (the transcript restored) clears it.
//! Found either by a resume (`Outcome::TranscriptDamaged`) or by a pass
//! over the transcripts (`Outcome::Scanned::damaged`).

use ahpd_core::session::damage::DAMAGED_TRANSCRIPT;
use ahpd_core::testkit::Harness;
use ahpd_core::{BackendCmd, Config, Effect, Outcome, SessionRecord, StoreCmd};
use serde_json::{json, Value};

const ERROR: u64 = 2;

fn config() -> Config {
    Config { residency_limit: 0, ..Config::default() }
}

/// A session `a` with one turn, as the store keeps it; a host restarted
/// from it, connection 1 signed in and connection 2 watching the root.
fn restarted() -> (Harness, String, String, SessionRecord) {
    let mut h = Harness::new(config());
    h.connect(1, "c1");
    let (a, chat) = h.session_with_turn("a");
    let record = h.host.view().sessions.get(&a).expect("held").record().clone();
    let mut h = Harness::with_records(config(), vec![record.clone()]);
    h.connect(1, "c1");
    h.connect(2, "watcher");
    (h, a, chat, record)
}

fn row(h: &mut Harness, uri: &str) -> Value {
    h.list(1).into_iter().find(|r| r["resource"] == uri).expect("listed")
}

/// The record the host wrote last, if it wrote one; every write pending is
/// answered as durable.
fn written(h: &mut Harness) -> Option<SessionRecord> {
    let mut last = None;
    for (op, command) in h.store_ops() {
        if let StoreCmd::Put { record, .. } = command {
            last = Some(*record);
        }
        h.done(op, Outcome::Ok);
    }
    h.settle_store();
    last
}

fn subscribe_and_answer(h: &mut Harness, chat: &str, outcome: impl FnOnce(String) -> Outcome) -> Value {
    let rid = h.send_request(1, "subscribe", json!({"channel": chat}));
    let cmds = h.backend_cmds();
    let start = cmds.iter().find_map(|(op, _, c)| match c {
        BackendCmd::Start { resume: true, conversation_id, .. } => Some((*op, conversation_id.clone())),
        _ => None,
    });
    let (op, conversation_id) = start.unwrap_or_else(|| panic!("a resume: {cmds:?}"));
    for (other, _, c) in &cmds {
        if !matches!(c, BackendCmd::Start { .. }) {
            h.done(*other, Outcome::Ok);
        }
    }
    h.done(op, outcome(conversation_id));
    h.take_reply(1, rid).expect("answered")
}

#[test]
fn a_resume_that_finds_the_transcript_damaged_lists_the_session_at_error_with_what_to_do() {
    let (mut h, a, chat, _) = restarted();
    assert_eq!(row(&mut h, &a)["status"].as_u64().unwrap_or(0) & 0x1f, 1, "idle before anybody opens it");
    h.frames(2);
    let r = subscribe_and_answer(&mut h, &chat, |_| Outcome::TranscriptDamaged { detail: "line 3: expected value".into() });
    assert_eq!(r["error"]["code"], -32603, "{r}");
    let message = r["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains(DAMAGED_TRANSCRIPT), "{message}");
    assert!(message.contains("dispose") && message.contains("backup") && !message.contains('/'), "no path, a next step: {message}");
    // The row: Error, with the words; root subscribers were told.
    let listed = row(&mut h, &a);
    assert_eq!(listed["status"].as_u64().unwrap_or(0) & 0x1f, ERROR, "{listed}");
    assert_eq!(listed["activity"], DAMAGED_TRANSCRIPT);
    let told = h.frames(2).into_iter().any(|f| f["method"] == "root/sessionSummaryChanged" && f["params"]["changes"]["activity"] == DAMAGED_TRANSCRIPT);
    assert!(told, "the root's subscribers hear of it");
    // Written: a restart keeps the mark.
    let record = written(&mut h).expect("the mark is written");
    assert!(record.chats.iter().any(|c| c.damaged), "{record:?}");
    let mut h = Harness::with_records(config(), vec![record]);
    h.connect(1, "c1");
    assert_eq!(row(&mut h, &a)["activity"], DAMAGED_TRANSCRIPT, "listed at Error after a restart, before anybody opens it");
    // The backend moved the file aside: it now says there is no such
    // conversation, and the client still reads what to do.
    let r = subscribe_and_answer(&mut h, &chat, |id| Outcome::Failed { message: format!("echo: no conversation {id} to resume") });
    assert!(r["error"]["message"].as_str().unwrap_or("").contains(DAMAGED_TRANSCRIPT), "{r}");
    // Restored from a backup: the next open reads it and the mark goes.
    let r = subscribe_and_answer(&mut h, &chat, |id| Outcome::Started { conversation_id: id, history: Vec::new() });
    assert!(r["result"]["snapshot"].is_object(), "{r}");
    let listed = row(&mut h, &a);
    assert_eq!(listed["status"].as_u64().unwrap_or(0) & 0x1f, 1, "{listed}");
    assert!(listed.get("activity").is_none_or(Value::is_null), "{listed}");
    assert!(written(&mut h).is_some_and(|r| r.chats.iter().all(|c| !c.damaged)), "the clear is written");
}

#[test]
fn a_pass_over_the_transcripts_that_cannot_read_one_lists_its_session_at_error() {
    let (mut h, a, _, record) = restarted();
    let scans = h.take(|e| match e {
        Effect::Scan { op, provider } => Some((*op, provider.clone())),
        _ => None,
    });
    let (op, _) = scans.iter().find(|(_, p)| p == "echo").expect("a pass over echo's transcripts at start");
    h.frames(2);
    let conversation = record.chats[0].conversation_id.to_string();
    h.done(*op, Outcome::Scanned { rows: Vec::new(), damaged: vec![conversation, "nobody@holds-this".into()] });
    let listed = row(&mut h, &a);
    assert_eq!(listed["status"].as_u64().unwrap_or(0) & 0x1f, ERROR, "{listed}");
    assert_eq!(listed["activity"], DAMAGED_TRANSCRIPT);
    assert!(h.frames(2).iter().any(|f| f["method"] == "root/sessionSummaryChanged"), "told");
}

/// Found by the sim once its echo backend damaged transcripts (seed 6): a
/// turn sent to a sleeping session (its state still held) whose transcript
/// is marked damaged applies at once and wakes it to try the transcript
/// again; while it tried, the row said Error and the chat's state said in
/// progress (rows and state must agree). The row now follows the work, and
/// rests at Error with what to do again once the retry fails.
#[test]
fn a_turn_sent_to_a_damaged_session_lists_it_working_while_the_wake_tries_again() {
    let mut h = Harness::new(Config { residency_limit: 0, sleep_after_ms: 10, ..Config::default() });
    h.connect(1, "c1");
    let (a, chat) = h.session_with_turn("a");
    let mut seq = 0;
    let mut turn_then_damaged = |h: &mut Harness, turn: &str| -> Value {
        h.advance(100);
        h.settle_store();
        seq += 1;
        h.start_turn(1, &chat, seq, turn, "once more");
        let cmds = h.backend_cmds();
        let op = cmds
            .iter()
            .find_map(|(op, _, c)| matches!(c, BackendCmd::Start { resume: true, .. }).then_some(*op))
            .unwrap_or_else(|| panic!("the turn wakes the session: {cmds:?}"));
        let working = row(h, &a);
        h.done(op, Outcome::TranscriptDamaged { detail: "line 3: expected value".into() });
        written(h);
        working
    };
    turn_then_damaged(&mut h, "t2");
    assert_eq!(row(&mut h, &a)["activity"], DAMAGED_TRANSCRIPT, "marked");
    let working = turn_then_damaged(&mut h, "t3");
    assert_eq!(working["status"].as_u64().unwrap_or(0) & 0x1f, 8, "in progress while the wake tries: {working}");
    assert_ne!(working["activity"], DAMAGED_TRANSCRIPT, "{working}");
    let resting = row(&mut h, &a);
    assert_eq!(resting["status"].as_u64().unwrap_or(0) & 0x1f, ERROR, "{resting}");
    assert_eq!(resting["activity"], DAMAGED_TRANSCRIPT, "{resting}");
}
