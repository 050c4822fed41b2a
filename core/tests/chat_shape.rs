//! A chat's shape (issue 23, part B): a chat's own read and archived bits
//! (`chat/isReadChanged`, `chat/isArchivedChanged`), durable in its record
//! and shown on the session's list of chats and the catalogue row.

use std::collections::BTreeMap;

use ahpd_core::testkit::Harness;
use ahpd_core::{BackendCmd, Config, SessionRecord};
use serde_json::{json, Value};

const READ: u64 = 32;
const ARCHIVED: u64 = 64;

fn chat_row(h: &mut Harness, session: &str, chat: &str) -> Value {
    let row = h.list(1).into_iter().find(|r| r["resource"] == session).expect("row");
    row["chats"].as_array().into_iter().flatten().find(|c| c["resource"] == chat).cloned().expect("chat on the row")
}

/// A session `s1` with a second chat `ahp-chat:/second`, subscribed to
/// both chats and the session on connection 1.
fn two_chats() -> (Harness, String, String) {
    let mut h = Harness::new(Config { residency_limit: 0, sleep_after_ms: 0, ..Config::default() });
    h.connect(1, "c1");
    let (uri, chat) = h.session_with_turn("s1");
    let r = h.send_request(1, "createChat", json!({"channel": uri, "chat": "ahp-chat:/second"}));
    h.settle();
    assert_eq!(h.take_reply(1, r).expect("reply")["result"], Value::Null);
    for channel in [&uri, &chat, &"ahp-chat:/second".to_owned()] {
        h.request(1, "subscribe", json!({"channel": channel}));
    }
    h.frames(1);
    (h, uri, chat)
}

#[test]
fn a_chat_marked_read_and_archived_shows_it_on_its_own_summary_only() {
    let (mut h, uri, chat) = two_chats();
    h.dispatch(1, "ahp-chat:/second", 1, json!({"type": "chat/isReadChanged", "isRead": true}));
    h.dispatch(1, "ahp-chat:/second", 2, json!({"type": "chat/isArchivedChanged", "isArchived": true}));
    h.settle_store();
    let frames = h.frames(1);
    let echoes: Vec<&Value> = frames.iter().filter(|f| f["method"] == "action" && f["params"]["channel"] == "ahp-chat:/second").collect();
    assert_eq!(echoes.len(), 2, "{frames:?}");
    assert!(echoes.iter().all(|f| f["params"].get("rejectionReason").is_none()), "{echoes:?}");
    // The session's list of chats is told (session/chatUpdated).
    let updated: Vec<u64> = frames
        .iter()
        .filter(|f| f["params"]["action"]["type"] == "session/chatUpdated" && f["params"]["action"]["chat"] == "ahp-chat:/second")
        .filter_map(|f| f["params"]["action"]["changes"]["status"].as_u64())
        .collect();
    assert!(updated.last().is_some_and(|s| s & (READ | ARCHIVED) == READ | ARCHIVED), "{frames:?}");
    let second = chat_row(&mut h, &uri, "ahp-chat:/second");
    assert_eq!(second["status"].as_u64().unwrap_or(0) & (READ | ARCHIVED), READ | ARCHIVED, "{second}");
    // Only the addressed chat: the default chat and the session are not.
    let default = chat_row(&mut h, &uri, &chat);
    assert_eq!(default["status"].as_u64().unwrap_or(0) & (READ | ARCHIVED), 0, "{default}");
    let row = h.list(1).into_iter().find(|r| r["resource"] == uri).expect("row");
    assert_eq!(row["status"].as_u64().unwrap_or(0) & (READ | ARCHIVED), 0, "the session's own bits: {row}");
}

#[test]
fn the_default_chat_is_archived_only_with_its_session() {
    let (mut h, _uri, chat) = two_chats();
    h.dispatch(1, &chat, 1, json!({"type": "chat/isArchivedChanged", "isArchived": true}));
    h.settle_store();
    let frames = h.frames(1);
    let echo = frames.iter().find(|f| f["method"] == "action" && f["params"]["channel"] == chat).expect("echo");
    assert!(echo["params"]["rejectionReason"].as_str().is_some_and(|r| r.contains("session/isArchivedChanged")), "{echo}");
    // Read is the chat's own, the default chat's too.
    h.dispatch(1, &chat, 2, json!({"type": "chat/isReadChanged", "isRead": true}));
    h.settle_store();
    let frames = h.frames(1);
    let echo = frames.iter().find(|f| f["method"] == "action" && f["params"]["channel"] == chat).expect("echo");
    assert!(echo["params"].get("rejectionReason").is_none(), "{echo}");
}

#[test]
fn a_chats_bits_are_durable_and_taken_without_a_wake() {
    let (mut h, uri, _chat) = two_chats();
    let mut disk = BTreeMap::new();
    h.durable(&mut disk);
    h.dispatch(1, "ahp-chat:/second", 1, json!({"type": "chat/isReadChanged", "isRead": true}));
    h.durable(&mut disk);
    let records: Vec<SessionRecord> = disk.values().cloned().collect();
    // A restart reads them back, and the row says them with nothing held.
    let mut h = Harness::with_records(Config::default(), records.clone());
    h.connect(1, "c1");
    let second = chat_row(&mut h, &uri, "ahp-chat:/second");
    assert_eq!(second["status"].as_u64().unwrap_or(0) & READ, READ, "{second}");
    // Archived while asleep: no wake, written, on the row.
    let mut disk: BTreeMap<String, SessionRecord> = records.into_iter().map(|r| (r.key().into_owned(), r)).collect();
    h.dispatch(1, "ahp-chat:/second", 2, json!({"type": "chat/isArchivedChanged", "isArchived": true}));
    h.durable(&mut disk);
    assert!(!h.backend_cmds().iter().any(|(_, _, c)| matches!(c, BackendCmd::Start { .. })), "no wake");
    assert_eq!(h.host.view().sessions.get(uri.as_str()).expect("session").phase().name(), "asleep");
    let second = chat_row(&mut h, &uri, "ahp-chat:/second");
    assert_eq!(second["status"].as_u64().unwrap_or(0) & (READ | ARCHIVED), READ | ARCHIVED, "{second}");
    let stored = disk.values().find(|r| r.resource == uri).expect("record");
    let rec = stored.chats.iter().find(|c| c.resource == "ahp-chat:/second").expect("chat record");
    assert_eq!(u64::from(rec.status) & (READ | ARCHIVED), READ | ARCHIVED);
    // Woken, the chat's state and the session's list carry them.
    let id = h.send_request(1, "subscribe", json!({"channel": "ahp-chat:/second"}));
    h.settle();
    let snap = h.take_reply(1, id).expect("the subscribe is answered once the session woke");
    assert_eq!(snap["result"]["snapshot"]["state"]["status"].as_u64().unwrap_or(0) & (READ | ARCHIVED), READ | ARCHIVED, "{snap}");
}

// ---- Rewind (`chat/truncated`) ----

fn turn_ids(h: &mut Harness, chat: &str) -> Vec<String> {
    let snap = h.request(1, "subscribe", json!({"channel": chat}));
    snap["result"]["snapshot"]["state"]["turns"].as_array().into_iter().flatten().filter_map(|t| t["id"].as_str().map(str::to_owned)).collect()
}

fn rejection(h: &mut Harness, chat: &str) -> Option<String> {
    let frames = h.frames(1);
    let echo = frames.iter().rev().find(|f| f["method"] == "action" && f["params"]["channel"] == chat && f["params"]["action"]["type"] == "chat/truncated").cloned().expect("the truncate's echo");
    echo["params"]["rejectionReason"].as_str().map(str::to_owned)
}

/// A session `r1` whose default chat ran turns t1, t2, t3.
fn three_turns() -> (Harness, String, String) {
    let mut h = Harness::new(Config { residency_limit: 0, sleep_after_ms: 0, ..Config::default() });
    h.connect(1, "c1");
    let (uri, chat) = h.session_with_turn("r1");
    for (i, t) in ["t2", "t3"].iter().enumerate() {
        h.start_turn(1, &chat, 10 + i as i64, t, &format!("message {t}"));
        h.settle_backend();
        h.agent_reply(&chat, t, "ok");
    }
    h.request(1, "subscribe", json!({"channel": chat}));
    h.frames(1);
    (h, uri, chat)
}

#[test]
fn a_rewind_keeps_turns_up_to_the_one_named_and_asks_the_backend_to_forget_the_rest() {
    let (mut h, uri, chat) = three_turns();
    let mut disk = BTreeMap::new();
    h.durable(&mut disk);
    h.dispatch(1, &chat, 1, json!({"type": "chat/truncated", "turnId": "t1"}));
    // Written ahead: the record owes the backend the forget before the echo.
    let puts = h.store_ops();
    let written = puts.iter().find_map(|(_, c)| match c { ahpd_core::StoreCmd::Put { record, .. } => Some(record.clone()), _ => None }).expect("a write");
    let rec = written.chats.iter().find(|c| c.resource == chat).expect("chat");
    assert_eq!(*rec.forgetting, vec!["t2".to_owned(), "t3".to_owned()]);
    assert!(h.frames(1).iter().all(|f| f["params"]["action"]["type"] != "chat/truncated"), "no echo before the write is durable");
    for (op, _) in puts {
        h.done(op, ahpd_core::input::Outcome::Ok);
    }
    assert_eq!(rejection(&mut h, &chat), None);
    let forgets: Vec<Vec<String>> = h.backend_cmds().into_iter().filter_map(|(_, _, c)| match c { BackendCmd::Forget { turn_ids, .. } => Some(turn_ids), _ => None }).collect();
    assert_eq!(forgets, vec![vec!["t2".to_owned(), "t3".to_owned()]]);
    assert_eq!(turn_ids(&mut h, &chat), vec!["t1".to_owned()]);
    let _ = uri;
}

#[test]
fn a_rewind_is_refused_while_a_turn_runs_for_an_unknown_turn_and_where_the_agent_cannot_forget() {
    let (mut h, _uri, chat) = three_turns();
    h.start_turn(1, &chat, 20, "t4", "long");
    h.settle_backend();
    h.dispatch(1, &chat, 21, json!({"type": "chat/truncated", "turnId": "t1"}));
    h.settle_store();
    assert!(rejection(&mut h, &chat).is_some_and(|r| r.contains("turn is running")));
    h.agent_reply(&chat, "t4", "done");
    h.dispatch(1, &chat, 22, json!({"type": "chat/truncated", "turnId": "nope"}));
    h.settle_store();
    assert!(rejection(&mut h, &chat).is_some_and(|r| r.contains("no such turn")));
    assert_eq!(turn_ids(&mut h, &chat).len(), 4, "nothing changed");

    let mut cfg = Config::default();
    cfg.agents = vec![ahpd_core::AgentSpec { forgets: false, ..ahpd_core::AgentSpec::echo() }];
    let mut h = Harness::new(cfg);
    h.connect(1, "c1");
    let (_uri, chat) = h.session_with_turn("r2");
    h.request(1, "subscribe", json!({"channel": chat}));
    h.frames(1);
    h.dispatch(1, &chat, 2, json!({"type": "chat/truncated"}));
    h.settle_store();
    assert!(rejection(&mut h, &chat).is_some_and(|r| r.contains("cannot forget")));
    assert_eq!(turn_ids(&mut h, &chat), vec!["t1".to_owned()]);
}

#[test]
fn a_crash_between_the_rewind_and_the_forget_shows_the_rewound_history_and_asks_again() {
    let (mut h, _uri, chat) = three_turns();
    let mut disk = BTreeMap::new();
    h.durable(&mut disk);
    h.dispatch(1, &chat, 1, json!({"type": "chat/truncated", "turnId": "t2"}));
    h.durable(&mut disk);
    // The process dies before the backend forgot: its history still has t3.
    let mut h = Harness::with_records(Config::default(), disk.values().cloned().collect());
    h.connect(1, "c1");
    h.send_request(1, "subscribe", json!({"channel": chat}));
    let starts: Vec<_> = h.take(|e| match e {
        ahpd_core::Effect::Backend { op, command: BackendCmd::Start { conversation_id, .. }, .. } => Some((*op, conversation_id.clone())),
        _ => None,
    });
    assert!(!starts.is_empty(), "the subscribe wakes it");
    let turn = |id: &str| ahpd_core::session::state::replayed_turn(id.to_owned(), None, format!("message {id}"));
    for (op, conversation_id) in starts {
        let history = if conversation_id.contains("r1") { vec![turn("t1"), turn("t2"), turn("t3")] } else { Vec::new() };
        h.done(op, ahpd_core::input::Outcome::Started { conversation_id, history });
    }
    let forgets: Vec<Vec<String>> = h.backend_cmds().into_iter().filter_map(|(_, _, c)| match c { BackendCmd::Forget { turn_ids, .. } => Some(turn_ids), _ => None }).collect();
    assert_eq!(forgets, vec![vec!["t3".to_owned()]], "asked again at the start");
    assert_eq!(turn_ids(&mut h, &chat), vec!["t1".to_owned(), "t2".to_owned()], "the rewound history, not the backend's");
    // A new turn cannot take the id of a turn whose forget is owed.
    h.start_turn(1, &chat, 5, "t3", "again");
    let frames = h.frames(1);
    assert!(frames.iter().any(|f| f["params"]["rejectionReason"].as_str().is_some_and(|r| r.contains("already used"))), "{frames:?}");
}

// ---- Forks and side chats (`createChat` with a `source`) ----

#[test]
fn a_fork_starts_with_its_sources_turns_through_the_one_named_and_keeps_them() {
    let (mut h, uri, chat) = three_turns();
    let mut disk = BTreeMap::new();
    h.durable(&mut disk);
    let r = h.send_request(1, "createChat", json!({"channel": uri, "chat": "ahp-chat:/forked", "source": {"kind": "fork", "chat": chat, "turnId": "t2"}}));
    h.durable(&mut disk);
    h.settle();
    assert_eq!(h.take_reply(1, r).expect("reply")["result"], Value::Null);
    let snap = h.request(1, "subscribe", json!({"channel": "ahp-chat:/forked"}));
    let state = &snap["result"]["snapshot"]["state"];
    let ids: Vec<&str> = state["turns"].as_array().into_iter().flatten().filter_map(|t| t["id"].as_str()).collect();
    assert_eq!(ids, ["t1", "t2"], "{state}");
    assert_eq!(state["origin"], json!({"kind": "fork", "chat": chat, "turnId": "t2"}));
    // A turn in the fork follows them; the source is untouched.
    h.start_turn(1, "ahp-chat:/forked", 30, "f1", "in the fork");
    h.settle_backend();
    h.agent_reply("ahp-chat:/forked", "f1", "ok");
    assert_eq!(turn_ids(&mut h, &chat), ["t1", "t2", "t3"]);
    // A restart reads the fork back with its copied turns in front of what
    // its own conversation holds.
    h.durable(&mut disk);
    let mut h = Harness::with_records(Config::default(), disk.values().cloned().collect());
    h.connect(1, "c1");
    let id = h.send_request(1, "subscribe", json!({"channel": "ahp-chat:/forked"}));
    let starts: Vec<_> = h.take(|e| match e {
        ahpd_core::Effect::Backend { op, chat, command: BackendCmd::Start { conversation_id, .. }, .. } => Some((*op, chat.clone(), conversation_id.clone())),
        _ => None,
    });
    let turn = |id: &str| ahpd_core::session::state::replayed_turn(id.to_owned(), None, format!("message {id}"));
    for (op, chat, conversation_id) in starts {
        let history = if chat == "ahp-chat:/forked" { vec![turn("f1")] } else { Vec::new() };
        h.done(op, ahpd_core::input::Outcome::Started { conversation_id, history });
    }
    h.settle();
    let snap = h.take_reply(1, id).expect("the subscribe is answered");
    let ids: Vec<&str> = snap["result"]["snapshot"]["state"]["turns"].as_array().into_iter().flatten().filter_map(|t| t["id"].as_str()).collect();
    assert_eq!(ids, ["t1", "t2", "f1"]);
}

#[test]
fn a_side_chat_starts_empty_from_a_running_turn_and_bad_sources_are_refused() {
    let (mut h, uri, chat) = three_turns();
    h.start_turn(1, &chat, 40, "t4", "still going");
    h.settle_backend();
    let r = h.send_request(1, "createChat", json!({"channel": uri, "chat": "ahp-chat:/side", "source": {"kind": "sideChat", "chat": chat, "turnId": "t4"}}));
    h.settle();
    assert_eq!(h.take_reply(1, r).expect("reply")["result"], Value::Null);
    let snap = h.request(1, "subscribe", json!({"channel": "ahp-chat:/side"}));
    let state = &snap["result"]["snapshot"]["state"];
    assert_eq!(state["turns"], json!([]), "{state}");
    assert_eq!(state["origin"]["kind"], "sideChat");
    // A fork of the running turn, of an unknown turn, of another session's
    // chat: refused with a reason.
    for (source, words) in [
        (json!({"kind": "fork", "chat": chat, "turnId": "t4"}), "has ended"),
        (json!({"kind": "fork", "chat": chat, "turnId": "zz"}), "has ended"),
        (json!({"kind": "sideChat", "chat": chat, "turnId": "zz"}), "names a turn"),
        (json!({"kind": "fork", "chat": "ahp-chat:/elsewhere", "turnId": "t1"}), "this session"),
    ] {
        let r = h.send_request(1, "createChat", json!({"channel": uri, "chat": "ahp-chat:/refused", "source": source}));
        h.settle();
        let reply = h.take_reply(1, r).expect("reply");
        assert_eq!(reply["error"]["code"], -32602, "{reply}");
        assert!(reply["error"]["message"].as_str().is_some_and(|m| m.contains(words)), "{reply}");
    }
    // The root advertises forks and side chats for the echo agent.
    let root = h.request(1, "subscribe", json!({"channel": "ahp-root://"}));
    let echo = root["result"]["snapshot"]["state"]["agents"].as_array().into_iter().flatten().find(|a| a["provider"] == "echo").cloned().expect("echo");
    assert_eq!(echo["capabilities"]["multipleChats"], json!({"fork": true, "sideChat": true}));
}

#[test]
fn an_agent_that_makes_no_forks_refuses_a_source_and_does_not_advertise_one() {
    let mut cfg = Config::default();
    cfg.agents = vec![ahpd_core::AgentSpec { forks: false, ..ahpd_core::AgentSpec::echo() }];
    let mut h = Harness::new(cfg);
    h.connect(1, "c1");
    let (uri, chat) = h.session_with_turn("nf");
    let r = h.send_request(1, "createChat", json!({"channel": uri, "chat": "ahp-chat:/nf-fork", "source": {"kind": "fork", "chat": chat, "turnId": "t1"}}));
    h.settle();
    let reply = h.take_reply(1, r).expect("reply");
    assert!(reply["error"]["message"].as_str().is_some_and(|m| m.contains("not offered by this agent")), "{reply}");
    let root = h.request(1, "subscribe", json!({"channel": "ahp-root://"}));
    let echo = root["result"]["snapshot"]["state"]["agents"][0].clone();
    assert_eq!(echo["capabilities"]["multipleChats"], json!({}), "{echo}");
}
