//! A chat's turn-level life through the official client against the
//! release daemon and its echo agent (issue 23, part A): messages queued
//! while a turn runs, reordered and removed, each run as the next turn in
//! order, across a restart.

mod common;

use ahp::ahp_types::actions::{
    ActionEnvelope, ChatPendingMessageRemovedAction, ChatPendingMessageSetAction, ChatQueuedMessagesReorderedAction,
    ChatTurnCancelledAction, StateAction,
};
use ahp::ahp_types::state::{ChatState, Message, MessageKind, MessageOrigin, PendingMessageKind, ResponsePart, SessionState, SessionSummary, TurnState};
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

// ---------------------------------------------------------------------------
// The whole journey (issue 23, "Done when")
// ---------------------------------------------------------------------------

/// The request id of the open question in the chat's running turn, if any.
fn open_question(chat: &ChatState) -> Option<String> {
    chat.active_turn.as_ref()?.response_parts.iter().find_map(|p| match p {
        ResponsePart::InputRequest(i) if i.response.is_none() => Some(i.request.id.clone()),
        _ => None,
    })
}

/// Whether `chat`'s last turn is `turn_id`, ended in an error the backend
/// marked resumable.
fn ended_resumable(chat: &ChatState, turn_id: &str) -> bool {
    chat.active_turn.is_none()
        && chat.turns.last().is_some_and(|t| {
            t.id == turn_id && t.state == TurnState::Error && matches!(t.response_parts.last(), Some(ResponsePart::Error(e)) if e.resumable == Some(true))
        })
}

fn turn_ids(chat: &ChatState) -> Vec<&str> {
    chat.turns.iter().map(|t| t.id.as_str()).collect()
}

fn chat_uris(chats: &[ahp::ahp_types::state::ChatSummary]) -> Vec<&str> {
    chats.iter().map(|e| e.resource.as_str()).collect()
}

/// Applies session-channel actions to `state` until `done` holds.
async fn session_until(sub: &mut SessionSubscription, state: &mut SessionState, what: &str, mut done: impl FnMut(&SessionState) -> bool) {
    within(what, async {
        while !done(state) {
            match sub.recv().await {
                Some(SubscriptionEvent::Action(env)) => {
                    assert!(env.rejection_reason.is_none(), "rejected: {env:?}");
                    let _ = ahp::reducers::apply_action_to_session(state, &env.action);
                }
                Some(_) => {}
                None => panic!("session subscription closed while waiting for {what}"),
            }
        }
    })
    .await;
}

/// The catalogue row of `sid`.
async fn row(c: &Client, sid: &str) -> SessionSummary {
    list(c).await.into_iter().find(|r| r.resource == sid).expect("the session is listed")
}

fn row_chats(r: &SessionSummary) -> Vec<String> {
    r.chats.as_ref().map(|l| l.iter().map(|e| e.resource.clone()).collect()).unwrap_or_default()
}

/// The done-when flow of issue 23 in one chat's life, through the official
/// client against the daemon and its echo agent, each step checked as a
/// client sees it (the reducers' chat and session state, a second client's
/// snapshot, the catalogue row, root notifications): three messages queued
/// during a slow turn, two reordered, one removed; the running turn
/// steered; a question answered; a rewind to turn 1; an errored turn
/// resumed; a fork from turn 1; a side chat, moved to another session. At
/// the end the queued messages ran exactly once each, in the reordered
/// order, and nothing else ran from the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_lives_its_whole_life_through_the_official_client() {
    use ahp::ahp_types::actions::{ChatInputCompletedAction, ChatTruncatedAction, ChatTurnResumeAction};
    use ahp::ahp_types::commands::{
        ChatMoveDestination, ChatMoveToSessionDestination, ChatSource, CreateChatParams, ForkChatSource, MoveChatParams, MoveChatResult, SideChatSource,
    };
    use ahp::ahp_types::state::{ChatInputAnswer, ChatInputAnswerValue, ChatInputAnswered, ChatInputResponseKind, ChatInputTextAnswerValue, ChatOrigin};
    use serde_json::Value;

    let tmp = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(&tmp.path().join("data"));
    let (c, _, _root) = connect_init(&daemon.url, "journey").await;
    let (a, chat, _ssub, mut state, mut sub) = new_session(&c).await;
    let (mut a_session, mut a_sub) = subscribe_session(&c, &a).await;
    // Every envelope the chat's subscriber saw, start to end.
    let mut journal: Vec<ActionEnvelope> = Vec::new();

    // Turn 1.
    send(&c, &chat, user_turn("t1", "first")).await;
    journal.extend(follow_chat(&mut sub, &mut state, "t1 completes", |_, s| s.active_turn.is_none() && turn_ids(s) == ["t1"]).await);

    // A slow turn (four chunks, 3 s apart); three messages queued during it.
    send(&c, &chat, user_turn("t2", "/slow 12000 the plan")).await;
    journal.extend(follow_chat(&mut sub, &mut state, "t2 runs", |_, s| s.active_turn.is_some()).await);
    for (id, text) in [("q1", "one"), ("q2", "two"), ("q3", "three")] {
        send(&c, &chat, queue(id, text)).await;
    }
    journal.extend(follow_chat(&mut sub, &mut state, "three queued", |_, s| queued_ids(s).len() == 3).await);
    assert_eq!(queued_ids(&state), ["q1", "q2", "q3"]);
    assert_eq!(row(&c, &a).await.status & ACTIVITY, 8, "the row reads InProgress while t2 runs");

    // Reorder two (q2 and q3 swap), remove one (q1).
    let reorder = ChatQueuedMessagesReorderedAction { order: vec!["q1".into(), "q3".into(), "q2".into()] };
    send(&c, &chat, StateAction::ChatQueuedMessagesReordered(reorder)).await;
    journal.extend(follow_chat(&mut sub, &mut state, "reordered", |_, s| queued_ids(s) == ["q1", "q3", "q2"]).await);
    send(&c, &chat, unqueue("q1")).await;
    journal.extend(follow_chat(&mut sub, &mut state, "q1 removed", |_, s| queued_ids(s) == ["q3", "q2"]).await);
    let (watcher, _, _) = connect_init(&daemon.url, "journey-watcher").await;
    let (snapshot, _w1) = subscribe_chat(&watcher, &chat).await;
    assert_eq!(queued_ids(&snapshot), ["q3", "q2"], "a second client's snapshot holds the same queue");
    assert!(snapshot.active_turn.as_ref().is_some_and(|t| t.id == "t2"), "t2 still runs: nothing queued jumped it");

    // Steer the running turn: the agent takes it at its next chunk, then t2
    // completes and the queue runs, q3 then q2.
    let steering = ChatPendingMessageSetAction { kind: PendingMessageKind::Steering, id: "s1".into(), message: user_message("go left") };
    send(&c, &chat, StateAction::ChatPendingMessageSet(steering)).await;
    let seen = follow_chat(&mut sub, &mut state, "t2 steered and the queue run", |_, s| {
        s.active_turn.is_none() && s.queued_messages.is_none() && turn_ids(s).contains(&"q2")
    })
    .await;
    let steering_removed: Vec<&ActionEnvelope> = seen
        .iter()
        .filter(|e| matches!(&e.action, StateAction::ChatPendingMessageRemoved(r) if r.id == "s1" && r.kind == PendingMessageKind::Steering))
        .collect();
    assert_eq!(steering_removed.len(), 1, "the host took the steering message off once");
    assert!(steering_removed[0].origin.is_none(), "the host's removal, not a client's");
    journal.extend(seen);
    assert!(state.steering_message.is_none());
    assert_eq!(turn_ids(&state), ["t1", "t2", "q3", "q2"]);
    assert!(state.turns.iter().all(|t| t.state == TurnState::Complete), "{:?}", state.turns);
    assert!(markdown(&state.turns[1]).contains("Echo (steered): go left"), "t2 answered the steering: {}", markdown(&state.turns[1]));
    assert!(markdown(&state.turns[2]).contains("three"), "{}", markdown(&state.turns[2]));

    // A question, answered.
    send(&c, &chat, user_turn("k1", "/ask what colour?")).await;
    journal.extend(follow_chat(&mut sub, &mut state, "the question and its activity", |_, s| open_question(s).is_some() && s.activity.is_some()).await);
    assert_eq!(state.status & ACTIVITY, 24, "InputNeeded");
    let r = row(&c, &a).await;
    assert_eq!((r.status & ACTIVITY, r.activity.as_deref()), (24, Some("Question: what colour?")), "the row reads InputNeeded with the question");
    let request_id = open_question(&state).expect("asked");
    let answered = ChatInputAnswered { value: ChatInputAnswerValue::Text(ChatInputTextAnswerValue { value: "blue".into() }) };
    let answers = std::collections::HashMap::from([("answer".to_owned(), ChatInputAnswer::Submitted(answered))]);
    let answer = ChatInputCompletedAction { request_id, response: ChatInputResponseKind::Accept, answers: Some(answers) };
    send(&c, &chat, StateAction::ChatInputCompleted(answer)).await;
    journal.extend(follow_chat(&mut sub, &mut state, "the answer's reply", |e, _| is_turn_complete(e)).await);
    assert!(markdown(state.turns.last().expect("k1")).contains("Echo: blue"), "the agent got the answer");
    assert_eq!(row(&c, &a).await.status & ACTIVITY, 1, "the row is Idle again");

    // Rewind to turn 1: the chat, a second client and the row agree; the
    // row's change counts stay (a rewind undoes no files).
    let changes_before = row(&c, &a).await.changes;
    send(&c, &chat, StateAction::ChatTruncated(ChatTruncatedAction { turn_id: Some("t1".into()) })).await;
    journal.extend(follow_chat(&mut sub, &mut state, "rewound", |e, _| matches!(e.action, StateAction::ChatTruncated(_))).await);
    assert_eq!(turn_ids(&state), ["t1"]);
    let (snapshot, _w2) = subscribe_chat(&watcher, &chat).await;
    assert_eq!(turn_ids(&snapshot), ["t1"], "a second client sees only turn 1");
    assert_eq!(row(&c, &a).await.changes, changes_before, "the change counts stay");

    // An errored turn, resumed.
    send(&c, &chat, user_turn("e1", "/error half a reply")).await;
    journal.extend(follow_chat(&mut sub, &mut state, "e1 errs, resumably", |_, s| ended_resumable(s, "e1")).await);
    send(&c, &chat, StateAction::ChatTurnResume(ChatTurnResumeAction { turn_id: "e1".into() })).await;
    journal.extend(
        follow_chat(&mut sub, &mut state, "e1 resumed and complete", |_, s| {
            s.active_turn.is_none() && s.turns.last().is_some_and(|t| t.id == "e1" && t.state == TurnState::Complete)
        })
        .await,
    );
    assert_eq!(turn_ids(&state), ["t1", "e1"], "the same turn, not a new one");
    assert!(markdown(&state.turns[1]).contains("Echo (resumed): /error half a reply"), "{}", markdown(&state.turns[1]));

    // A fork from turn 1.
    let fork = format!("ahp-chat:/{}-fork", fresh_id());
    let source = ChatSource::Fork(ForkChatSource { chat: chat.clone(), turn_id: "t1".into() });
    let params = CreateChatParams { channel: a.clone(), meta: None, chat: fork.clone(), initial_message: None, source: Some(source), working_directories: None };
    let r: Value = within("createChat fork", c.request("createChat", params)).await.expect("createChat fork");
    assert_eq!(r, Value::Null);
    session_until(&mut a_sub, &mut a_session, "the fork listed", |s| s.chats.iter().any(|e| e.resource == fork)).await;
    let (mut fork_state, mut fork_sub) = subscribe_chat(&c, &fork).await;
    assert_eq!(turn_ids(&fork_state), ["t1"], "the fork starts with turn 1");
    assert_eq!(fork_state.origin, Some(ChatOrigin::Fork { chat: chat.clone(), turn_id: "t1".into() }));
    send(&c, &fork, user_turn("f1", "in the fork")).await;
    follow_chat(&mut fork_sub, &mut fork_state, "f1 completes", |_, s| s.active_turn.is_none() && turn_ids(s) == ["t1", "f1"]).await;
    let (snapshot, _w3) = subscribe_chat(&watcher, &chat).await;
    assert_eq!(turn_ids(&snapshot), ["t1", "e1"], "the source chat is untouched by its fork");

    // A side chat of the resumed turn.
    let side = format!("ahp-chat:/{}-side", fresh_id());
    let source = ChatSource::SideChat(SideChatSource { chat: chat.clone(), turn_id: "e1".into(), selection: None });
    let params = CreateChatParams { channel: a.clone(), meta: None, chat: side.clone(), initial_message: None, source: Some(source), working_directories: None };
    let r: Value = within("createChat side", c.request("createChat", params)).await.expect("createChat side");
    assert_eq!(r, Value::Null);
    session_until(&mut a_sub, &mut a_session, "the side chat listed", |s| s.chats.iter().any(|e| e.resource == side)).await;
    assert_eq!(chat_uris(&a_session.chats), [chat.as_str(), fork.as_str(), side.as_str()]);
    let (mut side_state, mut side_sub) = subscribe_chat(&c, &side).await;
    assert!(side_state.turns.is_empty());
    assert!(matches!(&side_state.origin, Some(ChatOrigin::SideChat { turn_id, .. }) if turn_id == "e1"), "{:?}", side_state.origin);
    assert_eq!(side_state.movable, Some(true), "a side chat is movable");
    send(&c, &side, user_turn("s1", "a side question")).await;
    follow_chat(&mut side_sub, &mut side_state, "s1 completes", |_, s| s.active_turn.is_none() && turn_ids(s) == ["s1"]).await;
    assert!(row_chats(&row(&c, &a).await).contains(&side), "A's row lists the side chat");

    // Move the side chat to another session B (a row: it ran a turn).
    let (b, b_chat, _bssub, mut b_chat_state, mut b_csub) = new_session(&c).await;
    send(&c, &b_chat, user_turn("b1", "in b")).await;
    follow_chat(&mut b_csub, &mut b_chat_state, "b1 completes", |_, s| s.active_turn.is_none() && turn_ids(s) == ["b1"]).await;
    let (mut b_session, mut b_sub) = subscribe_session(&c, &b).await;
    let (root_client, _, mut root_watch) = connect_init(&daemon.url, "journey-root").await;
    let a_changes = row(&c, &a).await.changes;
    let params = MoveChatParams {
        channel: side.clone(),
        meta: None,
        destination: ChatMoveDestination::Session(ChatMoveToSessionDestination { session: b.clone(), after: Some(b_chat.clone()) }),
    };
    let moved: MoveChatResult = within("moveChat", c.request("moveChat", params)).await.expect("moveChat");
    assert_eq!(moved.session, b, "the answer names the destination");
    session_until(&mut a_sub, &mut a_session, "A lets it go", |s| s.chats.iter().all(|e| e.resource != side)).await;
    assert_eq!(chat_uris(&a_session.chats), [chat.as_str(), fork.as_str()]);
    session_until(&mut b_sub, &mut b_session, "B takes it", |s| s.chats.iter().any(|e| e.resource == side)).await;
    assert_eq!(chat_uris(&b_session.chats), [b_chat.as_str(), side.as_str()], "after B's default chat");
    // The root tells both rows, and the listing agrees.
    let mut told: (bool, bool) = (false, false);
    within("both rows told", async {
        while !(told.0 && told.1) {
            match root_watch.recv().await {
                Some(SubscriptionEvent::SessionSummaryChanged(p)) => {
                    if let Some(chats) = p.changes.chats {
                        let has = chats.iter().any(|e| e.resource == side);
                        if p.session == a && !has {
                            told.0 = true;
                        }
                        if p.session == b && has {
                            told.1 = true;
                        }
                    }
                }
                Some(_) => {}
                None => panic!("root subscription closed"),
            }
        }
    })
    .await;
    let (ra, rb) = (row(&c, &a).await, row(&c, &b).await);
    assert!(!row_chats(&ra).contains(&side), "A's row no longer lists it");
    assert!(row_chats(&rb).contains(&side), "B's row lists it");
    assert_eq!(ra.changes, a_changes, "A's change counts stay (the side chat changed no files)");
    let (snapshot, _w4) = subscribe_chat(&watcher, &side).await;
    assert_eq!(turn_ids(&snapshot), ["s1"], "its turn went with it");
    // It runs in B now, and its subscriber still hears it.
    send(&c, &side, user_turn("s2", "after the move")).await;
    follow_chat(&mut side_sub, &mut side_state, "s2 completes", |_, s| s.active_turn.is_none() && turn_ids(s) == ["s1", "s2"]).await;

    // The queue ran exactly once each, in the reordered order; the removed
    // message and the steering message never started a turn of their own.
    let starts: Vec<String> = queued_starts(&journal).into_iter().map(|(_, q, _)| q).collect();
    assert_eq!(starts, ["q3", "q2"], "the queued messages ran once each, in the reordered order");
    let started: Vec<&str> = journal
        .iter()
        .filter_map(|e| match &e.action {
            StateAction::ChatTurnStarted(t) => Some(t.turn_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(started, ["t1", "t2", "q3", "q2", "k1", "e1"], "every turn of the chat started once");
    c.shutdown().await;
    watcher.shutdown().await;
    root_client.shutdown().await;
}
