//! A chat's shape through the official client against the echo agent
//! (issue 23, part B): a chat's own read and archived bits, per chat,
//! shown to every client and kept over a restart.

mod common;

use ahp::ahp_types::actions::{ChatIsArchivedChangedAction, ChatIsReadChangedAction, StateAction};
use ahp::ahp_types::commands::CreateChatParams;
use ahp::ahp_types::state::{SessionState, SessionSummary};
use ahp::{Client, SessionSubscription, SubscriptionEvent};
use common::*;
use serde_json::Value;

const IS_READ: u32 = 32;
const IS_ARCHIVED: u32 = 64;

async fn row(c: &Client, sid: &str) -> SessionSummary {
    list(c).await.into_iter().find(|r| r.resource == sid).expect("the session is listed")
}

fn chat_bits(r: &SessionSummary, chat: &str) -> u32 {
    let entry = r.chats.as_ref().and_then(|l| l.iter().find(|c| c.resource == chat)).expect("the row lists the chat");
    entry.status.unwrap_or(0) & (IS_READ | IS_ARCHIVED)
}

async fn create_chat(c: &Client, sid: &str, chat: &str) {
    let params = CreateChatParams { channel: sid.to_owned(), meta: None, chat: chat.to_owned(), initial_message: None, source: None, working_directories: None };
    let r: Value = within("createChat", c.request("createChat", params)).await.expect("createChat");
    assert_eq!(r, Value::Null);
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

/// Waits for the echo of an action `a` dispatched on `chat` and returns its
/// rejection reason, if any.
async fn echo_of(sub: &mut SessionSubscription, what: &str, pick: impl Fn(&StateAction) -> bool) -> Option<String> {
    wait_for(sub, what, |e| match e {
        SubscriptionEvent::Action(env) if pick(&env.action) => Some(env.rejection_reason.clone()),
        _ => None,
    })
    .await
}

/// One client marks a second chat read and archived: the other client's
/// session state and every listing show it on that chat alone; archiving
/// the default chat on its own is refused with a reason; a restart keeps
/// the chat's bits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chats_read_and_archived_bits_are_its_own_shared_and_kept() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut daemon = Daemon::start(&data);
    let (a, _, _) = connect_init(&daemon.url, "a").await;
    let (b, _, _) = connect_init(&daemon.url, "b").await;
    let (sid, default, _asub, _default_state, mut dsub) = new_session(&a).await;
    turn(&a, &default, &mut dsub, "t1", "hello").await;
    let other = format!("ahp-chat:/{}-other", fresh_id());
    create_chat(&a, &sid, &other).await;
    let (mut b_state, mut bsub) = subscribe_session(&b, &sid).await;
    let (_other_state, mut osub) = subscribe_chat(&a, &other).await;

    let read = StateAction::ChatIsReadChanged(ChatIsReadChangedAction { is_read: true });
    within("dispatch read", a.dispatch(other.clone(), read)).await.expect("dispatch");
    let archived = StateAction::ChatIsArchivedChanged(ChatIsArchivedChangedAction { is_archived: true });
    within("dispatch archived", a.dispatch(other.clone(), archived)).await.expect("dispatch");
    session_until(&mut bsub, &mut b_state, "b's session state shows the chat read and archived", |s| {
        s.chats.iter().any(|c| c.resource == other && c.status & (IS_READ | IS_ARCHIVED) == IS_READ | IS_ARCHIVED)
    })
    .await;
    let default_entry = b_state.chats.iter().find(|c| c.resource == default).expect("default chat entry");
    assert_eq!(default_entry.status & (IS_READ | IS_ARCHIVED), 0, "only the addressed chat");
    assert_eq!(b_state.status & (IS_READ | IS_ARCHIVED), 0, "not the session's own bits");
    for (who, c) in [("a", &a), ("b", &b)] {
        let r = row(c, &sid).await;
        assert_eq!(chat_bits(&r, &other), IS_READ | IS_ARCHIVED, "{who}'s listing");
        assert_eq!(chat_bits(&r, &default), 0, "{who}'s listing of the default chat");
        assert_eq!(r.status & (IS_READ | IS_ARCHIVED), 0, "{who}'s listing: the session's bits stay");
    }
    // Both echoes were accepted.
    let _ = echo_of(&mut osub, "the read echo", |a| matches!(a, StateAction::ChatIsReadChanged(_))).await;

    // The default chat is archived with its session, not on its own.
    let archive_default = StateAction::ChatIsArchivedChanged(ChatIsArchivedChangedAction { is_archived: true });
    within("dispatch", a.dispatch(default.clone(), archive_default)).await.expect("dispatch");
    let reason = echo_of(&mut dsub, "the refusal", |a| matches!(a, StateAction::ChatIsArchivedChanged(_))).await;
    assert!(reason.as_deref().is_some_and(|r| r.contains("session/isArchivedChanged")), "{reason:?}");

    a.shutdown().await;
    b.shutdown().await;
    assert!(daemon.terminate().success(), "ahpd exited badly after SIGTERM");
    drop(daemon);

    let daemon = Daemon::start(&data);
    let (c, _, _) = connect_init(&daemon.url, "c").await;
    let r = row(&c, &sid).await;
    assert_eq!(chat_bits(&r, &other), IS_READ | IS_ARCHIVED, "kept over a restart");
    // Unread while asleep (no wake needed), then seen in the woken state.
    let unread = StateAction::ChatIsReadChanged(ChatIsReadChangedAction { is_read: false });
    within("dispatch unread", c.dispatch(other.clone(), unread)).await.expect("dispatch");
    within("the row shows it unread", async {
        while chat_bits(&row(&c, &sid).await, &other) != IS_ARCHIVED {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    let (s, _) = subscribe_session(&c, &sid).await;
    let entry = s.chats.iter().find(|ch| ch.resource == other).expect("the chat entry");
    assert_eq!(entry.status & (IS_READ | IS_ARCHIVED), IS_ARCHIVED, "the woken state: {}", entry.status);
    let (chat, _) = subscribe_chat(&c, &other).await;
    assert_eq!(chat.status & (IS_READ | IS_ARCHIVED), IS_ARCHIVED, "the chat's own state: {}", chat.status);
    c.shutdown().await;
}

fn truncate(turn_id: Option<&str>) -> StateAction {
    StateAction::ChatTruncated(ahp::ahp_types::actions::ChatTruncatedAction { turn_id: turn_id.map(str::to_owned) })
}

/// Rewind with the echo agent: three turns, a rewind refused while a turn
/// runs, then a rewind to the first turn; the chat shows only it, a new
/// turn follows it, and a restart (the echo transcript read back) shows the
/// rewound history, not the forgotten turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_keeps_turns_up_to_the_one_named_across_a_restart() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut daemon = Daemon::start(&data);
    let (c, _, _) = connect_init(&daemon.url, "rw").await;
    let (_sid, chat, _ssub, _chat_state, mut csub) = new_session(&c).await;
    for (id, text) in [("t1", "first"), ("t2", "second"), ("t3", "third")] {
        turn(&c, &chat, &mut csub, id, text).await;
    }
    // Refused while a turn runs, with the reason, and nothing changes.
    within("dispatch", c.dispatch(chat.clone(), user_turn("t4", "/slow 600000"))).await.expect("dispatch");
    wait_for(&mut csub, "the slow turn starts", |e| match e {
        SubscriptionEvent::Action(env) if matches!(&env.action, StateAction::ChatTurnStarted(a) if a.turn_id == "t4") => Some(()),
        _ => None,
    })
    .await;
    within("dispatch", c.dispatch(chat.clone(), truncate(Some("t1")))).await.expect("dispatch");
    let reason = echo_of(&mut csub, "the refusal", |a| matches!(a, StateAction::ChatTruncated(_))).await;
    assert!(reason.as_deref().is_some_and(|r| r.contains("turn is running")), "{reason:?}");
    let cancel = StateAction::ChatTurnCancelled(ahp::ahp_types::actions::ChatTurnCancelledAction { turn_id: "t4".into(), duration: 0, meta: None });
    within("dispatch cancel", c.dispatch(chat.clone(), cancel)).await.expect("dispatch");
    wait_for(&mut csub, "the cancel", |e| match e {
        SubscriptionEvent::Action(env) if matches!(&env.action, StateAction::ChatTurnCancelled(_)) => Some(()),
        _ => None,
    })
    .await;

    within("dispatch", c.dispatch(chat.clone(), truncate(Some("t1")))).await.expect("dispatch");
    let reason = echo_of(&mut csub, "the rewind", |a| matches!(a, StateAction::ChatTruncated(_))).await;
    assert_eq!(reason, None, "the rewind is accepted");
    let (state, _) = subscribe_chat(&c, &chat).await;
    let ids: Vec<&str> = state.turns.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["t1"], "only the kept turn");
    // The next turn follows the kept one; its id may even be a forgotten one's
    // once the backend forgot it, but a fresh one is used here.
    let (_, mut csub2) = subscribe_chat(&c, &chat).await;
    turn(&c, &chat, &mut csub2, "t5", "after the rewind").await;
    c.shutdown().await;
    assert!(daemon.terminate().success(), "ahpd exited badly after SIGTERM");
    drop(daemon);

    let daemon = Daemon::start(&data);
    let (c, _, _) = connect_init(&daemon.url, "rw2").await;
    let (state, _) = subscribe_chat(&c, &chat).await;
    let ids: Vec<&str> = state.turns.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["t1", "t5"], "the rewound history comes back from the echo transcript");
    let texts: Vec<&str> = state.turns.iter().map(|t| t.message.text.as_str()).collect();
    assert_eq!(texts, ["first", "after the rewind"]);
    // Rewind to nothing: every turn goes.
    let (_, mut csub) = subscribe_chat(&c, &chat).await;
    within("dispatch", c.dispatch(chat.clone(), truncate(None))).await.expect("dispatch");
    assert_eq!(echo_of(&mut csub, "the rewind", |a| matches!(a, StateAction::ChatTruncated(_))).await, None);
    let (state, _) = subscribe_chat(&c, &chat).await;
    assert!(state.turns.is_empty(), "{:?}", state.turns);
    c.shutdown().await;
}

/// A fork from the echo agent's second turn starts with the first two turns
/// and its origin, takes a turn of its own, and keeps all of it across a
/// restart; a side chat from the running turn starts empty; the root
/// advertises both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_and_a_side_chat_start_from_their_source() {
    use ahp::ahp_types::commands::{ChatSource, ForkChatSource, SideChatSource};
    use ahp::ahp_types::state::ChatOrigin;
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut daemon = Daemon::start(&data);
    let (c, init, _) = connect_init(&daemon.url, "fk").await;
    let caps = match init.snapshots.first().map(|s| &s.state) {
        Some(ahp::ahp_types::state::SnapshotState::Root(r)) => r.agents.iter().find(|a| a.provider == "echo").and_then(|a| a.capabilities.clone()),
        other => panic!("expected a root snapshot, got {other:?}"),
    };
    let multiple = caps.and_then(|c| c.multiple_chats).expect("echo advertises multipleChats");
    assert_eq!((multiple.fork, multiple.side_chat), (Some(true), Some(true)), "forks and side chats are advertised");
    let (sid, chat, _ssub, _state, mut csub) = new_session(&c).await;
    for (id, text) in [("t1", "first"), ("t2", "second"), ("t3", "third")] {
        turn(&c, &chat, &mut csub, id, text).await;
    }
    let fork = format!("ahp-chat:/{}-fork", fresh_id());
    let source = ChatSource::Fork(ForkChatSource { chat: chat.clone(), turn_id: "t2".into() });
    let params = CreateChatParams { channel: sid.clone(), meta: None, chat: fork.clone(), initial_message: None, source: Some(source), working_directories: None };
    let r: Value = within("createChat fork", c.request("createChat", params)).await.expect("createChat");
    assert_eq!(r, Value::Null);
    let (state, mut fsub) = subscribe_chat(&c, &fork).await;
    let ids: Vec<&str> = state.turns.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["t1", "t2"]);
    assert_eq!(state.origin, Some(ChatOrigin::Fork { chat: chat.clone(), turn_id: "t2".into() }));
    turn(&c, &fork, &mut fsub, "f1", "in the fork").await;

    // A side chat of the turn running in the source.
    within("dispatch", c.dispatch(chat.clone(), user_turn("t4", "/slow 600000"))).await.expect("dispatch");
    wait_for(&mut csub, "the slow turn starts", |e| match e {
        SubscriptionEvent::Action(env) if matches!(&env.action, StateAction::ChatTurnStarted(a) if a.turn_id == "t4") => Some(()),
        _ => None,
    })
    .await;
    let side = format!("ahp-chat:/{}-side", fresh_id());
    let source = ChatSource::SideChat(SideChatSource { chat: chat.clone(), turn_id: "t4".into(), selection: None });
    let params = CreateChatParams { channel: sid.clone(), meta: None, chat: side.clone(), initial_message: None, source: Some(source), working_directories: None };
    let r: Value = within("createChat side", c.request("createChat", params)).await.expect("createChat");
    assert_eq!(r, Value::Null);
    let (state, _) = subscribe_chat(&c, &side).await;
    assert!(state.turns.is_empty(), "{:?}", state.turns);
    assert!(matches!(&state.origin, Some(ChatOrigin::SideChat { turn_id, .. }) if turn_id == "t4"), "{:?}", state.origin);
    let cancel = StateAction::ChatTurnCancelled(ahp::ahp_types::actions::ChatTurnCancelledAction { turn_id: "t4".into(), duration: 0, meta: None });
    within("dispatch cancel", c.dispatch(chat.clone(), cancel)).await.expect("dispatch");
    wait_for(&mut csub, "the cancel", |e| match e {
        SubscriptionEvent::Action(env) if matches!(&env.action, StateAction::ChatTurnCancelled(_)) => Some(()),
        _ => None,
    })
    .await;
    c.shutdown().await;
    assert!(daemon.terminate().success(), "ahpd exited badly after SIGTERM");
    drop(daemon);

    let daemon = Daemon::start(&data);
    let (c, _, _) = connect_init(&daemon.url, "fk2").await;
    let (state, _) = subscribe_chat(&c, &fork).await;
    let texts: Vec<&str> = state.turns.iter().map(|t| t.message.text.as_str()).collect();
    assert_eq!(texts, ["first", "second", "in the fork"], "kept over a restart");
    assert_eq!(state.origin, Some(ChatOrigin::Fork { chat: chat.clone(), turn_id: "t2".into() }));
    c.shutdown().await;
}
