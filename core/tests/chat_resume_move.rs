//! A chat's life past its queue (issue 23): resuming a turn that ended in a
//! resumable error (`chat/turnResume`).

use std::collections::BTreeMap;

use ahp_types::actions::{ChatErrorAction, StateAction};
use ahp_types::state::{ErrorInfo, ErrorResponsePart};
use ahpd_core::input::Outcome;
use ahpd_core::testkit::Harness;
use ahpd_core::{BackendCmd, BackendEvent, Config, Input};
use serde_json::{json, Value};

/// The agent ends `turn` of `chat` in an error, `resumable` or not.
fn agent_error(h: &mut Harness, chat: &str, turn: &str, resumable: bool) {
    let action = StateAction::ChatError(ChatErrorAction {
        turn_id: turn.into(),
        duration: 0,
        part: ErrorResponsePart {
            error: ErrorInfo { error_type: "x".into(), message: "the model failed".into(), stack: None, meta: None },
            resumable: Some(resumable),
        },
        meta: None,
    });
    h.input(Input::Backend { chat: chat.into(), event: BackendEvent::Action(action) });
    h.settle_store();
}

/// A session `r1` whose default chat ran t1 (completed) and t2 (ended in
/// an error, `resumable` or not), subscribed on connection 1.
fn errored(resumable: bool) -> (Harness, String, String) {
    let mut h = Harness::new(Config { residency_limit: 0, sleep_after_ms: 0, ..Config::default() });
    h.connect(1, "c1");
    let (uri, chat) = h.session_with_turn("r1");
    h.start_turn(1, &chat, 10, "t2", "second");
    h.settle_backend();
    agent_error(&mut h, &chat, "t2", resumable);
    h.request(1, "subscribe", json!({"channel": chat}));
    h.frames(1);
    (h, uri, chat)
}

/// The last echo of a `chat/turnResume` on `chat`: its rejection, if any.
fn resume_echo(h: &mut Harness, chat: &str) -> Option<String> {
    let frames = h.frames(1);
    let echo = frames
        .iter()
        .rev()
        .find(|f| f["method"] == "action" && f["params"]["channel"] == chat && f["params"]["action"]["type"] == "chat/turnResume")
        .cloned()
        .expect("the resume's echo");
    echo["params"]["rejectionReason"].as_str().map(str::to_owned)
}

fn chat_state(h: &mut Harness, chat: &str) -> Value {
    h.request(1, "subscribe", json!({"channel": chat}))["result"]["snapshot"]["state"].clone()
}

fn resumes(cmds: &[(String, BackendCmd)]) -> Vec<String> {
    cmds.iter().filter_map(|(_, c)| match c { BackendCmd::Resume { turn_id } => Some(turn_id.clone()), _ => None }).collect()
}

#[test]
fn a_resumable_error_is_resumed_by_a_client_and_the_agent_goes_on_with_the_same_turn() {
    let (mut h, _uri, chat) = errored(true);
    h.dispatch(1, &chat, 1, json!({"type": "chat/turnResume", "turnId": "t2"}));
    assert_eq!(resume_echo(&mut h, &chat), None);
    let cmds = h.settle();
    assert_eq!(resumes(&cmds), vec!["t2".to_owned()], "the backend is told to go on with t2");
    let state = chat_state(&mut h, &chat);
    assert_eq!(state["activeTurn"]["id"], "t2", "{state}");
    assert_eq!(state["turns"].as_array().map(Vec::len), Some(1), "t2 left the ended turns: {state}");
    // The agent finishes it: one turn t2, completed.
    h.agent_reply(&chat, "t2", "and the rest");
    let state = chat_state(&mut h, &chat);
    let turns = state["turns"].as_array().cloned().unwrap_or_default();
    assert_eq!(turns.iter().map(|t| t["id"].clone()).collect::<Vec<_>>(), vec![json!("t1"), json!("t2")]);
    assert_eq!(turns[1]["state"], "complete", "{state}");
    assert!(state.get("activeTurn").is_none_or(Value::is_null), "{state}");
}

#[test]
fn a_resume_is_refused_unless_the_last_turn_ended_in_a_resumable_error_and_nothing_runs() {
    // Not resumable.
    let (mut h, _uri, chat) = errored(false);
    h.dispatch(1, &chat, 1, json!({"type": "chat/turnResume", "turnId": "t2"}));
    assert!(resume_echo(&mut h, &chat).is_some_and(|r| r.contains("did not end in an error the agent can resume")));
    // Not the last turn, and no such turn.
    let (mut h, _uri, chat) = errored(true);
    h.dispatch(1, &chat, 1, json!({"type": "chat/turnResume", "turnId": "t1"}));
    assert!(resume_echo(&mut h, &chat).is_some_and(|r| r.contains("last turn")));
    h.dispatch(1, &chat, 2, json!({"type": "chat/turnResume", "turnId": "nope"}));
    assert!(resume_echo(&mut h, &chat).is_some_and(|r| r.contains("no such turn")));
    // While it runs (resumed once already).
    h.dispatch(1, &chat, 3, json!({"type": "chat/turnResume", "turnId": "t2"}));
    assert_eq!(resume_echo(&mut h, &chat), None);
    h.settle();
    h.dispatch(1, &chat, 4, json!({"type": "chat/turnResume", "turnId": "t2"}));
    assert!(resume_echo(&mut h, &chat).is_some_and(|r| r.contains("turn is running")));
    assert_eq!(resumes(&h.settle()), Vec::<String>::new(), "a refused resume reaches no agent");
    // An agent that cannot resume turns.
    let mut cfg = Config::default();
    cfg.agents = vec![ahpd_core::AgentSpec { resumes_turns: false, ..ahpd_core::AgentSpec::echo() }];
    let mut h = Harness::new(cfg);
    h.connect(1, "c1");
    let (_uri, chat) = h.create(1, "r2");
    h.start_turn(1, &chat, 1, "t1", "hello");
    h.settle_backend();
    agent_error(&mut h, &chat, "t1", true);
    h.request(1, "subscribe", json!({"channel": chat}));
    h.frames(1);
    h.dispatch(1, &chat, 2, json!({"type": "chat/turnResume", "turnId": "t1"}));
    assert!(resume_echo(&mut h, &chat).is_some_and(|r| r.contains("cannot resume")));
}

#[test]
fn a_refused_resume_ends_the_turn_in_an_error_that_is_not_resumable() {
    let (mut h, _uri, chat) = errored(true);
    h.dispatch(1, &chat, 1, json!({"type": "chat/turnResume", "turnId": "t2"}));
    let cmds = h.backend_cmds();
    let (op, _, _) = cmds.into_iter().find(|(_, _, c)| matches!(c, BackendCmd::Resume { .. })).expect("a resume");
    h.done(op, Outcome::Failed { message: "cannot".into() });
    h.settle();
    let state = chat_state(&mut h, &chat);
    let last = state["turns"].as_array().and_then(|t| t.last()).cloned().expect("t2");
    assert_eq!(last["id"], "t2");
    assert_eq!(last["state"], "error");
    assert_eq!(last["responseParts"].as_array().and_then(|p| p.last()).map(|p| p["resumable"].clone()), Some(json!(false)), "{last}");
}

#[test]
fn after_a_restart_the_turn_comes_back_resumable_from_the_backend_and_is_resumed() {
    let (mut h, uri, chat) = errored(true);
    let mut disk = BTreeMap::new();
    h.durable(&mut disk);
    // One more write carries the whole record to the disk.
    h.dispatch(1, &uri, 2, json!({"type": "session/titleChanged", "title": "kept"}));
    h.durable(&mut disk);
    // A restart: the backend's history holds t2, ended resumably.
    let history: Vec<Value> = vec![
        json!({"id": "t1", "message": {"text": "hello", "origin": {"kind": "user"}}, "responseParts": [], "state": "complete"}),
        json!({"id": "t2", "message": {"text": "second", "origin": {"kind": "user"}},
               "responseParts": [{"kind": "error", "error": {"errorType": "x", "message": "the model failed"}, "resumable": true}], "state": "error"}),
    ];
    let history: Vec<ahp_types::state::Turn> = history.into_iter().map(|t| serde_json::from_value(t).expect("turn")).collect();
    let mut h = Harness::with_records(Config::default(), disk.values().cloned().collect());
    h.connect(1, "c1");
    h.send_request(1, "subscribe", json!({"channel": chat}));
    // The wake: the agent starts with the backend's history.
    let starts: Vec<_> = h.take(|e| match e {
        ahpd_core::Effect::Backend { op, command: BackendCmd::Start { conversation_id, .. }, .. } => Some((*op, conversation_id.clone())),
        _ => None,
    });
    assert!(!starts.is_empty(), "the subscribe wakes it");
    for (op, conversation_id) in starts {
        h.done(op, Outcome::Started { conversation_id, history: history.clone() });
    }
    h.settle();
    h.dispatch(1, &chat, 1, json!({"type": "chat/turnResume", "turnId": "t2"}));
    let cmds = h.settle();
    let frames = h.frames(1);
    assert_eq!(resumes(&cmds), vec!["t2".to_owned()], "{frames:?}");
    let _ = uri;
}
