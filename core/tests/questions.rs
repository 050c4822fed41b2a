//! Issue 23, "Questions": an agent asks (`chat/inputRequested`) in its
//! running turn; the chat and its session read InputNeeded with the
//! question as their activity; clients draft (`chat/inputAnswerChanged`)
//! and answer once (`chat/inputCompleted`: accept, decline, cancel) with
//! the `chat:answer` grant; the answer goes to the agent; a turn's end
//! cancels the questions left open in it; a session with a question open
//! does not sleep; a restart takes the question with the interrupted turn.

use std::collections::BTreeMap;

use ahpd_core::testkit::Harness;
use ahpd_core::{BackendCmd, BackendEvent, Config, Input};
use ahp_types::state::ChatInputResponseKind;
use serde_json::{json, Value};

/// The agent of `chat` asks question `id` ("which colour?").
fn agent_asks(h: &mut Harness, chat: &str, id: &str) {
    let action = json!({
        "type": "chat/inputRequested",
        "request": {"id": id, "message": "which colour?", "questions": [{"kind": "text", "id": "answer", "message": "which colour?"}]}
    });
    h.input(Input::Backend { chat: chat.into(), event: BackendEvent::Action(serde_json::from_value(action).expect("an action")) });
}

/// A session whose turn `t1` runs in its default chat, which asked `q1`;
/// connection 1 is subscribed to the chat.
fn asked(h: &mut Harness) -> (String, String) {
    h.connect(1, "c1");
    let (uri, chat) = h.create(1, "k1");
    h.start_turn(1, &chat, 1, "t1", "hello");
    h.settle_backend();
    h.request(1, "subscribe", json!({"channel": chat}));
    agent_asks(h, &chat, "q1");
    (uri, chat)
}

fn chat_state(h: &Harness, uri: &str, chat: &str) -> ahp_types::state::ChatState {
    h.host.view().sessions.get(uri).expect("held").resident().expect("resident").chats[chat].clone()
}

/// The rejection reasons connection `conn` was sent since last asked.
fn rejections(h: &mut Harness, conn: u64) -> Vec<String> {
    h.frames(conn).into_iter().filter_map(|f| f["params"]["rejectionReason"].as_str().map(str::to_owned)).collect()
}

/// The answers the agent was sent: (turn, request id, response, answers JSON).
fn answers(h: &mut Harness) -> Vec<(String, String, ChatInputResponseKind, Value)> {
    h.backend_cmds()
        .into_iter()
        .filter_map(|(_, _, c)| match c {
            BackendCmd::Answer { turn_id, request, response } => {
                Some((turn_id, request.id.clone(), response, serde_json::to_value(&request.answers).expect("json")))
            }
            _ => None,
        })
        .collect()
}

fn text_answer(state: &str, text: &str) -> Value {
    json!({"state": state, "value": {"kind": "text", "value": text}})
}

#[test]
fn a_question_shows_as_input_needed_with_its_text_on_the_chat_and_the_row() {
    let mut h = Harness::new(Config::default());
    let (uri, chat) = asked(&mut h);
    let state = chat_state(&h, &uri, &chat);
    assert_eq!(state.status & 0x1F, 24, "the chat reads InputNeeded");
    assert_eq!(state.activity.as_deref(), Some("Question: which colour?"));
    let rows = h.list(1);
    assert_eq!(rows[0]["status"].as_u64().unwrap_or(0) & 0x1F, 24, "the row reads InputNeeded: {}", rows[0]);
    assert_eq!(rows[0]["activity"], "Question: which colour?");
    // The subscriber heard the question.
    let heard = h.frames(1).into_iter().any(|f| f["params"]["action"]["type"] == "chat/inputRequested");
    assert!(heard);
}

#[test]
fn a_draft_then_an_accept_send_the_merged_answer_to_the_agent_once() {
    let mut h = Harness::new(Config::default());
    let (uri, chat) = asked(&mut h);
    h.backend_cmds();
    h.dispatch(1, &chat, 2, json!({"type": "chat/inputAnswerChanged", "requestId": "q1", "questionId": "answer", "answer": text_answer("draft", "re")}));
    assert!(answers(&mut h).is_empty(), "a draft is not an answer");
    let state = chat_state(&h, &uri, &chat);
    let part = serde_json::to_value(&state.active_turn.as_ref().expect("running").response_parts).expect("json");
    assert_eq!(part[0]["request"]["answers"]["answer"]["value"]["value"], "re", "the draft is kept on the question: {part}");
    h.dispatch(1, &chat, 3, json!({"type": "chat/inputCompleted", "requestId": "q1", "response": "accept", "answers": {"answer": text_answer("submitted", "red")}}));
    let sent = answers(&mut h);
    assert_eq!(sent.len(), 1);
    assert_eq!((sent[0].0.as_str(), sent[0].1.as_str(), sent[0].2), ("t1", "q1", ChatInputResponseKind::Accept));
    assert_eq!(sent[0].3["answer"]["value"]["value"], "red");
    let state = chat_state(&h, &uri, &chat);
    assert_eq!(state.status & 0x1F, 8, "answered, the turn runs on (InProgress)");
    assert_eq!(state.activity, None, "the host's question text is cleared");
    // A second answer is refused, and nothing more goes to the agent.
    h.frames(1);
    h.dispatch(1, &chat, 4, json!({"type": "chat/inputCompleted", "requestId": "q1", "response": "decline"}));
    assert_eq!(rejections(&mut h, 1), ["that question was already answered"]);
    assert!(answers(&mut h).is_empty());
}

#[test]
fn decline_and_cancel_go_to_the_agent_as_they_are() {
    for (response, kind) in [("decline", ChatInputResponseKind::Decline), ("cancel", ChatInputResponseKind::Cancel)] {
        let mut h = Harness::new(Config::default());
        let (_, chat) = asked(&mut h);
        h.backend_cmds();
        h.dispatch(1, &chat, 2, json!({"type": "chat/inputCompleted", "requestId": "q1", "response": response}));
        let sent = answers(&mut h);
        assert_eq!(sent.len(), 1, "{response}");
        assert_eq!(sent[0].2, kind);
    }
}

#[test]
fn a_wrong_question_or_chat_is_refused_with_a_reason() {
    let mut h = Harness::new(Config::default());
    let (uri, chat) = asked(&mut h);
    h.frames(1);
    h.dispatch(1, &chat, 2, json!({"type": "chat/inputCompleted", "requestId": "nope", "response": "accept"}));
    h.dispatch(1, &chat, 3, json!({"type": "chat/inputAnswerChanged", "requestId": "q1", "questionId": "nope", "answer": text_answer("draft", "x")}));
    // On the session channel, not the chat's.
    h.dispatch(1, &uri, 4, json!({"type": "chat/inputCompleted", "requestId": "q1", "response": "accept"}));
    assert_eq!(
        rejections(&mut h, 1),
        [
            "no such question is waiting for an answer in this chat",
            "no such question in that request",
            "a chat action must be dispatched on a chat channel"
        ]
    );
    // Another chat of the session, which asked nothing.
    let other = "ahp-chat:/other";
    let id = h.send_request(1, "createChat", json!({"channel": uri, "chat": other}));
    h.settle();
    assert!(h.take_reply(1, id).is_some_and(|r| r.get("error").is_none()), "the chat is made");
    h.frames(1);
    h.dispatch(1, other, 5, json!({"type": "chat/inputCompleted", "requestId": "q1", "response": "accept"}));
    assert_eq!(rejections(&mut h, 1), ["no such question is waiting for an answer in this chat"]);
    assert!(answers(&mut h).is_empty());
    assert_eq!(chat_state(&h, &uri, &chat).status & 0x1F, 24, "still waiting");
}

#[test]
fn cancelling_the_turn_cancels_its_question_before_the_turn_ends() {
    let mut h = Harness::new(Config::default());
    let (uri, chat) = asked(&mut h);
    h.frames(1);
    h.backend_cmds();
    h.dispatch(1, &chat, 2, json!({"type": "chat/turnCancelled", "turnId": "t1", "duration": 0}));
    let types: Vec<Value> = h.frames(1).into_iter().map(|f| f["params"]["action"].clone()).filter(|a| a.is_object()).collect();
    let names: Vec<&str> = types.iter().filter_map(|a| a["type"].as_str()).collect();
    let completed = names.iter().position(|n| *n == "chat/inputCompleted").expect("the question was cancelled");
    let ended = names.iter().position(|n| *n == "chat/turnCancelled").expect("the turn was cancelled");
    assert!(completed < ended, "{names:?}");
    assert_eq!(types[completed]["response"], "cancel");
    assert!(answers(&mut h).is_empty(), "the agent is told to cancel the turn, not answered");
    let state = chat_state(&h, &uri, &chat);
    let part = serde_json::to_value(&state.turns[0].response_parts).expect("json");
    assert_eq!(part[0]["response"], "cancel", "the ended turn keeps its question, cancelled: {part}");
    assert_eq!(state.status & 0x1F, 1, "Idle");
    // A late answer is refused.
    h.dispatch(1, &chat, 3, json!({"type": "chat/inputCompleted", "requestId": "q1", "response": "accept"}));
    assert_eq!(rejections(&mut h, 1), ["that question was already answered"]);
}

#[test]
fn the_agent_ending_its_turn_cancels_the_question_left_open() {
    let mut h = Harness::new(Config::default());
    let (uri, chat) = asked(&mut h);
    h.agent_reply(&chat, "t1", "never mind");
    let state = chat_state(&h, &uri, &chat);
    let part = serde_json::to_value(&state.turns[0].response_parts).expect("json");
    assert_eq!(part[0]["kind"], "inputRequest");
    assert_eq!(part[0]["response"], "cancel", "{part}");
}

#[test]
fn a_session_with_a_question_open_does_not_sleep_and_sleeps_once_answered_and_done() {
    let mut h = Harness::new(Config { sleep_after_ms: 5_000, ..Config::default() });
    let (uri, chat) = asked(&mut h);
    h.request(1, "unsubscribe", json!({"channel": chat}));
    for _ in 0..12 {
        h.advance(5_000);
        assert_eq!(h.host.view().sessions.get(uri.as_str()).expect("held").phase().name(), "live", "not asleep with a question open");
    }
    h.dispatch(1, &chat, 2, json!({"type": "chat/inputCompleted", "requestId": "q1", "response": "accept"}));
    h.settle_backend();
    h.agent_reply(&chat, "t1", "thanks");
    h.advance(5_000);
    assert_eq!(h.host.view().sessions.get(uri.as_str()).expect("held").phase().name(), "asleep");
    // Asleep, with nothing asked: an answer is refused without a wake.
    h.dispatch(1, &chat, 3, json!({"type": "chat/inputCompleted", "requestId": "q1", "response": "accept"}));
    assert!(rejections(&mut h, 1).iter().any(|r| r.contains("asleep")));
    assert!(!h.backend_cmds().iter().any(|(_, _, c)| matches!(c, BackendCmd::Start { .. })), "no wake");
}

#[test]
fn answering_needs_the_chat_answer_grant() {
    use ahpd_core::grants::Role;
    let users = ahpd_core::testkit::users_directory(&[("alice", Role::Member), ("gus", Role::Guest)]);
    let mut h = Harness::new(Config { users: Some(users), ..Config::default() });
    for (conn, id) in [(1, "alice"), (2, "gus")] {
        h.connect(conn, &format!("client-{conn}"));
        let r = h.request(conn, "authenticate", json!({"channel": "ahp-root://", "resource": "ahpd", "token": format!("token-{id}")}));
        assert_eq!(r["result"], json!({}), "{r}");
    }
    let (_, chat) = h.create(1, "k1");
    h.start_turn(1, &chat, 1, "t1", "hello");
    h.settle_backend();
    agent_asks(&mut h, &chat, "q1");
    h.backend_cmds();
    h.frames(2);
    h.dispatch(2, &chat, 1, json!({"type": "chat/inputCompleted", "requestId": "q1", "response": "accept"}));
    let refused = rejections(&mut h, 2);
    assert_eq!(refused, ["permission denied: this connection does not hold chat:answer"]);
    assert!(answers(&mut h).is_empty());
    h.dispatch(1, &chat, 2, json!({"type": "chat/inputCompleted", "requestId": "q1", "response": "accept"}));
    assert_eq!(answers(&mut h).len(), 1, "a member holds chat:answer");
}

#[test]
fn a_restart_takes_the_question_with_the_interrupted_turn() {
    let mut h = Harness::new(Config::default());
    let mut disk = BTreeMap::new();
    h.connect(1, "c1");
    let id = h.send_request(1, "createSession", json!({"channel": "ahp-session:/k1", "provider": "echo"}));
    h.durable(&mut disk);
    h.settle_backend();
    h.durable(&mut disk);
    assert!(h.take_reply(1, id).is_some(), "created");
    let chat = "ahp-chat:/ahp-session@k1".to_owned();
    h.dispatch(1, &chat, 1, json!({
        "type": "chat/turnStarted", "turnId": "t1", "startedAt": "2000-01-01T00:00:00Z",
        "message": {"text": "hello", "origin": {"kind": "user"}}
    }));
    h.durable(&mut disk);
    h.settle_backend();
    h.durable(&mut disk);
    agent_asks(&mut h, &chat, "q1");
    h.durable(&mut disk);
    assert!(!disk.is_empty(), "the session and its turn are stored");
    let stored = serde_json::to_string(&disk).expect("json");
    assert!(!stored.contains("which colour"), "a question is never written to the record");
    // kill -9 while the question waits.
    let mut h = Harness::with_records(Config::default(), disk.values().cloned().collect());
    h.connect(1, "c1");
    let id = h.send_request(1, "subscribe", json!({"channel": chat}));
    for _ in 0..4 {
        h.durable(&mut disk);
        h.settle_backend();
    }
    let reply = h.take_reply(1, id).expect("subscribe answered");
    let state = &reply["result"]["snapshot"]["state"];
    assert!(state["activeTurn"].is_null(), "{state}");
    let last = state["turns"].as_array().and_then(|t| t.last()).cloned().unwrap_or_else(|| panic!("the interrupted turn: {reply}"));
    assert_eq!(last["id"], "t1");
    assert_eq!(last["state"], "error", "{last}");
    assert!(!last.to_string().contains("inputRequest"), "the question went with the turn: {last}");
    h.frames(1);
    h.dispatch(1, &chat, 9, json!({"type": "chat/inputCompleted", "requestId": "q1", "response": "accept"}));
    assert_eq!(rejections(&mut h, 1), ["no such question is waiting for an answer in this chat"]);
}
