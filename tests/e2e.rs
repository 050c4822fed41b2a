//! End-to-end tests: the real `ahpd` binary on a loopback port, driven by the
//! official `ahp` client over `ahp-ws` (and, for malformed input, a raw
//! WebSocket). Each test asserts what a user of the protocol observes.
//!
//! Every await is bounded by [`STEP`], so a shape error (which the client
//! shows as a silently dropped notification) fails fast as a timeout naming
//! the step instead of hanging.

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ahp::ahp_types::actions::{
    ActionEnvelope, ActionOrigin, ChatToolCallConfirmedAction, ChatTurnCancelledAction, ChatTurnStartedAction,
    StateAction,
};
use ahp::ahp_types::commands::{
    CreateSessionParams, DisposeSessionParams, InitializeResult, ListSessionsParams, ListSessionsResult,
};
use ahp::ahp_types::state::{
    ChatState, Message, MessageKind, MessageOrigin, ResponsePart, SessionLifecycle, SessionState, SessionSummary,
    SnapshotState, ToolCallConfirmationReason, ToolCallState, Turn, TurnState,
};
use ahp::ahp_types::ROOT_RESOURCE_URI;
use ahp::{Client, ClientConfig, ClientError, SessionSubscription, SubscriptionEvent};
use ahp_ws::WebSocketTransport;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message as WsMessage;

/// The longest any single step may take.
const STEP: Duration = Duration::from_secs(10);

/// Activity bits of a status (Idle 1, Error 2, InProgress 8, InputNeeded 24).
const ACTIVITY: u32 = 0x1F;

// ---------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------

/// Awaits `fut`, failing the test with `what` if it takes longer than STEP.
async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(STEP, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {STEP:?}: {what}"),
    }
}

/// A running daemon; killed on drop. Its stderr goes to a log file that is
/// printed when the test fails (or always, with `AHPD_E2E_LOG=1`).
struct Daemon {
    child: Child,
    url: String,
    log: PathBuf,
}

impl Daemon {
    /// Starts `ahpd serve` on a free loopback port with `data_dir`, and
    /// reads the URL from its first stdout line.
    fn start(data_dir: &Path) -> Daemon {
        Daemon::start_with(data_dir, &[])
    }

    fn start_with(data_dir: &Path, extra: &[&str]) -> Daemon {
        let log = data_dir.with_extension("log");
        let stderr = std::fs::OpenOptions::new().create(true).append(true).open(&log).expect("open log file");
        let mut child = Command::new(env!("CARGO_BIN_EXE_ahpd"))
            .arg("serve")
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .args(extra)
            .env("RUST_LOG", "info,ahpd=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn()
            .expect("spawn ahpd");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = tx.send(line);
            }
            // Keep the pipe open for the daemon's lifetime.
            for _ in lines {}
        });
        let line = match rx.recv_timeout(STEP) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                panic!("ahpd printed no listening line; log:\n{}", std::fs::read_to_string(&log).unwrap_or_default());
            }
        };
        let url = line.strip_prefix("ahpd listening on ").unwrap_or_else(|| panic!("unexpected first line {line:?}")).to_owned();
        assert!(url.starts_with("ws://127.0.0.1:") && url.ends_with('/'), "{url}");
        Daemon { child, url, log }
    }

    /// SIGTERM, then the exit status (waiting at most STEP).
    fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().expect("run kill");
        assert!(sent.success(), "kill -TERM {pid} failed");
        let deadline = std::time::Instant::now() + STEP;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(std::time::Instant::now() < deadline, "ahpd did not exit within {STEP:?} of SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL: nothing gets a chance to flush.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() || std::env::var_os("AHPD_E2E_LOG").is_some() {
            eprintln!("---- ahpd log ({}) ----\n{}", self.log.display(), std::fs::read_to_string(&self.log).unwrap_or_default());
        }
    }
}

/// A fresh, URI-safe, random-enough id.
fn fresh_id() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("e2e-{:x}-{:x}-{}", nanos, std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

async fn connect(url: &str) -> Client {
    let transport = within("websocket connect", WebSocketTransport::connect(url)).await.expect("websocket connect");
    within("client connect", Client::connect(transport, ClientConfig::default())).await.expect("client connect")
}

/// Connects and initializes with the root channel subscribed.
async fn connect_init(url: &str, client_id: &str) -> (Client, InitializeResult, SessionSubscription) {
    let c = connect(url).await;
    let init = within(
        "initialize",
        c.initialize(client_id.to_owned(), vec!["1.0.0".to_owned()], vec![ROOT_RESOURCE_URI.to_owned()]),
    )
    .await
    .expect("initialize");
    let root = c.attach_subscription(ROOT_RESOURCE_URI).await;
    (c, init, root)
}

fn rpc_error<T: std::fmt::Debug>(r: Result<T, ClientError>) -> ahp::ahp_types::messages::JsonRpcError {
    match r {
        Err(ClientError::Rpc(e)) => e,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

async fn list(c: &Client) -> Vec<SessionSummary> {
    let params = ListSessionsParams { channel: ROOT_RESOURCE_URI.to_owned(), meta: None, limit: Some(500), cursor: None };
    let r: ListSessionsResult = within("listSessions", c.request("listSessions", params)).await.expect("listSessions");
    r.items
}

async fn create(c: &Client, sid: &str) -> Result<Value, ClientError> {
    let params = CreateSessionParams {
        channel: sid.to_owned(),
        meta: None,
        provider: Some("echo".to_owned()),
        working_directories: Some(vec!["file:///tmp".to_owned()]),
        config: None,
        active_client: None,
        progress_token: None,
    };
    within("createSession", c.request("createSession", params)).await
}

async fn subscribe_session(c: &Client, sid: &str) -> (SessionState, SessionSubscription) {
    let (r, sub) = within("subscribe session", c.subscribe(sid.to_owned())).await.expect("subscribe session");
    match r.snapshot.map(|s| s.state) {
        Some(SnapshotState::Session(s)) => (*s, sub),
        other => panic!("expected a session snapshot, got {other:?}"),
    }
}

async fn subscribe_chat(c: &Client, chat: &str) -> (ChatState, SessionSubscription) {
    let (r, sub) = within("subscribe chat", c.subscribe(chat.to_owned())).await.expect("subscribe chat");
    match r.snapshot.map(|s| s.state) {
        Some(SnapshotState::Chat(s)) => (*s, sub),
        other => panic!("expected a chat snapshot, got {other:?}"),
    }
}

fn default_chat(s: &SessionState) -> String {
    s.default_chat.clone().or_else(|| s.chats.first().map(|c| c.resource.clone())).expect("a default chat")
}

fn user_turn(turn_id: &str, text: &str) -> StateAction {
    StateAction::ChatTurnStarted(ChatTurnStartedAction {
        turn_id: turn_id.to_owned(),
        started_at: "2026-01-01T00:00:00.000Z".to_owned(),
        message: Message {
            text: text.to_owned(),
            origin: MessageOrigin { kind: MessageKind::User },
            attachments: None,
            model: None,
            agent: None,
            meta: None,
        },
        queued_message_id: None,
        meta: None,
    })
}

/// Waits for the first event on `sub` that `pick` maps to `Some`.
async fn wait_for<T>(sub: &mut SessionSubscription, what: &str, mut pick: impl FnMut(SubscriptionEvent) -> Option<T>) -> T {
    within(what, async {
        loop {
            match sub.recv().await {
                Some(event) => {
                    if let Some(v) = pick(event) {
                        return v;
                    }
                }
                None => panic!("subscription closed while waiting for {what}"),
            }
        }
    })
    .await
}

/// Applies chat actions to `chat` until `done` says stop; returns every
/// envelope seen. Checks `serverSeq` rises strictly.
async fn follow_chat(
    sub: &mut SessionSubscription,
    chat: &mut ChatState,
    what: &str,
    mut done: impl FnMut(&ActionEnvelope, &ChatState) -> bool,
) -> Vec<ActionEnvelope> {
    let mut seen: Vec<ActionEnvelope> = Vec::new();
    within(what, async {
        loop {
            let env = match sub.recv().await {
                Some(SubscriptionEvent::Action(env)) => env,
                Some(_) => continue,
                None => panic!("chat subscription closed during {what}"),
            };
            if let Some(prev) = seen.last() {
                assert!(env.server_seq > prev.server_seq, "serverSeq must rise: {} then {}", prev.server_seq, env.server_seq);
            }
            assert!(env.rejection_reason.is_none(), "rejected: {env:?}");
            let _ = ahp::reducers::apply_action_to_chat(chat, &env.action);
            let stop = done(&env, chat);
            seen.push(env);
            if stop {
                return;
            }
        }
    })
    .await;
    seen
}

fn markdown(turn: &Turn) -> String {
    turn.response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::Markdown(m) => Some(m.content.as_str()),
            _ => None,
        })
        .collect()
}

fn is_turn_complete(env: &ActionEnvelope) -> bool {
    matches!(env.action, StateAction::ChatTurnComplete(_))
}

/// `YYYY-MM-DDTHH:MM:SS(.fff)Z` (the shape every AHP timestamp has).
fn looks_iso(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| r.into_iter().all(|i| b.get(i).is_some_and(u8::is_ascii_digit));
    b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && s.ends_with('Z')
}

/// Creates a session and subscribes to it and its default chat.
async fn new_session(c: &Client) -> (String, String, SessionSubscription, ChatState, SessionSubscription) {
    let sid = format!("ahp-session:/{}", fresh_id());
    assert_eq!(create(c, &sid).await.expect("createSession"), Value::Null);
    let (s, ssub) = subscribe_session(c, &sid).await;
    let chat = default_chat(&s);
    let (chat_state, csub) = subscribe_chat(c, &chat).await;
    (sid, chat, ssub, chat_state, csub)
}

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
    let pending = chat_state
        .active_turn
        .as_ref()
        .and_then(|t| {
            t.response_parts.iter().find_map(|p| match p {
                ResponsePart::ToolCall(tc) => match &tc.tool_call {
                    ToolCallState::PendingConfirmation(s) => Some(s.clone()),
                    _ => None,
                },
                _ => None,
            })
        })
        .expect("a tool call pending confirmation");
    assert_eq!(pending.tool_name, "echo_tool");

    let confirm = StateAction::ChatToolCallConfirmed(ChatToolCallConfirmedAction {
        turn_id: "t1".to_owned(),
        tool_call_id: pending.tool_call_id.clone(),
        meta: None,
        approved: true,
        confirmed: Some(ToolCallConfirmationReason::UserAction),
        reason: None,
        edited_tool_input: None,
        user_suggestion: None,
        reason_message: None,
        selected_option_id: None,
    });
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
