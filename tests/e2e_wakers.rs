//! The host tools end to end (issue 24), through the echo agent's tool
//! directives (`/send`, `/wake`), which drive the same core input the
//! host's MCP server does: a message from one session wakes a sleeping
//! one, a wake fires once across a restart, each refusal is a clear tool
//! error that changes nothing.

mod common;

use common::*;

use std::time::Duration;

use ahp::ahp_types::state::{ChatState, TurnState};
use ahp::Client;

/// Sleep after 1.2 s of quiet.
const SLEEP_MINUTES: &str = "0.02";


/// Subscribes to `chat` and waits until a completed turn whose message is
/// `text` is in it; returns the chat's state then.
async fn wait_turn_with(c: &Client, chat: &str, text: &str) -> ChatState {
    let (mut state, mut sub) = subscribe_chat(c, chat).await;
    let done = |s: &ChatState| s.turns.iter().any(|t| t.message.text == text && t.state == TurnState::Complete);
    if !done(&state) {
        follow_chat(&mut sub, &mut state, &format!("a turn '{text}' in {chat}"), |_, s| done(s)).await;
    }
    state
}

/// B sleeps; A's agent sends it a message; B wakes and answers it, the
/// turn's message naming A as its sender.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleeping_session_wakes_for_a_message_from_another_and_answers() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let daemon = Daemon::start_with(&data, &["--sleep-after-minutes", SLEEP_MINUTES]);
    let (c, _, _root) = connect_init(&daemon.url, "wakers-1").await;
    let (b, b_chat, _bs, mut b_state, mut bsub) = new_session(&c).await;
    ask(&c, &b_chat, &mut b_state, &mut bsub, "b1", "hello").await;
    drop(bsub);
    unwatch(&c, &b, &b_chat).await;
    wait_log(&data, 0, "session.slept", &b).await;
    let mark = log_len(&data);

    let (a, a_chat, _as, mut a_state, mut asub) = new_session(&c).await;
    let reply = ask(&c, &a_chat, &mut a_state, &mut asub, "a1", &format!("/send {b} please review")).await;
    assert!(reply.contains("tool answered"), "{reply}");
    assert!(reply.contains(&b_chat), "{reply}");

    let b_state = wait_turn_with(&c, &b_chat, "please review").await;
    let turn = b_state.turns.iter().find(|t| t.message.text == "please review").expect("the message's turn");
    assert!(markdown(turn).contains("Echo: please review"), "B answered: {turn:?}");
    let from = turn.message.meta.as_ref().and_then(|m| m.get("ahpd.hostTool")).cloned();
    assert_eq!(from, Some(serde_json::json!({"from": {"session": a, "chat": a_chat}})));
    assert!(count_log(&data, mark, "session.woke", &b) >= 1, "B woke");
    c.shutdown().await;
}

/// An agent asks to be woken in 2 s; the daemon stops and starts again in
/// between; the wake fires once after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_asked_before_a_restart_fires_once_after_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut daemon = Daemon::start(&data);
    let (c, _, _root) = connect_init(&daemon.url, "wakers-2").await;
    let (sid, chat, _ss, mut state, mut sub) = new_session(&c).await;
    let reply = ask(&c, &chat, &mut state, &mut sub, "t1", "/wake 2 the wake prompt").await;
    assert!(reply.contains("tool answered") && reply.contains("wake-1"), "{reply}");
    drop(sub);
    drop(c);
    assert!(daemon.terminate().success(), "ahpd exited badly after SIGTERM");
    tokio::time::sleep(Duration::from_millis(2_500)).await;

    let daemon = Daemon::start(&data);
    let (c, _, _root) = connect_init(&daemon.url, "wakers-2b").await;
    let state = wait_turn_with(&c, &chat, "the wake prompt").await;
    let turn = state.turns.iter().find(|t| t.message.text == "the wake prompt").expect("the wake's turn");
    assert!(markdown(turn).contains("Echo: the wake prompt"));
    assert_eq!(turn.message.meta.as_ref().and_then(|m| m.get("ahpd.hostTool")).cloned(), Some(serde_json::json!({"wake": "wake-1"})));
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let (state, _sub) = subscribe_chat(&c, &chat).await;
    assert_eq!(state.turns.iter().filter(|t| t.message.text == "the wake prompt").count(), 1, "fired once");
    assert_eq!(count_log(&data, 0, "wake.fired", &sid), 1);
    c.shutdown().await;
}

/// Each refusal is a clear tool error in the agent's reply and changes
/// nothing: an unknown target, the session itself, one wake too many.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_refusal_is_a_clear_tool_error_and_changes_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let daemon = Daemon::start(&data);
    let (c, _, _root) = connect_init(&daemon.url, "wakers-3").await;
    let (sid, chat, _ss, mut state, mut sub) = new_session(&c).await;
    let reply = ask(&c, &chat, &mut state, &mut sub, "r1", "/send ahp-session:/nobody hi").await;
    assert!(reply.contains("tool refused: not_found"), "{reply}");
    let reply = ask(&c, &chat, &mut state, &mut sub, "r2", &format!("/send {sid} hi me")).await;
    assert!(reply.contains("tool refused: forbidden"), "{reply}");
    for n in 0..16 {
        let reply = ask(&c, &chat, &mut state, &mut sub, &format!("w{n}"), "/wake 3600 later").await;
        assert!(reply.contains("tool answered"), "{reply}");
    }
    let reply = ask(&c, &chat, &mut state, &mut sub, "w16", "/wake 3600 one too many").await;
    assert!(reply.contains("tool refused: limit_reached"), "{reply}");
    let (session, _s) = subscribe_session(&c, &sid).await;
    let wakes = session.meta.as_ref().and_then(|m| m.get("ahpd.wakes")).and_then(|w| w.as_array()).map(Vec::len);
    assert_eq!(wakes, Some(16), "listed on the state, the refused one not among them");
    c.shutdown().await;
}
