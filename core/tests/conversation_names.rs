//! A conversation a chat's start named is durable before a turn goes to
//! it (docs/DECISIONS.md, 8 and 32), and a chat moved into a session whose
//! state is not held keeps its state for that session's wake (17). Both
//! found by the 100,000-seed sim run at d163ccb: a turn clients were shown
//! completed came back interrupted after a crash
//! (`completed_turn_stays_complete`, seeds 3406 and 28889), and a moved
//! chat's turn lost its duration under a client that watched it
//! (`rule3_mirror_matches_host`, seed 5821).

use std::collections::BTreeMap;

use ahp_types::state::{ChatState, Turn, TurnState};
use ahpd_core::record::SessionRecord;
use ahpd_core::testkit::Harness;
use ahpd_core::{BackendCmd, Config, OpId, Outcome, StoreCmd};
use serde_json::{json, Value};

/// Session `s1` with one turn, and a second chat `c2` whose agent's start
/// is unanswered, with turn `t-new` in it written ahead (durable in
/// `disk`). Returns (session, chat, the start's op).
fn turn_waiting_for_a_chat_start(h: &mut Harness, disk: &mut BTreeMap<String, SessionRecord>) -> (String, String, OpId) {
    h.connect(1, "c1");
    let (uri, _) = h.session_with_turn("s1");
    h.settle();
    let chat = "ahp-chat:/ahp-session-s1-c2".to_owned();
    let id = h.send_request(1, "createChat", json!({"channel": uri, "chat": chat}));
    h.durable(disk);
    assert!(h.take_reply(1, id).is_some(), "createChat answered");
    let start = h.backend_cmds().into_iter().find_map(|(op, c, cmd)| (c == chat && matches!(cmd, BackendCmd::Start { .. })).then_some(op));
    h.request(1, "subscribe", json!({"channel": chat}));
    h.dispatch(1, &chat, 5, json!({
        "type": "chat/turnStarted", "turnId": "t-new", "startedAt": "2026-12-01T00:00:00.000Z",
        "message": {"text": "first words", "origin": {"kind": "user"}}
    }));
    h.durable(disk);
    (uri, chat, start.expect("the new chat's agent is started"))
}

fn sends_to(cmds: &[(OpId, String, BackendCmd)], chat: &str) -> usize {
    cmds.iter().filter(|(_, c, cmd)| c == chat && matches!(cmd, BackendCmd::Send { .. })).count()
}

/// The record writes pending that name `conversation` for `chat`.
fn writes_naming(ops: &[(OpId, StoreCmd)], chat: &str, conversation: &str) -> Vec<OpId> {
    ops.iter()
        .filter_map(|(op, cmd)| match cmd {
            StoreCmd::Put { record, .. } => {
                record.chats.iter().any(|c| c.resource == chat && &*c.conversation_id == conversation && !c.fresh).then_some(*op)
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_turn_goes_to_its_agent_once_the_conversation_its_start_named_is_durable_and_comes_back_complete_after_a_crash() {
    let mut h = Harness::new(Config::default());
    let mut disk = BTreeMap::new();
    let (_, chat, start) = turn_waiting_for_a_chat_start(&mut h, &mut disk);
    // The agent picks its own id for the new conversation.
    h.done(start, Outcome::Started { conversation_id: "srv-9".into(), history: Vec::new() });
    assert_eq!(sends_to(&h.backend_cmds(), &chat), 0, "the turn waits for the name to be durable");
    let ops = h.store_ops();
    let naming = writes_naming(&ops, &chat, "srv-9");
    assert_eq!(naming.len(), 1, "one write carries the name: {ops:?}");
    for (op, cmd) in ops {
        if let StoreCmd::Put { record, .. } = cmd {
            disk.insert(record.key().into_owned(), *record);
        }
        h.done(op, Outcome::Ok);
    }
    assert_eq!(sends_to(&h.backend_cmds(), &chat), 1, "the turn goes once the name is durable");
    // The agent completes the turn; its end's write (durable only with the
    // next write) is lost with the machine.
    h.agent_reply(&chat, "t-new", "Echo: first words");
    drop(h);
    let mut h = Harness::with_records(Config::default(), disk.values().cloned().collect());
    h.connect(1, "c1");
    let id = h.send_request(1, "subscribe", json!({"channel": chat}));
    let mut resumed = None;
    for (op, c, cmd) in h.backend_cmds() {
        match cmd {
            BackendCmd::Start { conversation_id, resume, .. } if c == chat => {
                resumed = Some((conversation_id.clone(), resume));
                let history = vec![ahpd_core::session::state::replayed_turn("t-new".into(), None, "first words".into())];
                h.done(op, Outcome::Started { conversation_id, history });
            }
            BackendCmd::Start { conversation_id, .. } => h.done(op, Outcome::Started { conversation_id, history: Vec::new() }),
            _ => h.done(op, Outcome::Ok),
        }
    }
    h.settle();
    assert_eq!(resumed, Some(("srv-9".to_owned(), true)), "the wake resumes the conversation the agent named");
    let reply = h.take_reply(1, id).expect("subscribe answered");
    let turns = reply["result"]["snapshot"]["state"]["turns"].as_array().cloned().unwrap_or_default();
    let states: Vec<(&str, &str)> = turns.iter().map(|t| (t["id"].as_str().unwrap_or(""), t["state"].as_str().unwrap_or(""))).collect();
    assert_eq!(states, [("t-new", "complete")], "{reply}");
}

#[test]
fn a_turn_held_for_a_conversations_name_fails_when_the_store_refuses_the_write() {
    let mut h = Harness::new(Config::default());
    let mut disk = BTreeMap::new();
    let (_, chat, start) = turn_waiting_for_a_chat_start(&mut h, &mut disk);
    h.frames(1);
    h.done(start, Outcome::Started { conversation_id: "srv-9".into(), history: Vec::new() });
    let ops = h.store_ops();
    let naming = writes_naming(&ops, &chat, "srv-9");
    assert_eq!(naming.len(), 1, "{ops:?}");
    for (op, _) in ops {
        let outcome = if naming.contains(&op) { Outcome::Failed { message: "disk full".into() } } else { Outcome::Ok };
        h.done(op, outcome);
    }
    h.settle_store();
    assert_eq!(sends_to(&h.backend_cmds(), &chat), 0, "the turn never reaches the agent");
    let frames = h.frames(1);
    let err = frames.iter().find(|f| f["params"]["action"]["type"] == "chat/error").unwrap_or_else(|| panic!("the turn fails: {frames:?}"));
    assert_eq!(err["params"]["action"]["turnId"], "t-new");
    let words = err["params"]["action"]["part"]["error"]["message"].as_str().unwrap_or_default();
    assert!(words.contains("not saved") && words.contains("disk full"), "{err}");
}

/// The session falls asleep while the write naming a new chat's
/// conversation is in flight (its default chat's agent exits; a failed
/// creation does the same, `lifecycle.rs`): the turn held for the name
/// ends with the session's other work, so nothing is left held in a
/// session asleep (sim seed 2933 with the first fix alone: the turn stayed
/// held for ever), and the write's answer starts nothing.
#[test]
fn a_turn_held_for_a_conversations_name_ends_when_the_session_falls_asleep() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c1");
    let (uri, default_chat) = h.session_with_turn("s1");
    let chat = "ahp-chat:/ahp-session-s1-c2".to_owned();
    let id = h.send_request(1, "createChat", json!({"channel": uri, "chat": chat}));
    h.settle_store();
    assert!(h.take_reply(1, id).is_some(), "createChat answered");
    let start = h.backend_cmds().into_iter().find_map(|(op, c, cmd)| (c == chat && matches!(cmd, BackendCmd::Start { .. })).then_some(op)).expect("the chat's agent starts");
    h.start_turn(1, &chat, 5, "t-new", "first words");
    h.done(start, Outcome::Started { conversation_id: "srv-9".into(), history: Vec::new() });
    let ops = h.store_ops();
    assert_eq!(writes_naming(&ops, &chat, "srv-9").len(), 1, "{ops:?}");
    assert_eq!(sends_to(&h.backend_cmds(), &chat), 0, "the turn waits for the name");
    h.input(ahpd_core::Input::Backend { chat: default_chat, event: ahpd_core::BackendEvent::Exited { message: "exit status: 1".into() } });
    let session = h.host.view().sessions.get(&uri).expect("the session");
    assert_eq!(session.phase().name(), "asleep", "the agent exited");
    assert!(session.work().pending_sends.is_empty(), "no turn is held in a session asleep");
    assert!(held_chat(&h, &uri, &chat).is_none_or(|c| c.active_turn.is_none()), "the held turn ended");
    h.backend_cmds();
    for (op, _) in ops {
        h.done(op, Outcome::Ok);
    }
    let seen = h.settle();
    assert!(!seen.iter().any(|(c, _)| *c == chat), "nothing starts for the name's answer: {seen:?}");
    assert_eq!(h.host.view().sessions.get(&uri).map(|s| s.phase().name()), Some("asleep"));
}

/// The chat state `session` holds for `chat`, if its state is held.
fn held_chat(h: &Harness, session: &str, chat: &str) -> Option<ChatState> {
    h.host.view().sessions.get(session)?.resident()?.chats.get(chat).cloned()
}

#[test]
fn a_chat_moved_into_a_session_whose_state_is_not_held_keeps_its_state_for_that_sessions_wake() {
    let config = Config { residency_limit: 0, sleep_after_ms: 0, ..Config::default() };
    let mut h = Harness::new(config.clone());
    h.connect(1, "c1");
    let (a, _) = h.session_with_turn("a");
    let (b, _) = h.session_with_turn("b");
    let side = "ahp-chat:/side".to_owned();
    let r = h.send_request(1, "createChat", json!({"channel": a, "chat": side}));
    h.settle();
    assert_eq!(h.take_reply(1, r).expect("createChat reply")["result"], Value::Null);
    h.start_turn(1, &side, 50, "s1", "side question");
    h.settle_backend();
    h.agent_reply(&side, "s1", "Echo: side question");
    h.settle();
    // A new process, every write durable: neither session's state is held.
    let records: Vec<SessionRecord> = h.host.view().sessions.values().map(|s| s.record().clone()).collect();
    let mut h = Harness::with_records(config, records);
    h.connect(1, "c1");
    // A client watches the side chat (waking `a`), and a turn runs there:
    // its duration is the host's own clock, which no transcript keeps.
    let id = h.send_request(1, "subscribe", json!({"channel": side}));
    h.settle();
    let r = h.take_reply(1, id).expect("subscribe answered");
    assert!(r.get("result").is_some(), "{r}");
    h.start_turn(1, &side, 51, "s2", "again");
    h.settle_backend();
    h.advance(40);
    h.agent_reply(&side, "s2", "Echo: again");
    h.settle();
    let before = held_chat(&h, &a, &side).expect("the watched chat's state is held");
    let last: &Turn = before.turns.last().expect("a turn");
    assert!(last.state == TurnState::Complete && last.duration.is_some_and(|d| d > 0), "{last:?}");
    assert!(h.host.view().sessions.get(&b).is_some_and(|s| s.resident().is_none()), "b's state is not held");
    let rid = h.send_request(1, "moveChat", json!({"channel": side, "destination": {"kind": "session", "session": b}}));
    h.settle();
    let reply = h.take_reply(1, rid).expect("moveChat reply");
    assert!(reply.get("result").is_some(), "{reply}");
    // `b` wakes; the backend hands the side chat's history back without
    // the host's durations (the harness's agent: no history at all).
    let id = h.send_request(1, "subscribe", json!({"channel": b}));
    h.settle();
    assert!(h.take_reply(1, id).is_some_and(|r| r.get("result").is_some()), "b's snapshot");
    assert_eq!(held_chat(&h, &b, &side), Some(before), "the chat's state is the one its watcher holds");
}
