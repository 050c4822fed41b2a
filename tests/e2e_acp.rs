//! ACP backends end to end (issue 8): the real daemon drives
//! `acp_test_agent` (tests/acp_agent, built on the agent side of the
//! `agent-client-protocol` crate) over stdio, observed through the official
//! AHP client: a streamed reply, a permission asked and answered, a cancel,
//! file writes confined to the working directory, a sleep and a wake that
//! loads the conversation, a restart that loads it again, and agent faults
//! (exit mid-turn, an `initialize` that never answers, garbage and a 10 MB
//! line on stdout), each while a healthy session keeps working.

mod common;

use common::*;

use std::time::Duration;

use ahp::ahp_types::actions::{ChatTurnCancelledAction, StateAction};
use ahp::ahp_types::state::{ChatState, ResponsePart, SnapshotState, ToolCallState, TurnState};
use ahp::{Client, SessionSubscription};
use serde_json::Value;

const AGENT: &str = env!("CARGO_BIN_EXE_acp_test_agent");

/// `NAME=<agent> args...` for `--agent`.
fn agent_flag(name: &str, args: &str) -> String {
    format!("{name}={AGENT} {args}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_streams_a_permission_is_answered_and_a_cancel_stops_the_turn() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).expect("mkdir work");
    let store = tmp.path().join("agent-store");
    let good = agent_flag("good", &format!("--store {}", store.display()));
    let daemon = Daemon::start_with(&data, &["--agent", &good]);
    let (c, init, _root) = connect_init(&daemon.url, "acp-1").await;
    match init.snapshots.first().map(|s| &s.state) {
        Some(SnapshotState::Root(r)) => {
            let providers: Vec<&str> = r.agents.iter().map(|a| a.provider.as_str()).collect();
            assert_eq!(providers, ["echo", "good"], "the root state lists the configured agent");
        }
        other => panic!("expected a root snapshot, got {other:?}"),
    }
    let nobody = format!("ahp-session:/{}", fresh_id());
    assert_eq!(rpc_error(create_on(&c, &nobody, "nobody", &work).await).code, -32002, "unknown provider");

    let (_sid, chat, _ssub, mut state, mut sub) = session_on(&c, "good", &work).await;

    // A prompt: a thought, a plan, then the reply streamed in chunks.
    let seen = prompt(&c, &chat, &mut state, &mut sub, "t1", "hello there").await;
    let turn = state.turns.last().expect("a turn");
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    assert_eq!(markdown(turn), "Reply: hello there (turn 1)");
    assert!(seen.iter().filter(|e| matches!(e.action, StateAction::ChatDelta(_))).count() >= 2, "the reply streamed");
    assert!(turn.response_parts.iter().any(|p| matches!(p, ResponsePart::Reasoning(r) if r.content == "Thinking it over.")));
    assert!(turn.response_parts.iter().any(|p| matches!(p, ResponsePart::SystemNotification(_))), "the plan is shown");

    // A permission: the tool call waits for the client, approved it runs
    // and writes a file through the host, inside the working directory.
    within("dispatch", c.dispatch(chat.clone(), user_turn("t2", "ask permission please"))).await.expect("dispatch");
    follow_chat(&mut sub, &mut state, "permission asked", |_, s| s.status & ACTIVITY == 24).await;
    let pending = pending_confirmation(&state).expect("a tool call pending confirmation");
    assert_eq!(pending.display_name, "Write note.txt");
    let confirm = confirm_tool("t2", &pending.tool_call_id, true);
    within("dispatch confirm", c.dispatch(chat.clone(), confirm)).await.expect("dispatch confirm");
    follow_chat(&mut sub, &mut state, "permission turn", |env, _| ends_turn(env)).await;
    let turn = state.turns.last().expect("a turn");
    assert_eq!(turn.state, TurnState::Complete);
    assert!(markdown(turn).contains("permission granted"), "{turn:?}");
    let completed = turn.response_parts.iter().any(|p| matches!(p, ResponsePart::ToolCall(tc) if matches!(&tc.tool_call, ToolCallState::Completed(_))));
    assert!(completed, "the tool call completed: {turn:?}");
    assert_eq!(std::fs::read_to_string(work.join("note.txt")).expect("note.txt written"), "written by acp_test_agent\n");
    assert!(daemon.log_text().contains("acp.fs.write"), "the write is recorded");

    // A write outside the working directory is refused.
    prompt(&c, &chat, &mut state, &mut sub, "t3", "write outside").await;
    assert!(markdown(state.turns.last().expect("a turn")).contains("outside write refused"), "{:?}", state.turns.last());
    assert!(!tmp.path().join("outside.txt").exists());

    // A cancel stops a long turn; the agent takes the next one.
    within("dispatch", c.dispatch(chat.clone(), user_turn("t4", "slow please"))).await.expect("dispatch");
    follow_chat(&mut sub, &mut state, "slow turn streams", |env, _| matches!(env.action, StateAction::ChatDelta(_))).await;
    let cancel = StateAction::ChatTurnCancelled(ChatTurnCancelledAction { turn_id: "t4".to_owned(), duration: 0, meta: None });
    within("dispatch cancel", c.dispatch(chat.clone(), cancel)).await.expect("dispatch cancel");
    follow_chat(&mut sub, &mut state, "cancelled", |env, _| matches!(env.action, StateAction::ChatTurnCancelled(_))).await;
    assert_eq!(state.turns.last().map(|t| t.state), Some(TurnState::Cancelled));
    prompt(&c, &chat, &mut state, &mut sub, "t5", "after the cancel").await;
    let turn = state.turns.last().expect("a turn");
    assert_eq!(turn.state, TurnState::Complete);
    assert!(markdown(turn).starts_with("Reply: after the cancel"), "{turn:?}");
    // The agent finished the cancelled turn as cancelled: nothing of it
    // leaked into the next one.
    assert!(!markdown(turn).contains("tick"), "{turn:?}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleeping_session_wakes_by_loading_its_conversation_and_so_does_a_restart() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).expect("mkdir work");
    let store = tmp.path().join("agent-store");
    let good = agent_flag("good", &format!("--store {}", store.display()));
    let args = ["--agent", good.as_str(), "--sleep-after-minutes", "0.02"];
    let mut daemon = Daemon::start_with(&data, &args);
    let (c, _, _root) = connect_init(&daemon.url, "acp-2").await;
    let (sid, chat, _ssub, mut state, mut sub) = session_on(&c, "good", &work).await;
    prompt(&c, &chat, &mut state, &mut sub, "t1", "remember the walrus").await;
    assert_eq!(markdown(state.turns.last().expect("turn")), "Reply: remember the walrus (turn 1)");
    unwatch(&c, &sid, &chat).await;
    drop((sub, _ssub));

    // It sleeps: its agent process is let go.
    until_logged(&daemon, "sleep", "session.slept", &sid).await;
    // A prompt wakes it; the new agent process loaded the conversation (it
    // counts this as the second turn).
    let (mut state, mut sub) = subscribe_chat(&c, &chat).await;
    prompt(&c, &chat, &mut state, &mut sub, "t2", "and now").await;
    assert_eq!(markdown(state.turns.last().expect("turn")), "Reply: and now (turn 2)");
    let log = daemon.log_text();
    assert!(count(&log, "session.woke", &sid) >= 1, "woke");
    assert!(count(&log, "acp: agent session open", "resumed=true") >= 1, "the wake was a session/load:\n{log}");
    c.shutdown().await;

    // A restart: the session comes back from the store and its agent loads
    // the conversation; the earlier turns are rebuilt from the agent's replay.
    daemon.terminate();
    drop(daemon);
    let daemon = Daemon::start_with(&data, &args);
    let (c, _, _root) = connect_init(&daemon.url, "acp-3").await;
    let (mut state, mut sub) = subscribe_chat(&c, &chat).await;
    let texts = turn_texts(&state);
    assert_eq!(
        texts,
        [
            ("remember the walrus".to_owned(), "Reply: remember the walrus (turn 1)".to_owned()),
            ("and now".to_owned(), "Reply: and now (turn 2)".to_owned())
        ],
        "the conversation came back from the agent"
    );
    prompt(&c, &chat, &mut state, &mut sub, "t3", "third").await;
    assert_eq!(markdown(state.turns.last().expect("turn")), "Reply: third (turn 3)");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_faults_end_their_chat_with_the_agents_stderr_and_other_sessions_keep_working() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).expect("mkdir work");
    let store = tmp.path().join("agent-store");
    // The hanging agent comes from the config file (with a short start-up
    // timeout); the others from flags.
    let config = tmp.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[agents.hang]\ncommand = {:?}\nargs = [\"--fault\", \"hang-initialize\"]\ndisplay_name = \"Hangs\"\nstartup_timeout_seconds = 1\n",
            AGENT
        ),
    )
    .expect("write config");
    let good = agent_flag("good", &format!("--store {}", store.display()));
    let exits = agent_flag("exits", "--fault exit-mid-turn");
    let garbage = agent_flag("garbage", "--fault garbage");
    let flood = agent_flag("flood", "--fault flood");
    let daemon = Daemon::start_with(
        &data,
        &["--config", config.to_str().expect("utf-8"), "--agent", &good, "--agent", &exits, "--agent", &garbage, "--agent", &flood],
    );
    let (c, _, _root) = connect_init(&daemon.url, "acp-4").await;
    let (_hsid, hchat, _hssub, mut healthy, mut hsub) = session_on(&c, "good", &work).await;
    prompt(&c, &hchat, &mut healthy, &mut hsub, "h0", "first").await;
    assert_eq!(healthy.turns.last().map(|t| t.state), Some(TurnState::Complete));

    let cases = [
        ("exits", "exiting mid-turn as asked", "exit status: 3"),
        ("garbage", "printing garbage as asked", "not JSON"),
        ("flood", "flooding a 10 MB line as asked", "longer than"),
    ];
    for (i, (provider, stderr, why)) in cases.into_iter().enumerate() {
        let (_sid, chat, _ssub, mut state, mut sub) = session_on(&c, provider, &work).await;
        prompt(&c, &chat, &mut state, &mut sub, "t1", "go").await;
        let turn = state.turns.last().expect("a turn");
        assert_eq!(turn.state, TurnState::Error, "{provider}: {turn:?}");
        let message = last_error(&state);
        assert!(message.contains(stderr), "{provider}: the error carries the agent's stderr: {message}");
        assert!(message.contains(why), "{provider}: the error says why ({why}): {message}");
        // The healthy session, live all along, keeps working.
        let turn_id = format!("h{}", i + 1);
        prompt(&c, &hchat, &mut healthy, &mut hsub, &turn_id, "still here").await;
        let turn = healthy.turns.last().expect("a turn");
        assert_eq!(turn.state, TurnState::Complete, "after {provider}: {turn:?}");
        assert!(markdown(turn).starts_with("Reply: still here"), "{turn:?}");
    }

    // An agent that never answers `initialize`: the creation fails after
    // its start-up timeout, with its stderr.
    let sid = format!("ahp-session:/{}", fresh_id());
    let e = rpc_error(create_on(&c, &sid, "hang", &work).await);
    assert_eq!(e.code, -32603);
    assert!(e.message.contains("initialize within 1000 ms"), "{}", e.message);
    assert!(e.message.contains("not answering initialize as asked"), "{}", e.message);
    prompt(&c, &hchat, &mut healthy, &mut hsub, "h9", "still here").await;
    assert_eq!(healthy.turns.last().map(|t| t.state), Some(TurnState::Complete));
    c.shutdown().await;
}

/// Whether process `pid` is still running (a zombie waiting to be reaped is
/// not).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Has the agent start `sleep 1000` and returns that child's pid.
async fn spawn_child(c: &Client, chat: &str, state: &mut ChatState, sub: &mut SessionSubscription, turn_id: &str) -> u32 {
    prompt(c, chat, state, sub, turn_id, "spawn-child please").await;
    let reply = markdown(state.turns.last().expect("a turn"));
    let pid: u32 = reply.strip_prefix("child pid ").and_then(|p| p.trim().parse().ok()).unwrap_or_else(|| panic!("no child pid in {reply:?}"));
    assert!(running(pid), "the agent's child {pid} runs");
    pid
}

async fn until_gone(pid: u32, what: &str) {
    within(what, async {
        while running(pid) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_an_agent_started_goes_with_its_chat_on_dispose_sleep_and_shutdown() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).expect("mkdir work");
    let store = tmp.path().join("agent-store");
    let good = agent_flag("good", &format!("--store {}", store.display()));
    let mut daemon = Daemon::start_with(&data, &["--agent", &good, "--sleep-after-minutes", "0.02"]);
    let (c, _, _root) = connect_init(&daemon.url, "acp-5").await;

    // Disposed: the agent and its child go.
    let (sid, chat, _ssub, mut state, mut sub) = session_on(&c, "good", &work).await;
    let pid = spawn_child(&c, &chat, &mut state, &mut sub, "t1").await;
    let params = ahp::ahp_types::commands::DisposeSessionParams { channel: sid.clone(), meta: None };
    let _: Value = within("disposeSession", c.request("disposeSession", params)).await.expect("disposeSession");
    until_gone(pid, "the child of a disposed session's agent goes").await;

    // Asleep: the same.
    let (sid, chat, ssub, mut state, mut sub) = session_on(&c, "good", &work).await;
    let pid = spawn_child(&c, &chat, &mut state, &mut sub, "t1").await;
    unwatch(&c, &sid, &chat).await;
    drop((sub, ssub));
    until_logged(&daemon, "sleep", "session.slept", &sid).await;
    until_gone(pid, "the child of a sleeping session's agent goes").await;

    // The daemon shuts down: the same.
    let (_sid, chat, _ssub, mut state, mut sub) = session_on(&c, "good", &work).await;
    let pid = spawn_child(&c, &chat, &mut state, &mut sub, "t1").await;
    c.shutdown().await;
    assert!(daemon.terminate().success(), "ahpd exits cleanly");
    until_gone(pid, "the child of a live session's agent goes at shutdown").await;
}

/// Has the agent open a terminal that runs until `go` appears in the
/// working directory; the terminal's shell pid.
async fn open_terminal(c: &Client, chat: &str, state: &mut ChatState, sub: &mut SessionSubscription, turn_id: &str) -> u32 {
    prompt(c, chat, state, sub, turn_id, "open a terminal please").await;
    let reply = markdown(state.turns.last().expect("a turn"));
    assert_eq!(state.turns.last().map(|t| t.state), Some(TurnState::Complete), "{reply}");
    let pid: u32 = reply.rsplit_once("pid ").and_then(|(_, p)| p.trim().parse().ok()).unwrap_or_else(|| panic!("no terminal pid in {reply:?}"));
    assert!(running(pid), "the terminal {pid} runs");
    pid
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_terminal_keeps_its_session_awake_and_goes_with_its_chat() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).expect("mkdir work");
    let store = tmp.path().join("agent-store");
    let good = agent_flag("good", &format!("--store {}", store.display()));
    // Sessions sleep after 1.2 s of quiet.
    let daemon = Daemon::start_with(&data, &["--agent", &good, "--sleep-after-minutes", "0.02"]);
    let (c, _, _root) = connect_init(&daemon.url, "acp-6").await;

    // A terminal in the working directory, left running after the turn.
    let (sid, chat, ssub, mut state, mut sub) = session_on(&c, "good", &work).await;
    let pid = open_terminal(&c, &chat, &mut state, &mut sub, "t1").await;
    assert!(daemon.log_text().contains("acp.terminal.started"));
    unwatch(&c, &sid, &chat).await;
    drop((sub, ssub));
    // Unwatched and quiet for well over the sleep delay, the session stays
    // awake: its terminal is background work.
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    assert_eq!(count(&daemon.log_text(), "session.slept", &sid), 0, "no sleep while a terminal runs");
    assert!(running(pid));
    // The terminal ends; then the session sleeps.
    std::fs::write(work.join("go"), b"").expect("write go");
    until_gone(pid, "the terminal ends").await;
    until_logged(&daemon, "sleep after the terminal", "session.slept", &sid).await;
    let log = daemon.log_text();
    let exited = log.find("acp.terminal.exited").expect("the terminal's exit is logged");
    let slept = log.find("session.slept").expect("slept");
    assert!(exited < slept, "it slept only after the terminal exited:\n{log}");
    std::fs::remove_file(work.join("go")).expect("rm go");

    // A terminal still running when its session is disposed is killed.
    let (sid, chat, _ssub, mut state, mut sub) = session_on(&c, "good", &work).await;
    let pid = open_terminal(&c, &chat, &mut state, &mut sub, "t1").await;
    let params = ahp::ahp_types::commands::DisposeSessionParams { channel: sid.clone(), meta: None };
    let _: Value = within("disposeSession", c.request("disposeSession", params)).await.expect("disposeSession");
    until_gone(pid, "the terminal of a disposed session goes").await;
    c.shutdown().await;
}

/// A chat's life on an ACP agent (issue 23; docs/USER-GUIDE.md, "Every
/// chat-life flow by agent"): what it supports works, what it cannot do is
/// refused with its reason and changes nothing. Three messages queued
/// during a turn, reordered, one removed, and a steering message (held: ACP
/// cannot add to a prompt in flight) run after the turn is cancelled, the
/// steering one first, then the queue in its order, each once; a rewind, a
/// resume, a fork, a side chat and a move to another session are refused;
/// a second chat is made and reordered within the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_chat_queues_and_steers_and_refuses_what_acp_cannot_do() {
    use ahp::ahp_types::actions::{
        ChatPendingMessageRemovedAction, ChatPendingMessageSetAction, ChatQueuedMessagesReorderedAction, ChatTruncatedAction, ChatTurnResumeAction,
    };
    use ahp::ahp_types::commands::{ChatMoveDestination, ChatMoveToSessionDestination, ChatSource, CreateChatParams, ForkChatSource, MoveChatParams, MoveChatResult, SideChatSource};
    use ahp::ahp_types::state::{Message, MessageKind, MessageOrigin, PendingMessageKind};
    use ahp::SubscriptionEvent;

    let message = |text: &str| Message { text: text.to_owned(), origin: MessageOrigin { kind: MessageKind::User }, attachments: None, model: None, agent: None, meta: None };
    let pending = |kind: PendingMessageKind, id: &str, text: &str| StateAction::ChatPendingMessageSet(ChatPendingMessageSetAction { kind, id: id.to_owned(), message: message(text) });
    let queued = |s: &ChatState| -> Vec<String> { s.queued_messages.as_deref().unwrap_or_default().iter().map(|m| m.id.clone()).collect() };
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).expect("mkdir work");
    let store = tmp.path().join("agent-store");
    let good = agent_flag("good", &format!("--store {}", store.display()));
    let daemon = Daemon::start_with(&data, &["--agent", &good]);
    let (c, _, _root) = connect_init(&daemon.url, "acp-life").await;
    let (sid, chat, _ssub, mut state, mut sub) = session_on(&c, "good", &work).await;
    let send = |action: StateAction| {
        let (c, chat) = (&c, chat.clone());
        async move { within("dispatch", c.dispatch(chat, action)).await.expect("dispatch") }
    };
    prompt(&c, &chat, &mut state, &mut sub, "t1", "hello").await;

    // Queue three during a slow turn, reorder, remove one, steer.
    send(user_turn("t2", "slow please")).await;
    follow_chat(&mut sub, &mut state, "t2 streams", |env, _| matches!(env.action, StateAction::ChatDelta(_))).await;
    for (id, text) in [("q1", "one"), ("q2", "two"), ("q3", "three")] {
        send(pending(PendingMessageKind::Queued, id, text)).await;
    }
    follow_chat(&mut sub, &mut state, "three queued", |_, s| queued(s).len() == 3).await;
    send(StateAction::ChatQueuedMessagesReordered(ChatQueuedMessagesReorderedAction { order: vec!["q1".into(), "q3".into(), "q2".into()] })).await;
    follow_chat(&mut sub, &mut state, "reordered", |_, s| queued(s) == ["q1", "q3", "q2"]).await;
    send(StateAction::ChatPendingMessageRemoved(ChatPendingMessageRemovedAction { kind: PendingMessageKind::Queued, id: "q1".into() })).await;
    follow_chat(&mut sub, &mut state, "q1 removed", |_, s| queued(s) == ["q3", "q2"]).await;
    send(pending(PendingMessageKind::Steering, "s1", "go left")).await;
    follow_chat(&mut sub, &mut state, "s1 held", |_, s| s.steering_message.as_ref().is_some_and(|m| m.id == "s1")).await;
    send(StateAction::ChatTurnCancelled(ChatTurnCancelledAction { turn_id: "t2".into(), duration: 0, meta: None })).await;
    let seen = follow_chat(&mut sub, &mut state, "the held and queued messages run", |_, s| {
        s.active_turn.is_none() && s.queued_messages.is_none() && s.turns.iter().any(|t| t.id == "q2")
    })
    .await;
    let starts: Vec<&str> = seen
        .iter()
        .filter_map(|e| match &e.action {
            StateAction::ChatTurnStarted(a) => a.queued_message_id.as_deref(),
            _ => None,
        })
        .collect();
    assert_eq!(starts, ["s1", "q3", "q2"], "the steering message first, then the queue in its order, once each");
    let ids: Vec<(&str, TurnState)> = state.turns.iter().map(|t| (t.id.as_str(), t.state)).collect();
    assert_eq!(ids, [("t1", TurnState::Complete), ("t2", TurnState::Cancelled), ("s1", TurnState::Complete), ("q3", TurnState::Complete), ("q2", TurnState::Complete)]);
    assert!(markdown(&state.turns[3]).starts_with("Reply: three"), "the agent answered q3: {:?}", state.turns[3]);
    assert!(state.steering_message.is_none());

    // What ACP cannot do is refused with its reason, nothing changed.
    async fn refusal(sub: &mut SessionSubscription) -> String {
        wait_for(sub, "the refusal", |e| match e {
            SubscriptionEvent::Action(env) => env.rejection_reason.clone(),
            _ => None,
        })
        .await
    }
    send(StateAction::ChatTruncated(ChatTruncatedAction { turn_id: Some("t1".into()) })).await;
    let reason = refusal(&mut sub).await;
    assert!(reason.contains("cannot forget turns"), "{reason}");
    send(StateAction::ChatTurnResume(ChatTurnResumeAction { turn_id: "q2".into() })).await;
    let reason = refusal(&mut sub).await;
    assert!(reason.contains("cannot resume a turn"), "{reason}");
    for source in [
        ChatSource::Fork(ForkChatSource { chat: chat.clone(), turn_id: "t1".into() }),
        ChatSource::SideChat(SideChatSource { chat: chat.clone(), turn_id: "t1".into(), selection: None }),
    ] {
        let params = CreateChatParams { channel: sid.clone(), meta: None, chat: format!("ahp-chat:/{}", fresh_id()), initial_message: None, source: Some(source), working_directories: None };
        let e = rpc_error(within("createChat with a source", c.request::<_, Value>("createChat", params)).await);
        assert_eq!(e.code, -32602);
        assert!(e.message.contains("not offered by this agent"), "{}", e.message);
    }
    let (snapshot, _s) = subscribe_chat(&c, &chat).await;
    assert_eq!(snapshot.turns.len(), 5, "the refusals changed nothing");

    // A second chat: made, reordered first, refused a move to another
    // session of the same agent.
    let second = format!("ahp-chat:/{}-second", fresh_id());
    let params = CreateChatParams { channel: sid.clone(), meta: None, chat: second.clone(), initial_message: None, source: None, working_directories: None };
    let r: Value = within("createChat", c.request("createChat", params)).await.expect("createChat");
    assert_eq!(r, Value::Null);
    let reorder = MoveChatParams { channel: second.clone(), meta: None, destination: ChatMoveDestination::Session(ChatMoveToSessionDestination { session: sid.clone(), after: None }) };
    let moved: MoveChatResult = within("moveChat within", c.request("moveChat", reorder)).await.expect("moveChat within the session");
    assert_eq!(moved.session, sid);
    let (s, _s2) = subscribe_session(&c, &sid).await;
    let order: Vec<&str> = s.chats.iter().map(|e| e.resource.as_str()).collect();
    assert_eq!(order, [second.as_str(), chat.as_str()], "reordered first");
    let (other, _, _, _, _) = session_on(&c, "good", &work).await;
    let away = MoveChatParams { channel: second.clone(), meta: None, destination: ChatMoveDestination::Session(ChatMoveToSessionDestination { session: other, after: None }) };
    let e = rpc_error(within("moveChat away", c.request::<_, MoveChatResult>("moveChat", away)).await);
    assert_eq!(e.code, -32602);
    assert!(e.message.contains("cannot move a conversation"), "{}", e.message);
    let (s, _s3) = subscribe_session(&c, &sid).await;
    assert!(s.chats.iter().any(|e| e.resource == second), "still in its session");
    c.shutdown().await;
}
