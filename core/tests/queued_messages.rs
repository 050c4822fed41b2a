//! Issue 23, part A: a chat's queued messages. Each is the host's own
//! durable data (written ahead, like a turn's sender), runs as the chat's
//! next turn when the running one ends, in the queue's order, and is never
//! lost across a restart nor run twice; a queue keeps its session from
//! sleeping and wakes nothing by itself.

use std::collections::BTreeMap;

use ahpd_core::testkit::Harness;
use ahpd_core::{BackendCmd, Config, SessionRecord};
use serde_json::json;

/// The agent ends turn `turn` of `chat` with a reply, its record writes
/// left for the test to make durable.
fn agent_ends(h: &mut Harness, chat: &str, turn: &str) {
    for action in [
        json!({"type": "chat/responsePart", "turnId": turn, "part": {"kind": "markdown", "id": "p1", "content": "Echo"}}),
        json!({"type": "chat/turnComplete", "turnId": turn, "duration": 0}),
    ] {
        let action = serde_json::from_value(action).expect("an action");
        h.input(ahpd_core::Input::Backend { chat: chat.into(), event: ahpd_core::BackendEvent::Action(action) });
    }
}

fn queue(h: &mut Harness, chat: &str, seq: i64, id: &str, text: &str) {
    h.dispatch(1, chat, seq, json!({"type": "chat/pendingMessageSet", "kind": "queued", "id": id, "message": {"text": text, "origin": {"kind": "user"}}}));
}

/// The turns sent to the agent among `cmds`: (turn id, text).
fn sends(cmds: &[(String, BackendCmd)]) -> Vec<(String, String)> {
    cmds.iter()
        .filter_map(|(_, c)| match c {
            BackendCmd::Send { turn_id, message, .. } => Some((turn_id.clone(), message.text.clone())),
            _ => None,
        })
        .collect()
}

/// A session whose turn `t1` runs, with `q1` then `q2` queued behind it,
/// every write durable in `disk`.
fn two_queued(h: &mut Harness, disk: &mut BTreeMap<String, SessionRecord>) -> String {
    h.connect(1, "c1");
    let (_, chat) = h.create(1, "k1");
    h.start_turn(1, &chat, 1, "t1", "hello");
    h.settle_backend();
    queue(h, &chat, 2, "q1", "one");
    queue(h, &chat, 3, "q2", "two");
    h.durable(disk);
    chat
}

#[test]
fn a_queued_message_is_written_ahead_with_who_queued_it_and_runs_when_the_turn_ends() {
    let mut h = Harness::new(Config::default());
    let mut disk = BTreeMap::new();
    let chat = two_queued(&mut h, &mut disk);
    let record = disk.values().next().expect("stored");
    let queued: Vec<(&str, &str, &str)> = record.chats[0].queued.iter().map(|q| (q.id.as_str(), q.message.text.as_str(), q.sender.as_str())).collect();
    assert_eq!(queued, [("q1", "one", "c1"), ("q2", "two", "c1")]);
    assert!(sends(&h.settle_backend()).is_empty(), "nothing runs while t1 does");

    agent_ends(&mut h, &chat, "t1");
    h.durable(&mut disk);
    assert_eq!(sends(&h.settle_backend()), [("q1".to_owned(), "one".to_owned())]);
    let record = disk.values().next().expect("stored");
    assert_eq!(record.chats[0].queued.len(), 1, "q1 left the queue in the write that started it");
    assert_eq!(record.chats[0].senders.get("q1").map(String::as_str), Some("c1"), "its turn is recorded as sent by who queued it");
    agent_ends(&mut h, &chat, "q1");
    h.durable(&mut disk);
    assert_eq!(sends(&h.settle_backend()), [("q2".to_owned(), "two".to_owned())]);
    agent_ends(&mut h, &chat, "q2");
    h.durable(&mut disk);
    assert!(sends(&h.settle_backend()).is_empty(), "the queue ran out");
}

#[test]
fn a_restart_keeps_the_queue_wakes_nothing_and_the_next_wake_runs_it_once() {
    let mut h = Harness::new(Config::default());
    let mut disk = BTreeMap::new();
    two_queued(&mut h, &mut disk);
    // kill -9 while t1 runs.
    let mut h = Harness::with_records(Config::default(), disk.values().cloned().collect());
    h.connect(1, "c1");
    assert!(h.backend_cmds().is_empty(), "a queue wakes nothing by itself");
    let chat = "ahp-chat:/ahp-session@k1";
    let id = h.send_request(1, "subscribe", json!({"channel": chat}));
    let mut seen = Vec::new();
    for _ in 0..4 {
        h.durable(&mut disk);
        seen.extend(h.settle_backend());
    }
    let reply = h.take_reply(1, id).expect("subscribe answered");
    assert_eq!(sends(&seen), [("q1".to_owned(), "one".to_owned())], "the wake runs the first queued message, once");
    let state = &reply["result"]["snapshot"]["state"];
    assert_eq!(state["queuedMessages"][0]["id"], "q1", "the snapshot shows the queue the record kept: {state}");
    let record = disk.values().next().expect("stored");
    let queued: Vec<&str> = record.chats[0].queued.iter().map(|q| q.id.as_str()).collect();
    assert_eq!(queued, ["q2"]);
}

#[test]
fn reorder_and_remove_are_kept_as_the_reducer_shows_them() {
    let mut h = Harness::new(Config::default());
    let mut disk = BTreeMap::new();
    let chat = two_queued(&mut h, &mut disk);
    queue(&mut h, &chat, 4, "q3", "three");
    h.dispatch(1, &chat, 5, json!({"type": "chat/queuedMessagesReordered", "order": ["q3", "q1"]}));
    h.dispatch(1, &chat, 6, json!({"type": "chat/pendingMessageRemoved", "kind": "queued", "id": "q1"}));
    h.durable(&mut disk);
    let record = disk.values().next().expect("stored");
    let queued: Vec<&str> = record.chats[0].queued.iter().map(|q| q.id.as_str()).collect();
    assert_eq!(queued, ["q3", "q2"]);
    // A removal of what is not queued is refused, and changes nothing.
    h.dispatch(1, &chat, 7, json!({"type": "chat/pendingMessageRemoved", "kind": "queued", "id": "q1"}));
    let refused = h.frames(1).into_iter().any(|f| f["params"]["rejectionReason"].as_str().is_some_and(|r| r.contains("no such pending message")));
    assert!(refused);
}

#[test]
fn a_record_written_before_queues_loads_with_none() {
    let mut h = Harness::new(Config::default());
    let mut disk = BTreeMap::new();
    h.connect(1, "c1");
    let (_, chat) = h.create(1, "old");
    h.dispatch(1, &chat, 1, json!({"type": "chat/turnStarted", "turnId": "t1", "startedAt": "2026-12-01T00:00:00.000Z", "message": {"text": "hi", "origin": {"kind": "user"}}}));
    h.durable(&mut disk);
    let text = serde_json::to_string(disk.values().next().expect("stored")).expect("encode");
    assert!(!text.contains("\"queued\""), "an empty queue is not written: {text}");
    let back: SessionRecord = serde_json::from_str(&text).expect("decode");
    assert!(back.chats[0].queued.is_empty());
    // And one with a queue round-trips.
    let mut disk = BTreeMap::new();
    let mut h = Harness::new(Config::default());
    two_queued(&mut h, &mut disk);
    let record = disk.values().next().expect("stored").clone();
    let back: SessionRecord = serde_json::from_str(&serde_json::to_string(&record).expect("encode")).expect("decode");
    assert_eq!(back, record);
}

#[test]
fn a_steering_message_is_kept_replaced_and_run_before_the_queue() {
    let mut h = Harness::new(Config::default());
    let mut disk = BTreeMap::new();
    let chat = two_queued(&mut h, &mut disk);
    for (seq, id) in [(4, "s1"), (5, "s2")] {
        h.dispatch(1, &chat, seq, json!({"type": "chat/pendingMessageSet", "kind": "steering", "id": id, "message": {"text": format!("steer {id}"), "origin": {"kind": "user"}}}));
    }
    // An id that names a queued message cannot also steer.
    h.dispatch(1, &chat, 6, json!({"type": "chat/pendingMessageSet", "kind": "steering", "id": "q1", "message": {"text": "x", "origin": {"kind": "user"}}}));
    h.durable(&mut disk);
    let record = disk.values().next().expect("stored");
    assert_eq!(record.chats[0].steering.as_ref().map(|s| s.id.as_str()), Some("s2"), "one steering message, the last");
    agent_ends(&mut h, &chat, "t1");
    h.durable(&mut disk);
    assert_eq!(sends(&h.settle_backend()), [("s2".to_owned(), "steer s2".to_owned())], "held, then run first");
    let record = disk.values().next().expect("stored");
    assert!(record.chats[0].steering.is_none());
    assert_eq!(record.chats[0].queued.len(), 2);
}
