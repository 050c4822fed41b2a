//! Every sleep blocker the Sessions page names ("Sleep and wake"), one test
//! each (issue 23: "every sleep blocker of the page is a tested blocker"):
//! "a session does not sleep while any of its chats has a turn running or a
//! message pending, queued or steering, a tool call waiting for approval or
//! a question waiting for an answer", "nor while a client is subscribed to
//! it", "a session does not sleep while it is waking, or before the turn it
//! was woken for has begun". Each test holds the blocker through ten quiet
//! periods, then takes it away and sees the session fall asleep within one.
//! (Background work, a backend that cannot resume and being watched have
//! their own tests in `sleep_wake.rs`.)

use ahp_types::actions::{ChatToolCallReadyAction, ChatToolCallStartAction, StateAction};
use ahp_types::common::StringOrMarkdown;
use ahpd_core::testkit::Harness;
use ahpd_core::{BackendCmd, BackendEvent, Config, Input, Outcome, StoreCmd};
use serde_json::json;

/// The quiet after which an unwatched session sleeps in these tests (ms).
const QUIET: u64 = 5_000;

fn harness() -> Harness {
    let mut h = Harness::new(Config { sleep_after_ms: QUIET, residency_limit: 0, ..Config::default() });
    h.connect(1, "c1");
    h
}

fn phase(h: &Harness, uri: &str) -> &'static str {
    h.host.view().sessions.get(uri).expect("the session is held").phase().name()
}

/// Ten quiet periods pass and the session stays in `want` all through.
fn held_through_quiet(h: &mut Harness, uri: &str, want: &str, blocker: &str) {
    for period in 1..=10 {
        h.advance(QUIET);
        assert_eq!(phase(h, uri), want, "{blocker}: {period} quiet periods in");
    }
}

/// With its blocker gone, the session sleeps within one quiet period.
fn sleeps_within_a_quiet_period(h: &mut Harness, uri: &str, blocker: &str) {
    h.advance(QUIET);
    assert_eq!(phase(h, uri), "asleep", "{blocker} gone: the session sleeps");
}

fn agent(h: &mut Harness, chat: &str, action: StateAction) {
    h.input(Input::Backend { chat: chat.into(), event: BackendEvent::Action(action) });
    h.settle_store();
}

/// A session of connection 1 nobody watches, with turn `t1` running in its
/// default chat.
fn session_mid_turn(h: &mut Harness, id: &str) -> (String, String) {
    let (uri, chat) = h.create(1, id);
    h.start_turn(1, &chat, 1, "t1", "hello");
    h.settle_backend();
    (uri, chat)
}

#[test]
fn a_running_turn_holds_its_session_awake() {
    let mut h = harness();
    let (uri, chat) = session_mid_turn(&mut h, "running");
    held_through_quiet(&mut h, &uri, "live", "a turn running");
    h.agent_reply(&chat, "t1", "done");
    sleeps_within_a_quiet_period(&mut h, &uri, "the turn");
}

#[test]
fn a_tool_call_waiting_for_approval_holds_its_session_awake() {
    let mut h = harness();
    let (uri, chat) = session_mid_turn(&mut h, "approval");
    agent(&mut h, &chat, StateAction::ChatToolCallStart(ChatToolCallStartAction {
        turn_id: "t1".into(), tool_call_id: "tc".into(), meta: None, tool_name: "write_file".into(),
        display_name: "Write file".into(), intention: None, contributor: None,
    }));
    agent(&mut h, &chat, StateAction::ChatToolCallReady(ChatToolCallReadyAction {
        turn_id: "t1".into(), tool_call_id: "tc".into(), meta: None, contributor: None, intention: None,
        invocation_message: StringOrMarkdown::Plain("write a.txt".into()), tool_input: None,
        confirmation_title: None, risk_assessment: None, edits: None, editable: None, confirmed: None, options: None,
    }));
    held_through_quiet(&mut h, &uri, "live", "a tool call waiting for approval");
    let row = h.list(1).into_iter().find(|r| r["resource"] == uri.as_str()).expect("listed");
    assert_eq!(row["status"].as_u64().unwrap_or(0) & 0x1F, 24, "still waiting for approval: {row}");
    h.dispatch(1, &chat, 2, json!({"type": "chat/toolCallConfirmed", "turnId": "t1", "toolCallId": "tc", "approved": true}));
    h.settle();
    h.agent_reply(&chat, "t1", "written");
    sleeps_within_a_quiet_period(&mut h, &uri, "the approval and the turn");
}

/// A message the chat holds while no turn runs: its queued start's write
/// failed, so the message stays queued (`host::pending`) and the session
/// stays awake with it rather than sleeping on an unrun message.
#[test]
fn a_queued_message_holds_its_session_awake_even_with_no_turn_running() {
    let mut h = harness();
    let (uri, chat) = session_mid_turn(&mut h, "queued");
    h.dispatch(1, &chat, 2, json!({"type": "chat/pendingMessageSet", "kind": "queued", "id": "q1", "message": {"text": "next", "origin": {"kind": "user"}}}));
    h.settle_store();
    // The turn ends; its end parks q1's start behind a record write, and the
    // store fails every write of that moment.
    for a in [
        json!({"type": "chat/responsePart", "turnId": "t1", "part": {"kind": "markdown", "id": "p1", "content": "done"}}),
        json!({"type": "chat/turnComplete", "turnId": "t1", "duration": 0}),
    ] {
        h.input(Input::Backend { chat: chat.clone(), event: BackendEvent::Action(serde_json::from_value(a).expect("an action")) });
    }
    let starts: Vec<_> = h.store_ops().into_iter().filter(|(_, c)| matches!(c, StoreCmd::Put { .. })).collect();
    assert!(!starts.is_empty(), "q1's start asks for a record write");
    for (op, _) in starts {
        h.done(op, Outcome::Failed { message: "disk full".into() });
    }
    // Not tried again at once: a store that keeps failing would be written
    // without end. It is tried again after a second.
    let again = h.store_ops();
    assert!(again.is_empty(), "a refused queued start is not written again at once: {again:?}");
    let resident = h.host.view().sessions.get(&uri).expect("held").resident().expect("resident");
    let state = &resident.chats[&chat];
    assert!(state.active_turn.is_none(), "no turn runs");
    assert_eq!(state.queued_messages.as_ref().map(Vec::len), Some(1), "q1 is still queued");
    // The store keeps failing for ten quiet periods: the start is tried
    // after 1 s, then 2, 4, 8, 16 s more (at 1, 3, 7, 15 and 31 s), and
    // the queue alone holds the session awake all the while.
    let mut tried_at = Vec::new();
    for second in 1..=(10 * QUIET / 1_000) {
        h.advance(1_000);
        for (op, _) in h.store_ops() {
            tried_at.push(second);
            h.done(op, Outcome::Failed { message: "still full".into() });
        }
        assert_eq!(phase(&h, &uri), "live", "a queued message, {second} s in");
    }
    assert_eq!(tried_at, [1, 3, 7, 15, 31], "each refusal doubles the wait");
    // The store recovers: the next try starts q1.
    h.advance(60_000);
    let sends = h.settle();
    assert!(sends.iter().any(|(_, c)| matches!(c, BackendCmd::Send { turn_id, .. } if turn_id == "q1")), "q1 ran once the store took it: {sends:?}");
    h.agent_reply(&chat, "q1", "next");
    sleeps_within_a_quiet_period(&mut h, &uri, "the queued message");
}

#[test]
fn a_steering_message_holds_its_session_awake_until_it_has_run() {
    let mut h = harness();
    let (uri, chat) = session_mid_turn(&mut h, "steering");
    h.dispatch(1, &chat, 2, json!({"type": "chat/pendingMessageSet", "kind": "steering", "id": "s1", "message": {"text": "shorter", "origin": {"kind": "user"}}}));
    h.settle_store();
    h.agent_reply(&chat, "t1", "done");
    // Held as the next turn (`session::pending`): it runs as `s1`.
    let sends = h.settle();
    assert!(sends.iter().any(|(_, c)| matches!(c, BackendCmd::Send { turn_id, .. } if turn_id == "s1")), "the steering message ran as the next turn: {sends:?}");
    held_through_quiet(&mut h, &uri, "live", "the steering message's turn");
    h.agent_reply(&chat, "s1", "shorter");
    sleeps_within_a_quiet_period(&mut h, &uri, "the steering message's turn");
}

/// "A session does not sleep while it is waking": a subscribe wakes a
/// sleeping session and its agent is slow to start.
#[test]
fn a_waking_session_does_not_fall_asleep_again_before_its_agent_answers() {
    let mut h = harness();
    let (uri, _) = h.session_with_turn("waking");
    h.advance(QUIET);
    assert_eq!(phase(&h, &uri), "asleep");
    let r = h.send_request(1, "subscribe", json!({"channel": uri}));
    let start = h.backend_cmds().into_iter().find(|(_, _, c)| matches!(c, BackendCmd::Start { .. })).expect("the wake starts the agent");
    held_through_quiet(&mut h, &uri, "waking", "a wake in progress");
    h.done(start.0, Outcome::Started { conversation_id: "conv".into(), history: Vec::new() });
    h.settle();
    assert!(h.take_reply(1, r).expect("the subscribe is answered")["result"]["snapshot"].is_object());
    assert_eq!(phase(&h, &uri), "live");
    h.request(1, "unsubscribe", json!({"channel": uri}));
    sleeps_within_a_quiet_period(&mut h, &uri, "the wake and the subscriber");
}

/// "... or before the turn it was woken for has begun": the agent is up,
/// but the turn the prompt woke it for is not yet acknowledged.
#[test]
fn a_session_woken_by_a_prompt_stays_awake_until_that_turn_has_begun() {
    let mut h = harness();
    let (uri, chat) = h.session_with_turn("prompted");
    h.advance(QUIET);
    assert_eq!(phase(&h, &uri), "asleep");
    h.start_turn(1, &chat, 2, "t2", "again");
    let start = h.backend_cmds().into_iter().find(|(_, _, c)| matches!(c, BackendCmd::Start { .. })).expect("the prompt wakes the session");
    h.done(start.0, Outcome::Started { conversation_id: "conv".into(), history: Vec::new() });
    h.settle_store();
    let send = h.backend_cmds().into_iter().find(|(_, _, c)| matches!(c, BackendCmd::Send { turn_id, .. } if turn_id == "t2")).expect("the woken turn goes to the agent");
    held_through_quiet(&mut h, &uri, "live", "the woken turn not yet begun");
    h.done(send.0, Outcome::Ok);
    h.agent_reply(&chat, "t2", "again");
    sleeps_within_a_quiet_period(&mut h, &uri, "the woken turn");
}
