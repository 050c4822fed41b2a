//! One chat's ACP agent: an actor task that takes the chat's commands in
//! issue order and the agent's traffic (updates, permission requests, the
//! end of each prompt, the end of the connection) in arrival order.
//!
//! - `Start` spawns the agent in the working directory, sends `initialize`
//!   (advertising `fs/read_text_file`, `fs/write_text_file` and the
//!   `terminal/*` methods, see [`super::terminal`]), then
//!   `session/new`, or `session/load` for a resume: the updates the agent
//!   replays before answering become the conversation's earlier turns. Each
//!   of the three requests is bounded by the agent's start-up timeout; the
//!   answer is `Outcome::Started` with the id the agent gave the session, or
//!   `Outcome::Failed` with the agent's stderr tail.
//! - `Send` sends `session/prompt` and answers at once; the turn's updates
//!   and its stop reason come back as `Input::Backend` actions
//!   ([`super::turn`]).
//! - `Cancel` sends `session/cancel` and answers any waiting permission
//!   request `cancelled`. `ConfirmTool` answers the waiting permission with
//!   the agent's allow-once (else allow-always) or reject-once (else
//!   reject-always) option.
//! - `Close` and `Delete` stop the process and kill its process group, so
//!   nothing it started outlives the chat (ACP v1 has no way to delete the
//!   agent's own copy of a conversation; it is left to the agent).
//! - An agent that goes away on its own (exit, garbage or a huge line on
//!   stdout) is reported as `BackendEvent::Exited` with the reason, its exit
//!   status and its stderr tail; the host ends the running turn with a
//!   `chat/error` carrying that message.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    CancelNotification, ClientCapabilities, CreateTerminalRequest, CreateTerminalResponse,
    FileSystemCapabilities, Implementation, InitializeRequest, KillTerminalRequest, KillTerminalResponse,
    EnvVariable, HttpHeader, LoadSessionRequest, McpServer, McpServerHttp, McpServerStdio, NewSessionRequest, PermissionOption, PermissionOptionKind, PromptRequest, PromptResponse,
    ReadTextFileRequest, ReadTextFileResponse, ReleaseTerminalRequest, ReleaseTerminalResponse,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse, SelectedPermissionOutcome,
    SessionId, SessionNotification, TerminalOutputRequest, WaitForTerminalExitRequest,
    WaitForTerminalExitResponse, WriteTextFileRequest, WriteTextFileResponse,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, Client, JsonRpcRequest, Lines};
use ahp_types::actions::StateAction;
use ahp_types::state::Message;
use ahp_types::Uri;
use ahpd_core::{BackendCmd, BackendEvent, Input, Outcome};
use tokio::process::Child;
use tokio::sync::{mpsc, oneshot};

use super::fs::{path_of_file_uri, Confined, FsError, Written};
use super::process::{self, ProcessGroup, StderrTail};
use super::terminal::Terminals;
use super::turn::{History, TurnMap};
use super::{startup_timeout, AgentConfig};
use crate::events::EventSink;
use crate::exec::mcp::{self, ChatSecret, Endpoint};

/// How long a failed prompt waits to learn whether the agent went away
/// (so the error can carry its exit status and stderr), in ms.
const FAULT_SETTLE_MS: u64 = 300;
/// How long a stopping agent may take to exit before it is killed, in ms.
const STOP_GRACE_MS: u64 = 500;

/// A command for a chat's actor.
pub struct Msg {
    /// Ties the answer to the command.
    pub op: ahpd_core::OpId,
    /// What to do.
    pub command: Box<BackendCmd>,
}

/// What the agent's connection tells the actor, in arrival order.
enum FromAgent {
    Update(SessionNotification),
    Permission(RequestPermissionRequest, Responder<RequestPermissionResponse>),
    PromptDone { turn_id: String, result: Result<PromptResponse, agent_client_protocol::Error> },
    Ended(String),
}

/// A running agent and its session.
struct Live {
    cx: ConnectionTo<Agent>,
    session_id: SessionId,
    child: Child,
    group: ProcessGroup,
    terminals: Terminals,
    stderr: StderrTail,
    stop: Option<oneshot::Sender<()>>,
    tx: mpsc::UnboundedSender<FromAgent>,
    rx: mpsc::UnboundedReceiver<FromAgent>,
    turn: Option<TurnMap>,
    /// Whether the agent takes `resource` blocks in a prompt
    /// (`promptCapabilities.embeddedContext`): attached files go as
    /// content, else as links ([`super::prompt`]).
    embedded_context: bool,
    waiting: HashMap<String, (Vec<PermissionOption>, Responder<RequestPermissionResponse>)>,
    /// The chat's secret for the host's MCP server, held as long as this
    /// agent runs (dropped with it: the secret is refused from then on).
    _secret: Option<ChatSecret>,
}

/// A started process whose session is not open yet.
struct Connected {
    cx: ConnectionTo<Agent>,
    child: Child,
    group: ProcessGroup,
    terminals: Terminals,
    stderr: StderrTail,
    stop: oneshot::Sender<()>,
    tx: mpsc::UnboundedSender<FromAgent>,
    rx: mpsc::UnboundedReceiver<FromAgent>,
}

/// One chat's actor.
pub struct ChatActor {
    chat: Uri,
    agent: Arc<AgentConfig>,
    home: PathBuf,
    written: Written,
    events: EventSink,
    live: Option<Live>,
    /// The host's MCP server, given to each agent this chat starts.
    tools: Option<Endpoint>,
}

impl ChatActor {
    /// Starts the actor task; commands go to the returned sender. With
    /// `tools`, each agent the chat starts gets the host's MCP server and a
    /// secret of its own.
    pub fn spawn(chat: Uri, agent: Arc<AgentConfig>, home: PathBuf, written: Written, events: EventSink, tools: Option<Endpoint>) -> mpsc::UnboundedSender<Msg> {
        let (tx, rx) = mpsc::unbounded_channel();
        let actor = ChatActor { chat, agent, home, written, events, live: None, tools };
        tokio::spawn(actor.run(rx));
        tx
    }

    async fn run(mut self, mut commands: mpsc::UnboundedReceiver<Msg>) {
        #[allow(clippy::large_enum_variant)] // one value on the stack per event
        enum Next {
            Command(Msg),
            Agent(FromAgent),
        }
        loop {
            let next = tokio::select! {
                msg = commands.recv() => match msg {
                    Some(msg) => Next::Command(msg),
                    None => break,
                },
                Some(event) = next_from_agent(&mut self.live) => Next::Agent(event),
            };
            match next {
                Next::Command(Msg { op, command }) => {
                    let outcome = self.command(*command).await;
                    self.events.input(Input::Done { op, outcome });
                }
                Next::Agent(event) => self.on_agent(event).await,
            }
        }
        self.stop().await;
    }

    fn name(&self) -> &str {
        &self.agent.name
    }

    async fn command(&mut self, command: BackendCmd) -> Outcome {
        match command {
            BackendCmd::Start { conversation_id, working_directory, resume, session: _, peer_directories: _ } => {
                self.start(conversation_id, working_directory, resume).await
            }
            BackendCmd::Send { turn_id, message, attachments } => {
                // The files it attaches, read off the async threads within
                // the session's folders (`ahpd_core::files::attachments`).
                let read = if attachments.is_empty() {
                    Vec::new()
                } else {
                    tokio::task::spawn_blocking(move || crate::exec::fs::read_attachments(&attachments)).await.unwrap_or_default()
                };
                self.send(turn_id, &message, read)
            }
            BackendCmd::Cancel { turn_id } => {
                if let Some(live) = self.live.as_mut().filter(|l| l.turn.as_ref().is_some_and(|t| t.turn_id() == turn_id)) {
                    if let Err(e) = live.cx.send_notification(CancelNotification::new(live.session_id.clone())) {
                        tracing::warn!(chat = %self.chat, agent = %self.agent.name, "session/cancel not sent: {e}");
                    }
                    cancel_waiting(live);
                    live.turn = None;
                }
                Outcome::Ok
            }
            BackendCmd::ConfirmTool { turn_id, tool_call_id, approved } => {
                let Some(live) = self.live.as_mut() else { return Outcome::Ok };
                if let Some((options, responder)) = live.waiting.remove(&tool_call_id) {
                    let _ = responder.respond(RequestPermissionResponse::new(choose(&options, approved)));
                }
                if let Some(turn) = live.turn.as_mut().filter(|t| t.turn_id() == turn_id) {
                    turn.confirmed(&tool_call_id, approved);
                }
                Outcome::Ok
            }
            BackendCmd::Close => {
                self.stop().await;
                Outcome::Ok
            }
            // Never sent: an ACP agent does not forget (`AgentSpec::forgets`
            // is false), so the host refuses a rewind first. Said plainly if
            // it ever came.
            // Never sent: an ACP agent asks nothing the host maps to a
            // question (docs/USER-GUIDE.md, "What each agent supports").
            BackendCmd::Answer { .. } => Outcome::Ok,
            BackendCmd::Forget { .. } => Outcome::Failed { message: "acp: the agent cannot forget turns (ACP v1 has no such request)".to_owned() },
            // Never sent either: an ACP agent does not resume a turn
            // (`AgentSpec::resumes_turns` is false; ACP v1 has no request
            // to continue a prompt that ended), so the host refuses
            // `chat/turnResume` first.
            // Never sent: an ACP agent takes no message while a prompt runs
            // (`AgentSpec::steers` is false), so a steering message is held
            // and runs as the next turn.
            BackendCmd::Steer { .. } => Outcome::Failed { message: "acp: the agent cannot take a message into a running prompt (ACP v1)".to_owned() },
            BackendCmd::Resume { .. } => Outcome::Failed { message: "acp: the agent cannot resume a turn (ACP v1 has no such request)".to_owned() },
            BackendCmd::Delete { conversation_id } => {
                self.stop().await;
                tracing::info!(chat = %self.chat, agent = %self.agent.name, conversation = %conversation_id, "acp: the agent keeps its own copy of the conversation (ACP v1 cannot delete it)");
                Outcome::Ok
            }
        }
    }

    async fn start(&mut self, conversation_id: String, working_directory: Option<Uri>, resume: bool) -> Outcome {
        self.stop().await;
        let cwd = match &working_directory {
            Some(uri) => match path_of_file_uri(uri) {
                Some(p) => p,
                None => return failed(format!("{}: the working directory {uri} is not a local file: URI", self.name())),
            },
            None => self.home.clone(),
        };
        let mut c = match connect(self.chat.clone(), self.agent.clone(), self.written.clone(), self.events.clone(), &cwd).await {
            Ok(c) => c,
            Err(message) => return failed(format!("{}: {message}", self.name())),
        };
        let timeout = startup_timeout(&self.agent);
        let init = InitializeRequest::new(ProtocolVersion::V1)
            .client_capabilities(
                ClientCapabilities::new()
                    .fs(FileSystemCapabilities::new().read_text_file(true).write_text_file(true))
                    .terminal(true),
            )
            .client_info(Implementation::new("ahpd", env!("CARGO_PKG_VERSION")));
        let init = match request(&c.cx, init, timeout, "initialize").await {
            Ok(r) => r,
            Err(what) => return self.abort(c, what).await,
        };
        // The host's tools: a fresh secret for this agent, forgotten when it
        // goes (with `Live`, or here when the start fails).
        let secret = match &self.tools {
            Some(tools) => match tools.secrets.issue(&self.chat) {
                Ok(secret) => Some(secret),
                Err(e) => {
                    tracing::warn!(chat = %self.chat, agent = %self.agent.name, "acp: the agent starts without the host's tools: {e}");
                    None
                }
            },
            None => None,
        };
        let mcp_servers = match (&self.tools, &secret) {
            (Some(tools), Some(secret)) => vec![host_server(tools, secret, init.agent_capabilities.mcp_capabilities.http)],
            _ => Vec::new(),
        };
        let (session_id, history) = if resume {
            if !init.agent_capabilities.load_session {
                tracing::warn!(agent = %self.agent.name, "the agent does not advertise loadSession; set can_resume = false for it so its sessions never sleep");
                return self.abort(c, "the agent cannot load a conversation (no loadSession capability), so it cannot resume".to_owned()).await;
            }
            let load = LoadSessionRequest::new(SessionId::from(conversation_id.clone()), cwd.clone()).mcp_servers(mcp_servers);
            if let Err(what) = request(&c.cx, load, timeout, "session/load").await {
                return self.abort(c, what).await;
            }
            // Everything the agent replayed arrived before its answer.
            let mut history = History::new(&format!("{conversation_id}."));
            while let Ok(event) = c.rx.try_recv() {
                match event {
                    FromAgent::Update(n) => history.update(&n.update),
                    FromAgent::Permission(_, responder) => {
                        let _ = responder.respond(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled));
                    }
                    FromAgent::PromptDone { .. } => {}
                    FromAgent::Ended(why) => return self.abort(c, why).await,
                }
            }
            (SessionId::from(conversation_id), history.into_turns())
        } else {
            match request(&c.cx, NewSessionRequest::new(cwd.clone()).mcp_servers(mcp_servers), timeout, "session/new").await {
                Ok(r) => (r.session_id, Vec::new()),
                Err(what) => return self.abort(c, what).await,
            }
        };
        tracing::info!(chat = %self.chat, agent = %self.agent.name, session = %session_id.0, resumed = resume, turns = history.len(), cwd = %cwd.display(), host_tools = secret.is_some(), "acp: agent session open");
        let conversation_id = session_id.0.to_string();
        self.live = Some(Live {
            cx: c.cx,
            session_id,
            child: c.child,
            group: c.group,
            terminals: c.terminals,
            stderr: c.stderr,
            stop: Some(c.stop),
            tx: c.tx,
            rx: c.rx,
            turn: None,
            embedded_context: init.agent_capabilities.prompt_capabilities.embedded_context,
            waiting: HashMap::new(),
            _secret: secret,
        });
        Outcome::Started { conversation_id, history }
    }

    /// Ends a start that failed at `what`: the process goes, the answer
    /// carries its stderr tail.
    async fn abort(&mut self, mut c: Connected, what: String) -> Outcome {
        let _ = c.stop.send(());
        let status = end_process(&mut c.child, Duration::from_millis(0)).await;
        c.group.kill();
        c.terminals.kill_all();
        let tail = c.stderr.after_exit(Duration::from_millis(STOP_GRACE_MS)).await;
        let message = describe(&self.agent.name, &what, &status, &tail);
        tracing::warn!(chat = %self.chat, agent = %self.agent.name, "acp: the agent did not start: {message}");
        failed(message)
    }

    fn send(&mut self, turn_id: String, message: &Message, read: Vec<crate::exec::fs::ReadAttachment>) -> Outcome {
        let Some(live) = self.live.as_mut() else {
            return failed(format!("{}: the agent for this chat is not running", self.agent.name));
        };
        if live.turn.is_some() {
            return failed(format!("{}: a turn is already running in this chat", self.agent.name));
        }
        let prompt = PromptRequest::new(live.session_id.clone(), super::prompt::blocks(message, read, live.embedded_context));
        let tx = live.tx.clone();
        let id = turn_id.clone();
        let sent = live.cx.prepare_request(prompt).on_receiving_result(move |result| async move {
            let _ = tx.send(FromAgent::PromptDone { turn_id: id, result });
            Ok(())
        });
        match sent {
            Ok(()) => {
                live.turn = Some(TurnMap::new(turn_id));
                Outcome::Ok
            }
            Err(e) => failed(format!("{}: session/prompt could not be sent: {e}", self.agent.name)),
        }
    }

    async fn on_agent(&mut self, event: FromAgent) {
        let Some(live) = self.live.as_mut() else { return };
        match event {
            FromAgent::Update(n) => {
                if n.session_id != live.session_id {
                    return;
                }
                if let Some(turn) = live.turn.as_mut() {
                    for action in turn.update(n.update) {
                        emit(&self.events, &self.chat, action);
                    }
                }
            }
            FromAgent::Permission(request, responder) => {
                let id = request.tool_call.tool_call_id.0.to_string();
                match live.turn.as_mut().filter(|_| request.session_id == live.session_id) {
                    Some(turn) => {
                        for action in turn.permission(&id, &request.tool_call.fields) {
                            emit(&self.events, &self.chat, action);
                        }
                        live.waiting.insert(id, (request.options, responder));
                    }
                    None => {
                        let _ = responder.respond(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled));
                    }
                }
            }
            FromAgent::PromptDone { turn_id, result } => {
                if live.turn.as_ref().is_none_or(|t| t.turn_id() != turn_id) {
                    return;
                }
                match result {
                    Ok(response) => {
                        cancel_waiting(live);
                        if let Some(turn) = live.turn.take() {
                            emit(&self.events, &self.chat, turn.finish(response.stop_reason));
                        }
                    }
                    Err(e) => {
                        // The prompt may have failed because the agent went
                        // away: then report that, with its stderr.
                        let settle = tokio::time::sleep(Duration::from_millis(FAULT_SETTLE_MS));
                        tokio::pin!(settle);
                        loop {
                            tokio::select! {
                                () = &mut settle => break,
                                event = live.rx.recv() => match event {
                                    Some(FromAgent::Ended(why)) => return self.fault(why).await,
                                    Some(FromAgent::Permission(_, responder)) => {
                                        let _ = responder.respond(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled));
                                    }
                                    Some(_) => {}
                                    None => break,
                                },
                            }
                        }
                        cancel_waiting(live);
                        if let Some(turn) = live.turn.take() {
                            let message = format!("{}: session/prompt failed: {e}", self.agent.name);
                            emit(&self.events, &self.chat, turn.error("agentError", message));
                        }
                    }
                }
            }
            FromAgent::Ended(why) => self.fault(why).await,
        }
    }

    /// The agent went away on its own: stop what is left of it and tell
    /// the host why, with its exit status and stderr tail.
    async fn fault(&mut self, why: String) {
        let Some(mut live) = self.live.take() else { return };
        cancel_waiting(&mut live);
        if let Some(stop) = live.stop.take() {
            let _ = stop.send(());
        }
        let status = end_process(&mut live.child, Duration::from_millis(FAULT_SETTLE_MS)).await;
        live.group.kill();
        live.terminals.kill_all();
        let tail = live.stderr.after_exit(Duration::from_millis(STOP_GRACE_MS)).await;
        let message = describe(&self.agent.name, &why, &status, &tail);
        tracing::warn!(chat = %self.chat, agent = %self.agent.name, "acp: the agent went away: {message}");
        self.events.input(Input::Backend { chat: self.chat.clone(), event: BackendEvent::Exited { message } });
    }

    /// Lets the agent go: its connection ends, the process gets a moment to
    /// exit, then is killed.
    async fn stop(&mut self) {
        let Some(mut live) = self.live.take() else { return };
        cancel_waiting(&mut live);
        if let Some(stop) = live.stop.take() {
            let _ = stop.send(());
        }
        let status = end_process(&mut live.child, Duration::from_millis(STOP_GRACE_MS)).await;
        // Whatever the agent started (tools, shells) goes with it.
        live.group.kill();
        live.terminals.kill_all();
        tracing::debug!(chat = %self.chat, agent = %self.agent.name, status = %status, "acp: agent stopped");
    }
}

/// The host's MCP server as `session/new` / `session/load` name it for an
/// agent: over HTTP with the chat's secret in an `Authorization` header
/// where the agent takes HTTP servers (`mcpCapabilities.http`), else the
/// stdio bridge (`ahpd mcp-bridge`, every ACP agent takes stdio servers)
/// with the secret in its environment.
fn host_server(tools: &Endpoint, secret: &ChatSecret, http: bool) -> McpServer {
    if http {
        let auth = HttpHeader::new("Authorization", format!("Bearer {}", secret.token()));
        return McpServer::Http(McpServerHttp::new(mcp::SERVER_NAME, tools.url.clone()).headers(vec![auth]));
    }
    let ahpd = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("ahpd"));
    McpServer::Stdio(
        McpServerStdio::new(mcp::SERVER_NAME, ahpd)
            .args(vec!["mcp-bridge".to_owned(), "--url".to_owned(), tools.url.clone()])
            .env(vec![EnvVariable::new(mcp::BRIDGE_TOKEN_ENV, secret.token())]),
    )
}

/// Spawns the agent and opens the connection (no request sent yet).
async fn connect(chat: Uri, agent: Arc<AgentConfig>, written: Written, events: EventSink, cwd: &Path) -> Result<Connected, String> {
    let terminals = Terminals::new(chat.clone(), cwd, events)?;
    let confined = Confined::new(chat, cwd, written)?;
    let spawned = process::spawn(&agent.name, &agent.program, &agent.args, cwd)?;
    let (tx, rx) = mpsc::unbounded_channel();
    let (cx_tx, cx_rx) = oneshot::channel();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let transport = Lines::new(process::line_sink(spawned.stdin), process::line_stream(spawned.stdout));
    let (updates, permissions, ended) = (tx.clone(), tx.clone(), tx.clone());
    let (reads, writes) = (confined.clone(), confined);
    let (t_create, t_output, t_wait, t_kill, t_release) =
        (terminals.clone(), terminals.clone(), terminals.clone(), terminals.clone(), terminals.clone());
    tokio::spawn(async move {
        let result = Client
            .v1()
            .name("ahpd")
            .on_receive_notification(
                async move |n: SessionNotification, _cx| {
                    let _ = updates.send(FromAgent::Update(n));
                    Ok(())
                },
                agent_client_protocol::on_receive_notification!(),
            )
            .on_receive_request(
                async move |r: RequestPermissionRequest, responder, _cx| {
                    match permissions.send(FromAgent::Permission(r, responder)) {
                        Ok(()) => Ok(()),
                        Err(mpsc::error::SendError(FromAgent::Permission(_, responder))) => {
                            responder.respond(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled))
                        }
                        Err(_) => Ok(()),
                    }
                },
                agent_client_protocol::on_receive_request!(),
            )
            .on_receive_request(
                async move |r: ReadTextFileRequest, responder, _cx| match reads.read(&r.path, r.line, r.limit).await {
                    Ok(content) => responder.respond(ReadTextFileResponse::new(content)),
                    Err(e) => responder.respond_with_error(fs_error(e)),
                },
                agent_client_protocol::on_receive_request!(),
            )
            .on_receive_request(
                async move |r: WriteTextFileRequest, responder, _cx| match writes.write(&r.path, &r.content).await {
                    Ok(()) => responder.respond(WriteTextFileResponse::new()),
                    Err(e) => responder.respond_with_error(fs_error(e)),
                },
                agent_client_protocol::on_receive_request!(),
            )
            .on_receive_request(
                async move |r: CreateTerminalRequest, responder, _cx| match t_create.create(&r) {
                    Ok(id) => responder.respond(CreateTerminalResponse::new(id)),
                    Err(m) => responder.respond_with_error(refused(m)),
                },
                agent_client_protocol::on_receive_request!(),
            )
            .on_receive_request(
                async move |r: TerminalOutputRequest, responder, _cx| match t_output.output(&r.terminal_id.0) {
                    Ok(out) => responder.respond(out),
                    Err(m) => responder.respond_with_error(refused(m)),
                },
                agent_client_protocol::on_receive_request!(),
            )
            .on_receive_request(
                // Waiting may take as long as the command runs: not on the
                // connection's own task.
                async move |r: WaitForTerminalExitRequest, responder, cx| {
                    let terminals = t_wait.clone();
                    cx.spawn(async move {
                        match terminals.wait_for_exit(&r.terminal_id.0).await {
                            Ok(status) => responder.respond(WaitForTerminalExitResponse::new(status)),
                            Err(m) => responder.respond_with_error(refused(m)),
                        }
                    })
                },
                agent_client_protocol::on_receive_request!(),
            )
            .on_receive_request(
                async move |r: KillTerminalRequest, responder, _cx| match t_kill.kill(&r.terminal_id.0) {
                    Ok(()) => responder.respond(KillTerminalResponse::new()),
                    Err(m) => responder.respond_with_error(refused(m)),
                },
                agent_client_protocol::on_receive_request!(),
            )
            .on_receive_request(
                async move |r: ReleaseTerminalRequest, responder, _cx| match t_release.release(&r.terminal_id.0) {
                    Ok(()) => responder.respond(ReleaseTerminalResponse::new()),
                    Err(m) => responder.respond_with_error(refused(m)),
                },
                agent_client_protocol::on_receive_request!(),
            )
            .connect_with(transport, async move |cx: ConnectionTo<Agent>| {
                let _ = cx_tx.send(cx.clone());
                tokio::select! {
                    _ = stop_rx => {}
                    () = cx.incoming_closed() => {}
                }
                Ok(())
            })
            .await;
        let why = match result {
            Ok(()) => "the agent closed its output".to_owned(),
            Err(e) => e.to_string(),
        };
        let _ = ended.send(FromAgent::Ended(why));
    });
    let mut child = spawned.child;
    let mut group = spawned.group;
    match cx_rx.await {
        Ok(cx) => Ok(Connected { cx, child, group, terminals, stderr: spawned.stderr, stop: stop_tx, tx, rx }),
        Err(_) => {
            let _ = child.start_kill();
            group.kill();
            terminals.kill_all();
            Err(format!("the connection to {:?} ended before it started; stderr: {}", agent.program, spawned.stderr.after_exit(Duration::from_millis(STOP_GRACE_MS)).await))
        }
    }
}


async fn next_from_agent(live: &mut Option<Live>) -> Option<FromAgent> {
    match live {
        Some(l) => l.rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Sends one start-up request, bounded by `timeout`.
async fn request<R>(cx: &ConnectionTo<Agent>, req: R, timeout: Duration, what: &str) -> Result<R::Response, String>
where
    R: JsonRpcRequest,
    R::Response: Send + 'static,
{
    match tokio::time::timeout(timeout, cx.send_request(req).block_task()).await {
        Err(_) => Err(format!("the agent did not answer {what} within {} ms", timeout.as_millis())),
        Ok(Err(e)) => Err(format!("{what} failed: {e}")),
        Ok(Ok(r)) => Ok(r),
    }
}

/// Waits up to `grace` for the process to exit, then kills it; its exit
/// status in words.
async fn end_process(child: &mut Child, grace: Duration) -> String {
    let status = match tokio::time::timeout(grace, child.wait()).await {
        Ok(Ok(status)) => Some(status),
        _ => {
            let _ = child.start_kill();
            tokio::time::timeout(Duration::from_secs(2), child.wait()).await.ok().and_then(Result::ok)
        }
    };
    match status {
        Some(s) => s.to_string(),
        None => "unknown (the process did not exit)".to_owned(),
    }
}

fn describe(agent: &str, what: &str, status: &str, stderr: &str) -> String {
    let stderr = if stderr.is_empty() { "(empty)" } else { stderr };
    format!("{agent}: {what} (process {status}); stderr: {stderr}")
}

/// Answers every waiting permission request `cancelled`.
fn cancel_waiting(live: &mut Live) {
    for (_, (_, responder)) in live.waiting.drain() {
        let _ = responder.respond(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled));
    }
}

/// The option answering a confirmation: allow-once else allow-always when
/// approved, reject-once else reject-always when denied; `cancelled` when
/// the agent offered none of those.
fn choose(options: &[PermissionOption], approved: bool) -> RequestPermissionOutcome {
    let kinds = if approved {
        [PermissionOptionKind::AllowOnce, PermissionOptionKind::AllowAlways]
    } else {
        [PermissionOptionKind::RejectOnce, PermissionOptionKind::RejectAlways]
    };
    kinds
        .iter()
        .find_map(|k| options.iter().find(|o| o.kind == *k))
        .map(|o| RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(o.option_id.clone())))
        .unwrap_or(RequestPermissionOutcome::Cancelled)
}

/// The ACP error a file request that failed is answered with (see
/// [`FsError`]); the message rides in `data`.
fn fs_error(e: FsError) -> agent_client_protocol::Error {
    let data = serde_json::Value::String(e.message().to_owned());
    match e {
        FsError::NotFound(_) => {
            let missing: agent_client_protocol::Error = agent_client_protocol::v1::schema::Error::resource_not_found(None).into();
            missing.data(data)
        }
        FsError::Refused(_) => agent_client_protocol::Error::invalid_params().data(data),
        FsError::Failed(_) => agent_client_protocol::Error::internal_error().data(data),
    }
}

fn refused(message: String) -> agent_client_protocol::Error {
    agent_client_protocol::Error::invalid_params().data(serde_json::Value::String(message))
}

fn emit(events: &EventSink, chat: &Uri, action: StateAction) {
    events.input(Input::Backend { chat: chat.clone(), event: BackendEvent::Action(action) });
}

fn failed(message: String) -> Outcome {
    Outcome::Failed { message }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confirmations_pick_the_narrowest_option() {
        let options = vec![
            PermissionOption::new("always", "Always", PermissionOptionKind::AllowAlways),
            PermissionOption::new("once", "Once", PermissionOptionKind::AllowOnce),
            PermissionOption::new("no", "No", PermissionOptionKind::RejectOnce),
        ];
        let id = |o: RequestPermissionOutcome| match o {
            RequestPermissionOutcome::Selected(s) => s.option_id.0.to_string(),
            _ => "cancelled".to_owned(),
        };
        assert_eq!(id(choose(&options, true)), "once");
        assert_eq!(id(choose(&options, false)), "no");
        assert_eq!(id(choose(&options[..2], false)), "cancelled");
    }
}
