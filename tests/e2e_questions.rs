//! An agent's questions through the official client against the release
//! daemon and its echo agent (issue 23, "Questions"): `/ask` makes the
//! echo agent ask (`chat/inputRequested`); the chat and its row read
//! InputNeeded with the question as the activity; a draft
//! (`chat/inputAnswerChanged`) and an answer (`chat/inputCompleted`) go to
//! the agent, which says what it was told; a cancelled turn cancels its
//! question; a wrong question is refused with a reason; a session with a
//! question open does not sleep.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use ahp::ahp_types::actions::{ChatInputAnswerChangedAction, ChatInputCompletedAction, ChatTurnCancelledAction, StateAction};
use ahp::ahp_types::state::{
    ChatInputAnswer, ChatInputAnswerValue, ChatInputAnswered, ChatInputResponseKind, ChatInputTextAnswerValue, ChatState, ResponsePart,
    TurnState,
};
use ahp::{Client, SubscriptionEvent};
use common::*;

/// The request id of the open question in the chat's running turn, if any.
fn open_question(chat: &ChatState) -> Option<String> {
    chat.active_turn.as_ref()?.response_parts.iter().find_map(|p| match p {
        ResponsePart::InputRequest(i) if i.response.is_none() => Some(i.request.id.clone()),
        _ => None,
    })
}

fn text(state: &str, value: &str) -> ChatInputAnswer {
    let answered = ChatInputAnswered { value: ChatInputAnswerValue::Text(ChatInputTextAnswerValue { value: value.to_owned() }) };
    match state {
        "draft" => ChatInputAnswer::Draft(answered),
        _ => ChatInputAnswer::Submitted(answered),
    }
}

fn complete(request_id: &str, response: ChatInputResponseKind, answer: Option<&str>) -> StateAction {
    let answers = answer.map(|a| HashMap::from([("answer".to_owned(), text("submitted", a))]));
    StateAction::ChatInputCompleted(ChatInputCompletedAction { request_id: request_id.to_owned(), response, answers })
}

async fn send(c: &Client, chat: &str, action: StateAction) {
    within("dispatch", c.dispatch(chat.to_owned(), action)).await.expect("dispatch");
}

/// The input request part of `turn`'s response, as JSON.
fn question_part(chat: &ChatState, turn_id: &str) -> serde_json::Value {
    let turn = chat.turns.iter().find(|t| t.id == turn_id).expect("the turn ended");
    let part = turn.response_parts.iter().find(|p| matches!(p, ResponsePart::InputRequest(_))).expect("the question stays in the turn");
    serde_json::to_value(part).expect("json")
}

/// Asked, drafted, accepted: the agent echoes the answer; a second client
/// sees the question, the draft and the answer; the row reads InputNeeded
/// with the question as its activity while it waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_answer_reaches_the_agent_and_every_client_sees_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(&tmp.path().join("data"));
    let (c, _, _) = connect_init(&daemon.url, "ask").await;
    let (sid, chat, _ssub, mut state, mut sub) = new_session(&c).await;

    send(&c, &chat, user_turn("t1", "/ask what colour?")).await;
    follow_chat(&mut sub, &mut state, "the question", |_, s| open_question(s).is_some()).await;
    let request_id = open_question(&state).expect("asked");
    assert_eq!(state.status & ACTIVITY, 24, "InputNeeded");
    assert_eq!(state.activity.as_deref(), Some("Question: what colour?"));
    let row = list(&c).await.into_iter().find(|r| r.resource == sid).expect("listed");
    assert_eq!(row.status & ACTIVITY, 24, "the row reads InputNeeded");
    assert_eq!(row.activity.as_deref(), Some("Question: what colour?"));

    let (other, _, _) = connect_init(&daemon.url, "ask-watcher").await;
    let (mut seen, mut osub) = subscribe_chat(&other, &chat).await;
    assert_eq!(open_question(&seen).as_deref(), Some(request_id.as_str()), "a second client sees the question");

    let draft = ChatInputAnswerChangedAction { request_id: request_id.clone(), question_id: "answer".into(), answer: Some(text("draft", "bl")) };
    send(&c, &chat, StateAction::ChatInputAnswerChanged(draft)).await;
    follow_chat(&mut osub, &mut seen, "the draft", |e, _| matches!(e.action, StateAction::ChatInputAnswerChanged(_))).await;
    send(&c, &chat, complete(&request_id, ChatInputResponseKind::Accept, Some("blue"))).await;
    follow_chat(&mut sub, &mut state, "the reply", |e, _| is_turn_complete(e)).await;
    follow_chat(&mut osub, &mut seen, "the reply, seen", |e, _| is_turn_complete(e)).await;
    for s in [&state, &seen] {
        let turn = s.turns.last().expect("t1");
        assert_eq!(turn.state, TurnState::Complete);
        assert!(markdown(turn).contains("Echo: blue"), "{}", markdown(turn));
        let part = question_part(s, "t1");
        assert_eq!(part["response"], "accept", "{part}");
        assert_eq!(part["request"]["answers"]["answer"]["value"]["value"], "blue");
    }
    assert_eq!(state.activity, None);
    // A late second answer is refused with a reason.
    send(&c, &chat, complete(&request_id, ChatInputResponseKind::Decline, None)).await;
    let reason = wait_for(&mut sub, "the refusal", |e| match e {
        SubscriptionEvent::Action(env) => env.rejection_reason.clone(),
        _ => None,
    })
    .await;
    assert!(reason.contains("already answered"), "{reason}");
    c.shutdown().await;
    other.shutdown().await;
}

/// Declined: the agent says so. A wrong question id is refused first,
/// the question still waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decline_is_told_to_the_agent_and_a_wrong_question_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(&tmp.path().join("data"));
    let (c, _, _) = connect_init(&daemon.url, "decline").await;
    let (_sid, chat, _ssub, mut state, mut sub) = new_session(&c).await;

    send(&c, &chat, user_turn("t1", "/ask may I?")).await;
    follow_chat(&mut sub, &mut state, "the question", |_, s| open_question(s).is_some()).await;
    let request_id = open_question(&state).expect("asked");
    send(&c, &chat, complete("not-a-question", ChatInputResponseKind::Accept, Some("x"))).await;
    let reason = wait_for(&mut sub, "the refusal", |e| match e {
        SubscriptionEvent::Action(env) => env.rejection_reason.clone(),
        _ => None,
    })
    .await;
    assert!(reason.contains("no such question"), "{reason}");
    send(&c, &chat, complete(&request_id, ChatInputResponseKind::Decline, None)).await;
    follow_chat(&mut sub, &mut state, "the reply", |e, _| is_turn_complete(e)).await;
    let turn = state.turns.last().expect("t1");
    assert!(markdown(turn).contains("you declined to answer"), "{}", markdown(turn));
    assert_eq!(question_part(&state, "t1")["response"], "decline");
    c.shutdown().await;
}

/// Cancelling the turn cancels its question (the host's
/// `chat/inputCompleted` with `cancel`, before the turn's end); the chat
/// is idle again and the question cannot be answered any more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_turn_cancels_its_question() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(&tmp.path().join("data"));
    let (c, _, _) = connect_init(&daemon.url, "cancel").await;
    let (_sid, chat, _ssub, mut state, mut sub) = new_session(&c).await;

    send(&c, &chat, user_turn("t1", "/ask anything?")).await;
    follow_chat(&mut sub, &mut state, "the question", |_, s| open_question(s).is_some()).await;
    let request_id = open_question(&state).expect("asked");
    send(&c, &chat, StateAction::ChatTurnCancelled(ChatTurnCancelledAction { turn_id: "t1".into(), duration: 0, meta: None })).await;
    let seen = follow_chat(&mut sub, &mut state, "the turn's end", |_, s| s.active_turn.is_none()).await;
    let order: Vec<&str> = seen
        .iter()
        .filter_map(|e| match &e.action {
            StateAction::ChatInputCompleted(a) if a.response == ChatInputResponseKind::Cancel && e.origin.is_none() => Some("question cancelled"),
            StateAction::ChatTurnCancelled(_) => Some("turn cancelled"),
            _ => None,
        })
        .collect();
    assert_eq!(order, ["question cancelled", "turn cancelled"]);
    assert_eq!(state.status & ACTIVITY, 1, "Idle");
    assert_eq!(question_part(&state, "t1")["response"], "cancel");
    send(&c, &chat, complete(&request_id, ChatInputResponseKind::Accept, Some("late"))).await;
    let reason = wait_for(&mut sub, "the refusal", |e| match e {
        SubscriptionEvent::Action(env) => env.rejection_reason.clone(),
        _ => None,
    })
    .await;
    assert!(reason.contains("already answered"), "{reason}");
    // The next turn runs normally.
    send(&c, &chat, user_turn("t2", "after")).await;
    follow_chat(&mut sub, &mut state, "t2", |e, _| is_turn_complete(e)).await;
    assert!(markdown(state.turns.last().expect("t2")).contains("Echo: after"));
    c.shutdown().await;
}

/// A session whose agent waits on a question does not sleep, unwatched,
/// past its quiet time; answered (by a client that subscribes again), its
/// turn ends and it sleeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_does_not_sleep_while_a_question_waits() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    // Sleep after 1.2 s of quiet.
    let daemon = Daemon::start_with(&data, &["--sleep-after-minutes", "0.02"]);
    let (c, _, _root) = connect_init(&daemon.url, "ask-sleep").await;
    let (sid, chat, _ssub, mut state, mut sub) = new_session(&c).await;
    send(&c, &chat, user_turn("t1", "/ask still there?")).await;
    follow_chat(&mut sub, &mut state, "the question", |_, s| open_question(s).is_some()).await;
    let request_id = open_question(&state).expect("asked");
    within("unsubscribe chat", c.unsubscribe(chat.clone())).await.expect("unsubscribe");
    within("unsubscribe session", c.unsubscribe(sid.clone())).await.expect("unsubscribe");
    drop(sub);
    drop(_ssub);
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(!daemon.log_text().lines().any(|l| l.contains("session.slept") && l.contains(&sid)), "not asleep with a question open");
    let row = list(&c).await.into_iter().find(|r| r.resource == sid).expect("listed");
    assert_eq!(row.status & ACTIVITY, 24, "still waiting on the question");
    // Answered without a subscription (a dispatch needs none), the turn
    // ends and the session sleeps.
    send(&c, &chat, complete(&request_id, ChatInputResponseKind::Accept, Some("yes"))).await;
    within("the session sleeps", async {
        while !daemon.log_text().lines().any(|l| l.contains("session.slept") && l.contains(&sid)) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let (after, _sub) = subscribe_chat(&c, &chat).await;
    assert!(markdown(after.turns.last().expect("t1")).contains("Echo: yes"), "the answered turn came back from the transcript");
    c.shutdown().await;
}
