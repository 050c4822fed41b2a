//! A chat's agent start answered after the phase that asked for it ended
//! (issue 19, sim seeds 1095 and 1631): the conversation the backend
//! names is real, so the next wake resumes that one, not the id the host
//! first asked for, and the chat's turns come back.

mod harness;

use ahpd_core::{BackendCmd, BackendEvent, Config, Input, OpId, Outcome};
use harness::Harness;
use serde_json::json;

/// A live session `s1` with a second chat whose start is still
/// unanswered; returns (session, the new chat, the start's op).
fn chat_start_unanswered(h: &mut Harness) -> (String, String, OpId) {
    h.connect(1, "c1");
    let (uri, _) = h.session_with_turn("s1");
    h.settle();
    let chat = "ahp-chat:/ahp-session-s1-c2".to_owned();
    let id = h.send_request(1, "createChat", json!({"channel": uri, "chat": chat}));
    h.settle_store();
    let start = h.backend_cmds().into_iter().find_map(|(op, c, cmd)| (c == chat && matches!(cmd, BackendCmd::Start { .. })).then_some(op));
    assert!(h.take_reply(1, id).is_some(), "createChat answered");
    (uri, chat, start.expect("the new chat's agent is started"))
}

/// The session's default agent exits: the session sleeps.
fn agent_exits(h: &mut Harness, uri: &str) {
    let default_chat = format!("ahp-chat:/ahp-session@{}", uri.trim_start_matches("ahp-session:/"));
    h.input(Input::Backend { chat: default_chat, event: BackendEvent::Exited { message: "gone".into() } });
    h.settle();
    assert_eq!(h.host.view().sessions.get(uri).unwrap().phase.name(), "asleep");
}

/// The conversation ids the next wake asks to resume, by chat.
fn wake_resumes(h: &mut Harness, uri: &str) -> Vec<(String, String)> {
    h.request(1, "subscribe", json!({"channel": uri}));
    let mut resumed = Vec::new();
    for (op, chat, cmd) in h.backend_cmds() {
        if let BackendCmd::Start { conversation_id, resume: true, .. } = cmd {
            resumed.push((chat.clone(), conversation_id.clone()));
            h.done(op, Outcome::Started { conversation_id, history: Vec::new() });
        } else {
            h.done(op, Outcome::Ok);
        }
    }
    resumed
}

#[test]
fn a_start_answered_while_the_session_sleeps_names_the_conversation_the_wake_resumes() {
    let mut h = Harness::new(Config::default());
    let (uri, chat, start) = chat_start_unanswered(&mut h);
    agent_exits(&mut h, &uri);
    // The answer comes now, the session asleep: the backend assigned an id.
    h.done(start, Outcome::Started { conversation_id: "srv-7".into(), history: Vec::new() });
    h.settle_store();
    let resumed = wake_resumes(&mut h, &uri);
    assert!(resumed.contains(&(chat.clone(), "srv-7".to_owned())), "the wake resumes the assigned conversation: {resumed:?}");
}

#[test]
fn a_start_answered_after_the_next_wake_began_still_names_the_conversation() {
    let mut h = Harness::new(Config::default());
    let (uri, chat, start) = chat_start_unanswered(&mut h);
    agent_exits(&mut h, &uri);
    // A wake comes first (the chat, never answered, is not resumed by
    // it); the first start's answer comes after (late for its phase, no
    // longer listed).
    let first = wake_resumes(&mut h, &uri);
    assert!(!first.iter().any(|(c, _)| *c == chat), "{first:?}");
    h.done(start, Outcome::Started { conversation_id: "srv-8".into(), history: Vec::new() });
    h.settle_store();
    agent_exits(&mut h, &uri);
    let resumed = wake_resumes(&mut h, &uri);
    assert!(resumed.contains(&(chat, "srv-8".to_owned())), "the next wake resumes the assigned conversation: {resumed:?}");
}
