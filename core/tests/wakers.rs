//! Issue 19's audit of client actions against the Sessions page's list of
//! wakers ("Sleep and wake"): "A prompt to one of its chats wakes it. So do
//! a chat a client makes in it, ... any other client action the host takes
//! on a live session ... A config change and a draft are kept without a
//! wake, as for a session after a restart." Each case starts from a
//! restart (the session asleep, its state not held) and asks one thing.

use std::collections::BTreeMap;

use ahpd_core::{BackendCmd, Config, SessionRecord};
use ahpd_core::testkit::Harness;
use serde_json::{json, Value};


/// The store after a session `w1` ran one turn.
fn stored() -> Vec<SessionRecord> {
    let mut h = Harness::new(Config::default());
    let mut disk = BTreeMap::new();
    h.connect(1, "c1");
    let (uri, chat) = h.create(1, "w1");
    h.dispatch(1, &chat, 1, json!({"type": "chat/turnStarted", "turnId": "t1", "startedAt": "2026-01-01T00:00:00Z", "message": {"text": "hello", "origin": {"kind": "user"}}}));
    h.durable(&mut disk);
    h.settle_backend();
    h.agent_reply(&chat, "t1", "Echo: hello");
    h.dispatch(1, &uri, 2, json!({"type": "session/isReadChanged", "isRead": false}));
    h.durable(&mut disk);
    disk.into_values().collect()
}

const SESSION: &str = "ahp-session:/w1";
const CHAT: &str = "ahp-chat:/ahp-session@w1";

/// A restarted host with `w1` asleep and a client connected.
fn restarted() -> Harness {
    let mut h = Harness::with_records(Config::default(), stored());
    h.connect(1, "c1");
    assert_eq!(h.host.view().sessions.get(SESSION).expect("restored").phase().name(), "asleep");
    h
}

/// Whether the host started the session's agents (a wake).
fn woke(h: &mut Harness) -> bool {
    h.backend_cmds().iter().any(|(_, _, cmd)| matches!(cmd, BackendCmd::Start { resume: true, .. }))
}

fn dispatch(h: &mut Harness, channel: &str, action: Value) {
    h.dispatch(1, channel, 9, action);
    h.settle_store();
}

#[test]
fn a_prompt_wakes_the_session() {
    let mut h = restarted();
    dispatch(&mut h, CHAT, json!({"type": "chat/turnStarted", "turnId": "t2", "startedAt": "2026-01-01T00:00:00Z", "message": {"text": "again", "origin": {"kind": "user"}}}));
    assert!(woke(&mut h));
}

#[test]
fn a_chat_a_client_makes_wakes_the_session() {
    let mut h = restarted();
    h.send_request(1, "createChat", json!({"channel": SESSION, "chat": "ahp-chat:/w1-second"}));
    h.settle_store();
    assert!(woke(&mut h));
}

#[test]
fn client_actions_the_host_takes_on_a_live_session_wake_it() {
    for (what, request) in [
        ("subscribe to the session", ("subscribe", json!({"channel": SESSION}))),
        ("subscribe to its chat", ("subscribe", json!({"channel": CHAT}))),
        ("fetchTurns", ("fetchTurns", json!({"channel": CHAT}))),
    ] {
        let mut h = restarted();
        h.send_request(1, request.0, request.1);
        assert!(woke(&mut h), "{what} wakes it");
    }
    let mut h = restarted();
    dispatch(&mut h, SESSION, json!({"type": "session/workingDirectorySet", "directory": "file:///w"}));
    assert!(woke(&mut h), "a folder change wakes it (its agents start there)");
    // A rewind needs the chat's turns: its state comes back first.
    let mut h = restarted();
    dispatch(&mut h, CHAT, json!({"type": "chat/truncated", "turnId": "t1"}));
    assert!(woke(&mut h), "a rewind wakes it");
}

#[test]
fn a_config_change_a_draft_and_the_rows_marks_are_kept_without_a_wake() {
    for (what, channel, action) in [
        ("a draft", CHAT, json!({"type": "chat/draftChanged", "draft": {"text": "half a thought", "origin": {"kind": "user"}}})),
        ("a config change (refused: no key is mutable)", SESSION, json!({"type": "session/configChanged", "config": {"isolation": "worktree"}})),
        ("a title", SESSION, json!({"type": "session/titleChanged", "title": "renamed"})),
        ("a read mark", SESSION, json!({"type": "session/isReadChanged", "isRead": true})),
        ("an archived mark", SESSION, json!({"type": "session/isArchivedChanged", "isArchived": true})),
        ("an action no client may send", CHAT, json!({"type": "chat/turnComplete", "turnId": "t1", "duration": 0})),
        ("a chat's read mark", CHAT, json!({"type": "chat/isReadChanged", "isRead": true})),
    ] {
        let mut h = restarted();
        dispatch(&mut h, channel, action);
        assert!(!woke(&mut h), "{what} does not wake it");
        assert_eq!(h.host.view().sessions.get(SESSION).unwrap().phase().name(), "asleep", "{what}");
    }
}

#[test]
fn a_cancel_or_an_approval_for_a_session_that_sleeps_is_refused_without_a_wake() {
    // "A session sleeps with nothing running": there is no turn to cancel
    // and no tool call to confirm, and waking it would not make one.
    for action in [
        json!({"type": "chat/turnCancelled", "turnId": "t1", "duration": 0}),
        json!({"type": "chat/toolCallConfirmed", "turnId": "t1", "toolCallId": "x", "approved": true}),
    ] {
        let mut h = restarted();
        dispatch(&mut h, CHAT, action.clone());
        assert!(!woke(&mut h), "{action}");
        let frames = h.frames(1);
        assert!(frames.iter().any(|f| f["params"]["rejectionReason"].as_str().is_some_and(|r| r.contains("asleep"))), "{action}: {frames:?}");
    }
}
