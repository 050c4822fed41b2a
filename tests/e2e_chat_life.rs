//! A chat's turn-level life through the official client against the
//! release daemon and its echo agent (issue 23, part A): messages queued
//! while a turn runs, reordered and removed, each run as the next turn in
//! order, across a restart.

mod common;

use ahp::ahp_types::actions::{
    ActionEnvelope, ChatPendingMessageRemovedAction, ChatPendingMessageSetAction, ChatQueuedMessagesReorderedAction,
    ChatTurnCancelledAction, StateAction,
};
use ahp::ahp_types::state::{ChatState, Message, MessageKind, MessageOrigin, PendingMessageKind, TurnState};
use ahp::{Client, SessionSubscription, SubscriptionEvent};
use common::*;

fn user_message(text: &str) -> Message {
    Message { text: text.to_owned(), origin: MessageOrigin { kind: MessageKind::User }, attachments: None, model: None, agent: None, meta: None }
}

fn queue(id: &str, text: &str) -> StateAction {
    StateAction::ChatPendingMessageSet(ChatPendingMessageSetAction { kind: PendingMessageKind::Queued, id: id.to_owned(), message: user_message(text) })
}

fn unqueue(id: &str) -> StateAction {
    StateAction::ChatPendingMessageRemoved(ChatPendingMessageRemovedAction { kind: PendingMessageKind::Queued, id: id.to_owned() })
}

fn queued_ids(chat: &ChatState) -> Vec<String> {
    chat.queued_messages.as_deref().unwrap_or_default().iter().map(|m| m.id.clone()).collect()
}

async fn send(c: &Client, chat: &str, action: StateAction) {
    within("dispatch", c.dispatch(chat.to_owned(), action)).await.expect("dispatch");
}

/// The turns started from queued messages in `seen`, in order:
/// (turn id, queued message id, the message's text).
fn queued_starts(seen: &[ActionEnvelope]) -> Vec<(String, String, String)> {
    seen.iter()
        .filter_map(|e| match &e.action {
            StateAction::ChatTurnStarted(a) => a.queued_message_id.clone().map(|q| (a.turn_id.clone(), q, a.message.text.clone())),
            _ => None,
        })
        .collect()
}

/// Follows `sub` until the chat shows turn `turn_id` ended (in its
/// history) with nothing running and nothing queued.
async fn until_queue_drained(sub: &mut SessionSubscription, chat: &mut ChatState, turn_id: &str) -> Vec<ActionEnvelope> {
    follow_chat(sub, chat, "the queue runs out", |_, c| {
        c.active_turn.is_none() && c.queued_messages.is_none() && c.turns.iter().any(|t| t.id == turn_id)
    })
    .await
}

/// Three messages queued while a turn runs, two reordered, one removed:
/// when the running turn ends (cancelled here) the host takes each left off
/// the queue (`chat/pendingMessageRemoved` from the server) and starts it
/// as the next turn (`chat/turnStarted` with its `queuedMessageId`), one
/// after the other in the queue's order, each answered by the agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_messages_run_in_order_after_the_running_turn() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(&tmp.path().join("data"));
    let (c, _, _) = connect_init(&daemon.url, "queue").await;
    let (_sid, chat, _ssub, mut state, mut sub) = new_session(&c).await;

    send(&c, &chat, user_turn("t1", "/slow 600000 a long one")).await;
    follow_chat(&mut sub, &mut state, "t1 runs", |_, s| s.active_turn.is_some()).await;
    send(&c, &chat, queue("q1", "one")).await;
    send(&c, &chat, queue("q2", "two")).await;
    send(&c, &chat, queue("q3", "three")).await;
    follow_chat(&mut sub, &mut state, "three queued", |_, s| queued_ids(s).len() == 3).await;
    assert_eq!(queued_ids(&state), ["q1", "q2", "q3"]);
    assert_eq!(state.queued_messages.as_ref().unwrap()[1].message.text, "two");

    let reorder = ChatQueuedMessagesReorderedAction { order: vec!["q3".into(), "q1".into(), "q2".into()] };
    send(&c, &chat, StateAction::ChatQueuedMessagesReordered(reorder)).await;
    follow_chat(&mut sub, &mut state, "reordered", |_, s| queued_ids(s) == ["q3", "q1", "q2"]).await;
    send(&c, &chat, unqueue("q1")).await;
    follow_chat(&mut sub, &mut state, "q1 removed", |_, s| queued_ids(s) == ["q3", "q2"]).await;
    // A second client subscribing now sees the same queue.
    let (other, _, _) = connect_init(&daemon.url, "queue-watcher").await;
    let (snapshot, _osub) = subscribe_chat(&other, &chat).await;
    assert_eq!(queued_ids(&snapshot), ["q3", "q2"], "the queue is part of the chat's state");
    assert!(state.active_turn.as_ref().is_some_and(|t| t.id == "t1"), "t1 still runs: nothing queued jumped it");

    send(&c, &chat, StateAction::ChatTurnCancelled(ChatTurnCancelledAction { turn_id: "t1".into(), duration: 0, meta: None })).await;
    let seen = until_queue_drained(&mut sub, &mut state, "q2").await;
    let starts = queued_starts(&seen);
    assert_eq!(starts, [("q3".into(), "q3".into(), "three".into()), ("q2".into(), "q2".into(), "two".into())], "in the queue's order");
    let server_removals: Vec<&str> = seen
        .iter()
        .filter_map(|e| match &e.action {
            StateAction::ChatPendingMessageRemoved(a) if e.origin.is_none() => Some(a.id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(server_removals, ["q3", "q2"], "the host takes each off the queue as it starts it");
    let ids: Vec<(&str, TurnState)> = state.turns.iter().map(|t| (t.id.as_str(), t.state.clone())).collect();
    assert_eq!(ids, [("t1", TurnState::Cancelled), ("q3", TurnState::Complete), ("q2", TurnState::Complete)]);
    assert!(markdown(&state.turns[1]).contains("three"), "the agent answered the queued message: {}", markdown(&state.turns[1]));
    assert!(!state.turns.iter().any(|t| t.message.text == "one"), "the removed message never ran");
    c.shutdown().await;
    other.shutdown().await;
}

/// A message queued in a chat that runs nothing starts at once, as the
/// protocol asks; a queue over the limit is refused with a reason, and an
/// unknown removal too, nothing changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_queued_in_an_idle_chat_starts_at_once_and_the_queue_is_bounded() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start_with(&tmp.path().join("data"), &["--limit-queued-messages-per-chat", "1"]);
    let (c, _, _) = connect_init(&daemon.url, "idle-queue").await;
    let (_sid, chat, _ssub, mut state, mut sub) = new_session(&c).await;

    send(&c, &chat, queue("now", "right away")).await;
    let seen = until_queue_drained(&mut sub, &mut state, "now").await;
    assert_eq!(queued_starts(&seen), [("now".into(), "now".into(), "right away".into())]);
    assert_eq!(state.turns.last().map(|t| t.state.clone()), Some(TurnState::Complete));

    send(&c, &chat, user_turn("t2", "/slow 600000")).await;
    follow_chat(&mut sub, &mut state, "t2 runs", |_, s| s.active_turn.is_some()).await;
    send(&c, &chat, queue("a", "first")).await;
    follow_chat(&mut sub, &mut state, "a queued", |_, s| queued_ids(s) == ["a"]).await;
    send(&c, &chat, queue("b", "second")).await;
    let reason = wait_for(&mut sub, "the refusal", |e| match e {
        SubscriptionEvent::Action(env) => env.rejection_reason.clone(),
        _ => None,
    })
    .await;
    assert!(reason.contains("limit"), "the refusal says why: {reason}");
    send(&c, &chat, unqueue("not-there")).await;
    let reason = wait_for(&mut sub, "the second refusal", |e| match e {
        SubscriptionEvent::Action(env) => env.rejection_reason.clone(),
        _ => None,
    })
    .await;
    assert!(reason.contains("no such pending message"), "{reason}");
    let (snapshot, _s2) = subscribe_chat(&c, &chat).await;
    assert_eq!(queued_ids(&snapshot), ["a"], "refusals change nothing");
    c.shutdown().await;
}

/// A message queued while a turn runs survives the daemon's restart (its
/// graceful stop cancels the running turn and starts nothing new): after
/// the restart the chat shows it queued until the session wakes, and the
/// wake runs it as the next turn, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_message_runs_once_after_a_restart() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut daemon = Daemon::start_with(&data, &["--shutdown-grace-seconds", "1"]);
    let (c, _, _) = connect_init(&daemon.url, "before").await;
    let (sid, chat, _ssub, mut state, mut sub) = new_session(&c).await;
    send(&c, &chat, user_turn("t1", "/slow 600000 still running")).await;
    follow_chat(&mut sub, &mut state, "t1 runs", |_, s| s.active_turn.is_some()).await;
    send(&c, &chat, queue("later", "after the restart")).await;
    follow_chat(&mut sub, &mut state, "queued", |_, s| queued_ids(s) == ["later"]).await;
    c.shutdown().await;
    assert!(daemon.terminate().success(), "ahpd exited badly after SIGTERM");

    let daemon = Daemon::start(&data);
    let (c, _, _) = connect_init(&daemon.url, "after").await;
    assert!(list(&c).await.iter().any(|r| r.resource == sid), "the session is listed after the restart");
    // Subscribing wakes the session; the wake starts the queued message.
    let (mut state, mut sub) = subscribe_chat(&c, &chat).await;
    let done = |s: &ChatState| s.active_turn.is_none() && s.queued_messages.is_none() && s.turns.iter().any(|t| t.id == "later");
    if !done(&state) {
        follow_chat(&mut sub, &mut state, "the queued message runs after the wake", |_, s| done(s)).await;
    }
    let runs: Vec<&str> = state.turns.iter().filter(|t| t.message.text == "after the restart").map(|t| t.id.as_str()).collect();
    assert_eq!(runs, ["later"], "it ran once");
    let last = state.turns.last().expect("a turn");
    assert_eq!(last.state, TurnState::Complete);
    assert!(markdown(last).contains("after the restart"), "{}", markdown(last));
    assert_eq!(state.turns.first().map(|t| t.state.clone()), Some(TurnState::Cancelled), "the stop cancelled t1");
    c.shutdown().await;
}

/// A steering message sent while a turn runs is shown as the chat's
/// `steeringMessage`; a second one replaces it. The echo agent takes one
/// only between two chunks of its reply, and a `/slow 600000` turn reaches
/// none before it is cancelled here, so the message is held and runs as the
/// next turn, before the messages queued earlier (as on an ACP agent, which
/// never takes one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steering_message_is_held_and_runs_before_the_queue() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(&tmp.path().join("data"));
    let (c, _, _) = connect_init(&daemon.url, "steer").await;
    let (_sid, chat, _ssub, mut state, mut sub) = new_session(&c).await;
    send(&c, &chat, user_turn("t1", "/slow 600000")).await;
    follow_chat(&mut sub, &mut state, "t1 runs", |_, s| s.active_turn.is_some()).await;
    send(&c, &chat, queue("q1", "queued first")).await;
    let steer = |id: &str, text: &str| {
        StateAction::ChatPendingMessageSet(ChatPendingMessageSetAction { kind: PendingMessageKind::Steering, id: id.to_owned(), message: user_message(text) })
    };
    send(&c, &chat, steer("s1", "go left")).await;
    send(&c, &chat, steer("s2", "no, go right")).await;
    follow_chat(&mut sub, &mut state, "s2 steers", |_, s| s.steering_message.as_ref().is_some_and(|m| m.id == "s2")).await;
    assert_eq!(queued_ids(&state), ["q1"]);
    send(&c, &chat, StateAction::ChatTurnCancelled(ChatTurnCancelledAction { turn_id: "t1".into(), duration: 0, meta: None })).await;
    let seen = until_queue_drained(&mut sub, &mut state, "q1").await;
    let starts: Vec<String> = queued_starts(&seen).into_iter().map(|(_, id, _)| id).collect();
    assert_eq!(starts, ["s2", "q1"], "the steering message first, then the queue");
    assert!(state.steering_message.is_none());
    assert!(!state.turns.iter().any(|t| t.message.text == "go left"), "the replaced steering message never ran");
    c.shutdown().await;
}

/// A steering message sent while the echo agent streams its reply is taken
/// into the running turn at the next chunk: the host removes it (no origin,
/// no turn started from it), the turn answers it in a part of its own and
/// completes, and a second client watching the chat sees the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steering_message_is_taken_into_the_running_turn() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(&tmp.path().join("data"));
    let (c, _, _) = connect_init(&daemon.url, "steer-live").await;
    let (_sid, chat, _ssub, mut state, mut sub) = new_session(&c).await;
    // Four chunks, 2 s apart: the steering message lands between two.
    send(&c, &chat, user_turn("t1", "/slow 8000 the plan")).await;
    follow_chat(&mut sub, &mut state, "t1 runs", |_, s| s.active_turn.is_some()).await;
    let (other, _, _) = connect_init(&daemon.url, "steer-watch").await;
    let (mut seen, mut osub) = subscribe_chat(&other, &chat).await;
    let steering = ChatPendingMessageSetAction { kind: PendingMessageKind::Steering, id: "s1".to_owned(), message: user_message("go left") };
    send(&c, &chat, StateAction::ChatPendingMessageSet(steering)).await;
    let events = follow_chat(&mut sub, &mut state, "t1 ends", |_, s| s.active_turn.is_none() && s.turns.iter().any(|t| t.id == "t1")).await;
    let removed: Vec<&ActionEnvelope> = events
        .iter()
        .filter(|e| matches!(&e.action, StateAction::ChatPendingMessageRemoved(a) if a.id == "s1" && a.kind == PendingMessageKind::Steering))
        .collect();
    assert_eq!(removed.len(), 1, "the host removed it once");
    assert!(removed[0].origin.is_none(), "the host's removal, not a client's");
    assert!(queued_starts(&events).is_empty(), "no turn started from it");
    assert!(state.steering_message.is_none());
    let t1 = state.turns.iter().find(|t| t.id == "t1").expect("t1 kept");
    assert_eq!(t1.state, TurnState::Complete);
    let text = markdown(t1);
    assert!(text.contains("Echo (steered): go left"), "the turn answered it: {text}");
    assert!(text.contains("Echo: /slow 8000 the plan"), "and finished its own reply: {text}");
    follow_chat(&mut osub, &mut seen, "t1 ends, seen", |_, s| s.active_turn.is_none() && s.turns.iter().any(|t| t.id == "t1")).await;
    assert!(seen.steering_message.is_none());
    assert!(markdown(seen.turns.iter().find(|t| t.id == "t1").expect("t1 seen")).contains("Echo (steered): go left"));
    assert_eq!(state.turns.len(), 1, "nothing else ran");
    c.shutdown().await;
    other.shutdown().await;
}
