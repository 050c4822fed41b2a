//! Issue 23, "Steering messages": a steering message is handed to the
//! running turn where the chat's agent steers (the echo agent), taken at the
//! agent's next safe point and then removed by the host; where the agent
//! does not steer, or the turn ends before it takes it, it is held and runs
//! as the chat's next turn (`core/src/session/steering.rs`,
//! docs/DECISIONS.md 18).

use std::collections::BTreeMap;

use ahpd_core::testkit::Harness;
use ahpd_core::{AgentSpec, BackendCmd, BackendEvent, Config, Input, SessionRecord};
use serde_json::{json, Value};

fn steer(h: &mut Harness, chat: &str, seq: i64, id: &str, text: &str) {
    h.dispatch(1, chat, seq, json!({"type": "chat/pendingMessageSet", "kind": "steering", "id": id, "message": {"text": text, "origin": {"kind": "user"}}}));
}

/// The steering messages handed to the agent among `cmds`: (turn, id, text).
fn steers(cmds: &[(String, BackendCmd)]) -> Vec<(String, String, String)> {
    cmds.iter()
        .filter_map(|(_, c)| match c {
            BackendCmd::Steer { turn_id, id, message } => Some((turn_id.clone(), id.clone(), message.text.clone())),
            _ => None,
        })
        .collect()
}

fn sends(cmds: &[(String, BackendCmd)]) -> Vec<String> {
    cmds.iter()
        .filter_map(|(_, c)| match c {
            BackendCmd::Send { turn_id, .. } => Some(turn_id.clone()),
            _ => None,
        })
        .collect()
}

fn agent_ends(h: &mut Harness, chat: &str, turn: &str) {
    let action = serde_json::from_value(json!({"type": "chat/turnComplete", "turnId": turn, "duration": 0})).expect("an action");
    h.input(Input::Backend { chat: chat.into(), event: BackendEvent::Action(action) });
}

fn taken(h: &mut Harness, chat: &str, turn: &str, id: &str) {
    h.input(Input::Backend { chat: chat.into(), event: BackendEvent::SteeringTaken { turn_id: turn.into(), id: id.into() } });
}

/// The action envelopes conn 1 was sent (`action`, `origin`, ...), as JSON.
fn actions(h: &mut Harness) -> Vec<Value> {
    h.frames(1).into_iter().filter(|f| f["method"] == "action").map(|f| f["params"].clone()).collect()
}

/// A session whose turn `t1` the agent has, its chat subscribed by conn 1.
fn running(h: &mut Harness, disk: &mut BTreeMap<String, SessionRecord>) -> String {
    h.connect(1, "c1");
    let (_, chat) = h.create(1, "k1");
    h.request(1, "subscribe", json!({"channel": chat}));
    h.start_turn(1, &chat, 1, "t1", "hello");
    h.settle_backend();
    h.durable(disk);
    h.frames(1);
    chat
}

#[test]
fn a_steering_message_goes_to_the_running_turn_and_leaves_once_taken() {
    let mut h = Harness::new(Config::default());
    let mut disk = BTreeMap::new();
    let chat = running(&mut h, &mut disk);
    steer(&mut h, &chat, 2, "s1", "left instead");
    h.durable(&mut disk);
    let cmds = h.settle_backend();
    assert_eq!(steers(&cmds), [("t1".to_owned(), "s1".to_owned(), "left instead".to_owned())], "handed to the running turn once durable");
    assert_eq!(disk.values().next().expect("stored").chats[0].steering.as_ref().map(|s| s.id.as_str()), Some("s1"), "held until taken");

    taken(&mut h, &chat, "t1", "s1");
    let seen = actions(&mut h);
    let removed: Vec<&Value> = seen.iter().filter(|e| e["action"]["type"] == "chat/pendingMessageRemoved").collect();
    assert_eq!(removed.len(), 1, "{seen:?}");
    assert_eq!(removed[0]["action"]["kind"], "steering");
    assert_eq!(removed[0]["action"]["id"], "s1");
    assert!(removed[0]["origin"].is_null(), "the host's removal: {}", removed[0]);
    h.durable(&mut disk);
    assert!(disk.values().next().expect("stored").chats[0].steering.is_none(), "off the record once taken");

    agent_ends(&mut h, &chat, "t1");
    h.durable(&mut disk);
    assert!(sends(&h.settle_backend()).is_empty(), "a taken steering message does not run again as a turn");
}

#[test]
fn a_steering_message_the_turn_did_not_take_runs_as_the_next_turn() {
    let mut h = Harness::new(Config::default());
    let mut disk = BTreeMap::new();
    let chat = running(&mut h, &mut disk);
    steer(&mut h, &chat, 2, "s1", "one");
    steer(&mut h, &chat, 3, "s2", "two");
    h.durable(&mut disk);
    let handed = steers(&h.settle_backend());
    assert_eq!(handed.last().map(|s| s.1.as_str()), Some("s2"), "the newest is handed over: {handed:?}");
    // The agent's word about a message since replaced changes nothing.
    taken(&mut h, &chat, "t1", "s1");
    h.durable(&mut disk);
    assert_eq!(disk.values().next().expect("stored").chats[0].steering.as_ref().map(|s| s.id.as_str()), Some("s2"));
    // So does one for another turn.
    taken(&mut h, &chat, "t0", "s2");
    agent_ends(&mut h, &chat, "t1");
    h.durable(&mut disk);
    assert_eq!(sends(&h.settle_backend()), ["s2"], "held, then run as the next turn");
    assert!(disk.values().next().expect("stored").chats[0].steering.is_none());
}

#[test]
fn an_agent_that_does_not_steer_is_never_handed_one() {
    let mut cfg = Config::default();
    cfg.agents = vec![AgentSpec { steers: false, ..AgentSpec::echo() }];
    let mut h = Harness::new(cfg);
    let mut disk = BTreeMap::new();
    let chat = running(&mut h, &mut disk);
    steer(&mut h, &chat, 2, "s1", "one");
    h.durable(&mut disk);
    assert!(steers(&h.settle_backend()).is_empty());
    agent_ends(&mut h, &chat, "t1");
    h.durable(&mut disk);
    assert_eq!(sends(&h.settle_backend()), ["s1"], "held, then run as the next turn");
}

#[test]
fn a_steering_message_set_while_its_turn_waits_for_a_wake_is_handed_once_the_agent_has_the_turn() {
    let cfg = Config::default();
    let sleep_ms = cfg.sleep_after_ms;
    let mut h = Harness::new(cfg);
    let mut disk = BTreeMap::new();
    h.connect(1, "c1");
    let (_, chat) = h.create(1, "k1");
    h.durable(&mut disk);
    h.advance(sleep_ms + 60_000);
    assert!(h.settle_backend().iter().any(|(_, c)| matches!(c, BackendCmd::Close)), "the idle session slept");
    // A turn wakes it; the steering message comes while the wake runs.
    h.start_turn(1, &chat, 1, "t1", "hello");
    let waking = h.backend_cmds();
    assert!(waking.iter().any(|(_, _, c)| matches!(c, BackendCmd::Start { resume: true, .. })), "{waking:?}");
    steer(&mut h, &chat, 2, "s1", "early");
    h.durable(&mut disk);
    assert!(steers(&h.backend_cmds().into_iter().map(|(_, c, cmd)| (c, cmd)).collect::<Vec<_>>()).is_empty(), "nothing is handed before the agent has the turn");
    for (op, _, cmd) in waking {
        let outcome = match cmd {
            BackendCmd::Start { conversation_id, .. } => ahpd_core::Outcome::Started { conversation_id, history: Vec::new() },
            _ => ahpd_core::Outcome::Ok,
        };
        h.done(op, outcome);
    }
    let cmds = h.settle_backend();
    let order: Vec<&str> = cmds.iter().filter_map(|(_, c)| match c {
        BackendCmd::Send { .. } => Some("send"),
        BackendCmd::Steer { .. } => Some("steer"),
        _ => None,
    }).collect();
    assert_eq!(order.first(), Some(&"send"), "{order:?}");
    assert!(order.contains(&"steer"), "handed once the agent took the turn: {order:?}");
    assert_eq!(steers(&cmds)[0], ("t1".to_owned(), "s1".to_owned(), "early".to_owned()));
}

#[test]
fn a_crash_before_the_taking_is_written_brings_the_message_back_held() {
    let mut h = Harness::new(Config::default());
    let mut disk = BTreeMap::new();
    let chat = running(&mut h, &mut disk);
    steer(&mut h, &chat, 2, "s1", "again");
    h.durable(&mut disk);
    h.settle_backend();
    taken(&mut h, &chat, "t1", "s1");
    // kill -9 before the write that takes it off lands.
    let mut h = Harness::with_records(Config::default(), disk.values().cloned().collect());
    h.connect(1, "c1");
    let id = h.send_request(1, "subscribe", json!({"channel": chat}));
    let mut seen = Vec::new();
    for _ in 0..4 {
        h.durable(&mut disk);
        seen.extend(h.settle_backend());
    }
    let reply = h.take_reply(1, id).expect("subscribe answered");
    assert_eq!(sends(&seen), ["s1"], "the turn that took it came back interrupted, and it runs once as the next turn: {reply}");
}
