//! A chat's life past its queue through the official client against the
//! release daemon and its echo agent (issue 23): a turn that ended in a
//! resumable error resumed, across a restart too; a resume refused with a
//! reason where it does not apply; a chat moved to another session
//! (`moveChat`), listed there with its turn, and still there once after a
//! restart.

mod common;

use ahp::ahp_types::actions::{ChatTurnResumeAction, StateAction};
use ahp::ahp_types::state::{ChatState, ResponsePart, TurnState};
use ahp::{Client, SubscriptionEvent};
use common::*;
use serde_json::Value;

async fn send(c: &Client, chat: &str, action: StateAction) {
    within("dispatch", c.dispatch(chat.to_owned(), action)).await.expect("dispatch");
}

fn resume(turn_id: &str) -> StateAction {
    StateAction::ChatTurnResume(ChatTurnResumeAction { turn_id: turn_id.to_owned() })
}

/// Whether `chat`'s last turn is `turn_id`, ended in a resumable error.
fn ended_resumable(chat: &ChatState, turn_id: &str) -> bool {
    chat.active_turn.is_none()
        && chat.turns.last().is_some_and(|t| {
            t.id == turn_id
                && t.state == TurnState::Error
                && matches!(t.response_parts.last(), Some(ResponsePart::Error(e)) if e.resumable == Some(true))
        })
}

/// Echo's `/error` streams its reply, then ends the turn in an error it
/// marks resumable; a second client watching sees the same. A resume of
/// it reopens the same turn (no new turn), the agent goes on with the
/// reply and completes it; resuming again, an earlier turn, or an unknown
/// one is refused with a reason and nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_errored_echo_turn_is_resumed_and_completes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(&tmp.path().join("data"));
    let (c, _, _) = connect_init(&daemon.url, "resume").await;
    let (_sid, chat, _ssub, mut state, mut sub) = new_session(&c).await;
    send(&c, &chat, user_turn("t1", "first")).await;
    follow_chat(&mut sub, &mut state, "t1 completes", |_, s| s.turns.iter().any(|t| t.id == "t1")).await;

    send(&c, &chat, user_turn("t2", "/error half a reply")).await;
    follow_chat(&mut sub, &mut state, "t2 errs, resumably", |_, s| ended_resumable(s, "t2")).await;
    assert!(markdown(state.turns.last().expect("t2")).contains("half a reply"), "the reply streamed before the error");

    let (watcher, _, _) = connect_init(&daemon.url, "resume-watcher").await;
    let (mut watched, mut wsub) = subscribe_chat(&watcher, &chat).await;
    assert!(ended_resumable(&watched, "t2"), "a second client sees the same");

    send(&c, &chat, resume("t2")).await;
    follow_chat(&mut sub, &mut state, "t2 resumed and complete", |_, s| {
        s.active_turn.is_none() && s.turns.last().is_some_and(|t| t.id == "t2" && t.state == TurnState::Complete)
    })
    .await;
    let ids: Vec<&str> = state.turns.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["t1", "t2"], "the same turn, not a new one");
    let text = markdown(state.turns.last().expect("t2"));
    assert!(text.contains("half a reply") && text.contains("Echo (resumed): /error half a reply"), "{text}");
    follow_chat(&mut wsub, &mut watched, "the watcher sees it complete", |_, s| {
        s.turns.last().is_some_and(|t| t.id == "t2" && t.state == TurnState::Complete)
    })
    .await;

    for (id, why) in [("t2", "did not end in an error"), ("t1", "last turn"), ("nope", "no such turn")] {
        send(&c, &chat, resume(id)).await;
        let reason = wait_for(&mut sub, "the refusal", |e| match e {
            SubscriptionEvent::Action(env) => env.rejection_reason.clone(),
            _ => None,
        })
        .await;
        assert!(reason.contains(why), "{id}: {reason}");
    }
    let (snapshot, _s3) = subscribe_chat(&c, &chat).await;
    assert_eq!(snapshot.turns.len(), 2, "refusals change nothing");
    c.shutdown().await;
    watcher.shutdown().await;
}

/// The errored turn is in the echo agent's transcript: after a restart the
/// chat shows it resumable, the resume wakes the session, and the turn
/// completes once (one turn t2 in the history, before and after another
/// restart).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumable_turn_survives_a_restart_and_is_resumed_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut daemon = Daemon::start(&data);
    let (c, _, _) = connect_init(&daemon.url, "before").await;
    let (_sid, chat, _ssub, mut state, mut sub) = new_session(&c).await;
    send(&c, &chat, user_turn("t1", "/error cut short")).await;
    follow_chat(&mut sub, &mut state, "t1 errs", |_, s| ended_resumable(s, "t1")).await;
    c.shutdown().await;
    assert!(daemon.terminate().success(), "ahpd exited badly after SIGTERM");

    let mut daemon = Daemon::start(&data);
    let (c, _, _) = connect_init(&daemon.url, "after").await;
    let (mut state, mut sub) = subscribe_chat(&c, &chat).await;
    assert!(ended_resumable(&state, "t1"), "still resumable after the restart: {:?}", state.turns);
    send(&c, &chat, resume("t1")).await;
    follow_chat(&mut sub, &mut state, "t1 resumed", |_, s| s.active_turn.is_none() && s.turns.last().is_some_and(|t| t.state == TurnState::Complete)).await;
    c.shutdown().await;
    assert!(daemon.terminate().success(), "ahpd exited badly after SIGTERM");

    let daemon = Daemon::start(&data);
    let (c, _, _) = connect_init(&daemon.url, "again").await;
    let (state, _sub) = subscribe_chat(&c, &chat).await;
    let ids: Vec<(&str, TurnState)> = state.turns.iter().map(|t| (t.id.as_str(), t.state.clone())).collect();
    assert_eq!(ids, [("t1", TurnState::Complete)], "the transcript holds the turn once, as it ended");
    c.shutdown().await;
    drop(daemon);
}

/// Two echo sessions A and B; a side chat made in A runs a turn, then
/// `moveChat` takes it to B: the answer names B, A no longer lists it, B
/// lists it (movable) with its turn, the row of each says the same, and a
/// turn sent to it afterwards runs in B. After a restart it is in B once
/// and nowhere else, with both turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_side_chat_moves_to_another_session_with_its_turn_and_stays_there_after_a_restart() {
    use ahp::ahp_types::commands::{ChatMoveDestination, ChatMoveToSessionDestination, CreateChatParams, MoveChatParams, MoveChatResult};
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut daemon = Daemon::start(&data);
    let (c, _, _) = connect_init(&daemon.url, "mover").await;
    let (a, a_chat, _asub, mut a_state, mut a_csub) = new_session(&c).await;
    let (b, b_chat, _bsub, mut b_state, mut b_csub) = new_session(&c).await;
    // Both announced (a turn each), so both are rows.
    send(&c, &a_chat, user_turn("a1", "in a")).await;
    follow_chat(&mut a_csub, &mut a_state, "a1 completes", |_, s| s.turns.iter().any(|t| t.id == "a1")).await;
    send(&c, &b_chat, user_turn("b1", "in b")).await;
    follow_chat(&mut b_csub, &mut b_state, "b1 completes", |_, s| s.turns.iter().any(|t| t.id == "b1")).await;

    let side = format!("ahp-chat:/side-{}", fresh_id());
    let params = CreateChatParams { channel: a.clone(), meta: None, chat: side.clone(), initial_message: None, source: None, working_directories: None };
    let r: Value = within("createChat", c.request("createChat", params)).await.expect("createChat");
    assert_eq!(r, Value::Null);
    let (mut side_state, mut side_sub) = subscribe_chat(&c, &side).await;
    assert_eq!(side_state.movable, Some(true), "a side chat is movable");
    send(&c, &side, user_turn("s1", "a side question")).await;
    follow_chat(&mut side_sub, &mut side_state, "s1 completes", |_, s| s.turns.iter().any(|t| t.id == "s1")).await;

    let (a_session, _) = subscribe_session(&c, &a).await;
    let default_entry = a_session.chats.iter().find(|e| e.resource == a_chat).expect("the default chat listed");
    assert_eq!(default_entry.movable, Some(false), "the default chat is not movable");

    let params = MoveChatParams {
        channel: side.clone(),
        meta: None,
        destination: ChatMoveDestination::Session(ChatMoveToSessionDestination { session: b.clone(), after: Some(b_chat.clone()) }),
    };
    let moved: MoveChatResult = within("moveChat", c.request("moveChat", params)).await.expect("moveChat");
    assert_eq!(moved.session, b);

    let (a_session, _) = subscribe_session(&c, &a).await;
    assert!(a_session.chats.iter().all(|e| e.resource != side), "A no longer lists it: {:?}", a_session.chats);
    let (b_session, _) = subscribe_session(&c, &b).await;
    let listed: Vec<&str> = b_session.chats.iter().map(|e| e.resource.as_str()).collect();
    assert_eq!(listed, [b_chat.as_str(), side.as_str()], "B lists it after its default chat");
    let rows = list(&c).await;
    let row_chats = |uri: &str| -> Vec<String> {
        rows.iter().find(|r| r.resource == uri).and_then(|r| r.chats.as_ref()).map(|l| l.iter().map(|e| e.resource.clone()).collect()).unwrap_or_default()
    };
    assert!(!row_chats(&a).contains(&side), "A's row no longer lists it");
    assert!(row_chats(&b).contains(&side), "B's row lists it");
    let (state, _s) = subscribe_chat(&c, &side).await;
    let ids: Vec<&str> = state.turns.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["s1"], "its turn went with it");

    // It runs in B now, and its subscriber still hears it.
    send(&c, &side, user_turn("s2", "after the move")).await;
    follow_chat(&mut side_sub, &mut side_state, "s2 completes", |_, s| s.turns.iter().any(|t| t.id == "s2")).await;
    c.shutdown().await;
    assert!(daemon.terminate().success(), "ahpd exited badly after SIGTERM");

    let daemon = Daemon::start(&data);
    let (c, _, _) = connect_init(&daemon.url, "after").await;
    let rows = list(&c).await;
    let holders: Vec<&str> = rows
        .iter()
        .filter(|r| r.chats.as_ref().is_some_and(|l| l.iter().any(|e| e.resource == side)))
        .map(|r| r.resource.as_str())
        .collect();
    assert_eq!(holders, [b.as_str()], "in B once, nowhere else");
    let (state, _s) = subscribe_chat(&c, &side).await;
    let ids: Vec<&str> = state.turns.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["s1", "s2"], "both turns, once each");
    let (b_session, _) = subscribe_session(&c, &b).await;
    assert_eq!(b_session.chats.iter().filter(|e| e.resource == side).count(), 1);
    c.shutdown().await;
    drop(daemon);
}
