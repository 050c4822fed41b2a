//! Scenarios for "Sleep and wake" (Sessions page): idle sleep, the
//! residency limit, waking, shared resumes, failed resumes, restarts.

use ahpd_core::{AgentSpec, BackendCmd, Config, Outcome};
use ahpd_core::testkit::Harness;
use serde_json::json;

fn config(sleep_after_ms: u64, residency_limit: usize) -> Config {
    Config { sleep_after_ms, residency_limit, ..Config::default() }
}

fn phase(h: &Harness, uri: &str) -> &'static str {
    h.host.view().sessions.get(uri).expect("the session is held").phase().name()
}

fn resident(h: &Harness, uri: &str) -> bool {
    h.host.view().sessions.get(uri).expect("the session is held").resident().is_some()
}

/// Creates a session with one finished turn, nobody subscribed.
#[test]
fn a_quiet_unwatched_session_sleeps_and_stays_listed() {
    let mut h = Harness::new(config(5_000, 0));
    h.connect(1, "c1");
    let (uri, _) = h.session_with_turn("a");
    h.advance(4_999);
    assert_eq!(phase(&h, &uri), "live");
    h.advance(1);
    assert_eq!(phase(&h, &uri), "asleep");
    assert!(h.backend_cmds().iter().any(|(_, _, c)| matches!(c, BackendCmd::Close)));
    assert!(resident(&h, &uri), "sleep keeps the state");
    assert_eq!(h.list(1).len(), 1, "a sleeping session stays in the catalogue");
    assert_eq!(h.host.view().root.active_sessions, Some(0));
}

#[test]
fn no_sleep_while_watched_or_mid_turn_and_the_turn_completes() {
    let mut h = Harness::new(config(5_000, 2));
    h.connect(1, "c1");
    let (a, a_chat) = h.create(1, "a");
    h.start_turn(1, &a_chat, 1, "long", "a 60 s turn");
    h.settle_backend();
    // B and C are created and prompted while A runs.
    let (_, b_chat) = h.create(1, "b");
    h.start_turn(1, &b_chat, 2, "t", "b");
    h.settle_backend();
    h.agent_reply(&b_chat, "t", "b done");
    let (_, c_chat) = h.create(1, "c");
    h.start_turn(1, &c_chat, 3, "t", "c");
    h.settle_backend();
    h.agent_reply(&c_chat, "t", "c done");
    for _ in 0..12 {
        h.advance(5_000);
        assert_eq!(phase(&h, &a), "live", "not asleep mid-turn");
        assert!(resident(&h, &a), "not evicted mid-turn");
    }
    h.agent_reply(&a_chat, "long", "finally");
    let turns = h.host.view().sessions.get(&a).expect("the session is held").resident().map(|r| r.chats[&a_chat].turns.len());
    assert_eq!(turns, Some(1), "the long turn completed and was recorded");
    // Watched: never sleeps.
    h.request(1, "subscribe", json!({"channel": a}));
    h.advance(60_000);
    assert_eq!(phase(&h, &a), "live");
    h.request(1, "unsubscribe", json!({"channel": a}));
    h.advance(5_000);
    assert_ne!(phase(&h, &a), "live");
}

#[test]
fn the_least_recently_used_session_is_evicted_and_wakes_with_the_same_uri() {
    let mut h = Harness::new(config(0, 1));
    h.connect(1, "c1");
    let (a, a_chat) = h.session_with_turn("a");
    h.settle_backend();
    let (b, _) = h.session_with_turn("b");
    h.settle_backend();
    assert!(!resident(&h, &a), "A, least recently used, was evicted");
    assert!(resident(&h, &b));
    assert_eq!(h.host.view().stats.evictions, 1);
    assert_eq!(h.list(1).len(), 2, "evicted sessions are still listed");
    // A prompt to A's chat wakes it under the same URI.
    h.start_turn(1, &a_chat, 9, "t2", "again");
    let cmds = h.settle();
    assert!(cmds.iter().any(|(c, cmd)| c == &a_chat && matches!(cmd, BackendCmd::Start { resume: true, .. })), "{cmds:?}");
    assert!(cmds.iter().any(|(_, cmd)| matches!(cmd, BackendCmd::Send { turn_id, .. } if turn_id == "t2")));
    assert_eq!(phase(&h, &a), "live");
}

#[test]
fn an_archived_session_goes_at_once() {
    let mut h = Harness::new(config(0, 5));
    h.connect(1, "c1");
    let (a, _) = h.session_with_turn("a");
    h.settle_backend();
    h.dispatch(1, &a, 1, json!({"type": "session/isArchivedChanged", "isArchived": true}));
    h.settle_store();
    assert!(!resident(&h, &a));
    let row = &h.list(1)[0];
    assert_eq!(row["status"].as_u64().unwrap_or(0) & 64, 64);
}

#[test]
fn two_subscribers_at_once_share_one_resume_and_get_the_same_snapshot() {
    let mut h = Harness::new(config(0, 1));
    h.connect(1, "c1");
    h.connect(2, "c2");
    let (_, a_chat) = h.session_with_turn("a");
    h.settle_backend();
    h.session_with_turn("b");
    h.settle_backend();
    let r1 = h.send_request(1, "subscribe", json!({"channel": a_chat}));
    let r2 = h.send_request(2, "subscribe", json!({"channel": a_chat}));
    let cmds = h.backend_cmds();
    let starts: Vec<_> = cmds.iter().filter(|(_, _, c)| matches!(c, BackendCmd::Start { .. })).collect();
    assert_eq!(starts.len(), 1, "one resume for both wakers");
    let history = vec![serde_json::from_value(json!({
        "id": "t1", "message": {"text": "hello", "origin": {"kind": "user"}},
        "responseParts": [], "state": "complete"
    })).expect("turn")];
    h.done(starts[0].0, Outcome::Started { conversation_id: "ahp-session@a".into(), history });
    let s1 = h.take_reply(1, r1).expect("reply 1");
    let s2 = h.take_reply(2, r2).expect("reply 2");
    assert_eq!(s1["result"], s2["result"]);
    assert_eq!(s1["result"]["snapshot"]["state"]["turns"][0]["id"], "t1");
}

#[test]
fn a_failed_resume_fails_the_waker_and_leaves_the_session_asleep_and_intact() {
    let mut h = Harness::new(config(0, 1));
    h.connect(1, "c1");
    let (a, a_chat) = h.session_with_turn("a");
    h.settle_backend();
    h.session_with_turn("b");
    h.settle_backend();
    let rid = h.send_request(1, "subscribe", json!({"channel": a_chat}));
    let (op, _, _) = h.backend_cmds().remove(0);
    h.done(op, Outcome::Failed { message: "transcript unreadable".into() });
    let r = h.take_reply(1, rid).expect("reply");
    assert_eq!(r["error"]["code"], -32603);
    assert!(r["error"]["message"].as_str().unwrap_or("").contains("transcript unreadable"));
    assert_eq!(phase(&h, &a), "asleep");
    assert_eq!(h.host.view().stats.failed_resumes, 1);
    assert!(h.list(1).iter().any(|row| row["resource"] == a.as_str()), "nothing deleted or replaced");
    assert!(h.store_ops().iter().all(|(_, c)| match c {
        ahpd_core::StoreCmd::Delete { .. } => false,
        ahpd_core::StoreCmd::Put { record, .. } => !record.deleted,
        ahpd_core::StoreCmd::PutAutomation { .. } | ahpd_core::StoreCmd::DeleteAutomation { .. } => true,
    }));
    // The next waker tries again.
    let rid = h.send_request(1, "subscribe", json!({"channel": a_chat}));
    h.settle_backend();
    assert!(h.take_reply(1, rid).expect("reply")["result"]["snapshot"].is_object());
}

#[test]
fn a_session_whose_backend_cannot_resume_never_sleeps() {
    let mut cfg = config(1_000, 1);
    cfg.agents = vec![AgentSpec { can_resume: false, ..AgentSpec::echo() }];
    let mut h = Harness::new(cfg);
    h.connect(1, "c1");
    let (a, _) = h.session_with_turn("a");
    let (b, _) = h.session_with_turn("b");
    h.advance(120_000);
    assert_eq!(phase(&h, &a), "live");
    assert_eq!(phase(&h, &b), "live");
}

#[test]
fn a_restart_lists_stored_sessions_and_resumes_them_on_demand() {
    let mut h = Harness::new(config(0, 10));
    h.connect(1, "c1");
    let (a, a_chat) = h.session_with_turn("a");
    let record = h.host.view().sessions.get(&a).expect("the session is held").record().clone();
    let row_before = h.list(1)[0].clone();
    let mut h = Harness::with_records(config(0, 10), vec![record]);
    h.connect(1, "c1");
    let rows = h.list(1);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["modifiedAt"], row_before["modifiedAt"]);
    assert_eq!(rows[0]["createdAt"], row_before["createdAt"]);
    let rid = h.send_request(1, "subscribe", json!({"channel": a_chat}));
    let cmds = h.backend_cmds();
    assert!(matches!(&cmds[0].2, BackendCmd::Start { resume: true, .. }));
    h.done(cmds[0].0, Outcome::Started { conversation_id: "ahp-session@a".into(), history: Vec::new() });
    assert!(h.take_reply(1, rid).expect("reply")["result"]["snapshot"].is_object());
}

#[test]
fn modified_at_only_moves_forward_even_when_the_wall_clock_goes_back() {
    let mut h = Harness::new(config(0, 0));
    h.connect(1, "c1");
    let (a, chat) = h.session_with_turn("a");
    let before = h.list(1)[0]["modifiedAt"].clone();
    h.request(1, "subscribe", json!({"channel": a}));
    assert_eq!(h.list(1)[0]["modifiedAt"], before, "subscribing does not move it");
    h.now.wall = ahpd_core::WallTime(h.now.wall.0 - 3_600_000);
    h.start_turn(1, &chat, 2, "t2", "later");
    h.settle_backend();
    h.agent_reply(&chat, "t2", "ok");
    let after = h.list(1)[0]["modifiedAt"].as_str().unwrap_or("").to_owned();
    assert!(after >= before.as_str().unwrap_or("").to_owned(), "{after} < {before}");
}

fn backend_event(h: &mut Harness, chat: &str, event: ahpd_core::BackendEvent) {
    h.input(ahpd_core::Input::Backend { chat: chat.into(), event });
}

#[test]
fn a_session_whose_backend_cannot_resume_stays_live_after_its_agent_exits_and_starts_it_afresh() {
    let mut cfg = config(1_000, 0);
    cfg.agents = vec![AgentSpec { can_resume: false, ..AgentSpec::echo() }];
    let mut h = Harness::new(cfg);
    h.connect(1, "c1");
    let (a, chat) = h.session_with_turn("a");
    // The agent exits mid-turn: the turn fails, the session stays live.
    h.start_turn(1, &chat, 2, "t2", "go");
    h.settle_backend();
    backend_event(&mut h, &chat, ahpd_core::BackendEvent::Exited { message: "exit status: 3".into() });
    assert_eq!(phase(&h, &a), "live");
    let chat_state = &h.host.view().sessions.get(&a).expect("the session is held").resident().expect("resident").chats[&chat];
    assert!(chat_state.active_turn.is_none(), "the running turn ended");
    h.advance(120_000);
    assert_eq!(phase(&h, &a), "live", "it never sleeps");
    assert!(h.backend_cmds().iter().all(|(_, _, c)| !matches!(c, BackendCmd::Close | BackendCmd::Start { .. })));
    // The next send starts the chat's agent afresh, then, once the start
    // named the conversation, hands it the turn.
    h.start_turn(1, &chat, 3, "t3", "again");
    let cmds = h.backend_cmds();
    assert!(matches!(&cmds[..], [(_, c1, BackendCmd::Start { resume: false, .. })] if *c1 == chat), "{cmds:?}");
    h.done(cmds[0].0, Outcome::Started { conversation_id: "fresh-conversation".into(), history: Vec::new() });
    h.settle_store();
    let cmds = h.backend_cmds();
    assert!(matches!(&cmds[..], [(_, c, BackendCmd::Send { .. })] if *c == chat), "{cmds:?}");
    h.done(cmds[0].0, Outcome::Ok);
    h.agent_reply(&chat, "t3", "hello again");
    let view = h.host.view();
    let s = view.sessions.get(&a).expect("the session is held");
    assert_eq!(&*s.record().chats[0].conversation_id, "fresh-conversation", "the new conversation is recorded");
    let turns = &s.resident().expect("resident").chats[&chat].turns;
    assert_eq!(turns.len(), 3, "the chat kept its turns");
    // Only once: the send after that goes straight to the agent.
    h.start_turn(1, &chat, 4, "t4", "once more");
    assert!(matches!(&h.backend_cmds()[..], [(_, _, BackendCmd::Send { .. })]));
}

#[test]
fn a_session_whose_backend_cannot_resume_is_started_afresh_after_a_restart() {
    let mut cfg = config(0, 10);
    cfg.agents = vec![AgentSpec { can_resume: false, ..AgentSpec::echo() }];
    let mut h = Harness::new(cfg.clone());
    h.connect(1, "c1");
    let (a, chat) = h.session_with_turn("a");
    let record = h.host.view().sessions.get(&a).expect("the session is held").record().clone();
    let mut h = Harness::with_records(cfg, vec![record]);
    h.connect(1, "c1");
    let rid = h.send_request(1, "subscribe", json!({"channel": chat}));
    let cmds = h.backend_cmds();
    assert!(matches!(&cmds[..], [(_, _, BackendCmd::Start { resume: false, .. })]), "never asked to resume: {cmds:?}");
    h.done(cmds[0].0, Outcome::Started { conversation_id: "fresh".into(), history: Vec::new() });
    assert!(h.take_reply(1, rid).expect("reply")["result"]["snapshot"].is_object());
}

#[test]
fn background_work_keeps_a_session_awake_until_every_chat_reports_its_end() {
    let mut h = Harness::new(config(5_000, 0));
    h.connect(1, "c1");
    let (a, chat) = h.session_with_turn("a");
    let r = h.send_request(1, "createChat", json!({"channel": a, "chat": "ahp-chat:/second"}));
    h.settle();
    assert!(h.take_reply(1, r).is_some());
    // Both chats' agents have a terminal running.
    backend_event(&mut h, &chat, ahpd_core::BackendEvent::Busy(true));
    backend_event(&mut h, "ahp-chat:/second", ahpd_core::BackendEvent::Busy(true));
    h.advance(60_000);
    assert_eq!(phase(&h, &a), "live", "busy: no sleep");
    // One ends: the other still holds the session awake.
    backend_event(&mut h, &chat, ahpd_core::BackendEvent::Busy(false));
    h.advance(60_000);
    assert_eq!(phase(&h, &a), "live", "still busy");
    // The last ends: idle from then on, it sleeps after the usual quiet.
    backend_event(&mut h, "ahp-chat:/second", ahpd_core::BackendEvent::Busy(false));
    h.advance(4_999);
    assert_eq!(phase(&h, &a), "live");
    h.advance(1);
    assert_eq!(phase(&h, &a), "asleep");
}

/// A session whose backend cannot resume and that is asleep with its turns
/// held (a dispose whose store delete failed let its agent go) is never
/// taken by the residency limit: its turns could not be rebuilt.
#[test]
fn the_residency_limit_never_takes_a_session_whose_turns_could_not_be_rebuilt() {
    let mut cfg = config(0, 1);
    cfg.agents = vec![AgentSpec { can_resume: false, ..AgentSpec::echo() }];
    let mut h = Harness::new(cfg);
    h.connect(1, "c1");
    let (a, _) = h.session_with_turn("a");
    let rid = h.send_request(1, "disposeSession", json!({"channel": a}));
    h.settle_backend();
    let (op, _) = h.store_ops().into_iter().find(|(_, c)| matches!(c, ahpd_core::StoreCmd::Put { record, .. } if record.deleted)).expect("the record's tombstone");
    h.done(op, Outcome::Failed { message: "disk full".into() });
    let reply = h.take_reply(1, rid).expect("dispose reply");
    assert!(reply.get("error").is_some(), "{reply}");
    assert_eq!(phase(&h, &a), "asleep");
    assert!(resident(&h, &a));
    // Over the limit, the other session goes; this one stays held.
    let (b, _) = h.session_with_turn("b");
    h.settle();
    h.advance(120_000);
    assert!(resident(&h, &a), "its turns are only the host's");
    assert_eq!(phase(&h, &b), "live");
}
