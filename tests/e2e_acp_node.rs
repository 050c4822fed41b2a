//! ACP backends end to end against a second, independent peer (issue 8):
//! the real daemon drives `tests/acp_node_agent/agent.mjs`, an agent written
//! on the npm `@agentclientprotocol/sdk`, over stdio, observed through the
//! official AHP client: a streamed reply, a permission asked and answered
//! both ways, a cancel, a sleep and a wake that loads the conversation
//! (`session/load` replaying it as `session/update` notifications), and a
//! restart that rebuilds the chat's turns from that replay.
//!
//! Needs `node` on `PATH` and the agent's packages installed:
//! `npm ci --prefix tests/acp_node_agent` (`.ci/run` does it). Without them
//! the tests fail and say so.

mod common;

use common::*;

use std::path::{Path, PathBuf};

use ahp::ahp_types::actions::{ChatTurnCancelledAction, StateAction};
use ahp::ahp_types::state::{ChatState, ResponsePart, SnapshotState, ToolCallState, TurnState};
use ahp::{Client, SessionSubscription};

/// The Node agent's folder (its `package.json`, `agent.mjs`, `node_modules`).
fn agent_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/acp_node_agent")
}

/// `node` and the installed SDK, or a failure saying how to get them.
fn node_agent_script() -> PathBuf {
    const HOW: &str = "run `npm ci --prefix tests/acp_node_agent` (needs Node 20+ and npm)";
    match std::process::Command::new("node").arg("--version").output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!("`node --version` failed ({}): {HOW}", out.status),
        Err(e) => panic!("`node` is not on PATH ({e}): install Node 20+, then {HOW}"),
    }
    let dir = agent_dir();
    let sdk = dir.join("node_modules/@agentclientprotocol/sdk/package.json");
    assert!(sdk.is_file(), "the Node agent's packages are not installed ({} is missing): {HOW}", sdk.display());
    let script = dir.join("agent.mjs");
    assert!(script.is_file(), "{} is missing", script.display());
    script.canonicalize().expect("canonical agent.mjs")
}

/// `--agent node=node <agent.mjs> --store <store>`.
fn agent_flag(store: &Path) -> String {
    format!("node=node {} --store {}", node_agent_script().display(), store.display())
}

/// Asks for a permission in turn `turn_id`, answers it `approved`, and
/// follows the turn to its end.
async fn permission_turn(c: &Client, chat: &str, state: &mut ChatState, sub: &mut SessionSubscription, turn_id: &str, approved: bool) {
    within("dispatch", c.dispatch(chat.to_owned(), user_turn(turn_id, "ask permission please"))).await.expect("dispatch");
    follow_chat(sub, state, "permission asked", |_, s| s.status & ACTIVITY == 24).await;
    let pending = pending_confirmation(state).expect("a tool call pending confirmation");
    assert_eq!(pending.display_name, "Run node task");
    let confirm = confirm_tool(turn_id, &pending.tool_call_id, approved);
    within("dispatch confirm", c.dispatch(chat.to_owned(), confirm)).await.expect("dispatch confirm");
    follow_chat(sub, state, "permission turn", |env, _| ends_turn(env)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_agent_streams_asks_permission_and_honours_a_cancel() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).expect("mkdir work");
    let flag = agent_flag(&tmp.path().join("node-store"));
    let daemon = Daemon::start_with(&data, &["--agent", &flag]);
    let (c, init, _root) = connect_init(&daemon.url, "node-1").await;
    match init.snapshots.first().map(|s| &s.state) {
        Some(SnapshotState::Root(r)) => assert!(r.agents.iter().any(|a| a.provider == "node"), "the root state lists the Node agent"),
        other => panic!("expected a root snapshot, got {other:?}"),
    }
    let (_sid, chat, _ssub, mut state, mut sub) = session_on(&c, "node", &work).await;

    // A prompt: the reply comes in several chunks.
    let seen = prompt(&c, &chat, &mut state, &mut sub, "t1", "hello node").await;
    let turn = state.turns.last().expect("a turn");
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    assert_eq!(markdown(turn), "Node says: hello node (turn 1)");
    assert!(seen.iter().filter(|e| matches!(e.action, StateAction::ChatDelta(_))).count() >= 2, "the reply streamed: {seen:?}");

    // A permission, approved: the tool call waits for the client, then
    // completes.
    permission_turn(&c, &chat, &mut state, &mut sub, "t2", true).await;
    let turn = state.turns.last().expect("a turn");
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    assert_eq!(markdown(turn), "node: permission granted, task ran");
    let completed = turn.response_parts.iter().any(|p| matches!(p, ResponsePart::ToolCall(tc) if matches!(&tc.tool_call, ToolCallState::Completed(_))));
    assert!(completed, "the tool call completed: {turn:?}");

    // The same, denied: the agent hears the reject option.
    permission_turn(&c, &chat, &mut state, &mut sub, "t3", false).await;
    let turn = state.turns.last().expect("a turn");
    assert!(markdown(turn).contains("node: permission denied"), "{turn:?}");

    // A cancel stops a long turn; the agent takes the next one, and nothing
    // of the cancelled turn leaks into it.
    within("dispatch", c.dispatch(chat.clone(), user_turn("t4", "slow please"))).await.expect("dispatch");
    follow_chat(&mut sub, &mut state, "slow turn streams", |env, _| matches!(env.action, StateAction::ChatDelta(_))).await;
    let cancel = StateAction::ChatTurnCancelled(ChatTurnCancelledAction { turn_id: "t4".to_owned(), duration: 0, meta: None });
    within("dispatch cancel", c.dispatch(chat.clone(), cancel)).await.expect("dispatch cancel");
    follow_chat(&mut sub, &mut state, "cancelled", |env, _| matches!(env.action, StateAction::ChatTurnCancelled(_))).await;
    assert_eq!(state.turns.last().map(|t| t.state), Some(TurnState::Cancelled));
    prompt(&c, &chat, &mut state, &mut sub, "t5", "after the cancel").await;
    let turn = state.turns.last().expect("a turn");
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    assert_eq!(markdown(turn), "Node says: after the cancel (turn 5)");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleeping_node_session_wakes_with_its_conversation_loaded() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).expect("mkdir work");
    let flag = agent_flag(&tmp.path().join("node-store"));
    let args = ["--agent", flag.as_str(), "--sleep-after-minutes", "0.02"];
    let mut daemon = Daemon::start_with(&data, &args);
    let (c, _, _root) = connect_init(&daemon.url, "node-2").await;
    let (sid, chat, ssub, mut state, mut sub) = session_on(&c, "node", &work).await;
    prompt(&c, &chat, &mut state, &mut sub, "t1", "remember the heron").await;
    assert_eq!(markdown(state.turns.last().expect("turn")), "Node says: remember the heron (turn 1)");
    unwatch(&c, &sid, &chat).await;
    drop((sub, ssub));

    // It sleeps: its agent process is let go.
    until_logged(&daemon, "sleep", "session.slept", &sid).await;

    // A prompt wakes it; the new Node process loaded the conversation (it
    // counts this as the second turn) and the chat kept its history.
    let (mut state, mut sub) = subscribe_chat(&c, &chat).await;
    prompt(&c, &chat, &mut state, &mut sub, "t2", "and now").await;
    let texts = turn_texts(&state);
    assert_eq!(
        texts,
        [
            ("remember the heron".to_owned(), "Node says: remember the heron (turn 1)".to_owned()),
            ("and now".to_owned(), "Node says: and now (turn 2)".to_owned())
        ]
    );
    let log = daemon.log_text();
    assert!(count(&log, "session.woke", &sid) >= 1, "woke:\n{log}");
    assert!(count(&log, "acp: agent session open", "resumed=true") >= 1, "the wake was a session/load:\n{log}");
    c.shutdown().await;

    // A restart: the chat's turns are rebuilt from what the Node agent
    // replays on session/load.
    daemon.terminate();
    drop(daemon);
    let daemon = Daemon::start_with(&data, &args);
    let (c, _, _root) = connect_init(&daemon.url, "node-3").await;
    let (mut state, mut sub) = subscribe_chat(&c, &chat).await;
    let texts = turn_texts(&state);
    assert_eq!(
        texts,
        [
            ("remember the heron".to_owned(), "Node says: remember the heron (turn 1)".to_owned()),
            ("and now".to_owned(), "Node says: and now (turn 2)".to_owned())
        ],
        "the conversation came back from the Node agent's replay"
    );
    prompt(&c, &chat, &mut state, &mut sub, "t3", "third").await;
    assert_eq!(markdown(state.turns.last().expect("turn")), "Node says: third (turn 3)");
    c.shutdown().await;
}

/// Issue 19 with a real ACP agent: "for an ACP agent the conversation the
/// agent replays on session/load is merged with it, never duplicated". A
/// turn completes (the Node agent keeps it and replays it on load), the
/// next is running (`slow`, never kept by the agent) when ahpd is killed
/// with -9. After the restart the chat holds each turn once: the first
/// as the agent replays it, the second as the host kept it, ended in
/// "interrupted: the host stopped" with its message; a new prompt runs on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_running_at_kill_9_is_merged_once_with_the_node_agents_replay() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).expect("mkdir work");
    let flag = agent_flag(&tmp.path().join("node-store"));
    let args = ["--agent", flag.as_str()];
    let mut daemon = Daemon::start_with(&data, &args);
    let (c, _, _root) = connect_init(&daemon.url, "node-kill").await;
    let (_sid, chat, _ssub, mut state, mut sub) = session_on(&c, "node", &work).await;
    prompt(&c, &chat, &mut state, &mut sub, "t1", "remember the heron").await;
    within("dispatch", c.dispatch(chat.clone(), user_turn("t2", "slow and long"))).await.expect("dispatch");
    wait_for(&mut sub, "t2 echoed and streaming", |e| match e {
        ahp::SubscriptionEvent::Action(env) if matches!(&env.action, StateAction::ChatDelta(_)) => Some(()),
        _ => None,
    })
    .await;
    daemon.kill();
    drop(daemon);

    let daemon = Daemon::start_with(&data, &args);
    let (c, _, _root) = connect_init(&daemon.url, "node-kill-2").await;
    let (mut state, mut sub) = subscribe_chat(&c, &chat).await;
    let messages: Vec<&str> = state.turns.iter().map(|t| t.message.text.as_str()).collect();
    assert_eq!(messages, ["remember the heron", "slow and long"], "each turn once, in place: {:?}", state.turns);
    assert_eq!(markdown(&state.turns[0]), "Node says: remember the heron (turn 1)", "the first as the agent replays it");
    assert_eq!(state.turns[1].state, TurnState::Error);
    let words = serde_json::to_string(&state.turns[1].response_parts).expect("json");
    assert!(words.contains("interrupted: the host stopped"), "{words}");
    prompt(&c, &chat, &mut state, &mut sub, "t3", "third").await;
    assert_eq!(state.turns.len(), 3, "{:?}", state.turns);
    assert!(markdown(state.turns.last().expect("turn")).starts_with("Node says: third"));
    c.shutdown().await;
}
