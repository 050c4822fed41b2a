//! Child sessions end to end (issue 24; docs/DECISIONS.md, 24), through
//! the official client: the echo agent's `/child` and `/child-status`
//! directives (the same core input the host's MCP server drives), and an
//! ACP agent calling `start_child_session` over MCP. A child started by an
//! agent finishes and its parent, asleep, wakes with `childFinished`;
//! `child_status` answers for one's own children only; refusals change
//! nothing.

mod common;

use common::*;

use std::time::Duration;

use ahp::ahp_types::state::{ChatState, TurnState};
use ahp::Client;

/// Sleep after 1.2 s of quiet.
const SLEEP_MINUTES: &str = "0.02";

const AGENT: &str = env!("CARGO_BIN_EXE_acp_test_agent");


/// The child's URI in a tool answer's text (`{"session": "...", ...}`).
fn child_of(reply: &str) -> String {
    let at = reply.find("\"session\":\"").map(|i| i + "\"session\":\"".len()).or_else(|| reply.find("\"session\": \"").map(|i| i + "\"session\": \"".len()));
    let rest = &reply[at.unwrap_or_else(|| panic!("no session in {reply}"))..];
    rest[..rest.find('"').expect("closing quote")].to_owned()
}

/// Subscribes to `chat` and waits until it has a completed turn whose
/// message is a `childFinished`; returns the chat's state then.
async fn wait_child_finished(c: &Client, chat: &str) -> ChatState {
    let (mut state, mut sub) = subscribe_chat(c, chat).await;
    let done = |s: &ChatState| s.turns.iter().any(|t| t.message.text.starts_with("childFinished") && t.state == TurnState::Complete);
    if !done(&state) {
        follow_chat(&mut sub, &mut state, &format!("a childFinished turn in {chat}"), |_, s| done(s)).await;
    }
    state
}

/// The Done-when line: a child started by an agent finishes, and its
/// parent, asleep by then, wakes with `childFinished` carrying the child's
/// reply; both states name the link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_finishes_and_its_sleeping_parent_wakes_with_child_finished() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let daemon = Daemon::start_with(&data, &["--sleep-after-minutes", SLEEP_MINUTES]);
    let (c, _, _root) = connect_init(&daemon.url, "children-1").await;
    let (p, p_chat, ps, mut p_state, mut psub) = new_session(&c).await;
    let reply = ask(&c, &p_chat, &mut p_state, &mut psub, "p1", "/child echo /slow 8000 hello child").await;
    assert!(reply.contains("tool answered"), "{reply}");
    let kid = child_of(&reply);
    let (kid_state, _ksub) = subscribe_session(&c, &kid).await;
    assert_eq!(kid_state.meta.as_ref().and_then(|m| m.get("ahpd.parent")).cloned(), Some(serde_json::json!(p)));
    drop((ps, psub));
    let (p_session, _) = subscribe_session(&c, &p).await;
    assert_eq!(p_session.meta.as_ref().and_then(|m| m.get("ahpd.children")).cloned(), Some(serde_json::json!([kid])));
    unwatch(&c, &p, &p_chat).await;
    wait_log(&data, 0, "session.slept", &p).await;
    assert_eq!(count_log(&data, 0, "child.finished", &p), 0, "the parent slept before its child finished");
    let mark = log_len(&data);

    let state = wait_child_finished(&c, &p_chat).await;
    let turn = state.turns.iter().find(|t| t.message.text.starts_with("childFinished")).expect("the childFinished turn");
    assert!(turn.message.text.contains("Echo: /slow 8000 hello child"), "the child's reply: {}", turn.message.text);
    let meta = turn.message.meta.as_ref().and_then(|m| m.get("ahpd.hostTool")).cloned().expect("_meta");
    assert_eq!(meta["childFinished"]["session"], serde_json::json!(kid));
    assert_eq!(meta["childFinished"]["status"], "complete");
    assert!(markdown(turn).starts_with("Echo: childFinished"), "the parent's agent answered it: {turn:?}");
    assert!(count_log(&data, mark, "session.woke", &p) >= 1, "the parent woke");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (state, _s) = subscribe_chat(&c, &p_chat).await;
    assert_eq!(state.turns.iter().filter(|t| t.message.text.starts_with("childFinished")).count(), 1, "once");
    c.shutdown().await;
}

/// `child_status` answers for a child of the caller (its status and last
/// reply) and `not_found` for any other session; an unknown provider is
/// refused and makes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_status_is_for_ones_own_children_and_refusals_change_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let daemon = Daemon::start(&data);
    let (c, _, _root) = connect_init(&daemon.url, "children-2").await;
    let (_p, p_chat, _ps, mut p_state, mut psub) = new_session(&c).await;
    let reply = ask(&c, &p_chat, &mut p_state, &mut psub, "p1", "/child echo hi").await;
    let kid = child_of(&reply);
    follow_chat(&mut psub, &mut p_state, "the childFinished turn", |_, s| {
        s.turns.iter().any(|t| t.message.text.starts_with("childFinished") && t.state == TurnState::Complete)
    })
    .await;
    let reply = ask(&c, &p_chat, &mut p_state, &mut psub, "p2", &format!("/child-status {kid}")).await;
    assert!(reply.contains("tool answered") && reply.contains("Echo: hi") && reply.contains("\"status\""), "{reply}");
    assert!(list(&c).await.iter().any(|row| row.resource == kid), "the child is listed");

    let rows = list(&c).await.len();
    let reply = ask(&c, &p_chat, &mut p_state, &mut psub, "p3", "/child nope hi").await;
    assert!(reply.contains("tool refused: invalid_argument"), "{reply}");
    let (_q, q_chat, _qs, mut q_state, mut qsub) = new_session(&c).await;
    let reply = ask(&c, &q_chat, &mut q_state, &mut qsub, "q1", &format!("/child-status {kid}")).await;
    assert!(reply.contains("tool refused: not_found"), "another's child: {reply}");
    let reply = ask(&c, &q_chat, &mut q_state, &mut qsub, "q2", "/child-status ahp-session:/nobody").await;
    assert!(reply.contains("tool refused: not_found"), "{reply}");
    assert_eq!(list(&c).await.len(), rows + 1, "only Q was added");
    c.shutdown().await;
}

/// An ACP agent calls `start_child_session` over the host's MCP server:
/// the child runs on the same agent in the parent's folder, and the
/// parent's agent is handed `childFinished` as a turn. The Rust test agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_agent_starts_a_child_over_mcp_and_hears_it_finish() {
    an_agent_starts_a_child(AGENT.to_owned(), "children-3").await;
}

/// The same through the Node test agent (the npm ACP and MCP SDKs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_agent_starts_a_child_over_mcp_and_hears_it_finish() {
    an_agent_starts_a_child(node_agent(), "children-4").await;
}

/// Agent command `agent` (named `good` on the daemon) starts a child over
/// MCP, hears its `childFinished`, and is refused an unknown provider.
async fn an_agent_starts_a_child(agent: String, client: &str) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).expect("mkdir work");
    let good = format!("good={agent}");
    let daemon = Daemon::start_with(&data, &["--agent", &good]);
    let (c, _, _root) = connect_init(&daemon.url, client).await;
    let (_p, p_chat, _ps, mut p_state, mut psub) = session_on(&c, "good", &work).await;
    let call = format!("/tool start_child_session {}", serde_json::json!({ "provider": "good", "prompt": "hello from the parent" }));
    prompt(&c, &p_chat, &mut p_state, &mut psub, "a1", &call).await;
    let reply = markdown(p_state.turns.last().expect("a turn"));
    assert!(reply.starts_with("tool start_child_session ok:"), "{reply}");
    let kid = child_of(&reply);
    follow_chat(&mut psub, &mut p_state, "the childFinished turn", |env, s| {
        ends_turn(env) && s.turns.iter().any(|t| t.message.text.starts_with("childFinished"))
    })
    .await;
    let turn = p_state.turns.iter().find(|t| t.message.text.starts_with("childFinished")).expect("the turn");
    assert!(turn.message.text.contains("hello from the parent"), "{}", turn.message.text);
    assert_eq!(turn.state, TurnState::Complete);
    let (kid_state, _k) = subscribe_session(&c, &kid).await;
    assert_eq!(kid_state.working_directories.as_deref(), Some(&[file_uri(&work)][..]), "the parent's folder");
    let refused = format!("/tool start_child_session {}", serde_json::json!({ "provider": "nope", "prompt": "x" }));
    prompt(&c, &p_chat, &mut p_state, &mut psub, "a2", &refused).await;
    let reply = markdown(p_state.turns.last().expect("a turn"));
    assert!(reply.starts_with("tool start_child_session error: invalid_argument"), "{reply}");
    c.shutdown().await;
}
