//! Scenarios for the tools the host gives its agents (issue 24; Sessions
//! page, "Sleep and wake": "a send_message from another session ... and a
//! wake its agent asked for with schedule_wakeup"): each call answered
//! once, each refusal changing nothing.

use std::collections::BTreeMap;

use ahpd_core::testkit::{users_directory, Harness};
use ahpd_core::tools::{HostToolErrorCode, HostToolRequest, MAX_WAKES_PER_SESSION};
use ahpd_core::{BackendCmd, Config, MonoTime, Now, SessionRecord, WallTime};
use ahp_types::state::MessageKind;
use serde_json::{json, Value};

fn config(sleep_after_ms: u64) -> Config {
    Config { sleep_after_ms, residency_limit: 0, ..Config::default() }
}

fn wake(after_seconds: u64, prompt: &str) -> HostToolRequest {
    HostToolRequest::ScheduleWakeup { after_seconds: Some(after_seconds), at: None, prompt: prompt.into() }
}

fn phase(h: &Harness, uri: &str) -> &'static str {
    h.host.view().sessions.get(uri).expect("the session is known").phase().name()
}

fn record(h: &Harness, uri: &str) -> SessionRecord {
    h.host.view().sessions.get(uri).expect("the session is known").record().clone()
}

fn wakes(h: &Harness, uri: &str) -> usize {
    record(h, uri).tools.map_or(0, |t| t.wakes.len())
}

/// The turns handed to agents among `cmds`: (chat, text, message `_meta`).
fn sends(cmds: &[(String, BackendCmd)]) -> Vec<(String, String, Option<Value>, MessageKind)> {
    cmds.iter()
        .filter_map(|(chat, c)| match c {
            BackendCmd::Send { message, .. } => Some((
                chat.clone(),
                message.text.clone(),
                message.meta.as_ref().and_then(|m| m.get("ahpd.hostTool").cloned()),
                message.origin.kind.clone(),
            )),
            _ => None,
        })
        .collect()
}

/// A wake asked for by a session that then falls asleep wakes it when due
/// and starts one turn on the asking chat with its prompt, marked as a
/// wake; it is listed on the state until then and fires exactly once.
#[test]
fn a_due_wake_wakes_a_sleeping_session_once_with_its_prompt() {
    let mut h = Harness::new(config(5_000));
    h.connect(1, "c1");
    let (uri, chat) = h.session_with_turn("a");
    let answer = h.tool(&chat, wake(60, "check the build")).expect("scheduled");
    assert_eq!(answer["id"], "wake-1");
    assert_eq!(answer["chat"], json!(chat));
    h.settle_store();
    let state = h.request(1, "subscribe", json!({"channel": uri}));
    let listed = &state["result"]["snapshot"]["state"]["_meta"]["ahpd.wakes"];
    assert_eq!(listed[0]["prompt"], "check the build", "listed on the state: {state}");
    h.request(1, "unsubscribe", json!({"channel": uri}));
    h.advance(5_000);
    assert_eq!(phase(&h, &uri), "asleep");
    h.advance(50_000);
    assert_eq!(phase(&h, &uri), "asleep", "not before it is due");
    assert_eq!(wakes(&h, &uri), 1);
    h.advance(5_000);
    assert_eq!(wakes(&h, &uri), 0, "taken off the record when it fires");
    let cmds = h.settle();
    assert!(cmds.iter().any(|(_, c)| matches!(c, BackendCmd::Start { resume: true, .. })), "the session resumed: {cmds:?}");
    let turns = sends(&cmds);
    assert_eq!(turns.len(), 1, "one turn: {turns:?}");
    assert_eq!(turns[0].0, chat);
    assert_eq!(turns[0].1, "check the build");
    assert_eq!(turns[0].2, Some(json!({"wake": "wake-1"})));
    assert_eq!(turns[0].3, MessageKind::Agent);
    let turn_id = cmds.iter().find_map(|(_, c)| match c {
        BackendCmd::Send { turn_id, .. } => Some(turn_id.clone()),
        _ => None,
    });
    h.agent_reply(&chat, &turn_id.expect("the wake's turn"), "built");
    h.advance(3_600_000);
    assert!(sends(&h.settle()).is_empty(), "it fires exactly once");
}

/// A wake survives a restart; one whose time passed while the daemon was
/// down fires once, at start, on the session that was asleep on disk.
#[test]
fn a_wake_due_while_the_daemon_was_down_fires_once_after_the_restart() {
    let mut h = Harness::new(config(5_000));
    h.connect(1, "c1");
    let (uri, chat) = h.session_with_turn("a");
    let mut disk = BTreeMap::new();
    h.durable(&mut disk);
    h.tool(&chat, wake(2, "wake up")).expect("scheduled");
    h.durable(&mut disk);
    assert_eq!(disk.values().next().and_then(|r| r.tools.as_ref()).map(|t| t.wakes.len()), Some(1), "durable");
    // Down for a minute: restarted with the records, the clock past due.
    let later = Now { mono: MonoTime(0), wall: WallTime(h.now.wall.0 + 60_000) };
    let mut h = Harness::with_records_at(config(5_000), disk.values().cloned().collect(), later);
    assert_eq!(h.host.view().wake_index().len(), 1, "indexed from the record");
    h.advance(0);
    assert_eq!(wakes(&h, &uri), 0);
    h.durable(&mut disk);
    let cmds = h.settle();
    let turns = sends(&cmds);
    assert_eq!(turns.len(), 1, "{cmds:?}");
    assert_eq!(turns[0].1, "wake up");
    // And a second restart from what is on disk now does not fire it again.
    h.durable(&mut disk);
    let mut again = Harness::with_records_at(config(5_000), disk.values().cloned().collect(), later);
    again.advance(10_000);
    assert!(again.host.view().wake_index().is_empty());
    assert!(sends(&again.settle()).is_empty(), "fired once across the restarts");
}

/// The wall clock jumping back delays a wake to its wall time; jumping
/// forward past it fires it (once) at the next input.
#[test]
fn wakes_follow_the_wall_clock_across_jumps() {
    let mut h = Harness::new(config(0));
    h.connect(1, "c1");
    let (uri, chat) = h.session_with_turn("a");
    h.tool(&chat, wake(3_600, "hourly")).expect("scheduled");
    h.now.wall = WallTime(h.now.wall.0 - 86_400_000);
    h.advance(3_600_000);
    assert_eq!(wakes(&h, &uri), 1, "the clock went back a day: not due yet");
    h.now.wall = WallTime(h.now.wall.0 + 2 * 86_400_000);
    h.advance(1);
    assert_eq!(wakes(&h, &uri), 0, "the clock jumped past it: fired");
    assert_eq!(sends(&h.settle()).len(), 1);
    h.now.wall = WallTime(h.now.wall.0 + 86_400_000);
    h.advance(1);
    assert!(sends(&h.settle()).is_empty(), "once");
}

/// At most MAX_WAKES_PER_SESSION wait; one more is refused and changes
/// nothing; bad arguments are refused; a cancelled wake never fires.
#[test]
fn wakes_are_bounded_checked_and_cancellable() {
    let mut h = Harness::new(config(0));
    h.connect(1, "c1");
    let (uri, chat) = h.session_with_turn("a");
    for i in 0..MAX_WAKES_PER_SESSION {
        h.tool(&chat, wake(100 + i as u64, "p")).expect("within the bound");
    }
    h.settle_store();
    let before = record(&h, &uri);
    let refused = h.tool(&chat, wake(5, "one too many")).expect_err("over the bound");
    assert_eq!(refused.code, HostToolErrorCode::LimitReached);
    for bad in [
        HostToolRequest::ScheduleWakeup { after_seconds: Some(1), at: Some("2030-01-01T00:00:00Z".into()), prompt: "p".into() },
        HostToolRequest::ScheduleWakeup { after_seconds: None, at: None, prompt: "p".into() },
        HostToolRequest::ScheduleWakeup { after_seconds: None, at: Some("tomorrow".into()), prompt: "p".into() },
        wake(1, "  "),
    ] {
        assert_eq!(h.tool(&chat, bad).expect_err("bad").code, HostToolErrorCode::InvalidArgument);
    }
    assert_eq!(record(&h, &uri), before, "refusals change nothing");
    assert!(h.store_ops().is_empty(), "and write nothing");
    let cancelled = h.tool(&chat, HostToolRequest::CancelWakeup { id: "wake-1".into() }).expect("cancelled");
    assert_eq!(cancelled["cancelled"], true);
    assert_eq!(h.tool(&chat, HostToolRequest::CancelWakeup { id: "wake-1".into() }).expect_err("gone").code, HostToolErrorCode::NotFound);
    h.settle_store();
    h.advance(100_000);
    assert_eq!(wakes(&h, &uri), MAX_WAKES_PER_SESSION - 1, "wake-1 did not fire; the rest wait");
}

/// A disposed session's wakes are gone (the index with the record), and a
/// call from a chat that no longer exists is refused.
#[test]
fn dispose_cancels_wakes_and_a_gone_chat_is_refused() {
    let mut h = Harness::new(config(0));
    h.connect(1, "c1");
    let (uri, chat) = h.session_with_turn("a");
    h.tool(&chat, wake(10, "p")).expect("scheduled");
    h.settle_store();
    let rid = h.send_request(1, "disposeSession", json!({"channel": uri}));
    h.settle();
    let reply = h.take_reply(1, rid).expect("disposeSession reply");
    assert_eq!(reply["result"], Value::Null, "{reply}");
    assert!(h.host.view().sessions.get(&uri).is_none(), "disposed");
    assert!(h.host.view().wake_index().is_empty(), "its wakes are gone");
    h.advance(20_000);
    assert!(sends(&h.settle()).is_empty());
    assert_eq!(h.tool(&chat, wake(1, "p")).expect_err("no chat").code, HostToolErrorCode::NotFound);
}

/// send_message from A to B, asleep and unloaded: B wakes, and the
/// message becomes a turn on its default chat saying it came from A.
#[test]
fn a_message_from_another_session_wakes_the_target_and_names_the_sender() {
    let mut h = Harness::new(Config { residency_limit: 1, ..config(0) });
    h.connect(1, "c1");
    let (b, b_chat) = h.session_with_turn("b");
    h.settle();
    let (a, a_chat) = h.session_with_turn("a");
    h.settle();
    assert!(h.host.view().sessions.get(&b).is_some_and(|s| s.resident().is_none()), "B was evicted");
    let answer = h.tool(&a_chat, HostToolRequest::SendMessage { session: b.clone(), text: "please review".into() }).expect("sent");
    assert_eq!(answer["session"], json!(b));
    let cmds = h.settle();
    let turns = sends(&cmds);
    assert_eq!(turns.len(), 1, "{cmds:?}");
    assert_eq!(turns[0].0, b_chat);
    assert_eq!(turns[0].1, "please review");
    assert_eq!(turns[0].2, Some(json!({"from": {"session": a, "chat": a_chat}})));
    assert_eq!(phase(&h, &b), "live", "B woke");
}

/// A message to a target whose turn runs waits as a queued message and
/// starts when that turn ends.
#[test]
fn a_message_to_a_busy_target_is_queued_behind_its_turn() {
    let mut h = Harness::new(config(0));
    h.connect(1, "c1");
    let (_, a_chat) = h.session_with_turn("a");
    let (b, b_chat) = h.create(1, "b");
    h.start_turn(1, &b_chat, 1, "long", "a long one");
    h.settle();
    h.tool(&a_chat, HostToolRequest::SendMessage { session: b.clone(), text: "after that".into() }).expect("sent");
    assert!(sends(&h.settle()).is_empty(), "queued behind the running turn");
    let queued = record(&h, &b).chats[0].queued.len();
    assert_eq!(queued, 1);
    h.agent_reply(&b_chat, "long", "done");
    let turns = sends(&h.settle());
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0].1, "after that");
}

/// Each refusal of send_message is a clear error and changes nothing:
/// an unknown target, a bad URI, itself, and (with a users directory) a
/// sender whose owner may not write.
#[test]
fn send_message_refusals_change_nothing() {
    let mut h = Harness::new(config(0));
    h.connect(1, "c1");
    let (a, a_chat) = h.session_with_turn("a");
    let (b, _) = h.session_with_turn("b");
    h.settle();
    let (ra, rb) = (record(&h, &a), record(&h, &b));
    let cases = [
        (HostToolRequest::SendMessage { session: "ahp-session:/nobody".into(), text: "hi".into() }, HostToolErrorCode::NotFound),
        (HostToolRequest::SendMessage { session: "../etc".into(), text: "hi".into() }, HostToolErrorCode::InvalidArgument),
        (HostToolRequest::SendMessage { session: a.clone(), text: "me".into() }, HostToolErrorCode::Forbidden),
        (HostToolRequest::SendMessage { session: b.clone(), text: String::new() }, HostToolErrorCode::InvalidArgument),
    ];
    for (tool, code) in cases {
        let e = h.tool(&a_chat, tool).expect_err("refused");
        assert_eq!(e.code, code, "{e}");
        assert!(!e.message.is_empty());
    }
    assert!(h.store_ops().is_empty());
    assert_eq!((record(&h, &a), record(&h, &b)), (ra, rb));
}

/// With a users directory the tool acts as the calling session's owner: a
/// guest's session may not send (chat:send), a member's may.
#[test]
fn send_message_acts_as_the_senders_owner() {
    use ahpd_core::grants::Role;
    let users = users_directory(&[("m", Role::Member), ("g", Role::Guest)]);
    let mut h = Harness::new(Config { users: Some(users), ..config(0) });
    h.input(ahpd_core::Input::Connected { conn: ahpd_core::ConnId(1) });
    h.input(ahpd_core::Input::Authenticate { conn: ahpd_core::ConnId(1), token: "token-m".into() });
    let r = h.request(1, "initialize", json!({"channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "c1"}));
    assert!(r.get("result").is_some(), "{r}");
    let (a, a_chat) = h.session_with_turn("a");
    let (b, _) = h.session_with_turn("b");
    h.settle();
    h.tool(&a_chat, HostToolRequest::SendMessage { session: b.clone(), text: "from a member".into() }).expect("a member's session sends");
    h.settle();
    // The directory changes its mind about m: now a guest.
    let demoted = users_directory(&[("m", Role::Guest)]);
    let mut disk: Vec<SessionRecord> = [&a, &b].iter().map(|u| record(&h, u)).collect();
    disk.sort_by(|x, y| x.resource.cmp(&y.resource));
    let mut h = Harness::with_records(Config { users: Some(demoted), ..config(0) }, disk);
    let e = h.tool(&a_chat, HostToolRequest::SendMessage { session: b.clone(), text: "from a guest".into() }).expect_err("a guest's session may not");
    assert_eq!(e.code, HostToolErrorCode::Forbidden, "{e}");
    assert!(h.store_ops().is_empty());
}

/// list_peers answers what ahpd/listPeers answers for the caller.
#[test]
fn list_peers_answers_as_ahpd_list_peers() {
    let mut h = Harness::new(config(0));
    h.connect(1, "c1");
    let (a, a_chat) = h.session_with_turn("a");
    let mine = h.tool(&a_chat, HostToolRequest::ListPeers).expect("answered");
    let theirs = h.request(1, "ahpd/listPeers", json!({"channel": a}));
    assert_eq!(mine, theirs["result"]);
}
