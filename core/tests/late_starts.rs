//! A chat's agent start answered after the phase that asked for it ended
//! (issue 19, sim seeds 1095 and 1631): the conversation the backend
//! names is real, so the next wake resumes that one, not the id the host
//! first asked for, and the chat's turns come back.

use ahpd_core::{BackendCmd, BackendEvent, Config, Input, OpId, Outcome};
use ahpd_core::testkit::Harness;
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
    assert_eq!(h.host.view().sessions.get(uri).unwrap().phase().name(), "asleep");
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

/// A turn for a chat whose agent has not answered its start yet: the
/// start's answer names the conversation the backend keeps the turn
/// under (issue 19, sim seed 12609: a turn sent ahead of the answer ran
/// under a conversation the record never learnt, and was gone after a
/// restart).
#[test]
fn a_turn_in_a_chat_still_starting_goes_to_its_agent_once_the_start_names_the_conversation() {
    let mut h = Harness::new(Config::default());
    let (uri, chat, start) = chat_start_unanswered(&mut h);
    h.start_turn(1, &chat, 5, "t-new", "first words");
    let sends = |cmds: &[(OpId, String, BackendCmd)]| cmds.iter().filter(|(_, c, cmd)| *c == chat && matches!(cmd, BackendCmd::Send { .. })).count();
    assert_eq!(sends(&h.backend_cmds()), 0, "the turn waits for the chat's agent");
    h.done(start, Outcome::Started { conversation_id: "srv-9".into(), history: Vec::new() });
    h.settle_store();
    let record = h.host.view().sessions.get(&uri).unwrap().record().clone();
    assert_eq!(record.chats.iter().find(|c| c.resource == chat).unwrap().conversation_id.as_ref(), "srv-9");
    assert_eq!(sends(&h.backend_cmds()), 1, "the turn goes once the start answered");
}

#[test]
fn a_turn_waiting_for_a_chat_start_that_fails_fails_with_the_backends_words() {
    let mut h = Harness::new(Config::default());
    let (_, chat, start) = chat_start_unanswered(&mut h);
    h.request(1, "subscribe", json!({"channel": chat}));
    h.start_turn(1, &chat, 5, "t-new", "first words");
    h.frames(1);
    h.done(start, Outcome::Failed { message: "no such model".into() });
    h.settle_store();
    assert!(h.backend_cmds().iter().all(|(_, c, cmd)| !(*c == chat && matches!(cmd, BackendCmd::Send { .. }))));
    let frames = h.frames(1);
    let err = frames.iter().find(|f| f["params"]["action"]["type"] == "chat/error").expect("the turn fails");
    assert_eq!(err["params"]["action"]["turnId"], "t-new");
    let words = err["params"]["action"]["part"]["error"]["message"].as_str().unwrap_or_default();
    assert!(words.contains("no such model"), "{err}");
}

/// A chat disposed while the session wakes and made again under the same
/// URI: the wake does not wait for the first one's start, and that
/// start's late answer names nothing for the new chat (issue 19, sim seed
/// 55746: it gave the new chat the deleted conversation, and the turns
/// sent to the new one were gone after a restart).
#[test]
fn a_chat_disposed_during_a_wake_and_made_again_keeps_the_conversation_its_own_start_names() {
    let mut h = Harness::new(Config::default());
    let (uri, chat, start) = chat_start_unanswered(&mut h);
    h.done(start, Outcome::Started { conversation_id: chat_conversation(&h, &uri, &chat), history: Vec::new() });
    h.settle_store();
    agent_exits(&mut h, &uri);
    // A wake begins; its resumes stay unanswered for now.
    h.request(1, "subscribe", json!({"channel": uri}));
    let resumes = h.backend_cmds();
    // A new chat joins the wake, goes, and comes again under its URI.
    let again = "ahp-chat:/ahp-session-s1-c3".to_owned();
    let starts = |h: &mut Harness| h.backend_cmds().into_iter().filter(|(_, c, cmd)| *c == again && matches!(cmd, BackendCmd::Start { .. })).map(|(op, _, _)| op).collect::<Vec<_>>();
    h.send_request(1, "createChat", json!({"channel": uri, "chat": again}));
    h.settle_store();
    let first = starts(&mut h);
    h.send_request(1, "disposeChat", json!({"channel": again}));
    h.settle_store();
    h.send_request(1, "createChat", json!({"channel": uri, "chat": again}));
    h.settle_store();
    let second = starts(&mut h);
    assert_eq!((first.len(), second.len()), (1, 1), "{first:?} {second:?}");
    h.done(second[0], Outcome::Started { conversation_id: "srv-new".into(), history: Vec::new() });
    for (op, _, cmd) in resumes {
        if let BackendCmd::Start { conversation_id, .. } = cmd {
            h.done(op, Outcome::Started { conversation_id, history: Vec::new() });
        }
    }
    h.settle_store();
    assert_eq!(h.host.view().sessions.get(&uri).unwrap().phase().name(), "live", "the wake did not wait for the disposed chat");
    h.done(first[0], Outcome::Started { conversation_id: "srv-old".into(), history: Vec::new() });
    h.settle_store();
    assert_eq!(chat_conversation(&h, &uri, &again), "srv-new");
}

fn chat_conversation(h: &Harness, uri: &str, chat: &str) -> String {
    h.host.view().sessions.get(uri).unwrap().record().chats.iter().find(|c| c.resource == chat).map(|c| c.conversation_id.to_string()).unwrap_or_default()
}

/// A start answered with its conversation supersedes the chat's earlier
/// ones: the earlier one's late answer names an older agent's
/// conversation (issue 19, sim seed 19510: it replaced the one the newer
/// start named, and the turns under that were gone after the next wake).
#[test]
fn a_late_answer_to_an_older_start_does_not_replace_the_conversation_a_newer_one_named() {
    let mut h = Harness::new(Config::default());
    let (uri, chat, older) = chat_start_unanswered(&mut h);
    agent_exits(&mut h, &uri);
    // The wake starts the chat afresh (its first start never answered) and
    // that start answers first.
    h.request(1, "subscribe", json!({"channel": uri}));
    for (op, c, cmd) in h.backend_cmds() {
        if let BackendCmd::Start { conversation_id, .. } = cmd {
            let conversation_id = if c == chat { "srv-newer".to_owned() } else { conversation_id };
            h.done(op, Outcome::Started { conversation_id, history: Vec::new() });
        }
    }
    h.settle_store();
    h.done(older, Outcome::Started { conversation_id: "srv-older".into(), history: Vec::new() });
    h.settle_store();
    assert_eq!(chat_conversation(&h, &uri, &chat), "srv-newer");
}
