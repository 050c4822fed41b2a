//! Sessions of several chats through the real client (issue 9, "Tests"):
//! the aggregate status and activity, read and archived shared by every
//! client and kept over a restart, and `modifiedAt` that only moves forward.

mod common;

use ahp::ahp_types::actions::{
    SessionIsArchivedChangedAction, SessionIsReadChangedAction, StateAction,
};
use ahp::ahp_types::commands::CreateChatParams;
use ahp::ahp_types::state::{ChatState, SessionState, SessionSummary};
use ahp::{Client, SessionSubscription, SubscriptionEvent};
use common::*;
use serde_json::Value;

const ERROR: u32 = 2;
const IN_PROGRESS: u32 = 8;
const INPUT_NEEDED: u32 = 24;
const IS_READ: u32 = 32;
const IS_ARCHIVED: u32 = 64;

async fn row(c: &Client, sid: &str) -> SessionSummary {
    list(c).await.into_iter().find(|r| r.resource == sid).expect("the session is listed")
}

async fn create_chat(c: &Client, sid: &str, chat: &str) {
    let params = CreateChatParams {
        channel: sid.to_owned(),
        meta: None,
        chat: chat.to_owned(),
        initial_message: None,
        source: None,
        working_directories: None,
    };
    let r: Value = within("createChat", c.request("createChat", params)).await.expect("createChat");
    assert_eq!(r, Value::Null);
}

/// Follows `sub` until the chat's turn `turn_id` has ended.
async fn until_turn_ends(sub: &mut SessionSubscription, chat: &mut ChatState, turn_id: &str) {
    follow_chat(sub, chat, "the turn ends", |e, _| match &e.action {
        StateAction::ChatTurnComplete(a) => a.turn_id == turn_id,
        StateAction::ChatError(a) => a.turn_id == turn_id,
        _ => false,
    })
    .await;
}

/// Applies session-channel actions to `state` until `done` holds.
async fn session_until(sub: &mut SessionSubscription, state: &mut SessionState, what: &str, mut done: impl FnMut(&SessionState) -> bool) {
    within(what, async {
        while !done(state) {
            match sub.recv().await {
                Some(SubscriptionEvent::Action(env)) => {
                    let _ = ahp::reducers::apply_action_to_session(state, &env.action);
                }
                Some(_) => {}
                None => panic!("session subscription closed while waiting for {what}"),
            }
        }
    })
    .await;
}

/// Two chats: the default idle and the other waiting for an approval → the
/// row says InputNeeded with the other chat's activity. That chat then
/// errors while a third chat runs → Error on its entry, InProgress on the
/// session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_row_shows_the_chat_that_decides_the_status() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(&tmp.path().join("data"));
    let (c, _, _) = connect_init(&daemon.url, "agg").await;
    let (sid, default, mut ssub, mut default_state, mut dsub) = new_session(&c).await;
    // A first turn announces the session (it is listed from then on).
    within("dispatch", c.dispatch(default.clone(), user_turn("d1", "hello"))).await.expect("dispatch");
    until_turn_ends(&mut dsub, &mut default_state, "d1").await;
    let (mut session, _) = subscribe_session(&c, &sid).await;

    let other = format!("ahp-chat:/{}-other", fresh_id());
    create_chat(&c, &sid, &other).await;
    let (mut other_state, mut osub) = subscribe_chat(&c, &other).await;
    within("dispatch", c.dispatch(other.clone(), user_turn("o1", "/approve"))).await.expect("dispatch");
    session_until(&mut ssub, &mut session, "the other chat waits for input", |s| {
        s.chats.iter().any(|ch| ch.resource == other && ch.status & INPUT_NEEDED == INPUT_NEEDED)
    })
    .await;
    let r = row(&c, &sid).await;
    assert_eq!(r.status & INPUT_NEEDED, INPUT_NEEDED, "row status {}", r.status);
    let other_entry = session.chats.iter().find(|ch| ch.resource == other).expect("other chat entry");
    assert!(other_entry.activity.is_some(), "the waiting chat says what it waits on");
    assert_eq!(r.activity, other_entry.activity, "the row carries the deciding chat's activity");
    let default_entry = session.chats.iter().find(|ch| ch.resource == default).expect("default chat entry");
    assert_eq!(default_entry.status & 0x1F, 1, "the default chat is idle");

    // A third chat runs; the other chat is approved, then ends in an error.
    let third = format!("ahp-chat:/{}-third", fresh_id());
    create_chat(&c, &sid, &third).await;
    let (mut third_state, mut tsub) = subscribe_chat(&c, &third).await;
    within("dispatch", c.dispatch(third.clone(), user_turn("x1", "/slow 600000"))).await.expect("dispatch");
    follow_chat(&mut tsub, &mut third_state, "the third chat runs", |e, _| matches!(e.action, StateAction::ChatTurnStarted(_))).await;
    let tool_call_id = "o1.tool".to_owned();
    let confirm = confirm_tool("o1", &tool_call_id, true);
    within("dispatch confirm", c.dispatch(other.clone(), confirm)).await.expect("dispatch");
    until_turn_ends(&mut osub, &mut other_state, "o1").await;
    within("dispatch", c.dispatch(other.clone(), user_turn("o2", "/error"))).await.expect("dispatch");
    until_turn_ends(&mut osub, &mut other_state, "o2").await;
    session_until(&mut ssub, &mut session, "the other chat's entry shows the error", |s| {
        s.chats.iter().any(|ch| ch.resource == other && ch.status & 0x1F == ERROR)
    })
    .await;
    let r = row(&c, &sid).await;
    let entry = r.chats.as_ref().and_then(|chs| chs.iter().find(|ch| ch.resource == other)).expect("the row lists the other chat");
    assert_eq!(entry.status.unwrap_or(0) & ERROR, ERROR, "the failed chat says so on its own entry");
    assert_eq!(r.status & INPUT_NEEDED, IN_PROGRESS, "the session is in progress while the third chat runs: {}", r.status);
    c.shutdown().await;
}

/// Read and archived marked by one client reach every client's next
/// listing and subscription, and a restart keeps them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_and_archived_are_the_sessions_own_for_every_client_and_kept() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut daemon = Daemon::start(&data);
    let (a, _, _) = connect_init(&daemon.url, "a").await;
    let (b, _, _) = connect_init(&daemon.url, "b").await;
    let (sid, chat, _asub, mut chat_state, mut csub) = new_session(&a).await;
    within("dispatch", a.dispatch(chat.clone(), user_turn("t1", "hello"))).await.expect("dispatch");
    until_turn_ends(&mut csub, &mut chat_state, "t1").await;
    let (mut b_state, mut bsub) = subscribe_session(&b, &sid).await;

    let read = StateAction::SessionIsReadChanged(SessionIsReadChangedAction { is_read: true });
    within("dispatch read", a.dispatch(sid.clone(), read)).await.expect("dispatch");
    let archived = StateAction::SessionIsArchivedChanged(SessionIsArchivedChangedAction { is_archived: true });
    within("dispatch archived", a.dispatch(sid.clone(), archived)).await.expect("dispatch");
    session_until(&mut bsub, &mut b_state, "b's subscription shows read and archived", |s| {
        s.status & (IS_READ | IS_ARCHIVED) == IS_READ | IS_ARCHIVED
    })
    .await;
    for (who, c) in [("a", &a), ("b", &b)] {
        let r = row(c, &sid).await;
        assert_eq!(r.status & (IS_READ | IS_ARCHIVED), IS_READ | IS_ARCHIVED, "{who}'s listing: {}", r.status);
    }
    a.shutdown().await;
    b.shutdown().await;
    assert!(daemon.terminate().success(), "ahpd exited badly after SIGTERM");
    drop(daemon);

    let daemon = Daemon::start(&data);
    let (c, _, _) = connect_init(&daemon.url, "c").await;
    let r = row(&c, &sid).await;
    assert_eq!(r.status & (IS_READ | IS_ARCHIVED), IS_READ | IS_ARCHIVED, "kept over a restart: {}", r.status);
    let (s, _) = subscribe_session(&c, &sid).await;
    assert_eq!(s.status & (IS_READ | IS_ARCHIVED), IS_READ | IS_ARCHIVED, "the session's state too: {}", s.status);
    c.shutdown().await;
}

/// `modifiedAt`: unchanged by a subscribe, moved by a turn, and never moved
/// back by a turn taken after the wall clock was set back an hour (the
/// daemon restarted with `AHPD_TEST_WALL_OFFSET_MS=-3600000`, the test-only
/// wall-clock shift).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modified_at_moves_forward_only() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut daemon = Daemon::start(&data);
    let (c, _, _) = connect_init(&daemon.url, "m").await;
    let (sid, chat, _ssub, mut chat_state, mut csub) = new_session(&c).await;
    within("dispatch", c.dispatch(chat.clone(), user_turn("t1", "hello"))).await.expect("dispatch");
    until_turn_ends(&mut csub, &mut chat_state, "t1").await;
    let first = row(&c, &sid).await.modified_at;

    // Subscribing (from another client) does not move it.
    let (other, _, _) = connect_init(&daemon.url, "watcher").await;
    let _ = subscribe_session(&other, &sid).await;
    let _ = subscribe_chat(&other, &chat).await;
    assert_eq!(row(&c, &sid).await.modified_at, first, "a subscribe does not move modifiedAt");

    // A turn moves it (wait until the wall clock has surely moved on).
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    within("dispatch", c.dispatch(chat.clone(), user_turn("t2", "again"))).await.expect("dispatch");
    until_turn_ends(&mut csub, &mut chat_state, "t2").await;
    let second = row(&c, &sid).await.modified_at;
    assert!(second > first, "a turn moves modifiedAt: {first} then {second}");
    other.shutdown().await;
    c.shutdown().await;
    assert!(daemon.terminate().success(), "ahpd exited badly after SIGTERM");
    drop(daemon);

    // The wall clock is set back an hour; a turn then does not move it back.
    let daemon = Daemon::start_with_env(&data, &[], &[("AHPD_TEST_WALL_OFFSET_MS", "-3600000")]);
    let (c, _, _) = connect_init(&daemon.url, "m2").await;
    assert_eq!(row(&c, &sid).await.modified_at, second, "a restart keeps modifiedAt");
    let (mut chat_state, mut csub) = subscribe_chat(&c, &chat).await;
    within("dispatch", c.dispatch(chat.clone(), user_turn("t3", "after the clock went back"))).await.expect("dispatch");
    until_turn_ends(&mut csub, &mut chat_state, "t3").await;
    let last = chat_state.turns.last().expect("the turn");
    assert_eq!(last.message.text, "after the clock went back");
    let started_at = last.started_at.clone().unwrap_or_default();
    assert!(started_at < second, "the daemon's wall clock really went back: the turn started at {started_at}, before {second}");
    let third = row(&c, &sid).await.modified_at;
    assert!(looks_iso(&third), "{third}");
    assert!(third >= second, "modifiedAt went back with the wall clock: {second} then {third}");
    c.shutdown().await;
}

/// Issue 19, "every client hears every change": a row's activity that
/// ends reaches a window that only watches the root. B subscribes to the
/// root; A's turn waits for an approval (B hears the activity), A
/// approves, and B hears the activity end (`""`, docs/DECISIONS.md, 7),
/// as a fresh listing shows it (none). Before, the change omitted the
/// field and B kept "Waiting for approval" for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rows_activity_that_ends_reaches_every_root_subscriber() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(&tmp.path().join("data"));
    let (a, _, _) = connect_init(&daemon.url, "a").await;
    let (b, _, mut broot) = connect_init(&daemon.url, "b").await;
    let (sid, chat, _asub, mut chat_state, mut csub) = new_session(&a).await;
    within("dispatch", a.dispatch(chat.clone(), user_turn("t1", "hello"))).await.expect("dispatch");
    until_turn_ends(&mut csub, &mut chat_state, "t1").await;

    within("dispatch", a.dispatch(chat.clone(), user_turn("t2", "/approve"))).await.expect("dispatch");
    let waiting = wait_for(&mut broot, "B hears the row wait for an approval", |e| match e {
        SubscriptionEvent::SessionSummaryChanged(p) if p.session == sid => p.changes.activity.filter(|a| !a.is_empty()),
        _ => None,
    })
    .await;
    assert!(waiting.contains("approval"), "{waiting}");

    within("dispatch confirm", a.dispatch(chat.clone(), confirm_tool("t2", "t2.tool", true))).await.expect("dispatch");
    until_turn_ends(&mut csub, &mut chat_state, "t2").await;
    let ended = wait_for(&mut broot, "B hears the activity end", |e| match e {
        SubscriptionEvent::SessionSummaryChanged(p) if p.session == sid => p.changes.activity,
        _ => None,
    })
    .await;
    assert_eq!(ended, "", "the activity that ended is sent as \"\"");
    assert_eq!(row(&b, &sid).await.activity, None, "a fresh listing shows no activity");
    a.shutdown().await;
    b.shutdown().await;
}
