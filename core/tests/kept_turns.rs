//! Issue 19: "an echoed turn is durable history from its echo on". A turn
//! the host echoed is in its chat's history after the process stops
//! mid-turn (an interrupted turn, ended in an error, with its message),
//! after a client's cancel the backend never recorded, and in exports;
//! never twice when the backend has it too.

use std::collections::BTreeMap;

use ahp_types::state::Turn;
use ahpd_core::{BackendCmd, Config, Outcome, SessionRecord};
use ahpd_core::testkit::Harness;
use serde_json::{json, Value};


fn turn_started(h: &mut Harness, chat: &str, seq: i64, turn: &str, text: &str) {
    h.dispatch(1, chat, seq, json!({
        "type": "chat/turnStarted", "turnId": turn, "startedAt": "2026-12-01T00:00:00.000Z",
        "message": {"text": text, "origin": {"kind": "user"}}
    }));
}

/// A session whose first turn `t1` completed and whose second `t2` is
/// running, every write durable in `disk`.
fn second_turn_running(h: &mut Harness, disk: &mut BTreeMap<String, SessionRecord>) -> (String, String) {
    h.connect(1, "c1");
    let (uri, chat) = h.create(1, "k1");
    turn_started(h, &chat, 1, "t1", "hello");
    h.durable(disk);
    h.settle_backend();
    h.agent_reply(&chat, "t1", "Echo: hello");
    turn_started(h, &chat, 2, "t2", "hello again");
    h.durable(disk);
    h.settle_backend();
    (uri, chat)
}

/// A restarted host wakes the chat with the backend handing back
/// `history`; returns the chat snapshot's turns.
fn wake_with(h: &mut Harness, chat: &str, history: Vec<Turn>) -> Vec<Value> {
    h.connect(1, "c1");
    let id = h.send_request(1, "subscribe", json!({"channel": chat}));
    let mut history = Some(history);
    for _ in 0..4 {
        for (op, _, cmd) in h.backend_cmds() {
            if let BackendCmd::Start { conversation_id, .. } = cmd {
                h.done(op, Outcome::Started { conversation_id, history: history.take().unwrap_or_default() });
            } else {
                h.done(op, Outcome::Ok);
            }
        }
        h.answer_inspects();
        h.settle_store();
    }
    let reply = h.take_reply(1, id).expect("subscribe answered");
    reply["result"]["snapshot"]["state"]["turns"].as_array().cloned().unwrap_or_else(|| panic!("{reply}"))
}

fn replayed(id: &str, text: &str) -> Turn {
    ahpd_core::session::state::replayed_turn(id.to_owned(), None, text.to_owned())
}

#[test]
fn a_turn_running_when_the_process_stopped_comes_back_as_an_interrupted_error_with_its_message() {
    let mut h = Harness::new(Config::default());
    let mut disk = BTreeMap::new();
    let (uri, chat) = second_turn_running(&mut h, &mut disk);
    // kill -9: a new process reads the store back; the backend only ever
    // finished t1.
    let mut h = Harness::with_records(Config::default(), disk.values().cloned().collect());
    let turns = wake_with(&mut h, &chat, vec![replayed("t1", "hello")]);
    let ids: Vec<&str> = turns.iter().map(|t| t["id"].as_str().unwrap_or("")).collect();
    assert_eq!(ids, ["t1", "t2"], "{turns:?}");
    assert_eq!(turns[1]["state"], "error");
    assert_eq!(turns[1]["message"]["text"], "hello again");
    assert_eq!(turns[1]["responseParts"][0]["error"]["message"], ahpd_core::kept_turns::INTERRUPTED);
    // The session's row rests in Error, as its last turn ended.
    let rows = h.list(1);
    let row = rows.iter().find(|r| r["resource"] == uri.as_str()).expect("listed");
    assert_eq!(row["status"].as_u64().unwrap_or(0) & 0x1F, 2, "{row}");
}

#[test]
fn a_turn_the_backend_replays_is_not_repeated() {
    let mut h = Harness::new(Config::default());
    let mut disk = BTreeMap::new();
    let (_, chat) = second_turn_running(&mut h, &mut disk);
    let mut h = Harness::with_records(Config::default(), disk.values().cloned().collect());
    // An ACP agent replays the conversation under its own turn ids: t2's
    // message is there, after t1's.
    let turns = wake_with(&mut h, &chat, vec![replayed("acp-1", "hello"), replayed("acp-2", "hello again")]);
    let texts: Vec<&str> = turns.iter().map(|t| t["message"]["text"].as_str().unwrap_or("")).collect();
    assert_eq!(texts, ["hello", "hello again"], "{turns:?}");
}

#[test]
fn a_cancelled_turn_the_backend_never_recorded_stays_cancelled_and_a_finished_one_is_let_go() {
    let mut h = Harness::new(Config::default());
    let mut disk = BTreeMap::new();
    let (_, chat) = second_turn_running(&mut h, &mut disk);
    h.dispatch(1, &chat, 3, json!({"type": "chat/turnCancelled", "turnId": "t2", "duration": 0}));
    h.durable(&mut disk);
    let record = disk.values().next().expect("stored").clone();
    let kept: Vec<&str> = record.chats[0].kept.iter().map(|k| k.id.as_str()).collect();
    assert_eq!(kept, ["t2"], "t1 ended by the backend is let go; t2 the host ended is kept");
    let mut h = Harness::with_records(Config::default(), disk.values().cloned().collect());
    let turns = wake_with(&mut h, &chat, vec![replayed("t1", "hello")]);
    assert_eq!(turns.len(), 2, "{turns:?}");
    assert_eq!(turns[1]["state"], "cancelled");
    // An export of the same record and history carries the turn too.
    let history: BTreeMap<String, Vec<Turn>> = [(chat.clone(), vec![replayed("t1", "hello")])].into_iter().collect();
    let doc = ahpd_core::export::export(&record, &history);
    assert!(doc.messages.iter().any(|m| m.role == "user" && m.content == "hello again" && m.turn_id == "t2"), "{:?}", doc.messages);
}

#[test]
fn a_draft_is_kept_without_a_wake_and_comes_back_with_the_chat() {
    let mut h = Harness::new(Config::default());
    let mut disk = BTreeMap::new();
    let (_, chat) = second_turn_running(&mut h, &mut disk);
    h.agent_reply(&chat, "t2", "Echo: hello again");
    h.durable(&mut disk);
    // A restart: the session is asleep and its state not held.
    let mut h = Harness::with_records(Config::default(), disk.values().cloned().collect());
    h.connect(1, "c1");
    h.dispatch(1, &chat, 1, json!({"type": "chat/draftChanged", "draft": {"text": "half a thought", "origin": {"kind": "user"}}}));
    h.durable(&mut disk);
    assert!(
        h.backend_cmds().iter().all(|(_, _, c)| !matches!(c, BackendCmd::Start { .. })),
        "a draft wakes nothing"
    );
    let record = disk.values().next().expect("stored");
    assert_eq!(record.chats[0].draft.as_ref().map(|m| m.text.as_str()), Some("half a thought"));
    // The next waker brings the chat back with its draft.
    let id = h.send_request(1, "subscribe", json!({"channel": chat}));
    for _ in 0..4 {
        for (op, _, cmd) in h.backend_cmds() {
            if let BackendCmd::Start { conversation_id, .. } = cmd {
                h.done(op, Outcome::Started { conversation_id, history: Vec::new() });
            }
        }
        h.answer_inspects();
        h.settle_store();
    }
    let reply = h.take_reply(1, id).expect("subscribe answered");
    assert_eq!(reply["result"]["snapshot"]["state"]["draft"]["text"], "half a thought", "{reply}");
}

/// The agent ends `turn` in `chat` (`chat/turnComplete`), the store's
/// writes left unanswered.
fn agent_completes(h: &mut Harness, chat: &str, turn: &str) {
    use ahp_types::actions::{ChatTurnCompleteAction, StateAction};
    let done = StateAction::ChatTurnComplete(ChatTurnCompleteAction { turn_id: turn.into(), duration: 0, meta: None });
    h.input(ahpd_core::Input::Backend { chat: chat.into(), event: ahpd_core::BackendEvent::Action(done) });
}

/// Issue 21: the record write of a turn its agent ended is durable with the
/// next write (no fsync of its own); a machine crash that loses it brings
/// the turn back as the agent's history has it, completed, not as an
/// interrupted error. A turn the host ended is written durably at once: how
/// it ended is in that write only.
#[test]
fn a_turn_its_agent_ended_rides_the_next_write_and_comes_back_completed_if_that_write_is_lost() {
    use ahpd_core::{Durability, StoreCmd};
    let mut h = Harness::new(Config::default());
    let mut disk = BTreeMap::new();
    let (_, chat) = second_turn_running(&mut h, &mut disk);
    let kept: Vec<&str> = disk.values().next().expect("stored").chats[0].kept.iter().map(|k| k.id.as_str()).collect();
    assert_eq!(kept, ["t2"], "the running turn is in the durable record");
    agent_completes(&mut h, &chat, "t2");
    let writes: Vec<Durability> = h.store_ops().into_iter().filter_map(|(_, c)| match c {
        StoreCmd::Put { durability, .. } => Some(durability),
        _ => None,
    }).collect();
    assert_eq!(writes, [Durability::WithNext], "the turn's end is written with the next write");
    // The machine crashes before any other write: the record on disk is the
    // turn start's. The agent's history has t2, completed.
    let mut h = Harness::with_records(Config::default(), disk.values().cloned().collect());
    let mut t2 = replayed("t2", "hello again");
    t2.state = ahp_types::state::TurnState::Complete;
    let turns = wake_with(&mut h, &chat, vec![replayed("t1", "hello"), t2]);
    let shown: Vec<(&str, &str)> = turns.iter().map(|t| (t["id"].as_str().unwrap_or(""), t["state"].as_str().unwrap_or(""))).collect();
    assert_eq!(shown, [("t1", "complete"), ("t2", "complete")], "{turns:?}");
    let rows = h.list(1);
    assert_eq!(rows[0]["status"].as_u64().unwrap_or(0) & 0x1F, 1, "the row is idle once the wake found the turn: {:?}", rows[0]);
    // A turn the host ends (a client's cancel) is written durable now.
    turn_started(&mut h, &chat, 3, "t3", "third");
    h.durable(&mut disk);
    h.settle_backend();
    h.dispatch(1, &chat, 4, json!({"type": "chat/turnCancelled", "turnId": "t3", "duration": 0}));
    let writes: Vec<Durability> = h.store_ops().into_iter().filter_map(|(_, c)| match c {
        StoreCmd::Put { durability, .. } => Some(durability),
        _ => None,
    }).collect();
    assert_eq!(writes, [Durability::Now], "a cancel's end is durable before it is answered");
}
