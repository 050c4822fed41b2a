//! The host's tools over MCP end to end (issue 24; docs/DECISIONS.md 22):
//! the real daemon gives each ACP agent its MCP server (streamable HTTP on
//! loopback, a secret per chat), and `acp_test_agent` calls it with the
//! `rmcp` client through its `/tool NAME {json}` directive: `list_peers`
//! answers, `send_message` arrives as a turn on the target, a wake from
//! `schedule_wakeup` starts a turn when due; a refusal is a tool error; a made-up
//! secret is refused before MCP; an agent without MCP over HTTP gets the
//! stdio bridge; `host_tools = false` gives an agent no server at all.

mod common;

use common::*;

use ahp::ahp_types::state::TurnState;

const AGENT: &str = env!("CARGO_BIN_EXE_acp_test_agent");

/// The reply of the chat's last turn.
fn last_reply(state: &ahp::ahp_types::state::ChatState) -> String {
    markdown(state.turns.last().expect("a turn"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_agent_lists_peers_and_messages_another_session_through_the_hosts_mcp_server() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).expect("mkdir work");
    let good = format!("good={AGENT}");
    let daemon = Daemon::start_with(&data, &["--agent", &good]);
    let (c, _, _root) = connect_init(&daemon.url, "tools-1").await;
    let (sid_a, chat_a, _sa, mut state_a, mut sub_a) = session_on(&c, "good", &work).await;
    let (sid_b, chat_b, _sb, mut state_b, mut sub_b) = session_on(&c, "good", &work).await;
    // B's agent runs (a first turn), so it is a live peer of A's.
    prompt(&c, &chat_b, &mut state_b, &mut sub_b, "b1", "hello").await;

    prompt(&c, &chat_a, &mut state_a, &mut sub_a, "a1", "/tool list_peers").await;
    let reply = last_reply(&state_a);
    assert!(reply.starts_with("tool list_peers ok:"), "{reply}");

    // A message to B arrives there as a turn that B's agent answers.
    let send = format!("/tool send_message {}", serde_json::json!({ "session": sid_b, "text": "hello from A" }));
    prompt(&c, &chat_a, &mut state_a, &mut sub_a, "a2", &send).await;
    let reply = last_reply(&state_a);
    assert!(reply.starts_with("tool send_message ok:"), "{reply}");
    follow_chat(&mut sub_b, &mut state_b, "the message's turn on B", |env, s| {
        ends_turn(env) && s.turns.iter().any(|t| t.message.text.contains("hello from A"))
    })
    .await;
    let turn = state_b.turns.iter().find(|t| t.message.text.contains("hello from A")).expect("B's turn");
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    assert!(markdown(turn).contains("hello from A"), "B's agent answered it: {turn:?}");

    // A refusal is a tool error the agent reads, and changes nothing.
    let nowhere = format!("ahp-session:/{}", fresh_id());
    let send = format!("/tool send_message {}", serde_json::json!({ "session": nowhere, "text": "anyone?" }));
    prompt(&c, &chat_a, &mut state_a, &mut sub_a, "a3", &send).await;
    let reply = last_reply(&state_a);
    assert!(reply.starts_with("tool send_message error: not_found"), "{reply}");
    assert!(list(&c).await.iter().all(|row| row.resource != nowhere), "no session was made");

    // A wake the agent asks for starts a turn on its own chat when due.
    let wake = format!("/tool schedule_wakeup {}", serde_json::json!({ "after_seconds": 1, "prompt": "time to wake" }));
    prompt(&c, &chat_a, &mut state_a, &mut sub_a, "a4", &wake).await;
    let reply = last_reply(&state_a);
    assert!(reply.starts_with("tool schedule_wakeup ok:") && reply.contains("\"id\""), "{reply}");
    follow_chat(&mut sub_a, &mut state_a, "the wake's turn on A", |env, s| {
        ends_turn(env) && s.turns.iter().any(|t| t.message.text == "time to wake")
    })
    .await;
    let turn = state_a.turns.iter().find(|t| t.message.text == "time to wake").expect("the wake's turn");
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");

    let log = daemon.log_text();
    assert!(count(&log, "acp: agent session open", "host_tools=true") >= 2, "{log}");
    assert!(!log.contains("Bearer "), "no secret in the log:\n{log}");
    let _ = sid_a;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_made_up_secret_reaches_nothing_and_arguments_off_the_schema_are_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).expect("mkdir work");
    let good = format!("good={AGENT}");
    let daemon = Daemon::start_with(&data, &["--agent", &good]);
    let (c, _, _root) = connect_init(&daemon.url, "tools-0").await;
    let (_sid, chat, _ss, mut state, mut sub) = session_on(&c, "good", &work).await;

    // A made-up secret: 401 at the listener, before MCP; the core never
    // hears of it.
    prompt(&c, &chat, &mut state, &mut sub, "t1", "/tool-bad-secret list_peers").await;
    let reply = last_reply(&state);
    // (rmcp's client says a 401 as "Auth required".)
    assert!(reply.starts_with("tool list_peers failed:") && reply.contains("Auth required"), "{reply}");
    let log = daemon.log_text();
    assert!(count(&log, "mcp: a request without a secret the host holds was refused", "") == 1, "{log}");
    assert_eq!(count(&log, "mcp: tool call", ""), 0, "nothing reached the core:\n{log}");

    // Arguments that do not fit the tool's schema are refused by rmcp (a
    // tool error) before the host sees the call.
    prompt(&c, &chat, &mut state, &mut sub, "t2", "/tool send_message {\"text\": 3}").await;
    let reply = last_reply(&state);
    assert!(reply.starts_with("tool send_message error:") && reply.contains("parameters"), "{reply}");
    // An unknown tool likewise.
    prompt(&c, &chat, &mut state, &mut sub, "t3", "/tool rm_rf {}").await;
    let reply = last_reply(&state);
    assert!(!reply.starts_with("tool rm_rf ok"), "{reply}");
    assert_eq!(count(&daemon.log_text(), "mcp: tool call", ""), 0, "nothing reached the core");

    let log = daemon.log_text();
    assert!(log.contains("host tools: MCP server for the agents"), "{log}");
    assert!(!log.contains("Bearer "), "no secret in the log:\n{log}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_without_mcp_over_http_gets_the_stdio_bridge() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).expect("mkdir work");
    let stdio_only = format!("stdio={AGENT} --no-mcp-http");
    let daemon = Daemon::start_with(&data, &["--agent", &stdio_only]);
    let (c, _, _root) = connect_init(&daemon.url, "tools-2").await;
    let (_sid, chat, _ss, mut state, mut sub) = session_on(&c, "stdio", &work).await;
    prompt(&c, &chat, &mut state, &mut sub, "t1", "/tool list_peers").await;
    let reply = last_reply(&state);
    assert!(reply.starts_with("tool list_peers ok:"), "{reply}");
    let nowhere = format!("ahp-session:/{}", fresh_id());
    let send = format!("/tool send_message {}", serde_json::json!({ "session": nowhere, "text": "anyone?" }));
    prompt(&c, &chat, &mut state, &mut sub, "t2", &send).await;
    let reply = last_reply(&state);
    assert!(reply.starts_with("tool send_message error: not_found"), "{reply}");
    drop(daemon);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_tools_off_gives_the_agent_no_mcp_server() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).expect("mkdir work");
    let config = tmp.path().join("config.toml");
    let text = format!("[agents.plain]\ncommand = {:?}\nhost_tools = false\n", AGENT);
    std::fs::write(&config, text).expect("write config");
    let daemon = Daemon::start_with(&data, &["--config", config.to_str().expect("utf-8 path")]);
    let (c, _, _root) = connect_init(&daemon.url, "tools-3").await;
    let (_sid, chat, _ss, mut state, mut sub) = session_on(&c, "plain", &work).await;
    prompt(&c, &chat, &mut state, &mut sub, "t1", "/tool list_peers").await;
    let reply = last_reply(&state);
    assert_eq!(reply, "tool list_peers failed: no MCP server was given");
    let log = daemon.log_text();
    assert!(!log.contains("host tools: MCP server for the agents"), "no server is opened when no agent takes it:\n{log}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_agent_calls_the_hosts_tools_over_http_and_over_the_bridge() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).expect("mkdir work");
    let node = node_agent();
    let (http, stdio, rust) = (format!("node={node}"), format!("nodestdio={node} --no-mcp-http"), format!("good={AGENT}"));
    let daemon = Daemon::start_with(&data, &["--agent", &http, "--agent", &stdio, "--agent", &rust]);
    let (c, _, _root) = connect_init(&daemon.url, "tools-4").await;
    let (_sid_a, chat_a, _sa, mut state_a, mut sub_a) = session_on(&c, "node", &work).await;
    let (sid_b, chat_b, _sb, mut state_b, mut sub_b) = session_on(&c, "good", &work).await;
    // A session is a send_message target once announced, at its first turn
    // (Sessions page, "Provisional sessions"; DECISIONS 21).
    prompt(&c, &chat_b, &mut state_b, &mut sub_b, "b1", "hello").await;

    prompt(&c, &chat_a, &mut state_a, &mut sub_a, "a1", "/tool list_peers").await;
    let reply = last_reply(&state_a);
    assert!(reply.starts_with("tool list_peers ok:"), "{reply}");

    let send = format!("/tool send_message {}", serde_json::json!({ "session": sid_b, "text": "hello from node" }));
    prompt(&c, &chat_a, &mut state_a, &mut sub_a, "a2", &send).await;
    let reply = last_reply(&state_a);
    assert!(reply.starts_with("tool send_message ok:"), "{reply}");
    follow_chat(&mut sub_b, &mut state_b, "the message's turn on B", |env, s| {
        ends_turn(env) && s.turns.iter().any(|t| t.message.text.contains("hello from node"))
    })
    .await;

    prompt(&c, &chat_a, &mut state_a, &mut sub_a, "a3", "/tool-bad-secret list_peers").await;
    let reply = last_reply(&state_a);
    assert!(reply.starts_with("tool list_peers failed:") && reply.contains("401"), "{reply}");

    let (_sid_c, chat_c, _sc, mut state_c, mut sub_c) = session_on(&c, "nodestdio", &work).await;
    prompt(&c, &chat_c, &mut state_c, &mut sub_c, "c1", "/tool list_peers").await;
    let reply = last_reply(&state_c);
    assert!(reply.starts_with("tool list_peers ok:"), "over the bridge: {reply}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_mcp_wakes_a_sleeping_acp_session_which_answers() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).expect("mkdir work");
    let store = tmp.path().join("agent-store");
    let good = format!("good={AGENT} --store {}", store.display());
    let daemon = Daemon::start_with(&data, &["--agent", &good, "--sleep-after-minutes", "0.02"]);
    let (c, _, _root) = connect_init(&daemon.url, "tools-5").await;
    let (_sid_a, chat_a, _sa, mut state_a, mut sub_a) = session_on(&c, "good", &work).await;
    let (sid_b, chat_b, sb, mut state_b, mut sub_b) = session_on(&c, "good", &work).await;
    prompt(&c, &chat_b, &mut state_b, &mut sub_b, "b1", "first").await;
    unwatch(&c, &sid_b, &chat_b).await;
    drop((sb, sub_b));
    // B sleeps (nobody watches it); A is watched, so it stays awake.
    until_logged(&daemon, "B sleeps", "session.slept", &sid_b).await;

    let send = format!("/tool send_message {}", serde_json::json!({ "session": sid_b, "text": "wake up, B" }));
    prompt(&c, &chat_a, &mut state_a, &mut sub_a, "a1", &send).await;
    let reply = last_reply(&state_a);
    assert!(reply.starts_with("tool send_message ok:"), "{reply}");
    until_logged(&daemon, "B wakes", "session.woke", &sid_b).await;
    let (mut state_b, mut sub_b) = subscribe_chat(&c, &chat_b).await;
    if !state_b.turns.iter().any(|t| t.message.text == "wake up, B" && t.state == TurnState::Complete) {
        follow_chat(&mut sub_b, &mut state_b, "the message's turn on B", |env, s| {
            ends_turn(env) && s.turns.iter().any(|t| t.message.text == "wake up, B")
        })
        .await;
    }
    let turn = state_b.turns.iter().find(|t| t.message.text == "wake up, B").expect("B's turn");
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    // The agent that loaded B's conversation answered it as its second turn.
    assert_eq!(markdown(turn), "Reply: wake up, B (turn 2)");
    // The woken agent (started with session/load) has the host's server too,
    // under a fresh secret of its chat.
    prompt(&c, &chat_b, &mut state_b, &mut sub_b, "b2", "/tool list_peers").await;
    let reply = last_reply(&state_b);
    assert!(reply.starts_with("tool list_peers ok:"), "{reply}");
    let log = daemon.log_text();
    let loaded = log.lines().filter(|l| l.contains("acp: agent session open") && l.contains("resumed=true") && l.contains("host_tools=true"));
    assert!(loaded.count() >= 1, "{log}");
    c.shutdown().await;
}
