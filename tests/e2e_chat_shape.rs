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
