//! Shared harness for the end-to-end tests: the real `ahpd` binary on a
//! loopback port, driven by the official `ahp` client over `ahp-ws`.
//!
//! Every await is bounded by [`STEP`], so a shape error (which the client
//! shows as a silently dropped notification) fails fast as a timeout naming
//! the step instead of hanging.

#![allow(dead_code, unused_imports)]

pub mod agents;
pub mod model_stub;
pub mod repo;
pub use agents::*;
pub use model_stub::*;
pub use repo::*;

/// The `file:` URI of a local folder (percent-encoded as the daemon does).
pub fn file_uri(p: &Path) -> String {
    ahpd_core::git::uri_of_path(p.to_str().expect("utf-8 path"))
}

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
    ChatState, Message, MessageAttachment, MessageKind, MessageOrigin, MessageResourceAttachment, ResponsePart, SessionLifecycle, SessionState, SessionSummary,
    SnapshotState, ToolCallConfirmationReason, ToolCallState, Turn, TurnState,
};
use ahp::ahp_types::ROOT_RESOURCE_URI;
use ahp::{Client, ClientConfig, ClientError, SessionSubscription, SubscriptionEvent};
use ahp_ws::WebSocketTransport;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message as WsMessage;

/// The longest any single step may take.
pub const STEP: Duration = Duration::from_secs(20);

/// Activity bits of a status (Idle 1, Error 2, InProgress 8, InputNeeded 24).
pub const ACTIVITY: u32 = 0x1F;

// ---------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------

/// Awaits `fut`, failing the test with `what` if it takes longer than STEP.
pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(STEP, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {STEP:?}: {what}"),
    }
}

/// A running daemon; killed on drop. Its stderr goes to a log file that is
/// printed when the test fails (or always, with `AHPD_E2E_LOG=1`).
pub struct Daemon {
    /// The daemon process.
    pub child: Child,
    /// Its WebSocket URL, with `?token=<connection token>` when the daemon
    /// asks for one (no users directory, no `--no-token`): what a client
    /// that read `ahpd token` connects with.
    pub url: String,
    /// `host:port` it listens on.
    pub addr: String,
    /// The connection token it asks of every upgrade, if it asks one.
    pub token: Option<String>,
    /// Where its stderr goes.
    pub log: PathBuf,
}

impl Daemon {
    /// Starts `ahpd serve` on a free loopback port with `data_dir`, and
    /// reads the URL from its first stdout line.
    pub fn start(data_dir: &Path) -> Daemon {
        Daemon::start_with(data_dir, &[])
    }

    pub fn start_with(data_dir: &Path, extra: &[&str]) -> Daemon {
        Daemon::start_with_env(data_dir, extra, &[])
    }

    /// Like [`Daemon::start_with`], with extra environment variables (e.g.
    /// `AHPD_TEST_WALL_OFFSET_MS`).
    pub fn start_with_env(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        Daemon::start_at("127.0.0.1:0", data_dir, extra, env)
    }

    /// Like [`Daemon::start_with_env`], listening on `listen` (e.g. the
    /// port a daemon that was killed listened on, so its clients find it
    /// again).
    pub fn start_at(listen: &str, data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        let log = log_path(data_dir);
        let stderr = std::fs::OpenOptions::new().create(true).append(true).open(&log).expect("open log file");
        let mut child = Command::new(env!("CARGO_BIN_EXE_ahpd"))
            .arg("serve")
            .args(["--listen", listen, "--data-dir"])
            .arg(data_dir)
            // Never scan a developer's own Claude transcripts unless a test
            // names a folder.
            .args(if extra.contains(&"--claude-projects") { &[][..] } else { &["--claude-projects", ""][..] })
            .args(extra)
            .env("RUST_LOG", "info,ahpd=debug")
            .env("NO_COLOR", "1")
            // No config file of the developer's: a config home with none.
            .env("XDG_CONFIG_HOME", data_dir.with_extension("config"))
            .env_remove("AHPD_CONFIG")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn()
            .expect("spawn ahpd");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            // The listening line and the line saying how a client gets in.
            for line in lines.by_ref().take(2).map_while(Result::ok) {
                let _ = tx.send(line);
            }
            // Keep the pipe open for the daemon's lifetime.
            for _ in lines {}
        });
        let mut next = || match rx.recv_timeout(STEP) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                panic!("ahpd printed no listening line; log:\n{}", std::fs::read_to_string(&log).unwrap_or_default());
            }
        };
        let (line, how) = (next(), next());
        let url = line.strip_prefix("ahpd listening on ").unwrap_or_else(|| panic!("unexpected first line {line:?}")).to_owned();
        assert!(url.starts_with("ws://") && url.ends_with('/'), "{url}");
        let addr = url.trim_start_matches("ws://").trim_end_matches('/').to_owned();
        // The token is the file the second line names (`ahpd token` prints
        // the same), read as a local client of the same user would.
        let token = how.contains("`ahpd token` prints it").then(|| {
            std::fs::read_to_string(data_dir.join("host-token")).expect("read the connection token").trim().to_owned()
        });
        let url = match &token {
            Some(t) => format!("{url}?token={t}"),
            None => url,
        };
        Daemon { child, url, addr, token, log }
    }

    /// SIGTERM, then the exit status (waiting at most STEP).
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        self.signal_term();
        self.wait_exit()
    }

    /// Sends SIGTERM and returns at once (the daemon drains first).
    pub fn signal_term(&mut self) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().expect("run kill");
        assert!(sent.success(), "kill -TERM {pid} failed");
    }

    /// The exit status, waiting at most STEP.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + STEP;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(std::time::Instant::now() < deadline, "ahpd did not exit within {STEP:?} of SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Everything the daemon logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL: nothing gets a chance to flush.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // A graceful stop first, so the daemon stops its agents' process
        // groups (a SIGKILLed daemon leaves real agents such as Claude
        // Code running); SIGKILL after 3 s (a turn still running would
        // hold the drain for its grace).
        if matches!(self.child.try_wait(), Ok(None)) {
            let pid = self.child.id().to_string();
            let _ = Command::new("kill").args(["-TERM", &pid]).status();
            let deadline = std::time::Instant::now() + Duration::from_secs(3);
            while matches!(self.child.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.kill();
        if std::thread::panicking() || std::env::var_os("AHPD_E2E_LOG").is_some() {
            eprintln!("---- ahpd log ({}) ----\n{}", self.log.display(), std::fs::read_to_string(&self.log).unwrap_or_default());
        }
    }
}

/// The daemon log of `data_dir` (`<data-dir>.log`).
pub fn log_path(data_dir: &Path) -> PathBuf {
    data_dir.with_extension("log")
}

/// The daemon log's length now, to read only what a later start writes.
pub fn log_len(data_dir: &Path) -> usize {
    std::fs::read_to_string(log_path(data_dir)).map(|s| s.len()).unwrap_or(0)
}

/// What the daemon logged since `from` (a [`log_len`]).
pub fn log_since(data_dir: &Path, from: usize) -> String {
    let text = std::fs::read_to_string(log_path(data_dir)).unwrap_or_default();
    text.get(from..).unwrap_or("").to_owned()
}

/// A fresh, URI-safe, random-enough id.
pub fn fresh_id() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("e2e-{:x}-{:x}-{}", nanos, std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// Connects; each subscription keeps up to 16384 events (a storm must not
/// lag).
pub async fn connect(url: &str) -> Client {
    let transport = within("websocket connect", WebSocketTransport::connect(url)).await.expect("websocket connect");
    let config = ClientConfig { subscription_buffer: 16_384, ..ClientConfig::default() };
    within("client connect", Client::connect(transport, config)).await.expect("client connect")
}

/// Connects and initializes with the root channel subscribed.
pub async fn connect_init(url: &str, client_id: &str) -> (Client, InitializeResult, SessionSubscription) {
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

pub fn rpc_error<T: std::fmt::Debug>(r: Result<T, ClientError>) -> ahp::ahp_types::messages::JsonRpcError {
    match r {
        Err(ClientError::Rpc(e)) => e,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

pub async fn list(c: &Client) -> Vec<SessionSummary> {
    let params = ListSessionsParams { channel: ROOT_RESOURCE_URI.to_owned(), meta: None, limit: Some(500), cursor: None };
    let r: ListSessionsResult = within("listSessions", c.request("listSessions", params)).await.expect("listSessions");
    r.items
}

pub async fn create(c: &Client, sid: &str) -> Result<Value, ClientError> {
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

pub async fn subscribe_session(c: &Client, sid: &str) -> (SessionState, SessionSubscription) {
    let (r, sub) = within("subscribe session", c.subscribe(sid.to_owned())).await.expect("subscribe session");
    match r.snapshot.map(|s| s.state) {
        Some(SnapshotState::Session(s)) => (*s, sub),
        other => panic!("expected a session snapshot, got {other:?}"),
    }
}

pub async fn subscribe_chat(c: &Client, chat: &str) -> (ChatState, SessionSubscription) {
    let (r, sub) = within("subscribe chat", c.subscribe(chat.to_owned())).await.expect("subscribe chat");
    match r.snapshot.map(|s| s.state) {
        Some(SnapshotState::Chat(s)) => (*s, sub),
        other => panic!("expected a chat snapshot, got {other:?}"),
    }
}

pub fn default_chat(s: &SessionState) -> String {
    s.default_chat.clone().or_else(|| s.chats.first().map(|c| c.resource.clone())).expect("a default chat")
}

pub fn user_turn(turn_id: &str, text: &str) -> StateAction {
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

/// `user_turn` whose message attaches `attachments`.
pub fn user_turn_with(turn_id: &str, text: &str, attachments: Vec<MessageAttachment>) -> StateAction {
    let mut turn = user_turn(turn_id, text);
    if let StateAction::ChatTurnStarted(started) = &mut turn {
        started.message.attachments = Some(attachments);
    }
    turn
}

/// A `resource` attachment naming the local file `path`, as a client
/// attaches a file to a message.
pub fn file_attachment(label: &str, path: &Path) -> MessageAttachment {
    MessageAttachment::Resource(MessageResourceAttachment {
        label: label.to_owned(),
        range: None,
        display_kind: Some("document".to_owned()),
        meta: None,
        uri: file_uri(path),
        size_hint: None,
        content_type: None,
        nonce: None,
        selection: None,
    })
}

/// Waits for the first event on `sub` that `pick` maps to `Some`.
pub async fn wait_for<T>(sub: &mut SessionSubscription, what: &str, mut pick: impl FnMut(SubscriptionEvent) -> Option<T>) -> T {
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
pub async fn follow_chat(
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

pub fn markdown(turn: &Turn) -> String {
    turn.response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::Markdown(m) => Some(m.content.as_str()),
            _ => None,
        })
        .collect()
}

pub fn is_turn_complete(env: &ActionEnvelope) -> bool {
    matches!(env.action, StateAction::ChatTurnComplete(_))
}

/// `YYYY-MM-DDTHH:MM:SS(.fff)Z` (the shape every AHP timestamp has).
pub fn looks_iso(s: &str) -> bool {
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
pub async fn new_session(c: &Client) -> (String, String, SessionSubscription, ChatState, SessionSubscription) {
    let sid = format!("ahp-session:/{}", fresh_id());
    assert_eq!(create(c, &sid).await.expect("createSession"), Value::Null);
    let (s, ssub) = subscribe_session(c, &sid).await;
    let chat = default_chat(&s);
    let (chat_state, csub) = subscribe_chat(c, &chat).await;
    (sid, chat, ssub, chat_state, csub)
}

/// The tool call of the chat's running turn that waits for the client's
/// confirmation, if any.
pub fn pending_confirmation(chat: &ChatState) -> Option<ahp::ahp_types::state::ToolCallPendingConfirmationState> {
    chat.active_turn.as_ref().and_then(|t| {
        t.response_parts.iter().find_map(|p| match p {
            ResponsePart::ToolCall(tc) => match &tc.tool_call {
                ToolCallState::PendingConfirmation(s) => Some(s.clone()),
                _ => None,
            },
            _ => None,
        })
    })
}

/// The client's answer to a tool call waiting for confirmation, as a person
/// gives it.
pub fn confirm_tool(turn_id: &str, tool_call_id: &str, approved: bool) -> StateAction {
    StateAction::ChatToolCallConfirmed(ChatToolCallConfirmedAction {
        turn_id: turn_id.to_owned(),
        tool_call_id: tool_call_id.to_owned(),
        meta: None,
        approved,
        confirmed: Some(ToolCallConfirmationReason::UserAction),
        reason: None,
        edited_tool_input: None,
        user_suggestion: None,
        reason_message: None,
        selected_option_id: None,
    })
}

/// Runs `ahpd <args>` to completion (stdin from `stdin`, or none), with no
/// `AHPD_DATA_DIR` inherited; returns its exit status and output.
pub fn ahpd_cli(args: &[&str], stdin: Option<&[u8]>) -> std::process::Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_ahpd"))
        .args(args)
        .env_remove("AHPD_DATA_DIR")
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ahpd");
    if let (Some(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(bytes).expect("write stdin");
    }
    child.wait_with_output().expect("ahpd output")
}

/// Sends a user turn on `chat` and waits for its completion on `csub`
/// (the turn must not be rejected).
pub async fn turn(c: &Client, chat: &str, csub: &mut SessionSubscription, turn_id: &str, text: &str) {
    within("dispatch turn", c.dispatch(chat.to_owned(), user_turn(turn_id, text))).await.expect("dispatch turn");
    within("turn complete", async {
        loop {
            match csub.recv().await {
                Some(SubscriptionEvent::Action(env)) => {
                    assert!(env.rejection_reason.is_none(), "turn rejected: {env:?}");
                    if matches!(&env.action, StateAction::ChatTurnComplete(a) if a.turn_id == turn_id) {
                        return;
                    }
                }
                Some(_) => {}
                None => panic!("chat subscription closed"),
            }
        }
    })
    .await;
}

/// `node <tests/acp_node_agent/agent.mjs>`, or a failure saying how to get
/// its packages (`npm ci --prefix tests/acp_node_agent`).
pub fn node_agent() -> String {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/acp_node_agent");
    let sdk = dir.join("node_modules/@modelcontextprotocol/sdk/package.json");
    assert!(sdk.is_file(), "{} is missing: run `npm ci --prefix tests/acp_node_agent` (Node 20+)", sdk.display());
    let script = dir.join("agent.mjs").canonicalize().expect("agent.mjs");
    format!("node {}", script.display())
}

/// Sends `text` as turn `turn_id` on `chat` and returns the agent's reply
/// once the turn completes.
pub async fn ask(c: &Client, chat: &str, state: &mut ChatState, sub: &mut SessionSubscription, turn_id: &str, text: &str) -> String {
    within("dispatch", c.dispatch(chat.to_owned(), user_turn(turn_id, text))).await.expect("dispatch");
    follow_chat(sub, state, turn_id, |_, s| s.turns.iter().any(|t| t.id == turn_id)).await;
    let turn = state.turns.iter().find(|t| t.id == turn_id).expect("the turn");
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    markdown(turn)
}

/// Counts the log lines of `event` naming `sid` the daemon on `data` wrote
/// since byte `from`.
pub fn count_log(data: &Path, from: usize, event: &str, sid: &str) -> usize {
    log_since(data, from).lines().filter(|l| l.contains(event) && l.contains(sid)).count()
}

/// Waits (bounded by [`STEP`]) for a log line of `event` naming `sid`.
pub async fn wait_log(data: &Path, from: usize, event: &str, sid: &str) {
    within(&format!("log {event} for {sid}"), async {
        while count_log(data, from, event, sid) == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}
