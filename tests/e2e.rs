//! End-to-end tests: the real `ahpd` binary on a loopback port, driven by the
//! official `ahp` client over `ahp-ws` (and, for malformed input, a raw
//! WebSocket). Each test asserts what a user of the protocol observes.
//!
//! Every await is bounded by [`STEP`], so a shape error (which the client
//! shows as a silently dropped notification) fails fast as a timeout naming
//! the step instead of hanging.

mod common;

use common::*;

use ahp::ahp_types::actions::{
    ActionOrigin, ChatToolCallConfirmedAction, ChatTurnCancelledAction,
    StateAction,
};
use ahp::ahp_types::commands::DisposeSessionParams;
use ahp::ahp_types::state::{
    ResponsePart, SessionLifecycle,
    SnapshotState, ToolCallState, TurnState,
};
use ahp::ahp_types::ROOT_RESOURCE_URI;
use ahp::SubscriptionEvent;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message as WsMessage;

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

/// A session from creation through a turn, a daemon crash and restart, to
/// disposal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_session_flow_survives_restart() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut daemon = Daemon::start(&data);

    let (c, init, mut root) = connect_init(&daemon.url, "e2e-1").await;
    assert_eq!(init.protocol_version, "1.0.0");
    match init.snapshots.first().map(|s| &s.state) {
        Some(SnapshotState::Root(r)) => assert!(r.agents.iter().any(|a| a.provider == "echo"), "{r:?}"),
        other => panic!("expected a root snapshot, got {other:?}"),
    }

    // Create, and the same URI again is refused.
    let sid = format!("ahp-session:/{}", fresh_id());
    assert_eq!(create(&c, &sid).await.expect("createSession"), Value::Null);
    assert_eq!(rpc_error(create(&c, &sid).await).code, -32003);

    // Provisional: not listed, lifecycle creating.
    assert!(!list(&c).await.iter().any(|s| s.resource == sid), "a provisional session must not be listed");
    let (s, mut ssub) = subscribe_session(&c, &sid).await;
    assert_eq!(s.lifecycle, SessionLifecycle::Creating);
    let chat = default_chat(&s);
    let (mut chat_state, mut csub) = subscribe_chat(&c, &chat).await;
    assert!(chat_state.turns.is_empty());

    // First message: announced, ready, and answered.
    let h = within("dispatch", c.dispatch(chat.clone(), user_turn("t1", "hello"))).await.expect("dispatch");
    let added = wait_for(&mut root, "root/sessionAdded", |e| match e {
        SubscriptionEvent::SessionAdded(p) if p.summary.resource == sid => Some(p),
        _ => None,
    })
    .await;
    assert_eq!(added.summary.provider, "echo");
    wait_for(&mut ssub, "session/ready", |e| match e {
        SubscriptionEvent::Action(env) if matches!(env.action, StateAction::SessionReady(_)) => Some(()),
        _ => None,
    })
    .await;
    let seen = follow_chat(&mut csub, &mut chat_state, "the echo turn", |env, _| is_turn_complete(env)).await;
    let first = seen.first().expect("an echo");
    assert!(matches!(first.action, StateAction::ChatTurnStarted(_)), "first is the echo of our turn: {first:?}");
    assert_eq!(first.origin, Some(ActionOrigin { client_id: "e2e-1".to_owned(), client_seq: h.client_seq }));
    assert_eq!(chat_state.turns.len(), 1);
    assert!(markdown(&chat_state.turns[0]).contains("Echo: hello"), "{:?}", chat_state.turns[0]);
    assert_eq!(chat_state.turns[0].state, TurnState::Complete);
    assert_eq!(chat_state.status & ACTIVITY, 1, "chat idle after the turn");

    // Listed now, idle, with an ISO modifiedAt.
    let row = list(&c).await.into_iter().find(|s| s.resource == sid).expect("listed after its first turn");
    assert!(looks_iso(&row.modified_at), "{}", row.modified_at);
    assert_eq!(row.status & 1, 1, "Idle bit: {}", row.status);
    c.shutdown().await;

    // Crash and restart on the same data dir: the session is still there,
    // and its turn comes back from the agent's transcript.
    daemon.kill();
    let daemon = Daemon::start(&data);
    // A client that names the session and its chat in its handshake is
    // answered with both, the session woken from the agent's transcript.
    let early = connect(&daemon.url).await;
    let named = vec![ROOT_RESOURCE_URI.to_owned(), sid.clone(), chat.clone()];
    let init = within("initialize naming a session", early.initialize("e2e-1-early".to_owned(), vec!["1.0.0".to_owned()], named.clone()))
        .await
        .expect("initialize");
    let shown: Vec<String> = init.snapshots.iter().map(|s| s.resource.clone()).collect();
    assert_eq!(shown, named, "a snapshot of every channel named");
    match &init.snapshots[2].state {
        SnapshotState::Chat(ch) => assert!(ch.turns.iter().any(|t| markdown(t).contains("Echo: hello")), "{:?}", ch.turns),
        other => panic!("expected the chat's snapshot, got {other:?}"),
    }
    early.shutdown().await;
    let (c, _, mut root) = connect_init(&daemon.url, "e2e-1b").await;
    assert!(list(&c).await.iter().any(|s| s.resource == sid), "listed after restart");
    let (chat_state, _csub) = subscribe_chat(&c, &chat).await;
    assert!(
        chat_state.turns.iter().any(|t| markdown(t).contains("Echo: hello")),
        "the turn survives a restart: {:?}",
        chat_state.turns
    );

    // Dispose: removed from the root and the list.
    let params = DisposeSessionParams { channel: sid.clone(), meta: None };
    let r: Value = within("disposeSession", c.request("disposeSession", params)).await.expect("disposeSession");
    assert_eq!(r, Value::Null);
    wait_for(&mut root, "root/sessionRemoved", |e| match e {
        SubscriptionEvent::SessionRemoved(p) if p.session == sid => Some(()),
        _ => None,
    })
    .await;
    assert!(!list(&c).await.iter().any(|s| s.resource == sid), "gone after dispose");
    within("ping", c.ping()).await.expect("ping");
    c.shutdown().await;
}

/// Sends one raw frame and returns the next text frame as JSON.
async fn raw_call<S>(ws: &mut S, text: &str) -> Value
where
    S: futures_util::Sink<WsMessage> + futures_util::Stream<Item = Result<WsMessage, tokio_tungstenite::tungstenite::Error>> + Unpin,
    <S as futures_util::Sink<WsMessage>>::Error: std::fmt::Debug,
{
    within("raw send", ws.send(WsMessage::Text(text.to_owned().into()))).await.expect("raw send");
    raw_next(ws).await
}

async fn raw_next<S>(ws: &mut S) -> Value
where
    S: futures_util::Stream<Item = Result<WsMessage, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    within("raw reply", async {
        loop {
            match ws.next().await {
                Some(Ok(WsMessage::Text(t))) => return serde_json::from_str::<Value>(t.as_str()).expect("reply is JSON"),
                Some(Ok(_)) => continue,
                other => panic!("socket ended: {other:?}"),
            }
        }
    })
    .await
}

/// Malformed and refused input gets the right JSON-RPC errors, and never
/// takes the daemon (or another client) down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_errors_and_the_daemon_lives() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(&tmp.path().join("data"));
    let (mut ws, _) = within("raw connect", tokio_tungstenite::connect_async(daemon.url.as_str())).await.expect("raw connect");

    let r = raw_call(&mut ws, "{").await;
    assert_eq!(r["error"]["code"], -32700, "{r}");
    assert!(r["id"].is_null(), "{r}");

    // A binary frame that is not UTF-8 is ignored, not fatal.
    within("binary send", ws.send(WsMessage::Binary(vec![0xff, 0xfe, 0x00].into()))).await.expect("binary send");

    let r = raw_call(&mut ws, r#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"channel":"ahp-root://"}}"#).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(r["id"], 2);

    let init = json!({"jsonrpc":"2.0","id":3,"method":"initialize","params":{
        "channel":"ahp-root://","protocolVersions":["1.0.0"],"clientId":"raw-1"}});
    let r = raw_call(&mut ws, &init.to_string()).await;
    assert_eq!(r["result"]["protocolVersion"], "1.0.0", "{r}");

    let r = raw_call(&mut ws, r#"{"jsonrpc":"2.0","id":1,"method":"nope","params":{}}"#).await;
    assert_eq!(r["error"]["code"], -32601, "{r}");
    assert_eq!(r["id"], 1);

    let sub = json!({"jsonrpc":"2.0","id":4,"method":"subscribe","params":{"channel":"ahp-session:/does-not-exist"}});
    let r = raw_call(&mut ws, &sub.to_string()).await;
    assert_eq!(r["error"]["code"], -32001, "{r}");

    let create = json!({"jsonrpc":"2.0","id":5,"method":"createSession","params":{"channel":"ahp-session:/../x","provider":"echo"}});
    let r = raw_call(&mut ws, &create.to_string()).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");

    // An unsupported protocol version, through the real client.
    let old = connect(&daemon.url).await;
    let e = rpc_error(within("initialize 0.1.0", old.initialize("e2e-old".to_owned(), vec!["0.1.0".to_owned()], vec![])).await);
    assert_eq!(e.code, -32005, "{e:?}");
    let supported = e.data.as_ref().and_then(|d| d.get("supportedVersions")).and_then(Value::as_array).expect("data.supportedVersions");
    assert!(supported.iter().any(|v| v == "1.0.0"), "{supported:?}");

    // The first socket still answers, and a new client works.
    let r = raw_call(&mut ws, r#"{"jsonrpc":"2.0","id":6,"method":"ping","params":{"channel":"ahp-root://"}}"#).await;
    assert!(r["result"].is_null() && r.get("result").is_some(), "{r}");
    let (c, _, _) = connect_init(&daemon.url, "e2e-2").await;
    within("ping", c.ping()).await.expect("ping after bad input");
    c.shutdown().await;
}

/// A first message the agent refuses fails the creation; sending again
/// succeeds and the session becomes ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_first_message_fails_creation_then_retry_succeeds() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(&tmp.path().join("data"));
    let (c, _, mut root) = connect_init(&daemon.url, "e2e-3").await;
    let (sid, chat, mut ssub, mut chat_state, mut csub) = new_session(&c).await;

    within("dispatch", c.dispatch(chat.clone(), user_turn("t1", "/fail"))).await.expect("dispatch");
    follow_chat(&mut csub, &mut chat_state, "chat/error", |env, _| matches!(env.action, StateAction::ChatError(_))).await;
    assert_eq!(chat_state.turns.last().map(|t| t.state), Some(TurnState::Error));
    assert_eq!(chat_state.status & ACTIVITY, 2, "chat in error");
    let failed = wait_for(&mut ssub, "session/creationFailed", |e| match e {
        SubscriptionEvent::Action(env) => match env.action {
            StateAction::SessionCreationFailed(a) => Some(a),
            StateAction::SessionReady(_) => panic!("session/ready before the creation failed"),
            _ => None,
        },
        _ => None,
    })
    .await;
    assert!(failed.error.message.contains("echo: asked to fail"), "{failed:?}");
    wait_for(&mut root, "root/sessionAdded", |e| match e {
        SubscriptionEvent::SessionAdded(p) if p.summary.resource == sid => Some(()),
        _ => None,
    })
    .await;

    within("dispatch retry", c.dispatch(chat.clone(), user_turn("t2", "hello"))).await.expect("dispatch");
    wait_for(&mut ssub, "session/ready after retry", |e| match e {
        SubscriptionEvent::Action(env) if matches!(env.action, StateAction::SessionReady(_)) => Some(()),
        _ => None,
    })
    .await;
    follow_chat(&mut csub, &mut chat_state, "retry turn", |env, _| is_turn_complete(env)).await;
    let last = chat_state.turns.last().expect("a turn");
    assert_eq!(last.id, "t2");
    assert!(markdown(last).contains("Echo: hello"), "{last:?}");
    assert_eq!(chat_state.status & ACTIVITY, 1);
    c.shutdown().await;
}

/// A tool call waits for approval (InputNeeded); approving it lets the turn
/// complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_call_waits_for_approval_then_completes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(&tmp.path().join("data"));
    let (c, _, _root) = connect_init(&daemon.url, "e2e-4").await;
    let (_sid, chat, _ssub, mut chat_state, mut csub) = new_session(&c).await;

    within("dispatch", c.dispatch(chat.clone(), user_turn("t1", "/approve"))).await.expect("dispatch");
    follow_chat(&mut csub, &mut chat_state, "tool call awaiting confirmation", |_, state| state.status & ACTIVITY == 24).await;
    let pending = pending_confirmation(&chat_state).expect("a tool call pending confirmation");
    assert_eq!(pending.tool_name, "echo_tool");

    let confirm = confirm_tool("t1", &pending.tool_call_id, true);
    within("dispatch confirm", c.dispatch(chat.clone(), confirm)).await.expect("dispatch confirm");
    follow_chat(&mut csub, &mut chat_state, "approved turn", |env, _| is_turn_complete(env)).await;
    let turn = chat_state.turns.last().expect("a turn");
    assert_eq!(turn.state, TurnState::Complete);
    let tool_done = turn.response_parts.iter().any(|p| {
        matches!(p, ResponsePart::ToolCall(tc) if matches!(&tc.tool_call, ToolCallState::Completed(_)))
    });
    assert!(tool_done, "the tool call completed: {turn:?}");
    assert!(markdown(turn).contains("Echo: /approve"), "{turn:?}");
    assert_eq!(chat_state.status & ACTIVITY, 1);

    // Denied: the tool call is cancelled and the agent says so.
    within("dispatch", c.dispatch(chat.clone(), user_turn("t2", "/approve"))).await.expect("dispatch");
    follow_chat(&mut csub, &mut chat_state, "second tool call", |_, state| state.status & ACTIVITY == 24).await;
    let deny = StateAction::ChatToolCallConfirmed(ChatToolCallConfirmedAction {
        turn_id: "t2".to_owned(),
        tool_call_id: "t2.tool".to_owned(),
        meta: None,
        approved: false,
        confirmed: None,
        reason: None,
        edited_tool_input: None,
        user_suggestion: None,
        reason_message: None,
        selected_option_id: None,
    });
    within("dispatch deny", c.dispatch(chat.clone(), deny)).await.expect("dispatch deny");
    follow_chat(&mut csub, &mut chat_state, "denied turn", |env, _| is_turn_complete(env)).await;
    let turn = chat_state.turns.last().expect("a turn");
    let cancelled = turn.response_parts.iter().any(|p| {
        matches!(p, ResponsePart::ToolCall(tc) if matches!(&tc.tool_call, ToolCallState::Cancelled(_)))
    });
    assert!(cancelled, "the denied tool call is cancelled: {turn:?}");
    assert!(markdown(turn).contains("Echo: tool denied"), "{turn:?}");
    c.shutdown().await;
}

/// An agent that exits mid-turn fails that turn; the next message wakes the
/// session (the agent resumes its conversation) and is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_crash_fails_the_turn_and_the_next_message_resumes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(&tmp.path().join("data"));
    let (c, _, _root) = connect_init(&daemon.url, "e2e-5").await;
    let (_sid, chat, _ssub, mut chat_state, mut csub) = new_session(&c).await;

    within("dispatch", c.dispatch(chat.clone(), user_turn("t1", "hello"))).await.expect("dispatch");
    follow_chat(&mut csub, &mut chat_state, "first turn", |env, _| is_turn_complete(env)).await;

    within("dispatch crash", c.dispatch(chat.clone(), user_turn("t2", "/crash"))).await.expect("dispatch");
    let seen = follow_chat(&mut csub, &mut chat_state, "crashed turn", |env, _| matches!(env.action, StateAction::ChatError(_))).await;
    match &seen.last().map(|e| &e.action) {
        Some(StateAction::ChatError(e)) => assert!(e.part.error.message.contains("echo: asked to crash"), "{e:?}"),
        other => panic!("expected chat/error, got {other:?}"),
    }
    assert_eq!(chat_state.status & ACTIVITY, 2);

    within("dispatch after crash", c.dispatch(chat.clone(), user_turn("t3", "again"))).await.expect("dispatch");
    follow_chat(&mut csub, &mut chat_state, "turn after crash", |env, _| is_turn_complete(env)).await;
    let states: Vec<TurnState> = chat_state.turns.iter().map(|t| t.state).collect();
    assert_eq!(states, vec![TurnState::Complete, TurnState::Error, TurnState::Complete]);
    assert!(markdown(&chat_state.turns[2]).contains("Echo: again"));
    c.shutdown().await;
}

/// A long turn can be cancelled; the chat is idle again and takes the next
/// message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_turn_can_be_cancelled() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(&tmp.path().join("data"));
    let (c, _, _root) = connect_init(&daemon.url, "e2e-6").await;
    let (_sid, chat, _ssub, mut chat_state, mut csub) = new_session(&c).await;

    within("dispatch", c.dispatch(chat.clone(), user_turn("t1", "/slow 60000"))).await.expect("dispatch");
    follow_chat(&mut csub, &mut chat_state, "the slow turn starts streaming", |env, _| {
        matches!(env.action, StateAction::ChatResponsePart(_))
    })
    .await;
    assert_eq!(chat_state.status & ACTIVITY, 8, "in progress");
    let cancel = StateAction::ChatTurnCancelled(ChatTurnCancelledAction { turn_id: "t1".to_owned(), duration: 0, meta: None });
    within("dispatch cancel", c.dispatch(chat.clone(), cancel)).await.expect("dispatch cancel");
    follow_chat(&mut csub, &mut chat_state, "cancel echo", |env, _| matches!(env.action, StateAction::ChatTurnCancelled(_))).await;
    assert_eq!(chat_state.turns.last().map(|t| t.state), Some(TurnState::Cancelled));
    assert_eq!(chat_state.status & ACTIVITY, 1);

    within("dispatch next", c.dispatch(chat.clone(), user_turn("t2", "next"))).await.expect("dispatch");
    follow_chat(&mut csub, &mut chat_state, "next turn", |env, _| is_turn_complete(env)).await;
    assert!(markdown(chat_state.turns.last().expect("a turn")).contains("Echo: next"));
    c.shutdown().await;
}

/// SIGTERM stops the daemon with status 0 after its writes are on disk: a
/// restart lists the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_cleanly_and_keeps_sessions() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut daemon = Daemon::start(&data);
    let (c, _, _root) = connect_init(&daemon.url, "e2e-7").await;
    let (sid, chat, _ssub, mut chat_state, mut csub) = new_session(&c).await;
    within("dispatch", c.dispatch(chat.clone(), user_turn("t1", "hello"))).await.expect("dispatch");
    follow_chat(&mut csub, &mut chat_state, "turn", |env, _| is_turn_complete(env)).await;

    let status = daemon.terminate();
    assert!(status.success(), "exit status {status:?}");
    let daemon = Daemon::start(&data);
    let (c, _, _root) = connect_init(&daemon.url, "e2e-7b").await;
    let row = list(&c).await.into_iter().find(|s| s.resource == sid).expect("listed after a clean restart");
    assert_eq!(row.title, "hello", "the title taken from the first message is kept");
    c.shutdown().await;
}

/// Turns that end in an error, a refused one (`/fail`) and one the agent
/// died in (`/crash`), stay in the chat's history: after a restart the chat
/// holds every turn with how it ended, as its row's status says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_turns_stay_in_the_history_across_a_restart() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).expect("mkdir work");
    let mut daemon = Daemon::start(&data);
    let (c, _, _root) = connect_init(&daemon.url, "e2e-failed").await;
    let (sid, chat, _ssub, mut state, mut csub) = session_on(&c, "echo", &work).await;
    prompt(&c, &chat, &mut state, &mut csub, "t1", "hello").await;
    prompt(&c, &chat, &mut state, &mut csub, "t2", "/fail").await;
    assert!(!last_error(&state).is_empty(), "the refused turn ends in an error: {:?}", state.turns.last());
    prompt(&c, &chat, &mut state, &mut csub, "t3", "/crash").await;
    assert!(!last_error(&state).is_empty(), "the turn the agent died in ends in an error: {:?}", state.turns.last());
    let before: Vec<(String, TurnState)> = state.turns.iter().map(|t| (t.message.text.clone(), t.state.clone())).collect();
    assert_eq!(before.len(), 3, "{before:?}");
    c.shutdown().await;

    daemon.kill();
    let daemon = Daemon::start(&data);
    let (c, _, _root) = connect_init(&daemon.url, "e2e-failed-b").await;
    let (after, _csub) = subscribe_chat(&c, &chat).await;
    let after: Vec<(String, TurnState)> = after.turns.iter().map(|t| (t.message.text.clone(), t.state.clone())).collect();
    assert_eq!(
        after,
        [("hello".to_owned(), TurnState::Complete), ("/fail".to_owned(), TurnState::Error), ("/crash".to_owned(), TurnState::Error)],
        "every turn is back with how it ended (before the restart: {before:?})"
    );
    let row = list(&c).await.into_iter().find(|s| s.resource == sid).expect("listed");
    assert_eq!(row.status & 2, 2, "the row still says the last turn failed: {}", row.status);
}
